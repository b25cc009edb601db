"""Where the gateway overhead bench runs its processes (tests/bench/bench_gateway.py `cpu_layout`): pinned apart on a
machine with enough CPUs, not at all on fewer."""

from __future__ import annotations

import pytest

from tests.bench import bench_gateway
from tests.bench.bench_gateway import GATEWAY_WORKERS, PINNED_MIN_CPUS, Layout, cpu_layout


def test_with_enough_cpus_each_process_gets_cpus_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_gateway.os, "sched_getaffinity", lambda _pid: {3, 4, 5, 6, 7, 8, 9, 10})
    assert cpu_layout() == (Layout(gateway=frozenset({3, 4}), hop=frozenset({5, 6}), backend=frozenset({7}),
                                   generators=frozenset({8, 9, 10})), GATEWAY_WORKERS)


def test_below_the_minimum_nothing_is_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_gateway.os, "sched_getaffinity", lambda _pid: set(range(PINNED_MIN_CPUS - 1)))
    assert cpu_layout() == (Layout(None, None, None, None), GATEWAY_WORKERS)
    assert PINNED_MIN_CPUS == 6
