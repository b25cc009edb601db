"""Shared fixtures: each shipped stack is synthesized once per test session and reused read-only."""

from __future__ import annotations

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
