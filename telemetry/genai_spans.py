"""Compound-latency metrics for agents that are already instrumented: from their spans.

    tracer_provider.add_span_processor(telemetry.GenAiSpanProcessor())      # or telemetry.setup(genai_spans=True)

Agents instrumented with the OTel GenAI semantic conventions (the official OpenAI instrumentation,
opentelemetry-util-genai and the framework instrumentations built on it, frameworks that emit GenAI spans
themselves such as pydantic-ai), with OpenLLMetry (traceloop's opentelemetry-instrumentation-*) or with
OpenInference (openinference-instrumentation-*) already emit one span per model call, tool call and agent run.
This span processor reads those spans and gives the installed (or given) Telemetry the same workflows and steps
that telemetry.workflow / telemetry.step would have: so the same metrics (workflow duration, critical-path
seconds by step kind, step durations and errors, steps per workflow, token usage, operation duration) with the
same labels, computed by the same code (telemetry.instrument, telemetry.runs, telemetry.critical_path).

When: instrumentations set the attributes that say what a span is at different times (OpenLLMetry right after
starting it, OpenInference only when it ends), and whether an agent span is a run of its own or part of an
outer one is known only once the outer one ends. So the processor keeps the spans of each local trace (the
spans under one span whose parent is not in this process, or not kept: an agent run, or the request that runs
it) and classifies them all when that local root ends; the metrics are recorded then, with the spans' own
times. At most DEFAULT_MAX_TRACE_SPANS spans are kept per local trace; a larger one is reported, not recorded.

What each span is (SPAN_ROLES, first match; sources: OTel semantic conventions gen-ai-spans.md and
gen-ai-agent-spans.md; opentelemetry-semantic-conventions-ai 0.5.1 opentelemetry/semconv_ai/__init__.py;
openinference-semantic-conventions 0.1.42 openinference/semconv/trace/__init__.py):
    the kit's own step span                       its aifactory.step.kind (or operation), aifactory.step.name
    gen_ai.operation.name                         invoke_agent, invoke_workflow: workflow; chat,
                                                  text_completion, generate_content, embeddings: llm;
                                                  execute_tool: tool; retrieval, vector_db_retrieve: retrieval
    openinference.span.kind                       AGENT, CHAIN: workflow; LLM, EMBEDDING: llm; TOOL: tool;
                                                  RETRIEVER, RERANKER: retrieval
    traceloop.span.kind                           workflow, agent: workflow; tool, a task naming a tool
                                                  (tool.name): tool
    anything else (HTTP client spans, tasks, ...) transparent: not a step; its children belong where it does
One model call is one llm step: an llm span nested (through transparent spans) in an llm step of the same
instrumentation scope is the same call, its attributes filling what the outer one lacks (tokens); an OpenInference
LLM span that shows no call (_MODEL_CALL_PREFIXES, tokens, an error) is transparent.
One workflow per agent run: the outermost workflow span of a local trace is the workflow; workflow spans nested
in it (a graph and its agent, an SDK's trace span and its agent, handed-off or sub-agents) are transparent, so
their steps count in the one workflow's critical path. Its name: the resource's WORKFLOW_RESOURCE_ATTRIBUTE
(setup(workflow=...)), else the first explicit agent or workflow name
(gen_ai.agent.name, gen_ai.workflow.name, agent.name) from the outermost span down through its workflow spans,
else the outermost span's name. Under a kit workflow or step, workflow spans are transparent and the steps
join the kit's run. Step names: the model (gen_ai.request.model, llm.model_name, embedding.model_name,
reranker.model_name), the tool (gen_ai.tool.name, tool.name), the data source (gen_ai.data_source.id), else the
span name. Tokens: gen_ai.usage.input_tokens / output_tokens, OpenInference's llm.token_count.prompt /
completion, OpenLLMetry's older gen_ai.usage.prompt_tokens / completion_tokens; none where a span carries none
(logged once per instrumentation).

A kit step run under an instrumented span (a tool of a framework's agent, wrapped in telemetry.step) is
recorded with that span's trace, by this processor. A kit workflow under one is a workflow of its own.
Never silent: a local trace whose spans look like an agent's (GenAI, OpenInference or OpenLLMetry attributes)
but give no workflow is logged once per reason, with what was seen and why it could not be used; a workflow whose
critical path is more than other_share (DEFAULT_OTHER_SHARE) idle is logged once per name, with its spans that hold
no step.

Do not wrap an instrumented model call in a kit `llm` step as well, nor instrument one call with two
instrumentations: both would be counted (the inner call becomes a child step, so the critical path stays right,
but step durations and tokens are doubled).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as genai
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.semconv.attributes.exception_attributes import EXCEPTION_TYPE
from opentelemetry.trace import StatusCode

from telemetry import names
from telemetry.instrument import INSTRUMENTATION_NAME, Telemetry, current
from telemetry.runs import _RUN_KEY, DEFERRED, Run, StepRun, _foreign_runs
from telemetry.scopes import OPERATION_STEP_KINDS, STEP_KIND_ATTRIBUTE

__all__ = [
    "DEFAULT_MAX_TRACE_SPANS",
    "DEFAULT_OTHER_SHARE",
    "GenAiSpanProcessor",
    "OPENINFERENCE_STEP_KINDS",
    "OPERATION_STEP_KINDS",
    "SPAN_ROLES",
    "TRACELOOP_OPERATION_STEP_KINDS",
    "UNKNOWN_ERROR_TYPE",
    "WORKFLOW_OPERATIONS",
    "WORKFLOW_RESOURCE_ATTRIBUTE",
]

DEFAULT_MAX_TRACE_SPANS = 10_000  # spans kept per local trace until its root ends; beyond: reported, not recorded
UNKNOWN_ERROR_TYPE = "_OTHER"  # semconv's error.type when a failed span names no type
WORKFLOW_OPERATIONS: Mapping[str, str] = {  # operation -> the attribute naming the workflow
    "invoke_agent": genai.GEN_AI_AGENT_NAME,
    "invoke_workflow": genai.GEN_AI_WORKFLOW_NAME,
}
# OpenLLMetry's gen_ai.operation.name values beyond semconv's (opentelemetry-semantic-conventions-ai 0.5.1,
# opentelemetry/semconv_ai/__init__.py: GenAICustomOperationName): its vector-store retrievals. (execute_task and
# llm_request are transparent: a task is the framework's own code, an llm_request wraps the model's chat span.)
TRACELOOP_OPERATION_STEP_KINDS: Mapping[str, str] = {"vector_db_retrieve": "retrieval"}
OPENINFERENCE_SPAN_KIND = "openinference.span.kind"  # openinference-semantic-conventions 0.1.42
# openinference.span.kind -> step kind (OpenInferenceSpanKindValues; GUARDRAIL, EVALUATOR, PROMPT, DECISION and
# UNKNOWN are transparent). A reranker reorders what a retriever found: part of the retrieval.
OPENINFERENCE_STEP_KINDS: Mapping[str, str] = {
    "LLM": "llm", "EMBEDDING": "llm", "TOOL": "tool", "RETRIEVER": "retrieval", "RERANKER": "retrieval",
}
TRACELOOP_SPAN_KIND = "traceloop.span.kind"  # opentelemetry-semantic-conventions-ai 0.5.1: TraceloopSpanKindValues
WORKFLOW, TRANSPARENT = "workflow", "transparent"
# A task span is the framework's own code, unless it names a tool: OpenLLMetry's LlamaIndex instrumentation
# (opentelemetry-instrumentation-llamaindex 0.62.4, dispatcher_wrapper.py) runs each tool call as a task span
# `BaseWorkflowAgent.task` with tool.name and no gen_ai.operation.name.
TASK = "task"
# gen_ai.operation.name values that are neither a workflow nor a step, and no sign of an agent run either: semconv's
# create_agent (gen-ai-agent-spans.md), which AutoGen (autogen-core 0.7.5) records as a trace of its own when an
# agent is built.
NOT_A_RUN_OPERATIONS = frozenset({"create_agent"})
# attribute -> value -> what the span is: a step kind or WORKFLOW. Read in this order; the first value found
# here decides (OpenLLMetry's tasks carry gen_ai.operation.name execute_task and its workflows also
# traceloop.span.kind workflow); a span with none is transparent.
SPAN_ROLES: Mapping[str, Mapping[str, str]] = {
    genai.GEN_AI_OPERATION_NAME: {**dict.fromkeys(WORKFLOW_OPERATIONS, WORKFLOW), **OPERATION_STEP_KINDS,
                                  **TRACELOOP_OPERATION_STEP_KINDS},
    OPENINFERENCE_SPAN_KIND: {"AGENT": WORKFLOW, "CHAIN": WORKFLOW, **OPENINFERENCE_STEP_KINDS},
    TRACELOOP_SPAN_KIND: {"workflow": WORKFLOW, "agent": WORKFLOW, "tool": "tool", "task": TASK},
}
_STEP_NAMES: Mapping[str, tuple[str, ...]] = {  # step kind -> attributes naming the step, first found wins
    "llm": (genai.GEN_AI_REQUEST_MODEL, "llm.model_name", "embedding.model_name", genai.GEN_AI_RESPONSE_MODEL),
    "tool": (genai.GEN_AI_TOOL_NAME, "tool.name"),
    "retrieval": (genai.GEN_AI_DATA_SOURCE_ID, "reranker.model_name"),
}
_WORKFLOW_NAMES = (genai.GEN_AI_AGENT_NAME, genai.GEN_AI_WORKFLOW_NAME, "agent.name")
# The resource attribute that names every agent run the processor records in a process (setup(workflow=...), or
# OTEL_RESOURCE_ATTRIBUTES=workflow=<name>): it wins over the names the spans carry.
WORKFLOW_RESOURCE_ATTRIBUTE = names.L_WORKFLOW
DEFAULT_OTHER_SHARE = 0.25  # share of a workflow's critical path in the idle kind ("other") above which it is logged
# What tells an OpenInference LLM span that it called the model: token counts, the messages or prompts sent or
# received (openinference-semantic-conventions 0.1.42: llm.input_messages, llm.output_messages, llm.prompts), or a
# failure. LlamaIndex's instrumentation (openinference-instrumentation-llama-index 4.6.1, _handler.py) makes every
# span of an LLM object an LLM span, _prepare_chat_with_tools included, which sends nothing.
_MODEL_CALL_PREFIXES = ("llm.input_messages", "llm.output_messages", "llm.prompts")
_KIT_STEP_NAME = "aifactory.step.name"
# Token counts: semconv's; OpenInference's; OpenLLMetry's older names (opentelemetry-semantic-conventions-ai 0.5.1:
# SpanAttributes.LLM_USAGE_PROMPT_TOKENS / LLM_USAGE_COMPLETION_TOKENS), still set by some of its instrumentations.
_INPUT_TOKENS = (genai.GEN_AI_USAGE_INPUT_TOKENS, "llm.token_count.prompt", "gen_ai.usage.prompt_tokens")
_OUTPUT_TOKENS = (genai.GEN_AI_USAGE_OUTPUT_TOKENS, "llm.token_count.completion", "gen_ai.usage.completion_tokens")
_PROVIDERS = (genai.GEN_AI_PROVIDER_NAME, "gen_ai.system", "llm.provider", "llm.system")  # gen_ai.system: < 1.37
_OPENINFERENCE_OPERATIONS = {"LLM": "chat", "EMBEDDING": "embeddings"}  # the GenAI operation of their llm steps
_IDLE_NAMES_SHOWN = 5  # span names an idle-workflow report lists
_CLASS_REPR = re.compile(r"<class '([^']+)'>")
_log = logging.getLogger(__name__)


class _Trace:
    """The spans of one local trace, kept until its root ends (see the module docstring)."""

    __slots__ = ("root", "owner", "started", "ended", "overflow")

    def __init__(self, root: int, owner: Run | None) -> None:
        self.root = root
        self.owner = owner  # the kit's run current where the root started, if any
        self.started: dict[int, Span] = {}  # span id -> the live span (a step's span: exemplars link to it)
        self.ended: dict[int, ReadableSpan] = {}
        self.overflow = False

    def adopt(self, span: trace.Span) -> None:
        self._keep(span.get_span_context().span_id, span)  # type: ignore[arg-type]

    def _keep(self, span_id: int, span: Span) -> None:
        if len(self.started) >= DEFAULT_MAX_TRACE_SPANS:
            self.overflow = True
        else:
            self.started[span_id] = span
        _foreign_runs[span_id] = self


class _Call:
    """One model call, which an instrumentation may record as nested spans of its own (LlamaIndex's OpenInference
    instrumentation: an outer and an inner `achat`, only the inner with the tokens): the outermost span's
    attributes, with what it lacks filled in from those nested in it."""

    __slots__ = ("scope", "attributes")

    def __init__(self, scope: str, attributes: Mapping[str, Any]) -> None:
        self.scope = scope  # the instrumentation scope of the outermost span
        self.attributes = attributes

    def absorb(self, inner: Mapping[str, Any]) -> None:
        self.attributes = {**inner, **self.attributes}


@dataclass(frozen=True, slots=True)
class _Role:
    """What one finished span is: a step kind, WORKFLOW or TRANSPARENT, and the attribute that said so."""

    role: str
    seen: str | None  # "attribute=value" that decided, None for a span of no known convention


class GenAiSpanProcessor(SpanProcessor):
    """Workflows and steps from instrumented agents' spans (see the module docstring).

    telemetry: the Telemetry whose metrics they feed; default: the installed one (telemetry.current()),
    looked up when a local trace is recorded.
    other_share: log (once per workflow name) a workflow whose critical path is more than this share in the idle
    kind ("other": covered by no step), with the spans that cover it; default: DEFAULT_OTHER_SHARE (0.25).
    """

    def __init__(self, telemetry: Telemetry | None = None, *, other_share: float = DEFAULT_OTHER_SHARE) -> None:
        if isinstance(other_share, bool) or not isinstance(other_share, int | float) or not 0 < other_share <= 1:
            raise ValueError(f"GenAiSpanProcessor: other_share must be a share of the workflow's duration, "
                             f"above 0 and at most 1 (1: never log), got {other_share!r}")
        self._telemetry = telemetry
        self._other_share = other_share
        self._reported: set[str] = set()  # reasons already logged (each once)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        scope = span.instrumentation_scope
        if scope is not None and scope.name == INSTRUMENTATION_NAME:
            return  # the kit's own span: the kit records it (or adopts it into a trace, see _open_step)
        parent = span.parent
        pending = _foreign_runs.get(parent.span_id) if parent is not None and _foreign_runs else None
        if pending is None:
            ctx = otel_context.get_current() if parent_context is None else parent_context
            owner = cast(Run | None, ctx.get(_RUN_KEY))  # the kit's workflow or step current where it started
            if type(owner) is StepRun and owner.seq == DEFERRED:
                pending = owner.pending  # under a kit step that is itself under an instrumented span
            else:
                pending = _Trace(span.context.span_id, owner)
        cast(_Trace, pending)._keep(span.context.span_id, span)

    def on_end(self, span: ReadableSpan) -> None:
        if not _foreign_runs:
            return  # no instrumented span open: nothing kept (the kit's own steps' common case)
        span_id = span.context.span_id
        pending = cast(_Trace | None, _foreign_runs.pop(span_id, None))
        if pending is None:
            return
        if span_id in pending.started:
            pending.ended[span_id] = span
        if span_id == pending.root:
            self._record(pending)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    # --- a local trace, once its root ended ------------------------------------------------------
    def _record(self, pending: _Trace) -> None:
        ended = dict(pending.ended)
        still_open = [span_id for span_id in list(pending.started) if span_id not in ended]
        for span_id in still_open:  # left out: forget them
            if _foreign_runs.get(span_id) is pending:
                _foreign_runs.pop(span_id, None)
        if still_open:
            self._report("still-open", f"{len(still_open)} span(s) of a local trace were still open when its root "
                                       f"{pending.started[pending.root].name!r} ended (work left running after it "
                                       "returned): left out of its workflow")
        if pending.overflow:
            self._report("overflow", f"a local trace had more than {DEFAULT_MAX_TRACE_SPANS} spans "
                                     "(DEFAULT_MAX_TRACE_SPANS) before its root ended: not recorded")
            return
        children: dict[int, list[ReadableSpan]] = {}
        for s in ended.values():
            if s.parent is not None and s.context.span_id != pending.root:
                children.setdefault(s.parent.span_id, []).append(s)
        for kids in children.values():
            kids.sort(key=lambda s: s.start_time or 0)
        roles = {span_id: _role(s) for span_id, s in ended.items()}
        root = ended.get(pending.root)
        if root is None:
            return
        tel = self._telemetry or current()
        replay = _Replay(tel, pending, children, roles)
        replay.span(root, pending.owner, inside_workflow=pending.owner is not None)
        for name, share, idle in replay.idle:
            if share > self._other_share:
                self._report(f"other {name}", _idle_message(name, share, self._other_share, tel.idle_kind, idle))
        for scope in sorted(replay.no_tokens):
            self._report(f"no-tokens {scope}", f"model-call spans from {scope} carry no token counts "
                                               f"({', '.join(_INPUT_TOKENS + _OUTPUT_TOKENS)}): "
                                               "gen_ai.client.token.usage gets nothing from them")
        if pending.owner is None and not replay.workflows and replay.seen:
            kinds = ", ".join(sorted(replay.seen))
            if replay.steps:
                self._report("no-workflow", f"spans of an agent ({kinds}) under no agent or workflow span "
                                            "(gen_ai.operation.name invoke_agent/invoke_workflow, "
                                            "openinference.span.kind AGENT/CHAIN, traceloop.span.kind "
                                            f"workflow/agent): their {replay.steps} steps are recorded under "
                                            "workflow 'none', with no critical path")
            else:
                self._report("no-step", f"spans of an agent ({kinds}) of which none is a workflow or a step the "
                                        "kit knows (see telemetry.genai_spans.SPAN_ROLES): nothing recorded")

    def _report(self, reason: str, message: str) -> None:
        if reason not in self._reported:
            self._reported.add(reason)
            _log.warning("GenAiSpanProcessor: %s. (Logged once.)", message)


class _Replay:
    """Records one local trace's workflows and steps, walking its spans from the root."""

    def __init__(self, tel: Telemetry, pending: _Trace, children: dict[int, list[ReadableSpan]],
                 roles: dict[int, _Role]) -> None:
        self.tel = tel
        self.pending = pending
        self.children = children
        self.roles = roles
        self.workflows = 0
        self.steps = 0
        self.seen: set[str] = set()
        self.no_tokens: set[str] = set()  # instrumentation scopes of llm spans without token counts
        # per workflow recorded: (name, share of its duration in the idle kind, spans with no step under them)
        self.idle: list[tuple[str, float, list[ReadableSpan]]] = []
        self._stepless: list[ReadableSpan] = []  # the current workflow's spans with no step at or under them

    def span(self, s: ReadableSpan, owner: Run | None, *, inside_workflow: bool, call: _Call | None = None) -> None:
        """Record span `s` and its children under `owner`; `call`: the model call `s` is nested in (the nearest
        step above it is an llm step), else None."""
        span_id = s.context.span_id
        role = self.roles[span_id]
        if role.seen is not None:
            self.seen.add(role.seen)
        live = self.pending.started[span_id]
        attributes = s.attributes or {}
        start, end = s.start_time or 0, s.end_time or 0
        kids = self.children.get(span_id, ())
        steps_before = self.steps
        if role.role == WORKFLOW and not inside_workflow:
            self.workflows += 1
            name = self._workflow_name(s)
            run = self.tel._open_workflow(name, live, start, None, track=False)
            self._stepless = []
            for kid in kids:
                self.span(kid, run, inside_workflow=True)
            shares = self.tel._finish_workflow(run, end, _error(s))
            if end > start:
                self.idle.append((name, shares.get(self.tel.idle_kind, 0) / (end - start), self._stepless))
            return
        if role.role in (WORKFLOW, TRANSPARENT) or (role.role == "llm" and call is not None
                                                    and call.scope == _scope_name(s)):
            if role.role == "llm":  # the same model call, seen again one level in by the same instrumentation
                call.absorb(attributes)  # type: ignore[union-attr]
            for kid in kids:
                self.span(kid, owner, inside_workflow=inside_workflow, call=call)
            if self.steps == steps_before and role.role != "llm":
                self._stepless.append(s)
            return
        self.steps += 1
        kind = role.role
        step = self.tel._open_step(kind, _step_name(kind, s), live, start, owner)
        inner = _Call(_scope_name(s), attributes) if kind == "llm" else None
        for kid in kids:
            self.span(kid, step, inside_workflow=inside_workflow, call=inner)
        if inner is not None:
            attributes = inner.attributes
        if kind == "llm":
            operation = attributes.get(genai.GEN_AI_OPERATION_NAME)
            step.genai = self.tel._genai_attrs({
                genai.GEN_AI_OPERATION_NAME: operation if OPERATION_STEP_KINDS.get(str(operation)) == "llm" else
                _OPENINFERENCE_OPERATIONS.get(str(attributes.get(OPENINFERENCE_SPAN_KIND)), "chat"),
                genai.GEN_AI_PROVIDER_NAME: _first(attributes, _PROVIDERS),
                genai.GEN_AI_REQUEST_MODEL: _first(attributes, _STEP_NAMES["llm"]),
            }, step.workflow)
        self.tel._finish_step(step, end, _error(s))
        input_tokens, output_tokens = _first(attributes, _INPUT_TOKENS), _first(attributes, _OUTPUT_TOKENS)
        if input_tokens is not None or output_tokens is not None:
            self.tel._record_usage(step, _int_or_none(input_tokens), _int_or_none(output_tokens))
        elif kind == "llm" and s.instrumentation_scope is not None:
            self.no_tokens.add(s.instrumentation_scope.name)

    def _workflow_name(self, outermost: ReadableSpan) -> str:
        """The name the process gives its agent runs (WORKFLOW_RESOURCE_ATTRIBUTE on the span's resource), else the
        first explicit agent or workflow name from the outermost workflow span down through the workflow spans
        nested in it (breadth first), else the outermost span's name without its operation."""
        given = outermost.resource.attributes.get(WORKFLOW_RESOURCE_ATTRIBUTE) if outermost.resource else None
        if given:
            return str(given)
        level = [outermost]
        while level:
            for s in level:
                named = _first(s.attributes or {}, _WORKFLOW_NAMES)
                if named:
                    return str(named)
            level = [kid for s in level for kid in self.children.get(s.context.span_id, ())
                     if self.roles[kid.context.span_id].role == WORKFLOW]
        operation = str((outermost.attributes or {}).get(genai.GEN_AI_OPERATION_NAME, ""))
        return (outermost.name.removeprefix(operation).strip() if operation else outermost.name) or outermost.name


def _role(s: ReadableSpan) -> _Role:
    attributes = s.attributes or {}
    if s.instrumentation_scope is not None and s.instrumentation_scope.name == INSTRUMENTATION_NAME:
        kind = attributes.get(STEP_KIND_ATTRIBUTE) or OPERATION_STEP_KINDS.get(
            str(attributes.get(genai.GEN_AI_OPERATION_NAME)))
        return _Role(str(kind), None) if kind else _Role(TRANSPARENT, None)
    seen = None
    for attribute, roles in SPAN_ROLES.items():
        value = attributes.get(attribute)
        if value is not None:
            if attribute == genai.GEN_AI_OPERATION_NAME and value in NOT_A_RUN_OPERATIONS:
                return _Role(TRANSPARENT, None)
            seen = f"{attribute}={value}"
            role = roles.get(str(value))
            if role == TASK:
                role = "tool" if _first(attributes, _STEP_NAMES["tool"]) else None
            elif attribute == OPENINFERENCE_SPAN_KIND and value == "LLM" and not _calls_model(s):
                role = None
            if role is not None:
                return _Role(role, seen)
    return _Role(TRANSPARENT, seen)


def _calls_model(s: ReadableSpan) -> bool:
    """Whether an OpenInference LLM span shows a model call (see _MODEL_CALL_PREFIXES)."""
    attributes = s.attributes or {}
    if s.status.status_code is StatusCode.ERROR or _first(attributes, _INPUT_TOKENS + _OUTPUT_TOKENS) is not None:
        return True
    return any(key.startswith(_MODEL_CALL_PREFIXES) for key in attributes)


def _scope_name(s: ReadableSpan) -> str:
    return s.instrumentation_scope.name if s.instrumentation_scope is not None else ""


def _idle_message(workflow: str, share: float, limit: float, idle_kind: str, spans: list[ReadableSpan]) -> str:
    """What a workflow whose critical path is mostly idle is made of: the spans in it that are no step and hold none,
    by name, the longest first."""
    seconds: dict[str, float] = {}
    counts: dict[str, int] = {}
    for s in spans:
        seconds[s.name] = seconds.get(s.name, 0.0) + ((s.end_time or 0) - (s.start_time or 0)) / 1e9
        counts[s.name] = counts.get(s.name, 0) + 1
    top = sorted(seconds, key=lambda n: (-seconds[n], n))
    listed = ", ".join(f"{n!r} x{counts[n]} ({seconds[n]:.2f} s)" for n in top[:_IDLE_NAMES_SHOWN])
    if len(top) > _IDLE_NAMES_SHOWN:
        listed += f" and {len(top) - _IDLE_NAMES_SHOWN} more"
    return (f"workflow {workflow!r}: {share:.0%} of its critical path is {idle_kind!r} (time no step covers; more "
            f"than the {limit:.0%} set, other_share): the spans there that are no step: {listed or 'none'}. If one "
            "of them is a model call, tool or retrieval, its instrumentation marks it in a way the kit does not "
            "read (telemetry.genai_spans.SPAN_ROLES, docs/telemetry.md)")


def _step_name(kind: str, s: ReadableSpan) -> str:
    """The step's naming attribute, else the span name without its operation ("vector_db_retrieve KB": "KB")."""
    attributes = s.attributes or {}
    named = attributes.get(_KIT_STEP_NAME) or _first(attributes, _STEP_NAMES.get(kind, ()))
    if named:
        return str(named)
    operation = str(attributes.get(genai.GEN_AI_OPERATION_NAME, ""))
    return (s.name.removeprefix(operation).strip() if operation else s.name) or s.name


def _first(attributes: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = attributes.get(key)
        if value is not None:
            return value
    return None


def _error(s: ReadableSpan) -> str | None:
    """None for a span that did not fail; else its error.type, its exception event's exception.type, or
    UNKNOWN_ERROR_TYPE. A class's repr, as opentelemetry-instrumentation-openai-v2 2.4b0 sets error.type
    ("<class 'openai.InternalServerError'>"), becomes the class name."""
    if s.status.status_code is not StatusCode.ERROR:
        return None
    value = (s.attributes or {}).get(ERROR_TYPE)
    if not value:
        value = next((e.attributes.get(EXCEPTION_TYPE) for e in s.events
                      if e.name == "exception" and e.attributes), None)
    if not value:
        return UNKNOWN_ERROR_TYPE
    text = str(value)
    match = _CLASS_REPR.fullmatch(text)
    return match.group(1) if match else text


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)
