"""Names, labels and ports that several components must agree on (one source of truth).

Tenancy and mesh policies select what serving and the gateway create by these labels and service
accounts; the policy pack and dashboards read them too. Changing one is an API change.
"""

from __future__ import annotations

from components.vocabulary import POOL_LABEL

__all__ = [
    "MANAGED_BY",
    "LABEL_MODEL",
    "LABEL_TENANT",
    "LABEL_POOL",
    "LABEL_COMPONENT",
    "GATEWAY_APP",
    "GATEWAY_SERVICE_ACCOUNT",
    "PROMETHEUS_SERVICE_ACCOUNT",
    "MODEL_HTTP_PORT",
    "TRITON_GRPC_PORT",
    "TRITON_METRICS_PORT",
    "ENVOY_LISTENER_PORT",
    "ENVOY_ADMIN_PORT",
    "ENVOY_STATS_PORT",
    "OTEL_COLLECTOR_SERVICE",
    "OTEL_GRPC_PORT",
    "GPU_OPERATOR_NAMESPACE",
    "NETWORK_OPERATOR_NAMESPACE",
    "ISTIO_NAMESPACE",
    "SYSTEM_NAMESPACE",
    "model_labels",
    "model_service_account",
    "istio_principal",
    "common_labels",
]

MANAGED_BY = {"app.kubernetes.io/managed-by": "aifactory"}
LABEL_MODEL = "aifactory.io/model"
LABEL_TENANT = "aifactory.io/tenant"
LABEL_POOL = POOL_LABEL  # node label naming a node's pool (components.vocabulary)
LABEL_COMPONENT = "app.kubernetes.io/component"

GATEWAY_APP = "aifactory-gateway"  # app.kubernetes.io/name of the Envoy gateway pods
GATEWAY_SERVICE_ACCOUNT = "aifactory-gateway"
PROMETHEUS_SERVICE_ACCOUNT = "prometheus"  # mesh identity of Prometheus (observability namespace)

MODEL_HTTP_PORT = 8000  # vLLM OpenAI server and Triton HTTP both listen here
TRITON_GRPC_PORT = 8001
TRITON_METRICS_PORT = 8002
ENVOY_LISTENER_PORT = 8080
ENVOY_ADMIN_PORT = 9901  # Envoy admin: bound to 127.0.0.1 only
ENVOY_STATS_PORT = 9902  # the gateway's /stats/prometheus and /ready, proxied from the admin interface
OTEL_COLLECTOR_SERVICE = "otel-collector"  # Service of the OpenTelemetry Collector (observability namespace)
OTEL_GRPC_PORT = 4317  # OTLP gRPC

GPU_OPERATOR_NAMESPACE = "gpu-operator"
NETWORK_OPERATOR_NAMESPACE = "nvidia-network-operator"
ISTIO_NAMESPACE = "istio-system"
SYSTEM_NAMESPACE = "aifactory-system"  # cluster add-ons the kit runs (EFA plugin, autoscaler, collectors)


def common_labels(name: str, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, LABEL_COMPONENT: component, **MANAGED_BY}


def model_labels(model: str, tenant: str, pool: str) -> dict[str, str]:
    """Labels on every model-server pod, its Service and monitors."""
    return {**common_labels(model, "model-server"), LABEL_MODEL: model, LABEL_TENANT: tenant, LABEL_POOL: pool}


def model_service_account(model: str) -> str:
    """Each model runs as its own service account: the mesh identity model-to-model policies name."""
    return model


def istio_principal(namespace: str, service_account: str) -> str:
    return f"cluster.local/ns/{namespace}/sa/{service_account}"
