"""S3 and IMDS policies over hand-written stack-export entries.

Fixtures are written from the pulumi-aws 7 schema (engine camelCase property names, type tokens as the
installed pulumi_aws registers them: aws:s3/bucket:Bucket, aws:s3/bucketPublicAccessBlock:..., ...), not
built with the policy module. The TLS-only statement is the one AWS documents for S3 ("Enforce encryption
in transit": Deny s3:* to everyone on the bucket and its objects when aws:SecureTransport is false).
"""

from __future__ import annotations

import json
from typing import Any

from tests.unit.test_policies import found, res, urn

BUCKET = "aws:s3/bucket:Bucket"
PAB = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
SSE = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
POLICY = "aws:s3/bucketPolicy:BucketPolicy"
LIFECYCLE = "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
ALL_BLOCKED = {"blockPublicAcls": True, "blockPublicPolicy": True, "ignorePublicAcls": True,
               "restrictPublicBuckets": True}


def bucket(name: str) -> dict[str, Any]:
    return res(BUCKET, name, {"bucket": name, "forceDestroy": False},
               outputs={"id": name, "arn": f"arn:aws:s3:::{name}"})


def on(type_: str, bucket_name: str, suffix: str, inputs: dict[str, Any]) -> dict[str, Any]:
    return res(type_, f"{bucket_name}-{suffix}", {"bucket": bucket_name, **inputs},
               deps={"bucket": [urn(BUCKET, bucket_name)]})


def tls_policy(name: str, *, condition: Any = "false", principal: Any = "*", action: Any = "s3:*",
               resources: list[str] | None = None, effect: str = "Deny") -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Sid": "AllowRead", "Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::123456789012:role/loki"},
         "Action": ["s3:GetObject"], "Resource": f"arn:aws:s3:::{name}/*"},
        {"Sid": "DenyInsecureTransport", "Effect": effect, "Principal": principal, "Action": action,
         "Resource": resources if resources is not None else [f"arn:aws:s3:::{name}", f"arn:aws:s3:::{name}/*"],
         "Condition": {"Bool": {"aws:SecureTransport": condition}}}]})


def compliant(name: str) -> list[dict[str, Any]]:
    """A bucket as the observability issue's Loki bucket is meant to be: every guard in place."""
    return [bucket(name), on(PAB, name, "pab", ALL_BLOCKED),
            on(SSE, name, "sse", {"rules": [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "aws:kms"},
                                             "bucketKeyEnabled": True}]}),
            on(POLICY, name, "policy", {"policy": tls_policy(name)}),
            on(LIFECYCLE, name, "lifecycle", {"rules": [{"id": "expire", "status": "Enabled",
                                                         "expiration": {"days": 30}}]})]


S3_POLICIES = ("s3-block-public-access", "s3-public-access-block-closed", "s3-encrypted", "s3-tls-only")


def test_a_fully_guarded_bucket_passes_every_s3_policy() -> None:
    for policy in S3_POLICIES:
        assert found(policy, *compliant("logs")) == [], policy


def test_bucket_alone_is_caught_by_the_three_stack_policies() -> None:
    b = bucket("loki-chunks")
    assert found("s3-block-public-access", b) == [
        ("loki-chunks", "bucket loki-chunks has no BucketPublicAccessBlock with all four blocks set")]
    assert found("s3-encrypted", b) == [("loki-chunks", "bucket loki-chunks has no server-side encryption "
                                                        "configuration")]
    assert found("s3-tls-only", b) == [("loki-chunks", "bucket loki-chunks has no bucket policy denying requests "
                                                       "without TLS (aws:SecureTransport false)")]


def test_access_block_with_a_flag_off_or_unset_is_caught_on_the_block_itself() -> None:
    off = on(PAB, "a", "pab", {**ALL_BLOCKED, "restrictPublicBuckets": False})
    unset = on(PAB, "b", "pab", {"blockPublicAcls": True, "ignorePublicAcls": True})
    assert found("s3-public-access-block-closed", off, unset, on(PAB, "c", "pab", ALL_BLOCKED)) == [
        ("a-pab", "restrictPublicBuckets is not true: the bucket's data can be made public"),
        ("b-pab", "blockPublicPolicy, restrictPublicBuckets are not true: the bucket's data can be made public"),
    ]


def test_tls_policy_found_by_bucket_name_without_a_dependency() -> None:
    by_name = res(POLICY, "logs-policy", {"bucket": "logs", "policy": tls_policy("logs")})
    assert found("s3-tls-only", bucket("logs"), by_name) == []


def test_bucket_policies_that_do_not_enforce_tls() -> None:
    cases = {
        "allow": tls_policy("allow", effect="Allow"),
        "true": tls_policy("true", condition="true"),
        "someone": tls_policy("someone", principal={"AWS": "arn:aws:iam::123456789012:root"}),
        "getonly": tls_policy("getonly", action=["s3:GetObject"]),
        "objects": tls_policy("objects", resources=["arn:aws:s3:::objects/*"]),
        "garbage": "{not json",
    }
    resources = [r for name, doc in cases.items()
                 for r in (bucket(name), on(POLICY, name, "policy", {"policy": doc}))]
    assert sorted(name for name, _ in found("s3-tls-only", *resources)) == sorted(cases)


def test_tls_statement_variants_aws_accepts() -> None:
    """Principal {"AWS": "*"}, Action "*", a boolean false and a single "*" resource deny the same requests."""
    doc = json.dumps({"Statement": {"Effect": "Deny", "Principal": {"AWS": ["*"]}, "Action": "*", "Resource": "*",
                                    "Condition": {"Bool": {"aws:SecureTransport": False}}}})
    assert found("s3-tls-only", bucket("x"), on(POLICY, "x", "policy", {"policy": doc})) == []


def test_inline_bucket_policy_counts() -> None:
    inline = res(BUCKET, "legacy", {"bucket": "legacy", "policy": tls_policy("legacy")})
    assert found("s3-tls-only", inline) == []


def test_imds_hop_limit() -> None:
    def lt(name: str, options: dict[str, Any]) -> dict[str, Any]:
        return res(LT, name, {"metadataOptions": {"httpTokens": "required", **options}})
    assert found("launch-template-imds-hop-limit", lt("two", {"httpPutResponseHopLimit": 2}), lt("unset", {}),
                 lt("one", {"httpPutResponseHopLimit": 1})) == [
        ("two", "metadataOptions.httpPutResponseHopLimit is 2: pods (one hop beyond the node) can reach IMDS and "
                "take the node role's credentials"),
        ("unset", "metadataOptions.httpPutResponseHopLimit is unset: AMIs with IMDS support v2.0 (AL2023) default "
                  "to 2, which lets pods reach the node role's credentials"),
    ]
