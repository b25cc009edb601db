"""LogStore (AWS): the S3 bucket Loki keeps its chunks and index in, and the IRSA role Loki reads and writes
it with.

The bucket is private (all four public-access blocks on), encrypted at rest (SSE-S3), reachable over TLS
only (a bucket policy denies every request with `aws:SecureTransport` false) and expires objects one day
after the log retention: Loki's compactor deletes expired logs itself, and its retention docs ask that the
bucket's lifecycle never remove objects before the retention period ends (grafana.com/docs/loki,
"Log retention": "the lifecycle policy ... should be longer than the retention period"). Only chunks and index
tables expire: the ruler's rules and the compactor's delete-request store live in the same bucket and must
outlive any retention (EXPIRING_PREFIXES). The role trusts
one service account of the cluster's OIDC provider and reaches this bucket only.
"""

from __future__ import annotations

import json
from typing import Any, NotRequired, TypedDict

import pulumi
import pulumi_aws as aws

from components.aws.iam import OidcIssuer, add_policy, arn_with_policies, irsa_role
from components.validation import Problems
from components.vocabulary import LOKI_INDEX_TABLE_PREFIX

__all__ = ["LogStoreArgs", "DEFAULT_LOG_RETENTION_DAYS", "LIFECYCLE_GRACE_DAYS", "NONCURRENT_VERSION_DAYS",
           "OBJECT_ACTIONS", "LOKI_TENANT", "LOKI_INDEX_TABLE_PREFIX", "EXPIRING_PREFIXES", "tls_only_policy",
           "bucket_access_policy", "expiration_days", "lifecycle_rules", "LogStore"]

DEFAULT_LOG_RETENTION_DAYS = 15
LIFECYCLE_GRACE_DAYS = 1  # the compactor deletes at the retention; S3 expires a day later as a backstop
NONCURRENT_VERSION_DAYS = 7  # how long a deleted or overwritten object can be restored (bucket versioning)
OBJECT_ACTIONS = ("s3:GetObject", "s3:PutObject", "s3:DeleteObject")  # Loki reads, writes and compacts chunks
# Loki 3.x's object keys (grafana/loki v3.6.x): with auth_enabled false every request is tenant `fake`
# (pkg/util/fakeauth) and v12+ schemas write chunks at `<tenant>/<fingerprint>/<from>:<through>:<checksum>`
# (pkg/storage/config/schema_config.go, newerExternalKey); TSDB index tables at `index/<table prefix><period>/`
# (IndexTables.PathPrefix "index/"). Not expired: the ruler's `rules/` (pkg/ruler/rulestore/bucketclient) and the
# compactor's delete requests at `index/delete_requests/` (compactor.delete-request-store.key-prefix "index/").
LOKI_TENANT = "fake"
EXPIRING_PREFIXES = {"chunks": f"{LOKI_TENANT}/", "index": f"index/{LOKI_INDEX_TABLE_PREFIX}"}


class LogStoreArgs(TypedDict):
    namespace: str  # the Kubernetes namespace of the service account that uses the bucket
    service_account: str  # the service account (IRSA) that gets the role
    retention_days: NotRequired[int]  # default: 15 (keep logs 15 days; objects expire one day later)
    protect: NotRequired[bool]  # default: false; true: Pulumi `protect` on the bucket (destroy stops before it)


def tls_only_policy(bucket_arn: str) -> dict[str, Any]:
    """Bucket policy: deny every request that does not come over TLS."""
    return {"Version": "2012-10-17", "Statement": [{
        "Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
        "Resource": [bucket_arn, f"{bucket_arn}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }]}


def bucket_access_policy(bucket_arn: str) -> dict[str, Any]:
    """The IRSA role's policy: list this bucket, read/write/delete its objects, nothing else."""
    return {"Version": "2012-10-17", "Statement": [
        {"Sid": "ListBucket", "Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [bucket_arn]},
        {"Sid": "Objects", "Effect": "Allow", "Action": list(OBJECT_ACTIONS), "Resource": [f"{bucket_arn}/*"]},
    ]}


def expiration_days(retention_days: int) -> int:
    return retention_days + LIFECYCLE_GRACE_DAYS


def lifecycle_rules(retention_days: int) -> list[dict[str, Any]]:
    """Expire chunks and index tables a day after the retention; keep an overwritten or deleted object's old version
    NONCURRENT_VERSION_DAYS (versioning: an object deleted by mistake, by the compactor or by hand, can be restored
    meanwhile), then remove it and the delete markers left alone; abort stale multipart uploads anywhere."""
    expire = [{"id": f"expire-{what}", "status": "Enabled", "filter": {"prefix": prefix},
               "expiration": {"days": expiration_days(retention_days)}} for what, prefix in EXPIRING_PREFIXES.items()]
    return [*expire,
            {"id": "expire-noncurrent-versions", "status": "Enabled", "filter": {},
             "noncurrent_version_expiration": {"noncurrent_days": NONCURRENT_VERSION_DAYS},
             "expiration": {"expired_object_delete_marker": True}},
            {"id": "abort-incomplete-uploads", "status": "Enabled", "filter": {},
             "abort_incomplete_multipart_upload": {"days_after_initiation": 1}}]


class LogStore(pulumi.ComponentResource):
    """An S3 bucket for logs and the IRSA role of the service account that uses it.

    Outputs: `bucket_name`, `bucket_arn`, `role_arn`. Raises pulumi.InputPropertiesError for a retention
    below one day.
    """

    bucket_name: pulumi.Output[str]
    bucket_arn: pulumi.Output[str]
    role_arn: pulumi.Output[str]

    def __init__(self, name: str, args: LogStoreArgs, *, cluster: OidcIssuer,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aifactory:aws:LogStore", name, None, opts)
        retention = args.get("retention_days", DEFAULT_LOG_RETENTION_DAYS)
        if retention < 1:
            problems = Problems("log store", name)
            problems.add("retentionDays", f"{retention} must be at least 1")
            problems.raise_any()
        child = pulumi.ResourceOptions(parent=self)
        bucket = aws.s3.Bucket(f"{name}-bucket", force_destroy=False,
                               opts=pulumi.ResourceOptions(parent=self, protect=bool(args.get("protect", False))))
        on_bucket = pulumi.ResourceOptions(parent=bucket)
        aws.s3.BucketPublicAccessBlock(f"{name}-public-access", bucket=bucket.id, block_public_acls=True,
                                       block_public_policy=True, ignore_public_acls=True,
                                       restrict_public_buckets=True, opts=on_bucket)
        # versioning: a deleted or overwritten object (the ruler's rules, the delete-request store, chunks) keeps its
        # previous version NONCURRENT_VERSION_DAYS (the lifecycle then removes it); S3 user guide, "Versioning"
        versioning = aws.s3.BucketVersioning(f"{name}-versioning", bucket=bucket.id,
                                             versioning_configuration={"status": "Enabled"}, opts=on_bucket)
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-encryption", bucket=bucket.id,
            rules=[{"apply_server_side_encryption_by_default": {"sse_algorithm": "AES256"}}], opts=on_bucket)
        aws.s3.BucketPolicy(f"{name}-tls-only", bucket=bucket.id,
                            policy=bucket.arn.apply(lambda arn: json.dumps(tls_only_policy(arn), sort_keys=True)),
                            opts=on_bucket)
        aws.s3.BucketLifecycleConfiguration(  # S3 asks for versioning before rules on noncurrent versions
            f"{name}-lifecycle", bucket=bucket.id,
            rules=lifecycle_rules(retention),  # type: ignore[arg-type]  # engine-shaped dicts, as the schema allows
            opts=pulumi.ResourceOptions(parent=bucket, depends_on=[versioning]))
        # The bucket's ARN is known only after creation: the role's policy is its own child resource.
        self.role = irsa_role(f"{name}-irsa", cluster=cluster, namespace=args["namespace"],
                              service_account=args["service_account"], opts=child)
        add_policy(self.role, aws.iam.RolePolicy(
            f"{name}-irsa-bucket", role=self.role.id,
            policy=bucket.arn.apply(lambda arn: json.dumps(bucket_access_policy(arn), sort_keys=True)),
            opts=pulumi.ResourceOptions(parent=self.role)))
        self.bucket_name = bucket.bucket
        self.bucket_arn = bucket.arn
        # Loki's pods get the ARN with the bucket policy as a dependency: they start only once they may write
        self.role_arn = arn_with_policies(self.role)
        self.register_outputs({"bucketName": bucket.bucket, "bucketArn": bucket.arn, "roleArn": self.role_arn})
