"""The AWS policies' readings (policies/aws_security.py), case by case with exact results.

Upstream facts (pulumi-aws resource schemas): aws:ebs/volume:Volume `encrypted` and launch templates'
blockDeviceMappings[].ebs.encrypted are booleans the engine may pass as "true"/"false" strings; security groups
carry cidrBlocks and ipv6CidrBlocks per ingress rule, SecurityGroupRule the same at top level with type ingress or
egress, and vpc SecurityGroupIngressRule a single cidrIpv4 / cidrIpv6; "0.0.0.0/0" and "::/0" are the whole IPv4
and IPv6 internet. IAM policy JSON may hold one Statement object instead of a list (IAM JSON policy reference,
"Statement"); getPolicyDocument's arguments spell statements/effect/actions/resources in lower case.
"""

from __future__ import annotations

from typing import Any

import pytest

from policies import aws_security as aws
from policies.fabric import SECURITY_GROUP, SG_RULE, VPC_INGRESS
from tests.unit.test_policies import found, res, urn


@pytest.mark.parametrize(("encrypted", "violations"), [
    (True, []), ("true", []), ("True", []), (False, ["EBS volume is not encrypted"]),
    ("false", ["EBS volume is not encrypted"]), (None, ["EBS volume is not encrypted"]),
])
def test_ebs_volume_encryption(encrypted: Any, violations: list[str]) -> None:
    props = {} if encrypted is None else {"encrypted": encrypted}
    assert aws._ebs(aws.EBS_VOLUME, props, {}) == violations


def test_launch_template_block_devices_must_be_encrypted() -> None:
    props = {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"encrypted": "true"}},
                                     {"deviceName": "/dev/xvdb", "ebs": {"encrypted": False}},
                                     {"deviceName": "/dev/xvdc", "ebs": {}},
                                     {"deviceName": "/dev/xvdd"}]}
    assert aws._ebs("aws:ec2/launchTemplate:LaunchTemplate", props, {}) == [
        "blockDeviceMappings[1] (/dev/xvdb) is not encrypted", "blockDeviceMappings[2] (/dev/xvdc) is not encrypted"]


def test_the_public_endpoint_names_every_open_cidr() -> None:
    props = {"vpcConfig": {"publicAccessCidrs": ["0.0.0.0/0", "203.0.113.0/24", "::/0"]}}
    assert aws._endpoint("", props, {}) == ["the public API endpoint allows 0.0.0.0/0, ::/0"]


def test_open_ingress_reads_ipv4_and_ipv6_in_every_rule_shape() -> None:
    sg = {"ingress": [{"description": "ssh", "cidrBlocks": ["10.0.0.0/8"], "ipv6CidrBlocks": ["::/0"]},
                      {"cidrBlocks": ["0.0.0.0/0"]}]}
    assert aws.open_ingress(SECURITY_GROUP, sg) == ["ingress rule 'ssh' allows ::/0", "ingress rule 1 allows 0.0.0.0/0"]
    assert aws.open_ingress(SG_RULE, {"type": "ingress", "ipv6CidrBlocks": ["::/0"]}) == ["ingress rule allows ::/0"]
    assert aws.open_ingress(SG_RULE, {"type": "egress", "cidrBlocks": ["0.0.0.0/0"]}) == []
    assert aws.open_ingress(VPC_INGRESS, {"cidrIpv4": "0.0.0.0/0"}) == ["ingress rule allows 0.0.0.0/0"]
    assert aws.open_ingress(VPC_INGRESS, {"cidrIpv6": "::/0"}) == ["ingress rule allows ::/0"]
    assert aws.open_ingress(VPC_INGRESS, {"cidrIpv4": "10.0.0.0/8"}) == []
    assert aws.open_ingress("aws:ec2/instance:Instance", {"cidrBlocks": ["0.0.0.0/0"]}) == []


def test_iam_statements_in_either_shape_and_a_single_statement_object() -> None:
    admin = {"Effect": "Allow", "Action": "*", "Resource": "*"}
    assert aws.admin_statements({"Statement": admin}) == [0]
    assert aws.admin_statements({"Statement": [{"Effect": "Deny", "Action": "*", "Resource": "*"}, admin]}) == [1]
    assert aws.admin_statements({"statements": [{"effect": "Deny", "actions": ["*"], "resources": ["*"]},
                                                {"actions": ["*"], "resources": ["*"]}]}) == [1]
    assert aws.admin_statements('{"Statement": [{"Effect": "Allow", "Action": ["s3:*"], "Resource": "*"}]}') == []
    assert aws.admin_statements("not json") == []


def test_a_bucket_is_covered_through_the_configuring_resources_dependency_or_its_name() -> None:
    bucket = res(aws.BUCKET, "data", {"bucket": "data-7f3a"})
    flags = {f: True for f in aws.PUBLIC_ACCESS_FLAGS}
    by_dependency = res(aws.PUBLIC_ACCESS_BLOCK, "pab", flags, deps={"bucket": [urn(aws.BUCKET, "data")]})
    assert found("s3-block-public-access", bucket, by_dependency) == []
    by_name = res(aws.PUBLIC_ACCESS_BLOCK, "pab", {**flags, "bucket": "data-7f3a"})
    assert found("s3-block-public-access", bucket, by_name) == []
    only_id = res(aws.BUCKET, "data", {"id": "data-7f3a"})
    assert found("s3-block-public-access", only_id, by_name) == []
    assert found("s3-block-public-access", only_id) == [
        ("data", "bucket data has no BucketPublicAccessBlock with all four blocks set")]
