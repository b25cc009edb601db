"""GatewayDrainCutsRequests and TokenBudgetDrainCutsStreams under the real promtool, on the prod rules: a terminating
gateway pod with requests in flight, or a terminating budget service pod with metering streams in flight, near its
deadline fires just as less than DRAIN_CUT_LEAD_SECONDS are left (`drain_cut_cases`, `budget_drain_cut_cases`, also
run by tests/artifacts/test_rules.py's test_promtool_test_rules_every_alert_just_before_and_just_after_it_fires), and
the look-alikes stay silent.

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

import pytest

from dashboards.budgets import alerts as budget_alerts
from dashboards.config import ObservabilityConfig
from dashboards.gateway_alerts import DRAIN_CUT_LEAD_SECONDS, alerts
from infra.monitoring import from_platform
from infra.synth import load_stack
from tests.artifacts.test_gateway_overload import dropped_by_stats_matcher
from tests.artifacts.test_rules import GATEWAY_PODS, Case, Labels, _around, _promtool_test, _run_promtool_tests, _sel
from tests.support import exporter_facts as facts

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


BUDGET_ALERT = "TokenBudgetDrainCutsStreams"
# the budget service's own gauge, as its process exports it (tests/artifacts/test_budget_service_lifecycle_live.py::
# test_the_streams_in_flight_gauge_follows_every_stream_to_its_end), labelled as Prometheus labels its scrape
STREAMS_IN_FLIGHT = "aifactory_token_budget_streams_in_flight"
BUDGET_PODS = [{"namespace": "aifactory-gateway", "pod": f"aifactory-budgets-6f9c-{i}", "job": "aifactory-budgets"}
               for i in "ab"]


def _streams(pod: Labels, kind: str, values: str) -> dict[str, str]:
    return {_sel(STREAMS_IN_FLIGHT, {**pod, "stream": kind}): values}


def budget_drain_cut_cases(cfg: ObservabilityConfig) -> list[Case]:
    """Budget service pod a deleted at minute 2, killed at DEADLINE, 2 metering streams in flight (and their 2
    admission streams: Envoy holds both open for the request); pod b running with 4. Fires for pod a with 2 from
    FIRES_AT, not the minute before, and stops once its streams have ended. Silent: admission streams alone, a pod
    not terminating, a pod far from its deadline, a pod of the same name terminating in another namespace."""
    assert [a.for_ for a in alerts(cfg) + budget_alerts(cfg) if a.alert == BUDGET_ALERT] == ["0m"]
    pod_a, pod_b = BUDGET_PODS
    running = (_streams(pod_b, "metering", "4x30") | _streams(pod_b, "admission", "4x30")
               | _streams(pod_a, "admission", "2x30"))
    fired = {"namespace": pod_a["namespace"], "pod": pod_a["pod"], "alertname": BUDGET_ALERT, "severity": "warning"}
    quiet = [(FIRES_AT, []), (FIRES_AT + 1, [])]
    return [
        Case(BUDGET_ALERT, _streams(pod_a, "metering", "2x30") | _deleted(pod_a) | running,
             _around(FIRES_AT, [(fired, 2, 0)])),
        Case(BUDGET_ALERT, _streams(pod_a, "metering", f"2x{FIRES_AT} 0x20") | _deleted(pod_a) | running,
             [(FIRES_AT, [(fired, 2)]), (FIRES_AT + 1, [])]),
        Case(BUDGET_ALERT, _streams(pod_a, "metering", "0x30") | _deleted(pod_a) | running, quiet),
        Case(BUDGET_ALERT, _streams(pod_a, "metering", "2x30") | running, quiet),
        Case(BUDGET_ALERT, _streams(pod_a, "metering", "2x30") | _deleted(pod_a, DEADLINE + 600) | running, quiet),
        Case(BUDGET_ALERT, _streams(pod_a, "metering", "2x30") | _deleted(pod_a, namespace=OTHER_NAMESPACE)
             | running, quiet),
    ]


def test_a_terminating_gateway_pod_with_requests_in_flight_warns_before_its_deadline(tmp_path: Path) -> None:
    prod = from_platform(load_stack("prod"))
    annotations = {(a.alert, a.severity, None): a.to_dict()["annotations"] for a in alerts(prod)}
    _run_promtool_tests(prod, tmp_path, ("1m", [_promtool_test(c, annotations) for c in drain_cut_cases(prod)]))


def test_a_terminating_budget_service_pod_with_metering_streams_warns_before_its_deadline(tmp_path: Path) -> None:
    prod = from_platform(load_stack("prod"))
    annotations = {(a.alert, a.severity, None): a.to_dict()["annotations"] for a in budget_alerts(prod)}
    _run_promtool_tests(prod, tmp_path, ("1m", [_promtool_test(c, annotations) for c in budget_drain_cut_cases(prod)]))


@pytest.mark.parametrize("stack", ["dev", "staging", "prod", "onprem"])
def test_no_stats_matcher_drops_the_requests_in_flight(stack: str) -> None:
    """The gauge the alert (and the preStop) reads is kept by every shipped stack's bootstrap."""
    assert dropped_by_stats_matcher(stack, ["http.gateway.downstream_rq_active"]) == []
