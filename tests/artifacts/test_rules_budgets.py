"""The token budget alerts (dashboards/budgets.py) under the real promtool, each the minute before it fires and the
minute it does, on the series the budget service exports (telemetry.names.BUDGET): two service replicas reporting the
same store-read gauges, counters rising at constant rates from minute 0. budget_cases() is also part of
tests/artifacts/test_rules.py's every-alert test."""

from __future__ import annotations

from pathlib import Path

from dashboards.budgets import NEARLY_SPENT_FOR, STORE_FOR
from dashboards.config import ObservabilityConfig
from dashboards.rules import alerts
from telemetry.names import BUDGET
from tests.artifacts.test_rules import Case, Labels, _around, _minutes, _promtool_test, _run_promtool_tests, _sel
from tests.artifacts.test_rules import prod as prod  # noqa: F401 (the module fixture)

REPLICAS = ("aifactory-budgets-6f9c-a", "aifactory-budgets-6f9c-b")


def _gauges(name: str, labels: Labels, values: str) -> dict[str, str]:
    """One gauge as every replica of the service reports it (each reads the same store)."""
    return {_sel(name, {**labels, "pod": pod, "job": "aifactory-budgets"}): values for pod in REPLICAS}


def budget_cases(cfg: ObservabilityConfig) -> list[Case]:
    finance = {BUDGET.L_SCOPE: "tenant", BUDGET.L_NAME: "finance", BUDGET.L_WINDOW: "perDay"}
    out: list[Case] = []

    def fired(alert: str, severity: str, labels: Labels, value: float, for_: str) -> tuple[Labels, float, int]:
        return ({**labels, "alertname": alert, "severity": severity}, value, _minutes(for_))

    # 850 of 1,000 spent, on both replicas: 85% from minute 0, fires once NEARLY_SPENT_FOR has passed; 790: never
    limit = _gauges(BUDGET.LIMIT, finance, "1000x30")
    out.append(Case("TokenBudgetNearlySpent", {**_gauges(BUDGET.SPENT, finance, "850x30"), **limit},
                    _around(0, [fired("TokenBudgetNearlySpent", "warning", finance, 0.85, NEARLY_SPENT_FOR)])))
    out.append(Case("TokenBudgetNearlySpent", {**_gauges(BUDGET.SPENT, finance, "790x30"), **limit},
                    [(_minutes(NEARLY_SPENT_FOR) + 1, [])]))
    # two refusals a minute on one replica: from minute 1 (a counter from 0: increase is exactly 2 then)
    refused = {_sel(BUDGET.REFUSED, {**finance, "pod": REPLICAS[0]}): "0+2x30"}
    out.append(Case("TokenBudgetExhausted", refused,
                    _around(1, [fired("TokenBudgetExhausted", "warning", finance, 2.0, "0m")])))
    out.append(Case("TokenBudgetExhausted", {_sel(BUDGET.REFUSED, {**finance, "pod": REPLICAS[0]}): "5x30"},
                    [(2, [])]))
    who = {BUDGET.L_SCOPE: "tenant", BUDGET.L_NAME: "finance"}
    for outcome, severity in (("refused", "critical"), ("admitted", "warning")):
        failing = {_sel(BUDGET.STORE_FAILURES, {**who, BUDGET.L_OUTCOME: outcome, "pod": REPLICAS[1]}): "0+3x30"}
        # from minute 1 the 5-minute increase is 3 a minute so far: 3, 6, 9 ... capped at 15 once the window is full
        value = 3.0 * (1 + _minutes(STORE_FOR))
        out.append(Case("TokenBudgetStoreFailing", failing,
                        _around(1, [fired("TokenBudgetStoreFailing", severity, who, value, STORE_FOR)])))
    # a store that failed once, long ago: the counter stays where it was
    out.append(Case("TokenBudgetStoreFailing", {_sel(BUDGET.STORE_FAILURES, {
        **who, BUDGET.L_OUTCOME: "admitted", "pod": REPLICAS[1]}): "4x30"}, [(_minutes(STORE_FOR) + 2, [])]))
    return out


def test_every_budget_alert_just_before_and_just_after_it_fires(prod: ObservabilityConfig,  # noqa: F811
                                                                tmp_path: Path) -> None:
    cases = budget_cases(prod)
    mine = {(a.alert, a.severity) for a in alerts(prod) if a.alert.startswith("TokenBudget")}
    assert mine == {("TokenBudgetNearlySpent", "warning"), ("TokenBudgetExhausted", "warning"),
                    ("TokenBudgetStoreFailing", "critical"), ("TokenBudgetStoreFailing", "warning")}
    annotations = {(a.alert, a.severity, None): a.to_dict()["annotations"] for a in alerts(prod)}
    _run_promtool_tests(prod, tmp_path, ("1m", [_promtool_test(c, annotations) for c in cases]))
