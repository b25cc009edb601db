"""The rules under the real promtool: `check rules` for every stack, `test rules` with every alert checked the
minute before it fires and the minute it fires, the long burn-rate windows protecting from a short burst, unit
costs with zero denominators (the prod stack: named and default workflow SLOs, vLLM and Triton models, three pools)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

import dashboards
from dashboards.config import Objective, ObservabilityConfig
from dashboards.rules import DEFAULT_OBJECTIVE, XID_WINDOW, R, alerts, groups, records
from infra.artifacts import dump_yaml
from infra.monitoring import from_platform
from infra.synth import DEFAULT_STACKS_DIR, load_stack
from telemetry.names import DCGM, ENVOY, KSM, PIPELINE, SGLANG, TRITON, VLLM, WORKFLOW_BUCKETS_S, WORKFLOW_DURATION
from tests.support import exporter_facts as facts
from tests.support.prometheus import promtool
from tests.support.synthetic import OTHER_WORKFLOW

STACKS = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in DEFAULT_STACKS_DIR.glob("Pulumi.*.yaml"))


@pytest.fixture(scope="module")
def prod() -> ObservabilityConfig:
    return from_platform(load_stack("prod"))


@pytest.mark.parametrize("stack", STACKS)
def test_promtool_check_rules_passes_for_every_stack(stack: str, tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(dump_yaml(dashboards.prometheus_rules(from_platform(load_stack(stack)))))
    res = promtool("check", "rules", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def test_prices_are_recorded_from_the_stack_config(prod: ObservabilityConfig) -> None:
    got = {(r.labels["pool"], r.labels["instance_type"]): r.expr for r in records(prod)[R.NODE_PRICE]}
    assert got == {("h100-block", "p5.48xlarge"): "vector(31.46)",  # stack override (capacity block rate)
                   ("h200", "p5en.48xlarge"): "vector(63.3)",  # catalog on-demand price
                   ("l40s", "g6e.12xlarge"): "vector(10.49)"}
    assert [r.expr for r in records(prod)[R.GPU_PRICE] if r.labels["pool"] == "l40s"] == ["vector(2.6225)"]


def test_burn_rate_alert_uses_the_workbook_windows_and_the_objective_budget(prod: ObservabilityConfig) -> None:
    page = next(a for a in alerts(prod) if a.alert == "WorkflowLatencyBudgetBurn"
                and a.labels["objective"] == "deep-research" and a.severity == "critical")
    assert page.expr == (
        '(workflow:aifactory_workflow_latency_errors:ratio_rate5m{objective="deep-research"} > 0.72 and '
        'workflow:aifactory_workflow_latency_errors:ratio_rate1h{objective="deep-research"} > 0.72)\n  or\n'
        '(workflow:aifactory_workflow_latency_errors:ratio_rate30m{objective="deep-research"} > 0.3 and '
        'workflow:aifactory_workflow_latency_errors:ratio_rate6h{objective="deep-research"} > 0.3)')
    assert page.for_ == "2m"
    latency = records(prod)[R.slo_errors("latency", "5m")]
    assert [r.labels["objective"] for r in latency] == ["assistant-chat", "deep-research", "doc-search",
                                                        DEFAULT_OBJECTIVE]
    assert 'workflow!~"assistant\\\\-chat|deep\\\\-research|doc\\\\-search"' in latency[-1].expr


def test_every_alert_has_severity_summary_description_and_runbook(prod: ObservabilityConfig) -> None:
    for a in alerts(prod):
        d = a.to_dict()
        assert d["labels"]["severity"] in ("critical", "warning"), a.alert
        assert set(d["annotations"]) == {"summary", "description", "runbook_url"}, a.alert
        assert d["annotations"]["runbook_url"].endswith(f"#{a.alert.lower()}")


@pytest.mark.parametrize("stack", STACKS)
def test_recorded_names_are_level_metric_operations(stack: str) -> None:
    """Prometheus' naming practice for recording rules (prometheus.io/docs/practices/rules): `level:metric:operations`,
    the metric part the source metric's own name. vLLM names its metrics with a colon (`vllm:num_requests_waiting`),
    so the kit writes that colon as `_` in the metric part: a record name never has more than two colons, and
    a vLLM histogram's rate reads `model:vllm_<name>_bucket:rate5m`."""
    recorded = [r["record"] for g in dashboards.prometheus_rules(from_platform(load_stack(stack)))["groups"]
                for r in g["rules"] if "record" in r]
    assert recorded and [n for n in recorded if not 1 <= n.count(":") <= 2] == []
    assert R.vllm_bucket("vllm:e2e_request_latency_seconds") == "model:vllm_e2e_request_latency_seconds_bucket:rate5m"


# --------------------------------------------------------------------------------------------
# promtool test rules: every alert the minute before its `for:` elapses (silent) and the minute it does (firing)

Labels = dict[str, str]
Fired = tuple[Labels, float]  # (labels, $value)
Check = tuple[int, list[Fired]]  # (evaluation minute, the alerts of the case's name firing then)


@dataclass
class Case:
    alert: str
    series: dict[str, str]  # series -> promtool values notation, one sample a minute
    checks: list[Check]


def _minutes(duration: str) -> int:
    return int(duration[:-1]) * {"m": 1, "h": 60}[duration[-1]]


def _around(active_at: int, fired: list[tuple[Labels, float, int]]) -> list[Check]:
    """Alerts whose condition holds from minute `active_at`: checked the minute before and the minute each
    one's `for` (third item, minutes) elapses."""
    times = sorted({active_at + for_ + d for _, _, for_ in fired for d in (-1, 0)})
    return [(t, [(labels, v) for labels, v, for_ in fired if active_at + for_ <= t]) for t in times]


def _num(value: float) -> str:
    return f"{value:.12g}"


def _counter(segments: list[tuple[int, float]]) -> str:
    """A counter from 0 rising `per_minute` for `minutes` minutes, segment after segment."""
    out, value = ["0"], 0.0
    for minutes, per_minute in segments:
        out.append(f"{_num(value + per_minute)}+{_num(per_minute)}x{minutes - 1}")
        value += per_minute * minutes
    return " ".join(out)


_TEMPLATE = re.compile(r"\{\{\s*(.*?)\s*\}\}")


def _render(text: str, labels: dict[str, str], value: float) -> str:
    """The subset of Prometheus alert templating the rules use."""
    def one(m: re.Match[str]) -> str:
        expr = m.group(1)
        if expr.startswith("$labels."):
            return labels.get(expr.removeprefix("$labels."), "")
        if expr == "$value":
            return f"{value:g}"
        if expr == "$value | humanizePercentage":
            return f"{value * 100:.4g}%"
        if expr == "$value | humanizeDuration":
            return f"{value * 1000:.4g}ms" if value < 1 else f"{value:.4g}s"
        raise AssertionError(f"template {expr!r} is not rendered by this test")
    return _TEMPLATE.sub(one, text)


def _sel(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _phase(pod: Labels, phase: str, values: str) -> dict[str, str]:
    """kube-state-metrics' kube_pod_status_phase of one pod: one series per phase, 1 for the current one
    (tests.support.exporter_facts.POD_PHASE)."""
    return {_sel(facts.POD_PHASE.name, {**pod, "uid": f"uid-{pod['pod']}", "phase": p}):
            values if p == phase else values.replace("1x", "0x") for p in facts.POD_PHASES}


def _for(cfg: ObservabilityConfig) -> dict[tuple[str, str], int]:
    return {(a.alert, a.severity): _minutes(a.for_) for a in alerts(cfg)}


RUNS_PER_MINUTE = 100.0


def _slo_series(sli: str, objective: Objective, base: Labels, segments: list[tuple[int, float]]) -> dict[str, str]:
    """Workflow runs, RUNS_PER_MINUTE of them; `segments`: (minutes, fraction of runs that miss the SLI)."""
    wf = WORKFLOW_DURATION.prom
    if sli == "latency":
        good = max(b for b in WORKFLOW_BUCKETS_S if b <= objective.latency_seconds)
        return {_sel(f"{wf}_bucket", {**base, "status": "ok", "le": repr(float(good))}):
                _counter([(m, RUNS_PER_MINUTE * (1 - bad)) for m, bad in segments]),
                _sel(f"{wf}_count", {**base, "status": "ok"}): _counter([(m, RUNS_PER_MINUTE) for m, _ in segments])}
    return {_sel(f"{wf}_count", {**base, "status": "error"}): _counter([(m, RUNS_PER_MINUTE * bad)
                                                                         for m, bad in segments]),
            _sel(f"{wf}_count", {**base, "status": "ok"}): _counter([(m, RUNS_PER_MINUTE * (1 - bad))
                                                                      for m, bad in segments])}


SLIS = (("latency", "WorkflowLatencyBudgetBurn"), ("availability", "WorkflowErrorBudgetBurn"))


def _budget(sli: str, objective: Objective) -> float:
    return 1 - (objective.latency_target if sli == "latency" else objective.availability_target)


def _burn_cases(cfg: ObservabilityConfig) -> list[Case]:
    """Misses from the first minute: pages (and later tickets), tickets only, neither."""
    fors = _for(cfg)
    out = []
    for o in (cfg.objectives[0], cfg.objectives[-1]):  # a named objective and the default one
        base = {"workflow": o.workflow or OTHER_WORKFLOW, "tenant": "assistant"}
        for sli, alert in SLIS:
            budget = _budget(sli, o)
            for bad in (7 * budget, 2 * budget, budget / 2):
                severities = [s for s, factor in (("critical", 6), ("warning", 1)) if bad > factor * budget]
                fired = [({**base, "alertname": alert, "severity": s, "slo": sli,
                           "objective": o.workflow or DEFAULT_OBJECTIVE}, bad, fors[(alert, s)]) for s in severities]
                # Rates exist from the second sample: the condition holds from minute 1.
                checks = _around(1, fired) if fired else [(20, [])]
                out.append(Case(alert, _slo_series(sli, o, base, [(20, bad)]), checks))
    return out


BURST_MINUTES = 11  # misses in the last minutes of LONG_MINUTES only
LONG_MINUTES = 360
LONG_EVALUATION_INTERVAL = "5m"  # six hours of rules at 1m would dominate the test's runtime


def _burst_misses(budget: float) -> float:
    """A miss fraction above the fastest page's threshold (14.4x budget) that the long windows dilute below
    every alert's: 11 of 60 minutes (1h), 11 of 360 (6h) and 11 of 120 (2h) stay under it."""
    return min(1.0, 25 * budget)


def _long_window_cases(cfg: ObservabilityConfig) -> tuple[list[Case], list[dict[str, Any]]]:
    """Six hours of good runs, then a burst of misses: the short windows burn, the long windows protect."""
    o = cfg.objectives[0]
    base = {"workflow": o.workflow, "tenant": "assistant"}
    cases, short_burns = [], []
    for sli, alert in SLIS:
        budget = _budget(sli, o)
        bad = _burst_misses(budget)
        assert bad > 14.4 * budget
        series = _slo_series(sli, o, base, [(LONG_MINUTES - BURST_MINUTES, 0.0), (BURST_MINUTES, bad)])
        cases.append(Case(alert, series, [(LONG_MINUTES, [])]))
        short_burns.append({"expr": f'count({R.slo_errors(sli, "5m")}{{objective="{o.workflow}"}} > '
                                    f'{_num(14.4 * budget)})',
                            "eval_time": f"{LONG_MINUTES}m", "exp_samples": [{"labels": "{}", "value": 1}]})
    return cases, short_burns


def _gpu_cases(cfg: ObservabilityConfig) -> list[Case]:
    fors = _for(cfg)
    gpu = {"gpu": "0", "UUID": "GPU-0", "Hostname": "node-a"}

    def firing(alert: str, severity: str, labels: Labels, value: float) -> tuple[Labels, float, int]:
        return {**labels, "alertname": alert, "severity": severity}, value, fors[(alert, severity)]

    xid = _sel(DCGM.XID, gpu)
    out = [
        # A drain XID at minute 10 pages at once and resolves XID_WINDOW later, the last XID still 79.
        Case("GpuXidError", {xid: "0x9 79x20"},
             _around(10, [firing("GpuXidError", "critical", gpu, 79)]) + [(10 + _minutes(XID_WINDOW), [])]),
        Case("GpuXidError", {xid: "0x9 119x20"}, _around(10, [firing("GpuXidError", "critical", gpu, 119)])),
        # An application XID tickets; one set long before (the gauge keeps it) is silent.
        Case("GpuXidError", {xid: "0x9 13x20"}, _around(10, [firing("GpuXidError", "warning", gpu, 13)])),
        Case("GpuXidError", {xid: "79x40"}, [(30, [])]),
    ]
    for alert, metric, fire, quiet in (
        ("GpuThermalThrottling", DCGM.CLOCK_THROTTLE_REASONS, 0x20, 0x4),  # SW thermal; SW power cap
        ("GpuPowerThrottling", DCGM.CLOCK_THROTTLE_REASONS, 0x80, 0x20),  # power brake; thermal
        ("GpuRowRemapFailure", DCGM.ROW_REMAP_FAILURE, 1, 0),
    ):
        [severity] = [s for a, s in fors if a == alert]
        value = fire if alert == "GpuRowRemapFailure" else 1
        checks = _around(10, [firing(alert, severity, gpu, value)])
        out.append(Case(alert, {_sel(metric, gpu): f"0x9 {fire}x20"}, checks))
        out.append(Case(alert, {_sel(metric, gpu): f"0x9 {quiet}x20"}, [(checks[-1][0], [])]))

    pool = cfg.pool("l40s")
    pod = {"namespace": "search", "pod": "embed-rerank-0"}
    for idle in (pool.gpus_per_node, pool.gpus_per_node - 1):
        series = {
            _sel(KSM.NODE_LABELS, {"node": "node-a", "label_aifactory_io_pool": pool.name}): "1x90",
            _sel(KSM.POD_LABELS, {**pod, "label_aifactory_io_model": "embed-rerank",
                                  "label_aifactory_io_tenant": "search"}): "1x90",
            _sel(KSM.POD_REQUESTS, {**pod, "node": "node-a", "resource": "nvidia_com_gpu"}): f"{pool.gpus_per_node}x90",
            **_phase(pod, "Running", "1x90"),
        }
        for g in range(pool.gpus_per_node):
            series[_sel(DCGM.GPU_UTIL, {"gpu": str(g), "Hostname": "node-a", **pod})] = "2x90" if g < idle else "50x90"
        fired = firing("GpuExpensiveIdle", "warning", {"pool": pool.name}, idle)
        out.append(Case("GpuExpensiveIdle", series,
                        _around(0, [fired]) if idle == pool.gpus_per_node else [(fired[2], [])]))

    vllm = {"model_name": "assistant-batch", "pod": "assistant-batch-0"}
    labels = {"model": "assistant-batch", "model_name": "assistant-batch"}  # KV cache: label_replace keeps both
    kv = _around(10, [firing("ModelKvCacheSaturated", "warning", labels, 0.97)])
    out.append(Case("ModelKvCacheSaturated", {_sel(VLLM.KV_CACHE, vllm): "0.5x9 0.97x20"}, kv))
    out.append(Case("ModelKvCacheSaturated", {_sel(VLLM.KV_CACHE, vllm): "0.5x9 0.9x20"}, [(kv[-1][0], [])]))
    limit = int(cfg.queue_alert_factor * next(m.target_queue_depth for m in cfg.models if m.name == "assistant-batch"))
    queue = _around(10, [firing("ModelQueueGrowing", "warning", {"model": "assistant-batch"}, limit + 1)])
    out.append(Case("ModelQueueGrowing", {_sel(VLLM.WAITING, vllm): f"0x9 {limit + 1}x20"}, queue))
    out.append(Case("ModelQueueGrowing", {_sel(VLLM.WAITING, vllm): f"0x9 {limit}x20"}, [(queue[-1][0], [])]))
    # SGLang: each scheduler process (TP rank) of a pod reports the pod's queue; the pod counts once
    ranks = [{"model_name": "assistant-batch", "pod": "assistant-batch-0", "tp_rank": r} for r in ("0", "1")]
    sq = _around(10, [firing("SglangQueueGrowing", "warning", {"model": "assistant-batch"}, limit + 1)])
    out.append(Case("SglangQueueGrowing", {_sel(SGLANG.QUEUE, r): f"0x9 {limit + 1}x20" for r in ranks}, sq))
    out.append(Case("SglangQueueGrowing", {_sel(SGLANG.QUEUE, r): f"0x9 {limit}x20" for r in ranks},
                    [(sq[-1][0], [])]))
    # the KV pool of its most used rank: 97% fires past the 95% share, 90% does not
    skv = _around(10, [firing("SglangKvCacheSaturated", "warning",
                                       {"model": "assistant-batch", "model_name": "assistant-batch"}, 0.97)])
    out.append(Case("SglangKvCacheSaturated", {_sel(SGLANG.TOKEN_USAGE, ranks[0]): "0.5x9 0.97x20",
                                               _sel(SGLANG.TOKEN_USAGE, ranks[1]): "0.5x9 0.4x20"}, skv))
    out.append(Case("SglangKvCacheSaturated", {_sel(SGLANG.TOKEN_USAGE, r): "0.5x9 0.9x20" for r in ranks},
                    [(skv[-1][0], [])]))

    triton = {"model": TRITON.ENGINE_MODEL, "version": "1", TRITON.L_POD_MODEL: "assistant-fast"}
    ensemble = {**triton, "model": "ensemble"}  # same pod, another repository model: never counted
    target = next(m.target_queue_seconds for m in cfg.models if m.name == "assistant-fast")
    for factor in (1.5 * cfg.queue_alert_factor, cfg.queue_alert_factor / 2):
        queue_us = 100 * target * factor * 1e6
        series = {_sel(TRITON.REQUEST_SUCCESS, triton): "0+100x30", _sel(TRITON.QUEUE_DURATION_US, triton):
                  f"0+{queue_us:g}x30", _sel(TRITON.REQUEST_SUCCESS, ensemble): "0+100x30",
                  _sel(TRITON.QUEUE_DURATION_US, ensemble): "0+0x30"}
        fired = firing("TritonQueueTimeHigh", "warning", {"model": "assistant-fast"}, target * factor)
        # A rate exists from the second sample: the condition holds from minute 1.
        out.append(Case("TritonQueueTimeHigh", series,
                        _around(1, [fired]) if factor > cfg.queue_alert_factor else [(1 + fired[2], [])]))
    return out


def _pipeline_cases(cfg: ObservabilityConfig) -> list[Case]:
    """The telemetry pipeline's alerts (issue 28 item 9), on the series the Collector, Jaeger, Alloy, Loki and
    loki-canary export (telemetry.names.PIPELINE cites each at its pinned version). Counters rise at constant rates
    from minute 0, so each condition holds from minute 1 (a rate needs two samples) with an exact $value."""
    fors = _for(cfg)
    out: list[Case] = []

    def case(alert: str, labels: Labels, value: float, series: dict[str, str], quiet: dict[str, str]) -> None:
        fired = ({**labels, "alertname": alert, "severity": "warning"}, value, fors[(alert, "warning")])
        out.append(Case(alert, series, _around(1, [fired])))
        out.append(Case(alert, quiet, [(1 + fired[2], [])]))

    collector = {"namespace": "monitoring", "job": "otel-collector"}
    for signal in PIPELINE.SIGNALS:
        for alert, metric, labels in (
            ("TelemetryExportFailing", PIPELINE.SEND_FAILED, {**collector, "exporter": "otlp/jaeger"}),
            ("TelemetryExportQueueFull", PIPELINE.ENQUEUE_FAILED, {**collector, "exporter": "otlphttp/loki"}),
            ("TelemetryReceiverRefusing", PIPELINE.RECEIVER_REFUSED,
             {**collector, "receiver": "otlp", "transport": "grpc"}),
        ):
            name = metric.format(signal=signal)
            raw = {**labels, "instance": "10.0.0.7:8888", "pod": "otel-collector-0"}
            sent = _sel(PIPELINE.SENT.format(signal=signal), raw)
            case(alert, {**labels, "signal": signal}, 1.0, {_sel(name, raw): "0+60x30", sent: "0+600x30"},
                 {_sel(name, raw): "0x30", sent: "0+600x30"})
    alloy = {"namespace": "monitoring", "pod": "alloy-x2kq9", "host": "loki-gateway.monitoring.svc.cluster.local:80"}
    dropped = _sel(PIPELINE.LOKI_WRITE_DROPPED, {**alloy, "job": "alloy", "tenant": "", "reason": "ingester_error"})
    case("LogShippingDropping", alloy, 1.0, {dropped: "0+60x30"}, {dropped: "0x30"})
    loki = {"namespace": "monitoring", "job": "monitoring/loki", "route": "loki_api_v1_push"}
    ok, failed = (_sel(PIPELINE.LOKI_REQUESTS, {**loki, "status_code": code}) for code in ("204", "500"))
    case("LokiRequestsFailing", loki, 10 / 110, {ok: "0+100x30", failed: "0+10x30"},
         {ok: "0+100x30", failed: "0+5x30"})  # 4.8%: under the threshold
    canary = {"namespace": "monitoring", "job": "monitoring/loki-canary", "pod": "loki-canary-abcde"}
    written, missing = _sel(PIPELINE.CANARY_ENTRIES, canary), _sel(PIPELINE.CANARY_MISSING, canary)
    case("LokiCanaryLinesMissing", {"namespace": "monitoring"}, 3 / 60, {written: "0+60x30", missing: "0+3x30"},
         {written: "0+60x30", missing: "0+0.3x30"})  # 0.5%: under the threshold
    return out


def _gateway_cases(cfg: ObservabilityConfig) -> list[Case]:
    """The gateway's alerts (dashboards/gateway_alerts.py) on Envoy's cluster stats as its stats listener exports
    them (telemetry.names.ENVOY), two gateway pods. Ejections: gauges; retries and answered tries: counters from
    minute 0 (a rate from minute 1), so the ratio is exact."""
    fors = _for(cfg)
    out: list[Case] = []
    pods = [{"namespace": "aifactory-gateway", "pod": f"gateway-{i}", "job": "gateway"} for i in range(2)]
    chat = {ENVOY.L_CLUSTER: "deep-research"}  # a prod model without variants

    def case(alert: str, active_at: int, value: float, series: dict[str, str], quiet: dict[str, str]) -> None:
        fired = ({**chat, "alertname": alert, "severity": "warning"}, value, fors[(alert, "warning")])
        out.append(Case(alert, series, _around(active_at, [fired])))
        out.append(Case(alert, quiet, [(active_at + fired[2], [])]))

    # one pod ejects a replica every minute, the other none: the most any pod ejected in 10 minutes (one ejection a
    # minute, extrapolated to the window's ends); the quiet case ejects once and never again
    ejected = [_sel(ENVOY.EJECTIONS_ENFORCED, {**p, **chat}) for p in pods]
    case("GatewayReplicasEjected", 1, 10.0, {ejected[0]: "0+1x30", ejected[1]: "0x30"},
         {ejected[0]: "0 1x29", ejected[1]: "0x30"})
    # per pod 60 answered tries a minute and 4 retries (the quiet case: 2): 8 / 120 = 6.7% > 5% (quiet: 3.3%)
    answered = [_sel(ENVOY.RQ_XX, {**p, **chat, "envoy_response_code_class": "2"}) for p in pods]
    retried = [_sel(ENVOY.RQ_RETRY, {**p, **chat}) for p in pods]
    case("GatewayRetryRatioHigh", 1, 8 / 120, {**{a: "0+60x30" for a in answered}, **{r: "0+4x30" for r in retried}},
         {**{a: "0+60x30" for a in answered}, **{r: "0+2x30" for r in retried}})
    # a workload's aggregate cluster retries to overflow by design: every try retried is not this alert's
    overflowing = {ENVOY.L_CLUSTER: f"{cfg.variants[0].workload}__{cfg.variants[0].model}"}
    out.append(Case("GatewayRetryRatioHigh", {
        **{_sel(ENVOY.RQ_XX, {**p, **overflowing, "envoy_response_code_class": "2"}): "0+60x30" for p in pods},
        **{_sel(ENVOY.RQ_RETRY, {**p, **overflowing}): "0+60x30" for p in pods}}, [(12, [])]))
    return out + _unavailable_cases(cfg) + _server_error_cases(cfg) + _panic_cases(cfg) + _last_resort_cases(cfg)


GATEWAY_PODS = [{"namespace": "aifactory-gateway", "pod": f"gateway-{i}", "job": "gateway"} for i in range(2)]


def _gateway_fired(cfg: ObservabilityConfig, alert: str, severity: str, cluster: str, value: float, *,
                   for_: str | None = None) -> tuple[Labels, float, int]:
    """The alert firing for `cluster`, with its rule's `for` (`for_`: which, where the alert has several rules)."""
    fors = {_minutes(a.for_) for a in alerts(cfg) if a.alert == alert and a.severity == severity}
    [minutes] = fors if for_ is None else {_minutes(for_)} & fors
    return {ENVOY.L_CLUSTER: cluster, "alertname": alert, "severity": severity}, value, minutes


def _down(cluster: str, refused_per_minute: tuple[float, float]) -> dict[str, str]:
    """Both gateway pods see no healthy replica of `cluster` from minute 0, and refuse these requests a minute."""
    out = {}
    for p, refused in zip(GATEWAY_PODS, refused_per_minute, strict=True):
        out[_sel(ENVOY.MEMBERSHIP_HEALTHY, {**p, ENVOY.L_CLUSTER: cluster})] = "0x40"
        out[_sel(ENVOY.NO_HEALTHY, {**p, ENVOY.L_CLUSTER: cluster})] = f"0+{_num(refused)}x40"
    return out


def _unavailable_cases(cfg: ObservabilityConfig) -> list[Case]:
    """GatewayModelUnavailable on the prod stack (dashboards/gateway_alerts.py): deep-research (h200, on demand, no
    variants), finance-8b (a variant of finance-8b), assistant-fast (the h100-block capacity block, whose window,
    December 2026, is far from promtool's clock at the epoch)."""
    refused = _gateway_fired(cfg, "GatewayModelUnavailable", "critical", "deep-research", (60 + 30) / 60)
    idle = _gateway_fired(cfg, "GatewayModelUnavailable", "warning", "deep-research", 0)
    overflowing = _gateway_fired(cfg, "GatewayModelUnavailable", "warning", "finance-8b", 0)
    return [
        # refused by both pods (1 + 0.5 requests/s) from minute 1 (a rate needs two samples): pages 5 minutes
        # later, and no ticket joins the page
        Case("GatewayModelUnavailable", _down("deep-research", (60, 30)),
             _around(1, [refused]) + [(1 + idle[2] + 1, [refused[:2]])]),
        # no replica, nobody refused: a ticket after 15 minutes, never a page
        Case("GatewayModelUnavailable", _down("deep-research", (0, 0)), _around(0, [idle]) + [(refused[2] + 1, [])]),
        # a variant without replicas whose requests overflow to finance-8b-bf16 (its gate's 503s count as refusals
        # on its cluster, the client is served): a ticket, no page
        Case("GatewayModelUnavailable", _down("finance-8b", (60, 60)),
             [(refused[2] + 1, [])] + _around(0, [overflowing])),
        # a capacity block outside its window: its pool has no node by design, nothing fires
        Case("GatewayModelUnavailable", _down("assistant-fast", (60, 60)), [(refused[2] + 1, []), (idle[2] + 1, [])]),
    ]


def _answers(cluster: str, per_minute: dict[str, float]) -> dict[str, str]:
    """Both gateway pods answer clients of `cluster` with these responses a minute, by class (`2`, `5`)."""
    return {_sel(ENVOY.RQ_XX, {**p, ENVOY.L_CLUSTER: cluster, ENVOY.L_CODE_CLASS: c}): f"0+{_num(n)}x30"
            for p in GATEWAY_PODS for c, n in per_minute.items()}


def _route_answers(route: str, per_minute: dict[str, float]) -> dict[str, str]:
    """Both gateway pods answer clients of the route with stat_prefix `route` with these responses a minute, by class
    (its route stats: vhost.models.route.<route>.upstream_rq_<class>xx)."""
    return {_sel(ENVOY.ROUTE_RQ_XX, {**p, ENVOY.L_ROUTE: route, ENVOY.L_VHOST: "models", ENVOY.L_CODE_CLASS: c}):
            f"0+{_num(n)}x30" for p in GATEWAY_PODS for c, n in per_minute.items()}


def _server_error_cases(cfg: ObservabilityConfig) -> list[Case]:
    """GatewayServerErrorRatioHigh on the prod stack (issue 44, M1): what each route answered clients. A workload's
    decision route (finance-8b's requests that chose finance-8b-bf16 without a budget) and a route naming a variant by
    its key (assistant-steady's) are read from their route stats, by the cluster each sends to; the variant's own
    cluster (which counts its gate's 503s that the aggregate retried) is not read; a capacity-block variant outside its
    window is expected down. Before, the alert read aggregate cluster names (two never rendered) and missed the
    routes that name a variant."""
    decision = "finance-8b__finance-8b-bf16__default"
    fired = _gateway_fired(cfg, "GatewayServerErrorRatioHigh", "critical", "finance-8b__finance-8b-bf16", 12 / 132)
    direct = _gateway_fired(cfg, "GatewayServerErrorRatioHigh", "critical", "assistant-steady__direct", 12 / 132)
    quiet = [(1 + fired[2], [])]
    twice = {_sel(ENVOY.ROUTE_RQ_CODE, {**p, ENVOY.L_ROUTE: "assistant-steady__direct", ENVOY.L_VHOST: "models",
                                        ENVOY.L_CODE: str(ENVOY.FAILED_TWICE_CODE)}): "0+6x30" for p in GATEWAY_PODS}
    return [
        # per pod 60 answers 2xx and 6 5xx a minute: 9.1% of 2.2 requests/s
        Case("GatewayServerErrorRatioHigh", _route_answers(decision, {"2": 60, "5": 6}), _around(1, [fired])),
        # a variant named by its key: its route's own answers
        Case("GatewayServerErrorRatioHigh", _route_answers("assistant-steady__direct", {"2": 60, "5": 6}),
             _around(1, [direct])),
        # ... and its requests that failed on two replicas: 452 to the router (a 4xx), 500 to the client
        Case("GatewayServerErrorRatioHigh", {**_route_answers("assistant-steady__direct", {"2": 60, "4": 6}), **twice},
             _around(1, [direct])),
        # 2 5xx a minute: 3.2%, under 5%
        Case("GatewayServerErrorRatioHigh", _route_answers(decision, {"2": 60, "5": 2}), quiet),
        # at night: one 5xx a minute per pod out of two answers, 50% of 0.067 requests/s: under the minimum rate
        Case("GatewayServerErrorRatioHigh", _route_answers(decision, {"2": 1, "5": 1}), quiet),
        # the variant's own cluster counts its gate's 503s, which the aggregate retried on the next variant
        Case("GatewayServerErrorRatioHigh", _answers("finance-8b-bf16", {"5": 60}), quiet),
        # every answer 5xx, from a variant whose capacity block is outside its window: expected, no page
        Case("GatewayServerErrorRatioHigh", _route_answers("assistant-fast__direct", {"5": 60}), quiet),
    ]


def _panic_cases(cfg: ObservabilityConfig) -> list[Case]:
    """GatewayModelInPanic on the prod stack (issue 44, M2): deep-research's cluster balancing 1 + 0.5 requests/s
    over replicas none of which passes its checks (lb_healthy_panic); silent while the counter stands still. A
    variant's last resort serving (assistant-steady__last) is not a model in panic (issue 44 m1: it has no checks to
    fail): GatewayWorkloadOnLastResorts says it (`_last_resort_cases`)."""
    model = _gateway_fired(cfg, "GatewayModelInPanic", "warning", "deep-research", 1.5)
    panic = [_sel(ENVOY.LB_HEALTHY_PANIC, {**p, ENVOY.L_CLUSTER: "deep-research"}) for p in GATEWAY_PODS]
    tries = [_sel(ENVOY.RQ_TOTAL, {**p, ENVOY.L_CLUSTER: "assistant-steady__last"}) for p in GATEWAY_PODS]
    return [
        Case("GatewayModelInPanic", {panic[0]: "0+60x30", panic[1]: "0+30x30"}, _around(1, [model])),
        # normal: the counter exists and does not move (one panic a while ago)
        Case("GatewayModelInPanic", {panic[0]: "0 1x29", panic[1]: "0x30"}, [(1 + model[2], [])]),
        # a last resort serving is another alert's
        Case("GatewayModelInPanic", {t: "0+30x30" for t in tries}, [(1 + model[2], [])]),
    ]


def _tries_per_minute(per_minute: dict[str, float]) -> dict[str, str]:
    """Both gateway pods send these tries a minute to each cluster (upstream_rq_total)."""
    return {_sel(ENVOY.RQ_TOTAL, {**p, ENVOY.L_CLUSTER: c}): f"0+{_num(n)}x30"
            for p in GATEWAY_PODS for c, n in per_minute.items()}


def _last_resort_cases(cfg: ObservabilityConfig) -> list[Case]:
    """GatewayWorkloadOnLastResorts on the prod stack (issue 44, m1): the assistant's variants (assistant-fast,
    assistant-steady) saturated: per pod 6 tries a minute still reach assistant-steady's own cluster (one replica
    passing now and then) and 54 its last resort; 90% of the workload's tries for 10 minutes: a ticket, labelled with
    the workload. Silent on a trickle: 10 poison requests a minute that every variant answered 500 (each 2 tries on
    the variants, 2 on their last resorts) beside 600 served by assistant-fast, 3.1% (0.67 tries/s on the last
    resorts); and at night one such request a minute alone (2 of 4 tries, but 0.067 tries/s on the last resorts:
    under the minimum rate)."""
    fired = ({"workload": "assistant", "alertname": "GatewayWorkloadOnLastResorts", "severity": "warning"}, 0.9,
             _for(cfg)[("GatewayWorkloadOnLastResorts", "warning")])
    quiet = [(1 + fired[2], [])]
    poison = {"assistant-fast": 1, "assistant-steady": 1, "assistant-fast__last": 1, "assistant-steady__last": 1}
    return [
        Case("GatewayWorkloadOnLastResorts", _tries_per_minute({"assistant-steady": 6, "assistant-steady__last": 54}),
             _around(1, [fired])),
        Case("GatewayWorkloadOnLastResorts",
             _tries_per_minute({**{c: 10 * n for c, n in poison.items()}, "assistant-fast": 610}), quiet),
        Case("GatewayWorkloadOnLastResorts", _tries_per_minute(poison), quiet),
    ]


def _latency(metric: str, labels: Labels, edges: tuple[float, ...], per_minute: dict[float, float]
             ) -> dict[str, str]:
    """A latency histogram as a Python client writes it (le "0.05", "1.0"): `per_minute` observations of each
    value, over the engine's bucket `edges`."""
    def le(edge: float) -> str:
        return repr(float(edge))

    out = {_sel(f"{metric}_bucket", {**labels, "le": le(e)}):
           f"0+{_num(sum(n for v, n in per_minute.items() if v <= e))}x30" for e in edges}
    out[_sel(f"{metric}_bucket", {**labels, "le": "+Inf"})] = f"0+{_num(sum(per_minute.values()))}x30"
    return out


def _model_slo_cases(cfg: ObservabilityConfig) -> list[Case]:
    """Issue 44 item 9: a model's latency SLO alert counts the share of observations above its SLO, a bucket edge of
    its engine's histogram, and tickets when it stays above 5% (a p95). Normal traffic that sits inside the bucket
    below the SLO is silent: assistant-steady's inter-token latency at 30 ms, all in vLLM's 25-50 ms bucket (prod's
    SLO was 0.04 s, where histogram_quantile interpolated a p95 of 48.75 ms and the alert fired on it; it is 0.05 now,
    the bucket's edge). The fault fires with its exact share: 10% of tokens at 60 ms; a quarter of assistant-tools'
    first tokens at 0.7 s (SGLang, SLO 0.6 s). Issue 44 item 11: every first token slow at 0.1 requests/s, under
    MODEL_SLO_MIN_REQUESTS_PER_SECOND, is silent. Buckets: vllm 0.33.0 vllm/v1/metrics/buckets.py, sglang 0.5.23
    srt/observability/metrics_collector.py."""
    fors = _for(cfg)
    models = {m.name: m for m in cfg.models}
    assert models["assistant-steady"].inter_token_seconds == 0.05 and models["assistant-tools"].ttft_seconds == 0.6
    vllm = {"model_name": "assistant-steady", "engine": "0"}
    sglang = {"model_name": "assistant-tools", "engine_type": "unified", "is_streaming": "true"}
    steady_requests = _latency(VLLM.TTFT, vllm, VLLM.TTFT_BUCKETS, {0.3: 60})  # 1 request/s, within its 0.5 s SLO

    def fired(alert: str, model: str, share: float) -> tuple[Labels, float, int]:
        return {"model": model, "alertname": alert, "severity": "warning"}, share, fors[(alert, "warning")]

    itl, ttft = "ModelInterTokenSloMissed", "ModelTtftSloMissed"
    quiet = [(1 + fors[(itl, "warning")], [])]
    return [
        Case(itl, {**steady_requests, **_latency(VLLM.ITL, vllm, VLLM.ITL_BUCKETS, {0.03: 60})}, quiet),
        Case(itl, {**steady_requests, **_latency(VLLM.ITL, vllm, VLLM.ITL_BUCKETS, {0.03: 54, 0.06: 6})},
             _around(1, [fired(itl, "assistant-steady", 0.1)])),
        Case(ttft, _latency(SGLANG.TTFT, sglang, SGLANG.TTFT_BUCKETS, {0.5: 60}), quiet),
        Case(ttft, _latency(SGLANG.TTFT, sglang, SGLANG.TTFT_BUCKETS, {0.5: 45, 0.7: 15}),
             _around(1, [fired(ttft, "assistant-tools", 0.25)])),
        Case(ttft, _latency(VLLM.TTFT, vllm, VLLM.TTFT_BUCKETS, {0.6: 6}), quiet),  # 0.1 requests/s, all slow
    ]


Annotations = dict[tuple[str, str, str | None], dict[str, str]]


def _promtool_test(case: Case, annotations: Annotations) -> dict[str, Any]:
    def expected(labels: Labels, value: float) -> dict[str, Any]:
        texts = annotations[(labels["alertname"], labels["severity"], labels.get("objective") or labels.get("signal"))]
        return {"exp_labels": labels, "exp_annotations": {k: _render(v, labels, value) for k, v in texts.items()}}

    return {"interval": "1m", "input_series": [{"series": s, "values": v} for s, v in case.series.items()],
            "alert_rule_test": [{"eval_time": f"{t}m", "alertname": case.alert,
                                 "exp_alerts": [expected(labels, v) for labels, v in fired]}
                                for t, fired in case.checks]}


def _pairs(cases: list[Case]) -> set[tuple[str, str]]:
    """(alert, severity) checked silent one minute and firing the next."""
    out = set()
    for c in cases:
        firing = {t: {labels["severity"] for labels, _ in fired} for t, fired in c.checks}
        for t, severities in firing.items():
            out |= {(c.alert, s) for s in severities if t - 1 in firing and s not in firing[t - 1]}
    return out


_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def _groups_for(test: dict[str, Any], rule_groups: list[dict[str, Any]]) -> tuple[str, ...]:
    """The rule groups a promtool test reads: those of the alerts it checks and of every recorded series their
    expressions (and its PromQL checks) read, transitively, in the groups' order. The rest cannot change what it
    checks, and promtool evaluates every rule it is given at every step (0.4 s of CPU per test with all 300)."""
    recorded = {r["record"]: (g["name"], r["expr"]) for g in rule_groups for r in g["rules"] if "record" in r}
    alerting = [(g["name"], r) for g in rule_groups for r in g["rules"] if "alert" in r]
    wanted = {c["alertname"] for c in test.get("alert_rule_test", [])}
    todo = [str(c["expr"]) for c in test.get("promql_expr_test", [])]
    needed = set()
    for name, rule in alerting:
        if rule["alert"] in wanted:
            needed.add(name)
            todo.append(str(rule["expr"]))
    seen: set[str] = set()
    while todo:
        for token in set(_NAME.findall(todo.pop())) - seen:
            seen.add(token)
            if token in recorded:
                needed.add(recorded[token][0])
                todo.append(str(recorded[token][1]))
    return tuple(g["name"] for g in rule_groups if g["name"] in needed)


def _run_promtool_tests(cfg: ObservabilityConfig, tmp_path: Path, *tests_by_interval: tuple[str, list[dict[str, Any]]]
                        ) -> None:
    """One promtool run over test files, one per evaluation interval (long cases evaluate less often) and set of
    rule groups its tests read (`_groups_for`)."""
    rule_groups = dashboards.prometheus_rules(cfg)["groups"]
    order = [g.name for g in groups(cfg)]
    files = []
    for interval, tests in tests_by_interval:
        by_groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for test in tests:
            by_groups.setdefault(_groups_for(test, rule_groups), []).append(test)
        for names, some in by_groups.items():
            stem = f"{interval}-{len(files)}"
            (tmp_path / f"rules-{stem}.yaml").write_text(dump_yaml(
                {"groups": [g for g in rule_groups if g["name"] in names]}))
            files.append(tmp_path / f"test-{stem}.yaml")
            files[-1].write_text(yaml.safe_dump({
                "rule_files": [f"rules-{stem}.yaml"], "evaluation_interval": interval,
                "group_eval_order": [n for n in order if n in names], "tests": some}, sort_keys=False))
    res = promtool("test", "rules", *map(str, files))
    assert res.returncode == 0, (res.stdout + res.stderr)[-6000:]
    assert res.stdout.count("SUCCESS") == len(files)


def test_promtool_test_rules_every_alert_just_before_and_just_after_it_fires(prod: ObservabilityConfig,
                                                                             tmp_path: Path) -> None:
    # they import this module's helpers
    from tests.artifacts.test_gateway_drain_alert import budget_drain_cut_cases, drain_cut_cases
    from tests.artifacts.test_gateway_overload import overload_cases
    from tests.artifacts.test_rules_budgets import budget_cases
    from tests.artifacts.test_rules_load_balancer import load_balancer_cases

    long_cases, short_burns = _long_window_cases(prod)
    cases = (_burn_cases(prod) + long_cases + _gpu_cases(prod) + _pipeline_cases(prod) + _gateway_cases(prod)
             + _model_slo_cases(prod) + budget_cases(prod) + overload_cases(prod) + load_balancer_cases(prod)
             + drain_cut_cases(prod) + budget_drain_cut_cases(prod))
    # CapacityBlockOver fires from a date (prod's block's endTime), not on data: tests/artifacts/
    # test_rules_gateway.py::test_a_model_on_an_ended_capacity_block_gets_a_ticket_from_its_end_on
    on_data = [a for a in alerts(prod) if a.alert != "CapacityBlockOver"]
    assert _pairs(cases) == {(a.alert, a.severity) for a in on_data}
    assert {c.alert for c in cases if not any(fired for _, fired in c.checks)} == {a.alert for a in on_data}
    annotations = {(a.alert, a.severity, a.labels.get("objective") or a.labels.get("signal")):
                   a.to_dict()["annotations"] for a in alerts(prod)}
    long_tests = [{**_promtool_test(c, annotations), "promql_expr_test": [burn]}  # the 5m window alone would page
                  for c, burn in zip(long_cases, short_burns, strict=True)]
    _run_promtool_tests(prod, tmp_path, ("1m", [_promtool_test(c, annotations) for c in cases if c not in long_cases]),
                        (LONG_EVALUATION_INTERVAL, long_tests))


def test_nodes_outside_the_kits_pools_belong_to_no_pool(prod: ObservabilityConfig, tmp_path: Path) -> None:
    """kube-state-metrics exports kube_node_labels for every node, and only the kit's pools carry
    `aifactory.io/pool` (a node group of another team, a control-plane or Fargate node carry none): such a node is in
    no pool's count, and no pool="" group appears (a sampled mutant dropped the filter unnoticed)."""
    series = {_sel(KSM.NODE_LABELS, {"node": "node-a", "label_aifactory_io_pool": "l40s"}): "1x10",
              _sel(KSM.NODE_LABELS, {"node": "node-b", "label_aifactory_io_pool": "l40s"}): "1x10",
              _sel(KSM.NODE_LABELS, {"node": "other-team-1"}): "1x10"}
    _run_promtool_tests(prod, tmp_path, ("1m", [{
        "interval": "1m", "input_series": [{"series": k, "values": v} for k, v in series.items()],
        "promql_expr_test": [
            {"expr": R.NODE_POOL, "eval_time": "5m",
             "exp_samples": [{"labels": f'{R.NODE_POOL}{{node="{n}", pool="l40s"}}', "value": 1}
                             for n in ("node-a", "node-b")]},
            {"expr": R.POOL_NODES, "eval_time": "5m",
             "exp_samples": [{"labels": f'{R.POOL_NODES}{{pool="l40s"}}', "value": 2}]}]}]))


# --------------------------------------------------------------------------------------------
# unit costs: no sample, never +Inf, when the denominator is zero


def test_unit_costs_have_no_sample_for_zero_tokens_or_zero_completed_workflows(prod: ObservabilityConfig,
                                                                              tmp_path: Path) -> None:
    """embed-rerank (tenant search) generates tokens and completes workflows; finance-8b (tenant finance)
    generated nothing and its tenant's workflows all failed."""
    series = {_sel(KSM.NODE_LABELS, {"node": "node-a", "label_aifactory_io_pool": "l40s"}): "1x20"}
    for model, tenant, tokens in (("embed-rerank", "search", "0+600x20"), ("finance-8b", "finance", "5x20")):
        pod = {"namespace": tenant, "pod": f"{model}-0"}
        series[_sel(KSM.POD_LABELS, {**pod, "label_aifactory_io_model": model,
                                     "label_aifactory_io_tenant": tenant})] = "1x20"
        series[_sel(KSM.POD_REQUESTS, {**pod, "node": "node-a", "resource": "nvidia_com_gpu"})] = "2x20"
        series |= _phase(pod, "Running", "1x20")
        series[_sel(VLLM.GENERATION_TOKENS, {"model_name": model, **pod})] = tokens
    wf = f"{WORKFLOW_DURATION.prom}_count"
    series[_sel(wf, {"workflow": "w", "tenant": "search", "status": "ok"})] = "0+60x20"
    series[_sel(wf, {"workflow": "w", "tenant": "finance", "status": "ok"})] = "0x20"
    series[_sel(wf, {"workflow": "w", "tenant": "finance", "status": "error"})] = "0+60x20"

    board = dashboards.build(prod)["gpu-cost"]
    [stat] = [e for t, e in dashboards.queries(board) if t == "Cost per completed workflow"]
    assert "model=~" not in stat  # numerator and denominator filter the same: tenants (workflows span models)
    per_tenant = {t: e for t in ("search", "finance")
                  for title, e in dashboards.queries(board, {"tenant": t}) if title == "Cost per completed workflow"}

    def samples(expr: str, *labels: str) -> dict[str, Any]:
        return {"expr": expr, "eval_time": "15m", "exp_samples": [{"labels": lb, "value": 1} for lb in labels]}

    _run_promtool_tests(prod, tmp_path, ("1m", [{"interval": "1m", "input_series": [{"series": s, "values": v}
                                                                   for s, v in series.items()],
                                "promql_expr_test": [
        samples(f"count by (model) ({R.MODEL_COST_PER_MTOK})", '{model="embed-rerank"}'),
        samples(f"count by (tenant) ({R.TENANT_COST_PER_WORKFLOW})", '{tenant="search"}'),
        samples(f"count({per_tenant['search']})", "{}"),
        samples(f"count({per_tenant['finance']})"),
    ]}]))


# --------------------------------------------------------------------------------------------
# idle cost: every GPU of a pool is working, allocated but idle, or unallocated


def test_pool_gpus_split_into_working_allocated_idle_and_unallocated(prod: ObservabilityConfig,
                                                                     tmp_path: Path) -> None:
    """l40s (4 GPUs a node, 10.49 $/h a node): node-a holds embed-rerank's pod (2 GPUs: one at 50%, one at 2%),
    node-b only a finished job's pod (its requests still exported, its GPUs free); h200 (8 GPUs, 63.3 $/h) has a
    node and no pod at all. Capacity, requests and phases as kube-state-metrics exports them
    (kube_node_status_capacity / kube_pod_container_resource_requests, resource nvidia_com_gpu)."""
    series = {}
    for node, pool, gpus in (("node-a", "l40s", 4), ("node-b", "l40s", 4), ("node-c", "h200", 8)):
        series[_sel(KSM.NODE_LABELS, {"node": node, "label_aifactory_io_pool": pool})] = "1x20"
        series[_sel(facts.NODE_CAPACITY.name, {"node": node, "resource": "nvidia_com_gpu", "unit": "integer"})] = \
            f"{gpus}x20"
    pod = {"namespace": "search", "pod": "embed-rerank-0"}
    series[_sel(KSM.POD_LABELS, {**pod, "label_aifactory_io_model": "embed-rerank",
                                 "label_aifactory_io_tenant": "search"})] = "1x20"
    series[_sel(KSM.POD_REQUESTS, {**pod, "container": "server", "node": "node-a", "resource": "nvidia_com_gpu",
                                   "unit": "integer"})] = "2x20"
    series |= _phase(pod, "Running", "1x20")
    job = {"namespace": "search", "pod": "reindex-28391-x7k2q"}
    series[_sel(KSM.POD_REQUESTS, {**job, "container": "main", "node": "node-b", "resource": "nvidia_com_gpu",
                                   "unit": "integer"})] = "4x20"
    series |= _phase(job, "Succeeded", "1x20")
    for gpu, util in (("0", "50"), ("1", "2")):
        series[_sel(DCGM.GPU_UTIL, {"gpu": gpu, "Hostname": "node-a", **pod})] = f"{util}x20"
    l40s, h200 = 10.49 / 4, 63.3 / 8
    want = {R.POOL_WORKING_COST: {"l40s": l40s, "h200": 0.0},
            R.POOL_ALLOCATED_IDLE_COST: {"l40s": l40s, "h200": 0.0},
            R.POOL_UNALLOCATED_COST: {"l40s": 6 * l40s, "h200": 8 * h200},
            R.POOL_COST: {"l40s": 2 * 10.49, "h200": 63.3}}
    tests = [{"expr": f"sum by (pool) ({record})", "eval_time": "15m",
              "exp_samples": [{"labels": f'{{pool="{p}"}}', "value": v} for p, v in sorted(values.items())]}
             for record, values in want.items()]
    _run_promtool_tests(prod, tmp_path, ("1m", [{"interval": "1m", "input_series": [
        {"series": s, "values": v} for s, v in series.items()], "promql_expr_test": tests}]))
