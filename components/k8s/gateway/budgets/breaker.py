"""A circuit breaker on the budget store: while the store is down, calls stop waiting for it.

Closed (the store answers): every call goes to the store. After `failures` consecutive calls failed (an error, a
refused connection, no answer within the call's timeout) it opens: calls fail at once with BreakerOpen, so a request
gets its budget's onStoreFailure answer without waiting for the store's timeout, and no background settlement holds a
connection to a store that does not answer. Once `cooldown_s` has passed, the next call is a probe (one at a time;
the others still fail at once): an answer closes the breaker, a failure opens it for another cool-down.

What counts as a failure is the store's, not one request's: an error reply that only one key or one call earns (a
key of the wrong type, a script error) proves the store answered, so it counts as an answer (`answered`), and one
tenant's bad key cannot open the breaker for every tenant on the replica.

Why consecutive failures, not a share over a window: a store that is down fails every call, so the breaker opens
within `failures` calls, at one request a second as at 500; a store that answers, however busy, has only isolated
slow answers (bench_budgets' store answer time: p99 about 10 ms, the slowest few up to 250 ms, all under the 0.5 s
timeout), and any answer resets the count, so it never opens on a tail. A share needs a minimum number of calls per
window to mean anything, so it opens late, or never, at a low rate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["Breaker", "BreakerOpen", "DEFAULT_FAILURES", "DEFAULT_COOLDOWN_S"]

DEFAULT_FAILURES = 5  # consecutive failed calls that open it
DEFAULT_COOLDOWN_S = 1.0  # how long it stays open before one call probes the store

T = TypeVar("T")


class BreakerOpen(Exception):
    """The store was not asked: its breaker is open (or another call is probing it)."""


class Breaker:
    def __init__(self, errors: tuple[type[BaseException], ...], *, failures: int = DEFAULT_FAILURES,
                 cooldown_s: float = DEFAULT_COOLDOWN_S, clock: Callable[[], float] = time.monotonic,
                 on_change: Callable[[bool], None] | None = None,
                 answered: Callable[[BaseException], bool] = lambda _: False) -> None:
        self.errors, self.failures, self.cooldown_s, self.clock = errors, failures, cooldown_s, clock
        self.answered = answered  # an error of `errors` that is the store's answer to this call only
        self.on_change = on_change  # called with True as it opens, False as it closes
        self.consecutive = 0  # failed calls in a row while closed
        self.opened_at: float | None = None  # None: closed
        self._probing = False
        self._changed = asyncio.Event()  # set (and replaced) whenever it opens, closes or a probe ends

    @property
    def open(self) -> bool:
        return self.opened_at is not None

    async def call(self, call: Callable[[], Awaitable[T]], timeout: float) -> T:
        """`call()` within `timeout` seconds; BreakerOpen at once, without calling, while the breaker is open."""
        probe = self._enter()
        try:
            async with asyncio.timeout(timeout):
                result = await call()
        except self.errors as e:
            if self.answered(e):
                self._succeeded()
            else:
                self._failed(probe)
            raise
        except BaseException:  # cancelled (the caller went away): the store's health is unknown
            if probe:
                self._probing = False
                self._signal()
            raise
        self._succeeded()
        return result

    async def wait(self) -> None:
        """Until a call may find the breaker closed or its cool-down over, or a probe has ended."""
        if self.opened_at is None:
            return
        changed = self._changed
        left = None if self._probing else self.opened_at + self.cooldown_s - self.clock()
        if left is not None and left <= 0:
            return
        try:
            async with asyncio.timeout(left):
                await changed.wait()
        except TimeoutError:
            pass

    def _enter(self) -> bool:
        """Whether the call is a probe; BreakerOpen when it may not be made."""
        if self.opened_at is None:
            return False
        if self._probing or self.clock() < self.opened_at + self.cooldown_s:
            raise BreakerOpen
        self._probing = True
        return True

    def _failed(self, probe: bool) -> None:
        if probe:  # the store is still down: another cool-down
            self._probing = False
            self.opened_at = self.clock()
            self._signal()
        elif self.opened_at is None:
            self.consecutive += 1
            if self.consecutive >= self.failures:
                self.opened_at = self.clock()
                self._signal(True)

    def _succeeded(self) -> None:
        self.consecutive = 0
        if self.opened_at is not None:  # the probe (or a call made before it opened) got an answer
            self.opened_at, self._probing = None, False
            self._signal(False)

    def _signal(self, opened: bool | None = None) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
        if opened is not None and self.on_change is not None:
            self.on_change(opened)
