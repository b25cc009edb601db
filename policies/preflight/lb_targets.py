"""Rule nlb-targets-stable-nodes: on EKS, a LoadBalancer Service's NLB targets no GPU node group, and some node group.

The in-tree AWS service controller registers as the NLB's targets every node, or, with
`service.beta.kubernetes.io/aws-load-balancer-target-node-labels` (`key=value[,key=value]`; a bare `key` or `key=`
matches any value), only the nodes carrying every listed label (kubernetes/cloud-provider-aws@v1.35.2:
pkg/providers/v1/aws_loadbalancer.go filterTargetNodes, getKeyValuePropertiesFromAnnotation). Each connection enters
through one target node and kube-proxy; when that node leaves (the autoscaler removes a GPU node, a pool is
upgraded) the connection ends, whatever pod it reached. A selector that matches no node group leaves the NLB with
no targets. The pools are the state's managed node groups (their labels as the kit sets them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from components.vocabulary import LB_TARGET_NODE_LABELS
from policies.preflight.resources import GPU, MIG_PREFIX, Finding, Res
from policies.preflight.schedule import Pool

__all__ = [
    "TARGET_NODE_LABELS",
    "target_node_labels",
    "lb_target_findings",
]

TARGET_NODE_LABELS = LB_TARGET_NODE_LABELS
RULE = "nlb-targets-stable-nodes"


def target_node_labels(annotations: Mapping[str, str]) -> dict[str, str]:
    """The annotation's labels as the controller reads them: `key` or `key=` is any value ("")."""
    out: dict[str, str] = {}
    for part in str(annotations.get(TARGET_NODE_LABELS, "")).strip().split(","):
        key, _, value = part.strip().partition("=")
        if key:
            out[key] = value.split("=")[0]
    return out


def _targets(pool: Pool, wanted: Mapping[str, str]) -> bool:
    return all(k in pool.labels and (v == "" or pool.labels[k] == v) for k, v in wanted.items())


def _gpu(pool: Pool) -> bool:
    return any(k == GPU or k.startswith(MIG_PREFIX) for k, v in pool.allocatable.items() if v > 0)


def lb_target_findings(resources: Sequence[Res], pools: Sequence[Pool]) -> list[Finding]:
    """`pools`: the state's EKS node groups (none: not an EKS stack, no finding)."""
    if not pools:
        return []
    out = []
    for r in resources:
        if r.kind != "Service" or (r.props.get("spec") or {}).get("type") != "LoadBalancer":
            continue
        wanted = target_node_labels((r.props.get("metadata") or {}).get("annotations") or {})
        hit = [p for p in pools if _targets(p, wanted)]
        gpu = sorted(p.name for p in hit if _gpu(p))
        if not hit:
            out.append(Finding(RULE, r.label, f"its NLB has no targets: no node group carries {wanted}",
                               f"Set {TARGET_NODE_LABELS} to labels of the system node group.", r.urn))
        elif gpu:
            out.append(Finding(RULE, r.label,
                               f"its NLB targets GPU node group(s) {', '.join(gpu)}: a connection through a node the "
                               "autoscaler removes or an upgrade replaces ends, though its pod is healthy",
                               f"Set {TARGET_NODE_LABELS} to labels only the system node group carries.", r.urn))
    return out
