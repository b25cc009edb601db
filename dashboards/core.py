"""Entry points: every dashboard and the rules of one stack, each panel's PromQL, and the JSON Grafana loads."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from grafanalib._gen import DashboardEncoder
from grafanalib.core import Dashboard

from dashboards import compound, cost, fleet, mesh, serving
from dashboards.config import ObservabilityConfig
from dashboards.panels import PROMETHEUS
from dashboards.promql import substitute
from dashboards.rules import rules_document

__all__ = ["BOARDS", "build", "prometheus_rules", "queries", "default_variables", "dashboard_json"]

# key -> builder; the key names the file (dashboards/<key>.json) and the ConfigMap.
BOARDS: Mapping[str, Callable[[ObservabilityConfig], Dashboard]] = {
    "compound-latency": compound.build,
    "gpu-cost": cost.build,
    "gpu-fleet": fleet.build,
    "serving": serving.build,
    "mesh": mesh.build,
}


def build(cfg: ObservabilityConfig) -> dict[str, Dashboard]:
    """Every dashboard of a stack, by key."""
    return {key: make(cfg) for key, make in BOARDS.items()}


def prometheus_rules(cfg: ObservabilityConfig) -> dict[str, Any]:
    """The stack's recording and alerting rules as a Prometheus rules file."""
    return rules_document(cfg)


def default_variables(dashboard: Dashboard) -> dict[str, str]:
    """Each template variable's value for queries(): All (`.*`), or its default."""
    values = {}
    for t in dashboard.templating.list:
        if t.includeAll:
            values[t.name] = ".*"
        else:
            values[t.name] = t.default or ""
    return values


def _panels(dashboard: Dashboard) -> list[Any]:
    return [p for p in dashboard._iter_panels() if getattr(p, "targets", None)]


def queries(dashboard: Dashboard, variables: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every Prometheus target, template variables substituted.

    `variables` overrides the defaults (every multi-value variable on All); Grafana's own variables
    ($__rate_interval, $__range) get the values in dashboards.promql.BUILTIN_VARIABLES.
    """
    values = {**default_variables(dashboard), **(variables or {})}
    out = []
    for panel in _panels(dashboard):
        if panel.dataSource != PROMETHEUS:
            continue
        for target in panel.targets:
            out.append((panel.title, substitute(target.expr, values)))
    return out


def dashboard_json(dashboard: Dashboard) -> str:
    """The dashboard as Grafana imports it: deterministic JSON (sorted keys, no id)."""
    data = json.loads(json.dumps(dashboard.to_json_data(), cls=DashboardEncoder))
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
