"""The one observability config that dashboards and rules are built from.

`from_platform(cfg)` reduces a stack's PlatformConfig to what monitoring needs, in the style of a
monitoring mixin's `_config`: selectors per exporter family, GPU pools with their prices, models with
their SLOs and autoscaling targets, tenants, workflow SLO objectives and alert thresholds. Prices and
SLOs come only from the stack config (`observability.prices`, the instance catalog's on-demand
defaults, `observability.slo` / `observability.workflows`, `models.*.slo`); nothing here hard-codes one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from infra.config import PlatformConfig

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
    "Objective",
    "VariantView",
    "ObservabilityConfig",
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
class Objective:
    """A workflow SLO. `workflow` None is the default objective for every workflow not named."""

    workflow: str | None
    latency_seconds: float
    latency_target: float
    availability_target: float


@dataclass(frozen=True, slots=True)
class VariantView:
    """A variant of a workload as the dashboards show it: its configured cost per request (PlatformConfig)."""

    workload: str
    name: str
    cost_per_request: float


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
    variants: tuple[VariantView, ...] = ()  # default: none; every workload's variants, by workload then name

    @property
    def named_workflows(self) -> tuple[str, ...]:
        return tuple(o.workflow for o in self.objectives if o.workflow is not None)

    def pool(self, name: str) -> Pool:
        return next(p for p in self.pools if p.name == name)


def from_platform(cfg: PlatformConfig, *, selectors: Selectors | None = None) -> ObservabilityConfig:
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
        variants=tuple(VariantView(m.workload, m.name, cfg.cost_per_request(m))
                       for m in sorted(cfg.models.values(), key=lambda m: (m.workload, m.name))
                       if m.variant is not None),
    )
