"""Gateway: the Envoy inference gateway in front of every model (config: components.k8s.envoy_config).

    Namespace (istio-injection) -> ServiceAccount -> ConfigMap (envoy.yaml) -> Deployment -> Service
    -> metrics Service -> HorizontalPodAutoscaler -> PodDisruptionBudget -> ServiceMonitor (/stats/prometheus)
    -> NetworkPolicies (default deny + allows) -> AuthorizationPolicies (allow-nothing + Prometheus)
    -> DestinationRule (in-mesh clients reach the listener in plaintext)
    -> per model: VirtualService + DestinationRule (the sidecar adds no retries; the gateway's connect timeout)

The namespace has the tenants' posture. NetworkPolicies deny all ingress and egress, then allow: clients
(the load balancer) to the listener port, Prometheus to the stats port and the sidecar's metrics, the
gateway to model servers in the tenant namespaces, DNS, istiod, the Collector (OTLP), and the token
issuers' JWKS ports. An empty AuthorizationPolicy denies everything the sidecar receives; Prometheus's
mesh identity is then allowed on the stats port. The listener port bypasses the sidecar (see below), so
caller authorization there is the gateway's own (JWT, per-model tenants).

The gateway's pods join the mesh for their outbound calls only: requests to model servers and spans to
the Collector leave through the sidecar with the gateway's mesh identity (what the tenants'
AuthorizationPolicies admit), while client traffic from the load balancer reaches Envoy directly
(the listener port is excluded from inbound capture). On AWS a LoadBalancer Service is an internal
NLB, made by the in-tree service controller (the kit installs no AWS Load Balancer Controller), with
the nodes as targets. Prometheus scrapes the stats port through a headless metrics Service, over
mTLS, so the load balancer carries client traffic only.

Clients inside the mesh (agents with a sidecar) call `http://aifactory-gateway.<namespace>.svc.cluster.local`
(`service_url`; `aifactory-gateway.<namespace>` also matches, the bare name only from the gateway's namespace).
Their sidecar routes that port by Host (Service port `appProtocol: http`), and under the mesh-wide STRICT mode it
would originate mTLS to any pod carrying the injected `security.istio.io/tlsMode: istio` label, the gateway's
included; the listener port is not captured, so Envoy would read a TLS handshake as HTTP. The DestinationRule
turns TLS off for the Service's port: the caller's sidecar sends plaintext HTTP, as the load balancer does, and
the gateway authorises the caller by its token (istio/istio@1.28.3 pilot/pkg/networking/core/cluster_tls.go
buildUpstreamTLSSettings: a DestinationRule's DISABLE wins over auto mTLS; pilot/pkg/model/push_context.go
BestEffortInferServiceMTLSMode reads only namespace- and mesh-wide PeerAuthentication).

Gateway takes its own `args` (GatewayArgs: the models it routes to, their tenants, its settings), so a platform
team can run it without the kit's stack config; infra.component_args maps PlatformConfig to them.
"""

# No `from __future__ import annotations`: TypedDict reads NotRequired (and the package analyzer the types) from
# evaluated annotations.
import dataclasses
import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict, cast

import pulumi
import pulumi_kubernetes as k8s

from components.aws.errors import Problems, check_shape
from components.k8s import naming, security
from components.k8s.defaults import (
    DEFAULT_GATEWAY_NAMESPACE,
    DEFAULT_KUBERNETES_VERSION,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MONITORING_NAMESPACE,
    DEFAULT_TRY_IDLE_SECONDS,
)
from components.k8s.engines import ENGINE_NAMES
from components.k8s.envoy_affinity import DEFAULT_HASH_BALANCE_FACTOR
from components.k8s.envoy_base import model_host
from components.k8s.envoy_config import GATEWAY_MEMORY_LIMIT_GIB, OPENAI_APIS, GatewayView, jwks_endpoint, render
from components.k8s.mesh import MESH_SCRAPE_TLS, engine_traffic_objects
from components.k8s.namespaces import create_namespace, namespace_labels
from components.k8s.serving import MONITORING_API_VERSION, register_object
from components.k8s.values import (
    DEFAULT_ROUTING_MARGIN_PERCENT,
    ROUTING_POLICIES,
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
    Tracing,
    Variant,
)

__all__ = [
    "TYPE",
    "DEFAULT_GATEWAY_NAMESPACE",
    "DEFAULT_KUBERNETES_VERSION",
    "DEFAULT_MONITORING_NAMESPACE",
    "DEFAULT_TRACE_SAMPLE_RATIO",
    "ENGINES",
    "PRIORITIES",
    "SERVICE_TYPES",
    "GatewayArgs",
    "GatewayModelArgs",
    "GatewayVariantArgs",
    "GatewayTenantArgs",
    "RateLimitArgs",
    "RetriesArgs",
    "OutlierDetectionArgs",
    "CircuitBreakersArgs",
    "HealthCheckArgs",
    "JwtIssuerArgs",
    "GatewayAuthArgs",
    "RoutingArgs",
    "GatewaySpec",
    "gateway_spec",
    "DEFAULT_ENVOY_IMAGE",
    "CONFIG_MAP",
    "CONFIG_HASH_ANNOTATION",
    "DEFAULT_CPU_TARGET_PERCENT",
    "SERVICE_PORT",
    "METRICS_SERVICE",
    "AWS_LB_ANNOTATIONS",
    "gateway_labels",
    "config_map",
    "deployment",
    "service",
    "metrics_service",
    "autoscaler",
    "disruption_budget",
    "service_monitor",
    "service_account",
    "network_policies",
    "authorization_policies",
    "service_host",
    "service_url",
    "destination_rule",
    "gateway_objects",
    "Gateway",
]

TYPE = "aifactory:k8s:Gateway"  # the type token of the kit's existing stacks (part of every child's URN)
DEFAULT_TRACE_SAMPLE_RATIO = 1.0  # every request the gateway sees starts (or continues) a trace
ENGINES = ENGINE_NAMES  # the engine registry's (components.k8s.engines)
PRIORITIES = ("interactive", "batch")
SERVICE_TYPES = ("LoadBalancer", "NodePort", "ClusterIP")
Engine = str  # one of ENGINES
Priority = Literal["interactive", "batch"]


class GatewayVariantArgs(TypedDict):
    """The model is one of its workload's variants: the gateway routes each request to the cheapest variant whose
    expected latency (its e2eSloSeconds plus the workload's margin) fits the caller's remaining budget."""

    cost_per_request: float
    """What one request to this variant costs ($): the gateway orders the workload's variants by it."""
    max_requests: NotRequired[int]
    """Requests one gateway replica keeps in flight to the variant before further ones overflow to the next
    variant. Default: circuitBreakers.maxRequests."""


class GatewayModelArgs(TypedDict):
    """A model the gateway routes to: its Service `<name>.<tenant namespace>` on port 8000."""

    tenant: str
    """The tenant (a key of `tenants`) whose namespace runs the model and whose callers may call it."""
    engine: str
    """vllm or triton: which OpenAI APIs the route admits and which health path Envoy checks."""
    task: NotRequired[str]
    """generate, embed or rerank (vllm only): which of the engine's API paths the route admits. Default: generate."""
    workload: NotRequired[str]
    """The API model name callers ask for; models sharing one are routed by x-priority or as variants.
    Default: the model's name."""
    priority: NotRequired[str]
    """interactive or batch. Default: interactive."""
    timeout_seconds: NotRequired[float]
    """The gateway's timeout for one request to the model. Default: 60."""
    e2e_slo_seconds: NotRequired[float]
    """The model's p95 end-to-end request latency: a variant's expected latency. Default: 20."""
    max_request_bytes: NotRequired[int]
    """Largest request body the gateway accepts for the model (413 past it). Default: 8388608 (8 MiB)."""
    try_idle_timeout_seconds: NotRequired[float]
    """Longest silence of a replica before the gateway retries on another one. Default: min(timeoutSeconds, 30)."""
    variant: NotRequired[GatewayVariantArgs]
    """Default: none (the workload's only model of its priority)."""
    max_replicas: NotRequired[int]
    """Most replicas: the gateway reaches replica i (its pod `<name>-<i>`) through a hop of its own. Default: 1."""
    multi_node: NotRequired[bool]
    """A LeaderWorkerSet `<name>-lws`: replica i is its group i's leader. Default: false."""
    session_affinity_balance_factor: NotRequired[int | None]
    """Session affinity: requests with a session key (x-aifactory-session, else the body's prompt_cache_key) go to
    the replica that served the session before, by Maglev hashing; no replica takes more than this percentage of
    the average load (at least 100). None: least-request. Default: 125 for task generate, None otherwise."""


class RateLimitArgs(TypedDict):
    """A tenant's token buckets at the gateway."""

    requests_per_second: NotRequired[int]
    """Default: 50."""
    burst: NotRequired[int]
    """Default: 100."""
    batch_requests_per_second: NotRequired[int]
    """Batch traffic (x-priority: batch) has a bucket of its own. Default: requestsPerSecond."""
    batch_burst: NotRequired[int]
    """Default: burst."""


class GatewayTenantArgs(TypedDict):
    """A tenant whose callers the gateway admits (the token's tenant claim names it)."""

    namespace: NotRequired[str]
    """The tenant's namespace (where its models run). Default: the tenant's name."""
    rate_limit: NotRequired[RateLimitArgs]
    """Default: 50 requests/s, burst 100, the same again for batch traffic."""
    share_with: NotRequired[list[str]]
    """Tenants whose callers may call this tenant's models too. Default: none."""


class RetriesArgs(TypedDict):
    """Retries of a failed try (connect failure, reset, 500/502/503/504, a try idle too long)."""

    attempts: NotRequired[int]
    """Default: 2."""
    budget_percent: NotRequired[float]
    """Retries may add at most this share to active requests. Default: 20."""


class OutlierDetectionArgs(TypedDict):
    """Ejection of replicas that keep failing."""

    consecutive_5xx: NotRequired[int]
    """Default: 3."""
    interval_seconds: NotRequired[float]
    """Default: 2."""
    base_ejection_seconds: NotRequired[float]
    """Default: 30."""
    max_ejection_percent: NotRequired[int]
    """Default: 67."""
    panic_threshold_percent: NotRequired[float]
    """Below this share of healthy replicas Envoy balances over all of them. Default: 30."""


class CircuitBreakersArgs(TypedDict):
    """Limits per model cluster and gateway replica."""

    max_connections: NotRequired[int]
    """Default: 4096."""
    max_pending_requests: NotRequired[int]
    """Default: 2048."""
    max_requests: NotRequired[int]
    """Default: 4096."""


class HealthCheckArgs(TypedDict):
    """Envoy's active health check of each replica."""

    interval_seconds: NotRequired[float]
    """Default: 5."""
    timeout_seconds: NotRequired[float]
    """Default: 2."""
    unhealthy_threshold: NotRequired[int]
    """Default: 2."""
    healthy_threshold: NotRequired[int]
    """Default: 2."""


class JwtIssuerArgs(TypedDict):
    """An identity provider whose tokens the gateway accepts."""

    issuer: str
    """The tokens' iss, e.g. https://sso.example.com/realms/aifactory."""
    jwks_uri: str
    """Where its signing keys are published (https://...)."""
    audiences: NotRequired[list[str]]
    """Default: none (any aud)."""
    tenants: NotRequired[list[str]]
    """The tenants this issuer may name in its tokens. Default: any tenant."""


class GatewayAuthArgs(TypedDict):
    """Who may call the gateway."""

    issuers: NotRequired[list[JwtIssuerArgs]]
    """Default: none: every model request gets 401."""
    tenant_claim: NotRequired[str]
    """The JWT claim naming the caller's tenant. Default: tenant."""
    max_token_lifetime_seconds: NotRequired[int]
    """A token without exp, or whose exp is further away than this, gets 401. Default: 86400 (24 h)."""


class RoutingArgs(TypedDict):
    """How the gateway chooses among one workload's variants."""

    policy: NotRequired[str]
    """cost-within-deadline, fastest or cheapest. Default: cost-within-deadline."""
    margin_percent: NotRequired[float]
    """How much more than a variant's e2eSloSeconds a budget must hold for the variant to fit it. Default: 25."""


class GatewayArgs(TypedDict):
    """Arguments of a Gateway."""

    models: dict[str, GatewayModelArgs]
    """The models the gateway routes to, by name (the Service name in the tenant's namespace)."""
    tenants: dict[str, GatewayTenantArgs]
    """The tenants whose callers it admits, by name."""
    namespace: NotRequired[str]
    """The gateway's namespace (created with Pod Security restricted and Istio injection).
    Default: aifactory-gateway."""
    kubernetes_version: NotRequired[str]
    """The cluster's Kubernetes minor version (the Pod Security labels' version). Default: 1.34."""
    monitoring_namespace: NotRequired[str]
    """Where Prometheus (which scrapes the gateway) and the OpenTelemetry Collector run. Default: monitoring."""
    trace_sample_ratio: NotRequired[float]
    """Share of requests the gateway traces. Default: 1.0."""
    aws_internal_load_balancer: NotRequired[bool]
    """A LoadBalancer Service becomes an internal AWS NLB (in-tree service controller). Default: false."""
    service_type: NotRequired[str]
    """LoadBalancer, NodePort or ClusterIP. Default: LoadBalancer."""
    min_replicas: NotRequired[int]
    """Default: 2."""
    max_replicas: NotRequired[int]
    """Default: 6."""
    connect_timeout_seconds: NotRequired[float]
    """Default: 2."""
    request_headers_timeout_seconds: NotRequired[float]
    """Time to receive a request's headers (408 past it). Default: 10."""
    request_timeout_seconds: NotRequired[float]
    """Time to receive a whole request, body included (408). Default: 60."""
    stream_idle_timeout_seconds: NotRequired[float]
    """Default: 30 (routes to a model use its timeoutSeconds instead)."""
    idle_timeout_seconds: NotRequired[float]
    """Before an idle client connection is closed. Default: 300."""
    retries: NotRequired[RetriesArgs]
    """Default: 2 attempts within a 20% budget."""
    outlier_detection: NotRequired[OutlierDetectionArgs]
    """Default: eject after 3 consecutive 5xx."""
    circuit_breakers: NotRequired[CircuitBreakersArgs]
    """Default: 4096 connections, 2048 pending, 4096 requests."""
    health_check: NotRequired[HealthCheckArgs]
    """Default: every 5 s, 2 s timeout, 2 failures out, 2 passes back."""
    auth: NotRequired[GatewayAuthArgs]
    """Default: no issuer (every model request gets 401)."""
    routing: NotRequired[dict[str, RoutingArgs]]
    """By workload with variants. Default: cost-within-deadline with a 25% margin."""


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


def _default(cls: type, name: str) -> Any:
    """A field's default in the values' dataclasses (the one place it is written)."""
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


def _choice(problems: Problems, path: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        problems.add(path, f"{value!r} is not allowed; choose one of: {', '.join(allowed)}")


def _model(key: str, m: GatewayModelArgs) -> Model:
    timeout = m.get("timeout_seconds", _default(Model, "timeout_seconds"))
    v = m.get("variant")
    # The gateway reads no served model id, pool or weights URI: those stay empty here.
    return Model(name=key, engine=cast(Engine, m["engine"]), model="", tenant=m["tenant"], pool="", uri="",
                 workload=m.get("workload", key), priority=cast(Priority, m.get("priority", "interactive")),
                 task=cast(Any, m.get("task", "generate")),
                 timeout_seconds=timeout,
                 slo=ModelSlo(e2e_seconds=m.get("e2e_slo_seconds", _default(ModelSlo, "e2e_seconds"))),
                 max_request_bytes=m.get("max_request_bytes", DEFAULT_MAX_REQUEST_BYTES),
                 try_idle_timeout_seconds=m.get("try_idle_timeout_seconds", min(timeout, DEFAULT_TRY_IDLE_SECONDS)),
                 session_affinity_balance_factor=m.get(
                     "session_affinity_balance_factor",
                     DEFAULT_HASH_BALANCE_FACTOR if m.get("task", "generate") == "generate" else None),
                 variant=None if v is None else Variant(cost_per_request=v["cost_per_request"],
                                                        max_requests=v.get("max_requests")),
                 replicas=Replicas(min=1, max=m.get("max_replicas", 1)),  # the hops (components.k8s.envoy_hops)
                 gpus_per_replica=2 if m.get("multi_node") else 1, gpus_per_node_hint=1)  # multi_node: LWS names


def _tenant(key: str, t: GatewayTenantArgs) -> Tenant:
    rl = t.get("rate_limit") or {}
    rps, burst = rl.get("requests_per_second", _default(RateLimit, "requests_per_second")), \
        rl.get("burst", _default(RateLimit, "burst"))
    return Tenant(name=key, namespace=t.get("namespace", key), share_with=tuple(t.get("share_with") or ()),
                  rate_limit=RateLimit(requests_per_second=rps, burst=burst,
                                       batch_requests_per_second=rl.get("batch_requests_per_second", rps),
                                       batch_burst=rl.get("batch_burst", burst)))


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
        routing_margins={w: r["margin_percent"] for w, r in routing.items() if "margin_percent" in r})


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
    lo = args.get("min_replicas", _default(GatewaySettings, "min_replicas"))
    hi = args.get("max_replicas", _default(GatewaySettings, "max_replicas"))
    if not 1 <= lo <= hi:
        problems.add("minReplicas", f"{lo} must be at least 1 and at most maxReplicas ({hi})")
    workloads = {m.get("workload", k) for k, m in models.items() if "variant" in m}
    for workload, r in (args.get("routing") or {}).items():
        if workload not in workloads:
            problems.add(f"routing.{workload}", f"{workload!r} is not a workload with variants; "
                                                f"with variants: {', '.join(sorted(workloads)) or 'none'}")
        if "policy" in r:
            _choice(problems, f"routing.{workload}.policy", r["policy"], ROUTING_POLICIES)
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


DEFAULT_ENVOY_IMAGE = "envoyproxy/envoy:v1.40.0"  # the version the tests validate the config with
CONFIG_MAP = "envoy-config"
CONFIG_HASH_ANNOTATION = "aifactory.io/config-sha256"  # a config change rolls the pods
DEFAULT_CPU_TARGET_PERCENT = 60  # HPA target: headroom for bursts while new replicas start
SERVICE_PORT = 80
METRICS_SERVICE = f"{naming.GATEWAY_APP}-metrics"
METRICS_COMPONENT = "gateway-metrics"  # app.kubernetes.io/component of the metrics Service only
CONFIG_DIR = "/etc/envoy"
# The in-tree service controller's annotations (AWS cloud provider): an internal Network Load Balancer.
AWS_LB_ANNOTATIONS = {
    "service.beta.kubernetes.io/aws-load-balancer-type": "nlb",
    "service.beta.kubernetes.io/aws-load-balancer-internal": "true",
}


def gateway_labels() -> dict[str, str]:
    return naming.common_labels(naming.GATEWAY_APP, "gateway")


def _meta(cfg: GatewayView, name: str = naming.GATEWAY_APP) -> dict[str, Any]:
    return {"name": name, "namespace": cfg.gateway.namespace, "labels": gateway_labels()}


def _selector() -> dict[str, str]:
    return {"app.kubernetes.io/name": naming.GATEWAY_APP}


def config_map(cfg: GatewayView, envoy_yaml: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(cfg, CONFIG_MAP),
            "data": {"envoy.yaml": envoy_yaml}}


# Seconds between the pod's termination starting and SIGTERM reaching Envoy beyond the longest request, and left
# after it for Envoy to exit before the kubelet kills it.
DRAIN_MARGIN_SECONDS = 10


def drain_seconds(cfg: GatewayView) -> int:
    """How long a terminating gateway pod keeps serving: the longest request any route allows (a model's
    timeoutSeconds). Envoy exits on SIGTERM without draining (its --drain-time-s applies to hot restarts and
    /drain_listeners: envoyproxy/envoy@v1.40.0:docs/root/intro/arch_overview/operations/draining.rst), so the
    pod's preStop sleeps this long first: the endpoint leaves the Service at once (no new connections), requests
    in flight, streams included, finish."""
    return math.ceil(max((m.timeout_seconds for m in cfg.models.values()), default=0)) + DRAIN_MARGIN_SECONDS


def deployment(cfg: GatewayView, envoy_yaml: str) -> dict[str, Any]:
    """Rolled when the config changes: the pod template carries the config's hash. A pod being replaced or
    evicted serves its requests in flight to their end before Envoy stops (drain_seconds)."""
    config_hash = hashlib.sha256(envoy_yaml.encode()).hexdigest()
    drain = drain_seconds(cfg)
    container = {
        "name": "envoy",
        "image": DEFAULT_ENVOY_IMAGE,
        "args": ["--config-path", f"{CONFIG_DIR}/envoy.yaml", "--log-level", "warn",
                 "--drain-time-s", "20", "--drain-strategy", "immediate"],
        "ports": [{"name": "http", "containerPort": naming.ENVOY_LISTENER_PORT, "protocol": "TCP"},
                  {"name": "stats", "containerPort": naming.ENVOY_STATS_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": "stats"}, "periodSeconds": 5,
                           "failureThreshold": 2},
        "livenessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 10, "failureThreshold": 3},
        "resources": security.resources("1", "512Mi", cpu_limit="2",
                                        memory_limit=f"{GATEWAY_MEMORY_LIMIT_GIB}Gi"),
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
        "securityContext": security.container_security_context(),
        # the kubelet's own sleep (no shell in the image needed): Kubernetes' PodLifecycleSleepAction, on by
        # default since 1.30 (kubernetes/enhancements#3960)
        "lifecycle": {"preStop": {"sleep": {"seconds": drain}}},
    }
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(cfg), "spec": {
        "selector": {"matchLabels": _selector()},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
        "template": {
            "metadata": {"labels": gateway_labels(), "annotations": {
                CONFIG_HASH_ANNOTATION: config_hash,
                "traffic.sidecar.istio.io/excludeInboundPorts": str(naming.ENVOY_LISTENER_PORT)}},
            "spec": {
                "serviceAccountName": naming.GATEWAY_SERVICE_ACCOUNT,
                "automountServiceAccountToken": False,
                "securityContext": security.pod_security_context(),
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                               "whenUnsatisfiable": "ScheduleAnyway",
                                               "labelSelector": {"matchLabels": _selector()}}],
                "containers": [container],
                "volumes": [{"name": "config", "configMap": {"name": CONFIG_MAP}}],
                "terminationGracePeriodSeconds": drain + DRAIN_MARGIN_SECONDS,
            },
        },
    }}


def service(cfg: GatewayView) -> dict[str, Any]:
    meta = _meta(cfg)
    if cfg.is_aws and cfg.gateway.service_type == "LoadBalancer":
        meta["annotations"] = dict(AWS_LB_ANNOTATIONS)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {
        "type": cfg.gateway.service_type,
        "selector": _selector(),
        "ports": [{"name": "http", "port": SERVICE_PORT, "targetPort": "http", "protocol": "TCP",
                   "appProtocol": "http"}],
    }}


def metrics_service(cfg: GatewayView) -> dict[str, Any]:
    """Headless, the stats port only: what the ServiceMonitor scrapes, one target per pod."""
    meta = _meta(cfg, METRICS_SERVICE)
    meta["labels"] = naming.common_labels(naming.GATEWAY_APP, METRICS_COMPONENT)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {
        "clusterIP": "None",
        "selector": _selector(),
        "ports": [{"name": "stats", "port": naming.ENVOY_STATS_PORT, "targetPort": "stats", "protocol": "TCP",
                   "appProtocol": "http"}],
    }}


def autoscaler(cfg: GatewayView) -> dict[str, Any]:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": _meta(cfg), "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": naming.GATEWAY_APP},
        "minReplicas": cfg.gateway.min_replicas,
        "maxReplicas": cfg.gateway.max_replicas,
        "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": DEFAULT_CPU_TARGET_PERCENT}}}],
    }}


def disruption_budget(cfg: GatewayView) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(cfg),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": _selector()}}}


def service_monitor(cfg: GatewayView) -> dict[str, Any]:
    return {"apiVersion": MONITORING_API_VERSION, "kind": "ServiceMonitor", "metadata": _meta(cfg), "spec": {
        "selector": {"matchLabels": metrics_service(cfg)["metadata"]["labels"]},
        "endpoints": [{"port": "stats", "path": "/stats/prometheus", "interval": "15s", **MESH_SCRAPE_TLS}],
    }}


def service_account(cfg: GatewayView) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(cfg, naming.GATEWAY_SERVICE_ACCOUNT),
            "automountServiceAccountToken": False}


NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace
SIDECAR_METRICS_PORTS = (15020, 15090)  # istio-proxy's merged metrics and Envoy stats
ISTIOD_PORT = 15012  # xDS and certificates
DNS_PORTS = (("UDP", 53), ("TCP", 53))
OTLP_PORTS = (naming.OTEL_GRPC_PORT,)


def _ns_selector(namespace: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}}


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def _netpol(cfg: GatewayView, name: str, *, ingress: list[dict[str, Any]] | None = None,
            egress: list[dict[str, Any]] | None = None, pods: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"podSelector": {"matchLabels": pods} if pods else {}, "policyTypes": []}
    for kind, rules in (("Ingress", ingress), ("Egress", egress)):
        if rules is not None:
            spec["policyTypes"].append(kind)
            spec[kind.lower()] = rules
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": _meta(cfg, name),
            "spec": spec}


def network_policies(cfg: GatewayView) -> list[dict[str, Any]]:
    """Default deny in the gateway namespace, then each flow the gateway needs, by port."""
    gateway_pods = _selector()
    tenant_namespaces = sorted({cfg.tenant_of(m).namespace for m in cfg.models.values()})
    model_servers = {"podSelector": {"matchLabels": {naming.LABEL_COMPONENT: "model-server"}}}
    out = [
        _netpol(cfg, "default-deny", ingress=[], egress=[]),
        # clients reach the listener through the load balancer (node ports, client or node source addresses)
        _netpol(cfg, "allow-clients", pods=gateway_pods, ingress=[{"ports": _tcp(naming.ENVOY_LISTENER_PORT)}]),
        _netpol(cfg, "allow-monitoring", pods=gateway_pods, ingress=[{
            "from": [_ns_selector(cfg.observability.namespace)],
            "ports": _tcp(naming.ENVOY_STATS_PORT, *SIDECAR_METRICS_PORTS)}]),
        _netpol(cfg, "allow-dns", egress=[{
            "to": [{**_ns_selector("kube-system"), "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
            "ports": [{"protocol": proto, "port": port} for proto, port in DNS_PORTS]}]),
        _netpol(cfg, "allow-istiod", egress=[{
            "to": [{**_ns_selector(naming.ISTIO_NAMESPACE), "podSelector": {"matchLabels": {"app": "istiod"}}}],
            "ports": _tcp(ISTIOD_PORT)}]),
        _netpol(cfg, "allow-collector", pods=gateway_pods, egress=[{
            "to": [_ns_selector(cfg.observability.namespace)], "ports": _tcp(*OTLP_PORTS)}]),
    ]
    if tenant_namespaces:
        out.append(_netpol(cfg, "allow-models", pods=gateway_pods, egress=[{
            "to": [{**_ns_selector(ns), **model_servers} for ns in tenant_namespaces],
            "ports": _tcp(naming.MODEL_HTTP_PORT)}]))
    jwks_ports = sorted({jwks_endpoint(i)[1] for i in cfg.gateway.auth.issuers})
    if jwks_ports:  # issuers may be anywhere (in the cluster, the VPC or the internet): by port only
        out.append(_netpol(cfg, "allow-token-issuers", pods=gateway_pods, egress=[{"ports": _tcp(*jwks_ports)}]))
    return out


def authorization_policies(cfg: GatewayView) -> list[dict[str, Any]]:
    """allow-nothing for everything the gateway's sidecar receives, then Prometheus on the stats port."""
    prometheus = naming.istio_principal(cfg.observability.namespace, naming.PROMETHEUS_SERVICE_ACCOUNT)

    def policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy", "metadata": _meta(cfg, name),
                "spec": spec}

    return [policy("allow-nothing", {}),
            policy("allow-monitoring", {"selector": {"matchLabels": _selector()}, "action": "ALLOW", "rules": [{
                "from": [{"source": {"principals": [prometheus]}}],
                "to": [{"operation": {"ports": [str(naming.ENVOY_STATS_PORT)]}}]}]})]


def service_host(namespace: str) -> str:
    """The gateway Service's cluster FQDN, a name every in-cluster caller's sidecar routes (see the module
    docstring)."""
    return f"{naming.GATEWAY_APP}.{namespace}.svc.cluster.local"


def service_url(namespace: str) -> str:
    """Where in-cluster clients send OpenAI requests (the fidelity Job among them)."""
    return f"http://{service_host(namespace)}:{SERVICE_PORT}"


def destination_rule(cfg: GatewayView) -> dict[str, Any]:
    """In-mesh callers of the gateway Service send plaintext to its port: the listener is not behind the sidecar."""
    return {"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule", "metadata": _meta(cfg),
            "spec": {"host": service_host(cfg.gateway.namespace), "trafficPolicy": {"portLevelSettings": [
                {"port": {"number": SERVICE_PORT}, "tls": {"mode": "DISABLE"}}]}}}


def gateway_objects(cfg: GatewayView) -> dict[str, dict[str, Any]]:
    """Every object in the gateway namespace by child-resource suffix, in apply order."""
    envoy_yaml = render(cfg)  # once: a large fleet's bootstrap is the slowest thing synth renders
    return {"serviceaccount": service_account(cfg), "configmap": config_map(cfg, envoy_yaml),
            "deployment": deployment(cfg, envoy_yaml),
            "service": service(cfg), "metrics-service": metrics_service(cfg),
            "horizontalpodautoscaler": autoscaler(cfg), "poddisruptionbudget": disruption_budget(cfg),
            "servicemonitor": service_monitor(cfg),
            **{f"networkpolicy-{p['metadata']['name']}": p for p in network_policies(cfg)},
            **{f"authorizationpolicy-{p['metadata']['name']}": p for p in authorization_policies(cfg)},
            "destinationrule": destination_rule(cfg),
            # the sidecar adds no retries of its own to the gateway's tries, and connects within the gateway's time
            **{f"{o['kind'].lower()}-{o['metadata']['name']}": o for o in engine_traffic_objects(
                namespace=cfg.gateway.namespace, hosts={m.name: model_host(cfg, m) for m in cfg.models.values()},
                connect_timeout_seconds=cfg.gateway.connect_timeout_seconds, labels=gateway_labels())}}


class Gateway(pulumi.ComponentResource):
    """The Envoy inference gateway: its namespace and everything in it."""
    pulumi_type = TYPE  # the type token (part of every child's URN); the component package hosts a subclass
    # with `aifactory:index:<name>`, the token its schema names (components/__main__.py)

    namespace: pulumi.Output[str]
    """The gateway's namespace."""
    service: pulumi.Output[str]
    """The gateway Service's in-cluster host name."""

    def __init__(self, name: str, args: GatewayArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(self.pulumi_type, name, None, opts)
        cfg = gateway_spec(name, args)
        namespace = create_namespace(
            f"{name}-ns", cfg.gateway.namespace,
            labels=namespace_labels(pod_security="restricted", kubernetes_version=cfg.kubernetes_version,
                                    injection=True),
            opts=pulumi.ResourceOptions(parent=self))
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[namespace])
        for suffix, obj in gateway_objects(cfg).items():
            if obj["kind"] == "NetworkPolicy":
                k8s.networking.v1.NetworkPolicy(f"{name}-{suffix}", metadata=obj["metadata"], spec=obj["spec"],
                                                opts=in_ns)
            else:
                register_object(f"{name}-{suffix}", obj, in_ns)
        self.namespace = pulumi.Output.from_input(cfg.gateway.namespace)
        self.service = pulumi.Output.from_input(service_host(cfg.gateway.namespace))
        self.register_outputs({"namespace": cfg.gateway.namespace,
                               "service": service_host(cfg.gateway.namespace),
                               "port": SERVICE_PORT})
