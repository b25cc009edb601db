"""synth wall time, resource count and resources per second for every shipped stack."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from infra.synth import shipped_stacks, synth


def run() -> list[tuple[str, str]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for stack in shipped_stacks():
            started = time.perf_counter()
            summary = synth(stack, Path(tmp) / stack, progress=None)
            secs = time.perf_counter() - started
            rows.append((f"synth {stack}", f"{secs:6.2f} s  {summary.resources:5d} resources  "
                                           f"{summary.resources / secs:7.0f} resources/s"))
    return rows
