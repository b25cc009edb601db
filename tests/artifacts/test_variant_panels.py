"""The variant routing row's new panels against a real Prometheus, with known answers (#15): budget left at step
start, deadline misses, and spend against sending everything to the fastest variant.

The stack: workload `plan` with two variants, plan-int4 (costPerRequest $0.001, slo.e2eSeconds 2) and plan-fp8
(slo 0.5 s, the fastest; its cost derived from requestsPerSecond 0.25 on a dgx-h100 pool priced $36/hour for 8
GPUs: $4.5 per GPU-hour / (0.25 x 3600 requests per hour) = $0.005 per request). Data, counters at constant rates
(so every 5-minute rate is exact), worked by hand:

- Envoy cluster tries (envoy_cluster_upstream_rq_total), over two gateway pods: plan-int4 2 + 1 = 3/s, plan-fp8
  1/s; a plain model cluster `chat` 10/s that no variant panel counts. Spend 3 x 0.001 + 1 x 0.005 = $0.008/s
  = $28.8/hour; all to plan-fp8: 4 x 0.005 = $0.02/s = $72/hour; saving 1 - 28.8/72 = 60%.
- Budget left at step start (aifactory_step_budget_remaining_seconds), workflow plan-task, llm steps 10/s with
  cumulative counts 0 at le 0.25, 1 at 0.5, 2 at 1, 4 at 2, 6 at 3, 10 at 5 and above: p50 is rank 5, in (2, 3]:
  2 + (5 - 4) / (6 - 4) = 2.5 s; p10 is rank 1, in (0.25, 0.5]: 0.5 s. Tool steps 4/s, all in the le="0" bucket
  (started past the deadline): both quantiles 0 (Prometheus returns the upper bound of a first bucket <= 0).
- Deadlines (aifactory_workflow_deadlines_total): plan-task met 1.9/s, missed 0.1/s -> 5% missed; chat-task
  met 1/s, none missed -> 0 (a sample, not a gap).

Linear interpolation inside a bucket and the first-bucket rule: Prometheus' histogram_quantile
(https://prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dashboards
from dashboards.config import ObservabilityConfig, VariantCost
from dashboards.rules import R
from infra.artifacts import dump_yaml
from infra.config import parse
from infra.monitoring import from_platform
from telemetry.names import BUDGET_BUCKETS_S, ENVOY, STEP_BUDGET, WORKFLOW_DEADLINES
from tests.artifacts.test_envoy_variants_live import RAW
from tests.support.prometheus import PrometheusServer, backfill, backfill_rules, promtool
from tests.support.stacks import prod_without_variants

STEP_S = 60
MINUTES = 30
NEEDED = {R.VARIANT_COST, R.VARIANT_REQUESTS, R.VARIANT_SPEND, R.VARIANT_SPEND_ALL_FASTEST, R.STEP_BUDGET_BUCKET,
          R.WF_DEADLINES}


def _raw() -> dict[str, Any]:
    raw = copy.deepcopy(RAW)
    m = {"engine": "vllm", "model": "org/model", "toolCallParser": "none",
         "tenant": "alpha", "pool": "gpu", "workload": "plan"}
    raw["models"] = {
        "plan-int4": {**m, "slo": {"e2eSeconds": 2}, "variant": {"costPerRequest": 0.001}},
        "plan-fp8": {**m, "slo": {"e2eSeconds": 0.5}, "variant": {"requestsPerSecond": 0.25}},
        "chat": {**m, "workload": "chat"},
    }
    raw["gateway"] = {k: v for k, v in raw["gateway"].items() if k != "routing"}
    raw["observability"] = {"prices": {"dgx-h100": 36.0}}
    return raw


@pytest.fixture(scope="module")
def obs() -> ObservabilityConfig:
    return from_platform(parse(_raw(), stack="variants"))


def test_variant_costs_come_from_the_stack_config(obs: ObservabilityConfig) -> None:
    assert obs.variants == (VariantCost("plan", "plan-int4", 0.001, False),
                            VariantCost("plan", "plan-fp8", pytest.approx(0.005, rel=1e-12), True))  # type: ignore[arg-type]
    costs = [r for g in dashboards.prometheus_rules(obs)["groups"] for r in g["rules"]
             if r.get("record") == R.VARIANT_COST]
    assert [(r["expr"], r["labels"]) for r in costs] == [
        ("vector(0.001)", {"workload": "plan", "variant": "plan-int4", "fastest": "false"}),
        (f"vector({4.5 / 900!r})", {"workload": "plan", "variant": "plan-fp8", "fastest": "true"})]


def test_promtool_checks_the_rules_of_a_stack_with_variants(obs: ObservabilityConfig, tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(dump_yaml(dashboards.prometheus_rules(obs)))
    res = promtool("check", "rules", str(path))
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr


def test_a_stack_without_variants_has_no_spend_panels_or_rules() -> None:
    prod = from_platform(prod_without_variants())  # prod's finance workload has variants
    titles = {t for t, _ in dashboards.queries(dashboards.build(prod)["compound-latency"])}
    assert {"Budget left at step start", "Deadline misses"} <= titles
    assert not {"Spend vs all-fastest", "Saving vs all-fastest"} & titles
    recorded = {r.get("record") for g in dashboards.prometheus_rules(prod)["groups"] for r in g["rules"]}
    assert not {R.VARIANT_COST, R.VARIANT_REQUESTS, R.VARIANT_SPEND, R.VARIANT_SPEND_ALL_FASTEST} & recorded


def _counter(lines: list[str], times: list[int], name: str, labels: dict[str, str], per_second: float) -> None:
    key = name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
    lines.extend(f"{key} {per_second * (t - times[0] + 3600)!r} {t}" for t in times)


def _openmetrics(times: list[int]) -> str:
    lines: list[str] = []
    for pod, (int4, fp8) in enumerate(((2.0, 1.0), (1.0, 0.0))):
        envoy = {"namespace": "aifactory-gateway", "pod": f"gateway-{pod}", "job": "aifactory-gateway"}
        for cluster, rate in (("plan-int4", int4), ("plan-fp8", fp8), ("chat", 10.0)):
            _counter(lines, times, ENVOY.RQ_TOTAL, {ENVOY.L_CLUSTER: cluster, **envoy}, rate)
    agent = {"tenant": "alpha", "workflow": "plan-task", "job": "plan-agent"}
    llm = {0.5: 1, 1: 2, 2: 4, 3: 6}  # cumulative per second; 0 below 0.5, 10 from 5
    for kind, total, cumulative in (("llm", 10.0, lambda b: llm.get(b, 0.0 if b < 0.5 else 10.0)),
                                    ("tool", 4.0, lambda b: 4.0)):
        labels = {**agent, "step_kind": kind}
        for b in BUDGET_BUCKETS_S:
            _counter(lines, times, f"{STEP_BUDGET.prom}_bucket", {**labels, "le": repr(float(b))}, cumulative(b))
        _counter(lines, times, f"{STEP_BUDGET.prom}_bucket", {**labels, "le": "+Inf"}, total)
        _counter(lines, times, f"{STEP_BUDGET.prom}_count", labels, total)
        _counter(lines, times, f"{STEP_BUDGET.prom}_sum", labels, total)
    for workflow, met, missed in (("plan-task", 1.9, 0.1), ("chat-task", 1.0, 0.0)):
        wf = {**agent, "workflow": workflow}
        _counter(lines, times, WORKFLOW_DEADLINES.prom, {**wf, "deadline": "met"}, met)
        if missed:
            _counter(lines, times, WORKFLOW_DEADLINES.prom, {**wf, "deadline": "missed"}, missed)
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prom(obs: ObservabilityConfig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer, int]]:
    work = tmp_path_factory.mktemp("variant-panels")
    start = (int(time.time()) - 5 * 3600) // 3600 * 3600  # clear of the head block's last 3 hours
    times = list(range(start, start + MINUTES * 60 + 1, STEP_S))
    tsdb = work / "tsdb"
    backfill(_openmetrics(times), tsdb, workdir=work)
    rules = [r for g in dashboards.prometheus_rules(obs)["groups"] for r in g["rules"] if r.get("record") in NEEDED]
    backfill_rules({"groups": [{"name": "variants", "rules": rules}]}, tsdb, workdir=work, start=start + 600,
                   end=times[-1], interval_s=STEP_S)
    with PrometheusServer(work / "final", tsdb=tsdb) as server:
        yield server, times[-1]


def _panel(obs: ObservabilityConfig, title: str) -> list[str]:
    exprs = [e for t, e in dashboards.queries(dashboards.build(obs)["compound-latency"]) if t == title]
    assert exprs, f"no panel {title!r}"
    return exprs


def _values(prom: tuple[PrometheusServer, int], expr: str, label: str) -> dict[str, float]:
    server, at = prom
    return {r["metric"].get(label, ""): float(r["value"][1]) for r in server.query(expr, at)}


def test_spend_against_all_fastest(obs: ObservabilityConfig, prom: tuple[PrometheusServer, int]) -> None:
    spent, all_fastest = _panel(obs, "Spend vs all-fastest")
    assert _values(prom, spent, "workload") == {"plan": pytest.approx(28.8, rel=1e-9)}
    assert _values(prom, all_fastest, "workload") == {"plan": pytest.approx(72.0, rel=1e-9)}
    [saving] = _panel(obs, "Saving vs all-fastest")
    assert _values(prom, saving, "workload") == {"plan": pytest.approx(0.6, rel=1e-9)}


def test_budget_left_at_step_start(obs: ObservabilityConfig, prom: tuple[PrometheusServer, int]) -> None:
    p50, p10 = _panel(obs, "Budget left at step start")
    assert _values(prom, p50, "step_kind") == {"llm": pytest.approx(2.5, rel=1e-9), "tool": 0.0}
    assert _values(prom, p10, "step_kind") == {"llm": pytest.approx(0.5, rel=1e-9), "tool": 0.0}


def test_deadline_misses_per_workflow(obs: ObservabilityConfig, prom: tuple[PrometheusServer, int]) -> None:
    [missed] = _panel(obs, "Deadline misses")
    assert _values(prom, missed, "workflow") == {"plan-task": pytest.approx(0.05, rel=1e-9), "chat-task": 0.0}
