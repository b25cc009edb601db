"""The dashboards' side of the serving engines: one module per engine, each an `EngineRules`
(dashboards.engines.base), registered under the name components.k8s.engines registers it with.

Adding an engine: a module beside vllm.py and triton.py whose RULES implements `EngineRules`, and its line here.
"""

from __future__ import annotations

from dashboards.engines import sglang, triton, vllm
from dashboards.engines.base import MODEL, EngineRules, SloHistogram

__all__ = ["ENGINE_RULES", "EngineRules", "MODEL", "SloHistogram", "rules_of"]

ENGINE_RULES: dict[str, EngineRules] = {
    vllm.RULES.name: vllm.RULES,
    triton.RULES.name: triton.RULES,
    sglang.RULES.name: sglang.RULES,
}


def rules_of(name: str) -> EngineRules:
    """The dashboards' side of engine `name`; a clear error for any other name."""
    try:
        return ENGINE_RULES[name]
    except KeyError:
        raise ValueError(f"engine {name!r} is not known; choose one of: {', '.join(ENGINE_RULES)}") from None
