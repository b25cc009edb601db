"""The token budget store against a real Redis (Debian's redis-server on 127.0.0.1): reservations are atomic across
clients (the reserve script runs alone on the server: redis/redis@7.0.15 src/script_lua.c), refuse without
incrementing anything, settle gives back the difference, and a window's counter expires one window after its end."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import prometheus_client as prom
import pytest
import redis.asyncio as aredis

from components.k8s.gateway.budgets.service import BudgetConfig, Processor
from components.k8s.gateway.budgets.store import (
    Charge,
    Refusal,
    Reservation,
    Store,
    record_key,
    retry_after_seconds,
    window_key,
)
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
                                    Charge("workload", "chat", {"perHour": 500}, 400)], NOW, "r1")
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
    # the reservation's record: what it took of each counter, kept as long as the longest of them (the day's)
    assert c.hgetall(record_key("r1")) == {keys[0].encode(): b"300", keys[1].encode(): b"300", keys[2].encode(): b"400"}
    assert c.ttl(record_key("r1")) == c.ttl(keys[1]) > 86400


def test_a_reservation_that_does_not_fit_one_window_increments_nothing(url: str, server: RedisServer) -> None:
    async def go() -> list[Reservation | Refusal]:
        store = await _store(url)
        charge = Charge("tenant", "demo", {"perMinute": 1000, "perHour": 5000}, 600)
        first = await store.reserve([charge], NOW, "r2")
        second = await store.reserve([charge], NOW, "r3")
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
        a = await store.reserve([Charge("tenant", "demo", {"perMinute": 1000}, 600)], NOW, "r4")
        b = await store.reserve([Charge("tenant", "demo", {"perMinute": 1000}, 300)], NOW, "r5")
        assert isinstance(a, Reservation) and isinstance(b, Reservation)
        await store.settle(a, {("tenant", "demo"): 250}, NOW)
        await store.settle(b, {("tenant", "demo"): 320}, NOW)  # used more than reserved (an estimate ran short)
    _run(go())
    assert int(server.client().get(window_key("tenant", "demo", "perMinute", NOW))) == 570


def test_settle_after_the_window_expired_creates_no_counter(url: str, server: RedisServer) -> None:
    async def go() -> None:
        store = await _store(url)
        a = await store.reserve([Charge("tenant", "demo", {"perMinute": 1000}, 600)], NOW, "r6")
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
        r = Store.unreserved([Charge("tenant", "demo", {"perMinute": 1000, "perHour": 5000}, 600)], NOW, "u1")
        assert await store.settle(r, {("tenant", "demo"): 250}, NOW + 1)
        assert not await store.settle(r, {("tenant", "demo"): 250}, NOW + 1)  # retried: counted once
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
        return await asyncio.gather(*(s.reserve([Charge("tenant", "demo", {"perMinute": 1000}, 100)], NOW, f"race{i}")
                                      for i, s in enumerate(stores)))
    results = _run(go())
    assert sum(isinstance(r, Reservation) for r in results) == 1
    assert int(server.client().get(window_key("tenant", "demo", "perMinute", NOW))) == 1000


DEMO = Charge("tenant", "demo", {"perMinute": 1000, "perHour": 5000}, 600)
MINUTE, HOUR = window_key("tenant", "demo", "perMinute", NOW), window_key("tenant", "demo", "perHour", NOW)


def _counters(server: RedisServer) -> tuple[int, int]:
    c = server.client()
    return int(c.get(MINUTE) or 0), int(c.get(HOUR) or 0)


def test_a_settlement_applied_twice_counts_once(url: str, server: RedisServer) -> None:
    """A settlement whose answer was lost (the service's store timeout) is retried: the second finds no reservation
    under the id (the first deleted its record) and changes nothing."""
    async def go() -> list[bool]:
        store = await _store(url)
        r = await store.reserve([DEMO], NOW, "twice")
        assert isinstance(r, Reservation)
        return [await store.settle(r, {("tenant", "demo"): 250}, NOW) for _ in range(2)]
    assert _run(go()) == [True, False]
    assert _counters(server) == (250, 250)
    assert server.client().exists(record_key("twice")) == 0


def test_a_settlement_of_an_unknown_id_changes_nothing(url: str, server: RedisServer) -> None:
    server.client().set(MINUTE, 300)

    async def go() -> int:
        store = await _store(url)
        r = await store.reserve([DEMO], NOW, "known")
        assert isinstance(r, Reservation)
        return await store.settle(Reservation("unknown", r.keys, r.amounts, r.charges), {("tenant", "demo"): 5}, NOW)
    assert _run(go()) == 0
    assert _counters(server) == (900, 600)  # the known reservation, untouched
    assert server.client().exists(record_key("unknown")) == 0


def test_a_repeated_reservation_reserves_once(url: str, server: RedisServer) -> None:
    async def go() -> None:
        store = await _store(url)
        for _ in range(2):
            assert isinstance(await store.reserve([DEMO], NOW, "again"), Reservation)
    _run(go())
    assert _counters(server) == (600, 600)


def test_a_late_reservation_is_released_whichever_reaches_the_store_first(url: str, server: RedisServer) -> None:
    """The service's store timeout passed before the reservation's answer (the request was refused fail-closed, or
    admitted unreserved): the reservation may still land. Its release (a settlement of nothing used, `unreserved`)
    gives it back when it landed first, and bars it when it comes first: the late reservation then takes nothing."""
    async def go() -> None:
        store = await _store(url)
        landed = await store.reserve([DEMO], NOW, "landed-first")
        assert isinstance(landed, Reservation)
        assert await store.settle(Store.unreserved([DEMO], NOW, "landed-first"), {("tenant", "demo"): 0}, NOW)
        assert _counters(server) == (0, 0)
        assert await store.settle(Store.unreserved([DEMO], NOW, "released-first"), {("tenant", "demo"): 0}, NOW)
        assert isinstance(await store.reserve([DEMO], NOW, "released-first"), Reservation)  # lands late: nothing
    _run(go())
    assert _counters(server) == (0, 0)
    c = server.client()
    assert c.hgetall(record_key("released-first")) == {b"settled": b"1"}
    assert c.ttl(record_key("released-first")) == c.ttl(HOUR) > 3600  # barred as long as its windows' counters live


def test_a_reservation_that_reaches_the_store_after_the_timeout_is_released(url: str, server: RedisServer) -> None:
    """The real sequence: the store hangs (SIGSTOP) with the reservation sent; the service gives up at its timeout
    (redis-py drops the connection, the command still in the server's socket); the store comes back and runs it; the
    release, sent on a new connection, leaves the counters as before the request."""
    async def go() -> None:
        store = await _store(url)
        # the script loaded (a first EVALSHA would only get NOSCRIPT back), the connection open
        await store.reserve([Charge("tenant", "other", {"perMinute": 1000}, 0)], NOW, "warm")
        server.pause()
        try:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await store.reserve([DEMO], NOW, "late")
        finally:
            server.resume()
        deadline = time.monotonic() + 5
        while _counters(server) != (600, 600) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert _counters(server) == (600, 600), "the reservation landed after the timeout"
        assert await store.settle(Store.unreserved([DEMO], NOW, "late"), {("tenant", "demo"): 0}, NOW)
    _run(go())
    assert _counters(server) == (0, 0)



@pytest.mark.parametrize("hang", ["stopped", "writes-paused"])
def test_a_settlement_that_times_out_is_retried_and_counts_once(url: str, server: RedisServer, hang: str) -> None:
    """The service's settlement (Processor.settle) against a store that hangs for 0.4 s, past its 0.2 s timeout.
    `stopped` (SIGSTOP): each try's script waits in the store's socket and runs once it thaws; the first applies, the
    retry finds the reservation settled and changes nothing. `writes-paused` (CLIENT PAUSE WRITE holds every client
    that runs a script, redis.io docs, commands/client-pause; the held client disconnects at the timeout, and its
    script never runs): the first try never applies, the retry after the pause does. Either way what the request
    used counts once."""
    config = BudgetConfig(tenants={}, workloads={}, models={}, store_timeout_seconds=0.2)

    async def go() -> None:
        store = await _store(url)
        processor = Processor(config, store, prom.CollectorRegistry(), clock=lambda: NOW)
        r = await store.reserve([DEMO], NOW, "slow")
        assert isinstance(r, Reservation)
        if hang == "stopped":
            server.pause()
            asyncio.get_running_loop().call_later(0.4, server.resume)
        else:
            server.client().execute_command("CLIENT", "PAUSE", 400, "WRITE")
        try:
            await processor.settle(r, {("tenant", "demo"): 250})
        finally:
            server.resume()
    _run(go())
    assert _counters(server) == (250, 250)
    assert server.client().exists(record_key("slow")) == 0


def _release_script(port: int, age: int) -> str:
    """The runbook's manual release of reservations nobody will settle (dashboards/RUNBOOKS.md,
    TokenBudgetServiceUnreachable), as the Valkey pod runs it: Debian's redis-cli for valkey-cli."""
    text = (Path(__file__).parents[2] / "dashboards" / "RUNBOOKS.md").read_text()
    section = text.split("## TokenBudgetServiceUnreachable\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```\n", 2)[1]
    script = block.split("sh -c '", 1)[1].rsplit("'", 1)[0]
    return script.replace("age=<seconds>", f"age={age}").replace("valkey-cli", f"redis-cli -p {port}")


def test_the_runbooks_release_gives_back_only_old_unsettled_reservations(url: str, server: RedisServer) -> None:
    """A service pod killed hard leaves its meter streams' reservations recorded and never settled: the runbook's
    release gives back those older than `age` (OBJECT IDLETIME of the record), and leaves a recent one, a settled
    one's tombstone, a swept one's (the sweep gave it back already) and the other counters alone."""
    charge = [Charge("tenant", "demo", {"perMinute": 1000, "perDay": 10_000}, 300)]
    minute, day = window_key("tenant", "demo", "perMinute", NOW), window_key("tenant", "demo", "perDay", NOW)

    async def reserve(rid: str) -> Reservation | Refusal:
        return await (await _store(url)).reserve(charge, NOW, rid)

    async def unreserved(rid: str) -> bool:
        store = await _store(url)
        return await store.settle(Store.unreserved(charge, NOW, rid), {("tenant", "demo"): 50}, NOW)

    async def swept(rid: str) -> None:
        st = await _store(url)
        assert isinstance(await st.reserve(charge, NOW, rid, deadline=NOW), Reservation)
        assert len((await st.sweep(NOW + 1, 10)).released) == 1

    assert isinstance(_run(reserve("orphan")), Reservation)
    assert _run(unreserved("late"))  # a tombstone, and 50 used
    _run(swept("swept"))  # the sweep gave it back: a tombstone
    c = server.client()
    deadline = time.monotonic() + 10
    while int(c.object("idletime", record_key("orphan"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert isinstance(_run(reserve("recent")), Reservation)
    assert [int(c.get(minute)), int(c.get(day))] == [650, 650]
    done = subprocess.run(["sh", "-c", _release_script(server.port, 1)], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stderr
    assert [int(c.get(minute)), int(c.get(day))] == [350, 350]
    assert not c.exists(record_key("orphan"))
    assert c.hgetall(record_key("recent")) == {minute.encode(): b"300", day.encode(): b"300"}
    assert c.hgetall(record_key("late")) == {b"settled": b"1"}
    assert c.hgetall(record_key("swept")) == {b"swept": b"1"}
