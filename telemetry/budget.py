"""The latency budget and the session key in W3C baggage: what a workflow puts on its context and what headers()
sends the gateway.

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
(components.k8s.gateway.envoy.affinity): the workflow's `session` when it was given one (workflow(..., session=...),
inherited by the workflows inside it), else its trace id (32 hex digits). Give the session when one conversation
spans workflows, e.g. a chat whose every turn runs as a workflow of its own: with the trace id each turn would be a
new session, sent wherever the hash puts it, and prefill the conversation again.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from opentelemetry import baggage
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from telemetry.runs import Run, WorkflowRun, current_run

__all__ = ["BUDGET_BAGGAGE_KEY", "DEADLINE_BAGGAGE_KEY", "SESSION_BAGGAGE_KEY", "SESSION_PATTERN", "outgoing_headers",
           "remaining_ms"]

BUDGET_BAGGAGE_KEY = "aifactory.budget_ms"  # W3C baggage: the workflow's latency budget, ms (remaining, in headers())
DEADLINE_BAGGAGE_KEY = "aifactory.deadline_ms"  # W3C baggage: the workflow's deadline, ms since the epoch
SESSION_BAGGAGE_KEY = "aifactory.session"  # W3C baggage, in headers(): the workflow's session (the gateway's key)
# An explicit session: characters the W3C baggage propagator sends as they are (opentelemetry-api's
# W3CBaggagePropagator percent-encodes values with urllib.parse.quote_plus, which leaves these alone), so the gateway
# hashes the same key whether it comes in the baggage or in the x-aifactory-session header.
SESSION_PATTERN = re.compile(r"[A-Za-z0-9._~-]{1,128}")
_NS_PER_MS = 1_000_000
# The key W3C baggage lives under in a context, found through the public call: a context without it carries no
# deadline.
_BAGGAGE_KEY = next(iter(baggage.set_baggage(DEADLINE_BAGGAGE_KEY, "0", Context())))


# The gateway reads W3C trace context and baggage (https://www.w3.org/TR/trace-context/,
# https://www.w3.org/TR/baggage/), whatever OTEL_PROPAGATORS the process configured for its own clients.
_W3C = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])


def outgoing_headers(ctx: Context, remaining: int | None) -> dict[str, str]:
    """W3C trace context and baggage of `ctx` for an outgoing request, the baggage with BUDGET_BAGGAGE_KEY set to
    this request's share of the `remaining` budget (ms; None: no budget) and, inside a workflow,
    SESSION_BAGGAGE_KEY (Telemetry.headers())."""
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


def remaining_ms(context: Context | None, clock: Callable[[], int]) -> int | None:
    """Milliseconds left before the deadline in `context`'s baggage (default: the current context), by `clock`
    (epoch ns; read only when there is a deadline); 0 when past it; None: no budget."""
    deadline = str(baggage.get_baggage(DEADLINE_BAGGAGE_KEY, context) or "")
    if not deadline.isdigit():
        return None  # none, or not ours to read (baggage comes from callers too)
    return max(0, int(deadline) - -(-clock() // _NS_PER_MS))


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

