"""The rules' names, and those that need only the state as mandatory policies of the pack (so `aifactory
policy check`, synth's policy report and CrossGuard run the very same functions)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pulumi_policy import ResourceValidationPolicy, Severity

from policies.base import MANDATORY, stack_policy
from policies.preflight.awaits import TIMEOUT_ANNOTATION, await_validate
from policies.preflight.ordering import crd_order_findings
from policies.preflight.pod_security import pod_security_findings
from policies.preflight.quota import quota_findings
from policies.preflight.resources import from_policy_resources
from policies.preflight.sizes import size_validate
from policies.preflight.volumes import volume_fit_findings

__all__ = [
    "RULES",
    "POLICIES",
]


RULES = ("quota-admission", "pod-security-admission", "storage-class", "volume-fits-class",
         "crd-before-custom-resource", "await-timeout", "release-bring-up-order", "api-endpoint-reachable",
         "schedulable", "scale-down-drains", "nlb-targets-stable-nodes", "fidelity-gate", "native-sidecars")


def _stack_check(rule: Any) -> Any:
    def check(resources: Sequence[Any], _cfg: dict[str, Any]) -> list[tuple[str, str | None]]:
        return [(f"{f.resource}: {f.message}", f.urn) for f in rule(from_policy_resources(resources))]

    return check


POLICIES = [
    ResourceValidationPolicy(
        name="await-covers-startup",
        description="A Deployment or StatefulSet is awaited at least as long as its pods' startup probe plus an "
                    "image pull may take.",
        validate=await_validate, enforcement_level=MANDATORY, severity=Severity.HIGH,
        remediation_steps=f"Set metadata.annotations['{TIMEOUT_ANNOTATION}'] (or customTimeouts.create) to the "
                          "startup budget plus the image pull.",
    ),
    ResourceValidationPolicy(
        name="objects-fit-the-api-server",
        description="A ConfigMap's or Secret's data is at most 1 MiB, the most the API server accepts.",
        validate=size_validate, enforcement_level=MANDATORY, severity=Severity.HIGH,
        remediation_steps="Make the data smaller: for the gateway's envoy.yaml, lower models.*.replicas.max or "
                          "split the models across stacks.",
    ),
    stack_policy(
        name="quota-admits-pods",
        description="Every pod template fits its namespace's ResourceQuota and LimitRange at its largest replica "
                    "count, injected sidecars included.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Size the namespace's quota for its workloads at their maximum replicas (and quota MIG slices), "
                    "or make the pods smaller.",
        check=_stack_check(quota_findings),
    ),
    stack_policy(
        name="pod-security-admits-pods",
        description="Every pod, with what sidecar injection adds, meets its namespace's Pod Security enforce level.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Meet the level's controls (components/k8s/security.py); for sidecars use the Istio CNI plugin.",
        check=_stack_check(pod_security_findings),
    ),
    stack_policy(
        name="volumes-fit-their-class",
        description="Every claim on an EBS CSI gp3 StorageClass is large enough for the IOPS and throughput the class "
                    "provisions (500 IOPS per GiB, 0.25 MiB/s per IOPS), so EC2 creates its volume.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Put small claims on a class without provisioned IOPS (the kit's aifactory-gp3), or size the claim "
                    "to the class (components/volumes.py gp3_min_size_gib).",
        check=_stack_check(volume_fit_findings),
    ),
    stack_policy(
        name="crds-before-custom-resources",
        description="Custom resources are created after the Helm release that installs their CRDs.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Make the custom resource (or its component) depend on the release that installs its CRDs.",
        check=_stack_check(lambda resources: crd_order_findings(resources, require_installer=False)),
    ),
]
