"""The budget service while its store is down, against a real Redis (Debian's redis-server on 127.0.0.1, frozen with
SIGSTOP: a store that accepts connections and never answers, the case that costs each request the store timeout).

The service's store breaker (components/k8s/gateway/budgets/breaker.py) opens after consecutive failed calls: the
requests after it get their budget's onStoreFailure answer without the store being asked (fail-open: admitted
unreserved; fail-closed: 503), and once the store answers a probe, reservations resume. Settlements not written yet
are bounded: past the cap the oldest is dropped, and every settlement never written is counted
(aifactory_token_budget_settlements_failed_total{reason}). Requests go in as Envoy's ext_proc sends admission's one
message (envoy.service.ext_proc.v3 ProcessingRequest: the buffered body with the request attributes,
envoyproxy/envoy@v1.40.0 api/envoy/service/ext_proc/v3/external_processor.proto)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import prometheus_client as prom
import pytest
import redis
import redis.asyncio as aredis
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from google.protobuf import struct_pb2

import components.k8s.gateway.budgets.service as service
from components.k8s.gateway.budget_objects import STORE_MAXMEMORY_MIB, store_config
from components.k8s.gateway.budgets.breaker import Breaker
from components.k8s.gateway.budgets.names import METADATA_NAMESPACE, PATH_ATTRIBUTE, ROUTE_ATTRIBUTE, TENANT_ATTRIBUTE
from components.k8s.gateway.budgets.service import STORE_ERRORS, BudgetConfig, Processor
from components.k8s.gateway.budgets.store import KEY_PREFIX, Charge, Reservation, Store, record_key, window_key
from components.k8s.gateway.budgets.usage import Policy
from telemetry.names import BUDGET
from tests.artifacts.test_budget_store import server as server  # noqa: F401 (the module fixture)
from tests.support.redis_server import RedisServer

NOW = 1_800_000_030.5
TIMEOUT_S = 0.5  # the service's store timeout, as in the cluster (a loaded test machine answers well within it)
LIMITS = {"perMinute": 100_000}
CONFIG = BudgetConfig(tenants={"open": Policy(LIMITS), "closed": Policy(LIMITS, on_store_failure="closed")},
                      workloads={}, models={}, store_timeout_seconds=TIMEOUT_S)
BODY = json.dumps({"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}).encode()
RESERVATION = len(BODY) + 10  # one byte per prompt token, output weight 1
DEMO = Charge("tenant", "demo", {"perMinute": 100_000}, 600)
BOUND_S = 5.0


@pytest.fixture
def store(server: RedisServer) -> RedisServer:
    server.resume()
    server.client().flushall()
    return server


def _request(tenant: str) -> pb.ProcessingRequest:
    attrs = struct_pb2.Struct()
    attrs.update({ROUTE_ATTRIBUTE: "chat", PATH_ATTRIBUTE: "/v1/chat/completions", TENANT_ATTRIBUTE: tenant})
    return pb.ProcessingRequest(request_body=pb.HttpBody(body=BODY, end_of_stream=True),
                                attributes={"envoy.filters.http.ext_proc": attrs})


async def _admit(p: Processor, tenant: str) -> pb.ProcessingResponse:
    """Admission's one message on its own stream, as Envoy sends it."""
    async def one() -> Any:
        yield _request(tenant)
    return [r async for r in p.Process(one(), None)][0]  # type: ignore[arg-type]


def _meta(r: pb.ProcessingResponse) -> dict[str, Any]:
    fields = r.dynamic_metadata.fields[METADATA_NAMESPACE].struct_value.fields
    return {k: v.string_value or v.number_value or v.bool_value for k, v in fields.items()}


def _id(r: pb.ProcessingResponse) -> str:
    """The reservation's id in admission's answer (a fail-open request's too: its settlement replaces or bars it)."""
    return str(json.loads(_meta(r)["reservation"])["id"])


def _sample(registry: prom.CollectorRegistry, metric: str, **labels: str) -> float:
    return registry.get_sample_value(metric, labels) or 0.0


def _records(server: RedisServer) -> int:
    """Reservations the store holds (each request that reached it left one)."""
    return len(server.client().keys(f"{KEY_PREFIX}:reservation:*"))


def test_a_store_that_stops_answering_is_no_longer_waited_for_and_is_used_again_once_back(store: RedisServer) -> None:
    """Three requests wait the store timeout and open the breaker; the next ones are answered without asking the store
    (counted as skipped, and no reservation of theirs reaches it): fail-open admitted unreserved, fail-closed 503
    naming the breaker. Thawed, the first request after the cool-down probes the store, gets a reservation, and
    closes the breaker."""
    registry = prom.CollectorRegistry()

    async def go() -> str:
        p = Processor(CONFIG, Store(aredis.Redis.from_url(store.url)), registry, clock=lambda: NOW,
                      breaker=Breaker(STORE_ERRORS, failures=3, cooldown_s=0.3))
        assert _meta(await _admit(p, "open"))["reserved"] == RESERVATION  # the script loaded, the store up
        store.pause()
        try:
            for _ in range(3):
                assert _meta(await _admit(p, "open"))["uncounted"] is True
            assert p.breaker.open and _sample(registry, BUDGET.STORE_BREAKER_OPEN) == 1
            assert _sample(registry, BUDGET.STORE_SKIPPED) == 0
            admitted = await _admit(p, "open")
            refused = await _admit(p, "closed")
            assert _sample(registry, BUDGET.STORE_SKIPPED) == 2
        finally:
            store.resume()
        assert _meta(admitted)["uncounted"] is True and _meta(admitted)["reserved"] == 0
        assert refused.immediate_response.status.code == 503
        error = json.loads(refused.immediate_response.body)["error"]
        assert error["type"] == "token_budget_unavailable"
        assert error["message"] == ("the token budget store is not answering (its last 3 calls failed; it is tried "
                                    "again every 0.3 s), and tenants.closed.tokenBudget refuses what it cannot count "
                                    "(onStoreFailure: closed); retry shortly")
        assert _sample(registry, BUDGET.STORE_FAILURES, scope="tenant", name="open", outcome="admitted") == 4
        assert _sample(registry, BUDGET.STORE_FAILURES, scope="tenant", name="closed", outcome="refused") == 1
        # back: requests are answered by the breaker until its cool-down ends, then one probes and reserves
        deadline = time.monotonic() + BOUND_S
        while (reserved := _meta(await _admit(p, "open"))["reserved"]) != RESERVATION:
            assert time.monotonic() < deadline, "reservations did not resume"
            await asyncio.sleep(0.02)
        assert not p.breaker.open and _sample(registry, BUDGET.STORE_BREAKER_OPEN) == 0
        assert reserved == RESERVATION
        await p.drain()
        return _id(admitted)
    skipped = asyncio.run(go())
    # the store holds the first reservation, the probe's, and the first timed-out one's (sent on the open connection,
    # run once the store thawed); the next two opened new connections, whose handshake (redis-py 8.1.0 sends CLIENT
    # SETINFO and reads its answer before the first command: redis/redis-py@v8.1.0:redis/asyncio/connection.py
    # on_connect) never got an answer, so their reservations were never sent; nor was any the breaker answered
    assert store.client().exists(record_key(skipped)) == 0
    assert _records(store) == 3
    assert int(store.client().get(window_key("tenant", "open", "perMinute", NOW))) == 3 * RESERVATION


def _counter(server: RedisServer) -> int:
    return int(server.client().get(window_key("tenant", "demo", "perMinute", NOW)) or 0)


def test_pending_settlements_are_capped_oldest_dropped_and_written_once_the_store_is_back(store: RedisServer) -> None:
    """Five settlements while the store is frozen, at most three pending: the two oldest are dropped and counted; the
    others, once their tries have failed and opened the breaker, wait for it (one probe at a time, not a timeout each)
    and are written once the store answers."""
    registry = prom.CollectorRegistry()

    async def go() -> None:
        s = Store(aredis.Redis.from_url(store.url))
        p = Processor(CONFIG, s, registry, clock=lambda: NOW, pending_settlements=3,
                      breaker=Breaker(STORE_ERRORS, failures=1, cooldown_s=0.2))
        reservations = [await s.reserve([DEMO], NOW, f"pending{i}") for i in range(5)]
        assert all(isinstance(r, Reservation) for r in reservations)
        store.pause()
        try:
            for r in reservations:
                p.background(p.settle(r, {("tenant", "demo"): 250}))  # type: ignore[arg-type]
            assert _sample(registry, BUDGET.SETTLEMENTS_FAILED, reason=BUDGET.SETTLE_DROPPED) == 2
            deadline = time.monotonic() + BOUND_S
            while not p.breaker.open:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
        finally:
            store.resume()
        await p.drain(BOUND_S)
    asyncio.run(go())
    assert _counter(store) == 2 * 600 + 3 * 250  # the dropped two stay reserved until their window ends
    assert _sample(registry, BUDGET.SETTLEMENTS_FAILED, reason=BUDGET.SETTLE_DROPPED) == 2
    assert _sample(registry, BUDGET.SETTLEMENTS_FAILED, reason=BUDGET.SETTLE_RETRIES) == 0


def test_a_settlement_the_store_keeps_refusing_is_counted_after_its_retries(store: RedisServer,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The store answers every try with an error (its counter is not a number: INCRBY fails in the script): after
    SETTLE_ATTEMPTS tries the settlement is given up and counted."""
    monkeypatch.setattr(service, "SETTLE_BACKOFF_S", 0.001)
    registry = prom.CollectorRegistry()

    async def go() -> None:
        s = Store(aredis.Redis.from_url(store.url))
        p = Processor(CONFIG, s, registry, clock=lambda: NOW, breaker=Breaker(STORE_ERRORS, failures=100))
        r = await s.reserve([DEMO], NOW, "refused")
        assert isinstance(r, Reservation)
        store.client().set(r.keys[0], "not a number")
        await p.settle(r, {("tenant", "demo"): 250})
    asyncio.run(go())
    assert _sample(registry, BUDGET.SETTLEMENTS_FAILED, reason=BUDGET.SETTLE_RETRIES) == 1
    assert store.client().exists(f"{KEY_PREFIX}:reservation:refused") == 1  # still reserved: never settled


def test_settlements_still_pending_at_shutdown_are_dropped_after_the_drain_bound(store: RedisServer) -> None:
    """The store holds every client that runs a script (CLIENT PAUSE WRITE, redis.io docs, commands/client-pause; a
    held client that disconnects at the timeout never runs its script): the settlement's try fails, the breaker opens,
    and the drain at shutdown (bounded) drops it, counted; the reservation stays."""
    registry = prom.CollectorRegistry()

    async def go() -> None:
        s = Store(aredis.Redis.from_url(store.url))
        p = Processor(CONFIG, s, registry, clock=lambda: NOW, breaker=Breaker(STORE_ERRORS, failures=1))
        r = await s.reserve([DEMO], NOW, "at-shutdown")
        store.client().execute_command("CLIENT", "PAUSE", 5000, "WRITE")
        try:
            p.background(p.settle(r, {("tenant", "demo"): 250}))  # type: ignore[arg-type]
            await p.drain(2 * TIMEOUT_S)
            assert p.breaker.open
        finally:
            store.client().execute_command("CLIENT", "UNPAUSE")
    asyncio.run(go())
    assert _sample(registry, BUDGET.SETTLEMENTS_FAILED, reason=BUDGET.SETTLE_DROPPED) == 1
    assert _counter(store) == 600


def test_a_stopped_store_opens_the_breaker_and_one_started_again_takes_reservations(store: RedisServer) -> None:
    """The store's process gone (connections refused, each call fails at once) and started again, empty, on the same
    address (a Valkey pod restarted): after three failed calls the breaker answers without trying; after the cool-down
    a probe finds the new store, reserves, and closes the breaker."""
    registry = prom.CollectorRegistry()

    async def go() -> None:
        p = Processor(CONFIG, Store(aredis.Redis.from_url(store.url)), registry, clock=lambda: NOW,
                      breaker=Breaker(STORE_ERRORS, failures=3, cooldown_s=0.3))
        store.stop()
        try:
            for _ in range(4):
                assert _meta(await _admit(p, "open"))["uncounted"] is True
            assert p.breaker.open and _sample(registry, BUDGET.STORE_SKIPPED) == 1
        finally:
            store.start()
        deadline = time.monotonic() + BOUND_S
        while _meta(await _admit(p, "open"))["reserved"] != RESERVATION:
            assert time.monotonic() < deadline, "reservations did not resume"
            await asyncio.sleep(0.02)
        assert not p.breaker.open and _sample(registry, BUDGET.STORE_BREAKER_OPEN) == 0
    asyncio.run(go())
    assert _records(store) == 1  # the probe's: the new store holds nothing else


def test_one_tenants_broken_key_fails_its_requests_alone_and_a_store_out_of_memory_opens_the_breaker(
        store: RedisServer) -> None:
    """An error reply one key earns (WRONGTYPE: the tenant's window counter is a hash) is the store answering: that
    tenant's requests get their onStoreFailure answer, and the breaker stays closed for everyone else however many come
    in a row. An error reply that says the store cannot serve (OOM: maxmemory reached under noeviction) counts toward
    the breaker like a timeout does (service.answered_by_store; redis-py 8.1.0 redis/_parsers/base.py
    EXCEPTION_CLASSES)."""
    registry = prom.CollectorRegistry()
    client = store.client()

    async def go() -> None:
        p = Processor(CONFIG, Store(aredis.Redis.from_url(store.url)), registry, clock=lambda: NOW)
        assert p.breaker.failures == 5
        client.hset(window_key("tenant", "open", "perMinute", NOW), "not", "a counter")
        for _ in range(2 * p.breaker.failures):
            assert _meta(await _admit(p, "open"))["uncounted"] is True
        assert not p.breaker.open and _sample(registry, BUDGET.STORE_BREAKER_OPEN) == 0
        assert _meta(await _admit(p, "closed"))["reserved"] == RESERVATION
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", "1")
        try:
            for _ in range(p.breaker.failures):
                assert (await _admit(p, "closed")).immediate_response.status.code == 503
            assert p.breaker.open and _sample(registry, BUDGET.STORE_BREAKER_OPEN) == 1
        finally:
            client.config_set("maxmemory", "0")

    asyncio.run(go())
    assert _sample(registry, BUDGET.STORE_FAILURES, scope="tenant", name="open", outcome="admitted") == 10
    assert _sample(registry, BUDGET.STORE_FAILURES, scope="tenant", name="closed", outcome="refused") == 5


@pytest.mark.parametrize(("reply", "answered"), [
    ("WRONGTYPE Operation against a key holding the wrong kind of value", True),
    ("ERR value is not an integer or out of range", True),
    ("OOM command not allowed when used memory > 'maxmemory'.", False),
    ("READONLY You can't write against a read only replica.", False),
    ("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", False),
    ("NOPERM this user has no permissions to run the 'evalsha' command", False),
    ("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT.", False),
    ("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.", False),
])
def test_which_error_replies_are_the_stores_failure(reply: str, answered: bool) -> None:
    """Each reply as redis-py 8.1.0's own parser turns it into an exception (redis/_parsers/base.py `parse_error`):
    only one that a single key or call earns is an answer; the store-wide ones (MISCONF: a failed save stops every
    write, e.g. the store's volume full) count toward the breaker."""
    from redis._parsers.base import BaseParser
    assert service.answered_by_store(BaseParser.parse_error(reply)) is answered


def test_the_store_config_the_chart_is_given_bounds_memory_and_refuses_writes_past_it(tmp_path: Path) -> None:
    """The chart's valkeyConfig (budget_objects.store_config) as a config file of Debian's redis-server: maxmemory
    768 MiB and noeviction in force. Its bound lowered to 1 byte, a reservation gets the OOM reply (counted by the
    service's store breaker as the store's failure, the test above) and the keys already there stay."""
    with RedisServer(tmp_path, store_config()) as s:
        c = s.client()
        assert c.config_get("maxmemory") == {"maxmemory": str(STORE_MAXMEMORY_MIB * 2**20)}
        assert c.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        first = asyncio.run(Store(aredis.Redis.from_url(s.url)).reserve([DEMO], NOW, "r1"))
        assert isinstance(first, Reservation)
        c.config_set("maxmemory", "1")

        async def past_the_bound() -> None:
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                await Store(aredis.Redis.from_url(s.url)).reserve([DEMO], NOW, "r2")
        asyncio.run(past_the_bound())
        assert int(c.get(window_key("tenant", "demo", "perMinute", NOW))) == 600
        assert c.exists(record_key("r1")) == 1
