"""The isolation policies' building blocks (policies/isolation.py), case by case with exact results.

Upstream facts: a NetworkPolicy with an empty podSelector selects every pod of its namespace, and policyTypes
defaults to [Ingress] (plus Egress only when egress rules exist; networking.k8s.io/v1 NetworkPolicySpec); a
listed direction with no rules denies all of it. Istio's allow-nothing AuthorizationPolicy has no selector or
targetRef(s), action ALLOW (the default) and no rules (istio.io docs, "Authorization Policy" reference); a
PeerAuthentication mode (mtls.mode, portLevelMtls) of PERMISSIVE or DISABLE accepts plaintext, UNSET inherits.
A Service of type LoadBalancer or NodePort is reachable from outside the cluster; an absent type is ClusterIP.
"""

from __future__ import annotations

from typing import Any

import pytest

from policies import isolation as iso
from policies.kube import PodSite

CFG = {iso.PLATFORM_NAMESPACES.name: ["kube-system", "istio-system"], iso.AGENT_NAMESPACES.name: ["agents"],
       iso.GATEWAY_NAMESPACES.name: ["gw", "edge"]}


@pytest.mark.parametrize(("spec", "want"), [
    ({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}, {"Ingress", "Egress"}),
    ({"podSelector": {}}, {"Ingress"}),
    ({}, {"Ingress"}),
    ({"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "egress": [{"to": []}]}, {"Ingress"}),
    ({"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [{}]}, {"Egress"}),
    ({"podSelector": {"matchLabels": {"a": "b"}}, "policyTypes": ["Ingress", "Egress"]}, set()),
    ({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}, "policyTypes": ["Egress"]}, set()),
])
def test_denied_directions(spec: dict[str, Any], want: set[str]) -> None:
    assert iso.denied_directions({"spec": spec}) == want


@pytest.mark.parametrize(("spec", "want"), [
    ({}, True),
    ({"action": "ALLOW"}, True),
    ({"selector": {"matchLabels": {"app": "a"}}}, False),
    ({"targetRef": {"kind": "Gateway", "name": "g"}}, False),
    ({"targetRefs": [{"kind": "Gateway", "name": "g"}]}, False),
    ({"action": "DENY"}, False),
    ({"rules": [{}]}, False),
])
def test_is_allow_nothing(spec: dict[str, Any], want: bool) -> None:
    assert iso.is_allow_nothing({"spec": spec}) is want
    assert iso.is_allow_nothing({}) is True


@pytest.mark.parametrize(("spec", "want"), [
    ({"mtls": {"mode": "permissive"}}, ["mtls.mode PERMISSIVE"]),
    ({"mtls": {"mode": "DISABLE"}}, ["mtls.mode DISABLE"]),
    ({"mtls": {"mode": "STRICT"}, "portLevelMtls": {"8080": {"mode": "disable"}, "9090": {"mode": "PERMISSIVE"},
                                                    "443": {"mode": "STRICT"}, "80": None}},
     ["portLevelMtls[8080].mode DISABLE", "portLevelMtls[9090].mode PERMISSIVE"]),
    ({}, []),
    ({"mtls": {}}, []),
])
def test_mtls_downgrades(spec: dict[str, Any], want: list[str]) -> None:
    assert iso.mtls_downgrades({"spec": spec}) == want


def test_mtls_mode_is_upper_case_and_unset_when_absent() -> None:
    assert iso._mtls_mode({"mtls": {"mode": "strict"}}) == "STRICT"
    assert iso._mtls_mode({}) == "UNSET"
    assert iso._mtls_mode({"mtls": {"mode": ""}}) == "UNSET"


@pytest.mark.parametrize(("kind", "ns", "want"), [
    ("LoadBalancer", "team-a", True), ("NodePort", "team-a", True), ("ClusterIP", "team-a", False),
    (None, "team-a", False), ("LoadBalancer", "gw", False), ("NodePort", "edge", False),
])
def test_only_the_gateway_is_exposed(kind: str | None, ns: str, want: bool) -> None:
    props = {"metadata": {"name": "s", "namespace": ns}, "spec": {"type": kind} if kind else {}}
    got = iso._service_check("kubernetes:core/v1:Service", props, CFG)
    assert got == ([f"Service 's' in namespace {ns!r} is of type {kind}; only the gateway (gw, edge) is exposed "
                    "outside the cluster"] if want else [])


def _labelled(ns: str | None = None, name: str = "x") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {iso.TENANT_LABEL: "a"}}
    if ns is not None:
        meta["namespace"] = ns
    return {"metadata": meta}


def test_platform_namespace_problems() -> None:
    dep = "kubernetes:apps/v1:Deployment"
    assert iso.platform_namespace_problems(dep, _labelled("kube-system", "d"), CFG) == [
        "Deployment 'd' of tenant 'a' is in namespace 'kube-system', which belongs to the platform"]
    assert iso.platform_namespace_problems(dep, _labelled("kube-public", "d"), CFG) == [
        "Deployment 'd' of tenant 'a' is in namespace 'kube-public', which belongs to the platform"]
    assert iso.platform_namespace_problems(dep, _labelled("team-a"), CFG) == []
    assert iso.platform_namespace_problems("kubernetes:core/v1:Namespace", _labelled(None, "istio-system"), CFG) == [
        "Namespace 'istio-system' of tenant 'a' is the namespace 'istio-system', which belongs to the platform"]
    assert iso.platform_namespace_problems("kubernetes:core/v1:PersistentVolume", _labelled(None), CFG) == []
    assert iso.platform_namespace_problems("kubernetes:helm.sh/v3:Release", _labelled("kube-system"), CFG) == []
    assert iso.platform_namespace_problems("aws:s3/bucket:Bucket", _labelled("kube-system"), CFG) == []
    assert iso.platform_namespace_problems(dep, {"metadata": {"namespace": "kube-system"}}, CFG) == []


def test_a_pod_check_reports_each_pod_spec_by_where_and_may_exempt_agent_namespaces() -> None:
    seen: list[PodSite] = []

    def problems(site: PodSite, cfg: dict[str, Any]) -> list[str]:
        seen.append(site)
        return [f"p1 {cfg is CFG}", "p2"]

    lws = {"metadata": {"namespace": "team-a"}, "spec": {"leaderWorkerTemplate": {
        "leaderTemplate": {"spec": {"containers": []}}, "workerTemplate": {"spec": {"containers": []}}}}}
    check = iso._pod_check(problems, exempt_agents=True)
    assert check("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet", lws, CFG) == [
        "spec.leaderWorkerTemplate.leaderTemplate.spec: p1 True", "spec.leaderWorkerTemplate.leaderTemplate.spec: p2",
        "spec.leaderWorkerTemplate.workerTemplate.spec: p1 True", "spec.leaderWorkerTemplate.workerTemplate.spec: p2"]
    assert [s.where for s in seen] == ["spec.leaderWorkerTemplate.leaderTemplate.spec",
                                       "spec.leaderWorkerTemplate.workerTemplate.spec"]
    in_agents = {**lws, "metadata": {"namespace": "agents"}}
    assert check("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet", in_agents, CFG) == []
    strict = iso._pod_check(problems, exempt_agents=False)
    assert len(strict("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet", in_agents, CFG)) == 4


def test_root_problems() -> None:
    def spec(pod: dict[str, Any], sc: dict[str, Any]) -> dict[str, Any]:
        return {"securityContext": pod, "containers": [{"name": "c", "securityContext": sc}]}

    assert iso.root_problems(spec({"runAsNonRoot": True}, {}), complete=True) == []
    assert iso.root_problems(spec({"runAsNonRoot": True}, {"runAsNonRoot": False}), complete=True) == [
        "container 'c' runs as root"]
    assert iso.root_problems(spec({}, {"runAsNonRoot": True, "runAsUser": 0}), complete=False) == [
        "container 'c' runs as root"]
    assert iso.root_problems(spec({"runAsUser": 0}, {}), complete=False) == ["container 'c' runs as root"]
    assert iso.root_problems(spec({}, {}), complete=True) == ["container 'c' does not set runAsNonRoot: true"]
    assert iso.root_problems(spec({}, {}), complete=False) == []
    assert iso.root_problems(spec({"runAsNonRoot": False}, {"runAsNonRoot": True}), complete=True) == []


def test_gpu_placement_names_the_pool_label_and_every_non_gpu_taint() -> None:
    spec = {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 8}}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}, {"key": "spot"}, {"key": "x"}]}
    assert iso.gpu_placement_problems(spec, "aifactory.io/pool", ["nvidia.com/gpu"]) == [
        "GPU pod does not select a GPU pool by node label 'aifactory.io/pool'",
        "GPU pod tolerates non-GPU taints: spot, x"]


def test_default_deny_names_the_missing_directions_of_each_tenant_namespace() -> None:
    from tests.unit.test_policies import found, res

    ns = res("kubernetes:core/v1:Namespace", "team-a", {"metadata": {"name": "team-a"}})
    ingress_only = res("kubernetes:networking.k8s.io/v1:NetworkPolicy", "np",
                       {"metadata": {"name": "np", "namespace": "team-a"}, "spec": {"podSelector": {}}})
    assert [m for _, m in found("tenant-default-deny", ns)] == [
        "tenant namespace 'team-a' has no default-deny NetworkPolicy for Egress and Ingress"]
    assert [m for _, m in found("tenant-default-deny", ns, ingress_only)] == [
        "tenant namespace 'team-a' has no default-deny NetworkPolicy for Egress"]


def test_the_gateway_namespace_is_found_wherever_it_is_in_the_stack() -> None:
    from tests.unit.test_policies import found, res

    first = res("kubernetes:core/v1:ConfigMap", "c", {"metadata": {"name": "c", "namespace": "aifactory-gateway"}})
    gw = res("kubernetes:core/v1:Namespace", "aifactory-gateway", {"metadata": {"name": "aifactory-gateway"}})
    assert [m for _, m in found("gateway-namespace-default-deny", first, gw)] == [
        "gateway namespace 'aifactory-gateway' has no default-deny NetworkPolicy for Egress and Ingress",
        "gateway namespace 'aifactory-gateway' has no allow-nothing AuthorizationPolicy"]


def test_only_peer_authentications_are_read_for_mtls_downgrades() -> None:
    props = {"metadata": {"name": "x", "namespace": "team-a"}, "spec": {"mtls": {"mode": "DISABLE"}}}
    assert iso._no_downgrade("kubernetes:networking.istio.io/v1:DestinationRule", props, CFG) == []
    assert iso._no_downgrade("kubernetes:security.istio.io/v1:PeerAuthentication", props, CFG) == [
        "PeerAuthentication 'x' in tenant namespace 'team-a' sets mtls.mode DISABLE"]
    assert iso._no_downgrade("kubernetes:security.istio.io/v1:PeerAuthentication",
                             {**props, "metadata": {"name": "x", "namespace": "istio-system"}}, CFG) == []
