"""Day 2 at the gateway (issue 44): rolling update, scale-down, a saturated /health, every replica saturated, a replica
answering 500 and an engine hang, each on the real Envoy 1.40 with the kit's bootstrap in front of three stand-in vLLM
replicas (tests.support.standin_engines: vLLM 0.33's SIGTERM with --shutdown-timeout, its /health on the API server's
event loop, its check_health that reads an errored flag, its 1-token completion that the gateway's progress check
sends), under a steady mix of streamed and non-streamed generations (tests.support.day2, times scaled down as it
states). Each shows no cut stream and at least 99.9% success; the hang shows its detection window. The rolling update
and the scale-down also run on SGLang's and Triton's stand-ins (their own SIGTERM and checks). `make bench` reports
the same scenarios' figures (tests/bench/bench_day2.py).

Each scenario runs on a gateway, a DNS and replicas of its own and spends its time waiting on real time (a preStop, a
check's window, a phase under load: about 0.3 s of CPU a second, Envoy's included), so CONCURRENTLY of them run at
once, each in a process of its own (the module's `scenarios`), and each test reads its scenario's run. The tests
that read one are `alone` (tests/conftest.py): no other test runs beside the scenarios; the stand-ins' own checks,
last, run beside other tests.
"""

from __future__ import annotations

import http.client
import multiprocessing
import select
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from components.k8s.engines import ENGINES
from infra.config import parse
from tests.support.day2 import (
    CHECK_INTERVAL_S,
    CHECK_TIMEOUT_S,
    CLIENT_DRAIN_S,
    CONNECTION_S,
    CONSECUTIVE_FAILURES,
    DETECTION_S,
    MODEL,
    PRESTOP_S,
    SGLANG_TIMES,
    TIMEOUT_S,
    TOKEN_S,
    TOKENS,
    TRY_IDLE_S,
    Call,
    Run,
    Scenario,
    raw_stack,
    scenario,
)
from tests.support.fake_backends import ENVOY_CHECKER
from tests.support.processes import free_port
from tests.support.standin_engines import STANDIN_ENGINES, StandInEngine

MIN_SUCCESS = 0.999
MARGIN_S = 0.5  # scheduling on a busy 2-core machine: added to bounds taken from the configuration


CONCURRENTLY = 3  # scenarios at once, each in a process of its own (its own interpreter lock): about 1 core together
RESULT_S = 120.0  # a bound on the wait for one scenario's run (each takes a few seconds)

Test = TypeVar("Test", bound=Callable[..., None])
SCENARIO_OF: dict[str, str] = {}  # test function -> the scenario (tests.support.day2.SCENARIOS, or JOBS) it reads


def reads(name: str) -> Callable[[Test], Test]:
    """Mark a test as reading scenario `name`'s run (its `engine` parameter's, else vLLM's): the `run` fixture."""
    def mark(test: Test) -> Test:
        SCENARIO_OF[test.__name__] = name
        return pytest.mark.alone(test)
    return mark


def _key(item: pytest.Item) -> tuple[str, str] | None:
    name = SCENARIO_OF.get(getattr(item, "originalname", ""))
    callspec = getattr(item, "callspec", None)
    return None if name is None else (name, callspec.params.get("engine", "vllm") if callspec else "vllm")


# What a replica saw, as it crosses processes: host, port, engine, generation arrivals, check arrivals, aborted requests
Saw = tuple[str, int, str, list[float], list[float], int]
Seen = tuple[list[Call], dict[str, float], dict[str, int], dict[str, Saw]]  # a Run's calls, moments, stats, replicas


def _in_pool(name: str, workdir: Path, engine: str) -> Any:
    """Scenario `name` (JOBS' or tests.support.day2's) in a pool process: what JOBS' returns, or the run's Seen."""
    if name in JOBS:
        return JOBS[name](workdir, engine)
    run = scenario(name, workdir, engine)
    return run.calls, run.moments, run.stats, {
        n: (r.host, r.port, r.kind, r.arrivals, r.check_arrivals, r.aborted_requests) for n, r in run.replicas.items()}


def _run(seen: Seen) -> Run:
    """The Run again, each replica a stand-in never started that holds what the pool process's saw."""
    calls, moments, stats, replicas = seen
    run = Run(calls=calls, moments=moments, stats=stats)
    for name, (host, port, kind, arrivals, checks, aborted) in replicas.items():
        replica = run.replicas[name] = StandInEngine(name, host, port, kind=kind)
        replica.arrivals, replica.check_arrivals, replica.aborted_requests = arrivals, checks, aborted
    return run


class Scenarios:
    """The scenarios the module's selected tests read, started CONCURRENTLY at a time in the order the tests read
    them; `result` waits for one (it raises what the scenario raised)."""

    def __init__(self, pool: ProcessPoolExecutor, workdir: Callable[[str], Path]) -> None:
        self._pool, self._workdir = pool, workdir
        self._runs: dict[tuple[str, str], Future[Any]] = {}

    def start(self, key: tuple[str, str]) -> None:
        if key not in self._runs:
            name, engine = key
            self._runs[key] = self._pool.submit(_in_pool, name, self._workdir(f"{name}-{engine}"), engine)

    def result(self, key: tuple[str, str]) -> Any:
        self.start(key)
        seen = self._runs[key].result(timeout=RESULT_S)
        return seen if key[0] in JOBS else _run(seen)


@pytest.fixture(scope="module")
def scenarios(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenarios]:
    """A process per scenario slot: a scenario's load, stand-ins and DNS are Python threads, and in one interpreter
    three scenarios would wait on each other's interpreter lock (a fresh interpreter each: no fork of this
    process's threads)."""
    with ProcessPoolExecutor(CONCURRENTLY, mp_context=multiprocessing.get_context("spawn")) as pool:
        runs = Scenarios(pool, tmp_path_factory.mktemp)
        for item in request.session.items:
            if getattr(item, "module", None) is request.module and (key := _key(item)) is not None:
                runs.start(key)
        yield runs  # the pool's exit waits for every run


@pytest.fixture
def run(request: pytest.FixtureRequest, scenarios: Scenarios) -> Any:
    """The run of the scenario the test `reads`."""
    key = _key(request.node)
    assert key is not None, f"{request.node.name} names no scenario: decorate it with reads(...)"
    return scenarios.result(key)


def _no_request_after(run: Run, replica: str, moment: float) -> None:
    assert run.replicas[replica].received_after(moment) == 0, (replica, run.moments)


@reads("rolling-update")
@pytest.mark.parametrize("engine", STANDIN_ENGINES)
def test_a_rolling_update_cuts_no_stream_and_fails_no_request(run: Run, engine: str) -> None:
    """Each pod, highest ordinal first, leaves its Service's ready addresses, waits its preStop (longer than the
    gateway's detection), gets SIGTERM and drains as its engine does (vLLM and Triton stop accepting and finish what
    they hold; SGLang keeps accepting, fails its checks and exits once nothing is in flight); its successor (a new
    address) joins once ready, its progress checks passing (SGLang's /health_generate, the others' 1-token
    completion). The gateway drops a departing replica at its next DNS refresh although it still passes its checks
    (ignore_health_on_host_removal: before, a pod in its preStop kept its new requests until SIGTERM ended it), so
    nothing reaches a replica after its SIGTERM and nothing in flight is aborted."""
    assert run.cut == 0 and run.success() >= MIN_SUCCESS, (run.cut, run.success())
    for name in (f"{MODEL}-{i}" for i in range(3)):
        _no_request_after(run, name, run.moments[f"{name} sigterm"])
        assert run.replicas[name].aborted_requests == 0
    # a try refused by a pod that had just stopped accepting was retried elsewhere before any byte reached its client
    # (on a busy machine a refresh can come late); none was cut


@reads("scale-down")
@pytest.mark.parametrize("engine", STANDIN_ENGINES)
def test_a_scale_down_cuts_no_stream_and_fails_no_request(run: Run, engine: str) -> None:
    """The highest ordinal's pod is deleted: out of the gateway's hosts within its DNS refresh, well before its
    preStop ends; its requests in flight finish, whatever its engine's SIGTERM."""
    assert run.cut == 0 and run.success() >= MIN_SUCCESS, (run.cut, run.success())
    gone = f"{MODEL}-2"
    _no_request_after(run, gone, run.moments[f"{gone} deleted"] + PRESTOP_S / 2)
    assert run.replicas[gone].aborted_requests == 0
    assert run.stats[f"cluster.{MODEL}.membership_total"] == 2


@reads("saturated-health")
def test_a_saturated_replicas_slow_health_steers_new_requests_and_kills_no_work(run: Run) -> None:
    """Replica 1, busy, answers its /health late (vLLM's runs on the API server's event loop: vllm-project/vllm#38157)
    and queues new generations, the progress check's 1-token completion among them, past the check's timeout. Its
    failed checks steer new requests to the others; what it holds runs to its end: no try is reset or retried, no
    stream cut, every request served (before, its hop closed every connection after 2 failed checks and the peers
    re-ran the work)."""
    assert run.cut == 0 and run.success() == 1.0, (run.cut, run.success())
    assert run.stats[f"cluster.{MODEL}.health_check.failure"] >= 1  # it was steered away
    assert run.stats.get(f"cluster.{MODEL}.lb_healthy_panic", 0) == 0  # the others passed: no panic
    assert run.stats.get(f"cluster.{MODEL}.upstream_rq_retry", 0) == 0
    assert run.stats.get(f"cluster.{MODEL}.upstream_cx_destroy_remote_with_active_rq", 0) == 0
    assert all(r.aborted_requests == 0 for r in run.replicas.values())


@reads("all-saturated")
def test_every_replica_saturated_still_serves_every_request(run: Run) -> None:
    """All three replicas saturated (KV cache full or max_num_seqs reached: when KEDA's num_requests_waiting trigger
    fires), each queueing the progress check's 1-token completion behind its work for longer than the check's
    timeout: every replica fails its checks, so none passes. The model's cluster then spreads new requests over all
    of them (panic mode below 1% passing: components.k8s.gateway.envoy.replicas.PANIC_WHEN_NONE_PASSES;
    envoyproxy/envoy@v1.40.0 source/extensions/load_balancing_policies/common/load_balancer_impl.cc,
    `isHostSetInPanic`), and they serve it: no 503 no healthy upstream, no stream cut, at least 99.9% served (before,
    with no panic mode, the model answered 503 to every request until a replica passed again, and flapped)."""
    assert [c.status for c in run.calls if c.status == 503] == []
    assert run.cut == 0 and run.success() >= MIN_SUCCESS, (run.cut, run.success())
    assert run.stats[f"cluster.{MODEL}.health_check.failure"] >= 3, run.stats  # each replica failed its checks
    assert run.stats[f"cluster.{MODEL}.lb_healthy_panic"] > 0, run.stats  # none passed: served in panic
    assert all(r.received_after(run.moments["saturate"] + DETECTION_S + MARGIN_S) > 0 for r in run.replicas.values())
    assert run.stats.get(f"cluster.{MODEL}.upstream_rq_retry", 0) == 0
    assert all(r.aborted_requests == 0 for r in run.replicas.values())


@reads("replica-500")
def test_a_replica_answering_500_while_its_health_passes_is_retried_around_and_ejected(run: Run) -> None:
    """Replica 1 answers 500 to every generation, /health 200: each 500 is retried on another replica, and it is out
    of new requests at once: consecutive 5xx eject it (for its ejection time, not until its next passing check), and
    its progress check, a generation answered 500, fails (an HTTP status other than 200 takes a host out at the first
    failure, whatever unhealthyThreshold: envoyproxy/envoy@v1.40.0 api/envoy/config/core/v3/health_check.proto
    unhealthy_threshold), whichever comes first (before: never ejected, every third try met it)."""
    assert run.cut == 0 and run.success() >= MIN_SUCCESS, (run.cut, run.success())
    ejected = run.stats[f"cluster.{MODEL}.outlier_detection.ejections_enforced_consecutive_5xx"]
    assert ejected == 1 or run.stats[f"cluster.{MODEL}.health_check.failure"] >= 1, run.stats
    failing = run.replicas[f"{MODEL}-1"]
    # the tries it got after it failed: the few before it was out (each retried elsewhere), then none
    assert failing.received_after(run.moments["fail"]) <= 2 * CONSECUTIVE_FAILURES
    assert failing.received_after(run.moments["fail"] + CHECK_INTERVAL_S + MARGIN_S) == 0


@reads("engine-hang")
def test_an_engine_hang_is_detected_within_its_window_and_nothing_later_reaches_it(run: Run) -> None:
    """Replica 1's engine core hangs: no token comes, /health still answers 200 (vLLM's check_health reads an errored
    flag). The gateway's progress checks (a 1-token completion) time out: one failed check takes it out of new
    requests within DETECTION_S (timeout + interval: GATEWAY_DETECTION_SECONDS, 10 s shipped), whatever the
    traffic, and it stays out while it produces nothing (two replicas pass: no panic). Before, only streamed tries
    silent past the try idle timeout (3 x the window, as 30 s shipped) found it, so requests kept reaching it until
    then.

    After the window: no request reaches it, every one succeeds and none waits longer than the window plus one try.
    Not saved: a stream already under way on it is cut at the try idle timeout (its headers were sent: no retry),
    and a non-streamed generation it holds ends with 504 at the model's timeoutSeconds (nothing ends a silent
    non-streamed try sooner: docs/gateway.md, "Requests on a replica that hangs")."""
    hang, window = run.moments["hang"], DETECTION_S + MARGIN_S
    hung = run.replicas[f"{MODEL}-1"]
    _no_request_after(run, f"{MODEL}-1", hang + window)
    assert run.stats[f"cluster.{MODEL}.health_check.failure"] >= 1
    assert run.stats.get(f"cluster.{MODEL}.lb_healthy_panic", 0) == 0
    assert hung.check_arrivals and all(r.check_arrivals for r in run.replicas.values())
    later = [c for c in run.calls if c.sent >= hang + window]
    assert later and run.success(since=hang + window) >= MIN_SUCCESS
    assert max(c.seconds for c in later) < window + TRY_IDLE_S, max(c.seconds for c in later)
    caught = [c for c in run.calls if c.sent >= hang and not c.ok]
    assert caught  # the hang did catch requests (else this proves nothing)
    for c in caught:
        if c.streamed:  # cut by a try idle timeout: none waits longer than the window plus one try
            assert c.cut and c.seconds < window + TRY_IDLE_S, c
        else:  # held to the route timeout, never longer
            assert c.status == 504 and TIMEOUT_S - MARGIN_S < c.seconds < TIMEOUT_S + MARGIN_S, c
    assert all(c.ok for c in run.calls if c.sent < hang - MARGIN_S)


# Envoy's connection close after its last response waits up to the listener's delayed_close_timeout (1 s by default:
# envoyproxy/envoy@v1.40.0:api/envoy/extensions/filters/network/http_connection_manager/v3/
# http_connection_manager.proto) for the client to close first.
DELAYED_CLOSE_S = 1.0


@dataclass
class Lifetime:
    """What a client saw of two connections to a gateway pod (`connection_lifetime`)."""

    answers: list[tuple[bool, str | None]]  # back-to-back short requests on one: served, the answer's Connection
    busy_s: float  # from opening it to the answer that said close (or to giving up)
    stream: Call  # a stream longer than the connection's time and its drain, on the other
    stream_s: float  # from opening that one to the stream's end
    closed: bool  # the gateway closed that one within its delayed close after the stream


def connection_lifetime(workdir: Path, engine: str) -> Lifetime:
    """One replica behind the gateway: back-to-back short requests on one connection until an answer says close
    (bounded), then one stream that outlives the connection's time and its drain on another, and whether the
    gateway then closes it."""
    with ExitStack() as stack:
        s = Scenario(stack, workdir, 1, engine)
        replica = s.run.replicas[f"{MODEL}-0"]
        busy = s.connect()
        busy.connect()
        opened, answers = time.monotonic(), []
        while time.monotonic() - opened < CONNECTION_S + 3 * TOKENS * TOKEN_S + MARGIN_S:
            call, connection = s.exchange(busy, streamed=False)
            answers.append((call.ok, connection))
            if connection == "close":
                break
        busy_s = time.monotonic() - opened
        busy.close()

        long = s.connect()
        long.connect()
        opened = time.monotonic()
        replica.tokens = 2 * round((CONNECTION_S + CLIENT_DRAIN_S) / TOKEN_S)
        stream, _ = s.exchange(long, streamed=True)
        replica.tokens = TOKENS
        stream_s = time.monotonic() - opened
        readable, _, _ = select.select([long.sock], [], [], DELAYED_CLOSE_S + MARGIN_S)
        closed = bool(readable) and long.sock.recv(1) == b""
        long.close()
    return Lifetime(answers, busy_s, stream, stream_s, closed)


JOBS: dict[str, Callable[[Path, str], Any]] = {"connection-lifetime": connection_lifetime}  # beyond SCENARIOS


@reads("connection-lifetime")
def test_a_client_connection_to_a_gateway_pod_is_closed_within_its_bound_and_a_long_request_on_it_finishes(
        run: Lifetime) -> None:
    """A terminating gateway pod leaves its Service at once, but a client's keep-alive connection kept bringing it
    new requests through its whole preStop (HCM idle_timeout 300 s, no lifetime) until SIGTERM cut them. Now a
    connection lives CONNECTION_S (max_connection_duration; 60 s shipped, scaled): a busy one answers with
    `Connection: close` after its current request, one with a long stream in flight when its time is up keeps the
    stream to [DONE] and is closed after it (the connection manager's drain_timeout, CLIENT_DRAIN_S, has passed),
    with Envoy's delayed close; the real Envoy 1.40 on the kit's bootstrap
    (envoyproxy/envoy@v1.40.0:api/envoy/config/core/v3/protocol.proto HttpProtocolOptions.max_connection_duration).
    So every client connection has moved to another pod well inside the pod's preStop
    (components.k8s.gateway.component.drain_seconds)."""
    # back-to-back short requests: the first answer after CONNECTION_S says close, none fails
    assert all(ok for ok, _ in run.answers) and run.answers[-1][1] == "close", run.answers
    assert run.busy_s <= CONNECTION_S + TOKENS * TOKEN_S + MARGIN_S, run.busy_s
    assert len(run.answers) >= 2  # a fresh connection is kept alive
    # a stream that outlives the connection's time and its drain runs to its end, then the connection closes
    assert run.stream.ok and run.stream_s > CONNECTION_S + CLIENT_DRAIN_S, (run.stream, run.stream_s)
    assert run.closed, "the connection stayed open"


def _ask(replica: StandInEngine, method: str, path: str, body: bytes = b"", timeout: float = 1.0) -> int | None:
    """The status the replica answers within `timeout` (None: none), asked as Envoy's health checker asks."""
    conn = http.client.HTTPConnection(replica.host, replica.port, timeout=timeout)
    try:
        conn.request(method, path, body=body or None, headers={
            "user-agent": ENVOY_CHECKER, **({"content-type": "application/json"} if body else {})})
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


@pytest.mark.parametrize("engine", STANDIN_ENGINES)
def test_each_stand_in_fails_the_gateways_progress_check_when_its_engine_hangs_while_its_health_passes(
        engine: str) -> None:
    """The check the gateway renders for the engine (Engine.progress_check: vLLM's and Triton's 1-token completion,
    SGLang's /health_generate) passes on a working stand-in within the scaled check timeout's margin, gets no answer
    once its engine hangs while its liveness path still answers 200 (vLLM: the completion never produces; SGLang:
    /health_generate sees no output and would answer 503 only after its own timeout), and after SIGTERM SGLang
    answers both 503 (tokenizer_manager's SignalHandler)."""
    cfg = parse(raw_stack(engine), stack="day2")
    check = ENGINES[engine].progress_check(cfg.models[MODEL])
    with StandInEngine("probe", "127.0.0.1", free_port(), kind=engine, served=(MODEL,), token_s=0.02,
                       **SGLANG_TIMES) as replica:
        assert _ask(replica, check.method, check.path, check.payload()) == 200
        replica.hang()
        assert _ask(replica, check.method, check.path, check.payload(), timeout=1.5 * CHECK_TIMEOUT_S) is None
        assert _ask(replica, "GET", ENGINES[engine].health_path) == 200
        replica.running.set()  # it produces again: the check passes again
        assert _ask(replica, check.method, check.path, check.payload()) == 200
        if engine == "sglang":
            replica.sigterm()
            assert _ask(replica, check.method, check.path) == _ask(replica, "GET", "/health") == 503
