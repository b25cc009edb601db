"""The gateway's alerts, per Envoy cluster (one per model; a workload with variants routes through its aggregate
clusters `<workload>__<variant>`), from the cluster stats the gateway's stats listener exports to Prometheus
(telemetry.names.ENVOY: envoy_cluster_outlier_detection_ejections_active,
envoy_cluster_upstream_rq_retry and envoy_cluster_upstream_rq_xx, label envoy_cluster_name).

- GatewayReplicasEjected: a model has had a replica ejected by outlier detection (consecutive 5xx) for 10 minutes,
  in at least one gateway pod (each pod ejects on its own: the most any pod has out). With session affinity, the
  ejected replica's sessions are on other replicas meanwhile and prefill their context again.
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
        Alert("GatewayReplicasEjected", f"max by ({CLUSTER}) ({series(cfg, ENVOY.EJECTIONS)}) > 0", "warning",
              summary="Gateway cluster {{ $labels.envoy_cluster_name }} has {{ $value }} replica(s) ejected",
              description="Outlier detection has kept {{ $value }} replica(s) of gateway cluster "
                          "{{ $labels.envoy_cluster_name }} out of load balancing for 10 minutes (consecutive 5xx, "
                          "gateway.outlierDetection): the model serves on fewer replicas, and with session "
                          "affinity the ejected replica's sessions prefill their context again elsewhere.",
              runbook_url=runbook(cfg, "GatewayReplicasEjected"), for_=FOR),
        Alert("GatewayRetryRatioHigh", f"{R.ENVOY_RETRIES} / {tries} > {RETRY_RATIO!r}", "warning",
              summary="Gateway cluster {{ $labels.envoy_cluster_name }} retries "
                      "{{ $value | humanizePercentage }} of its tries",
              description=f"The gateway has retried more than {RETRY_RATIO:.0%} of the tries to gateway cluster "
                          "{{ $labels.envoy_cluster_name }} for 10 minutes (connect failures, resets, 5xx, idle "
                          "tries): replicas are failing requests that others then serve.",
              runbook_url=runbook(cfg, "GatewayRetryRatioHigh"), for_=FOR),
    ]
