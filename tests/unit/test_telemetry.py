"""Workflow/step instrumentation: spans (GenAI conventions), metrics and critical path, with exact numbers
from a virtual clock, for sync code, decorators and parallel steps under asyncio.gather."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import HistogramDataPoint
from opentelemetry.trace import SpanKind, StatusCode

import telemetry
from telemetry import names
from tests.support.telemetry import Harness, at, harness, labels


@pytest.fixture
def h() -> Iterator[Harness]:
    with harness() as instrumented:
        yield instrumented


# --- spans --------------------------------------------------------------------------------------


def test_serial_workflow_spans_follow_the_genai_conventions(h: Harness) -> None:
    tel, clock = h.tel, h.clock
    tel.critical_path_attributes = True  # the workflow span also carries its critical path
    with tel.workflow("answer", **{"gen_ai.conversation.id": "c-1"}):
        clock.advance(0.5)
        with tel.step("planning", "plan"):
            clock.advance(1)
        with tel.step("retrieval", "kb"):
            clock.advance(0.25)
        with tel.step("llm", "draft", model="llama-3-70b", provider="vllm") as run:
            clock.advance(2)
            run.usage(input_tokens=1200, output_tokens=300)
        with tel.step("tool", "search"):
            clock.advance(1)
        with tel.step("network", "fetch-page"):
            clock.advance(0.25)
    spans = h.spans()
    assert sorted(spans) == ["chat llama-3-70b", "execute_tool search", "invoke_workflow answer",
                             "network fetch-page", "plan plan", "retrieval kb"]
    wf = spans["invoke_workflow answer"]
    assert (wf.kind, wf.start_time, wf.end_time, wf.parent) == (SpanKind.INTERNAL, at(0), at(5), None)
    assert dict(wf.attributes) == {
        "gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": "answer", "gen_ai.conversation.id": "c-1",
        "aifactory.critical_path.llm": 2.0, "aifactory.critical_path.network": 0.25,
        "aifactory.critical_path.other": 0.5, "aifactory.critical_path.planning": 1.0,
        "aifactory.critical_path.retrieval": 0.25, "aifactory.critical_path.tool": 1.0}
    chat = spans["chat llama-3-70b"]
    assert (chat.kind, chat.start_time, chat.end_time) == (SpanKind.CLIENT, at(1.75), at(3.75))
    # The GenAI operation tells the kind (chat, execute_tool, retrieval): no aifactory.step.kind on those spans.
    assert dict(chat.attributes) == {
        "aifactory.step.name": "draft", "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "llama-3-70b", "gen_ai.provider.name": "vllm",
        "gen_ai.usage.input_tokens": 1200, "gen_ai.usage.output_tokens": 300}
    assert dict(spans["execute_tool search"].attributes) == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}
    assert spans["execute_tool search"].kind == SpanKind.INTERNAL
    assert dict(spans["retrieval kb"].attributes) == {
        "gen_ai.operation.name": "retrieval", "gen_ai.data_source.id": "kb"}
    assert dict(spans["plan plan"].attributes) == {  # "plan" is no GenAI operation the conventions define
        "aifactory.step.kind": "planning", "aifactory.step.name": "plan", "gen_ai.operation.name": "plan"}
    assert dict(spans["network fetch-page"].attributes) == {"aifactory.step.kind": "network",
                                                            "aifactory.step.name": "fetch-page"}
    for name, span in spans.items():
        if span is not wf:
            assert span.parent is not None and span.parent.span_id == wf.context.span_id, name
            assert span.context.trace_id == wf.context.trace_id
            assert span.status.status_code == StatusCode.UNSET


def test_workflow_span_carries_no_critical_path_by_default(h: Harness) -> None:
    with h.tel.workflow("plain"):
        h.clock.advance(1)
        with h.tel.step("tool", "search"):
            h.clock.advance(2)
    assert dict(h.spans()["invoke_workflow plain"].attributes) == {
        "gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": "plain"}
    assert h.points(names.CRITICAL_PATH) == {labels(workflow="plain", step_kind="other"): 1.0,
                                             labels(workflow="plain", step_kind="tool"): 2.0}


def test_agent_workflow_and_operation_override(h: Harness) -> None:
    with h.tel.workflow("triage", agent="Triage Agent"):
        with h.tel.step("llm", "embed-ticket", model="bge-m3", operation="embeddings"):
            pass
        with h.tel.step("llm", "no-model"):
            pass
        with h.tel.step("llm", "odd", model="m", operation="execute_tool"):
            pass
    spans = h.spans()
    assert sorted(spans) == ["chat no-model", "embeddings bge-m3", "execute_tool m", "invoke_agent Triage Agent"]
    # An overridden operation keeps the kind implicit only where the processor's table reads it back as this kind.
    assert dict(spans["embeddings bge-m3"].attributes) == {
        "gen_ai.operation.name": "embeddings", "aifactory.step.name": "embed-ticket", "gen_ai.request.model": "bge-m3"}
    assert spans["execute_tool m"].attributes["aifactory.step.kind"] == "llm"
    agent = spans["invoke_agent Triage Agent"].attributes
    assert (agent["gen_ai.operation.name"], agent["gen_ai.agent.name"]) == ("invoke_agent", "Triage Agent")
    assert "gen_ai.workflow.name" not in agent


def test_nested_steps_parent_spans_and_critical_path(h: Harness) -> None:
    tel, clock = h.tel, h.clock
    with tel.workflow("nested"):
        clock.advance(1)
        with tel.step("planning", "outer"):
            clock.advance(1)
            with tel.step("tool", "inner"):
                clock.advance(2)
                with tel.step("retrieval", "innermost"):
                    clock.advance(1)
            clock.advance(3)
    spans = h.spans()
    assert spans["execute_tool inner"].parent.span_id == spans["plan outer"].context.span_id
    assert spans["retrieval innermost"].parent.span_id == spans["execute_tool inner"].context.span_id
    assert h.points(names.CRITICAL_PATH) == {
        labels(workflow="nested", step_kind="other"): 1.0, labels(workflow="nested", step_kind="planning"): 4.0,
        labels(workflow="nested", step_kind="tool"): 2.0, labels(workflow="nested", step_kind="retrieval"): 1.0}
    assert h.points(names.WORKFLOW_STEPS) == {labels(workflow="nested"): (3, 1)}


# --- metrics ------------------------------------------------------------------------------------


def test_serial_workflow_metrics_are_exact(h: Harness) -> None:
    tel, clock = h.tel, h.clock
    for _ in range(2):
        with tel.workflow("answer"):
            with tel.step("llm", "draft", model="m", provider="vllm") as run:
                clock.advance(3)
                run.usage(input_tokens=100, output_tokens=20)
            with tel.step("tool", "search"):
                clock.advance(1.5)
            clock.advance(0.5)
    assert h.points(names.WORKFLOW_DURATION) == {labels(workflow="answer", status="ok"): (10.0, 2)}
    assert h.points(names.STEP_DURATION) == {
        labels(workflow="answer", step_kind="llm", step_name="draft", status="ok"): (6.0, 2),
        labels(workflow="answer", step_kind="tool", step_name="search", status="ok"): (3.0, 2)}
    assert h.points(names.CRITICAL_PATH) == {
        labels(workflow="answer", step_kind="llm"): 6.0, labels(workflow="answer", step_kind="tool"): 3.0,
        labels(workflow="answer", step_kind="other"): 1.0}
    assert h.points(names.WORKFLOW_STEPS) == {labels(workflow="answer"): (4, 2)}
    genai = {"workflow": "answer", "gen_ai.operation.name": "chat", "gen_ai.provider.name": "vllm",
             "gen_ai.request.model": "m"}
    assert h.points(names.GENAI_TOKEN_USAGE) == {
        labels(**genai, **{"gen_ai.token.type": "input"}): (200, 2),
        labels(**genai, **{"gen_ai.token.type": "output"}): (40, 2)}
    assert h.points(names.GENAI_OPERATION_DURATION) == {labels(**genai): (6.0, 2)}
    assert h.points(names.STEP_ERRORS) == {}


def test_histograms_use_the_documented_buckets(h: Harness) -> None:
    with h.tel.workflow("w"):
        with h.tel.step("llm", "x", model="m", provider="p") as run:
            run.usage(input_tokens=1)
    bounds = {m.name: tuple(m.data.data_points[0].explicit_bounds)
              for rm in h.reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics
              if isinstance(m.data.data_points[0], HistogramDataPoint)}
    assert bounds == {
        names.WORKFLOW_DURATION.otel: names.WORKFLOW_BUCKETS_S, names.STEP_DURATION.otel: names.STEP_BUCKETS_S,
        names.WORKFLOW_STEPS.otel: names.STEPS_BUCKETS, names.GENAI_TOKEN_USAGE.otel: names.TOKEN_BUCKETS,
        names.GENAI_OPERATION_DURATION.otel: names.STEP_BUCKETS_S}


# --- asyncio ------------------------------------------------------------------------------------


def test_parallel_steps_under_gather_belong_to_their_own_workflow_and_parent(h: Harness) -> None:
    tel, clock = h.tel, h.clock
    tel.critical_path_attributes = True

    async def tool(name: str, seconds: float) -> str:
        with tel.step("tool", name):
            await clock.sleep(seconds)
        return name

    async def agent(wf: str, suffix: str) -> list[str]:
        async with tel.workflow(wf):
            await clock.sleep(0.5)
            with tel.step("planning", f"plan-{suffix}"):
                found = await asyncio.gather(tool(f"search-{suffix}", 2), tool(f"weather-{suffix}", 1))
            with tel.step("llm", f"answer-{suffix}"):
                await clock.sleep(1)
            return found

    async def main() -> list[list[str]]:
        return await asyncio.gather(agent("alpha", "a"), agent("beta", "b"))

    assert clock.run(main()) == [["search-a", "weather-a"], ["search-b", "weather-b"]]
    spans = h.spans()
    for suffix, wf in (("a", "alpha"), ("b", "beta")):
        root, plan = spans[f"invoke_workflow {wf}"], spans[f"plan plan-{suffix}"]
        assert (root.start_time, root.end_time) == (at(0), at(3.5))
        assert plan.parent.span_id == root.context.span_id
        for tool_name in (f"search-{suffix}", f"weather-{suffix}"):
            span = spans[f"execute_tool {tool_name}"]
            assert span.parent.span_id == plan.context.span_id
            assert span.context.trace_id == root.context.trace_id
        # [0, 0.5] other; [0.5, 1.5] both tools split; [1.5, 2.5] search alone; [2.5, 3.5] llm.
        assert {k: v for k, v in root.attributes.items() if k.startswith("aifactory.")} == {
            "aifactory.critical_path.other": 0.5, "aifactory.critical_path.tool": 2.0,
            "aifactory.critical_path.llm": 1.0}
    assert h.points(names.CRITICAL_PATH) == {labels(workflow=wf, step_kind=k): v for wf in ("alpha", "beta")
                                             for k, v in (("other", 0.5), ("tool", 2.0), ("llm", 1.0))}
    assert h.points(names.STEP_DURATION)[labels(workflow="beta", step_kind="tool", step_name="search-b",
                                                status="ok")] == (2.0, 1)


def test_decorators_wrap_sync_and_async_functions_and_reenter_concurrently(h: Harness) -> None:
    tel, clock = h.tel, h.clock

    @tel.step("tool", "lookup")
    async def lookup(key: str, *, delay: float) -> str:
        await clock.sleep(delay)
        return key.upper()

    @tel.step("other", "parse")
    def parse(text: str) -> list[str]:
        clock.advance(0.25)
        return text.split()

    @tel.workflow("decorated")
    async def run() -> list[str]:
        words = parse("a b")
        return list(await asyncio.gather(*(lookup(w, delay=1) for w in words)))

    assert (lookup.__name__, parse.__name__, run.__name__) == ("lookup", "parse", "run")
    assert clock.run(run()) == ["A", "B"]
    assert h.points(names.STEP_DURATION) == {
        labels(workflow="decorated", step_kind="tool", step_name="lookup", status="ok"): (2.0, 2),
        labels(workflow="decorated", step_kind="other", step_name="parse", status="ok"): (0.25, 1)}
    assert h.points(names.CRITICAL_PATH) == {labels(workflow="decorated", step_kind="other"): 0.25,
                                             labels(workflow="decorated", step_kind="tool"): 1.0}


def test_nested_workflow_steps_count_in_the_outer_critical_path(h: Harness) -> None:
    tel, clock = h.tel, h.clock
    with tel.workflow("outer"):
        with tel.step("planning", "delegate"):
            clock.advance(1)
            with tel.workflow("inner"):
                with tel.step("llm", "sub-answer"):
                    clock.advance(2)
                clock.advance(1)
    cp = h.points(names.CRITICAL_PATH)
    assert cp == {labels(workflow="inner", step_kind="llm"): 2.0, labels(workflow="inner", step_kind="other"): 1.0,
                  labels(workflow="outer", step_kind="planning"): 2.0, labels(workflow="outer", step_kind="llm"): 2.0}
    spans = h.spans()
    assert spans["invoke_workflow inner"].parent.span_id == spans["plan delegate"].context.span_id


def test_steps_outside_a_workflow_are_recorded_under_workflow_none(h: Harness) -> None:
    with h.tel.step("tool", "warmup"):
        h.clock.advance(1)
    assert h.points(names.STEP_DURATION) == {labels(workflow="none", step_kind="tool", step_name="warmup",
                                                    status="ok"): (1.0, 1)}
    assert h.points(names.CRITICAL_PATH) == {}
    assert h.spans()["execute_tool warmup"].parent is None


# --- errors -------------------------------------------------------------------------------------


class ToolFailed(Exception):
    pass


def test_errors_set_status_error_type_and_count_by_kind(h: Harness) -> None:
    tel, clock = h.tel, h.clock
    with tel.workflow("flaky"):
        try:
            with tel.step("tool", "search"):
                clock.advance(1)
                raise ToolFailed("index offline")
        except ToolFailed:
            pass
    with pytest.raises(TimeoutError), tel.workflow("flaky"):
        with tel.step("planning", "plan"), tel.step("llm", "draft", model="m", provider="vllm"):
            clock.advance(2)
            raise TimeoutError("model timed out")
    finished = h.spans_exporter.get_finished_spans()
    tool = next(s for s in finished if s.name == "execute_tool search")
    assert tool.status.status_code == StatusCode.ERROR
    assert tool.status.description == "ToolFailed: index offline"
    assert tool.attributes["error.type"] == f"{__name__}.ToolFailed"
    assert [e.name for e in tool.events] == ["exception"]
    assert tool.events[0].attributes["exception.message"] == "index offline"
    statuses = {s.name: (s.status.status_code, s.attributes.get("error.type")) for s in finished}
    assert [statuses[n] for n in ("chat m", "plan plan")] == [(StatusCode.ERROR, "TimeoutError")] * 2
    workflows = [s for s in finished if s.name == "invoke_workflow flaky"]
    assert [w.status.status_code for w in workflows] == [StatusCode.UNSET, StatusCode.ERROR]

    assert h.points(names.STEP_ERRORS) == {
        labels(workflow="flaky", step_kind="tool", step_name="search", **{"error.type": f"{__name__}.ToolFailed"}): 1,
        labels(workflow="flaky", step_kind="planning", step_name="plan", **{"error.type": "TimeoutError"}): 1,
        labels(workflow="flaky", step_kind="llm", step_name="draft", **{"error.type": "TimeoutError"}): 1}
    assert h.points(names.WORKFLOW_DURATION) == {labels(workflow="flaky", status="ok"): (1.0, 1),
                                                 labels(workflow="flaky", status="error"): (2.0, 1)}
    assert h.points(names.STEP_DURATION)[labels(workflow="flaky", step_kind="tool", step_name="search",
                                                status="error")] == (1.0, 1)
    assert h.points(names.GENAI_OPERATION_DURATION) == {labels(
        workflow="flaky", **{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "vllm",
                             "gen_ai.request.model": "m", "error.type": "TimeoutError"}): (2.0, 1)}


def test_cancelled_parallel_steps_are_errors_and_leave_context_clean(h: Harness) -> None:
    tel, clock = h.tel, h.clock

    async def slow() -> None:
        with tel.step("tool", "slow"):
            await clock.sleep(10)

    async def failing() -> None:
        with tel.step("tool", "failing"):
            await clock.sleep(1)
            raise ToolFailed("boom")

    async def main() -> None:
        with pytest.raises(ExceptionGroup):  # the TaskGroup cancels slow() when failing() raises
            async with tel.workflow("race"):
                async with asyncio.TaskGroup() as group:
                    group.create_task(slow())
                    group.create_task(failing())
        with tel.step("tool", "after"):
            pass

    clock.run(main())
    errors = h.points(names.STEP_ERRORS)
    assert errors == {
        labels(workflow="race", step_kind="tool", step_name="failing", **{"error.type": f"{__name__}.ToolFailed"}): 1,
        labels(workflow="race", step_kind="tool", step_name="slow",
               **{"error.type": "asyncio.exceptions.CancelledError"}): 1}
    assert h.spans()["execute_tool after"].parent is None  # the workflow's context did not leak
    assert h.points(names.CRITICAL_PATH) == {labels(workflow="race", step_kind="tool"): 1.0}
    assert h.points(names.WORKFLOW_DURATION) == {labels(workflow="race", status="error"): (1.0, 1)}


# --- validation and the module-level API --------------------------------------------------------


@pytest.mark.parametrize(("kind", "name"), [("LLM", "x"), ("", "x"), ("tool call", "x"), ("x" * 33, "x")])
def test_bad_step_kind_is_refused_with_the_rule(h: Harness, kind: str, name: str) -> None:
    with pytest.raises(ValueError, match=f"step kind {kind!r} is not allowed: use 1-32 lowercase letters"):
        h.tel.step(kind, name)


def test_custom_kinds_are_allowed_and_named_plainly(h: Harness) -> None:
    with h.tel.workflow("w"), h.tel.step("guardrail", "pii-filter"):
        h.clock.advance(1)
    span = h.spans()["guardrail pii-filter"]
    assert "gen_ai.operation.name" not in span.attributes
    assert h.points(names.CRITICAL_PATH) == {labels(workflow="w", step_kind="guardrail"): 1.0}


@pytest.mark.parametrize(("call", "message"), [
    (lambda tel: tel.step("tool", ""), "step name must be a non-empty string, got ''"),
    (lambda tel: tel.workflow(""), "workflow name must be a non-empty string, got ''"),
    (lambda tel: telemetry.Telemetry(tenant=""), "tenant must be a non-empty string, got ''"),
])
def test_bad_names_are_refused(h: Harness, call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call(h.tel)


def test_module_level_scopes_use_the_installed_telemetry_when_entered(h: Harness) -> None:
    @telemetry.workflow("late-bound")
    def run() -> None:
        with telemetry.step("tool", "t"):
            h.clock.advance(1)

    telemetry.install(h.tel)  # after decoration, as when setup() runs after imports
    try:
        run()
    finally:
        telemetry.install(None)
    assert h.points(names.WORKFLOW_DURATION) == {labels(workflow="late-bound", status="ok"): (1.0, 1)}


def test_default_telemetry_takes_the_tenant_from_resource_attributes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=x,tenant=team%20a")
    telemetry.install(None)
    try:
        assert telemetry.current().tenant == "team a"
    finally:
        telemetry.install(None)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES")
    try:
        assert telemetry.current().tenant == "unknown"
    finally:
        telemetry.install(None)
