"""Shared fixtures: each shipped stack is synthesized once per test session and reused read-only."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from infra.synth import SynthSummary, synth


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """`synthesized("prod")` -> build directory of that stack (synth runs once per session per stack)."""
    root = tmp_path_factory.mktemp("synth")
    done: dict[str, SynthSummary] = {}

    def get(stack: str) -> Path:
        if stack not in done:
            done[stack] = synth(stack, root / stack, progress=None)
        return done[stack].out

    return get


if os.environ.get("AIFACTORY_MUTATION_STATS"):  # `make mutate` (tests/mutation): credit fixture calls to every test
    from tests.mutation.widen import pytest_runtest_teardown  # noqa: F401
