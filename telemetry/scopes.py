"""Workflow and step scopes: what `tel.workflow(...)` and `tel.step(...)` return, the spans they start, and
entering and leaving them (the per-step hot path).

Scopes are context managers (`with` and `async with`) and decorators (sync and async functions). The
current workflow and step live in OpenTelemetry's own context (one context key next to the current span),
so whatever carries that context carries them too: asyncio tasks, asyncio.to_thread, contextvars.copy_context,
and OpenTelemetry's threading instrumentation for threads and ThreadPoolExecutor. Auto-instrumented client
spans (HTTP, gRPC, GenAI SDKs) nest under the current step. Process pools carry no context: see docs/telemetry.md.
A step that finds no workflow in its context while a workflow of the same trace is open (or, in a thread that
got no context, while any workflow is open) logs one warning per Recorder: its context was lost on the way.

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
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as genai
from opentelemetry.trace import SpanKind

from telemetry.budget import _BAGGAGE_KEY, SESSION_PATTERN, _deadline_ns, _with_budget
from telemetry.critical_path import ROOT
from telemetry.runs import (
    _NO_TRACE,
    _NS_PER_S,
    _RUN_KEY,
    _SPAN_KEY,
    DEFERRED,
    STATUS_OK,
    Recorder,
    StepRun,
    WorkflowRun,
    _add_step,
    _check_kind,
    _new_step_run,
)

__all__ = [
    "SCOPE_CACHE_SIZE",
    "STEP_OPERATIONS",
    "OPERATION_STEP_KINDS",
    "STEP_KIND_ATTRIBUTE",
    "StepOperation",
    "Scope",
    "workflow_scope",
    "step_scope",
]

SCOPE_CACHE_SIZE = 1024  # distinct scopes without extra attributes kept ready per Recorder (scopes are stateless)


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
_get_current: Callable[[], Context] = _CONTEXT_VAR.get if _CONTEXT_VAR is not None else otel_context.get_current
_attach: Callable[[Context], Token[Context]] = (_CONTEXT_VAR.set if _CONTEXT_VAR is not None
                                                else otel_context.attach)
_reset: Callable[[Token[Context]], None] = _CONTEXT_VAR.reset if _CONTEXT_VAR is not None else otel_context.detach
_context_log = logging.getLogger(otel_context.__name__)  # where opentelemetry.context.detach logs a failed detach

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


class Scope:
    """A workflow or step to run: a context manager (sync and async) and a decorator. Stateless, so one
    scope may be entered many times, concurrently (a decorated coroutine under asyncio.gather)."""

    __slots__ = ("_telemetry", "_fixed", "_workflow", "_kind", "_model", "_name", "_span_name", "_span_kind",
                 "_attributes", "_budget_ns", "_steps", "_session")

    def __init__(self, telemetry: Recorder | Callable[[], Recorder], *, workflow: bool, kind: str, name: str,
                 span_name: str, span_kind: SpanKind, attributes: dict[str, Any], budget_ns: int | None = None,
                 steps: int | None = None, session: str | None = None) -> None:
        self._telemetry = telemetry
        self._fixed = None if callable(telemetry) else telemetry  # None: a provider, resolved at each entry
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
            return self._enter_workflow(tel)
        # A step: the per-step hot path, inline (Recorder._enter_step's body, without its frame).
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
                owner = tel._orphan(self._kind, self._name, ctx)
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
            # Recorder._finish_step's body for a step that succeeded in a workflow, without its frame.
            kind = run.kind
            attrs = tel._attrs.get((workflow.name, kind, run.name, STATUS_OK))  # _step_attrs' key
            start = run.start
            tel._step_duration.record((end - start) / _NS_PER_S, attrs if attrs is not None else
                                      tel._step_attrs(workflow.name, kind, run.name, STATUS_OK), _NO_TRACE)
            _add_step(workflow, kind, start, end, run.seq, run.parent)
        elif run is not None:
            self._exit_workflow(self._fixed or self._telemetry(), run, exc)  # type: ignore[operator, arg-type]

    def _enter_workflow(self, tel: Recorder) -> WorkflowRun:
        start = tel.clock()
        ctx = _get_current()
        owner = ctx.get(_RUN_KEY)
        if type(owner) is StepRun and owner.seq == DEFERRED:
            owner = None  # inside an instrumented agent's step: a workflow of its own
        span = tel._tracer.start_span(self._span_name, ctx, SpanKind.INTERNAL, self._attributes, start_time=start)
        run = tel._open_workflow(self._name, span, start, owner)  # type: ignore[arg-type]
        if self._budget_ns is not None:
            ctx = _with_budget(ctx, start, self._budget_ns)
        if _BAGGAGE_KEY in ctx:  # else no baggage, so no deadline
            run.deadline_ns = _deadline_ns(ctx)
        run.expected_steps = self._steps
        if self._session is not None:
            run.session = self._session
        run._token = _attach(Context({**ctx, _RUN_KEY: run, _SPAN_KEY: span}))
        return run

    @staticmethod
    def _exit_workflow(tel: Recorder, run: WorkflowRun, exc: BaseException | None) -> None:
        end = tel.clock()
        error_type = None if exc is None else tel._fail(run.span, exc)
        _detach(run._token)  # type: ignore[arg-type]
        shares = tel._finish_workflow(run, end, error_type)
        if tel.critical_path_attributes:
            run.span.set_attributes({_critical_path_attribute(kind): ns / _NS_PER_S for kind, ns in shares.items()})
        run.span.end(end)

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


_CRITICAL_PATH_ATTRIBUTES: dict[str, str] = {}  # step kind -> its workflow span attribute


def _critical_path_attribute(kind: str) -> str:
    """The workflow span attribute of a step kind's critical-path seconds."""
    name = _CRITICAL_PATH_ATTRIBUTES.get(kind)
    if name is None:
        name = _CRITICAL_PATH_ATTRIBUTES[kind] = f"aifactory.critical_path.{kind}"
    return name



def _cached_scope(cache: dict[tuple[Any, ...], Scope], telemetry: Recorder | Callable[[], Recorder], kind: str,
                  name: str, model: str | None, provider: str | None, operation: str | None) -> Scope:
    """A step scope without extra attributes, built once per distinct arguments (scopes are stateless)."""
    key = (kind, name, model, provider, operation)
    scope = cache.get(key)
    if scope is None:
        if len(cache) >= SCOPE_CACHE_SIZE:
            cache.clear()
        scope = cache[key] = step_scope(telemetry, kind, name, model=model, provider=provider, operation=operation)
    return scope


def workflow_scope(telemetry: Recorder | Callable[[], Recorder], name: str, *, agent: str | None = None,
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


def step_scope(telemetry: Recorder | Callable[[], Recorder], kind: str, name: str, *, model: str | None = None,
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
