"""Loki: in the kit's S3 bucket through IRSA (AWS) or on its own volume (one binary)."""

from dataclasses import dataclass
from typing import Any

from components.k8s.autoscaler import IRSA_ANNOTATION
from components.k8s.observability.common import container_resources
from components.k8s.observability.sizing import MIN_VOLUME_GIB, loki_volume_gib, retention_hours
from components.k8s.observability.spec import BackendsView
from components.k8s.storage import cache_storage_class_name
from components.vocabulary import LOKI_INDEX_TABLE_PREFIX

__all__ = [
    "LOKI_RELEASE",
    "LOKI_SCHEMA_FROM",
    "LOKI_SERVICE_ACCOUNT",
    "LokiBucket",
    "loki_values",
]

LOKI_RELEASE = "loki"
LOKI_SCHEMA_FROM = "2024-04-01"  # first day of the tsdb/v13 schema period (never change once deployed)
LOKI_SERVICE_ACCOUNT = "loki"  # the chart names its service account after fullnameOverride


@dataclass(frozen=True, slots=True)
class LokiBucket:
    """The S3 bucket Loki stores in (AWS) and the IRSA role its service account assumes."""

    bucket: str
    region: str
    role_arn: str


def loki_values(cfg: BackendsView, bucket: LokiBucket | None = None) -> dict[str, Any]:
    """Loki in the configured mode. On AWS (`bucket` given) chunks and index live in the kit's S3 bucket,
    reached through the service account's IRSA role (no keys: the SDK's web-identity credentials). On an
    existing cluster Loki runs as one binary on its own volume: a single node, no replication."""
    obs = cfg.observability
    single = obs.loki_mode == "single-binary"
    store = "filesystem" if bucket is None else "s3"
    replicas = 0 if single else 3
    sc = cache_storage_class_name(cfg)

    def persistence(size_gib: int) -> dict[str, Any]:
        # Keep the claims when the StatefulSet is deleted or scaled: the chart (loki 6.53.0 values.yaml,
        # `singleBinary|write|backend.persistence.enableStatefulSetAutoDeletePVC: true`, `whenDeleted/whenScaled:
        # Delete`) renders persistentVolumeClaimRetentionPolicy Delete, which on one binary in filesystem mode
        # deletes the only copy of the logs. Retain is the Kubernetes default with the policy unset.
        # With it false the chart renders no policy at all (whenDeleted/whenScaled are read only when it is true,
        # and write/backend hard-code Delete then: templates/write/statefulset-write.yaml).
        return {"persistence": {"size": f"{size_gib}Gi", **({"storageClass": sc} if sc is not None else {}),
                                "enableStatefulSetAutoDeletePVC": False}}

    storage: dict[str, Any] = {"type": store}
    service_account: dict[str, Any] = {"create": True, "name": LOKI_SERVICE_ACCOUNT}
    if bucket is not None:
        storage.update(bucketNames={"chunks": bucket.bucket, "ruler": bucket.bucket, "admin": bucket.bucket},
                       s3={"region": bucket.region})
        service_account["annotations"] = {IRSA_ANNOTATION: bucket.role_arn}
    # The write path's WAL (and, in filesystem mode, the chunks) need a volume: sized from ingest there.
    wal = MIN_VOLUME_GIB if bucket is not None else loki_volume_gib(cfg)
    return {
        "fullnameOverride": LOKI_RELEASE,
        "deploymentMode": "SingleBinary" if single else "SimpleScalable",
        "serviceAccount": service_account,
        "loki": {
            "auth_enabled": False,
            "commonConfig": {"replication_factor": 1 if single else 3},
            "storage": storage,
            "schemaConfig": {"configs": [{"from": LOKI_SCHEMA_FROM, "store": "tsdb", "object_store": store,
                                          "schema": "v13",
                                          "index": {"prefix": LOKI_INDEX_TABLE_PREFIX, "period": "24h"}}]},
            "limits_config": {"retention_period": retention_hours(obs.retention), "allow_structured_metadata": True},
            "compactor": {"retention_enabled": True, "delete_request_store": store},
        },
        "singleBinary": {"replicas": 1 if single else 0, "resources": container_resources("500m", "1Gi", "2", "4Gi"),
                         **persistence(wal)},
        "read": {"replicas": replicas, "resources": container_resources("250m", "512Mi", "1", "2Gi")},
        "write": {"replicas": replicas, "resources": container_resources("250m", "1Gi", "1", "2Gi"),
                  **persistence(wal)},
        "backend": {"replicas": replicas, "resources": container_resources("250m", "512Mi", "1", "2Gi"),
                    **persistence(MIN_VOLUME_GIB)},
        "minio": {"enabled": False},  # never the chart's demo store (default credentials, one replica)
        # Loki's own metrics (loki_distributor_bytes_received_total: what docs/observability.md's ingest
        # calibration reads).
        # The chart renders the ServiceMonitor only if the CRD exists at install time (templates/monitoring/
        # servicemonitor.yaml: .Capabilities.APIVersions.Has), so the release waits for kube-prometheus-stack.
        # No MetricsInstance: that is the deprecated Grafana Agent Operator's CRD.
        "monitoring": {"serviceMonitor": {"enabled": True, "metricsInstance": {"enabled": False}}},
        "chunksCache": {"enabled": False},
        "resultsCache": {"enabled": False},
    }
