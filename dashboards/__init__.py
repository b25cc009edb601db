"""dashboards: grafanalib dashboards and Prometheus rules built from a stack's config (dashboards.config.StackView).

    import dashboards
    boards = dashboards.build(cfg)                       # {"compound-latency": Dashboard, ...}
    dashboards.queries(boards["compound-latency"])       # [(panel title, PromQL), ...]
    dashboards.prometheus_rules(cfg)                              # {"groups": [...]} (a Prometheus rules file)

Importing the package is cheap: grafanalib and the builders load on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BOARDS", "build", "prometheus_rules", "queries", "dashboard_json"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from dashboards import core

        return getattr(core, name)
    raise AttributeError(f"module 'dashboards' has no attribute {name!r}")
