"""Token budgets (docs/gateway.md, "Token budgets"): the cost dashboard's row and the alerts, from the gauges and
counters the gateway's budget service exports (telemetry.names.BUDGET).

The gauges are read from the shared store at scrape time by every replica of the service, so each replica reports
the same value: panels and alerts take the max over replicas, never the sum.

- TokenBudgetNearlySpent (warning): a budget's window has been at least NEARLY_SPENT of its limit at some point in
  every minute for NEARLY_SPENT_FOR (a day's or an hour's budget once it gets there; a minute's budget only when its
  callers keep reaching it).
- TokenBudgetExhausted (warning): the budget refused requests (429) in the last RATE: its callers are being turned
  away until the window ends.
- TokenBudgetStoreFailing: the service could not reach the store in time for STORE_FOR: critical where a fail-closed
  budget refused requests (503), warning where fail-open budgets admitted them uncounted.
"""

from __future__ import annotations

from dashboards.config import ObservabilityConfig
from dashboards.panels import Q, timeseries
from dashboards.rule_parts import RATE, Alert, runbook
from telemetry.names import BUDGET

__all__ = ["NEARLY_SPENT", "NEARLY_SPENT_FOR", "STORE_FOR", "ROW", "panels", "alerts"]

NEARLY_SPENT = 0.8
NEARLY_SPENT_FOR = "5m"
STORE_FOR = "2m"
ROW = "Token budgets"
BY = f"{BUDGET.L_SCOPE}, {BUDGET.L_NAME}, {BUDGET.L_WINDOW}"
LEGEND = "{{scope}} {{name}} {{window}}"


def _used() -> str:
    return f"max by ({BY}) ({BUDGET.SPENT}) / max by ({BY}) ({BUDGET.LIMIT})"


def panels() -> list:
    """The cost dashboard's token budget row."""
    return [
        timeseries("Token budget used", "Per tenant (or workload) and window: weighted tokens reserved or spent in "
                                        "the current window over its limit (the store's counters; a request "
                                        "reserves its worst case, then settles what it used).", "percentunit",
                   Q(_used(), LEGEND)),
        timeseries("Token budget remaining", "Weighted tokens left in the current window.", "short",
                   Q(f"max by ({BY}) ({BUDGET.REMAINING})", LEGEND)),
        timeseries("Requests refused by token budgets", "Requests per second answered 429 because their "
                                                        "reservation did not fit a budget's window.", "reqps",
                   Q(f"sum by ({BY}) (rate({BUDGET.REFUSED}[{RATE}]))", LEGEND)),
    ]


def alerts(cfg: ObservabilityConfig) -> list[Alert]:
    who = "{{ $labels.scope }} {{ $labels.name }}"
    failures = f"sum by ({BUDGET.L_SCOPE}, {BUDGET.L_NAME}) (increase({BUDGET.STORE_FAILURES}{{outcome=\"%s\"}}" \
               f"[{RATE}])) > 0"
    return [
        Alert("TokenBudgetNearlySpent",
              f"max by ({BY}) (max_over_time({BUDGET.SPENT}[1m])) / max by ({BY}) ({BUDGET.LIMIT}) >= {NEARLY_SPENT}",
              "warning", summary=f"Token budget of {who} is {{{{ $value | humanizePercentage }}}} used "
                                 "({{ $labels.window }})",
              description=f"For {NEARLY_SPENT_FOR} the {{{{ $labels.window }}}} window of {who}'s token budget has "
                          f"reached at least {NEARLY_SPENT:.0%} of its limit: past it, its callers get 429 until the "
                          "window ends.",
              runbook_url=runbook(cfg, "TokenBudgetNearlySpent"), for_=NEARLY_SPENT_FOR),
        Alert("TokenBudgetExhausted", f"sum by ({BY}) (increase({BUDGET.REFUSED}[{RATE}])) > 0", "warning",
              summary=f"Token budget of {who} refuses requests ({{{{ $labels.window }}}})",
              description=f"{{{{ $value }}}} requests of {who} got 429 in the last {RATE}: their "
                          "reservations do not fit the {{ $labels.window }} window's budget.",
              runbook_url=runbook(cfg, "TokenBudgetExhausted")),
        Alert("TokenBudgetStoreFailing", failures % "refused", "critical",
              summary=f"Token budget store unreachable: {who}'s requests are refused (fail-closed)",
              description=f"For {STORE_FOR} the budget service could not reserve in the store in time, and {who}'s "
                          "budget fails closed: {{ $value }} requests got 503 in the last "
                          f"{RATE}.",
              runbook_url=runbook(cfg, "TokenBudgetStoreFailing"), for_=STORE_FOR),
        Alert("TokenBudgetStoreFailing", failures % "admitted", "warning",
              summary=f"Token budget store unreachable: {who}'s requests are served uncounted (fail-open)",
              description=f"For {STORE_FOR} the budget service could not reserve in the store in time: "
                          f"{{{{ $value }}}} requests of {who} were admitted without counting them "
                          f"in the last {RATE} (onStoreFailure: open); its budget is not enforced.",
              runbook_url=runbook(cfg, "TokenBudgetStoreFailing"), for_=STORE_FOR),
    ]
