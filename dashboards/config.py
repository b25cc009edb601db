"""The one observability config that dashboards and rules are built from.

ObservabilityConfig is what monitoring needs, in the style of a monitoring mixin's `_config`: selectors per
exporter family, GPU pools with their prices, models with their SLOs and autoscaling targets, tenants, workflow SLO
objectives and alert thresholds. A platform team builds one by hand; the kit's program builds it from the stack
config (infra/monitoring.py `from_platform`), where prices and SLOs come only from `observability.prices`, the
instance catalog's on-demand defaults, `observability.slo` / `observability.workflows` and `models.*.slo`; nothing
here hard-codes one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "DEFAULT_KV_CACHE_SATURATION",
    "DEFAULT_QUEUE_ALERT_FACTOR",
    "DEFAULT_RUNBOOK_URL",
    "JAEGER_DATASOURCE_UID",
    "Family",
    "FAMILIES",
    "Selectors",
    "Pool",
    "ServedModel",
    "VariantCost",
    "LoadBalancerController",
    "Objective",
    "ObservabilityConfig",
    "config_problems",
]

DEFAULT_KV_CACHE_SATURATION = 0.95  # alert when a model's KV cache stays above 95% used
DEFAULT_QUEUE_ALERT_FACTOR = 2.0  # alert when the queue per replica is 2x the autoscaling target
DEFAULT_RUNBOOK_URL = "https://github.com/aifactory/aifactory/blob/main/dashboards/RUNBOOKS.md"
# The uid of the Jaeger datasource Grafana is provisioned with (components.k8s.observability, additionalDataSources):
# trace links open Grafana's Explore on it, which reaches Jaeger through Grafana's proxy (no cluster DNS name in
# the browser).
JAEGER_DATASOURCE_UID = "jaeger"

Family = Literal["dcgm", "vllm", "triton", "sglang", "istio", "envoy", "ksm", "kit", "pipeline"]
FAMILIES: tuple[Family, ...] = ("dcgm", "vllm", "triton", "sglang", "istio", "envoy", "ksm", "kit",
                                 "pipeline")


@dataclass(frozen=True, slots=True)
class Selectors:
    """Extra label matchers added to every series of one exporter family (mixin `*Selector`s).

    Each is a comma-separated matcher list such as `job="nvidia-dcgm-exporter"`; default: empty (every
    series of that metric name, whatever job scraped it).
    """

    dcgm: str = ""
    vllm: str = ""
    triton: str = ""
    sglang: str = ""
    istio: str = ""
    envoy: str = ""
    ksm: str = ""
    kit: str = ""  # the kit's own telemetry (aifactory_*, gen_ai_*)
    pipeline: str = ""  # the telemetry pipeline's own metrics (otelcol_*: Collector and Jaeger; loki_*: Loki, Alloy)

    def of(self, family: Family) -> str:
        return str(getattr(self, family))


@dataclass(frozen=True, slots=True)
class Pool:
    name: str
    instance_type: str
    gpus_per_node: int
    node_price_per_hour: float  # $/hour of one node (stack override, else catalog on-demand)
    # When the pool has nodes by design, as UTC epoch seconds [start, stop): a capacity block's start and the time
    # its pool scales to zero (endTime - drainMinutes). Default: None, always (an on-demand or reserved pool).
    window: tuple[int, int] | None = None
    # A capacity block's endTime (UTC epoch seconds): after it the block is over for good. None: not a block.
    block_end: int | None = None

    @property
    def gpu_price_per_hour(self) -> float:
        return self.node_price_per_hour / self.gpus_per_node


@dataclass(frozen=True, slots=True)
class ServedModel:
    # the config key: vLLM's first --served-model-name (label model_name); Triton's pod label aifactory.io/model
    name: str
    engine: str  # a name of dashboards.engines.ENGINE_RULES
    tenant: str
    pool: str
    ttft_seconds: float
    inter_token_seconds: float
    e2e_seconds: float
    target_queue_depth: int
    target_queue_seconds: float
    min_replicas: int = 1  # replicas.min; 0: the model scales to zero when idle, and wakes on the gateway's refusals
    namespace: str = ""  # its tenant's namespace, where its ScaledObject lives


@dataclass(frozen=True, slots=True)
class VariantCost:
    """A model the gateway routes to as one of its workload's variants (its Envoy cluster is named after it)."""

    workload: str
    model: str
    cost_per_request: float  # $ (stack config: costPerRequest, or derived from the pool's GPU price)
    fastest: bool  # the workload's fastest variant (lowest slo.e2eSeconds; ties: the cheaper): the counterfactual


@dataclass(frozen=True, slots=True)
class LoadBalancerController:
    """The AWS Load Balancer Controller a stack installs (AWS): it registers the gateway's pods as its NLB's targets
    and its webhook gives each new one a readiness gate (components.k8s.load_balancer)."""

    gateway_namespace: str  # where the gateway's pods (its targets) run


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
    # default: None, trace links open Grafana's Explore on the Jaeger datasource `jaeger_datasource_uid`; set it to
    # the Jaeger UI's base URL as browsers reach it (e.g. https://jaeger.example.com) to link there instead
    jaeger_url: str | None = None
    jaeger_datasource_uid: str = JAEGER_DATASOURCE_UID
    variants: tuple[VariantCost, ...] = ()  # default: none (no workload has variants)
    # default: False (no tenant or workload has a token budget: no budget service, so no token budget row or alerts)
    token_budgets: bool = False
    # default: None (no AWS Load Balancer Controller, as on an existing cluster: no load balancer alerts)
    load_balancer_controller: LoadBalancerController | None = None

    @property
    def named_workflows(self) -> tuple[str, ...]:
        return tuple(o.workflow for o in self.objectives if o.workflow is not None)

    def pool(self, name: str) -> Pool:
        return next(p for p in self.pools if p.name == name)


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def config_problems(cfg: ObservabilityConfig) -> list[tuple[str, str]]:
    """(property path, reason) for every value the boards and rules cannot be built from meaningfully: what a
    hand-built ObservabilityConfig can get wrong (the stack config's reader already refuses all of it)."""
    out: list[tuple[str, str]] = []

    def need(ok: bool, path: str, reason: str) -> None:
        if not ok:
            out.append((path, reason))

    need(bool(_DNS_LABEL.match(cfg.namespace)), "namespace", f"{cfg.namespace!r} is not a namespace (a DNS label)")
    pools = {p.name for p in cfg.pools}
    for i, p in enumerate(cfg.pools):
        need(p.gpus_per_node >= 1, f"pools[{i}].gpusPerNode", f"{p.gpus_per_node} is below 1")
        need(p.node_price_per_hour >= 0, f"pools[{i}].nodePricePerHour", f"{p.node_price_per_hour} is below 0")
        need(p.window is None or p.window[0] < p.window[1], f"pools[{i}].window",
             f"{p.window} does not end after it starts (UTC epoch seconds: start, stop)")
    for i, m in enumerate(cfg.models):
        need(m.pool in pools, f"models[{i}].pool", f"{m.pool!r} is not a pool; pools: {', '.join(sorted(pools))}")
        need(m.tenant in cfg.tenants, f"models[{i}].tenant", f"{m.tenant!r} is not one of tenants")
        for key, value in (("ttftSeconds", m.ttft_seconds), ("interTokenSeconds", m.inter_token_seconds),
                           ("e2eSeconds", m.e2e_seconds), ("targetQueueSeconds", m.target_queue_seconds)):
            need(value > 0, f"models[{i}].{key}", f"{value} is not above 0")
        need(m.target_queue_depth >= 1, f"models[{i}].targetQueueDepth", f"{m.target_queue_depth} is below 1")
        need(m.min_replicas >= 0, f"models[{i}].minReplicas", f"{m.min_replicas} is below 0")
    need(bool(cfg.objectives) and cfg.objectives[-1].workflow is None, "objectives",
         "must end with the default objective (workflow None), which every other workflow is held to")
    for i, o in enumerate(cfg.objectives):
        need(o.latency_seconds > 0, f"objectives[{i}].latencySeconds", f"{o.latency_seconds} is not above 0")
        for key, value in (("latencyTarget", o.latency_target), ("availabilityTarget", o.availability_target)):
            need(0 < value < 1, f"objectives[{i}].{key}", f"{value} is not a fraction between 0 and 1 (exclusive)")
    need(0 <= cfg.idle_gpu_utilization_percent <= 100, "idleGpuUtilizationPercent",
         f"{cfg.idle_gpu_utilization_percent} is not a percentage (0 to 100)")
    need(0 < cfg.kv_cache_saturation <= 1, "kvCacheSaturation", f"{cfg.kv_cache_saturation} is not in (0, 1]")
    need(cfg.queue_alert_factor > 0, "queueAlertFactor", f"{cfg.queue_alert_factor} is not above 0")
    lbc = cfg.load_balancer_controller
    need(lbc is None or bool(_DNS_LABEL.match(lbc.gateway_namespace)), "loadBalancerController.gatewayNamespace",
         f"{lbc.gateway_namespace if lbc else ''!r} is not a namespace (a DNS label)")
    for i, v in enumerate(cfg.variants):
        need(v.cost_per_request >= 0, f"variants[{i}].costPerRequest", f"{v.cost_per_request} is below 0")
    return out
