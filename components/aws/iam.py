"""IAM roles for the cluster: trust policies, node roles and IRSA roles, least privilege throughout.

Managed policies are attached one `RolePolicyAttachment` each (the Role's own `managed_policy_arns` is
deprecated in pulumi-aws 7); inline policies are checked so that no statement allows every action on
every resource (the policy pack forbids it, and so does this module, before anything is deployed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import pulumi
import pulumi_aws as aws

from components.validation import Problems

__all__ = [
    "AWS_MANAGED_POLICY",
    "CLUSTER_POLICIES",
    "NODE_POLICIES",
    "EBS_CSI_POLICY",
    "CNI_POLICY",
    "STS_AUDIENCE",
    "OidcIssuer",
    "service_trust_policy",
    "irsa_trust_policy",
    "wildcard_statements",
    "role",
    "node_role",
    "irsa_role",
    "arn_with_policies",
    "add_policy",
]

AWS_MANAGED_POLICY = "arn:aws:iam::aws:policy/"
CLUSTER_POLICIES = (f"{AWS_MANAGED_POLICY}AmazonEKSClusterPolicy",)
# Exactly what a node needs: join the cluster, pull from ECR, be reachable by SSM. Not the VPC CNI's policy: the CNI
# gets it through IRSA on its own service account (CNI_POLICY), so no pod on a node inherits the right to attach and
# detach network interfaces (EKS user guide, cni-iam-role: "we recommend ... the IAM role for service accounts").
NODE_POLICIES = (
    f"{AWS_MANAGED_POLICY}AmazonEKSWorkerNodePolicy",
    f"{AWS_MANAGED_POLICY}AmazonEC2ContainerRegistryReadOnly",
    f"{AWS_MANAGED_POLICY}AmazonSSMManagedInstanceCore",
)
CNI_POLICY = f"{AWS_MANAGED_POLICY}AmazonEKS_CNI_Policy"
EBS_CSI_POLICY = f"{AWS_MANAGED_POLICY}service-role/AmazonEBSCSIDriverPolicy"
STS_AUDIENCE = "sts.amazonaws.com"


class OidcIssuer(Protocol):
    """What an IRSA role trusts: a cluster's OIDC provider (components.aws.cluster.GpuCluster is one). The type lives
    here, below the cluster, so the cluster's module and this one do not need each other."""

    oidc_provider_arn: pulumi.Output[str]
    oidc_issuer: pulumi.Output[str]  # host/path, without https://


def service_trust_policy(service: str) -> str:
    """Trust policy letting one AWS service (`eks.amazonaws.com`, `ec2.amazonaws.com`) assume the role."""
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
    }, sort_keys=True)


def irsa_trust_policy(oidc_provider_arn: str, issuer: str, namespace: str, service_account: str) -> str:
    """Trust policy for one Kubernetes service account through the cluster's OIDC provider.

    `issuer` is the host/path without `https://`; both `sub` and `aud` are pinned, so no other
    service account and no other audience can assume the role.
    """
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Federated": oidc_provider_arn},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {"StringEquals": {
                f"{issuer}:sub": f"system:serviceaccount:{namespace}:{service_account}",
                f"{issuer}:aud": STS_AUDIENCE,
            }},
        }],
    }, sort_keys=True)


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def wildcard_statements(policy: Mapping[str, Any]) -> list[int]:
    """Indices of Allow statements that grant action '*' on resource '*'."""
    found = []
    for i, st in enumerate(_as_list(policy.get("Statement", []))):
        if st.get("Effect") == "Allow" and "*" in _as_list(st.get("Action", [])) \
                and "*" in _as_list(st.get("Resource", [])):
            found.append(i)
    return found


def role(
    name: str,
    *,
    assume_role_policy: pulumi.Input[str],
    managed_policy_arns: Sequence[str] = (),
    inline_policy: Mapping[str, Any] | None = None,
    opts: pulumi.ResourceOptions | None = None,
) -> aws.iam.Role:
    """A role, one attachment per managed policy and an optional inline policy, all children of the role."""
    if inline_policy is not None and (bad := wildcard_statements(inline_policy)):
        problems = Problems("iam role", name)
        for i in bad:
            problems.add(f"inlinePolicy.Statement[{i}]", "allows Action '*' on Resource '*'; name the actions "
                                                         "and resources the role needs")
        problems.raise_any()
    created = aws.iam.Role(name, assume_role_policy=assume_role_policy, opts=opts)
    child = pulumi.ResourceOptions(parent=created)
    policies: list[pulumi.CustomResource] = [
        aws.iam.RolePolicyAttachment(f"{name}-{arn.rsplit('/', 1)[-1]}", role=created.name, policy_arn=arn,
                                     opts=child)
        for arn in managed_policy_arns]
    if inline_policy is not None:
        policies.append(aws.iam.RolePolicy(f"{name}-inline", role=created.id,
                                           policy=json.dumps(inline_policy, sort_keys=True), opts=child))
    setattr(created, _POLICIES_ATTR, policies)
    return created


_POLICIES_ATTR = "_aifactory_policies"


def add_policy(role_: aws.iam.Role, policy: pulumi.CustomResource) -> None:
    """Record a policy made after the role (one naming a resource known only later) among the role's policies, so
    `arn_with_policies` covers it too."""
    setattr(role_, _POLICIES_ATTR, [*getattr(role_, _POLICIES_ATTR, []), policy])


def arn_with_policies(role_: aws.iam.Role) -> pulumi.Output[str]:
    """The role's ARN as an input that records the role's policy attachments as dependencies too.

    A dependency on the role alone does not cover its attachments (children of a custom resource), so
    `pulumi destroy` detaches the policies in its first wave, while EKS still needs them to delete its own
    security groups, network interfaces, load balancers and volumes (pulumi-aws eks.Cluster docs: depend on the
    role's permissions "otherwise EKS cannot delete EKS managed EC2 infrastructure")."""
    policies: list[pulumi.CustomResource] = getattr(role_, _POLICIES_ATTR, [])
    return pulumi.Output.all(role_.arn, *(p.id for p in policies)).apply(lambda values: str(values[0]))


def node_role(name: str, *, opts: pulumi.ResourceOptions | None = None) -> aws.iam.Role:
    """The EC2 role of a managed node group: the four managed policies nodes need, nothing else."""
    return role(name, assume_role_policy=service_trust_policy("ec2.amazonaws.com"),
                managed_policy_arns=NODE_POLICIES, opts=opts)


def irsa_role(
    name: str,
    *,
    cluster: OidcIssuer,
    namespace: str,
    service_account: str,
    managed_policy_arns: Sequence[str] = (),
    inline_policy: Mapping[str, Any] | None = None,
    opts: pulumi.ResourceOptions | None = None,
) -> aws.iam.Role:
    """An IAM role for one service account (IRSA): annotate the service account with `role.arn`.

    Raises pulumi.InputPropertiesError when `inline_policy` allows '*' on '*'.
    """
    trust = pulumi.Output.all(cluster.oidc_provider_arn, cluster.oidc_issuer).apply(
        lambda a: irsa_trust_policy(a[0], a[1], namespace, service_account))
    return role(name, assume_role_policy=trust, managed_policy_arns=managed_policy_arns,
                inline_policy=inline_policy, opts=opts)
