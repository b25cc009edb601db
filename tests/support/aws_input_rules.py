"""What AWS accepts in the strings the kit sends it, as the provider checks them before anything is created.

`pulumi preview` runs pulumi-aws's Check, which applies terraform-provider-aws's schema validators (pulumi-aws
7.x bridges terraform-provider-aws v6) to every input, after auto-naming: a resource without an explicit name
gets `<logical name>-<7 random hex>` (pulumi-terraform-bridge pkg/tfbridge AutoName: separator "-", Randlen 7),
and the generated name must pass the same validator. A few limits are the AWS API's own (documented per rule):
the provider passes those through, and the create call fails instead.

`violations(state)` reads a stack export (synth's state.json) and returns one line per string that breaks a rule:
resource URN, property path, value (shortened) and the rule with its source.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Rule", "RULES", "AUTONAME_SUFFIX", "violations"]

TF = "hashicorp/terraform-provider-aws v6 (upstream of pulumi-aws 7.51.1)"
# pulumi-terraform-bridge pkg/tfbridge/names.go AutoName: URN name + "-" + 7 random hex characters.
AUTONAME_SUFFIX = "-abcdef0"


@dataclass(frozen=True)
class Rule:
    """One validator: length bounds and an optional full-match pattern; `source` names where it comes from."""

    what: str
    max_len: int
    source: str
    min_len: int = 0
    pattern: str | None = None

    def problem(self, value: str) -> str | None:
        if not self.min_len <= len(value) <= self.max_len:
            return f"length {len(value)} outside {self.min_len}..{self.max_len}"
        if self.pattern is not None and re.fullmatch(self.pattern, value) is None:
            return f"does not match {self.pattern}"
        return None


RULES: dict[str, Rule] = {
    # internal/service/ec2/validate.go validSecurityGroupRuleDescription (EC2 API IpRange/UserIdGroupPair
    # Description); hashicorp/terraform-provider-aws#18874: an apostrophe fails the plan
    "sg-rule-description": Rule("security group rule description", 255,
                                f"{TF}: internal/service/ec2/validate.go validSecurityGroupRuleDescription",
                                pattern=r"[A-Za-z0-9 ._\-:/()#,@\[\]+=&;{}!$*]*"),
    # internal/service/ec2/vpc_security_group.go: name and description StringLenBetween(0, 255); EC2
    # CreateSecurityGroup GroupDescription: ASCII a-z, A-Z, 0-9, spaces and ._-:/()#,@[]+=&;{}!$*
    "sg-name": Rule("security group name", 255, f"{TF}: internal/service/ec2/vpc_security_group.go name"),
    "sg-description": Rule("security group description", 255,
                           f"{TF}: internal/service/ec2/vpc_security_group.go description; EC2 API "
                           "CreateSecurityGroup GroupDescription character set",
                           pattern=r"[A-Za-z0-9 ._\-:/()#,@\[\]+=&;{}!$*]*"),
    # internal/verify/validate.go ValidLaunchTemplateName
    "lt-name": Rule("launch template name", 125, f"{TF}: internal/verify/validate.go ValidLaunchTemplateName",
                    min_len=3, pattern=r"[0-9A-Za-z()./_\-]+"),
    # internal/service/ec2/ec2_launch_template.go description StringLenBetween(0, 255)
    "lt-description": Rule("launch template description", 255,
                           f"{TF}: internal/service/ec2/ec2_launch_template.go description"),
    # EC2 user guide, "Run commands when you launch an EC2 instance with user data input": user data is limited to
    # 16 KB in raw form, before base64 encoding (the provider checks only that it is base64).
    "user-data": Rule("launch template user data (decoded bytes)", 16 * 1024,
                      "EC2 user guide, user-data (16 KB raw); verify.ValidBase64String in "
                      "internal/service/ec2/ec2_launch_template.go user_data"),
    # internal/service/iam/role.go roleNameMaxLen = 64, validResourceName: `^[\w+=,.@-]*$`
    "iam-role-name": Rule("IAM role name", 64, f"{TF}: internal/service/iam/role.go roleNameMaxLen, "
                                               "validResourceName", min_len=1, pattern=r"[\w+=,.@-]+"),
    # internal/service/iam/role_policy.go: rolePolicyNameMaxLen = 128, same character set as role names
    "iam-role-policy-name": Rule("IAM role policy name", 128, f"{TF}: internal/service/iam/role_policy.go "
                                                              "rolePolicyNameMaxLen", min_len=1,
                                 pattern=r"[\w+=,.@-]+"),
    # IAM user guide, reference_iam-quotas: role trust policy 2,048 characters (default quota), inline role
    # policies 10,240 characters in aggregate per role, whitespace not counted; the provider checks JSON only
    # (internal/verify/json.go ValidIAMPolicyJSON).
    "trust-policy": Rule("IAM role trust policy (characters, no whitespace)", 2048,
                         "IAM user guide, reference_iam-quotas (role trust policy length)"),
    "inline-policies": Rule("IAM inline policies of one role (characters, no whitespace)", 10240,
                            "IAM user guide, reference_iam-quotas (role policy size, aggregate)"),
    # internal/service/logs/validate.go validLogGroupName
    "log-group-name": Rule("CloudWatch log group name", 512, f"{TF}: internal/service/logs/validate.go "
                                                            "validLogGroupName", min_len=1,
                           pattern=r"[0-9A-Za-z_./#-]+"),
    # internal/service/eks/validate.go validClusterName: 1-100, `^[0-9A-Za-z][A-Za-z0-9\-_]*$`
    "eks-cluster-name": Rule("EKS cluster name", 100, f"{TF}: internal/service/eks/validate.go validClusterName",
                             min_len=1, pattern=r"[0-9A-Za-z][0-9A-Za-z_-]*"),
    # internal/service/s3/bucket.go validBucketName (us-east-1 and every other region since 2018): 3-63
    # lowercase letters, digits, dots and hyphens; pulumi-aws auto-names `bucket` with at most 63 characters
    "s3-bucket-name": Rule("S3 bucket name", 63, f"{TF}: internal/service/s3/bucket.go validBucketName",
                           min_len=3, pattern=r"[0-9a-z][0-9a-z.-]*[0-9a-z]"),
    # internal/service/kms/key.go description StringLenBetween(0, 8192)
    "kms-description": Rule("KMS key description", 8192, f"{TF}: internal/service/kms/key.go description"),
    # EC2 Auto Scaling API PutScheduledUpdateGroupAction ScheduledActionName: 1-255
    "asg-action-name": Rule("scheduled action name", 255, "EC2 Auto Scaling API PutScheduledUpdateGroupAction "
                                                          "ScheduledActionName", min_len=1),
    # EC2 user guide, "Tag restrictions" (and the Auto Scaling API Tag): key 1-128, value 0-256 characters, a key
    # must not begin with aws:
    "tag-key": Rule("tag key", 128, "EC2 user guide, Tag restrictions (key 1-128, no aws: prefix)", min_len=1,
                    pattern=r"(?!aws:).+"),
    "tag-value": Rule("tag value", 256, "EC2 user guide, Tag restrictions (value 0-256)"),
    "tag-count": Rule("tags per resource (default tags included)", 50,
                      "EC2 user guide, Tag restrictions (50 user tags per resource)"),
    # EC2 CreatePlacementGroup GroupName: up to 255 ASCII characters
    "placement-group-name": Rule("placement group name", 255, "EC2 API CreatePlacementGroup GroupName"),
}

# An attachment's policy ARN (internal/verify/validate.go ValidARN: arn:partition:service:region:account:res)
ARN = re.compile(r"^arn:aws[a-z-]*:[a-z0-9-]+:[a-z0-9-]*:(\d{12}|aws)?:.+$")
# An ARN in a policy's Resource: the same shape, and IAM takes the wildcards `*` and `?` within any segment (IAM user
# guide, "IAM JSON policy elements: Resource"); the provider checks the document is JSON, not its ARNs
# (aws_iam_role_policy `policy`: verify.ValidIAMPolicyJSON).
POLICY_ARN = re.compile(r"^arn:aws[a-z-]*:[a-z0-9*?-]+:[a-z0-9*?-]*:(\d{12}|aws|[*?]+)?:.+$")


def _resources(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in state["deployment"]["resources"] if r.get("custom")]


def _logical(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def _name(r: dict[str, Any], prop: str) -> str:
    """The physical name: the input when given, else the auto-name the provider generates."""
    given = r["inputs"].get(prop)
    return given if isinstance(given, str) and given else _logical(r["urn"]) + AUTONAME_SUFFIX


def _json(text: Any) -> Any:
    return json.loads(text) if isinstance(text, str) else text


def _compact(doc: Any) -> int:
    return len(json.dumps(doc, separators=(",", ":")))


def _arns(policy: Any) -> Iterator[str]:
    for st in policy.get("Statement", []):
        for key in ("Resource", "NotResource"):
            value = st.get(key, [])
            for v in value if isinstance(value, list) else [value]:
                if v != "*":
                    yield v


def _checks(r: dict[str, Any], default_tags: dict[str, str]) -> Iterator[tuple[str, str, str]]:
    """(property path, value, rule key) for every string of one resource that a rule covers."""
    typ, inputs = r["type"], r["inputs"]
    names = {"aws:iam/role:Role": ("name", "iam-role-name"),
             "aws:iam/rolePolicy:RolePolicy": ("name", "iam-role-policy-name"),
             "aws:ec2/launchTemplate:LaunchTemplate": ("name", "lt-name"),
             "aws:ec2/securityGroup:SecurityGroup": ("name", "sg-name"),
             "aws:cloudwatch/logGroup:LogGroup": ("name", "log-group-name"),
             "aws:eks/cluster:Cluster": ("name", "eks-cluster-name"),
             "aws:s3/bucket:Bucket": ("bucket", "s3-bucket-name"),
             "aws:ec2/placementGroup:PlacementGroup": ("name", "placement-group-name"),
             "aws:autoscaling/schedule:Schedule": ("scheduledActionName", "asg-action-name")}
    if typ in names:
        prop, rule = names[typ]
        yield prop, _name(r, prop), rule
    descriptions = {"aws:ec2/securityGroup:SecurityGroup": "sg-description",
                    "aws:ec2/launchTemplate:LaunchTemplate": "lt-description",
                    "aws:kms/key:Key": "kms-description"}
    if typ in descriptions and "description" in inputs:
        yield "description", inputs["description"], descriptions[typ]
    if typ == "aws:ec2/securityGroup:SecurityGroup":
        for side in ("ingress", "egress"):
            for i, rule in enumerate(inputs.get(side) or []):
                if "description" in rule:
                    yield f"{side}[{i}].description", rule["description"], "sg-rule-description"
    if typ == "aws:ec2/launchTemplate:LaunchTemplate" and "userData" in inputs:
        try:
            raw = base64.b64decode(inputs["userData"], validate=True)
        except (binascii.Error, ValueError):
            yield "userData", "<not base64>", "user-data"
        else:
            yield "userData", "x" * len(raw), "user-data"
    if typ == "aws:iam/role:Role":
        yield "assumeRolePolicy", "x" * _compact(_json(inputs["assumeRolePolicy"])), "trust-policy"
    if isinstance(inputs.get("tags"), dict):  # the provider adds its default tags to every resource with tags
        tags = {**default_tags, **inputs["tags"]}
        yield "tags", "x" * len(tags), "tag-count"
        for key, value in tags.items():
            yield f"tags.{key}", key, "tag-key"
            yield f"tags.{key}", value, "tag-value"
    if typ == "aws:autoscaling/tag:Tag":
        tag = inputs["tag"]
        yield "tag.key", tag["key"], "tag-key"
        yield "tag.value", tag["value"], "tag-value"


def _default_tags(state: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Provider URN -> its default tags (`defaultTags.tags`), which AWS receives on every taggable resource."""
    out = {}
    for r in state["deployment"]["resources"]:
        if r["type"] == "pulumi:providers:aws":
            dt = _json(r["inputs"].get("defaultTags")) or {}
            out[f"{r['urn']}::{r.get('id', '')}"] = dict(dt.get("tags") or {})
    return out


def violations(state: dict[str, Any]) -> list[str]:
    """One line per string of the state that AWS or its provider would reject."""
    found: list[str] = []
    defaults = _default_tags(state)
    inline: dict[str, int] = {}
    for r in _resources(state):
        if not r["type"].startswith("aws:"):
            continue
        tags = defaults.get(r.get("provider", ""), {})
        for path, value, key in _checks(r, tags):
            if (msg := RULES[key].problem(value)) is not None:
                shown = value if len(value) <= 80 else value[:77] + "..."
                found.append(f"{r['urn']}: {path} {shown!r}: {RULES[key].what} {msg} ({RULES[key].source})")
        if r["type"] == "aws:iam/rolePolicy:RolePolicy":
            policy = _json(r["inputs"]["policy"])
            inline[r["inputs"]["role"]] = inline.get(r["inputs"]["role"], 0) + _compact(policy)
            found += [f"{r['urn']}: policy Resource {a!r} is not an ARN (IAM user guide, IAM JSON policy elements: "
                      "Resource)" for a in _arns(policy) if not POLICY_ARN.match(a)]
        if r["type"] == "aws:iam/rolePolicyAttachment:RolePolicyAttachment" and \
                not ARN.match(r["inputs"]["policyArn"]):
            found.append(f"{r['urn']}: policyArn {r['inputs']['policyArn']!r} is not an ARN")
        if r["type"] == "aws:eks/addon:Addon" and "configurationValues" in r["inputs"]:
            try:
                json.loads(r["inputs"]["configurationValues"])
            except ValueError:
                found.append(f"{r['urn']}: configurationValues is not JSON")
    rule = RULES["inline-policies"]
    found += [f"role {role}: inline policies {size} characters: {rule.what} over {rule.max_len} ({rule.source})"
              for role, size in inline.items() if size > rule.max_len]
    return found
