"""The kit's workflow and step runs, and where they live: OpenTelemetry's own context (one context key next to the
current span), so whatever carries that context carries them too.

A run records what its end needs: a workflow's finished steps (its critical path, telemetry.critical_path) and
the serial chain summed as they finish; a step's place in its workflow. Kit steps started under another
instrumentation's span that the GenAI span processor (telemetry.genai_spans) has not classified yet are
DEFERRED: the processor records them with that span's trace.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from itertools import count
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as genai

from telemetry.critical_path import ROOT, Step

if TYPE_CHECKING:
    from telemetry.instrument import Telemetry, WorkflowLabels

__all__ = ["DEFERRED", "STATUS_ERROR", "STATUS_OK", "PendingTrace", "Run", "StepRun", "WorkflowRun", "current_run"]

STATUS_OK, STATUS_ERROR = "ok", "error"
_NS_PER_S = 1e9

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
