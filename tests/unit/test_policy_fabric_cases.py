"""Fabric policies on hand-written launch templates, node groups, rules and pods: the cases `make mutate` found
untested (EC2 EFA layout: EC2 user guide "efa-acc-inst-types"; one EFA interface per network card at device
index 0, card 0 type efa, the others efa-only). Card counts are written here, never read from the catalog."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.test_policies import container, deployment, found, pod, res

LT = "aws:ec2/launchTemplate:LaunchTemplate"
NG = "aws:eks/nodeGroup:NodeGroup"
SG = "aws:ec2/securityGroup:SecurityGroup"
SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
VPC_IN = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
P4D_CARDS = 4  # p4d.24xlarge: 4 network cards (tests/fixtures/aws_instance_types.yaml)


def nic(card: int, *, kind: str | None = None, device: int = 0) -> dict[str, Any]:
    return {"networkCardIndex": card, "deviceIndex": device,
            "interfaceType": kind or ("efa" if card == 0 else "efa-only"), "securityGroups": ["sg-efa"]}


def template(nics: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return res(LT, "a100-lt", {"networkInterfaces": nics, **extra}, outputs={"id": "lt-1", "name": "a100-lt"})


def group(launch_template: dict[str, Any], *, deps: bool = False, subnets: tuple[str, ...] = ("subnet-a",)
          ) -> dict[str, Any]:
    return res(NG, "a100-ng", {"instanceTypes": ["p4d.24xlarge"], "subnetIds": list(subnets),
                               "launchTemplate": launch_template},
               deps={"launchTemplate": [f"urn:pulumi:test::aifactory::{LT}::a100-lt"]} if deps else None)


LAYOUT = "efa-interface-layout"
PRE = "a100-lt (p4d.24xlarge): "


@pytest.mark.parametrize("reference", [{"id": "lt-1", "version": "1"}, {"name": "a100-lt", "version": "$Latest"}])
def test_a_node_group_naming_the_template_by_id_or_name_makes_it_a_pool(reference: dict[str, str]) -> None:
    """Without property dependencies (a stack export of existing resources), the node group's
    launchTemplate.id or .name ties it to the template: a 3-interface p4d layout is then reported."""
    nics = [nic(c) for c in range(3)]
    assert found(LAYOUT, template(nics), group(reference)) == [
        ("a100-lt", PRE + "3 network interfaces; p4d.24xlarge has 4 network cards, one interface each")]


def test_a_template_no_node_group_uses_and_without_instance_type_is_reported() -> None:
    assert found(LAYOUT, template([nic(0)])) == [
        ("a100-lt", "EFA launch template has no instance type and no node group uses it")]


MISSING_3 = "network cards without an interface: [3]"


@pytest.mark.parametrize(("nics", "problems"), [
    ([nic(0), nic(1), nic(2), nic(4)], ["network card 4 does not exist on p4d.24xlarge (cards 0..3)", MISSING_3]),
    ([nic(0), nic(1), nic(1), nic(2)], ["network card 1 has 2 interfaces; it takes one", MISSING_3]),
    ([nic(0), nic(1, device=1), nic(2), nic(3)],
     ["network card 1: efa-only at device index 1; expected efa-only at device index 0"]),
    ([nic(0, kind="efa-only"), nic(1), nic(2), nic(3)],
     ["network card 0: efa-only at device index 0; expected efa at device index 0"]),
])
def test_layout_problems_per_card(nics: list[dict[str, Any]], problems: list[str]) -> None:
    """Four interfaces on a 4-card type, one thing wrong each: a card the type lacks (so card 3 has none), two
    on one card (likewise), a non-zero device index, an efa-only primary."""
    got = [m for _, m in found(LAYOUT, template(nics), group({"id": "lt-1"}, deps=True))]
    assert got == [PRE + p for p in problems]


# --- security group -------------------------------------------------------------------------------

SGP = "efa-security-group-self-only"
SELF_ALL = {"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True}


def efa_group(ingress: list[dict[str, Any]], egress: list[dict[str, Any]]) -> dict[str, Any]:
    return res(SG, "efa-sg", {"ingress": ingress, "egress": egress}, outputs={"id": "sg-efa"})


def sg_messages(*resources: dict[str, Any]) -> list[str]:
    lt = template([nic(c) for c in range(P4D_CARDS)])
    return [m for _, m in found(SGP, lt, group({"id": "lt-1"}, deps=True), *resources)]


@pytest.mark.parametrize("peer", [{"cidrBlocks": ["10.0.0.0/8"]}, {"ipv6CidrBlocks": ["::/0"]},
                                  {"prefixListIds": ["pl-0123"]}])
def test_inline_self_rules_that_also_name_addresses_are_not_self_only(peer: dict[str, Any]) -> None:
    """self: true does not make a rule self-only when it also opens CIDR ranges or prefix lists."""
    assert sg_messages(efa_group([SELF_ALL, {**SELF_ALL, **peer, "description": "wide"}], [SELF_ALL])) == [
        "a100-lt: security group efa-sg: ingress rule 'wide' allows traffic other than the group itself"]


def test_inline_rule_without_description_is_named_by_protocol_and_all_is_all_traffic() -> None:
    """An undescribed foreign rule is named by its protocol; protocol "all" counts as every protocol."""
    wide = {"protocol": "tcp", "fromPort": 0, "toPort": 65535, "cidrBlocks": ["0.0.0.0/0"]}
    all_ = {**SELF_ALL, "protocol": "all"}
    assert sg_messages(efa_group([all_, wide], [all_])) == [
        "a100-lt: security group efa-sg: ingress rule 'tcp' allows traffic other than the group itself"]


@pytest.mark.parametrize(("kind", "props"), [
    (SG_RULE, {"type": "ingress", "protocol": "-1", "sourceSecurityGroupId": "sg-efa", "cidrBlocks": ["10.0.0.0/8"]}),
    (VPC_IN, {"ipProtocol": "-1", "referencedSecurityGroupId": "sg-efa", "cidrIpv4": "10.0.0.0/8"}),
    (VPC_IN, {"ipProtocol": "-1", "referencedSecurityGroupId": "sg-efa", "cidrIpv6": "::/0"}),
    (VPC_IN, {"ipProtocol": "-1", "referencedSecurityGroupId": "sg-efa", "prefixListId": "pl-0123"}),
])
def test_separate_rules_naming_the_group_and_addresses_are_not_self_only(kind: str, props: dict[str, Any]) -> None:
    rule = res(kind, "extra", {"securityGroupId": "sg-efa", **props})
    assert sg_messages(efa_group([SELF_ALL], [SELF_ALL]), rule) == [
        "a100-lt: security group efa-sg: ingress rule 'extra' allows traffic other than the group itself"]


def test_a_separate_rule_naming_the_group_as_source_is_a_self_rule() -> None:
    """sourceSecurityGroupId equal to the group's own id: the rule is the group's self rule."""
    rule = res(SG_RULE, "in", {"securityGroupId": "sg-efa", "type": "ingress", "protocol": "-1", "fromPort": 0,
                               "toPort": 0, "sourceSecurityGroupId": "sg-efa"})
    assert sg_messages(efa_group([], [SELF_ALL]), rule) == []


def test_rules_of_other_groups_are_not_this_groups_rules() -> None:
    """A foreign rule on another group (securityGroupId sg-other) says nothing about the EFA group."""
    rule = res(VPC_IN, "other", {"securityGroupId": "sg-other", "ipProtocol": "-1", "cidrIpv4": "0.0.0.0/0"})
    assert sg_messages(efa_group([SELF_ALL], [SELF_ALL]), rule) == []


def test_a_group_the_stack_does_not_manage_is_reported_as_unchecked() -> None:
    """Every EFA interface carries sg-efa but no SecurityGroup with that id is in the stack."""
    other = res(SG, "app-sg", {"ingress": [], "egress": []}, outputs={"id": "sg-app"})
    assert sg_messages(other) == [
        "a100-lt: EFA security group sg-efa is not managed by this stack, so it cannot be checked"]


# --- zones, pods ----------------------------------------------------------------------------------

def test_subnets_the_stack_does_not_manage_count_as_their_own_zone() -> None:
    """Subnet ids with no Subnet resource cannot be placed in a zone: each counts as one."""
    lt = template([nic(c) for c in range(P4D_CARDS)])
    ng = group({"id": "lt-1"}, deps=True, subnets=("subnet-x", "subnet-y"))
    assert found("efa-pool-single-az", lt, ng) == [
        ("a100-ng", "EFA node group a100-ng spans 2 zones/subnets (subnet-x, subnet-y); EFA traffic stays within one "
                    "availability zone")]


@pytest.mark.parametrize(("resources", "violates"), [
    ({"limits": {"vpc.amazonaws.com/efa": "4"}}, False),
    ({"requests": {"vpc.amazonaws.com/efa": "4"}}, False),
    ({"requests": {"vpc.amazonaws.com/efa": "0"}, "limits": {"vpc.amazonaws.com/efa": "0"}}, True),
])
def test_efa_devices_in_requests_or_limits(resources: dict[str, Any], violates: bool) -> None:
    """FI_PROVIDER=efa needs a non-zero vpc.amazonaws.com/efa in requests or limits (extended resources may be
    given as limits only); zero devices is none. A second container after a non-EFA one is still checked."""
    plain = container(name="sidecar")
    efa = container(env=[{"name": "FI_PROVIDER", "value": "EFA"}], resources=resources)
    got = found("efa-pods-request-devices", deployment("a", "t", pod(containers=[plain, efa])))
    assert got == ([("t-a", "spec.template.spec: container 'server' sets FI_PROVIDER=efa but requests no "
                            "vpc.amazonaws.com/efa")] if violates else [])
