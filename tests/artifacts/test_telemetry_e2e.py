"""End to end: a simulated agent with known timings, instrumented by telemetry, its Prometheus endpoint
scraped by a real Prometheus evaluating the stack's recording rules; the compound-latency dashboard's own
queries (dashboards.queries) return the known numbers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import dashboards
import telemetry
from infra.monitoring import from_platform
from infra.synth import load_stack
from telemetry.testing import VirtualClock
from tests.support.prometheus import PrometheusServer

pytestmark = pytest.mark.slow

STACK = "dev"
WORKFLOW = "answer"
MEASURED_RUNS = 3  # after one baseline run that creates every series before Prometheus first scrapes
WAIT_S = 60.0
SCRAPE_SETTLE_S = 2.0  # two scrape/evaluation intervals (1 s each in PrometheusServer)

# One run of the agent, second by second (see agent() below):
#   [0, 0.5] glue (no step) -> other; [0.5, 1.5] planning; [1.5, 3.5] search tool and kb retrieval in
#   parallel ([1.5, 2.5] both: 0.5 s each; [2.5, 3.5] search alone), a weather tool failing at once;
#   [3.5, 6.5] llm; [6.5, 7] glue -> other.
RUN_SECONDS = 7.0
CRITICAL_PATH_S = {"llm": 3.0, "other": 1.0, "planning": 1.0, "retrieval": 0.5, "tool": 1.5}
# histogram_quantile interpolates inside the bucket holding the rank: every run takes 7 s, bucket (5, 7.5].
WORKFLOW_QUANTILES = {"p50": 5 + 2.5 * 0.5, "p95": 5 + 2.5 * 0.95, "p99": 5 + 2.5 * 0.99}
# Step p95 per kind: llm 3 s in (2, 3]; planning and retrieval 1 s in (0.5, 1]; tool: 2 s search and a
# 0 s failed weather call, rank 1.9 of 2 lands in (1, 2] with one below: 1 + 1 * 0.9.
STEP_P95 = {"llm": 2.95, "planning": 0.975, "retrieval": 0.975, "tool": 1.9}


def agent(clock: VirtualClock) -> Callable[[], Any]:
    async def tool(name: str, seconds: float, *, fails: bool = False) -> str | None:
        try:
            with telemetry.step("tool", name):
                await clock.sleep(seconds)
                if fails:
                    raise ConnectionError(f"{name} unreachable")
                return name
        except ConnectionError:
            return None  # the agent carries on without that tool

    @telemetry.step("retrieval", "kb")
    async def retrieve() -> str:
        await clock.sleep(1)
        return "docs"

    @telemetry.workflow(WORKFLOW)
    async def answer() -> str:
        await clock.sleep(0.5)
        with telemetry.step("planning", "plan"):
            await clock.sleep(1)
        await asyncio.gather(tool("search", 2), retrieve(), tool("weather", 0, fails=True))
        async with telemetry.step("llm", "answer", model="llama-3-70b", provider="vllm") as run:
            await clock.sleep(3)
            run.usage(input_tokens=1200, output_tokens=300)
        await clock.sleep(0.5)
        return "done"

    return answer


@pytest.fixture(scope="module")
def stack() -> Any:
    return from_platform(load_stack(STACK))


@pytest.fixture
def instrumented(monkeypatch: pytest.MonkeyPatch, stack: Any) -> Iterator[tuple[telemetry.Installation, str]]:
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", "0")
    tenant = sorted(stack.tenants)[0]
    handle = telemetry.setup(service_name="e2e-agent", tenant=tenant, set_global=False, clock=VirtualClock())
    try:
        yield handle, tenant
    finally:
        handle.shutdown()


def wait_for(describe: str, probe: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {WAIT_S}s waiting for {describe}")


def values(prom: PrometheusServer, expr: str, label: str) -> dict[str, float]:
    return {r["metric"].get(label, ""): float(r["value"][1]) for r in prom.query(expr)}


def test_compound_latency_dashboard_reads_the_known_timings(
        tmp_path: Path, stack: Any, instrumented: tuple[telemetry.Installation, str]) -> None:
    handle, tenant = instrumented
    clock = handle.telemetry.clock
    assert isinstance(clock, VirtualClock) and handle.prometheus_url is not None
    run = agent(clock)
    clock.run(run())  # baseline: every series exists before the first scrape, so all share scrape times

    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump(dashboards.prometheus_rules(stack), sort_keys=False))
    target = handle.prometheus_url.removeprefix("http://").removesuffix("/metrics")
    sel = f'tenant="{tenant}", workflow="{WORKFLOW}"'
    with PrometheusServer(tmp_path / "prom", scrape_targets=[target], rule_files=[rules_file]) as prom:
        count = f"aifactory_workflow_duration_seconds_count{{{sel}}}"
        wait_for("two scrapes of the baseline", lambda: prom.query(f"count_over_time({count}[5m]) >= 2") != [])
        for _ in range(MEASURED_RUNS):
            clock.run(run())
        wait_for("the measured runs to be scraped", lambda: values(prom, count, "workflow") == {WORKFLOW: 4.0})
        scraped_at = float(prom.query(f"timestamp({count})")[0]["value"][1])
        recorded = f'label_replace({{__name__=~"workflow:aifactory_.*", {sel}}}, "name", "$1", "__name__", "(.+)")'
        # A scrape is stamped when it starts and lands when it ends: wait for rule evaluations well after.
        wait_for("the recording rules to run over them",
                 lambda: prom.query(f"min(timestamp({recorded})) > {scraped_at + SCRAPE_SETTLE_S}") != [])

        # The raw series carry exactly what the agent did (names from telemetry/names.py).
        total = RUN_SECONDS * (1 + MEASURED_RUNS)
        assert prom.scalar(f"aifactory_workflow_duration_seconds_sum{{{sel}}}") == pytest.approx(total)
        assert values(prom, f"aifactory_workflow_critical_path_seconds_total{{{sel}}}", "step_kind") == {
            kind: pytest.approx(s * (1 + MEASURED_RUNS)) for kind, s in CRITICAL_PATH_S.items()}
        assert prom.scalar(f'aifactory_step_errors_total{{{sel}, step_name="weather"}}') == 1 + MEASURED_RUNS
        assert prom.scalar(f'gen_ai_client_token_usage_sum{{{sel}, gen_ai_token_type="input"}}') == \
            1200 * (1 + MEASURED_RUNS)

        # The dashboard's own queries, as Grafana sends them with this tenant and workflow selected.
        board = dashboards.build(stack)["compound-latency"]
        panels: dict[str, list[str]] = {}
        for title, expr in dashboards.queries(board, {"tenant": tenant, "workflow": WORKFLOW}):
            panels.setdefault(title, []).append(expr)

        def panel(title: str, label: str, index: int = 0) -> dict[str, float]:
            return values(prom, panels[title][index], label)

        shares = panel("Critical-path share by step kind", "step_kind")
        assert shares == {k: pytest.approx(v / RUN_SECONDS) for k, v in CRITICAL_PATH_S.items()}
        assert sum(shares.values()) == pytest.approx(1.0)
        assert panel("Critical-path seconds per workflow by step kind", "step_kind") == {
            k: pytest.approx(v) for k, v in CRITICAL_PATH_S.items()}
        quantiles = {f"p{q}": panel("Workflow latency p50 / p95 / p99", "workflow", i)[WORKFLOW]
                     for i, q in enumerate(("50", "95", "99"))}
        assert quantiles == {k: pytest.approx(v) for k, v in WORKFLOW_QUANTILES.items()}
        assert panel("Step latency p95 by kind", "step_kind") == {k: pytest.approx(v) for k, v in STEP_P95.items()}
        assert panel("Latency SLO compliance (24h)", "workflow") == {WORKFLOW: pytest.approx(1.0)}
        assert panel("Workflow error ratio", "workflow") == {WORKFLOW: pytest.approx(0.0)}
        errors = prom.query(panels["Step errors by kind"][0])
        assert [(r["metric"]["step_kind"], r["metric"]["error_type"]) for r in errors] == [("tool", "ConnectionError")]
        assert float(errors[0]["value"][1]) > 0
        statuses = prom.query(panels["Workflows completed per second by status"][0])
        assert [(r["metric"]["workflow"], r["metric"]["status"]) for r in statuses] == [(WORKFLOW, "ok")]
