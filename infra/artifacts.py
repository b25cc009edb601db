"""The registry of artifact writers that `aifactory synth` runs over a program result.

A writer is a function `(ctx: ArtifactContext) -> list[Path]` registered with `@artifact(name)` in a
module under `infra/writers/`; synth discovers every module there, so adding an artifact kind means
adding one module, never editing synth. Writers write only below `ctx.out` (a temporary directory
that synth moves into place when every writer has finished) and must be deterministic.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from components.vocabulary import dump_yaml  # re-exported: the writers render YAML through here

if TYPE_CHECKING:
    from infra.config import PlatformConfig

__all__ = ["SynthResult", "ArtifactContext", "Writer", "artifact", "writers", "dump_yaml", "dump_json"]


@dataclass(frozen=True)
class SynthResult:
    """One offline run of the program (infra.synth.run_program): what every writer reads."""

    stack: str
    config: PlatformConfig
    stack_urn: str
    stack_outputs: dict[str, Any]
    resources: list[Any]  # infra.mocks.Registration, in stack-export order


@dataclass
class ArtifactContext:
    result: SynthResult
    out: Path
    # Messages of mandatory failures (policy violations): synth writes everything, then exits 1.
    failures: list[str] = field(default_factory=list)
    # The policy report (policy-report.json's content), for synth's summary.
    policy: dict[str, Any] = field(default_factory=dict)
    # Findings of `aifactory preflight` (policies.preflight.Finding): reported, not failures.
    preflight: list[Any] = field(default_factory=list)


Writer = Callable[[ArtifactContext], list[Path]]
_REGISTRY: dict[str, tuple[int, Writer]] = {}


def artifact(name: str, *, order: int = 50) -> Callable[[Writer], Writer]:
    """Register a writer; lower `order` runs first (state.json is 0, the policy report 90)."""

    def register(fn: Writer) -> Writer:
        if name in _REGISTRY and _REGISTRY[name][1] is not fn:
            raise ValueError(f"artifact writer {name!r} is registered twice")
        _REGISTRY[name] = (order, fn)
        return fn

    return register


def writers() -> list[tuple[str, Writer]]:
    """Every registered writer, in (order, name) order, after importing infra/writers/*."""
    import infra.writers as pkg

    for mod in sorted(m.name for m in pkgutil.iter_modules(pkg.__path__)):
        importlib.import_module(f"{pkg.__name__}.{mod}")
    return [(name, fn) for name, (_, fn) in sorted(_REGISTRY.items(), key=lambda kv: (kv[1][0], kv[0]))]


def dump_json(data: Any) -> str:
    import json

    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
