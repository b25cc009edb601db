"""The rules under the real promtool: `check rules` for every stack, `test rules` with a fire / no-fire pair
for every alert (the prod stack: named and default workflow SLOs, vLLM and Triton models, three pools)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

import dashboards
from dashboards.config import ObservabilityConfig, from_platform
from dashboards.rules import DEFAULT_OBJECTIVE, R, alerts, records
from infra.artifacts import dump_yaml
from infra.synth import DEFAULT_STACKS_DIR
from telemetry.names import DCGM, KSM, TRITON, VLLM, WORKFLOW_BUCKETS_S, WORKFLOW_DURATION
from tests.support.prometheus import promtool
from tests.support.synthetic import OTHER_WORKFLOW

STACKS = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in DEFAULT_STACKS_DIR.glob("Pulumi.*.yaml"))


@pytest.fixture(scope="module")
def prod() -> ObservabilityConfig:
    return from_platform(dashboards.load_stack("prod"))


@pytest.mark.parametrize("stack", STACKS)
def test_promtool_check_rules_passes_for_every_stack(stack: str, tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(dump_yaml(dashboards.prometheus_rules(dashboards.load_stack(stack))))
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


# --------------------------------------------------------------------------------------------
# promtool test rules: a fire / no-fire pair per alert


@dataclass
class Case:
    alert: str
    series: dict[str, str]  # series -> promtool values notation
    eval_time: str
    fired: list[tuple[dict[str, str], float]] = field(default_factory=list)  # (labels, $value)


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


def _burn_cases(cfg: ObservabilityConfig) -> list[Case]:
    wf = WORKFLOW_DURATION.prom
    out = []
    for o in (cfg.objectives[0], cfg.objectives[-1]):  # a named objective and the default one
        workflow = o.workflow or OTHER_WORKFLOW
        base = {"workflow": workflow, "tenant": "assistant"}
        for sli, alert, target in (("latency", "WorkflowLatencyBudgetBurn", o.latency_target),
                                   ("availability", "WorkflowErrorBudgetBurn", o.availability_target)):
            budget = 1 - target
            for bad in (7 * budget, 2 * budget, budget / 2):  # pages and tickets; tickets only; neither
                if sli == "latency":
                    good = max(b for b in WORKFLOW_BUCKETS_S if b <= o.latency_seconds)
                    series = {_sel(f"{wf}_bucket", {**base, "status": "ok", "le": repr(float(good))}):
                              f"0+{100 * (1 - bad):g}x25",
                              _sel(f"{wf}_count", {**base, "status": "ok"}): "0+100x25"}
                else:
                    series = {_sel(f"{wf}_count", {**base, "status": "error"}): f"0+{100 * bad:g}x25",
                              _sel(f"{wf}_count", {**base, "status": "ok"}): f"0+{100 * (1 - bad):g}x25"}
                severities = [s for s, factor in (("critical", 6), ("warning", 1)) if bad > factor * budget]
                fired = [({**base, "alertname": alert, "severity": s, "slo": sli,
                           "objective": o.workflow or DEFAULT_OBJECTIVE}, bad) for s in severities]
                out.append(Case(alert, series, "20m", fired))
    return out


def _gpu_cases(cfg: ObservabilityConfig) -> list[Case]:
    gpu = {"gpu": "0", "UUID": "GPU-0", "Hostname": "node-a"}
    out = []
    for alert, metric, fire, quiet, for_eval in (
        ("GpuXidError", DCGM.XID, 79, 0, "5m"),
        ("GpuThermalThrottling", DCGM.CLOCK_THROTTLE_REASONS, 0x20, 0x4, "10m"),  # SW thermal; SW power cap
        ("GpuPowerThrottling", DCGM.CLOCK_THROTTLE_REASONS, 0x80, 0x20, "10m"),  # power brake; thermal
        ("GpuRowRemapFailure", DCGM.ROW_REMAP_FAILURE, 1, 0, "5m"),
    ):
        value = fire if alert in ("GpuXidError", "GpuRowRemapFailure") else 1
        out.append(Case(alert, {_sel(metric, gpu): f"{fire}x20"}, for_eval,
                        [({**gpu, "alertname": alert, "severity": "critical" if alert in ("GpuXidError",
                                                                                           "GpuRowRemapFailure")
                           else "warning"}, value)]))
        out.append(Case(alert, {_sel(metric, gpu): f"{quiet}x20"}, for_eval))

    pool = cfg.pool("l40s")
    pod = {"namespace": "search", "pod": "embed-rerank-0"}
    for idle in (pool.gpus_per_node, pool.gpus_per_node - 1):
        series = {
            _sel(KSM.NODE_LABELS, {"node": "node-a", "label_aifactory_io_pool": pool.name}): "1x90",
            _sel(KSM.POD_LABELS, {**pod, "label_aifactory_io_model": "embed-rerank",
                                  "label_aifactory_io_tenant": "search"}): "1x90",
            _sel(KSM.POD_REQUESTS, {**pod, "node": "node-a", "resource": "nvidia_com_gpu"}): f"{pool.gpus_per_node}x90",
        }
        for g in range(pool.gpus_per_node):
            series[_sel(DCGM.GPU_UTIL, {"gpu": str(g), "Hostname": "node-a", **pod})] = "2x90" if g < idle else "50x90"
        fired = [({"alertname": "GpuExpensiveIdle", "severity": "warning", "pool": pool.name}, idle)]
        out.append(Case("GpuExpensiveIdle", series, "70m", fired if idle == pool.gpus_per_node else []))

    vllm = {"model_name": "assistant-batch", "pod": "assistant-batch-0"}
    labels = {"model": "assistant-batch", "model_name": "assistant-batch"}  # KV cache: label_replace keeps both
    out.append(Case("ModelKvCacheSaturated", {_sel(VLLM.KV_CACHE, vllm): "0.97x20"}, "15m",
                    [({**labels, "alertname": "ModelKvCacheSaturated", "severity": "warning"}, 0.97)]))
    out.append(Case("ModelKvCacheSaturated", {_sel(VLLM.KV_CACHE, vllm): "0.9x20"}, "15m"))
    limit = int(cfg.queue_alert_factor * next(m.target_queue_depth for m in cfg.models if m.name == "assistant-batch"))
    out.append(Case("ModelQueueGrowing", {_sel(VLLM.WAITING, vllm): f"{limit + 1}x20"}, "15m",
                    [({"model": "assistant-batch", "alertname": "ModelQueueGrowing", "severity": "warning"},
                      limit + 1)]))
    out.append(Case("ModelQueueGrowing", {_sel(VLLM.WAITING, vllm): f"{limit}x20"}, "15m"))

    triton = {"model": TRITON.ENGINE_MODEL, "version": "1", TRITON.L_POD_MODEL: "assistant-fast"}
    ensemble = {**triton, "model": "ensemble"}  # same pod, another repository model: never counted
    target = next(m.target_queue_seconds for m in cfg.models if m.name == "assistant-fast")
    for factor in (1.5 * cfg.queue_alert_factor, cfg.queue_alert_factor / 2):
        queue_us = 100 * target * factor * 1e6
        series = {_sel(TRITON.REQUEST_SUCCESS, triton): "0+100x30", _sel(TRITON.QUEUE_DURATION_US, triton):
                  f"0+{queue_us:g}x30", _sel(TRITON.REQUEST_SUCCESS, ensemble): "0+100x30",
                  _sel(TRITON.QUEUE_DURATION_US, ensemble): "0+0x30"}
        fired = [({"model": "assistant-fast", "alertname": "TritonQueueTimeHigh", "severity": "warning"},
                  target * factor)]
        out.append(Case("TritonQueueTimeHigh", series, "20m", fired if factor > cfg.queue_alert_factor else []))
    return out


def _promtool_test(case: Case, annotations: dict[tuple[str, str], dict[str, str]]) -> dict[str, Any]:
    exp = []
    for labels, value in case.fired:
        key = (case.alert, labels["severity"])
        exp.append({"exp_labels": labels,
                    "exp_annotations": {k: _render(v, labels, value) for k, v in annotations[key].items()}})
    return {"interval": "1m", "input_series": [{"series": s, "values": v} for s, v in case.series.items()],
            "alert_rule_test": [{"eval_time": case.eval_time, "alertname": case.alert, "exp_alerts": exp}]}


def test_promtool_test_rules_fire_and_no_fire_for_every_alert(prod: ObservabilityConfig, tmp_path: Path) -> None:
    cases = _burn_cases(prod) + _gpu_cases(prod)
    names = {a.alert for a in alerts(prod)}
    assert {c.alert for c in cases if c.fired} == names
    assert {c.alert for c in cases if not c.fired} == names
    # Burn-rate alerts exist per objective; their annotations differ only in the objective's numbers.
    annotations: dict[tuple[str, str], dict[str, str]] = {}
    by_objective = {}
    for a in alerts(prod):
        by_objective[(a.alert, a.severity, a.labels.get("objective"))] = a.to_dict()["annotations"]
    tests = []
    for case in cases:
        objective = case.fired[0][0].get("objective") if case.fired else None
        for s in ("critical", "warning"):
            if (case.alert, s, objective) in by_objective:
                annotations[(case.alert, s)] = by_objective[(case.alert, s, objective)]
        tests.append(_promtool_test(case, dict(annotations)))
    (tmp_path / "rules.yaml").write_text(dump_yaml(dashboards.prometheus_rules(prod)))
    (tmp_path / "test.yaml").write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
                                                        "tests": tests}, sort_keys=False))
    res = promtool("test", "rules", str(tmp_path / "test.yaml"))
    assert res.returncode == 0, (res.stdout + res.stderr)[-6000:]
    assert "SUCCESS" in res.stdout
