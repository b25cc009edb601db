"""Preflight's native-sidecars rule (policies/preflight/sidecars.py): where the stack's Istio sidecars would be classic
ones (nodes below Kubernetes 1.33 under ENABLE_NATIVE_SIDECARS=auto, or istiod's values turning them off), what that
breaks in each meshed pod. Upstream facts: docs/contracts.md, "Day 2: model pods" (Istio 1.28.3 native sidecars) and
"Classic sidecars (issue 44, leftovers)"."""

from __future__ import annotations

from typing import Any

import pytest

from infra.preflight import run_rules
from infra.synth import read_stack_config, run_program, stack_file, state_export
from policies import preflight as pf
from tests.unit.test_preflight import HELM, container, deployment, entry, findings, namespace, pod

MESHED = {"istio-injection": "enabled"}
EKS = "aws:eks/cluster:Cluster"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
AUTO = "with ENABLE_NATIVE_SIDECARS=auto Istio injects native sidecars only when every node's kubelet is 1.33 or later"
FIX = ("Run every node at Kubernetes 1.33 or later (kubernetesVersion), and leave istiod's ENABLE_NATIVE_SIDECARS at "
       "auto or true")


def istiod(*, cni: bool = True, env: dict[str, Any] | None = None) -> dict[str, Any]:
    values: dict[str, Any] = {"pilot": {"cni": {"enabled": cni}, **({"env": env} if env else {})}}
    return entry(HELM, "istiod", {"name": "istiod", "chart": "istiod", "namespace": "istio-system", "values": values})


def eks(cluster: str, *groups: str | None) -> list[dict[str, Any]]:
    """An EKS cluster at `cluster` and node groups at their own versions (None: the cluster's)."""
    return [entry(EKS, "c-eks", {"version": cluster}),
            *(entry(NODE_GROUP, f"ng-{i}", {"version": v} if v else {}) for i, v in enumerate(groups))]


def model(*, grace: int = 60, annotations: dict[str, str] | None = None, init: bool = False) -> dict[str, Any]:
    spec = pod(container(), terminationGracePeriodSeconds=grace,
               **({"initContainers": [container("fetch-model")]} if init else {}))
    d = deployment("m", "t", spec)
    if annotations:
        d["inputs"]["spec"]["template"]["metadata"]["annotations"] = annotations
    return d


def drain(reason: str, seconds: str = "5") -> tuple[str, str]:
    return ("Deployment/t/m", f"its Istio sidecar is a classic one ({reason}): it gets SIGTERM when the pod starts "
                              f"terminating and exits {seconds} s later (terminationDrainDuration), cutting the "
                              "requests the pod still serves during its 60 s grace period")


def init_fails(reason: str) -> tuple[str, str]:
    return ("Deployment/t/m", f"its Istio sidecar is a classic one ({reason}): its init containers (fetch-model) run "
                              "before the proxy starts while the Istio CNI plugin already redirects the pod's traffic "
                              "to it, so their connections fail and the pod never starts")


def test_old_nodes_make_every_sidecar_classic_and_break_init_containers_and_short_drains() -> None:
    """EKS at 1.32: the model pod's init container has no network under the CNI plugin, and its 60 s grace outlasts
    the sidecar's default 5 s drain. The fix names both ways out."""
    reason = f"EKS cluster c-eks and its node groups at Kubernetes 1.32: {AUTO}"
    state = [istiod(), namespace("t", **MESHED), *eks("1.32", None), model(init=True)]
    assert findings(pf.sidecar_findings, *state) == [init_fails(reason), drain(reason)]
    [init, short] = pf.sidecar_findings(pf.from_entries(state))
    assert init.fix == (f"{FIX}; or give the init containers a network of their own (runAsUser 1337, or the "
                        "traffic.sidecar.istio.io/excludeOutbound* annotations).")
    assert short.fix == (f"{FIX}; or set the pod's proxy.istio.io/config annotation to "
                         '{"terminationDrainDuration": "60s"} (the kit\'s model and gateway pods do).')


def test_one_node_group_behind_its_cluster_is_enough() -> None:
    """DetectNativeSidecar reads every node: one group still at 1.32 under a 1.35 cluster turns them all classic."""
    reason = f"node group ng-1 at Kubernetes 1.32: {AUTO}"
    assert findings(pf.sidecar_findings, istiod(), namespace("t", **MESHED), *eks("1.35", None, "1.32"),
                    model()) == [drain(reason)]
    assert findings(pf.sidecar_findings, istiod(), namespace("t", **MESHED), *eks("1.35", None, "1.33"),
                    model(init=True)) == []


def test_istiod_values_turning_native_sidecars_off_are_a_finding_on_any_version() -> None:
    state = [istiod(env={"ENABLE_NATIVE_SIDECARS": "false"}), namespace("t", **MESHED), *eks("1.35"), model()]
    assert findings(pf.sidecar_findings, *state) == [
        drain("HelmRelease/istio-system/istiod sets pilot.env.ENABLE_NATIVE_SIDECARS false")]
    forced = [istiod(env={"ENABLE_NATIVE_SIDECARS": "true"}), namespace("t", **MESHED), *eks("1.31"), model()]
    assert findings(pf.sidecar_findings, *forced) == []


@pytest.mark.parametrize(("annotations", "expected"), [
    ({"proxy.istio.io/config": '{"terminationDrainDuration": "60s"}'}, []),  # what the kit renders: covered
    ({"proxy.istio.io/config": "terminationDrainDuration: 1m"}, []),
    ({"proxy.istio.io/config": '{"terminationDrainDuration": "30s"}'}, ["30"]),
    ({"sidecar.istio.io/nativeSidecar": "true"}, []),
])
def test_the_pods_own_annotations_decide_its_drain_and_its_sidecar(annotations: dict[str, str],
                                                                  expected: list[str]) -> None:
    reason = f"EKS cluster c-eks and its node groups at Kubernetes 1.32: {AUTO}"
    assert findings(pf.sidecar_findings, istiod(), namespace("t", **MESHED), *eks("1.32"),
                    model(annotations=annotations)) == [drain(reason, s) for s in expected]


def test_a_pod_asking_for_a_classic_sidecar_gets_one_on_new_nodes() -> None:
    assert findings(pf.sidecar_findings, istiod(), namespace("t", **MESHED), *eks("1.35"),
                    model(annotations={"sidecar.istio.io/nativeSidecar": "false"})) == [
        drain("its sidecar.istio.io/nativeSidecar annotation is false")]


def test_no_finding_without_a_sidecar_without_cni_or_without_a_known_version() -> None:
    """A namespace without injection has no sidecar; without the CNI plugin istio-init runs after the pod's init
    containers (no redirect yet); an existing cluster whose version nobody declared is not judged."""
    assert findings(pf.sidecar_findings, istiod(), namespace("t"), *eks("1.32"), model(init=True)) == []
    assert findings(pf.sidecar_findings, istiod(cni=False), namespace("t", **MESHED), *eks("1.32"),
                    model(init=True, annotations={"proxy.istio.io/config": '{"terminationDrainDuration": "60s"}'})
                    ) == []
    assert findings(pf.sidecar_findings, istiod(), namespace("t", **MESHED), model()) == []
    assert findings(pf.sidecar_findings, istiod(), namespace("t", **MESHED), model(),
                    kubernetes_version="1.32") == [
        drain(f"the cluster's declared kubernetesVersion 1.32: {AUTO}")]


def test_prod_at_kubernetes_1_32_loses_its_s3_models_fetch() -> None:
    """The shipped prod stack at 1.32: every meshed pod's drain is covered by the kit's proxy.istio.io/config, but
    assistant-fast's model comes from S3 through its fetch-model init container, which a classic sidecar leaves
    without a network. At 1.35 (shipped) nothing: tests/unit/test_preflight.py::test_shipped_stacks_are_clean."""
    values = read_stack_config(stack_file("prod"))
    values["aifactory:kubernetesVersion"] = "1.32"
    result = run_program("prod", values)
    resources = pf.from_entries(state_export(result)["deployment"]["resources"])
    reason = f"EKS cluster aifactory-prod-eks and its node groups at Kubernetes 1.32: {AUTO}"
    assert [(f.rule, f.resource, f.message) for f in run_rules(resources, result.config)] == [
        ("native-sidecars", "StatefulSet/assistant/assistant-fast",
         f"its Istio sidecar is a classic one ({reason}): its init containers (fetch-model) run before the proxy "
         "starts while the Istio CNI plugin already redirects the pod's traffic to it, so their connections fail "
         "and the pod never starts")]
