"""The token budget store against a real Redis (Debian's redis-server on 127.0.0.1): reservations are atomic across
clients (the reserve script runs alone on the server: redis/redis@7.0.15 src/script_lua.c), refuse without
incrementing anything, settle gives back the difference, and a window's counter expires one window after its end."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis.asyncio as aredis

from components.k8s.gateway.budgets.store import Charge, Refusal, Reservation, Store, retry_after_seconds, window_key
from tests.support.redis_server import RedisServer

NOW = 1_800_000_030.5  # 30.5 s into a minute and an hour (1_800_000_000 is 500,000 hours since the epoch)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("redis")) as s:
        yield s


@pytest.fixture
def url(server: RedisServer) -> str:
    server.client().flushall()
    return server.url


def _run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


async def _store(url: str) -> Store:
    return Store(aredis.Redis.from_url(url))


def test_a_reservation_increments_every_window_of_every_budget_with_an_expiry(url: str, server: RedisServer) -> None:
    async def go() -> Reservation | Refusal:
        store = await _store(url)
        return await store.reserve([Charge("tenant", "demo", {"perMinute": 1000, "perDay": 10_000}, 300),
                                    Charge("workload", "chat", {"perHour": 500}, 400)], NOW)
    res = _run(go())
    assert isinstance(res, Reservation)
    c = server.client()
    keys = [window_key("tenant", "demo", "perMinute", NOW), window_key("tenant", "demo", "perDay", NOW),
            window_key("workload", "chat", "perHour", NOW)]
    assert keys == ["aifactory:budget:tenant:demo:perMinute:1800000000",
                    "aifactory:budget:tenant:demo:perDay:1799971200",
                    "aifactory:budget:workload:chat:perHour:1800000000"]
    assert [int(c.get(k)) for k in keys] == [300, 300, 400]
    # one window past the window's end: the minute ends in 29.5 s, then 60 more
    assert 88 <= c.ttl(keys[0]) <= 90


def test_a_reservation_that_does_not_fit_one_window_increments_nothing(url: str, server: RedisServer) -> None:
    async def go() -> list[Reservation | Refusal]:
        store = await _store(url)
        first = await store.reserve([Charge("tenant", "demo", {"perMinute": 1000, "perHour": 5000}, 600)], NOW)
        second = await store.reserve([Charge("tenant", "demo", {"perMinute": 1000, "perHour": 5000}, 600)], NOW)
        return [first, second]
    first, second = _run(go())
    assert isinstance(first, Reservation)
    assert second == Refusal("tenant", "demo", "perMinute", 1000, 600, 30)
    c = server.client()
    assert int(c.get(window_key("tenant", "demo", "perHour", NOW))) == 600  # the hour took nothing either


def test_retry_after_is_the_time_to_the_end_of_the_window() -> None:
    assert retry_after_seconds("perMinute", NOW) == 30
    assert retry_after_seconds("perHour", NOW) == 3570
    assert retry_after_seconds("perDay", NOW) == 86400 - (1_800_000_030 - 1_799_971_200)


def test_settle_gives_back_what_was_not_used_and_charges_what_was(url: str, server: RedisServer) -> None:
    async def go() -> None:
        store = await _store(url)
        a = await store.reserve([Charge("tenant", "demo", {"perMinute": 1000}, 600)], NOW)
        b = await store.reserve([Charge("tenant", "demo", {"perMinute": 1000}, 300)], NOW)
        assert isinstance(a, Reservation) and isinstance(b, Reservation)
        await store.settle(a, {("tenant", "demo"): 250}, NOW)
        await store.settle(b, {("tenant", "demo"): 320}, NOW)  # used more than reserved (an estimate ran short)
    _run(go())
    assert int(server.client().get(window_key("tenant", "demo", "perMinute", NOW))) == 570


def test_settle_after_the_window_expired_creates_no_counter(url: str, server: RedisServer) -> None:
    async def go() -> None:
        store = await _store(url)
        a = await store.reserve([Charge("tenant", "demo", {"perMinute": 1000}, 600)], NOW)
        assert isinstance(a, Reservation)
        server.client().delete(*a.keys)  # what expiry does one window after the window's end
        await store.settle(a, {("tenant", "demo"): 10}, NOW)
        await store.settle(a, {("tenant", "demo"): 700}, NOW + 120)  # more than reserved, the window long over
    _run(go())
    assert server.client().keys("aifactory:*") == []


def test_a_request_admitted_unreserved_settles_what_it_used_into_its_windows(url: str, server: RedisServer) -> None:
    """The store did not answer in time and the budget fails open: the request went on unreserved, and its response
    still adds what it used, to the counter that holds the window's spend, or to a new one with the window's expiry
    when there is none yet (the store was down at the window's start)."""
    minute, hour = window_key("tenant", "demo", "perMinute", NOW), window_key("tenant", "demo", "perHour", NOW)
    server.client().set(hour, 500)

    async def go() -> Reservation:
        store = await _store(url)
        r = Store.unreserved([Charge("tenant", "demo", {"perMinute": 1000, "perHour": 5000}, 600)], NOW)
        await store.settle(r, {("tenant", "demo"): 250}, NOW + 1)
        return r
    r = _run(go())
    assert (r.keys, r.amounts) == ((minute, hour), (0, 0))
    c = server.client()
    assert (int(c.get(minute)), int(c.get(hour))) == (250, 750)
    assert 87 <= c.ttl(minute) <= 89  # one window past the minute's end, as a reservation's counter


def test_racing_reservations_for_the_last_reservations_worth_admit_exactly_one(url: str, server: RedisServer) -> None:
    """64 clients, each with its own connection, reserve 100 at once where 100 of 1000 are left: one gets it."""
    server.client().set(window_key("tenant", "demo", "perMinute", NOW), 900)

    async def go() -> list[Reservation | Refusal]:
        stores = [await _store(url) for _ in range(64)]
        for s in stores:  # connect first, so the reservations arrive together
            await s.redis.ping()  # type: ignore[attr-defined]
        return await asyncio.gather(*(s.reserve([Charge("tenant", "demo", {"perMinute": 1000}, 100)], NOW)
                                      for s in stores))
    results = _run(go())
    assert sum(isinstance(r, Reservation) for r in results) == 1
    assert int(server.client().get(window_key("tenant", "demo", "perMinute", NOW))) == 1000
