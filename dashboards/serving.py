"""Serving engines: a row per engine (dashboards.engines), e.g. vLLM's KV cache, queues, batch, tokens, prefix cache
and speculative decoding."""

from __future__ import annotations

from grafanalib.core import Dashboard

from dashboards.config import ObservabilityConfig
from dashboards.engines import ENGINE_RULES
from dashboards.panels import custom_variable, dashboard

__all__ = ["UID", "build"]

UID = "aifactory-serving"


def build(cfg: ObservabilityConfig) -> Dashboard:
    engines = [e for e in ENGINE_RULES.values() if e.panels()]  # a row per engine with panels
    return dashboard(
        uid=UID, title="aifactory / Serving",
        description=f"{' and '.join(e.title for e in engines)} serving: KV cache, queues, batching, "
                    "token throughput, prefix caching, speculative decoding and latency.",
        tags=["serving", *(e.name for e in engines)],
        variables=[custom_variable("model", "Model", [m.name for m in cfg.models])],
        rows=[(e.title, e.panels()) for e in engines],
    )
