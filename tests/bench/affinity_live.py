"""The session-affinity benchmark's live half: fake vLLM replicas (tests.bench.affinity_model.Replica) served over
HTTP on 127.0.0.1 in one asyncio loop, and the agent sessions that drive them through the gateway, in simulated
seconds mapped onto the wall clock (`Clock`: `scale` real seconds per simulated second).

A replica answers a chat request as a stream: the response headers and a first event when its model gives the
request its first token, the last event (the replica's name, the prompt tokens and those found cached) when the
request finishes. A client measures TTFT (the first event) and each session's end-to-end time, both in simulated
seconds. A failed replica resets every connection, health checks included, and forgets its cache.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass

from tests.bench.affinity_model import DEFAULT_TIMING, Replica, Request, Session, StepRecord, TimingModel
from tests.support.fake_backends import is_gateway_check

__all__ = ["Clock", "LiveReplica", "run_sessions"]

CLIENT_TRIES = 5  # a step the gateway answers with an error is sent again, this many times in all


class Clock:
    """Simulated seconds since `start`, `scale` wall-clock seconds each."""

    def __init__(self, loop: asyncio.AbstractEventLoop, scale: float) -> None:
        self.loop, self.scale, self.t0 = loop, scale, loop.time()

    def restart(self) -> None:
        """Simulated time 0 is now."""
        self.t0 = self.loop.time()

    def now(self) -> float:
        return (self.loop.time() - self.t0) / self.scale

    def real(self, sim: float) -> float:
        return self.t0 + sim * self.scale

    async def until(self, sim: float) -> None:
        await asyncio.sleep(max(0.0, self.real(sim) - self.loop.time()))


class LiveReplica:
    """One fake engine on 127.0.0.1: `Replica`'s steps run on timers at their simulated end times."""

    def __init__(self, name: str, clock: Clock, timing: TimingModel = DEFAULT_TIMING) -> None:
        self.name, self.clock, self.timing = name, clock, timing
        self.model = Replica(name, timing)
        self.failed = False
        self._last_end = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._waiters: dict[Request, tuple[asyncio.Future[None], asyncio.Future[None]]] = {}
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None
        return ("127.0.0.1", int(self._server.sockets[0].getsockname()[1]))

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for w in list(self._writers):
            w.transport.abort()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    def fail(self) -> None:
        """Crash: every connection reset, requests lost, the cache empty; health checks reset from now on."""
        self.failed = True
        if self._timer is not None:
            self._timer.cancel()
        self.model.crash()
        for first, done in self._waiters.values():
            for f in (first, done):
                if not f.done():
                    f.set_exception(ConnectionAbortedError(self.name))
                    f.exception()  # retrieved: a handler no longer waiting on it has nothing to log
        self._waiters.clear()
        for w in list(self._writers):
            w.transport.abort()

    def _submit(self, r: Request) -> tuple[asyncio.Future[None], asyncio.Future[None]]:
        futures = (self.clock.loop.create_future(), self.clock.loop.create_future())
        self._waiters[r] = futures
        self.model.submit(r)
        if not self.model.stepping:
            self._begin(max(self._last_end, r.arrival))
        elif (end := self.model.interrupt(r.arrival)) is not None:
            self._arm(end)
        return futures

    def _arm(self, end: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.clock.loop.call_at(self.clock.real(end), self._end, end)

    def _begin(self, t: float) -> None:
        end = self.model.begin(t)
        if end is None and self.model.waiting and self.model.waiting[0].arrival > t:
            end = self.model.begin(self.model.waiting[0].arrival)
        if end is not None:
            self._arm(end)

    def _end(self, t: float) -> None:
        self._timer = None
        first, done = self.model.end()
        self._last_end = t
        for r in first:
            if (w := self._waiters.get(r)) and not w[0].done():
                w[0].set_result(None)
        for r in done:
            if (w := self._waiters.pop(r, None)) and not w[1].done():
                w[1].set_result(None)
        self._begin(t)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while not self.failed:
                line = await reader.readline()
                if not line:
                    return
                path = line.split(b" ")[1].decode()
                headers = await _headers(reader)
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if self.failed:
                    return
                if is_gateway_check(path, headers):
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    continue
                b = json.loads(body)["bench"]
                r = Request(b["session"], b["step"], b["sys_id"], b["sys_len"], b["prompt"], b["output"],
                            self.clock.now())
                first, done = self._submit(r)
                await first
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
                             b"\r\n" + _chunk(b'data: {"first": true}\n\n'))
                await done
                last = json.dumps({"replica": self.name, "prompt_tokens": r.prompt_len, "cached_tokens": r.cached,
                                   "ttft": (r.first_token_at or 0.0) - r.arrival})
                writer.write(_chunk(f"data: {last}\n\n".encode()) + b"0\r\n\r\n")
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            self._handlers.discard(task)
            writer.transport.abort()


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def _headers(reader: asyncio.StreamReader) -> dict[str, str]:
    out = {}
    while (h := await reader.readline()) not in (b"\r\n", b""):
        k, _, v = h.decode().partition(":")
        out[k.strip().lower()] = v.strip()
    return out


@dataclass(frozen=True, slots=True)
class Outcome:
    """One step as its client saw it (simulated seconds), and what the serving replica reported."""

    record: StepRecord
    tries: int
    overhead: float  # TTFT as the client saw it minus the replica's own (gateway, HTTP and event loop)


async def _post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, clock: Clock, head: bytes,
                body: bytes) -> tuple[int, float | None, dict[str, object] | None]:
    """One request; (status, simulated time of the first event, the last event)."""
    writer.write(head + f"content-length: {len(body)}\r\n\r\n".encode() + body)
    status = int((await reader.readline()).split(b" ")[1])
    headers = await _headers(reader)
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
        return status, None, None
    first_at, last = None, None
    while size := int((await reader.readline()).strip(), 16):
        data = await reader.readexactly(size + 2)
        if first_at is None:
            first_at = clock.now()
        event = json.loads(data[len(b"data: "):].strip())
        if "replica" in event:
            last = event
    await reader.readline()
    return status, first_at, last


async def _session(s: Session, port: int, headers: dict[str, str], clock: Clock, out: list[Outcome]) -> None:
    await clock.until(s.start_s)
    head = "POST /v1/chat/completions HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) \
        + f"x-aifactory-session: s{s.sid}\r\n"
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    t = s.start_s
    try:
        for i, st in enumerate(s.steps):
            await clock.until(t + st.pause_s)
            sent = clock.now()
            body = json.dumps({"model": "chat", "messages": [], "stream": True, "bench": {
                "session": s.sid, "step": i, "sys_id": s.sys_id, "sys_len": s.sys_len, "prompt": st.prompt_len,
                "output": st.output_len}}).encode()
            tries = 0
            while tries < CLIENT_TRIES:
                tries += 1
                try:
                    if conn is None:
                        conn = await asyncio.open_connection("127.0.0.1", port)
                    status, first_at, last = await _post(*conn, clock, head.encode(), body)
                except (ConnectionError, asyncio.IncompleteReadError, ValueError, IndexError):
                    if conn is not None:
                        conn[1].transport.abort()
                    conn, status, first_at, last = None, 0, None, None
                if status == 200 and first_at is not None and last is not None:
                    break
            if first_at is None or last is None:
                return  # the step failed every try: the session ends here (counted as unfinished)
            t = clock.now()
            out.append(Outcome(StepRecord(s.sid, i, str(last["replica"]), sent, first_at, t,
                                          int(last["prompt_tokens"]),  # type: ignore[call-overload]
                                          int(last["cached_tokens"])),  # type: ignore[call-overload]
                               tries, first_at - sent - float(last["ttft"])))  # type: ignore[arg-type]
    finally:
        if conn is not None:
            conn[1].transport.abort()


async def run_sessions(sessions: Sequence[Session], port: int, headers: dict[str, str], clock: Clock) -> list[Outcome]:
    """Every session through the gateway on `port`, each step sent with `headers` and the session's key
    (x-aifactory-session: s<id>); the steps as the clients saw them."""
    out: list[Outcome] = []
    await asyncio.gather(*(_session(s, port, headers, clock, out) for s in sessions))
    return out
