"""`preflight --aws` over a simulated account (tests/support/aws_account.py: moto, Stubber where moto has no API)
runs every check to its end (issue 45 item 4): the caller against cluster.adminRoleArns (an assumed-role ARN is
mapped to its role), the Kubernetes version's EKS status and each add-on pin (eks:DescribeClusterVersions,
DescribeAddonVersions), zones by zone ID (EKS user guide, network-reqs: use1-az3 is refused), VPC, internet gateway,
NAT gateway and Elastic IP quotas against what the stack creates, the capacity block's ReservationType, and every
other ClientError (moto's Service Quotas answers only `vpc` codes: NoSuchResourceException for EC2/EBS ones; EKS
throttling) as 'could not ask' for that check only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from infra import cli
from infra.preflight_aws import CheckOutcome, aws_checks, role_of_caller
from tests.support.aws_account import Account
from tests.support.stacks import stack_config, stack_raw

PROD_CIDR_IP = "198.51.100.5"
DEV_CIDR_IP = "203.0.113.7"


@pytest.fixture
def simulated() -> Iterator[Any]:
    """An account whose deployer assumed `ci-deployer` (no cluster admin of prod) and whose Service Quotas answers
    moto's way."""
    with mock_aws():
        def make(**kwargs: Any) -> Account:
            made.append(Account(**kwargs).activate())
            return made[-1]

        made: list[Account] = []
        yield make
        for acct in made:
            acct.assert_no_pending()


def test_role_of_caller_maps_an_assumed_role_to_its_role() -> None:
    assert role_of_caller("arn:aws:sts::123456789012:assumed-role/platform-admin/ci-42") == (
        "arn:aws:iam::123456789012:role/platform-admin")
    assert role_of_caller("arn:aws:iam::123456789012:user/alice") == "arn:aws:iam::123456789012:user/alice"


def test_every_check_runs_to_the_end_and_names_the_caller_who_is_no_cluster_admin(simulated) -> None:
    account = simulated(caller_role="ci-deployer", stub_ec2_quotas=False)
    account.eks_offers()
    account.reservation()
    account.amis()
    outcomes, findings = aws_checks(stack_config("prod"), account, deployer_ip=PROD_CIDR_IP)
    assert outcomes == [CheckOutcome(c, o) for c, o in (
        ("caller identity", "1 finding(s)"),
        ("Kubernetes version", "ok"),
        ("add-on vpc-cni", "ok"), ("add-on kube-proxy", "ok"), ("add-on coredns", "ok"),
        ("add-on aws-ebs-csi-driver", "ok"),
        ("availability zones", "ok"),
        ("quota L-DB2E81BA", "could not ask (servicequotas:GetServiceQuota: NoSuchResourceException)"),
        ("quota L-417A185B", "could not ask (servicequotas:GetServiceQuota: NoSuchResourceException)"),
        ("quota L-1216C47A", "could not ask (servicequotas:GetServiceQuota: NoSuchResourceException)"),
        ("quota L-7A658B76", "could not ask (servicequotas:GetServiceQuota: NoSuchResourceException)"),
        ("quota L-0263D0A3", "could not ask (servicequotas:GetServiceQuota: NoSuchResourceException)"),
        ("quota L-F678F1CE", "ok"), ("quota L-A4707A72", "ok"), ("quota L-FE5A380F", "ok"),
        ("instance type offerings", "ok"),
        ("capacity reservation h100-block", "ok"),
        ("AMI availability", "ok"),
        ("API endpoint access", "ok"))]
    identity = findings[0]
    assert (identity.check, identity.message) == (
        "identity",
        "the caller arn:aws:sts::123456789012:assumed-role/ci-deployer/deployer (role "
        "arn:aws:iam::123456789012:role/ci-deployer) is none of cluster.adminRoleArns "
        "(arn:aws:iam::123456789012:role/platform-admin, arn:aws:iam::123456789012:role/sre-oncall): the cluster "
        "gives its creator no access entry when admins are listed, so `pulumi up` fails with 401 once the cluster "
        "exists")
    assert identity.fix == ("deploy with one of those roles, or add arn:aws:iam::123456789012:role/ci-deployer to "
                            "cluster.adminRoleArns")
    assert [(f.check, f.message.split(":")[0]) for f in findings[1:]] == [("unanswered", "quota L-DB2E81BA"),
                                                                          ("unanswered", "quota L-417A185B"),
                                                                          ("unanswered", "quota L-1216C47A"),
                                                                          ("unanswered", "quota L-7A658B76"),
                                                                          ("unanswered", "quota L-0263D0A3")]


def test_the_cli_prints_every_checks_outcome(simulated, monkeypatch, capsys) -> None:
    account = simulated(stub_ec2_quotas=False)
    account.eks_offers()
    account.reservation()
    account.amis()
    monkeypatch.setattr("infra.preflight_aws.session_for", lambda cfg, profile=None: account)
    assert cli.main(["preflight", "prod", "--aws", "--deployer-ip", PROD_CIDR_IP]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "preflight --aws prod (us-east-1): 5 finding(s)"
    checks = lines[lines.index("checks:") + 1:]
    assert len(checks) == 19
    assert checks[0] == "  caller identity: ok"  # platform-admin, assumed
    assert "  quota L-F678F1CE: ok" in checks


def test_a_throttled_version_check_could_not_ask_and_the_rest_still_run(simulated) -> None:
    account = simulated(stub_ec2_quotas=False)
    account.stubs["eks"].add_client_error("describe_cluster_versions", service_error_code="ThrottlingException",
                                          service_message="Rate exceeded", http_status_code=429)
    pins = dict(stack_config("dev").cluster.addon_versions, **{"kube-proxy": "v1.35.0-eksbuild.1"})
    for addon in ("vpc-cni", "kube-proxy", "coredns", "aws-ebs-csi-driver"):
        account.stubs["eks"].add_response("describe_addon_versions", {"addons": [{
            "addonName": addon, "addonVersions": [{"addonVersion": pins[addon]}]}]},
            {"addonName": addon, "kubernetesVersion": "1.35"})
    account.amis()
    outcomes, findings = aws_checks(stack_config("dev"), account, deployer_ip=DEV_CIDR_IP)
    assert outcomes[0] == CheckOutcome("caller identity",
                                       "not asked (no cluster.adminRoleArns: the creator gets the admin entry)")
    assert outcomes[1] == CheckOutcome("Kubernetes version",
                                       "could not ask (eks:DescribeClusterVersions: ThrottlingException)")
    assert outcomes[3] == CheckOutcome("add-on kube-proxy", "1 finding(s)")
    assert [(f.check, f.message) for f in findings if f.check != "unanswered" or "Throttling" in f.message] == [
        ("unanswered", "Kubernetes version: eks:DescribeClusterVersions answered ThrottlingException (Rate exceeded)"),
        ("addon", "kube-proxy v1.35.3-eksbuild.2 is not offered for Kubernetes 1.35 (DescribeAddonVersions lists "
                  "v1.35.0-eksbuild.1)")]


def test_a_version_past_standard_support(simulated) -> None:
    account = simulated(stub_ec2_quotas=False)
    account.eks_offers(status="EXTENDED_SUPPORT")
    account.amis()
    _, findings = aws_checks(stack_config("dev"), account, deployer_ip=DEV_CIDR_IP)
    assert [f.message for f in findings if f.check == "version"] == [
        "Kubernetes 1.35 is in EXTENDED_SUPPORT on EKS (standard support ended 2027-03-27)"]


def test_a_zone_eks_refuses_is_named_by_its_zone_id(simulated) -> None:
    """moto maps us-east-1e to use1-az3 (as it records real accounts), a zone ID EKS refuses for cluster subnets."""
    account = simulated(stub_ec2_quotas=False)
    account.eks_offers()
    account.amis()
    raw = stack_raw("dev")
    target = {**raw["target"], "availabilityZones": ["us-east-1a", "us-east-1e"]}
    _, findings = aws_checks(stack_config("dev", target=target), account, deployer_ip=DEV_CIDR_IP)
    (zone,) = [f for f in findings if f.check == "zone"]
    assert zone.message == "us-east-1e is use1-az3 in this account, a zone EKS does not support for cluster subnets"


def test_vpc_and_internet_gateway_quotas_count_what_the_account_has(simulated) -> None:
    """moto's account has a default VPC (and no internet gateway): four more VPCs fill the quota of 5 (moto's recorded
    default of L-F678F1CE), five gateways that of L-A4707A72."""
    account = simulated(stub_ec2_quotas=False)
    account.eks_offers()
    account.amis()
    assert len(account.ec2.describe_internet_gateways()["InternetGateways"]) == 0
    for i in range(4):
        account.ec2.create_vpc(CidrBlock=f"10.{100 + i}.0.0/16")
    for _ in range(5):
        account.ec2.create_internet_gateway()
    _, findings = aws_checks(stack_config("dev"), account, deployer_ip=DEV_CIDR_IP)
    assert [(f.message, f.fix.split(";")[0]) for f in findings if f.check == "quota"] == [
        ("the stack creates one VPC; 5 of the quota of 5 exist already",
         "request at least 6 for 'VPCs per Region': aws service-quotas request-service-quota-increase --service-code "
         "vpc --quota-code L-F678F1CE --desired-value 6 --region us-east-1"),
        ("the stack creates one internet gateway; 5 of the quota of 5 exist already",
         "request at least 6 for 'Internet gateways per Region': aws service-quotas request-service-quota-increase "
         "--service-code vpc --quota-code L-A4707A72 --desired-value 6 --region us-east-1")]


def test_a_capacity_block_pool_naming_an_on_demand_reservation(simulated) -> None:
    account = simulated()
    account.eks_offers()
    account.quotas_for_prod()
    account.reservation(ReservationType="default", State="active")
    account.amis()
    _, findings = aws_checks(stack_config("prod"), account, deployer_ip=PROD_CIDR_IP)
    assert [(f.pool, f.message, f.fix) for f in findings] == [(
        "h100-block", "cr-0a1b2c3d4e5f60718 is a 'default' reservation, the pool's capacity.type 'capacity-block' "
                      "needs ReservationType 'capacity-block'",
        "set nodePools.h100-block.capacity.type to odcr, or name a reservation of that kind")]
