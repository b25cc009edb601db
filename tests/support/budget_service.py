"""The kit's token budget service (components/k8s/gateway/budgets/service.py) in a thread of the test process, with
its own event loop, on a 127.0.0.1 port (given, or picked free); stopped with the test.

Start every subprocess (Envoy) before it: a fork while gRPC's threads run can leave the child's gRPC state broken
before it execs (grpc's fork handlers are skipped when other threads are in gRPC), and the child aborts."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Self

import prometheus_client as prom

from components.k8s.gateway.budgets.service import BudgetConfig, Processor, serve
from tests.support.processes import free_port

__all__ = ["BudgetService"]

START_TIMEOUT_S = 10.0


class BudgetService:
    def __init__(self, config: BudgetConfig, redis_url: str, *, clock: Callable[[], float] = time.time,
                 metrics: bool = False, port: int | None = None) -> None:
        self.config, self.redis_url, self.clock = config, redis_url, clock
        self.metrics_port = free_port() if metrics else None
        self.registry = prom.CollectorRegistry()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="budget-service")
        self.port = port if port is not None else free_port()
        self.processor: Processor | None = None
        self._server: Any = None

    def __enter__(self) -> Self:
        self._thread.start()
        started: Future[Any] = asyncio.run_coroutine_threadsafe(
            serve(self.config, listen=f"127.0.0.1:{self.port}", redis_url=self.redis_url,
                  metrics_port=self.metrics_port, registry=self.registry, clock=self.clock), self.loop)
        self._server, self.processor, self.port = started.result(timeout=START_TIMEOUT_S)
        return self

    def drain(self) -> None:
        """Until every settlement started so far is written."""
        assert self.processor is not None
        asyncio.run_coroutine_threadsafe(self.processor.drain(), self.loop).result(timeout=START_TIMEOUT_S)

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._server.stop(0), self.loop).result(timeout=START_TIMEOUT_S)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=START_TIMEOUT_S)
