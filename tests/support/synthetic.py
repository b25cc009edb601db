"""Synthetic exporter data with known answers, as OpenMetrics text for `promtool tsdb create-blocks-from`.

Series are named and labelled exactly as the real exporters emit them (docs/contracts.md,
telemetry/names.py; the NVLink gauge, node GPU capacity and Triton's TensorRT-LLM token histograms from
tests/support/exporter_facts.py, written from the upstream sources): DCGM exporter (half
the pools with `Hostname`, half with the newer `hostname`; unallocated GPUs carry the exporter's own pod, as
a ServiceMonitor with honorLabels leaves them),
kube-state-metrics (allow-listed node/pod labels, GPU requests), vLLM, Triton (counters without
_total, cumulative microseconds), Istio, Envoy and the kit's workflow telemetry (Python-client `le`
values such as "30.0"). Counters grow linearly, so every rate is exact; workflow durations are
uniform between two bucket boundaries, so histogram_quantile is exact too.

The fleet: every pool's nodes; each model runs `Scale.replicas` pods, one node each, or, when the pool
has fewer nodes than pods, an equal share of a node's GPUs (pods never span nodes); within a pod, odd
GPUs idle at IDLE_UTIL_PERCENT and even ones work at BUSY_UTIL_PERCENT; GPUs no pod holds sit at 0%.

One series per exporting pod, as a real fleet has: every model pod exports its own vLLM/Triton series
and its sidecar the Istio series of the requests it received (per source workload and response code);
every gateway pod exports its own Envoy cluster stats (and its sidecar the agents' hops to the gateway);
every agent pod exports its own workflow and step series. The scrape adds the target labels
(namespace, pod, container, instance, job). A family's traffic is split evenly over its pods, so sums
and ratios over pods, and with them the ground truth, stay exact at any Scale.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from dashboards.config import ObservabilityConfig

# Only the kit's own names come from telemetry/names.py: its instruments (the kit emits them), its buckets, the pod
# label its monitors copy (aifactory_io_model) and its Envoy listeners' stat prefixes. Every exporter family is
# named here as upstream emits it and checked against tests/fixtures/metrics/*.yaml (name, type, labels) as it is
# written (tests.support.upstream); Envoy's names are the ones the real Envoy's scrape shows
# (tests/artifacts/test_upstream_metric_names.py), Istio's and kube-state-metrics' those of docs/contracts.md.
from telemetry.names import (
    BUDGET,
    BUDGET_BUCKETS_S,
    CRITICAL_PATH,
    ENVOY,
    SGLANG,
    STEP_BUCKETS_S,
    STEP_BUDGET,
    STEP_DURATION,
    STEP_ERRORS,
    TRITON,
    WORKFLOW_BUCKETS_S,
    WORKFLOW_DEADLINES,
    WORKFLOW_DURATION,
)
from telemetry.names import VLLM as _VLLM_BUCKETS
from tests.support import exporter_facts as facts
from tests.support import upstream

__all__ = ["IDLE_UTIL_PERCENT", "BUSY_UTIL_PERCENT", "CRITICAL_PATH_SHARES", "WORKFLOW_SPANS", "OTHER_WORKFLOW",
           "GATEWAY", "Truth", "Synthetic", "Scale", "Allocation", "allocate", "generate"]

# The DCGM exporter's host label, in the fixture's spellings: 4.4.2-4.7.0's and the later exporters'.
HOSTNAME_LABELS = ("Hostname", "hostname")
# vLLM 0.33.0's histogram buckets (vllm/v1/metrics/buckets.py), as telemetry/names.py records them.
VLLM_TTFT_BUCKETS, VLLM_ITL_BUCKETS = _VLLM_BUCKETS.TTFT_BUCKETS, _VLLM_BUCKETS.ITL_BUCKETS
VLLM_REQUEST_BUCKETS = _VLLM_BUCKETS.REQUEST_BUCKETS
TRITON_ENGINE_MODEL = "tensorrt_llm"  # the TensorRT-LLM repository's engine model (tensorrtllm_backend all_models/)
# SGLang 0.5.23's default histogram buckets (sglang/srt/observability/metrics_collector.py, the PyPI wheel).
SGLANG_TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
SGLANG_E2E_BUCKETS = (*SGLANG_TTFT_BUCKETS, 600, 1200, 1800, 2400)
SGLANG_ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
                      0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0)
SGLANG_QUEUE_BUCKETS = (0.0, 0.001, 0.005, 0.010, 0.050, 0.100, 0.200, 0.500, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50,
                        60, 70, 80, 90, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800,
                        2000, 2500, 3000)
# Labels the scrape puts on every series (Prometheus: job, instance; the operator's monitors: namespace, pod,
# container), besides the exporter's own.
SCRAPE_LABELS = frozenset({"job", "instance", "namespace", "pod", "container"})
IDLE_UTIL_PERCENT = 3.0
BUSY_UTIL_PERCENT = 60.0
CRITICAL_PATH_SHARES = {"llm": 0.55, "tool": 0.2, "retrieval": 0.12, "planning": 0.08, "network": 0.03,
                        "other": 0.02}
# Workflow i's durations are uniform on WORKFLOW_SPANS[i % len]: p95 = lo + 0.95 (hi - lo).
WORKFLOW_SPANS = ((5.0, 15.0), (3.0, 10.0), (10.0, 30.0), (1.0, 5.0))
WORKFLOWS_PER_S = 2.0
WORKFLOW_ERRORS_PER_S = 0.04
OTHER_WORKFLOW = "adhoc-agent"  # a workflow with no SLO of its own (the default objective)
ISTIO_BUCKETS_MS = (0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000,
                    1800000, 3600000)
ENVOY_BUCKETS_MS = ISTIO_BUCKETS_MS
# The gateway's variant decisions, requests/s over all gateway replicas: (workload, variant, reason) -> rate
ROUTE_DECISIONS_PER_S = {("plan", "plan-int4", "fits-budget"): 3.0, ("plan", "plan-fp8", "fits-budget"): 1.0,
                         ("plan", "plan-fp8", "rescued"): 0.5, ("plan", "plan-int4", "default"): 0.25}
ROUTE_OVERFLOW_PER_S = {("plan", "plan-int4", "fits-budget"): 0.2}
FINISHED_PER_S = {"stop": 4.5, "length": 0.45, "abort": 0.05}  # vLLM's finish reasons, per model
UPSTREAM_PER_S = {"2": 10.0, "4": 0.2, "5": 0.1}  # the gateway's requests to one model, by response class
GATEWAY = "aifactory-gateway"  # the gateway's workload, namespace and Envoy job
MODEL_REQUESTS_PER_S = {"200": 10.0, "503": 0.1}  # per model, over all its pods
AGENT_REQUESTS_PER_S = {"200": 6.0, "503": 0.06}  # per workflow's agents, to the gateway
# Target ports the scrape puts in `instance`.
# SIDECAR_PORT: istio-proxy's http-envoy-prom, scraped by the istio-sidecars PodMonitor (k8s/observability.py)
SERVING_PORT, SIDECAR_PORT, ENVOY_ADMIN_PORT, AGENT_PORT = 8000, 15090, 9901, 9464


@dataclass(frozen=True)
class Truth:
    pool_cost_per_hour: Mapping[str, float]
    total_cost_per_hour: float
    idle_cost_per_hour: float  # allocated to a model pod, under the idle threshold
    unallocated_cost_per_hour: Mapping[str, float]  # per pool: GPUs no pod requests
    working_cost_per_hour: Mapping[str, float]  # per pool: allocated GPUs at or above the idle threshold
    cost_per_million_tokens: Mapping[str, float]  # every model that generates tokens (vLLM and Triton)
    nvlink_bytes_per_second: Mapping[str, float]  # per pool, at the last sample
    nvlink_gpu_bytes_per_second: Mapping[tuple[str, str], float]  # per (node, gpu), at the last sample
    workflow_p95: Mapping[str, float]
    critical_path_share: Mapping[str, float]
    route_decisions: Mapping[tuple[str, str, str], float]  # (workload, variant, reason) -> requests/s, all gateways
    route_overflow: Mapping[tuple[str, str, str], float]  # the same, tries sent on to the next variant per second


@dataclass(frozen=True)
class Synthetic:
    openmetrics: str
    start: int
    end: int
    step: int
    truth: Truth
    series: int


@dataclass(frozen=True, kw_only=True)
class Scale:
    """How many pods export each family; the defaults (one each) keep the data small for tests."""

    replicas: int = 1  # pods per model (vLLM or Triton, each with an Istio sidecar)
    gateway_replicas: int = 1  # gateway pods (Envoy cluster stats, and a sidecar)
    agent_pods: int = 1  # pods of each workflow's agent deployment

    def __post_init__(self) -> None:
        for key in ("replicas", "gateway_replicas", "agent_pods"):
            if getattr(self, key) < 1:
                raise ValueError(f"Scale.{key}: {getattr(self, key)!r}; must be at least 1")


@dataclass(frozen=True)
class Allocation:
    model: str
    tenant: str
    pool: str
    node: str
    pod: str
    gpus: tuple[int, ...]


TRITON_REPOSITORY = ("ensemble", "preprocessing", TRITON_ENGINE_MODEL, "postprocessing")


def _node(pool: str, i: int) -> str:
    return f"{pool}-node-{i:03d}"


def allocate(cfg: ObservabilityConfig, nodes: Mapping[str, int], *, replicas: int = 1) -> list[Allocation]:
    """Which node and GPUs each model pod holds (see the module docstring); one Allocation per pod."""
    out = []
    for pool in cfg.pools:
        pods = [(m, r) for m in cfg.models if m.pool == pool.name for r in range(replicas)]
        if not pods:
            continue
        per_node = -(-len(pods) // max(1, nodes[pool.name]))
        size = pool.gpus_per_node // per_node
        if nodes[pool.name] < 1 or size < 1:
            raise ValueError(f"pool {pool.name}: {len(pods)} model pods do not fit on {nodes[pool.name]} nodes "
                             f"of {pool.gpus_per_node} GPUs")
        for j, (m, r) in enumerate(pods):
            first = j % per_node * size
            out.append(Allocation(m.name, m.tenant, pool.name, _node(pool.name, j // per_node), f"{m.name}-{r}",
                                  tuple(range(first, first + size))))
    return out


def _ip(n: int) -> str:
    return f"10.{1 + (n >> 16)}.{(n >> 8) & 255}.{n & 255}"


def _fmt(v: float) -> str:
    return repr(round(v, 6)) if not float(v).is_integer() else str(int(v))


def _labels(labels: Mapping[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else ""


def _le(value: float, python_client: bool) -> str:
    return repr(float(value)) if python_client else _fmt(value)


def _check(name: str, kind: str, labels: Mapping[str, str]) -> None:
    """An exporter family the fixtures record is written only under its upstream name, as its upstream type, with
    the exporter's and the scrape's labels (plus the pod labels the kit's monitors copy, aifactory_io_*)."""
    if not upstream.is_upstream(name):
        return
    fam = upstream.family(name)
    if fam.kind != kind:
        raise ValueError(f"{name}: written as a {kind}, but it is a {fam.kind} upstream ({fam.exporter})")
    if extra := sorted(k for k in labels if k not in fam.labels | SCRAPE_LABELS and not k.startswith("aifactory_io_")):
        raise ValueError(f"{name}: labels {', '.join(extra)} are not the exporter's ({fam.exporter})")


class _Writer:
    def __init__(self, times: Sequence[int]) -> None:
        self.times = times
        self.lines: list[str] = []
        self.series = 0
        self.ips: dict[tuple[str, str], str] = {}

    def target(self, namespace: str, pod: str, *, container: str, port: int, job: str) -> dict[str, str]:
        """The labels the scrape adds to every series of one pod's endpoint (one IP per pod)."""
        ip = self.ips.setdefault((namespace, pod), _ip(len(self.ips) + 1))
        return {"namespace": namespace, "pod": pod, "container": container, "instance": f"{ip}:{port}", "job": job}

    def gauge(self, name: str, labels: Mapping[str, str], value: float) -> None:
        _check(name, "gauge", labels)
        self._gauge(name, labels, value)

    def _gauge(self, name: str, labels: Mapping[str, str], value: float) -> None:
        self.series += 1
        key, v = f"{name}{_labels(labels)}", _fmt(value)
        self.lines.extend(f"{key} {v} {t}" for t in self.times)

    def fluctuating(self, name: str, labels: Mapping[str, str], high: float, low: float) -> float:
        """A gauge that alternates between `high` and `low` sample by sample (a throughput read each scrape:
        every fall is what `rate()` would take for a counter reset), its last two samples equal (recording
        rules backfilled up to the last sample read the one before); returns its last value."""
        _check(name, "gauge", labels)
        self.series += 1
        key = f"{name}{_labels(labels)}"
        values = [low if i % 2 else high for i in range(len(self.times) - 1)]
        values.append(values[-1])
        self.lines.extend(f"{key} {_fmt(v)} {t}" for v, t in zip(values, self.times, strict=True))
        return values[-1]

    def counter(self, name: str, labels: Mapping[str, str], per_second: float) -> None:
        _check(name, "counter", labels)
        self._counter(name, labels, per_second)

    def _counter(self, name: str, labels: Mapping[str, str], per_second: float) -> None:
        self.series += 1
        key, t0 = f"{name}{_labels(labels)}", self.times[0]
        self.lines.extend(f"{key} {_fmt(per_second * (t - t0 + 3600))} {t}" for t in self.times)

    def level(self, name: str, labels: Mapping[str, str], value: float) -> None:
        """An upstream family written as its fixture types it: a gauge holds `value`, a counter grows by
        `value` per second."""
        kind = upstream.family(name).kind
        if kind not in ("gauge", "counter"):
            raise ValueError(f"{name}: a {kind} upstream, neither a gauge nor a counter")
        (self.gauge if kind == "gauge" else self.counter)(name, labels, value)

    def histogram(self, name: str, labels: Mapping[str, str], buckets: Sequence[float],
                  cdf: Callable[[float], float], per_second: float, mean: float, *, python_client: bool) -> None:
        _check(name, "histogram", labels)
        for b in buckets:
            self._counter(f"{name}_bucket", {**labels, "le": _le(b, python_client)}, per_second * cdf(b))
        self._counter(f"{name}_bucket", {**labels, "le": "+Inf"}, per_second)
        self._counter(f"{name}_count", labels, per_second)
        self._counter(f"{name}_sum", labels, per_second * mean)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n# EOF\n"


def _uniform(lo: float, hi: float) -> Callable[[float], float]:
    return lambda x: min(1.0, max(0.0, (x - lo) / (hi - lo)))


# NVLink throughput of one GPU, in DCGM's units (1000 KiB/s), alternating sample by sample: working GPUs
# move about 6.6e10 B/s, idle ones a trickle, GPUs no pod holds nothing.
NVLINK_UNITS = {"busy": (70_000.0, 58_000.0), "idle": (120.0, 80.0), "free": (0.0, 0.0)}


# Each DCGM family a GPU exports and its value at a utilisation (%); how it is written (a level or a count) is
# the fixture's type, so DCGM_FI_DEV_POWER_USAGE is a level in watts and the energy counter grows 400 J/s.
DCGM_VALUES: tuple[tuple[str, Callable[[float], float]], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", lambda u: u), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", lambda u: u / 100),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", lambda u: u / 200), ("DCGM_FI_PROF_DRAM_ACTIVE", lambda u: u / 150),
    ("DCGM_FI_DEV_FB_USED", lambda u: 60000), ("DCGM_FI_DEV_FB_FREE", lambda u: 21000),
    ("DCGM_FI_DEV_POWER_USAGE", lambda u: 100 + 5 * u), ("DCGM_FI_DEV_GPU_TEMP", lambda u: 40 + u / 3),
    ("DCGM_FI_DEV_MEMORY_TEMP", lambda u: 45 + u / 3), ("DCGM_FI_DEV_SM_CLOCK", lambda u: 1980),
    ("DCGM_FI_DEV_MEM_CLOCK", lambda u: 2619), ("DCGM_FI_DEV_XID_ERRORS", lambda u: 0),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", lambda u: 2e9), ("DCGM_FI_PROF_PCIE_RX_BYTES", lambda u: 3e9),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", lambda u: 0), ("DCGM_FI_DEV_ROW_REMAP_FAILURE", lambda u: 0),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", lambda u: 0), ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", lambda u: 400_000),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", lambda u: 0))


@dataclass
class _Fleet:
    """What the DCGM and kube-state-metrics series add up to, per pool ($/h, B/s)."""

    idle_cost: float = 0.0
    unallocated: dict[str, float] = field(default_factory=dict)
    working: dict[str, float] = field(default_factory=dict)
    nvlink: dict[str, float] = field(default_factory=dict)
    nvlink_gpu: dict[tuple[str, str], float] = field(default_factory=dict)


def _dcgm(w: _Writer, cfg: ObservabilityConfig, nodes: Mapping[str, int], allocs: list[Allocation]) -> _Fleet:
    """Every DCGM series, node capacity and pod GPU requests; returns what they add up to."""
    held = {(a.node, g): (a, i) for a in allocs for i, g in enumerate(a.gpus)}
    fleet = _Fleet()
    for p_index, pool in enumerate(cfg.pools):
        host_label = HOSTNAME_LABELS[p_index % 2]
        price = pool.gpu_price_per_hour
        fleet.unallocated[pool.name] = fleet.working[pool.name] = fleet.nvlink[pool.name] = 0.0
        for n in range(nodes[pool.name]):
            node = _node(pool.name, n)
            w.gauge("kube_node_labels", {"node": node, "label_aifactory_io_pool": pool.name}, 1)
            w.gauge(facts.NODE_CAPACITY.name, {"node": node, "resource": "nvidia_com_gpu", "unit": "integer"},
                    pool.gpus_per_node)
            for g in range(pool.gpus_per_node):
                alloc = held.get((node, g))
                if alloc is None:
                    util, state, owner = 0.0, "free", {"namespace": "gpu-operator",
                                                        "pod": f"nvidia-dcgm-exporter-{node}"}
                    fleet.unallocated[pool.name] += price
                else:
                    state = "idle" if alloc[1] % 2 else "busy"
                    util = IDLE_UTIL_PERCENT if state == "idle" else BUSY_UTIL_PERCENT
                    owner = {"namespace": alloc[0].tenant, "pod": alloc[0].pod, "container": "server"}
                    if state == "idle":
                        fleet.idle_cost += price
                    else:
                        fleet.working[pool.name] += price
                labels = {"gpu": str(g), "UUID": f"GPU-{node}-{g}", "pci_bus_id": f"00000000:{g:02X}:00.0",
                          "device": f"nvidia{g}", "modelName": "NVIDIA H100 80GB HBM3", host_label: node,
                          "DCGM_FI_DRIVER_VERSION": "570.124.06", **owner}
                # the value of each family: a gauge's level, a counter's growth per second (mJ/s for energy)
                for metric, value in DCGM_VALUES:
                    w.level(metric, labels, value(util))
                last = w.fluctuating(facts.NVLINK_BANDWIDTH_TOTAL.name, labels, *NVLINK_UNITS[state])
                fleet.nvlink_gpu[(node, str(g))] = last * facts.NVLINK_BYTES_PER_UNIT
                fleet.nvlink[pool.name] += last * facts.NVLINK_BYTES_PER_UNIT
    for a in allocs:
        w.gauge("kube_pod_labels", {"namespace": a.tenant, "pod": a.pod, "label_aifactory_io_model": a.model,
                                 "label_aifactory_io_tenant": a.tenant}, 1)
        _pod(w, a.tenant, a.pod, a.node, len(a.gpus), "Running")
    # A finished batch job on the first node no model holds: kube-state-metrics still exports its GPU
    # requests, but its GPUs are free (unallocated).
    free = [n for p in cfg.pools for n in (_node(p.name, i) for i in range(nodes[p.name]))
            if all(a.node != n for a in allocs)]
    if free:
        _pod(w, cfg.tenants[0], "nightly-eval-28391-x7k2q", free[0], 2, "Succeeded")
    return fleet


def _pod(w: _Writer, namespace: str, pod: str, node: str, gpus: int, phase: str) -> None:
    """kube-state-metrics' series of one pod: its GPU requests and its phase (tests.support.exporter_facts)."""
    w.gauge("kube_pod_container_resource_requests", {"namespace": namespace, "pod": pod, "container": "server",
                                                     "node": node, "resource": "nvidia_com_gpu", "unit": "integer"},
            gpus)
    for p in facts.POD_PHASES:
        w.gauge(facts.POD_PHASE.name, {"namespace": namespace, "pod": pod, "uid": f"uid-{pod}", "phase": p},
                1 if p == phase else 0)


def _tokens_per_s(index: int) -> float:
    return 500.0 * (index + 1)


# Triton: requests per second a model answers (all replicas), each streaming one response per token. No
# first-response histogram: the OpenAI frontend runs Triton without histogram_latencies (docs/contracts.md).
TRITON_REQUESTS_PER_S = 20.0


def _trtllm(w: _Writer, labels: Mapping[str, str], tokens: float, share: float) -> None:
    """The TensorRT-LLM backend's token histograms of one pod's `tensorrt_llm` (tests.support.exporter_facts): `tokens`
    generated per second, four prompt tokens each."""
    responses = tokens * share  # one response per streamed token
    for fact, kind, per_token in ((facts.TRTLLM_OUTPUT_TOKENS, facts.TRTLLM_OUTPUT_TOKENS_TYPE, 1.0),
                                  (facts.TRTLLM_INPUT_TOKENS, facts.TRTLLM_INPUT_TOKENS_TYPE, 4.0)):
        w.histogram(fact.name, {**labels, "response_metric_type": kind}, facts.TRTLLM_TOKEN_BUCKETS,
                    _uniform(0.5 * per_token, 1.5 * per_token), responses, per_token, python_client=False)


def _sglang(w: _Writer, model: str, pods: list[Allocation], tokens: float) -> None:
    """One SGLang model's series: each pod one scheduler (TP rank 0) with 12 running, 1 queued, KV pool 40 %; half
    its prompt tokens cached (1.5 x tokens/s from the device, 0.5 x from host memory, of 4 x), while its last prefill
    batch's sglang:cache_hit_rate reads 0.9; 5 requests/s uniform between the 3rd and 9th bucket boundaries."""
    share = 1 / len(pods)
    for a in pods:
        base = {SGLANG.L_MODEL: model, "engine_type": "unified",
                **w.target(a.tenant, a.pod, container="server", port=SERVING_PORT, job=model)}
        ranks = {"tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
        streaming = {"is_streaming": "true"}
        for h, buckets, extra in ((SGLANG.TTFT, SGLANG_TTFT_BUCKETS, streaming), (SGLANG.ITL, SGLANG_ITL_BUCKETS, {}),
                                  (SGLANG.E2E, SGLANG_E2E_BUCKETS, streaming),
                                  (SGLANG.QUEUE_TIME, SGLANG_QUEUE_BUCKETS, ranks)):
            lo, hi = buckets[2], buckets[8]
            w.histogram(h, {**base, **extra}, buckets, _uniform(lo, hi), 5 * share, (lo + hi) / 2, python_client=True)
        w.level(SGLANG.GENERATION_TOKENS, {**base, **streaming}, tokens * share)
        w.level(SGLANG.PROMPT_TOKENS, {**base, **streaming}, 4 * tokens * share)
        for source, per_token in (("device", 1.5), ("host", 0.5)):
            w.level(SGLANG.CACHED_TOKENS, {**base, "cache_source": source}, per_token * tokens * share)
        for metric, value in ((SGLANG.RUNNING, 12), (SGLANG.QUEUE, 1), (SGLANG.TOKEN_USAGE, 0.4),
                              ("sglang:cache_hit_rate", 0.9)):
            w.level(metric, {**base, **ranks}, value)


def _serving(w: _Writer, cfg: ObservabilityConfig, allocs: list[Allocation]) -> dict[str, float]:
    """vLLM, Triton and SGLang series; returns the true cost per 1M generated tokens of each model."""
    truth = {}
    for index, m in enumerate(cfg.models):
        pods = [a for a in allocs if a.model == m.name]
        gpus = sum(len(a.gpus) for a in pods)
        price = cfg.pool(m.pool).gpu_price_per_hour
        tokens = _tokens_per_s(index)
        truth[m.name] = gpus * price / (tokens * 3600) * 1e6
        if m.engine == "vllm":
            for a in pods:
                labels = {"model_name": m.name, "engine": "0",
                          **w.target(a.tenant, a.pod, container="server", port=SERVING_PORT, job=m.name)}
                share = 1 / len(pods)
                for h, buckets in (("vllm:time_to_first_token_seconds", VLLM_TTFT_BUCKETS),
                                   ("vllm:inter_token_latency_seconds", VLLM_ITL_BUCKETS),
                                   ("vllm:request_time_per_output_token_seconds", VLLM_ITL_BUCKETS),
                                   ("vllm:e2e_request_latency_seconds", VLLM_REQUEST_BUCKETS),
                                   ("vllm:request_queue_time_seconds", VLLM_REQUEST_BUCKETS),
                                   ("vllm:request_prefill_time_seconds", VLLM_REQUEST_BUCKETS),
                                   ("vllm:request_decode_time_seconds", VLLM_REQUEST_BUCKETS)):
                    lo, hi = buckets[2], buckets[8]
                    w.histogram(h, labels, buckets, _uniform(lo, hi), 5 * share, (lo + hi) / 2, python_client=True)
                w.level("vllm:generation_tokens_total", labels, tokens * share)
                w.level("vllm:prompt_tokens_total", labels, 4 * tokens * share)
                w.level("vllm:prefix_cache_queries_total", labels, 4 * tokens * share)
                w.level("vllm:prefix_cache_hits_total", labels, 2 * tokens * share)
                w.level("vllm:spec_decode_num_draft_tokens_total", labels, 100 * share)
                w.level("vllm:spec_decode_num_accepted_tokens_total", labels, 70 * share)
                w.level("vllm:spec_decode_num_drafts_total", labels, 25 * share)
                w.level("vllm:num_preemptions_total", labels, 0.01 * share)
                for reason, rate in FINISHED_PER_S.items():
                    w.level("vllm:request_success_total", {**labels, "finished_reason": reason}, rate * share)
                w.level("vllm:num_requests_running", labels, 12)
                w.level("vllm:num_requests_waiting", labels, 1)
                w.level("vllm:kv_cache_usage_perc", labels, 0.4)
        elif m.engine == "sglang":
            _sglang(w, m.name, pods, tokens)
        else:
            # As Triton really labels a TensorRT-LLM repository: one series per repository model, the kit's
            # model only in the pod label the ServiceMonitor copies. Only tensorrt_llm carries the truth; the
            # others get different numbers so a query that sums the repository is caught.
            share = 1 / len(pods)
            for a, repo_model in ((a, r) for a in pods for r in TRITON_REPOSITORY):
                labels = {"model": repo_model, "version": "1", TRITON.L_POD_MODEL: m.name,
                          **w.target(a.tenant, a.pod, container="server", port=SERVING_PORT, job=m.name)}
                if repo_model != TRITON_ENGINE_MODEL:
                    w.level("nv_inference_request_success", labels, 7 * share)
                    w.level("nv_inference_queue_duration_us", labels, 7 * 900_000 * share)
                    w.level("nv_inference_pending_request_count", labels, 40)
                    continue
                _trtllm(w, labels, tokens, share)
                w.level("nv_inference_request_success", labels, 20 * share)
                w.level("nv_inference_request_failure", {**labels, "reason": "REJECTED"}, 0.1 * share)
                w.level("nv_inference_count", labels, 20 * share)
                w.level("nv_inference_exec_count", labels, 5 * share)
                for metric, us in (("nv_inference_request_duration_us", 300_000),
                                   ("nv_inference_queue_duration_us", 10_000),
                                   ("nv_inference_compute_input_duration_us", 1_000),
                                   ("nv_inference_compute_infer_duration_us", 280_000),
                                   ("nv_inference_compute_output_duration_us", 1_000)):
                    w.level(metric, labels, 20 * us * share)
                w.level("nv_inference_pending_request_count", labels, 3)
    return truth


def _istio_hop(w: _Writer, source: tuple[str, str], destination: tuple[str, str],
               pods: Sequence[tuple[str, str]], per_s: Mapping[str, float]) -> None:
    """One hop as the destination pods' sidecars report it: each pod its share, per response code."""
    (src, src_ns), (dest, dest_ns) = source, destination
    base = {"reporter": "destination", "source_workload": src, "source_workload_namespace": src_ns,
            "destination_workload": dest, "destination_workload_namespace": dest_ns,
            "destination_service": f"{dest}.{dest_ns}.svc.cluster.local", "connection_security_policy": "mutual_tls"}
    for namespace, pod in pods:
        labels = {**base, **w.target(namespace, pod, container="istio-proxy", port=SIDECAR_PORT, job="envoy-stats")}
        for code, rate in per_s.items():
            w.counter("istio_requests_total", {**labels, "response_code": code}, rate / len(pods))
        ok = per_s["200"] / len(pods)
        w.histogram("istio_request_duration_milliseconds", {**labels, "response_code": "200"}, ISTIO_BUCKETS_MS,
                    _uniform(50, 500), ok, 275, python_client=False)


def _mesh(w: _Writer, cfg: ObservabilityConfig, allocs: list[Allocation], scale: Scale) -> None:
    """Istio (model pods' and gateway pods' sidecars) and Envoy (every gateway pod) series."""
    gateways = [(GATEWAY, f"{GATEWAY}-{i}") for i in range(scale.gateway_replicas)]
    for m in cfg.models:
        pods = [(a.tenant, a.pod) for a in allocs if a.model == m.name]
        _istio_hop(w, (GATEWAY, GATEWAY), (m.name, m.tenant), pods, MODEL_REQUESTS_PER_S)
    for workflow in _workflow_names(cfg):
        _istio_hop(w, (_agent(workflow), cfg.tenants[0]), (GATEWAY, GATEWAY), gateways, AGENT_REQUESTS_PER_S)
    share = 1 / len(gateways)
    for namespace, pod in gateways:
        envoy = w.target(namespace, pod, container="envoy", port=ENVOY_ADMIN_PORT, job=GATEWAY)
        for m in cfg.models:
            cluster = {"envoy_cluster_name": m.name, **envoy}
            total = sum(UPSTREAM_PER_S.values()) * share
            w.counter("envoy_cluster_upstream_rq_total", cluster, total)
            for klass, rate in UPSTREAM_PER_S.items():
                w.counter("envoy_cluster_upstream_rq_xx", {**cluster, "envoy_response_code_class": klass},
                          rate * share)
            w.histogram("envoy_cluster_upstream_rq_time", cluster, ENVOY_BUCKETS_MS, _uniform(50, 500), total, 275,
                        python_client=False)
            w.counter("envoy_cluster_upstream_rq_retry", cluster, 0.05 * share)
            w.gauge("envoy_cluster_outlier_detection_ejections_active", cluster, 0)
        prefix = {"envoy_http_conn_manager_prefix": ENVOY.GATEWAY_HCM_PREFIX, **envoy}
        w.histogram("envoy_http_downstream_rq_time", prefix, ENVOY_BUCKETS_MS, _uniform(50, 1000), 50 * share, 525,
                    python_client=False)
        # The stats listener answers Prometheus and kubelet probes in about a millisecond, more often than clients
        # call: a query that does not select the gateway's connection manager reads a far lower p95.
        stats = {"envoy_http_conn_manager_prefix": ENVOY.STATS_HCM_PREFIX, **envoy}
        w.histogram("envoy_http_downstream_rq_time", stats, ENVOY_BUCKETS_MS, _uniform(0, 2), 100 * share, 1,
                    python_client=False)
        w.counter("envoy_http_local_rate_limit_rate_limited", prefix, 0.2 * share)
        for stats_of, rates in (("envoy_vhost_route_upstream_rq_completed", ROUTE_DECISIONS_PER_S),
                                ("envoy_vhost_route_upstream_rq_retry", ROUTE_OVERFLOW_PER_S)):
            for (workload, variant, reason), rate in rates.items():
                w.counter(stats_of, {"envoy_virtual_host": "models", "envoy_route": f"{workload}__{variant}__{reason}",
                                     **envoy}, rate * share)
        # a route that is no variant decision (a plain model route) stays out of the variant panels
        w.counter("envoy_vhost_route_upstream_rq_completed",
                  {"envoy_virtual_host": "models", "envoy_route": "chat/body", **envoy}, 7 * share)


def _workflow_names(cfg: ObservabilityConfig) -> tuple[str, ...]:
    return (*cfg.named_workflows, OTHER_WORKFLOW)


def _agent(workflow: str) -> str:
    """The agent deployment that runs a workflow."""
    return f"{workflow}-agent"


def _workflows(w: _Writer, cfg: ObservabilityConfig, scale: Scale) -> dict[str, float]:
    """The kit's workflow metrics, from every agent pod; returns the true p95 of each workflow."""
    tenant = cfg.tenants[0]
    share = 1 / scale.agent_pods
    truth = {}
    for i, name in enumerate(_workflow_names(cfg)):
        lo, hi = WORKFLOW_SPANS[i % len(WORKFLOW_SPANS)]
        truth[name] = lo + 0.95 * (hi - lo)
        mean = (lo + hi) / 2
        for pod in range(scale.agent_pods):
            agent = {"workflow": name, "tenant": tenant,
                     **w.target(tenant, f"{_agent(name)}-{pod}", container="agent", port=AGENT_PORT,
                                job=_agent(name))}
            for status, rate in (("ok", WORKFLOWS_PER_S), ("error", WORKFLOW_ERRORS_PER_S)):
                w.histogram(WORKFLOW_DURATION.prom, {**agent, "status": status}, WORKFLOW_BUCKETS_S,
                            _uniform(lo, hi), rate * share, mean, python_client=True)
            for kind, part in CRITICAL_PATH_SHARES.items():
                labels = {**agent, "step_kind": kind}
                runs = (WORKFLOWS_PER_S + WORKFLOW_ERRORS_PER_S) * share
                w.counter(CRITICAL_PATH.prom, labels, runs * mean * part)
                w.histogram(STEP_DURATION.prom, {**labels, "step_name": kind, "status": "ok"}, STEP_BUCKETS_S,
                            _uniform(0.1, 2.0), 4 * share, 1.05, python_client=True)
                w.counter(STEP_ERRORS.prom, {**labels, "error_type": "TimeoutError"}, 0.01 * share)
                # budget left at step start: uniform on 0 s up to the workflow's shortest run
                w.histogram(STEP_BUDGET.prom, labels, BUDGET_BUCKETS_S, _uniform(0, lo), 4 * share, lo / 2,
                            python_client=True)
            for met, rate in (("met", WORKFLOWS_PER_S), ("missed", WORKFLOW_ERRORS_PER_S)):
                w.counter(WORKFLOW_DEADLINES.prom, {**agent, "deadline": met}, rate * share)
    return truth


def _token_budgets(w: _Writer, cfg: ObservabilityConfig) -> None:
    """The budget service's series (telemetry.names.BUDGET): each tenant 60% into a per-minute window of 1,000
    weighted tokens, refusing 0.1 request/s. The row's known answers are tests/artifacts/test_budget_panels.py's."""
    target = w.target("aifactory-gateway", "aifactory-budgets-0", container="budgets", port=9090,
                      job="aifactory-budgets")
    for tenant in cfg.tenants:
        labels = {**target, BUDGET.L_SCOPE: "tenant", BUDGET.L_NAME: tenant, BUDGET.L_WINDOW: "perMinute"}
        w.gauge(BUDGET.SPENT, labels, 600)
        w.gauge(BUDGET.LIMIT, labels, 1000)
        w.gauge(BUDGET.REMAINING, labels, 400)
        w.counter(BUDGET.REFUSED, labels, 0.1)


def _times(start: int, minutes: int, step: int) -> list[int]:
    return list(range(start, start + minutes * 60 + 1, step))


def generate(cfg: ObservabilityConfig, *, nodes: Mapping[str, int], start: int, minutes: int,
             step: int = 30, scale: Scale = Scale()) -> Synthetic:
    """Synthetic data for `cfg`'s pools (`nodes` per pool), models and workflows at `scale`, with its
    ground truth (which does not depend on `scale`)."""
    times = _times(start, minutes, step)
    w = _Writer(times)
    allocs = allocate(cfg, nodes, replicas=scale.replicas)
    fleet = _dcgm(w, cfg, nodes, allocs)
    per_mtok = _serving(w, cfg, allocs)
    _mesh(w, cfg, allocs, scale)
    p95 = _workflows(w, cfg, scale)
    _token_budgets(w, cfg)
    pool_cost = {p.name: nodes[p.name] * p.node_price_per_hour for p in cfg.pools}
    truth = Truth(pool_cost, sum(pool_cost.values()), fleet.idle_cost, fleet.unallocated, fleet.working, per_mtok,
                  fleet.nvlink, fleet.nvlink_gpu, p95, dict(CRITICAL_PATH_SHARES), dict(ROUTE_DECISIONS_PER_S),
                  dict(ROUTE_OVERFLOW_PER_S))
    return Synthetic(w.text(), times[0], times[-1], step, truth, w.series)
