"""Preflight: what the real API server, controllers and engine would reject, leave Pending or time out on.

Each rule reads a stack export (synth's state.json or `pulumi stack export`) the way the real system
reads the objects, and returns `Finding`s: the resource, what the real system would do, and the fix.
`aifactory preflight` (infra/preflight.py) runs every rule, with the stack config's facts that a state
cannot hold (where the deployer runs, the node pools of an existing cluster, its storage class); the
rules that need nothing beyond the state are also mandatory policies of the pack (POLICIES, in `policy`), so
`aifactory policy check`, synth's policy report and CrossGuard run the very same functions.

Upstream facts the rules encode (each constant below names its source):
- ResourceQuota and LimitRange admission: kubernetes.io/docs/concepts/policy/resource-quotas and
  /limit-range. LimitRanger defaults containers at its mutating step, before mutating webhooks run
  (the API server's admission order), so containers a webhook injects get no LimitRange defaults; the
  ResourceQuota plugin validates the final pod, injected containers included.
- Pod Security Standards: kubernetes.io/docs/concepts/security/pod-security-standards (baseline and
  restricted controls, `latest`). PodSecurity validates Pods; for workload objects it only warns, and
  the controller's Pods are then rejected, so the rollout never completes.
- Istio sidecar injection at the pinned istiod chart (components/k8s/versions.py ISTIO_VERSION):
  manifests/charts/istio-control/istio-discovery/files/injection-template.yaml and values.yaml.
- pulumi-kubernetes await logic: provider/pkg/await/deployment.go (DefaultDeploymentTimeoutMins = 10),
  statefulset.go (DefaultStatefulSetTimeoutMins = 10); the `pulumi.com/timeoutSeconds` and
  `pulumi.com/skipAwait` annotations; Helm Release `timeout` (default 300 s, as `helm install --timeout`).
- EKS: clusters created at 1.30 or later have no default StorageClass (EKS user guide, "Storage classes");
  a private-only endpoint answers only from inside the VPC (EKS user guide, "Cluster API server endpoint");
  a public endpoint without publicAccessCidrs is open to 0.0.0.0/0 (EKS API VpcConfigRequest).

Modules: `resources` reads the state (Res, Finding, quantities, creation order); `pods` derives what admission
sees of each pod template (LimitRange defaults, the injected sidecar); one module per rule: `quota`,
`pod_security`, `storage`, `ordering` (CRDs and release bring-up), `awaits`, `endpoint`, `schedule`, `drain`,
`lb_targets`, `sidecars`; `policy` names the rules and makes the state-only ones policies. This package re-exports
their public names.
"""

from policies.preflight.awaits import (
    DEFAULT_DEPLOYMENT_AWAIT_SECONDS,
    DEFAULT_IMAGE_PULL_ALLOWANCE_SECONDS,
    await_findings,
)
from policies.preflight.drain import drain_findings
from policies.preflight.endpoint import endpoint_findings
from policies.preflight.lb_targets import lb_target_findings
from policies.preflight.ordering import DEFAULT_HELM_TIMEOUT_SECONDS, crd_order_findings, release_order_findings
from policies.preflight.pod_security import pod_security_findings, pss_violations
from policies.preflight.pods import (
    ISTIO_PROXY_DEFAULT_RESOURCES,
    Mesh,
    PodTemplate,
    effective_pod,
    mesh_of,
    pod_templates,
)
from policies.preflight.policy import POLICIES, RULES
from policies.preflight.quota import quota_findings, rollout_surge
from policies.preflight.resources import EKS_CLUSTER, Finding, Res, from_entries, from_policy_resources, parse_quantity
from policies.preflight.schedule import (
    MIG_CONFIG_LABEL,
    Pool,
    allocatable,
    node_group_pools,
    schedule_findings,
    system_reserve,
)
from policies.preflight.sidecars import sidecar_findings
from policies.preflight.storage import claims, storage_findings
from policies.preflight.volumes import volume_fit_findings

__all__ = [
    "Res",
    "Finding",
    "Mesh",
    "PodTemplate",
    "Pool",
    "RULES",
    "from_entries",
    "from_policy_resources",
    "parse_quantity",
    "mesh_of",
    "pod_templates",
    "effective_pod",
    "quota_findings",
    "pss_violations",
    "pod_security_findings",
    "claims",
    "storage_findings",
    "volume_fit_findings",
    "crd_order_findings",
    "await_findings",
    "release_order_findings",
    "drain_findings",
    "endpoint_findings",
    "lb_target_findings",
    "sidecar_findings",
    "node_group_pools",
    "system_reserve",
    "allocatable",
    "schedule_findings",
    "POLICIES",
    "DEFAULT_DEPLOYMENT_AWAIT_SECONDS",
    "DEFAULT_HELM_TIMEOUT_SECONDS",
    "DEFAULT_IMAGE_PULL_ALLOWANCE_SECONDS",
    "ISTIO_PROXY_DEFAULT_RESOURCES",
    "EKS_CLUSTER",
    "MIG_CONFIG_LABEL",
    "rollout_surge",
]
