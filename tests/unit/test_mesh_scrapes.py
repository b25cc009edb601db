"""Issue 44 item 1: every Prometheus scrape of a port the Istio sidecar captures, in a namespace with sidecar
injection, uses the mesh's scrape TLS (components.k8s.mesh.MESH_SCRAPE_TLS). Under the kit's STRICT PeerAuthentication
the sidecar refuses a plain-HTTP scrape, and Prometheus's own traffic bypasses its sidecar, so such an endpoint is a
target always down and series that never exist (the token budget service's ServiceMonitor was one: no
aifactory_token_budget_* series, no budget alert). Read from all four shipped stacks' synth output, and as the
pack's `mesh-scrapes-use-mtls` policy.

Istio facts (istio/istio@1.28.3): the sidecar captures every inbound port of an injected pod unless the pod excludes
it (traffic.sidecar.istio.io/excludeInboundPorts, includeInboundPorts); its own Prometheus port 15090
(http-envoy-prom, manifests/charts/istio-control/istio-discovery/files/injection-template.yaml) is never captured.
prometheus-operator (kube-prometheus-stack 82.4.0): a PodMonitor's tlsConfig (SafeTLSConfig) has no file fields.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from components.k8s.mesh import MESH_SCRAPE_TLS
from policies.runner import read_state
from policies.scrape import mesh_scrapes, plain_mesh_scrapes
from tests.support.stacks import SHIPPED_STACKS
from tests.unit.test_policies import DEPLOYMENT, NS, SERVICE, found, obj, res

SM = "kubernetes:monitoring.coreos.com/v1:ServiceMonitor"
PM = "kubernetes:monitoring.coreos.com/v1:PodMonitor"
POLICY = "mesh-scrapes-use-mtls"


class _R(NamedTuple):
    resource_type: str
    props: dict[str, Any]
    urn: str


def _resources(state: Path) -> list[_R]:
    return [_R(e["type"], e.get("inputs") or {}, e["urn"]) for e in read_state(state)]


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_scrape_of_a_captured_meshed_port_uses_the_mesh_scrape_tls(
        stack: str, synthesized: Callable[[str], Path]) -> None:
    resources = _resources(synthesized(stack) / "state.json")
    scrapes = mesh_scrapes(resources)
    assert scrapes, "every shipped stack has meshed workloads that Prometheus scrapes"
    wrong = [(s.kind, s.monitor, s.index, s.port) for s in scrapes
             if s.kind != "ServiceMonitor" or {k: s.endpoint.get(k) for k in MESH_SCRAPE_TLS} != MESH_SCRAPE_TLS]
    assert wrong == []
    assert plain_mesh_scrapes(resources) == []


def test_the_budget_service_and_the_sidecars_pod_monitor_are_told_apart(synthesized: Callable[[str], Path]) -> None:
    """prod: the budget service's metrics port (9090, captured) is a mesh scrape; the sidecars' own stats port
    (the istio-sidecars PodMonitor, 15090) is not."""
    scrapes = {(s.monitor, s.port) for s in mesh_scrapes(_resources(synthesized("prod") / "state.json"))}
    assert ("aifactory-gateway/aifactory-budgets", "metrics") in scrapes
    assert ("aifactory-gateway/aifactory-gateway", "stats") in scrapes
    assert not any(m == "monitoring/istio-sidecars" for m, _ in scrapes)


# --- the policy, case by case ---------------------------------------------------------------------------------


def _ns(name: str, *, injected: bool) -> dict[str, Any]:
    labels = {"istio-injection": "enabled"} if injected else {}
    return res(NS, name, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})


def _app(annotations: dict[str, str] | None = None) -> list[dict[str, Any]]:
    pod = {"metadata": {"labels": {"app": "svc"}, "annotations": annotations or {}},
           "spec": {"containers": [{"name": "c", "image": "x:1",
                                    "ports": [{"name": "metrics", "containerPort": 9090}]}]}}
    service = obj(SERVICE, "svc", "ns", {"selector": {"app": "svc"},
                                         "ports": [{"name": "metrics", "port": 9090, "targetPort": "metrics"}]})
    service["inputs"]["metadata"]["labels"] = service["outputs"]["metadata"]["labels"] = {"app": "svc"}
    return [obj(DEPLOYMENT, "svc", "ns", {"template": pod}), service]


def _sm(endpoint: dict[str, Any]) -> dict[str, Any]:
    return obj(SM, "svc", "ns", {"selector": {"matchLabels": {"app": "svc"}}, "endpoints": [endpoint]})


PLAIN = ("ns-svc", "ServiceMonitor ns/svc endpoint 0 (port 'metrics') scrapes pods of the mesh-injected namespace "
                   "'ns' on a port their sidecar captures without the mesh's mTLS: under STRICT mTLS the scrape is "
                   "refused and its series never exist; set scheme https and tlsConfig caFile, certFile, keyFile (the "
                   "workload certificate Prometheus's sidecar writes)")


def test_policy_a_plain_service_monitor_of_a_captured_meshed_port_is_a_violation() -> None:
    assert found(POLICY, _ns("ns", injected=True), *_app(), _sm({"port": "metrics"})) == [PLAIN]


def test_policy_the_mesh_scrape_tls_an_uninjected_namespace_or_an_excluded_port_is_no_violation() -> None:
    assert found(POLICY, _ns("ns", injected=True), *_app(), _sm({"port": "metrics", **MESH_SCRAPE_TLS})) == []
    assert found(POLICY, _ns("ns", injected=False), *_app(), _sm({"port": "metrics"})) == []
    excluded = _app({"traffic.sidecar.istio.io/excludeInboundPorts": "9090"})
    assert found(POLICY, _ns("ns", injected=True), *excluded, _sm({"port": "metrics"})) == []
    elsewhere = _app({"traffic.sidecar.istio.io/includeInboundPorts": "8000"})
    assert found(POLICY, _ns("ns", injected=True), *elsewhere, _sm({"port": "metrics"})) == []
    # an empty list is no capture at all (Prometheus's own pods opt out so), not Istio's default of every port
    nothing = _app({"traffic.sidecar.istio.io/includeInboundPorts": ""})
    assert found(POLICY, _ns("ns", injected=True), *nothing, _sm({"port": "metrics"})) == []
    every = _app({"traffic.sidecar.istio.io/includeInboundPorts": "*"})
    assert found(POLICY, _ns("ns", injected=True), *every, _sm({"port": "metrics"})) == [PLAIN]


def test_policy_https_without_the_certificate_files_is_still_a_violation() -> None:
    ep = {"port": "metrics", "scheme": "https", "tlsConfig": {"insecureSkipVerify": True}}
    assert found(POLICY, _ns("ns", injected=True), *_app(), _sm(ep)) == [PLAIN]


def test_policy_a_pod_monitor_of_a_captured_port_is_a_violation_but_of_the_sidecars_own_port_is_not() -> None:
    def pm(port: str) -> dict[str, Any]:
        return obj(PM, "svc", "ns", {"selector": {"matchLabels": {"app": "svc"}}, "podMetricsEndpoints": [
            {"port": port}]})

    assert found(POLICY, _ns("ns", injected=True), *_app(), pm("http-envoy-prom")) == []
    assert found(POLICY, _ns("ns", injected=True), *_app(), pm("metrics")) == [(
        "ns-svc", "PodMonitor ns/svc endpoint 0 (port 'metrics') scrapes pods of the mesh-injected namespace 'ns' on "
                  "a port their sidecar captures without the mesh's mTLS: under STRICT mTLS the scrape is refused and "
                  "its series never exist; a PodMonitor cannot present the certificate (its tlsConfig has no file "
                  "fields): use a ServiceMonitor")]
