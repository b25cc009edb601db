"""Panel and dashboard helpers: what every aifactory dashboard sets explicitly for Grafana 10-12.

grafanalib 0.7.1 defaults are from Grafana 8 (schemaVersion 12, no datasource variable, no units).
Every panel made here has a unit, a description and the `${datasource}` variable; every dashboard
has a stable uid, tags, a datasource variable and a link menu to the other aifactory dashboards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grafanalib.core import (
    Dashboard,
    DashboardLink,
    GridPos,
    Logs,
    RowPanel,
    Stat,
    Target,
    Template,
    Templating,
    Time,
    TimeSeries,
)

__all__ = [
    "SCHEMA_VERSION",
    "TAG",
    "GRID_WIDTH",
    "PROMETHEUS",
    "LOKI",
    "Q",
    "Link",
    "timeseries",
    "stat",
    "logs",
    "datasource_variable",
    "custom_variable",
    "query_variable",
    "textbox_variable",
    "dashboard",
]

SCHEMA_VERSION = 39  # Grafana 10.4+; Grafana 11/12 migrate it forward on load
TAG = "aifactory"  # every kit dashboard carries it; the link menu lists dashboards by it
GRID_WIDTH = 24
PANEL_HEIGHT = 8
PROMETHEUS = {"type": "prometheus", "uid": "${datasource}"}
LOKI = {"type": "loki", "uid": "${loki}"}


@dataclass(frozen=True, slots=True)
class Q:
    """One PromQL target: expression and legend."""

    expr: str
    legend: str = ""


@dataclass(frozen=True, slots=True)
class Link:
    """A data link on every series of a panel (Grafana field data link)."""

    title: str
    url: str

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "url": self.url, "targetBlank": True}


def _targets(queries: Sequence[Q], *, instant: bool = False) -> list[Target]:
    return [Target(expr=q.expr, legendFormat=q.legend, refId=chr(ord("A") + i), datasource=PROMETHEUS,
                   instant=instant, intervalFactor=1, step=None)
            for i, q in enumerate(queries)]


def _field_links(links: Sequence[Link]) -> dict[str, Any] | None:
    if not links:
        return None
    return {"fieldConfig": {"defaults": {"links": [link.to_json() for link in links]}}}


def timeseries(title: str, description: str, unit: str, *queries: Q, width: int = 12, stacked: bool = False,
               links: Sequence[Link] = ()) -> TimeSeries:
    return TimeSeries(
        title=title, description=description, unit=unit, dataSource=PROMETHEUS, targets=_targets(queries),
        gridPos=GridPos(h=PANEL_HEIGHT, w=width, x=0, y=0), legendDisplayMode="table", legendPlacement="right",
        legendCalcs=["lastNotNull", "max"], tooltipMode="multi", fillOpacity=20 if stacked else 0,
        stacking={"mode": "normal", "group": "A"} if stacked else {"mode": "none"},
        extraJson=_field_links(links),
    )


def stat(title: str, description: str, unit: str, *queries: Q, width: int = 6, decimals: int | None = 2) -> Stat:
    return Stat(
        title=title, description=description, format=unit, dataSource=PROMETHEUS,
        targets=_targets(queries, instant=True), gridPos=GridPos(h=4, w=width, x=0, y=0), reduceCalc="lastNotNull",
        decimals=decimals, graphMode="none", textMode="value_and_name" if len(queries) > 1 else "auto",
    )


def logs(title: str, description: str, expr: str, *, width: int = GRID_WIDTH) -> Logs:
    """A Loki logs panel; its `unit` is `none` (log lines have none, but every panel states one)."""
    return Logs(
        title=title, description=description, dataSource=LOKI,
        targets=[{"expr": expr, "refId": "A", "datasource": LOKI, "queryType": "range"}],
        gridPos=GridPos(h=10, w=width, x=0, y=0), showTime=True, wrapLogMessages=True, enableLogDetails=True,
        extraJson={"fieldConfig": {"defaults": {"unit": "none"}}},
    )


def datasource_variable(name: str, plugin: str, label: str) -> Template:
    return Template(name=name, query=plugin, type="datasource", label=label, includeAll=False, multi=False,
                    default="default" if plugin == "prometheus" else None)


def custom_variable(name: str, label: str, values: Sequence[str]) -> Template:
    """A multi-select variable whose values come from the stack config (pools, models, tenants)."""
    return Template(name=name, label=label, type="custom", query=",".join(values), includeAll=True, multi=True,
                    allValue=".*", default="All")


def query_variable(name: str, label: str, query: str) -> Template:
    """A multi-select variable whose values Prometheus reports (`label_values(...)`), opening on All."""
    return Template(name=name, label=label, query=query, dataSource=PROMETHEUS, includeAll=True, multi=True,
                    allValue=".*", default="All", refresh=2)


def textbox_variable(name: str, label: str, default: str) -> Template:
    return Template(name=name, label=label, type="textbox", query=default, default=default, includeAll=False,
                    multi=False)


def _layout(rows: Sequence[tuple[str, Sequence[Any]]]) -> list[Any]:
    """Rows of panels laid out left to right on Grafana's 24-column grid."""
    out: list[Any] = []
    y = 0
    for title, panels in rows:
        out.append(RowPanel(title=title, gridPos=GridPos(h=1, w=GRID_WIDTH, x=0, y=y)))
        y += 1
        x, row_h = 0, 0
        for p in panels:
            w, h = p.gridPos.w, p.gridPos.h
            if x + w > GRID_WIDTH:
                x, y, row_h = 0, y + row_h, 0
            p.gridPos = GridPos(h=h, w=w, x=x, y=y)
            x, row_h = x + w, max(row_h, h)
        y += row_h
        out.extend(panels)
    return out


def dashboard(*, uid: str, title: str, description: str, tags: Sequence[str], variables: Sequence[Template],
              rows: Sequence[tuple[str, Sequence[Any]]]) -> Dashboard:
    """A dashboard with the datasource variable first, the aifactory link menu and laid-out rows."""
    links = [DashboardLink(title="aifactory dashboards", type="dashboards", tags=[TAG], asDropdown=True,
                           includeVars=False, keepTime=True)]
    return Dashboard(
        uid=uid, title=title, description=description, tags=[TAG, *tags], links=links, editable=True,
        schemaVersion=SCHEMA_VERSION, timezone="browser", refresh="1m", graphTooltip=1,
        time=Time("now-6h", "now"),
        templating=Templating([datasource_variable("datasource", "prometheus", "Prometheus"), *variables]),
        panels=_layout(rows),
    ).auto_panel_ids()
