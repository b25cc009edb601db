"""The Pulumi program: composition only. Each step is a component from components/.

    AWS:     Network -> GpuCluster (EKS) -> GpuNodePools -> Kubernetes provider
    onprem:  Kubernetes provider from the existing cluster's kubeconfig
    then:    GpuStack + Fabric + Mesh + Observability + Tenancy -> Serving -> Gateway -> dashboards/rules
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from infra.config import PlatformConfig

__all__ = ["program", "existing_cluster_provider"]


def existing_cluster_provider(cfg: PlatformConfig) -> k8s.Provider:
    """The provider for an existing cluster (target.provider: existing), from its kubeconfig."""
    return k8s.Provider(
        "existing-cluster",
        kubeconfig=cfg.target.kubeconfig,
        context=cfg.target.context,
        enable_server_side_apply=True,
    )


def program(cfg: PlatformConfig) -> None:
    # --- cluster (AWS layer: components.aws) ----------------------------------------------
    if cfg.is_aws:
        provider = k8s.Provider("eks-cluster", kubeconfig="{}", enable_server_side_apply=True)  # replaced by GpuCluster.provider
    else:
        provider = existing_cluster_provider(cfg)

    # --- platform (components.k8s: GpuStack, Fabric, Mesh, Tenancy, Observability, autoscaler) --

    # --- serving and gateway (components.k8s: ModelDeployment, Gateway) ---------------------

    # --- dashboards and rules (dashboards/) -------------------------------------------------

    # --- exports ---------------------------------------------------------------------------
    pulumi.export("stack", cfg.stack)
    pulumi.export("kubernetesVersion", cfg.kubernetes_version)
    pulumi.export("gpuPools", sorted(p.name for p in cfg.gpu_pools))
    pulumi.export("models", sorted(cfg.models))
    _ = provider
