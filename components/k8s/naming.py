"""Names, labels and ports that several components must agree on (one source of truth).

Tenancy and mesh policies select what serving and the gateway create by these labels and service
accounts; the policy pack and dashboards read them too. Changing one is an API change.
"""

from __future__ import annotations

import re

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
    "GATE_SUFFIX",
    "LAST_RESORT_SUFFIX",
    "DIRECT_SUFFIX",
    "variant_of_member",
    "FIDELITY_CONFIG_MAP",
    "FIDELITY_KEY",
    "DASHBOARD_LABEL",
    "DASHBOARD_LABEL_VALUE",
    "DASHBOARD_FOLDER_ANNOTATION",
    "model_labels",
    "model_service_account",
    "istio_principal",
    "common_labels",
    "LWS_SUFFIX",
    "STATEFULSET_NAME_MAX",
    "model_name_problems",
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

# The gateway's Envoy reaches each variant of a workload through an in-process "overflow gate": an internal listener
# and the cluster `<variant>__gate` (components/k8s/gateway/envoy/config.py); the policy pack reads routes back
# through it.
GATE_SUFFIX = "__gate"
# ... and, after every variant's own try, each variant's last resort: the cluster `<variant>__last`, its replicas with
# panic mode and no health checks (components/k8s/gateway/envoy/variants.py), behind its own gate.
LAST_RESORT_SUFFIX = "__last"
# A variant named by its own key goes to the aggregate cluster `<variant>__direct` (its cluster, then its last resort):
# the client's choice of variant, not its workload's routing.
DIRECT_SUFFIX = "__direct"
# The fidelity gate's ConfigMap (gateway namespace) and its key: which variants passed their workload's evaluation.
FIDELITY_CONFIG_MAP = "aifactory-fidelity"
FIDELITY_KEY = "gate.json"
# kube-prometheus-stack's Grafana sidecar loads ConfigMaps carrying this label (and value) as dashboards, into the
# folder named by the annotation: the sidecar reads it only when told its name (grafana chart 11.2.0
# `sidecar.dashboards.folderAnnotation`, default null -> every dashboard in General), and the provider builds folders
# from the sidecar's subdirectories only with `provider.foldersFromFilesStructure: true` (default false).
DASHBOARD_LABEL = "grafana_dashboard"
DASHBOARD_LABEL_VALUE = "1"
DASHBOARD_FOLDER_ANNOTATION = "grafana_folder"


def variant_of_member(cluster: str) -> str:
    """The variant an aggregate cluster's member reaches: its gate's (`<variant>__gate`, `<variant>__last__gate`),
    its last resort's (`<variant>__last`) or its own name."""
    return cluster.removesuffix(GATE_SUFFIX).removesuffix(LAST_RESORT_SUFFIX)


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


# --- names the cluster derives from a model's name ------------------------------------------------------------------
# A model's name is its Service's, Deployment's and service account's name and the value of its labels; a multi-node
# model's LeaderWorkerSet is `<name>-lws` (components/k8s/serving.py `workload_name`). What each must satisfy:
# - a Service name is a DNS-1035 label: at most 63 characters, lowercase letters, digits and '-', starting with a
#   letter (kubernetes/kubernetes@v1.34.0:pkg/apis/core/validation/validation.go `ValidateServiceName` =
#   `NameIsDNS1035Label`); so is a LeaderWorkerSet's (kubernetes-sigs/lws@v0.9.0:pkg/webhooks/
#   leaderworkerset_webhook.go `NameIsDNS1035Label`);
# - the LWS controller names each group's worker StatefulSet after the group's leader pod, `<lws>-<group>`
#   (kubernetes-sigs/lws@v0.9.0:pkg/controllers/pod_controller.go), and a StatefulSet labels its pods
#   `controller-revision-hash: <statefulset>-<hash>` with a hash of up to 10 characters (kubernetes/kubernetes@v1.34.0
#   pkg/controller/history/controller_history.go `ControllerRevisionName`); a label value has at most 63 characters,
#   so a StatefulSet named longer than 52 never gets a pod (kubernetes/kubernetes#64023).
LWS_SUFFIX = "-lws"
STATEFULSET_NAME_MAX = 63 - 1 - 10
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def model_name_problems(name: str, *, multi_node: bool, max_replicas: int) -> list[str]:
    """Why the objects named after model `name` would be refused or never get a pod; [] when they are fine."""
    if not _DNS1035_LABEL.match(name) or len(name) > 63:
        return [f"{name!r} ({len(name)} characters) names the model's Service, which must be a DNS-1035 label: "
                "at most 63 characters of lowercase letters, digits and '-', starting with a letter and ending with "
                "a letter or digit"]
    if not multi_node:
        return []
    last_worker_set = f"{name}{LWS_SUFFIX}-{max(max_replicas, 1) - 1}"
    if len(last_worker_set) > STATEFULSET_NAME_MAX:
        longest = len(name) - (len(last_worker_set) - STATEFULSET_NAME_MAX)
        return [f"{name!r} ({len(name)} characters) is too long for a multi-node model with up to {max_replicas} "
                f"replicas: its LeaderWorkerSet names the last group's worker StatefulSet {last_worker_set!r} "
                f"({len(last_worker_set)} characters), and a StatefulSet over {STATEFULSET_NAME_MAX} characters "
                f"never gets a pod (its pods' controller-revision-hash label would exceed 63); use at most "
                f"{longest} characters"]
    return []
