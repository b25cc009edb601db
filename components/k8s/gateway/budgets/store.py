"""The token budget store: per scope (a tenant, a workload) and calendar window, one Redis/Valkey counter of weighted
tokens, shared by every gateway replica through the budget service.

Reserve is one Lua script (Redis runs a script atomically: nothing else runs on the server between its commands,
redis/redis@7.0.15 src/script_lua.c, docs "Scripting with Lua"), so the check "spent + reservation <= limit" and the
increment are one step for every replica: two requests can never both take the last reservation's worth.

Every reservation has an id (the service draws it per request). Reserve records, in the same script, the amount each
counter took under the id (one hash per reservation, its fields the counters' keys, kept as long as the longest of its
counters); settle is one script too: it applies only while the id is recorded, moving each counter by what the request
used less what the id reserved there, and deletes the record. So both are idempotent, and a call whose answer was lost
(the service's store timeout) can be repeated: a settlement retried counts once, a settlement of an id the store does
not hold changes nothing. When the service never saw the reservation's answer (the store timed out: the request was
admitted unreserved, or refused fail-closed) it settles with `unreserved`: a reservation that landed late is replaced
by what the request used (0 for a refused one), one that has not landed yet is barred (the record becomes a tombstone,
so the late reservation finds it and takes nothing), and what the request used is added either way.

Reservations that nobody settles (their metering stream lost with a service pod killed hard, or admission's answer
lost after the store reserved) are released by the sweep: reserve records, in its script, the reservation's deadline
(the latest time its request can still be running and its settlement still be on its way: the service passes it) in
one sorted set of ids by deadline; settle removes the id. The sweep script takes a batch of ids past their deadline
from the set and, for each whose record is still a reservation, gives back what it took of every counter that still
exists and makes the record a `swept` tombstone (kept as long as the record would have been). One script per batch,
so any number of service replicas sweeping at once release each reservation once. A settlement that arrives after
the sweep (its request was running after all, or its settlement waited for the store) finds the tombstone: what the
request used is added (the reservation was given back already), once; the record then becomes `settled`.

Keys: `aifactory:budget:<scope>:<name>:<window>:<window start, Unix seconds>`; a window starts at a multiple of its
length since the epoch (a day is the UTC calendar day) and its key expires one window after its end. A reservation's
record: `aifactory:budget:reservation:<id>`; the deadlines: `aifactory:budget:deadlines` (no expiry: every id leaves
it when settled or swept). The sweep reads and writes the keys its records name (a counter's key is a field of the
record), which a standalone Redis/Valkey allows (the store is one primary, not a cluster).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["KEY_PREFIX", "WINDOW_SECONDS", "DEADLINES_KEY", "Charge", "Refusal", "Reservation", "Swept", "Store",
           "window_key", "parse_window_key", "record_key", "new_id", "retry_after_seconds"]

KEY_PREFIX = "aifactory:budget"
WINDOW_SECONDS = {"perMinute": 60, "perHour": 3600, "perDay": 86400}  # the settings' BUDGET_WINDOWS
DEADLINES_KEY = f"{KEY_PREFIX}:deadlines"  # reservation ids by deadline (Unix seconds): what the sweep looks at
RECORD_PREFIX = f"{KEY_PREFIX}:reservation:"

# KEYS: the counters, then the reservation's record and the deadlines; ARGV: per counter its limit, amount and TTL
# (seconds), then the record's TTL, the reservation's deadline and its id. Returns 0 when every counter took its
# amount (or the id was seen before: a repeated reservation, or one its settlement or the sweep barred), else the
# 1-based index of the first counter it would overfill (nothing was incremented).
RESERVE_LUA = """
local n = #KEYS - 2
local record = KEYS[n + 1]
if redis.call('EXISTS', record) == 1 then
  return 0
end
for i = 1, n do
  local spent = tonumber(redis.call('GET', KEYS[i]) or '0')
  if spent + tonumber(ARGV[3 * i - 1]) > tonumber(ARGV[3 * i - 2]) then
    return i
  end
end
for i = 1, n do
  redis.call('INCRBY', KEYS[i], ARGV[3 * i - 1])
  redis.call('EXPIRE', KEYS[i], ARGV[3 * i])
  redis.call('HSET', record, KEYS[i], ARGV[3 * i - 1])
end
redis.call('EXPIRE', record, ARGV[3 * n + 1])
redis.call('ZADD', KEYS[n + 2], ARGV[3 * n + 2], ARGV[3 * n + 3])
return 0
"""
# KEYS: the counters, then the reservation's record and the deadlines; ARGV: per counter what the request used, then
# per counter its TTL (seconds; <= 0 once its window's counter would have expired), then `unreserved` (1: the service
# never saw the reservation's answer), the record's TTL and the id. A recorded reservation: each counter moves by
# used - reserved, the record is deleted. A `swept` tombstone (the sweep gave the reservation back): what was used is
# added, and the record becomes a `settled` tombstone. None recorded: nothing, unless `unreserved`: then what was used
# is added and the record becomes a tombstone (a reservation arriving late takes nothing). A `settled` tombstone:
# nothing (settled already). Returns 1 when it applied, 2 when it applied after the sweep, 0 when not. A counter that
# expired with its window is left gone (INCRBY would make a new one without expiry); one that is missing while its
# window runs (the store restarted empty) is created with its expiry by what a request used on top.
SETTLE_LUA = """
local n = #KEYS - 2
local record = KEYS[n + 1]
local unreserved = ARGV[2 * n + 1] == '1'
if redis.call('HEXISTS', record, 'settled') == 1 then
  return 0
end
local swept = redis.call('HEXISTS', record, 'swept') == 1
local held = redis.call('EXISTS', record) == 1
if not held and not unreserved then
  return 0
end
for i = 1, n do
  local diff = tonumber(ARGV[i]) - tonumber(redis.call('HGET', record, KEYS[i]) or '0')
  if diff ~= 0 then
    if redis.call('EXISTS', KEYS[i]) == 1 then
      redis.call('INCRBY', KEYS[i], diff)
    elseif diff > 0 and tonumber(ARGV[n + i]) > 0 then
      redis.call('INCRBY', KEYS[i], diff)
      redis.call('EXPIRE', KEYS[i], ARGV[n + i])
    end
  end
end
redis.call('DEL', record)
if unreserved or swept then
  redis.call('HSET', record, 'settled', 1)
  redis.call('EXPIRE', record, ARGV[2 * n + 2])
end
redis.call('ZREM', KEYS[n + 2], ARGV[2 * n + 3])
if swept then
  return 2
end
return 1
"""
# KEYS: the deadlines; ARGV: now (Unix seconds), the batch's size, the records' key prefix. Takes up to a batch of the
# ids whose deadline has passed out of the deadlines; each whose record is still a reservation (not settled, not swept,
# not expired with its windows) gives back what it took of every counter that still exists, and its record becomes a
# `swept` tombstone with the record's remaining TTL. Returns the number of ids taken, then per reservation released a
# list of its counters' keys, each followed by what it gave back there (0: the counter had expired).
SWEEP_LUA = """
local ids = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
local out = {#ids}
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  local record = ARGV[3] .. id
  if redis.call('EXISTS', record) == 1 and redis.call('HEXISTS', record, 'settled') == 0
      and redis.call('HEXISTS', record, 'swept') == 0 then
    local fields = redis.call('HGETALL', record)
    local given = {}
    for i = 1, #fields, 2 do
      local back = 0
      if redis.call('EXISTS', fields[i]) == 1 then
        back = tonumber(fields[i + 1])
        redis.call('DECRBY', fields[i], back)
      end
      given[#given + 1] = fields[i]
      given[#given + 1] = back
    end
    local ttl = redis.call('PTTL', record)
    redis.call('DEL', record)
    redis.call('HSET', record, 'swept', 1)
    redis.call('PEXPIRE', record, math.max(ttl, 1))
    out[#out + 1] = given
  end
end
return out
"""


class RedisLike(Protocol):
    """What the store needs of redis.asyncio.Redis."""

    def register_script(self, script: str) -> Any: ...

    def mget(self, keys: Any, *args: Any) -> Any: ...  # awaitable


@dataclass(frozen=True)
class Charge:
    """One budget a request counts against: a tenant's or a workload's, its limits per window and the weighted tokens
    the request reserves against it."""

    scope: str  # tenant | workload
    name: str
    limits: Mapping[str, int]  # window (perMinute ...) -> weighted tokens
    amount: int


@dataclass(frozen=True)
class Refusal:
    scope: str
    name: str
    window: str
    limit: int
    amount: int  # what the request would have reserved
    retry_after: int  # seconds until the window ends


@dataclass(frozen=True)
class Reservation:
    """A request's reservation: its id, the counters it incremented with the amount each took, and its charges.
    `unreserved`: the service never saw the store's answer (its timeout), so the store may or may not hold it."""

    id: str
    keys: tuple[str, ...]
    amounts: tuple[int, ...]
    charges: tuple[Charge, ...]
    unreserved: bool = False


def new_id() -> str:
    """A reservation's id: 96 random bits, unique across every service replica."""
    return secrets.token_hex(12)


@dataclass(frozen=True)
class Swept:
    """One sweep batch: how many ids past their deadline it took, and per reservation it released what it gave back
    of each counter (the counter's key -> weighted tokens; 0 where the counter had expired)."""

    due: int
    released: tuple[Mapping[str, int], ...]


def record_key(reservation_id: str) -> str:
    return f"{RECORD_PREFIX}{reservation_id}"


def window_start(window: str, now: float) -> int:
    length = WINDOW_SECONDS[window]
    return int(now // length) * length


def window_key(scope: str, name: str, window: str, now: float) -> str:
    return f"{KEY_PREFIX}:{scope}:{name}:{window}:{window_start(window, now)}"


def parse_window_key(key: str) -> tuple[str, str, str]:
    """(scope, name, window) of a window's counter key (window_key)."""
    scope, rest = key.removeprefix(f"{KEY_PREFIX}:").split(":", 1)
    name, window, _ = rest.rsplit(":", 2)
    return scope, name, window


def _ttl(key: str, now: float) -> int:
    """Seconds a window's counter is kept from `now`: one window past the window's end, so the last window's spend can
    still be read and settled."""
    window, start = key.rsplit(":", 2)[1:]
    return int(start) + 2 * WINDOW_SECONDS[window] - int(now)


def _record_ttl(keys: Sequence[str], now: float) -> int:
    """A reservation's record is kept as long as the longest of its counters (at least a second)."""
    return max(1, *(_ttl(k, now) for k in keys))


def retry_after_seconds(window: str, now: float) -> int:
    """Whole seconds until `window` (the one `now` is in) ends: when its counter starts again from 0."""
    return max(1, math.ceil(window_start(window, now) + WINDOW_SECONDS[window] - now))


def _slots(charges: Sequence[Charge]) -> list[tuple[Charge, str, int]]:
    """(charge, window, limit) of every window of every charge: one counter each, in this order."""
    return [(c, w, limit) for c in charges for w, limit in c.limits.items()]


class Store:
    """Reserve and settle against the shared counters (one Redis connection pool per service process)."""

    def __init__(self, redis: RedisLike) -> None:
        self.redis = redis
        self._reserve = redis.register_script(RESERVE_LUA)
        self._settle = redis.register_script(SETTLE_LUA)
        self._sweep = redis.register_script(SWEEP_LUA)

    async def reserve(self, charges: Sequence[Charge], now: float, reservation_id: str, *,
                      deadline: float = math.inf) -> Reservation | Refusal:
        """Every charge's amount in every window of its budget, atomically, recorded under `reservation_id` with its
        `deadline` (Unix seconds: the sweep releases it past that, unless settled; inf: never); or the first window
        it does not fit. Repeating it with the same id reserves nothing more."""
        slots = _slots(charges)
        keys = [window_key(c.scope, c.name, w, now) for c, w, _ in slots]
        argv: list[int] = []
        for (c, _, limit), key in zip(slots, keys, strict=True):
            argv += [limit, c.amount, _ttl(key, now)]
        failed = int(await self._reserve(
            keys=[*keys, record_key(reservation_id), DEADLINES_KEY],
            args=[*argv, _record_ttl(keys, now), "+inf" if deadline == math.inf else repr(deadline),
                  reservation_id])) if slots else 0
        if failed:
            c, w, limit = slots[failed - 1]
            return Refusal(c.scope, c.name, w, limit, c.amount, retry_after_seconds(w, now))
        return Reservation(reservation_id, tuple(keys), tuple(c.amount for c, _, _ in slots), tuple(charges))

    @staticmethod
    def unreserved(charges: Sequence[Charge], now: float, reservation_id: str) -> Reservation:
        """A request whose reservation's answer the service did not see (the store did not answer in time): settling
        it replaces a reservation that landed late by what it used, and bars one still on its way."""
        zero = tuple(Charge(c.scope, c.name, c.limits, 0) for c in charges)
        return Reservation(reservation_id, tuple(window_key(c.scope, c.name, w, now) for c, w, _ in _slots(zero)),
                           tuple(0 for _ in _slots(zero)), zero, unreserved=True)

    async def settle(self, reservation: Reservation, used: Mapping[tuple[str, str], int], now: float) -> int:
        """Replace the reservation by what the request used (`used`: (scope, name) -> weighted tokens), once: 1 when
        it applied, 2 when it applied after the sweep had released the reservation (what was used is added), 0 when
        the store held no such reservation (settled already, expired, or never made)."""
        if not reservation.keys:
            return 0
        per_key = [used[(c.scope, c.name)] for c in reservation.charges for _ in c.limits]
        ttls = [_ttl(k, now) for k in reservation.keys]
        return int(await self._settle(keys=[*reservation.keys, record_key(reservation.id), DEADLINES_KEY],
                                      args=[*per_key, *ttls, int(reservation.unreserved),
                                            _record_ttl(reservation.keys, now), reservation.id]))

    async def sweep(self, now: float, batch: int) -> Swept:
        """Release up to `batch` reservations whose deadline is before `now` and that nobody settled, atomically
        (SWEEP_LUA): any number of sweepers at once release each one once."""
        due, *released = await self._sweep(keys=[DEADLINES_KEY], args=[repr(now), batch, RECORD_PREFIX])
        return Swept(int(due), tuple({k.decode(): int(v) for k, v in zip(r[::2], r[1::2], strict=True)}
                                     for r in released))

    async def spent(self, scope: str, name: str, windows: Sequence[str], now: float) -> dict[str, int]:
        """Weighted tokens reserved or settled so far in the current `windows` of one budget."""
        values = await self.redis.mget([window_key(scope, name, w, now) for w in windows])
        return {w: int(v or 0) for w, v in zip(windows, values, strict=True)}
