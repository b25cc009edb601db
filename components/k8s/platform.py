"""Platform: the Kubernetes layer under serving, composed in dependency order.

    system namespace -> GpuStack -> Fabric (EFA plugin | network operator + RDMA networks)
                     -> Tenancy -> Mesh (Istio, STRICT mTLS, tenant policies)
                     -> Observability (kube-prometheus-stack after istiod: Prometheus' sidecar writes its mesh certs)
                     -> metrics-server (resource metrics for CPU/memory HPAs)

Every Helm release of the platform depends on `after` (on EKS: the system node group, the coredns and
EBS CSI add-ons and the gp3 StorageClass), so none starts while there is no node to run its pods, no
cluster DNS, or no volume provisioner, and each records the dependency for `pulumi destroy`.
Serving depends on `tenant_namespaces` (by tenant name), `mesh` and `observability`.

Platform takes its own `args` (PlatformArgs: each part's args), so a platform team can install the whole layer
without the kit's stack config; infra.component_args.platform_args maps PlatformConfig to them.
"""

# No `from __future__ import annotations`: TypedDict reads NotRequired (and the package analyzer the types) from
# evaluated annotations.
from collections.abc import Sequence
from typing import Any, NotRequired, TypedDict

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming, security, versions
from components.k8s.defaults import DEFAULT_KUBERNETES_VERSION, DEFAULT_MONITORING_NAMESPACE
from components.k8s.fabric import Fabric, FabricArgs
from components.k8s.gpu_stack import GpuStack, GpuStackArgs
from components.k8s.mesh import Mesh, MeshArgs
from components.k8s.namespaces import create_namespace, namespace_labels
from components.k8s.observability import LokiBucket, Observability, ObservabilityArgs
from components.k8s.tenancy import Tenancy, TenancyArgs
from components.validation import check_shape

__all__ = ["TYPE", "PlatformArgs", "METRICS_SERVER_RELEASE", "metrics_server_values", "Platform"]

TYPE = "aifactory:k8s:Platform"  # the type token of the kit's existing stacks (part of every child's URN)
METRICS_SERVER_RELEASE = "metrics-server"


class PlatformArgs(TypedDict):
    """Arguments of a Platform: each part's own args."""

    tenancy: TenancyArgs
    """The tenant namespaces (Tenancy)."""
    gpu: GpuStackArgs
    """The GPU operator (GpuStack)."""
    mesh: MeshArgs
    """Istio and the tenants' authorization policies (Mesh)."""
    observability: ObservabilityArgs
    """The metrics, traces and logs backends (Observability)."""
    fabric: NotRequired[FabricArgs]
    """The data-plane fabric (Fabric). Default: none (no EFA device plugin, no network operator)."""
    kubernetes_version: NotRequired[str]
    """The cluster's Kubernetes minor version (the system namespace's Pod Security labels). Default: 1.35."""
    install_metrics_server: NotRequired[bool]
    """Install metrics-server (EKS has none; an existing cluster may run one already). Default: true."""


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
    """The Kubernetes layer under serving: GPU operator, fabric, tenants, mesh, observability, metrics-server."""
    pulumi_type = TYPE  # the type token (part of every child's URN); the component package hosts a subclass
    # with `aifactory:index:<name>`, the token its schema names (components/__main__.py)

    system_namespace_name: pulumi.Output[str]
    """The kit's system namespace (device plugins, the autoscaler)."""
    monitoring_namespace: pulumi.Output[str]
    """The observability namespace."""

    def __init__(self, name: str, args: PlatformArgs, opts: pulumi.ResourceOptions | None = None, *,
                 after: Sequence[pulumi.Resource] = (), loki_bucket: pulumi.Output[LokiBucket] | None = None) -> None:
        """`after`: what every release waits for; `loki_bucket`: Loki's S3 bucket and role (AWS)."""
        super().__init__(self.pulumi_type, name, None, opts)
        check_shape("Platform", name, args, PlatformArgs)  # each part validates its own values
        kubernetes_version = args.get("kubernetes_version", DEFAULT_KUBERNETES_VERSION)
        monitoring = args["observability"].get("namespace", DEFAULT_MONITORING_NAMESPACE)
        child = pulumi.ResourceOptions(parent=self)
        # Device plugins and the autoscaler live here; device plugins mount host paths.
        self.system_namespace = create_namespace(
            f"{name}-system-ns", naming.SYSTEM_NAMESPACE,
            labels=namespace_labels(pod_security="privileged", kubernetes_version=kubernetes_version),
            opts=child)
        self.gpu = GpuStack(f"{name}-gpu", args["gpu"], opts=child, after=after)
        self.fabric = Fabric(f"{name}-fabric", args.get("fabric") or {}, opts=child,
                             system_namespace=self.system_namespace, after=after)
        self.tenancy = Tenancy(f"{name}-tenancy", args["tenancy"], opts=child)
        self.mesh = Mesh(f"{name}-mesh", args["mesh"], opts=child, tenant_namespaces=self.tenancy.namespaces,
                         after=after)
        self.observability = Observability(f"{name}-observability", args["observability"], opts=child,
                                           loki_bucket=loki_bucket, after=after, mesh=[self.mesh.istiod])
        self.metrics_server = versions.release(
            f"{name}-metrics-server", versions.METRICS_SERVER, release_name=METRICS_SERVER_RELEASE,
            namespace=naming.SYSTEM_NAMESPACE, values=metrics_server_values(),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.system_namespace, *after])) \
            if args.get("install_metrics_server", True) else None
        self.system_namespace_name = pulumi.Output.from_input(naming.SYSTEM_NAMESPACE)
        self.monitoring_namespace = pulumi.Output.from_input(monitoring)
        self.register_outputs({"systemNamespace": naming.SYSTEM_NAMESPACE,
                               "monitoringNamespace": monitoring})

    @property
    def tenant_namespaces(self) -> dict[str, k8s.core.v1.Namespace]:
        return self.tenancy.namespaces
