"""GenAiSpanProcessor's reading of other instrumentations' spans, with spans shaped as each convention has them
(the real frameworks and instrumentations: tests/unit/test_telemetry_frameworks.py). Exact numbers: every span
gets explicit times from the harness's virtual clock.

Sources of the attribute values (the conventions at the pinned versions):
- OTel GenAI semconv, gen_ai.operation.name (opentelemetry-semantic-conventions 0.66b2,
  opentelemetry/semconv/_incubating/attributes/gen_ai_attributes.py: GenAiOperationNameValues);
- OpenLLMetry: opentelemetry-semantic-conventions-ai 0.5.1, opentelemetry/semconv_ai/__init__.py
  (TraceloopSpanKindValues; GenAICustomOperationName.VECTOR_DB_RETRIEVE = "vector_db_retrieve");
- OpenInference: openinference-semantic-conventions 0.1.42, openinference/semconv/trace/__init__.py
  (SpanAttributes.OPENINFERENCE_SPAN_KIND, OpenInferenceSpanKindValues, LLM_TOKEN_COUNT_PROMPT/COMPLETION).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry import trace
from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import GenAiOperationNameValues
from opentelemetry.semconv_ai import GenAICustomOperationName, TraceloopSpanKindValues
from opentelemetry.semconv_ai import SpanAttributes as LegacySpanAttributes
from opentelemetry.trace import Status, StatusCode

import telemetry
import telemetry.genai_spans
import telemetry.runs
from telemetry import names
from tests.support.telemetry import Harness, harness, labels

S = 10**9
OI_KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
# What an OpenInference LLM span that called the model carries besides its kind (messages sent, tokens): one that
# shows no call is framework code around the call (LlamaIndex's _prepare_chat_with_tools), no step.
SENT = {f"{SpanAttributes.LLM_INPUT_MESSAGES}.0.message.role": "user"}


@contextmanager
def processed() -> Iterator[Harness]:
    with harness() as h:
        h.tracer_provider.add_span_processor(telemetry.GenAiSpanProcessor(h.tel))
        yield h


class Spans:
    """Spans of a foreign instrumentation with the harness's virtual times; attributes set when they end, as
    OpenInference does."""

    def __init__(self, h: Harness, scope: str = "some.instrumentation") -> None:
        self.h = h
        self.tracer = h.tracer_provider.get_tracer(scope)

    @contextmanager
    def span(self, name: str, seconds: float = 0.0, at_end: dict[str, Any] | None = None,
             at_start: dict[str, Any] | None = None, error: str | None = None) -> Iterator[trace.Span]:
        span = self.tracer.start_span(name, attributes=at_start, start_time=self.h.clock())
        with trace.use_span(span, end_on_exit=False):
            yield span
        self.h.clock.advance(seconds)
        span.set_attributes(at_end or {})
        if error is not None:
            span.record_exception(RuntimeError("boom"), attributes={"exception.type": error})
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=self.h.clock())


def kinds(h: Harness) -> dict[tuple[str, str, str], tuple[float, int]]:
    return {(dict(k)["workflow"], dict(k)["step_kind"], dict(k)["step_name"]): v
            for k, v in h.points(names.STEP_DURATION).items()}


def test_kinds_set_only_when_spans_end_are_read() -> None:
    """OpenInference writes openinference.span.kind when a span ends: decided at start, nothing was recorded."""
    with processed() as h:
        s = Spans(h)
        with s.span("support", at_end={OI_KIND: "AGENT", SpanAttributes.AGENT_NAME: "support"}):
            h.clock.advance(0.5)
            with s.span("ChatOpenAI", 1.0, at_end={OI_KIND: "LLM", SpanAttributes.LLM_MODEL_NAME: "m",
                                                   SpanAttributes.LLM_TOKEN_COUNT_PROMPT: 7,
                                                   SpanAttributes.LLM_TOKEN_COUNT_COMPLETION: 3}):
                pass
    assert h.points(names.CRITICAL_PATH) == {labels(workflow="support", step_kind="other"): 0.5,
                                             labels(workflow="support", step_kind="llm"): 1.0}
    assert kinds(h) == {("support", "llm", "m"): (1.0, 1)}
    usage = {dict(k)["gen_ai.token.type"]: v for k, v in h.points(names.GENAI_TOKEN_USAGE).items()}
    assert usage == {"input": (7, 1), "output": (3, 1)}


ROLES = [  # (attribute, value as the convention's own module spells it, the kit's step kind)
    ("gen_ai.operation.name", GenAiOperationNameValues.CHAT.value, "llm"),
    ("gen_ai.operation.name", GenAiOperationNameValues.TEXT_COMPLETION.value, "llm"),
    ("gen_ai.operation.name", GenAiOperationNameValues.GENERATE_CONTENT.value, "llm"),
    ("gen_ai.operation.name", GenAiOperationNameValues.EMBEDDINGS.value, "llm"),
    ("gen_ai.operation.name", GenAiOperationNameValues.EXECUTE_TOOL.value, "tool"),
    ("gen_ai.operation.name", "retrieval", "retrieval"),
    ("gen_ai.operation.name", GenAICustomOperationName.VECTOR_DB_RETRIEVE.value, "retrieval"),
    (OI_KIND, OpenInferenceSpanKindValues.LLM.value, "llm"),
    (OI_KIND, OpenInferenceSpanKindValues.EMBEDDING.value, "llm"),
    (OI_KIND, OpenInferenceSpanKindValues.TOOL.value, "tool"),
    (OI_KIND, OpenInferenceSpanKindValues.RETRIEVER.value, "retrieval"),
    (OI_KIND, OpenInferenceSpanKindValues.RERANKER.value, "retrieval"),
    ("traceloop.span.kind", TraceloopSpanKindValues.TOOL.value, "tool"),
]
WORKFLOW_ROLES = [
    ("gen_ai.operation.name", GenAiOperationNameValues.INVOKE_AGENT.value),
    ("gen_ai.operation.name", "invoke_workflow"),
    (OI_KIND, OpenInferenceSpanKindValues.AGENT.value),
    (OI_KIND, OpenInferenceSpanKindValues.CHAIN.value),
    ("traceloop.span.kind", TraceloopSpanKindValues.WORKFLOW.value),
    ("traceloop.span.kind", TraceloopSpanKindValues.AGENT.value),
]


@pytest.mark.parametrize(("attribute", "value", "kind"), ROLES)
@pytest.mark.parametrize(("workflow_attribute", "workflow_value"), WORKFLOW_ROLES)
def test_step_and_workflow_mapping(attribute: str, value: str, kind: str, workflow_attribute: str,
                                   workflow_value: str) -> None:
    with processed() as h:
        s = Spans(h)
        with s.span("run", at_end={workflow_attribute: workflow_value, "gen_ai.agent.name": "a"}):
            with s.span("step", 2.0, at_end={attribute: value, **(SENT if value == "LLM" else {})}):
                pass
    assert h.points(names.CRITICAL_PATH) == {labels(workflow="a", step_kind=kind): 2.0}
    assert set(telemetry.genai_spans.SPAN_ROLES[workflow_attribute].items()) >= {(workflow_value, "workflow")}


@pytest.mark.parametrize("value", [OpenInferenceSpanKindValues.GUARDRAIL.value, "execute_task",
                                   TraceloopSpanKindValues.TASK.value])
def test_other_spans_are_transparent(value: str) -> None:
    """A framework's own spans (a graph node, a task, a guardrail) are no step: their children count as theirs."""
    attribute = "traceloop.span.kind" if value == "task" else (
        "gen_ai.operation.name" if value == "execute_task" else OI_KIND)
    with processed() as h:
        s = Spans(h)
        with s.span("run", at_end={OI_KIND: "AGENT", "agent.name": "a"}):
            with s.span("node", 0.25, at_end={attribute: value}):
                with s.span("tool", 1.0, at_end={OI_KIND: "TOOL", "tool.name": "t"}):
                    pass
    assert h.points(names.CRITICAL_PATH) == {labels(workflow="a", step_kind="other"): 0.25,
                                             labels(workflow="a", step_kind="tool"): 1.0}


def test_nested_agent_spans_are_one_workflow_named_by_the_agent() -> None:
    """OpenInference on the Agents SDK: "Agent workflow" AGENT > "Agent workflow" CHAIN > the agent (AGENT, agent.name)
    (openinference-instrumentation-openai-agents 2.6.0, _processor.py: on_trace_start and AgentSpanData)."""
    with processed() as h:
        s = Spans(h)
        with s.span("Agent workflow", at_end={OI_KIND: "AGENT"}), s.span("Agent workflow", at_end={OI_KIND: "CHAIN"}):
            with s.span("support", 0.5, at_end={OI_KIND: "AGENT", "agent.name": "support"}):
                with s.span("generation", 1.0, at_end={OI_KIND: "LLM", "llm.model_name": "m", **SENT}):
                    pass
    assert h.points(names.WORKFLOW_DURATION) == {labels(workflow="support", status="ok"): (1.5, 1)}
    assert h.points(names.CRITICAL_PATH) == {labels(workflow="support", step_kind="other"): 0.5,
                                             labels(workflow="support", step_kind="llm"): 1.0}


def test_a_kit_step_under_an_instrumented_tool_nests_in_it() -> None:
    """A framework's tool wraps the team's own telemetry.step: recorded once, inside the tool, in its workflow."""
    with processed() as h:
        s = Spans(h)
        with s.span("agent", at_end={OI_KIND: "AGENT", "agent.name": "a"}):
            with s.span("lookup", 0.5, at_end={OI_KIND: "TOOL", "tool.name": "lookup"}):
                with h.tel.step("retrieval", "kb") as step:
                    h.clock.advance(2.0)
                    with s.span("embed", 1.0, at_end={OI_KIND: "EMBEDDING", "embedding.model_name": "e"}):
                        pass
                    step.usage(input_tokens=5)
    assert kinds(h) == {("a", "tool", "lookup"): (3.5, 1), ("a", "retrieval", "kb"): (3.0, 1),
                        ("a", "llm", "e"): (1.0, 1)}
    assert h.points(names.CRITICAL_PATH) == {labels(workflow="a", step_kind="tool"): 0.5,
                                             labels(workflow="a", step_kind="retrieval"): 2.0,
                                             labels(workflow="a", step_kind="llm"): 1.0}
    assert [dict(k)["gen_ai.token.type"] for k in h.points(names.GENAI_TOKEN_USAGE)] == ["input"]


def test_a_failed_span_names_its_exception() -> None:
    with processed() as h:
        s = Spans(h)
        with s.span("agent", at_end={OI_KIND: "AGENT", "agent.name": "a"}, error="app.Timeout"):
            with s.span("tool", 1.0, at_end={OI_KIND: "TOOL", "tool.name": "t"}, error="app.Timeout"):
                pass
    assert h.points(names.STEP_ERRORS) == {labels(workflow="a", step_kind="tool", step_name="t",
                                                  **{"error.type": "app.Timeout"}): 1}
    assert h.points(names.WORKFLOW_DURATION) == {labels(workflow="a", status="error"): (1.0, 1)}


@contextmanager
def warnings_of(logger: str) -> Iterator[list[str]]:
    records: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger(logger).addHandler(handler)
    try:
        yield records
    finally:
        logging.getLogger(logger).removeHandler(handler)


def test_agent_spans_without_a_workflow_are_reported_once() -> None:
    with processed() as h, warnings_of("telemetry.genai_spans") as logged:
        s = Spans(h)
        for _ in range(2):
            with s.span("ChatOpenAI", 1.0, at_end={OI_KIND: "LLM", "llm.model_name": "m",
                                                   SpanAttributes.LLM_TOKEN_COUNT_PROMPT: 1}):
                pass
            with s.span("guard", 1.0, at_end={OI_KIND: "GUARDRAIL"}):
                pass
    assert kinds(h) == {("none", "llm", "m"): (2.0, 2)}
    assert h.points(names.WORKFLOW_DURATION) == {}
    assert len(logged) == 2, logged  # each reason once: steps under no workflow; spans that are no step
    assert "openinference.span.kind=LLM" in logged[0] and "workflow 'none'" in logged[0]
    assert "openinference.span.kind=GUARDRAIL" in logged[1] and "nothing recorded" in logged[1]


def test_a_trace_too_large_is_reported_not_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry.genai_spans, "DEFAULT_MAX_TRACE_SPANS", 2)
    with processed() as h, warnings_of("telemetry.genai_spans") as logged:
        s = Spans(h)
        with s.span("agent", at_end={OI_KIND: "AGENT", "agent.name": "a"}):
            for _ in range(3):
                with s.span("tool", 1.0, at_end={OI_KIND: "TOOL", "tool.name": "t"}):
                    pass
    assert h.points(names.STEP_DURATION) == {}
    assert len(logged) == 1 and "more than 2 spans" in logged[0]
    assert telemetry.runs._foreign_runs == {}  # nothing kept after the root ended


def test_a_kit_workflow_inside_an_instrumented_agent_is_its_own() -> None:
    with processed() as h:
        s = Spans(h)
        with s.span("agent", at_end={OI_KIND: "AGENT", "agent.name": "outer"}):
            with s.span("tool", 0.5, at_end={OI_KIND: "TOOL", "tool.name": "t"}):
                with h.tel.workflow("inner"), h.tel.step("llm", "m", model="m"):
                    h.clock.advance(1.0)
    assert h.points(names.WORKFLOW_DURATION) == {labels(workflow="outer", status="ok"): (1.5, 1),
                                                 labels(workflow="inner", status="ok"): (1.0, 1)}
    assert h.points(names.CRITICAL_PATH)[labels(workflow="outer", step_kind="tool")] == 1.5


@pytest.mark.parametrize(("input_attribute", "output_attribute"), [
    ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"),  # semconv
    (SpanAttributes.LLM_TOKEN_COUNT_PROMPT, SpanAttributes.LLM_TOKEN_COUNT_COMPLETION),  # OpenInference
    (LegacySpanAttributes.LLM_USAGE_PROMPT_TOKENS, LegacySpanAttributes.LLM_USAGE_COMPLETION_TOKENS),  # OpenLLMetry
])
def test_tokens_from_each_conventions_attributes(input_attribute: str, output_attribute: str) -> None:
    with processed() as h:
        s = Spans(h)
        with s.span("agent", at_end={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}):
            with s.span("chat m", 1.0, at_end={"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                                               input_attribute: 11, output_attribute: 4}):
                pass
    usage = {dict(k)["gen_ai.token.type"]: v for k, v in h.points(names.GENAI_TOKEN_USAGE).items()}
    assert usage == {"input": (11, 1), "output": (4, 1)}


def test_spans_still_open_when_the_root_ends_are_reported_and_forgotten() -> None:
    with processed() as h, warnings_of("telemetry.genai_spans") as logged:
        s = Spans(h)
        with s.span("agent", 1.0, at_end={OI_KIND: "AGENT", "agent.name": "a"}):
            tool = s.tracer.start_span("late", start_time=h.clock())
        tool.set_attributes({OI_KIND: "TOOL", "tool.name": "late"})
        tool.end(end_time=h.clock())
    assert h.points(names.WORKFLOW_DURATION) == {labels(workflow="a", status="ok"): (1.0, 1)}
    assert kinds(h) == {}
    still_open = [line for line in logged if "still open" in line]
    assert still_open == [line for line in logged if "1 span(s) of a local trace were still open when its root "
                          "'agent' ended" in line] and len(still_open) == 1
    assert telemetry.runs._foreign_runs == {}


def test_one_model_call_is_one_llm_step_however_many_spans_it_takes() -> None:
    """LlamaIndex under OpenInference (openinference-instrumentation-llama-index 4.6.1: every span of its LLM object
    is an LLM span): _prepare_chat_with_tools, which sends nothing, then the call itself, whose LLM span may hold
    another of the same instrumentation (an outer and an inner achat, only the inner with the tokens). One llm step
    per call (here the inner span: the outer shows no call), its tokens counted once, no "no token counts"
    report."""
    with processed() as h, warnings_of("telemetry.genai_spans") as logged:
        s = Spans(h, "openinference.instrumentation.llama_index")
        model = {SpanAttributes.LLM_MODEL_NAME: "m", SpanAttributes.LLM_PROVIDER: "openai"}
        with s.span("FunctionAgent.run", 0.25, at_end={OI_KIND: "CHAIN"}):
            for prompt in (100, 300):
                with s.span("BaseWorkflowAgent.run_agent_step", at_end={OI_KIND: "CHAIN"}):
                    with s.span("OpenAI._prepare_chat_with_tools", 0.5, at_end={OI_KIND: "LLM", **model,
                                                                                 "input.value": "{}"}):
                        pass
                    with s.span("OpenAI.achat", 0.125, at_end={OI_KIND: "LLM", **model}):
                        with s.span("OpenAI.achat", 1.0, at_end={
                                OI_KIND: "LLM", **model, **SENT, SpanAttributes.LLM_TOKEN_COUNT_PROMPT: prompt,
                                SpanAttributes.LLM_TOKEN_COUNT_COMPLETION: 20}):
                            pass
    workflow = "FunctionAgent.run"
    assert kinds(h) == {(workflow, "llm", "m"): (2.0, 2)}
    assert h.points(names.CRITICAL_PATH) == {labels(workflow=workflow, step_kind="llm"): 2.0,
                                             labels(workflow=workflow, step_kind="other"): 1.5}
    tokens = {dict(k)["gen_ai.token.type"]: v for k, v in h.points(names.GENAI_TOKEN_USAGE).items()}
    assert tokens == {"input": (400, 2), "output": (40, 2)}
    assert h.points(names.WORKFLOW_STEPS) == {labels(workflow=workflow): (2, 1)}
    assert [line for line in logged if "token" in line] == []


def test_the_outer_span_of_a_call_that_shows_it_keeps_its_own_tokens() -> None:
    """Both spans of one call show it (the outer its messages, the inner its tokens too): still one step, the
    outer's own values first and the inner's filling what it lacks."""
    with processed() as h:
        s = Spans(h, "openinference.instrumentation.llama_index")
        with s.span("run", at_end={OI_KIND: "AGENT", "agent.name": "a"}):
            with s.span("OpenAI.achat", 0.5, at_end={OI_KIND: "LLM", SpanAttributes.LLM_MODEL_NAME: "m", **SENT,
                                                     SpanAttributes.LLM_TOKEN_COUNT_PROMPT: 7}):
                with s.span("OpenAI.achat", 1.0, at_end={OI_KIND: "LLM", SpanAttributes.LLM_TOKEN_COUNT_PROMPT: 9,
                                                         SpanAttributes.LLM_TOKEN_COUNT_COMPLETION: 3}):
                    pass
        with s.span("run", at_end={OI_KIND: "AGENT", "agent.name": "b"}):  # two instrumentations: two steps
            with s.span("generation", 0.5, at_end={OI_KIND: "LLM", **SENT}):
                with Spans(h, "other.instrumentation").span("chat m", 1.0, at_end={"gen_ai.operation.name": "chat"}):
                    pass
    assert kinds(h) == {("a", "llm", "m"): (1.5, 1), ("b", "llm", "generation"): (1.5, 1),
                        ("b", "llm", "m"): (1.0, 1)}
    tokens = {(dict(k)["workflow"], dict(k)["gen_ai.token.type"]): v
              for k, v in h.points(names.GENAI_TOKEN_USAGE).items()}
    assert tokens == {("a", "input"): (7, 1), ("a", "output"): (3, 1)}


def test_an_openllmetry_task_that_names_a_tool_is_a_tool_step() -> None:
    """OpenLLMetry's LlamaIndex instrumentation (opentelemetry-instrumentation-llamaindex 0.62.4,
    dispatcher_wrapper.py) runs each tool call as a task span with tool.name (set when it starts) around the
    tool's own task span; a task naming no tool stays the framework's own code."""
    with processed() as h:
        s = Spans(h, "opentelemetry.instrumentation.llamaindex")
        task = {"traceloop.span.kind": TraceloopSpanKindValues.TASK.value}
        with s.span("FunctionAgent.workflow", 0.25, at_start={"traceloop.span.kind": "workflow"}):
            with s.span("BaseWorkflowAgent.task", 0.125, at_start=task):
                pass
            with s.span("BaseWorkflowAgent.task", at_start={**task, "tool.name": "search"}):
                with s.span("FunctionTool.task", 0.5, at_start=task):
                    pass
    assert kinds(h) == {("FunctionAgent.workflow", "tool", "search"): (0.5, 1)}
    assert h.points(names.CRITICAL_PATH) == {labels(workflow="FunctionAgent.workflow", step_kind="tool"): 0.5,
                                             labels(workflow="FunctionAgent.workflow", step_kind="other"): 0.375}


def test_a_mostly_idle_workflow_is_logged_once_with_the_spans_that_hold_its_time() -> None:
    """README's "never silent": more than DEFAULT_OTHER_SHARE of a workflow's critical path in "other" is logged
    once per workflow name, with the spans there that are no step and hold none, the longest first."""
    with processed() as h, warnings_of("telemetry.genai_spans") as logged:
        s = Spans(h)
        for _ in range(2):
            with s.span("agent", at_end={OI_KIND: "AGENT", "agent.name": "a"}):
                with s.span("BaseWorkflowAgent.task", 2.0, at_end={"traceloop.span.kind": "task"}):
                    pass
                with s.span("node", 1.0, at_end={OI_KIND: "CHAIN"}):
                    with s.span("tool", 1.0, at_end={OI_KIND: "TOOL", "tool.name": "t"}):
                        pass
        with s.span("agent", at_end={OI_KIND: "AGENT", "agent.name": "busy"}):  # 1 s of 4 other: 25%, not more
            with s.span("idle", 1.0):
                pass
            with s.span("tool", 3.0, at_end={OI_KIND: "TOOL", "tool.name": "t"}):
                pass
    assert h.points(names.CRITICAL_PATH)[labels(workflow="a", step_kind="other")] == 6.0
    assert logged == [
        "GenAiSpanProcessor: workflow 'a': 75% of its critical path is 'other' (time no step covers; more than the "
        "25% set, other_share): the spans there that are no step: 'BaseWorkflowAgent.task' x1 (2.00 s). If one of "
        "them is a model call, tool or retrieval, its instrumentation marks it in a way the kit does not read "
        "(telemetry.genai_spans.SPAN_ROLES, docs/telemetry.md). (Logged once.)"]


def test_other_share_is_a_share() -> None:
    with pytest.raises(ValueError) as err:
        telemetry.GenAiSpanProcessor(other_share=0)
    assert str(err.value) == ("GenAiSpanProcessor: other_share must be a share of the workflow's duration, above 0 "
                              "and at most 1 (1: never log), got 0")


def test_the_resource_names_the_agent_runs() -> None:
    """smolagents and LlamaIndex name no agent in their spans, so each instrumentation's span names would name the
    workflow ("FunctionAgent.run" under OpenInference, "FunctionAgent.workflow" under OpenLLMetry): the resource
    attribute `workflow` (setup(workflow=...), OTEL_RESOURCE_ATTRIBUTES) names them, over any name the spans carry."""
    with harness({"workflow": "support"}) as h:
        h.tracer_provider.add_span_processor(telemetry.GenAiSpanProcessor(h.tel))
        s = Spans(h)
        for root, named in (("FunctionAgent.run", {OI_KIND: "CHAIN"}),
                            ("invoke_agent x", {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "x"})):
            with s.span(root, 0.5, at_end=named):
                pass
    assert h.points(names.WORKFLOW_DURATION) == {labels(workflow="support", status="ok"): (1.0, 2)}


def test_building_an_agent_is_no_agent_run() -> None:
    """AutoGen (autogen-core 0.7.5, _telemetry/_genai.py) records create_agent (OTel GenAI agent spans) as a trace
    of its own when an agent is built: nothing to record, nothing to report."""
    with processed() as h, warnings_of("telemetry.genai_spans") as logged:
        with Spans(h, "autogen-core").span("create_agent support", at_end={
                "gen_ai.operation.name": "create_agent", "gen_ai.agent.name": "support"}):
            pass
    assert (logged, h.points(names.WORKFLOW_DURATION), h.points(names.STEP_DURATION)) == ([], {}, {})
