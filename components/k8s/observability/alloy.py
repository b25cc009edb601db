"""Grafana Alloy: a DaemonSet that tails every node's pod logs into Loki."""

from typing import Any

from components.k8s import naming
from components.k8s.observability.common import container_resources
from components.k8s.observability.spec import BackendsView
from components.k8s.otel_config import (
    LOKI_GATEWAY_SERVICE,
    service_host,
)

__all__ = [
    "ALLOY_RELEASE",
    "ALLOY_STORAGE_PATH",
    "ALLOY_HOST_PATH",
    "ALLOY_STORAGE_VOLUME",
    "alloy_config",
    "alloy_values",
]

ALLOY_RELEASE = "alloy"
# Alloy keeps its state (loki.source.file positions, WAL) under --storage.path; the chart's default is
# /tmp/alloy in the container (alloy chart 1.4.0 values.yaml `alloy.storagePath`), lost on every restart.
ALLOY_STORAGE_PATH = "/var/lib/alloy"
ALLOY_HOST_PATH = "/var/lib/aifactory/alloy"  # on the node: survives pod restarts and upgrades
ALLOY_STORAGE_VOLUME = "alloy-storage"


def alloy_config(cfg: BackendsView) -> str:
    """Alloy (River) pipeline: tail this node's pod logs, label them, push them to Loki."""
    loki = f"http://{service_host(LOKI_GATEWAY_SERVICE, cfg.observability.namespace)}/loki/api/v1/push"
    relabels = [("__meta_kubernetes_namespace", "namespace"), ("__meta_kubernetes_pod_name", "pod"),
                ("__meta_kubernetes_pod_container_name", "container"),
                (f"__meta_kubernetes_pod_label_{naming.LABEL_TENANT.replace('.', '_').replace('/', '_')}", "tenant"),
                (f"__meta_kubernetes_pod_label_{naming.LABEL_MODEL.replace('.', '_').replace('/', '_')}", "model")]
    rules = "".join(f'  rule {{\n    source_labels = ["{src}"]\n    target_label  = "{dst}"\n  }}\n'
                    for src, dst in relabels)
    return (
        'discovery.kubernetes "pods" {\n  role = "pod"\n  selectors {\n    role  = "pod"\n'
        '    field = "spec.nodeName=" + sys.env("HOSTNAME")\n  }\n}\n\n'
        'discovery.relabel "pod_logs" {\n  targets = discovery.kubernetes.pods.targets\n' + rules +
        '  rule {\n    source_labels = ["__meta_kubernetes_pod_uid", "__meta_kubernetes_pod_container_name"]\n'
        '    separator     = "/"\n    replacement   = "/var/log/pods/*$1/*.log"\n'
        '    target_label  = "__path__"\n  }\n}\n\n'
        'local.file_match "pod_logs" {\n  path_targets = discovery.relabel.pod_logs.output\n}\n\n'
        'loki.source.file "pod_logs" {\n  targets    = local.file_match.pod_logs.targets\n'
        '  forward_to = [loki.process.pod_logs.receiver]\n}\n\n'
        'loki.process "pod_logs" {\n  stage.cri {}\n  forward_to = [loki.write.default.receiver]\n}\n\n'
        f'loki.write "default" {{\n  endpoint {{\n    url = "{loki}"\n  }}\n}}\n'
    )


def alloy_values(cfg: BackendsView) -> dict[str, Any]:
    return {
        "fullnameOverride": ALLOY_RELEASE,
        "controller": {"type": "daemonset", "tolerations": [{"operator": "Exists"}],  # every node's logs
                       "volumes": {"extra": [{"name": ALLOY_STORAGE_VOLUME, "hostPath": {
                           "path": ALLOY_HOST_PATH, "type": "DirectoryOrCreate"}}]}},
        "alloy": {
            "configMap": {"create": True, "content": alloy_config(cfg)},
            # Positions (how far each file was read) survive restarts on the node itself.
            "storagePath": ALLOY_STORAGE_PATH,
            "mounts": {"varlog": True, "extra": [{"name": ALLOY_STORAGE_VOLUME, "mountPath": ALLOY_STORAGE_PATH}]},
            "resources": container_resources("100m", "128Mi", "500m", "512Mi"),
        },
        # Alloy's own metrics (loki_write_dropped_entries_total: lines it gave up on). The chart renders the
        # ServiceMonitor whenever this is on, CRD or not (alloy chart 1.4.0 templates/servicemonitor.yaml; default
        # false in values.yaml), so the release waits for kube-prometheus-stack.
        "serviceMonitor": {"enabled": True},
    }
