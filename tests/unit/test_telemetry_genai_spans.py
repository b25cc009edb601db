"""An agent that is already instrumented (the official OpenAI instrumentation around the real `openai`
client, and opentelemetry-util-genai's TelemetryHandler for the agent, its tools and its retrieval, as the
framework instrumentations built on it do) gets, through GenAiSpanProcessor, exactly the compound-latency
metrics of the same agent written with telemetry.workflow/step.

Both agents talk to the same scripted OpenAI-compatible server on 127.0.0.1, which takes a known virtual
time per request. The numbers are exact: the kit reads the virtual clock itself, and the other
instrumentations' spans get their timestamps from the OTel SDK's clock (`opentelemetry.sdk.trace.time_ns`,
used when a span is started or ended without an explicit time), pointed at the same virtual clock here.
Tools run in parallel threads, carried by OpenTelemetry's threading instrumentation.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.util.genai.handler import TelemetryHandler

import telemetry
from telemetry import names
from tests.support.fake_openai import FakeOpenAI, Reply, chat, embedding, tool_call
from tests.support.telemetry import Harness, harness, labels
from tests.support.threads import threads_instrumented

WAIT_S = 10.0
CHAT_MODEL = "gpt-4o-mini"
EMBED_MODEL = "text-embedding-3-small"
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}
         for name in ("search", "weather")]

# One run, second by second: [0, 0.1] glue; retrieval kb [0.1, 0.35]; chat [0.35, 1.35] asks for two tools;
# search [1.35, 2.35] and weather [1.35, 1.85] in parallel threads; embeddings [2.35, 2.6]; chat [2.6, 4.6];
# [4.6, 4.75] glue.
SCRIPT = [
    Reply(1.0, chat(CHAT_MODEL, tool_calls=[tool_call("c1", "search", {"q": "refund"}),
                                            tool_call("c2", "weather", {"city": "Oslo"})],
                    prompt_tokens=100, completion_tokens=20)),
    Reply(0.25, embedding(EMBED_MODEL, prompt_tokens=8)),
    Reply(2.0, chat(CHAT_MODEL, content="Refunds take 3 days.", prompt_tokens=300, completion_tokens=50)),
]
TOOL_SECONDS = {"search": 1.0, "weather": 0.5}
WORKFLOW = "support"
# What the timeline above gives, worked out by hand: glue 0.25 s; retrieval 0.25 s; llm 1 + 0.25 + 2 s; the
# tools split [1.35, 1.85] and search owns [1.85, 2.35].
EXPECTED_CRITICAL_PATH = {"other": 0.25, "retrieval": 0.25, "llm": 3.25, "tool": 1.0}


@pytest.fixture(autouse=True)
def threads_carry_context() -> Iterator[None]:
    with threads_instrumented():
        yield


class ParallelTools:
    """Runs tool bodies in threads; the main thread moves the clock and releases them in order of duration."""

    def __init__(self, h: Harness) -> None:
        self.clock = h.clock
        self.started = {name: threading.Event() for name in TOOL_SECONDS}
        self.release = {name: threading.Event() for name in TOOL_SECONDS}

    def body(self, name: str) -> None:
        self.started[name].set()
        assert self.release[name].wait(WAIT_S)

    def run(self, wrap: Callable[[str], Callable[[], None]], calls: list[str]) -> None:
        with ThreadPoolExecutor(max_workers=len(calls)) as pool:
            futures = {name: pool.submit(wrap(name)) for name in calls}
            assert all(self.started[name].wait(WAIT_S) for name in calls)
            elapsed = 0.0
            for name in sorted(calls, key=TOOL_SECONDS.__getitem__):
                self.clock.advance(TOOL_SECONDS[name] - elapsed)
                elapsed = TOOL_SECONDS[name]
                self.release[name].set()
                futures[name].result(timeout=WAIT_S)


def messages() -> list[dict[str, Any]]:
    return [{"role": "user", "content": "How long do refunds take?"}]


def tool_names(reply: Any) -> list[str]:
    return [call.function.name for call in reply.choices[0].message.tool_calls]


def kit_agent(h: Harness, client: openai.OpenAI) -> None:
    """The agent written with the kit's decorators and scopes."""
    tel, clock, tools = h.tel, h.clock, ParallelTools(h)

    def tool(name: str) -> Callable[[], None]:
        def run() -> None:
            with tel.step("tool", name):
                tools.body(name)
        return run

    with tel.workflow(WORKFLOW, agent=WORKFLOW):
        clock.advance(0.1)
        with tel.step("retrieval", "kb"):
            clock.advance(0.25)
        with tel.step("llm", CHAT_MODEL, model=CHAT_MODEL, provider="openai") as step:
            reply = client.chat.completions.create(model=CHAT_MODEL, messages=messages(), tools=TOOLS)
            step.usage(input_tokens=reply.usage.prompt_tokens, output_tokens=reply.usage.completion_tokens)
        tools.run(tool, tool_names(reply))
        with tel.step("llm", EMBED_MODEL, model=EMBED_MODEL, provider="openai", operation="embeddings") as step:
            vectors = client.embeddings.create(model=EMBED_MODEL, input="refund policy")
            step.usage(input_tokens=vectors.usage.prompt_tokens)
        with tel.step("llm", CHAT_MODEL, model=CHAT_MODEL, provider="openai") as step:
            reply = client.chat.completions.create(model=CHAT_MODEL, messages=messages())
            step.usage(input_tokens=reply.usage.prompt_tokens, output_tokens=reply.usage.completion_tokens)
        clock.advance(0.15)


def instrumented_agent(h: Harness, client: openai.OpenAI) -> None:
    """The same agent as it looks with GenAI instrumentations: no kit code at all."""
    handler = TelemetryHandler(tracer_provider=h.tracer_provider, meter_provider=h.meter_provider)
    clock, tools = h.clock, ParallelTools(h)

    def tool(name: str) -> Callable[[], None]:
        def run() -> None:
            with handler.tool(name):
                tools.body(name)
        return run

    with handler.invoke_local_agent(agent_name=WORKFLOW):
        clock.advance(0.1)
        with handler.retrieval(data_source_id="kb"):
            clock.advance(0.25)
        reply = client.chat.completions.create(model=CHAT_MODEL, messages=messages(), tools=TOOLS)
        tools.run(tool, tool_names(reply))
        client.embeddings.create(model=EMBED_MODEL, input="refund policy")
        client.chat.completions.create(model=CHAT_MODEL, messages=messages())
        clock.advance(0.15)


def run_kit(monkeypatch: pytest.MonkeyPatch) -> tuple[Harness, list[Any]]:
    with harness() as h, FakeOpenAI(h.clock, SCRIPT) as server:
        monkeypatch.setattr("opentelemetry.sdk.trace.time_ns", h.clock)
        kit_agent(h, openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0))
        assert server.unused == 0
        return h, list(h.spans_exporter.get_finished_spans())


def run_instrumented(monkeypatch: pytest.MonkeyPatch) -> tuple[Harness, list[Any]]:
    with harness() as h, FakeOpenAI(h.clock, SCRIPT) as server:
        monkeypatch.setattr("opentelemetry.sdk.trace.time_ns", h.clock)
        h.tracer_provider.add_span_processor(telemetry.GenAiSpanProcessor(h.tel))  # the one line
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=h.tracer_provider, meter_provider=h.meter_provider)
        try:
            instrumented_agent(h, openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0))
        finally:
            instrumentor.uninstrument()
        assert server.unused == 0
        return h, list(h.spans_exporter.get_finished_spans())


@pytest.fixture
def kit(monkeypatch: pytest.MonkeyPatch) -> tuple[Harness, list[Any]]:
    return run_kit(monkeypatch)


@pytest.fixture
def instrumented(monkeypatch: pytest.MonkeyPatch) -> tuple[Harness, list[Any]]:
    return run_instrumented(monkeypatch)


def test_the_instrumentations_emit_the_genai_spans_the_mapping_reads(instrumented: tuple[Harness, list[Any]]) -> None:
    """The upstream facts the mapping relies on, as these package versions emit them."""
    _, spans = instrumented
    by_operation = sorted((str(s.attributes.get("gen_ai.operation.name")), s.name) for s in spans)
    assert by_operation == [
        ("chat", f"chat {CHAT_MODEL}"), ("chat", f"chat {CHAT_MODEL}"), ("embeddings", f"embeddings {EMBED_MODEL}"),
        ("execute_tool", "execute_tool search"), ("execute_tool", "execute_tool weather"),
        ("invoke_agent", f"invoke_agent {WORKFLOW}"), ("retrieval", "retrieval kb")]
    agent = next(s for s in spans if s.name.startswith("invoke_agent"))
    for span in spans:
        if span is not agent:
            assert span.parent is not None and span.parent.span_id == agent.context.span_id, span.name
    first_chat = min((s for s in spans if s.name == f"chat {CHAT_MODEL}"), key=lambda s: s.start_time)
    assert (first_chat.attributes["gen_ai.usage.input_tokens"], first_chat.attributes["gen_ai.usage.output_tokens"],
            first_chat.attributes["gen_ai.request.model"]) == (100, 20, CHAT_MODEL)
    assert (first_chat.end_time - first_chat.start_time) == 10**9


def test_instrumented_agent_metrics_equal_the_kit_agents(
        kit: tuple[Harness, list[Any]], instrumented: tuple[Harness, list[Any]]) -> None:
    kit_h, _ = kit
    inst_h, _ = instrumented
    expected = kit_h.all_points()
    assert expected[names.CRITICAL_PATH.otel] == {labels(workflow=WORKFLOW, step_kind=k): v
                                                  for k, v in EXPECTED_CRITICAL_PATH.items()}
    assert expected[names.WORKFLOW_DURATION.otel] == {labels(workflow=WORKFLOW, status="ok"): (4.75, 1)}
    assert inst_h.all_points() == expected


def test_exact_step_metrics_from_instrumented_spans(instrumented: tuple[Harness, list[Any]]) -> None:
    h, _ = instrumented
    assert h.points(names.STEP_DURATION) == {
        labels(workflow=WORKFLOW, step_kind="retrieval", step_name="kb", status="ok"): (0.25, 1),
        labels(workflow=WORKFLOW, step_kind="llm", step_name=CHAT_MODEL, status="ok"): (3.0, 2),
        labels(workflow=WORKFLOW, step_kind="llm", step_name=EMBED_MODEL, status="ok"): (0.25, 1),
        labels(workflow=WORKFLOW, step_kind="tool", step_name="search", status="ok"): (1.0, 1),
        labels(workflow=WORKFLOW, step_kind="tool", step_name="weather", status="ok"): (0.5, 1)}
    chat_attrs = {"workflow": WORKFLOW, "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                  "gen_ai.request.model": CHAT_MODEL}
    embed_attrs = {**chat_attrs, "gen_ai.operation.name": "embeddings", "gen_ai.request.model": EMBED_MODEL}
    assert h.points(names.GENAI_TOKEN_USAGE) == {
        labels(**chat_attrs, **{"gen_ai.token.type": "input"}): (400, 2),
        labels(**chat_attrs, **{"gen_ai.token.type": "output"}): (70, 2),
        labels(**embed_attrs, **{"gen_ai.token.type": "input"}): (8, 1)}
    assert h.points(names.WORKFLOW_STEPS) == {labels(workflow=WORKFLOW): (6, 1)}


def test_instrumented_calls_inside_a_kit_workflow_join_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mixed: the kit's workflow and tool steps, the model calls left to the OpenAI instrumentation."""
    with harness() as h, FakeOpenAI(h.clock, SCRIPT[:1]) as server:
        monkeypatch.setattr("opentelemetry.sdk.trace.time_ns", h.clock)
        h.tracer_provider.add_span_processor(telemetry.GenAiSpanProcessor(h.tel))
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=h.tracer_provider, meter_provider=h.meter_provider)
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        try:
            with h.tel.workflow("mixed"):
                with h.tel.step("planning", "plan"):
                    h.clock.advance(0.5)
                    client.chat.completions.create(model=CHAT_MODEL, messages=messages())
                with h.tel.step("tool", "search"):
                    h.clock.advance(2)
        finally:
            instrumentor.uninstrument()
    assert h.points(names.CRITICAL_PATH) == {labels(workflow="mixed", step_kind="planning"): 0.5,
                                             labels(workflow="mixed", step_kind="llm"): 1.0,
                                             labels(workflow="mixed", step_kind="tool"): 2.0}
    assert h.points(names.WORKFLOW_STEPS) == {labels(workflow="mixed"): (3, 1)}


def test_kit_steps_inside_an_instrumented_agent_join_its_workflow(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mixed the other way: an instrumented framework's agent calls a tool the team wrapped in telemetry.step."""
    with harness() as h:
        monkeypatch.setattr("opentelemetry.sdk.trace.time_ns", h.clock)
        h.tracer_provider.add_span_processor(telemetry.GenAiSpanProcessor(h.tel))
        handler = TelemetryHandler(tracer_provider=h.tracer_provider, meter_provider=h.meter_provider)
        with handler.invoke_local_agent(agent_name="framework-agent"):
            h.clock.advance(1)
            with h.tel.step("tool", "lookup"):
                h.clock.advance(2)
    assert h.points(names.CRITICAL_PATH) == {labels(workflow="framework-agent", step_kind="other"): 1.0,
                                             labels(workflow="framework-agent", step_kind="tool"): 2.0}


def test_a_failed_instrumented_call_is_a_failed_step(monkeypatch: pytest.MonkeyPatch) -> None:
    with harness() as h, FakeOpenAI(h.clock, []) as server:  # no scripted reply: the server answers 500
        monkeypatch.setattr("opentelemetry.sdk.trace.time_ns", h.clock)
        h.tracer_provider.add_span_processor(telemetry.GenAiSpanProcessor(h.tel))
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=h.tracer_provider, meter_provider=h.meter_provider)
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        handler = TelemetryHandler(tracer_provider=h.tracer_provider, meter_provider=h.meter_provider)
        try:
            with pytest.raises(openai.InternalServerError), handler.invoke_local_agent(agent_name="a"):
                client.chat.completions.create(model=CHAT_MODEL, messages=messages())
        finally:
            instrumentor.uninstrument()
    assert h.points(names.STEP_ERRORS) == {labels(workflow="a", step_kind="llm", step_name=CHAT_MODEL,
                                                  **{"error.type": "openai.InternalServerError"}): 1}
    assert h.points(names.WORKFLOW_DURATION) == {labels(workflow="a", status="error"): (0.0, 1)}


def test_the_budget_reaches_the_server_through_the_openai_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """headers() on a request: what the gateway will read (W3C baggage), sent by the real client."""
    with harness() as h, FakeOpenAI(h.clock, SCRIPT[:1]) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        with h.tel.workflow("budgeted", budget_s=3) as run:
            h.clock.advance(0.5)
            client.chat.completions.create(model=CHAT_MODEL, messages=messages(), extra_headers=h.tel.headers())
    sent = server.received[0].headers
    assert sent["baggage"].split(",") == [f"aifactory.deadline_ms={1_700_000_003_000}", "aifactory.budget_ms=2500",
                                          f"aifactory.session={run.trace_id:032x}"]  # the gateway's session key
    assert json.loads(json.dumps(server.received[0].body))["model"] == CHAT_MODEL


def test_agents_inside_an_instrumented_workflow_are_one_workflow(monkeypatch: pytest.MonkeyPatch) -> None:
    """invoke_workflow > two invoke_agent children (a multi-agent run): one run, so one workflow, the outermost;
    the agents' steps count in its critical path (a graph and its agent, or an SDK's trace span and its agent,
    nest the same way: counted twice, each would claim the whole critical path)."""
    with harness() as h:
        monkeypatch.setattr("opentelemetry.sdk.trace.time_ns", h.clock)
        telemetry.install(h.tel)
        h.tracer_provider.add_span_processor(telemetry.GenAiSpanProcessor())  # the installed Telemetry
        handler = TelemetryHandler(tracer_provider=h.tracer_provider, meter_provider=h.meter_provider)
        try:
            with handler.workflow("triage"):
                h.clock.advance(0.5)
                with handler.invoke_local_agent(agent_name="researcher"):
                    with handler.tool("search"):
                        h.clock.advance(2)
                with handler.invoke_local_agent(agent_name="writer"):
                    with handler.retrieval(data_source_id="style-guide"):
                        h.clock.advance(1)
                    h.clock.advance(0.25)
        finally:
            telemetry.install(None)
    assert h.points(names.CRITICAL_PATH) == {
        labels(workflow="triage", step_kind="other"): 0.75, labels(workflow="triage", step_kind="tool"): 2.0,
        labels(workflow="triage", step_kind="retrieval"): 1.0}
    assert h.points(names.WORKFLOW_DURATION) == {labels(workflow="triage", status="ok"): (3.75, 1)}
    assert h.points(names.STEP_DURATION) == {
        labels(workflow="triage", step_kind="tool", step_name="search", status="ok"): (2.0, 1),
        labels(workflow="triage", step_kind="retrieval", step_name="style-guide", status="ok"): (1.0, 1)}
