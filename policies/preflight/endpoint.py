"""Rule api-endpoint-reachable: the deployer can reach the EKS API endpoint (EKS user guide, "Cluster API
server endpoint"; EKS API VpcConfigRequest)."""

from __future__ import annotations

from collections.abc import Sequence

from policies.preflight.resources import EKS_CLUSTER, Finding, Res

__all__ = [
    "endpoint_findings",
]


def endpoint_findings(resources: Sequence[Res], *, deployer_in_vpc: bool) -> list[Finding]:
    """The stack's Kubernetes objects are created through the EKS endpoint: private-only answers only inside the
    VPC; public without publicAccessCidrs is open to 0.0.0.0/0."""
    out = []
    for r in resources:
        if r.type != EKS_CLUSTER:
            continue
        vpc = r.props.get("vpcConfig") or {}
        public = vpc.get("endpointPublicAccess", True) is not False
        if not public and not deployer_in_vpc:
            out.append(Finding("api-endpoint-reachable", r.label,
                               "the API endpoint is private only (endpointPublicAccess false) and the config does "
                               "not declare an in-VPC deployer: every Kubernetes resource of the stack fails to "
                               "connect from outside the VPC",
                               "Either list your networks in aifactory:cluster.publicAccessCidrs (public + private "
                               "endpoint) or run `pulumi up` from inside the VPC and set "
                               "aifactory:cluster.deployerInVpc: true.", r.urn))
        elif public and not vpc.get("publicAccessCidrs"):
            out.append(Finding("api-endpoint-reachable", r.label,
                               "the API endpoint is public without publicAccessCidrs: EKS opens it to 0.0.0.0/0",
                               "Set publicAccessCidrs (aifactory:cluster.publicAccessCidrs) to your networks.", r.urn))
    return out
