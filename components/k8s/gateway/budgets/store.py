"""The token budget store: per scope (a tenant, a workload) and calendar window, one Redis/Valkey counter of weighted
tokens, shared by every gateway replica through the budget service.

Reserve is one Lua script (Redis runs a script atomically: nothing else runs on the server between its commands,
redis/redis@7.0.15 src/script_lua.c, docs "Scripting with Lua"), so the check "spent + reservation <= limit" and the
increment are one step for every replica: two requests can never both take the last reservation's worth. Settle adds
the difference between what a request used and what it reserved (usually negative: tokens given back) to the
counters its reservation incremented, unless the window's counter is gone (expired with its window).

Keys: `aifactory:budget:<scope>:<name>:<window>:<window start, Unix seconds>`; a window starts at a multiple of its
length since the epoch (a day is the UTC calendar day) and its key expires one window after its end.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["KEY_PREFIX", "WINDOW_SECONDS", "Charge", "Refusal", "Reservation", "Store", "window_key",
           "retry_after_seconds"]

KEY_PREFIX = "aifactory:budget"
WINDOW_SECONDS = {"perMinute": 60, "perHour": 3600, "perDay": 86400}  # the settings' BUDGET_WINDOWS

# KEYS: the counters; ARGV: per key its limit, amount and TTL (seconds). Returns 0 when every counter took its amount,
# else the 1-based index of the first counter it would overfill (nothing was incremented).
RESERVE_LUA = """
for i, key in ipairs(KEYS) do
  local spent = tonumber(redis.call('GET', key) or '0')
  if spent + tonumber(ARGV[3 * i - 1]) > tonumber(ARGV[3 * i - 2]) then
    return i
  end
end
for i, key in ipairs(KEYS) do
  redis.call('INCRBY', key, ARGV[3 * i - 1])
  redis.call('EXPIRE', key, ARGV[3 * i])
end
return 0
"""
# KEYS: the counters a reservation incremented; ARGV: per key the difference to add, then per key its TTL (seconds;
# <= 0 once its window's counter would have expired). A counter that expired with its window is left gone (INCRBY
# would make a new one without expiry); one that is missing while its window runs (the store was down when the request
# was admitted unreserved, or it restarted empty) is created with its expiry by what a request used on top.
SETTLE_LUA = """
for i, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then
    redis.call('INCRBY', key, ARGV[i])
  elseif tonumber(ARGV[i]) > 0 and tonumber(ARGV[#KEYS + i]) > 0 then
    redis.call('INCRBY', key, ARGV[i])
    redis.call('EXPIRE', key, ARGV[#KEYS + i])
  end
end
return 0
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
    """The counters a request incremented, with the amount each took (settle moves them by the same keys)."""

    keys: tuple[str, ...]
    amounts: tuple[int, ...]
    charges: tuple[Charge, ...]


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

    async def reserve(self, charges: Sequence[Charge], now: float) -> Reservation | Refusal:
        """Every charge's amount in every window of its budget, atomically; or the first window it does not fit."""
        slots = _slots(charges)
        keys = [window_key(c.scope, c.name, w, now) for c, w, _ in slots]
        argv: list[int] = []
        for (c, _, limit), key in zip(slots, keys, strict=True):
            argv += [limit, c.amount, _ttl(key, now)]
        failed = int(await self._reserve(keys=keys, args=argv)) if slots else 0
        if failed:
            c, w, limit = slots[failed - 1]
            return Refusal(c.scope, c.name, w, limit, c.amount, retry_after_seconds(w, now))
        return Reservation(tuple(keys), tuple(c.amount for c, _, _ in slots), tuple(charges))

    @staticmethod
    def unreserved(charges: Sequence[Charge], now: float) -> Reservation:
        """A request admitted without a reservation (the store did not answer in time, fail-open): nothing was
        reserved, so settling it adds what it used to the counters (those of its windows that exist by then)."""
        zero = tuple(Charge(c.scope, c.name, c.limits, 0) for c in charges)
        return Reservation(tuple(window_key(c.scope, c.name, w, now) for c, w, _ in _slots(zero)),
                           tuple(0 for _ in _slots(zero)), zero)

    async def settle(self, reservation: Reservation, used: Mapping[tuple[str, str], int], now: float) -> None:
        """Replace each charge's reservation by what the request used (`used`: (scope, name) -> weighted tokens)."""
        per_key = [used[(c.scope, c.name)] - c.amount for c in reservation.charges for _ in c.limits]
        if reservation.keys and any(per_key):
            await self._settle(keys=list(reservation.keys),
                               args=[*per_key, *(_ttl(k, now) for k in reservation.keys)])

    async def spent(self, scope: str, name: str, windows: Sequence[str], now: float) -> dict[str, int]:
        """Weighted tokens reserved or settled so far in the current `windows` of one budget."""
        values = await self.redis.mget([window_key(scope, name, w, now) for w in windows])
        return {w: int(v or 0) for w, v in zip(windows, values, strict=True)}
