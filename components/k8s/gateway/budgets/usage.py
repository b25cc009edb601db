"""What a request may spend and what it spent, from its OpenAI body and its response: pure functions the budget
service calls (no I/O).

Reservation (worst case): the whole request body's bytes over `promptBytesPerToken` as prompt tokens (a byte-level
BPE token, as Llama 3's, Qwen's and GPT's tokenizers have, covers at least one byte, and the JSON around the messages
outweighs the chat template's own tokens), plus `outputWeight` x the request's `max_tokens` (or
`max_completion_tokens`), or x `defaultMaxTokens`, which is then written into the request as its `max_tokens`, so
the engine cannot generate past what was reserved. A streamed request gets `stream_options.include_usage: true`, so
the engine ends its stream with a chunk holding `usage` (vllm-project/vllm@v0.33.0
vllm/entrypoints/openai/protocol.py StreamOptions; serving_chat.py sends it as the last data chunk before
`data: [DONE]`).

Settlement (what it used): the response's `usage` (prompt_tokens, completion_tokens). A 2xx whose body ended without
one is charged its reservation (the prompt's estimate plus max_tokens x outputWeight): the engine answered in full
but did not say what it generated (triton-inference-server/server@r26.07 python/openai/openai_frontend/engine/utils/
triton.py returns usage only when the model outputs num_input_tokens and num_output_tokens, so a TensorRT-LLM
repository without them never reports it), and the budget over-counts rather than under-counts; the service counts
those settlements (telemetry.names.BUDGET.SETTLED_WITHOUT_USAGE). A 2xx cut before its end (the client or the engine
ended the stream) is charged the prompt's estimate plus one output token per streamed chunk that carried generated
content (vLLM sends one chunk per decoding step by default, `--stream-interval 1`; an unstreamed answer cut before
its end leaves no chunk to count). Nothing is charged for a response that is not 2xx (the engine refused the
request, or the gateway answered it itself), nor for a request whose response never started (the client went away,
or every try failed, before the engine's headers: a streaming engine sends them before it generates anything).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Policy", "Plan", "plan", "ResponseMeter", "GENERATION_SUFFIXES", "MAX_PARSED_BODY_BYTES"]

GENERATION_SUFFIXES = ("/chat/completions", "/completions")  # the OpenAI paths that generate output tokens
MAX_PARSED_BODY_BYTES = 16 * 1024 * 1024  # an unstreamed response past this is not parsed for its usage


@dataclass(frozen=True)
class Policy:
    """A budget as the service reads it (components/k8s/gateway/envoy/budgets.py writes it from the settings)."""

    limits: Mapping[str, int]
    output_weight: float = 1.0
    default_max_tokens: int = 4096
    prompt_bytes_per_token: float = 1.0
    on_store_failure: str = "open"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Policy:
        return cls(limits={w: int(n) for w, n in d["limits"].items()}, output_weight=float(d["outputWeight"]),
                   default_max_tokens=int(d["defaultMaxTokens"]),
                   prompt_bytes_per_token=float(d["promptBytesPerToken"]), on_store_failure=d["onStoreFailure"])

    def to_json(self) -> dict[str, Any]:
        return {"limits": dict(self.limits), "outputWeight": self.output_weight,
                "defaultMaxTokens": self.default_max_tokens, "promptBytesPerToken": self.prompt_bytes_per_token,
                "onStoreFailure": self.on_store_failure}

    def prompt_estimate(self, body_bytes: int) -> int:
        return math.ceil(body_bytes / self.prompt_bytes_per_token)

    def cost(self, prompt_tokens: int, output_tokens: int) -> int:
        """Weighted tokens: input tokens count 1, output tokens outputWeight each (rounded up)."""
        return math.ceil(prompt_tokens + self.output_weight * output_tokens)


@dataclass(frozen=True)
class Plan:
    """What a request reserves against each budget and the body to send on (None: unchanged)."""

    body_bytes: int
    max_tokens: int  # output tokens reserved (0 for a path that generates none)
    body: bytes | None


def _max_tokens(req: Mapping[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        v = req.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def plan(body: bytes, path: str, default_max_tokens: int) -> Plan:
    """The request's worst case and the body to forward: max_tokens set when the client gave none, and a stream
    asked to end with its usage. A body that is not a JSON object is forwarded as is, reserving
    `default_max_tokens` on a generating path."""
    generates = path.split("?", 1)[0].endswith(GENERATION_SUFFIXES)
    try:
        req = json.loads(body) if body else None
    except ValueError:
        req = None
    if not generates:
        return Plan(len(body), 0, None)
    if not isinstance(req, dict):
        return Plan(len(body), default_max_tokens, None)
    changed = False
    max_tokens = _max_tokens(req)
    if max_tokens is None:
        max_tokens = default_max_tokens
        req["max_tokens"] = max_tokens
        changed = True
    if req.get("stream") is True:
        given = req.get("stream_options")
        options: dict[str, Any] = given if isinstance(given, dict) else {}
        if options.get("include_usage") is not True:
            req["stream_options"] = {**options, "include_usage": True}
            changed = True
    new = json.dumps(req, separators=(",", ":")).encode() if changed else None
    # reserve on the larger of the two bodies: the forwarded one is what the engine tokenizes
    return Plan(max(len(body), len(new or b"")), max_tokens, new)


@dataclass
class ResponseMeter:
    """Reads a response as it passes: its status, its `usage`, and for a stream the chunks that carried output."""

    status: int = 0
    streamed: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    output_chunks: int = 0
    ended: bool = False  # the response's end was seen (its last body chunk, or headers that end it)
    _pending: bytes = b""
    _body: bytearray = field(default_factory=bytearray)
    _too_large: bool = False

    def headers(self, status: int, content_type: str, end: bool = False) -> None:
        self.status = status
        self.streamed = content_type.split(";", 1)[0].strip().lower() == "text/event-stream"
        self.ended = end

    def body(self, chunk: bytes, end: bool) -> None:
        self.ended = end
        if self.streamed:
            lines = (self._pending + chunk).split(b"\n")
            self._pending = b"" if end else lines.pop()
            for line in lines:
                self._event(line.strip())
        elif not self._too_large:
            self._body += chunk
            if len(self._body) > MAX_PARSED_BODY_BYTES:
                self._too_large, self._body = True, bytearray()
            elif end:
                self._usage(_json(bytes(self._body)))

    def _event(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        event = _json(line[5:].strip())
        if not isinstance(event, dict):
            return
        self._usage(event)
        for choice in event.get("choices") or ():
            if isinstance(choice, dict) and _generated(choice):
                self.output_chunks += 1
                break

    def _usage(self, doc: Any) -> None:
        usage = doc.get("usage") if isinstance(doc, dict) else None
        if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
            self.prompt_tokens = usage["prompt_tokens"]
            self.completion_tokens = int(usage.get("completion_tokens") or 0)

    @property
    def without_usage(self) -> bool:
        """A 2xx answered in full that did not say what it used: settled at its reservation."""
        return 200 <= self.status < 300 and self.ended and self.prompt_tokens is None

    def used(self, policy: Policy, body_bytes: int, max_tokens: int) -> int:
        """Weighted tokens the request used against `policy` (`body_bytes`, `max_tokens`: what it reserved)."""
        if not 200 <= self.status < 300:  # 0: no response started (the client went before the engine answered)
            return 0
        if self.prompt_tokens is not None:
            return policy.cost(self.prompt_tokens, self.completion_tokens or 0)
        if self.ended:  # answered in full, usage unsaid: its reservation (over-counted rather than under)
            return policy.cost(policy.prompt_estimate(body_bytes), max_tokens)
        # cut: the prompt's estimate and what was generated
        return policy.cost(policy.prompt_estimate(body_bytes), self.output_chunks)


def _generated(choice: Mapping[str, Any]) -> bool:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return bool(delta.get("content") or delta.get("tool_calls") or delta.get("reasoning_content"))
    return bool(choice.get("text"))


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None
