"""The kit's workflow and step runs, where they live, and the Recorder that opens, finishes and records them.

Runs live in OpenTelemetry's own context (one context key next to the current span), so whatever carries that
context carries them too. The Recorder is the recording half of telemetry.instrument's Telemetry: its metric
instruments and what a run's start and end record (scopes call it on the per-step hot path; the GenAI span
processor calls it for instrumented spans); Telemetry adds the public API over it.

A run records what its end needs: a workflow's finished steps (its critical path, telemetry.critical_path) and
the serial chain summed as they finish; a step's place in its workflow. Kit steps started under another
instrumentation's span that the GenAI span processor (telemetry.genai_spans) has not classified yet are
DEFERRED: the processor records them with that span's trace.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from itertools import count
from typing import Any, Protocol, cast

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as genai
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import Status, StatusCode

from telemetry import names
from telemetry.critical_path import DEFAULT_IDLE_KIND, ROOT, Step, critical_path, serial_shares
from telemetry.sums import Sum, Sums, placeholder, sums_of

__all__ = ["DEFAULT_CLOCK", "DEFERRED", "INSTRUMENTATION_NAME", "NO_WORKFLOW", "STATUS_ERROR", "STATUS_OK",
           "PendingTrace", "Recorder", "Run", "StepRun", "WorkflowLabels", "WorkflowRun", "current_run"]

STATUS_OK, STATUS_ERROR = "ok", "error"
_NS_PER_S = 1e9
INSTRUMENTATION_NAME = "aifactory.telemetry"
DEFAULT_CLOCK: Callable[[], int] = time.time_ns  # epoch ns: span timestamps and durations come from one clock
NO_WORKFLOW = "none"  # workflow label of steps run outside any workflow
_GENAI_METRIC_ATTRIBUTES = (genai.GEN_AI_OPERATION_NAME, genai.GEN_AI_PROVIDER_NAME, genai.GEN_AI_REQUEST_MODEL)
_log = logging.getLogger(__name__)
_KIND_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,31}")

# The current WorkflowRun or StepRun, stored next to the current span in OpenTelemetry's context.
_RUN_KEY = otel_context.create_key("aifactory.telemetry.run")
# The key trace.set_span_in_context() uses, found through that public call: a step's context is built in
# one copy holding both the span and the run.
_SPAN_KEY = next(iter(trace.set_span_in_context(trace.INVALID_SPAN, Context())))
# The context of the kit's metric records with exemplars off: no valid span, so no exemplar filter samples them
# (trace_based needs a sampled span). Not empty: the SDK records an empty (falsy) context in the current one.
_NO_TRACE = trace.set_span_in_context(trace.INVALID_SPAN, Context())
_thread_id = threading.get_ident


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
        self.labels: WorkflowLabels | None = None  # its metric attribute sets (set by the Recorder that opens it)
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

    def __init__(self, telemetry: Recorder, kind: str, name: str, span: trace.Span, start: int, seq: int,
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


class WorkflowLabels:
    """The metric attribute sets of one workflow name under one Recorder (tenant): built when a workflow of that
    name first opens, then shared by every run of it, so a workflow's end looks none of them up. Each set is the
    one Recorder._metric_attrs gives for the same labels."""

    __slots__ = ("tenant", "workflow", "ok", "error", "steps", "critical_path", "deadlines")

    def __init__(self, telemetry: Recorder, workflow: str) -> None:
        self.tenant = telemetry.tenant
        self.workflow = workflow
        self.ok = telemetry._metric_attrs(names.L_WORKFLOW, workflow, names.L_STATUS, STATUS_OK)
        self.error = telemetry._metric_attrs(names.L_WORKFLOW, workflow, names.L_STATUS, STATUS_ERROR)
        self.steps = telemetry._metric_attrs(names.L_WORKFLOW, workflow)
        self.critical_path: dict[str, Sum] = {}  # step kind -> its critical-path sum (as met)
        self.deadlines: dict[str, Sum] = {}  # met | missed -> its count (as met)


class Recorder:
    """The recording half of telemetry.Telemetry (its arguments and defaults: see Telemetry): the metric
    instruments and what opening and finishing a workflow or step records."""

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
        self._critical_path: Sums | None = None  # with _deadlines: bound to a real meter by _bind_sums
        self._deadlines: Sums | None = None
        self._bind_sums()
        self._attrs: dict[tuple[Any, ...], dict[str, str]] = {}  # metric attribute sets, built once each
        self._labels: dict[str, WorkflowLabels] = {}  # workflow name -> its attribute sets, built once each
        self._scopes: dict[tuple[Any, ...], Any] = {}  # Telemetry's scopes without extra attributes, built once each
        self._open: dict[int, WorkflowRun] = {}  # trace id -> innermost open workflow (lost-context warning)
        self._warned = False


    # --- workflow ---------------------------------------------------------------------------
    # (Scope enters and leaves a workflow; the Recorder opens it and records it when it ends.)
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

    def _orphan(self, kind: str, name: str, ctx: Context) -> PendingTrace | None:
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
                         "(Warned once.)", kind, name, where)
        return None

    # --- helpers ----------------------------------------------------------------------------
    def _bind_sums(self) -> Sums | None:
        """The critical-path sums (and the deadlines'), on this Telemetry's meter; None while that is the API's
        placeholder (no MeterProvider set yet), whose measurements are dropped anyway. Bound later, on the real
        meter the global provider then gives: registered on a placeholder, every placeholder's observable counter
        would be handed to the real meter once it is set, which keeps only the first one's callback."""
        meter = self._meter
        if placeholder(meter):
            meter = metrics.get_meter_provider().get_meter(INSTRUMENTATION_NAME)
            if placeholder(meter):
                return None
        self._deadlines = sums_of(meter, names.WORKFLOW_DEADLINES)
        self._critical_path = sums_of(meter, names.CRITICAL_PATH)
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



def _check_kind(kind: str, what: str) -> str:
    if not isinstance(kind, str) or not _KIND_PATTERN.fullmatch(kind):
        raise ValueError(f"{what} {kind!r} is not allowed: use 1-32 lowercase letters, digits or '_', starting "
                         f"with a letter (the kinds the dashboards know: {', '.join(names.STEP_KINDS)})")
    return kind


def _error_type(exc: BaseException) -> str:
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
