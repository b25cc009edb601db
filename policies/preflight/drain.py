"""Rule scale-down-drains: a cluster-autoscaler scale-down lets every pod on the groups it scales drain for its whole
grace period.

The autoscaler evicts each pod of a node it removes with a grace period of at most `--max-graceful-termination-sec`
(default 600 s) instead of the pod's own terminationGracePeriodSeconds, and the kubelet kills the pod when it ends
(kubernetes/autoscaler@cluster-autoscaler-1.34.1, the app of chart 9.52.1: cluster-autoscaler/core/scaledown/
actuation/drain.go evictPod; config/flags/flags.go). A pod with a longer grace (a model that drains a 900 s request)
is cut. Pods pinned to a node group the autoscaler does not scale (no `aifactory.io/autoscaled` tag: a capacity
block's, whose schedule owns its size) and DaemonSet or Job pods are not its concern here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from components.vocabulary import (
    AUTOSCALED_TAG,
    AUTOSCALER_CHART,
    DEFAULT_MAX_GRACEFUL_TERMINATION_SECONDS,
    MAX_GRACEFUL_TERMINATION_FLAG,
    POOL_LABEL,
)
from policies import kube
from policies.preflight.pods import pod_templates
from policies.preflight.resources import NODE_GROUP, Finding, Res, chart_of, get_path

__all__ = [
    "DEFAULT_POD_GRACE_SECONDS",
    "grace_seconds",
    "drain_findings",
]

DEFAULT_POD_GRACE_SECONDS = 30  # a pod spec's terminationGracePeriodSeconds when unset (core/v1 PodSpec)


def grace_seconds(spec: Mapping[str, Any]) -> int:
    """A pod spec's terminationGracePeriodSeconds, or the API's default when unset."""
    return int(spec.get("terminationGracePeriodSeconds", DEFAULT_POD_GRACE_SECONDS))


def _unscaled_pools(resources: Sequence[Res]) -> set[str]:
    """The pools (aifactory.io/pool label) of node groups the autoscaler does not discover."""
    return {str((r.props.get("labels") or {}).get(POOL_LABEL)) for r in resources
            if r.type == NODE_GROUP and (r.props.get("tags") or {}).get(AUTOSCALED_TAG) != "true"}


def drain_findings(resources: Sequence[Res]) -> list[Finding]:
    """A pod whose grace period is longer than what the stack's cluster-autoscaler gives an evicted pod."""
    autoscalers = [r for r in resources if r.type == kube.HELM_RELEASE and chart_of(r) == AUTOSCALER_CHART]
    if not autoscalers:
        return []
    unscaled = _unscaled_pools(resources)
    out = []
    for release in autoscalers:
        limit = int(get_path(release.props, "values", "extraArgs", MAX_GRACEFUL_TERMINATION_FLAG,
                             default=DEFAULT_MAX_GRACEFUL_TERMINATION_SECONDS))
        for t in pod_templates(resources):
            if t.res.kind in ("DaemonSet", "Job") or (t.spec.get("nodeSelector") or {}).get(POOL_LABEL) in unscaled:
                continue
            grace = grace_seconds(t.spec)
            if grace > limit:
                out.append(Finding(
                    "scale-down-drains", t.label,
                    f"terminationGracePeriodSeconds is {grace} s but {release.label} evicts with at most {limit} s "
                    f"(--{MAX_GRACEFUL_TERMINATION_FLAG}): a scale-down of its node kills the pod {grace - limit} s "
                    "before its drain may end, cutting the requests in flight",
                    f"Set the release's extraArgs.{MAX_GRACEFUL_TERMINATION_FLAG} to at least {grace} (the kit's "
                    "ClusterAutoscaler does: max_graceful_termination_seconds, from the stack's longest grace).",
                    t.res.urn))
    return out
