"""The OpenTelemetry Collector (gateway deployment) configuration, built from the stack config.

    traces  : otlp -> memory_limiter, k8sattributes, batch -> spanmetrics, otlp/jaeger
    metrics : otlp, spanmetrics -> memory_limiter, k8sattributes, batch -> prometheus (scraped)
    logs    : otlp -> memory_limiter, k8sattributes, batch -> otlphttp/loki

The spanmetrics connector sees every span. With `observability.traceSampleRatio` below 1 the traces
take two pipelines from the same receiver: one feeds spanmetrics unsampled, the other samples
(probabilistic_sampler) before Jaeger, so RED metrics stay exact while trace storage shrinks.
Resource attributes stay off the Prometheus series (resource_to_telemetry_conversion off): they reach
Prometheus once per target as `target_info`, so they neither overwrite a datapoint's own labels (the
kit's `tenant`) nor multiply every series' cardinality. Pod labels the k8sattributes processor copies
are named as the semantic conventions name them (`k8s.pod.label.aifactory.io/tenant`), never as bare
`tenant`/`model` that would collide with datapoint attributes in traces and logs.
The result is what the Collector runs (its ConfigMap) and what synth writes to otel/collector.yaml.
"""

from __future__ import annotations

from typing import Any, Protocol

from components.k8s import naming
from telemetry.names import STEP_BUCKETS_S

__all__ = [
    "OTLP_HTTP_PORT",
    "PROMETHEUS_EXPORTER_PORT",
    "HEALTH_PORT",
    "JAEGER_SERVICE",
    "LOKI_GATEWAY_SERVICE",
    "SPANMETRICS_DIMENSIONS",
    "POD_LABEL_ATTRIBUTE_PREFIX",
    "pod_label_attribute",
    "service_host",
    "CollectorView",
    "collector_config",
]

OTLP_HTTP_PORT = 4318
PROMETHEUS_EXPORTER_PORT = 8889
HEALTH_PORT = 13133
JAEGER_SERVICE = "jaeger"  # the Jaeger chart's one Service, OTLP and UI (4.x after 4.0; fullnameOverride: jaeger)
LOKI_GATEWAY_SERVICE = "loki-gateway"  # the Loki chart's gateway (fullnameOverride: loki)
SPANMETRICS_DIMENSIONS = ("gen_ai.operation.name", "gen_ai.request.model", "k8s.namespace.name")
POD_ASSOCIATION = [
    {"sources": [{"from": "resource_attribute", "name": "k8s.pod.ip"}]},
    {"sources": [{"from": "resource_attribute", "name": "k8s.pod.uid"}]},
    {"sources": [{"from": "connection"}]},
]
POD_LABEL_ATTRIBUTE_PREFIX = "k8s.pod.label."
LISTEN = "${env:MY_POD_IP}"  # the chart sets MY_POD_IP; listening on the pod IP only, not 0.0.0.0


class _CollectorSettingsView(Protocol):
    @property
    def namespace(self) -> str: ...  # where the Collector, Jaeger and Loki run

    @property
    def trace_sample_ratio(self) -> float: ...


class CollectorView(Protocol):
    """What the Collector's configuration reads: the Observability component's spec or the kit's PlatformConfig."""

    @property
    def observability(self) -> _CollectorSettingsView: ...


def pod_label_attribute(key: str) -> str:
    """The resource attribute a pod label becomes (semantic conventions: `k8s.pod.label.<key>`)."""
    return f"{POD_LABEL_ATTRIBUTE_PREFIX}{key}"


def service_host(service: str, namespace: str) -> str:
    return f"{service}.{namespace}.svc.cluster.local"


def _processors(cfg: CollectorView) -> dict[str, Any]:
    processors: dict[str, Any] = {
        "memory_limiter": {"check_interval": "1s", "limit_percentage": 80, "spike_limit_percentage": 20},
        "k8sattributes": {
            "auth_type": "serviceAccount",
            "passthrough": False,
            "extract": {
                "metadata": ["k8s.namespace.name", "k8s.pod.name", "k8s.pod.uid", "k8s.node.name",
                             "k8s.deployment.name", "k8s.statefulset.name"],
                "labels": [{"tag_name": pod_label_attribute(key), "key": key, "from": "pod"}
                           for key in (naming.LABEL_TENANT, naming.LABEL_MODEL)],
            },
            "pod_association": POD_ASSOCIATION,
        },
        "batch": {"send_batch_size": 8192, "timeout": "5s"},
    }
    if cfg.observability.trace_sample_ratio < 1:
        processors["probabilistic_sampler"] = {"sampling_percentage": round(cfg.observability.trace_sample_ratio
                                                                             * 100, 6)}
    return processors


def _pipelines(cfg: CollectorView) -> dict[str, Any]:
    common = ["memory_limiter", "k8sattributes", "batch"]
    if cfg.observability.trace_sample_ratio < 1:
        traces = {
            "traces/spanmetrics": {"receivers": ["otlp"], "processors": common, "exporters": ["spanmetrics"]},
            "traces/sampled": {"receivers": ["otlp"],
                               "processors": ["memory_limiter", "k8sattributes", "probabilistic_sampler", "batch"],
                               "exporters": ["otlp/jaeger"]},
        }
    else:
        traces = {"traces": {"receivers": ["otlp"], "processors": common,
                             "exporters": ["spanmetrics", "otlp/jaeger"]}}
    return {
        **traces,
        "metrics": {"receivers": ["otlp", "spanmetrics"], "processors": common, "exporters": ["prometheus"]},
        "logs": {"receivers": ["otlp"], "processors": common, "exporters": ["otlphttp/loki"]},
    }


def collector_config(cfg: CollectorView) -> dict[str, Any]:
    """The Collector configuration (what `otelcol --config` reads)."""
    ns = cfg.observability.namespace
    return {
        "extensions": {"health_check": {"endpoint": f"{LISTEN}:{HEALTH_PORT}"}},
        "receivers": {"otlp": {"protocols": {
            "grpc": {"endpoint": f"{LISTEN}:{naming.OTEL_GRPC_PORT}"},
            "http": {"endpoint": f"{LISTEN}:{OTLP_HTTP_PORT}"},
        }}},
        "processors": _processors(cfg),
        "connectors": {"spanmetrics": {
            "histogram": {"unit": "ms", "explicit": {"buckets": [f"{round(b * 1000, 3):g}ms" for b in STEP_BUCKETS_S]}},
            "dimensions": [{"name": d} for d in SPANMETRICS_DIMENSIONS],
            "metrics_flush_interval": "15s",
        }},
        "exporters": {
            "otlp/jaeger": {"endpoint": f"{service_host(JAEGER_SERVICE, ns)}:{naming.OTEL_GRPC_PORT}",
                            "tls": {"insecure": True}},
            "prometheus": {"endpoint": f"{LISTEN}:{PROMETHEUS_EXPORTER_PORT}",
                           "resource_to_telemetry_conversion": {"enabled": False}},
            "otlphttp/loki": {"endpoint": f"http://{service_host(LOKI_GATEWAY_SERVICE, ns)}/otlp"},
        },
        "service": {
            "extensions": ["health_check"],
            "pipelines": _pipelines(cfg),
            "telemetry": {"metrics": {"readers": [{"pull": {"exporter": {"prometheus": {
                "host": LISTEN, "port": 8888}}}}]}},
        },
    }
