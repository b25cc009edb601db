"""Platform: the Kubernetes layer under serving, composed in dependency order.

    system namespace -> GpuStack -> Fabric (EFA plugin | network operator + RDMA networks)
                     -> Observability -> Tenancy -> Mesh (Istio, STRICT mTLS, tenant policies)

Serving depends on `tenant_namespaces` (by tenant name), `mesh` and `observability`.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming
from components.k8s.fabric import Fabric
from components.k8s.gpu_stack import GpuStack
from components.k8s.mesh import Mesh
from components.k8s.namespaces import create_namespace, namespace_labels
from components.k8s.observability import LokiBucket, Observability
from components.k8s.tenancy import Tenancy
from infra.config import PlatformConfig

__all__ = ["Platform"]


class Platform(pulumi.ComponentResource):
    system_namespace: k8s.core.v1.Namespace
    gpu: GpuStack
    fabric: Fabric
    observability: Observability
    tenancy: Tenancy
    mesh: Mesh

    def __init__(self, name: str, *, cfg: PlatformConfig, loki_bucket: pulumi.Output[LokiBucket] | None = None,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aifactory:k8s:Platform", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # Device plugins and the autoscaler live here; device plugins mount host paths.
        self.system_namespace = create_namespace(
            f"{name}-system-ns", naming.SYSTEM_NAMESPACE,
            labels=namespace_labels(pod_security="privileged", kubernetes_version=cfg.kubernetes_version),
            opts=child)
        self.gpu = GpuStack(f"{name}-gpu", cfg=cfg, opts=child)
        self.fabric = Fabric(f"{name}-fabric", cfg=cfg, system_namespace=self.system_namespace, opts=child)
        self.observability = Observability(f"{name}-observability", cfg=cfg, loki_bucket=loki_bucket, opts=child)
        self.tenancy = Tenancy(f"{name}-tenancy", cfg=cfg, opts=child)
        self.mesh = Mesh(f"{name}-mesh", cfg=cfg, tenant_namespaces=self.tenancy.namespaces, opts=child)
        self.register_outputs({"systemNamespace": naming.SYSTEM_NAMESPACE,
                               "monitoringNamespace": cfg.observability.namespace})

    @property
    def tenant_namespaces(self) -> dict[str, k8s.core.v1.Namespace]:
        return self.tenancy.namespaces
