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
runs they keep in OpenTelemetry's context, and the Recorder that opens, finishes and records them),
telemetry.budget (the latency budget and session key in W3C baggage), telemetry.sums (the sums a workflow's end
adds to); this module holds Telemetry (the Recorder with the public API: workflow, step, headers) and the
process-wide functions over the installed one (install, current, workflow, step, headers).

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

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from opentelemetry import context as otel_context
from opentelemetry.context import Context

from telemetry import names
from telemetry.budget import (
    BUDGET_BAGGAGE_KEY,
    DEADLINE_BAGGAGE_KEY,
    SESSION_BAGGAGE_KEY,
    outgoing_headers,
    remaining_ms,
)
from telemetry.runs import (
    DEFAULT_CLOCK,
    INSTRUMENTATION_NAME,
    NO_WORKFLOW,
    Recorder,
    StepRun,
    WorkflowRun,
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
    step_scope,
    workflow_scope,
)

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

UNKNOWN_TENANT = "unknown"  # tenant label when nothing named one (see telemetry.setup)


class Telemetry(Recorder):
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
