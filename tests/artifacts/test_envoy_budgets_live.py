"""Token budgets through the real Envoy 1.40 (its ext_proc filter), the kit's budget service and a real Redis
(Debian's redis-server), with a stand-in engine that reports usage as vLLM does: a request reserves its worst case
and settles its usage; one that does not fit gets 429 with Retry-After and a JSON error naming the budget and window;
a cut stream settles what was generated; a store that does not answer never hangs a request (fail-open admits it,
fail-closed answers 503); requests racing for the last reservation's worth let exactly one through.

Envoy facts (envoyproxy/envoy@v1.40.0 api/envoy/extensions/filters/http/ext_proc/v3/ext_proc.proto,
processing_mode.proto; api/envoy/service/ext_proc/v3/external_processor.proto): one gRPC stream per HTTP request and
filter; with the request headers skipped, BUFFERED sends the whole request body in one message, with the
request_attributes (route name, path, and the tenant header through a CEL expression); an ImmediateResponse is the
client's answer; the metering filter's observability_mode sends the response's headers and chunks without waiting,
with the reservation admission wrote into the request's dynamic metadata (metadata_options.forwarding_namespaces).
"""

from __future__ import annotations

import http.client
import json
import math
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pytest

from components.k8s.gateway.budgets.service import BudgetConfig
from components.k8s.gateway.budgets.store import window_key
from components.k8s.gateway.budgets.usage import ResponseMeter
from components.k8s.gateway.envoy.budgets import BUDGETS_CLUSTER, service_config
from dashboards.budgets import ext_proc_metric
from infra.config import parse
from telemetry.names import BUDGET
from tests.support.budget_service import BudgetService
from tests.support.envoy import start_gateway
from tests.support.fake_backends import EnvoyProcess, free_port
from tests.support.redis_server import RedisServer
from tests.support.tokens import DEFAULT_AUDIENCE, Issuer
from tests.support.usage_engine import UsageEngine

IDP = "https://idp.budgets.test"
NOW = 1_800_000_030.0  # the service's clock: 30 s into a minute, so every request of a test is in one window
LIMIT = 100_000
RAW = {
    "target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "fast"},
    "nodePools": {"gpu": {"instanceType": "dgx-h100"}},
    "tenants": {
        "open": {"gpuQuota": 2, "shareWith": ["closed", "free"],
                 "tokenBudget": {"perMinute": LIMIT, "outputWeight": 4, "defaultMaxTokens": 50}},
        "closed": {"gpuQuota": 0, "tokenBudget": {"perMinute": LIMIT, "onStoreFailure": "closed"}},
        "free": {"gpuQuota": 0}},
    "models": {m: {"engine": "vllm", "model": "org/model", "toolCallParser": "none", "pool": "gpu", "tenant": "open"}
               for m in ("chat", "solo")},  # chat has a workload budget, solo none
    "gateway": {"auth": {"issuers": [{"issuer": IDP, "jwksUri": f"{IDP}/certs", "audiences": [DEFAULT_AUDIENCE]}]},
                "budgetService": {"image": "registry.example/aifactory-budgets:test"},
                "routing": {"chat": {"tokenBudget": {"perHour": 10 * LIMIT}}}},  # every caller of chat, weight 1
    "observability": {"prices": {"dgx-h100": 30.0}},
}
KEY = window_key("tenant", "open", "perMinute", NOW)
SETTLE_BOUND_S = 10.0


@dataclass
class Live:
    envoy: EnvoyProcess
    engine: UsageEngine
    redis: RedisServer
    service: BudgetService
    issuer: Issuer
    gone: EnvoyProcess | None = None  # a gateway whose budget service's address refuses connections
    capped: EnvoyProcess | None = None  # a gateway whose breakers on the service's cluster allow CAPPED streams

    def post(self, tenant: str, body: dict[str, Any], *, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
        c = http.client.HTTPConnection("127.0.0.1", self.envoy.listener_port, timeout=timeout)
        try:
            c.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                      headers={**self.issuer.bearer(tenant), "content-type": "application/json"})
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def spent(self, key: str = KEY) -> int:
        self.service.drain()
        return int(self.redis.client().get(key) or 0)

    def settles_to(self, expected: int, key: str = KEY) -> int:
        """The counter once it reads `expected` (a cut stream is settled when Envoy closes its metering stream,
        which observability mode defers past the request's end), or what it reads after SETTLE_BOUND_S."""
        deadline = time.monotonic() + SETTLE_BOUND_S
        while (spent := self.spent(key)) != expected and time.monotonic() < deadline:
            time.sleep(0.02)
        return spent

    def reset(self) -> None:
        self.redis.client().flushall()
        self.engine.cut_after = None
        self.engine.resets_before_headers = 0
        self.engine.chunk_delay = 0.0
        self.engine.headers_delay = 0.0
        with self.engine.lock:
            self.engine.bodies.clear()


CAPPED = 1


def _capped(config: dict[str, Any]) -> None:
    """The service's cluster with breakers of CAPPED streams (Envoy's 1,024 default, scaled down to a test's load)."""
    [cluster] = [c for c in config["static_resources"]["clusters"] if c["name"] == BUDGETS_CLUSTER]
    cluster["circuit_breakers"] = {"thresholds": [{"priority": "DEFAULT", "max_connections": CAPPED,
                                                   "max_pending_requests": CAPPED, "max_requests": CAPPED}]}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    cfg = parse(RAW, stack="budgets")
    issuer = Issuer(IDP)
    with ExitStack() as stack:
        redis = stack.enter_context(RedisServer(tmp_path_factory.mktemp("redis")))
        engine = stack.enter_context(UsageEngine(prompt_tokens=20, completion_tokens=10))
        port = free_port()
        # both gateways before the service: no fork while its gRPC threads run (tests.support.budget_service)
        envoy, gone, capped = (start_gateway(stack, cfg, tmp_path_factory.mktemp("envoy"), jwks=[issuer.jwks],
                                             endpoints={"chat": [engine.address], "solo": [engine.address],
                                                        BUDGETS_CLUSTER: [("127.0.0.1", p)]}, adjust=adjust)
                               for p, adjust in ((port, None), (free_port(), None), (port, _capped)))
        service = stack.enter_context(BudgetService(BudgetConfig.load_text(service_config(cfg)), redis.url,
                                                    clock=lambda: NOW, port=port))
        yield Live(envoy, engine, redis, service, issuer, gone, capped)


@pytest.fixture
def gw(live: Live) -> Live:
    live.reset()
    return live


def _body(**extra: Any) -> dict[str, Any]:
    return {"model": "chat", "messages": [{"role": "user", "content": "hello"}], **extra}


def _sent(body: dict[str, Any]) -> int:
    """The bytes of the body as Live.post sends it: the prompt's estimate (one token per byte; the body the service
    forwards, compact JSON, is never longer)."""
    return len(json.dumps(body))


def _reservation(body: dict[str, Any], max_tokens: int, weight: float) -> int:
    """What the service reserves: the body's bytes as prompt tokens, plus max_tokens x outputWeight."""
    return math.ceil(_sent(body) + weight * max_tokens)


def test_a_request_reserves_then_settles_its_usage(gw: Live) -> None:
    status, _, body = gw.post("open", _body(max_tokens=8))
    assert status == 200, body
    assert json.loads(body)["usage"] == {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28}
    # usage: prompt + outputWeight x completion; the reservation was given back
    assert gw.settles_to(20 + 4 * 8) == 20 + 4 * 8
    # the routed workload's budget too (the route's name reaches the service: attribute xds.route_name)
    assert gw.settles_to(20 + 8, window_key("workload", "chat", "perHour", NOW)) == 20 + 8


def test_a_request_without_max_tokens_gets_the_budgets_default(gw: Live) -> None:
    status, _, _ = gw.post("open", _body())
    assert status == 200
    assert gw.engine.bodies[-1]["max_tokens"] == 50  # defaultMaxTokens: what was reserved bounds what it generates
    assert gw.settles_to(20 + 4 * 10) == 20 + 4 * 10


def test_a_stream_is_asked_for_its_usage_and_settles_it(gw: Live) -> None:
    status, headers, body = gw.post("open", _body(stream=True, max_tokens=30))
    assert status == 200 and headers["content-type"] == "text/event-stream"
    assert gw.engine.bodies[-1]["stream_options"] == {"include_usage": True}
    assert b'"usage"' in body and body.rstrip().endswith(b"data: [DONE]")
    assert gw.settles_to(20 + 4 * 10) == 20 + 4 * 10


def test_a_cut_stream_settles_what_was_generated(gw: Live) -> None:
    gw.engine.cut_after, gw.engine.chunk_delay = 3, 0.05  # headers, 3 chunks 50 ms apart, then a reset
    sent = _body(stream=True, max_tokens=30)
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        gw.post("open", sent)
    # no usage came: the prompt's estimate and the 3 chunks generated, x 4 each; the rest of the reservation is back.
    # The estimate is of the longer body: the one forwarded, with stream_options added
    forwarded = json.dumps({**sent, "stream_options": {"include_usage": True}}, separators=(",", ":"))
    assert len(forwarded) > _sent(sent)
    assert gw.settles_to(len(forwarded) + 4 * 3) == len(forwarded) + 4 * 3
    assert len(gw.engine.bodies) == 1, "a stream cut after its first bytes is not retried"


def test_a_client_gone_before_the_engine_answered_leaves_the_counters_as_if_it_never_came(gw: Live) -> None:
    """The client goes while the engine has not answered (its headers delayed): no response ever started, so nothing
    meters it on the response side. The metering filter also takes the request's headers, which reach it only after
    admission answered (admission's BUFFERED body holds them), with the reservation in the metadata: its stream is
    open from then, and Envoy closes it when the request ends (observability mode: after deferred_close_timeout,
    envoyproxy/envoy@v1.40.0 api/envoy/extensions/filters/http/ext_proc/v3/ext_proc.proto). The service sees the end
    with no response and releases the whole reservation: a request that got no answer used nothing."""
    gw.engine.headers_delay = SETTLE_BOUND_S
    c = http.client.HTTPConnection("127.0.0.1", gw.envoy.listener_port, timeout=5)
    c.request("POST", "/v1/chat/completions", body=json.dumps(_body(stream=True, max_tokens=30)).encode(),
              headers={**gw.issuer.bearer("open"), "content-type": "application/json"})
    deadline = time.monotonic() + SETTLE_BOUND_S
    while not gw.engine.bodies and time.monotonic() < deadline:  # the request reached the engine: it was admitted
        time.sleep(0.01)
    reserved = gw.spent()
    c.close()  # the client goes
    assert reserved > 4 * 30, "admitted with its worst case reserved"
    assert gw.settles_to(0) == 0
    assert gw.settles_to(0, window_key("workload", "chat", "perHour", NOW)) == 0
    assert gw.redis.client().keys("aifactory:budget:reservation:*") == []


def test_a_try_reset_before_its_answer_is_retried_and_only_the_answered_try_is_settled(gw: Live) -> None:
    """A replica takes a request and dies before answering (no response headers; a streaming engine sends its headers
    before generating anything: vLLM 0.33.0's chat route answers a stream with Starlette's StreamingResponse, which
    sends them before it first iterates the generator, encode/starlette responses.py StreamingResponse.
    stream_response). The router retries it (retry_on: reset;
    envoyproxy/envoy@v1.40.0 api/envoy/config/route/v3/route_components.proto RetryPolicy: only while no response
    headers went downstream). The budget filters sit before the router and see one request and one response, the
    answered try's: its one reservation is settled to that try's usage, which is all that was generated."""
    gw.engine.resets_before_headers = 1
    status, _, body = gw.post("open", _body(stream=True, max_tokens=8))
    assert status == 200 and b'"usage"' in body
    assert len(gw.engine.bodies) == 2, "the reset try, then the answered one"
    assert gw.settles_to(20 + 4 * 8) == 20 + 4 * 8


def test_a_slow_service_never_holds_a_streamed_answer(gw: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    """The service stops reading at the response's first chunk (its event loop blocked until released): a
    fail-closed tenant's answer still streams to its end, since Envoy sends the response side in observability mode
    and waits for no answer (envoyproxy/envoy@v1.40.0 api/envoy/extensions/filters/http/ext_proc/v3/ext_proc.proto,
    ExternalProcessor.observability_mode); once the service reads on, the usage is settled."""
    gate = threading.Event()
    read = ResponseMeter.body

    def held(self: ResponseMeter, chunk: bytes, end: bool) -> None:
        gate.wait(SETTLE_BOUND_S)
        read(self, chunk, end)

    monkeypatch.setattr(ResponseMeter, "body", held)
    try:
        status, _, body = gw.post("closed", _body(stream=True, max_tokens=30))
        served_while_held = not gate.is_set()
    finally:
        gate.set()
    assert status == 200 and body.rstrip().endswith(b"data: [DONE]") and b'"usage"' in body
    assert served_while_held
    closed = window_key("tenant", "closed", "perMinute", NOW)
    assert gw.settles_to(20 + 10, closed) == 20 + 10  # usage, outputWeight 1


def test_a_request_that_does_not_fit_gets_429_naming_the_budget_and_window(gw: Live) -> None:
    gw.redis.client().set(KEY, LIMIT - 10)
    hits = len(gw.engine.bodies)
    status, headers, body = gw.post("open", _body(max_tokens=8))
    assert status == 429
    assert headers["retry-after"] == "30"  # the minute ends 30 s after NOW
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert {k: error[k] for k in ("type", "code", "budget", "window", "limit", "reservation",
                                  "retry_after_seconds")} == {
        "type": "token_budget_exceeded", "code": 429, "budget": "tenants.open.tokenBudget", "window": "perMinute",
        "limit": LIMIT, "reservation": _reservation(_body(max_tokens=8), 8, 4), "retry_after_seconds": 30}
    assert len(gw.engine.bodies) == hits, "a refused request never reaches the engine"
    assert gw.spent() == LIMIT - 10, "a refusal reserves nothing"
    line = _last_log(gw.envoy, status=429)
    assert (line["caller_tenant"], line["budget_refused"]) == ("open", "tenant:open:perMinute")


def test_a_tenant_without_a_budget_is_not_counted(gw: Live) -> None:
    status, _, _ = gw.post("free", {**_body(), "model": "solo"})
    assert status == 200
    assert "max_tokens" not in gw.engine.bodies[-1]  # no budget: the body goes on untouched
    gw.service.drain()
    assert gw.redis.client().keys("aifactory:*") == []


def test_a_workloads_budget_counts_every_caller(gw: Live) -> None:
    """Once settled (the metering stream's last message may reach the service after the client has its answer:
    observability mode; the settle script removes the record and the deadline with the counter's move, atomically),
    the workload's window counter is the only key left."""
    status, _, _ = gw.post("free", _body(max_tokens=8))
    assert status == 200
    assert gw.settles_to(20 + 8, window_key("workload", "chat", "perHour", NOW)) == 20 + 8
    gw.service.drain()
    assert gw.redis.client().keys("aifactory:*") == [window_key("workload", "chat", "perHour", NOW).encode()]


def test_racing_requests_for_the_last_reservations_worth_let_exactly_one_through(gw: Live) -> None:
    """The one admitted streams for about 0.4 s, holding its reservation while the others arrive (once it settles,
    what it gives back may admit a later request: that is not a bypass)."""
    gw.engine.chunk_delay = 0.05
    body = _body(max_tokens=8, stream=True)
    forwarded = json.dumps({**body, "stream_options": {"include_usage": True}}, separators=(",", ":"))
    one = math.ceil(len(forwarded) + 4 * 8)
    gw.redis.client().set(KEY, LIMIT - one - one // 2)  # one and a half reservations left: one fits
    start = threading.Barrier(24)

    def call(_: int) -> int:
        start.wait(timeout=10)
        return gw.post("open", body)[0]

    with ThreadPoolExecutor(24) as pool:
        statuses = list(pool.map(call, range(24)))
    assert sorted(statuses) == [200] + [429] * 23
    assert len(gw.engine.bodies) == 1, "zero bypasses"


def test_a_store_that_does_not_answer_admits_fail_open_tenants_and_refuses_fail_closed_ones(gw: Live) -> None:
    gw.redis.pause()
    try:
        started = time.monotonic()
        open_status, _, _ = gw.post("open", _body(), timeout=5)
        # admitted unreserved, still bounded: the budget's defaultMaxTokens, as a reserved request
        forwarded = gw.engine.bodies[-1]
        closed_status, headers, body = gw.post("closed", _body(max_tokens=8), timeout=5)
        elapsed = time.monotonic() - started
    finally:
        gw.redis.resume()
    assert open_status == 200  # unreserved (onStoreFailure: open)
    assert forwarded["max_tokens"] == 50
    assert closed_status == 503
    assert json.loads(body)["error"]["type"] == "token_budget_unavailable"
    assert headers["retry-after"] == "1"
    assert elapsed < 3, "each waited for the store at most its timeout (0.5 s), never the request's own"
    failures = gw.service.registry.get_sample_value("aifactory_token_budget_store_failures_total",
                                                    {"scope": "tenant", "name": "open", "outcome": "admitted"})
    assert failures and failures >= 1
    # each reservation reached the store after the service gave up on it (the store ran it once thawed): the 503's
    # is released in the background, the unreserved request's replaced by what it used (prompt + 4 x 10 generated)
    closed = window_key("tenant", "closed", "perMinute", NOW)
    assert gw.settles_to(0, closed) == 0
    assert gw.settles_to(20 + 4 * 10) == 20 + 4 * 10


def _last_log(envoy: EnvoyProcess, *, status: int) -> dict[str, Any]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lines = [json.loads(x) for x in envoy.access_log.read_text().splitlines() if x.startswith("{")]
        hits = [x for x in lines if x.get("status") == status]
        if hits:
            return hits[-1]
        time.sleep(0.05)
    raise AssertionError(f"no access log line with status {status}")




def test_a_service_that_is_gone_lets_fail_open_tenants_through_and_refuses_fail_closed_ones(live: Live) -> None:
    """A second gateway whose budget service's address refuses connections: Envoy's ext_proc lets the fail-open
    filter's requests on (failure_mode_allow) and answers the fail-closed filter's with 500, at once."""
    assert live.gone is not None
    gone = Live(live.gone, live.engine, live.redis, live.service, live.issuer)
    started = time.monotonic()
    assert gone.post("open", _body(max_tokens=8), timeout=5)[0] == 200
    assert gone.post("closed", _body(max_tokens=8), timeout=5)[0] == 500
    assert time.monotonic() - started < 2, "refused connections fail at once, not at the message timeout"
    # what TokenBudgetServiceUnreachable reads (dashboards/budgets.py): each admission filter's failed streams, under
    # the names Envoy's Prometheus endpoint gives them (the stat prefix per filter, ext_proc.h's stat names)
    with urllib.request.urlopen(f"http://127.0.0.1:{live.gone.admin_port}/stats/prometheus", timeout=5) as r:
        samples = {line.split("{", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in r.read().decode().splitlines()
                   if line.startswith("envoy_http_ext_proc_")}
    for prefix in (BUDGET.ENVOY_ADMISSION, BUDGET.ENVOY_ADMISSION_CLOSED):
        assert samples[ext_proc_metric(prefix, "streams_started")] >= 1
        assert samples[ext_proc_metric(prefix, "streams_failed")] >= 1, prefix
        assert ext_proc_metric(prefix, "message_timeouts") in samples


@pytest.mark.parametrize("capped", [False, True])
def test_requests_held_in_flight_overflow_a_small_cap_on_the_service_cluster_and_not_the_kits(gw: Live,
                                                                                             capped: bool) -> None:
    """Three requests held upstream at once (the engine answers after 1 s) each hold a meter stream for their whole
    response, after a short admission stream (envoy/budgets.py, `budget_streams`). On a cluster capped at one stream
    the others' streams overflow the max_requests breaker: Envoy 1.40 counts them in upstream_rq_active_overflow (not
    upstream_rq_pending_overflow: envoyproxy/envoy@v1.40.0 docs/root/configuration/upstream/cluster_manager/
    cluster_stats.rst; both are what TokenBudgetServiceOverflowing reads) and the fail-open requests go on
    uncounted. The kit's breakers (two streams per request the
    models allow) let all three through admission and metering: each settles its usage."""
    envoy = gw.capped if capped else gw.envoy
    assert envoy is not None
    held = Live(envoy, gw.engine, gw.redis, gw.service, gw.issuer)
    overflow = f"cluster.{BUDGETS_CLUSTER}.upstream_rq_active_overflow"
    before = envoy.stats().get(overflow, 0)
    gw.engine.headers_delay = 1.0
    start = threading.Barrier(3)

    def call(_: int) -> int:
        start.wait(timeout=10)
        return held.post("open", _body(max_tokens=8))[0]

    with ThreadPoolExecutor(3) as pool:
        assert list(pool.map(call, range(3))) == [200] * 3
    overflowed = envoy.stats().get(overflow, 0) - before
    if capped:
        assert overflowed >= 1
        assert gw.settles_to(3 * (20 + 4 * 8)) < 3 * (20 + 4 * 8), "the overflowed requests went uncounted"
    else:
        assert overflowed == 0
        assert gw.settles_to(3 * (20 + 4 * 8)) == 3 * (20 + 4 * 8)
