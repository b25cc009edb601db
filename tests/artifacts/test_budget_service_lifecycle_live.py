"""The token budget service as a real process behind the real Envoy 1.40, with a real Redis (Debian's redis-server)
and a stand-in engine that streams as vLLM does: what a rollout (SIGTERM) does to the streams in flight, and what
the next replica's sweep does after a pod killed hard (SIGKILL) mid-stream.

Envoy facts (envoyproxy/envoy@v1.40.0 api/envoy/extensions/filters/http/ext_proc/v3/ext_proc.proto): one gRPC
stream per HTTP request, open as long as the request; without failure_mode_allow a failed stream fails the request
(the fail-closed tenants' filter). gRPC's server.stop(grace) (grpc/grpc@v1.85.3 src/python/grpcio/grpc/aio/_server.py)
refuses new RPCs and lets those in flight run for `grace` seconds.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from components.k8s.gateway.budgets.store import window_key
from components.k8s.gateway.envoy.budgets import BUDGETS_CLUSTER, service_config
from infra.config import parse
from tests.support.envoy import start_gateway
from tests.support.fake_backends import EnvoyProcess, free_port
from tests.support.processes import die_with_parent, stop_process
from tests.support.redis_server import RedisServer
from tests.support.tokens import DEFAULT_AUDIENCE, Issuer
from tests.support.usage_engine import UsageEngine

IDP = "https://idp.budgets.test"
ROOT = Path(__file__).resolve().parents[2]
LIMIT = 1_000_000
BOUND_S = 10.0  # every wait here is bounded; none is expected to come near it
RAW = {
    "target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "fast"},
    "nodePools": {"gpu": {"instanceType": "dgx-h100"}},
    "tenants": {
        "open": {"gpuQuota": 2, "shareWith": ["closed"], "tokenBudget": {"perDay": LIMIT}},
        "closed": {"gpuQuota": 0, "tokenBudget": {"perDay": LIMIT, "onStoreFailure": "closed"}}},
    "models": {"chat": {"engine": "vllm", "model": "org/model", "toolCallParser": "none", "pool": "gpu",
                        "tenant": "open"}},
    "gateway": {"auth": {"issuers": [{"issuer": IDP, "jwksUri": f"{IDP}/certs", "audiences": [DEFAULT_AUDIENCE]}]},
                "budgetService": {"image": "registry.example/aifactory-budgets:test"}},
    "observability": {"prices": {"dgx-h100": 30.0}},
}


@dataclass
class Live:
    envoy: EnvoyProcess
    engine: UsageEngine
    redis: RedisServer
    issuer: Issuer
    config: Path
    port: int

    def service(self, stack: ExitStack, config: Path | None = None,
                metrics_port: int | None = None) -> subprocess.Popen[bytes]:
        """The service as the Deployment runs it (python -m components.k8s.gateway.budgets), once it listens."""
        proc = subprocess.Popen(
            [sys.executable, "-m", "components.k8s.gateway.budgets", "--config", str(config or self.config),
             "--listen", f"127.0.0.1:{self.port}", "--redis-url", self.redis.url,
             "--metrics-port", str(metrics_port or free_port()), "--shutdown-grace-seconds", str(BOUND_S)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        stack.callback(stop_process, proc)
        deadline = time.monotonic() + BOUND_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return proc
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"the budget service did not start: {proc.communicate()[0]!r}") from None
                time.sleep(0.05)

    def open_stream(self, tenant: str, body: dict[str, Any]) -> tuple[http.client.HTTPConnection,
                                                                      http.client.HTTPResponse]:
        c = http.client.HTTPConnection("127.0.0.1", self.envoy.listener_port, timeout=BOUND_S)
        c.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                  headers={**self.issuer.bearer(tenant), "content-type": "application/json"})
        return c, c.getresponse()

    def spent(self, tenant: str) -> int:
        return int(self.redis.client().get(window_key("tenant", tenant, "perDay", time.time())) or 0)


def streams_in_flight(metrics_port: int) -> dict[str, float]:
    """The service's own scrape: its streams in flight by kind (the names written out, as the alert's promtool test
    writes them: tests/artifacts/test_gateway_drain_alert.py)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=BOUND_S) as r:
        text = r.read().decode()
    return {s.labels["stream"]: s.value for f in text_string_to_metric_families(text)
            if f.name == "aifactory_token_budget_streams_in_flight" for s in f.samples}


def wait_for_streams(metrics_port: int, expected: dict[str, float]) -> None:
    deadline = time.monotonic() + BOUND_S
    while (seen := streams_in_flight(metrics_port)) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seen == expected


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    cfg = parse(RAW, stack="budgets")
    issuer = Issuer(IDP)
    workdir = tmp_path_factory.mktemp("budget-lifecycle")
    config = workdir / "budgets.json"
    config.write_text(service_config(cfg))
    with ExitStack() as stack:
        redis = stack.enter_context(RedisServer(workdir))
        engine = stack.enter_context(UsageEngine(prompt_tokens=20, completion_tokens=10))
        port = free_port()
        envoy = start_gateway(stack, cfg, workdir, jwks=[issuer.jwks],
                              endpoints={"chat": [engine.address], BUDGETS_CLUSTER: [("127.0.0.1", port)]})
        yield Live(envoy, engine, redis, issuer, config, port)


def test_sigterm_lets_a_fail_closed_stream_finish_and_settles_it(live: Live) -> None:
    """A rollout's SIGTERM reaches the service while a fail-closed tenant's answer streams: the stream runs to its
    end (usage and [DONE]), its reservation is settled to the usage, and the process then exits 0 by itself."""
    live.redis.client().flushall()
    live.engine.chunk_delay = 0.1  # 10 chunks over about a second
    with ExitStack() as stack:
        service = live.service(stack)
        conn, resp = live.open_stream("closed", {"model": "chat", "stream": True, "max_tokens": 10,
                                                 "messages": [{"role": "user", "content": "hello"}]})
        stack.callback(conn.close)
        assert resp.status == 200
        first = resp.readline()
        assert first.startswith(b"data: "), first
        service.send_signal(signal.SIGTERM)
        rest = resp.read()  # raises IncompleteRead if the stream is cut
        events = [x for x in (first + rest).split(b"\n\n") if x]
        assert events[-1] == b"data: [DONE]"
        assert json.loads(events[-2].removeprefix(b"data: "))["usage"]["completion_tokens"] == 10
        assert service.wait(timeout=BOUND_S) == 0, service.communicate()[0]
        assert live.spent("closed") == 20 + 10  # usage, outputWeight 1: settled before the process exited


def test_a_pod_killed_mid_stream_leaves_its_reservation_to_the_next_replicas_sweep(live: Live) -> None:
    """SIGKILL (an OOM kill, a lost node) reaches the service while it meters a stream: the answer still streams to
    the client (metering is observability-only), but nobody settles the reservation, which stays charged its worst
    case. The replica started next gives it all back once its deadline has passed (here the config's longest request
    of the route is 1 s, no margin, a sweep every 0.2 s), and leaves the record a `swept` tombstone."""
    live.redis.client().flushall()
    live.engine.chunk_delay = 0.1
    doc = json.loads(live.config.read_text())
    doc.update(requestSeconds={"chat": 1.0}, sweepMarginSeconds=0, sweepIntervalSeconds=0.2)
    config = live.config.with_name("budgets-sweep.json")
    config.write_text(json.dumps(doc))
    body = {"model": "chat", "stream": True, "max_tokens": 10, "messages": [{"role": "user", "content": "hello"}]}
    with ExitStack() as stack:
        killed = live.service(stack, config)
        conn, resp = live.open_stream("open", body)
        stack.callback(conn.close)
        assert resp.status == 200
        assert resp.readline().startswith(b"data: ")
        killed.kill()
        killed.wait(timeout=BOUND_S)
        conn.close()
        c = live.redis.client()
        [record] = c.keys("aifactory:budget:reservation:*")
        [reserved] = c.hgetall(record).values()  # the day's counter: the prompt's estimate and max_tokens
        assert live.spent("open") == int(reserved) > 10  # nobody settles it
        live.service(stack, config)
        deadline = time.monotonic() + BOUND_S
        while live.spent("open") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert live.spent("open") == 0
        assert c.hgetall(record) == {b"swept": b"1"}


def test_the_streams_in_flight_gauge_follows_every_stream_to_its_end(live: Live) -> None:
    """What TokenBudgetDrainCutsStreams reads: two answers streaming read 2 metering streams in flight, and 2
    admission streams (Envoy holds a request's ext_proc stream open until the request ends, admission answered or
    not). One client resets its connection mid-answer: Envoy closes that request's admission stream at once, and its
    metering stream (observability mode) only after its deferred_close_timeout, 5 s by default, which the kit does
    not set (envoyproxy/envoy@v1.40.0 api/envoy/extensions/filters/http/ext_proc/v3/ext_proc.proto). The other reads
    its answer to the end (the service ends that metering stream at the body's end). Each kind then reads 0."""
    live.redis.client().flushall()
    live.engine.chunk_delay = 0.3  # 10 chunks over about 3 seconds
    body = {"model": "chat", "stream": True, "max_tokens": 10, "messages": [{"role": "user", "content": "hello"}]}
    metrics = free_port()
    with ExitStack() as stack:
        live.service(stack, metrics_port=metrics)
        wait_for_streams(metrics, {"admission": 0, "metering": 0})
        opened = [live.open_stream(tenant, body) for tenant in ("open", "closed")]
        for conn, resp in opened:
            stack.callback(conn.close)
            assert resp.status == 200
            assert resp.readline().startswith(b"data: ")
        wait_for_streams(metrics, {"admission": 2, "metering": 2})
        (reset, _), (_, finished) = opened
        assert reset.sock is not None
        reset.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, not FIN
        reset.close()
        wait_for_streams(metrics, {"admission": 1, "metering": 2})
        assert finished.read().rstrip().endswith(b"data: [DONE]")
        wait_for_streams(metrics, {"admission": 0, "metering": 1})  # the reset one's, until Envoy's deferred close
        wait_for_streams(metrics, {"admission": 0, "metering": 0})
