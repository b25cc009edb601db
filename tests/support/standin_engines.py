"""Stand-in model engines for the gateway's day-2 scenarios: what a vLLM 0.33, SGLang 0.5.23 or Triton r26.07 (OpenAI
frontend) replica does that the gateway meets when it is rolled, scaled in, saturated, broken or hung, on a loopback
address of its own and the model port every replica shares (a headless Service's records carry addresses, not
ports). Not an engine: no tokens are computed.

Behaviour, each from the engine's source at the pinned version (docs/contracts.md, "Day 2: the gateway's side",
"Day 2: progress checks", "Day 2: model pods"; docs/serving.md, "Rollouts, scale-in and drains"):
- a generation (POST /v1/chat/completions, /v1/completions) with a JSON body (content-type application/json, else
  422: FastAPI reads the body as JSON by that header) naming a served model (else vLLM's 404 "The model `x` does not
  exist": vllm-project/vllm@v0.33.0 vllm/entrypoints/serve/engine/serving.py _check_model; Triton's 400 "Unknown
  model": engine/triton_engine.py; SGLang serves it whatever it names): with `"stream": true` the response's headers
  leave at once (the server starts its streamed response before the first token), then `tokens` chunks (at most its
  max_tokens) `token_s` apart, then `data: [DONE]`; otherwise one JSON answer once the last token is done. The
  gateway's progress check on vLLM and Triton (a 1-token completion) is such a generation: a stuck engine core never
  answers it;
- the health path (Engine.health_path: vLLM /health, SGLang /health, Triton /health/ready) answers 200 while the
  engine has not errored: vLLM's check_health reads an errored flag (vllm/v1/engine/async_llm.py), so a stuck engine
  core (`hang()`) still passes it; and it runs on the API server's event loop, so once `saturate`d it answers only
  after `busy_s` with `busy_at` generations or more in flight (vllm-project/vllm#38157); a generation that arrives
  then waits as long for its first token (the engine's waiting queue: the progress check too). SGLang's /health
  answers 503 once it is exiting;
- SGLang's GET /health_generate (its progress check): 503 while exiting; else it starts a 1-token generation of its
  own, waits `poll_s` (1 s at 0.5.23), then answers 200 as soon as any token was produced since it began (polling
  every `poll_s`), 503 after `check_timeout_s` (SGLANG_HEALTH_CHECK_TIMEOUT, 20 s) without one: a stuck scheduler
  never passes it (sglang 0.5.23 srt/entrypoints/http_server.py health_generate);
- SIGTERM (`sigterm()`): vLLM with `--shutdown-timeout N` (N > 0) stops accepting (the listening socket closes, idle
  keep-alive connections close), the requests in flight finish for up to N s (their connections then close), and
  the rest are aborted; N = 0, vLLM's default, aborts every request in flight at once (vllm/engine/arg_utils.py,
  vllm/entrypoints/launchers/launcher.py). Triton's frontend (uvicorn) stops accepting, closes idle connections and
  lets the requests in flight finish with no limit of its own (python/openai/openai_frontend/main.py,
  frontend/fastapi_frontend.py; uvicorn Server.shutdown): `shutdown_timeout_s` is then the pod's grace period, after
  which the kubelet kills it. SGLang marks itself exiting (/health, /health_generate 503), keeps accepting requests,
  and its watchdog notices at its next poll (`watchdog_s`, 5 s; here a whole one after SIGTERM), then polls as often
  until none is in flight, with no limit of its own, then stops
  (srt/managers/tokenizer_manager.py SignalHandler, sigterm_watchdog);
- `fail()`: 500 to every generation while the health path passes (an engine broken without its errored flag set).
An aborted request's connection is reset (SO_LINGER 0): its client sees a cut stream or no answer.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from components.k8s.engines import ENGINES
from tests.support.fake_backends import ENVOY_CHECKER

__all__ = ["StandInEngine", "STANDIN_ENGINES", "GENERATION_PATHS"]

STANDIN_ENGINES = ("vllm", "sglang", "triton")
# What a body naming a model the engine does not serve gets (None: served all the same)
UNKNOWN_MODEL = {"vllm": (404, "The model `{}` does not exist."), "triton": (400, "Unknown model: {}"), "sglang": None}
GENERATION_PATHS = ("/v1/chat/completions", "/v1/completions")
HOLD_LIMIT_S = 60.0  # a hung generation gives up after this (or when the replica stops): bounded
# The user agent of Envoy's health checks (envoyproxy/envoy@v1.40.0 source/common/http/headers.h
# UserAgentValues.EnvoyHealthChecker): a stand-in serves them as any request and only counts them apart.


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _Server
    _check = False  # the request is the gateway's check (user agent ENVOY_CHECKER)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence per-request logs
        pass

    def setup(self) -> None:
        super().setup()
        self.server.engine._opened(self.connection)

    def finish(self) -> None:
        self.server.engine._closed(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's method names)
        engine = self.server.engine
        if self.path == "/health_generate" and engine.kind == "sglang":
            self._health_generate()
            return
        if self.path != engine.health_path:
            self._json(404, {"error": "not found"})
            return
        with engine.lock:
            engine.health_checks += 1
            busy = engine.in_flight >= engine.busy_at
        if busy:  # the event loop is busy with the generations: the check waits its turn
            engine.stopped.wait(engine.busy_s)
        self._json(503 if engine.exiting.is_set() else 200, {})

    def _health_generate(self) -> None:
        """SGLang's: a 1-token generation of its own, then 200 once anything was produced since it began."""
        engine = self.server.engine
        if engine.exiting.is_set():
            self._json(503, {})
            return
        with engine.lock:
            engine.check_arrivals.append(began := time.monotonic())
        threading.Thread(target=engine._own_token, daemon=True).start()
        while time.monotonic() < began + engine.check_timeout_s and not engine.stopped.wait(engine.poll_s):
            if engine.last_output > began:
                self._json(200, {})
                return
        self._json(503, {})

    def do_POST(self) -> None:  # noqa: N802
        engine = self.server.engine
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path not in GENERATION_PATHS:
            self._json(404, {"error": "not found"})
            return
        if self.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            self._json(422, {"detail": "the body is not JSON"})
            return
        body = json.loads(raw or b"{}")
        if (unknown := UNKNOWN_MODEL[engine.kind]) is not None and body.get("model") not in engine.served:
            status, message = unknown
            self._json(status, {"error": {"message": message.format(body.get("model")), "code": status}})
            return
        check = self._check = self.headers.get("user-agent") == ENVOY_CHECKER
        with engine.lock:
            (engine.check_arrivals if check else engine.arrivals).append(time.monotonic())
            queued = engine.in_flight >= engine.busy_at
            engine.in_flight += 1
            engine._busy.add(self.connection)
        tokens = min(engine.tokens, int(body.get("max_tokens") or engine.tokens))
        try:
            if engine.failing:
                self._json(500, {"error": {"message": "engine failed", "type": "InternalServerError", "code": 500}})
            elif body.get("stream"):
                self._stream(tokens, queued)
            else:
                self._whole(tokens, queued)
        finally:
            with engine.lock:
                engine.in_flight -= 1
                engine._busy.discard(self.connection)
            if engine.draining.is_set():
                self.close_connection = True

    def _tokens(self, tokens: int, queued: bool, each: Any = None) -> bool:
        """Wait for each of `tokens` tokens (calling `each(i)` after token i), the first `busy_s` later when it
        `queued`; False when the request was aborted (a SIGTERM past the shutdown timeout, a stop)."""
        engine = self.server.engine
        if queued and (engine.aborted.wait(engine.busy_s) or engine.stopped.is_set()):
            return False
        for i in range(tokens):
            engine.running.wait(HOLD_LIMIT_S)  # a stuck engine core produces nothing
            if engine.aborted.wait(engine.token_s) or engine.stopped.is_set():
                return False
            engine.last_output = time.monotonic()
            if each is not None:
                each(i)
        return True

    def _stream(self, tokens: int, queued: bool) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        if not self._tokens(tokens, queued, lambda i: self._chunk(b'data: {"token": %d}\n\n' % i)):
            self._abort()
            return
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self._done()

    def _whole(self, tokens: int, queued: bool) -> None:
        if not self._tokens(tokens, queued):
            self._abort()
            return
        self._json(200, {"backend": self.server.engine.name, "tokens": tokens})
        self._done()

    def _done(self) -> None:
        with self.server.engine.lock:
            self.server.engine.completed += 1

    def _abort(self) -> None:
        with self.server.engine.lock:
            if not self._check:  # a check in flight when the scenario stops is not a request it lost
                self.server.engine.aborted_requests += 1
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        if self.server.engine.draining.is_set():
            self.send_header("connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(raw)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], engine: StandInEngine) -> None:
        self.engine = engine
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # connections the gateway or an abort closed


class StandInEngine:
    """One replica of engine `kind` (STANDIN_ENGINES) on `host`:`port` (a loopback address of its own), serving the
    model names `served`. `tokens` chunks `token_s` apart per generation; `shutdown_timeout_s`: vLLM's
    --shutdown-timeout (0: SIGTERM aborts everything in flight), for the others the pod's grace period; `poll_s`,
    `check_timeout_s` and `watchdog_s`: SGLang's 1 s, 20 s and 5 s (scaled by the scenarios)."""

    def __init__(self, name: str, host: str, port: int, *, kind: str = "vllm", served: tuple[str, ...] = ("chat",),
                 tokens: int = 10, token_s: float = 0.02, shutdown_timeout_s: float = 5.0, poll_s: float = 1.0,
                 check_timeout_s: float = 20.0, watchdog_s: float = 5.0) -> None:
        self.name, self.host, self.port, self.kind, self.served = name, host, port, kind, served
        self.health_path = ENGINES[kind].health_path
        self.poll_s, self.check_timeout_s, self.watchdog_s = poll_s, check_timeout_s, watchdog_s
        self.last_output = 0.0  # monotonic time of the last token it produced
        self.tokens, self.token_s, self.shutdown_timeout_s = tokens, token_s, shutdown_timeout_s
        self.busy_at, self.busy_s = 10**9, 0.0  # never busy until `saturate`
        self.lock = threading.Lock()
        self.arrivals: list[float] = []  # monotonic time of each generation request it received (not a check)
        self.check_arrivals: list[float] = []  # and of each of the gateway's progress checks (user agent ENVOY_CHECKER)
        self.in_flight = self.completed = self.aborted_requests = self.health_checks = 0
        self.failing = False
        self.running = threading.Event()  # cleared while the engine core is stuck
        self.running.set()
        self.aborted = threading.Event()  # set: every generation in flight is aborted
        self.draining = threading.Event()  # set by SIGTERM (vLLM, Triton): answers close their connections
        self.exiting = threading.Event()  # set by SIGTERM (SGLang): its health paths answer 503
        self.stopped = threading.Event()
        self.exited = threading.Event()  # the process is gone (after its drain)
        self._connections: set[socket.socket] = set()
        self._busy: set[socket.socket] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def _opened(self, conn: socket.socket) -> None:
        with self.lock:
            self._connections.add(conn)

    def _closed(self, conn: socket.socket) -> None:
        with self.lock:
            self._connections.discard(conn)

    def __enter__(self) -> StandInEngine:
        self._server = _Server((self.host, self.port), self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name=f"standin-{self.name}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def hang(self) -> None:
        """The engine core is stuck: generations (the progress check's included) make no progress, /health still
        answers 200."""
        self.running.clear()

    def saturate(self, *, busy_at: int, busy_s: float) -> None:
        """From `busy_at` generations in flight, /health answers only after `busy_s`, and a new generation (a check
        too) waits as long for its first token."""
        self.busy_at, self.busy_s = busy_at, busy_s

    def fail(self) -> None:
        """Every generation gets 500, /health still answers 200."""
        self.failing = True

    def _own_token(self) -> None:
        """SGLang's /health_generate's own 1-token generation: produced unless the engine is stuck."""
        self.running.wait(HOLD_LIMIT_S)
        if not self.stopped.wait(self.token_s) and self.running.is_set():
            self.last_output = time.monotonic()

    def sigterm(self) -> threading.Thread:
        """SIGTERM, as engine `kind` handles it (module docstring): vLLM and Triton stop accepting and drain for up
        to shutdown_timeout_s, then what is left is aborted (vLLM's timeout; the others' grace period); SGLang keeps
        accepting, answers its health paths 503 and exits once its watchdog finds nothing in flight. Returns the
        thread doing it (joined by `exited`)."""
        def run() -> None:
            if self.kind == "sglang":  # its watchdog sees the flag at its next poll, then polls until none is left
                self.exiting.set()
                self.stopped.wait(self.watchdog_s)
            else:
                self.draining.set()
                self._stop_listening()
                with self.lock:
                    idle = self._connections - self._busy
                for conn in idle:  # no request on them: closed at once
                    _shut(conn)
            poll = self.watchdog_s if self.kind == "sglang" else 0.01
            deadline = time.monotonic() + self.shutdown_timeout_s
            while time.monotonic() < deadline:
                with self.lock:
                    if self.in_flight == 0:
                        break
                time.sleep(poll)
            self._stop_listening()
            self.aborted.set()  # what is left is aborted
            self.exited.set()

        t = threading.Thread(target=run, name=f"sigterm-{self.name}", daemon=True)
        t.start()
        return t

    def _stop_listening(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def stop(self) -> None:
        self.stopped.set()
        self.aborted.set()
        self.running.set()
        self._stop_listening()
        with self.lock:
            conns = list(self._connections)
        for conn in conns:
            _shut(conn)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def received_after(self, t: float) -> int:
        """Generation requests (not checks) that reached it at monotonic time `t` or later."""
        with self.lock:
            return sum(1 for a in self.arrivals if a >= t)


def _shut(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
