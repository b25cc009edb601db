"""The AWS Load Balancer Controller's alerts (dashboards/load_balancer_alerts.py) under the real promtool, on the prod
rules: each just before and just after it fires (`load_balancer_cases`, run by tests/artifacts/test_rules.py's
test_promtool_test_rules_every_alert_just_before_and_just_after_it_fires), and the look-alikes that must stay silent.
The series are written from what the real exporters emit (tests.support.exporter_facts: kube-state-metrics v2.18.0,
controller-runtime v0.24.1 in the controller v3.5.0), never from telemetry/names.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pulumi
import pytest

import dashboards
from components.k8s.gateway import component as gw
from dashboards.config import LoadBalancerController, ObservabilityConfig
from dashboards.deploy import check_config
from dashboards.load_balancer_alerts import CONTROLLER_DOWN_FOR, GATE_FALSE_FOR, RECONCILE_ERRORS_FOR
from dashboards.rules import alerts, groups
from infra.monitoring import from_platform
from infra.synth import load_stack
from tests.artifacts.test_rules import (
    Case,
    Labels,
    _around,
    _minutes,
    _promtool_test,
    _run_promtool_tests,
    _sel,
)
from tests.support import exporter_facts as facts
from tests.support.stacks import stack_config

JOB = "aws-load-balancer-controller"  # the chart's ServiceMonitor: jobLabel app.kubernetes.io/instance, the release
REPLICAS = ("aws-load-balancer-controller-5b8f7c9d4-kx2vq", "aws-load-balancer-controller-5b8f7c9d4-p7tzm")
GATEWAY_NS = "aifactory-gateway"
GATEWAY_POD = "aifactory-gateway-7d9c5b6f48-x2kqz"  # <deployment>-<pod-template-hash>-<suffix>
LOAD_BALANCER_ALERTS = ("AwsLoadBalancerControllerDown", "AwsLoadBalancerControllerReconcileErrors",
                        "GatewayPodNotInLoadBalancer")


@pytest.fixture(scope="module")
def prod() -> ObservabilityConfig:
    return from_platform(load_stack("prod"))


def _fired(alert: str, severity: str, labels: Labels, value: float, for_: str) -> tuple[Labels, float, int]:
    return ({**labels, "alertname": alert, "severity": severity}, value, _minutes(for_))


def _up(values: dict[str, str]) -> dict[str, str]:
    """`up` of the controller's targets, by replica."""
    return {_sel("up", {"job": JOB, "namespace": "aifactory-system", "pod": pod}): v for pod, v in values.items()}


def _errors(controller: str, values: str, pod: str = REPLICAS[0]) -> dict[str, str]:
    return {_sel(facts.RECONCILE_ERRORS.name, {"job": JOB, "pod": pod, "controller": controller}): values}


def _pod(pod: str, *, containers: dict[str, str], ready: str, deleted: str | None = None,
         namespace: str = GATEWAY_NS) -> dict[str, str]:
    """kube-state-metrics' series of one pod: each container's readiness, the pod's Ready condition (one series per
    status, 1 for the current one: `ready` is the true series' values, the false series its complement), and its
    deletion timestamp once deleted."""
    who = {"namespace": namespace, "pod": pod, "uid": f"uid-{pod}"}
    out = {_sel(facts.CONTAINER_READY.name, {**who, "container": c}): v for c, v in containers.items()}
    complement = " ".join({"0": "1", "1": "0"}.get(t[0], t[0]) + t[1:] for t in ready.split())
    out |= {_sel(facts.POD_READY.name, {**who, "condition": "true"}): ready,
            _sel(facts.POD_READY.name, {**who, "condition": "false"}): complement,
            _sel(facts.POD_READY.name, {**who, "condition": "unknown"}): "0x40"}
    if deleted is not None:
        out[_sel(facts.POD_DELETED.name, who)] = deleted
    return out


def load_balancer_cases(cfg: ObservabilityConfig) -> list[Case]:
    assert cfg.load_balancer_controller is not None
    out: list[Case] = []
    down = "AwsLoadBalancerControllerDown"
    # both replicas scraped up, then both down from minute 2 (evicted, crash-looping): pages once
    # CONTROLLER_DOWN_FOR has passed
    out.append(Case(down, _up({REPLICAS[0]: "1 1 0x30", REPLICAS[1]: "1 1 0x30"}),
                    _around(2, [_fired(down, "critical", {}, 1.0, CONTROLLER_DOWN_FOR)])))
    # no target at all (the Deployment gone, or nothing scraped): pages as well, from the first evaluation
    out.append(Case(down, _up({}) | {_sel("up", {"job": "kube-state-metrics"}): "1x30"},
                    _around(0, [_fired(down, "critical", {}, 1.0, CONTROLLER_DOWN_FOR)])))
    # one replica down for good, the other up: its webhook still answers and it holds the lease: silent
    out.append(Case(down, _up({REPLICAS[0]: "1 1 0x30", REPLICAS[1]: "1x30"}), [(8, []), (20, [])]))

    errors = "AwsLoadBalancerControllerReconcileErrors"
    # the leader's targetGroupBinding controller fails 3 reconciles a minute from minute 0 (rated from minute 1), the
    # other replica counts none: tickets once RECONCILE_ERRORS_FOR has passed, at 3/60 per second
    failing = _errors("targetGroupBinding", "0+3x30") | _errors("targetGroupBinding", "0x30", REPLICAS[1]) \
        | _errors("service", "0x30")
    out.append(Case(errors, failing, _around(
        1, [_fired(errors, "warning", {"controller": "targetGroupBinding"}, 0.05, RECONCILE_ERRORS_FOR)])))
    # the service controller fails the same way: its own alert
    out.append(Case(errors, _errors("service", "0+3x30"), _around(
        1, [_fired(errors, "warning", {"controller": "service"}, 0.05, RECONCILE_ERRORS_FOR)])))
    # one failed reconcile (minute 3: a throttled call retried next time), and the ingress controller failing for
    # good (the gateway has no Ingress): silent
    out.append(Case(errors, _errors("service", "0x3 1x27") | _errors("ingress", "0+3x30"),
                    [(t, []) for t in (4, 9, 12, 16, 25)]))

    gate = "GatewayPodNotInLoadBalancer"
    both_ready = {"envoy": "1x40", "istio-proxy": "1x40"}
    # a new gateway pod: its containers ready from minute 0, the pod never Ready (its readiness gate stays false):
    # tickets once GATE_FALSE_FOR has passed
    out.append(Case(gate, _pod(GATEWAY_POD, containers=both_ready, ready="0x40"), _around(
        0, [_fired(gate, "warning", {"namespace": GATEWAY_NS, "pod": GATEWAY_POD}, 1.0, GATE_FALSE_FOR)])))
    silent = [(t, []) for t in (_minutes(GATE_FALSE_FOR), _minutes(GATE_FALSE_FOR) + 1, 30)]
    # registered and healthy after 4 minutes (the gate turns true, the pod Ready)
    out.append(Case(gate, _pod(GATEWAY_POD, containers=both_ready, ready="0x3 1x36"), silent))
    # Envoy's own readiness probe failing (overload: GatewayOverloaded's), not the gate
    out.append(Case(gate, _pod(GATEWAY_POD, containers={"envoy": "0x40", "istio-proxy": "1x40"}, ready="0x40"),
                    silent))
    # a terminating pod, deregistered on purpose (its deletion timestamp from minute 0)
    out.append(Case(gate, _pod(GATEWAY_POD, containers=both_ready, ready="0x40", deleted="1700000000x40"), silent))
    # another namespace's pod, and another Deployment's pod in the gateway namespace (the budget service's)
    out.append(Case(gate, _pod(GATEWAY_POD, containers=both_ready, ready="0x40", namespace="search")
                    | _pod("aifactory-budgets-6c8d9f7b5-q4wzt", containers=both_ready, ready="0x40"), silent))
    return out


def test_every_load_balancer_alert_fires_just_after_its_for_and_its_look_alikes_stay_silent(
        prod: ObservabilityConfig, tmp_path: Path) -> None:
    """This file's cases alone (the full harness runs them with every other alert's)."""
    cases = load_balancer_cases(prod)
    assert {c.alert for c in cases} == set(LOAD_BALANCER_ALERTS)
    annotations = {(a.alert, a.severity, None): a.to_dict()["annotations"] for a in alerts(prod)
                   if a.alert in LOAD_BALANCER_ALERTS}
    _run_promtool_tests(prod, tmp_path, ("1m", [_promtool_test(c, annotations) for c in cases]))


@pytest.mark.parametrize("stack", ["dev", "staging", "prod", "onprem"])
def test_only_stacks_that_install_the_controller_have_its_alerts(stack: str) -> None:
    """AWS stacks install the controller (infra/program.py); an existing cluster (onprem) has none and renders no
    load balancer group, whose alerts would otherwise page forever on a controller that is not there."""
    cfg = from_platform(load_stack(stack))
    rendered = {r["alert"] for g in dashboards.prometheus_rules(cfg)["groups"] for r in g["rules"] if "alert" in r}
    on_aws = stack != "onprem"
    assert (cfg.load_balancer_controller is not None) is on_aws
    assert ("aifactory-load-balancer-alerts" in [g.name for g in groups(cfg)]) is on_aws
    assert set(LOAD_BALANCER_ALERTS) <= rendered if on_aws else not set(LOAD_BALANCER_ALERTS) & rendered
    if on_aws:
        assert cfg.load_balancer_controller.gateway_namespace == GATEWAY_NS


def test_each_alert_reads_the_controllers_job_and_the_gateways_pods(prod: ObservabilityConfig) -> None:
    by_name = {a.alert: a for a in alerts(prod) if a.alert in LOAD_BALANCER_ALERTS}
    assert {n: (a.severity, a.for_) for n, a in by_name.items()} == {
        "AwsLoadBalancerControllerDown": ("critical", "5m"),
        "AwsLoadBalancerControllerReconcileErrors": ("warning", "10m"),
        "GatewayPodNotInLoadBalancer": ("warning", "10m")}
    assert by_name["AwsLoadBalancerControllerDown"].expr == 'absent(up{job="aws-load-balancer-controller"} == 1)'
    # the upstream names (exporter_facts), not telemetry/names.py's
    selector = f'{{job="{JOB}", controller=~"{"|".join(facts.LBC_CONTROLLERS)}"}}'
    assert facts.RECONCILE_ERRORS.name + selector in by_name["AwsLoadBalancerControllerReconcileErrors"].expr
    assert by_name["AwsLoadBalancerControllerReconcileErrors"].expr == (
        'sum by (controller) (rate(controller_runtime_reconcile_errors_total{job="aws-load-balancer-controller", '
        'controller=~"service|targetGroupBinding"}[5m])) > 0')
    description = by_name["AwsLoadBalancerControllerDown"].description
    for what in ("no new gateway pod can be created", "never deregistered", "Service reaches its NLB"):
        assert what in description


RUNBOOKS = Path(__file__).resolve().parents[2] / "dashboards" / "RUNBOOKS.md"


def _runbook(alert: str) -> str:
    text = RUNBOOKS.read_text()
    start = text.index(f"\n## {alert}\n")
    end = text.find("\n## ", start + 1)
    return " ".join(text[start:end if end != -1 else None].split())


def test_every_alert_of_every_shipped_stack_has_a_runbook_section() -> None:
    """runbook_url points at `#<alert in lowercase>`: a section of that name must exist."""
    names = {a.alert for s in ("dev", "staging", "prod", "onprem") for a in alerts(from_platform(load_stack(s)))}
    assert set(LOAD_BALANCER_ALERTS) <= names
    assert sorted(n for n in names if f"\n## {n}\n" not in RUNBOOKS.read_text()) == []


def test_the_overload_runbook_says_how_fast_a_readiness_blip_takes_a_pod_out_of_the_nlb() -> None:
    """The gateway's readiness probe (components/k8s/gateway/component.py `deployment`) sets how many failed /ready
    probes make the pod not ready; the controller then deregisters it (kubernetes-sigs/aws-load-balancer-controller
    @v3.5.0 pkg/backend/endpoint_resolver.go: an endpoint not ready whose containers are not ready is no target) and
    registers it again once ready, a new target's health checks taking minutes. The runbook states the probe's own
    numbers: they are read from the rendered Deployment, so a change to the probe fails here until the text follows."""
    probe = gw.deployment(stack_config("prod"), "{}")["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    period, failures = probe["periodSeconds"], probe["failureThreshold"]
    text = _runbook("GatewayOverloaded")
    assert (f"probes Envoy's `/ready` every {period} seconds, and {failures} failed probes in a row "
            f"({period * failures} seconds at most) make the pod not ready") in text
    assert "the AWS Load Balancer Controller then deregisters its target" in text
    assert "`GatewayPodNotInLoadBalancer`" in text


def test_a_hand_built_config_with_a_gateway_namespace_that_is_no_namespace_is_refused_with_its_path(
        prod: ObservabilityConfig) -> None:
    bad = dataclasses.replace(prod, load_balancer_controller=LoadBalancerController("Gateway_NS"))
    with pytest.raises(pulumi.InputPropertiesError) as err:
        check_config("monitoring", bad)
    assert err.value.errors == [{"property_path": "config.loadBalancerController.gatewayNamespace",
                                 "reason": "'Gateway_NS' is not a namespace (a DNS label)"}]
