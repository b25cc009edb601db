"""GatewaySpec: a Gateway's args validated (every problem at once, with property paths) and every default applied:
what the gateway's build functions read (a components.k8s.gateway.envoy.config.GatewayView)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from components.k8s.defaults import (
    DEFAULT_GATEWAY_NAMESPACE,
    DEFAULT_KUBERNETES_VERSION,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MONITORING_NAMESPACE,
    DEFAULT_TRY_IDLE_SECONDS,
)
from components.k8s.engines import ENGINE_NAMES
from components.k8s.gateway.args import GatewayArgs, GatewayModelArgs, GatewayTenantArgs, TokenBudgetArgs
from components.k8s.gateway.envoy.affinity import DEFAULT_HASH_BALANCE_FACTOR
from components.k8s.gateway.envoy.config import OPENAI_APIS
from components.k8s.settings import (
    DEFAULT_ROUTING_MARGIN_PERCENT,
    ROUTING_POLICIES,
    STORE_FAILURE_MODES,
    BudgetService,
    CircuitBreakers,
    GatewayAuth,
    GatewaySettings,
    HealthCheck,
    JwtIssuer,
    Model,
    ModelSlo,
    OutlierDetection,
    RateLimit,
    Replicas,
    Retries,
    Tenant,
    TokenBudget,
    Tracing,
    Variant,
    default_of,
)
from components.validation import Problems, check_shape

__all__ = [
    "DEFAULT_TRACE_SAMPLE_RATIO",
    "ENGINES",
    "PRIORITIES",
    "SERVICE_TYPES",
    "GatewaySpec",
    "gateway_spec",
]

DEFAULT_TRACE_SAMPLE_RATIO = 1.0  # every request the gateway sees starts (or continues) a trace
ENGINES = ENGINE_NAMES  # the engine registry's (components.k8s.engines)
PRIORITIES = ("interactive", "batch")
SERVICE_TYPES = ("LoadBalancer", "NodePort", "ClusterIP")
Engine = str  # one of ENGINES
Priority = Literal["interactive", "batch"]


@dataclass(frozen=True)
class GatewaySpec:
    """GatewayArgs with every default applied: what the build functions read (a GatewayView)."""

    models: Mapping[str, Model]
    tenants: Mapping[str, Tenant]
    gateway: GatewaySettings
    observability: Tracing
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    is_aws: bool = False

    def tenant_of(self, model: Model) -> Tenant:
        return self.tenants[model.tenant]

    def variants_of(self, workload: str) -> list[Model]:
        """The workload's variants, cheapest first (ties: faster first, then by name); empty without variants."""
        vs = [m for m in self.models.values() if m.workload == workload and m.variant is not None]
        return sorted(vs, key=lambda m: (_cost(m), m.slo.e2e_seconds, m.name))

    def routing_policy(self, workload: str) -> str:
        return self.gateway.routing.get(workload, ROUTING_POLICIES[0])

    def routing_margin_percent(self, workload: str) -> float:
        return self.gateway.routing_margins.get(workload, DEFAULT_ROUTING_MARGIN_PERCENT)


def _cost(model: Model) -> float:
    assert model.variant is not None and model.variant.cost_per_request is not None  # gateway_spec sets both
    return model.variant.cost_per_request


def _choice(problems: Problems, path: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        problems.add(path, f"{value!r} is not allowed; choose one of: {', '.join(allowed)}")


def _model(key: str, m: GatewayModelArgs) -> Model:
    timeout = m.get("timeout_seconds", default_of(Model, "timeout_seconds"))
    v = m.get("variant")
    # The gateway reads no served model id, pool or weights URI: those stay empty here.
    return Model(name=key, engine=cast(Engine, m["engine"]), model="", tenant=m["tenant"], pool="", uri="",
                 workload=m.get("workload", key), priority=cast(Priority, m.get("priority", "interactive")),
                 task=cast(Any, m.get("task", "generate")),
                 timeout_seconds=timeout,
                 slo=ModelSlo(e2e_seconds=m.get("e2e_slo_seconds", default_of(ModelSlo, "e2e_seconds"))),
                 max_request_bytes=m.get("max_request_bytes", DEFAULT_MAX_REQUEST_BYTES),
                 try_idle_timeout_seconds=m.get("try_idle_timeout_seconds", min(timeout, DEFAULT_TRY_IDLE_SECONDS)),
                 session_affinity_balance_factor=m.get(
                     "session_affinity_balance_factor",
                     DEFAULT_HASH_BALANCE_FACTOR if m.get("task", "generate") == "generate" else None),
                 variant=None if v is None else Variant(cost_per_request=v["cost_per_request"],
                                                        max_requests=v.get("max_requests")),
                 replicas=Replicas(min=1, max=m.get("max_replicas", 1)),
                 spans_nodes=m.get("multi_node", False))


def _tenant(key: str, t: GatewayTenantArgs) -> Tenant:
    rl = t.get("rate_limit") or {}
    rps, burst = rl.get("requests_per_second", default_of(RateLimit, "requests_per_second")), \
        rl.get("burst", default_of(RateLimit, "burst"))
    return Tenant(name=key, namespace=t.get("namespace", key), share_with=tuple(t.get("share_with") or ()),
                  token_budget=_token_budget(t["token_budget"]) if "token_budget" in t else None,
                  rate_limit=RateLimit(requests_per_second=rps, burst=burst,
                                       batch_requests_per_second=rl.get("batch_requests_per_second", rps),
                                       batch_burst=rl.get("batch_burst", burst)))


def _token_budget(b: TokenBudgetArgs) -> TokenBudget:
    return TokenBudget(**b)


def _settings(args: GatewayArgs) -> GatewaySettings:
    """GatewaySettings from the args; what they leave out keeps the dataclasses' documented defaults."""
    plain: dict[str, Any] = {k: args[k] for k in (
                                 "service_type", "min_replicas", "max_replicas",
                                  "connect_timeout_seconds", "request_headers_timeout_seconds",
                                  "request_timeout_seconds", "stream_idle_timeout_seconds", "idle_timeout_seconds")
             if k in args}
    auth = args.get("auth") or {}
    issuers = tuple(JwtIssuer(issuer=i["issuer"], jwks_uri=i["jwks_uri"], audiences=tuple(i.get("audiences") or ()),
                              tenants=tuple(i["tenants"]) if "tenants" in i else None)
                    for i in auth.get("issuers") or ())
    auth_plain: dict[str, Any] = {k: auth[k] for k in ("tenant_claim", "max_token_lifetime_seconds") if k in auth}
    routing = args.get("routing") or {}
    return GatewaySettings(
        namespace=args.get("namespace", DEFAULT_GATEWAY_NAMESPACE), **plain,
        retries=Retries(**args.get("retries", {})),
        outlier_detection=OutlierDetection(**args.get("outlier_detection", {})),
        circuit_breakers=CircuitBreakers(**args.get("circuit_breakers", {})),
        health_check=HealthCheck(**args.get("health_check", {})),
        auth=GatewayAuth(issuers=issuers, **auth_plain),
        routing={w: r["policy"] for w, r in routing.items() if "policy" in r},
        routing_margins={w: r["margin_percent"] for w, r in routing.items() if "margin_percent" in r},
        token_budgets={w: _token_budget(b) for w, b in (args.get("token_budgets") or {}).items()},
        budget_service=BudgetService(**args["budget_service"]) if "budget_service" in args else BudgetService())


def _problems(problems: Problems, args: GatewayArgs) -> None:
    tenants, models = args["tenants"], args["models"]
    for key, m in models.items():
        path = f"models.{key}"
        if m["tenant"] not in tenants:
            problems.add(f"{path}.tenant", f"{m['tenant']!r} is not a tenant; tenants: {', '.join(tenants)}")
        _choice(problems, f"{path}.engine", m["engine"], ENGINES)
        if m["engine"] in OPENAI_APIS:
            _choice(problems, f"{path}.task", m.get("task", "generate"), tuple(OPENAI_APIS[m["engine"]]))
        _choice(problems, f"{path}.priority", m.get("priority", "interactive"), PRIORITIES)
        factor = m.get("session_affinity_balance_factor")
        if factor is not None and factor < 100:
            problems.add(f"{path}.sessionAffinityBalanceFactor", f"{factor} must be at least 100 (percent of the "
                                                                  "average load), or None for no affinity")
        for field_ in ("timeout_seconds", "e2e_slo_seconds", "try_idle_timeout_seconds"):
            if field_ in m and m[field_] <= 0:
                camel = field_.split("_")[0] + "".join(w.title() for w in field_.split("_")[1:])
                problems.add(f"{path}.{camel}", f"{m[field_]} must be more than 0")
    for key, t in tenants.items():
        for i, other in enumerate(t.get("share_with") or ()):
            if other not in tenants:
                problems.add(f"tenants.{key}.shareWith[{i}]",
                             f"{other!r} is not a tenant; tenants: {', '.join(tenants)}")
    _choice(problems, "serviceType", args.get("service_type", "LoadBalancer"), SERVICE_TYPES)
    lo = args.get("min_replicas", default_of(GatewaySettings, "min_replicas"))
    hi = args.get("max_replicas", default_of(GatewaySettings, "max_replicas"))
    if not 1 <= lo <= hi:
        problems.add("minReplicas", f"{lo} must be at least 1 and at most maxReplicas ({hi})")
    workloads = {m.get("workload", k) for k, m in models.items() if "variant" in m}
    for workload, r in (args.get("routing") or {}).items():
        if workload not in workloads:
            problems.add(f"routing.{workload}", f"{workload!r} is not a workload with variants; "
                                                f"with variants: {', '.join(sorted(workloads)) or 'none'}")
        if "policy" in r:
            _choice(problems, f"routing.{workload}.policy", r["policy"], ROUTING_POLICIES)
    budgets = [(f"tenants.{k}.tokenBudget", t["token_budget"]) for k, t in tenants.items() if "token_budget" in t]
    budgets += [(f"tokenBudgets.{w}", b) for w, b in (args.get("token_budgets") or {}).items()]
    for path, b in budgets:
        if not {"per_minute", "per_hour", "per_day"} & set(b):
            problems.add(path, "limits no window: give at least one of perMinute, perHour, perDay")
        if "on_store_failure" in b:
            _choice(problems, f"{path}.onStoreFailure", b["on_store_failure"], STORE_FAILURE_MODES)
    all_workloads = {m.get("workload", k) for k, m in models.items()}
    for w in args.get("token_budgets") or {}:
        if w not in all_workloads:
            problems.add(f"tokenBudgets.{w}", f"{w!r} is not a workload; workloads: {', '.join(sorted(all_workloads))}")
    service = args.get("budget_service")
    if budgets and not (service and service.get("image")):
        problems.add("budgetService.image", "is required with token budgets: the budget service's image, built from "
                                            "components/k8s/gateway/budgets/Dockerfile")
    for i, issuer in enumerate((args.get("auth") or {}).get("issuers") or ()):
        if not issuer["jwks_uri"].startswith("https://"):
            problems.add(f"auth.issuers[{i}].jwksUri", f"{issuer['jwks_uri']!r} must be an https:// URL")
        for j, tenant in enumerate(issuer.get("tenants") or ()):
            if tenant not in tenants:
                problems.add(f"auth.issuers[{i}].tenants[{j}]", f"{tenant!r} is not a tenant; tenants: "
                                                                f"{', '.join(tenants)}")


def gateway_spec(name: str, args: GatewayArgs) -> GatewaySpec:
    """Validate `args` and resolve every default; raises pulumi.InputPropertiesError with property paths."""
    check_shape("Gateway", name, args, GatewayArgs)  # typos, unknown keys, wrong types: before any read
    problems = Problems("Gateway", name)
    _problems(problems, args)
    problems.raise_any()
    return GatewaySpec(
        models={k: _model(k, m) for k, m in args["models"].items()},
        tenants={k: _tenant(k, t) for k, t in args["tenants"].items()},
        gateway=_settings(args),
        observability=Tracing(namespace=args.get("monitoring_namespace", DEFAULT_MONITORING_NAMESPACE),
                                     trace_sample_ratio=args.get("trace_sample_ratio", DEFAULT_TRACE_SAMPLE_RATIO)),
        kubernetes_version=args.get("kubernetes_version", DEFAULT_KUBERNETES_VERSION),
        is_aws=args.get("aws_internal_load_balancer", False))
