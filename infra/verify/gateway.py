"""The requests through the gateway: per model one non-streamed and one streamed chat completion carrying a
traceparent and x-client-trace-id, and the likely cause of a refusal."""

from __future__ import annotations

import http.client
import json
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from components.k8s.settings import Model
from infra.verify.endpoints import Endpoints, Unreachable, reason_of, shorten, unresolved_cause
from infra.verify.report import Hop, Progress, progress_line
from infra.verify.sampling import kept_trace_id

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "PROMPT",
    "CLIENT_TRACE_HEADER",
    "CHAT_PATH",
    "Sent",
    "request_hops",
]


DEFAULT_MAX_TOKENS = 4  # the answer only has to exist: a few tokens cost nothing

PROMPT = "Reply with the word OK."

CLIENT_TRACE_HEADER = "x-client-trace-id"

CHAT_PATH = "/v1/chat/completions"


@dataclass
class Sent:
    """What verify sent for one model (the signal checks look for it)."""

    model: Model
    trace_id: str
    request_id: str
    answered: bool  # the non-streamed request came back 200 with an answer


def _traceparent(trace_id: str) -> str:
    return f"00-{trace_id}-{secrets.token_hex(8)}-01"  # sampled: the gateway's span and the engine's are kept


def _body(model: Model, *, stream: bool) -> bytes:
    return json.dumps({"model": model.name, "messages": [{"role": "user", "content": PROMPT}],
                       "max_tokens": DEFAULT_MAX_TOKENS, "temperature": 0, "stream": stream}).encode()


def _post(endpoints: Endpoints, path: str, body: bytes, headers: Mapping[str, str], *, timeout: float
          ) -> tuple[int, Mapping[str, str], bytes]:
    base = endpoints.gateway
    parts = urllib.parse.urlsplit(base)
    extra, context = endpoints.auth(base.rstrip("/") + path)
    conn: http.client.HTTPConnection = (
        http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=timeout, context=context)
        if parts.scheme == "https" else http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout))
    try:
        conn.request("POST", parts.path.rstrip("/") + path, body=body, headers={
            "content-type": "application/json", **headers, **extra})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    except (OSError, http.client.HTTPException) as err:
        raise Unreachable(reason_of(err)) from None
    finally:
        conn.close()


def _refusal_cause(status: int, body: bytes, model: Model, *, token: bool) -> str:
    text = body.decode(errors="replace").lower()
    if status == 401:
        return ("the gateway refused the token: " + ("check that --token-file holds a current token of one of "
                "gateway.auth.issuers (issuer, audience, expiry)" if token else "no --token-file was given"))
    if status == 403:
        return (f"the token's tenant may not call {model.name} (tenant {model.tenant} or its shareWith), or its "
                "issuer may not name that tenant (gateway.auth.issuers[].tenants)")
    if status == 404:
        return f"the gateway has no route for model {model.name!r}: the deployed gateway config is not this stack's"
    if status == 429:
        return "the tenant's rate limit (tenants.<tenant>.rateLimit) refused the request"
    if status == 503 and ("no healthy upstream" in text or "no_healthy_upstream" in text):
        return ("no ready replica behind the gateway: the model's pods are not Ready (startup, image pull, GPU "
                "capacity), scaled to zero, or the gateway's health checks fail through the mesh")
    if status in (502, 503, 504) and ("upstream connect error" in text or "reset" in text):
        return ("the connection to the engine was reset or refused: the model's sidecar rejects the gateway's "
                "traffic (mesh Host routing or mTLS), or the engine process is restarting")
    if status == 504 or "upstream request timeout" in text:
        return f"the engine did not answer within the model's timeoutSeconds ({model.timeout_seconds:g}s)"
    if status >= 500:
        return "the engine answered with a server error: see the model's pod logs (kubectl logs, or Loki)"
    return f"the engine refused the request ({status}): the model may not serve chat completions"


def _chat_answer(body: bytes) -> str | None:
    """The text of an OpenAI chat completion, or None when the body is not one."""
    try:
        doc = json.loads(body)
        text = doc["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return text if isinstance(text, str) else None


def _stream_events(body: bytes) -> list[str]:
    """The `data:` payloads of a server-sent event stream."""
    return [line[5:].strip() for line in body.decode(errors="replace").splitlines() if line.startswith("data:")]


def request_hops(endpoints: Endpoints, model: Model, token: str | None, *, timeout: float,
                 unresolved: str | None = None, progress: Progress | None = None
                 ) -> tuple[list[Hop], Sent]:
    """The model's two requests, each said to `progress` as it is sent; none is sent when the gateway's name does
    not resolve (`unresolved`: why), and both rows say so."""
    say = progress or (lambda _msg: None)
    auth = {"authorization": f"Bearer {token}"} if token else {}
    # a trace id the Collector's probabilistic_sampler keeps (infra.verify.sampling): a missing trace is a broken hop
    trace_id, request_id = kept_trace_id(), str(uuid.uuid4())
    sent = Sent(model, trace_id, request_id, answered=False)
    hops: list[Hop] = []
    for stream in (False, True):
        name = "stream" if stream else "request"
        tid = secrets.token_hex(16) if stream else trace_id  # the streamed request's trace is not looked up
        headers = {**auth, "traceparent": _traceparent(tid), CLIENT_TRACE_HEADER: tid,
                   **({} if stream else {"x-request-id": request_id})}
        if unresolved is not None:
            say(progress_line(name, model.name, f"not sent: {unresolved}"))
            hops.append(Hop(name, model.name, False, f"not sent: {unresolved}", unresolved_cause("gateway")))
            continue
        say(progress_line(name, model.name, f"POST {CHAT_PATH}" + (", streamed" if stream else "")))
        started = time.monotonic()
        try:
            status, resp_headers, body = _post(endpoints, CHAT_PATH,
                                               _body(model, stream=stream), headers, timeout=timeout)
        except Unreachable as err:
            hops.append(Hop(name, model.name, False, f"no answer from {endpoints.gateway}: {err}",
                            "the gateway is unreachable from here: check --gateway-url (the gateway's load "
                            "balancer or Service) and that its pods are Ready"))
            continue
        took = f"{time.monotonic() - started:.2f}s"
        if status != 200:
            hops.append(Hop(name, model.name, False, f"{status} in {took}: {shorten(body)}",
                            _refusal_cause(status, body, model, token=token is not None)))
            continue
        if not stream:
            text = _chat_answer(body)
            ok = text is not None
            sent.answered = ok
            hops.append(Hop(name, model.name, ok, f"200 in {took}: " + (repr(shorten(text or "", 40)) if ok else
                                                                       f"not a chat completion: {shorten(body)}"),
                            "" if ok else "the engine behind the route does not answer the OpenAI chat API"))
        else:
            events = _stream_events(body)
            ok = resp_headers.get("content-type", "").startswith("text/event-stream") and len(events) >= 2 \
                and events[-1] == "[DONE]"
            hops.append(Hop(name, model.name, ok, f"200 in {took}: {len(events)} event(s)"
                            + ("" if ok else f", content-type {resp_headers.get('content-type', 'none')!r}, "
                                             f"last {shorten(events[-1] if events else '', 40)!r}"),
                            "" if ok else "the answer was not an event stream ending in [DONE]: a proxy buffered "
                                          "or cut it (gateway.streamIdleTimeoutSeconds), or the engine failed"))
    return hops, sent
