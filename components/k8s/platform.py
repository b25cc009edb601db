"""Platform: the Kubernetes layer under serving, composed in dependency order.

    system namespace -> GpuStack -> Fabric (EFA plugin | network operator + RDMA networks)
                     -> Tenancy -> Mesh (Istio, STRICT mTLS, tenant policies)
                     -> Observability (kube-prometheus-stack after istiod: Prometheus' sidecar writes its mesh certs)
                     -> metrics-server (resource metrics for CPU/memory HPAs)

Every Helm release of the platform depends on `after` (on EKS: the system node group, the coredns and
EBS CSI add-ons and the gp3 StorageClass), so none starts while there is no node to run its pods, no
cluster DNS, or no volume provisioner, and each records the dependency for `pulumi destroy`.
Serving depends on `tenant_namespaces` (by tenant name), `mesh` and `observability`. `tenancy`, `gpu`, `mesh`,
`fabric`: the Tenancy's, GpuStack's, Mesh's and Fabric's args (infra.component_args).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming, security, versions
from components.k8s.fabric import Fabric, FabricArgs
from components.k8s.gpu_stack import GpuStack, GpuStackArgs
from components.k8s.mesh import Mesh, MeshArgs
from components.k8s.namespaces import create_namespace, namespace_labels
from components.k8s.observability import LokiBucket, Observability
from components.k8s.tenancy import Tenancy, TenancyArgs
from infra.config import PlatformConfig

__all__ = ["METRICS_SERVER_RELEASE", "metrics_server_values", "installs_metrics_server", "Platform"]

METRICS_SERVER_RELEASE = "metrics-server"


def installs_metrics_server(cfg: PlatformConfig) -> bool:
    """EKS installs no metrics-server; an existing cluster may run one already (target.installMetricsServer)."""
    return cfg.is_aws or cfg.target.install_metrics_server


def metrics_server_values() -> dict[str, Any]:
    """metrics-server chart 3.13.1 values: two replicas and a disruption budget, so HPAs keep their data while
    a node drains. The chart's defaults already run it non-root, read-only, with no capabilities and
    priority system-cluster-critical (charts/metrics-server/values.yaml at metrics-server-helm-chart-3.13.1)."""
    return {
        "fullnameOverride": METRICS_SERVER_RELEASE,
        "replicas": 2,
        "podDisruptionBudget": {"enabled": True, "maxUnavailable": 1},
        "resources": security.resources("100m", "200Mi", cpu_limit="1", memory_limit="500Mi"),
    }


class Platform(pulumi.ComponentResource):
    system_namespace: k8s.core.v1.Namespace
    gpu: GpuStack
    fabric: Fabric
    observability: Observability
    tenancy: Tenancy
    mesh: Mesh
    metrics_server: k8s.helm.v3.Release | None

    def __init__(self, name: str, *, cfg: PlatformConfig, tenancy: TenancyArgs, gpu: GpuStackArgs, mesh: MeshArgs,
                 fabric: FabricArgs, after: Sequence[pulumi.Resource] = (),
                 loki_bucket: pulumi.Output[LokiBucket] | None = None,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aifactory:k8s:Platform", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # Device plugins and the autoscaler live here; device plugins mount host paths.
        self.system_namespace = create_namespace(
            f"{name}-system-ns", naming.SYSTEM_NAMESPACE,
            labels=namespace_labels(pod_security="privileged", kubernetes_version=cfg.kubernetes_version),
            opts=child)
        self.gpu = GpuStack(f"{name}-gpu", gpu, opts=child, after=after)
        self.fabric = Fabric(f"{name}-fabric", fabric, opts=child, system_namespace=self.system_namespace,
                             after=after)
        self.tenancy = Tenancy(f"{name}-tenancy", tenancy, opts=child)
        self.mesh = Mesh(f"{name}-mesh", mesh, opts=child, tenant_namespaces=self.tenancy.namespaces, after=after)
        self.observability = Observability(f"{name}-observability", cfg=cfg, loki_bucket=loki_bucket, after=after,
                                           mesh=[self.mesh.istiod], opts=child)
        self.metrics_server = versions.release(
            f"{name}-metrics-server", versions.METRICS_SERVER, release_name=METRICS_SERVER_RELEASE,
            namespace=naming.SYSTEM_NAMESPACE, values=metrics_server_values(),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.system_namespace, *after])) \
            if installs_metrics_server(cfg) else None
        self.register_outputs({"systemNamespace": naming.SYSTEM_NAMESPACE,
                               "monitoringNamespace": cfg.observability.namespace})

    @property
    def tenant_namespaces(self) -> dict[str, k8s.core.v1.Namespace]:
        return self.tenancy.namespaces
