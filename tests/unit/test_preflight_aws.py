"""`aifactory preflight STACK --aws` against a simulated account (tests/support/aws_account.py): moto where it
implements the call, botocore's Stubber where it does not. Never a live account."""

from __future__ import annotations

import datetime
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from infra import cli
from infra.preflight_aws import REQUIRED_ACTIONS, aws_findings
from tests.support.aws_account import RESERVATION, Account
from tests.support.stacks import stack_config, stack_raw

PROD_CIDR_IP = "198.51.100.5"  # inside prod's cluster.publicAccessCidrs (198.51.100.0/28)


@pytest.fixture
def account() -> Iterator[Account]:
    """The deployer has assumed prod's platform-admin role; EKS offers 1.35 in standard support and every pin."""
    with mock_aws():
        acct = Account().activate()
        acct.eks_offers()
        yield acct
        acct.assert_no_pending()


def _prod(**overrides: Any) -> Any:
    return stack_config("prod", **overrides)


def test_a_healthy_account_has_no_findings(account: Account) -> None:
    account.quotas_for_prod()
    account.reservation()
    account.amis()
    assert aws_findings(_prod(), account, deployer_ip=PROD_CIDR_IP) == []


def test_a_fresh_accounts_p_quota_names_the_pools_the_need_and_the_request(account: Account) -> None:
    """A new account has 0 vCPUs of 'Running On-Demand P instances': h200 (p5en.48xlarge, 192 vCPUs, maxSize 9) needs
    1728; the capacity block's pool is not sized by the on-demand quota."""
    account.quotas_for_prod(P=0)
    account.reservation()
    account.amis()
    (finding,) = aws_findings(_prod(), account, deployer_ip=PROD_CIDR_IP)
    assert (finding.check, finding.pool) == ("quota", "h200")
    assert "needs 1728 vCPUs of 'Running On-Demand P instances (vCPUs)' (L-417A185B)" in finding.message
    assert finding.fix.endswith("--service-code ec2 --quota-code L-417A185B --desired-value 1728 --region us-east-1")


def test_gp3_and_elastic_ip_quotas(account: Account) -> None:
    """Root volumes at maxSize: 9x100 + 4x1000 + 9x1000 + 8x500 GiB = 17.5 TiB; three NAT gateways need three
    addresses beside the two moto's account already holds."""
    account.ec2.allocate_address(Domain="vpc")
    account.ec2.allocate_address(Domain="vpc")
    account.quotas_for_prod(gp3=10, eip=4)
    account.reservation()
    account.amis()
    found = aws_findings(_prod(), account, deployer_ip=PROD_CIDR_IP)
    assert [(f.check, f.pool, f.message) for f in found] == [
        ("quota", None, "root volumes need 18 TiB of gp3 at maxSize; the quota is 10 TiB"),
        ("quota", None, "3 NAT gateway(s) need 3 Elastic IP(s); 2 of the quota of 4 are allocated already")]
    assert "--quota-code L-0263D0A3 --desired-value 5" in found[1].fix


def test_a_type_not_offered_in_a_pools_zone_names_the_zones_that_offer_it(account: Account) -> None:
    """moto's offering data (recorded from EC2) has p5en.48xlarge in us-east-1a and us-east-1c only."""
    raw = stack_raw("prod")
    raw["nodePools"]["h200"]["availabilityZones"] = ["us-east-1b"]
    account.quotas_for_prod()
    account.reservation()
    account.amis()
    (finding,) = aws_findings(_prod(nodePools=raw["nodePools"]), account, deployer_ip=PROD_CIDR_IP)
    assert (finding.check, finding.pool, finding.message) == (
        "offering", "h200", "p5en.48xlarge is not offered in us-east-1b")
    assert finding.fix.startswith("use zones where p5en.48xlarge is offered: us-east-1a, us-east-1c")


def test_a_reservation_in_another_zone_too_small_and_ending_early(account: Account) -> None:
    account.quotas_for_prod()
    account.reservation(AvailabilityZone="us-east-1a", TotalInstanceCount=2, State="expired",
                        EndDate=datetime.datetime(2026, 12, 8, 11, 30, tzinfo=datetime.UTC))
    account.amis()
    found = aws_findings(_prod(), account, deployer_ip=PROD_CIDR_IP)
    assert [(f.check, f.pool) for f in found] == [("reservation", "h100-block")] * 4
    assert [f.fix for f in found] == [
        "use a reservation that is active (or scheduled, for a capacity block)",
        "set nodePools.h100-block.availabilityZones: [us-east-1a]",
        "set nodePools.h100-block.maxSize to 2 or less",
        "set nodePools.h100-block.capacity.startTime/endTime to the block's window"]
    assert found[3].message == (f"{RESERVATION} runs 2026-12-01T11:30:00Z to 2026-12-08T11:30:00Z, the pool's "
                                "schedule 2026-12-01T11:30:00Z to 2026-12-15T11:30:00Z")


def test_a_reservation_that_does_not_exist(account: Account) -> None:
    account.quotas_for_prod()
    account.stubs["reservations"].add_client_error(
        "describe_capacity_reservations", service_error_code="InvalidCapacityReservationId.NotFound",
        http_status_code=400, expected_params={"CapacityReservationIds": [RESERVATION]})
    account.amis()
    (finding,) = aws_findings(_prod(), account, deployer_ip=PROD_CIDR_IP)
    assert (finding.check, finding.pool, finding.message) == (
        "reservation", "h100-block", f"{RESERVATION}: InvalidCapacityReservationId.NotFound")


def test_an_ami_type_not_published_for_the_version_names_the_pools_using_it(account: Account) -> None:
    account.quotas_for_prod()
    account.reservation()
    account.amis(missing=("nvidia",))
    (finding,) = aws_findings(_prod(), account, deployer_ip=PROD_CIDR_IP)
    assert (finding.check, finding.pool) == ("ami", "h100-block, h200, l40s")
    assert finding.message.startswith("AL2023_x86_64_NVIDIA for Kubernetes 1.35 is not published in us-east-1")


def test_a_deployer_outside_the_endpoint_allow_list(account: Account) -> None:
    account.quotas_for_prod()
    account.reservation()
    account.amis()
    (finding,) = aws_findings(_prod(), account, deployer_ip="192.0.2.10")
    assert (finding.check, finding.message) == (
        "endpoint", "this deployer's address 192.0.2.10 is in none of cluster.publicAccessCidrs (198.51.100.0/28)")
    assert finding.fix.startswith("add 192.0.2.10/32")


def test_a_missing_permission_names_the_iam_action_and_the_other_checks_still_run(account: Account) -> None:
    """Each of the five EC2/EBS quotas is its own check: all are refused, one finding names the action."""
    for _ in range(5):
        account.stubs["quotas"].add_client_error("get_service_quota", service_error_code="AccessDeniedException",
                                                 http_status_code=400)
    account.reservation()
    account.amis()
    (finding,) = aws_findings(_prod(), account, deployer_ip=PROD_CIDR_IP)
    assert (finding.check, finding.message) == (
        "permission", "quota L-DB2E81BA: the credentials may not call servicequotas:GetServiceQuota")
    assert "servicequotas:GetServiceQuota" in REQUIRED_ACTIONS


def test_the_cli_prints_each_finding_with_its_fix_and_exits_1(account: Account, monkeypatch, capsys) -> None:
    account.quotas_for_prod(P=0)
    account.reservation()
    account.amis()
    monkeypatch.setattr("infra.preflight_aws.session_for", lambda cfg, profile=None: account)
    assert cli.main(["preflight", "prod", "--aws", "--deployer-ip", PROD_CIDR_IP]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "preflight --aws prod (us-east-1): 1 finding(s)"
    assert "quota: [h200] needs 1728 vCPUs" in out and "fix: request at least 1728" in out


def test_without_boto3_the_cli_says_which_extra_to_install(monkeypatch, capsys) -> None:
    for module in ("boto3", "botocore", "botocore.exceptions", "botocore.config"):  # `pip install aifactory`
        monkeypatch.setitem(sys.modules, module, None)  # without the [aws] extra
    assert cli.main(["preflight", "prod", "--aws", "--deployer-ip", PROD_CIDR_IP]) == 2
    assert "preflight --aws needs boto3: pip install 'aifactory[aws]'" in capsys.readouterr().err


def test_aws_mode_refuses_a_state_file_and_an_existing_cluster(capsys) -> None:
    assert cli.main(["preflight", "prod", "--aws", "--state", "x.json"]) == 2
    assert "--aws asks the account, not a state" in capsys.readouterr().err
    assert cli.main(["preflight", "onprem", "--aws", "--deployer-ip", "192.0.2.1"]) == 2
    assert "applies to provider 'aws' stacks" in capsys.readouterr().err
