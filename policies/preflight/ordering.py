"""Rules crd-before-custom-resource and release-bring-up-order: custom resources after the release that
installs their CRDs, and releases after what their pods need (nodes, DNS, storage) within Helm's timeout."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policies import kube
from policies.preflight.resources import EKS_ADDON, EKS_CLUSTER, NODE_GROUP, Finding, Res, chart_of, created_after
from policies.preflight.storage import claims

__all__ = [
    "DEFAULT_HELM_TIMEOUT_SECONDS",
    "CRD_CHARTS",
    "RUNTIME_CRD_OWNERS",
    "WAIT_FOR_ANNOTATION",
    "CHARTS_WITHOUT_PODS",
    "DNS_ADDON",
    "EBS_ADDON",
    "crd_order_findings",
    "release_order_findings",
]


# Helm Release `timeout`: "Time in seconds to wait for any individual kubernetes operation. Defaults to 300".
DEFAULT_HELM_TIMEOUT_SECONDS = 300

# Which Helm chart installs the CRDs of an API group (the charts at components/k8s/versions.py's pins).
CRD_CHARTS: dict[str, str] = {
    "keda.sh": "keda",
    "leaderworkerset.x-k8s.io": "lws",
    "security.istio.io": "base",
    "networking.istio.io": "base",
    "telemetry.istio.io": "base",
    "extensions.istio.io": "base",
    "monitoring.coreos.com": "kube-prometheus-stack",
    "mellanox.com": "network-operator",
    "sriovnetwork.openshift.io": "network-operator",
    "k8s.cni.cncf.io": "network-operator",
    "nvidia.com": "gpu-operator",
}

# API groups whose CRDs an operator applies at run time, from one of its own custom resources: (group, kind)
# of that resource. The network operator's chart ships no nv-ipam CRD; the operator applies it when it reconciles
# a NicClusterPolicy's nvIpam state (network-operator 26.1.1 manifests/state-nv-ipam-cni/005-*.yaml).
RUNTIME_CRD_OWNERS: dict[str, tuple[str, str]] = {"nv-ipam.nvidia.com": ("mellanox.com", "NicClusterPolicy")}

WAIT_FOR_ANNOTATION = "pulumi.com/waitFor"

# Charts whose release runs no pods (Istio's base chart: CRDs, a ServiceAccount, webhook configurations), so
# Helm has no pod to wait for.
CHARTS_WITHOUT_PODS = frozenset({"base"})

# Add-ons that run pods (need nodes) and what needs them: DNS for every pod, the EBS CSI driver for claims.
DNS_ADDON, EBS_ADDON = "coredns", "aws-ebs-csi-driver"


def crd_order_findings(resources: Sequence[Res], *, require_installer: bool = True) -> list[Finding]:
    """A custom resource must be created after the Helm release that installs its CRD: the API server
    answers 'no matches for kind' until then, and the engine fails the create.

    require_installer: also report custom resources whose CRDs no release of the stack installs (preflight does;
    the pack's policy does not, since a cluster may have them installed already)."""
    after = created_after(resources)
    releases: dict[str, list[Res]] = {}
    for r in resources:
        if r.type == kube.HELM_RELEASE:
            releases.setdefault(chart_of(r), []).append(r)
    out = []
    for r in resources:
        if r.group in RUNTIME_CRD_OWNERS and r.type.startswith("kubernetes:"):
            out.extend(_runtime_crd_finding(r, resources, after))
            continue
        chart = CRD_CHARTS.get(r.group)
        if chart is None or not r.type.startswith("kubernetes:"):
            continue
        installers = releases.get(chart, [])
        if not installers and require_installer:
            out.append(Finding("crd-before-custom-resource", r.label,
                               f"no Helm release of chart {chart!r} in the stack installs the {r.group} CRDs: "
                               f"the API server rejects {r.kind} unless they already exist",
                               f"Install the {chart} chart in the stack and make the resource depend on it.", r.urn))
        elif installers and not any(i.urn in after[r.urn] for i in installers):
            out.append(Finding("crd-before-custom-resource", r.label,
                               f"created without waiting for {installers[0].label}, which installs the {r.group} CRDs: "
                               f"the API server may answer 'no matches for kind {r.kind}' and the create fails",
                               f"Add depends_on=[the {chart} release] to the resource or its component.", r.urn))
    return out


def _runtime_crd_finding(r: Res, resources: Sequence[Res], after: Mapping[str, frozenset[str]]) -> list[Finding]:
    """A custom resource whose CRD an operator applies while reconciling its owner resource: created after that
    owner, and the owner awaited until ready (pulumi-kubernetes awaits no custom resource without
    `pulumi.com/waitFor`, and retries 'no matches for kind' for about a minute only)."""
    group, kind = RUNTIME_CRD_OWNERS[r.group]
    owners = [o for o in resources if (o.group, o.kind) == (group, kind) and o.urn in after[r.urn]]
    if not owners:
        return [Finding("crd-before-custom-resource", r.label,
                        f"the {r.group} CRDs are applied by the operator when it reconciles a {kind}, and {r.kind} "
                        f"is not created after one: the create fails with 'no matches for kind {r.kind}'",
                        f"Add depends_on=[the {kind}] and give the {kind} a pulumi.com/waitFor annotation.", r.urn)]
    awaited = [o for o in owners if WAIT_FOR_ANNOTATION in ((o.props.get("metadata") or {}).get("annotations") or {})]
    if not awaited:
        return [Finding("crd-before-custom-resource", r.label,
                        f"created after {owners[0].label}, which is not awaited: the operator applies the {r.group} "
                        f"CRDs only once it reconciles it, and the create may fail with 'no matches for kind "
                        f"{r.kind}'",
                        f"Annotate the {kind} with pulumi.com/waitFor (e.g. jsonpath={{.status.state}}=ready).",
                        r.urn)]
    return []


def release_order_findings(resources: Sequence[Res]) -> list[Finding]:
    """On an EKS stack, an awaited Helm release waits (its `timeout`, default 300 s) for its pods: it must be
    created after a node group (somewhere to run), the coredns add-on (DNS), and, for charts that make claims,
    the EBS CSI add-on (a provisioner). Started earlier, its wait overlaps their creation and times out."""
    if not any(r.type == EKS_CLUSTER for r in resources):
        return []
    after = created_after(resources)
    groups = {r.urn for r in resources if r.type == NODE_GROUP}
    addons = {str(r.props.get("addonName")): r.urn for r in resources if r.type == EKS_ADDON}
    has_claims = {c.res.urn for c in claims(resources) if c.res.type == kube.HELM_RELEASE}
    out = []
    for r in resources:
        if r.type != kube.HELM_RELEASE or r.props.get("skipAwait") is True or chart_of(r) in CHARTS_WITHOUT_PODS:
            continue
        before = after[r.urn]
        missing = []
        if not groups & before:
            missing.append("a node group")
        for addon in (DNS_ADDON, *((EBS_ADDON,) if r.urn in has_claims else ())):
            if addon not in addons:
                missing.append(f"the {addon} add-on (not in the stack)")
            elif addons[addon] not in before:
                missing.append(f"the {addon} add-on")
        if missing:
            timeout = r.props.get("timeout") or DEFAULT_HELM_TIMEOUT_SECONDS
            out.append(Finding("release-bring-up-order", r.label,
                               f"Helm waits {timeout} s for the release's resources, but it is not created after "
                               f"{', '.join(missing)}: it starts while they are still being created and times out",
                               "Make the release depend on the cluster's node groups and add-ons (e.g. depends_on the "
                               "GpuCluster and GpuNodePool components).", r.urn))
    return out
