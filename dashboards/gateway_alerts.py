"""The gateway's alerts, per Envoy cluster (one per model; a workload with variants routes through its aggregate
clusters `<workload>__<variant>`), from the cluster stats the gateway's stats listener exports to Prometheus
(telemetry.names.ENVOY: envoy_cluster_outlier_detection_ejections_enforced_total,
envoy_cluster_upstream_rq_retry and envoy_cluster_upstream_rq_xx, label envoy_cluster_name).

- GatewayReplicasEjected: outlier detection has ejected a replica of a model (consecutive gateway failures) in
  every 10-minute window for 10 minutes, in at least one gateway pod (each pod ejects on its own). An ejected replica
  is back at its next passing health check (components/k8s/envoy_hops.py), so the number ejected right now
  (ejections_active) is rarely above 0 for long even while a replica keeps failing; repeated ejections are the
  signal. With session affinity, the ejected replica's sessions go elsewhere and prefill their context again.
- GatewayRetryRatioHigh: retries over the tries that got an answer, per cluster, above RETRY_RATIO for 10 minutes:
  replicas fail tries that other replicas then serve (the client sees success, the fleet pays twice, and affinity's
  sessions leave their replica on every retry).
"""

from __future__ import annotations

from dashboards.config import ObservabilityConfig
from dashboards.promql import series
from dashboards.rule_parts import Alert, R, runbook
from telemetry.names import ENVOY

__all__ = ["RETRY_RATIO", "FOR", "alerts"]

RETRY_RATIO = 0.05  # retries per answered try: above it, failing replicas cost more than noise
FOR = "10m"
CLUSTER = ENVOY.L_CLUSTER


def alerts(cfg: ObservabilityConfig) -> list[Alert]:
    tries = f"sum by ({CLUSTER}) ({R.ENVOY_REQUESTS})"
    return [
        Alert("GatewayReplicasEjected",
              f"max by ({CLUSTER}) (increase({series(cfg, ENVOY.EJECTIONS_ENFORCED)}[{FOR}])) > 0", "warning",
              summary="Gateway cluster {{ $labels.envoy_cluster_name }} keeps ejecting replicas",
              description="Outlier detection has ejected replicas of gateway cluster "
                          "{{ $labels.envoy_cluster_name }} in every 10 minutes for 10 minutes ({{ $value }} in "
                          "the last 10 minutes in one gateway pod; consecutive gateway failures, "
                          "gateway.outlierDetection): a replica fails tries while passing its health checks, and "
                          "with session affinity its sessions prefill their context again elsewhere.",
              runbook_url=runbook(cfg, "GatewayReplicasEjected"), for_=FOR),
        Alert("GatewayRetryRatioHigh", f"{R.ENVOY_RETRIES} / {tries} > {RETRY_RATIO!r}", "warning",
              summary="Gateway cluster {{ $labels.envoy_cluster_name }} retries "
                      "{{ $value | humanizePercentage }} of its tries",
              description=f"The gateway has retried more than {RETRY_RATIO:.0%} of the tries to gateway cluster "
                          "{{ $labels.envoy_cluster_name }} for 10 minutes (connect failures, resets, 5xx, idle "
                          "tries): replicas are failing requests that others then serve.",
              runbook_url=runbook(cfg, "GatewayRetryRatioHigh"), for_=FOR),
    ]
