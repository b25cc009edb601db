"""The Pulumi program: composition only. Each step is a component from components/.

    AWS:     Network -> GpuCluster (EKS) -> GpuNodePools -> Kubernetes provider
    onprem:  Kubernetes provider from the existing cluster's kubeconfig
    then:    GpuStack + Fabric + Mesh + Observability + Tenancy -> Serving -> Gateway -> dashboards/rules
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.aws.cluster import GpuCluster, GpuClusterArgs
from components.aws.log_store import LogStore
from components.aws.network import Network, NetworkArgs
from components.aws.node_pool import CapacityArgs, GpuNodePool, GpuNodePoolArgs
from components.k8s.autoscaler import ClusterAutoscaler
from components.k8s.fidelity import FidelityGate
from components.k8s.gateway import Gateway
from components.k8s.gpu_stack import mig_node_labels
from components.k8s.load_balancer import AwsLoadBalancerController
from components.k8s.observability import LOKI_SERVICE_ACCOUNT, LokiBucket, retention_days
from components.k8s.platform import Platform
from components.k8s.serving import (
    KEDA_API_VERSION,
    LWS_API_VERSION,
    MONITORING_API_VERSION,
    ModelDeployment,
    ServingControllers,
)
from components.k8s.serving.component import WORKLOAD_KINDS, ModelPrerequisites
from components.k8s.settings import Model, NodePool
from components.k8s.storage import ModelCacheStorage
from dashboards.deploy import Monitoring
from infra import fidelity
from infra.component_args import (
    cluster_autoscaler_args,
    gateway_args,
    load_balancer_controller_args,
    model_deployment_args,
    platform_args,
)
from infra.config import PlatformConfig
from infra.monitoring import from_platform
from infra.stack.checks import capacity_block_only_workloads, try_idle_warnings

__all__ = ["program", "aws_cluster", "existing_cluster_provider", "network_args", "cluster_args", "node_pool_args",
           "loki_bucket", "model_prerequisites"]


def existing_cluster_provider(cfg: PlatformConfig) -> k8s.Provider:
    """The provider for an existing cluster (target.provider: existing), from its kubeconfig."""
    return k8s.Provider(
        "existing-cluster",
        kubeconfig=cfg.target.kubeconfig,
        context=cfg.target.context,
        enable_server_side_apply=True,
    )


@dataclass(frozen=True)
class AwsCluster:
    """What the AWS layer hands to the Kubernetes layer."""

    cluster: GpuCluster
    network: Network
    opts: pulumi.ResourceOptions  # the explicit AWS provider, for AWS resources created by later layers
    pools: dict[str, GpuNodePool]  # by pool name


def network_args(cfg: PlatformConfig) -> NetworkArgs:
    assert cfg.cluster is not None and cfg.network is not None
    return {"availability_zones": list(cfg.target.availability_zones), "cluster_name": cfg.cluster.name,
            "vpc_cidr": cfg.network.vpc_cidr, "nat_gateways": cfg.network.nat_gateways,
            "flow_log_retention_days": cfg.network.flow_log_retention_days}


# Stack settings of the default AWS provider that an explicit provider ignores unless given them (Pulumi docs,
# "Default provider configuration": `aws:*` config configures only the default provider): which credentials, and
# which accounts the stack may (not) touch.
AWS_ACCOUNT_SETTINGS = {"profile": "profile", "allowedAccountIds": "allowed_account_ids",
                        "forbiddenAccountIds": "forbidden_account_ids"}


def aws_account_settings() -> dict[str, Any]:
    """`aws:profile`, `aws:allowedAccountIds`, `aws:forbiddenAccountIds` from the stack config, for the kit's
    explicit provider (default: none set: the ambient credentials, any account)."""
    conf = pulumi.Config("aws")
    out: dict[str, Any] = {}
    for key, arg in AWS_ACCOUNT_SETTINGS.items():
        value = conf.get(key) if key == "profile" else conf.get_object(key)
        if value:
            out[arg] = value
    return out


def cluster_args(cfg: PlatformConfig, network: Network) -> GpuClusterArgs:
    assert cfg.cluster is not None
    sp = cfg.cluster.system_pool
    args: GpuClusterArgs = {
        "kubernetes_version": cfg.kubernetes_version, "vpc_id": network.vpc_id,
        "subnet_ids": [network.private_subnet_ids_by_zone[z] for z in cfg.target.availability_zones],
        "api_access": cfg.cluster.api_access,
        "public_access_cidrs": list(cfg.cluster.public_access_cidrs),
        "admin_role_arns": list(cfg.cluster.admin_role_arns),
        "deletion_protection": cfg.cluster.deletion_protection, "support_type": cfg.cluster.support_type,
        "addon_versions": dict(cfg.cluster.addon_versions),
        "system_pool": {"instance_type": sp.instance_type, "min_size": sp.min_size, "max_size": sp.max_size,
                        "desired_size": sp.desired_size}}
    if (profile := aws_account_settings().get("profile")) is not None:
        args["aws_profile"] = profile  # the provider's credentials make the kubeconfig's tokens too
    return args


def node_pool_args(cfg: PlatformConfig, pool: NodePool, network: Network, cluster: GpuCluster,
                   now: str | None = None) -> GpuNodePoolArgs:
    """`now`: the UTC time capacity-block schedules are computed against (default: the wall clock)."""
    capacity: CapacityArgs = {"type": pool.capacity.type}
    if pool.capacity.reservation_id is not None:
        capacity["reservation_id"] = pool.capacity.reservation_id
    if pool.capacity.start_time is not None and pool.capacity.end_time is not None:
        capacity["start_time"], capacity["end_time"] = pool.capacity.start_time, pool.capacity.end_time
        capacity["drain_minutes"] = pool.capacity.drain_minutes
    args: GpuNodePoolArgs = {"cluster_name": cluster.cluster_name, "vpc_id": network.vpc_id,
            "cluster_security_group_id": cluster.node_security_group_id,
            "availability_zones": list(pool.availability_zones),
            "subnet_ids": [network.private_subnet_ids_by_zone[z] for z in pool.availability_zones],
            "instance_type": pool.instance_type, "pool_name": pool.name,
            "kubernetes_version": cfg.kubernetes_version, "min_size": pool.min_size,
            "max_size": pool.max_size, "desired_size": pool.desired_size, "fabric": pool.fabric,
            "capacity": capacity, "placement_group": pool.placement_group,
            "root_volume_gib": pool.root_volume_gib, "hugepages_mib": pool.hugepages_mib,
            "labels": {**pool.labels, **mig_node_labels(pool)},
            "taints": [{"key": t.key, "effect": t.effect, "value": t.value} for t in pool.taints]}
    if now is not None:
        args["now"] = now
    return args


def aws_cluster(cfg: PlatformConfig, now: str | None = None) -> AwsCluster:
    """Network -> GpuCluster (EKS) -> one GpuNodePool per configured pool, on an explicit AWS provider."""
    assert cfg.cluster is not None
    name = cfg.cluster.name
    on_aws = pulumi.ResourceOptions(providers=[aws.Provider("aws", region=cfg.target.region, default_tags={
        "tags": {"aifactory.io/stack": cfg.stack, "aifactory.io/cluster": name}}, **aws_account_settings())])
    network = Network(name, network_args(cfg), opts=on_aws)
    cluster = GpuCluster(name, cluster_args(cfg, network), opts=on_aws)
    pools: dict[str, GpuNodePool] = {}
    for pool in cfg.node_pools.values():  # a loop: one frame less under each resource (see `program`)
        pools[pool.name] = GpuNodePool(f"{name}-{pool.name}", node_pool_args(cfg, pool, network, cluster, now),
                                       opts=on_aws)
    return AwsCluster(cluster, network, on_aws, pools)


def loki_bucket(cfg: PlatformConfig, on_aws: AwsCluster) -> pulumi.Output[LokiBucket]:
    """The S3 bucket Loki stores logs in (lifecycle at the log retention) and the IRSA role of its service account."""
    assert cfg.cluster is not None and cfg.target.region is not None
    region = cfg.target.region
    store = LogStore(f"{cfg.cluster.name}-logs", {
        "namespace": cfg.observability.namespace, "service_account": LOKI_SERVICE_ACCOUNT,
        "retention_days": math.ceil(retention_days(cfg.observability.retention)),
        "protect": cfg.cluster.deletion_protection},
        cluster=on_aws.cluster, opts=on_aws.opts)
    return pulumi.Output.all(store.bucket_name, store.role_arn).apply(
        lambda a: LokiBucket(bucket=a[0], region=region, role_arn=a[1]))


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def model_prerequisites(cfg: PlatformConfig, model: Model, *, platform: Platform, controllers: ServingControllers,
                        cache: list[ModelCacheStorage], on_aws: AwsCluster | None) -> ModelPrerequisites:
    """What each of a model's objects waits for: its tenant's namespace; the releases that install the CRDs of
    its custom resources (KEDA, LeaderWorkerSet, the Prometheus operator); for its pods, istiod (the injection
    webhook), its tenant's mesh policies and the mesh's mTLS mode, its pool's nodes (the EKS node group: its
    launch template, role and security groups come before it already; the pool component would add each of its
    resources as an edge), the StorageClass its cache names, the PriorityClass it names and the node cache's
    directories. Nothing else: models come up side by side, not each after the whole platform (and the SDK checks
    every recorded edge for a cycle)."""
    mesh = platform.mesh
    crds = {_group(KEDA_API_VERSION): controllers.releases.get("keda"),
            _group(LWS_API_VERSION): controllers.releases.get("lws"),
            _group(MONITORING_API_VERSION): platform.observability.prometheus_stack}
    return ModelPrerequisites(
        namespace=[platform.tenant_namespaces[model.tenant]],
        crds={group: [release] for group, release in crds.items() if release is not None},
        pods=[mesh.istiod, mesh.peer_authentication, *mesh.policies[cfg.tenant_of(model).namespace],
              *(sc for c in cache for sc in (c.storage_class, c.fast_storage_class)),
              *([on_aws.pools[model.pool].node_group] if on_aws is not None else [])],
        priority_classes=controllers.priority_classes,
        node_cache=[controllers.cache_prep] if controllers.cache_prep is not None else [])


def program(cfg: PlatformConfig, *, now: str | None = None, stacks_dir: Path | None = None) -> None:
    """`now`: the UTC time (2026-12-01T11:30:00Z) capacity-block schedules are computed against: only actions
    still ahead of it are created (default: the wall clock). `stacks_dir`: where the fidelity suites and results
    are (evals/ under it; default: the repo's stacks/)."""
    for warning in [*capacity_block_only_workloads(cfg.models, cfg.node_pools), *try_idle_warnings(cfg.models)]:
        pulumi.log.warn(warning)
    # --- cluster: EKS on AWS, or an existing cluster by kubeconfig --------------------------
    on_aws = aws_cluster(cfg, now) if cfg.is_aws else None
    provider = on_aws.cluster.provider if on_aws is not None else existing_cluster_provider(cfg)
    on_cluster = pulumi.ResourceOptions(provider=provider)

    # --- storage: on AWS the gp3 class (the cluster default), after the EBS CSI add-on --------
    cache = [ModelCacheStorage("model-cache", after=on_aws.cluster.platform_prerequisites, opts=on_cluster)] \
        if on_aws is not None else []
    # Platform releases wait for the system nodes, the add-ons, node egress (private route tables, NAT) and the
    # class their claims name; `pulumi destroy` removes them in the reverse order, releases first.
    after: list[pulumi.Resource] = [*on_aws.cluster.platform_prerequisites, *on_aws.network.private_egress,
                                    *(c.storage_class for c in cache)] if on_aws is not None else []

    # --- platform: GPU stack, fabric, mesh, tenancy, observability backends -----------------
    platform = Platform("platform", platform_args(cfg), after=after,
                        loki_bucket=loki_bucket(cfg, on_aws) if on_aws is not None else None, opts=on_cluster)
    # The gateway's NLB (pod targets) is the AWS Load Balancer Controller's: the gateway waits for it (its pod webhook
    # and the Service's finalizer need it), and `pulumi destroy` removes the gateway's Service (and so its NLB) first.
    load_balancer: list[pulumi.Resource] = []
    if on_aws is not None:
        on_both = pulumi.ResourceOptions.merge(on_aws.opts, pulumi.ResourceOptions(providers=[provider]))
        ClusterAutoscaler("cluster-autoscaler", cluster_autoscaler_args(cfg), cluster=on_aws.cluster,
                          system_namespace=platform.system_namespace, opts=on_both)
        load_balancer.append(AwsLoadBalancerController(
            "aws-load-balancer-controller", load_balancer_controller_args(cfg, on_aws.network.vpc_id),
            cluster=on_aws.cluster, system_namespace=platform.system_namespace,
            after=[*after, platform.observability.prometheus_stack], opts=on_both).release)

    # --- serving and gateway ----------------------------------------------------------------
    controllers = ServingControllers("serving", cfg=cfg, opts=on_cluster.merge(
        pulumi.ResourceOptions(depends_on=[platform.system_namespace, *after])))
    # On AWS: model caches on the kit's gp3 class, and s3:// models get IRSA roles (AWS provider too).
    on_models = on_cluster if on_aws is None else \
        pulumi.ResourceOptions.merge(on_aws.opts, pulumi.ResourceOptions(providers=[provider]))
    # Each object waits for what it needs (the mesh's injection webhook before any pod, CRDs before custom resources).
    # A loop, not a comprehension (a frame of its own before Python 3.12): the SDK turns every frame under a
    # resource's constructor into a source position (pulumi 3.272 runtime/resource.py _get_stack_trace).
    models: list[ModelDeployment] = []
    for m in cfg.models.values():
        models.append(ModelDeployment(f"model-{m.name}", model_deployment_args(cfg, m),
                                      cluster=on_aws.cluster if on_aws is not None else None, opts=on_models,
                                      after=model_prerequisites(cfg, m, platform=platform, controllers=controllers,
                                                                cache=cache, on_aws=on_aws)))
    # Deadline-aware routing chooses only among variants with a passing, current fidelity result (infra/fidelity.py).
    evals = stacks_dir or fidelity.default_stacks_dir()
    gate = fidelity.load_verdicts(cfg, evals)
    # The gateway's pods get their sidecar from istiod (whose release follows the Istio CRDs its policies use); its
    # ServiceMonitor needs the Prometheus operator's CRD; Envoy resolves the models' Services (envoy_replicas): its
    # config changes only once the models' workloads are ready (awaited).
    gateway = Gateway("gateway", gateway_args(fidelity.routable(cfg, gate)), after=after, opts=on_cluster.merge(
        pulumi.ResourceOptions(depends_on=[platform.mesh.istiod, platform.observability.prometheus_stack,
                                           *load_balancer, *(m.objects["Service"] for m in models),
                                           *(m.objects[k] for m in models for k in sorted(WORKLOAD_KINDS)
                                             if k in m.objects)])))
    if cfg.gateway.fidelity:
        FidelityGate("fidelity", cfg=cfg, verdicts=gate, evaluates=fidelity.evaluates(cfg, evals),
                     opts=on_cluster.merge(pulumi.ResourceOptions(depends_on=[gateway])))

    # --- dashboards and rules ---------------------------------------------------------------
    # Dashboards (ConfigMaps) go to the observability namespace; the PrometheusRule needs the operator's CRD.
    Monitoring("monitoring", config=from_platform(cfg), provider=provider,
               depends_on=[platform.observability.namespace, platform.observability.prometheus_stack])

    # --- exports ----------------------------------------------------------------------------
    pulumi.export("stack", cfg.stack)
    pulumi.export("kubernetesVersion", cfg.kubernetes_version)
    pulumi.export("gpuPools", sorted(p.name for p in cfg.gpu_pools))
    pulumi.export("models", sorted(cfg.models))
