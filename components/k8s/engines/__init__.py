"""The serving engines: one module per engine, each an `Engine` (components.k8s.engines.base), and the registry.

Adding an engine: a module beside vllm.py and triton.py whose ENGINE implements `Engine`, and its line in ENGINES.
"""

from __future__ import annotations

from components.k8s.engines import sglang, triton, vllm
from components.k8s.engines.base import CAPABILITIES, Engine, EngineTracing, model_path

__all__ = ["ENGINES", "ENGINE_NAMES", "CAPABILITIES", "Engine", "EngineTracing", "engine_named", "model_path"]

ENGINES: dict[str, Engine] = {
    vllm.ENGINE.name: vllm.ENGINE,
    triton.ENGINE.name: triton.ENGINE,
    sglang.ENGINE.name: sglang.ENGINE,
}
ENGINE_NAMES = tuple(ENGINES)


def engine_named(name: str) -> Engine:
    """The engine called `name` (models.X.engine); a clear error for any other name."""
    try:
        return ENGINES[name]
    except KeyError:
        raise ValueError(f"engine {name!r} is not known; choose one of: {', '.join(ENGINES)}") from None
