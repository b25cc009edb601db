"""efa-security-group-self-only on hand-written security groups and rules (pulumi-aws engine camelCase props).

What EFA needs (EC2 user guide, "efa-start", step 1: prepare an EFA-enabled security group): a group whose
inbound AND outbound rules allow ALL traffic (protocol -1, every port) from and to the group itself, and nothing
else; EFA's SRD transport is neither TCP nor UDP, so a TCP/UDP rule over every port does not carry it
(terraform-aws-eks `all_self_efa`). Rules come inline on `aws:ec2/securityGroup:SecurityGroup` (`ingress`,
`egress`: protocol, fromPort, toPort, self, securityGroups, cidrBlocks, ipv6CidrBlocks, prefixListIds), as
`aws:ec2/securityGroupRule:SecurityGroupRule` (type, protocol, self, sourceSecurityGroupId, cidrBlocks,
ipv6CidrBlocks, prefixListIds) or as `aws:vpc/securityGroupIngressRule|EgressRule` (ipProtocol,
referencedSecurityGroupId, cidrIpv4, cidrIpv6, prefixListId).
"""

from __future__ import annotations

from typing import Any

from tests.unit.test_policies import efa_pool, found, res

POLICY = "efa-security-group-self-only"
SG = "aws:ec2/securityGroup:SecurityGroup"
SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
VPC_IN = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
VPC_OUT = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
PREFIX = "h100-lt: security group efa-sg: "
NO_INGRESS = PREFIX + "no ingress rule allows all traffic with itself (EFA needs every protocol)"
NO_EGRESS = PREFIX + "no egress rule allows all traffic with itself (EFA needs every protocol)"


def group(ingress: list[dict[str, Any]], egress: list[dict[str, Any]]) -> dict[str, Any]:
    return res(SG, "efa-sg", {"ingress": ingress, "egress": egress}, outputs={"id": "sg-efa"})


def check(*resources: dict[str, Any]) -> list[str]:
    return [message for _, message in found(POLICY, *efa_pool("h100", "p5.48xlarge"), *resources)]


def test_self_rules_over_every_port_of_one_protocol_are_not_all_traffic() -> None:
    """TCP or UDP from port 0 to 65535 with itself leaves EFA's own protocol blocked: both directions reported."""
    tcp = {"protocol": "tcp", "fromPort": 0, "toPort": 65535, "self": True}
    udp = {**tcp, "protocol": "udp"}
    assert check(group([tcp], [udp])) == [NO_INGRESS, NO_EGRESS]


def test_separate_rule_resources_over_one_protocol_are_not_all_traffic() -> None:
    """The same with rules as their own resources: a SecurityGroupRule (protocol) and a VPC egress rule
    (ipProtocol), both with the group itself as peer."""
    ingress = res(SG_RULE, "efa-in", {"type": "ingress", "securityGroupId": "sg-efa", "protocol": "tcp",
                                      "fromPort": 0, "toPort": 65535, "self": True})
    egress = res(VPC_OUT, "efa-out", {"securityGroupId": "sg-efa", "ipProtocol": "6", "fromPort": 0, "toPort": 65535,
                                      "referencedSecurityGroupId": "sg-efa"})
    assert check(group([], []), ingress, egress) == [NO_INGRESS, NO_EGRESS]


def test_separate_all_traffic_self_rules_comply() -> None:
    """Protocol -1 ("all" in SecurityGroupRule) with itself as peer, in both directions, is what EFA needs."""
    ingress = res(SG_RULE, "efa-in", {"type": "ingress", "securityGroupId": "sg-efa", "protocol": "all",
                                      "fromPort": 0, "toPort": 0, "self": True})
    egress = res(VPC_OUT, "efa-out", {"securityGroupId": "sg-efa", "ipProtocol": "-1",
                                      "referencedSecurityGroupId": "sg-efa"})
    assert check(group([], []), ingress, egress) == []


def test_rules_that_reference_other_groups_are_not_self_only() -> None:
    """A peer group other than itself opens the fabric to that group's members: inline (self plus another
    group in securityGroups), SecurityGroupRule (sourceSecurityGroupId) and VPC rule (referencedSecurityGroupId)
    are each reported; all-traffic self rules in both directions are present, so nothing else is."""
    self_all = {"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True}
    inline = {**self_all, "securityGroups": ["sg-cluster"], "description": "cluster"}
    rule = res(SG_RULE, "from-nodes", {"type": "ingress", "securityGroupId": "sg-efa", "protocol": "-1",
                                       "fromPort": 0, "toPort": 0, "sourceSecurityGroupId": "sg-nodes"})
    vpc = res(VPC_OUT, "to-nodes", {"securityGroupId": "sg-efa", "ipProtocol": "-1",
                                    "referencedSecurityGroupId": "sg-nodes"})
    assert check(group([self_all, inline], [self_all]), rule, vpc) == [
        PREFIX + "ingress rule 'cluster' allows traffic other than the group itself",
        PREFIX + "ingress rule 'from-nodes' allows traffic other than the group itself",
        PREFIX + "egress rule 'to-nodes' allows traffic other than the group itself",
    ]


def test_a_group_naming_itself_by_id_is_a_self_rule() -> None:
    """An inline rule whose only peer is the group's own id is the same rule as self: true (how a refreshed or
    imported group can read back)."""
    own = {"protocol": "-1", "fromPort": 0, "toPort": 0, "securityGroups": ["sg-efa"]}
    assert check(group([own], [own])) == []


def test_self_rules_that_also_open_prefix_lists_or_ipv6_ranges_are_not_self_only() -> None:
    """A SecurityGroupRule may carry self together with prefixListIds or ipv6CidrBlocks: those peers count."""
    self_all = {"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True}
    base = {"securityGroupId": "sg-efa", "protocol": "-1", "fromPort": 0, "toPort": 0, "self": True}
    plist = res(SG_RULE, "plist", {**base, "type": "ingress", "prefixListIds": ["pl-0123"]})
    v6 = res(SG_RULE, "v6", {**base, "type": "egress", "ipv6CidrBlocks": ["::/0"]})
    assert check(group([self_all], [self_all]), plist, v6) == [
        PREFIX + "ingress rule 'plist' allows traffic other than the group itself",
        PREFIX + "egress rule 'v6' allows traffic other than the group itself",
    ]
