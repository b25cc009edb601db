"""The known answer of every panel of every dashboard, on the synthetic data test_dashboards.py backfills.

Each answer is worked out here from what tests.support.synthetic writes (its rates, levels and uniform latency
spans, the prod stack's prices, and which GPUs each pod holds), never from the dashboards' code: e.g. vLLM's
prefix-cache hit ratio is hits 2 x tokens over queries 4 x tokens = 0.5; a uniform latency on [lo, hi] whose ends
are bucket boundaries has the exact quantile lo + q (hi - lo) under histogram_quantile's interpolation.

ANSWERS maps (board, panel title) to one Answer per query of the panel, in the panel's order. A panel whose
known answer is asserted in another test instead is listed in ANSWERED_ELSEWHERE with that test
("path::function"). test_dashboards.py::test_every_panel_has_a_known_answer fails naming any panel of the prod
stack's dashboards that is in neither: a new panel comes with its known answer, here or in its own test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dashboards.config import ObservabilityConfig
from tests.support import synthetic as syn

__all__ = ["Answer", "ANSWERED_ELSEWHERE", "answers"]

MIB = 1024 * 1024
NVLINK_BYTES_PER_UNIT = 1000 * 1024  # DCGM's NVLink unit, 1000 KiB/s (tests/support/exporter_facts.py)


@dataclass(frozen=True)
class Answer:
    by: tuple[str, ...]  # the labels that tell the result's series apart (empty: one series)
    values: Mapping[tuple[str, ...], float]  # label values (in `by` order) -> value


# Panels whose known answer another test asserts: (board, title) -> "tests/...py::test_function".
ANSWERED_ELSEWHERE: dict[tuple[str, str], str] = {
    # the variant routing row's telemetry panels: known answers on their own backfilled data (issue #15)
    ("compound-latency", "Budget left at step start"):
        "tests/artifacts/test_variant_panels.py::test_budget_left_at_step_start",
    ("compound-latency", "Deadline misses"):
        "tests/artifacts/test_variant_panels.py::test_deadline_misses_per_workflow",
    # the session affinity panels of the vLLM row: known answers per replica on their own data (issue 34)
    ("serving", "Prefix cache hit rate per replica"):
        "tests/artifacts/test_affinity_panels.py::test_prefix_cache_hit_rate_per_replica",
    ("serving", "Requests per replica"):
        "tests/artifacts/test_affinity_panels.py::test_requests_per_replica_are_shares_of_the_model",
    ("serving", "Busiest replica over the mean"):
        "tests/artifacts/test_affinity_panels.py::test_busiest_replica_over_the_mean",
    # the token budget row of the cost dashboard: the budget service's series on their own data (issue 48)
    ("gpu-cost", "Token budget used"): "tests/artifacts/test_budget_panels.py::test_token_budget_used",
    ("gpu-cost", "Token budget remaining"): "tests/artifacts/test_budget_panels.py::test_token_budget_remaining",
    ("gpu-cost", "Requests refused by token budgets"):
        "tests/artifacts/test_budget_panels.py::test_requests_refused_by_token_budgets",
}


def _quantile(lo: float, hi: float, q: float) -> float:
    return lo + q * (hi - lo)


@dataclass(frozen=True)
class _Gpu:
    pool: str
    node: str
    gpu: str
    state: str  # busy | idle | free
    price: float  # $/h of one GPU of its pool
    pod: syn.Allocation | None

    @property
    def util(self) -> float:
        return {"busy": syn.BUSY_UTIL_PERCENT, "idle": syn.IDLE_UTIL_PERCENT, "free": 0.0}[self.state]

    @property
    def nvlink_units(self) -> float:  # the last sample: the gauge alternates high/low and ends on low
        return syn.NVLINK_UNITS[self.state][1]


def _gpus(cfg: ObservabilityConfig, nodes: Mapping[str, int]) -> list[_Gpu]:
    """Every GPU of the fleet: a pod's even GPUs work, its odd ones idle, GPUs no pod holds are free."""
    held = {(a.node, g): (a, i) for a in syn.allocate(cfg, nodes) for i, g in enumerate(a.gpus)}
    out = []
    for pool in cfg.pools:
        for n in range(nodes[pool.name]):
            node = f"{pool.name}-node-{n:03d}"
            for g in range(pool.gpus_per_node):
                a, i = held.get((node, g), (None, 0))
                state = "free" if a is None else ("idle" if i % 2 else "busy")
                out.append(_Gpu(pool.name, node, str(g), state, pool.node_price_per_hour / pool.gpus_per_node, a))
    return out


def _per_pool(gpus: list[_Gpu], f: Callable[[list[_Gpu]], float]) -> Answer:
    pools = sorted({g.pool for g in gpus})
    return Answer(("pool",), {(p,): f([g for g in gpus if g.pool == p]) for p in pools})


def _per_gpu(gpus: list[_Gpu], f: Callable[[_Gpu], float]) -> Answer:
    return Answer(("node", "gpu"), {(g.node, g.gpu): f(g) for g in gpus})


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def answers(cfg: ObservabilityConfig, nodes: Mapping[str, int]) -> dict[tuple[str, str], list[Answer]]:
    """Every panel's known answer on `generate(cfg, nodes=nodes, ...)` at its last sample (Scale(): one pod each)."""
    gpus = _gpus(cfg, nodes)
    models = [m.name for m in cfg.models]
    vllm = [m.name for m in cfg.models if m.engine == "vllm"]
    triton = [m.name for m in cfg.models if m.engine == "triton"]
    sglang = [m.name for m in cfg.models if m.engine == "sglang"]
    tokens = {m.name: 500.0 * (i + 1) for i, m in enumerate(cfg.models)}  # generated tokens/s, model i
    pool_of = {m.name: m.pool for m in cfg.models}
    price = {p.name: p.node_price_per_hour / p.gpus_per_node for p in cfg.pools}
    model_gpus = {m: sum(len(a.gpus) for a in syn.allocate(cfg, nodes) if a.model == m) for m in models}
    model_cost = {m: model_gpus[m] * price[pool_of[m]] for m in models}
    tenant_of = {m.name: m.tenant for m in cfg.models}
    workflows = (*cfg.named_workflows, syn.OTHER_WORKFLOW)
    spans = {w: syn.WORKFLOW_SPANS[i % len(syn.WORKFLOW_SPANS)] for i, w in enumerate(workflows)}
    mean_duration = _mean([(lo + hi) / 2 for lo, hi in spans.values()])
    runs = syn.WORKFLOWS_PER_S + syn.WORKFLOW_ERRORS_PER_S  # per workflow
    ok_total = syn.WORKFLOWS_PER_S * len(workflows)
    agent_tenant = cfg.tenants[0]
    thresholds = {o.workflow: o.latency_seconds for o in cfg.objectives}
    objective = {w: (w if w in thresholds else "default") for w in workflows}
    kinds = syn.CRITICAL_PATH_SHARES
    upstream_total = sum(syn.UPSTREAM_PER_S.values())
    model_requests = sum(syn.MODEL_REQUESTS_PER_S.values())
    agent_requests = sum(syn.AGENT_REQUESTS_PER_S.values())
    gateway = syn.GATEWAY
    agents = [f"{w}-agent" for w in workflows]
    ns = {m.name: m.tenant for m in cfg.models}

    def per_model(names: list[str], f: Callable[[str], float]) -> Answer:
        return Answer(("model",), {(m,): f(m) for m in names})

    def vllm_quantiles(lo_hi: tuple[float, float]) -> list[Answer]:
        return [per_model(vllm, lambda m, q=q: _quantile(*lo_hi, q)) for q in (0.5, 0.95, 0.99)]

    def sglang_quantiles(buckets: tuple[float, ...]) -> list[Answer]:  # uniform on the 3rd to 9th boundaries
        return [per_model(sglang, lambda m, q=q: _quantile(buckets[2], buckets[8], q)) for q in (0.5, 0.95, 0.99)]

    # vLLM's histograms are uniform between their 3rd and 9th bucket boundaries (vLLM 0.33.0's buckets)
    ttft_span = (syn.VLLM_TTFT_BUCKETS[2], syn.VLLM_TTFT_BUCKETS[8])  # 0.01 .. 0.25 s
    itl_span = (syn.VLLM_ITL_BUCKETS[2], syn.VLLM_ITL_BUCKETS[8])  # 0.05 .. 0.3 s
    request_span = (syn.VLLM_REQUEST_BUCKETS[2], syn.VLLM_REQUEST_BUCKETS[8])  # 0.8 .. 10 s
    def hops(q: float) -> Answer:
        pairs = [(gateway, m) for m in models] + [(a, gateway) for a in agents]
        return Answer(("source_workload", "destination_workload"),
                      {p: _quantile(50, 500, q) for p in pairs})  # every hop uniform on 50-500 ms

    destinations = {**{m: model_requests for m in models}, gateway: agent_requests * len(agents)}
    five_xx = {**{m: syn.MODEL_REQUESTS_PER_S["503"] / model_requests for m in models},
               gateway: syn.AGENT_REQUESTS_PER_S["503"] / agent_requests}
    def per_cluster(v: float) -> Answer:  # the gateway's cluster of each model
        return Answer(("envoy_cluster_name",), {(m,): v for m in models})

    idle_alloc = [g for g in gpus if g.state == "idle"]
    free = [g for g in gpus if g.state == "free"]
    decisions = Answer(("workload", "variant", "reason"), dict(syn.ROUTE_DECISIONS_PER_S))
    overflow = Answer(("workload", "variant", "reason"), dict(syn.ROUTE_OVERFLOW_PER_S))
    # DCGM levels per GPU, as the generator writes them from the utilisation (tests.support.synthetic.DCGM_VALUES)
    temp = lambda g: 40 + g.util / 3  # noqa: E731
    return {
        # --- compound latency ------------------------------------------------------------------------------
        ("compound-latency", "Workflow latency p50 / p95 / p99"): [
            Answer(("workflow",), {(w,): _quantile(*spans[w], q) for w in workflows}) for q in (0.5, 0.95, 0.99)],
        ("compound-latency", "Workflows completed per second by status"): [
            Answer(("workflow", "status"), {**{(w, "ok"): syn.WORKFLOWS_PER_S for w in workflows},
                                            **{(w, "error"): syn.WORKFLOW_ERRORS_PER_S for w in workflows}})],
        # share of runs within the objective's threshold: uniform durations, ok and failed runs alike
        ("compound-latency", "Latency SLO compliance (24h)"): [
            Answer(("workflow", "objective"), {
                (w, objective[w]): min(1.0, max(0.0, (thresholds.get(w, thresholds[None]) - spans[w][0])
                                                / (spans[w][1] - spans[w][0]))) for w in workflows})],
        ("compound-latency", "Workflow error ratio"): [
            Answer(("workflow",), {(w,): syn.WORKFLOW_ERRORS_PER_S / runs for w in workflows})],
        ("compound-latency", "Critical-path share by step kind"): [
            Answer(("step_kind",), {(k,): s for k, s in kinds.items()})],
        ("compound-latency", "Critical-path seconds per workflow by step kind"): [
            Answer(("step_kind",), {(k,): s * mean_duration for k, s in kinds.items()})],
        ("compound-latency", "Step latency p95 by kind"): [  # steps uniform on 0.1-2 s
            Answer(("step_kind",), {(k,): _quantile(0.1, 2.0, 0.95) for k in kinds})],
        ("compound-latency", "Step errors by kind"): [  # 0.01/s per kind in every workflow
            Answer(("step_kind", "error_type"), {(k, "TimeoutError"): 0.01 * len(workflows) for k in kinds})],
        ("compound-latency", "Time to first token p95 (vLLM)"): [
            per_model(vllm, lambda m: _quantile(*ttft_span, 0.95))],
        ("compound-latency", "Inter-token latency p95 (vLLM)"): [
            per_model(vllm, lambda m: _quantile(*itl_span, 0.95))],
        ("compound-latency", "vLLM request phases p95: queue, prefill, decode"): [
            per_model(vllm, lambda m: _quantile(*request_span, 0.95)) for _ in range(3)],
        ("compound-latency", "Time to first token p95 (SGLang)"): sglang_quantiles(syn.SGLANG_TTFT_BUCKETS)[1:2],
        ("compound-latency", "Inter-token latency p95 (SGLang)"): sglang_quantiles(syn.SGLANG_ITL_BUCKETS)[1:2],
        # tensorrt_llm: 20 requests/s, 10 ms queue and 1 + 280 + 1 ms compute each (microsecond counters)
        ("compound-latency", "Triton queue and compute time per request"): [
            per_model(triton, lambda m: 0.010), per_model(triton, lambda m: 0.282)],
        ("compound-latency", "Gateway upstream latency p95 (Envoy)"): [per_cluster(_quantile(50, 500, 0.95))],
        ("compound-latency", "Mesh hop latency p95 (Istio)"): [hops(0.95)],
        ("compound-latency", "Gateway 5xx ratio"): [per_cluster(syn.UPSTREAM_PER_S["5"] / upstream_total)],
        ("compound-latency", "Mesh 5xx ratio"): [
            Answer(("destination_workload",), {(d,): r for d, r in five_xx.items()})],
        ("compound-latency", "Requests per workload by variant and reason"): [decisions],
        ("compound-latency", "Overflow to another variant"): [overflow],
        # --- GPU cost ----------------------------------------------------------------------------------------
        ("gpu-cost", "GPU spend"): [Answer((), {(): sum(g.price for g in gpus)})],
        ("gpu-cost", "Idle GPU cost"): [Answer((), {(): sum(g.price for g in idle_alloc + free)})],
        ("gpu-cost", "Allocated idle GPU cost"): [Answer((), {(): sum(g.price for g in idle_alloc)})],
        ("gpu-cost", "Unallocated GPU cost"): [Answer((), {(): sum(g.price for g in free)})],
        ("gpu-cost", "Utilisation-weighted cost"): [Answer((), {(): sum(g.price * g.util / 100 for g in gpus)})],
        ("gpu-cost", "Cost per completed workflow"): [
            Answer((), {(): sum(model_cost.values()) / ok_total / 3600})],
        ("gpu-cost", "GPU spend by pool"): [_per_pool(gpus, lambda gs: sum(g.price for g in gs))],
        ("gpu-cost", "Spend: total, working, idle"): [
            _per_pool(gpus, lambda gs: sum(g.price for g in gs)),
            _per_pool(gpus, lambda gs: sum(g.price for g in gs if g.state == "busy")),
            _per_pool(gpus, lambda gs: sum(g.price for g in gs if g.state == "idle")),
            _per_pool(gpus, lambda gs: sum(g.price for g in gs if g.state == "free"))],
        ("gpu-cost", "Idle GPU cost by model"): [
            per_model(models, lambda m: sum(g.price for g in idle_alloc if g.pod and g.pod.model == m))],
        ("gpu-cost", "Idle GPUs by pool"): [
            _per_pool(gpus, lambda gs: sum(g.state == "idle" for g in gs)),
            _per_pool(gpus, lambda gs: sum(g.state == "free" for g in gs))],
        ("gpu-cost", "Cost per 1M generated tokens"): [
            per_model(models, lambda m: model_cost[m] / (tokens[m] * 3600) * 1e6)],
        # every workflow runs in the first tenant's agents
        ("gpu-cost", "Cost per completed workflow by tenant"): [
            Answer(("tenant",), {(agent_tenant,): sum(c for m, c in model_cost.items() if tenant_of[m] == agent_tenant)
                                 / ok_total / 3600})],
        ("gpu-cost", "GPU spend by model"): [per_model(models, lambda m: model_cost[m])],
        ("gpu-cost", "Generated tokens per second"): [per_model(models, lambda m: tokens[m])],
        ("gpu-cost", "GPU utilisation by pool"): [_per_pool(gpus, lambda gs: _mean([g.util / 100 for g in gs]))],
        ("gpu-cost", "GPU price by pool"): [Answer(("pool",), {(p,): v for p, v in price.items()})],
        # --- GPU fleet ---------------------------------------------------------------------------------------
        ("gpu-fleet", "GPU utilisation by pool"): [_per_pool(gpus, lambda gs: _mean([g.util / 100 for g in gs]))],
        ("gpu-fleet", "Graphics engine active by pool"): [
            _per_pool(gpus, lambda gs: _mean([g.util / 100 for g in gs]))],
        ("gpu-fleet", "Tensor pipe active by pool"): [_per_pool(gpus, lambda gs: _mean([g.util / 200 for g in gs]))],
        ("gpu-fleet", "DRAM active by pool"): [_per_pool(gpus, lambda gs: _mean([g.util / 150 for g in gs]))],
        ("gpu-fleet", "Framebuffer used by pool"): [_per_pool(gpus, lambda gs: 60000 * MIB * len(gs))],
        ("gpu-fleet", "Power draw by pool"): [_per_pool(gpus, lambda gs: sum(100 + 5 * g.util for g in gs))],
        ("gpu-fleet", "Hottest GPU by pool"): [_per_pool(gpus, lambda gs: max(temp(g) for g in gs))],
        ("gpu-fleet", "Hottest HBM by pool"): [_per_pool(gpus, lambda gs: max(45 + g.util / 3 for g in gs))],
        ("gpu-fleet", "SM clock by pool"): [_per_pool(gpus, lambda gs: 1980.0)],
        ("gpu-fleet", "NVLink throughput by pool"): [
            _per_pool(gpus, lambda gs: sum(g.nvlink_units for g in gs) * NVLINK_BYTES_PER_UNIT)],
        ("gpu-fleet", "PCIe TX by pool"): [_per_pool(gpus, lambda gs: 2e9 * len(gs))],
        ("gpu-fleet", "PCIe RX by pool"): [_per_pool(gpus, lambda gs: 3e9 * len(gs))],
        ("gpu-fleet", "GPUs with an XID error by pool"): [_per_pool(gpus, lambda gs: 0.0)],
        ("gpu-fleet", "Pending row remaps by pool"): [_per_pool(gpus, lambda gs: 0.0)],
        ("gpu-fleet", "GPU utilisation per GPU"): [_per_gpu(gpus, lambda g: g.util)],
        ("gpu-fleet", "Temperature per GPU"): [_per_gpu(gpus, temp)],
        ("gpu-fleet", "Mean GPU temperature"): [Answer((), {(): _mean([temp(g) for g in gpus])})],
        ("gpu-fleet", "Tensor pipe active per GPU"): [_per_gpu(gpus, lambda g: g.util / 200)],
        ("gpu-fleet", "Power per GPU"): [_per_gpu(gpus, lambda g: 100 + 5 * g.util)],
        ("gpu-fleet", "Framebuffer used per GPU"): [_per_gpu(gpus, lambda g: 60000 * MIB)],
        ("gpu-fleet", "SM clock per GPU"): [_per_gpu(gpus, lambda g: 1980.0)],
        ("gpu-fleet", "Clock throttle reasons per GPU"): [_per_gpu(gpus, lambda g: 0.0)],
        ("gpu-fleet", "Last XID per GPU"): [_per_gpu(gpus, lambda g: 0.0)],
        ("gpu-fleet", "Row remap failures per GPU"): [_per_gpu(gpus, lambda g: 0.0)],
        ("gpu-fleet", "PCIe replays per GPU"): [_per_gpu(gpus, lambda g: 0.0)],
        ("gpu-fleet", "NVLink throughput per GPU"): [_per_gpu(gpus, lambda g: g.nvlink_units * NVLINK_BYTES_PER_UNIT)],
        # --- serving: vLLM (one pod per model: 12 running, 1 waiting, KV cache 40 %) -------------------------
        ("serving", "KV cache usage"): [per_model(vllm, lambda m: 0.4)],
        ("serving", "Requests running and waiting"): [per_model(vllm, lambda m: 12.0), per_model(vllm, lambda m: 1.0)],
        ("serving", "Batch size per replica"): [per_model(vllm, lambda m: 12.0)],
        ("serving", "Token throughput"): [
            per_model(vllm, lambda m: 4 * tokens[m]), per_model(vllm, lambda m: tokens[m])],
        ("serving", "Prefix cache hit rate"): [per_model(vllm, lambda m: (2 * tokens[m]) / (4 * tokens[m]))],
        ("serving", "Speculative decoding acceptance"): [per_model(vllm, lambda m: 70 / 100)],
        ("serving", "Preemptions"): [per_model(vllm, lambda m: 0.01)],
        ("serving", "Finished requests by reason"): [
            Answer(("model", "finished_reason"), {(m, r): v for m in vllm for r, v in syn.FINISHED_PER_S.items()})],
        ("serving", "Time to first token"): vllm_quantiles(ttft_span),
        ("serving", "Inter-token latency"): vllm_quantiles(itl_span),
        ("serving", "End-to-end request latency"): vllm_quantiles(request_span),
        ("serving", "Queue time"): vllm_quantiles(request_span),
        # --- serving: Triton (tensorrt_llm only; the repository's other models carry other numbers) ----------
        ("serving", "Requests per second"): [per_model(triton, lambda m: 20.0), per_model(triton, lambda m: 0.1)],
        ("serving", "Queue and compute time per request"): [
            per_model(triton, lambda m: 0.010), per_model(triton, lambda m: 0.282)],
        ("serving", "Dynamic batch size"): [per_model(triton, lambda m: 20 / 5)],  # inferences / executions
        ("serving", "Pending requests"): [per_model(triton, lambda m: 3.0)],
        ("serving", "Triton token throughput"): [
            per_model(triton, lambda m: 4 * tokens[m]), per_model(triton, lambda m: tokens[m])],
        # --- serving: SGLang (one pod per model, one scheduler: 12 running, 1 queued, KV pool 40 %) -------------
        ("serving", "SGLang requests running and queued"): [
            per_model(sglang, lambda m: 12.0), per_model(sglang, lambda m: 1.0)],
        ("serving", "SGLang token throughput"): [
            per_model(sglang, lambda m: 4 * tokens[m]), per_model(sglang, lambda m: tokens[m])],
        # cached tokens (device 1.5 + host 0.5 per generated token) over prompt tokens (4 per generated token); the
        # last batch's sglang:cache_hit_rate gauge reads 0.9
        ("serving", "SGLang prefix cache hit rate"): [per_model(sglang, lambda m: (1.5 + 0.5) / 4)],
        ("serving", "SGLang KV pool usage"): [per_model(sglang, lambda m: 0.4)],
        ("serving", "SGLang time to first token"): sglang_quantiles(syn.SGLANG_TTFT_BUCKETS),  # 0.4 .. 4 s
        ("serving", "SGLang inter-token latency"): sglang_quantiles(syn.SGLANG_ITL_BUCKETS),  # 6 .. 30 ms
        ("serving", "SGLang end-to-end request latency"): sglang_quantiles(syn.SGLANG_E2E_BUCKETS),  # 0.4 .. 4 s
        ("serving", "SGLang queue time"): sglang_quantiles(syn.SGLANG_QUEUE_BUCKETS),  # 5 ms .. 1 s
        # --- mesh --------------------------------------------------------------------------------------------
        ("mesh", "Requests per second by destination"): [
            Answer(("destination_workload",), {(d,): r for d, r in destinations.items()})],
        ("mesh", "5xx ratio by destination"): [
            Answer(("destination_workload",), {(d,): r for d, r in five_xx.items()})],
        ("mesh", "Hop latency by source and destination"): [hops(0.5), hops(0.95), hops(0.99)],
        ("mesh", "mTLS share"): [Answer(("destination_workload", "destination_workload_namespace"),
                                        {**{(m, ns[m]): 1.0 for m in models}, (gateway, gateway): 1.0})],
        ("mesh", "Upstream requests by response class"): [
            Answer(("envoy_cluster_name", "envoy_response_code_class"),
                   {(m, k): v for m in models for k, v in syn.UPSTREAM_PER_S.items()})],
        ("mesh", "Upstream latency"): [per_cluster(_quantile(50, 500, q)) for q in (0.5, 0.95, 0.99)],
        ("mesh", "Retries"): [per_cluster(0.05)],
        ("mesh", "Ejected backends"): [per_cluster(0.0)],
        # clients' requests uniform on 50-1000 ms; the stats listener's (0-2 ms) are another connection manager's
        ("mesh", "Downstream latency p95"): [Answer((), {(): _quantile(50, 1000, 0.95)})],
        ("mesh", "Rate-limited requests"): [Answer((), {(): 0.2})],
    }
