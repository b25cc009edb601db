"""A replica's 500 through the real Envoy 1.40 on the kit's bootstrap (issue 44, item 8;
components.k8s.gateway.envoy.failures, docs/gateway.md "Day 2").

- Which 500 is the request's: three replicas per model that answer every request but a poison one, to which each
  answers 500 as the engine does (vLLM 0.33.0's body for a server error of unknown origin; SGLang 0.5.23's for a
  multimodal input its scheduler could not build: python/sglang/srt/managers/scheduler.py,
  `_MultimodalInputProcessingError`). The request's second 500 ends it with 500 to the client (452 to the router),
  a first one whose engine says the request is at fault with 422, neither retried nor counted against the replica;
  before issue 44, a poison request was tried on gateway.retries.attempts + 1 replicas, each try a failure toward
  that replica's ejection.
- A replica answering 500 to every request while its /health passes, under both balancing policies of a model
  (LEAST_REQUEST; Maglev with bounded load, sessions keyed), three stand-in vLLM replicas and the day-2 scenarios'
  scaled times (tests.support.day2): the share of requests served and what the failing replica received after it
  began failing.
"""

from __future__ import annotations

import http.client
import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import tests.support.day2 as day2
from components.k8s.gateway.budgets.service import BudgetConfig
from components.k8s.gateway.budgets.store import window_key
from components.k8s.gateway.budgets.usage import ResponseMeter
from components.k8s.gateway.envoy.affinity import SESSION_HEADER
from components.k8s.gateway.envoy.budgets import BUDGETS_CLUSTER, service_config
from components.k8s.gateway.envoy.failures import (
    FAILED_TWICE_CLIENT_STATUS,
    FAILED_TWICE_UPSTREAM_STATUS,
    FAULT_HEADER,
    FAULT_STATUS,
    REPLICA_HEADER,
)
from infra.config import parse
from tests.support.budget_service import BudgetService
from tests.support.envoy import start_gateway
from tests.support.fake_backends import ENVOY_CHECKER, EnvoyProcess, free_port, send_json
from tests.support.processes import ServedInThread
from tests.support.redis_server import RedisServer
from tests.support.tokens import Issuer

ISSUER = "https://issuer.failures/realms/aifactory"
REPLICAS = 3
POISON = "poison"
# What each engine answers a poison request (see the module docstring for the sources)
VLLM_500 = {"error": {"message": "Internal server error", "type": "InternalServerError", "param": None,
                      "code": 500}}
SGLANG_MM_500 = {"object": "error", "message": "Multimodal input processing failed on the TP entry rank: "
                 "ValueError: image has 0 pixels", "type": "500", "param": None, "code": 500}
ANSWERS = {"vllm": VLLM_500, "sglang": SGLANG_MM_500}
MIN_SUCCESS = 0.999
RETRY_LOAD_DELAY_S, RETRY_LOAD_CONCURRENCY, RETRY_LOAD_REQUESTS = 0.05, 8, 120
EJECTED_WITHIN_S = 1.0  # scaled: a fast-failing replica at day2.RATE is out well within this


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence per-request logs
        pass

    def do_GET(self) -> None:  # noqa: N802 - the health check
        self._send(200, b"{}")

    def do_POST(self) -> None:  # noqa: N802
        body = self._body()
        if self.headers.get("user-agent") == ENVOY_CHECKER:  # the gateway's progress check: a generation that succeeds
            self._send(200, json.dumps({"choices": [{"text": "ok"}]}).encode())
            return
        with self.server.lock:
            self.server.request_ids.append(self.headers.get("x-request-id", ""))
        if self.server.failing:
            self._send(500, json.dumps(self.server.answer).encode())
            return
        if POISON.encode() in body:
            self.server.poisoned += 1
            self._send(500, json.dumps(self.server.answer).encode())
        else:
            time.sleep(self.server.delay_s)
            self._send(200, json.dumps({"choices": [{"message": {"content": "ok"}}]}).encode())

    def _send(self, status: int, body: bytes) -> None:
        send_json(self, status, body)

    def _body(self) -> bytes:
        """The request's body, sized or chunked (a body the budget filter forwarded has no content-length)."""
        if "content-length" in self.headers:
            return self.rfile.read(int(self.headers["content-length"]))
        parts = []
        while size := int(self.rfile.readline().split(b";")[0], 16):
            parts.append(self.rfile.read(size + 2)[:-2])  # each chunk ends with CRLF
        self.rfile.readline()  # the empty trailer
        return b"".join(parts)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, answer: dict[str, Any], *, failing: bool, delay_s: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answer, self.poisoned, self.failing, self.delay_s = answer, 0, failing, delay_s
        self.lock = threading.Lock()
        self.request_ids: list[str] = []


class PoisonedReplica(ServedInThread):
    """A replica that serves every request (after `delay_s`) but a poison one, which it answers with its engine's 500
    at once; a `failing` one answers every request so. Either passes the gateway's progress checks (its engine
    produces: what fails is the requests'). It keeps each request's x-request-id (the same on every try of a
    request), the checks' left out."""

    def __init__(self, engine: str, *, failing: bool = False, delay_s: float = 0.0) -> None:
        self._server = _Server(ANSWERS[engine], failing=failing, delay_s=delay_s)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        return "127.0.0.1", int(self._server.server_address[1])

    @property
    def poisoned(self) -> int:
        return int(self._server.poisoned)

    @property
    def request_ids(self) -> list[str]:
        with self._server.lock:
            return list(self._server.request_ids)


def _stack() -> dict[str, Any]:
    raw = day2.raw_stack()
    raw["gateway"]["auth"]["issuers"][0].update(issuer=ISSUER, jwksUri=f"{ISSUER}/certs")
    raw["models"]["mm"] = {**raw["models"][day2.MODEL], "engine": "sglang"}
    return raw


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EnvoyProcess, dict[str, list[PoisonedReplica]],
                                                                       Issuer]]:
    cfg = parse(_stack(), stack="failures")
    issuer = Issuer(ISSUER)
    with ExitStack() as stack:
        replicas = {m: [stack.enter_context(PoisonedReplica(cfg.models[m].engine)) for _ in range(REPLICAS)]
                    for m in (day2.MODEL, "mm")}
        envoy = start_gateway(stack, cfg, tmp_path_factory.mktemp("failures"),
                              endpoints={m: [r.address for r in rs] for m, rs in replicas.items()},
                              jwks=[issuer.jwks])
        yield envoy, replicas, issuer


def _ask(envoy: EnvoyProcess, issuer: Issuer, model: str, content: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", envoy.listener_port, timeout=10)
    try:
        conn.request("POST", "/v1/chat/completions", headers={**issuer.bearer("alpha"),
                                                                 "content-type": "application/json"},
                     body=json.dumps({"model": model, "messages": [{"role": "user", "content": content}]}))
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def _counts(envoy: EnvoyProcess, model: str) -> dict[str, int]:
    stats = envoy.stats()
    return {k.removeprefix("cluster.{model}."): stats.get(k.format(model=model), 0) for k in (
        "cluster.{model}.upstream_rq_total", "cluster.{model}.upstream_rq_retry",
        f"cluster.{{model}}.upstream_rq_{FAULT_STATUS}",
        f"cluster.{{model}}.upstream_rq_{FAILED_TWICE_UPSTREAM_STATUS}",
        "cluster.{model}.upstream_rq_4xx", "cluster.{model}.upstream_rq_5xx",
        "cluster.{model}.outlier_detection.ejections_enforced_consecutive_5xx",
        "http.gateway.downstream_rq_4xx", "http.gateway.downstream_rq_5xx")}


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}


def _logged(envoy: EnvoyProcess, fault: str, n: int) -> list[tuple[Any, ...]]:
    """The last `n` access log lines of requests that ended with x-aifactory-fault `fault`: (status, fault,
    attempts, flags)."""
    return [(e["status"], e["fault"], e["attempts"], e["flags"]) for e in _logged_lines(envoy, fault, n)]


def test_a_request_failed_by_two_replicas_is_a_500_to_the_client_not_retried_nor_counted(gateway: Any) -> None:
    """Every replica answers a poison request 500 (vLLM's body: no word of whose fault). The first try's 500 is
    retried on another replica; that replica's 500 ends the request: the upstream filter leaves the router 452 (not
    retried, not counted against that replica: no ejection), the gateway's own filter answers the client 500 with
    x-aifactory-fault: failed-on-two-replicas and the engine's body. Where each status shows (Envoy 1.40): the route
    cluster's upstream_rq_452 and upstream_rq_4xx (the router's, which the gateway's alerts read: the retried try's
    500 is in neither, nor in upstream_rq_5xx), the downstream stats' 5xx, the access log's status 500 with the
    fault. Before: the client got 422, a client error for what may be an outage."""
    envoy, replicas, issuer = gateway
    before = _counts(envoy, day2.MODEL)
    answers = [_ask(envoy, issuer, day2.MODEL, POISON) for _ in range(2)]
    assert [(status, headers.get(FAULT_HEADER)) for status, headers, _ in answers] == \
        [(FAILED_TWICE_CLIENT_STATUS, "failed-on-two-replicas")] * 2
    assert all(json.loads(body) == VLLM_500 for _, _, body in answers)
    assert _delta(_counts(envoy, day2.MODEL), before) == {
        "upstream_rq_total": 4, "upstream_rq_retry": 2, "upstream_rq_422": 0, "upstream_rq_452": 2,
        "upstream_rq_4xx": 2, "upstream_rq_5xx": 0, "outlier_detection.ejections_enforced_consecutive_5xx": 0,
        "http.gateway.downstream_rq_4xx": 0, "http.gateway.downstream_rq_5xx": 2}
    assert sum(r.poisoned for r in replicas[day2.MODEL]) == 4
    assert _logged(envoy, "failed-on-two-replicas", 2) == [(500, "failed-on-two-replicas", 2, "-")] * 2
    # the model still serves; no answer names the replica (the header the filter reads is removed, and set on 500s
    # only)
    served = [_ask(envoy, issuer, day2.MODEL, "hi") for _ in range(6)]
    assert [status for status, _, _ in served] == [200] * 6
    assert not any(REPLICA_HEADER in headers or FAULT_HEADER in headers for _, headers, _ in served)
    assert not any(REPLICA_HEADER in headers for _, headers, _ in answers)


def test_a_500_whose_engine_says_the_request_is_at_fault_is_not_retried(gateway: Any) -> None:
    """SGLang answers 500 to a multimodal input its scheduler's entry rank could not build, a request-local error:
    one try, 422 with x-aifactory-fault, nothing counted against the replica. Before: 3 tries, 3 failures."""
    envoy, replicas, issuer = gateway
    before = _counts(envoy, "mm")
    status, headers, body = _ask(envoy, issuer, "mm", POISON)
    assert (status, headers.get(FAULT_HEADER), json.loads(body)) == \
        (FAULT_STATUS, "engine-says-request", SGLANG_MM_500)
    assert _delta(_counts(envoy, "mm"), before) == {
        "upstream_rq_total": 1, "upstream_rq_retry": 0, "upstream_rq_422": 1, "upstream_rq_452": 0,
        "upstream_rq_4xx": 1, "upstream_rq_5xx": 0, "outlier_detection.ejections_enforced_consecutive_5xx": 0,
        "http.gateway.downstream_rq_4xx": 1, "http.gateway.downstream_rq_5xx": 0}
    assert _logged(envoy, "engine-says-request", 1) == [(422, "engine-says-request", 1, "-")]
    assert sum(r.poisoned for r in replicas["mm"]) == 1


@pytest.mark.alone
@pytest.mark.parametrize("policy", ["least_request", "maglev"])
def test_a_retry_leaves_a_replica_that_fails_fast_and_holds_no_requests(policy: str, tmp_path: Path) -> None:
    """Replica 0 answers 500 at once to everything; the two others take RETRY_LOAD_DELAY_S per request, so under
    RETRY_LOAD_CONCURRENCY clients they hold requests in flight and it holds none. Ejection is kept out of the
    picture (consecutive5xx far above the run's tries) to see the balancer alone: each 500 is retried, and the retry
    must go to another replica. Before, LEAST_REQUEST's full scan returned the replica with the fewest requests in
    flight, the failing one, on every re-draw the previous_hosts predicate asked for: the retries came back to it and
    requests failed on all three tries."""
    raw = _stack()
    del raw["models"]["mm"]
    raw["gateway"]["outlierDetection"]["consecutive5xx"] = 10_000
    if policy == "least_request":
        raw["models"][day2.MODEL]["sessionAffinity"] = {"enabled": False}
    cfg = parse(raw, stack="failures")
    issuer = Issuer(ISSUER)
    sessions = _Sessions(issuer, 60)
    with ExitStack() as stack:
        replicas = [stack.enter_context(PoisonedReplica("vllm", failing=k == 0, delay_s=RETRY_LOAD_DELAY_S))
                    for k in range(REPLICAS)]
        envoy = start_gateway(stack, cfg, tmp_path, endpoints={day2.MODEL: [r.address for r in replicas]},
                              jwks=[issuer.jwks])
        with ThreadPoolExecutor(RETRY_LOAD_CONCURRENCY) as pool:
            statuses = list(pool.map(lambda _: _ask(envoy, sessions, day2.MODEL, "hi")[0], range(RETRY_LOAD_REQUESTS)))
        failed_ids = replicas[0].request_ids
    came_back = len(failed_ids) - len(set(failed_ids))
    print(f"{policy}: {statuses.count(200)} of {len(statuses)} served; the failing replica got {len(failed_ids)} "
          f"tries, {came_back} of them retries that came back")
    # Maglev: a retry's re-draw (the hash perturbed per attempt, with bounded load) rarely lands on the failing
    # replica again (seen once in about four runs of some 50 retries); its next try leaves it and the request is
    # served. LEAST_REQUEST's four random choices with 200 re-draws: never.
    allowed = 0 if policy == "least_request" else 2
    assert statuses.count(200) == len(statuses) and came_back <= allowed, (policy, Counter(statuses), came_back)


class _Sessions:
    """An issuer whose every request also carries a session key, one of `n` in turn (Maglev hashes it)."""

    def __init__(self, issuer: Issuer, n: int) -> None:
        self.issuer, self._keys = issuer, itertools.cycle(range(n))
        self.jwks = issuer.jwks

    def bearer(self, tenant: str | None) -> dict[str, str]:
        return {**self.issuer.bearer(tenant), SESSION_HEADER: f"session-{next(self._keys)}"}


@pytest.mark.alone
@pytest.mark.parametrize("policy", ["least_request", "maglev"])
def test_a_replica_answering_500_fast_gets_only_its_tries_before_ejection(
        policy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replica 1 answers 500 at once to every generation while its /health passes, under load (day-2 scaled
    times). LEAST_REQUEST: it holds fewer requests than its peers, since it fails fast; Maglev with bounded load and
    keyed sessions: it keeps its share of the keys. Either way at least 99.9% of requests are served, and it
    receives only the tries before its ejection (consecutive5xx, plus those already on their way) or before its
    failed progress checks take it out, whichever is first."""
    raw = day2.raw_stack()
    if policy == "least_request":
        raw["models"][day2.MODEL]["sessionAffinity"] = {"enabled": False}
    monkeypatch.setattr(day2, "raw_stack", lambda engine="vllm": raw)
    with ExitStack() as stack:
        s = day2.Scenario(stack, tmp_path, day2.REPLICAS)
        if policy == "maglev":
            s.issuer = _Sessions(s.issuer, 60)  # type: ignore[assignment]
        day2.replica_500(s)
        run = s.run
    failing = run.replicas[f"{day2.MODEL}-1"]
    received = failing.received_after(run.moments["fail"])
    print(f"{policy}: success {run.success():.4f} of {len(run.calls)}, failing replica received {received}")
    assert run.success() >= MIN_SUCCESS, (policy, run.success())
    # taken out by its consecutive 5xx (ejected), or first by its failed progress checks (the stand-in's engine
    # fails the check's generation too): whichever comes first on a busy machine
    ejected = run.stats[f"cluster.{day2.MODEL}.outlier_detection.ejections_enforced_consecutive_5xx"]
    checks_failed = run.stats[f"cluster.{day2.MODEL}.health_check.failure"]
    assert ejected == 1 or (ejected == 0 and checks_failed >= 2), (policy, ejected, checks_failed)
    # the tries it got are those before its ejection (consecutive5xx, and the few already on their way while the
    # ejection reached the worker: more on a busy machine), all within the first moments; then none
    assert failing.received_after(run.moments["fail"] + EJECTED_WITHIN_S) == 0, (policy, received)


def test_the_budget_meter_sees_the_clients_500_and_charges_nothing(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The gateway's filter that answers 500 is last before the router: the token budget filters before it (their
    response side runs after it) see the client's status, as the access log does. A poison request of a tenant with
    a budget (the kit's budget service in process, a real Redis): admitted with a reservation, answered 500
    (failed-on-two-replicas), and the meter reads status 500 and settles the reservation to nothing used
    (components/k8s/gateway/budgets/usage.py: a non-2xx answer uses no tokens)."""
    raw = _stack()
    del raw["models"]["mm"]
    raw["tenants"]["alpha"]["tokenBudget"] = {"perMinute": 100_000}
    raw["gateway"]["budgetService"] = {"image": "registry.example/aifactory-budgets:test"}
    cfg = parse(raw, stack="failures")
    issuer = Issuer(ISSUER)
    now = 1_800_000_030.0  # the service's clock: mid-minute, the request's window is known
    seen: list[int] = []
    metered = ResponseMeter.headers

    def headers(meter: ResponseMeter, status: int, content_type: str, end: bool = False) -> None:
        seen.append(status)
        metered(meter, status, content_type, end)

    monkeypatch.setattr(ResponseMeter, "headers", headers)
    with ExitStack() as stack:
        (tmp_path / "redis").mkdir()
        redis = stack.enter_context(RedisServer(tmp_path / "redis"))
        replicas = [stack.enter_context(PoisonedReplica("vllm")) for _ in range(REPLICAS)]
        port = free_port()
        envoy = start_gateway(stack, cfg, tmp_path, jwks=[issuer.jwks],
                              endpoints={day2.MODEL: [r.address for r in replicas],
                                         BUDGETS_CLUSTER: [("127.0.0.1", port)]})
        service = stack.enter_context(BudgetService(BudgetConfig.load_text(service_config(cfg)), redis.url,
                                                    clock=lambda: now, port=port))  # after Envoy's fork
        status, headers_, _ = _ask(envoy, issuer, day2.MODEL, POISON)
        assert (status, headers_.get(FAULT_HEADER)) == (500, "failed-on-two-replicas")
        key = window_key("tenant", "alpha", "perMinute", now)
        deadline = time.monotonic() + 10
        while True:
            service.drain()
            spent = int(redis.client().get(key) or 0)
            if (seen and spent == 0) or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        [line] = _logged_lines(envoy, "failed-on-two-replicas", 1)
    assert (seen, spent) == ([500], 0)
    assert (line["status"], line["budget_reserved"] is not None) == (500, True)


def _logged_lines(envoy: EnvoyProcess, fault: str, n: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 5
    while len(lines := envoy.access_log_lines(f'"fault":"{fault}"')) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    return [json.loads(x) for x in lines[-n:]]
