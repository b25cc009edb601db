"""Serving engines: a row per engine (dashboards.engines), e.g. vLLM's KV cache, queues, batch, tokens, prefix cache
and speculative decoding; vLLM's row also has the session affinity panels (dashboards.affinity) after its prefix
cache hit rate."""

from __future__ import annotations

from typing import Any

from grafanalib.core import Dashboard

from dashboards import affinity
from dashboards.config import ObservabilityConfig
from dashboards.engines import ENGINE_RULES, EngineRules, vllm
from dashboards.panels import custom_variable, dashboard

__all__ = ["UID", "AFFINITY_AFTER", "build"]

UID = "aifactory-serving"
AFFINITY_AFTER = "Prefix cache hit rate"  # the vLLM panel the session affinity panels follow


def _row(cfg: ObservabilityConfig, engine: EngineRules) -> list[Any]:
    """The engine's panels; for vLLM, with the session affinity panels (per-replica series of vLLM's own metrics,
    read through the config's selectors) after its model-wide prefix cache hit rate."""
    panels = engine.panels()
    if engine is not vllm.RULES:
        return panels
    at = next(i for i, p in enumerate(panels) if p.title == AFFINITY_AFTER) + 1
    return [*panels[:at], *affinity.panels(cfg), *panels[at:]]


def build(cfg: ObservabilityConfig) -> Dashboard:
    engines = [e for e in ENGINE_RULES.values() if e.panels()]  # a row per engine with panels
    return dashboard(
        uid=UID, title="aifactory / Serving",
        description=f"{' and '.join(e.title for e in engines)} serving: KV cache, queues, batching, "
                    "token throughput, prefix caching, session affinity, speculative decoding and latency.",
        tags=["serving", *(e.name for e in engines)],
        variables=[custom_variable("model", "Model", [m.name for m in cfg.models])],
        rows=[(e.title, _row(cfg, e)) for e in engines],
    )
