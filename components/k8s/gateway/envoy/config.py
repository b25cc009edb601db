"""The Envoy inference gateway's bootstrap, built by pure functions from what the gateway reads (GatewayView).

One cluster per model, whose hosts are its ready replicas, reached directly (components.k8s.gateway.envoy.replicas:
checks steer new requests, they never end the ones in flight). Requests pass, in order:

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
    json_to_metadata  the OpenAI body's `model` -> dynamic metadata aifactory.model (routes match on it), and
                      `prompt_cache_key` -> aifactory.prompt_cache_key (with session affinity)
    session_baggage   (header_to_metadata) the baggage's aifactory.session member -> aifactory.session_baggage
    session (header_mutation) x-aifactory-session from prompt_cache_key, else that member, unless sent
                      (envoy_affinity)
    buffer (per route) 413 past the routed model's `maxRequestBytes`
    rbac (per route)  403 unless the caller's tenant owns the model or is in the owner's `shareWith`
    local_ratelimit   one token bucket per calling tenant and priority (interactive | batch): 429 past it
    budgets (ext_proc) the caller's and the workload's token budgets: reserve, 429 past them, settle at the end
                      (components.k8s.gateway.envoy.budgets; only with budgets)
    failed_on_two_replicas (lua) a request two replicas failed: 500 to the client (the router's 452; failures.py)
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
failures, resets, 500/502/503 and the engine's own retriable statuses (`retriable_status_codes`),
bounded by a retry budget; a streamed generation resets the idle timer with every token, so long generations
run up to `timeoutSeconds`. A JSON body that does not ask to
stream (`"stream"` absent or false) takes the route's "/unstreamed" twin, whose tries may stay silent for
the whole `timeoutSeconds`: such an answer says nothing until it is complete. Active health checks on the
engine's progress check (a 1-token generation) steer new requests away from a replica that fails them (its
requests in flight finish);
outlier detection ejects replicas after consecutive failed tries (5xx included), for their ejection time, not
until their next passing check (envoy_replicas.outlier_detection); a second replica's 500 ends the request as
500, not retried nor counted against that replica, and a 500 its engine says the request is at fault for as 422
(envoy_failures); panic (every replica gets requests) only when none passes, never on a variant's own cluster
(its last resort does: components.k8s.gateway.envoy.variants);
LEAST_REQUEST of four random choices keeps traffic off slow replicas and lets a retry leave a failing one (Maglev
with bounded load where a model has session affinity: components/k8s/gateway/envoy/affinity.py). The route's idle
timeout is the model's `timeoutSeconds`, so a long request is not cut by the connection manager's `stream_idle_timeout`.

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

Routing between a workload's variants by the request's latency budget, with overflow to the next variant:
components.k8s.gateway.envoy.variants. Tokens, issuers' tenants and rate limits: components.k8s.gateway.envoy.callers.
The
gateway's own refusals (405, 404, 413) and their local replies: components.k8s.gateway.envoy.refusals.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from components.k8s import naming
from components.k8s.engines import ENGINES
from components.k8s.gateway.envoy import affinity as affinity
from components.k8s.gateway.envoy import failures
from components.k8s.gateway.envoy.base import (
    _T,
    ADMIN_CLUSTER,
    ALLOWED_METHODS,
    BAGGAGE_HEADER,
    BODY_LIMIT_FILTER,
    BODY_MODEL_KEY,
    BODY_STREAM_KEY,
    BUDGET_BAGGAGE_KEY,
    BUDGET_HEADER,
    BUFFER_FILTER,
    CALLERS_FILTER,
    COLLECTOR_CLUSTER,
    DEFAULT_DNS_REFRESH_SECONDS,
    DEFAULT_JWKS_CACHE_SECONDS,
    DEFAULT_MAX_DOWNSTREAM_CONNECTIONS,
    DEFAULT_MIN_RETRY_CONCURRENCY,
    DEFAULT_UNROUTED_RPS,
    DNS_CLUSTER_TYPE,
    ENVOY_HEADER_PREFIX,
    GATEWAY_MEMORY_LIMIT_GIB,
    JSON_CONTENT_TYPES,
    MAX_HEAP_BYTES,
    METADATA_NAMESPACE,
    MODEL_HEADER,
    PRIORITY_DESCRIPTOR,
    PRIORITY_HEADER,
    PROXY_RETRIABLE_STATUS_CODES,
    RBAC_FILTER,
    REFUSALS_FILTER,
    ROUTE_DECISION_HEADER,
    ROUTE_PREFIX,
    SERVICE_NAME,
    TENANT_DESCRIPTOR,
    TENANT_HEADER,
    TRACKED_STREAM_BUFFER_POWER_OF_TWO,
    VARIANT_HEADER,
    VARIANT_KEY,
    GatewayView,
    ObservabilityView,
    _address,
    _hcm,
    _seconds,
    collector_host,
    model_host,
    retriable_status_codes,
    route_name,
)
from components.k8s.gateway.envoy.budgets import budget_clusters, budget_filters
from components.k8s.gateway.envoy.callers import (
    issuer_tenants_filter,
    issuer_tenants_restricted,
    jwks_cluster,
    jwks_endpoint,
    jwt_filter,
    rate_limit_filter,
)
from components.k8s.gateway.envoy.observability import (
    GATEWAY_TRACE_PERCENT,
    access_log,
    admin_cluster,
    collector_cluster,
    stats_listener,
    tracing,
    tracing_runtime,
)
from components.k8s.gateway.envoy.refusals import (
    REFUSAL_ROUTE_PREFIX,
    local_replies,
    max_body,
    not_found,
    refused_methods,
    too_large,
    too_large_for_any,
)
from components.k8s.gateway.envoy.replicas import model_cluster
from components.k8s.gateway.envoy.variants import (
    Decision,
    Workload,
    at_least_regex,
    decision_route,
    decisions,
    direct_route,
    gate_listeners,
    gate_stats_excluded,
    overflow_cluster,
    overflow_cluster_name,
    overflow_order,
    threshold_ms,
    variant_clusters,
    variant_models,
    workloads,
)
from components.k8s.settings import Model
from components.vocabulary import dump_yaml
from telemetry.names import ENVOY

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
    "REFUSAL_ROUTE_PREFIX",
    "PROXY_RETRIABLE_STATUS_CODES",
    "retriable_status_codes",
    "BODY_LIMIT_FILTER",
    "CALLERS_FILTER",
    "REFUSALS_FILTER",
    "ALLOWED_METHODS",
    "COLLECTOR_CLUSTER",
    "ADMIN_CLUSTER",
    "DNS_CLUSTER_TYPE",
    "GATEWAY_MEMORY_LIMIT_GIB",
    "GATEWAY_TRACE_PERCENT",
    "SERVICE_NAME",
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
    "jwks_endpoint",
    "admin_cluster",
    "routes",
    "jwt_filter",
    "rate_limit_filter",
    "http_filters",
    "gateway_listener",
    "stats_listener",
    "bootstrap",
    "render",
]

# The paths each engine serves for a model's task (models.X.task), as RE2 alternatives after the root; nothing
# else is routable. Each engine's module lists them with their sources (components.k8s.engines).
OPENAI_APIS: dict[str, dict[str, tuple[str, ...]]] = {name: dict(e.openai_apis) for name, e in ENGINES.items()}
# What each engine answers on the model port when it can serve (the kit's liveness probes use the same paths).
HEALTH_PATHS = {name: e.health_path for name, e in ENGINES.items()}

# TCP keepalive on the clients' connections. An AWS NLB forgets a flow that carries no packet for its TCP idle timeout
# (350 s by default; the kit leaves the NLB listener's tcp.idle_timeout.seconds at its default), and a later packet
# on it gets a reset: an unstreamed request to a model whose
# timeoutSeconds is longer (prod's batch and research models: 600 and 900 s) would be cut there. A keepalive probe is
# a packet on the flow (docs.aws.amazon.com/elasticloadbalancing/latest/network/network-load-balancers.html,
# "Connection idle timeout"): probes after 60 s idle, then every 30 s, keep it. Set on the listening socket before
# bind; Linux copies them to each accepted socket. Linux's numbers, whatever machine synthesizes the config
# (torvalds/linux@v6.12:include/uapi/asm-generic/socket.h, include/uapi/linux/in.h, include/uapi/linux/tcp.h).
_SOL_SOCKET, _SO_KEEPALIVE, _IPPROTO_TCP, _TCP_KEEPIDLE, _TCP_KEEPINTVL, _TCP_KEEPCNT = 1, 9, 6, 4, 5, 6
CLIENT_KEEPALIVE_IDLE_S, CLIENT_KEEPALIVE_INTERVAL_S, CLIENT_KEEPALIVE_PROBES = 60, 30, 4


# A client's connection lives at most this long: then its next response says `Connection: close` (HTTP/1.1; HTTP/2
# gets GOAWAY), a request in flight on it runs to its end, and an idle one drains too (5 s) before it closes. A
# terminating gateway pod is out of its Service's endpoints from its first second, but clients' keep-alive
# connections (idle_timeout 300 s) would keep bringing it new requests through its whole preStop and be cut by
# SIGTERM; this makes them reconnect, to the other pods, within a minute (drain_seconds in
# components/k8s/gateway/component.py).
# A connection busy when its time is up is draining: a request that starts on it within CLIENT_DRAIN_SECONDS (the
# connection manager's drain_timeout, Envoy's default, stated) is still served, with `Connection: close`; then it
# closes once no request is left on it.
# envoyproxy/envoy@v1.40.0:api/envoy/config/core/v3/protocol.proto (HttpProtocolOptions.max_connection_duration),
# api/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.proto (drain_timeout).
CLIENT_CONNECTION_MAX_SECONDS = 60
CLIENT_DRAIN_SECONDS = 5
# The client listener's connection manager: its stats are http.gateway.* (the gateway pod's preStop reads
# http.gateway.downstream_rq_active: components.k8s.gateway.drain).
GATEWAY_STAT_PREFIX = "gateway"


def client_keepalive() -> list[dict[str, Any]]:
    return [{"description": description, "level": level, "name": name, "int_value": value, "state": "STATE_PREBIND"}
            for description, level, name, value in [
                ("SO_KEEPALIVE", _SOL_SOCKET, _SO_KEEPALIVE, 1),
                ("TCP_KEEPIDLE", _IPPROTO_TCP, _TCP_KEEPIDLE, CLIENT_KEEPALIVE_IDLE_S),
                ("TCP_KEEPINTVL", _IPPROTO_TCP, _TCP_KEEPINTVL, CLIENT_KEEPALIVE_INTERVAL_S),
                ("TCP_KEEPCNT", _IPPROTO_TCP, _TCP_KEEPCNT, CLIENT_KEEPALIVE_PROBES)]]


def _retry_policy(cfg: GatewayView, model: Model) -> dict[str, Any]:
    return {
        # `reset` also covers a try abandoned by per_try_idle_timeout (the router resets it and retries when
        # retry_on has reset, 5xx or gateway-error)
        "retry_on": "connect-failure,refused-stream,reset,retriable-status-codes",
        "retriable_status_codes": retriable_status_codes([model]),
        "num_retries": cfg.gateway.retries.attempts,
        "per_try_idle_timeout": _seconds(model.try_idle_timeout_seconds),
        "retry_host_predicate": [{
            "name": "envoy.retry_host_predicates.previous_hosts",
            "typed_config": {"@type": _T + "extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"},
        }],
        "host_selection_retry_max_attempts": failures.LEAST_REQUEST_HOST_DRAWS,
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
    if model.session_affinity_balance_factor is not None:
        action["hash_policy"] = affinity.hash_policy()
        action["retry_policy"] = affinity.retry_policy(action["retry_policy"])
    if rewrite:  # /models/<workload>/v1/... -> /v1/...
        action["regex_rewrite"] = {"pattern": {"regex": f"^{ROUTE_PREFIX}[^/]+/"}, "substitution": "/"}
    hashes = affinity.route_metadata() if model.session_affinity_balance_factor is not None else {}
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
                                                                  PRIORITY_DESCRIPTOR: model.priority,
                                                                  **hashes}}}}


def _header(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "string_match": {"exact": value, "ignore_case": True}}


def _body_model(value: str) -> dict[str, Any]:
    return {"filter": METADATA_NAMESPACE, "path": [{"key": BODY_MODEL_KEY}],
            "value": {"string_match": {"exact": value}}}


def _unstreamed(route: dict[str, Any], model: Model) -> dict[str, Any]:
    """The route for the same requests when their body does not ask to stream.

    A non-streamed answer says nothing until the whole generation is done, so the per-try idle timeout
    would cut healthy long generations: such a try may stay silent up to the model's timeoutSeconds (a hung
    replica is then taken out by its failing health checks and by outlier detection). Only a POST whose JSON
    body says `"stream": true` keeps `tryIdleTimeoutSeconds`, as do bodyless requests: a POST whose body the
    gateway did not parse (a content type json_to_metadata does not take, such as `text/plain`) is treated as
    non-streamed, so a healthy generation is never cut and retried three times into a 504."""
    out = copy.deepcopy(route)
    out["name"] = route_name(route["name"], "unstreamed")
    # only a POST carries a generation request (a bodyless GET with a JSON content type also "lacks" stream)
    out["match"]["headers"] = [*route["match"].get("headers", []),
                               {"name": ":method", "string_match": {"exact": "POST"}}]
    # not (stream == true): also matches when no metadata was set (envoy.type.matcher.v3.MetadataMatcher.invert)
    out["match"]["dynamic_metadata"] = [*route["match"].get("dynamic_metadata", []), {
        "filter": METADATA_NAMESPACE, "path": [{"key": BODY_STREAM_KEY}],
        "value": {"bool_match": True}, "invert": True}]
    out["route"]["retry_policy"]["per_try_idle_timeout"] = _seconds(model.timeout_seconds)
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
        pairs = [(f"{w.name}.batch", w.batch, batch)] if w.batch is not None else []
        pairs.append((w.name, w.default, []))
        path_prefix = f"{ROUTE_PREFIX}(?i:{re.escape(w.name)})"
        for name, model, extra in pairs:
            group = (_route(cfg, name, {
                **_regex(_api_regex(model, f"(?:{ROUTE_PREFIX}[^/]+)?")),
                "headers": [_header(MODEL_HEADER, w.name), *extra]}, model, rewrite=True),
                _route(cfg, route_name(name, "path"), {**_regex(_api_regex(model, path_prefix)), "headers": extra},
                       model, rewrite=True),
                _route(cfg, route_name(name, "body"), {**_regex(_api_regex(model, "")), "headers": extra,
                                                       "dynamic_metadata": [_body_model(w.name)]},
                       model, rewrite=False))
            ds = decisions(cfg, w) if model is w.default else []
            for out_list, r in zip((by_header, by_path, by_body), group, strict=True):
                if not ds:
                    model_of[r["name"]] = model
                    out_list.append(r)
                for d in ds:  # the variant's own limits (timeouts, body size) on its decision's route
                    dr = decision_route(_route(cfg, r["name"], copy.deepcopy(r["match"]), d.chosen,
                                                rewrite=r["name"] != route_name(name, "body")), w, d)
                    model_of[dr["name"]] = d.chosen
                    out_list.append(dr)
    routed_variants = variant_models(cfg)
    for m in sorted(cfg.models.values(), key=lambda m: m.name):  # a model's own key in the body names it
        if m.name != m.workload:
            own = route_name(m.name, "key-body")
            r = _route(cfg, own, {**_regex(_api_regex(m, "")), "dynamic_metadata": [_body_model(m.name)]}, m,
                       rewrite=False)
            by_body.append(direct_route(r, m) if m in routed_variants else r)  # a variant: then its last resort
            model_of[own] = m
    for r in by_path + by_body:
        if not r["match"].get("headers", True):
            del r["match"]["headers"]
    # each model route after its 413 and non-streamed twins; a body-routed request names its model only once its
    # body is read, so past the largest limit of any model it gets its 413 from its headers, before the body
    twins = [[x for r in routes_ for x in (too_large(r, model_of[r["name"]]), _unstreamed(r, model_of[r["name"]]), r)]
             for routes_ in ((*by_header, *by_path), by_body)]
    with_twins = [*twins[0], too_large_for_any(cfg), *twins[1]]
    known = ", ".join(w.name for w in ws) or "(none)"
    apis = sorted({a for tasks in OPENAI_APIS.values() for apis_ in tasks.values() for a in apis_})
    unknown = (f"unknown model: name one in header {MODEL_HEADER}, path {ROUTE_PREFIX}<model>/v1/... or the body's "
               f"\"model\", on a path its engine serves; models: {known}\n")
    return [*refused_methods(), *with_twins,
            not_found(f"{REFUSAL_ROUTE_PREFIX}unknown-model",
                       {**_regex(f"^(?:{ROUTE_PREFIX}[^/]+)?/(?:{'|'.join(apis)})$")}, unknown),
            not_found(f"{REFUSAL_ROUTE_PREFIX}not-served", {"prefix": "/"},
                       f"not served: the gateway routes only /{{{', '.join(apis).replace('[^/]+', '<name>')}}} "
                       f"(optionally under {ROUTE_PREFIX}<model>)\n", at_once=True)]


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
        "@type": _T + "extensions.filters.http.buffer.v3.Buffer", "max_request_bytes": max_body(cfg)}}
    sessions = affinity.any_affinity(cfg.models.values())
    body_model = {"name": "envoy.filters.http.json_to_metadata", "typed_config": {
        "@type": _T + "extensions.filters.http.json_to_metadata.v3.JsonToMetadata",
        "request_rules": {"rules": [
            {"selectors": [{"key": BODY_MODEL_KEY}],
             "on_present": {"metadata_namespace": METADATA_NAMESPACE, "key": BODY_MODEL_KEY, "type": "STRING"}},
            {"selectors": [{"key": BODY_STREAM_KEY}],
             "on_present": {"metadata_namespace": METADATA_NAMESPACE, "key": BODY_STREAM_KEY,
                            "type": "PROTOBUF_VALUE"},  # a JSON boolean stays a boolean
             "on_missing": {"metadata_namespace": METADATA_NAMESPACE, "key": BODY_STREAM_KEY, "value": False}},
            *([affinity.prompt_cache_key_rule()] if sessions else []),
        ],
            # compared exactly (the default is application/json alone): what OpenAI SDKs and other clients send
            "allow_content_types": list(JSON_CONTENT_TYPES),
            "allow_empty_content_type": True}}}
    body_limit = {"name": BODY_LIMIT_FILTER, "typed_config": {
        "@type": _T + "extensions.filters.http.buffer.v3.Buffer", "max_request_bytes": max_body(cfg)}}
    rbac = {"name": RBAC_FILTER, "typed_config": {
        "@type": _T + "extensions.filters.http.rbac.v3.RBAC"}}  # no base rules: each model route brings its own
    out = [strip]
    if cfg.gateway.auth.issuers:
        out.append(jwt_filter(cfg))
        if issuer_tenants_restricted(cfg):
            out.append(issuer_tenants_filter(cfg))
    return [*out, callers, refusals, buffer, body_model, *(affinity.session_filters() if sessions else []),
            body_limit, rbac, rate_limit_filter(cfg), *budget_filters(cfg), failures.failed_twice_filter()]



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
    hcm = _hcm(GATEWAY_STAT_PREFIX, {"name": "models", "virtual_hosts": [vhost]}, http_filters(cfg),
               generate_request_id=True,
               use_remote_address=True,
               # slow clients: headers, then the whole request, must arrive in time (408); idle streams and
               # connections are closed
               request_headers_timeout=_seconds(gw.request_headers_timeout_seconds),
               request_timeout=_seconds(gw.request_timeout_seconds),
               stream_idle_timeout=_seconds(gw.stream_idle_timeout_seconds),
               drain_timeout=_seconds(CLIENT_DRAIN_SECONDS),
               common_http_protocol_options={"idle_timeout": _seconds(gw.idle_timeout_seconds),
                                             "max_connection_duration": _seconds(CLIENT_CONNECTION_MAX_SECONDS),
                                             # x_model would otherwise reach the engine beside x-model (400)
                                             "headers_with_underscores_action": "REJECT_REQUEST"},
               local_reply_config=local_replies(),
               # /models/a/../b/ is /models/b/ before any route or policy sees it
               normalize_path=True,
               merge_slashes=True,
               path_with_escaped_slashes_action="REJECT_REQUEST",
               access_log=access_log(),
               tracing=tracing(cfg))
    return {"name": "gateway", "address": _address("0.0.0.0", naming.ENVOY_LISTENER_PORT),
            "socket_options": client_keepalive(), "filter_chains": [{"filters": [hcm]}]}



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
        # the static layer: RE2's program-size ceiling for the session-key check (components.k8s.gateway.envoy.affinity,
        # MAX_SESSION_KEY_CHARS; Envoy refuses a regex past 100 by default: envoyproxy/envoy@v1.40.0
        # source/common/common/regex.cc, re2.max_program_size.error_level) and the tracer's spans per export
        # (observability.SPANS_PER_EXPORT)
        "layered_runtime": {"layers": [
            {"name": "static", "static_layer": {"re2.max_program_size.error_level": affinity.RE2_PROGRAM_SIZE,
                                                **tracing_runtime()}},
            {"name": "admin", "admin_layer": {}}]},
        # internal listeners (the variants' overflow gates), whose stats nothing reads; none without variants
        **({"bootstrap_extensions": [{"name": "envoy.bootstrap.internal_listener", "typed_config": {
            "@type": _T + "extensions.bootstrap.internal_listener.v3.InternalListener"}}],
            "stats_config": gate_stats_excluded()} if variant_models(cfg) else {}),
        "static_resources": {
            "listeners": [gateway_listener(cfg), stats_listener(),
                          *(gate for m in variant_models(cfg)
                            for gate in gate_listeners(cfg, m, retry_policy=_retry_policy(cfg, m)))],
            "clusters": [*(model_cluster(cfg, m) for m in models), *variant_clusters(cfg),
                         collector_cluster(cfg),
                         *jwks, admin_cluster(), *budget_clusters(cfg)],
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
            # at 95% new requests are refused with 503; the gateway stays up for everyone else's streams.
            # GatewayOverloaded (dashboards/gateway_alerts.py) reads the action's and the heap's gauges.
            "actions": [
                {"name": "envoy.overload_actions.reset_high_memory_stream",
                 "triggers": [{"name": "envoy.resource_monitors.fixed_heap",
                               "scaled": {"scaling_threshold": ENVOY.RESET_STREAMS_FROM,
                                          "saturation_threshold": ENVOY.STOP_ACCEPTING_AT}}]},
                {"name": "envoy.overload_actions.stop_accepting_requests",
                 "triggers": [{"name": "envoy.resource_monitors.fixed_heap",
                               "threshold": {"value": ENVOY.STOP_ACCEPTING_AT}}]}],
            "buffer_factory_config": {"minimum_account_to_track_power_of_two": TRACKED_STREAM_BUFFER_POWER_OF_TWO},
        },
    }


def render(cfg: GatewayView) -> str:
    """The bootstrap as YAML: the gateway's ConfigMap and synth's envoy/envoy.yaml hold these bytes."""
    return dump_yaml(bootstrap(cfg))

