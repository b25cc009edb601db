"""Workflow and step instrumentation: OTel GenAI spans plus the kit's compound-latency metrics.

    tel = Telemetry(tenant="search")          # or telemetry.setup() from OTEL_* variables

    @tel.workflow("answer-question")
    async def answer(q):
        with tel.step("planning", "plan"):
            plan = await planner(q)
        async with tel.step("llm", "draft", model="llama-3-70b", provider="vllm") as s:
            reply = await llm(plan)
            s.usage(input_tokens=reply.prompt_tokens, output_tokens=reply.completion_tokens)
        await asyncio.gather(*(tool(t) for t in plan.tools))   # each tool() decorated with tel.step("tool", ...)

Scopes are context managers (`with` and `async with`) and decorators (sync and async functions). The
current workflow and step travel in context variables, so steps started in tasks under asyncio.gather
belong to the workflow and step that created the tasks; the OTel span is also made current, so
auto-instrumented client spans (HTTP, gRPC) nest under the step.

Spans (OTel GenAI semantic conventions, development status):
    workflow             invoke_workflow {workflow}   INTERNAL  gen_ai.workflow.name
    workflow, agent=...  invoke_agent {agent}         INTERNAL  gen_ai.agent.name
    llm                  chat {model}                 CLIENT    gen_ai.request.model, gen_ai.provider.name,
                                                                gen_ai.usage.input_tokens / output_tokens
    tool                 execute_tool {name}          INTERNAL  gen_ai.tool.name
    retrieval            retrieval {name}             CLIENT    gen_ai.data_source.id
    planning             plan {name}                  INTERNAL
    any other kind       {kind} {name}                INTERNAL  (no gen_ai.operation.name)
Every step span also carries aifactory.step.kind, and aifactory.step.name unless a GenAI attribute
already names the step (gen_ai.tool.name, gen_ai.data_source.id); `operation=` overrides the
GenAI operation (e.g. "embeddings" for an llm step). Failed scopes: status ERROR, the exception event,
error.type = the exception's qualified class name. The workflow span gets aifactory.critical_path.<kind>.

Metrics (names and labels: telemetry/names.py), every one labelled with the tenant and workflow:
workflow duration, step duration, critical-path seconds per step kind (telemetry/critical_path.py:
innermost steps own the time, parallel steps split it, uncovered time is "other"), steps per workflow,
step errors, gen_ai.client.token.usage and gen_ai.client.operation.duration (llm steps).
An exception leaving nested steps fails each of them (each is counted in the errors metric).
Steps outside any workflow still get spans and step metrics (workflow label "none").
A workflow started inside another is its own workflow, and its steps also count in the outer one's
critical path, under the outer step that was current when it started.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from itertools import count
from typing import Any, ParamSpec, TypeVar
from urllib.parse import unquote

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as genai
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import SpanKind, Status, StatusCode

from telemetry import names
from telemetry.critical_path import DEFAULT_IDLE_KIND, ROOT, StepInterval, critical_path

__all__ = [
    "DEFAULT_CLOCK",
    "NO_WORKFLOW",
    "UNKNOWN_TENANT",
    "STEP_OPERATIONS",
    "StepOperation",
    "Telemetry",
    "Scope",
    "StepRun",
    "WorkflowRun",
    "INSTRUMENTATION_NAME",
    "install",
    "current",
    "workflow",
    "step",
    "workflow_scope",
    "step_scope",
    "resource_attributes",
]

INSTRUMENTATION_NAME = "aifactory.telemetry"
DEFAULT_CLOCK: Callable[[], int] = time.time_ns  # epoch ns: span timestamps and durations come from one clock
NO_WORKFLOW = "none"  # workflow label of steps run outside any workflow
UNKNOWN_TENANT = "unknown"  # tenant label when nothing named one (see telemetry.setup)
STATUS_OK, STATUS_ERROR = "ok", "error"
_NS_PER_S = 1e9
_KIND_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,31}")

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
_MODEL_KIND = "llm"  # steps that call a model: span named after the model, operation duration recorded
_GENAI_METRIC_ATTRIBUTES = (genai.GEN_AI_OPERATION_NAME, genai.GEN_AI_PROVIDER_NAME, genai.GEN_AI_REQUEST_MODEL)


class WorkflowRun:
    """A running workflow: what `with tel.workflow(...) as run` gives you."""

    __slots__ = ("name", "span", "start", "steps", "seqs", "outer", "outer_parent", "finished", "_tokens")

    def __init__(self, name: str, span: trace.Span, start: int, outer: WorkflowRun | None, outer_parent: int) -> None:
        self.name = name
        self.span = span
        self.start = start
        self.steps: list[StepInterval] = []
        self.seqs: Iterator[int] = outer.seqs if outer is not None else count()  # one numbering per outermost workflow
        self.outer = outer
        self.outer_parent = outer_parent
        self.finished = False
        self._tokens: tuple[Any, Any] = (None, None)

    def set_attribute(self, key: str, value: Any) -> None:
        self.span.set_attribute(key, value)


class StepRun:
    """A running step: what `with tel.step(...) as run` gives you."""

    __slots__ = ("kind", "name", "span", "start", "seq", "parent", "workflow", "genai", "_telemetry", "_tokens")

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
        self._tokens: tuple[Any, Any] = (None, None)

    def set_attribute(self, key: str, value: Any) -> None:
        self.span.set_attribute(key, value)

    def usage(self, *, input_tokens: int | None = None, output_tokens: int | None = None) -> None:
        """Token usage of this (LLM) step: span attributes and gen_ai.client.token.usage."""
        self._telemetry._record_usage(self, input_tokens, output_tokens)


_current: ContextVar[WorkflowRun | StepRun | None] = ContextVar("aifactory_telemetry_current", default=None)


class Scope:
    """A workflow or step to run: a context manager (sync and async) and a decorator. Stateless, so one
    scope may be entered many times, concurrently (a decorated coroutine under asyncio.gather)."""

    __slots__ = ("_telemetry", "_workflow", "_kind", "_name", "_span_name", "_span_kind", "_attributes")

    def __init__(self, telemetry: Telemetry | Callable[[], Telemetry], *, workflow: bool, kind: str, name: str,
                 span_name: str, span_kind: SpanKind, attributes: dict[str, Any]) -> None:
        self._telemetry = telemetry
        self._workflow = workflow
        self._kind = kind
        self._name = name
        self._span_name = span_name
        self._span_kind = span_kind
        self._attributes = attributes

    def _tel(self) -> Telemetry:
        tel = self._telemetry
        return tel if isinstance(tel, Telemetry) else tel()

    def __enter__(self) -> Any:
        tel = self._tel()
        if self._workflow:
            return tel._enter_workflow(self._name, self._span_name, self._attributes)
        return tel._enter_step(self._kind, self._name, self._span_name, self._span_kind, self._attributes)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        run = _current.get()
        tel = self._tel()
        if isinstance(run, WorkflowRun):
            tel._exit_workflow(run, exc)
        elif run is not None:
            tel._exit_step(run, exc)

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
    """

    def __init__(self, *, tenant: str, tracer_provider: trace.TracerProvider | None = None,
                 meter_provider: metrics.MeterProvider | None = None, clock: Callable[[], int] = DEFAULT_CLOCK,
                 idle_kind: str = DEFAULT_IDLE_KIND) -> None:
        if not isinstance(tenant, str) or not tenant:
            raise ValueError(f"tenant must be a non-empty string, got {tenant!r}")
        self.tenant = tenant
        self.clock = clock
        self.idle_kind = _check_kind(idle_kind, "idle_kind")
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
        self._critical_path = counter(names.CRITICAL_PATH)
        self._step_errors = counter(names.STEP_ERRORS)
        self._attrs: dict[tuple[Any, ...], dict[str, str]] = {}  # metric attribute sets, built once each

    # --- public API -------------------------------------------------------------------------
    def workflow(self, name: str, *, agent: str | None = None, **attributes: Any) -> Scope:
        return workflow_scope(self, name, agent=agent, **attributes)

    def step(self, kind: str, name: str, *, model: str | None = None, provider: str | None = None,
             operation: str | None = None, **attributes: Any) -> Scope:
        return step_scope(self, kind, name, model=model, provider=provider, operation=operation, **attributes)

    # --- workflow ---------------------------------------------------------------------------
    def _enter_workflow(self, name: str, span_name: str, attributes: dict[str, Any]) -> WorkflowRun:
        start = self.clock()
        outer_run = _current.get()
        outer = outer_run if isinstance(outer_run, WorkflowRun) else outer_run.workflow if outer_run else None
        outer_parent = outer_run.seq if isinstance(outer_run, StepRun) else ROOT
        span = self._tracer.start_span(span_name, kind=SpanKind.INTERNAL, attributes=attributes, start_time=start)
        run = WorkflowRun(name, span, start, outer, outer_parent)
        run._tokens = (_current.set(run), otel_context.attach(trace.set_span_in_context(span)))
        return run

    def _exit_workflow(self, run: WorkflowRun, exc: BaseException | None) -> None:
        end = self.clock()
        run.finished = True
        status = self._fail(run.span, exc)
        for kind, owned_ns in critical_path(run.steps, start=run.start, end=end, idle_kind=self.idle_kind).items():
            seconds = owned_ns / _NS_PER_S
            run.span.set_attribute(f"aifactory.critical_path.{kind}", seconds)
            self._critical_path.add(seconds, self._metric_attrs(names.L_WORKFLOW, run.name, names.L_STEP_KIND, kind))
        run.span.end(end_time=end)
        self._leave(run._tokens)
        self._workflow_duration.record((end - run.start) / _NS_PER_S,
                                       self._metric_attrs(names.L_WORKFLOW, run.name, names.L_STATUS, status))
        self._workflow_steps.record(len(run.steps), self._metric_attrs(names.L_WORKFLOW, run.name))
        outer = run.outer
        if outer is not None and not outer.finished:
            outer.steps.extend(s if s.parent != ROOT else StepInterval(s.kind, s.start, s.end, s.seq, run.outer_parent)
                               for s in run.steps)

    # --- step -------------------------------------------------------------------------------
    def _enter_step(self, kind: str, name: str, span_name: str, span_kind: SpanKind,
                    attributes: dict[str, Any]) -> StepRun:
        start = self.clock()
        parent = _current.get()
        if parent is None:
            workflow, seq, parent_seq = None, 0, ROOT
        elif isinstance(parent, WorkflowRun):
            workflow, seq, parent_seq = parent, next(parent.seqs), ROOT
        else:
            workflow, parent_seq = parent.workflow, parent.seq
            seq = next(workflow.seqs) if workflow is not None else 0
        span = self._tracer.start_span(span_name, kind=span_kind, attributes=attributes, start_time=start)
        genai_attrs = self._genai_attrs(attributes, workflow) if kind == _MODEL_KIND else None
        run = StepRun(self, kind, name, span, start, seq, parent_seq, workflow, genai_attrs)
        run._tokens = (_current.set(run), otel_context.attach(trace.set_span_in_context(span)))
        return run

    def _exit_step(self, run: StepRun, exc: BaseException | None) -> None:
        end = self.clock()
        status = self._fail(run.span, exc)
        run.span.end(end_time=end)
        self._leave(run._tokens)
        seconds = (end - run.start) / _NS_PER_S
        workflow = run.workflow
        wf_name = workflow.name if workflow is not None else NO_WORKFLOW
        self._step_duration.record(seconds, self._metric_attrs(names.L_WORKFLOW, wf_name, names.L_STEP_KIND,
                                                               run.kind, names.L_STEP_NAME, run.name,
                                                               names.L_STATUS, status))
        if exc is not None:
            self._step_errors.add(1, self._metric_attrs(names.L_WORKFLOW, wf_name, names.L_STEP_KIND, run.kind,
                                                        names.L_STEP_NAME, run.name, ERROR_TYPE, _error_type(exc)))
        if run.genai is not None:
            attrs = run.genai if exc is None else {**run.genai, ERROR_TYPE: _error_type(exc)}
            self._operation_duration.record(seconds, attrs)
        if workflow is not None and not workflow.finished:
            workflow.steps.append(StepInterval(run.kind, run.start, end, run.seq, run.parent))

    def _record_usage(self, run: StepRun, input_tokens: int | None, output_tokens: int | None) -> None:
        genai_attrs = run.genai or self._genai_attrs({}, run.workflow)
        for attribute, token_type, tokens in ((genai.GEN_AI_USAGE_INPUT_TOKENS, "input", input_tokens),
                                              (genai.GEN_AI_USAGE_OUTPUT_TOKENS, "output", output_tokens)):
            if tokens is None:
                continue
            run.span.set_attribute(attribute, tokens)
            self._token_usage.record(tokens, self._token_attrs(genai_attrs, token_type))

    # --- helpers ----------------------------------------------------------------------------
    def _metric_attrs(self, *pairs: str) -> dict[str, str]:
        """tenant + the given (key, value) pairs; one dict per distinct set, reused (no per-step allocation)."""
        return self._cached(pairs, lambda: {names.L_TENANT: self.tenant,
                                            **dict(zip(pairs[::2], pairs[1::2], strict=True))})

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
    def _fail(span: trace.Span, exc: BaseException | None) -> str:
        if exc is None:
            return STATUS_OK
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        span.set_attribute(ERROR_TYPE, _error_type(exc))
        span.record_exception(exc)
        return STATUS_ERROR

    @staticmethod
    def _leave(tokens: tuple[Any, Any]) -> None:
        ours, theirs = tokens
        otel_context.detach(theirs)
        _current.reset(ours)


def workflow_scope(telemetry: Telemetry | Callable[[], Telemetry], name: str, *, agent: str | None = None,
                   **attributes: Any) -> Scope:
    """The scope of one workflow run (see the module docstring for its span)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"workflow name must be a non-empty string, got {name!r}")
    if agent is None:
        base = {genai.GEN_AI_OPERATION_NAME: "invoke_workflow", genai.GEN_AI_WORKFLOW_NAME: name}
        span_name = f"invoke_workflow {name}"
    else:
        base = {genai.GEN_AI_OPERATION_NAME: "invoke_agent", genai.GEN_AI_AGENT_NAME: agent}
        span_name = f"invoke_agent {agent}"
    return Scope(telemetry, workflow=True, kind="", name=name, span_name=span_name, span_kind=SpanKind.INTERNAL,
                 attributes={**base, **attributes})


def step_scope(telemetry: Telemetry | Callable[[], Telemetry], kind: str, name: str, *, model: str | None = None,
               provider: str | None = None, operation: str | None = None, **attributes: Any) -> Scope:
    """The scope of one step (see the module docstring for its span)."""
    _check_kind(kind, "step kind")
    if not isinstance(name, str) or not name:
        raise ValueError(f"step name must be a non-empty string, got {name!r}")
    mapping = STEP_OPERATIONS.get(kind, _PLAIN_STEP)
    op = operation or mapping.operation
    base: dict[str, Any] = {"aifactory.step.kind": kind}
    if op is not None:
        base[genai.GEN_AI_OPERATION_NAME] = op
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


def workflow(name: str, *, agent: str | None = None, **attributes: Any) -> Scope:
    """A workflow scope over the installed Telemetry (resolved when the scope is entered, so decorating
    at import time, before telemetry.setup(), is fine)."""
    return workflow_scope(current, name, agent=agent, **attributes)


def step(kind: str, name: str, *, model: str | None = None, provider: str | None = None,
         operation: str | None = None, **attributes: Any) -> Scope:
    """A step scope over the installed Telemetry (resolved when the scope is entered)."""
    return step_scope(current, kind, name, model=model, provider=provider, operation=operation, **attributes)


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
