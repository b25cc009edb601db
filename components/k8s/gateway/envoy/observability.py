"""What the gateway tells about itself: JSON access logs on stdout, spans to the OpenTelemetry Collector over OTLP
gRPC, and a stats listener that exposes just /stats/prometheus and /ready of the admin interface (which listens on
127.0.0.1 only)."""

from __future__ import annotations

from typing import Any

from components.k8s import naming
from components.k8s.gateway.budgets import names as budget_names
from components.k8s.gateway.envoy import affinity as affinity
from components.k8s.gateway.envoy.base import (
    _T,
    ADMIN_CLUSTER,
    BODY_MODEL_KEY,
    BODY_STREAM_KEY,
    COLLECTOR_CLUSTER,
    METADATA_NAMESPACE,
    ROUTE_DECISION_HEADER,
    SERVICE_NAME,
    TENANT_HEADER,
    VARIANT_HEADER,
    GatewayView,
    _address,
    _dns_cluster,
    _hcm,
    collector_host,
)

__all__ = [
    "GATEWAY_TRACE_PERCENT",
    "SPANS_PER_EXPORT",
    "tracing_runtime",
    "access_log",
    "tracing",
    "stats_listener",
    "collector_cluster",
    "admin_cluster",
]


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
    # why a model's 500 ended the request (components.k8s.gateway.envoy.failures): failed-on-two-replicas (a 500,
    # poison request or outage) or engine-says-request (a 422)
    "fault": "%RESP(X-AIFACTORY-FAULT)%",
    "bytes_received": "%BYTES_RECEIVED%",
    "bytes_sent": "%BYTES_SENT%",
    "duration_ms": "%DURATION%",
    "upstream_service_time_ms": "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%",
    "upstream_cluster": "%UPSTREAM_CLUSTER%",
    "upstream_host": "%UPSTREAM_HOST%",
    "attempts": "%UPSTREAM_REQUEST_ATTEMPT_COUNT%",
    # session affinity (components.k8s.gateway.envoy.affinity): where the key came from and what picked the replica
    "session_source": affinity.SESSION_SOURCE_LOG,
    "session_lb": affinity.SESSION_LB_LOG,
    # a workload with variants (components.k8s.gateway.envoy.variants): the decision and the variant that served
    "route_decision": f"%RESP({ROUTE_DECISION_HEADER.upper()})%",
    "variant": f"%RESP({VARIANT_HEADER.upper()})%",
    # token budgets (components.k8s.gateway.envoy.budgets): the budget that refused the request
    # (<scope>:<name>:<window>, or store:<scope>:<name> when the store could not answer), and what it reserved
    "budget_refused": f"%DYNAMIC_METADATA({budget_names.METADATA_NAMESPACE}:refused)%",
    "budget_reserved": f"%DYNAMIC_METADATA({budget_names.METADATA_NAMESPACE}:reserved)%",
    "downstream": "%DOWNSTREAM_REMOTE_ADDRESS%",
}


def access_log() -> list[dict[str, Any]]:
    """The connection manager's access log: one JSON object per request on stdout."""
    return [{"name": "envoy.access_loggers.stdout", "typed_config": {
        "@type": _T + "extensions.access_loggers.stream.v3.StdoutAccessLog",
        "log_format": {"json_format": _ACCESS_LOG_FORMAT}}}]


# The gateway starts a trace for every request; traceSampleRatio is applied once, by the Collector's
# probabilistic_sampler after its spanmetrics connector has counted every span (components.k8s.otel_config), and
# by trace id, so the gateway's, the sidecars' and the engine's spans of one request are kept or dropped together.
# Sampling here as well would keep ratio² of the traces and make the spanmetrics RED figures a sample.
GATEWAY_TRACE_PERCENT = 100.0
# ... including a request whose traceparent says "not sampled" (flags 00): a meshed caller's sidecar sends that for
# all but the mesh's sampling percentage of an uninstrumented client's requests. Without a sampler, Envoy's
# OpenTelemetry tracer keeps the parent's flag, exports no span and passes 00 on, so the engine exports none either;
# the always_on sampler decides instead, and the gateway's span and the engine's join the caller's trace id
# (envoyproxy/envoy@v1.40.0:source/extensions/tracers/opentelemetry/tracer.cc Tracer::startSpan,
# samplers/always_on/). Pinned live by tests/artifacts/test_engine_traces.py.
GATEWAY_SAMPLER = "envoy.tracers.opentelemetry.samplers.always_on"


# Spans per export: each worker's OpenTelemetry tracer buffers finished spans and sends them to the Collector in one
# gRPC call once it holds this many, or when its flush timer fires (runtime tracing.opentelemetry.flush_interval_ms,
# 5 s), whichever comes first (envoyproxy/envoy@v1.40.0:source/extensions/tracers/opentelemetry/tracer.cc,
# Tracer::sendSpan, flushSpans). Envoy's default, 5, makes one export call per 5 requests on each worker, in the worker
# that finishes the fifth: measured with `make bench` (bench_gateway, docs/benchmarks.md), the gateway spent 280 µs of
# CPU per authenticated GET, 70 µs of them on those calls; with 256 the calls cost a few µs per request. At low traffic
# nothing changes (the timer sends what is buffered every 5 s). A span of the gateway's is about 540 bytes on the wire
# (measured: 512 spans, 277,644 bytes to the Collector), so an export of 256 is about 140 KB, far below the 4 MiB that
# the Collector's OTLP gRPC receiver takes unless max_recv_msg_size_mib says otherwise (grpc/grpc-go server.go,
# defaultServerMaxReceiveMessageSize).
SPANS_PER_EXPORT = 256
MIN_FLUSH_SPANS_KEY = "tracing.opentelemetry.min_flush_spans"


def tracing_runtime() -> dict[str, int]:
    """What the tracer reads from the bootstrap's static runtime layer: SPANS_PER_EXPORT."""
    return {MIN_FLUSH_SPANS_KEY: SPANS_PER_EXPORT}


def tracing(cfg: GatewayView) -> dict[str, Any]:
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
                "sampler": {"name": GATEWAY_SAMPLER, "typed_config": {
                    "@type": _T + "extensions.tracers.opentelemetry.samplers.v3.AlwaysOnSamplerConfig"}},
            },
        },
    }


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


def admin_cluster() -> dict[str, Any]:
    return {"name": ADMIN_CLUSTER, "type": "STATIC", "connect_timeout": "1s",
            "load_assignment": {"cluster_name": ADMIN_CLUSTER, "endpoints": [{"lb_endpoints": [
                {"endpoint": {"address": _address("127.0.0.1", naming.ENVOY_ADMIN_PORT)}}]}]}}
