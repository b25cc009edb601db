"""Mesh and gateway: Istio hop latency, errors and mTLS; the Envoy inference gateway's upstreams."""

from __future__ import annotations

from grafanalib.core import Dashboard

from dashboards.config import ObservabilityConfig
from dashboards.panels import Q, dashboard, query_variable, timeseries
from dashboards.promql import series
from dashboards.rules import QUANTILES, R
from telemetry.names import ENVOY

__all__ = ["UID", "build"]

UID = "aifactory-mesh"
DEST = 'destination_workload=~"$destination"'
CLUSTER = 'envoy_cluster_name=~"$cluster"'
GATEWAY_LISTENER = f'{ENVOY.L_HCM_PREFIX}="{ENVOY.GATEWAY_HCM_PREFIX}"'


def _quantiles(record: str, selector: str, legend: str) -> list[Q]:
    return [Q(f'{record}{{quantile="{q}", {selector}}}', f"{legend} p{q[2:].ljust(2, '0')}") for q in QUANTILES]


def _istio() -> list:
    return [
        timeseries("Requests per second by destination", "Server-side (reporter=destination) request rate.",
                   "reqps", Q(f"sum by (destination_workload) ({R.ISTIO_REQUESTS}{{{DEST}}})",
                              "{{destination_workload}}")),
        timeseries("5xx ratio by destination", "Share of requests answered 5xx.", "percentunit",
                   Q(f'(sum by (destination_workload) ({R.ISTIO_REQUESTS}{{response_code=~"5..", {DEST}}}) or '
                     f"sum by (destination_workload) ({R.ISTIO_REQUESTS}{{{DEST}}}) * 0) / "
                     f"sum by (destination_workload) ({R.ISTIO_REQUESTS}{{{DEST}}})", "{{destination_workload}}")),
        timeseries("Hop latency by source and destination", "p50 / p95 / p99 of each mesh hop.", "ms",
                   *_quantiles(R.ISTIO_QUANTILE, DEST, "{{source_workload}} -> {{destination_workload}}")),
        timeseries("mTLS share", "Share of requests received over mutual TLS (STRICT mode: 100%).", "percentunit",
                   Q(f"{R.ISTIO_MTLS}{{{DEST}}}", "{{destination_workload}}")),
    ]


def _envoy(cfg: ObservabilityConfig) -> list:
    return [
        timeseries("Upstream requests by response class", "Requests per second from the gateway to each model "
                                                            "backend, by response class.", "reqps",
                   Q(f"{R.ENVOY_REQUESTS}{{{CLUSTER}}}", "{{envoy_cluster_name}} {{envoy_response_code_class}}xx")),
        timeseries("Upstream latency", "p50 / p95 / p99 from the gateway to each backend.", "ms",
                   *_quantiles(R.ENVOY_QUANTILE, CLUSTER, "{{envoy_cluster_name}}")),
        timeseries("Retries", "Upstream retries per second (bounded by the retry budget).", "reqps",
                   Q(f"{R.ENVOY_RETRIES}{{{CLUSTER}}}", "{{envoy_cluster_name}}")),
        timeseries("Ejected backends", "Backends ejected by outlier detection right now.", "none",
                   Q(f"sum by (envoy_cluster_name) ({series(cfg, ENVOY.EJECTIONS, CLUSTER)})",
                     "{{envoy_cluster_name}}")),
        # Only the gateway listener's connection manager: the stats listener's probes and scrapes and the admin
        # interface's requests are fast and frequent, and would pull the quantile down.
        timeseries("Downstream latency p95", "Whole request time as clients of the gateway see it.", "ms",
                   Q("histogram_quantile(0.95, sum by (le) (rate("
                     f"{series(cfg, ENVOY.DOWNSTREAM_RQ_TIME + '_bucket', GATEWAY_LISTENER)}[$__rate_interval])))",
                     "p95")),
        timeseries("Rate-limited requests", "Requests refused by the per-tenant local rate limit, per second.",
                   "reqps", Q(f"sum(rate({series(cfg, ENVOY.RATELIMITED)}[$__rate_interval]))", "rate limited")),
    ]


def build(cfg: ObservabilityConfig) -> Dashboard:
    return dashboard(
        uid=UID, title="aifactory / Mesh and gateway",
        description="Istio mesh hops (latency, errors, mTLS) and the Envoy inference gateway's upstreams.",
        tags=["mesh", "istio", "envoy"],
        variables=[
            query_variable("destination", "Destination workload", f"label_values({R.ISTIO_REQUESTS}, "
                                                                  "destination_workload)"),
            query_variable("cluster", "Gateway cluster", f"label_values({R.ENVOY_REQUESTS}, envoy_cluster_name)"),
        ],
        rows=[("Istio mesh", _istio()), ("Envoy gateway", _envoy(cfg))],
    )
