"""The Envoy inference gateway's bootstrap, built from PlatformConfig by pure functions.

One cluster per model (its headless Service: Envoy sees every replica, balances by LEAST_REQUEST and
ejects bad replicas by outlier detection). Routes, per API model ("workload"):

    x-model: <workload>               -> the workload's interactive model (or its only model)
    x-model: <workload> + x-priority: batch -> the workload's batch model, when it declares one
    /models/<workload>/...            -> the same, with the prefix rewritten to /
    anything else                     -> 404 naming the models

Retries on connect-failure, reset and 503 go to another replica, bounded by a retry budget; the route
timeout is the model's `timeoutSeconds`; each tenant's requests share one token bucket
(`tenants.X.rateLimit`, per gateway replica) and get 429 past it. Access logs are JSON on stdout with
the request id and upstream timing; traces go to the OpenTelemetry Collector over OTLP gRPC. The admin
interface listens on 127.0.0.1 only; a separate stats listener exposes just /stats/prometheus and
/ready to Prometheus and the kubelet.

`rebind()` points a built bootstrap at other addresses (tests, local runs against port-forwards).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components.k8s import naming
from infra.artifacts import dump_yaml
from infra.config import Model, PlatformConfig

__all__ = [
    "MODEL_HEADER",
    "PRIORITY_HEADER",
    "TENANT_DESCRIPTOR",
    "ROUTE_PREFIX",
    "METADATA_NAMESPACE",
    "COLLECTOR_CLUSTER",
    "ADMIN_CLUSTER",
    "DEFAULT_UNROUTED_RPS",
    "DEFAULT_DNS_REFRESH_SECONDS",
    "DEFAULT_MIN_RETRY_CONCURRENCY",
    "DEFAULT_MAX_DOWNSTREAM_CONNECTIONS",
    "Workload",
    "workloads",
    "model_host",
    "collector_host",
    "model_cluster",
    "collector_cluster",
    "admin_cluster",
    "routes",
    "rate_limit_filter",
    "gateway_listener",
    "stats_listener",
    "bootstrap",
    "render",
    "rebind",
]

MODEL_HEADER = "x-model"
PRIORITY_HEADER = "x-priority"
TENANT_DESCRIPTOR = "tenant"
ROUTE_PREFIX = "/models/"
METADATA_NAMESPACE = "aifactory"  # route metadata: {aifactory: {tenant: <name>}}
COLLECTOR_CLUSTER = "otel_collector"
ADMIN_CLUSTER = "envoy_admin"
DEFAULT_UNROUTED_RPS = 100  # requests/s (per replica) for requests that match no model: 404s, scans
# Retries in flight allowed whatever the budget says (Envoy's default is 3): a replica that dies with a
# dozen requests in flight gets them all retried before outlier detection ejects it.
DEFAULT_MIN_RETRY_CONCURRENCY = 16
DEFAULT_DNS_REFRESH_SECONDS = 5  # how soon new replicas behind a headless Service take traffic
DEFAULT_MAX_DOWNSTREAM_CONNECTIONS = 50000  # per replica: past it Envoy refuses connections, not memory
SERVICE_NAME = naming.GATEWAY_APP  # service.name of the gateway's spans

_T = "type.googleapis.com/envoy."
_ALL = {"numerator": 100, "denominator": "HUNDRED"}
_ACCESS_LOG_FORMAT = {
    "start_time": "%START_TIME%",
    "request_id": "%REQ(X-REQUEST-ID)%",
    "trace_id": "%TRACE_ID%",
    "method": "%REQ(:METHOD)%",
    "path": "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%",
    "model": "%REQ(X-MODEL)%",
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
    default: Model  # the interactive model, or the only model
    batch: Model | None  # set when the workload declares both priorities


def workloads(cfg: PlatformConfig) -> list[Workload]:
    """The config's models grouped into API models, sorted by name."""
    groups: dict[str, dict[str, Model]] = {}
    for m in cfg.models.values():
        groups.setdefault(m.workload, {})[m.priority] = m
    out = []
    for name in sorted(groups):
        g = groups[name]
        if "interactive" in g:
            out.append(Workload(name, g["interactive"], g.get("batch")))
        else:  # a batch-only workload: every request goes to its batch model
            out.append(Workload(name, g["batch"], None))
    return out


def model_host(cfg: PlatformConfig, model: Model) -> str:
    """DNS name of the model's headless Service."""
    return f"{model.name}.{cfg.tenant_of(model).namespace}.svc.cluster.local"


def collector_host(cfg: PlatformConfig) -> str:
    return f"{naming.OTEL_COLLECTOR_SERVICE}.{cfg.observability.namespace}.svc.cluster.local"


def _seconds(value: float) -> str:
    return f"{value:.3f}s".replace(".000s", "s")


def _address(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def _dns_cluster(name: str, host: str, port: int, *, connect_timeout: float) -> dict[str, Any]:
    return {
        "name": name,
        "type": "STRICT_DNS",
        "dns_lookup_family": "V4_ONLY",
        "dns_refresh_rate": _seconds(DEFAULT_DNS_REFRESH_SECONDS),
        "connect_timeout": _seconds(connect_timeout),
        "load_assignment": {"cluster_name": name,
                            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _address(host, port)}}]}]},
    }


def model_cluster(cfg: PlatformConfig, model: Model) -> dict[str, Any]:
    gw = cfg.gateway
    cb, od = gw.circuit_breakers, gw.outlier_detection
    return {
        **_dns_cluster(model.name, model_host(cfg, model), naming.MODEL_HTTP_PORT,
                       connect_timeout=gw.connect_timeout_seconds),
        "lb_policy": "LEAST_REQUEST",
        "circuit_breakers": {"thresholds": [{
            "priority": "DEFAULT",
            "max_connections": cb.max_connections,
            "max_pending_requests": cb.max_pending_requests,
            "max_requests": cb.max_requests,
            "retry_budget": {"budget_percent": {"value": gw.retries.budget_percent},
                             "min_retry_concurrency": DEFAULT_MIN_RETRY_CONCURRENCY},
        }]},
        "outlier_detection": {
            "consecutive_5xx": od.consecutive_5xx,
            "interval": _seconds(od.interval_seconds),
            "base_ejection_time": _seconds(od.base_ejection_seconds),
            "max_ejection_percent": od.max_ejection_percent,
        },
    }


def _retry_policy(cfg: PlatformConfig) -> dict[str, Any]:
    return {
        "retry_on": "connect-failure,reset,retriable-status-codes",
        "retriable_status_codes": [503],
        "num_retries": cfg.gateway.retries.attempts,
        "retry_host_predicate": [{
            "name": "envoy.retry_host_predicates.previous_hosts",
            "typed_config": {"@type": _T + "extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"},
        }],
        "host_selection_retry_max_attempts": 3,
    }


def _route(cfg: PlatformConfig, name: str, match: dict[str, Any], model: Model, *, rewrite: bool
           ) -> dict[str, Any]:
    action: dict[str, Any] = {
        "cluster": model.name,
        "timeout": _seconds(model.timeout_seconds),
        "retry_policy": _retry_policy(cfg),
    }
    if rewrite:
        action["prefix_rewrite"] = "/"
    return {"name": name, "match": match, "route": action,
            "metadata": {"filter_metadata": {METADATA_NAMESPACE: {TENANT_DESCRIPTOR: model.tenant}}}}


def _header(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "string_match": {"exact": value}}


def routes(cfg: PlatformConfig) -> list[dict[str, Any]]:
    """Per workload: batch (header), default (header), batch (prefix), default (prefix); then a 404."""
    out = []
    for w in workloads(cfg):
        prefix = f"{ROUTE_PREFIX}{w.name}/"
        by_header = [_header(MODEL_HEADER, w.name)]
        batch = [_header(PRIORITY_HEADER, "batch")]
        if w.batch is not None:
            out.append(_route(cfg, f"{w.name}-batch", {"prefix": "/", "headers": by_header + batch}, w.batch,
                              rewrite=False))
        out.append(_route(cfg, w.name, {"prefix": "/", "headers": by_header}, w.default, rewrite=False))
        if w.batch is not None:
            out.append(_route(cfg, f"{w.name}-batch-path", {"prefix": prefix, "headers": batch}, w.batch,
                              rewrite=True))
        out.append(_route(cfg, f"{w.name}-path", {"prefix": prefix}, w.default, rewrite=True))
    known = ", ".join(w.name for w in workloads(cfg)) or "(none)"
    out.append({"name": "unknown-model", "match": {"prefix": "/"},
                "direct_response": {"status": 404, "body": {
                    "inline_string": f"unknown model: send header {MODEL_HEADER} or path {ROUTE_PREFIX}<model>/ "
                                     f"with one of: {known}\n"}}})
    return out


def _token_bucket(per_second: int, burst: int) -> dict[str, Any]:
    return {"max_tokens": burst, "tokens_per_fill": per_second, "fill_interval": "1s"}


def rate_limit_filter(cfg: PlatformConfig) -> dict[str, Any]:
    """One token bucket per tenant (descriptor tenant=<name>), shared by all of the tenant's routes."""
    tenants = sorted({m.tenant for m in cfg.models.values()})
    return {
        "name": "envoy.filters.http.local_ratelimit",
        "typed_config": {
            "@type": _T + "extensions.filters.http.local_ratelimit.v3.LocalRateLimit",
            "stat_prefix": "tenant_rate_limit",
            "token_bucket": _token_bucket(DEFAULT_UNROUTED_RPS, DEFAULT_UNROUTED_RPS),
            "filter_enabled": {"runtime_key": "tenant_rate_limit_enabled", "default_value": _ALL},
            "filter_enforced": {"runtime_key": "tenant_rate_limit_enforced", "default_value": _ALL},
            "always_consume_default_token_bucket": False,
            # the route's tenant (route metadata) selects the descriptor, hence the bucket
            "rate_limits": [{"actions": [{"metadata": {
                "descriptor_key": TENANT_DESCRIPTOR, "source": "ROUTE_ENTRY",
                "metadata_key": {"key": METADATA_NAMESPACE, "path": [{"key": TENANT_DESCRIPTOR}]}}}]}],
            "enable_x_ratelimit_headers": "DRAFT_VERSION_03",
            "descriptors": [
                {"entries": [{"key": TENANT_DESCRIPTOR, "value": t}],
                 "token_bucket": _token_bucket(cfg.tenants[t].rate_limit.requests_per_second,
                                               cfg.tenants[t].rate_limit.burst)}
                for t in tenants
            ],
        },
    }


def _tracing(cfg: PlatformConfig) -> dict[str, Any]:
    return {
        "random_sampling": {"value": round(cfg.observability.trace_sample_ratio * 100, 4)},
        "provider": {
            "name": "envoy.tracers.opentelemetry",
            "typed_config": {
                "@type": _T + "config.trace.v3.OpenTelemetryConfig",
                "grpc_service": {"envoy_grpc": {"cluster_name": COLLECTOR_CLUSTER}, "timeout": "0.250s"},
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


def gateway_listener(cfg: PlatformConfig) -> dict[str, Any]:
    route_config = {"name": "models", "virtual_hosts": [{"name": "models", "domains": ["*"],
                                                          "routes": routes(cfg)}]}
    hcm = _hcm("gateway", route_config, [rate_limit_filter(cfg)],
               generate_request_id=True,
               use_remote_address=True,
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


def collector_cluster(cfg: PlatformConfig) -> dict[str, Any]:
    return {
        **_dns_cluster(COLLECTOR_CLUSTER, collector_host(cfg), naming.OTEL_GRPC_PORT,
                       connect_timeout=cfg.gateway.connect_timeout_seconds),
        "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": _T + "extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}}}},
    }


def admin_cluster() -> dict[str, Any]:
    return {"name": ADMIN_CLUSTER, "type": "STATIC", "connect_timeout": "1s",
            "load_assignment": {"cluster_name": ADMIN_CLUSTER, "endpoints": [{"lb_endpoints": [
                {"endpoint": {"address": _address("127.0.0.1", naming.ENVOY_ADMIN_PORT)}}]}]}}


def bootstrap(cfg: PlatformConfig) -> dict[str, Any]:
    """The complete Envoy bootstrap for the stack (deterministic: models and tenants in sorted order)."""
    models = [cfg.models[n] for n in sorted(cfg.models)]
    return {
        "node": {"id": naming.GATEWAY_APP, "cluster": naming.GATEWAY_APP},
        "admin": {"address": _address("127.0.0.1", naming.ENVOY_ADMIN_PORT)},
        "static_resources": {
            "listeners": [gateway_listener(cfg), stats_listener()],
            "clusters": [*(model_cluster(cfg, m) for m in models), collector_cluster(cfg), admin_cluster()],
        },
        "overload_manager": {"resource_monitors": [{
            "name": "envoy.resource_monitors.global_downstream_max_connections",
            "typed_config": {
                "@type": _T + "extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig",
                "max_active_downstream_connections": DEFAULT_MAX_DOWNSTREAM_CONNECTIONS}}]},
    }


def render(cfg: PlatformConfig) -> str:
    """The bootstrap as YAML: the gateway's ConfigMap and synth's envoy/envoy.yaml hold these bytes."""
    return dump_yaml(bootstrap(cfg))


def rebind(config: Mapping[str, Any], *, listener_port: int, stats_port: int, admin_port: int,
           endpoints: Mapping[str, Sequence[tuple[str, int]]]) -> dict[str, Any]:
    """A copy of `config` listening on 127.0.0.1 ports, each DNS cluster replaced by static endpoints.

    `endpoints` maps every STRICT_DNS cluster name to the (address, port) pairs to use instead.
    """
    out = copy.deepcopy(dict(config))
    ports = {"gateway": listener_port, "stats": stats_port}
    for listener in out["static_resources"]["listeners"]:
        listener["address"] = _address("127.0.0.1", ports[listener["name"]])
    out["admin"]["address"] = _address("127.0.0.1", admin_port)
    dns = [c for c in out["static_resources"]["clusters"] if c["type"] == "STRICT_DNS"]
    missing = sorted({c["name"] for c in dns} - set(endpoints))
    if missing:
        raise ValueError(f"rebind: no endpoints for cluster(s) {', '.join(missing)}")
    for c in out["static_resources"]["clusters"]:
        if c["name"] == ADMIN_CLUSTER:
            c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"] = \
                _address("127.0.0.1", admin_port)
        elif c["type"] == "STRICT_DNS":
            c["type"] = "STATIC"
            for key in ("dns_lookup_family", "dns_refresh_rate"):
                c.pop(key)
            c["load_assignment"]["endpoints"] = [{"lb_endpoints": [
                {"endpoint": {"address": _address(host, port)}} for host, port in endpoints[c["name"]]]}]
    return out
