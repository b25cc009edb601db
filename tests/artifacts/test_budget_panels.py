"""The cost dashboard's token budget row (dashboards/budgets.py) against a real Prometheus, with known answers
(tests/artifacts/panel_answers.py ANSWERED_ELSEWHERE points here).

Data, as the budget service exports it: two service replicas, each reporting the same gauges (both read one store);
tenant `finance` perMinute: 300 of 1,000 spent (700 remaining), perDay: 90,000 of 100,000 (10,000 remaining);
workload `chat` perHour: 0 of 5,000. Refusals: finance perMinute 2/s on one replica and 1/s on the other (3/s in
all), nothing else refused. Used: 0.3, 0.9 and 0; remaining: 700, 10,000, 5,000.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import dashboards
from dashboards import budgets
from dashboards.cost import UID
from infra.monitoring import from_platform
from telemetry.names import BUDGET
from tests.support.prometheus import PrometheusServer, serve_recent
from tests.support.stacks import prod_without_variants

STEP_S = 60
MINUTES = 30
REPLICAS = ("aifactory-budgets-a", "aifactory-budgets-b")
# (scope, name, window) -> (spent, limit)
GAUGES = {("tenant", "finance", "perMinute"): (300.0, 1000.0), ("tenant", "finance", "perDay"): (90000.0, 100000.0),
          ("workload", "chat", "perHour"): (0.0, 5000.0)}
REFUSED_PER_S = {("tenant", "finance", "perMinute"): (2.0, 1.0)}  # per replica


def _openmetrics(times: list[int]) -> str:
    lines: list[str] = []
    for i, pod in enumerate(REPLICAS):
        for (scope, name, window), (spent, limit) in GAUGES.items():
            labels = f'scope="{scope}",name="{name}",window="{window}",pod="{pod}",job="aifactory-budgets"'
            for metric, v in ((BUDGET.SPENT, spent), (BUDGET.LIMIT, limit), (BUDGET.REMAINING, limit - spent)):
                lines.extend(f"{metric}{{{labels}}} {v!r} {t}" for t in times)
            if (scope, name, window) in REFUSED_PER_S:
                per_s = REFUSED_PER_S[(scope, name, window)][i]
                lines.extend(f"{BUDGET.REFUSED}{{{labels}}} {per_s * (t - times[0] + 3600)!r} {t}" for t in times)
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer, int]]:
    with serve_recent(tmp_path_factory.mktemp("budget-panels"), _openmetrics, minutes=MINUTES, step_s=STEP_S) as served:
        yield served


def _query(prom: tuple[PrometheusServer, int], title: str) -> dict[tuple[str, str, str], float]:
    server, at = prom
    exprs = [e for t, e in dashboards.queries(dashboards.build(from_platform(prod_without_variants()))["gpu-cost"])
             if t == title]
    assert len(exprs) == 1, exprs
    return {(r["metric"]["scope"], r["metric"]["name"], r["metric"]["window"]): float(r["value"][1])
            for r in server.query(exprs[0], at)}


def test_the_row_is_on_the_cost_dashboard() -> None:
    assert UID == "aifactory-gpu-cost"
    titles = [t for t, _ in dashboards.queries(dashboards.build(from_platform(prod_without_variants()))["gpu-cost"])]
    assert titles[-3:] == [p.title for p in budgets.panels()]


def test_token_budget_used(prom: tuple[PrometheusServer, int]) -> None:
    assert _query(prom, "Token budget used") == pytest.approx({
        ("tenant", "finance", "perMinute"): 0.3, ("tenant", "finance", "perDay"): 0.9,
        ("workload", "chat", "perHour"): 0.0})


def test_token_budget_remaining(prom: tuple[PrometheusServer, int]) -> None:
    assert _query(prom, "Token budget remaining") == {
        ("tenant", "finance", "perMinute"): 700.0, ("tenant", "finance", "perDay"): 10000.0,
        ("workload", "chat", "perHour"): 5000.0}


def test_requests_refused_by_token_budgets(prom: tuple[PrometheusServer, int]) -> None:
    assert _query(prom, "Requests refused by token budgets") == pytest.approx({("tenant", "finance", "perMinute"): 3.0})
