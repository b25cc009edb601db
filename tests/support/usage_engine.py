"""A stand-in OpenAI engine for the token budget tests and bench: it answers chat completions as vLLM does with
`usage` (unstreamed: in the body; streamed: one chunk per generated token, then, when the request asks for
`stream_options.include_usage`, a last chunk with `usage`, then `data: [DONE]`: vllm-project/vllm@v0.33.0
vllm/entrypoints/openai/serving_chat.py), and can cut a stream after some chunks (a TCP reset, as a dying engine).
It records the bodies it received."""

from __future__ import annotations

import json
import socket
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.fake_backends import is_gateway_check, send_json
from tests.support.processes import ServedInThread

__all__ = ["UsageEngine"]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:  # noqa: N802
        send_json(self, 200, b"{}")

    def do_POST(self) -> None:  # noqa: N802
        e = self.server.engine
        body = self.rfile.read(int(self.headers.get("content-length") or 0)) if "content-length" in self.headers \
            else self._chunked()
        if is_gateway_check(self.path, self.headers):
            send_json(self, 200, b"")
            return
        req = json.loads(body or b"{}")
        n = min(e.completion_tokens, int(req.get("max_tokens") or e.completion_tokens))
        with e.lock:
            e.bodies.append(req)
            if e.keep_bodies is False:
                e.bodies.clear()
            reset, e.resets_before_headers = e.resets_before_headers > 0, max(0, e.resets_before_headers - 1)
        if reset:  # dies with the request taken and nothing answered (no headers, nothing generated)
            self._reset()
            return
        if e.stop.wait(e.headers_delay):  # a queued or slow engine: nothing answered yet
            return
        with e.lock:
            e.tokens_served += e.prompt_tokens + n  # what the engine spends on it (a cut stream: all the same)
        usage = {"prompt_tokens": e.prompt_tokens, "completion_tokens": n, "total_tokens": e.prompt_tokens + n}
        if not req.get("stream"):
            send_json(self, 200, json.dumps({"id": "c", "object": "chat.completion", "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "x" * n}, "finish_reason": "length"}],
                "usage": usage}).encode())
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for i in range(n):
            if e.stop.wait(e.chunk_delay):
                return
            if e.cut_after is not None and i == e.cut_after:  # a delay after the last chunk: it is not lost to the RST
                self._reset()
                return
            self._event({"id": "c", "object": "chat.completion.chunk", "choices": [
                {"index": 0, "delta": {"content": "x"}, "finish_reason": None}]})
        if (req.get("stream_options") or {}).get("include_usage"):
            self._event({"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": usage})
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _reset(self) -> None:
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def _chunked(self) -> bytes:
        out = b""
        while (size := int(self.rfile.readline().split(b";")[0], 16)) > 0:
            out += self.rfile.read(size)
            self.rfile.readline()
        self.rfile.readline()
        return out

    def _event(self, doc: dict[str, Any]) -> None:
        self._chunk(b"data: " + json.dumps(doc).encode() + b"\n\n")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # a bench's 64 concurrent clients connect at once

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass

    def __init__(self, engine: UsageEngine) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.engine = engine


class UsageEngine(ServedInThread):
    """`prompt_tokens` it reports, `completion_tokens` it generates (at most the request's max_tokens), a chunk every
    `chunk_delay` seconds; `cut_after`: reset the connection before that chunk (None: never);
    `resets_before_headers`: reset that many next requests before answering anything; `headers_delay`: seconds before
    each answer starts."""

    def __init__(self, *, prompt_tokens: int = 20, completion_tokens: int = 10, chunk_delay: float = 0.0) -> None:
        self.prompt_tokens, self.completion_tokens, self.chunk_delay = prompt_tokens, completion_tokens, chunk_delay
        self.cut_after: int | None = None
        self.resets_before_headers = 0  # the next this many requests: reset once their body is read, unanswered
        self.headers_delay = 0.0  # seconds each request waits before its answer starts
        self.bodies: list[dict[str, Any]] = []
        self.keep_bodies = True  # False: keep none (a bench's many requests)
        self.tokens_served = 0  # prompt + completion tokens of every request it answered
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self._server = _Server(self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", int(self._server.server_address[1]))

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        super().__exit__(*exc)
