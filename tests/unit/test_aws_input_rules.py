"""Every string the kit sends to AWS passes the provider's own input rules (tests/support/aws_input_rules.py), for
each shipped AWS stack and the generated large stack: `pulumi preview` fails on the first one that does not."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components.aws import nodes
from tests.support.aws_input_rules import RULES, violations

AWS_STACKS = ("dev", "staging", "prod")


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_every_string_of_a_shipped_stack_passes_the_providers_rules(stack: str,
                                                                   synthesized: Callable[[str], Path]) -> None:
    state = json.loads((synthesized(stack) / "state.json").read_text())
    assert violations(state) == []


def test_every_string_of_the_generated_large_stack_passes_the_providers_rules(
        large_stack_state: dict[str, Any]) -> None:
    assert violations(large_stack_state) == []


@pytest.mark.parametrize(("rule", "good", "bad"), [
    # terraform-provider-aws internal/service/ec2/validate_test.go TestValidSecurityGroupRuleDescription's own cases
    ("sg-rule-description", "testRule 123 ._-:/()#,@[]+=&;{}!$*", "EFA: all traffic within the pool's fabric"),
    ("sg-rule-description", nodes.EFA_RULE_DESCRIPTION, "`"),
    ("lt-name", "aifactory-prod-h200-lt-abcdef0", "a" * 126),
    ("iam-role-name", "a" * 64, "a" * 65),
    ("eks-cluster-name", "aifactory-prod", "-starts-with-a-hyphen"),
    ("s3-bucket-name", "aifactory-prod-logs-bucket-abcdef0", "Aifactory-Prod-Logs"),
    ("log-group-name", "/aws/eks/aifactory-prod/cluster", "/aws/eks/aifactory prod"),
    ("tag-key", "kubernetes.io/cluster/aifactory-prod", "aws:reserved"),
    ("user-data", "x" * 16384, "x" * 16385),
])
def test_each_rule_accepts_and_rejects_as_its_source_does(rule: str, good: str, bad: str) -> None:
    assert RULES[rule].problem(good) is None
    assert RULES[rule].problem(bad) is not None


def test_an_apostrophe_in_a_rule_description_is_reported_with_its_path_and_source() -> None:
    """The EFA group's rules said "the pool's fabric": the plan failed before anything was created."""
    state = {"deployment": {"resources": [{
        "urn": "urn:pulumi:prod::aifactory::aws:ec2/securityGroup:SecurityGroup::efa", "custom": True,
        "type": "aws:ec2/securityGroup:SecurityGroup",
        "inputs": {"description": "EFA data plane: members only",
                   "ingress": [{"description": "EFA: all traffic within the pool's fabric"}]}}]}}
    (found,) = violations(state)
    assert "ingress[0].description" in found and "validSecurityGroupRuleDescription" in found


def test_a_policy_resource_may_hold_wildcards_in_any_segment_but_must_be_an_arn() -> None:
    """The AWS Load Balancer Controller's documented policy names `arn:aws:ec2:*:*:security-group/*` (IAM takes `*`
    and `?` within any ARN segment: IAM user guide, "IAM JSON policy elements: Resource"); a Resource that is no ARN
    at all is still reported, with its source."""
    policy = {"Statement": [{"Effect": "Allow", "Action": "ec2:CreateTags",
                             "Resource": ["arn:aws:ec2:*:*:security-group/*", "arn:aws:iam::123456789012:role/a?",
                                          "security-group/*"]}]}
    state = {"deployment": {"resources": [{
        "urn": "urn:pulumi:prod::aifactory::aws:iam/rolePolicy:RolePolicy::lbc", "custom": True,
        "type": "aws:iam/rolePolicy:RolePolicy", "inputs": {"role": "lbc", "policy": json.dumps(policy)}}]}}
    assert violations(state) == [
        "urn:pulumi:prod::aifactory::aws:iam/rolePolicy:RolePolicy::lbc: policy Resource 'security-group/*' is not an "
        "ARN (IAM user guide, IAM JSON policy elements: Resource)"]
