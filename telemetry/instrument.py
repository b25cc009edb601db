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

Modules: telemetry.scopes (workflow and step scopes, their spans, entering and leaving them), telemetry.runs (the
runs they keep in OpenTelemetry's context), telemetry.budget (the latency budget and session key in W3C baggage),
telemetry.sums (the sums a workflow's end adds to); this module holds Telemetry, which records the metrics, and
the process-wide functions over the installed one (install, current, workflow, step, headers).

With Telemetry(critical_path_attributes=True) the workflow span also gets aifactory.critical_path.<kind>
(seconds) when it ends: the metric's shares for that one trace (off by default: the spans themselves show them,
no panel reads them, and each costs a span attribute on every workflow).

Metrics (names and labels: telemetry/names.py), every one labelled with the tenant and workflow:
workflow duration, step duration, critical-path seconds per step kind (telemetry/critical_path.py:
innermost steps own the time, parallel steps split it, uncovered time is "other"), steps per workflow,
step errors, gen_ai.client.token.usage and gen_ai.client.operation.duration (llm steps). The two sums a
workflow's end adds to (critical-path seconds, deadlines met or missed) are kept in the process and collected
through an observable counter: a cumulative monotonic Sum like a counter's, for a fraction of a measurement's
cost (telemetry.sums).
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
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, cast
from urllib.parse import unquote

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as genai
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import Status, StatusCode

from telemetry import names
from telemetry.budget import (
    BUDGET_BAGGAGE_KEY,
    DEADLINE_BAGGAGE_KEY,
    SESSION_BAGGAGE_KEY,
    outgoing_headers,
    remaining_ms,
)
from telemetry.critical_path import DEFAULT_IDLE_KIND, ROOT, critical_path, serial_shares
from telemetry.runs import (
    _NO_TRACE,
    _NS_PER_S,
    DEFERRED,
    STATUS_ERROR,
    STATUS_OK,
    PendingTrace,
    Run,
    StepRun,
    WorkflowRun,
    _add_step,
    _foreign_runs,
    current_run,
)
from telemetry.scopes import (
    OPERATION_STEP_KINDS,
    SCOPE_CACHE_SIZE,
    STEP_KIND_ATTRIBUTE,
    STEP_OPERATIONS,
    Scope,
    StepOperation,
    _cached_scope,
    _check_kind,
    step_scope,
    workflow_scope,
)
from telemetry.sums import Sum, Sums, placeholder, sums_of

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
_GENAI_METRIC_ATTRIBUTES = (genai.GEN_AI_OPERATION_NAME, genai.GEN_AI_PROVIDER_NAME, genai.GEN_AI_REQUEST_MODEL)
_log = logging.getLogger(__name__)


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
        self.critical_path: dict[str, Sum] = {}  # step kind -> its critical-path sum (as met)
        self.deadlines: dict[str, Sum] = {}  # met | missed -> its count (as met)



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
        self._critical_path: Sums | None = None  # with _deadlines: bound to a real meter by _bind_sums
        self._deadlines: Sums | None = None
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
        the baggage carries BUDGET_BAGGAGE_KEY as this request's budget (never below 0; see telemetry.budget:
        the remaining budget, or its share per step left), and the deadline; inside a workflow, SESSION_BAGGAGE_KEY
        (the session key the gateway's affinity hashes: the workflow's session, else its trace id)."""
        ctx = otel_context.get_current() if context is None else context
        return outgoing_headers(ctx, self.remaining_budget_ms(context=ctx))

    def remaining_budget_ms(self, *, context: Context | None = None) -> int | None:
        """Milliseconds left before the current workflow's deadline (0 when past it); None: no budget."""
        return remaining_ms(context, self.clock)

    # --- workflow ---------------------------------------------------------------------------
    # (Scope enters and leaves a workflow; Telemetry opens it and records it when it ends.)
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



def _error_type(exc: BaseException) -> str:
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
