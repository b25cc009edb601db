"""Recording and alerting rules, built from one ObservabilityConfig.

Recording rules follow `level:metric:operations`. Config values that queries must join against (prices,
autoscaling targets) are recorded as constant series (`vector(<value>)` with pool/model labels), so
panels and alerts read prices from the stack config through PromQL and never embed them.

Alerts: multi-window multi-burn-rate alerts per workflow SLO (Google SRE workbook: page on 5m&1h at
14.4x and 30m&6h at 6x the error budget; ticket on 2h&1d at 3x and 6h&3d at 1x), and GPU/serving
alerts. Every alert carries severity, summary, description and runbook_url.

GpuXidError fires on a new XID, not on the last one: DCGM_FI_DEV_XID_ERRORS holds the value of the last
XID for ever, so the alert reads R.NEW_XID (the XID of GPUs whose value changed
in the last XID_WINDOW) and resolves on its own. One alert name, two rules: critical (pages) for the XIDs
that need the node drained and the GPU reset (DRAIN_XIDS), warning for every other XID (application
faults such as 13, 31, 43: the GPU is fine).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dashboards import budgets, gateway_alerts, load_balancer_alerts
from dashboards.config import Objective, ObservabilityConfig
from dashboards.engines import ENGINE_RULES, SloHistogram, rules_of
from dashboards.promql import bucket_at_or_below, by_node, le, regex_any, series
from dashboards.rule_parts import QUANTILES, RATE, XID_WINDOW, Alert, Group, R, Record, quantile_record, runbook
from telemetry.names import (
    CRITICAL_PATH,
    DCGM,
    ENVOY,
    ISTIO,
    KSM,
    PIPELINE,
    STEP_BUDGET,
    STEP_DURATION,
    STEP_ERRORS,
    WORKFLOW_BUCKETS_S,
    WORKFLOW_DEADLINES,
    WORKFLOW_DURATION,
)

__all__ = [
    "Record",
    "Alert",
    "Group",
    "BurnWindow",
    "BURN_WINDOWS",
    "SLO_WINDOWS",
    "QUANTILES",
    "POOL_LABEL_KSM",
    "R",
    "groups",
    "records",
    "alerts",
    "rules_document",
    "quantile_record",
    "objective_name",
    "objective_matchers",
    "DEFAULT_OBJECTIVE",
    "DRAIN_XIDS",
    "XID_WINDOW",
    "PIPELINE_FOR",
    "LOKI_ERROR_RATIO",
    "CANARY_MISSING_RATIO",
    "MODEL_SLO_FOR",
    "MODEL_SLOS",
    "DCGM_PER_GPU",
    "MODEL_SLO_QUANTILE",
    "MODEL_SLO_MIN_REQUESTS_PER_SECOND",
    "model_slo_problems",
    "model_slo_default",
    "slo_histogram",
]

# kube-state-metrics exposes allow-listed node/pod labels as label_<sanitised key>.
POOL_LABEL_KSM = "label_aifactory_io_pool"
MODEL_LABEL_KSM = "label_aifactory_io_model"
TENANT_LABEL_KSM = "label_aifactory_io_tenant"
GPU_RESOURCE = "nvidia_com_gpu"
ACTIVE_PHASES = 'phase=~"Pending|Running"'
DEFAULT_OBJECTIVE = "default"  # `objective` label of workflows without an SLO of their own
# XIDs after which the GPU must be reset (node cordoned and drained first): double-bit ECC (48), row-remap
# event / failure (63, 64), NVLink (74), fallen off the bus (79), contained / uncontained ECC (94, 95),
# GSP RPC timeout / GSP error (119, 120).
DRAIN_XIDS = (48, 63, 64, 74, 79, 94, 95, 119, 120)
PIPELINE_FOR = "10m"  # a telemetry component drops data this long before anyone is told (retries cover blips)
LOKI_ERROR_RATIO = 0.05  # share of a Loki route's requests answered 5xx
CANARY_MISSING_RATIO = 0.01  # share of the canary's lines that never came back from Loki



@dataclass(frozen=True, slots=True)
class BurnWindow:
    short: str
    long: str
    factor: float  # burn rate: multiples of the error budget spent per unit of SLO window
    severity: str


BURN_WINDOWS = (
    BurnWindow("5m", "1h", 14.4, "critical"),
    BurnWindow("30m", "6h", 6.0, "critical"),
    BurnWindow("2h", "1d", 3.0, "warning"),
    BurnWindow("6h", "3d", 1.0, "warning"),
)
SLO_WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
BURN_FOR = {"critical": "2m", "warning": "15m"}


# DCGM gauges the fleet dashboard aggregates per pool: (metric, aggregation). All are gauges (NVLINK_BW too:
# a current throughput), so none goes through rate().
DCGM_POOL_AGGREGATES = (
    (DCGM.GR_ENGINE_ACTIVE, "avg"),
    (DCGM.TENSOR_ACTIVE, "avg"),
    (DCGM.DRAM_ACTIVE, "avg"),
    (DCGM.FB_USED, "sum"),
    (DCGM.FB_FREE, "sum"),
    (DCGM.POWER, "sum"),
    (DCGM.GPU_TEMP, "max"),
    (DCGM.MEMORY_TEMP, "max"),
    (DCGM.SM_CLOCK, "avg"),
    (DCGM.PCIE_TX, "sum"),
    (DCGM.PCIE_RX, "sum"),
    (DCGM.NVLINK_BW, "sum"),
    (DCGM.ROW_REMAP_PENDING, "sum"),
)


# DCGM series the fleet dashboard shows per GPU, each recorded with the `node` and `pool` its panels select by:
# (metric, take a rate). The join a panel would otherwise run on every refresh (Hostname or hostname to node, node to
# pool) runs once per evaluation, so a per-GPU panel reads one selector, as dcgm-exporter's own dashboard does.
DCGM_PER_GPU = (
    (DCGM.GPU_UTIL, False), (DCGM.GPU_TEMP, False), (DCGM.POWER, False), (DCGM.FB_USED, False),
    (DCGM.SM_CLOCK, False), (DCGM.TENSOR_ACTIVE, False), (DCGM.CLOCK_THROTTLE_REASONS, False), (DCGM.XID, False),
    (DCGM.ROW_REMAP_FAILURE, False), (DCGM.PCIE_REPLAY, True), (DCGM.NVLINK_BW, False),
)
# What tells a GPU's series apart: one per GPU, or per MIG instance (GPU_I_ID); the exporter's other labels (its own
# pod, the pod holding the GPU, the driver version) would only add series as pods come and go.
GPU_LABELS = "node, pool, gpu, UUID, GPU_I_ID"


def _in_pool(cfg: ObservabilityConfig, metric: str, *matchers: str, rate: bool = False) -> str:
    """A DCGM series (or its rate) with `node` and the node's `pool`."""
    selected = series(cfg, metric, *matchers)
    return (f"{by_node(f'rate({selected}[{RATE}])' if rate else selected)} * on (node) group_left (pool) "
            f"{R.NODE_POOL}")


# --------------------------------------------------------------------------------------------
# recording rules


def _config_records(cfg: ObservabilityConfig) -> list[Record]:
    out = []
    for p in cfg.pools:
        labels = {"pool": p.name, "instance_type": p.instance_type}
        out.append(Record(R.NODE_PRICE, f"vector({p.node_price_per_hour!r})", labels))
        out.append(Record(R.GPU_PRICE, f"vector({p.gpu_price_per_hour!r})", labels))
        out.append(Record(R.GPUS_PER_NODE, f"vector({p.gpus_per_node})", labels))
    out += [rules_of(m.engine).queue_target(m) for m in cfg.models]
    out += gateway_alerts.expected_down_records(cfg)
    for v in cfg.variants:
        out.append(Record(R.VARIANT_COST, f"vector({v.cost_per_request!r})",
                          {"workload": v.workload, "variant": v.model, "fastest": "true" if v.fastest else "false"}))
    return out


def _inventory_records(cfg: ObservabilityConfig) -> list[Record]:
    nodes = series(cfg, KSM.NODE_LABELS, f'{POOL_LABEL_KSM}!=""')
    pods = series(cfg, KSM.POD_LABELS, f'{MODEL_LABEL_KSM}!=""')
    requests = series(cfg, KSM.POD_REQUESTS, f'resource="{GPU_RESOURCE}"')
    # Only pods that hold their requests: kube-state-metrics keeps exporting the requests of Succeeded and
    # Failed (evicted) pods while the objects exist (kubernetes-mixin k8s.rules filters the same way).
    active = f'max by (namespace, pod) ({series(cfg, KSM.POD_PHASE, ACTIVE_PHASES)} == 1)'
    capacity = series(cfg, KSM.NODE_CAPACITY, f'resource="{GPU_RESOURCE}"')
    return [
        Record(R.NODE_POOL, f'max by (node, pool) (label_replace({nodes}, "pool", "$1", "{POOL_LABEL_KSM}", "(.+)"))'),
        Record(R.POD_MODEL, "max by (namespace, pod, model, tenant) (label_replace(label_replace("
                            f'{pods}, "model", "$1", "{MODEL_LABEL_KSM}", "(.+)"), '
                            f'"tenant", "$1", "{TENANT_LABEL_KSM}", "(.+)"))'),
        Record(R.POD_GPUS, f"sum by (namespace, pod, node) ({requests} * on (namespace, pod) group_left () {active})"),
        Record(R.GPU_UTIL, "max by (node, pool, gpu, UUID, namespace, pod) ("
                           f"{by_node(f'avg_over_time({series(cfg, DCGM.GPU_UTIL)}[{RATE}])')} / 100"
                           f" * on (node) group_left (pool) {R.NODE_POOL})"),
        Record(R.GPU_ALLOCATED_UTIL, f"{R.GPU_UTIL} * on (namespace, pod) group_left (model, tenant) "
                                     f"({R.POD_MODEL} and on (namespace, pod) {R.POD_GPUS} > 0)"),
        Record(R.POOL_NODES, f"count by (pool) ({R.NODE_POOL})"),
        Record(R.POOL_GPUS, f"count by (pool) ({R.GPU_UTIL})"),
        Record(R.POOL_GPU_CAPACITY, f"sum by (pool) ({capacity} * on (node) group_left (pool) {R.NODE_POOL})"),
        Record(R.POOL_GPU_REQUESTS, f"sum by (pool) ({R.POD_GPUS} * on (node) group_left (pool) {R.NODE_POOL})"),
    ]


def _cost_records(cfg: ObservabilityConfig) -> list[Record]:
    idle = cfg.idle_gpu_utilization_percent / 100
    done = f'sum by (tenant) ({R.WF_COUNT}{{status="ok"}})'
    none = f"{R.POOL_GPU_CAPACITY} * 0"
    return [
        Record(R.POOL_COST, f"{R.POOL_NODES} * on (pool) group_left {R.NODE_PRICE}"),
        Record(R.TOTAL_COST, f"sum({R.POOL_COST})"),
        Record(R.POOL_USED_COST, f"sum by (pool) ({R.GPU_UTIL} * on (pool) group_left {R.GPU_PRICE})"),
        Record(R.IDLE_GPUS, f"sum by (pool, model, tenant) ({R.GPU_ALLOCATED_UTIL} < bool {idle!r})"),
        Record(R.IDLE_COST, f"{R.IDLE_GPUS} * on (pool) group_left {R.GPU_PRICE}"),
        # A pool with no working or no requested GPU still gets a (zero) sample: the parts always add up.
        Record(R.POOL_WORKING_GPUS, f"sum by (pool) ({R.GPU_ALLOCATED_UTIL} >= bool {idle!r}) or {none}"),
        Record(R.POOL_ALLOCATED_IDLE_GPUS,
               f"clamp_min(({R.POOL_GPU_REQUESTS} or {none}) - on (pool) {R.POOL_WORKING_GPUS}, 0)"),
        Record(R.POOL_UNALLOCATED_GPUS,
               f"clamp_min({R.POOL_GPU_CAPACITY} - on (pool) ({R.POOL_GPU_REQUESTS} or {none}), 0)"),
        *(Record(cost, f"{gpus} * on (pool) group_left {R.GPU_PRICE}") for gpus, cost in (
            (R.POOL_WORKING_GPUS, R.POOL_WORKING_COST), (R.POOL_ALLOCATED_IDLE_GPUS, R.POOL_ALLOCATED_IDLE_COST),
            (R.POOL_UNALLOCATED_GPUS, R.POOL_UNALLOCATED_COST))),
        Record(R.MODEL_GPUS, f"sum by (model, tenant, pool) ({R.POD_GPUS} * on (namespace, pod) group_left "
                             f"(model, tenant) {R.POD_MODEL} * on (node) group_left (pool) {R.NODE_POOL})"),
        Record(R.MODEL_COST, f"sum by (model, tenant) ({R.MODEL_GPUS} * on (pool) group_left {R.GPU_PRICE})"),
        # Denominators > 0: a model that generated nothing, a tenant whose workflows all failed, have no
        # unit cost (no sample), rather than +Inf.
        Record(R.MODEL_COST_PER_MTOK,
               f"{R.MODEL_COST} / on (model) group_left () ({R.GENERATED_TOKENS} > 0) / 3600 * 1e6"),
        Record(R.TENANT_COST_PER_WORKFLOW, f"sum by (tenant) ({R.MODEL_COST}) / on (tenant) ({done} > 0) / 3600"),
        *_variant_spend_records(cfg),
    ]


def _variant_spend_records(cfg: ObservabilityConfig) -> list[Record]:
    """What the gateway's variant routing spends, and what sending every one of those requests to the workload's
    fastest variant would have spent ($/s; none without variants)."""
    if not cfg.variants:
        return []
    return [
        Record(R.VARIANT_SPEND, f"sum by (workload) ({R.VARIANT_REQUESTS} * on (workload, variant) group_left "
                                f"{R.VARIANT_COST})"),
        Record(R.VARIANT_SPEND_ALL_FASTEST, f"sum by (workload) ({R.VARIANT_REQUESTS}) * on (workload) "
                                            f'sum by (workload) ({R.VARIANT_COST}{{fastest="true"}})'),
    ]


def _workflow_records(cfg: ObservabilityConfig) -> list[Record]:
    def rate(metric: str, by: str, *matchers: str) -> str:
        return f"sum by ({by}) (rate({series(cfg, metric, *matchers)}[{RATE}]))"

    wf = WORKFLOW_DURATION.prom
    step = STEP_DURATION.prom
    return [
        Record(R.WF_BUCKET, rate(f"{wf}_bucket", "workflow, tenant, le")),
        Record(R.WF_COUNT, rate(f"{wf}_count", "workflow, tenant, status")),
        Record(R.WF_SUM, rate(f"{wf}_sum", "workflow, tenant")),
        *quantile_record(R.WF_QUANTILE, R.WF_BUCKET, "workflow, tenant"),
        Record(R.CRITICAL_PATH, rate(CRITICAL_PATH.prom, "workflow, tenant, step_kind")),
        Record(R.STEP_BUCKET, rate(f"{step}_bucket", "workflow, tenant, step_kind, le")),
        *quantile_record(R.STEP_QUANTILE, R.STEP_BUCKET, "workflow, tenant, step_kind"),
        Record(R.STEP_ERRORS, rate(STEP_ERRORS.prom, "workflow, tenant, step_kind, error_type")),
        Record(R.STEP_BUDGET_BUCKET, rate(f"{STEP_BUDGET.prom}_bucket", "workflow, tenant, step_kind, le")),
        Record(R.WF_DEADLINES, rate(WORKFLOW_DEADLINES.prom, "workflow, tenant, deadline")),
    ]


def objective_matchers(cfg: ObservabilityConfig, objective: Objective) -> str:
    """`workflow` matcher selecting one objective's workflows (the default: every workflow not named)."""
    if objective.workflow is not None:
        return f'workflow="{objective.workflow}"'
    return f'workflow!~"{regex_any(cfg.named_workflows)}"' if cfg.named_workflows else ""


def objective_name(objective: Objective) -> str:
    """The `objective` label of an objective's SLO series and alerts."""
    return objective.workflow or DEFAULT_OBJECTIVE


def _slo_records(cfg: ObservabilityConfig) -> list[Record]:
    wf = WORKFLOW_DURATION.prom
    failed = 'status="error"'
    out = []
    for o in cfg.objectives:
        sel = objective_matchers(cfg, o)
        good = le(bucket_at_or_below(WORKFLOW_BUCKETS_S, o.latency_seconds))
        for w in SLO_WINDOWS:
            def rate(metric: str, *matchers: str, w: str = w, sel: str = sel) -> str:
                return f"sum by (workflow, tenant) (rate({series(cfg, metric, sel, *matchers)}[{w}]))"

            total = rate(f"{wf}_count")
            labels = {"objective": objective_name(o)}
            out.append(Record(R.slo_errors("latency", w), f"1 - {rate(f'{wf}_bucket', good)} / {total}", labels))
            out.append(Record(R.slo_errors("availability", w),
                              f"({rate(f'{wf}_count', failed)} or {total} * 0) / {total}", labels))
    return out


def _serving_records(cfg: ObservabilityConfig) -> list[Record]:
    """Each engine's records (dashboards.engines), the generated tokens/s of every engine by model, then the models'
    latency SLO records."""
    engines = ENGINE_RULES.values()
    return [*(r for e in engines for r in e.records(cfg)),
            Record(R.GENERATED_TOKENS, " or ".join(e.generated_tokens for e in engines)),
            *(r for e in engines for r in e.late_records(cfg)),
            *_model_slo_records(cfg)]


# A model's latency SLOs (models.<name>.slo): (alert, share-above record, EngineRules attribute of its histogram,
# ServedModel attribute of its SLO, its key under models.<name>.slo, what it measures)
MODEL_SLOS = (
    ("ModelTtftSloMissed", R.MODEL_TTFT_ABOVE_SLO, "ttft", "ttft_seconds", "ttftSeconds", "time to first token"),
    ("ModelInterTokenSloMissed", R.MODEL_ITL_ABOVE_SLO, "itl", "inter_token_seconds", "interTokenSeconds",
     "inter-token latency"),
)
MODEL_SLO_QUANTILE = 0.95  # a model's latency SLOs are p95s: at most 5% of observations above the SLO
MODEL_SLO_MIN_REQUESTS_PER_SECOND = 0.2  # 60 requests in 5 minutes: fewer, and three slow ones are already 5%


def slo_histogram(engine: str, attr: str) -> SloHistogram | None:
    """The histogram of `engine` an `attr` SLO ("ttft" or "itl") is judged on; None: it takes no such SLO."""
    return getattr(rules_of(engine), attr)


def model_slo_problems(engine: str, slo: Mapping[str, float]) -> list[tuple[str, str]]:
    """(key, reason) for each latency SLO in `slo` (its key under models.<name>.slo -> seconds) that engine `engine`
    cannot judge: it exports no such histogram, or the value is not one of its bucket edges, where the share of
    requests above it would be an interpolation inside a bucket."""
    out = []
    for _, _, attr, _, key, what in MODEL_SLOS:
        if key not in slo:
            continue
        hist, value = slo_histogram(engine, attr), slo[key]
        if hist is None:
            out.append((key, f"engine {engine!r} exports no {what} histogram, so nothing can judge this SLO; remove "
                             "it (docs/observability.md)"))
        elif value not in hist.edges:
            edges = " or ".join(f"{e:g}" for e in hist.nearest(value))
            out.append((key, f"{value:g} s is not a bucket edge of the {what} histogram of engine {engine!r}, "
                             f"where the alert counts the share of requests above the SLO; use {edges}"))
    return out


def model_slo_default(engine: str, key: str, default: float) -> float:
    """The SLO a model on `engine` gets when models.<name>.slo.<key> is not set: the documented default, or where that
    is not a bucket edge of the engine's histogram, the next edge above it (the alert never fires on requests within
    the default)."""
    hist = slo_histogram(engine, next(a for _, _, a, _, k, _ in MODEL_SLOS if k == key))
    if hist is None or default in hist.edges:
        return default
    return min((e for e in hist.edges if e > default), default=max(hist.edges))


def _model_slo_records(cfg: ObservabilityConfig) -> list[Record]:
    """Per model, where its engine exports the latency: the share of its observations above each SLO (a bucket edge:
    exact, no interpolation), and its requests/s (the count of its time-to-first-token histogram) that the alerts'
    minimum rate reads.

    The gateway's progress checks (one 1-token generation per check: gateway pods / interval per replica) are
    observations of a histogram that `counts_progress_checks` (vLLM's time to first token): the rate of those the
    engine answered, measured at the gateway (its passing health checks of the model's cluster, MODEL_PROGRESS_CHECKS;
    a check that timed out on a hung or saturated replica never became an observation), is taken off the requests/s
    and off the observations within the SLO, so checks alone never reach the minimum rate nor dilute the share above
    the SLO, and a hung replica's failed checks never shrink the requests the share is of. A passing check's first
    token is counted as within the SLO; one slower (a check queued behind a saturated replica's work) counts as a
    request above it, like the users' requests queued with it (the alert may fire sooner, never later)."""
    out = []
    checked = set()
    for _, record, attr, field_, _, _ in MODEL_SLOS:
        for m in cfg.models:
            if (hist := slo_histogram(m.engine, attr)) is None:
                continue
            within = f'sum by (model) ({hist.buckets}{{model="{m.name}", {le(getattr(m, field_))}}})'
            total = f'sum by (model) ({hist.buckets}{{model="{m.name}", le="+Inf"}})'
            if hist.counts_progress_checks:
                checked.add(m.name)
                checks = f'{R.MODEL_PROGRESS_CHECKS}{{model="{m.name}"}}'
                out.append(Record(record, f"({total} - {within}) / clamp_min({total} - {checks}, 1e-9)",
                                  {"model": m.name}))
            else:
                out.append(Record(record, f"1 - {within} / {total}", {"model": m.name}))
    for m in cfg.models:
        if (hist := slo_histogram(m.engine, "ttft")) is not None:
            total = f'sum by (model) ({hist.buckets}{{model="{m.name}", le="+Inf"}})'
            if m.name in checked:
                total = f'clamp_min({total} - {R.MODEL_PROGRESS_CHECKS}{{model="{m.name}"}}, 0)'
            out.append(Record(R.MODEL_SLO_REQUESTS, total, {"model": m.name}))
    return [*(Record(R.MODEL_PROGRESS_CHECKS,
                     f"sum(rate({series(cfg, ENVOY.HEALTH_CHECK_SUCCESS, _cluster(name))}[{RATE}])) or vector(0)",
                     {"model": name}) for name in sorted(checked)), *out]


def _fleet_records(cfg: ObservabilityConfig) -> list[Record]:
    out = [Record(R.dcgm_pool(metric, agg), f"{agg} by (pool) ({_in_pool(cfg, metric)})")
           for metric, agg in DCGM_POOL_AGGREGATES]
    out.append(Record(R.dcgm_pool(DCGM.GPU_UTIL, "avg"), f"avg by (pool) ({R.GPU_UTIL})"))
    out.append(Record(R.dcgm_pool(DCGM.XID, "count"), f"sum by (pool) ({_in_pool(cfg, DCGM.XID)} > bool 0)"))
    out += [Record(R.dcgm_gpu(metric, rate), f"max by ({GPU_LABELS}) ({_in_pool(cfg, metric, rate=rate)})")
            for metric, rate in DCGM_PER_GPU]
    xid = series(cfg, DCGM.XID)
    out.append(Record(R.NEW_XID, f"{xid} > 0 and changes({xid}[{XID_WINDOW}]) > 0"))
    return out


def _mesh_records(cfg: ObservabilityConfig) -> list[Record]:
    dest = "destination_workload, destination_workload_namespace"
    istio_dest = 'reporter="destination"'
    mtls = f'{ISTIO.MTLS_LABEL}="mutual_tls"'

    def rate(metric: str, by: str, *matchers: str) -> str:
        return f"sum by ({by}) (rate({series(cfg, metric, *matchers)}[{RATE}]))"

    return [
        Record(R.ISTIO_BUCKET, rate(f"{ISTIO.DURATION}_bucket", f"source_workload, {dest}, le", istio_dest)),
        *quantile_record(R.ISTIO_QUANTILE, R.ISTIO_BUCKET, f"source_workload, {dest}"),
        Record(R.ISTIO_REQUESTS, rate(ISTIO.REQUESTS, f"source_workload, {dest}, response_code", istio_dest)),
        Record(R.ISTIO_MTLS,
               f"{rate(ISTIO.REQUESTS, dest, istio_dest, mtls)} / {rate(ISTIO.REQUESTS, dest, istio_dest)}"),
        Record(R.ENVOY_BUCKET, rate(f"{ENVOY.RQ_TIME}_bucket", f"{ENVOY.L_CLUSTER}, le")),
        *quantile_record(R.ENVOY_QUANTILE, R.ENVOY_BUCKET, ENVOY.L_CLUSTER),
        Record(R.ENVOY_REQUESTS, rate(ENVOY.RQ_XX, f"{ENVOY.L_CLUSTER}, envoy_response_code_class")),
        Record(R.ENVOY_RETRIES, rate(ENVOY.RQ_RETRY, ENVOY.L_CLUSTER)),
        Record(R.ROUTE_DECISIONS, _by_decision(rate(ENVOY.ROUTE_RQ_COMPLETED, ENVOY.L_ROUTE, _DECISION_ROUTE))),
        Record(R.ROUTE_OVERFLOW, _by_decision(rate(ENVOY.ROUTE_RQ_RETRY, ENVOY.L_ROUTE, _DECISION_ROUTE))),
        # every try a variant's replicas served: its cluster's (named after its model), overflow from another variant
        # included, and its last resort's (`<model>__last`: after every variant's own try failed)
        *(Record(R.VARIANT_REQUESTS, f"sum(rate({series(cfg, ENVOY.RQ_TOTAL, _variant_clusters(v.model))}[{RATE}]))",
                 {"workload": v.workload, "variant": v.model}) for v in cfg.variants),
    ]


def _cluster(name: str) -> str:
    return f'{ENVOY.L_CLUSTER}="{name}"'


def _variant_clusters(model: str) -> str:
    return f'{ENVOY.L_CLUSTER}=~"{model}|{model}__last"'


# The gateway's variant decision routes: stat_prefix <workload>__<variant>__<reason> (DNS labels, no "_")
_DECISION_ROUTE = f'{ENVOY.L_ROUTE}=~"[a-z0-9-]+__[a-z0-9-]+__[a-z-]+"'


def _by_decision(expr: str) -> str:
    """`expr` (by envoy_route) split into workload, variant and reason labels."""
    for label, regex in (("workload", "([a-z0-9-]+)__.*"), ("variant", "[a-z0-9-]+__([a-z0-9-]+)__.*"),
                         ("reason", ".*__([a-z-]+)")):
        expr = f'label_replace({expr}, "{label}", "$1", "{ENVOY.L_ROUTE}", "{regex}")'
    return f"sum by (workload, variant, reason) ({expr})"


# --------------------------------------------------------------------------------------------
# alerts


def _burn_expr(sli: str, objective: Objective, severity: str) -> str:
    target = objective.latency_target if sli == "latency" else objective.availability_target
    budget = 1 - target
    braces = f'{{objective="{objective_name(objective)}"}}'
    pairs = []
    for w in (w for w in BURN_WINDOWS if w.severity == severity):
        limit = round(w.factor * budget, 10)
        pairs.append(f"({R.slo_errors(sli, w.short)}{braces} > {limit!r} and "
                     f"{R.slo_errors(sli, w.long)}{braces} > {limit!r})")
    return "\n  or\n".join(pairs)


def _slo_alerts(cfg: ObservabilityConfig) -> list[Alert]:
    out = []
    for o in cfg.objectives:
        scope = f"workflow {o.workflow}" if o.workflow else "workflows without their own SLO"
        for sli, name, what in (
            ("latency", "WorkflowLatencyBudgetBurn",
             f"slower than {o.latency_seconds:g}s (target {o.latency_target:.3%} within)"),
            ("availability", "WorkflowErrorBudgetBurn", f"failing (target {o.availability_target:.3%} succeed)"),
        ):
            for severity, pace in (("critical", "fast"), ("warning", "slowly")):
                out.append(Alert(
                    name, _burn_expr(sli, o, severity), severity,
                    summary=f"{{{{ $labels.workflow }}}} is burning its {sli} error budget {pace}",
                    description=(f"Workflow {{{{ $labels.workflow }}}} (tenant {{{{ $labels.tenant }}}}, {scope}) is "
                                 f"{what}: {{{{ $value | humanizePercentage }}}} of runs missed the SLO over the "
                                 "short window, enough to spend the 30-day budget "
                                 f"{'within days' if severity == 'critical' else 'before the window ends'}."),
                    runbook_url=runbook(cfg, name), for_=BURN_FOR[severity],
                    labels={"slo": sli, "objective": objective_name(o)},
                ))
    return out


def _gpu_alerts(cfg: ObservabilityConfig) -> list[Alert]:
    reasons = series(cfg, DCGM.CLOCK_THROTTLE_REASONS)

    def bit(mask: int) -> str:  # PromQL has no bitwise operators: test one bit arithmetically
        return f"floor({reasons} / {mask}) % 2 == 1"

    hw_slow, sw_thermal, hw_thermal, power_brake = 0x8, 0x20, 0x40, 0x80  # NVML clocksThrottleReasons bits
    gpu = "GPU {{ $labels.gpu }} on {{ $labels.Hostname }}{{ $labels.hostname }}"
    drain = " or ".join(f"{R.NEW_XID} == {x}" for x in DRAIN_XIDS)
    drain_list = ", ".join(map(str, DRAIN_XIDS))
    return [
        Alert("GpuXidError", drain, "critical",
              summary=f"{gpu} reported XID {{{{ $value }}}}: drain the node",
              description=f"{gpu} reported XID {{{{ $value }}}} in the last {XID_WINDOW}, one of the XIDs "
                          f"({drain_list}) after which the node must be cordoned and drained and the GPU reset "
                          "(or replaced).",
              runbook_url=runbook(cfg, "GpuXidError")),
        Alert("GpuXidError", f"{R.NEW_XID} unless ({drain})", "warning",
              summary=f"{gpu} reported XID {{{{ $value }}}}",
              description=f"{gpu} reported XID {{{{ $value }}}} in the last {XID_WINDOW}: usually an "
                          "application fault (13, 31, 43); the GPU needs no reset. Check the workload's and the "
                          "driver's logs.",
              runbook_url=runbook(cfg, "GpuXidError")),
        Alert("GpuThermalThrottling", f"({bit(sw_thermal)}) or ({bit(hw_thermal)})", "warning",
              summary=f"{gpu} is thermally throttled",
              description=f"{gpu} has had its clocks cut for temperature for 5 minutes "
                          "(NVML SW or HW thermal slowdown): check cooling and airflow.",
              runbook_url=runbook(cfg, "GpuThermalThrottling"), for_="5m"),
        Alert("GpuPowerThrottling", f"({bit(power_brake)}) or ({bit(hw_slow)})", "warning",
              summary=f"{gpu} is power-brake throttled",
              description=f"{gpu} has had its clocks cut by HW slowdown or the power brake for 5 minutes: "
                          "check the PSU and power capping of the node.",
              runbook_url=runbook(cfg, "GpuPowerThrottling"), for_="5m"),
        Alert("GpuRowRemapFailure", f"{series(cfg, DCGM.ROW_REMAP_FAILURE)} > 0", "critical",
              summary=f"{gpu} failed to remap a memory row",
              description=f"{gpu} could not remap a failing HBM row: the GPU must be replaced.",
              runbook_url=runbook(cfg, "GpuRowRemapFailure")),
        Alert("GpuExpensiveIdle",
              f"sum by (pool) ({R.IDLE_GPUS}) >= on (pool) {R.GPUS_PER_NODE}", "warning",
              summary="Pool {{ $labels.pool }} has {{ $value }} allocated GPUs idle",
              description=f"GPUs allocated to models in pool {{{{ $labels.pool }}}} ran below "
                          f"{cfg.idle_gpu_utilization_percent:g}% utilisation for an hour: at least a whole "
                          "node's worth, paid at the node's price; scale the models down or consolidate them.",
              runbook_url=runbook(cfg, "GpuExpensiveIdle"), for_="1h"),
        *(a for e in ENGINE_RULES.values() for a in e.alerts(cfg)),
    ]


MODEL_SLO_FOR = "15m"  # more than 5% of a model's requests above its latency SLO this long tickets


def _model_slo_alerts(cfg: ObservabilityConfig) -> list[Alert]:
    """More than 1 - MODEL_SLO_QUANTILE of a model's requests above its models.<name>.slo time to first token or
    inter-token latency for MODEL_SLO_FOR, at MODEL_SLO_MIN_REQUESTS_PER_SECOND or more: only models with that
    record, i.e. whose engine exports that latency (Triton: neither)."""
    out = []
    share = round(1 - MODEL_SLO_QUANTILE, 10)
    recorded = {r.record for r in _model_slo_records(cfg)}
    for alert, record, _, _, key, what in MODEL_SLOS:
        if record not in recorded:
            continue
        out.append(Alert(
            alert, f"{record} > {share!r}\nand on (model) {R.MODEL_SLO_REQUESTS} >= "
                   f"{MODEL_SLO_MIN_REQUESTS_PER_SECOND!r}", "warning",
            summary=f"Model {{{{ $labels.model }}}}: {{{{ $value | humanizePercentage }}}} of its {what} above its "
                    "SLO",
            description=f"For {MODEL_SLO_FOR} more than {share:.0%} of model {{{{ $labels.model }}}}'s "
                        f"{what} observations (its engine's histogram, over 5 minutes, at least "
                        f"{MODEL_SLO_MIN_REQUESTS_PER_SECOND:g} requests/s) have been above its p95 SLO "
                        f"(models.{{{{ $labels.model }}}}.slo.{key}): {{{{ $value | humanizePercentage }}}} of them. "
                        "Check its queue and KV cache, and its replicas.",
            runbook_url=runbook(cfg, alert), for_=MODEL_SLO_FOR))
    return out


SERVER_ERRORS = 'status_code=~"5.."'
_SIGNAL_WORDS = {"spans": "spans", "metric_points": "metric points", "log_records": "log records"}


def _pipeline_alerts(cfg: ObservabilityConfig) -> list[Alert]:
    """The telemetry pipeline alerts on itself: a failing exporter, a full queue or a refusing receiver drops spans,
    metrics or logs silently otherwise (the Collector and Jaeger v2 export the same otelcol_* telemetry), as does
    Alloy giving up on Loki, Loki failing requests, or the canary's lines not coming back."""
    def rate(metric: str, by: str, *matchers: str, window: str = RATE) -> str:
        return f"sum by ({by}) (rate({series(cfg, metric, *matchers)}[{window}]))"

    out: list[Alert] = []
    for signal in PIPELINE.SIGNALS:
        words = _SIGNAL_WORDS[signal]
        where = "{{ $labels.job }} ({{ $labels.namespace }})"
        for alert, metric, by, what in (
            ("TelemetryExportFailing", PIPELINE.SEND_FAILED, "namespace, job, exporter",
             f"exporter {{{{ $labels.exporter }}}} of {where} failed to send {{{{ $value }}}} {words}/s after "
             "its retries"),
            ("TelemetryExportQueueFull", PIPELINE.ENQUEUE_FAILED, "namespace, job, exporter",
             f"exporter {{{{ $labels.exporter }}}} of {where} could not queue {{{{ $value }}}} {words}/s (its "
             "sending queue is full)"),
            ("TelemetryReceiverRefusing", PIPELINE.RECEIVER_REFUSED, "namespace, job, receiver, transport",
             f"receiver {{{{ $labels.receiver }}}} ({{{{ $labels.transport }}}}) of {where} refused "
             f"{{{{ $value }}}} {words}/s"),
        ):
            out.append(Alert(
                alert, f"{rate(metric.format(signal=signal), by)} > 0", "warning",
                summary=f"{{{{ $labels.job }}}} is dropping {words}",
                description=f"For {PIPELINE_FOR} the {what}: they are lost, and dashboards, traces or logs miss "
                            "them.",
                runbook_url=runbook(cfg, alert), for_=PIPELINE_FOR, labels={"signal": signal}))
    out += [
        Alert("LogShippingDropping", f"{rate(PIPELINE.LOKI_WRITE_DROPPED, 'namespace, pod, host')} > 0", "warning",
              summary="Alloy {{ $labels.pod }} is dropping log lines",
              description=f"For {PIPELINE_FOR} Alloy pod {{{{ $labels.pod }}}} dropped {{{{ $value }}}} log "
                          "lines/s it could not push to {{ $labels.host }} after every retry: that node's pod logs "
                          "are lost.",
              runbook_url=runbook(cfg, "LogShippingDropping"), for_=PIPELINE_FOR),
        Alert("LokiRequestsFailing",
              f"{rate(PIPELINE.LOKI_REQUESTS, 'namespace, job, route', SERVER_ERRORS)} / "
              f"{rate(PIPELINE.LOKI_REQUESTS, 'namespace, job, route')} > {LOKI_ERROR_RATIO!r}", "warning",
              summary="Loki {{ $labels.job }} fails {{ $value | humanizePercentage }} of {{ $labels.route }}",
              description=f"For {PIPELINE_FOR} Loki ({{{{ $labels.job }}}}) answered {{{{ $value | "
                          f"humanizePercentage }}}} of {{{{ $labels.route }}}} requests with 5xx (more than "
                          f"{LOKI_ERROR_RATIO:.0%}); on route loki_api_v1_push these are log lines refused.",
              runbook_url=runbook(cfg, "LokiRequestsFailing"), for_=PIPELINE_FOR),
        Alert("LokiCanaryLinesMissing",
              f"{rate(PIPELINE.CANARY_MISSING, 'namespace', window='15m')} / "
              f"{rate(PIPELINE.CANARY_ENTRIES, 'namespace', window='15m')} > {CANARY_MISSING_RATIO!r}", "warning",
              summary="Loki lost {{ $value | humanizePercentage }} of the canary's log lines",
              description=f"For {PIPELINE_FOR} more than {CANARY_MISSING_RATIO:.0%} of the lines loki-canary "
                          "wrote in {{ $labels.namespace }} never came back from Loki ({{ $value | "
                          "humanizePercentage }} over 15 minutes): logs are being lost between write and query.",
              runbook_url=runbook(cfg, "LokiCanaryLinesMissing"), for_=PIPELINE_FOR),
    ]
    return out


# --------------------------------------------------------------------------------------------
# assembly


def groups(cfg: ObservabilityConfig) -> list[Group]:
    """Every rule group; recording groups come in dependency order (each only reads earlier ones)."""
    return [
        Group("aifactory-config", tuple(_config_records(cfg))),
        Group("aifactory-inventory", tuple(_inventory_records(cfg))),
        Group("aifactory-workflows", tuple(_workflow_records(cfg))),
        Group("aifactory-serving", tuple(_serving_records(cfg))),
        Group("aifactory-mesh", tuple(_mesh_records(cfg))),
        Group("aifactory-fleet", tuple(_fleet_records(cfg))),
        Group("aifactory-cost", tuple(_cost_records(cfg))),
        Group("aifactory-slo", tuple(_slo_records(cfg))),
        Group("aifactory-slo-alerts", tuple(_slo_alerts(cfg))),
        Group("aifactory-gpu-alerts", tuple(_gpu_alerts(cfg))),
        Group("aifactory-model-slo-alerts", tuple(_model_slo_alerts(cfg))),
        Group("aifactory-pipeline-alerts", tuple(_pipeline_alerts(cfg))),
        Group("aifactory-gateway-alerts", tuple(gateway_alerts.alerts(cfg))),
        *([Group("aifactory-token-budget-alerts", tuple(budgets.alerts(cfg)))] if cfg.token_budgets else []),
        *([Group("aifactory-load-balancer-alerts", tuple(load_balancer_alerts.alerts(cfg)))]
          if cfg.load_balancer_controller else []),
    ]


def _rules_of(gs: Iterable[Group], kind: type) -> list[Any]:
    return [r for g in gs for r in g.rules if isinstance(r, kind)]


def records(cfg: ObservabilityConfig) -> dict[str, list[Record]]:
    """Recording rules by recorded name (one name may have a rule per pool, model or objective)."""
    out: dict[str, list[Record]] = {}
    for r in _rules_of(groups(cfg), Record):
        out.setdefault(r.record, []).append(r)
    return out


def alerts(cfg: ObservabilityConfig) -> list[Alert]:
    return _rules_of(groups(cfg), Alert)


def rules_document(cfg: ObservabilityConfig) -> dict[str, Any]:
    """A Prometheus rules file (also the `spec` of a PrometheusRule)."""
    return {"groups": [g.to_dict() for g in groups(cfg)]}
