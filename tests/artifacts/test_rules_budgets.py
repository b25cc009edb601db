"""The token budget alerts (dashboards/budgets.py) under the real promtool, each the minute before it fires and the
minute it does, on the series the budget service exports (telemetry.names.BUDGET): two service replicas reporting the
same store-read gauges, counters rising at constant rates from minute 0. budget_cases() is also part of
tests/artifacts/test_rules.py's every-alert test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import dashboards
from dashboards.budgets import (
    CLUSTER_OVERFLOWS,
    EXHAUSTED_FOR,
    NEARLY_SPENT_FOR,
    STORE_FOR,
    STORE_MEMORY_FOR,
    STORE_METRICS_JOB,
    USAGE_UNREPORTED_FOR,
    ext_proc_metric,
)
from dashboards.config import ObservabilityConfig
from dashboards.rules import alerts, groups
from infra.monitoring import from_platform
from infra.synth import load_stack
from telemetry.names import BUDGET, KSM
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
    # a minute's window at 85% in every minute (a tenant that runs at its per-minute cap): no warning; its refusals
    # are TokenBudgetExhausted's to count
    per_minute = {**finance, BUDGET.L_WINDOW: "perMinute"}
    out.append(Case("TokenBudgetNearlySpent", {**_gauges(BUDGET.SPENT, per_minute, "850x30"),
                                               **_gauges(BUDGET.LIMIT, per_minute, "1000x30")},
                    [(_minutes(NEARLY_SPENT_FOR) + 1, []), (20, [])]))
    # 100 requests a minute counted against finance's budget, over both replicas; 5 of them refused by its day's
    # window on one replica (5%, past 1%) from minute 1: fires once EXHAUSTED_FOR has passed
    requests = {_sel(BUDGET.REQUESTS, {BUDGET.L_SCOPE: "tenant", BUDGET.L_NAME: "finance", "pod": pod,
                                       "job": "aifactory-budgets"}): "0+50x40" for pod in REPLICAS}

    def refused(values: str) -> dict[str, str]:
        return {**requests, _sel(BUDGET.REFUSED, {**finance, "pod": REPLICAS[0], "job": "aifactory-budgets"}): values}
    out.append(Case("TokenBudgetExhausted", refused("0+5x40"),
                    _around(1, [fired("TokenBudgetExhausted", "warning", finance, 0.05, EXHAUSTED_FOR)])))
    # one 429 (minute 3); a tenant that touches its cap now and then (a burst of 30 refused in minute 6 and again in
    # minute 25: 6% of the requests over RATE, for RATE at most); one that is refused 0.5% of the time: all silent
    for values in ("0x2 1x37", "0x5 30x18 60x15", "0+0.5x40"):
        out.append(Case("TokenBudgetExhausted", refused(values), [(t, []) for t in (4, 7, 11, 16, 26, 31, 38)]))
    # a workload whose answers come without usage: two a minute from minute 1, fires once USAGE_UNREPORTED_FOR has
    # passed (10 in the last RATE); one such answer (minute 3) does not
    chat = {BUDGET.L_WORKLOAD: "chat"}
    unreported = _sel(BUDGET.SETTLED_WITHOUT_USAGE, {**chat, "pod": REPLICAS[1], "job": "aifactory-budgets"})
    out.append(Case("TokenBudgetUsageUnreported", {unreported: "0+2x30"}, _around(
        1, [fired("TokenBudgetUsageUnreported", "warning", chat, 10.0, USAGE_UNREPORTED_FOR)])))
    out.append(Case("TokenBudgetUsageUnreported", {unreported: "0x2 1x27"}, [(t, []) for t in (4, 9, 14)]))
    who = {BUDGET.L_SCOPE: "tenant", BUDGET.L_NAME: "finance"}
    # 100 reservations a minute over both replicas (their check histogram's count)
    checks = {_sel(f"{BUDGET.CHECK_SECONDS}_count", {"pod": pod, "job": "aifactory-budgets"}): "0+50x30"
              for pod in REPLICAS}
    for outcome, severity in (("refused", "critical"), ("admitted", "warning")):
        # 3 of every 100 failed (3%, past the 1% threshold) from minute 1
        failing = {_sel(BUDGET.STORE_FAILURES, {**who, BUDGET.L_OUTCOME: outcome, "pod": REPLICAS[1]}): "0+3x30",
                   **checks}
        out.append(Case("TokenBudgetStoreFailing", failing,
                        _around(1, [fired("TokenBudgetStoreFailing", severity, who, 0.03, STORE_FOR)])))
    # one in 200 (0.5%): a slow answer now and then in a busy service pages no one
    out.append(Case("TokenBudgetStoreFailing", {_sel(BUDGET.STORE_FAILURES, {
        **who, BUDGET.L_OUTCOME: "refused", "pod": REPLICAS[1]}): "0+0.5x30", **checks},
        [(_minutes(STORE_FOR) + 2, [])]))
    # settlements never written, on one replica: two a minute given up after their retries from minute 1 (both
    # reasons exported from 0 by the service); none dropped
    settlements = {_sel(BUDGET.SETTLEMENTS_FAILED, {BUDGET.L_REASON: reason, "pod": REPLICAS[0],
                                                    "job": "aifactory-budgets"}): values
                   for reason, values in ((BUDGET.SETTLE_RETRIES, "0+2x30"), (BUDGET.SETTLE_DROPPED, "0x30"))}
    out.append(Case("TokenBudgetSettlementsFailing", settlements, _around(1, [fired(
        "TokenBudgetSettlementsFailing", "warning", {BUDGET.L_REASON: BUDGET.SETTLE_RETRIES}, 2.0, "0m")])))
    out.append(Case("TokenBudgetSettlementsFailing", {
        _sel(BUDGET.SETTLEMENTS_FAILED, {BUDGET.L_REASON: r, "pod": REPLICAS[0], "job": "aifactory-budgets"}): "3x30"
        for r in (BUDGET.SETTLE_RETRIES, BUDGET.SETTLE_DROPPED)}, [(2, [])]))
    # Envoy's ext_proc stats of the gateway's budget filters (each gateway pod its own): 200 admission streams a
    # minute, half of them fail-closed tenants'; the fail-closed filter's all fail (the service is gone), or time out
    gateway = {"envoy_http_conn_manager_prefix": "gateway", "job": "aifactory-gateway", "pod": "gw-a"}
    started = {_sel(ext_proc_metric(p, "streams_started"), gateway): "0+100x30"
               for p in (BUDGET.ENVOY_ADMISSION, BUDGET.ENVOY_ADMISSION_CLOSED, BUDGET.ENVOY_METER)}
    for stat in ("streams_failed", "message_timeouts"):
        down = {**started, _sel(ext_proc_metric(BUDGET.ENVOY_ADMISSION_CLOSED, stat), gateway): "0+100x30"}
        out.append(Case("TokenBudgetServiceUnreachable", down, _around(
            1, [fired("TokenBudgetServiceUnreachable", "critical", {}, 0.5, STORE_FOR)])))
    metering = {**started, _sel(ext_proc_metric(BUDGET.ENVOY_METER, "streams_failed"), gateway): "0+10x30"}
    out.append(Case("TokenBudgetMeteringFailing", metering, _around(
        1, [fired("TokenBudgetMeteringFailing", "warning", {}, 0.1, STORE_FOR)])))
    meter_failed = _sel(ext_proc_metric(BUDGET.ENVOY_METER, "streams_failed"), gateway)
    out.append(Case("TokenBudgetMeteringFailing", {**started, meter_failed: "0+0.5x30"},
                    [(_minutes(STORE_FOR) + 2, [])]))
    # a stack without fail-closed tenants has no such filter: one failure in 200 of the other's streams pages no one
    out.append(Case("TokenBudgetServiceUnreachable", {
        _sel(ext_proc_metric(BUDGET.ENVOY_ADMISSION, "streams_started"), gateway): "0+200x30",
        _sel(ext_proc_metric(BUDGET.ENVOY_ADMISSION, "streams_failed"), gateway): "0+1x30"},
        [(_minutes(STORE_FOR) + 2, [])]))
    # the gateway's own breakers on the service's cluster refuse two streams a minute (one gateway pod) from minute 1:
    # fires at once (the filters' stream stats would blame the service too); the models' clusters overflowing, or a
    # count that has stopped rising, page no one here
    def overflow(cluster: str, values: str, metric: str = CLUSTER_OVERFLOWS[0]) -> dict[str, str]:
        return {_sel(metric, {**gateway, "envoy_cluster_name": cluster}): values}
    for metric in CLUSTER_OVERFLOWS:  # each breaker's counter alone (the requests', the pending requests')
        out.append(Case("TokenBudgetServiceOverflowing", overflow("aifactory_budgets", "0+2x30", metric), _around(
            1, [fired("TokenBudgetServiceOverflowing", "critical", {}, 2.0, "0m")])))
    out.append(Case("TokenBudgetServiceOverflowing", {**overflow("chat", "0+2x30"),
                                                      **overflow("aifactory_budgets", "3x30")}, [(2, []), (10, [])]))
    # the store's primary (kube-state-metrics' readiness of the Valkey StatefulSet's pod 0): not ready from minute 0,
    # fires once STORE_FOR has passed; a ready one (and a replica that is not) pages no one
    ksm = {"namespace": "aifactory-gateway", "job": "kube-state-metrics", "uid": "u0"}

    def ready(pod: str, value: str) -> dict[str, str]:
        return {_sel(KSM.POD_READY, {**ksm, "pod": pod, "condition": "true"}): value}
    out.append(Case("TokenBudgetStorePrimaryDown", ready(BUDGET.STORE_PRIMARY_POD, "0x30"), _around(
        0, [fired("TokenBudgetStorePrimaryDown", "critical", {"namespace": "aifactory-gateway"}, 0.0, STORE_FOR)])))
    out.append(Case("TokenBudgetStorePrimaryDown", {**ready(BUDGET.STORE_PRIMARY_POD, "1x30"),
                                                    **ready(f"{BUDGET.STORE_RELEASE}-1", "0x30")},
                    [(_minutes(STORE_FOR) + 1, [])]))
    # storeReplicas 0: the chart's Deployment of one pod (<release>-<pod-template-hash>-<suffix>) not ready from
    # minute 0 fires the same way; mid-rollout (the old pod ready, the new one not yet) and the budget service's own
    # pods (aifactory-budgets-<hash>-<suffix>) page no one
    deployment_pod = f"{BUDGET.STORE_RELEASE}-5d8f7c9b4-x2k9p"
    out.append(Case("TokenBudgetStorePrimaryDown", ready(deployment_pod, "0x30"), _around(
        0, [fired("TokenBudgetStorePrimaryDown", "critical", {"namespace": "aifactory-gateway"}, 0.0, STORE_FOR)])))
    out.append(Case("TokenBudgetStorePrimaryDown", {**ready(deployment_pod, "1x30"),
                                                    **ready(f"{BUDGET.STORE_RELEASE}-6b7d9f5c8-q4zt7", "0x30"),
                                                    **ready("aifactory-budgets-6f9c4d7b8-bx2nm", "0x30")},
                    [(_minutes(STORE_FOR) + 1, [])]))
    # the sweep released 2 + 1 of finance's reservations a minute on two service replicas from minute 1: fires at
    # once; a count that stopped rising (a pod lost an hour ago) pages no one
    tenant = {BUDGET.L_SCOPE: "tenant", BUDGET.L_NAME: "finance"}
    swept = {_sel(BUDGET.SWEPT, {**tenant, "pod": pod, "job": "aifactory-budgets"}): values
             for pod, values in zip(REPLICAS, ("0+2x30", "0+1x30"), strict=True)}
    out.append(Case("TokenBudgetReservationsSwept", swept, _around(1, [fired(
        "TokenBudgetReservationsSwept", "warning", tenant, 3.0, "0m")])))
    out.append(Case("TokenBudgetReservationsSwept", {
        _sel(BUDGET.SWEPT, {**tenant, "pod": REPLICAS[0], "job": "aifactory-budgets"}): "4x30"}, [(2, []), (10, [])]))
    # the store's exporter (oliver006/redis_exporter@v1.79.0: redis_memory_used_bytes, redis_memory_max_bytes,
    # redis_aof_last_write_status): 700 of 768 MiB used on the primary (91%) from minute 0, fires once
    # STORE_MEMORY_FOR has passed; the replica at 600 MiB (78%), and a pod reporting maxmemory 0 (unbounded) at any
    # use, page no one
    mib = 2**20
    primary = {"namespace": "aifactory-gateway", "pod": BUDGET.STORE_PRIMARY_POD}
    replica = {**primary, "pod": f"{BUDGET.STORE_RELEASE}-1"}

    def store(name: str, pod: Labels, values: str) -> dict[str, str]:
        return {_sel(name, {**pod, "job": STORE_METRICS_JOB, "instance": f"{pod['pod']}:9121"}): values}

    memory = {**store("redis_memory_used_bytes", primary, f"{700 * mib}x30"),
              **store("redis_memory_max_bytes", primary, f"{768 * mib}x30"),
              **store("redis_memory_used_bytes", replica, f"{600 * mib}x30"),
              **store("redis_memory_max_bytes", replica, f"{768 * mib}x30")}
    out.append(Case("TokenBudgetStoreMemoryHigh", memory, _around(
        0, [fired("TokenBudgetStoreMemoryHigh", "warning", primary, 700 / 768, STORE_MEMORY_FOR)])))
    out.append(Case("TokenBudgetStoreMemoryHigh", {**store("redis_memory_used_bytes", primary, f"{700 * mib}x30"),
                                                   **store("redis_memory_max_bytes", primary, "0x30")},
                    [(_minutes(STORE_MEMORY_FOR) + 1, [])]))
    # the primary's last append-only write failed (0) from minute 1, the replica's did not (1): fires once STORE_FOR
    # has passed; a failure that clears within it pages no one
    aof = {**store("redis_aof_last_write_status", primary, "1 0x30"),
           **store("redis_aof_last_write_status", replica, "1x30")}
    out.append(Case("TokenBudgetStoreWritesFailing", aof, _around(
        1, [fired("TokenBudgetStoreWritesFailing", "critical", primary, 0.0, STORE_FOR)])))
    out.append(Case("TokenBudgetStoreWritesFailing", store("redis_aof_last_write_status", primary, "1 0 1x30"),
                    [(t, []) for t in (2, 3, 4, 10)]))
    return out


def test_every_budget_alert_just_before_and_just_after_it_fires(prod: ObservabilityConfig,  # noqa: F811
                                                                tmp_path: Path) -> None:
    cases = budget_cases(prod)
    mine = {(a.alert, a.severity) for a in alerts(prod) if a.alert.startswith("TokenBudget")}
    assert mine == {("TokenBudgetNearlySpent", "warning"), ("TokenBudgetExhausted", "warning"),
                    ("TokenBudgetStoreFailing", "critical"), ("TokenBudgetStoreFailing", "warning"),
                    ("TokenBudgetServiceUnreachable", "critical"), ("TokenBudgetMeteringFailing", "warning"),
                    ("TokenBudgetServiceOverflowing", "critical"),
                    ("TokenBudgetStorePrimaryDown", "critical"), ("TokenBudgetSettlementsFailing", "warning"),
                    ("TokenBudgetUsageUnreported", "warning"), ("TokenBudgetStoreMemoryHigh", "warning"),
                    ("TokenBudgetStoreWritesFailing", "critical"), ("TokenBudgetReservationsSwept", "warning"),
                    # its cases are GatewayDrainCutsRequests' sibling's: tests/artifacts/test_gateway_drain_alert.py
                    ("TokenBudgetDrainCutsStreams", "warning")}
    annotations = {(a.alert, a.severity, None): a.to_dict()["annotations"] for a in alerts(prod)}
    _run_promtool_tests(prod, tmp_path, ("1m", [_promtool_test(c, annotations) for c in cases]))


@pytest.mark.parametrize(("stack", "budgeted"), [("dev", False), ("prod", True)])
def test_the_budget_alerts_and_the_cost_dashboards_row_exist_only_with_a_budget(stack: str, budgeted: bool) -> None:
    """dev declares no token budget (no budget service is deployed): no budget rule group, alert or panel, whose
    queries would read series nothing exports; prod declares its tenants' budgets: all of them."""
    cfg = from_platform(load_stack(stack))
    assert cfg.token_budgets is budgeted
    assert [g.name for g in groups(cfg) if "budget" in g.name] == (["aifactory-token-budget-alerts"] if budgeted
                                                                   else [])
    assert sorted({a.alert for a in alerts(cfg) if "Budget" in a.alert and "Workflow" not in a.alert}) == (
        ["TokenBudgetDrainCutsStreams", "TokenBudgetExhausted", "TokenBudgetMeteringFailing", "TokenBudgetNearlySpent",
         "TokenBudgetReservationsSwept", "TokenBudgetServiceOverflowing", "TokenBudgetServiceUnreachable",
         "TokenBudgetSettlementsFailing",
         "TokenBudgetStoreFailing", "TokenBudgetStoreMemoryHigh", "TokenBudgetStorePrimaryDown",
         "TokenBudgetStoreWritesFailing", "TokenBudgetUsageUnreported"] if budgeted else [])
    doc = json.loads(dashboards.dashboard_json(dashboards.build(cfg)["gpu-cost"]))
    assert [p["title"] for p in doc["panels"] if p["type"] == "row"] == ["Spend", "Unit costs",
                                                                         *(["Token budgets"] if budgeted else [])]
    budget_panels = [p["title"] for p in doc["panels"] if "token budget" in p["title"].lower() and p["type"] != "row"]
    assert budget_panels == (["Token budget used", "Token budget remaining", "Requests refused by token budgets"]
                             if budgeted else [])
