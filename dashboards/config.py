"""The one observability config that dashboards and rules are built from.

`from_platform(cfg)` reduces a stack's config (a StackView: the kit's PlatformConfig is one) to what monitoring
needs, in the style of a
monitoring mixin's `_config`: selectors per exporter family, GPU pools with their prices, models with
their SLOs and autoscaling targets, tenants, workflow SLO objectives and alert thresholds. Prices and
SLOs come only from the stack config (`observability.prices`, the instance catalog's on-demand
defaults, `observability.slo` / `observability.workflows`, `models.*.slo`); nothing here hard-codes one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = [
    "DEFAULT_KV_CACHE_SATURATION",
    "DEFAULT_QUEUE_ALERT_FACTOR",
    "DEFAULT_RUNBOOK_URL",
    "DEFAULT_JAEGER_URL",
    "Family",
    "FAMILIES",
    "Selectors",
    "Pool",
    "ServedModel",
    "VariantCost",
    "Objective",
    "ObservabilityConfig",
    "StackView",
    "from_platform",
]

DEFAULT_KV_CACHE_SATURATION = 0.95  # alert when a model's KV cache stays above 95% used
DEFAULT_QUEUE_ALERT_FACTOR = 2.0  # alert when the queue per replica is 2x the autoscaling target
DEFAULT_RUNBOOK_URL = "https://github.com/aifactory/aifactory/blob/main/dashboards/RUNBOOKS.md"
DEFAULT_JAEGER_URL = "http://jaeger-query.monitoring.svc:16686"  # the Jaeger UI as the browser reaches it

Family = Literal["dcgm", "vllm", "triton", "istio", "envoy", "ksm", "kit"]
FAMILIES: tuple[Family, ...] = ("dcgm", "vllm", "triton", "istio", "envoy", "ksm", "kit")


@dataclass(frozen=True, slots=True)
class Selectors:
    """Extra label matchers added to every series of one exporter family (mixin `*Selector`s).

    Each is a comma-separated matcher list such as `job="nvidia-dcgm-exporter"`; default: empty (every
    series of that metric name, whatever job scraped it).
    """

    dcgm: str = ""
    vllm: str = ""
    triton: str = ""
    istio: str = ""
    envoy: str = ""
    ksm: str = ""
    kit: str = ""  # the kit's own telemetry (aifactory_*, gen_ai_*)

    def of(self, family: Family) -> str:
        return str(getattr(self, family))


@dataclass(frozen=True, slots=True)
class Pool:
    name: str
    instance_type: str
    gpus_per_node: int
    node_price_per_hour: float  # $/hour of one node (stack override, else catalog on-demand)

    @property
    def gpu_price_per_hour(self) -> float:
        return self.node_price_per_hour / self.gpus_per_node


@dataclass(frozen=True, slots=True)
class ServedModel:
    # the config key: vLLM's first --served-model-name (label model_name); Triton's pod label aifactory.io/model
    name: str
    engine: Literal["vllm", "triton"]
    tenant: str
    pool: str
    ttft_seconds: float
    inter_token_seconds: float
    e2e_seconds: float
    target_queue_depth: int
    target_queue_seconds: float


@dataclass(frozen=True, slots=True)
class VariantCost:
    """A model the gateway routes to as one of its workload's variants (its Envoy cluster is named after it)."""

    workload: str
    model: str
    cost_per_request: float  # $ (stack config: costPerRequest, or derived from the pool's GPU price)
    fastest: bool  # the workload's fastest variant (lowest slo.e2eSeconds; ties: the cheaper): the counterfactual


@dataclass(frozen=True, slots=True)
class Objective:
    """A workflow SLO. `workflow` None is the default objective for every workflow not named."""

    workflow: str | None
    latency_seconds: float
    latency_target: float
    availability_target: float


@dataclass(frozen=True, slots=True)
class ObservabilityConfig:
    stack: str
    namespace: str  # where the PrometheusRule and dashboard ConfigMaps live
    pools: tuple[Pool, ...]
    models: tuple[ServedModel, ...]
    tenants: tuple[str, ...]
    log_namespaces: tuple[str, ...]  # namespaces the Loki request-id panel searches (tenants + gateway)
    objectives: tuple[Objective, ...]  # named workflows first (sorted), the default objective last
    idle_gpu_utilization_percent: float
    selectors: Selectors = field(default_factory=Selectors)
    kv_cache_saturation: float = DEFAULT_KV_CACHE_SATURATION
    queue_alert_factor: float = DEFAULT_QUEUE_ALERT_FACTOR
    runbook_url: str = DEFAULT_RUNBOOK_URL
    jaeger_url: str = DEFAULT_JAEGER_URL
    variants: tuple[VariantCost, ...] = ()  # default: none (no workload has variants)

    @property
    def named_workflows(self) -> tuple[str, ...]:
        return tuple(o.workflow for o in self.objectives if o.workflow is not None)

    def pool(self, name: str) -> Pool:
        return next(p for p in self.pools if p.name == name)


class _SloView(Protocol):
    @property
    def ttft_seconds(self) -> float: ...

    @property
    def inter_token_seconds(self) -> float: ...

    @property
    def e2e_seconds(self) -> float: ...


class _ReplicasView(Protocol):
    @property
    def target_queue_depth(self) -> int: ...

    @property
    def target_queue_time_ms(self) -> int: ...


class _ModelView(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def engine(self) -> Literal["vllm", "triton"]: ...

    @property
    def tenant(self) -> str: ...

    @property
    def pool(self) -> str: ...

    @property
    def workload(self) -> str: ...

    @property
    def slo(self) -> _SloView: ...

    @property
    def replicas(self) -> _ReplicasView: ...


class _InstanceView(Protocol):
    @property
    def gpu_count(self) -> int: ...


class _PoolView(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def instance_type(self) -> str: ...

    @property
    def instance(self) -> _InstanceView: ...


class _NamespaceView(Protocol):
    @property
    def namespace(self) -> str: ...


class _WorkflowSloView(Protocol):
    @property
    def latency_seconds(self) -> float: ...

    @property
    def latency_target(self) -> float: ...

    @property
    def availability_target(self) -> float: ...


class _ObservabilityView(Protocol):
    @property
    def namespace(self) -> str: ...

    @property
    def workflows(self) -> Mapping[str, _WorkflowSloView]: ...

    @property
    def default_workflow_slo(self) -> _WorkflowSloView: ...

    @property
    def idle_gpu_utilization_percent(self) -> float: ...

    @property
    def runbook_url(self) -> str | None: ...


class StackView(Protocol):
    """What monitoring reads of a stack (the kit's PlatformConfig is one): dashboards/ imports nothing of infra/."""

    @property
    def stack(self) -> str: ...

    @property
    def models(self) -> Mapping[str, _ModelView]: ...

    @property
    def tenants(self) -> Mapping[str, _NamespaceView]: ...

    @property
    def gateway(self) -> _NamespaceView: ...

    @property
    def observability(self) -> _ObservabilityView: ...

    @property
    def gpu_pools(self) -> Sequence[_PoolView]: ...

    def price_per_hour(self, instance_type: str) -> float: ...

    def variants_of(self, workload: str) -> Sequence[Any]: ...  # the workload's variants (models), cheapest first

    def cost_per_request(self, model: Any) -> float: ...


def from_platform(cfg: StackView, *, selectors: Selectors | None = None) -> ObservabilityConfig:
    """The observability view of one stack: only GPU pools are priced (GPU cost), every model served."""
    obs = cfg.observability
    pools = tuple(
        Pool(p.name, p.instance_type, p.instance.gpu_count, cfg.price_per_hour(p.instance_type))
        for p in sorted(cfg.gpu_pools, key=lambda p: p.name)
    )
    models = tuple(
        ServedModel(m.name, m.engine, m.tenant, m.pool, m.slo.ttft_seconds, m.slo.inter_token_seconds,
                    m.slo.e2e_seconds, m.replicas.target_queue_depth, m.replicas.target_queue_time_ms / 1000)
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
    )


def _variant_costs(cfg: StackView) -> tuple[VariantCost, ...]:
    out: list[VariantCost] = []
    for workload in sorted({m.workload for m in cfg.models.values()}):
        variants = cfg.variants_of(workload)  # cheapest first: min() keeps the cheaper of equally fast ones
        fastest = min(variants, key=lambda m: m.slo.e2e_seconds) if variants else None
        out.extend(VariantCost(workload, m.name, cfg.cost_per_request(m), m is fastest) for m in variants)
    return tuple(out)
