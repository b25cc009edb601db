"""GatewayDrainCutsRequests under the real promtool, on the prod rules: a terminating gateway pod with requests in
flight near its deadline fires just as less than DRAIN_CUT_LEAD_SECONDS are left (`drain_cut_cases`, also run by
tests/artifacts/test_rules.py's test_promtool_test_rules_every_alert_just_before_and_just_after_it_fires), and the
look-alikes stay silent.

The series are written from what the exporters emit (tests.support.exporter_facts), never from telemetry/names.py:
kube-state-metrics v2.18.0's `kube_pod_deletion_timestamp` {namespace, pod, uid}, exported only once the pod has a
deletionTimestamp, its value that time in Unix seconds (internal/store/pod.go); the API server sets it on a graceful
delete to the request's time plus the grace period (kubernetes/kubernetes@v1.34.0 staging/src/k8s.io/apiserver/pkg/
registry/rest/delete.go `BeforeDelete`; the pod's terminationGracePeriodSeconds by default: pkg/registry/core/pod/
strategy.go `CheckGracefulDelete`), the moment the kubelet kills the pod. Envoy v1.40.0's
`envoy_http_downstream_rq_active` {envoy_http_conn_manager_prefix}, one series per connection manager of a pod: the
gateway listener's ("gateway"), the stats listener's ("stats": the scrape itself is a request in flight there) and
the admin's; Prometheus labels each with the pod's namespace, pod and job.
"""

from __future__ import annotations

from pathlib import Path

import prometheus_client as prom
import pytest
import redis.asyncio as aredis

from components.k8s.gateway.budgets.service import BudgetConfig, Processor
from components.k8s.gateway.budgets.store import Store
from components.k8s.gateway.envoy.budgets import service_config
from dashboards.config import ObservabilityConfig
from dashboards.gateway_alerts import DRAIN_CUT_LEAD_SECONDS, alerts
from infra.monitoring import from_platform
from infra.synth import load_stack
from telemetry.names import BUDGET
from tests.artifacts.test_gateway_overload import dropped_by_stats_matcher
from tests.artifacts.test_rules import GATEWAY_PODS, Case, Labels, _around, _promtool_test, _run_promtool_tests, _sel
from tests.support import exporter_facts as facts
from tests.support.stacks import stack_config

ALERT = "GatewayDrainCutsRequests"
# Deleted at minute 2 (120 s after promtool's epoch) with a grace of 700 s: killed at 820 s. Less than 120 s are left
# from minute 12 (100 s), not at minute 11 (160 s).
DELETED_AT, GRACE = 120, 700
DEADLINE = DELETED_AT + GRACE
FIRES_AT = 12
OTHER_NAMESPACE = "tenant-a"


def _in_flight(pod: Labels, values: str, prefix: str = "gateway") -> dict[str, str]:
    """A scraped gateway pod's requests in flight on one connection manager."""
    return {_sel(facts.ENVOY_RQ_ACTIVE.name, {**pod, facts.ENVOY_RQ_ACTIVE.labels[0]: prefix}): values}


def _deleted(pod: Labels, deadline: int = DEADLINE, namespace: str | None = None) -> dict[str, str]:
    """kube-state-metrics' deletion timestamp of a pod deleted at minute 2 (absent before)."""
    who = {"namespace": namespace or pod["namespace"], "pod": pod["pod"], "uid": f"uid-{pod['pod']}"}
    return {_sel(facts.POD_DELETED.name, who): f"_ _ {deadline}x30"}


def drain_cut_cases(cfg: ObservabilityConfig) -> list[Case]:
    """gateway-0 deleted at minute 2, killed at DEADLINE, 3 requests in flight on the gateway listener (1 on its stats
    listener: the scrape); gateway-1 running with 2 in flight. Fires for gateway-0 with 3 from FIRES_AT, not the
    minute before, and stops once its requests have ended. Silent: the same pod idle on the gateway listener (the
    scrape's request on the stats listener is not one), a pod not terminating, a pod far from its deadline, and a
    pod of the same name terminating in another namespace."""
    assert [a.for_ for a in alerts(cfg) if a.alert == ALERT] == ["0m"]
    assert (DEADLINE - FIRES_AT * 60, DEADLINE - (FIRES_AT - 1) * 60) == (100, 160)
    assert (DEADLINE - FIRES_AT * 60) < DRAIN_CUT_LEAD_SECONDS <= DEADLINE - (FIRES_AT - 1) * 60
    pod0, pod1 = GATEWAY_PODS
    running = _in_flight(pod1, "2x30") | _in_flight(pod0, "1x30", "stats") | _in_flight(pod1, "1x30", "stats")
    fired = {"namespace": pod0["namespace"], "pod": pod0["pod"], "alertname": ALERT, "severity": "warning"}
    quiet = [(FIRES_AT, []), (FIRES_AT + 1, [])]
    return [
        Case(ALERT, _in_flight(pod0, "3x30") | _deleted(pod0) | running, _around(FIRES_AT, [(fired, 3, 0)])),
        Case(ALERT, _in_flight(pod0, f"3x{FIRES_AT} 0x20") | _deleted(pod0) | running,
             [(FIRES_AT, [(fired, 3)]), (FIRES_AT + 1, [])]),
        Case(ALERT, _in_flight(pod0, "0x30") | _deleted(pod0) | running, quiet),
        Case(ALERT, _in_flight(pod0, "3x30") | running, quiet),
        Case(ALERT, _in_flight(pod0, "3x30") | _deleted(pod0, DEADLINE + 600) | running, quiet),
        Case(ALERT, _in_flight(pod0, "3x30") | _deleted(pod0, namespace=OTHER_NAMESPACE) | running, quiet),
    ]


def test_a_terminating_gateway_pod_with_requests_in_flight_warns_before_its_deadline(tmp_path: Path) -> None:
    prod = from_platform(load_stack("prod"))
    annotations = {(a.alert, a.severity, None): a.to_dict()["annotations"] for a in alerts(prod)}
    _run_promtool_tests(prod, tmp_path, ("1m", [_promtool_test(c, annotations) for c in drain_cut_cases(prod)]))


@pytest.mark.parametrize("stack", ["dev", "staging", "prod", "onprem"])
def test_no_stats_matcher_drops_the_requests_in_flight(stack: str) -> None:
    """The gauge the alert (and the preStop) reads is kept by every shipped stack's bootstrap."""
    assert dropped_by_stats_matcher(stack, ["http.gateway.downstream_rq_active"]) == []


def test_the_budget_service_exports_no_requests_in_flight() -> None:
    """Why the alert leaves the budget service's pods out (dashboards/RUNBOOKS.md, GatewayDrainCutsRequests): of the
    metric families its processor registers, the only gauge is its store breaker's; it counts its streams in flight
    (`Processor.streams`) but only logs them when it stops. The windows' gauges (SpendCollector) are budgets' spend."""
    registry = prom.CollectorRegistry()
    config = BudgetConfig.load_text(service_config(stack_config("prod")))
    Processor(config, Store(aredis.Redis.from_url("redis://127.0.0.1:1/0")), registry)
    gauges = sorted(f.name for f in registry.collect() if f.type == "gauge")
    assert gauges == [BUDGET.STORE_BREAKER_OPEN]
