"""iam-s3-read-scoped: no IAM policy of the stack reads S3 beyond named buckets, nor lists a bucket beyond the
prefix it reads objects under (issue: `uri: "s3://*"` gave a model's role s3:GetObject on `arn:aws:s3:::*/*` and
s3:ListBucket on `arn:aws:s3:::*`, while the docs promise "only that prefix").

The policies are the kit's own (`s3_read_policy`, what a model's IRSA role carries) and hand-written IAM JSON;
action wildcards match as IAM matches them (IAM User Guide, "IAM JSON policy elements: Action": `*` and `?`,
case-insensitive)."""

from __future__ import annotations

import json
from typing import Any

from components.k8s.serving import s3_read_policy
from tests.unit.test_policies import found, res

ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ROLE = "aws:iam/role:Role"


def role_policy(doc: dict[str, Any], name: str = "chat-s3-inline") -> dict[str, Any]:
    return res(ROLE_POLICY, name, {"role": "chat-s3", "policy": json.dumps(doc, sort_keys=True)})


def allow(action: Any, resource: Any, condition: dict[str, Any] | None = None) -> dict[str, Any]:
    st: dict[str, Any] = {"Effect": "Allow", "Action": action, "Resource": resource}
    if condition:
        st["Condition"] = condition
    return st


def doc(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def test_a_models_role_for_a_prefix_or_a_whole_named_bucket_passes() -> None:
    assert found("iam-s3-read-scoped", role_policy(s3_read_policy("s3://models-prod/llama/3.1-8b/"))) == []
    assert found("iam-s3-read-scoped", role_policy(s3_read_policy("s3://models-prod"))) == []


def test_a_wildcard_bucket_uri_is_a_violation_for_both_statements() -> None:
    assert found("iam-s3-read-scoped", role_policy(s3_read_policy("s3://*"))) == [
        ("chat-s3-inline", "policy statement 0 allows s3:GetObject on 'arn:aws:s3:::*/*': a wildcard in the bucket "
                           "name reaches other buckets"),
        ("chat-s3-inline", "policy statement 1 allows s3:ListBucket on 'arn:aws:s3:::*': a wildcard in the bucket "
                           "name reaches other buckets"),
    ]
    assert [m for _, m in found("iam-s3-read-scoped", role_policy(s3_read_policy("s3://models-*/llama/")))] == [
        "policy statement 0 allows s3:GetObject on 'arn:aws:s3:::models-*/llama/*': a wildcard in the bucket name "
        "reaches other buckets",
        "policy statement 1 allows s3:ListBucket on 'arn:aws:s3:::models-*': a wildcard in the bucket name reaches "
        "other buckets",
    ]


def test_action_wildcards_and_a_bare_star_resource_are_caught() -> None:
    assert [m for _, m in found("iam-s3-read-scoped", role_policy(doc(allow("s3:Get*", "*"))))] == [
        "policy statement 0 allows s3:GetObject on '*': every bucket"]
    assert [m for _, m in found("iam-s3-read-scoped", role_policy(doc(allow(["S3:*"], ["*"]))))] == [
        "policy statement 0 allows s3:GetObject/s3:ListBucket on '*': every bucket"]
    # Not a read: writing to a named bucket's prefix is another policy's business.
    assert found("iam-s3-read-scoped", role_policy(doc(allow("s3:PutObject", "*")))) == []
    # A Deny is never a grant.
    deny = {"Effect": "Deny", "Action": "s3:*", "Resource": "*"}
    assert found("iam-s3-read-scoped", role_policy(doc(deny))) == []


def test_listing_a_bucket_beyond_the_prefix_its_objects_are_read_under_is_a_violation() -> None:
    reads = allow("s3:GetObject", "arn:aws:s3:::models-prod/llama/*")
    unlimited = allow("s3:ListBucket", "arn:aws:s3:::models-prod")
    assert [m for _, m in found("iam-s3-read-scoped", role_policy(doc(reads, unlimited)))] == [
        "policy statement 1 lists bucket 'models-prod' beyond the prefix its objects are read under (llama/): add "
        "a s3:prefix condition"]
    elsewhere = allow("s3:ListBucket", "arn:aws:s3:::models-prod", {"StringLike": {"s3:prefix": ["other/*"]}})
    assert len(found("iam-s3-read-scoped", role_policy(doc(reads, elsewhere)))) == 1
    limited = allow("s3:ListBucket", "arn:aws:s3:::models-prod", {"StringLike": {"s3:prefix": ["llama/*"]}})
    assert found("iam-s3-read-scoped", role_policy(doc(reads, limited))) == []


def test_inline_policies_on_the_role_itself_are_read_too() -> None:
    role = res(ROLE, "chat-s3", {"inlinePolicies": [{"name": "read", "policy": json.dumps(s3_read_policy("s3://*"))}]})
    assert [m for _, m in found("iam-s3-read-scoped", role)][0].startswith(
        "inlinePolicies['read'] statement 0 allows s3:GetObject on 'arn:aws:s3:::*/*'")
