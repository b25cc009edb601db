"""Preflight rule scale-down-drains: a pod whose grace period the stack's cluster-autoscaler would cut on a scale-down.

The autoscaler evicts with a grace of at most --max-graceful-termination-sec (default 600 s), whatever the pod's own
terminationGracePeriodSeconds (kubernetes/autoscaler@cluster-autoscaler-1.34.1: cluster-autoscaler/core/scaledown/
actuation/drain.go evictPod; config/flags/flags.go). Expected grace periods are worked out by hand in
tests/unit/test_autoscaler_args.py.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from infra.synth import read_stack_config, run_program, stack_file, state_export
from policies import preflight as pf

RELEASE = "kubernetes:helm.sh/v3:Release"


@pytest.fixture(scope="module")
def prod_entries() -> list[dict[str, Any]]:
    return state_export(run_program("prod", read_stack_config(stack_file("prod"))))["deployment"]["resources"]


def _autoscaler(entries: list[dict[str, Any]]) -> dict[str, Any]:
    (release,) = [e for e in entries if e["type"] == RELEASE and e["inputs"]["chart"] == "cluster-autoscaler"]
    return release


def _findings(entries: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(f.resource, f.message) for f in pf.drain_findings(pf.from_entries(entries))]


def test_prods_autoscaler_lets_every_pod_drain(prod_entries: list[dict[str, Any]]) -> None:
    assert _autoscaler(prod_entries)["inputs"]["values"]["extraArgs"]["max-graceful-termination-sec"] == 1165
    assert _findings(prod_entries) == []


def test_the_autoscalers_default_would_cut_prods_long_drains(prod_entries: list[dict[str, Any]]) -> None:
    """Without the flag (the autoscaler's 600 s): the pods of autoscaled groups with a longer grace. Not the
    capacity block's pods (its group has no aifactory.io/autoscaled tag: the autoscaler never removes its nodes)."""
    entries = copy.deepcopy(prod_entries)
    for side in ("inputs", "outputs"):
        _autoscaler(entries)[side]["values"]["extraArgs"].pop("max-graceful-termination-sec")
    release = "HelmRelease/aifactory-system/cluster-autoscaler"
    msg = ("terminationGracePeriodSeconds is {grace} s but " + release + " evicts with at most 600 s "
           "(--max-graceful-termination-sec): a scale-down of its node kills the pod {cut} s before its drain may "
           "end, cutting the requests in flight")
    got = _findings(entries)
    assert got == [(res, msg.format(grace=g, cut=g - 600)) for res, g in [
        ("StatefulSet/assistant/assistant-batch", 645),
        ("LeaderWorkerSet/research/deep-research-lws (spec.leaderWorkerTemplate.leaderTemplate)", 945),
        ("LeaderWorkerSet/research/deep-research-lws (spec.leaderWorkerTemplate.workerTemplate)", 975),
        ("Deployment/aifactory-gateway/aifactory-budgets", 920),
        ("Deployment/aifactory-gateway/aifactory-gateway", 1165)]]
