"""Virtual time for testing instrumented agents with exact numbers (durations, critical path).

    clock = VirtualClock()
    tel = Telemetry(tenant="t", tracer_provider=..., meter_provider=..., clock=clock)

    async def tool():
        with tel.step("tool", "search"):
            await clock.sleep(2)            # two virtual seconds, no real waiting

    clock.run(agent())                      # drives the coroutine, jumping time from wake-up to wake-up

Time only moves when every task is waiting on clock.sleep(); tasks must not wait on real I/O.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Coroutine
from itertools import count
from typing import Any, TypeVar

__all__ = ["VirtualClock", "DEFAULT_START_NS", "SETTLE_ROUNDS"]

DEFAULT_START_NS = 1_700_000_000 * 10**9  # a fixed epoch instant, so span timestamps are reproducible
SETTLE_ROUNDS = 64  # event-loop turns given to ready tasks before time jumps to the next wake-up

T = TypeVar("T")


class VirtualClock:
    """A nanosecond clock (call it) that only advances by advance() or by sleeping tasks under run()."""

    def __init__(self, start_ns: int = DEFAULT_START_NS) -> None:
        self.now = start_ns
        self._sleepers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = count()

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward (synchronous code under test)."""
        self.now += _ns(seconds)

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` of virtual time (asynchronous code under test, inside run())."""
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + _ns(seconds), next(self._order), future))
        await future

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        """Run `main` to completion on a fresh event loop, in virtual time."""
        return asyncio.run(self._drive(main))

    async def _drive(self, main: Coroutine[Any, Any, T]) -> T:
        task = asyncio.ensure_future(main)
        while True:
            for _ in range(SETTLE_ROUNDS):
                if task.done():
                    return task.result()
                await asyncio.sleep(0)
            if not self._sleepers:
                raise RuntimeError("virtual clock: the coroutine waits on something other than clock.sleep()")
            wake, _, _ = self._sleepers[0]
            self.now = wake
            while self._sleepers and self._sleepers[0][0] == wake:
                _, _, future = heapq.heappop(self._sleepers)
                if not future.done():
                    future.set_result(None)


def _ns(seconds: float) -> int:
    if seconds < 0:
        raise ValueError(f"cannot go back in time: {seconds} s")
    return round(seconds * 1e9)
