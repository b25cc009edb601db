"""The Pulumi program: composition only. Each step is a component from components/.

    AWS:     Network -> GpuCluster (EKS) -> GpuNodePools -> Kubernetes provider
    onprem:  Kubernetes provider from the existing cluster's kubeconfig
    then:    GpuStack + Fabric + Mesh + Observability + Tenancy -> Serving -> Gateway -> dashboards/rules
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.aws.cluster import GpuCluster
from components.aws.network import Network
from components.aws.node_pool import GpuNodePool
from components.k8s.autoscaler import ClusterAutoscaler
from components.k8s.gateway import Gateway
from components.k8s.gpu_stack import mig_node_labels
from components.k8s.platform import Platform
from components.k8s.serving import ModelDeployment, ServingControllers
from dashboards.deploy import Monitoring
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
    cluster: GpuCluster | None = None
    if cfg.is_aws and cfg.cluster is not None and cfg.network is not None:
        name, zones = cfg.cluster.name, list(cfg.target.availability_zones)
        on_aws = pulumi.ResourceOptions(providers=[aws.Provider("aws", region=cfg.target.region, default_tags={
            "tags": {"aifactory.io/stack": cfg.stack, "aifactory.io/cluster": name}})])
        network = Network(name, {"availability_zones": zones, "cluster_name": name, "vpc_cidr": cfg.network.vpc_cidr,
                                 "nat_gateways": cfg.network.nat_gateways,
                                 "flow_log_retention_days": cfg.network.flow_log_retention_days}, opts=on_aws)
        sp = cfg.cluster.system_pool
        cluster = GpuCluster(name, {
            "kubernetes_version": cfg.kubernetes_version, "vpc_id": network.vpc_id,
            "subnet_ids": [network.private_subnet_ids_by_zone[z] for z in zones],
            "public_access_cidrs": list(cfg.cluster.public_access_cidrs),
            "admin_role_arns": list(cfg.cluster.admin_role_arns),
            "system_pool": {"instance_type": sp.instance_type, "min_size": sp.min_size, "max_size": sp.max_size,
                            "desired_size": sp.desired_size}}, opts=on_aws)
        for pool in cfg.node_pools.values():
            GpuNodePool(f"{name}-{pool.name}", {
                "cluster_name": cluster.cluster_name, "vpc_id": network.vpc_id,
                "cluster_security_group_id": cluster.node_security_group_id,
                "availability_zones": list(pool.availability_zones),
                "subnet_ids": [network.private_subnet_ids_by_zone[z] for z in pool.availability_zones],
                "instance_type": pool.instance_type, "pool_name": pool.name,
                "kubernetes_version": cfg.kubernetes_version, "min_size": pool.min_size,
                "max_size": pool.max_size, "desired_size": pool.desired_size, "fabric": pool.fabric,
                "capacity": {"type": pool.capacity.type, **({"reservation_id": pool.capacity.reservation_id}
                                                            if pool.capacity.reserved else {})},
                "placement_group": pool.placement_group, "root_volume_gib": pool.root_volume_gib,
                "hugepages_mib": pool.hugepages_mib, "labels": {**pool.labels, **mig_node_labels(pool)},
                "taints": [{"key": t.key, "effect": t.effect, "value": t.value} for t in pool.taints]}, opts=on_aws)
        provider = cluster.provider
    else:
        provider = existing_cluster_provider(cfg)

    # --- platform (components.k8s: GpuStack, Fabric, Mesh, Tenancy, Observability, autoscaler) --
    platform = Platform("platform", cfg=cfg, opts=pulumi.ResourceOptions(provider=provider))
    if cluster is not None:
        ClusterAutoscaler("cluster-autoscaler", cfg=cfg, cluster=cluster, system_namespace=platform.system_namespace,
                          opts=pulumi.ResourceOptions.merge(on_aws, pulumi.ResourceOptions(providers=[provider])))

    # --- serving and gateway (components.k8s: ModelDeployment, Gateway) ---------------------
    on_cluster = pulumi.ResourceOptions(provider=provider)
    controllers = ServingControllers("serving", cfg=cfg, opts=pulumi.ResourceOptions.merge(
        on_cluster, pulumi.ResourceOptions(depends_on=[platform.system_namespace])))
    models = [ModelDeployment(f"model-{m.name}", cfg=cfg, model=m, opts=pulumi.ResourceOptions.merge(
        on_cluster, pulumi.ResourceOptions(depends_on=[platform.tenant_namespaces[m.tenant],
                                                       platform.observability, controllers])))
              for m in cfg.models.values()]
    Gateway("gateway", cfg=cfg, opts=pulumi.ResourceOptions.merge(
        on_cluster, pulumi.ResourceOptions(depends_on=[platform.mesh, platform.observability, *models])))

    # --- dashboards and rules (dashboards/) -------------------------------------------------
    Monitoring("monitoring", cfg=cfg, provider=provider, depends_on=[platform])

    # --- exports ---------------------------------------------------------------------------
    pulumi.export("stack", cfg.stack)
    pulumi.export("kubernetesVersion", cfg.kubernetes_version)
    pulumi.export("gpuPools", sorted(p.name for p in cfg.gpu_pools))
    pulumi.export("models", sorted(cfg.models))
    _ = provider
