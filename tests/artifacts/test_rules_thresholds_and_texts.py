"""Rules details the known-answer data does not reach: the idle-GPU threshold is exactly
observability.idleGpuUtilizationPercent (prod: the default 10 %), through promtool: a GPU at the threshold is
working, one a hair under it is idle; and the SLO alerts' texts name the objective they judge.

DCGM_FI_DEV_GPU_UTIL is a percentage 0-100 (dcgm-exporter etc/default-counters.csv, "GPU utilization (in %)").
"""

from __future__ import annotations

from pathlib import Path

from dashboards.rules import R
from infra.monitoring import from_platform
from infra.synth import load_stack
from telemetry.names import DCGM, KSM
from tests.artifacts.test_rules import _phase, _run_promtool_tests, _sel
from tests.support import exporter_facts as facts


def test_a_gpu_at_the_idle_threshold_works_and_one_just_under_it_idles(tmp_path: Path) -> None:
    cfg = from_platform(load_stack("prod"))
    threshold = cfg.idle_gpu_utilization_percent
    assert threshold == 10.0
    node, pod = "node-a", {"namespace": "search", "pod": "embed-rerank-0"}
    series = {
        _sel(KSM.NODE_LABELS, {"node": node, "label_aifactory_io_pool": "l40s"}): "1x20",
        _sel(facts.NODE_CAPACITY.name, {"node": node, "resource": "nvidia_com_gpu", "unit": "integer"}): "4x20",
        _sel(KSM.POD_LABELS, {**pod, "label_aifactory_io_model": "embed-rerank",
                              "label_aifactory_io_tenant": "search"}): "1x20",
        _sel(KSM.POD_REQUESTS, {**pod, "container": "server", "node": node, "resource": "nvidia_com_gpu",
                                "unit": "integer"}): "4x20",
        **_phase(pod, "Running", "1x20"),
    }
    for gpu, util in (("0", threshold), ("1", threshold - 0.05), ("2", threshold + 30), ("3", 0.0)):
        series[_sel(DCGM.GPU_UTIL, {"gpu": gpu, "Hostname": node, **pod})] = f"{util:g}x20"
    tests = [{"expr": f"sum by (pool) ({record})", "eval_time": "15m",
              "exp_samples": [{"labels": '{pool="l40s"}', "value": value}]}
             for record, value in ((R.POOL_WORKING_GPUS, 2), (R.POOL_ALLOCATED_IDLE_GPUS, 2))]
    _run_promtool_tests(cfg, tmp_path, ("1m", [{"interval": "1m", "input_series": [
        {"series": s, "values": v} for s, v in series.items()], "promql_expr_test": tests}]))


def test_slo_alerts_name_the_objective_they_judge() -> None:
    """An on-call reading a burn alert learns which objective (a workflow's own, or the default for workflows
    without one) and which threshold and target were missed."""
    from dashboards.rules import alerts

    cfg = from_platform(load_stack("prod"))
    text = {(a.alert, a.labels["objective"], a.severity): a.to_dict()["annotations"]["description"]
            for a in alerts(cfg) if a.alert in ("WorkflowLatencyBudgetBurn", "WorkflowErrorBudgetBurn")}
    assert text[("WorkflowLatencyBudgetBurn", "assistant-chat", "critical")] == (
        "Workflow {{ $labels.workflow }} (tenant {{ $labels.tenant }}, workflow assistant-chat) is slower than 10s "
        "(target 99.000% within): {{ $value | humanizePercentage }} of runs missed the SLO over the short window, "
        "enough to spend the 30-day budget within days.")
    assert text[("WorkflowErrorBudgetBurn", "default", "warning")] == (
        "Workflow {{ $labels.workflow }} (tenant {{ $labels.tenant }}, workflows without their own SLO) is failing "
        "(target 99.500% succeed): {{ $value | humanizePercentage }} of runs missed the SLO over the short window, "
        "enough to spend the 30-day budget before the window ends.")


def test_the_kv_cache_alert_says_what_saturation_does_and_what_to_do() -> None:
    """vLLM preempts running requests when its KV cache is full (vLLM docs, "Optimization and Tuning",
    Preemption: KV cache space is insufficient, requests are preempted and recomputed); the on-call reads which
    share of the cache was exceeded for how long, what it causes and the two remedies."""
    from dashboards.rules import alerts

    (alert,) = [a.to_dict() for a in alerts(from_platform(load_stack("prod"))) if a.alert == "ModelKvCacheSaturated"]
    assert alert["annotations"]["description"] == (
        "Model {{ $labels.model }} has used more than 95% of its KV cache for 10 minutes: requests are preempted "
        "or queue; add replicas or cut max model length.")
