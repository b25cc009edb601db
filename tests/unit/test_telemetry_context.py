"""The current workflow and step travel in OpenTelemetry's own context: whatever propagates that context
(OpenTelemetry's threading instrumentation, contextvars.copy_context, asyncio.to_thread) carries them, so
steps run in threads and executors land in their workflow's critical path. Exact numbers in virtual time:
threads start their steps while the main thread holds the clock, and end when it releases them.

The threading instrumentation hooks Thread.start/run and ThreadPoolExecutor.submit to carry
opentelemetry.context.get_current() into the thread (opentelemetry-python-contrib,
instrumentation/opentelemetry-instrumentation-threading/src/opentelemetry/instrumentation/threading/__init__.py).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from opentelemetry import trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator

import telemetry
from telemetry import names
from tests.support.telemetry import Harness, at, harness, labels
from tests.support.threads import threads_instrumented

WAIT_S = 10.0  # bound on every wait for a thread


@pytest.fixture
def h() -> Iterator[Harness]:
    with harness() as instrumented:
        yield instrumented


@pytest.fixture
def threading_instrumented() -> Iterator[None]:
    with threads_instrumented():
        yield


class Gate:
    """A step body run in a thread: it reports that its step started, then holds until released."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def hold(self) -> None:
        self.started.set()
        assert self.release.wait(WAIT_S), "never released"


Submit = Callable[[ThreadPoolExecutor, Callable[[], None]], "Future[None]"]


def executor_submit(pool: ThreadPoolExecutor, fn: Callable[[], None]) -> Future[None]:
    return pool.submit(fn)


def executor_submit_copied_context(pool: ThreadPoolExecutor, fn: Callable[[], None]) -> Future[None]:
    return pool.submit(contextvars.copy_context().run, fn)


def plain_thread(pool: ThreadPoolExecutor, fn: Callable[[], None]) -> Future[None]:
    """A threading.Thread (the pool is unused): a Future that resolves when the thread ends."""
    done: Future[None] = Future()

    def body() -> None:
        fn()
        done.set_result(None)

    threading.Thread(target=body, name="plain-tool-thread").start()
    return done


def parallel_tools_agent(h: Harness, submit: Submit) -> None:
    """[0, 0.5] glue; plan [0.5, 3.5] starts tools a and b in threads at 0.5; b ends at 1.5, a at 2.5;
    [3.5, 3.75] glue."""
    tel, clock = h.tel, h.clock
    gates = {"a": Gate(), "b": Gate()}

    def tool(name: str) -> Callable[[], None]:
        def run() -> None:
            with tel.step("tool", name):
                gates[name].hold()
        return run

    with ThreadPoolExecutor(max_workers=2) as pool, tel.workflow("parallel"):
        clock.advance(0.5)
        with tel.step("planning", "plan"):
            futures = {name: submit(pool, tool(name)) for name in gates}
            assert all(g.started.wait(WAIT_S) for g in gates.values())
            for name in ("b", "a"):
                clock.advance(1)
                gates[name].release.set()
                futures[name].result(timeout=WAIT_S)
            clock.advance(1)
        clock.advance(0.25)


@pytest.mark.usefixtures("threading_instrumented")
@pytest.mark.parametrize("submit", [executor_submit, plain_thread], ids=["ThreadPoolExecutor", "Thread"])
def test_threading_instrumentation_carries_workflow_and_step_into_threads(h: Harness, submit: Submit) -> None:
    parallel_tools_agent(h, submit)
    spans = h.spans()
    plan, root = spans["plan plan"], spans["invoke_workflow parallel"]
    for name in ("a", "b"):
        tool = spans[f"execute_tool {name}"]
        assert tool.parent is not None and tool.parent.span_id == plan.context.span_id
        assert tool.context.trace_id == root.context.trace_id
    assert (spans["execute_tool a"].start_time, spans["execute_tool a"].end_time) == (at(0.5), at(2.5))
    # [0.5, 1.5] a and b split; [1.5, 2.5] a alone; [2.5, 3.5] plan; 0.5 + 0.25 glue.
    assert h.points(names.CRITICAL_PATH) == {
        labels(workflow="parallel", step_kind="other"): 0.75, labels(workflow="parallel", step_kind="tool"): 2.0,
        labels(workflow="parallel", step_kind="planning"): 1.0}
    assert h.points(names.STEP_DURATION) == {
        labels(workflow="parallel", step_kind="planning", step_name="plan", status="ok"): (3.0, 1),
        labels(workflow="parallel", step_kind="tool", step_name="a", status="ok"): (2.0, 1),
        labels(workflow="parallel", step_kind="tool", step_name="b", status="ok"): (1.0, 1)}
    assert h.points(names.WORKFLOW_STEPS) == {labels(workflow="parallel"): (3, 1)}


def test_copy_context_into_an_executor_carries_them_without_instrumentation(h: Harness) -> None:
    parallel_tools_agent(h, executor_submit_copied_context)
    assert h.points(names.CRITICAL_PATH) == {
        labels(workflow="parallel", step_kind="other"): 0.75, labels(workflow="parallel", step_kind="tool"): 2.0,
        labels(workflow="parallel", step_kind="planning"): 1.0}


def test_a_thread_without_context_loses_its_steps_and_warns_once(
        h: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """The defect of issue #21: tool steps in a bare executor are roots outside the workflow."""
    with caplog.at_level(logging.WARNING, logger="telemetry.runs"):
        parallel_tools_agent(h, executor_submit)
    spans = h.spans()
    assert [spans[f"execute_tool {n}"].parent for n in ("a", "b")] == [None, None]
    assert h.points(names.CRITICAL_PATH) == {labels(workflow="parallel", step_kind="other"): 0.75,
                                             labels(workflow="parallel", step_kind="planning"): 3.0}
    assert h.points(names.STEP_DURATION)[labels(workflow="none", step_kind="tool", step_name="a",
                                                status="ok")] == (2.0, 1)
    warnings = [r for r in caplog.records if r.name == "telemetry.runs"]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    message = warnings[0].getMessage()
    assert message.startswith("step tool ") and "started outside any workflow in thread " in message
    assert "ThreadingInstrumentor().instrument()" in message and "copy_context().run" in message


def test_a_step_under_the_workflows_span_without_its_context_warns(
        h: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """Code that re-parents by span alone (trace.use_span) keeps the trace but not the kit's context."""
    tel = h.tel
    with caplog.at_level(logging.WARNING, logger="telemetry.runs"), tel.workflow("w") as run:
        def detached() -> None:
            with trace.use_span(run.span), tel.step("tool", "t"):
                pass
        worker = threading.Thread(target=detached)
        worker.start()
        worker.join(WAIT_S)
        with tel.step("tool", "fine"):
            pass
    messages = [r.getMessage() for r in caplog.records if r.name == "telemetry.runs"]
    assert len(messages) == 1 and "under a span of the trace of open workflow 'w'" in messages[0]


def test_steps_outside_workflows_in_the_main_thread_do_not_warn(
        h: Harness, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="telemetry.runs"):
        with h.tel.step("tool", "warmup"):
            pass
        with h.tel.workflow("w"):
            pass
    assert [r for r in caplog.records if r.name == "telemetry.runs"] == []


def test_asyncio_to_thread_carries_them(h: Harness) -> None:
    tel, clock = h.tel, h.clock

    def lookup(name: str, seconds: float) -> str:
        with tel.step("tool", name):
            clock.advance(seconds)
        return name

    async def agent() -> list[str]:
        async with tel.workflow("async-agent"):
            clock.advance(0.5)
            async with tel.step("planning", "plan"):
                first = await asyncio.to_thread(lookup, "search", 1)
                second = await asyncio.to_thread(lookup, "weather", 2)
            clock.advance(0.25)
            return [first, second]

    assert asyncio.run(agent()) == ["search", "weather"]
    spans = h.spans()
    assert spans["execute_tool weather"].parent.span_id == spans["plan plan"].context.span_id
    assert h.points(names.CRITICAL_PATH) == {
        labels(workflow="async-agent", step_kind="other"): 0.75,
        labels(workflow="async-agent", step_kind="tool"): 3.0}


@pytest.mark.usefixtures("threading_instrumented")
def test_run_in_executor_carries_them_with_the_threading_instrumentation(h: Harness) -> None:
    """loop.run_in_executor does not copy the context itself; its executor's submit() is instrumented."""
    tel, clock = h.tel, h.clock

    def lookup() -> None:
        with tel.step("tool", "search"):
            clock.advance(1.5)

    async def agent() -> None:
        async with tel.workflow("loop-agent"):
            clock.advance(0.5)
            await asyncio.get_running_loop().run_in_executor(None, lookup)

    asyncio.run(agent())
    assert h.points(names.CRITICAL_PATH) == {labels(workflow="loop-agent", step_kind="other"): 0.5,
                                             labels(workflow="loop-agent", step_kind="tool"): 1.5}


@pytest.mark.usefixtures("threading_instrumented")
def test_nested_workflow_in_an_executor_counts_in_the_outer_critical_path(h: Harness) -> None:
    tel, clock = h.tel, h.clock

    def sub_agent() -> None:
        with tel.workflow("inner"):
            with tel.step("llm", "sub-answer"):
                clock.advance(2)
            clock.advance(1)

    with ThreadPoolExecutor(max_workers=1) as pool, tel.workflow("outer"), tel.step("planning", "delegate"):
        clock.advance(1)
        pool.submit(sub_agent).result(timeout=WAIT_S)
    assert h.points(names.CRITICAL_PATH) == {
        labels(workflow="inner", step_kind="llm"): 2.0, labels(workflow="inner", step_kind="other"): 1.0,
        labels(workflow="outer", step_kind="planning"): 2.0, labels(workflow="outer", step_kind="llm"): 2.0}
    spans = h.spans()
    assert spans["invoke_workflow inner"].parent.span_id == spans["plan delegate"].context.span_id


# --- the latency budget as W3C baggage -----------------------------------------------------------

DEADLINE_MS = at(2) // 10**6  # a 2 s budget from the virtual clock's start


def baggage_of(headers: dict[str, str]) -> dict[str, str]:
    """What a receiver (the gateway) reads: the baggage header parsed by OTel's own W3C propagator."""
    from opentelemetry import baggage
    return {k: str(v) for k, v in baggage.get_all(W3CBaggagePropagator().extract(headers)).items()}


def test_headers_carry_trace_context_and_the_remaining_budget(h: Harness) -> None:
    tel, clock = h.tel, h.clock
    with tel.workflow("budgeted", budget_s=2) as run:
        clock.advance(0.5)
        with tel.step("llm", "draft") as step:
            sent = tel.headers()
            span_context = step.span.get_span_context()
        clock.advance(2)
        late = tel.headers()
    flags = int(span_context.trace_flags)  # sampled, and random trace id (W3C trace context level 2): 03
    session = f"{span_context.trace_id:032x}"  # the workflow's trace id: the gateway's session key
    assert sent == {"traceparent": f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{flags:02x}",
                    "baggage": f"aifactory.deadline_ms={DEADLINE_MS},aifactory.budget_ms=1500,"
                               f"aifactory.session={session}"}
    assert baggage_of(sent) == {"aifactory.deadline_ms": str(DEADLINE_MS), "aifactory.budget_ms": "1500",
                                "aifactory.session": session}
    assert baggage_of(late)["aifactory.budget_ms"] == "0"  # past the deadline: nothing left, never negative
    assert run.span.get_span_context().trace_id == span_context.trace_id


def test_no_budget_no_budget_baggage_but_the_session(h: Harness) -> None:
    with h.tel.workflow("plain") as run:
        assert baggage_of(h.tel.headers()) == {"aifactory.session": f"{run.trace_id:032x}"}
        assert h.tel.remaining_budget_ms() is None
    assert "baggage" not in h.tel.headers()  # outside any workflow: no session


def test_an_explicit_session_wins_over_the_trace_id_across_workflows(h: Harness) -> None:
    """A chat whose every turn runs as a workflow of its own: with workflow(..., session=) each turn sends the
    conversation's session, not its own trace id, so the gateway keeps the conversation on one replica. Workflows
    inside it inherit it unless they give their own; the baggage carries the value as it is (the gateway hashes the
    raw member, as it hashes an x-aifactory-session header with the same value)."""
    tel = h.tel
    sent, traces = [], set()
    for _ in range(2):
        with tel.workflow("chat-turn", session="chat-42") as run:
            sent.append(tel.headers())
            traces.add(run.trace_id)
            with tel.workflow("tool-call"):
                assert baggage_of(tel.headers())["aifactory.session"] == "chat-42"
            with tel.workflow("side-quest", session="quest-1"):
                assert baggage_of(tel.headers())["aifactory.session"] == "quest-1"
            assert baggage_of(tel.headers())["aifactory.session"] == "chat-42"
    assert len(traces) == 2  # two runs, two traces, one session
    assert [baggage_of(x) for x in sent] == [{"aifactory.session": "chat-42"}] * 2
    assert all(x["baggage"] == "aifactory.session=chat-42" for x in sent)
    with tel.workflow("chat-turn") as run:  # no session given: the trace id, as before
        assert baggage_of(tel.headers()) == {"aifactory.session": f"{run.trace_id:032x}"}
    with telemetry.workflow("module-level", session="chat-43"):  # the module-level scope takes it too
        assert baggage_of(telemetry.headers())["aifactory.session"] == "chat-43"


@pytest.mark.parametrize("session", ["", "a b", "chat/42", "x" * 129, 42])
def test_a_session_the_baggage_would_encode_is_refused(session: object) -> None:
    with pytest.raises(ValueError) as e:
        telemetry.workflow("chat-turn", session=session)  # type: ignore[arg-type]
    assert str(e.value) == ("workflow 'chat-turn': session must be 1-128 characters of A-Z a-z 0-9 . _ ~ - (sent as "
                            f"they are in the baggage and the x-aifactory-session header), got {session!r}")


@pytest.mark.parametrize(("inner_budget_s", "expected_ms"), [(5, 1000), (0.25, 250)],
                         ids=["outer-deadline-is-earlier", "inner-deadline-is-earlier"])
def test_nested_workflow_keeps_the_earlier_deadline(h: Harness, inner_budget_s: float, expected_ms: int) -> None:
    tel, clock = h.tel, h.clock
    with tel.workflow("outer", budget_s=2):
        clock.advance(1)
        with tel.workflow("inner", budget_s=inner_budget_s):
            assert tel.remaining_budget_ms() == expected_ms
            assert baggage_of(tel.headers())["aifactory.budget_ms"] == str(expected_ms)


@pytest.mark.usefixtures("threading_instrumented")
def test_the_budget_travels_into_executor_threads(h: Harness) -> None:
    tel, clock = h.tel, h.clock
    with ThreadPoolExecutor(max_workers=1) as pool, tel.workflow("budgeted", budget_s=2):
        clock.advance(0.75)
        sent = pool.submit(tel.headers).result(timeout=WAIT_S)
    assert {k: v for k, v in baggage_of(sent).items() if k != "aifactory.session"} == {
        "aifactory.deadline_ms": str(DEADLINE_MS), "aifactory.budget_ms": "1250"}


def test_a_callers_deadline_is_inherited_and_a_malformed_one_ignored(h: Harness) -> None:
    """Baggage arrives from callers too (extracted by a server instrumentation): a workflow started under it
    keeps the caller's deadline; a value that is not epoch milliseconds is not a budget."""
    from opentelemetry import baggage
    from opentelemetry import context as otel_context

    for deadline, expected in ((str(at(1.5) // 10**6), 1500), ("soon", None)):
        token = otel_context.attach(baggage.set_baggage("aifactory.deadline_ms", deadline))
        try:
            with h.tel.workflow("served"):
                assert h.tel.remaining_budget_ms() == expected
            with h.tel.workflow("served", budget_s=1):
                assert h.tel.remaining_budget_ms() == 1000
        finally:
            otel_context.detach(token)


def test_module_level_headers_use_the_installed_telemetry(h: Harness) -> None:
    telemetry.install(h.tel)
    try:
        with telemetry.workflow("w", budget_s=1):
            h.clock.advance(0.1)
            assert telemetry.remaining_budget_ms() == 900
            assert baggage_of(telemetry.headers())["aifactory.budget_ms"] == "900"
    finally:
        telemetry.install(None)


@pytest.mark.parametrize("budget", [-1, "2", True, float("nan")])
def test_bad_budget_is_refused(h: Harness, budget: object) -> None:
    with pytest.raises(ValueError, match=f"workflow 'w': budget_s must be a number of seconds >= 0, got {budget!r}"):
        h.tel.workflow("w", budget_s=budget)  # type: ignore[arg-type]


# --- process pools: no context crosses; the README's recipe (headers in, extract there) ---------------------

PROCESS_WAIT_S = 60.0  # bound on a spawned worker: it imports the kit and pytest before it runs anything


def child_workflow(headers: dict[str, str] | None) -> tuple[int, int | None, int | None]:
    """In a worker process: attach the extracted headers (if given) and run a workflow with a step there.
    Returns the workflow span's trace id, its parent span id (None: a root span) and the budget left (ms)."""
    from opentelemetry import context as otel_context
    from opentelemetry import propagate

    with harness() as child:
        token = otel_context.attach(propagate.extract(headers)) if headers is not None else None
        try:
            with child.tel.workflow("in-child"):
                with child.tel.step("tool", "crunch"):
                    child.clock.advance(0.25)
                remaining = child.tel.remaining_budget_ms()
        finally:
            if token is not None:
                otel_context.detach(token)
        span = child.spans()["invoke_workflow in-child"]
        return span.context.trace_id, span.parent.span_id if span.parent else None, remaining


@pytest.mark.parametrize("recipe", [False, True], ids=["plain-submit", "headers-and-extract"])
def test_process_pools_carry_nothing_unless_headers_are_passed(h: Harness, recipe: bool) -> None:
    """A ProcessPoolExecutor job starts in an empty context (its own root trace, no budget); with
    telemetry.headers() passed in and opentelemetry.propagate.extract() attached there (the README's recipe,
    default OTEL_PROPAGATORS tracecontext,baggage), its workflow joins the trace under the submitting step
    and keeps the deadline: 2 s from the start; the child's virtual clock starts where the parent's did and
    spends 0.25 s, so 1750 ms are left there."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    tel, clock = h.tel, h.clock
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        with tel.workflow("parent", budget_s=2):
            clock.advance(0.5)
            with tel.step("tool", "offload") as step:
                job = pool.submit(child_workflow, tel.headers() if recipe else None)
                trace_id, parent_id, remaining = job.result(timeout=PROCESS_WAIT_S)
                sent_from = step.span.get_span_context()
    if recipe:
        assert (trace_id, parent_id, remaining) == (sent_from.trace_id, sent_from.span_id, 1750)
    else:
        assert trace_id != sent_from.trace_id and (parent_id, remaining) == (None, None)
