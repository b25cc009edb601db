"""Every Helm chart the kit installs, pinned in one place: chart, repository, version.

Upgrading a component is a one-line change here (and a review of its values builder). Versions are
the releases seen upstream (shared/reference/FACTS.md, the charts' own index files); repositories are
the projects' official ones. Charts that version their tags with a leading `v` keep it, as their
index spells it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "HelmChart",
    "GPU_OPERATOR",
    "NETWORK_OPERATOR",
    "EFA_DEVICE_PLUGIN",
    "CLUSTER_AUTOSCALER",
    "ISTIO_VERSION",
    "ISTIO_BASE",
    "ISTIOD",
    "KUBE_PROMETHEUS_STACK",
    "OTEL_COLLECTOR",
    "JAEGER",
    "LOKI",
    "ALLOY",
    "LWS",
    "KEDA",
    "ALL_CHARTS",
]


@dataclass(frozen=True, slots=True)
class HelmChart:
    chart: str
    repository: str  # https:// chart repository, or oci:// registry path (chart name appended by Helm)
    version: str

    @property
    def is_oci(self) -> bool:
        return self.repository.startswith("oci://")


NVIDIA_REPO = "https://helm.ngc.nvidia.com/nvidia"
ISTIO_REPO = "https://istio-release.storage.googleapis.com/charts"
GRAFANA_REPO = "https://grafana.github.io/helm-charts"

GPU_OPERATOR = HelmChart("gpu-operator", NVIDIA_REPO, "v25.10.1")
NETWORK_OPERATOR = HelmChart("network-operator", NVIDIA_REPO, "25.7.0")
EFA_DEVICE_PLUGIN = HelmChart("aws-efa-k8s-device-plugin", "https://aws.github.io/eks-charts", "v0.5.26")
CLUSTER_AUTOSCALER = HelmChart("cluster-autoscaler", "https://kubernetes.github.io/autoscaler", "9.52.1")

ISTIO_VERSION = "1.28.3"  # base and istiod move together: one version for the whole control plane
ISTIO_BASE = HelmChart("base", ISTIO_REPO, ISTIO_VERSION)
ISTIOD = HelmChart("istiod", ISTIO_REPO, ISTIO_VERSION)

KUBE_PROMETHEUS_STACK = HelmChart("kube-prometheus-stack", "https://prometheus-community.github.io/helm-charts",
                                  "82.4.0")
OTEL_COLLECTOR = HelmChart("opentelemetry-collector", "https://open-telemetry.github.io/opentelemetry-helm-charts",
                           "0.140.0")
JAEGER = HelmChart("jaeger", "https://jaegertracing.github.io/helm-charts", "4.1.0")  # 4.x: Jaeger v2
LOKI = HelmChart("loki", GRAFANA_REPO, "6.46.0")
ALLOY = HelmChart("alloy", GRAFANA_REPO, "1.4.0")

# Serving (multi-node replicas, queue-depth autoscaling).
LWS = HelmChart("lws", "oci://registry.k8s.io/lws/charts", "0.7.0")
KEDA = HelmChart("keda", "https://kedacore.github.io/charts", "2.18.1")

ALL_CHARTS: tuple[HelmChart, ...] = (
    GPU_OPERATOR, NETWORK_OPERATOR, EFA_DEVICE_PLUGIN, CLUSTER_AUTOSCALER, ISTIO_BASE, ISTIOD,
    KUBE_PROMETHEUS_STACK, OTEL_COLLECTOR, JAEGER, LOKI, ALLOY, LWS, KEDA,
)
