"""Compound-latency metrics for agents that are already instrumented: from their GenAI spans.

    tracer_provider.add_span_processor(telemetry.GenAiSpanProcessor())      # or telemetry.setup(genai_spans=True)

Agents instrumented with the OTel GenAI semantic conventions (the official OpenAI instrumentation,
opentelemetry-util-genai and the framework instrumentations built on it, OpenInference/OpenLLMetry-style
ones) already emit one span per model call, tool call and agent run. This span processor reads those spans
as they start and end and gives the installed (or given) Telemetry the same workflows and steps that
telemetry.workflow / telemetry.step would have: so the same metrics (workflow duration, critical-path
seconds by step kind, step durations and errors, steps per workflow, token usage, operation duration) with
the same labels, computed by the same code (telemetry.instrument, telemetry.critical_path).

The mapping (gen_ai.operation.name, read when the span starts; semconv requires it at creation):
    invoke_agent, invoke_workflow                a workflow named gen_ai.agent.name / gen_ai.workflow.name
                                                 (else the span name after the operation)
    chat, text_completion, generate_content,     step kind llm, named gen_ai.request.model; tokens from
    embeddings                                   gen_ai.usage.input_tokens / output_tokens
    execute_tool                                 step kind tool, named gen_ai.tool.name
    retrieval                                    step kind retrieval, named gen_ai.data_source.id
    anything else (HTTP client spans, ...)       not a step; its children belong where it does
Parent-child structure is the spans' own: a step belongs to the nearest enclosing workflow, nests under the
nearest enclosing step, and a workflow inside another is nested as telemetry.workflow nests. The kit's own
spans are left to the kit; GenAI spans under a kit workflow or step join it, and kit steps under an
instrumented agent's span join that agent's workflow. Spans must be ended by the thread or task that runs
them (as every instrumentation does); a step's times are its span's start and end times.

Do not wrap an instrumented model call in a kit `llm` step as well: both would be counted (the call
becomes a child step, so the critical path stays right, but step durations and tokens are doubled).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as genai
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import StatusCode

from telemetry.instrument import (
    _RUN_KEY,
    INSTRUMENTATION_NAME,
    OPERATION_STEP_KINDS,
    Run,
    Telemetry,
    WorkflowRun,
    _foreign_runs,
    current,
)

__all__ = ["GenAiSpanProcessor", "OPERATION_STEP_KINDS", "WORKFLOW_OPERATIONS", "UNKNOWN_ERROR_TYPE"]

WORKFLOW_OPERATIONS: Mapping[str, str] = {  # operation -> the attribute naming the workflow
    "invoke_agent": genai.GEN_AI_AGENT_NAME,
    "invoke_workflow": genai.GEN_AI_WORKFLOW_NAME,
}
UNKNOWN_ERROR_TYPE = "_OTHER"  # semconv's error.type when a failed span names no type
_STEP_NAME_ATTRIBUTES: Mapping[str, str] = {
    "llm": genai.GEN_AI_REQUEST_MODEL,
    "tool": genai.GEN_AI_TOOL_NAME,
    "retrieval": genai.GEN_AI_DATA_SOURCE_ID,
}
_CLASS_REPR = re.compile(r"<class '([^']+)'>")
_LEGACY_PROVIDER = "gen_ai.system"  # gen_ai.provider.name before semconv 1.37; still set by some instrumentations


class GenAiSpanProcessor(SpanProcessor):
    """Workflows and steps from GenAI spans (see the module docstring).

    telemetry: the Telemetry whose metrics they feed; default: the installed one (telemetry.current()),
    looked up when each span starts.
    """

    def __init__(self, telemetry: Telemetry | None = None) -> None:
        self._telemetry = telemetry

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        scope = span.instrumentation_scope
        if scope is not None and scope.name == INSTRUMENTATION_NAME:
            return  # the kit's own span: the kit records it
        parent = span.parent
        if parent is not None and parent.span_id in _foreign_runs:
            owner = _foreign_runs[parent.span_id]
        else:
            ctx = otel_context.get_current() if parent_context is None else parent_context
            owner = cast(Run | None, ctx.get(_RUN_KEY))  # the kit's workflow or step current where it started
        attributes = span.attributes or {}
        operation = attributes.get(genai.GEN_AI_OPERATION_NAME)
        run: Any = owner
        if operation in WORKFLOW_OPERATIONS:
            tel = self._telemetry or current()
            run = tel._open_workflow(_workflow_name(span.name, attributes, str(operation)), span,
                                     span.start_time or 0, owner)
        elif operation in OPERATION_STEP_KINDS:
            tel = self._telemetry or current()
            run = tel._open_step(OPERATION_STEP_KINDS[str(operation)], span.name, span, span.start_time or 0, owner)
        if run is not None:
            _foreign_runs[span.context.span_id] = run

    def on_end(self, span: ReadableSpan) -> None:
        span_id = span.context.span_id
        run = _foreign_runs.pop(span_id, None)
        if run is None or run.span.get_span_context().span_id != span_id:
            return  # not a GenAI span (or the kit's): nothing of its own to record
        end = span.end_time or 0
        attributes = span.attributes or {}
        error_type = None
        if span.status.status_code is StatusCode.ERROR:
            error_type = _error_type(attributes.get(ERROR_TYPE))
        if isinstance(run, WorkflowRun):
            (self._telemetry or current())._finish_workflow(run, end, error_type)
            return
        tel = run._telemetry
        run.name = str(attributes.get(_STEP_NAME_ATTRIBUTES.get(run.kind, ""), "") or run.name)
        if run.kind == "llm":
            run.genai = tel._genai_attrs({
                genai.GEN_AI_OPERATION_NAME: attributes.get(genai.GEN_AI_OPERATION_NAME),
                genai.GEN_AI_PROVIDER_NAME: attributes.get(genai.GEN_AI_PROVIDER_NAME,
                                                           attributes.get(_LEGACY_PROVIDER)),
                genai.GEN_AI_REQUEST_MODEL: attributes.get(genai.GEN_AI_REQUEST_MODEL),
            }, run.workflow)
        tel._finish_step(run, end, error_type)
        input_tokens = attributes.get(genai.GEN_AI_USAGE_INPUT_TOKENS)
        output_tokens = attributes.get(genai.GEN_AI_USAGE_OUTPUT_TOKENS)
        if input_tokens is not None or output_tokens is not None:
            tel._record_usage(run, _int_or_none(input_tokens), _int_or_none(output_tokens))

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _workflow_name(span_name: str, attributes: Mapping[str, Any], operation: str) -> str:
    """gen_ai.agent.name / gen_ai.workflow.name, else the span name after the operation ("invoke_agent X")."""
    named = attributes.get(WORKFLOW_OPERATIONS[operation])
    if named:
        return str(named)
    rest = span_name.removeprefix(operation).strip()
    return rest or operation


def _error_type(value: Any) -> str:
    """error.type as a label: a class's repr, as opentelemetry-instrumentation-openai-v2 2.4b0 sets it
    ("<class 'openai.InternalServerError'>"), becomes the class name; nothing becomes UNKNOWN_ERROR_TYPE."""
    if not value:
        return UNKNOWN_ERROR_TYPE
    text = str(value)
    match = _CLASS_REPR.fullmatch(text)
    return match.group(1) if match else text


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)
