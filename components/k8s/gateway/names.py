"""The gateway's object names, labels and address: what every object of the gateway carries, and where
in-cluster callers reach its Service."""

from __future__ import annotations

from typing import Any

from components.k8s import naming
from components.k8s.gateway.envoy.config import GatewayView

__all__ = ["SERVICE_PORT", "CONFIG_HASH_ANNOTATION", "gateway_labels", "service_host", "service_url"]

SERVICE_PORT = 80
CONFIG_HASH_ANNOTATION = "aifactory.io/config-sha256"  # on a pod template: a config change rolls the pods


def gateway_labels() -> dict[str, str]:
    return naming.common_labels(naming.GATEWAY_APP, "gateway")


def _meta(cfg: GatewayView, name: str = naming.GATEWAY_APP) -> dict[str, Any]:
    return {"name": name, "namespace": cfg.gateway.namespace, "labels": gateway_labels()}


def _selector() -> dict[str, str]:
    return {"app.kubernetes.io/name": naming.GATEWAY_APP}


def service_host(namespace: str) -> str:
    """The gateway Service's cluster FQDN, a name every in-cluster caller's sidecar routes (see
    components.k8s.gateway.network)."""
    return f"{naming.GATEWAY_APP}.{namespace}.svc.cluster.local"


def service_url(namespace: str) -> str:
    """Where in-cluster clients send OpenAI requests (the fidelity Job among them)."""
    return f"http://{service_host(namespace)}:{SERVICE_PORT}"

