"""Workflow and step instrumentation: OTel GenAI spans plus the kit's compound-latency metrics.

    tel = Telemetry(tenant="search")          # or telemetry.setup() from OTEL_* variables

    @tel.workflow("answer-question", budget_s=8)
    async def answer(q):
        with tel.step("planning", "plan"):
            plan = await planner(q)
        async with tel.step("llm", "draft", model="llama-3-70b", provider="vllm") as s:
            reply = await llm(plan, headers=tel.headers())   # trace context + remaining budget (W3C baggage)
            s.usage(input_tokens=reply.prompt_tokens, output_tokens=reply.completion_tokens)
        await asyncio.gather(*(tool(t) for t in plan.tools))   # each tool() decorated with tel.step("tool", ...)

Scopes are context managers (`with` and `async with`) and decorators (sync and async functions). The
current workflow and step live in OpenTelemetry's own context (one context key next to the current span),
so whatever carries that context carries them too: asyncio tasks, asyncio.to_thread, contextvars.copy_context,
and OpenTelemetry's threading instrumentation for threads and ThreadPoolExecutor. Auto-instrumented client
spans (HTTP, gRPC, GenAI SDKs) nest under the current step. Process pools carry no context: see docs/telemetry.md.
A step that finds no workflow in its context while a workflow of the same trace is open (or, in a thread that
got no context, while any workflow is open) logs one warning per Telemetry: its context was lost on the way.

Spans (OTel GenAI semantic conventions, development status):
    workflow             invoke_workflow {workflow}   INTERNAL  gen_ai.workflow.name
    workflow, agent=...  invoke_agent {agent}         INTERNAL  gen_ai.agent.name
    llm                  chat {model}                 CLIENT    gen_ai.request.model, gen_ai.provider.name,
                                                                gen_ai.usage.input_tokens / output_tokens
    tool                 execute_tool {name}          INTERNAL  gen_ai.tool.name
    retrieval            retrieval {name}             CLIENT    gen_ai.data_source.id
    planning             plan {name}                  INTERNAL
    any other kind       {kind} {name}                INTERNAL  (no gen_ai.operation.name)
A step span carries aifactory.step.kind where gen_ai.operation.name does not already tell the kind (by
OPERATION_STEP_KINDS, the table the GenAI span processor reads instrumented spans with: planning and any other
kind), and aifactory.step.name unless a GenAI attribute already names the step (gen_ai.tool.name,
gen_ai.data_source.id); `operation=` overrides the GenAI operation (e.g. "embeddings" for an llm step).
Failed scopes: status ERROR, the exception event, error.type = the exception's qualified class name.
With Telemetry(critical_path_attributes=True) the workflow span also gets aifactory.critical_path.<kind>
(seconds) when it ends: the metric's shares for that one trace (off by default: the spans themselves show them,
no panel reads them, and each costs a span attribute on every workflow).

Metrics (names and labels: telemetry/names.py), every one labelled with the tenant and workflow:
workflow duration, step duration, critical-path seconds per step kind (telemetry/critical_path.py:
innermost steps own the time, parallel steps split it, uncovered time is "other"), steps per workflow,
step errors, gen_ai.client.token.usage and gen_ai.client.operation.duration (llm steps). The two sums a
workflow's end adds to (critical-path seconds, deadlines met or missed) are kept in the process and collected
through an observable counter: a cumulative monotonic Sum like a counter's, for a fraction of a measurement's
cost (see _Sums for what differs).
A sequential agent's critical path is summed as its steps end; nested or overlapping steps are swept when the
workflow ends.
An exception leaving nested steps fails each of them (each is counted in the errors metric).
Steps outside any workflow still get spans and step metrics (workflow label "none").
A workflow started inside another is its own workflow, and its steps also count in the outer one's
critical path, under the outer step that was current when it started.
Exemplars: none by default (the kit records outside any span context; its Collector's prometheus exporter
drops exemplars anyway, and its dashboards link traces by label). Telemetry(exemplars=True) records each step's
and workflow's histograms (and step errors) in that span's own context, so the SDK's exemplar filter links each
point to it; the observable sums carry none.

Latency budget: workflow(..., budget_s=) puts the workflow's deadline (epoch ms) and budget (ms) in W3C
baggage (BUDGET_BAGGAGE_KEY, DEADLINE_BAGGAGE_KEY) on the same context, so it travels wherever the context
does; a nested workflow keeps the earlier deadline. headers() gives `traceparent` and `baggage` whose
BUDGET_BAGGAGE_KEY is the budget for *this request*: the budget remaining now, divided by the steps left when
the workflow declared how many it runs (workflow(..., steps=N): N sequential top-level steps; steps left = N
minus its top-level steps already finished, at least 1), else the whole remaining budget. The nearest
enclosing workflow that declared steps decides. Workflows with a deadline also record the budget left when
each step starts (STEP_BUDGET) and, when they end, whether they met the deadline (WORKFLOW_DEADLINES).

Session affinity: inside a workflow, headers() also puts SESSION_BAGGAGE_KEY in the baggage, so every step of one
run reaches the gateway with one session key and lands on the model replica that holds its prefix
(components.k8s.envoy_affinity): the workflow's `session` when it was given one (workflow(..., session=...),
inherited by the workflows inside it), else its trace id (32 hex digits). Give the session when one conversation
spans workflows, e.g. a chat whose every turn runs as a workflow of its own: with the trace id each turn would be a
new session, sent wherever the hash puts it, and prefill the conversation again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from importlib import import_module
from itertools import count
from typing import Any, ParamSpec, Protocol, TypeVar, cast
from urllib.parse import unquote
from weakref import WeakKeyDictionary

from opentelemetry import baggage, metrics, trace
from opentelemetry import context as otel_context
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as genai
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from telemetry import names
from telemetry.critical_path import DEFAULT_IDLE_KIND, ROOT, Step, critical_path, serial_shares

__all__ = [
    "BUDGET_BAGGAGE_KEY",
    "DEADLINE_BAGGAGE_KEY",
    "SESSION_BAGGAGE_KEY",
    "DEFAULT_CLOCK",
    "NO_WORKFLOW",
    "UNKNOWN_TENANT",
    "STEP_OPERATIONS",
    "OPERATION_STEP_KINDS",
    "STEP_KIND_ATTRIBUTE",
    "StepOperation",
    "Telemetry",
    "Scope",
    "StepRun",
    "WorkflowRun",
    "INSTRUMENTATION_NAME",
    "install",
    "current",
    "current_run",
    "workflow",
    "step",
    "headers",
    "remaining_budget_ms",
    "workflow_scope",
    "step_scope",
    "resource_attributes",
]

INSTRUMENTATION_NAME = "aifactory.telemetry"
DEFAULT_CLOCK: Callable[[], int] = time.time_ns  # epoch ns: span timestamps and durations come from one clock
NO_WORKFLOW = "none"  # workflow label of steps run outside any workflow
UNKNOWN_TENANT = "unknown"  # tenant label when nothing named one (see telemetry.setup)
BUDGET_BAGGAGE_KEY = "aifactory.budget_ms"  # W3C baggage: the workflow's latency budget, ms (remaining, in headers())
DEADLINE_BAGGAGE_KEY = "aifactory.deadline_ms"  # W3C baggage: the workflow's deadline, ms since the epoch
SESSION_BAGGAGE_KEY = "aifactory.session"  # W3C baggage, in headers(): the workflow's session (the gateway's key)
# An explicit session: characters the W3C baggage propagator sends as they are (opentelemetry-api's
# W3CBaggagePropagator percent-encodes values with urllib.parse.quote_plus, which leaves these alone), so the gateway
# hashes the same key whether it comes in the baggage or in the x-aifactory-session header.
SESSION_PATTERN = re.compile(r"[A-Za-z0-9._~-]{1,128}")
STATUS_OK, STATUS_ERROR = "ok", "error"
SCOPE_CACHE_SIZE = 1024  # distinct scopes without extra attributes kept ready per Telemetry (scopes are stateless)
_NS_PER_S = 1e9
_NS_PER_MS = 1_000_000
_KIND_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,31}")
_log = logging.getLogger(__name__)

# The current WorkflowRun or StepRun, stored next to the current span in OpenTelemetry's context.
_RUN_KEY = otel_context.create_key("aifactory.telemetry.run")
# The key trace.set_span_in_context() uses, found through that public call: a step's context is built in
# one copy holding both the span and the run.
_SPAN_KEY = next(iter(trace.set_span_in_context(trace.INVALID_SPAN, Context())))
# The key W3C baggage lives under in a context, found the same way: a context without it carries no deadline.
_BAGGAGE_KEY = next(iter(baggage.set_baggage(DEADLINE_BAGGAGE_KEY, "0", Context())))
# The context of the kit's metric records with exemplars off: no valid span, so no exemplar filter samples them
# (trace_based needs a sampled span). Not empty: the SDK records an empty (falsy) context in the current one.
_NO_TRACE = trace.set_span_in_context(trace.INVALID_SPAN, Context())


def _detach(token: Token[Context]) -> None:
    """Restore the context `token` replaced; as opentelemetry.context.detach, log a failure and never raise."""
    try:
        _reset(token)
    except Exception:
        _context_log.exception("Failed to detach context")


def _runtime_context_var() -> ContextVar[Context] | None:
    """The ContextVar that holds OpenTelemetry's current context, when the process uses the API's default runtime
    context (contextvars; OTEL_PYTHON_CONTEXT unset), else None. In opentelemetry-api 1.45.2
    (opentelemetry/context/__init__.py, context/contextvars_context.py) get_current(), attach() and detach() are
    that ContextVar's get(), set() and reset() behind two calls each: the per-step path calls it directly (the same
    operation on the same variable, so whatever carries the context carries the kit's runs alike) and falls back
    to the API for any other runtime, or if a later API release moves it."""
    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    var = getattr(runtime, "_current_context", None) if type(runtime) is ContextVarsRuntimeContext else None
    return var if isinstance(var, ContextVar) else None


_CONTEXT_VAR = _runtime_context_var()
_thread_id = threading.get_ident
_get_current: Callable[[], Context] = _CONTEXT_VAR.get if _CONTEXT_VAR is not None else otel_context.get_current
_attach: Callable[[Context], Token[Context]] = (_CONTEXT_VAR.set if _CONTEXT_VAR is not None
                                                else otel_context.attach)
_reset: Callable[[Token[Context]], None] = _CONTEXT_VAR.reset if _CONTEXT_VAR is not None else otel_context.detach
_context_log = logging.getLogger(otel_context.__name__)  # where opentelemetry.context.detach logs a failed detach

# The gateway reads W3C trace context and baggage (https://www.w3.org/TR/trace-context/,
# https://www.w3.org/TR/baggage/), whatever OTEL_PROPAGATORS the process configured for its own clients.
_W3C = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class StepOperation:
    """How one step kind maps onto the GenAI conventions."""

    operation: str | None  # gen_ai.operation.name; None: not a GenAI operation
    span_kind: SpanKind
    name_attribute: str | None  # the attribute that carries the step's name (tool name, data source)


STEP_OPERATIONS: Mapping[str, StepOperation] = {
    "llm": StepOperation("chat", SpanKind.CLIENT, None),
    "tool": StepOperation("execute_tool", SpanKind.INTERNAL, genai.GEN_AI_TOOL_NAME),
    "retrieval": StepOperation("retrieval", SpanKind.CLIENT, genai.GEN_AI_DATA_SOURCE_ID),
    "planning": StepOperation("plan", SpanKind.INTERNAL, None),
}
_PLAIN_STEP = StepOperation(None, SpanKind.INTERNAL, None)
# gen_ai.operation.name -> the kit's step kind (OTel semantic conventions, gen-ai-spans.md and
# gen-ai-agent-spans.md: chat, text_completion, generate_content, embeddings, execute_tool, retrieval): how the
# GenAI span processor reads instrumented spans, and why a kit span of these operations needs no
# aifactory.step.kind.
OPERATION_STEP_KINDS: Mapping[str, str] = {
    "chat": "llm",
    "text_completion": "llm",
    "generate_content": "llm",
    "embeddings": "llm",
    "execute_tool": "tool",
    "retrieval": "retrieval",
}
STEP_KIND_ATTRIBUTE = "aifactory.step.kind"
_MODEL_KIND = "llm"  # steps that call a model: span named after the model, operation duration recorded
_GENAI_METRIC_ATTRIBUTES = (genai.GEN_AI_OPERATION_NAME, genai.GEN_AI_PROVIDER_NAME, genai.GEN_AI_REQUEST_MODEL)


class WorkflowRun:
    """A running workflow: what `with tel.workflow(...) as run` gives you."""

    __slots__ = ("name", "span", "start", "steps", "seqs", "outer", "outer_parent", "finished", "trace_id", "_token",
                 "deadline_ns", "expected_steps", "done_steps", "labels", "serial", "serial_end", "thread", "session")

    def __init__(self, name: str, span: trace.Span, start: int, outer: WorkflowRun | None, outer_parent: int) -> None:
        self.name = name
        self.span = span
        self.start = start
        self.steps: list[Step] = []  # finished steps (StepInterval's fields), in the order they ended
        self.seqs: Iterator[int] = outer.seqs if outer is not None else count()  # one numbering per outermost workflow
        self.outer = outer
        self.outer_parent = outer_parent
        self.finished = False
        self.trace_id = span.get_span_context().trace_id
        self._token: object = None
        self.deadline_ns: int | None = None  # the deadline in force (own or inherited), epoch ns; None: no budget
        self.expected_steps: int | None = None  # workflow(..., steps=): top-level steps it expects to run
        self.done_steps = 0  # top-level steps finished
        self.labels: WorkflowLabels | None = None  # its metric attribute sets (set by the Telemetry that opens it)
        # The critical path while the steps are a serial chain (top-level steps ended in the thread that opened the
        # workflow, each starting after the previous ended: a sequential agent), summed as they finish: step kind
        # -> ns; None once they are anything else (the workflow's end then sweeps `steps`,
        # telemetry.critical_path). Only that thread changes it, so no lock. serial_end: the last such step's end.
        self.serial: dict[str, int] | None = {}
        self.serial_end = start
        self.thread = _thread_id()
        # the session key headers() sends: workflow(..., session=) or the outer workflow's; None: the trace id
        self.session: str | None = outer.session if outer is not None else None

    def set_attribute(self, key: str, value: Any) -> None:
        self.span.set_attribute(key, value)


class StepRun:
    """A running step: what `with tel.step(...) as run` gives you."""

    __slots__ = ("kind", "name", "span", "start", "seq", "parent", "workflow", "genai", "_telemetry", "_token",
                 "pending")

    def __init__(self, telemetry: Telemetry, kind: str, name: str, span: trace.Span, start: int, seq: int,
                 parent: int, workflow: WorkflowRun | None, genai_attrs: dict[str, str] | None) -> None:
        self._telemetry = telemetry
        self.kind = kind
        self.name = name
        self.span = span
        self.start = start
        self.seq = seq
        self.parent = parent
        self.workflow = workflow
        self.genai = genai_attrs
        self._token: object = None

    # seq DEFERRED only: the pending trace that records this step (the kit's per-step path never sets it).
    pending: PendingTrace

    def set_attribute(self, key: str, value: Any) -> None:
        self.span.set_attribute(key, value)

    def usage(self, *, input_tokens: int | None = None, output_tokens: int | None = None) -> None:
        """Token usage of this (LLM) step: span attributes and gen_ai.client.token.usage."""
        for attribute, tokens in ((genai.GEN_AI_USAGE_INPUT_TOKENS, input_tokens),
                                  (genai.GEN_AI_USAGE_OUTPUT_TOKENS, output_tokens)):
            if tokens is not None:
                self.span.set_attribute(attribute, tokens)
        self._telemetry._record_usage(self, input_tokens, output_tokens)


class WorkflowLabels:
    """The metric attribute sets of one workflow name under one Telemetry (tenant): built when a workflow of that
    name first opens, then shared by every run of it, so a workflow's end looks none of them up. Each set is the
    one Telemetry._metric_attrs gives for the same labels."""

    __slots__ = ("tenant", "workflow", "ok", "error", "steps", "critical_path", "deadlines")

    def __init__(self, telemetry: Telemetry, workflow: str) -> None:
        self.tenant = telemetry.tenant
        self.workflow = workflow
        self.ok = telemetry._metric_attrs(names.L_WORKFLOW, workflow, names.L_STATUS, STATUS_OK)
        self.error = telemetry._metric_attrs(names.L_WORKFLOW, workflow, names.L_STATUS, STATUS_ERROR)
        self.steps = telemetry._metric_attrs(names.L_WORKFLOW, workflow)
        self.critical_path: dict[str, _Sum] = {}  # step kind -> its critical-path sum (as met)
        self.deadlines: dict[str, _Sum] = {}  # met | missed -> its count (as met)


class _Sum:
    """One attribute set's running total of a summed metric (see _Sums)."""

    __slots__ = ("attributes", "total")

    def __init__(self, attributes: dict[str, str]) -> None:
        self.attributes = attributes
        self.total: float = 0


class _Sums:
    """A monotonic sum the kit adds to once per workflow (critical-path seconds per step kind, deadlines met or
    missed), kept in the process and handed to the SDK by an observable counter when a reader collects: a
    workflow's end costs a float addition per attribute set instead of an SDK measurement (its attributes cleaned,
    copied and hashed each time: a third of a sequential workflow's metric cost). One per meter and metric, shared
    by every Telemetry on that meter (the SDK keeps the first callback registered under a name).

    What differs from a synchronous counter (opentelemetry-sdk 1.45.2): the totals are the same up to float
    rounding (added per workflow here, per collection interval there); a series' start time is the first
    collection that sees it, so a delta reader's first point for a new series covers a short interval (Prometheus
    and the Collector's prometheus exporter read cumulative totals and ignore it); a series is kept for the life
    of the process, also under delta temporality (bounded by workflows x step kinds); no exemplars."""

    def __init__(self, meter: metrics.Meter, metric: names.Metric) -> None:
        self.lock = threading.Lock()  # held while totals change, so concurrent workflows lose no addition
        self._sums: dict[tuple[tuple[str, str], ...], _Sum] = {}
        meter.create_observable_counter(metric.otel, callbacks=[self._observe], unit=metric.unit,
                                        description=metric.description)

    def sum(self, attributes: dict[str, str]) -> _Sum:
        """The running total of one attribute set (made on first use; dict.setdefault: no lock needed)."""
        key = tuple(sorted(attributes.items()))
        found = self._sums.get(key)
        return found if found is not None else self._sums.setdefault(key, _Sum(attributes))

    def _observe(self, options: CallbackOptions) -> list[Observation]:
        with self.lock:
            return [Observation(s.total, s.attributes) for s in list(self._sums.values())]


_SUMS: WeakKeyDictionary[metrics.Meter, dict[str, _Sums]] = WeakKeyDictionary()
_SUMS_LOCK = threading.Lock()


# The API's placeholder meter, handed out while no MeterProvider is set (opentelemetry-api 1.45.2,
# metrics/_internal/__init__.py: _ProxyMeter; it hands each instrument to the real meter once one is set). If a
# later API release moves it, nothing counts as a placeholder: sums register on whatever meter a Telemetry has.
_PLACEHOLDER_METER: type | None = getattr(import_module("opentelemetry.metrics._internal"), "_ProxyMeter", None)


def _placeholder(meter: metrics.Meter) -> bool:
    return _PLACEHOLDER_METER is not None and type(meter) is _PLACEHOLDER_METER


def _sums_of(meter: metrics.Meter, metric: names.Metric) -> _Sums:
    """The one _Sums of `metric` on `meter` (registered with it on first use)."""
    with _SUMS_LOCK:
        by_name = _SUMS.setdefault(meter, {})
        found = by_name.get(metric.otel)
        if found is None:
            found = by_name[metric.otel] = _Sums(meter, metric)
        return found


Run = WorkflowRun | StepRun
_new_step_run = object.__new__


class PendingTrace(Protocol):
    """Spans of another instrumentation that the GenAI span processor (telemetry.genai_spans) keeps until their
    local root ends, when it classifies them all at once."""

    def adopt(self, span: trace.Span) -> None:
        """Keep a kit step's span too: the processor records it with the others (see DEFERRED)."""


# Instrumented spans the GenAI span processor has not classified yet, by span id -> the trace it keeps them in.
# A kit step started under one (a tool of an instrumented agent framework) is DEFERRED: the processor records it
# with that trace, once the trace's spans say which workflow it belongs to.
_foreign_runs: dict[int, PendingTrace] = {}
DEFERRED = -2  # the seq of a deferred step run: its metrics are the GenAI span processor's to record


def current_run(context: Context | None = None) -> Run | None:
    """The kit's workflow or step current in `context` (default: the current context), or None."""
    ctx = otel_context.get_current() if context is None else context
    return ctx.get(_RUN_KEY)  # type: ignore[return-value]


class Scope:
    """A workflow or step to run: a context manager (sync and async) and a decorator. Stateless, so one
    scope may be entered many times, concurrently (a decorated coroutine under asyncio.gather)."""

    __slots__ = ("_telemetry", "_fixed", "_workflow", "_kind", "_model", "_name", "_span_name", "_span_kind",
                 "_attributes", "_budget_ns", "_steps", "_session")

    def __init__(self, telemetry: Telemetry | Callable[[], Telemetry], *, workflow: bool, kind: str, name: str,
                 span_name: str, span_kind: SpanKind, attributes: dict[str, Any], budget_ns: int | None = None,
                 steps: int | None = None, session: str | None = None) -> None:
        self._telemetry = telemetry
        self._fixed = telemetry if isinstance(telemetry, Telemetry) else None  # None: resolved at each entry
        self._workflow = workflow
        self._kind = kind
        self._model = kind == _MODEL_KIND
        self._name = name
        self._span_name = span_name
        self._span_kind = span_kind
        self._attributes = attributes
        self._budget_ns = budget_ns
        self._steps = steps
        self._session = session

    def __enter__(self) -> Any:
        tel = self._fixed or self._telemetry()  # type: ignore[operator]
        if self._workflow:
            return tel._enter_workflow(self)
        # A step: the per-step hot path, inline (Telemetry._enter_step's body, without its frame).
        start = tel.clock()
        ctx = _get_current()
        owner = ctx.get(_RUN_KEY)
        span = tel._tracer.start_span(self._span_name, ctx, self._span_kind, self._attributes, start_time=start)
        if type(owner) is WorkflowRun:  # the common case: a top-level step of a workflow
            run = _new_step_run(StepRun)  # StepRun.__init__'s stores, without its frame
            run._telemetry = tel
            run.kind = self._kind
            run.name = self._name
            run.span = span
            run.start = start
            run.seq = next(owner.seqs)
            run.parent = ROOT
            run.workflow = owner
            run.genai = None
        else:
            if owner is None:
                owner = tel._orphan(self, ctx)
            run = tel._open_step(self._kind, self._name, span, start, owner)  # type: ignore[arg-type]
        workflow = run.workflow
        if self._model:
            run.genai = tel._genai_attrs(self._attributes, workflow)
        if workflow is not None and workflow.deadline_ns is not None:
            tel._record_step_budget(workflow, run.kind, start)
        run._token = _attach(Context({**ctx, _RUN_KEY: run, _SPAN_KEY: span}))
        return run

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        run = _get_current().get(_RUN_KEY)
        if type(run) is StepRun:  # the per-step hot path, inline
            tel = run._telemetry
            end = tel.clock()
            span = run.span
            if exc is not None:
                error_type = tel._fail(span, exc)
                span.end(end_time=end)
                _detach(run._token)  # type: ignore[arg-type]
                tel._finish_step(run, end, error_type)
                return
            span.end(end)
            try:
                _reset(run._token)  # type: ignore[arg-type]
            except Exception:
                _context_log.exception("Failed to detach context")  # as opentelemetry.context.detach: never raise
            workflow = run.workflow
            if workflow is None or run.genai is not None or tel.exemplars:
                tel._finish_step(run, end, None)
                return
            # Telemetry._finish_step's body for a step that succeeded in a workflow, without its frame.
            kind = run.kind
            attrs = tel._attrs.get((workflow.name, kind, run.name, STATUS_OK))  # _step_attrs' key
            start = run.start
            tel._step_duration.record((end - start) / _NS_PER_S, attrs if attrs is not None else
                                      tel._step_attrs(workflow.name, kind, run.name, STATUS_OK), _NO_TRACE)
            _add_step(workflow, kind, start, end, run.seq, run.parent)
        elif run is not None:
            (self._fixed or self._telemetry())._exit_workflow(run, exc)  # type: ignore[operator, arg-type]

    async def __aenter__(self) -> Any:
        return self.__enter__()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        if asyncio.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def run_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                with self:
                    return await fn(*args, **kwargs)  # type: ignore[misc]
            return run_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def run_sync(*args: P.args, **kwargs: P.kwargs) -> R:
            with self:
                return fn(*args, **kwargs)
        return run_sync


class Telemetry:
    """Instruments for one tenant's agent workflows over a tracer and a meter provider.

    tenant: the `tenant` label on every metric (the dashboards filter by it).
    tracer_provider / meter_provider: default: the global OTel providers (no-ops until configured).
    clock: nanoseconds since the epoch; default: time.time_ns (inject one in tests for exact numbers).
    idle_kind: the step kind that owns workflow time covered by no step; default: "other".
    exemplars: record each step's (workflow's) histograms and step errors in its own span's context, so the SDK's
    exemplar filter (default trace_based: sampled spans) attaches exemplars linking them to that span (the
    critical-path and deadline sums carry none); default: False (no trace context on the kit's records, no
    exemplars: the kit's pipeline drops them, see docs/telemetry.md).
    critical_path_attributes: put each workflow's critical-path shares on its span as
    aifactory.critical_path.<kind> (seconds); default: False (the metric has them; see the module docstring).
    """

    def __init__(self, *, tenant: str, tracer_provider: trace.TracerProvider | None = None,
                 meter_provider: metrics.MeterProvider | None = None, clock: Callable[[], int] = DEFAULT_CLOCK,
                 idle_kind: str = DEFAULT_IDLE_KIND, exemplars: bool = False,
                 critical_path_attributes: bool = False) -> None:
        if not isinstance(tenant, str) or not tenant:
            raise ValueError(f"tenant must be a non-empty string, got {tenant!r}")
        self.tenant = tenant
        self.clock = clock
        self.idle_kind = _check_kind(idle_kind, "idle_kind")
        self.exemplars = exemplars
        self.critical_path_attributes = critical_path_attributes
        self._tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer(INSTRUMENTATION_NAME)
        meter = (meter_provider or metrics.get_meter_provider()).get_meter(INSTRUMENTATION_NAME)

        def histogram(m: names.Metric, buckets: tuple[float, ...]) -> metrics.Histogram:
            return meter.create_histogram(m.otel, unit=m.unit, description=m.description,
                                          explicit_bucket_boundaries_advisory=buckets)

        def counter(m: names.Metric) -> metrics.Counter:
            return meter.create_counter(m.otel, unit=m.unit, description=m.description)

        self._workflow_duration = histogram(names.WORKFLOW_DURATION, names.WORKFLOW_BUCKETS_S)
        self._step_duration = histogram(names.STEP_DURATION, names.STEP_BUCKETS_S)
        self._workflow_steps = histogram(names.WORKFLOW_STEPS, names.STEPS_BUCKETS)
        self._token_usage = histogram(names.GENAI_TOKEN_USAGE, names.TOKEN_BUCKETS)
        self._operation_duration = histogram(names.GENAI_OPERATION_DURATION, names.STEP_BUCKETS_S)
        self._step_errors = counter(names.STEP_ERRORS)
        self._step_budget = histogram(names.STEP_BUDGET, names.BUDGET_BUCKETS_S)
        self._meter = meter
        self._critical_path: _Sums | None = None  # with _deadlines: bound to a real meter by _bind_sums
        self._deadlines: _Sums | None = None
        self._bind_sums()
        self._attrs: dict[tuple[Any, ...], dict[str, str]] = {}  # metric attribute sets, built once each
        self._labels: dict[str, WorkflowLabels] = {}  # workflow name -> its attribute sets, built once each
        self._scopes: dict[tuple[Any, ...], Scope] = {}  # step scopes without extra attributes, built once each
        self._open: dict[int, WorkflowRun] = {}  # trace id -> innermost open workflow (lost-context warning)
        self._warned = False

    # --- public API -------------------------------------------------------------------------
    def workflow(self, name: str, *, agent: str | None = None, budget_s: float | None = None,
                 steps: int | None = None, session: str | None = None, **attributes: Any) -> Scope:
        if attributes or session is not None:  # a session is per conversation: not cached
            return workflow_scope(self, name, agent=agent, budget_s=budget_s, steps=steps, session=session,
                                  **attributes)
        key = ("workflow", name, agent, budget_s, steps)
        scope = self._scopes.get(key)
        if scope is None:
            if len(self._scopes) >= SCOPE_CACHE_SIZE:
                self._scopes.clear()
            scope = self._scopes[key] = workflow_scope(self, name, agent=agent, budget_s=budget_s, steps=steps)
        return scope

    def step(self, kind: str, name: str, *, model: str | None = None, provider: str | None = None,
             operation: str | None = None, **attributes: Any) -> Scope:
        if attributes:
            return step_scope(self, kind, name, model=model, provider=provider, operation=operation, **attributes)
        scope = self._scopes.get((kind, name, model, provider, operation))
        return scope if scope is not None else _cached_scope(self._scopes, self, kind, name, model, provider, operation)

    def headers(self, *, context: Context | None = None) -> dict[str, str]:
        """W3C `traceparent` (and `tracestate`) plus `baggage` for an outgoing request (to the gateway):
        the baggage carries BUDGET_BAGGAGE_KEY as this request's budget (never below 0; see the module docstring:
        the remaining budget, or its share per step left), and the deadline; inside a workflow, SESSION_BAGGAGE_KEY
        (the session key the gateway's affinity hashes: the workflow's session, else its trace id)."""
        ctx = otel_context.get_current() if context is None else context
        remaining = self.remaining_budget_ms(context=ctx)
        run = current_run(ctx)
        if remaining is not None:
            ctx = baggage.set_baggage(BUDGET_BAGGAGE_KEY, str(remaining // _steps_left(run)), ctx)
        workflow = run if type(run) is WorkflowRun else run.workflow if run is not None else None  # type: ignore[union-attr]
        if workflow is not None:
            session = workflow.session
            ctx = baggage.set_baggage(SESSION_BAGGAGE_KEY, session if session is not None else
                                      f"{workflow.trace_id:032x}", ctx)
        carrier: dict[str, str] = {}
        _W3C.inject(carrier, context=ctx)
        return carrier

    def remaining_budget_ms(self, *, context: Context | None = None) -> int | None:
        """Milliseconds left before the current workflow's deadline (0 when past it); None: no budget."""
        deadline = str(baggage.get_baggage(DEADLINE_BAGGAGE_KEY, context) or "")
        if not deadline.isdigit():
            return None  # none, or not ours to read (baggage comes from callers too)
        return max(0, int(deadline) - -(-self.clock() // _NS_PER_MS))

    # --- workflow ---------------------------------------------------------------------------
    def _enter_workflow(self, scope: Scope) -> WorkflowRun:
        start = self.clock()
        ctx = _get_current()
        owner = ctx.get(_RUN_KEY)
        if type(owner) is StepRun and owner.seq == DEFERRED:
            owner = None  # inside an instrumented agent's step: a workflow of its own
        span = self._tracer.start_span(scope._span_name, ctx, SpanKind.INTERNAL, scope._attributes, start_time=start)
        run = self._open_workflow(scope._name, span, start, owner)  # type: ignore[arg-type]
        if scope._budget_ns is not None:
            ctx = _with_budget(ctx, start, scope._budget_ns)
        if _BAGGAGE_KEY in ctx:  # else no baggage, so no deadline
            run.deadline_ns = _deadline_ns(ctx)
        run.expected_steps = scope._steps
        if scope._session is not None:
            run.session = scope._session
        run._token = _attach(Context({**ctx, _RUN_KEY: run, _SPAN_KEY: span}))
        return run

    def _open_workflow(self, name: str, span: trace.Span, start: int, owner: Run | None, *,
                       track: bool = True) -> WorkflowRun:
        """A workflow run starting at `start` under `owner` (the run current where it started, if any).
        track: count it as open in its trace (the lost-context warning); False for one recorded after the fact."""
        outer = owner if type(owner) is WorkflowRun else owner.workflow if owner is not None else None  # type: ignore[union-attr]
        outer_parent = owner.seq if type(owner) is StepRun else ROOT  # type: ignore[union-attr]
        run = WorkflowRun(name, span, start, outer, outer_parent)
        labels = self._labels.get(name)
        run.labels = labels if labels is not None else self._workflow_labels(name)
        if track:
            self._open[run.trace_id] = run
        return run

    def _exit_workflow(self, run: WorkflowRun, exc: BaseException | None) -> None:
        end = self.clock()
        error_type = None if exc is None else self._fail(run.span, exc)
        _detach(run._token)  # type: ignore[arg-type]
        shares = self._finish_workflow(run, end, error_type)
        if self.critical_path_attributes:
            run.span.set_attributes({_critical_path_attribute(kind): ns / _NS_PER_S for kind, ns in shares.items()})
        run.span.end(end)

    def _finish_workflow(self, run: WorkflowRun, end: int, error_type: str | None) -> Mapping[str, float]:
        """Record a finished workflow's metrics and hand its steps to the outer workflow; its critical path (step
        kind -> the time it owns, ns)."""
        run.finished = True
        if self._open.get(run.trace_id) is run:
            if run.outer is not None and not run.outer.finished and run.outer.trace_id == run.trace_id:
                self._open[run.trace_id] = run.outer
            else:
                self._open.pop(run.trace_id, None)  # threads may race here: never a KeyError
        labels = run.labels if run.labels is not None else self._workflow_labels(run.name)
        ctx = trace.set_span_in_context(run.span) if self.exemplars else _NO_TRACE
        window_end = end if end >= run.start else run.start  # a clock stepped back: an empty window, no error
        serial = run.serial
        if serial is not None and run.serial_end <= window_end:  # a serial chain: summed as its steps finished
            run.serial = None
            # a copy, whatever a late step from elsewhere still does
            owned = serial_shares(dict(serial), start=run.start, end=window_end, idle_kind=self.idle_kind)
        else:
            owned = critical_path(run.steps, start=run.start, end=window_end, idle_kind=self.idle_kind)
        sums = self._critical_path or self._bind_sums()
        if sums is not None:
            cached = labels.critical_path
            with sums.lock:
                for kind, ns in owned.items():
                    total = cached.get(kind)
                    if total is None:
                        total = cached[kind] = sums.sum(
                            self._metric_attrs(names.L_WORKFLOW, run.name, names.L_STEP_KIND, kind))
                    total.total += ns / _NS_PER_S
        self._workflow_duration.record((end - run.start) / _NS_PER_S,
                                       labels.ok if error_type is None else labels.error, ctx)
        self._workflow_steps.record(len(run.steps), labels.steps, ctx)
        deadlines = self._deadlines
        if run.deadline_ns is not None and deadlines is not None:
            met = names.DEADLINE_MISSED if end > run.deadline_ns else names.DEADLINE_MET
            total = labels.deadlines.get(met)
            if total is None:
                total = labels.deadlines[met] = deadlines.sum(
                    self._metric_attrs(names.L_WORKFLOW, run.name, names.L_DEADLINE, met))
            with deadlines.lock:
                total.total += 1
        outer = run.outer
        if outer is not None and not outer.finished and run.steps:
            outer.serial = None  # its steps join the outer's, which the outer's end sweeps
            outer.steps.extend(s if s[4] != ROOT else (*s[:4], run.outer_parent)  # type: ignore[misc]
                               for s in run.steps)  # (kind, start, end, seq, parent): top-level ones re-parented
        return owned

    # --- step -------------------------------------------------------------------------------
    # (Scope.__enter__ and __exit__ run a kit step: the per-step hot path, without extra frames.)
    def _record_step_budget(self, workflow: WorkflowRun, kind: str, start: int) -> None:
        """The budget left when a step of a workflow with a deadline starts."""
        self._step_budget.record(max(0, workflow.deadline_ns - start) / _NS_PER_S,  # type: ignore[operator]
                                 self._metric_attrs(names.L_WORKFLOW, workflow.name, names.L_STEP_KIND, kind),
                                 _NO_TRACE)

    def _open_step(self, kind: str, name: str, span: trace.Span, start: int,
                   owner: Run | PendingTrace | None) -> StepRun:
        """A step run starting at `start` under `owner` (the run current where it started, if any; or the pending
        trace of the instrumented span it started under)."""
        if owner is None:
            return StepRun(self, kind, name, span, start, 0, ROOT, None, None)
        if type(owner) is WorkflowRun:
            return StepRun(self, kind, name, span, start, next(owner.seqs), ROOT, owner, None)
        if type(owner) is StepRun:
            workflow = owner.workflow
            if workflow is not None:
                return StepRun(self, kind, name, span, start, next(workflow.seqs), owner.seq, workflow, None)
            if owner.seq != DEFERRED:
                return StepRun(self, kind, name, span, start, 0, owner.seq, None, None)
            pending = owner.pending
        else:
            pending = cast(PendingTrace, owner)
        # Under an instrumented span not classified yet: the GenAI span processor records this step with its trace.
        run = StepRun(self, kind, name, span, start, DEFERRED, ROOT, None, None)
        run.pending = pending
        pending.adopt(span)
        return run

    def _finish_step(self, run: StepRun, end: int, error_type: str | None) -> None:
        """Record a finished step's metrics and add it to its workflow's critical path (a deferred step's are
        the GenAI span processor's to record)."""
        workflow = run.workflow
        if workflow is None and run.seq == DEFERRED:
            return
        seconds = (end - run.start) / _NS_PER_S
        wf_name = workflow.name if workflow is not None else NO_WORKFLOW
        ctx = self._record_context(run) if self.exemplars else _NO_TRACE
        if error_type is None:
            attrs = self._attrs.get((wf_name, run.kind, run.name, STATUS_OK))  # _step_attrs' key, without its frame
            self._step_duration.record(seconds, attrs if attrs is not None else
                                       self._step_attrs(wf_name, run.kind, run.name, STATUS_OK), ctx)
        else:
            self._step_duration.record(seconds, self._step_attrs(wf_name, run.kind, run.name, STATUS_ERROR), ctx)
            self._step_errors.add(1, self._metric_attrs(names.L_WORKFLOW, wf_name, names.L_STEP_KIND, run.kind,
                                                        names.L_STEP_NAME, run.name, ERROR_TYPE, error_type), ctx)
        if run.genai is not None:
            self._operation_duration.record(seconds, run.genai if error_type is None
                                            else {**run.genai, ERROR_TYPE: error_type}, ctx)
        if workflow is not None:
            _add_step(workflow, run.kind, run.start, end, run.seq, run.parent)

    def _record_usage(self, run: StepRun, input_tokens: int | None, output_tokens: int | None) -> None:
        if run.seq == DEFERRED:
            return  # the GenAI span processor reads them from the span
        genai_attrs = run.genai or self._genai_attrs({}, run.workflow)
        ctx = self._record_context(run)
        for token_type, tokens in (("input", input_tokens), ("output", output_tokens)):
            if tokens is not None:
                self._token_usage.record(tokens, self._token_attrs(genai_attrs, token_type), ctx)

    def _orphan(self, scope: Scope, ctx: Context) -> PendingTrace | None:
        """The owner of a step whose context holds none of the kit's runs: the pending trace of the instrumented
        span it started under (an agent framework's tool), else None, warning once when the context was evidently
        lost on the way."""
        span_context = trace.get_current_span(ctx).get_span_context()
        run = _foreign_runs.get(span_context.span_id)
        if run is not None or self._warned or not self._open:
            return run
        lost_in_trace = span_context.is_valid and span_context.trace_id in self._open
        lost_in_thread = not span_context.is_valid and threading.current_thread() is not threading.main_thread()
        if lost_in_trace or lost_in_thread:
            self._warned = True
            where = (f"under a span of the trace of open workflow {self._open[span_context.trace_id].name!r}"
                     if lost_in_trace else f"in thread {threading.current_thread().name!r} while workflows are open")
            _log.warning("step %s %r started outside any workflow %s: if it belongs to one, its context was "
                         "lost on the way and the workflow's metrics miss it. For threads and executors instrument "
                         "threading (opentelemetry-instrumentation-threading: ThreadingInstrumentor().instrument()) "
                         "or submit contextvars.copy_context().run; see docs/telemetry.md 'What carries the workflow'. "
                         "(Warned once.)", scope._kind, scope._name, where)
        return None

    # --- helpers ----------------------------------------------------------------------------
    def _bind_sums(self) -> _Sums | None:
        """The critical-path sums (and the deadlines'), on this Telemetry's meter; None while that is the API's
        placeholder (no MeterProvider set yet), whose measurements are dropped anyway. Bound later, on the real
        meter the global provider then gives: registered on a placeholder, every placeholder's observable counter
        would be handed to the real meter once it is set, which keeps only the first one's callback."""
        meter = self._meter
        if _placeholder(meter):
            meter = metrics.get_meter_provider().get_meter(INSTRUMENTATION_NAME)
            if _placeholder(meter):
                return None
        self._deadlines = _sums_of(meter, names.WORKFLOW_DEADLINES)
        self._critical_path = _sums_of(meter, names.CRITICAL_PATH)
        return self._critical_path

    def _record_context(self, run: Run) -> Context:
        """The context the run's metrics are recorded in: its own span's with exemplars on, else one without a
        span (never the caller's current context: a step ends in its workflow's, whose exemplars would point
        at the workflow span)."""
        return trace.set_span_in_context(run.span) if self.exemplars else _NO_TRACE

    def _workflow_labels(self, workflow: str) -> WorkflowLabels:
        labels = self._labels[workflow] = WorkflowLabels(self, workflow)
        return labels

    def _metric_attrs(self, *pairs: str) -> dict[str, str]:
        """tenant + the given (key, value) pairs; one dict per distinct set, reused (no per-step allocation)."""
        attrs = self._attrs.get(pairs)
        if attrs is None:
            attrs = self._attrs[pairs] = {names.L_TENANT: self.tenant,
                                          **dict(zip(pairs[::2], pairs[1::2], strict=True))}
        return attrs

    def _step_attrs(self, workflow: str, kind: str, name: str, status: str) -> dict[str, str]:
        """Step-duration attributes (the per-step hot path: a 4-tuple key)."""
        key = (workflow, kind, name, status)
        attrs = self._attrs.get(key)
        if attrs is None:
            attrs = self._attrs[key] = self._metric_attrs(names.L_WORKFLOW, workflow, names.L_STEP_KIND, kind,
                                                          names.L_STEP_NAME, name, names.L_STATUS, status)
        return attrs

    def _token_attrs(self, genai_attrs: dict[str, str], token_type: str) -> dict[str, str]:
        return self._cached(("tokens", token_type, *genai_attrs.values()),
                            lambda: {**genai_attrs, genai.GEN_AI_TOKEN_TYPE: token_type})

    def _genai_attrs(self, span_attributes: Mapping[str, Any], workflow: WorkflowRun | None) -> dict[str, str]:
        """Attributes of the GenAI metrics: tenant, workflow, operation, provider and model (when known)."""
        values: tuple[str | None, ...] = (workflow.name if workflow else NO_WORKFLOW,
                                          *(span_attributes.get(key) for key in _GENAI_METRIC_ATTRIBUTES))

        def build() -> dict[str, str]:
            attrs = {names.L_TENANT: self.tenant, names.L_WORKFLOW: str(values[0])}
            attrs.update((k, v) for k, v in zip(_GENAI_METRIC_ATTRIBUTES, values[1:], strict=True) if v is not None)
            return attrs

        return self._cached(("genai", *values), build)

    def _cached(self, key: tuple[Any, ...], build: Callable[[], dict[str, str]]) -> dict[str, str]:
        attrs = self._attrs.get(key)
        if attrs is None:
            attrs = self._attrs[key] = build()
        return attrs

    @staticmethod
    def _fail(span: trace.Span, exc: BaseException) -> str:
        """Mark the span failed by `exc`; its error.type."""
        error_type = _error_type(exc)
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        span.set_attribute(ERROR_TYPE, error_type)
        span.record_exception(exc)
        return error_type


_CRITICAL_PATH_ATTRIBUTES: dict[str, str] = {}  # step kind -> its workflow span attribute


def _critical_path_attribute(kind: str) -> str:
    """The workflow span attribute of a step kind's critical-path seconds."""
    name = _CRITICAL_PATH_ATTRIBUTES.get(kind)
    if name is None:
        name = _CRITICAL_PATH_ATTRIBUTES[kind] = f"aifactory.critical_path.{kind}"
    return name


def _add_step(workflow: WorkflowRun, kind: str, start: int, end: int, seq: int, parent: int) -> None:
    """A finished step joins its workflow: its critical path (summed at once while the steps are a serial chain
    in the workflow's thread; a step from another thread, nested, overlapping or with its end before its start,
    as a clock stepped back gives, leaves the chain to the sweep) and its count of top-level steps done. A
    workflow already finished takes no more steps."""
    if workflow.finished:
        if parent == ROOT:
            workflow.done_steps += 1
        return
    workflow.steps.append((kind, start, end, seq, parent))
    if parent != ROOT:
        workflow.serial = None
        return
    workflow.done_steps += 1
    serial = workflow.serial
    if serial is not None:
        if workflow.serial_end <= start <= end and _thread_id() == workflow.thread:
            workflow.serial_end = end
            serial[kind] = serial.get(kind, 0) + (end - start)
        else:
            workflow.serial = None


def _with_budget(ctx: Context, start: int, budget_ns: int) -> Context:
    """ctx with the workflow's deadline and budget in baggage; an outer, earlier deadline is kept."""
    deadline_ms = (start + budget_ns) // _NS_PER_MS
    outer = baggage.get_baggage(DEADLINE_BAGGAGE_KEY, ctx)
    if outer is not None and str(outer).isdigit():
        deadline_ms = min(deadline_ms, int(str(outer)))
    ctx = baggage.set_baggage(DEADLINE_BAGGAGE_KEY, str(deadline_ms), ctx)
    return baggage.set_baggage(BUDGET_BAGGAGE_KEY, str(max(0, deadline_ms - start // _NS_PER_MS)), ctx)


def _deadline_ns(ctx: Context) -> int | None:
    """The deadline in ctx's baggage (set by this or an enclosing workflow, or by a caller), epoch ns."""
    deadline = str(baggage.get_baggage(DEADLINE_BAGGAGE_KEY, ctx) or "")
    return int(deadline) * _NS_PER_MS if deadline.isdigit() else None


def _steps_left(run: Run | None) -> int:
    """Steps left in the nearest workflow around `run` that declared its steps (the current one included, at
    least 1); 1 when none did: the request gets the whole remaining budget."""
    workflow = run if type(run) is WorkflowRun else run.workflow if run is not None else None  # type: ignore[union-attr]
    while workflow is not None:
        if workflow.expected_steps is not None:
            return max(1, workflow.expected_steps - workflow.done_steps)
        workflow = workflow.outer
    return 1


def _cached_scope(cache: dict[tuple[Any, ...], Scope], telemetry: Telemetry | Callable[[], Telemetry], kind: str,
                  name: str, model: str | None, provider: str | None, operation: str | None) -> Scope:
    """A step scope without extra attributes, built once per distinct arguments (scopes are stateless)."""
    key = (kind, name, model, provider, operation)
    scope = cache.get(key)
    if scope is None:
        if len(cache) >= SCOPE_CACHE_SIZE:
            cache.clear()
        scope = cache[key] = step_scope(telemetry, kind, name, model=model, provider=provider, operation=operation)
    return scope


def workflow_scope(telemetry: Telemetry | Callable[[], Telemetry], name: str, *, agent: str | None = None,
                   budget_s: float | None = None, steps: int | None = None, session: str | None = None,
                   **attributes: Any) -> Scope:
    """The scope of one workflow run (see the module docstring for its span).

    budget_s: the workflow's latency budget, carried as W3C baggage (see headers()); default: none.
    steps: how many sequential top-level steps the workflow expects to run; headers() then sends each request
    the remaining budget divided by the steps left; default: none (each request gets the whole remaining budget).
    session: the session key headers() sends the gateway (session affinity), for a conversation that runs as
    several workflows; 1-128 of A-Z a-z 0-9 . _ ~ -; default: the enclosing workflow's, else the trace id.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"workflow name must be a non-empty string, got {name!r}")
    if budget_s is not None and (isinstance(budget_s, bool) or not isinstance(budget_s, int | float)
                                 or not budget_s >= 0):
        raise ValueError(f"workflow {name!r}: budget_s must be a number of seconds >= 0, got {budget_s!r}")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"workflow {name!r}: steps must be a whole number >= 1, got {steps!r}")
    if session is not None and (not isinstance(session, str) or not SESSION_PATTERN.fullmatch(session)):
        raise ValueError(f"workflow {name!r}: session must be 1-128 characters of A-Z a-z 0-9 . _ ~ - (sent as "
                         f"they are in the baggage and the x-aifactory-session header), got {session!r}")
    if agent is None:
        base = {genai.GEN_AI_OPERATION_NAME: "invoke_workflow", genai.GEN_AI_WORKFLOW_NAME: name}
        span_name = f"invoke_workflow {name}"
    else:
        base = {genai.GEN_AI_OPERATION_NAME: "invoke_agent", genai.GEN_AI_AGENT_NAME: agent}
        span_name = f"invoke_agent {agent}"
    return Scope(telemetry, workflow=True, kind="", name=name, span_name=span_name, span_kind=SpanKind.INTERNAL,
                 attributes={**base, **attributes},
                 budget_ns=None if budget_s is None else round(budget_s * _NS_PER_S), steps=steps, session=session)


def step_scope(telemetry: Telemetry | Callable[[], Telemetry], kind: str, name: str, *, model: str | None = None,
               provider: str | None = None, operation: str | None = None, **attributes: Any) -> Scope:
    """The scope of one step (see the module docstring for its span)."""
    _check_kind(kind, "step kind")
    if not isinstance(name, str) or not name:
        raise ValueError(f"step name must be a non-empty string, got {name!r}")
    mapping = STEP_OPERATIONS.get(kind, _PLAIN_STEP)
    op = operation or mapping.operation
    base: dict[str, Any] = {}
    if op is not None:
        base[genai.GEN_AI_OPERATION_NAME] = op
    if op is None or OPERATION_STEP_KINDS.get(op) != kind:
        base[STEP_KIND_ATTRIBUTE] = kind  # a span attribute less per step where the operation says it
    base[mapping.name_attribute or "aifactory.step.name"] = name
    if model is not None:
        base[genai.GEN_AI_REQUEST_MODEL] = model
    if provider is not None:
        base[genai.GEN_AI_PROVIDER_NAME] = provider
    subject = model if kind == _MODEL_KIND and model else name
    return Scope(telemetry, workflow=False, kind=kind, name=name, span_name=f"{op or kind} {subject}",
                 span_kind=mapping.span_kind, attributes={**base, **attributes})


_installed: Telemetry | None = None


def install(telemetry: Telemetry | None) -> None:
    """Make `telemetry` the one the module-level workflow() and step() use (None: back to the default)."""
    global _installed
    _installed = telemetry


def current() -> Telemetry:
    """The installed Telemetry; if none is, one over the global OTel providers (no-ops unless the
    application configured OTel itself) with the tenant from OTEL_RESOURCE_ATTRIBUTES, else "unknown"."""
    global _installed
    if _installed is None:
        _installed = Telemetry(tenant=resource_attributes(os.environ).get(names.L_TENANT) or UNKNOWN_TENANT)
    return _installed


def workflow(name: str, *, agent: str | None = None, budget_s: float | None = None, steps: int | None = None,
             session: str | None = None, **attributes: Any) -> Scope:
    """A workflow scope over the installed Telemetry (resolved when the scope is entered, so decorating
    at import time, before telemetry.setup(), is fine)."""
    return workflow_scope(current, name, agent=agent, budget_s=budget_s, steps=steps, session=session, **attributes)


def step(kind: str, name: str, *, model: str | None = None, provider: str | None = None,
         operation: str | None = None, **attributes: Any) -> Scope:
    """A step scope over the installed Telemetry (resolved when the scope is entered)."""
    if attributes:
        return step_scope(current, kind, name, model=model, provider=provider, operation=operation, **attributes)
    return _cached_scope(_module_scopes, current, kind, name, model, provider, operation)


_module_scopes: dict[tuple[Any, ...], Scope] = {}


def headers(*, context: Context | None = None) -> dict[str, str]:
    """Trace context and baggage (with the remaining budget) for an outgoing request: Telemetry.headers()
    of the installed Telemetry."""
    return current().headers(context=context)


def remaining_budget_ms(*, context: Context | None = None) -> int | None:
    """Milliseconds left in the current workflow's budget, by the installed Telemetry's clock; None: no budget."""
    return current().remaining_budget_ms(context=context)


def resource_attributes(environ: Mapping[str, str]) -> dict[str, str]:
    """OTEL_RESOURCE_ATTRIBUTES ("k=v,k2=v2", values percent-encoded) as a dict."""
    attrs: dict[str, str] = {}
    for item in environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            attrs[key.strip()] = unquote(value.strip())
    return attrs


def _check_kind(kind: str, what: str) -> str:
    if not isinstance(kind, str) or not _KIND_PATTERN.fullmatch(kind):
        raise ValueError(f"{what} {kind!r} is not allowed: use 1-32 lowercase letters, digits or '_', starting "
                         f"with a letter (the kinds the dashboards know: {', '.join(names.STEP_KINDS)})")
    return kind


def _error_type(exc: BaseException) -> str:
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
