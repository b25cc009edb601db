"""The observability view of a stack: a PlatformConfig reduced to the ObservabilityConfig that dashboards/ builds
dashboards and rules from (dashboards/ never reads the stack config itself)."""

from __future__ import annotations

import datetime

from components.k8s.gateway.envoy.budgets import any_budget
from components.k8s.settings import Capacity
from dashboards.config import (
    DEFAULT_RUNBOOK_URL,
    LoadBalancerController,
    Objective,
    ObservabilityConfig,
    Pool,
    Selectors,
    ServedModel,
    VariantCost,
)
from infra.config import PlatformConfig

__all__ = ["from_platform"]


def from_platform(cfg: PlatformConfig, *, selectors: Selectors | None = None) -> ObservabilityConfig:
    """The observability view of one stack: only GPU pools are priced (GPU cost), every model served."""
    obs = cfg.observability
    pools = tuple(
        Pool(p.name, p.instance_type, p.instance.gpu_count, cfg.price_per_hour(p.instance_type), _window(p.capacity),
             _epoch(p.capacity.end_time) if _window(p.capacity) is not None and p.capacity.end_time else None)
        for p in sorted(cfg.gpu_pools, key=lambda p: p.name)
    )
    models = tuple(
        ServedModel(m.name, m.engine, m.tenant, m.pool, m.slo.ttft_seconds, m.slo.inter_token_seconds,
                    m.slo.e2e_seconds, m.replicas.target_queue_depth, m.replicas.target_queue_time_ms / 1000,
                    m.replicas.min, cfg.tenants[m.tenant].namespace)
        for m in sorted(cfg.models.values(), key=lambda m: m.name)
    )
    named = tuple(
        Objective(name, slo.latency_seconds, slo.latency_target, slo.availability_target)
        for name, slo in sorted(obs.workflows.items())
    )
    base = obs.default_workflow_slo
    default = Objective(None, base.latency_seconds, base.latency_target, base.availability_target)
    return ObservabilityConfig(
        stack=cfg.stack,
        namespace=obs.namespace,
        pools=pools,
        models=models,
        tenants=tuple(sorted(cfg.tenants)),
        log_namespaces=tuple(sorted({t.namespace for t in cfg.tenants.values()} | {cfg.gateway.namespace})),
        objectives=(*named, default),
        idle_gpu_utilization_percent=obs.idle_gpu_utilization_percent,
        selectors=selectors or Selectors(),
        runbook_url=obs.runbook_url or DEFAULT_RUNBOOK_URL,
        variants=_variant_costs(cfg),
        token_budgets=any_budget(cfg),
        # AWS stacks install the controller (infra/program.py), whatever the gateway's Service type
        load_balancer_controller=LoadBalancerController(cfg.gateway.namespace) if cfg.is_aws else None,
    )


def _window(capacity: Capacity) -> tuple[int, int] | None:
    """A capacity block's pool has nodes from its start until it scales to zero, drainMinutes before its end (the
    scheduled actions of components/aws/node_pool.py); any other pool always."""
    if capacity.type != "capacity-block" or capacity.start_time is None or capacity.end_time is None:
        return None
    return _epoch(capacity.start_time), _epoch(capacity.end_time) - capacity.drain_minutes * 60


def _epoch(utc: str) -> int:
    return int(datetime.datetime.strptime(utc, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp())


def _variant_costs(cfg: PlatformConfig) -> tuple[VariantCost, ...]:
    out: list[VariantCost] = []
    for workload in sorted({m.workload for m in cfg.models.values()}):
        variants = cfg.variants_of(workload)  # cheapest first: min() keeps the cheaper of equally fast ones
        fastest = min(variants, key=lambda m: m.slo.e2e_seconds) if variants else None
        out.extend(VariantCost(workload, m.name, cfg.cost_per_request(m), m is fastest) for m in variants)
    return tuple(out)
