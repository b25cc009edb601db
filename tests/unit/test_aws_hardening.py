"""Hardening of the AWS layer: the flow-log role's confused-deputy guard, prod's deletion protection, the EKS
upgrade policy, capacity-block launch templates and one VPC block per stack."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infra.stack.cluster import default_vpc_cidr
from tests.support.stacks import stack_config, stack_raw

AWS_STACKS = ("dev", "staging", "prod")


def _state(synthesized: Callable[[str], Path], stack: str) -> list[dict[str, Any]]:
    return json.loads((synthesized(stack) / "state.json").read_text())["deployment"]["resources"]


def _name(r: dict[str, Any]) -> str:
    return r["urn"].rsplit("::", 1)[-1]


def test_the_flow_log_role_trusts_the_service_only_for_this_accounts_flow_logs(synthesized) -> None:
    """VPC user guide, flow-logs IAM role: without aws:SourceAccount/aws:SourceArn any account's flow log could have
    the service assume this role and write into this account's log group (the confused deputy)."""
    (role,) = [r for r in _state(synthesized, "prod") if r["type"] == "aws:iam/role:Role"
               and _name(r) == "aifactory-prod-flow-logs"]
    (statement,) = json.loads(role["inputs"]["assumeRolePolicy"])["Statement"]
    assert statement["Principal"] == {"Service": "vpc-flow-logs.amazonaws.com"}
    assert statement["Condition"] == {
        "StringEquals": {"aws:SourceAccount": "123456789012"},  # the synth account (infra/mocks.py ACCOUNT_ID)
        "ArnLike": {"aws:SourceArn": "arn:aws:ec2:us-east-1:123456789012:vpc-flow-log/*"}}


@pytest.mark.parametrize(("stack", "protected"), [("prod", True), ("dev", False)])
def test_prod_protects_its_cluster_key_and_log_bucket(synthesized, stack: str, protected: bool) -> None:
    """cluster.deletionProtection (prod: true): EKS deletion protection on the cluster, and Pulumi `protect` on what
    a stray `pulumi destroy` or replacement must not take: the cluster, its secrets key, the Loki bucket."""
    res = _state(synthesized, stack)
    (eks,) = [r for r in res if r["type"] == "aws:eks/cluster:Cluster"]
    assert eks["inputs"].get("deletionProtection", False) is protected
    kept = {r["urn"] for r in res if r.get("protect")}
    (bucket,) = [r for r in res if r["type"] == "aws:s3/bucket:Bucket"]
    (key,) = [r for r in res if r["type"] == "aws:kms/key:Key" and r["urn"].endswith("-secrets")]
    # the bucket's policy, encryption, versioning, lifecycle and public-access block inherit `protect` from it
    # (their parent)
    on_bucket = {r["urn"] for r in res if r.get("parent") == bucket["urn"]}
    assert len(on_bucket) == 5
    assert kept == ({eks["urn"], key["urn"], bucket["urn"], *on_bucket} if protected else set())


def test_every_cluster_sets_its_upgrade_policy(synthesized) -> None:
    """Unset, EKS puts a cluster on EXTENDED support when standard support ends, and bills it (EKS user guide,
    enable-extended-support: "EKS Clusters have the upgrade policy set to enable extended support by default")."""
    for stack in AWS_STACKS:
        (eks,) = [r for r in _state(synthesized, stack) if r["type"] == "aws:eks/cluster:Cluster"]
        assert eks["inputs"]["upgradePolicy"] == {"supportType": "STANDARD"}, stack
    cfg = stack_config("dev", cluster={**stack_raw("dev")["cluster"], "supportType": "EXTENDED"})
    assert cfg.cluster is not None and cfg.cluster.support_type == "EXTENDED"


def test_an_unknown_support_type_names_the_key_and_the_choices() -> None:
    from infra.config import ConfigError

    with pytest.raises(ConfigError) as err:
        stack_config("dev", cluster={**stack_raw("dev")["cluster"], "supportType": "LTS"})
    assert [(p.path, p.message) for p in err.value.problems] == [
        ("cluster.supportType", "'LTS' is not allowed; choose one of: STANDARD, EXTENDED")]


def test_each_aws_stack_has_its_own_vpc_block() -> None:
    """Peering or a Transit Gateway between two stacks' VPCs (the path a private endpoint needs from elsewhere)
    requires non-overlapping CIDRs; every stack used 10.0.0.0/16."""
    blocks = {s: ipaddress.ip_network(stack_config(s).network.vpc_cidr) for s in AWS_STACKS}  # type: ignore[union-attr]
    for a in AWS_STACKS:
        for b in AWS_STACKS:
            assert a == b or not blocks[a].overlaps(blocks[b]), (a, b)
    raw = stack_raw("dev")
    del raw["network"]["vpcCidr"]
    from infra.config import parse

    assert parse(raw, stack="dev").network.vpc_cidr == default_vpc_cidr("dev")  # type: ignore[union-attr]
    assert len({default_vpc_cidr(s) for s in AWS_STACKS}) == 3
    assert all(ipaddress.ip_network(default_vpc_cidr(s)).subnet_of(ipaddress.ip_network("10.0.0.0/8"))
               for s in ("dev", "a-very-long-stack-name", "x"))


def test_the_large_stack_runs_with_the_new_defaults(large_stack_state: dict[str, Any]) -> None:
    (vpc,) = [r for r in large_stack_state["deployment"]["resources"] if r["type"] == "aws:ec2/vpc:Vpc"]
    assert vpc["inputs"]["cidrBlock"] == default_vpc_cidr("large")
