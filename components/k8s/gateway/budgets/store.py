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

Keys: `aifactory:budget:<scope>:<name>:<window>:<window start, Unix seconds>`; a window starts at a multiple of its
length since the epoch (a day is the UTC calendar day) and its key expires one window after its end. A reservation's
record: `aifactory:budget:reservation:<id>`.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["KEY_PREFIX", "WINDOW_SECONDS", "Charge", "Refusal", "Reservation", "Store", "window_key", "record_key",
           "new_id", "retry_after_seconds"]

KEY_PREFIX = "aifactory:budget"
WINDOW_SECONDS = {"perMinute": 60, "perHour": 3600, "perDay": 86400}  # the settings' BUDGET_WINDOWS

# KEYS: the counters, then the reservation's record; ARGV: per counter its limit, amount and TTL (seconds), then the
# record's TTL. Returns 0 when every counter took its amount (or the id was seen before: a repeated reservation, or
# one its settlement barred), else the 1-based index of the first counter it would overfill (nothing was incremented).
RESERVE_LUA = """
local n = #KEYS - 1
local record = KEYS[#KEYS]
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
return 0
"""
# KEYS: the counters, then the reservation's record; ARGV: per counter what the request used, then per counter its
# TTL (seconds; <= 0 once its window's counter would have expired), then `unreserved` (1: the service never saw the
# reservation's answer) and the record's TTL. A recorded reservation: each counter moves by used - reserved, the record
# is deleted. None recorded: nothing, unless `unreserved`: then what was used is added and the record becomes a
# tombstone (a reservation arriving late takes nothing). A tombstone: nothing (settled already). Returns 1 when it
# applied, 0 when not. A counter that expired with its window is left gone (INCRBY would make a new one without
# expiry); one that is missing while its window runs (the store restarted empty) is created with its expiry by what a
# request used on top.
SETTLE_LUA = """
local n = #KEYS - 1
local record = KEYS[#KEYS]
local unreserved = ARGV[2 * n + 1] == '1'
if redis.call('HEXISTS', record, 'settled') == 1 then
  return 0
end
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
if unreserved then
  redis.call('HSET', record, 'settled', 1)
  redis.call('EXPIRE', record, ARGV[2 * n + 2])
end
return 1
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


def record_key(reservation_id: str) -> str:
    return f"{KEY_PREFIX}:reservation:{reservation_id}"


def window_start(window: str, now: float) -> int:
    length = WINDOW_SECONDS[window]
    return int(now // length) * length


def window_key(scope: str, name: str, window: str, now: float) -> str:
    return f"{KEY_PREFIX}:{scope}:{name}:{window}:{window_start(window, now)}"


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

    async def reserve(self, charges: Sequence[Charge], now: float, reservation_id: str) -> Reservation | Refusal:
        """Every charge's amount in every window of its budget, atomically, recorded under `reservation_id`; or the
        first window it does not fit. Repeating it with the same id reserves nothing more."""
        slots = _slots(charges)
        keys = [window_key(c.scope, c.name, w, now) for c, w, _ in slots]
        argv: list[int] = []
        for (c, _, limit), key in zip(slots, keys, strict=True):
            argv += [limit, c.amount, _ttl(key, now)]
        failed = int(await self._reserve(keys=[*keys, record_key(reservation_id)],
                                          args=[*argv, _record_ttl(keys, now)])) if slots else 0
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

    async def settle(self, reservation: Reservation, used: Mapping[tuple[str, str], int], now: float) -> bool:
        """Replace the reservation by what the request used (`used`: (scope, name) -> weighted tokens), once: True when
        it applied, False when the store held no such reservation (settled already, expired, or never made)."""
        if not reservation.keys:
            return False
        per_key = [used[(c.scope, c.name)] for c in reservation.charges for _ in c.limits]
        ttls = [_ttl(k, now) for k in reservation.keys]
        return bool(await self._settle(keys=[*reservation.keys, record_key(reservation.id)],
                                       args=[*per_key, *ttls, int(reservation.unreserved),
                                             _record_ttl(reservation.keys, now)]))

    async def spent(self, scope: str, name: str, windows: Sequence[str], now: float) -> dict[str, int]:
        """Weighted tokens reserved or settled so far in the current `windows` of one budget."""
        values = await self.redis.mget([window_key(scope, name, w, now) for w in windows])
        return {w: int(v or 0) for w, v in zip(windows, values, strict=True)}
