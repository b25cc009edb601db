"""KMS keys for CloudWatch Logs log groups (the VPC flow logs, the EKS control plane's logs).

A log group without a key is encrypted with a key CloudWatch Logs owns; with one of its own, who may read the logs is
the key's policy too, and the key can be disabled or rotated. CloudWatch Logs user guide, "Encrypt log data in
CloudWatch Logs using AWS Key Management Service": the key policy must let the regional service principal
`logs.<region>.amazonaws.com` use the key, limited by the `kms:EncryptionContext:aws:logs:arn` of the log groups it
encrypts; the key must exist (with that policy) before the log group names it.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_aws as aws

__all__ = ["LOG_KEY_ACTIONS", "log_key_policy", "log_group_key"]

LOG_KEY_ACTIONS = ("kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*")


def log_key_policy(*, account: str, region: str, partition: str, log_group: str) -> dict[str, Any]:
    """The key's policy: the account administers it (the default key policy, so IAM policies apply), CloudWatch Logs
    of this region uses it only for log groups named like `log_group` (a name, or a prefix ending in `*`)."""
    return {"Version": "2012-10-17", "Statement": [
        {"Sid": "AccountAdministers", "Effect": "Allow",
         "Principal": {"AWS": f"arn:{partition}:iam::{account}:root"}, "Action": "kms:*", "Resource": "*"},
        {"Sid": "CloudWatchLogsEncrypts", "Effect": "Allow",
         "Principal": {"Service": f"logs.{region}.amazonaws.com"}, "Action": list(LOG_KEY_ACTIONS), "Resource": "*",
         "Condition": {"ArnLike": {"kms:EncryptionContext:aws:logs:arn":
                                   f"arn:{partition}:logs:{region}:{account}:log-group:{log_group}"}}},
    ]}


def log_group_key(name: str, *, log_group: str, description: str, opts: pulumi.ResourceOptions) -> aws.kms.Key:
    """A rotated KMS key whose policy lets CloudWatch Logs encrypt the log groups named like `log_group`."""
    invoke = pulumi.InvokeOutputOptions(parent=opts.parent)
    policy = pulumi.Output.all(aws.get_caller_identity_output(opts=invoke).account_id,
                               aws.get_region_output(opts=invoke).region,
                               aws.get_partition_output(opts=invoke).partition).apply(
        lambda a: json.dumps(log_key_policy(account=a[0], region=a[1], partition=a[2], log_group=log_group),
                             sort_keys=True))
    return aws.kms.Key(name, description=description, enable_key_rotation=True, deletion_window_in_days=30,
                       policy=policy, opts=opts)
