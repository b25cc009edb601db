"""The gateway bench's load generator (tests.support.loadgen) paces what it sends, against a real Envoy.

h2load (Debian bookworm's nghttp2-client 1.52.0) paces each client at `--rps` over HTTP/1.1 without a body and over
HTTP/2 with one, but not over HTTP/1.1 with a body: there it sends the next request as soon as one with `-d` ends
(observed; its documentation, nghttp2/nghttp2 v1.52.0 doc/h2load.1.rst, does not say so). The last test pins that
fact: if a later h2load paces HTTP/1.1 bodies, the bench's POST can go back to HTTP/1.1.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bench.bench_gateway import backend_bootstrap
from tests.support.fake_backends import EnvoyProcess, free_port
from tests.support.loadgen import H2LOAD, Target, cpu_seconds, paced, pin

RATE, SECONDS, WARMUP_S = 200, 0.5, 0.25
BODY = b'{"model": "chat"}'


@pytest.fixture(scope="module")
def envoy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnvoyProcess]:
    port, admin = free_port(), free_port()
    with EnvoyProcess(backend_bootstrap(port, admin), tmp_path_factory.mktemp("backend"), admin_port=admin,
                      listener_port=port, concurrency=2) as process:
        yield process


@pytest.fixture(scope="module")
def backend(envoy: EnvoyProcess) -> int:
    return envoy.listener_port


@pytest.mark.parametrize("body", [None, BODY], ids=["GET over HTTP/1.1", "POST over HTTP/2"])
def test_each_target_gets_the_rate_for_the_duration_and_the_warmup_is_not_counted(backend: int,
                                                                                   body: bytes | None) -> None:
    started = time.monotonic()
    first, second = paced([Target(backend), Target(backend)], rate=RATE, seconds=SECONDS, clients=4,
                          warmup_s=WARMUP_S, path="/v1/chat/completions", body=body)
    took = time.monotonic() - started
    # paced: the requests of warm-up and measurement take their time (unpaced, 150 requests take a few ms)
    assert took >= 0.9 * (SECONDS + WARMUP_S)
    # the requests sent in the first WARMUP_S are not counted: about RATE x SECONDS remain (each client's share of
    # the total, rounded, and where its timer falls on the warm-up's edge move it by a few)
    for latencies in (first, second):
        assert 0.9 * RATE * SECONDS <= len(latencies) <= 1.1 * RATE * SECONDS
        assert all(ms > 0 for ms in latencies)


def test_a_rate_that_is_no_multiple_of_the_clients_is_refused(backend: int) -> None:
    with pytest.raises(ValueError, match="rate 50 req/s is not a multiple of 4 clients"):
        paced([Target(backend)], rate=50, seconds=SECONDS, clients=4)


def test_h2load_does_not_pace_an_http1_request_with_a_body(backend: int, tmp_path: Path) -> None:
    (tmp_path / "body").write_bytes(BODY)
    started = time.monotonic()
    subprocess.run([H2LOAD, "--h1", "-c", "2", "--rps", "10", "-n", "100", "-d", str(tmp_path / "body"),
                    f"http://127.0.0.1:{backend}/v1/chat/completions"], check=True, capture_output=True, timeout=30)
    # paced, 100 requests at 2 x 10/s would take about 5 s; unpaced they take well under a second, even on a busy
    # machine
    assert time.monotonic() - started < 2.5


def test_pin_puts_every_thread_of_a_process_on_the_cpus_given_and_its_cpu_time_grows_with_work(
        envoy: EnvoyProcess) -> None:
    cpu = min(os.sched_getaffinity(0))
    before = cpu_seconds(envoy.pid)
    pin(envoy.pid, {cpu})
    tasks = os.listdir(f"/proc/{envoy.pid}/task")
    assert len(tasks) > 2  # the main thread and its workers at least
    assert {frozenset(os.sched_getaffinity(int(t))) for t in tasks} == {frozenset({cpu})}
    paced([Target(envoy.listener_port)], rate=RATE, seconds=SECONDS, warmup_s=0)
    assert cpu_seconds(envoy.pid) > before
