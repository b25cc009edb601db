"""Every Helm chart the kit installs, pinned in one place: chart, repository, version.

Upgrading a component is a one-line change here (and a review of its values builder). Versions are
the releases seen upstream (the charts' own index.yaml files at their official repositories); repositories are
the projects' official ones. Charts that version their tags with a leading `v` keep it, as their
index spells it.

Timeouts: pulumi-kubernetes waits 300 s for a Helm release unless `timeout` says otherwise
(provider/pkg/provider/helm_release.go, `defaultTimeoutSeconds = 300`). Releases whose pods wait for
nodes joining, volumes provisioning or CRDs settling get more (`timeout_seconds`): a first install on a
fresh EKS cluster starts them while GPU nodes are still booting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.vocabulary import AUTOSCALER_CHART

__all__ = [
    "HelmChart",
    "release",
    "GPU_OPERATOR",
    "NETWORK_OPERATOR",
    "NETWORK_OPERATOR_IMAGE_REPOSITORY",
    "NETWORK_OPERATOR_IMAGE_TAG",
    "DOCA_DRIVER_VERSION",
    "EFA_DEVICE_PLUGIN",
    "CLUSTER_AUTOSCALER",
    "AWS_LOAD_BALANCER_CONTROLLER",
    "ISTIO_VERSION",
    "ISTIO_BASE",
    "ISTIOD",
    "ISTIO_CNI",
    "KUBE_PROMETHEUS_STACK",
    "OTEL_COLLECTOR",
    "JAEGER",
    "LOKI",
    "ALLOY",
    "LWS",
    "KEDA",
    "METRICS_SERVER",
    "VALKEY",
    "DEFAULT_RELEASE_TIMEOUT_SECONDS",
    "ALL_CHARTS",
]


DEFAULT_RELEASE_TIMEOUT_SECONDS = 600  # pods on the system pool, images pulled once: well inside 10 minutes
SLOW_RELEASE_TIMEOUT_SECONDS = 1200  # CRDs plus many pods, volumes to provision, or daemons on booting GPU nodes


@dataclass(frozen=True, slots=True)
class HelmChart:
    chart: str
    repository: str  # https:// chart repository, or oci:// registry path (chart name appended by Helm)
    version: str
    timeout_seconds: int = DEFAULT_RELEASE_TIMEOUT_SECONDS  # default: 600 s for the release's `helm --wait`

    @property
    def is_oci(self) -> bool:
        return self.repository.startswith("oci://")


NVIDIA_REPO = "https://helm.ngc.nvidia.com/nvidia"
ISTIO_REPO = "https://istio-release.storage.googleapis.com/charts"
GRAFANA_REPO = "https://grafana.github.io/helm-charts"
EKS_CHARTS_REPO = "https://aws.github.io/eks-charts"

GPU_OPERATOR = HelmChart("gpu-operator", NVIDIA_REPO, "v25.10.1", SLOW_RELEASE_TIMEOUT_SECONDS)
NETWORK_OPERATOR = HelmChart("network-operator", NVIDIA_REPO, "26.1.1", SLOW_RELEASE_TIMEOUT_SECONDS)
# Operand images the NicClusterPolicy names: the network operator release tags them with its own version.
NETWORK_OPERATOR_IMAGE_REPOSITORY = "nvcr.io/nvidia/mellanox"
NETWORK_OPERATOR_IMAGE_TAG = f"network-operator-v{NETWORK_OPERATOR.version}"
DOCA_DRIVER_VERSION = "doca3.3.0-26.01-1.0.0.0-4"  # network-operator 26.1.1 hack/release.yaml Mofed.version
EFA_DEVICE_PLUGIN = HelmChart("aws-efa-k8s-device-plugin", EKS_CHARTS_REPO, "v0.5.26",
                              SLOW_RELEASE_TIMEOUT_SECONDS)
CLUSTER_AUTOSCALER = HelmChart(AUTOSCALER_CHART, "https://kubernetes.github.io/autoscaler", "9.52.1")
# The gateway's NLB with pod (ip) targets (components.k8s.load_balancer). Chart 3.5.0 deploys controller v3.5.0 (its
# Chart.yaml appVersion; aws/eks-charts stable/aws-load-balancer-controller, built from kubernetes-sigs/
# aws-load-balancer-controller@v3.5.0 helm/): the newest release, and v2.5.0+ supports every Kubernetes from 1.22
# (the supported versions listed in its docs/deploy/installation.md), the stacks' 1.35 included.
AWS_LOAD_BALANCER_CONTROLLER = HelmChart("aws-load-balancer-controller", EKS_CHARTS_REPO, "3.5.0")

ISTIO_VERSION = "1.28.3"  # base and istiod move together: one version for the whole control plane
ISTIO_BASE = HelmChart("base", ISTIO_REPO, ISTIO_VERSION)
ISTIOD = HelmChart("istiod", ISTIO_REPO, ISTIO_VERSION)
# Sidecars without privileged init containers; a daemon on every node, GPU nodes still booting included.
ISTIO_CNI = HelmChart("cni", ISTIO_REPO, ISTIO_VERSION, SLOW_RELEASE_TIMEOUT_SECONDS)

KUBE_PROMETHEUS_STACK = HelmChart("kube-prometheus-stack", "https://prometheus-community.github.io/helm-charts",
                                  "82.4.0", SLOW_RELEASE_TIMEOUT_SECONDS)
OTEL_COLLECTOR = HelmChart("opentelemetry-collector", "https://open-telemetry.github.io/opentelemetry-helm-charts",
                           "0.143.0")
# jaeger 4.11.1 deploys jaegertracing/jaeger:2.19.0 (its Chart.yaml appVersion). 4.0.0 deployed 2.0.0-rc2,
# whose OTLP receivers listened on localhost only.
JAEGER = HelmChart("jaeger", "https://jaegertracing.github.io/helm-charts", "4.11.1")  # 4.x: Jaeger v2
LOKI = HelmChart("loki", GRAFANA_REPO, "6.53.0", SLOW_RELEASE_TIMEOUT_SECONDS)
ALLOY = HelmChart("alloy", GRAFANA_REPO, "1.4.0", SLOW_RELEASE_TIMEOUT_SECONDS)  # a daemon on every node

# Serving (multi-node replicas, queue-depth autoscaling).
LWS = HelmChart("lws", "oci://registry.k8s.io/lws/charts", "0.9.0")
KEDA = HelmChart("keda", "https://kedacore.github.io/charts", "2.18.1")
# Resource metrics for CPU/memory HPAs (the gateway's): EKS does not install metrics-server.
# Chart 3.13.1 deploys metrics-server 0.8.1 (kubernetes-sigs/metrics-server, charts/metrics-server/Chart.yaml).
METRICS_SERVER = HelmChart("metrics-server", "https://kubernetes-sigs.github.io/metrics-server", "3.13.1")
# The token budgets' store (components/k8s/gateway/budget_objects.py): the Valkey project's own chart (Bitnami's
# images moved behind new terms in 2025); 0.11.0 deploys valkey/valkey 9.1.1 (its Chart.yaml appVersion).
VALKEY = HelmChart("valkey", "https://valkey.io/valkey-helm/", "0.11.0")

ALL_CHARTS: tuple[HelmChart, ...] = (
    GPU_OPERATOR, NETWORK_OPERATOR, EFA_DEVICE_PLUGIN, CLUSTER_AUTOSCALER, AWS_LOAD_BALANCER_CONTROLLER, ISTIO_BASE,
    ISTIOD, ISTIO_CNI, KUBE_PROMETHEUS_STACK, OTEL_COLLECTOR, JAEGER, LOKI, ALLOY, LWS, KEDA, METRICS_SERVER, VALKEY,
)


def release(name: str, chart: HelmChart, *, release_name: str, namespace: str,
            values: pulumi.Input[dict[str, Any]],
            opts: pulumi.ResourceOptions) -> k8s.helm.v3.Release:
    """A Helm release of a pinned chart. The kit creates every namespace itself (labels: Pod Security,
    sidecar injection), so Helm never does; `release_name` is fixed so that in-cluster names are stable."""
    chart_ref, repo = ((f"{chart.repository}/{chart.chart}", None) if chart.is_oci
                       else (chart.chart, k8s.helm.v3.RepositoryOptsArgs(repo=chart.repository)))
    return k8s.helm.v3.Release(
        name,
        name=release_name,
        chart=chart_ref,
        version=chart.version,
        repository_opts=repo,
        namespace=namespace,
        create_namespace=False,
        values=values,
        timeout=chart.timeout_seconds,
        opts=opts,
    )
