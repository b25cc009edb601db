"""Rule nlb-targets-stable-nodes: on EKS, a LoadBalancer Service's NLB sends each connection to a pod, and keeps it
for as long as the pod serves it.

Only the AWS Load Balancer Controller registers pods (`ip` targets). The in-tree service controller, and the AWS Load
Balancer Controller with `instance` targets, register nodes: each connection enters through a node and kube-proxy,
and ends when that node leaves (an upgrade, the cluster autoscaler removing it), however well the pod behind it
drains. The controller takes a Service whose `spec.loadBalancerClass` is its class, or, without a class, whose
`service.beta.kubernetes.io/aws-load-balancer-type` is `external` (with a target type) or `nlb-ip`; its target type
is `service.beta.kubernetes.io/aws-load-balancer-nlb-target-type`, `instance` unless set (`nlb-ip`: `ip`)
(kubernetes-sigs/aws-load-balancer-controller@v3.5.0: pkg/service/service_utils.go IsServiceSupported,
docs/guide/service/nlb.md, annotations.md).

A deregistered target keeps its connections for the target group's `deregistration_delay.timeout_seconds` (300 s by
default: the Elastic Load Balancing target group attributes), from
`service.beta.kubernetes.io/aws-load-balancer-target-group-attributes`; shorter than the grace period of the pods the
Service selects, it drops connections those pods still serve. Outside EKS (no node groups in the state) the rule
says nothing: a site's own load balancer is its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from components.vocabulary import DEREGISTRATION_DELAY, NLB_CLASS, NLB_TARGET_GROUP_ATTRIBUTES, NLB_TARGET_TYPE
from policies import kube
from policies.preflight.drain import grace_seconds
from policies.preflight.pods import pod_templates
from policies.preflight.resources import Finding, Res, get_path
from policies.preflight.schedule import Pool

__all__ = [
    "LB_TYPE",
    "DEFAULT_DEREGISTRATION_DELAY_SECONDS",
    "target_type",
    "target_group_attributes",
    "lb_target_findings",
]

RULE = "nlb-targets-stable-nodes"
LB_TYPE = "service.beta.kubernetes.io/aws-load-balancer-type"
DEFAULT_DEREGISTRATION_DELAY_SECONDS = 300


def target_type(service: Mapping[str, Any]) -> str | None:
    """`ip` or `instance` for a Service the AWS Load Balancer Controller takes; None for any other (the in-tree
    controller's, or another class's)."""
    annotations = get_path(service, "metadata", "annotations") or {}
    kind = str(annotations.get(LB_TYPE, "")).strip()
    target = str(annotations.get(NLB_TARGET_TYPE, "")).strip()
    cls = get_path(service, "spec", "loadBalancerClass")
    if cls is not None:
        return (target or "instance") if cls == NLB_CLASS else None
    if kind == "nlb-ip":
        return "ip"
    return target if kind == "external" and target in ("ip", "instance") else None


def target_group_attributes(annotations: Mapping[str, Any]) -> dict[str, str]:
    """The annotation's `key=value,key=value` pairs."""
    out = {}
    for part in str(annotations.get(NLB_TARGET_GROUP_ATTRIBUTES, "")).split(","):
        key, _, value = part.partition("=")
        if key.strip():
            out[key.strip()] = value.strip()
    return out


def _longest_grace(resources: Sequence[Res], service: Res) -> tuple[int, str] | None:
    """The longest grace period of the pods the Service selects, and the workload it is of."""
    selector = get_path(service.props, "spec", "selector") or {}
    if not selector:
        return None
    graces = [(grace_seconds(t.spec), t.res.label)
              for t in pod_templates(resources) if t.namespace == service.namespace
              and kube.selector_matches({"matchLabels": selector}, t.meta.get("labels") or {})]
    return max(graces, default=None)


def lb_target_findings(resources: Sequence[Res], pools: Sequence[Pool]) -> list[Finding]:
    """`pools`: the state's EKS node groups (none: not an EKS stack, no finding)."""
    if not pools:
        return []
    out = []
    fix_targets = (f"Set spec.loadBalancerClass: {NLB_CLASS} and {NLB_TARGET_TYPE}: ip (the AWS Load Balancer "
                   "Controller, with the pods as targets).")
    for r in resources:
        if r.kind != "Service" or get_path(r.props, "spec", "type") != "LoadBalancer":
            continue
        target = target_type(r.props)
        if target != "ip":
            cls = get_path(r.props, "spec", "loadBalancerClass")
            who = ("the AWS Load Balancer Controller's with node (instance) targets" if target == "instance" else
                   f"class {cls}'s, not the AWS Load Balancer Controller's" if cls is not None else
                   "the in-tree controller's, with node targets")
            out.append(Finding(RULE, r.label,
                               f"its NLB is {who}: a connection through a node that an upgrade replaces or the "
                               "autoscaler removes ends, though its pod is healthy",
                               fix_targets, r.urn))
            continue
        attrs = target_group_attributes(get_path(r.props, "metadata", "annotations") or {})
        delay = int(attrs.get(DEREGISTRATION_DELAY) or DEFAULT_DEREGISTRATION_DELAY_SECONDS)
        longest = _longest_grace(resources, r)
        if longest is not None and delay < longest[0]:
            out.append(Finding(RULE, r.label,
                               f"its target group's {DEREGISTRATION_DELAY} is {delay} s, shorter than the "
                               f"{longest[0]} s grace of {longest[1]}'s pods: the NLB drops their connections while "
                               "they still serve them",
                               f"Set {DEREGISTRATION_DELAY}={longest[0]} in {NLB_TARGET_GROUP_ATTRIBUTES}.", r.urn))
    return out
