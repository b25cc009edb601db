"""Volume sizes of the backends, from `observability.ingest` and the retentions unless pinned in
`observability.volumes` (docs/observability.md, "Observability data")."""

import math
from typing import Any

from components.k8s.observability.spec import BackendsView
from components.k8s.storage import cache_storage_class_name

__all__ = [
    "PROMETHEUS_BYTES_PER_SAMPLE",
    "JAEGER_BYTES_PER_SPAN",
    "LOKI_COMPRESSION_RATIO",
    "DISK_HEADROOM",
    "MIN_VOLUME_GIB",
    "ALERTMANAGER_VOLUME_GIB",
    "RETENTION_SIZE_FRACTION",
    "GIB",
    "retention_days",
    "prometheus_volume_gib",
    "jaeger_volume_gib",
    "loki_volume_gib",
    "volume_claim_spec",
    "retention_hours",
    "GATEWAY_SPANS",
    "SIDECAR_SPANS_PER_HOP",
    "BUDGET_STREAMS",
    "spans_per_request",
]

# Disk sizing (docs/observability.md, "Observability data"). Prometheus stores 1-2 bytes per sample on disk
# (prometheus.io/docs/prometheus/latest/storage, "Operational aspects"): size for the upper end.
PROMETHEUS_BYTES_PER_SAMPLE = 2.0
JAEGER_BYTES_PER_SPAN = 1024  # estimate: a span with the kit's attributes, after Badger's compression
LOKI_COMPRESSION_RATIO = 5.0  # estimate: raw log bytes per stored chunk byte
DISK_HEADROOM = 1.3  # WAL, head block, compaction and growth on top of the retained data
MIN_VOLUME_GIB = 10
ALERTMANAGER_VOLUME_GIB = 1  # silences and the notification log: kilobytes to a few megabytes
RETENTION_SIZE_FRACTION = 0.85  # Prometheus drops old blocks before its volume fills
GIB = 1024 ** 3


# What one request through the gateway sends the Collector (docs/observability.md, "Spans per request"). The gateway
# samples every request (always_on) and passes `sampled` on in its traceparent, which each sidecar's tracer and vLLM's
# parent-based sampler follow, so every span of the request is sent; the Collector's probabilistic_sampler keeps
# traceSampleRatio of the traces after its spanmetrics have counted them all.
GATEWAY_SPANS = 1  # the gateway's request span: its HCM sets no spawn_upstream_span (so no span per try)
# A hop through the mesh: the caller's sidecar (its outbound HTTP connection manager) and the callee's (inbound) each
# record one span; a sidecar spawns no upstream span (istio/istio@1.28.3 pilot/pkg/networking/core/tracing.go
# configureFromProviderConfig: only for gateways, proxy.Type == Router).
SIDECAR_SPANS_PER_HOP = 2
# With token budgets: admission's and metering's ext_proc streams, each a child span of the gateway's
# (envoyproxy/envoy@v1.40.0 source/extensions/filters/http/ext_proc/ext_proc.cc: the stream's parent span is the
# request's) and a hop to the budget service, for every request (tenants without a budget too).
BUDGET_STREAMS = 2


def spans_per_request(*, engine_spans: int, token_budgets: bool, tries: int = 1) -> int:
    """Spans one request through the gateway sends the Collector: the gateway's, each try's hop to the model, the
    engine's own (`engine_spans`: vLLM 1, SGLang and Triton 0), and with token budgets each budget stream's span and
    hop. `tries`: a retried request's tries (each a hop of its own)."""
    budgets = BUDGET_STREAMS * (1 + SIDECAR_SPANS_PER_HOP) if token_budgets else 0
    return GATEWAY_SPANS + tries * (SIDECAR_SPANS_PER_HOP + engine_spans) + budgets


def retention_days(retention: str) -> float:
    """Days in a retention such as `15d`, `720h`, `2w`, `1y`."""
    return {"h": 1 / 24, "d": 1, "w": 7, "y": 365}[retention[-1]] * int(retention[:-1])


def _volume_gib(bytes_retained: float) -> int:
    return max(MIN_VOLUME_GIB, math.ceil(bytes_retained * DISK_HEADROOM / GIB))


def prometheus_volume_gib(cfg: BackendsView) -> int:
    """`observability.volumes.prometheusGiB` when pinned, else samples/s x seconds retained x bytes/sample,
    plus headroom (the Prometheus docs' sizing formula)."""
    obs = cfg.observability
    if obs.volumes.prometheus_gib is not None:
        return obs.volumes.prometheus_gib
    return _volume_gib(obs.ingest.samples_per_second * 86_400 * retention_days(obs.retention)
                       * PROMETHEUS_BYTES_PER_SAMPLE)


def jaeger_volume_gib(cfg: BackendsView) -> int:
    """`observability.volumes.jaegerGiB` when pinned, else spans kept (after the Collector's sampling) x
    bytes/span x the trace retention, plus headroom."""
    obs = cfg.observability
    if obs.volumes.jaeger_gib is not None:
        return obs.volumes.jaeger_gib
    return _volume_gib(obs.ingest.spans_per_second * obs.trace_sample_ratio * 86_400
                       * retention_days(obs.trace_retention) * JAEGER_BYTES_PER_SPAN)


def loki_volume_gib(cfg: BackendsView) -> int:
    """Filesystem mode: `observability.volumes.lokiGiB` when pinned, else compressed log bytes for the whole
    retention, plus headroom."""
    obs = cfg.observability
    if obs.volumes.loki_gib is not None:
        return obs.volumes.loki_gib
    return _volume_gib(obs.ingest.log_gib_per_day * GIB / LOKI_COMPRESSION_RATIO * retention_days(obs.retention))


def volume_claim_spec(size_gib: int, cfg: BackendsView) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": f"{size_gib}Gi"}}}
    if (sc := cache_storage_class_name(cfg)) is not None:
        spec["storageClassName"] = sc
    return spec


def retention_hours(retention: str) -> str:
    return f"{round(retention_days(retention) * 24)}h"
