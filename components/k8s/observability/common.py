"""What several backends' values share: container resources, the config checksum that rolls pods, and
the ServiceMonitor shape."""

import hashlib
import json
from typing import Any

from components.k8s import naming, security
from components.k8s.observability.spec import BackendsView

__all__ = [
    "CONFIG_CHECKSUM_ANNOTATION",
    "CONFIG_HASH_LABEL",
    "container_resources",
    "config_checksum",
    "service_monitor",
]

CONFIG_CHECKSUM_ANNOTATION = "checksum/aifactory-config"
CONFIG_HASH_LABEL = "aifactory.io/config-hash"


def container_resources(cpu: str, memory: str, cpu_limit: str, memory_limit: str) -> dict[str, Any]:
    """A container's requests and limits (security.resources)."""
    return security.resources(cpu, memory, cpu_limit=cpu_limit, memory_limit=memory_limit)


def config_checksum(data: dict[str, str]) -> str:
    """sha256 of a ConfigMap's data (keys sorted): what the pod template carries so that a config change
    rolls the pods. The chart's own `checksum/config` hashes its templates, a constant when the kit
    brings the ConfigMap (`configMap.create: false`; opentelemetry-collector chart `_helpers.tpl`)."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def service_monitor(cfg: BackendsView, name: str, match_labels: dict[str, str],
                    endpoints: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": name, "namespace": cfg.observability.namespace, "labels": dict(naming.MANAGED_BY)},
            "spec": {"selector": {"matchLabels": match_labels}, "endpoints": endpoints}}
