"""AWS security baseline: IMDSv2 out of pods' reach, encrypted EBS, a private or allow-listed EKS endpoint with
secrets encryption and control-plane logs, NetworkPolicy enforcement in the VPC CNI, no open ingress, private
encrypted TLS-only S3, no admin wildcard IAM.

S3 is checked over pulumi-aws 7's separate resources (type tokens and engine property names as the
installed pulumi_aws declares them): `aws:s3/bucket:Bucket`, `aws:s3/bucketPublicAccessBlock:...`
(blockPublicAcls, blockPublicPolicy, ignorePublicAcls, restrictPublicBuckets: each false unless set),
`aws:s3/bucketServerSideEncryptionConfiguration:...` (rules[].applyServerSideEncryptionByDefault.sseAlgorithm)
and `aws:s3/bucketPolicy:BucketPolicy` (policy: JSON text). A configuring resource names its bucket by
name (`bucket`); the stack policies match it to the bucket by that name or by the property dependency.
"""

from __future__ import annotations

import fnmatch
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
    "PUBLIC_ACCESS_BLOCK",
    "BUCKET_SSE",
    "BUCKET_POLICY",
    "OPEN_CIDRS",
    "denies_insecure_transport",
    "statements",
    "admin_statements",
    "policy_documents",
    "s3_scope_problems",
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
BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
SECURE_TRANSPORT = "aws:SecureTransport"
MAX_IMDS_HOP_LIMIT = 1
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


def _hop_limit(_t: str, props: Mapping[str, Any], _cfg: dict[str, Any]) -> list[str]:
    limit = (props.get("metadataOptions") or {}).get("httpPutResponseHopLimit")
    if limit is None:
        # EC2 sets 2 for AMIs whose ImdsSupport is v2.0, as the EKS AL2023 AMIs are (EC2 API, Image.ImdsSupport).
        return ["metadataOptions.httpPutResponseHopLimit is unset: AMIs with IMDS support v2.0 (AL2023) default "
                "to 2, which lets pods reach the node role's credentials"]
    if limit > MAX_IMDS_HOP_LIMIT:
        return [f"metadataOptions.httpPutResponseHopLimit is {limit}: pods (one hop beyond the node) can reach "
                "IMDS and take the node role's credentials"]
    return []


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


def policy_documents(resource_type: str, props: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(where, document) of every IAM policy document a resource carries: a policy resource's own, or a role's
    inline policies."""
    if resource_type in IAM_POLICY_PROPS:
        return [("policy", props.get(IAM_POLICY_PROPS[resource_type]))]
    if resource_type == ROLE:
        return [(f"inlinePolicies[{p.get('name')!r}]", p.get("policy")) for p in props.get("inlinePolicies") or ()]
    return []


def _iam(resource_type: str, props: Mapping[str, Any], _cfg: dict[str, Any]) -> list[str]:
    return [f"{where} statement {i} allows '*' on '*'"
            for where, doc in policy_documents(resource_type, props) for i in admin_statements(doc)]


S3_READS = ("s3:GetObject", "s3:ListBucket")
S3_ARN = "arn:aws:s3:::"


def _grants(document: Any) -> list[tuple[int, Mapping[str, Any]]]:
    """(index, statement) of an IAM policy's statements, JSON text or a mapping, with their conditions."""
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except ValueError:
            return []
    items = document.get("Statement") if isinstance(document, Mapping) else None
    items = (items if is_seq(items) else [items]) if items else []
    return [(i, s) for i, s in enumerate(items) if isinstance(s, Mapping) and s.get("Effect", "Allow") == "Allow"]


def s3_scope_problems(document: Any) -> list[str]:
    """What an IAM policy lets its principal read in S3 beyond named buckets and the prefix it reads objects under:
    a wildcard in a bucket name (`s3://*` became `arn:aws:s3:::*/*`, every bucket of every account that allows
    it), a bare '*' resource, or a listing of a bucket whose objects are read only under a prefix. Action
    wildcards match as IAM matches them (`s3:Get*`, `s3:*`, `*`; IAM User Guide, "IAM JSON policy elements:
    Action")."""
    problems: list[str] = []
    object_prefixes: dict[str, set[str]] = {}
    listings: list[tuple[int, str, Mapping[str, Any]]] = []
    for i, st in _grants(document):
        actions = [a for a in _as_list(st.get("Action")) if isinstance(a, str)]
        reads = {r for r in S3_READS if any(fnmatch.fnmatchcase(r.lower(), a.lower()) for a in actions)}
        if not reads:
            continue
        for resource in (r for r in _as_list(st.get("Resource")) if isinstance(r, str)):
            if resource == "*":
                problems.append(f"statement {i} allows {'/'.join(sorted(reads))} on '*': every bucket")
                continue
            if not resource.startswith(S3_ARN):
                continue
            bucket, slash, key = resource[len(S3_ARN):].partition("/")
            if any(c in bucket for c in "*?"):
                problems.append(f"statement {i} allows {'/'.join(sorted(reads))} on {resource!r}: a wildcard in "
                                "the bucket name reaches other buckets")
            elif slash and "s3:GetObject" in reads:
                object_prefixes.setdefault(bucket, set()).add(key.rstrip("*"))
            elif not slash and "s3:ListBucket" in reads:
                listings.append((i, bucket, st.get("Condition") or {}))
    for i, bucket, condition in listings:
        prefixes = object_prefixes.get(bucket, set())
        if prefixes and "" not in prefixes:
            limited = [p for op in condition.values() if isinstance(op, Mapping)
                       for p in _as_list(op.get("s3:prefix")) if isinstance(p, str)]
            if not limited or any(not any(p.startswith(o) for o in prefixes) for p in limited):
                problems.append(f"statement {i} lists bucket {bucket!r} beyond the prefix its objects are read "
                                f"under ({', '.join(sorted(prefixes))}): add a s3:prefix condition")
    return problems


def _s3_scope(resource_type: str, props: Mapping[str, Any], _cfg: dict[str, Any]) -> list[str]:
    return [f"{where} {problem}"
            for where, doc in policy_documents(resource_type, props) for problem in s3_scope_problems(doc)]


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


def _access_block_open(_t: str, props: Mapping[str, Any], _cfg: dict[str, Any]) -> list[str]:
    """Flags the provider leaves false when unset (pulumi-aws BucketPublicAccessBlock) count as false."""
    open_ = [f for f in PUBLIC_ACCESS_FLAGS if props.get(f) is not True]
    return [f"{', '.join(open_)} {'is' if len(open_) == 1 else 'are'} not true: the bucket's data can be made "
            "public"] if open_ else []


def _document(value: Any) -> Mapping[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, Mapping) else {}


def _strings(value: Any) -> list[Any]:
    return [] if value is None else _as_list(value)


def denies_insecure_transport(document: Any) -> bool:
    """Whether a bucket policy denies every S3 action to everyone on the bucket and its objects when the request
    is not over TLS (`Bool: {aws:SecureTransport: false}`, the AWS-documented TLS-only statement)."""
    items = _document(document).get("Statement") or []
    for st in items if is_seq(items) else [items]:
        if not isinstance(st, Mapping) or st.get("Effect") != "Deny":
            continue
        principal = st.get("Principal")
        everyone = principal == "*" or (isinstance(principal, Mapping) and "*" in _strings(principal.get("AWS")))
        actions = _strings(st.get("Action"))
        resources = [str(r) for r in _strings(st.get("Resource"))]
        cond = ((st.get("Condition") or {}).get("Bool") or {}).get(SECURE_TRANSPORT)
        insecure = any(str(v).lower() == "false" for v in _strings(cond))
        whole = any(r == "*" or not r.endswith("/*") for r in resources) and \
            any(r == "*" or r.endswith("/*") for r in resources)
        if everyone and insecure and whole and ("s3:*" in actions or "*" in actions):
            return True
    return False


def _tls_only(resources: Sequence[Any], _cfg: dict[str, Any]) -> Found:
    return _bucket_check(resources, BUCKET_POLICY, lambda p: denies_insecure_transport(p.get("policy")),
                         lambda p: denies_insecure_transport(p.get("policy")),
                         "has no bucket policy denying requests without TLS (aws:SecureTransport false)")


POLICIES = [
    resource_policy(
        name="launch-template-imdsv2",
        description="Launch templates require IMDSv2 session tokens.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Set metadataOptions.httpTokens: required.",
        types=(LAUNCH_TEMPLATE,), check=_imds,
    ),
    resource_policy(
        name="launch-template-imds-hop-limit",
        description="Launch templates keep IMDS out of pods' reach (response hop limit 1).",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Set metadataOptions.httpPutResponseHopLimit: 1 and give pods AWS access through IRSA.",
        types=(LAUNCH_TEMPLATE,), check=_hop_limit,
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
    resource_policy(
        name="s3-public-access-block-closed",
        description="No S3 public access block leaves a flag off.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Set blockPublicAcls, blockPublicPolicy, ignorePublicAcls and restrictPublicBuckets to true.",
        types=(PUBLIC_ACCESS_BLOCK,), check=_access_block_open,
    ),
    stack_policy(
        name="s3-tls-only",
        description="Every S3 bucket has a policy denying requests that do not use TLS.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Add a BucketPolicy with a statement {Effect: Deny, Principal: '*', Action: 's3:*', Resource: "
                    "[<bucket ARN>, <bucket ARN>/*], Condition: {Bool: {aws:SecureTransport: 'false'}}}.",
        check=_tls_only,
    ),
    stack_policy(
        name="s3-encrypted",
        description="Every S3 bucket has a default server-side encryption configuration.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Add a BucketServerSideEncryptionConfiguration with sseAlgorithm aws:kms (or AES256).",
        check=_encryption,
    ),
    resource_policy(
        name="iam-s3-read-scoped",
        description="No IAM policy reads S3 beyond named buckets, nor lists a bucket beyond the prefix it reads.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Name the bucket (models.<name>.uri: s3://<bucket>/<prefix>) and limit s3:ListBucket with an "
                    "s3:prefix condition to the prefix the objects are read under.",
        types=(*IAM_POLICY_PROPS, ROLE), check=_s3_scope,
    ),
    resource_policy(
        name="iam-no-admin-wildcard",
        description="No IAM policy allows '*' actions on '*' resources.",
        severity=Severity.CRITICAL, enforcement=MANDATORY,
        remediation="Name the actions and resources the principal needs (least privilege).",
        types=(*IAM_POLICY_PROPS, ROLE), check=_iam,
    ),
]
