"""The sweep of reservations nobody settles (their metering stream lost with a service pod killed hard), against a real
Redis (Debian's redis-server on 127.0.0.1): reserve records each reservation's deadline, settle removes it, and the
sweep script releases those past it, atomically (a script runs alone on the server: redis/redis@7.0.15
src/script_lua.c), so sweepers racing release each once; a settlement after the sweep counts what was used, once
(docs/gateway.md, "Token budgets", "A service pod lost hard")."""

from __future__ import annotations

import asyncio
import json

import prometheus_client as prom
import pytest
import redis
import redis.asyncio as aredis

from components.k8s.gateway.budgets.breaker import Breaker
from components.k8s.gateway.budgets.service import STORE_ERRORS, BudgetConfig, Processor
from components.k8s.gateway.budgets.store import (
    DEADLINES_KEY,
    Charge,
    Reservation,
    Store,
    Swept,
    record_key,
    window_key,
)
from components.k8s.gateway.budgets.usage import Policy
from telemetry.names import BUDGET
from tests.artifacts.test_budget_store import server as server  # noqa: F401 (the module fixture)
from tests.artifacts.test_budget_store_outage import RESERVATION, _admit, _id
from tests.support.redis_server import RedisServer

NOW = 1_800_000_030.5  # 30.5 s into a minute, an hour and a day's 8th hour
DEADLINE = NOW + 76  # a 60 s route and the 16 s margin
TENANT = Charge("tenant", "demo", {"perMinute": 1_000_000, "perDay": 1_000_000}, 600)
WORKLOAD = Charge("workload", "chat", {"perHour": 1_000_000}, 600)
MINUTE, DAY = window_key("tenant", "demo", "perMinute", NOW), window_key("tenant", "demo", "perDay", NOW)
HOUR = window_key("workload", "chat", "perHour", NOW)
USED = {("tenant", "demo"): 250, ("workload", "chat"): 250}


@pytest.fixture
def store(server: RedisServer) -> RedisServer:
    server.resume()
    server.client().flushall()
    return server


def _store(s: RedisServer) -> Store:
    return Store(aredis.Redis.from_url(s.url))


def _counters(s: RedisServer) -> tuple[int, ...]:
    c = s.client()
    return tuple(int(c.get(k) or 0) for k in (MINUTE, DAY, HOUR))


async def _reserve(st: Store, rid: str, deadline: float = DEADLINE) -> Reservation:
    r = await st.reserve([TENANT, WORKLOAD], NOW, rid, deadline=deadline)
    assert isinstance(r, Reservation)
    return r


def test_reserve_records_the_deadline_and_settle_removes_it(store: RedisServer) -> None:
    async def go() -> None:
        st = _store(store)
        r = await _reserve(st, "r1")
        assert store.client().zrange(DEADLINES_KEY, 0, -1, withscores=True) == [(b"r1", DEADLINE)]
        assert await st.settle(r, USED, NOW) == 1
    asyncio.run(go())
    assert not store.client().exists(DEADLINES_KEY)
    assert _counters(store) == (250, 250, 250)


def test_the_sweep_gives_back_what_an_expired_reservation_took_and_leaves_the_rest(store: RedisServer) -> None:
    """Two reservations past their deadline (one whose day counter is gone) and one before it; other spend beside
    them: the sweep gives back exactly what each expired one took of every counter that still exists, makes its record
    a `swept` tombstone with the record's remaining TTL, and leaves the running one and the other spend alone."""
    c = store.client()

    async def go() -> tuple[Swept, Swept]:
        st = _store(store)
        await _reserve(st, "lost-a", NOW + 5)
        await _reserve(st, "lost-b", NOW + 6)
        await _reserve(st, "running", NOW + 100)
        c.incrby(MINUTE, 1000)  # settled spend of other requests
        c.incrby(HOUR, 1000)
        ttl = c.pttl(record_key("lost-a"))
        first = await st.sweep(NOW + 10, 100)
        assert 0 < c.pttl(record_key("lost-a")) <= ttl
        return first, await st.sweep(NOW + 10, 100)
    assert _counters(store) == (0, 0, 0)
    first, second = asyncio.run(go())
    assert first == Swept(2, ({MINUTE: 600, DAY: 600, HOUR: 600}, {MINUTE: 600, DAY: 600, HOUR: 600}))
    assert second == Swept(0, ())
    assert _counters(store) == (1000 + 600, 600, 1000 + 600)
    assert c.hgetall(record_key("lost-a")) == c.hgetall(record_key("lost-b")) == {b"swept": b"1"}
    assert c.zrange(DEADLINES_KEY, 0, -1) == [b"running"]


def test_a_counter_whose_window_ended_is_not_recreated_by_the_sweep(store: RedisServer) -> None:
    async def go() -> Swept:
        st = _store(store)
        await _reserve(st, "lost", NOW + 5)
        store.client().delete(MINUTE)  # what expiry does one window after the minute's end
        return await st.sweep(NOW + 10, 100)
    assert asyncio.run(go()) == Swept(1, ({MINUTE: 0, DAY: 600, HOUR: 600},))
    assert not store.client().exists(MINUTE)
    assert _counters(store) == (0, 0, 0)


def test_racing_sweepers_release_every_reservation_once(store: RedisServer) -> None:
    """300 expired reservations, 8 sweepers with a connection each, small batches, all at once: every reservation is
    released by exactly one of them, and the counters are back at exactly the other requests' spend."""
    c = store.client()
    for k in (MINUTE, DAY, HOUR):
        c.set(k, 777)

    async def go() -> list[list[Swept]]:
        st = _store(store)
        for i in range(300):
            await _reserve(st, f"lost{i}", NOW + 1 + i % 7)
        assert _counters(store) == (777 + 300 * 600, 777 + 300 * 600, 777 + 300 * 600)
        sweepers = [_store(store) for _ in range(8)]
        for s in sweepers:  # connected first, so the sweeps arrive together
            await s.redis.ping()  # type: ignore[attr-defined]

        async def until_empty(s: Store) -> list[Swept]:
            out = []
            while (batch := await s.sweep(NOW + 10, 7)).due:
                out.append(batch)
            return out
        return list(await asyncio.gather(*(until_empty(s) for s in sweepers)))
    turns = asyncio.run(go())
    assert sum(len(b.released) for t in turns for b in t) == 300
    assert sum(1 for t in turns if t) > 1  # they did race
    assert _counters(store) == (777, 777, 777)
    assert not c.exists(DEADLINES_KEY)


def test_a_settlement_after_the_sweep_counts_what_was_used_once(store: RedisServer) -> None:
    """The request was running after all (or its settlement waited out a store outage): its settlement finds the
    swept tombstone and adds what was used (its reservation was given back already), once; the same id reserving
    again takes nothing."""
    async def go() -> list[int]:
        st = _store(store)
        r = await _reserve(st, "late", NOW + 5)
        await st.sweep(NOW + 10, 100)
        assert _counters(store) == (0, 0, 0)
        out = [await st.settle(r, USED, NOW + 11) for _ in range(2)]
        assert isinstance(await st.reserve([TENANT, WORKLOAD], NOW, "late", deadline=NOW + 100), Reservation)
        return out
    assert asyncio.run(go()) == [2, 0]
    assert _counters(store) == (250, 250, 250)
    assert store.client().hgetall(record_key("late")) == {b"settled": b"1"}
    assert not store.client().exists(DEADLINES_KEY)


@pytest.mark.parametrize("unreserved", [False, True])
def test_a_reservation_settled_before_its_deadline_is_not_swept(store: RedisServer, unreserved: bool) -> None:
    """Settled (or, admitted unreserved, replaced by its usage): the sweep past the deadline finds nothing to
    give back."""
    async def go() -> Swept:
        st = _store(store)
        r = await _reserve(st, "done", NOW + 5)
        settled = Store.unreserved([TENANT, WORKLOAD], NOW, "done") if unreserved else r
        assert await st.settle(settled, USED, NOW + 1) == 1
        return await st.sweep(NOW + 10, 100)
    assert asyncio.run(go()) == Swept(0, ())
    assert _counters(store) == (250, 250, 250)


CONFIG = BudgetConfig(tenants={"open": Policy({"perMinute": 100_000})}, workloads={}, models={},
                      store_timeout_seconds=0.5, request_seconds={"chat": 30.0, "batch": 600.0},
                      sweep_margin_seconds=16.0, sweep_interval_seconds=0.05)


def _sample(registry: prom.CollectorRegistry, metric: str, **labels: str) -> float | None:
    return registry.get_sample_value(metric, labels)


def test_the_service_sweeps_what_its_admissions_reserved_past_their_deadline_and_counts_it(store: RedisServer) -> None:
    """Admission (route `chat`, 30 s) reserves with the deadline now + 30 + 16; its meter stream never comes. The
    service's sweep before the deadline releases nothing; after it, the reservation, counted per tenant and window
    (both series exported from 0)."""
    registry = prom.CollectorRegistry()
    now = [NOW]

    async def go() -> tuple[str, list[int]]:
        p = Processor(CONFIG, _store(store), registry, clock=lambda: now[0])
        rid = _id(await _admit(p, "open"))
        assert store.client().zscore(DEADLINES_KEY, rid) == NOW + 46
        now[0] = NOW + 45.9
        before = await p.sweep()
        now[0] = NOW + 46.1
        return rid, [before, await p.sweep(), await p.sweep()]
    assert _sample(registry, BUDGET.SWEPT, scope="tenant", name="open") is None  # (no Processor yet)
    rid, released = asyncio.run(go())
    assert released == [0, 1, 0]
    assert _sample(registry, BUDGET.SWEPT, scope="tenant", name="open") == 1
    assert _sample(registry, BUDGET.SWEPT_TOKENS, scope="tenant", name="open", window="perMinute") == RESERVATION
    assert int(store.client().get(window_key("tenant", "open", "perMinute", NOW))) == 0
    assert store.client().hgetall(record_key(rid)) == {b"swept": b"1"}


def test_a_workload_without_a_known_route_gets_the_longest_request_of_all() -> None:
    assert CONFIG.lifetime("chat") == 46.0
    assert CONFIG.lifetime("unknown") == 616.0
    text = json.dumps({"tenants": {}, "workloads": {}, "models": {}, "storeTimeoutSeconds": 0.5,
                       "requestSeconds": {"chat": 30}, "sweepMarginSeconds": 16, "sweepIntervalSeconds": 10})
    assert BudgetConfig.load_text(text).lifetime("chat") == 46.0


def test_a_sweep_turn_is_bounded_and_goes_through_the_stores_breaker(store: RedisServer) -> None:
    """2,500 expired reservations: one turn releases SWEEP_BATCHES x SWEEP_BATCH (1,000), the next turn the next
    1,000. The store stopped: a turn fails once (counted by the breaker like any store call) and ends; with the
    breaker open, a turn does not ask the store."""
    c = store.client()
    pipe = c.pipeline()
    for i in range(2500):
        pipe.zadd(DEADLINES_KEY, {f"gone{i}": NOW})  # settled by a service that did not remove them: nothing to give
    pipe.execute()

    async def go() -> tuple[list[int], int, int]:
        p = Processor(CONFIG, _store(store), prom.CollectorRegistry(), clock=lambda: NOW + 1,
                      breaker=Breaker(STORE_ERRORS, failures=2, cooldown_s=60))
        released = [await p.sweep() for _ in range(2)]
        left = c.zcard(DEADLINES_KEY)
        store.stop()
        try:
            await p.sweep()
            failed_once = p.breaker.consecutive
            await p.sweep()  # the second failure opens it
            assert p.breaker.open
            calls = []
            p.store.sweep = lambda *a: calls.append(a)  # type: ignore[method-assign,assignment]
            await p.sweep()
            assert calls == []
        finally:
            store.start()
        return released, left, failed_once
    released, left, failed_once = asyncio.run(go())
    assert released == [0, 0] and left == 500
    assert failed_once == 1


def test_the_sweep_runs_in_turns_and_stops_with_the_service(store: RedisServer) -> None:
    """start_sweeping: turns every sweep_interval_seconds (jittered), releasing what expires meanwhile, until
    stop_sweeping (shutdown)."""
    async def go() -> tuple[int, int]:
        p = Processor(CONFIG, _store(store), prom.CollectorRegistry(), clock=lambda: NOW + 100)
        p.start_sweeping()
        await _reserve(p.store, "lost", NOW + 5)
        for _ in range(100):  # bounded: 100 x 0.05 s
            if store.client().hgetall(record_key("lost")) == {b"swept": b"1"}:
                break
            await asyncio.sleep(0.05)
        released = _counters(store)[0]
        await p.stop_sweeping()
        await _reserve(p.store, "after", NOW + 5)
        await asyncio.sleep(0.2)  # four intervals: a sweeper still running would release it
        return released, _counters(store)[0]
    assert asyncio.run(go()) == (0, 600)
    assert not redis.Redis.from_url(store.url).hgetall(record_key("after")).get(b"swept")
