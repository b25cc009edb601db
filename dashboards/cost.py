"""GPU cost: what the fleet costs per hour, what idles, and what a token or a completed workflow costs.

Prices are the stack config's (`observability.prices`, else the catalog's on-demand price), reaching
PromQL as recorded constant series (`aifactory:pool_*_price_dollars_per_hour`): no panel holds a number.
"""

from __future__ import annotations

from grafanalib.core import Dashboard

from dashboards import budgets
from dashboards.config import ObservabilityConfig
from dashboards.engines import ENGINE_RULES
from dashboards.panels import Q, custom_variable, dashboard, stat, timeseries
from dashboards.rules import R
from telemetry.names import DCGM

__all__ = ["UID", "build"]

UID = "aifactory-gpu-cost"
POOL = 'pool=~"$pool"'
OWNER = 'pool=~"$pool", model=~"$model", tenant=~"$tenant"'
MODEL = 'model=~"$model", tenant=~"$tenant"'
TENANT = 'tenant=~"$tenant"'


def _spend(cfg: ObservabilityConfig) -> list:
    idle = f"{cfg.idle_gpu_utilization_percent:g}%"
    return [
        stat("GPU spend", "Nodes in the selected GPU pools x the node price from the stack config.", "currencyUSD",
             Q(f"sum({R.POOL_COST}{{{POOL}}})", "$/hour")),
        stat("Idle GPU cost", f"Every GPU-hour not doing model work, at its pool's GPU price: GPUs a pod holds "
                              f"that are not a model's GPU at or above {idle} utilisation (5-minute average), "
                              "and GPUs no pod holds (node capacity minus pod requests).", "currencyUSD",
             Q(f"sum({R.POOL_ALLOCATED_IDLE_COST}{{{POOL}}}) + sum({R.POOL_UNALLOCATED_COST}{{{POOL}}})", "$/hour")),
        stat("Allocated idle GPU cost", f"GPUs requested by pods but not doing model work (under {idle} "
                                        "utilisation, or held by a pod that is no model).", "currencyUSD",
             Q(f"sum({R.POOL_ALLOCATED_IDLE_COST}{{{POOL}}})", "$/hour")),
        stat("Unallocated GPU cost", "GPUs no pod requests: the nodes' nvidia.com/gpu capacity minus the pods' "
                                     "requests (kube-state-metrics).", "currencyUSD",
             Q(f"sum({R.POOL_UNALLOCATED_COST}{{{POOL}}})", "$/hour")),
        stat("Utilisation-weighted cost", "Each GPU's price times its utilisation: the part of the spend doing "
                                          "work.", "currencyUSD", Q(f"sum({R.POOL_USED_COST}{{{POOL}}})", "$/hour")),
        stat("Cost per completed workflow", "GPU cost of all the selected tenants' models divided by their "
                                            "successfully completed workflows (workflows span models: the model "
                                            "filter does not apply). Empty when none completed.", "currencyUSD",
             Q(f"sum({R.MODEL_COST}{{{TENANT}}}) / (sum({R.WF_COUNT}{{status=\"ok\", {TENANT}}}) > 0) / 3600",
               "$/workflow")),
        timeseries("GPU spend by pool", "Dollars per hour per GPU pool (nodes x node price).", "currencyUSD",
                   Q(f"{R.POOL_COST}{{{POOL}}}", "{{pool}}"), stacked=True),
        timeseries("Spend: total, working, idle", "Per pool: total spend and its three parts, which add up to "
                                                  f"it: GPUs working (a model's, at or above {idle} "
                                                  "utilisation), allocated but idle, and unallocated.",
                   "currencyUSD",
                   Q(f"{R.POOL_COST}{{{POOL}}}", "{{pool}} total"),
                   Q(f"{R.POOL_WORKING_COST}{{{POOL}}}", "{{pool}} working"),
                   Q(f"{R.POOL_ALLOCATED_IDLE_COST}{{{POOL}}}", "{{pool}} allocated idle"),
                   Q(f"{R.POOL_UNALLOCATED_COST}{{{POOL}}}", "{{pool}} unallocated")),
        timeseries("Idle GPU cost by model", f"Per model: its GPUs under {idle} utilisation, at the pool's price.",
                   "currencyUSD", Q(f"sum by (model) ({R.IDLE_COST}{{{OWNER}}})", "{{model}}"), stacked=True),
        timeseries("Idle GPUs by pool", "GPUs allocated but idle, and GPUs no pod holds.", "none",
                   Q(f"{R.POOL_ALLOCATED_IDLE_GPUS}{{{POOL}}}", "{{pool}} allocated idle"),
                   Q(f"{R.POOL_UNALLOCATED_GPUS}{{{POOL}}}", "{{pool}} unallocated"), stacked=True),
    ]


def _unit_costs() -> list:
    engines = ", ".join(e.title for e in ENGINE_RULES.values())
    return [
        timeseries("Cost per 1M generated tokens", "A model's GPU cost per hour over the output tokens it "
                                                   "generated in that hour, per million (its engine's generated "
                                                   f"tokens: {engines}).",
                   "currencyUSD", Q(f"{R.MODEL_COST_PER_MTOK}{{{MODEL}}}", "{{model}}")),
        timeseries("Cost per completed workflow by tenant", "A tenant's model GPU cost over its completed "
                                                            "workflows.", "currencyUSD",
                   Q(f"{R.TENANT_COST_PER_WORKFLOW}{{{TENANT}}}", "{{tenant}}")),
        timeseries("GPU spend by model", "GPUs requested by a model's pods x its pool's GPU price.", "currencyUSD",
                   Q(f"{R.MODEL_COST}{{{MODEL}}}", "{{model}}"), stacked=True),
        timeseries("Generated tokens per second", f"Output tokens per second by model ({engines}).", "short",
                   Q(f"{R.GENERATED_TOKENS}{{model=~\"$model\"}}", "{{model}}")),
        timeseries("GPU utilisation by pool", "Mean GPU utilisation (DCGM_FI_DEV_GPU_UTIL, 5-minute average).",
                   "percentunit", Q(f"{R.dcgm_pool(DCGM.GPU_UTIL, 'avg')}{{{POOL}}}", "{{pool}}")),
        timeseries("GPU price by pool", "Dollars per GPU-hour from the stack config (node price / GPUs per node).",
                   "currencyUSD", Q(f"{R.GPU_PRICE}{{{POOL}}}", "{{pool}} ({{instance_type}})")),
    ]


def build(cfg: ObservabilityConfig) -> Dashboard:
    return dashboard(
        uid=UID, title="aifactory / GPU cost",
        description="GPU spend per pool and in total, idle and utilisation-weighted cost, cost per token and per "
                    "completed workflow; prices from the stack config.",
        tags=["cost", "gpu"],
        variables=[
            custom_variable("tenant", "Tenant", cfg.tenants),
            custom_variable("pool", "Pool", [p.name for p in cfg.pools]),
            custom_variable("model", "Model", [m.name for m in cfg.models]),
        ],
        rows=[("Spend", _spend(cfg)), ("Unit costs", _unit_costs()),
              *([(budgets.ROW, budgets.panels())] if cfg.token_budgets else [])],
    )
