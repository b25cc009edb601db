"""The Envoy inference gateway's bootstrap, built by pure functions from what the gateway reads (GatewayView).

One cluster per model (its headless Service: Envoy sees every replica). Requests pass, in order:

    (connection manager) CONNECT: 403 upgrade_failed (its connect_matcher route has no upgrade configured);
                      a header name with an underscore: 400
    header_mutation   drops any client-sent x-aifactory-tenant (the gateway alone sets it) and x-envoy-* header
    jwt_authn         401 without a valid token of a configured issuer (it must carry exp, at most
                      gateway.auth.maxTokenLifetimeSeconds away); the tenant claim -> x-aifactory-tenant
    rbac (issuers)    403 when the issuer may not name that tenant (only with `issuers[].tenants`)
    callers (rbac)    403 unless the caller may call the model of the route its headers chose (header/path routes)
    refusals (fault)  from the headers alone: 405 for a method other than GET/POST, 404 for a path no model serves,
                      413 for a declared content-length past the header/path-routed model's limit
    buffer            the whole body is received before anything goes upstream (slow senders pin no model); on
                      a header/path route, at most the model's `maxRequestBytes`
    json_to_metadata  the OpenAI body's `model` -> dynamic metadata aifactory.model (routes match on it)
    buffer (per route) 413 past the routed model's `maxRequestBytes`
    rbac (per route)  403 unless the caller's tenant owns the model or is in the owner's `shareWith`
    local_ratelimit   one token bucket per calling tenant and priority (interactive | batch): 429 past it
    router

Routing, per API model ("workload"), first match wins (header > path > body):

    x-model: <workload> [+ x-priority: batch]       on /v1/<api> or /models/<any>/v1/<api>
    /models/<workload>/v1/<api> [+ x-priority: batch] (the prefix is rewritten away)
    body {"model": "<workload>" | "<model key>"}    on /v1/<api>
    anything else                                   404 saying what is routable

Header and path names and priorities are case-insensitive; the body's `model` is exact (the engine compares
it with its served names exactly). <api> is only what the model's engine serves of the OpenAI API
(`OPENAI_APIS`). Paths are normalised (RFC 3986 dot segments, merged slashes; escaped slashes rejected)
before matching.

Failure handling, per model route: a try that stays silent for the model's `tryIdleTimeoutSeconds` (no
first byte, or no next byte of a stream) is abandoned and retried on another replica, as are connect
failures, resets and 500/502/503/504, bounded by a retry budget; a streamed generation resets the idle
timer with every token, so long generations run up to `timeoutSeconds`. A JSON body that does not ask to
stream (`"stream"` absent or false) takes the route's "-unstreamed" twin, whose tries may stay silent for
the whole `timeoutSeconds`: such an answer says nothing until it is complete. Active health checks on the
engine's health endpoint take hung replicas out; outlier detection ejects replicas after consecutive 5xx
(up to `maxEjectionPercent`, 2 of 3); the panic threshold keeps the last healthy replicas in service;
LEAST_REQUEST with a full scan keeps traffic off slow replicas. The route's idle timeout is the model's
`timeoutSeconds`, so a long request is not cut by the connection manager's `stream_idle_timeout`.

Through the mesh: the gateway's Istio sidecar captures every connection to a model replica and, the model Service's
port being HTTP (`appProtocol: http`), routes it by its Host alone: one `0.0.0.0:8000` listener whose virtual hosts
are the Services' names (`<model>.<namespace>.svc.cluster.local`, `<model>.<namespace>[.svc]`, the bare name only
from the model's own namespace; any port in the Host is ignored). A Host naming none of them (the client's, i.e.
the load balancer's name, or the cluster name Envoy's health checks send by default) falls to PassthroughCluster,
in plaintext, and the model's STRICT sidecar resets it. So every try leaves with Host = the model Service's FQDN
(`host_rewrite_literal` on each model route, and on each variant's gate route, where the serving variant is known),
every health check sends it (`HttpHealthCheck.host`), and spans to the Collector name its Service as :authority.
The engine sees its own Service's name as Host, not the client's. Sources: istio/istio@1.28.3
pilot/pkg/networking/core/listener.go, httproute.go, cluster_builder.go, filterchain_options.go (docs/contracts.md,
"Istio (mesh routing and mTLS)").

Access logs are JSON on stdout with the request id, the caller's tenant and upstream timing; per calling
tenant request stats come from virtual clusters `caller-<tenant>`; traces go to the OpenTelemetry
Collector over OTLP gRPC. The admin interface listens on 127.0.0.1 only; a separate stats listener
exposes just /stats/prometheus and /ready to Prometheus and the kubelet.

Envoy API references (v1.40): HttpConnectionManager
https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/extensions/filters/network/http_connection_manager/v3/http_connection_manager.proto
RouteAction/RetryPolicy https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/config/route/v3/route_components.proto
JwtAuthentication https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/extensions/filters/http/jwt_authn/v3/config.proto
JsonToMetadata https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/extensions/filters/http/json_to_metadata/v3/json_to_metadata.proto
Cluster (health checks, outlier detection, LB) https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/config/cluster/v3/cluster.proto

Deadline-aware routing between a workload's variants (models of one workload that declare `variant`,
cheapest first by cost per request). The budget is what this one request may take, in ms:

    x-aifactory-budget-ms: <ms>                     the request's budget, or else
    baggage: ...,aifactory.budget_ms=<ms>,...       W3C baggage as telemetry's `headers()` sends it (its step's
                                                    share of the workflow's remaining budget)

A variant fits a budget of at least its threshold: its slo.e2eSeconds (the engine's p95) plus the workload's
margin (gateway.routing.<workload>.marginPercent, default 25%: the gateway and, under load, the variant's queue
add to the engine's latency), in whole ms rounded up (`threshold_ms`). Policy `cost-within-deadline` (the
default): the cheapest variant that fits (reason `fits-budget`); a budget below every threshold takes the
fastest (`rescued`); no budget (or one that is not a whole number of ms) takes the cheapest (`default`).
Policies `cheapest` and `fastest` ignore the budget (`default`). x-priority: batch still goes to the workload's
batch model.

Why plain route matching: the decision is a pure function of one number and a handful of thresholds known
when the config is built, so it compiles to ordered routes, first match wins: per useful variant (cheaper
ones first, a pricier variant only if it is faster than every cheaper one) a route whose header matcher
accepts budgets >= its threshold: `range_match` on x-aifactory-budget-ms, an RE2 `safe_regex` for "a decimal
integer >= N" on the baggage member (Envoy matches repeated headers joined by commas). No Lua, no ext_proc,
no other process and no network hop (the overflow gates below are in process); the explicit header wins over
baggage (the baggage routes require it absent).

Overflow: each decision routes to an aggregate cluster (`envoy.clusters.aggregate`) listing the chosen
variant, then the others fastest first, each through its overflow gate. The first try goes to the chosen
variant; the route's retry policy adds `envoy.retry_priorities.previous_priorities`, so a try that failed on one
variant (503 from a saturated engine, reset, per-try idle timeout, a tripped circuit breaker, no healthy replica)
is retried on the next variant, not queued behind it.
The gate is needed for the breaker: Envoy never retries a request refused by its own circuit breaker
(RetryPolicyImpl::wouldRetryFromReset returns false for StreamResetReason::Overflow, and wouldRetryFromHeaders
for a response carrying x-envoy-overloaded: envoyproxy/envoy source/common/router/retry_policy_impl.cc). So the
aggregate cluster reaches each variant through `<variant>__gate`, an internal listener (in process, no socket:
envoy.bootstrap.internal_listener) whose router forwards to the variant's cluster with `suppress_envoy_headers`:
a try the variant's breaker refuses comes back to the decision's route as a plain 503, which it retries on the
next variant. A variant's breaker is its `variant.maxRequests` (default gateway.circuitBreakers.maxRequests):
set to what the variant's replicas serve at once, tries past it overflow instead of queueing at the engine.
The variant's cluster keeps its health checks, outlier detection, LB and breakers (within the variant they
pick the replica); the gate clusters are not health-checked (Envoy's health checker cannot reach internal
listeners), so a variant that is down costs each request one fast-failing try before the next variant serves it.
Internal listeners: https://www.envoyproxy.io/docs/envoy/v1.40.0/configuration/other_features/internal_listener
Aggregate cluster: https://www.envoyproxy.io/docs/envoy/v1.40.0/intro/arch_overview/upstream/aggregate_cluster

The decision is visible: requests reach the model with, and clients get back, `x-aifactory-route:
<chosen variant>; reason=<fits-budget|rescued|default>`, and `x-aifactory-variant: <variant that served>`
(they differ when the request overflowed). Each decision's route has stat_prefix
`<workload>__<variant>__<reason>` (vhost.models.route.<prefix>.upstream_rq_*; Prometheus:
envoy_vhost_route_upstream_rq_completed{envoy_route=...}), whose upstream_rq_retry counts tries sent on to the
next variant; each variant's cluster counts the tries it served (upstream_rq_total, overflow included; a try its
breaker refused counts in upstream_rq_active_overflow instead); the aggregate clusters are
`<workload>__<chosen variant>`; the access log has the route and the upstream cluster (the gate).

`rebind()` points a built bootstrap at other addresses and local JWKS (tests, local runs).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from components.k8s import naming
from components.k8s.engines import ENGINES
from components.k8s.values import GatewaySettings, JwtIssuer, Model, Tenant
from components.vocabulary import dump_yaml

__all__ = [
    "GatewayView",
    "ObservabilityView",
    "MODEL_HEADER",
    "PRIORITY_HEADER",
    "TENANT_HEADER",
    "TENANT_DESCRIPTOR",
    "PRIORITY_DESCRIPTOR",
    "ROUTE_PREFIX",
    "METADATA_NAMESPACE",
    "BODY_MODEL_KEY",
    "OPENAI_APIS",
    "HEALTH_PATHS",
    "RETRIABLE_STATUS_CODES",
    "BODY_LIMIT_FILTER",
    "CALLERS_FILTER",
    "REFUSALS_FILTER",
    "ALLOWED_METHODS",
    "COLLECTOR_CLUSTER",
    "ADMIN_CLUSTER",
    "DEFAULT_UNROUTED_RPS",
    "DEFAULT_DNS_REFRESH_SECONDS",
    "DEFAULT_MIN_RETRY_CONCURRENCY",
    "DEFAULT_MAX_DOWNSTREAM_CONNECTIONS",
    "DEFAULT_JWKS_CACHE_SECONDS",
    "BUDGET_HEADER",
    "BAGGAGE_HEADER",
    "BUDGET_BAGGAGE_KEY",
    "ROUTE_DECISION_HEADER",
    "VARIANT_HEADER",
    "VARIANT_KEY",
    "at_least_regex",
    "threshold_ms",
    "overflow_cluster_name",
    "overflow_order",
    "overflow_cluster",
    "variant_clusters",
    "decisions",
    "Decision",
    "Workload",
    "workloads",
    "model_host",
    "collector_host",
    "model_cluster",
    "collector_cluster",
    "jwks_cluster",
    "admin_cluster",
    "routes",
    "jwt_filter",
    "rate_limit_filter",
    "http_filters",
    "gateway_listener",
    "stats_listener",
    "bootstrap",
    "render",
    "rebind",
]

class ObservabilityView(Protocol):
    """What the gateway reads of the observability settings."""

    @property
    def namespace(self) -> str: ...  # where the OpenTelemetry Collector and Prometheus run

    @property
    def trace_sample_ratio(self) -> float: ...  # share of requests the gateway starts a trace for


class GatewayView(Protocol):
    """What the gateway's build functions read: the Gateway component's GatewaySpec (from its args), or the kit's
    whole PlatformConfig, which has the same attributes."""

    @property
    def kubernetes_version(self) -> str: ...

    @property
    def is_aws(self) -> bool: ...  # a LoadBalancer Service becomes an internal NLB

    @property
    def models(self) -> Mapping[str, Model]: ...

    @property
    def tenants(self) -> Mapping[str, Tenant]: ...

    @property
    def gateway(self) -> GatewaySettings: ...

    @property
    def observability(self) -> ObservabilityView: ...

    def tenant_of(self, model: Model) -> Tenant: ...

    def variants_of(self, workload: str) -> list[Model]: ...  # cheapest first; ties: faster, then by name

    def routing_policy(self, workload: str) -> str: ...

    def routing_margin_percent(self, workload: str) -> float: ...


MODEL_HEADER = "x-model"
PRIORITY_HEADER = "x-priority"
TENANT_HEADER = "x-aifactory-tenant"  # set by the gateway from the token's tenant claim; sent to the model
TENANT_DESCRIPTOR = "tenant"
PRIORITY_DESCRIPTOR = "priority"
ROUTE_PREFIX = "/models/"
METADATA_NAMESPACE = "aifactory"  # route metadata {aifactory: {tenant, priority}}; body model: dynamic metadata
BODY_MODEL_KEY = "model"  # dynamic metadata aifactory.model: the OpenAI request body's "model"
BODY_STREAM_KEY = "stream"  # dynamic metadata aifactory.stream: the body's "stream" (false when absent)
BODY_LIMIT_FILTER = "aifactory.body_limit"  # the per-route buffer filter instance (413 past the model's limit)
BUFFER_FILTER = "envoy.filters.http.buffer"  # the first buffer: the whole body before anything goes upstream
# RBAC on the route chosen from the headers, before any body is buffered (403 at once for header/path routes)
CALLERS_FILTER = "aifactory.callers"
RBAC_FILTER = "envoy.filters.http.rbac"  # RBAC on the route chosen once the body is read (body routes)
# fault filter: answers a refusal route (405, 404, 413 from the headers) at once, before any body is buffered
REFUSALS_FILTER = "aifactory.refusals"
REFUSAL_KEY = "refusal"  # route metadata aifactory.refusal: the refusal's text (the local reply's body)
# the methods the OpenAI API uses (GET /v1/models, POST for the rest); any other, CONNECT included, gets 405
ALLOWED_METHODS = ("GET", "POST")
ENVOY_HEADER_PREFIX = "x-envoy-"  # client-sent headers with this prefix are removed (Envoy's own control headers)
JWT_FILTER = "envoy.filters.http.jwt_authn"  # also the dynamic metadata namespace of verified payloads
ISSUER_TENANTS_FILTER = "aifactory.issuer_tenants"  # RBAC: which tenants each issuer may name (403 otherwise)
COLLECTOR_CLUSTER = "otel_collector"
ADMIN_CLUSTER = "envoy_admin"
# The paths each engine serves for a model's task (models.X.task), as RE2 alternatives after the root; nothing
# else is routable. Each engine's module lists them with their sources (components.k8s.engines).
OPENAI_APIS: dict[str, dict[str, tuple[str, ...]]] = {name: dict(e.openai_apis) for name, e in ENGINES.items()}
# What each engine answers on the model port when it can serve (the kit's liveness probes use the same paths).
HEALTH_PATHS = {name: e.health_path for name, e in ENGINES.items()}
# 500 too: an LLM inference request has no side effect but its cost, and a replica whose engine died answers
# 500 to every request (vLLM's EngineDeadError) until it is replaced.
RETRIABLE_STATUS_CODES = (500, 502, 503, 504)
DEFAULT_UNROUTED_RPS = 100  # requests/s (per replica) for requests that match no model: 404s, scans
# Retries in flight allowed whatever the budget says (Envoy's default is 3): a replica that dies with a
# dozen requests in flight gets them all retried before outlier detection ejects it.
DEFAULT_MIN_RETRY_CONCURRENCY = 16
DEFAULT_DNS_REFRESH_SECONDS = 5  # how soon new replicas behind a headless Service take traffic
DEFAULT_MAX_DOWNSTREAM_CONNECTIONS = 50000  # per replica: past it Envoy refuses connections, not memory
GATEWAY_MEMORY_LIMIT_GIB = 1  # the gateway container's memory limit (components/k8s/gateway.py)
# The overload manager's heap budget: 75% of the container limit, so Envoy sheds load before the kernel OOM-kills
# it. Bodies are buffered whole before routing, so many slow or large uploads could otherwise fill the heap.
MAX_HEAP_BYTES = GATEWAY_MEMORY_LIMIT_GIB * 1024**3 * 3 // 4
# Streams buffering at least 2^20 bytes are tracked, and the largest are reset first under memory pressure
# (overload action envoy.overload_actions.reset_high_memory_stream needs buffer_factory_config).
TRACKED_STREAM_BUFFER_POWER_OF_TWO = 20
DEFAULT_JWKS_CACHE_SECONDS = 600  # how long fetched signing keys are used before they are fetched again
DEFAULT_JWKS_FETCH_TIMEOUT_SECONDS = 5
DEFAULT_JWT_CACHE_SIZE = 1000  # verified tokens kept per worker thread (expiry still checked on every use)
# The CA bundle of the Envoy image (its Ubuntu stage installs ca-certificates: envoyproxy/envoy
# ci/Dockerfile-envoy), used to check the issuers' JWKS servers
SYSTEM_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
DNS_CLUSTER_TYPE = "envoy.cluster.dns"
# compared exactly by json_to_metadata: the spellings clients send (Spring's APPLICATION_JSON_UTF8 is the
# upper-case one)
JSON_CONTENT_TYPES = ("application/json", "application/json; charset=utf-8", "application/json;charset=utf-8",
                      "application/json; charset=UTF-8", "application/json;charset=UTF-8")
SERVICE_NAME = naming.GATEWAY_APP  # service.name of the gateway's spans
BUDGET_HEADER = "x-aifactory-budget-ms"  # the caller's remaining latency budget, whole ms (wins over baggage)
BAGGAGE_HEADER = "baggage"  # W3C baggage (https://www.w3.org/TR/baggage/)
BUDGET_BAGGAGE_KEY = "aifactory.budget_ms"  # telemetry.instrument.BUDGET_BAGGAGE_KEY (headers() sends it)
ROUTE_DECISION_HEADER = "x-aifactory-route"  # to the model and back: "<chosen variant>; reason=<reason>"
VARIANT_HEADER = "x-aifactory-variant"  # back to the client: the variant (cluster) that served the request
VARIANT_KEY = "variant"  # a variant's endpoints carry metadata aifactory.variant = its model name
BUDGET_MAX_MS = 10**12  # the open end of the budget range matches (Envoy's range is [start, end))

_T = "type.googleapis.com/envoy."
_ALL = {"numerator": 100, "denominator": "HUNDRED"}
_ACCESS_LOG_FORMAT = {
    "start_time": "%START_TIME%",
    "request_id": "%REQ(X-REQUEST-ID)%",
    "trace_id": "%TRACE_ID%",
    "method": "%REQ(:METHOD)%",
    # without the query string: whatever a client puts there (a token, a prompt) stays out of the logs
    "path": "%PATH(NQ:ORIG_OR_PATH)%",
    "caller_tenant": f"%REQ({TENANT_HEADER.upper()})%",
    "model": "%REQ(X-MODEL)%",
    "body_model": f"%DYNAMIC_METADATA({METADATA_NAMESPACE}:{BODY_MODEL_KEY})%",
    "stream": f"%DYNAMIC_METADATA({METADATA_NAMESPACE}:{BODY_STREAM_KEY})%",
    "priority": "%REQ(X-PRIORITY)%",
    "route": "%ROUTE_NAME%",
    "status": "%RESPONSE_CODE%",
    "flags": "%RESPONSE_FLAGS%",
    "details": "%RESPONSE_CODE_DETAILS%",
    "bytes_received": "%BYTES_RECEIVED%",
    "bytes_sent": "%BYTES_SENT%",
    "duration_ms": "%DURATION%",
    "upstream_service_time_ms": "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%",
    "upstream_cluster": "%UPSTREAM_CLUSTER%",
    "upstream_host": "%UPSTREAM_HOST%",
    "attempts": "%UPSTREAM_REQUEST_ATTEMPT_COUNT%",
    "downstream": "%DOWNSTREAM_REMOTE_ADDRESS%",
}


@dataclass(frozen=True, slots=True)
class Workload:
    """One API model: the interactive model and, optionally, a batch model serving the same name."""

    name: str
    default: Model  # the interactive model, or the only model (with variants: the no-budget policy's pick)
    batch: Model | None  # set when the workload declares both priorities
    variants: tuple[Model, ...] = ()  # cheapest first; empty without variants


def workloads(cfg: GatewayView) -> list[Workload]:
    """The config's models grouped into API models, sorted by name."""
    groups: dict[str, dict[str, Model]] = {}
    for m in cfg.models.values():
        groups.setdefault(m.workload, {})[m.priority] = m
    out = []
    for name in sorted(groups):
        g = groups[name]
        if variants := cfg.variants_of(name):
            out.append(Workload(name, _no_budget_pick(cfg, name, variants), g.get("batch"), tuple(variants)))
        elif "interactive" in g:
            out.append(Workload(name, g["interactive"], g.get("batch")))
        else:  # a batch-only workload: every request goes to its batch model
            out.append(Workload(name, g["batch"], None))
    return out


def _latency_ms(model: Model) -> int:
    """A variant's expected latency: its p95 end-to-end SLO, whole ms rounded up."""
    return -(-round(model.slo.e2e_seconds * 1e6) // 1000)


def threshold_ms(cfg: GatewayView, workload: str, model: Model) -> int:
    """The least budget the variant fits: its expected latency plus the workload's margin, whole ms rounded up."""
    return -(-round(model.slo.e2e_seconds * 1e6 * (100 + cfg.routing_margin_percent(workload))) // 100_000)


def _fastest(variants: Sequence[Model]) -> Model:
    """The lowest expected latency; ties go to the cheaper (variants come cheapest first)."""
    return min(variants, key=lambda m: m.slo.e2e_seconds)


def _no_budget_pick(cfg: GatewayView, workload: str, variants: Sequence[Model]) -> Model:
    return _fastest(variants) if cfg.routing_policy(workload) == "fastest" else variants[0]


@dataclass(frozen=True, slots=True)
class Decision:
    """One routing decision of a workload with variants: requests whose headers match `headers` go to `chosen`."""

    name: str  # the route's name (its -path/-body/-unstreamed/-too-large twins add suffixes)
    chosen: Model
    reason: str  # fits-budget | rescued | default
    headers: tuple[dict[str, Any], ...]


def at_least_regex(n: int) -> str:
    """RE2 for a decimal integer (leading zeros allowed) >= n: more digits, or as many and larger at the first
    digit that differs."""
    if n <= 0:
        return r"\d+"
    s = str(n)
    alts = [f"[1-9]\\d{{{len(s)},}}", s]
    for i, digit in enumerate(s):
        if digit != "9":
            rest = len(s) - i - 1
            alts.append(f"{s[:i]}[{int(digit) + 1}-9]" + (f"\\d{{{rest}}}" if rest else ""))
    return f"0*(?:{'|'.join(alts)})"


def _baggage_budget(regex: str) -> dict[str, Any]:
    """The baggage carries aifactory.budget_ms whose value matches `regex` (W3C baggage: list-members
    `key OWS = OWS value *( OWS ; property )` separated by OWS , OWS)."""
    key = re.escape(BUDGET_BAGGAGE_KEY)
    return {"name": BAGGAGE_HEADER, "string_match": {"safe_regex": {
        "regex": f"^(?:.*,)?[ \\t]*{key}[ \\t]*=[ \\t]*(?:{regex})[ \\t]*(?:[;,].*)?$"}}}


_NO_BUDGET_HEADER = {"name": BUDGET_HEADER, "present_match": True, "invert_match": True}


def decisions(cfg: GatewayView, w: Workload) -> list[Decision]:
    """The workload's routing decisions in match order (empty without variants): see the module docstring."""
    if not w.variants:
        return []
    out: list[Decision] = []
    if cfg.routing_policy(w.name) == "cost-within-deadline":
        best: int | None = None
        for v in w.variants:  # cheapest first: a pricier variant is useful only if it is faster
            lat = threshold_ms(cfg, w.name, v)
            if best is not None and lat >= best:
                continue
            best = lat
            name = f"{w.name}.{v.name}.fits-budget"
            out.append(Decision(name, v, "fits-budget", (
                {"name": BUDGET_HEADER, "range_match": {"start": lat, "end": BUDGET_MAX_MS}},)))
            out.append(Decision(f"{name}.baggage", v, "fits-budget",
                                (_NO_BUDGET_HEADER, _baggage_budget(at_least_regex(lat)))))
        fast = _fastest(w.variants)
        name = f"{w.name}.{fast.name}.rescued"
        out.append(Decision(name, fast, "rescued", (
            {"name": BUDGET_HEADER, "range_match": {"start": 0, "end": threshold_ms(cfg, w.name, fast)}},)))
        out.append(Decision(f"{name}.baggage", fast, "rescued", (_NO_BUDGET_HEADER, _baggage_budget(r"\d+"))))
    out.append(Decision(f"{w.name}.{w.default.name}.default", w.default, "default", ()))
    return out


def overflow_cluster_name(workload: str, chosen: Model) -> str:
    """The aggregate cluster that tries `chosen` first. Model names are DNS labels: "__" clashes with none, and
    no dot, so Prometheus' envoy_cluster_name tag holds the whole name (Envoy's tag extractor cuts at a dot)."""
    return f"{workload}__{chosen.name}"


def overflow_order(w: Workload, chosen: Model) -> list[Model]:
    """`chosen`, then the workload's other variants fastest first (ties: cheaper first)."""
    rest = sorted((v for v in w.variants if v is not chosen), key=lambda m: _latency_ms(m))
    return [chosen, *rest]


def overflow_cluster(cfg: GatewayView, w: Workload, chosen: Model) -> dict[str, Any]:
    """An aggregate cluster over the variants' gates in overflow order (each variant keeps its own LB, health
    checks and breakers)."""
    return {
        "name": overflow_cluster_name(w.name, chosen),
        "connect_timeout": _seconds(cfg.gateway.connect_timeout_seconds),
        "lb_policy": "CLUSTER_PROVIDED",
        "cluster_type": {"name": "envoy.clusters.aggregate", "typed_config": {
            "@type": _T + "extensions.clusters.aggregate.v3.ClusterConfig",
            "clusters": [gate_name(m) for m in overflow_order(w, chosen)]}},
        # the router checks the retry budget on the route's cluster: this one
        "circuit_breakers": {"thresholds": [{
            "priority": "DEFAULT",
            "retry_budget": {"budget_percent": {"value": cfg.gateway.retries.budget_percent},
                             "min_retry_concurrency": DEFAULT_MIN_RETRY_CONCURRENCY}}]},
    }


def variant_clusters(cfg: GatewayView) -> list[dict[str, Any]]:
    """One aggregate cluster per variant a decision can choose, then every variant's gate cluster, sorted by name."""
    out = {}
    for w in workloads(cfg):
        for d in decisions(cfg, w):
            c = overflow_cluster(cfg, w, d.chosen)
            out[c["name"]] = c
    return [out[k] for k in sorted(out)] + [gate_cluster(cfg, m) for m in _variant_models(cfg)]


def _variant_models(cfg: GatewayView) -> list[Model]:
    return [m for w in workloads(cfg) for m in sorted(w.variants, key=lambda v: v.name)]


GATE_SUFFIX = naming.GATE_SUFFIX
variant_of_member = naming.variant_of_member


def gate_name(model: Model) -> str:
    """The variant's overflow gate: an internal listener and the cluster that reaches it."""
    return f"{model.name}{GATE_SUFFIX}"


# The gate's own limits are not the variant's: its breaker must never be what refuses a request.
GATE_MAX = 1_000_000


def gate_cluster(cfg: GatewayView, model: Model) -> dict[str, Any]:
    """The variant as the aggregate clusters see it: its gate listener, in process (no socket). Not health-checked:
    Envoy's health checker runs on the main thread, which reaches no internal listener (Envoy 1.40 counts every
    such check as health_check.network_failure, logging "connect to previously closed peer"); a try on a variant
    that is down fails at once behind the gate (503) and is retried on the next variant."""
    return {
        "name": gate_name(model),
        "type": "STATIC",
        "connect_timeout": _seconds(cfg.gateway.connect_timeout_seconds),
        "load_assignment": {"cluster_name": gate_name(model), "endpoints": [{"lb_endpoints": [{
            "endpoint": {"address": {"envoy_internal_address": {"server_listener_name": gate_name(model)}}},
            # the response's x-aifactory-variant (%UPSTREAM_METADATA%): the variant behind this gate
            "metadata": {"filter_metadata": {METADATA_NAMESPACE: {VARIANT_KEY: model.name}}}}]}]},
        "transport_socket": {"name": "envoy.transport_sockets.internal_upstream", "typed_config": {
            "@type": _T + "extensions.transport_sockets.internal_upstream.v3.InternalUpstreamTransport",
            "transport_socket": {"name": "envoy.transport_sockets.raw_buffer", "typed_config": {
                "@type": _T + "extensions.transport_sockets.raw_buffer.v3.RawBuffer"}}}},
        "circuit_breakers": {"thresholds": [{"priority": "DEFAULT", "max_connections": GATE_MAX,
                                             "max_pending_requests": GATE_MAX, "max_requests": GATE_MAX,
                                             "max_retries": GATE_MAX}]},
    }


def gate_listener(cfg: GatewayView, model: Model) -> dict[str, Any]:
    """The variant's overflow gate: an internal listener whose router sends everything to the variant's cluster
    and answers a try the cluster's circuit breaker refuses with a plain 503 (suppress_envoy_headers drops
    x-envoy-overloaded, which would forbid the retry), so the decision's route retries it on the next variant.
    No timeouts or retries here: the decision's route has them. The Host becomes the variant's Service name here,
    the last hop before the socket (see "Through the mesh" in the module docstring): which variant serves a try
    is known only at its gate."""
    route = {"cluster": model.name, "timeout": "0s", "host_rewrite_literal": model_host(cfg, model)}
    route_config = {"name": gate_name(model), "virtual_hosts": [{"name": gate_name(model), "domains": ["*"],
                    "routes": [{"match": {"prefix": "/"}, "route": route}]}]}
    hcm = _hcm(f"gate_{model.name}", route_config, [], stream_idle_timeout="0s")
    hcm["typed_config"]["http_filters"][-1]["typed_config"]["suppress_envoy_headers"] = True
    return {"name": gate_name(model), "internal_listener": {}, "filter_chains": [{"filters": [hcm]}]}


def _decision_route(route: dict[str, Any], w: Workload, d: Decision) -> dict[str, Any]:
    """A model route turned into one decision's route: its headers, its overflow cluster, the decision shown."""
    out = copy.deepcopy(route)
    out["name"] = route["name"].replace(w.name, d.name, 1)
    out["match"]["headers"] = [*route["match"].get("headers", []), *d.headers]
    out["route"]["cluster"] = overflow_cluster_name(w.name, d.chosen)
    del out["route"]["host_rewrite_literal"]  # the gate of the variant that serves the try sets it
    # a failed try goes to the next variant (the next priority of the aggregate cluster)
    out["route"]["retry_policy"]["retry_priority"] = {
        "name": "envoy.retry_priorities.previous_priorities",
        "typed_config": {"@type": _T + "extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig",
                         "update_frequency": 1}}
    out["stat_prefix"] = f"{w.name}__{d.chosen.name}__{d.reason}"
    decision = f"{d.chosen.name}; reason={d.reason}"
    out["request_headers_to_add"] = [{"header": {"key": ROUTE_DECISION_HEADER, "value": decision},
                                      "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}]
    out["response_headers_to_add"] = [
        {"header": {"key": ROUTE_DECISION_HEADER, "value": decision}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"},
        # the serving host's metadata (model_cluster): %UPSTREAM_CLUSTER% names the aggregate cluster here
        {"header": {"key": VARIANT_HEADER, "value": f"%UPSTREAM_METADATA({METADATA_NAMESPACE}:{VARIANT_KEY})%"},
         "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}]
    return out


def model_host(cfg: GatewayView, model: Model) -> str:
    """DNS name of the model's headless Service: the cluster's address, and the Host of every request and health
    check the gateway sends the model (the name the gateway's sidecar routes by)."""
    return f"{model.name}.{cfg.tenant_of(model).namespace}.svc.cluster.local"


def collector_host(cfg: GatewayView) -> str:
    return f"{naming.OTEL_COLLECTOR_SERVICE}.{cfg.observability.namespace}.svc.cluster.local"


def _seconds(value: float) -> str:
    return f"{value:.3f}s".replace(".000s", "s")


def _address(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def _dns_cluster(name: str, host: str, port: int, *, connect_timeout: float) -> dict[str, Any]:
    """Every address the name resolves to is a host (a headless Service: every replica), re-resolved often.

    The DNS cluster extension: Cluster.dns_refresh_rate (type STRICT_DNS) is deprecated in 1.40
    (https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/extensions/clusters/dns/v3/dns_cluster.proto)."""
    return {
        "name": name,
        "cluster_type": {"name": DNS_CLUSTER_TYPE, "typed_config": {
            "@type": _T + "extensions.clusters.dns.v3.DnsCluster",
            "dns_refresh_rate": _seconds(DEFAULT_DNS_REFRESH_SECONDS),
            "dns_lookup_family": "V4_ONLY"}},
        "connect_timeout": _seconds(connect_timeout),
        "load_assignment": {"cluster_name": name,
                            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _address(host, port)}}]}]},
    }


def model_cluster(cfg: GatewayView, model: Model) -> dict[str, Any]:
    out = _model_cluster(cfg, model)
    if model.variant is not None:  # every replica says which variant it is (the response's x-aifactory-variant)
        for e in out["load_assignment"]["endpoints"][0]["lb_endpoints"]:
            e["metadata"] = {"filter_metadata": {METADATA_NAMESPACE: {VARIANT_KEY: model.name}}}
    return out


def _model_cluster(cfg: GatewayView, model: Model) -> dict[str, Any]:
    gw = cfg.gateway
    cb, od, hc = gw.circuit_breakers, gw.outlier_detection, gw.health_check
    return {
        **_dns_cluster(model.name, model_host(cfg, model), naming.MODEL_HTTP_PORT,
                       connect_timeout=gw.connect_timeout_seconds),
        # Full scan: the replica with the fewest requests in flight, ties broken at random; a slow replica
        # holds its requests longer, so it is picked only when it has no more in flight than the others.
        "load_balancing_policy": {"policies": [{"typed_extension_config": {
            "name": "envoy.load_balancing_policies.least_request",
            "typed_config": {"@type": _T + "extensions.load_balancing_policies.least_request.v3.LeastRequest",
                             "selection_method": "FULL_SCAN"}}}]},
        # Below the threshold Envoy balances over every replica, healthy or not (its panic mode): the floor
        # that keeps a model up when its health endpoint fails everywhere.
        # Host health changes are applied at once: with the default 1 s merge window a second ejection right
        # after the first waits up to a second while the replica keeps taking (and failing) requests.
        "common_lb_config": {"healthy_panic_threshold": {"value": od.panic_threshold_percent},
                             "update_merge_window": "0s"},
        "circuit_breakers": {"thresholds": [{
            "priority": "DEFAULT",
            "max_connections": cb.max_connections,
            "max_pending_requests": cb.max_pending_requests,
            # a variant's own limit: past it, tries overflow to the next variant (see the module docstring)
            "max_requests": model.variant.max_requests if model.variant and model.variant.max_requests else
            cb.max_requests,
            "retry_budget": {"budget_percent": {"value": gw.retries.budget_percent},
                             "min_retry_concurrency": DEFAULT_MIN_RETRY_CONCURRENCY},
        }]},
        "health_checks": [{
            "timeout": _seconds(hc.timeout_seconds),
            "interval": _seconds(hc.interval_seconds),
            "no_traffic_interval": _seconds(hc.interval_seconds),  # default 60 s: too slow for a new gateway
            "unhealthy_threshold": hc.unhealthy_threshold,
            "healthy_threshold": hc.healthy_threshold,
            # Host: the Service's name, as on requests (Envoy's default is the cluster's name, which the gateway's
            # sidecar passes through in plaintext to the model's STRICT sidecar: every check would fail)
            "http_health_check": {"path": HEALTH_PATHS[model.engine], "host": model_host(cfg, model)},
        }],
        "outlier_detection": {
            "consecutive_5xx": od.consecutive_5xx,
            "interval": _seconds(od.interval_seconds),
            "base_ejection_time": _seconds(od.base_ejection_seconds),
            "max_ejection_percent": od.max_ejection_percent,
            # a replica that fails requests but answers its health check stays ejected for its ejection time
            # (by default a passing active check would bring it straight back)
            "successful_active_health_check_uneject_host": False,
        },
    }


def _retry_policy(cfg: GatewayView, model: Model) -> dict[str, Any]:
    return {
        # `reset` also covers a try abandoned by per_try_idle_timeout (the router resets it and retries when
        # retry_on has reset, 5xx or gateway-error)
        "retry_on": "connect-failure,refused-stream,reset,retriable-status-codes",
        "retriable_status_codes": list(RETRIABLE_STATUS_CODES),
        "num_retries": cfg.gateway.retries.attempts,
        "per_try_idle_timeout": _seconds(model.try_idle_timeout_seconds),
        "retry_host_predicate": [{
            "name": "envoy.retry_host_predicates.previous_hosts",
            "typed_config": {"@type": _T + "extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"},
        }],
        "host_selection_retry_max_attempts": 3,
    }


def _callers(cfg: GatewayView, model: Model) -> list[str]:
    """Tenants allowed to call `model`: its own and those its tenant shares with, sorted."""
    return sorted({model.tenant, *cfg.tenant_of(model).share_with})


def _rbac_per_route(cfg: GatewayView, model: Model) -> dict[str, Any]:
    principals = [{"header": {"name": TENANT_HEADER, "string_match": {"exact": t}}} for t in _callers(cfg, model)]
    return {"@type": _T + "extensions.filters.http.rbac.v3.RBACPerRoute", "rbac": {"rules": {
        "action": "ALLOW",
        "policies": {"callers": {"permissions": [{"any": True}], "principals": principals}}}}}


def _buffer_per_route(model: Model) -> dict[str, Any]:
    return {"@type": _T + "extensions.filters.http.buffer.v3.BufferPerRoute",
            "buffer": {"max_request_bytes": model.max_request_bytes}}


def _api_regex(model: Model, prefix: str) -> str:
    return f"^{prefix}/(?:{'|'.join(OPENAI_APIS[model.engine][model.task])})$"


def _regex(pattern: str) -> dict[str, Any]:
    return {"safe_regex": {"regex": pattern}}


def _route(cfg: GatewayView, name: str, match: dict[str, Any], model: Model, *, rewrite: bool
           ) -> dict[str, Any]:
    action: dict[str, Any] = {
        "cluster": model.name,
        # the Host the gateway's sidecar routes to the model's Service (see "Through the mesh")
        "host_rewrite_literal": model_host(cfg, model),
        "timeout": _seconds(model.timeout_seconds),
        # replaces the connection manager's stream_idle_timeout for this route: nothing shorter than the
        # model's own timeout may cut a long request (hung replicas are the per-try idle timeout's job)
        "idle_timeout": _seconds(model.timeout_seconds),
        "retry_policy": _retry_policy(cfg, model),
    }
    if rewrite:  # /models/<workload>/v1/... -> /v1/...
        action["regex_rewrite"] = {"pattern": {"regex": f"^{ROUTE_PREFIX}[^/]+/"}, "substitution": "/"}
    return {"name": name, "match": match, "route": action,
            # the router keeps this much of the body to replay it on a retry
            "request_body_buffer_limit": model.max_request_bytes,
            "typed_per_filter_config": {
                # a header/path route is known before the body: its model's limit applies from the first byte
                BUFFER_FILTER: _buffer_per_route(model),
                CALLERS_FILTER: _rbac_per_route(cfg, model),
                BODY_LIMIT_FILTER: _buffer_per_route(model),
                RBAC_FILTER: _rbac_per_route(cfg, model),
            },
            "metadata": {"filter_metadata": {METADATA_NAMESPACE: {TENANT_DESCRIPTOR: model.tenant,
                                                                  PRIORITY_DESCRIPTOR: model.priority}}}}


def _header(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "string_match": {"exact": value, "ignore_case": True}}


def _body_model(value: str) -> dict[str, Any]:
    return {"filter": METADATA_NAMESPACE, "path": [{"key": BODY_MODEL_KEY}],
            "value": {"string_match": {"exact": value}}}


def _not_found(name: str, match: dict[str, Any], text: str, *, status: int = 404, at_once: bool = False
               ) -> dict[str, Any]:
    """A direct response. `at_once`: the refusals filter answers it from the headers, before the body is buffered
    (only for requests no body can route elsewhere); otherwise the router answers once the body is read."""
    out = {"name": name, "match": match, "direct_response": {"status": status, "body": {"inline_string": text}}}
    if at_once:
        out["metadata"] = {"filter_metadata": {METADATA_NAMESPACE: {REFUSAL_KEY: text}}}
        out["typed_per_filter_config"] = {REFUSALS_FILTER: {
            "@type": _T + "extensions.filters.http.fault.v3.HTTPFault",
            "abort": {"http_status": status, "percentage": _ALL}}}
    return out


def _local_replies() -> dict[str, Any]:
    """The refusals filter's answers carry their route's text (the fault filter's own body is "fault filter
    abort"); response flag FI marks them (envoy.config.accesslog.v3.ResponseFlagFilter)."""
    return {"mappers": [{"filter": {"response_flag_filter": {"flags": ["FI"]}},
                         "body_format_override": {"text_format_source": {
                             "inline_string": f"%METADATA(ROUTE:{METADATA_NAMESPACE}:{REFUSAL_KEY})%"}}}]}


def _refused_methods() -> list[dict[str, Any]]:
    """405 before any body is read for a method the OpenAI API does not use.

    CONNECT has no :path, so no path route matches it: without a route the connection manager runs the filter
    chain and the buffer filter holds its stream until it idles out. A connect_matcher route
    (envoy.config.route.v3.RouteMatch) gives it one, and a route that has no upgrade_configs for CONNECT makes the
    connection manager refuse it itself, 403 `upgrade_failed`, before any filter (envoyproxy/envoy@v1.40.0
    source/common/http/conn_manager_impl.cc, ActiveStream::decodeHeaders)."""
    text = f"method not allowed: the gateway serves {', '.join(ALLOWED_METHODS)}\n"
    methods = {"name": ":method", "string_match": {"safe_regex": {"regex": "|".join(ALLOWED_METHODS)}},
               "invert_match": True}
    return [_not_found("method-not-allowed", {"prefix": "/", "headers": [methods]}, text, status=405, at_once=True),
            _not_found("connect-not-allowed", {"connect_matcher": {}}, text, status=405)]


def _unstreamed(route: dict[str, Any], model: Model) -> dict[str, Any]:
    """The route for the same requests when their body does not ask to stream.

    A non-streamed answer says nothing until the whole generation is done, so the per-try idle timeout
    would cut healthy long generations: such a try may stay silent up to the model's timeoutSeconds (a hung
    replica is then taken out by its failing health checks and by outlier detection). Only a POST whose JSON
    body says `"stream": true` keeps `tryIdleTimeoutSeconds`, as do bodyless requests: a POST whose body the
    gateway did not parse (a content type json_to_metadata does not take, such as `text/plain`) is treated as
    non-streamed, so a healthy generation is never cut and retried three times into a 504."""
    out = copy.deepcopy(route)
    out["name"] = f"{route['name']}-unstreamed"
    # only a POST carries a generation request (a bodyless GET with a JSON content type also "lacks" stream)
    out["match"]["headers"] = [*route["match"].get("headers", []),
                               {"name": ":method", "string_match": {"exact": "POST"}}]
    # not (stream == true): also matches when no metadata was set (envoy.type.matcher.v3.MetadataMatcher.invert)
    out["match"]["dynamic_metadata"] = [*route["match"].get("dynamic_metadata", []), {
        "filter": METADATA_NAMESPACE, "path": [{"key": BODY_STREAM_KEY}],
        "value": {"bool_match": True}, "invert": True}]
    out["route"]["retry_policy"]["per_try_idle_timeout"] = _seconds(model.timeout_seconds)
    return out


def _too_large(route: dict[str, Any], model: Model) -> dict[str, Any]:
    """413 for a route's requests past the model's limit.

    A JSON request is routed again once the gateway has buffered it (and set its content-length), at the
    largest limit of any model (json_to_metadata holds the per-route buffer filter until then), so its
    model's limit is checked here, by the route; other requests also meet the per-route buffer filter."""
    match = copy.deepcopy(route["match"])
    match["headers"] = [*match.get("headers", []), {"name": "content-length", "invert_match": True, "range_match": {
        "start": 0, "end": model.max_request_bytes + 1}}]
    out = _not_found(f"{route['name']}-too-large", match,
                     f"request body larger than {model.max_request_bytes} bytes (models.{model.name}."
                     "maxRequestBytes)\n", status=413, at_once=True)
    # a caller the model refuses gets its 403 first, whatever the size
    out["typed_per_filter_config"][CALLERS_FILTER] = route["typed_per_filter_config"][CALLERS_FILTER]
    return out


def routes(cfg: GatewayView) -> list[dict[str, Any]]:
    """Header routes, then path routes, then body routes (batch before default in each); then 404s."""
    ws = workloads(cfg)
    batch = [_header(PRIORITY_HEADER, "batch")]
    by_header: list[dict[str, Any]] = []
    by_path: list[dict[str, Any]] = []
    by_body: list[dict[str, Any]] = []
    model_of: dict[str, Model] = {}  # route name -> the model whose limits it applies (its twins need them)
    for w in ws:
        pairs = [(f"{w.name}-batch", w.batch, batch)] if w.batch is not None else []
        pairs.append((w.name, w.default, []))
        path_prefix = f"{ROUTE_PREFIX}(?i:{re.escape(w.name)})"
        for name, model, extra in pairs:
            group = (_route(cfg, name, {
                **_regex(_api_regex(model, f"(?:{ROUTE_PREFIX}[^/]+)?")),
                "headers": [_header(MODEL_HEADER, w.name), *extra]}, model, rewrite=True),
                _route(cfg, f"{name}-path", {**_regex(_api_regex(model, path_prefix)), "headers": extra},
                       model, rewrite=True),
                _route(cfg, f"{name}-body", {**_regex(_api_regex(model, "")), "headers": extra,
                                             "dynamic_metadata": [_body_model(w.name)]},
                       model, rewrite=False))
            ds = decisions(cfg, w) if model is w.default else []
            for out_list, r in zip((by_header, by_path, by_body), group, strict=True):
                if not ds:
                    model_of[r["name"]] = model
                    out_list.append(r)
                for d in ds:  # the variant's own limits (timeouts, body size) on its decision's route
                    dr = _decision_route(_route(cfg, r["name"], copy.deepcopy(r["match"]), d.chosen,
                                                rewrite=r["name"] != f"{name}-body"), w, d)
                    model_of[dr["name"]] = d.chosen
                    out_list.append(dr)
    for m in sorted(cfg.models.values(), key=lambda m: m.name):  # a model's own key in the body names it
        if m.name != m.workload:
            by_body.append(_route(cfg, f"{m.name}-body", {**_regex(_api_regex(m, "")),
                                                          "dynamic_metadata": [_body_model(m.name)]},
                                  m, rewrite=False))
            model_of[f"{m.name}-body"] = m
    for r in by_path + by_body:
        if not r["match"].get("headers", True):
            del r["match"]["headers"]
    # each model route after its 413 and non-streamed twins
    with_twins = [x for r in (*by_header, *by_path, *by_body)
                  for x in (_too_large(r, model_of[r["name"]]), _unstreamed(r, model_of[r["name"]]), r)]
    known = ", ".join(w.name for w in ws) or "(none)"
    apis = sorted({a for tasks in OPENAI_APIS.values() for apis_ in tasks.values() for a in apis_})
    unknown = (f"unknown model: name one in header {MODEL_HEADER}, path {ROUTE_PREFIX}<model>/v1/... or the body's "
               f"\"model\", on a path its engine serves; models: {known}\n")
    return [*_refused_methods(), *with_twins,
            _not_found("unknown-model", {**_regex(f"^(?:{ROUTE_PREFIX}[^/]+)?/(?:{'|'.join(apis)})$")}, unknown),
            _not_found("not-served", {"prefix": "/"},
                       f"not served: the gateway routes only /{{{', '.join(apis).replace('[^/]+', '<name>')}}} "
                       f"(optionally under {ROUTE_PREFIX}<model>)\n", at_once=True)]


def _token_bucket(per_second: int, burst: int) -> dict[str, Any]:
    return {"max_tokens": burst, "tokens_per_fill": per_second, "fill_interval": "1s"}


def rate_limit_filter(cfg: GatewayView) -> dict[str, Any]:
    """One token bucket per calling tenant and priority (descriptor tenant=<caller>, priority=<route's>).

    The caller is the token's tenant (x-aifactory-tenant, set by jwt_authn); the priority is the routed
    model's. Requests that match no model use the default bucket."""
    buckets = []
    for t in sorted(cfg.tenants):
        rl = cfg.tenants[t].rate_limit
        for priority, rps, burst in (("batch", rl.batch_requests_per_second, rl.batch_burst),
                                     ("interactive", rl.requests_per_second, rl.burst)):
            buckets.append({"entries": [{"key": TENANT_DESCRIPTOR, "value": t},
                                        {"key": PRIORITY_DESCRIPTOR, "value": priority}],
                            "token_bucket": _token_bucket(rps, burst)})
    return {
        "name": "envoy.filters.http.local_ratelimit",
        "typed_config": {
            "@type": _T + "extensions.filters.http.local_ratelimit.v3.LocalRateLimit",
            "stat_prefix": "tenant_rate_limit",
            "token_bucket": _token_bucket(DEFAULT_UNROUTED_RPS, DEFAULT_UNROUTED_RPS),
            "filter_enabled": {"runtime_key": "tenant_rate_limit_enabled", "default_value": _ALL},
            "filter_enforced": {"runtime_key": "tenant_rate_limit_enforced", "default_value": _ALL},
            "always_consume_default_token_bucket": False,
            "rate_limits": [{"actions": [
                {"request_headers": {"header_name": TENANT_HEADER, "descriptor_key": TENANT_DESCRIPTOR}},
                {"metadata": {"descriptor_key": PRIORITY_DESCRIPTOR, "source": "ROUTE_ENTRY",
                              "metadata_key": {"key": METADATA_NAMESPACE, "path": [{"key": PRIORITY_DESCRIPTOR}]}}},
            ]}],
            "enable_x_ratelimit_headers": "DRAFT_VERSION_03",
            "descriptors": buckets,
        },
    }


def _provider_name(index: int) -> str:
    return f"issuer-{index}"


def _jwks_cluster_name(index: int) -> str:
    return f"jwks-{index}"


def jwt_filter(cfg: GatewayView) -> dict[str, Any]:
    """jwt_authn: a token of one of the stack's issuers is required on every request (401 otherwise).

    The token itself is not forwarded; the tenant claim is, as x-aifactory-tenant."""
    auth = cfg.gateway.auth
    providers = {}
    for i, issuer in enumerate(auth.issuers):
        provider: dict[str, Any] = {
            "issuer": issuer.issuer,
            "remote_jwks": {
                "http_uri": {"uri": issuer.jwks_uri, "cluster": _jwks_cluster_name(i),
                             "timeout": _seconds(DEFAULT_JWKS_FETCH_TIMEOUT_SECONDS)},
                "cache_duration": _seconds(DEFAULT_JWKS_CACHE_SECONDS),
                "async_fetch": {},  # fetched at start-up and refreshed in the background
                "retry_policy": {"num_retries": 3},
            },
            "forward": False,
            # only the Authorization header: by default jwt_authn also reads an `access_token` query parameter
            # (JwtProvider.from_headers/from_params), and tokens in URLs end up in logs and browser histories
            "from_headers": [{"name": "Authorization", "value_prefix": "Bearer "}],
            # a token without exp, or valid for longer than gateway.auth.maxTokenLifetimeSeconds, is refused
            "require_expiration": True,
            "max_lifetime": _seconds(auth.max_token_lifetime_seconds),
            "claim_to_headers": [{"header_name": TENANT_HEADER, "claim_name": auth.tenant_claim}],
            # a client reuses its token until it expires: verify each token's signature once, not per request
            "jwt_cache_config": {"jwt_cache_size": DEFAULT_JWT_CACHE_SIZE},
        }
        if issuer.audiences:
            provider["audiences"] = list(issuer.audiences)
        if _issuer_tenants_restricted(cfg):
            # the verified payload -> dynamic metadata envoy.filters.http.jwt_authn/issuer-<i>, read by issuer_tenants
            provider["payload_in_metadata"] = _provider_name(i)
        providers[_provider_name(i)] = provider
    names = list(providers)
    requires: dict[str, Any] = ({"provider_name": names[0]} if len(names) == 1 else
                                {"requires_any": {"requirements": [{"provider_name": n} for n in names]}})
    return {"name": JWT_FILTER, "typed_config": {
        "@type": _T + "extensions.filters.http.jwt_authn.v3.JwtAuthentication",
        "providers": providers,
        # every request: any path, and CONNECT, which has no path (RouteMatch.connect_matcher)
        "rules": [{"match": {"prefix": "/"}, "requires": requires},
                  {"match": {"connect_matcher": {}}, "requires": requires}]}}


def _issuer_tenants_restricted(cfg: GatewayView) -> bool:
    return any(i.tenants is not None for i in cfg.gateway.auth.issuers)


def _payload_claim(index: int, claim: str, value: dict[str, Any]) -> dict[str, Any]:
    """Principal: the payload that issuer `index` verified has `claim` matching `value`."""
    return {"sourced_metadata": {"metadata_matcher": {
        "filter": JWT_FILTER, "path": [{"key": _provider_name(index)}, *([{"key": claim}] if claim else [])],
        "value": value}}}


def issuer_tenants_filter(cfg: GatewayView) -> dict[str, Any]:
    """RBAC after jwt_authn: a token's tenant claim must be one its issuer may name (`issuers[].tenants`), else 403.

    jwt_authn proves who signed a token, not that the signer speaks for the tenant it names: with two issuers
    (two teams' IdPs) either could mint a token for the other's tenant. Each issuer's verified payload is in
    dynamic metadata under its provider name; one ALLOW policy per issuer accepts its payload only with a
    permitted tenant (an issuer without `tenants` may name any)."""
    auth = cfg.gateway.auth
    policies = {}
    for i, issuer in enumerate(auth.issuers):
        if issuer.tenants is None:
            principals = [_payload_claim(i, "", {"present_match": True})]
        else:
            principals = [_payload_claim(i, auth.tenant_claim, {"string_match": {"exact": t}})
                          for t in issuer.tenants]
        policies[_provider_name(i)] = {"permissions": [{"any": True}], "principals": principals}
    return {"name": ISSUER_TENANTS_FILTER, "typed_config": {
        "@type": _T + "extensions.filters.http.rbac.v3.RBAC",
        "rules_stat_prefix": "issuer_tenants",
        "rules": {"action": "ALLOW", "policies": policies}}}


def _max_body(cfg: GatewayView) -> int:
    return max((m.max_request_bytes for m in cfg.models.values()), default=1024 * 1024)


def http_filters(cfg: GatewayView) -> list[dict[str, Any]]:
    """The gateway's HTTP filters before the router, in order (see the module docstring)."""
    strip = {"name": "envoy.filters.http.header_mutation", "typed_config": {
        "@type": _T + "extensions.filters.http.header_mutation.v3.HeaderMutation",
        # x-envoy-*: Envoy honours some of them from clients it deems internal, and passes the others to the
        # models; none of them is the client's to set (Envoy adds its own after this filter)
        "mutations": {"request_mutations": [
            {"remove": TENANT_HEADER},
            {"remove_on_match": {"key_matcher": {"prefix": ENVOY_HEADER_PREFIX}}}]}}}
    # before any body is buffered: 403 for a caller the header/path route's model refuses; refusal routes (a
    # method the API does not use, a path it does not serve, a declared content-length past the model's limit)
    # answered at once
    callers = {"name": CALLERS_FILTER, "typed_config": {"@type": _T + "extensions.filters.http.rbac.v3.RBAC"}}
    refusals = {"name": REFUSALS_FILTER, "typed_config": {
        "@type": _T + "extensions.filters.http.fault.v3.HTTPFault"}}  # no faults of its own: routes bring them
    buffer = {"name": BUFFER_FILTER, "typed_config": {
        "@type": _T + "extensions.filters.http.buffer.v3.Buffer", "max_request_bytes": _max_body(cfg)}}
    body_model = {"name": "envoy.filters.http.json_to_metadata", "typed_config": {
        "@type": _T + "extensions.filters.http.json_to_metadata.v3.JsonToMetadata",
        "request_rules": {"rules": [
            {"selectors": [{"key": BODY_MODEL_KEY}],
             "on_present": {"metadata_namespace": METADATA_NAMESPACE, "key": BODY_MODEL_KEY, "type": "STRING"}},
            {"selectors": [{"key": BODY_STREAM_KEY}],
             "on_present": {"metadata_namespace": METADATA_NAMESPACE, "key": BODY_STREAM_KEY,
                            "type": "PROTOBUF_VALUE"},  # a JSON boolean stays a boolean
             "on_missing": {"metadata_namespace": METADATA_NAMESPACE, "key": BODY_STREAM_KEY, "value": False}},
        ],
            # compared exactly (the default is application/json alone): what OpenAI SDKs and other clients send
            "allow_content_types": list(JSON_CONTENT_TYPES),
            "allow_empty_content_type": True}}}
    body_limit = {"name": BODY_LIMIT_FILTER, "typed_config": {
        "@type": _T + "extensions.filters.http.buffer.v3.Buffer", "max_request_bytes": _max_body(cfg)}}
    rbac = {"name": RBAC_FILTER, "typed_config": {
        "@type": _T + "extensions.filters.http.rbac.v3.RBAC"}}  # no base rules: each model route brings its own
    out = [strip]
    if cfg.gateway.auth.issuers:
        out.append(jwt_filter(cfg))
        if _issuer_tenants_restricted(cfg):
            out.append(issuer_tenants_filter(cfg))
    return [*out, callers, refusals, buffer, body_model, body_limit, rbac, rate_limit_filter(cfg)]


# The gateway starts a trace for every request; traceSampleRatio is applied once, by the Collector's
# probabilistic_sampler after its spanmetrics connector has counted every span (components.k8s.otel_config), and
# by trace id, so the gateway's, the sidecars' and the engine's spans of one request are kept or dropped together.
# Sampling here as well would keep ratio² of the traces and make the spanmetrics RED figures a sample.
GATEWAY_TRACE_PERCENT = 100.0


def _tracing(cfg: GatewayView) -> dict[str, Any]:
    return {
        "random_sampling": {"value": GATEWAY_TRACE_PERCENT},
        "provider": {
            "name": "envoy.tracers.opentelemetry",
            "typed_config": {
                "@type": _T + "config.trace.v3.OpenTelemetryConfig",
                # :authority: the Collector Service's name (Envoy's default is the cluster's name, which the
                # sidecar would only pass through: see "Through the mesh")
                "grpc_service": {"envoy_grpc": {"cluster_name": COLLECTOR_CLUSTER, "authority": collector_host(cfg)},
                                 "timeout": "0.250s"},
                "service_name": SERVICE_NAME,
            },
        },
    }


def _hcm(stat_prefix: str, route_config: dict[str, Any], filters: list[dict[str, Any]],
         **extra: Any) -> dict[str, Any]:
    return {
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": _T + "extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": stat_prefix,
            "codec_type": "AUTO",
            "route_config": route_config,
            "http_filters": [*filters, {
                "name": "envoy.filters.http.router",
                "typed_config": {"@type": _T + "extensions.filters.http.router.v3.Router"},
            }],
            **extra,
        },
    }


def _no_issuer_routes() -> list[dict[str, Any]]:
    return [{"name": "no-issuer", "match": {"prefix": "/"}, "direct_response": {"status": 401, "body": {
        "inline_string": "no token issuer is configured (gateway.auth.issuers): every request is refused\n"}}}]


def _virtual_clusters(cfg: GatewayView) -> list[dict[str, Any]]:
    """Request stats per calling tenant: vhost.models.vcluster.caller-<tenant>.upstream_rq_*."""
    return [{"name": f"caller-{t}", "headers": [{"name": TENANT_HEADER, "string_match": {"exact": t}}]}
            for t in sorted(cfg.tenants)]


def gateway_listener(cfg: GatewayView) -> dict[str, Any]:
    gw = cfg.gateway
    vhost: dict[str, Any] = {"name": "models", "domains": ["*"],
                             "routes": routes(cfg) if gw.auth.issuers else _no_issuer_routes()}
    if cfg.tenants:
        vhost["virtual_clusters"] = _virtual_clusters(cfg)
    hcm = _hcm("gateway", {"name": "models", "virtual_hosts": [vhost]}, http_filters(cfg),
               generate_request_id=True,
               use_remote_address=True,
               # slow clients: headers, then the whole request, must arrive in time (408); idle streams and
               # connections are closed
               request_headers_timeout=_seconds(gw.request_headers_timeout_seconds),
               request_timeout=_seconds(gw.request_timeout_seconds),
               stream_idle_timeout=_seconds(gw.stream_idle_timeout_seconds),
               common_http_protocol_options={"idle_timeout": _seconds(gw.idle_timeout_seconds),
                                             # x_model would otherwise reach the engine beside x-model (400)
                                             "headers_with_underscores_action": "REJECT_REQUEST"},
               local_reply_config=_local_replies(),
               # /models/a/../b/ is /models/b/ before any route or policy sees it
               normalize_path=True,
               merge_slashes=True,
               path_with_escaped_slashes_action="REJECT_REQUEST",
               access_log=[{"name": "envoy.access_loggers.stdout", "typed_config": {
                   "@type": _T + "extensions.access_loggers.stream.v3.StdoutAccessLog",
                   "log_format": {"json_format": _ACCESS_LOG_FORMAT}}}],
               tracing=_tracing(cfg))
    return {"name": "gateway", "address": _address("0.0.0.0", naming.ENVOY_LISTENER_PORT),
            "filter_chains": [{"filters": [hcm]}]}


def stats_listener() -> dict[str, Any]:
    """/stats/prometheus and /ready from the admin interface, and nothing else of it."""
    def to_admin(match: dict[str, Any]) -> dict[str, Any]:
        return {"match": match, "route": {"cluster": ADMIN_CLUSTER}}

    route_config = {"name": "stats", "virtual_hosts": [{"name": "stats", "domains": ["*"], "routes": [
        to_admin({"path": "/stats/prometheus"}), to_admin({"path": "/ready"})]}]}
    return {"name": "stats", "address": _address("0.0.0.0", naming.ENVOY_STATS_PORT),
            "filter_chains": [{"filters": [_hcm("stats", route_config, [])]}]}


def collector_cluster(cfg: GatewayView) -> dict[str, Any]:
    return {
        **_dns_cluster(COLLECTOR_CLUSTER, collector_host(cfg), naming.OTEL_GRPC_PORT,
                       connect_timeout=cfg.gateway.connect_timeout_seconds),
        "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": _T + "extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}}}},
    }


def jwks_endpoint(issuer: JwtIssuer) -> tuple[str, int]:
    """(host, port) of an issuer's JWKS URI (https: port 443 unless given)."""
    parts = urlsplit(issuer.jwks_uri)
    return parts.hostname or "", parts.port or 443


def jwks_cluster(cfg: GatewayView, index: int) -> dict[str, Any]:
    """The issuer's JWKS host over TLS (server certificate checked against the system's roots)."""
    name = _jwks_cluster_name(index)
    host, port = jwks_endpoint(cfg.gateway.auth.issuers[index])
    return {
        "name": name,
        "type": "LOGICAL_DNS",  # one external host: connect to whatever it resolves to now
        "dns_lookup_family": "V4_PREFERRED",
        "connect_timeout": _seconds(cfg.gateway.connect_timeout_seconds),
        "load_assignment": {"cluster_name": name,
                            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _address(host, port)}}]}]},
        "transport_socket": {"name": "envoy.transport_sockets.tls", "typed_config": {
            "@type": _T + "extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "sni": host,
            "common_tls_context": {"validation_context": {
                "trusted_ca": {"filename": SYSTEM_CA_BUNDLE},
                "match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": host}}]}}}},
    }


def admin_cluster() -> dict[str, Any]:
    return {"name": ADMIN_CLUSTER, "type": "STATIC", "connect_timeout": "1s",
            "load_assignment": {"cluster_name": ADMIN_CLUSTER, "endpoints": [{"lb_endpoints": [
                {"endpoint": {"address": _address("127.0.0.1", naming.ENVOY_ADMIN_PORT)}}]}]}}


def bootstrap(cfg: GatewayView) -> dict[str, Any]:
    """The complete Envoy bootstrap for the stack (deterministic: models and tenants in sorted order)."""
    models = [cfg.models[n] for n in sorted(cfg.models)]
    jwks = [jwks_cluster(cfg, i) for i in range(len(cfg.gateway.auth.issuers))]
    return {
        "node": {"id": naming.GATEWAY_APP, "cluster": naming.GATEWAY_APP},
        "admin": {"address": _address("127.0.0.1", naming.ENVOY_ADMIN_PORT)},
        # runtime overrides through the admin interface (127.0.0.1 only: `kubectl exec` or port-forward), e.g.
        # tenant_rate_limit_enforced=0 lifts the per-tenant limits during an incident; without an admin layer
        # Envoy refuses /runtime_modify (503). Overrides live in the process: a restarted pod has the config's.
        "layered_runtime": {"layers": [{"name": "admin", "admin_layer": {}}]},
        # internal listeners (the variants' overflow gates); none without variants
        **({"bootstrap_extensions": [{"name": "envoy.bootstrap.internal_listener", "typed_config": {
            "@type": _T + "extensions.bootstrap.internal_listener.v3.InternalListener"}}]}
           if _variant_models(cfg) else {}),
        "static_resources": {
            "listeners": [gateway_listener(cfg), stats_listener(),
                          *(gate_listener(cfg, m) for m in _variant_models(cfg))],
            "clusters": [*(model_cluster(cfg, m) for m in models), *variant_clusters(cfg), collector_cluster(cfg),
                         *jwks, admin_cluster()],
        },
        "overload_manager": {
            "refresh_interval": "0.25s",
            "resource_monitors": [
                {"name": "envoy.resource_monitors.global_downstream_max_connections",
                 "typed_config": {
                     "@type": _T + "extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig",
                     "max_active_downstream_connections": DEFAULT_MAX_DOWNSTREAM_CONNECTIONS}},
                {"name": "envoy.resource_monitors.fixed_heap",
                 "typed_config": {"@type": _T + "extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig",
                                  "max_heap_size_bytes": MAX_HEAP_BYTES}}],
            # config/overload/v3: from 85% of the heap budget the streams buffering most are reset (scaled),
            # at 95% new requests are refused with 503; the gateway stays up for everyone else's streams
            "actions": [
                {"name": "envoy.overload_actions.reset_high_memory_stream",
                 "triggers": [{"name": "envoy.resource_monitors.fixed_heap",
                               "scaled": {"scaling_threshold": 0.85, "saturation_threshold": 0.95}}]},
                {"name": "envoy.overload_actions.stop_accepting_requests",
                 "triggers": [{"name": "envoy.resource_monitors.fixed_heap", "threshold": {"value": 0.95}}]}],
            "buffer_factory_config": {"minimum_account_to_track_power_of_two": TRACKED_STREAM_BUFFER_POWER_OF_TWO},
        },
    }


def render(cfg: GatewayView) -> str:
    """The bootstrap as YAML: the gateway's ConfigMap and synth's envoy/envoy.yaml hold these bytes."""
    return dump_yaml(bootstrap(cfg))


def rebind(config: Mapping[str, Any], *, listener_port: int, stats_port: int, admin_port: int,
           endpoints: Mapping[str, Sequence[tuple[str, int]]], jwks: Sequence[str] = ()) -> dict[str, Any]:
    """A copy of `config` listening on 127.0.0.1 ports, each DNS cluster replaced by static endpoints.

    `endpoints` maps every DNS cluster name to the (address, port) pairs to use instead. `jwks`
    gives each issuer (in config order) a local JWKS document instead of its remote one; the JWKS
    clusters are dropped.
    """
    out = copy.deepcopy(dict(config))
    ports = {"gateway": listener_port, "stats": stats_port}
    for listener in out["static_resources"]["listeners"]:
        if "internal_listener" in listener:
            continue  # in process: nothing to bind
        listener["address"] = _address("127.0.0.1", ports[listener["name"]])
        for f in listener["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"]:
            if f["name"] == "envoy.filters.http.jwt_authn":
                providers = f["typed_config"]["providers"]
                if len(jwks) != len(providers):
                    raise ValueError(f"rebind: {len(providers)} issuer(s) need as many local JWKS, got {len(jwks)}")
                for provider, doc in zip(providers.values(), jwks, strict=True):
                    del provider["remote_jwks"]
                    provider["local_jwks"] = {"inline_string": doc}
    out["admin"]["address"] = _address("127.0.0.1", admin_port)
    clusters = [c for c in out["static_resources"]["clusters"] if c.get("type") != "LOGICAL_DNS"]
    out["static_resources"]["clusters"] = clusters
    dns = [c for c in clusters if c.get("cluster_type", {}).get("name") == DNS_CLUSTER_TYPE]
    missing = sorted({c["name"] for c in dns} - set(endpoints))
    if missing:
        raise ValueError(f"rebind: no endpoints for cluster(s) {', '.join(missing)}")
    for c in clusters:
        if c["name"] == ADMIN_CLUSTER:
            c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"] = \
                _address("127.0.0.1", admin_port)
        elif c in dns:
            del c["cluster_type"]
            c["type"] = "STATIC"
            meta = c["load_assignment"]["endpoints"][0]["lb_endpoints"][0].get("metadata")
            c["load_assignment"]["endpoints"] = [{"lb_endpoints": [
                {"endpoint": {"address": _address(host, port)}, **({"metadata": meta} if meta else {})}
                for host, port in endpoints[c["name"]]]}]
    return out
