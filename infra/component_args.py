"""PlatformConfig -> the args of each Kubernetes component (the AWS layer's mapping is in infra/program.py).

The components take their own typed args, so a platform team can use one without the kit's stack config;
this module is the only place that knows both shapes.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pulumi

from components.k8s.autoscaler import ClusterAutoscalerArgs
from components.k8s.engines import ENGINES
from components.k8s.fabric import FabricArgs, FabricInfinibandArgs
from components.k8s.gateway import (
    BudgetServiceArgs,
    GatewayArgs,
    GatewayModelArgs,
    GatewayTenantArgs,
    JwtIssuerArgs,
    RoutingArgs,
    TokenBudgetArgs,
)
from components.k8s.gateway import termination_grace_seconds as gateway_grace_seconds
from components.k8s.gateway.budget_objects import termination_grace_seconds as budget_grace_seconds
from components.k8s.gateway.envoy.budgets import any_budget
from components.k8s.gpu_stack import GpuPoolArgs, GpuStackArgs
from components.k8s.load_balancer import AwsLoadBalancerControllerArgs
from components.k8s.mesh import MeshArgs
from components.k8s.observability import AlertingArgs, AlertReceiverArgs, ObservabilityArgs
from components.k8s.platform import PlatformArgs
from components.k8s.serving import ModelDeploymentArgs, ModelInfinibandArgs
from components.k8s.serving.lifecycle import termination_grace_seconds as model_grace_seconds
from components.k8s.settings import AlertReceiver, JwtIssuer, Model, Tenant, TokenBudget
from components.k8s.storage import cache_storage_class_name
from components.k8s.tenancy import TenancyArgs
from components.vocabulary import DEFAULT_MAX_GRACEFUL_TERMINATION_SECONDS
from infra.config import PlatformConfig
from infra.stack import declared

__all__ = ["same_names", "shared", "tenancy_args", "gateway_args", "model_deployment_args", "gpu_stack_args",
           "mesh_args", "fabric_args", "pod_grace_seconds", "cluster_autoscaler_args",
           "load_balancer_controller_args", "observability_args", "platform_args"]

WEIGHT_DOWNLOAD_SCHEMES = ("hf://", "s3://")  # model URIs whose server fetches weights over HTTPS at start-up
# (besides a tokenizer its engine downloads from the Hub: Engine.tokenizer_from_hub)


def same_names(value: Any, *, unset_left_out: bool = False) -> Any:
    """A settings dataclass as the component args of the same names (a section both shapes spell alike: gateway
    retries, health checks, ingest, ...), tuples as lists; `unset_left_out`: fields that are None are left out, so
    the component's own default applies."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(value):
        v = getattr(value, f.name)
        if v is not None or not unset_left_out:
            out[f.name] = list(v) if isinstance(v, tuple) else v
    return out


def shared(value: Any, args: type) -> dict[str, Any]:
    """The settings of the settings dataclass `value` whose values are scalars (a number, string or boolean) that
    the component args `args` (a TypedDict) take by the same name, those unset (None) left out so the component's
    own default applies: a new setting needs no line here when its arg is spelt alike (what differs in shape is
    mapped after it)."""
    keys = _arg_keys(args.__name__, args)
    return {f.name: v for f in declared.declared_fields(value.__class__)
            if f.name in keys and isinstance(v := getattr(value, f.name), str | int | float)}


_ARG_KEYS: dict[str, frozenset[str]] = {}


def _arg_keys(name: str, args: Any) -> frozenset[str]:
    """The keys of a component's args (a TypedDict), read once."""
    if name not in _ARG_KEYS:
        _ARG_KEYS[name] = frozenset(typing.get_type_hints(args))
    return _ARG_KEYS[name]


def tenancy_args(cfg: PlatformConfig) -> TenancyArgs:
    """Every tenant with its (derived) quotas, and what the tenants' network policies need of each model."""
    return {
        "tenants": {t.name: {"namespace": t.namespace, "gpu_quota": t.gpu_quota, "mig_quota": dict(t.mig_quota),
                             "cpu_quota": t.cpu_quota, "memory_quota": t.memory_quota}
                    for t in cfg.tenants.values()},
        "models": {m.name: {"tenant": m.tenant, "callers": list(m.callers), "multi_node": m.multi_node,
                            "downloads_weights": m.uri.startswith(WEIGHT_DOWNLOAD_SCHEMES)
                            or ENGINES[m.engine].tokenizer_from_hub(m)}
                   for m in cfg.models.values()},
        "kubernetes_version": cfg.kubernetes_version,
        "gateway_namespace": cfg.gateway.namespace,
        "monitoring_namespace": cfg.observability.namespace,
    }


def _gateway_model(cfg: PlatformConfig, m: Model) -> GatewayModelArgs:
    out = typing.cast(GatewayModelArgs, {**shared(m, GatewayModelArgs), "e2e_slo_seconds": m.slo.e2e_seconds,
                                         "session_affinity_balance_factor": m.session_affinity_balance_factor,
                                         "max_replicas": m.replicas.max, "multi_node": m.multi_node})
    if m.variant is not None:  # the cost from the stack's prices when the config gives requestsPerSecond instead
        out["variant"] = {"cost_per_request": cfg.cost_per_request(m)}
        if m.variant.max_requests is not None:
            out["variant"]["max_requests"] = m.variant.max_requests
    return out


def _gateway_tenant(t: Tenant) -> GatewayTenantArgs:
    rl = t.rate_limit
    out: GatewayTenantArgs = {"namespace": t.namespace, "share_with": list(t.share_with), "rate_limit": {
        "requests_per_second": rl.requests_per_second, "burst": rl.burst,
        "batch_requests_per_second": rl.batch_requests_per_second, "batch_burst": rl.batch_burst}}
    if t.token_budget is not None:
        out["token_budget"] = _token_budget(t.token_budget)
    return out


def _token_budget(b: TokenBudget) -> TokenBudgetArgs:
    """The budget's args: its windows (those set) and every other field."""
    return typing.cast(TokenBudgetArgs, {k: v for k, v in same_names(b).items() if v is not None})


def _issuer(i: JwtIssuer) -> JwtIssuerArgs:
    out: JwtIssuerArgs = {"issuer": i.issuer, "jwks_uri": i.jwks_uri, "audiences": list(i.audiences)}
    if i.tenants is not None:  # None: any tenant; [] would be none
        out["tenants"] = list(i.tenants)
    return out


def gateway_args(cfg: PlatformConfig) -> GatewayArgs:
    """The models the gateway routes to (for a fidelity-gated stack: from infra.fidelity.routable(cfg, ...)), their
    tenants and every gateway setting of the stack."""
    gw = cfg.gateway
    routing: dict[str, RoutingArgs] = {}
    for workload, policy in gw.routing.items():
        routing.setdefault(workload, {})["policy"] = policy
    for workload, margin in gw.routing_margins.items():
        routing.setdefault(workload, {})["margin_percent"] = margin
    return typing.cast(GatewayArgs, {
        **shared(gw, GatewayArgs),
        "models": {m.name: _gateway_model(cfg, m) for m in cfg.models.values()},
        "tenants": {t.name: _gateway_tenant(t) for t in cfg.tenants.values()},
        "kubernetes_version": cfg.kubernetes_version,
        "monitoring_namespace": cfg.observability.namespace,
        "trace_sample_ratio": cfg.observability.trace_sample_ratio,
        "aws_internal_load_balancer": cfg.is_aws,
        "retries": same_names(gw.retries),
        "outlier_detection": same_names(gw.outlier_detection),
        "circuit_breakers": same_names(gw.circuit_breakers),
        "health_check": same_names(gw.health_check),
        "auth": {"tenant_claim": gw.auth.tenant_claim, "issuers": [_issuer(i) for i in gw.auth.issuers]},
        "routing": routing,
        **({"token_budgets": {w: _token_budget(b) for w, b in gw.token_budgets.items()}} if gw.token_budgets else {}),
        **({"budget_service": _budget_service(cfg)} if gw.budget_service.image else {}),
    })


def _budget_service(cfg: PlatformConfig) -> BudgetServiceArgs:
    b = cfg.gateway.budget_service
    out: BudgetServiceArgs = {"image": b.image, "replicas": b.replicas, "store_replicas": b.store_replicas,
                              "store_volume_gib": b.store_volume_gib}
    if (sc := cache_storage_class_name(cfg)) is not None:
        out["store_storage_class"] = sc
    return out


def model_deployment_args(cfg: PlatformConfig, m: Model) -> ModelDeploymentArgs:
    """One model of the stack with its pool, its tenant's namespace and where the cluster runs."""
    pool = cfg.pool_of(m)
    args = typing.cast(ModelDeploymentArgs, {
        **shared(m, ModelDeploymentArgs),
        "model_name": m.name,
        "namespace": cfg.tenant_of(m).namespace,
        "pool": {"name": pool.name, "instance_type": pool.instance_type, "fabric": pool.fabric,
                 "hugepages_mib": pool.hugepages_mib, "capacity_type": pool.capacity.type,
                 "taints": [{"key": t.key, "effect": t.effect, "value": t.value} for t in pool.taints]},
        "quantized_checkpoint": m.quantized_checkpoint,
        "replicas": same_names(m.replicas),
        "monitoring_namespace": cfg.observability.namespace,
        "trace_sample_ratio": cfg.observability.trace_sample_ratio,
    })
    for key, value in (("aws_region", cfg.target.region if cfg.is_aws else None),
                       ("storage_class", cfg.target.storage_class),
                       ("priority_class_name", cfg.priority_class_of(m))):
        if value is not None:
            args[key] = value  # type: ignore[literal-required]
    if pool.vllm_image is not None:
        args["pool"]["vllm_image"] = pool.vllm_image
    if pool.capacity.start_time is not None and pool.capacity.end_time is not None:  # a capacity block's window
        args["pool"] |= {"capacity_start_time": pool.capacity.start_time, "capacity_end_time": pool.capacity.end_time,
                         "capacity_drain_minutes": pool.capacity.drain_minutes}
    if m.speculative is not None:
        sp = m.speculative
        args["speculative"] = {"method": sp.method, "num_speculative_tokens": sp.num_speculative_tokens}
        if sp.draft_model is not None:
            args["speculative"]["draft_model"] = sp.draft_model
    if cfg.infiniband is not None:
        ib = cfg.infiniband
        infiniband: ModelInfinibandArgs = {"hcas": list(ib.hcas), "network": ib.network,
                                           "interfaces": list(ib.interfaces),
                                           "rdma_resource_name": ib.rdma_resource_name}
        args["infiniband"] = infiniband
    return args


def gpu_stack_args(cfg: PlatformConfig) -> GpuStackArgs:
    """The GPU pools' taints and MIG layouts; on EKS the node images bring the drivers and the node groups label
    their own nodes, on an existing cluster the kit labels the listed nodes of MIG pools."""
    pools: dict[str, GpuPoolArgs] = {}
    for pool in cfg.gpu_pools:
        p: GpuPoolArgs = {"taints": [{"key": t.key, "effect": t.effect, "value": t.value} for t in pool.taints]}
        if pool.mig:
            p["mig"] = pool.mig
            if not cfg.is_aws and pool.nodes:
                p["nodes"] = list(pool.nodes)
        pools[pool.name] = p
    rdma = bool(cfg.infiniband_pools)
    args: GpuStackArgs = {"pools": pools, "hosts_have_drivers": cfg.is_aws or cfg.target.hosts_have_drivers,
                          "rdma": rdma, "kubernetes_version": cfg.kubernetes_version}
    if rdma and cfg.infiniband is not None:
        args["hosts_have_ofed"] = cfg.infiniband.hosts_have_ofed
    return args


def mesh_args(cfg: PlatformConfig) -> MeshArgs:
    """The tenants' namespaces, their models' callers and multi-node peers, where the gateway and Prometheus run."""
    return {
        "tenants": {t.name: {"namespace": t.namespace} for t in cfg.tenants.values()},
        "models": {m.name: {"tenant": m.tenant, "callers": list(m.callers), "multi_node": m.multi_node}
                   for m in cfg.models.values()},
        "kubernetes_version": cfg.kubernetes_version,
        "gateway_namespace": cfg.gateway.namespace,
        "monitoring_namespace": cfg.observability.namespace,
        "trace_sampling_percent": cfg.observability.mesh_trace_sampling_percent,
    }


def fabric_args(cfg: PlatformConfig) -> FabricArgs:
    """The EFA pools (their types and taints), or the InfiniBand pools with the stack's infiniband settings."""
    args: FabricArgs = {"kubernetes_version": cfg.kubernetes_version}
    if cfg.efa_pools:
        args["efa_pools"] = {p.name: {"instance_type": p.instance_type, "taints": [
            {"key": t.key, "effect": t.effect, "value": t.value} for t in p.taints]} for p in cfg.efa_pools}
    if cfg.infiniband_pools and cfg.infiniband is not None:
        ib = cfg.infiniband
        infiniband: FabricInfinibandArgs = {
            "pools": [p.name for p in cfg.infiniband_pools], "network": ib.network, "interfaces": list(ib.interfaces),
            "ip_range": ib.ip_range, "hca_device_ids": list(ib.hca_device_ids),
            "rdma_resource_name": ib.rdma_resource_name, "rdma_hca_max": ib.rdma_hca_max,
            "hosts_have_ofed": ib.hosts_have_ofed, "hcas": list(ib.hcas)}
        args["infiniband"] = infiniband
    return args


def pod_grace_seconds(cfg: PlatformConfig) -> dict[str, int]:
    """terminationGracePeriodSeconds of each kind of pod the stack renders that drains work in flight, by a label
    (`model <name>`, with its role for a multi-node replica's leader and workers; `gateway`; `budget service`)."""
    out: dict[str, int] = {}
    for m in cfg.models.values():
        for role in ("leader", "worker") if m.multi_node else ("single",):
            out[f"model {m.name}" + (f" ({role})" if m.multi_node else "")] = model_grace_seconds(m, role)
    out["gateway"] = gateway_grace_seconds(cfg)  # the gateway routes to every model key (infra.fidelity.routable)
    if any_budget(cfg):
        out["budget service"] = budget_grace_seconds(cfg)
    return out


def cluster_autoscaler_args(cfg: PlatformConfig) -> ClusterAutoscalerArgs:
    """AWS stacks only: the EKS cluster's name and region, and the longest grace period of the stack's pods, so a
    scale-down lets each of them drain (components.k8s.autoscaler); never below the autoscaler's default, which
    the platform releases' own pods (charts with grace periods of their own) keep."""
    assert cfg.cluster is not None and cfg.target.region is not None
    return {"cluster_name": cfg.cluster.name, "region": cfg.target.region,
            "max_graceful_termination_seconds": max(DEFAULT_MAX_GRACEFUL_TERMINATION_SECONDS,
                                                    *pod_grace_seconds(cfg).values())}


def load_balancer_controller_args(cfg: PlatformConfig, vpc_id: pulumi.Input[str]) -> AwsLoadBalancerControllerArgs:
    """AWS stacks only: the EKS cluster's name, region and VPC (components.k8s.load_balancer)."""
    assert cfg.cluster is not None and cfg.target.region is not None
    return {"cluster_name": cfg.cluster.name, "region": cfg.target.region, "vpc_id": vpc_id}


def _receiver(r: AlertReceiver) -> AlertReceiverArgs:
    out: AlertReceiverArgs = {"type": r.type}
    if r.secret is not None:
        out["secret"] = {"name": r.secret.name, "key": r.secret.key}
    for key, value in (("channel", r.channel), ("to", r.to), ("sender", r.sender), ("smarthost", r.smarthost),
                       ("username", r.username), ("url", r.url)):
        if value is not None:
            out[key] = value  # type: ignore[literal-required]
    return out


def observability_args(cfg: PlatformConfig) -> ObservabilityArgs:
    """The stack's observability settings the backends read, the tenants' and the gateway's namespaces (their
    sidecars are scraped), and where the cluster runs (the volumes' StorageClass)."""
    obs = cfg.observability
    alerting: AlertingArgs = {"receivers": {k: _receiver(r) for k, r in obs.alerting.receivers.items()},
                              "routes": {s: list(names) for s, names in obs.alerting.routes.items()}}
    if obs.alerting.heartbeat is not None:
        alerting["heartbeat"] = {"receiver": obs.alerting.heartbeat.receiver,
                                 "repeat_interval": obs.alerting.heartbeat.repeat_interval}
    args: ObservabilityArgs = {
        "namespace": obs.namespace, "retention": obs.retention, "trace_retention": obs.trace_retention,
        "loki_mode": obs.loki_mode, "trace_sample_ratio": obs.trace_sample_ratio,
        "control_plane_metrics": obs.control_plane_metrics,
        "ingest": same_names(obs.ingest),
        "volumes": same_names(obs.volumes, unset_left_out=True),
        "alerting": alerting,
        "tenant_namespaces": [t.namespace for t in cfg.tenants.values()],
        "gateway_namespace": cfg.gateway.namespace,
        "kubernetes_version": cfg.kubernetes_version,
    }
    if cfg.is_aws and cfg.target.region is not None:
        args["aws_region"] = cfg.target.region
    if cfg.target.storage_class is not None:
        args["storage_class"] = cfg.target.storage_class
    return args


def platform_args(cfg: PlatformConfig) -> PlatformArgs:
    """Each part of the platform layer from the stack; EKS installs no metrics-server, an existing cluster may."""
    return {"tenancy": tenancy_args(cfg), "gpu": gpu_stack_args(cfg), "mesh": mesh_args(cfg),
            "fabric": fabric_args(cfg), "observability": observability_args(cfg),
            "kubernetes_version": cfg.kubernetes_version,
            "install_metrics_server": cfg.is_aws or cfg.target.install_metrics_server}
