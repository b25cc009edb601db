"""The per-step path's shortcuts keep the telemetry exact: cached label sets never leak between tenants,
workflows or a workflow that has ended, and the direct use of OpenTelemetry's context variable behaves as the
context API does (same spans and metrics; a failed detach is logged, not raised)."""

from __future__ import annotations

import contextvars
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import context as otel_context
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider, ObservableCounter
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader

import telemetry
from telemetry import instrument, names, scopes, sums
from telemetry.critical_path import StepInterval, critical_path
from telemetry.testing import VirtualClock
from tests.support.telemetry import TENANT, Harness, harness, labels


@pytest.fixture
def h() -> Iterator[Harness]:
    with harness() as instrumented:
        yield instrumented


def _agent(tel: telemetry.Telemetry, h: Harness, workflow: str, seconds: float) -> None:
    with tel.workflow(workflow):
        h.clock.advance(0.5)
        with tel.step("tool", "search"):
            h.clock.advance(seconds)


def _points(h: Harness, metric: names.Metric, tenant: str) -> dict[frozenset[tuple[str, Any]], Any]:
    return {key: value for key, value in h.points(metric).items() if ("tenant", tenant) in key}


def test_label_sets_are_per_tenant_and_per_workflow(h: Harness) -> None:
    other = telemetry.Telemetry(tenant="other", tracer_provider=h.tracer_provider, meter_provider=h.meter_provider,
                                clock=h.clock)
    for tel, workflow, seconds in ((h.tel, "alpha", 1), (other, "alpha", 2), (h.tel, "beta", 3), (other, "beta", 4),
                                   (h.tel, "alpha", 5)):
        _agent(tel, h, workflow, seconds)
    assert _points(h, names.STEP_DURATION, TENANT) == {
        labels(workflow="alpha", step_kind="tool", step_name="search", status="ok"): (6.0, 2),
        labels(workflow="beta", step_kind="tool", step_name="search", status="ok"): (3.0, 1)}
    assert _points(h, names.STEP_DURATION, "other") == {
        frozenset({"tenant": "other", "workflow": "alpha", "step_kind": "tool", "step_name": "search",
                   "status": "ok"}.items()): (2.0, 1),
        frozenset({"tenant": "other", "workflow": "beta", "step_kind": "tool", "step_name": "search",
                   "status": "ok"}.items()): (4.0, 1)}
    assert _points(h, names.CRITICAL_PATH, TENANT) == {
        labels(workflow="alpha", step_kind="tool"): 6.0, labels(workflow="alpha", step_kind="other"): 1.0,
        labels(workflow="beta", step_kind="tool"): 3.0, labels(workflow="beta", step_kind="other"): 0.5}
    assert _points(h, names.CRITICAL_PATH, "other") == {
        frozenset({"tenant": "other", "workflow": w, "step_kind": k}.items()): v
        for w, k, v in (("alpha", "tool", 2.0), ("alpha", "other", 0.5), ("beta", "tool", 4.0), ("beta", "other", 0.5))}
    assert _points(h, names.WORKFLOW_DURATION, TENANT) == {labels(workflow="alpha", status="ok"): (7.0, 2),
                                                          labels(workflow="beta", status="ok"): (3.5, 1)}
    assert _points(h, names.WORKFLOW_STEPS, "other") == {
        frozenset({"tenant": "other", "workflow": w}.items()): (1, 1) for w in ("alpha", "beta")}


def test_module_level_scopes_take_the_labels_of_the_telemetry_installed_when_entered(h: Harness) -> None:
    other = telemetry.Telemetry(tenant="other", tracer_provider=h.tracer_provider, meter_provider=h.meter_provider,
                                clock=h.clock)
    scope = telemetry.step("tool", "search")  # one cached scope, entered under two installed Telemetry objects
    try:
        for tel, seconds in ((h.tel, 1), (other, 2)):
            telemetry.install(tel)
            with telemetry.workflow("shared"), scope:
                h.clock.advance(seconds)
    finally:
        telemetry.install(None)
    assert h.points(names.STEP_DURATION) == {
        labels(workflow="shared", step_kind="tool", step_name="search", status="ok"): (1.0, 1),
        frozenset({"tenant": "other", "workflow": "shared", "step_kind": "tool", "step_name": "search",
                   "status": "ok"}.items()): (2.0, 1)}


def test_a_step_after_its_workflow_ended_is_outside_it(h: Harness) -> None:
    _agent(h.tel, h, "alpha", 1)
    with h.tel.step("tool", "search"):
        h.clock.advance(2)
    with h.tel.step("tool", "search"):  # and again, now that its label set exists
        h.clock.advance(3)
    assert h.points(names.STEP_DURATION) == {
        labels(workflow="alpha", step_kind="tool", step_name="search", status="ok"): (1.0, 1),
        labels(workflow="none", step_kind="tool", step_name="search", status="ok"): (5.0, 2)}
    assert h.points(names.CRITICAL_PATH) == {labels(workflow="alpha", step_kind="tool"): 1.0,
                                             labels(workflow="alpha", step_kind="other"): 0.5}
    assert h.points(names.WORKFLOW_STEPS) == {labels(workflow="alpha"): (1, 1)}


def test_a_failed_workflow_after_a_good_one_gets_the_error_labels(h: Harness) -> None:
    _agent(h.tel, h, "alpha", 1)
    with pytest.raises(RuntimeError), h.tel.workflow("alpha"):
        h.clock.advance(2)
        raise RuntimeError("boom")
    assert h.points(names.WORKFLOW_DURATION) == {labels(workflow="alpha", status="ok"): (1.5, 1),
                                                 labels(workflow="alpha", status="error"): (2.0, 1)}
    assert h.points(names.CRITICAL_PATH) == {labels(workflow="alpha", step_kind="tool"): 1.0,
                                             labels(workflow="alpha", step_kind="other"): 2.5}


def test_the_kit_reads_and_sets_the_context_the_api_does() -> None:
    """With opentelemetry-api 1.45.2's default runtime the step path uses the API's own context variable: what
    the API attaches the kit sees, and what the kit attaches the API sees."""
    assert scopes._CONTEXT_VAR is not None  # the shortcut is in use with the pinned API
    ctx = otel_context.set_value("probe", 1)
    token = otel_context.attach(ctx)
    try:
        assert scopes._get_current() is ctx
        kit_token = scopes._attach(otel_context.set_value("probe", 2))
        assert otel_context.get_value("probe") == 2
        scopes._reset(kit_token)
        assert otel_context.get_current() is ctx
    finally:
        otel_context.detach(token)


def _span_facts(h: Harness) -> dict[str, Any]:
    spans = h.spans()
    ids = {span.context.span_id: name for name, span in spans.items()}
    return {name: (ids.get(span.parent.span_id) if span.parent else None, span.start_time, span.end_time,
                   dict(span.attributes or {})) for name, span in spans.items()}


def _nested_agent(h: Harness) -> None:
    with h.tel.workflow("agent", budget_s=60):
        with h.tel.step("planning", "plan"):
            h.clock.advance(1)
            with h.tel.step("tool", "search"):
                h.clock.advance(2)
        with h.tel.step("llm", "draft", model="m", provider="vllm") as run:
            h.clock.advance(3)
            run.usage(input_tokens=10, output_tokens=5)
        with pytest.raises(KeyError), h.tel.step("retrieval", "kb"):
            h.clock.advance(1)
            raise KeyError("doc")


def test_the_context_api_fallback_gives_the_same_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    with harness() as fast:
        _nested_agent(fast)
        expected_points, expected_spans = fast.all_points(), _span_facts(fast)
    monkeypatch.setattr(scopes, "_get_current", otel_context.get_current)
    monkeypatch.setattr(scopes, "_attach", otel_context.attach)
    monkeypatch.setattr(scopes, "_reset", otel_context.detach)
    with harness() as api:
        _nested_agent(api)
        assert api.all_points() == expected_points
        assert _span_facts(api) == expected_spans
    assert expected_points[names.CRITICAL_PATH.otel] == {
        labels(workflow="agent", step_kind="tool"): 2.0, labels(workflow="agent", step_kind="planning"): 1.0,
        labels(workflow="agent", step_kind="llm"): 3.0, labels(workflow="agent", step_kind="retrieval"): 1.0}


def test_a_step_ended_in_another_context_is_recorded_and_its_failed_detach_logged(
        h: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """As opentelemetry.context.detach: resetting a token in another contextvars.Context fails; that is logged
    on the opentelemetry.context logger and the step is still recorded."""
    with h.tel.workflow("handoff"):
        scope = h.tel.step("tool", "search")
        scope.__enter__()
        h.clock.advance(1)
        elsewhere = contextvars.copy_context()  # holds the step, but its token belongs to this context
        with caplog.at_level(logging.ERROR, logger="opentelemetry.context"):
            elsewhere.run(scope.__exit__, None, None, None)
        assert [r.getMessage() for r in caplog.records if r.name == "opentelemetry.context"] == [
            "Failed to detach context"]
        assert type(telemetry.instrument.current_run()) is telemetry.StepRun  # this context still holds it
        otel_context.detach(telemetry.instrument.current_run()._token)  # type: ignore[union-attr, arg-type]
    assert h.points(names.STEP_DURATION) == {
        labels(workflow="handoff", step_kind="tool", step_name="search", status="ok"): (1.0, 1)}


# --- critical path: summed as steps finish, handed to the SDK at collection ----------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.sampled_from(["llm", "tool", "other"])),
                max_size=6), st.integers(0, 3))
def test_a_serial_chain_summed_as_it_runs_equals_the_sweep(chain: list[tuple[int, int, str]], tail: int) -> None:
    """Sequential top-level steps (gaps and lengths of 0 included, a step kind named like the idle kind too): the
    shares summed as each step ends equal telemetry.critical_path's sweep over the same intervals."""
    with harness() as h:
        start = h.clock()
        intervals = []
        with h.tel.workflow("chain"):
            for seq, (gap, length, kind) in enumerate(chain):
                h.clock.advance(gap)
                with h.tel.step(kind, f"s{seq}"):
                    began = h.clock()
                    h.clock.advance(length)
                intervals.append(StepInterval(kind, began, h.clock(), seq))
            h.clock.advance(tail)
        expected = critical_path(intervals, start=start, end=h.clock())
        assert h.points(names.CRITICAL_PATH) == {labels(workflow="chain", step_kind=kind): ns / 1e9
                                                 for kind, ns in expected.items()}


def test_a_workflow_adds_its_shares_under_the_lock_the_collection_takes(h: Harness) -> None:
    """Ending a workflow changes the shared totals only under their lock (the one a collection snapshots them
    under): while another thread holds it, the workflow's end waits; released, its shares are all there."""
    totals = sums.sums_of(h.meter_provider.get_meter(instrument.INSTRUMENTATION_NAME), names.CRITICAL_PATH)
    _agent(h.tel, h, "locked", 1)  # the label sets exist: the second run's end only adds
    done = threading.Event()

    def second_run() -> None:
        _agent(h.tel, h, "locked", 2)
        done.set()

    with totals.lock:
        thread = threading.Thread(target=second_run)
        thread.start()
        assert not done.wait(timeout=0.3)  # blocked on the lock, not finished
    thread.join(timeout=10)
    assert done.is_set()
    assert h.points(names.CRITICAL_PATH) == {labels(workflow="locked", step_kind="tool"): 3.0,
                                             labels(workflow="locked", step_kind="other"): 1.0}


def test_two_telemetry_objects_with_one_label_set_add_to_one_total(h: Harness) -> None:
    """Two Telemetry objects of the same tenant on one meter share the total of each attribute set (the SDK
    collects one callback per instrument name): neither replaces the other's, whichever ends a workflow first."""
    twin = telemetry.Telemetry(tenant=TENANT, tracer_provider=h.tracer_provider, meter_provider=h.meter_provider,
                               clock=h.clock)
    for tel, seconds in ((h.tel, 1), (twin, 2), (h.tel, 4)):
        _agent(tel, h, "shared", seconds)
    assert h.points(names.CRITICAL_PATH) == {labels(workflow="shared", step_kind="tool"): 7.0,
                                             labels(workflow="shared", step_kind="other"): 1.5}


def test_critical_path_is_a_monotonic_sum_with_delta_and_cumulative_readers() -> None:
    """The shares export as a synchronous counter's would: a monotonic Sum, cumulative by default, and per
    collection interval for a reader that prefers delta temporality (what OTLP exporters may ask for)."""
    cumulative = InMemoryMetricReader()
    delta = InMemoryMetricReader(preferred_temporality={ObservableCounter: AggregationTemporality.DELTA})
    provider = MeterProvider(metric_readers=[cumulative, delta])
    clock = VirtualClock()
    tel = telemetry.Telemetry(tenant=TENANT, meter_provider=provider, clock=clock)

    def run_and_collect() -> list[tuple[float, bool, AggregationTemporality]]:
        with tel.workflow("w"), tel.step("tool", "search"):
            clock.advance(2)
        out = []
        for reader in (cumulative, delta):
            data = reader.get_metrics_data()
            sums = [m.data for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
                    if m.name == names.CRITICAL_PATH.otel]
            out += [(p.value, s.is_monotonic, s.aggregation_temporality) for s in sums for p in s.data_points]
        return out

    try:
        assert run_and_collect() == [(2.0, True, AggregationTemporality.CUMULATIVE),
                                     (2.0, True, AggregationTemporality.DELTA)]
        assert run_and_collect() == [(4.0, True, AggregationTemporality.CUMULATIVE),
                                     (2.0, True, AggregationTemporality.DELTA)]
    finally:
        provider.shutdown()


def _shares(reader: InMemoryMetricReader, tenant: str) -> dict[tuple[str, str], float]:
    data = reader.get_metrics_data()
    return {(p.attributes["workflow"], p.attributes["step_kind"]): p.value
            for rm in (data.resource_metrics if data else ()) for sm in rm.scope_metrics for m in sm.metrics
            if m.name == names.CRITICAL_PATH.otel for p in m.data.data_points if p.attributes["tenant"] == tenant}


def test_a_clock_stepped_back_never_takes_from_the_critical_path() -> None:
    """The default clock is the wall clock: stepped back inside a step (end before start), that step owns nothing
    and the exported sum never decreases (a decrease reads as a counter reset in Prometheus); a workflow whose end
    is before its start owns nothing and still ends its span."""
    s = 10**9
    times = iter([0, 1 * s, 3 * s, 4 * s,  # workflow [0, 4], tool step [1, 3]
                  10 * s, 11 * s, 9 * s, 12 * s,  # workflow [10, 12], tool step "[11, 9]": stepped back
                  20 * s, 21 * s, 22 * s, 19 * s])  # workflow "[20, 19]"
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    tel = telemetry.Telemetry(tenant=TENANT, meter_provider=provider, clock=lambda: next(times))
    try:
        seen = []
        for _ in range(3):
            with tel.workflow("w"), tel.step("tool", "search"):
                pass
            seen.append(_shares(reader, TENANT))
    finally:
        provider.shutdown()
    assert seen == [{("w", "tool"): 2.0, ("w", "other"): 2.0},
                    {("w", "tool"): 2.0, ("w", "other"): 4.0},  # [10, 12] all "other": the step is inverted
                    {("w", "tool"): 2.0, ("w", "other"): 4.0}]


def test_a_step_ending_in_a_worker_thread_while_its_workflow_ends_leaves_the_workflow_whole(h: Harness) -> None:
    """A step running in a worker thread (its context copied in) is paused inside its end, after it saw the
    workflow still open, while the workflow ends in the main thread; then it finishes. The workflow's end is not
    disturbed (no 'dictionary changed size'), its span ends, and its shares are its own: the worker's step, from
    another thread, left the serial chain to the sweep."""
    go, paused = threading.Event(), threading.Event()

    class PausingRecord:  # the worker's step-duration record: where it is paused
        def __init__(self, histogram: Any) -> None:
            self.histogram = histogram

        def record(self, *args: Any) -> None:
            if threading.current_thread() is not threading.main_thread():
                paused.set()
                go.wait(5)
            self.histogram.record(*args)

    h.tel._step_duration = PausingRecord(h.tel._step_duration)  # type: ignore[assignment]

    def worker() -> None:
        with h.tel.step("tool", "background"):
            h.clock.advance(1)

    with h.tel.workflow("w"):
        with h.tel.step("llm", "first"):
            h.clock.advance(1)
        thread = threading.Thread(target=contextvars.copy_context().run, args=(worker,))
        thread.start()
        assert paused.wait(5)
        h.clock.advance(1)
    go.set()
    thread.join(5)
    assert "invoke_workflow w" in h.spans()
    # [0, 1] llm; the worker's step [1, 2] ended after its workflow did: outside it, as any late step is.
    assert h.points(names.CRITICAL_PATH) == {labels(workflow="w", step_kind="llm"): 1.0,
                                             labels(workflow="w", step_kind="other"): 2.0}


def test_a_step_from_another_thread_leaves_the_serial_chain_to_the_sweep(h: Harness) -> None:
    """Only the workflow's own thread sums the chain (no lock on the per-step path): a step ended in a worker
    thread, even one that starts after the last step ended, hands the workflow to the sweep, with the same shares."""
    def worker() -> None:
        with h.tel.step("tool", "in-a-thread"):
            h.clock.advance(2)

    with h.tel.workflow("w") as run:
        with h.tel.step("llm", "first"):
            h.clock.advance(1)
        assert run.serial == {"llm": 1_000_000_000}
        thread = threading.Thread(target=contextvars.copy_context().run, args=(worker,))
        thread.start()
        thread.join(5)
        assert run.serial is None
        h.clock.advance(0.5)
    assert h.points(names.CRITICAL_PATH) == {labels(workflow="w", step_kind="llm"): 1.0,
                                             labels(workflow="w", step_kind="tool"): 2.0,
                                             labels(workflow="w", step_kind="other"): 0.5}


def test_the_api_placeholder_meter_is_known() -> None:
    """opentelemetry-api's placeholder meter (no MeterProvider set yet) is where the kit expects it; an upgrade
    that moves it fails here rather than losing sums (see the next test)."""
    from opentelemetry.metrics._internal import _ProxyMeterProvider

    assert sums.placeholder(_ProxyMeterProvider().get_meter("x"))
    assert not sums.placeholder(metrics.NoOpMeterProvider().get_meter("x"))
    assert not sums.placeholder(MeterProvider().get_meter("x"))


def test_telemetry_made_before_the_meter_provider_is_set_adds_to_the_real_one(tmp_path: Any) -> None:
    """A Telemetry made over the global provider before one is set (telemetry.current() or a per-tenant
    Telemetry at import time), then setup()'s order (set the global provider, then make the installed Telemetry):
    every tenant's critical path reaches the real provider (before, the first placeholder's observable counter
    took the name and the installed Telemetry's shares were never exported). What ran before the provider was
    set is dropped, as the API drops measurements then. A subprocess: a global provider is set once per process."""
    script = tmp_path / "early.py"
    script.write_text(
        "from opentelemetry import metrics\n"
        "from opentelemetry.sdk.metrics import MeterProvider\n"
        "from opentelemetry.sdk.metrics.export import InMemoryMetricReader\n"
        "import telemetry\n"
        "from telemetry.testing import VirtualClock\n"
        "clock = VirtualClock()\n"
        "def run(tel, seconds):\n"
        "    with tel.workflow('w', budget_s=60), tel.step('tool', 'search'):\n"
        "        clock.advance(seconds)\n"
        "early = telemetry.Telemetry(tenant='early', clock=clock)\n"
        "run(early, 1)  # no provider yet: dropped\n"
        "reader = InMemoryMetricReader()\n"
        "provider = MeterProvider(metric_readers=[reader])\n"
        "metrics.set_meter_provider(provider)\n"
        "late = telemetry.Telemetry(tenant='late', meter_provider=provider, clock=clock)\n"
        "run(late, 2); run(early, 3)\n"
        "data = reader.get_metrics_data()\n"
        "for m in sorted((m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics\n"
        "                 if m.name.startswith('aifactory.workflow.') and 'duration' not in m.name\n"
        "                 and 'steps' not in m.name), key=lambda m: m.name):\n"
        "    for p in sorted(m.data.data_points, key=lambda p: sorted(p.attributes.items())):\n"
        "        print(m.name, p.attributes['tenant'], p.attributes.get('step_kind', p.attributes.get('deadline')),"
        " p.value)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(instrument.__file__).resolve().parents[1])}
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env,
                         check=False)
    assert (res.returncode, res.stderr) == (0, "")
    assert res.stdout.splitlines() == [
        "aifactory.workflow.critical_path early tool 3.0",
        "aifactory.workflow.critical_path late tool 2.0",
        "aifactory.workflow.deadlines early met 1",
        "aifactory.workflow.deadlines late met 1"]
