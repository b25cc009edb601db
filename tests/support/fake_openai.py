"""A scripted OpenAI-compatible server on 127.0.0.1 that takes a known time per request, in virtual time.

    with FakeOpenAI(clock, [Reply(1.0, chat(...)), Reply(0.25, embedding(...))]) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)

Each request takes the next scripted reply: the server advances the VirtualClock by its seconds (the
client is blocked on the response meanwhile, so the time the client's spans see is exactly that) and
answers with its JSON body. The request bodies and headers are kept for assertions. For code that reads the
wall clock itself (agent frameworks), RealTime() instead of a VirtualClock makes each request really take its
seconds.
Bodies follow the OpenAI API reference (chat.completion and embedding list objects).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from tests.support.fake_backends import send_json
from tests.support.processes import ServedInThread

__all__ = ["Clock", "FakeOpenAI", "RealTime", "Reply", "chat", "embedding", "tool_call"]

CREATED = 1_700_000_000  # fixed `created` timestamps: responses are reproducible


class Clock(Protocol):
    """What the server moves by a reply's seconds: a telemetry.testing.VirtualClock, or RealTime."""

    def advance(self, seconds: float) -> None: ...


class RealTime:
    """Real time: advancing it sleeps (the request takes its seconds on the wall clock)."""

    def advance(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass(frozen=True)
class Reply:
    seconds: float  # virtual time the request takes
    body: dict[str, Any]


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any] = field(default_factory=dict)


def tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def chat(model: str, *, content: str | None = None, tool_calls: list[dict[str, Any]] | None = None,
         prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"id": f"chatcmpl-{prompt_tokens}-{completion_tokens}", "object": "chat.completion", "created": CREATED,
            "model": model, "choices": [{"index": 0, "message": message,
                                         "finish_reason": "tool_calls" if tool_calls else "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def embedding(model: str, *, prompt_tokens: int, dimensions: int = 4) -> dict[str, Any]:
    return {"object": "list", "model": model,
            "data": [{"object": "embedding", "index": 0, "embedding": [0.25] * dimensions}],
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence per-request logs
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        srv = self.server
        with srv.lock:
            srv.received.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            reply = srv.script.pop(0) if srv.script else None
        if reply is None:
            self._send(500, {"error": {"message": "fake OpenAI server: no scripted reply left"}})
            return
        srv.clock.advance(reply.seconds)
        self._send(200, reply.body)

    def _send(self, status: int, body: dict[str, Any]) -> None:
        send_json(self, status, json.dumps(body).encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, clock: Clock, script: list[Reply]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.clock = clock
        self.script = list(script)
        self.received: list[Received] = []
        self.lock = threading.Lock()


class FakeOpenAI(ServedInThread):
    def __init__(self, clock: Clock, script: list[Reply]) -> None:
        self._server = _Server(clock, script)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-openai", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def received(self) -> list[Received]:
        return self._server.received

    @property
    def unused(self) -> int:
        return len(self._server.script)

