"""An OpenAI-compatible chat server on 127.0.0.1 whose models answer right a known share of a suite's items.

    with GradedBackend(answers, accuracy={"chat-bf16": 0.95, "chat-int4": 0.80}) as b:
        ... base URL b.url, the model named by the request body's "model" (as the gateway routes a model key)

`answers` maps each prompt to (its item id, the right answer). A model is right on an item when the item's
draw, sha256(id) read as a number in [0, 1), is below the model's accuracy: deterministic per item, and the
items a more accurate model gets right include those a less accurate one does (as a quantised variant loses
some of its baseline's answers). `draw()` is that number, for the tests' own expected counts. Requests without
the expected bearer token get 401; an unknown model gets 404 (as the gateway's unknown-model route).

`broken` makes a model's endpoint misbehave, as real ones do:
    null-content  HTTP 200 with `"content": null` (a reasoning model that spent max_tokens thinking)
    no-choices    HTTP 200 with an error body and no `choices`
    http-500      HTTP 500 on every request (an engine that is down behind a healthy gateway)
    slow          answers after `slow_seconds` (past the client's timeout)
`categories` maps an item id to a category whose items the model gets wrong whatever its accuracy:
{"model": {"category"}} (a quantised variant that lost one skill).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.fake_backends import send_json
from tests.support.processes import ServedInThread

__all__ = ["GradedBackend", "draw", "WRONG"]

WRONG = "I am not sure."


def draw(item_id: str) -> float:
    return int.from_bytes(hashlib.sha256(item_id.encode()).digest()[:8], "big") / 2**64


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence per-request logs
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's hook name
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        with srv.lock:
            srv.requests += 1
            srv.tokens.add(self.headers.get("authorization") or "")
        if srv.token is not None and self.headers.get("authorization") != f"Bearer {srv.token}":
            send_json(self, 401, b'{"error": "Jwt is missing"}')
            return
        model = body.get("model")
        if model not in srv.accuracy:
            send_json(self, 404, json.dumps({"error": f"unknown model {model!r}"}).encode())
            return
        broken = srv.broken.get(model)
        if broken == "http-500":
            send_json(self, 500, b'{"error": "engine unavailable"}')
            return
        if broken == "slow":
            time.sleep(srv.slow_seconds)
        if broken == "no-choices":
            send_json(self, 200, json.dumps({"object": "error", "message": "max_tokens exceeded"}).encode())
            return
        prompt = body["messages"][-1]["content"]
        item_id, right = srv.answers[prompt]
        lost = srv.category_of.get(item_id) in srv.lost.get(model, ())
        content: str | None = right if draw(item_id) < srv.accuracy[model] and not lost else WRONG
        if broken == "null-content":
            content = None
        out = {"id": f"chatcmpl-{item_id}", "object": "chat.completion", "created": 1_700_000_000, "model": model,
               "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                            "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}
        send_json(self, 200, json.dumps(out).encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (the harness closing its session after a failure) is not the test's concern

    def __init__(self, answers: Mapping[str, tuple[str, str]], accuracy: Mapping[str, float],
                 token: str | None, broken: Mapping[str, str], slow_seconds: float,
                 category_of: Mapping[str, str], lost: Mapping[str, frozenset[str]]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answers, self.accuracy, self.token = dict(answers), dict(accuracy), token
        self.broken, self.slow_seconds = dict(broken), slow_seconds
        self.category_of, self.lost = dict(category_of), dict(lost)
        self.lock = threading.Lock()
        self.requests = 0
        self.tokens: set[str] = set()


class GradedBackend(ServedInThread):
    def __init__(self, answers: Mapping[str, tuple[str, str]], *, accuracy: Mapping[str, float],
                 token: str | None = None, broken: Mapping[str, str] | None = None, slow_seconds: float = 3.0,
                 category_of: Mapping[str, str] | None = None,
                 lost_categories: Mapping[str, frozenset[str]] | None = None) -> None:
        self._server = _Server(answers, accuracy, token, broken or {}, slow_seconds, category_of or {},
                               lost_categories or {})
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def requests(self) -> int:
        return self._server.requests

