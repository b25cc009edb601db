"""Small fake model servers and a real Envoy process, both on 127.0.0.1, always stopped.

    with FakeBackend("chat", Behaviour.OK) as b, EnvoyProcess(config, workdir) as envoy:
        status, body = request(envoy.listener_port, "/v1/models", {"x-model": "chat"})

A backend answers every request with JSON naming itself (the path, the headers the gateway set, the body's
size), or misbehaves the way an unhealthy replica does: 500 or 503, a connection reset (RST), a slow
answer, a hang (accepts, never answers, health checks included), or a long generation streamed a chunk at a
time. `behaviour` and `delay` can be changed while it serves. Health checks (`HEALTH_PATHS`, and whatever the
gateway's checker sends) are counted apart from requests. With `accepts_host`, a request (health checks included)
whose Host it refuses is reset and listed in `refused_hosts`, as a meshed replica's STRICT sidecar does
(tests.support.istio_sidecar).
`EnvoyProcess` runs `.venv/bin/envoy` on a bootstrap built by components.k8s.gateway.envoy.config and rebound to local
ports, waits for it to be ready (bounded) and reads its admin stats.
"""

from __future__ import annotations

import enum
import http.client
import json
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from components.k8s.gateway.envoy.config import HEALTH_PATHS as ENGINE_HEALTH_PATHS
from tests.support.processes import die_with_parent, free_port, stop_process

__all__ = ["Behaviour", "FakeBackend", "EnvoyProcess", "ENVOY", "ENVOY_CHECKER", "request", "free_port", "HEALTH_PATHS",
           "send_json", "is_gateway_check", "answered_gateway_check"]

ENVOY = Path(sys.executable).with_name("envoy")
START_TIMEOUT_S = 15.0
LOG_FLUSH_MS = 50  # access logs reach the file within this (Envoy's default is 10 s)
SLOW_DELAY_S = 3.0  # default delay: how long a SLOW backend waits before answering
HANG_LIMIT_S = 60.0  # a HANG handler gives up after this (or when the backend stops): bounded
STREAM_CHUNKS = 4  # a STREAM answer: this many chunks, `delay` apart
HEALTH_PATHS = tuple(sorted(set(ENGINE_HEALTH_PATHS.values())))  # the engines' liveness paths
# The user agent of Envoy's HTTP health checks (envoyproxy/envoy@v1.40.0 source/common/http/headers.h,
# UserAgentValues.EnvoyHealthChecker): the gateway's progress checks are generations on the OpenAI paths.
ENVOY_CHECKER = "Envoy/HC"


class Behaviour(enum.Enum):
    OK = "ok"
    ERROR = "500"
    UNAVAILABLE = "503"
    RESET = "reset"
    SLOW = "slow"
    HANG = "hang"
    STALL = "stall"  # answers nothing, health checks included, until `release_held()`; then answers them all (200)
    STREAM = "stream"


def send_json(handler: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
    """A whole JSON response with its content-length (what an engine answers a non-streamed request with)."""
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def is_gateway_check(path: str, headers: Any) -> bool:
    """Whether a request is one of the gateway's checks: an engine's liveness path, or Envoy's active health check
    (ENVOY_CHECKER: the progress checks are generations on the OpenAI paths)."""
    return path in HEALTH_PATHS or headers.get("user-agent") == ENVOY_CHECKER


def answered_gateway_check(handler: BaseHTTPRequestHandler) -> bool:
    """For a fake engine whose point is not its checks: answer the gateway's progress check (a generation from
    ENVOY_CHECKER, components.k8s.engines ProgressCheck) as a healthy engine does, 200 with a one-token completion,
    and say so; False for any other request, left to the fake."""
    if handler.headers.get("user-agent") != ENVOY_CHECKER:
        return False
    length = int(handler.headers.get("content-length") or 0)
    if length:
        handler.rfile.read(length)
    send_json(handler, 200, b'{"object": "text_completion", "choices": [{"index": 0, "text": "ok"}]}')
    return True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as Envoy's upstream connections expect
    disable_nagle_algorithm = True  # headers and body leave at once (no 40 ms delayed-ACK stalls)
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence per-request logs
        pass

    def _answer(self) -> None:
        srv = self.server
        if srv.accepts_host is not None and not srv.accepts_host(self.headers.get("host")):
            with srv.lock:
                srv.refused_hosts.append(self.headers.get("host"))
            self._reset()
            return
        behaviour = srv.behaviour
        health = is_gateway_check(self.path, self.headers)
        with srv.lock:
            if health:
                srv.health_hits += 1
                srv.check_headers = {k.lower(): v for k, v in self.headers.items()}
            else:
                srv.hits += 1
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        if behaviour is Behaviour.HANG:
            srv.release.wait(HANG_LIMIT_S)
            self.close_connection = True
            return
        if behaviour is Behaviour.STALL:
            srv.held.wait(HANG_LIMIT_S)
            behaviour = Behaviour.OK
        if health:  # a replica whose inference fails may still pass its health check
            self._send(200, b"")
            return
        if behaviour is Behaviour.STREAM:
            self._stream(length)
            return
        if behaviour is Behaviour.RESET:
            self._reset()
            return
        if behaviour is Behaviour.SLOW:
            srv.release.wait(srv.delay)
        status = {Behaviour.UNAVAILABLE: 503, Behaviour.ERROR: 500}.get(behaviour, 200)
        self._send(status, self._description(length))

    def _reset(self) -> None:
        """SO_LINGER 0 then close: the peer sees a TCP RST, as from a crashed replica."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def _description(self, length: int) -> bytes:
        return json.dumps({"backend": self.server.name, "path": self.path,
                           "model": self.headers.get("x-model"),
                           "host": self.headers.get("host"),
                           "tenant": self.headers.get("x-aifactory-tenant"),
                           "authorization": self.headers.get("authorization"),
                           "body_bytes": length,
                           "request_id": self.headers.get("x-request-id"),
                           "forwarded_for": self.headers.get("x-forwarded-for"),
                           "header_names": sorted({k.lower() for k in self.headers})}).encode()

    def _send(self, status: int, body: bytes) -> None:
        send_json(self, status, body)

    def _stream(self, length: int) -> None:
        """Server-sent events: headers at once, then STREAM_CHUNKS chunks `delay` apart, then the description."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for _ in range(STREAM_CHUNKS):
            if self.server.release.wait(self.server.delay):
                return
            self._chunk(b"data: {}\n\n")
        self._chunk(self._description(length))
        self.wfile.write(b"0\r\n\r\n")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    do_GET = do_POST = _answer  # noqa: N815 (http.server's method names)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients (Envoy) closing idle keep-alive connections is normal here

    def __init__(self, name: str, behaviour: Behaviour, delay: float,
                 accepts_host: Callable[[str | None], bool] | None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.name, self.behaviour, self.delay = name, behaviour, delay
        self.accepts_host = accepts_host
        self.refused_hosts: list[str | None] = []
        self.hits = self.health_hits = 0
        self.check_headers: dict[str, str] = {}  # the last gateway check's, names lower-cased
        self.lock = threading.Lock()
        self.release = threading.Event()  # set on stop: slow handlers return at once
        self.held = threading.Event()  # set by release_held: stalled handlers answer


class FakeBackend:
    """One fake replica on 127.0.0.1 (a free port); `hits` counts the requests it received (health checks
    apart, in `health_hits`). `delay` is the SLOW wait and the STREAM chunk interval (seconds). `accepts_host`:
    which Host headers get an answer (default: all); the others are reset and listed in `refused_hosts`."""

    def __init__(self, name: str, behaviour: Behaviour = Behaviour.OK, *, delay: float = SLOW_DELAY_S,
                 accepts_host: Callable[[str | None], bool] | None = None) -> None:
        self.name, self._behaviour, self._delay = name, behaviour, delay
        self._accepts_host = accepts_host
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._server is not None, "backend not started"
        return int(self._server.server_address[1])

    @property
    def hits(self) -> int:
        assert self._server is not None
        return self._server.hits

    @property
    def health_hits(self) -> int:
        assert self._server is not None
        return self._server.health_hits

    @property
    def check_headers(self) -> dict[str, str]:
        """The headers of the last gateway check it received (names lower-cased)."""
        assert self._server is not None
        with self._server.lock:
            return dict(self._server.check_headers)

    @property
    def refused_hosts(self) -> list[str | None]:
        assert self._server is not None
        with self._server.lock:
            return list(self._server.refused_hosts)

    @property
    def behaviour(self) -> Behaviour:
        return self._behaviour

    @behaviour.setter
    def behaviour(self, value: Behaviour) -> None:
        """Misbehave from now on (requests already being answered finish as they started)."""
        self._behaviour = value
        if self._server is not None:
            self._server.behaviour = value

    def release_held(self) -> None:
        """The requests (and checks) a STALL replica holds are answered now, and any it gets later at once."""
        assert self._server is not None
        self._server.held.set()

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def __enter__(self) -> FakeBackend:
        self._server = _Server(self.name, self._behaviour, self._delay, self._accepts_host)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fake-{self.name}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.release.set()
            self._server.held.set()
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


class EnvoyProcess:
    """`envoy -c <config>` on 127.0.0.1; stdout (access logs) and stderr go to files in `workdir`."""

    def __init__(self, config: Mapping[str, Any], workdir: Path, *, admin_port: int, listener_port: int,
                 concurrency: int = 1, args: Sequence[str] = ()) -> None:
        """`args`: more command-line options (e.g. the Deployment's --drain-strategy)."""
        self.config, self.workdir = config, workdir
        self.args = list(args)
        self.admin_port, self.listener_port = admin_port, listener_port
        self.concurrency = concurrency
        self._proc: subprocess.Popen[bytes] | None = None
        self.access_log = workdir / "envoy.stdout"
        self.error_log = workdir / "envoy.stderr"

    def __enter__(self) -> EnvoyProcess:
        cfg = self.workdir / "envoy.yaml"
        cfg.write_text(yaml.safe_dump(dict(self.config), sort_keys=False))
        with self.access_log.open("wb") as out, self.error_log.open("wb") as err:
            self._proc = subprocess.Popen(
                [str(ENVOY), "-c", str(cfg), "--use-dynamic-base-id", "--concurrency", str(self.concurrency),
                 "-l", "warning", "--disable-hot-restart", "--file-flush-interval-msec", str(LOG_FLUSH_MS),
                 *self.args],
                stdout=out, stderr=err, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"envoy exited {self._proc.returncode}:\n{self.error_log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"envoy not ready after {START_TIMEOUT_S}s:\n{self.error_log.read_text()[-3000:]}")

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._proc is not None:
            stop_process(self._proc, timeout=5)
        self._proc = None

    @property
    def pid(self) -> int:
        """The running Envoy's process id (pinning it, reading its CPU time)."""
        if self._proc is None:
            raise RuntimeError("envoy is not running")
        return self._proc.pid

    def access_log_lines(self, needle: str, *, timeout: float = 5.0) -> list[str]:
        """Access log lines containing `needle`, waiting (bounded) for Envoy to flush them."""
        deadline = time.monotonic() + timeout
        while True:
            lines = [x for x in self.access_log.read_text().splitlines() if needle in x]
            if lines or time.monotonic() > deadline:
                return lines
            time.sleep(LOG_FLUSH_MS / 1000)

    def stats(self) -> dict[str, int]:
        """Counters and gauges from the admin interface (`/stats`), name -> value."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/stats", timeout=5) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            name, _, value = line.partition(": ")
            if value.strip().lstrip("-").isdigit():
                out[name] = int(value)
        return out


def request(port: int, path: str, headers: Mapping[str, str] | None = None, *,
            conn: http.client.HTTPConnection | None = None, timeout: float = 10.0,
            body: bytes | None = None) -> tuple[int, bytes]:
    """GET `path` (POST when there is a `body`) on 127.0.0.1:`port` (over `conn` when given, kept alive);
    returns (status, body)."""
    own = conn is None
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET" if body is None else "POST", path, body=body, headers=dict(headers or {}))
        resp = c.getresponse()
        return resp.status, resp.read()
    finally:
        if own:
            c.close()
