"""AWS security baseline: IMDSv2, encrypted EBS, a private or allow-listed EKS endpoint with secrets
encryption and control-plane logs, NetworkPolicy enforcement in the VPC CNI, no open ingress, private
encrypted S3, no admin wildcard IAM."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pulumi_policy import Severity

from policies.base import MANDATORY, REQUIRED_LOG_TYPES, is_seq, resource_policy, stack_policy
from policies.fabric import LAUNCH_TEMPLATE, SECURITY_GROUP, SG_RULE, VPC_INGRESS

__all__ = [
    "POLICIES",
    "EKS_CLUSTER",
    "EKS_ADDON",
    "BUCKET",
    "OPEN_CIDRS",
    "statements",
    "admin_statements",
    "open_ingress",
]

EKS_CLUSTER = "aws:eks/cluster:Cluster"
EKS_ADDON = "aws:eks/addon:Addon"
VPC_CNI = "vpc-cni"
# The VPC CNI add-on's configuration key (a string-typed boolean in its schema) that starts the network
# policy agent; without it the cluster accepts NetworkPolicy objects and enforces none of them.
NETWORK_POLICY_KEY = "enableNetworkPolicy"
EBS_VOLUME = "aws:ebs/volume:Volume"
BUCKET = "aws:s3/bucket:Bucket"
PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
BUCKET_SSE = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
IAM_POLICY_PROPS = {
    "aws:iam/policy:Policy": "policy",
    "aws:iam/rolePolicy:RolePolicy": "policy",
    "aws:iam/userPolicy:UserPolicy": "policy",
    "aws:iam/groupPolicy:GroupPolicy": "policy",
}
ROLE = "aws:iam/role:Role"
OPEN_CIDRS = ("0.0.0.0/0", "::/0")
PUBLIC_ACCESS_FLAGS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
Found = list[tuple[str, str | None]]


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _imds(_t: str, props: Mapping[str, Any], _cfg: dict[str, Any]) -> list[str]:
    tokens = (props.get("metadataOptions") or {}).get("httpTokens")
    return [] if tokens == "required" else [f"metadataOptions.httpTokens is {tokens or 'unset'!s}; IMDSv1 is "
                                            "reachable"]


def _ebs(resource_type: str, props: Mapping[str, Any], _cfg: dict[str, Any]) -> list[str]:
    if resource_type == EBS_VOLUME:
        return [] if _truthy(props.get("encrypted")) else ["EBS volume is not encrypted"]
    return [f"blockDeviceMappings[{i}] ({m.get('deviceName')}) is not encrypted"
            for i, m in enumerate(props.get("blockDeviceMappings") or ())
            if m.get("ebs") is not None and not _truthy((m.get("ebs") or {}).get("encrypted"))]


def _endpoint(_t: str, props: Mapping[str, Any], _cfg: dict[str, Any]) -> list[str]:
    vpc = props.get("vpcConfig") or {}
    if vpc.get("endpointPublicAccess") is False:
        return []
    cidrs = list(vpc.get("publicAccessCidrs") or ())
    if not cidrs:
        return ["the API endpoint is public (endpointPublicAccess defaults to true) without publicAccessCidrs"]
    open_ = [c for c in cidrs if c in OPEN_CIDRS]
    return [f"the public API endpoint allows {', '.join(open_)}"] if open_ else []


def _secrets(_t: str, props: Mapping[str, Any], _cfg: dict[str, Any]) -> list[str]:
    enc = props.get("encryptionConfig") or {}
    if "secrets" in (enc.get("resources") or ()) and (enc.get("provider") or {}).get("keyArn"):
        return []
    return ["encryptionConfig does not encrypt 'secrets' with a KMS key"]


def _logging(_t: str, props: Mapping[str, Any], cfg: dict[str, Any]) -> list[str]:
    enabled = set(props.get("enabledClusterLogTypes") or ())
    missing = [t for t in cfg[REQUIRED_LOG_TYPES.name] if t not in enabled]
    return [f"control-plane log types not enabled: {', '.join(missing)}"] if missing else []


def _configuration(value: Any) -> Mapping[str, Any]:
    """An add-on's configurationValues (JSON text, as EKS takes it, or already a mapping); {} if unreadable."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, Mapping) else {}


def _network_policy(_t: str, props: Mapping[str, Any], _cfg: dict[str, Any]) -> list[str]:
    if props.get("addonName") != VPC_CNI:
        return []
    enabled = _configuration(props.get("configurationValues")).get(NETWORK_POLICY_KEY)
    return [] if enabled == "true" else [
        f"configurationValues.{NETWORK_POLICY_KEY} is {'unset' if enabled is None else repr(enabled)}; "
        "NetworkPolicies are accepted but not enforced"]


def open_ingress(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Where a group or rule lets the whole internet in."""
    if resource_type == SECURITY_GROUP:
        return [f"ingress rule {r.get('description') or i!r} allows {c}"
                for i, r in enumerate(props.get("ingress") or ())
                for c in (*(r.get("cidrBlocks") or ()), *(r.get("ipv6CidrBlocks") or ())) if c in OPEN_CIDRS]
    if resource_type == SG_RULE and props.get("type") == "ingress":
        return [f"ingress rule allows {c}" for c in (*(props.get("cidrBlocks") or ()),
                                                     *(props.get("ipv6CidrBlocks") or ())) if c in OPEN_CIDRS]
    if resource_type == VPC_INGRESS:
        return [f"ingress rule allows {c}" for c in (props.get("cidrIpv4"), props.get("cidrIpv6")) if c in OPEN_CIDRS]
    return []


def _open_ingress(resource_type: str, props: Mapping[str, Any], _cfg: dict[str, Any]) -> list[str]:
    return open_ingress(resource_type, props)


def statements(document: Any) -> list[Mapping[str, Any]]:
    """Statements of an IAM policy: JSON text or a mapping; IAM's own shape (Statement/Effect/Action/Resource)
    or getPolicyDocument's arguments (statements/effect/actions/resources)."""
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except ValueError:
            return []
    if not isinstance(document, Mapping):
        return []
    items = document.get("Statement", document.get("statements")) or []
    items = items if is_seq(items) else [items]
    out: list[Mapping[str, Any]] = []
    for s in items:
        if isinstance(s, Mapping):
            out.append({"effect": s.get("Effect", s.get("effect", "Allow")),
                        "actions": s.get("Action", s.get("actions")),
                        "resources": s.get("Resource", s.get("resources"))})
    return out


def _as_list(value: Any) -> list[Any]:
    return list(value) if is_seq(value) else [value]


def admin_statements(document: Any) -> list[int]:
    """Indexes of statements that allow every action ('*') on every resource ('*')."""
    return [i for i, s in enumerate(statements(document))
            if s["effect"] == "Allow" and "*" in _as_list(s["actions"]) and "*" in _as_list(s["resources"])]


def _iam(resource_type: str, props: Mapping[str, Any], _cfg: dict[str, Any]) -> list[str]:
    docs: list[tuple[str, Any]] = []
    if resource_type in IAM_POLICY_PROPS:
        docs.append(("policy", props.get(IAM_POLICY_PROPS[resource_type])))
    elif resource_type == ROLE:
        docs.extend((f"inlinePolicies[{p.get('name')!r}]", p.get("policy")) for p in props.get("inlinePolicies") or ())
    return [f"{where} statement {i} allows '*' on '*'" for where, doc in docs for i in admin_statements(doc)]


PropsTest = Callable[[Mapping[str, Any]], bool]


def _buckets_with(resources: Sequence[Any], rtype: str, ok: PropsTest) -> set[str]:
    """URNs and names of the buckets that a resource of `rtype` satisfying `ok` configures."""
    out: set[str] = set()
    for r in resources:
        if r.resource_type == rtype and ok(r.props):
            out.update(d.urn for d in (r.property_dependencies or {}).get("bucket", ()))
            out.add(str(r.props.get("bucket")))
    return out


def _bucket_check(resources: Sequence[Any], rtype: str, ok: PropsTest, inline: PropsTest, what: str) -> Found:
    covered = _buckets_with(resources, rtype, ok)
    return [(f"bucket {b.name} {what}", b.urn) for b in resources if b.resource_type == BUCKET
            and not inline(b.props) and b.urn not in covered and str(b.props.get("bucket") or b.props.get("id"))
            not in covered]


def _public_access(resources: Sequence[Any], _cfg: dict[str, Any]) -> Found:
    return _bucket_check(resources, PUBLIC_ACCESS_BLOCK, lambda p: all(p.get(f) is True for f in PUBLIC_ACCESS_FLAGS),
                         lambda _p: False, "has no BucketPublicAccessBlock with all four blocks set")


def _encrypts(rules: Any) -> bool:
    return any(((r or {}).get("applyServerSideEncryptionByDefault") or {}).get("sseAlgorithm") for r in rules or ())


def _encryption(resources: Sequence[Any], _cfg: dict[str, Any]) -> Found:
    return _bucket_check(resources, BUCKET_SSE, lambda p: _encrypts(p.get("rules")),
                         lambda p: _encrypts([(p.get("serverSideEncryptionConfiguration") or {}).get("rule")]),
                         "has no server-side encryption configuration")


POLICIES = [
    resource_policy(
        name="launch-template-imdsv2",
        description="Launch templates require IMDSv2 session tokens.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Set metadataOptions.httpTokens: required (hop limit 2 keeps pods working).",
        types=(LAUNCH_TEMPLATE,), check=_imds,
    ),
    resource_policy(
        name="ebs-encrypted",
        description="EBS volumes and launch-template block devices are encrypted.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Set ebs.encrypted: 'true' on every block device mapping (and encrypted: true on volumes).",
        types=(LAUNCH_TEMPLATE, EBS_VOLUME), check=_ebs,
    ),
    resource_policy(
        name="eks-endpoint-restricted",
        description="The EKS API endpoint is private, or public only to an allow-list of CIDRs.",
        severity=Severity.CRITICAL, enforcement=MANDATORY,
        remediation="Set vpcConfig.endpointPublicAccess: false, or publicAccessCidrs to your networks "
                    "(cluster.publicAccessCidrs in the stack config).",
        types=(EKS_CLUSTER,), check=_endpoint,
    ),
    resource_policy(
        name="eks-secrets-encryption",
        description="EKS encrypts Kubernetes secrets with a KMS key.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Set encryptionConfig {resources: [secrets], provider: {keyArn: <KMS key ARN>}}.",
        types=(EKS_CLUSTER,), check=_secrets,
    ),
    resource_policy(
        name="eks-control-plane-logging",
        description="EKS control-plane logging is on for the required log types.",
        severity=Severity.MEDIUM, enforcement=MANDATORY,
        remediation="Add the missing types to enabledClusterLogTypes.",
        types=(EKS_CLUSTER,), check=_logging, settings=(REQUIRED_LOG_TYPES,),
    ),
    resource_policy(
        name="eks-network-policy-enforced",
        description="The VPC CNI add-on enforces Kubernetes NetworkPolicies.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation='Add "enableNetworkPolicy": "true" to the vpc-cni add-on\'s configurationValues (JSON).',
        types=(EKS_ADDON,), check=_network_policy,
    ),
    resource_policy(
        name="no-public-ingress",
        description="No security group allows ingress from 0.0.0.0/0 or ::/0.",
        severity=Severity.CRITICAL, enforcement=MANDATORY,
        remediation="Allow ingress from the VPC, a security group or a named CIDR; expose services through the "
                    "gateway's load balancer instead.",
        types=(SECURITY_GROUP, SG_RULE, VPC_INGRESS), check=_open_ingress,
    ),
    stack_policy(
        name="s3-block-public-access",
        description="Every S3 bucket blocks public access.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Add a BucketPublicAccessBlock for the bucket with blockPublicAcls, blockPublicPolicy, "
                    "ignorePublicAcls and restrictPublicBuckets all true.",
        check=_public_access,
    ),
    stack_policy(
        name="s3-encrypted",
        description="Every S3 bucket has a default server-side encryption configuration.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Add a BucketServerSideEncryptionConfiguration with sseAlgorithm aws:kms (or AES256).",
        check=_encryption,
    ),
    resource_policy(
        name="iam-no-admin-wildcard",
        description="No IAM policy allows '*' actions on '*' resources.",
        severity=Severity.CRITICAL, enforcement=MANDATORY,
        remediation="Name the actions and resources the principal needs (least privilege).",
        types=(*IAM_POLICY_PROPS, ROLE), check=_iam,
    ),
]
