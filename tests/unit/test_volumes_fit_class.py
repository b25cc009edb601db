"""Volumes EC2 accepts (issue 45 item 3). gp3: at most 500 provisioned IOPS per GiB and 0.25 MiB/s per IOPS (EBS user
guide, gp3); the EBS CSI driver passes a class's `iops` through unless 500 x size is at least 3,000
(kubernetes-sigs/aws-ebs-csi-driver pkg/cloud/cloud.go capIOPS). The kit's old single class (iops 4000, throughput
1000, the cluster default) under kube-prometheus-stack's 1 GiB Alertmanager claim was refused by CreateVolume."""

from __future__ import annotations

import json

import pytest

from components.k8s.storage import FAST_MIN_GIB, FAST_STORAGE_CLASS, MODEL_CACHE_STORAGE_CLASS, storage_classes
from components.volumes import gp3_min_size_gib, gp3_refusal
from policies import preflight as pf
from policies.runner import run_policies
from tests.unit.test_preflight import HELM, SC, entry

OLD_CLASS = {"type": "gp3", "encrypted": "true", "iops": "4000", "throughput": "1000"}  # before issue 45


def _kps(alertmanager: str, prometheus: str) -> dict:
    def tpl(size: str) -> dict:
        return {"volumeClaimTemplate": {"spec": {"storageClassName": "aifactory-gp3",
                                                 "resources": {"requests": {"storage": size}}}}}
    return entry(HELM, "kps", {"name": "kps", "chart": "kube-prometheus-stack", "namespace": "monitoring", "values": {
        "alertmanager": {"alertmanagerSpec": {"storage": tpl(alertmanager)}},
        "prometheus": {"prometheusSpec": {"storageSpec": tpl(prometheus)}}}})


def _class(params: dict) -> dict:
    return entry(SC, "aifactory-gp3", {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "provisioner": "ebs.csi.aws.com",
        "metadata": {"name": "aifactory-gp3", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "parameters": params})


def test_gp3_limits_at_the_edges() -> None:
    assert [gp3_refusal(s, OLD_CLASS) for s in (1, 6, 7, 8)] == [
        "EC2 refuses 4000 IOPS on 1 GiB: gp3 allows at most 500 IOPS per GiB (500)",
        "EC2 refuses 1000 MiB/s with 3000 IOPS on 6 GiB: gp3 allows at most 0.25 MiB/s per IOPS (750)",
        "EC2 refuses 1000 MiB/s with 3500 IOPS on 7 GiB: gp3 allows at most 0.25 MiB/s per IOPS (875)",
        None]
    assert gp3_min_size_gib(OLD_CLASS) == 8 == FAST_MIN_GIB
    assert gp3_refusal(1, {"type": "gp3", "encrypted": "true"}) is None  # the baseline comes with any size


def _entry_of(sc: dict) -> dict:
    """A kit StorageClass as the state holds it."""
    return entry(SC, sc["metadata"]["name"], dict(sc))


def test_the_old_class_refuses_alertmanagers_claim_with_the_exact_violation() -> None:
    state = [_class(OLD_CLASS), _kps("1Gi", "50Gi")]
    assert [(f.rule, f.resource, f.message) for f in pf.volume_fit_findings(pf.from_entries(state))] == [(
        "volume-fits-class", "HelmRelease/monitoring/kps",
        "values.alertmanager.alertmanagerSpec.storage: a 1Gi claim on StorageClass 'aifactory-gp3' (iops 4000, "
        "throughput 1000): EC2 refuses 4000 IOPS on 1 GiB: gp3 allows at most 500 IOPS per GiB (500); the claim "
        "stays Pending")]
    violations = run_policies(state)
    assert [(v.policy, v.message) for v in violations if v.policy == "volumes-fit-their-class"] == [(
        "volumes-fit-their-class",
        "HelmRelease/monitoring/kps: values.alertmanager.alertmanagerSpec.storage: a 1Gi claim on StorageClass "
        "'aifactory-gp3' (iops 4000, "
        "throughput 1000): EC2 refuses 4000 IOPS on 1 GiB: gp3 allows at most 500 IOPS per GiB (500); the claim "
        "stays Pending")]


def test_the_kits_classes_fit_every_claim_they_are_named_by() -> None:
    general, fast = storage_classes()
    assert (general["metadata"]["name"], general["parameters"]) == (
        MODEL_CACHE_STORAGE_CLASS, {"type": "gp3", "encrypted": "true"})
    assert general["metadata"]["annotations"] == {"storageclass.kubernetes.io/is-default-class": "true"}
    assert (fast["metadata"]["name"], fast["parameters"]) == (FAST_STORAGE_CLASS, OLD_CLASS)
    assert "annotations" not in fast["metadata"]
    assert pf.volume_fit_findings(pf.from_entries([_entry_of(general), _kps("1Gi", "50Gi")])) == []


@pytest.fixture(scope="module")
def prod_state(synthesized) -> list[dict]:
    return json.loads((synthesized("prod") / "state.json").read_text())["deployment"]["resources"]


def test_every_claim_of_prod_fits_its_class_and_model_caches_stay_fast(prod_state) -> None:
    res = pf.from_entries(prod_state)
    assert pf.volume_fit_findings(res) == []
    by_class: dict[str, list[str]] = {}
    for c in pf.claims(res):
        if c.size is not None:
            by_class.setdefault(c.storage_class or "(default)", []).append(c.where.split(".")[-1] + "=" + str(c.size))
    assert "storage=1Gi" in by_class[MODEL_CACHE_STORAGE_CLASS]  # Alertmanager's claim on the baseline class
    assert by_class[FAST_STORAGE_CLASS] and all(
        int(s.split("=")[1].removesuffix("Gi")) >= FAST_MIN_GIB for s in by_class[FAST_STORAGE_CLASS])
