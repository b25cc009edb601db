"""`aifactory preflight STACK --aws` against a simulated account: moto's EC2 (instance type offerings from its
recorded per-zone data, Elastic IPs) where it implements the call, botocore's Stubber with responses in the API's
own shape (validated against botocore's service model) where moto does not (Service Quotas GetServiceQuota for
EC2/EBS codes, DescribeCapacityReservations, the EKS AMI's public SSM parameters). Never a live account."""

from __future__ import annotations

import datetime
import sys
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from infra import cli
from infra.preflight_aws import AMI_PARAMETER, QUOTAS, REQUIRED_ACTIONS, aws_findings
from tests.support.stacks import stack_config, stack_raw

PROD_CIDR_IP = "198.51.100.5"  # inside prod's cluster.publicAccessCidrs (198.51.100.0/28)
ENOUGH = {"P": 2000, "G": 1000, "standard": 500, "gp3": 50, "eip": 5}
RESERVATION = "cr-0a1b2c3d4e5f60718"  # prod's h100-block capacity block


class _Ec2:
    """moto's EC2, with the one call moto does not implement (DescribeCapacityReservations) on a stubbed client."""

    def __init__(self, moto_client: Any, reservations: Any) -> None:
        self._moto, self._reservations = moto_client, reservations

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reservations if name == "describe_capacity_reservations" else self._moto, name)


class Account:
    """What boto3.Session gives preflight --aws: a client per service, here simulated."""

    def __init__(self) -> None:
        session = boto3.Session(region_name="us-east-1", aws_access_key_id="testing",
                                aws_secret_access_key="testing")
        self.quotas = session.client("service-quotas")
        self.ssm = session.client("ssm")
        self.reservations = session.client("ec2")
        self.ec2 = _Ec2(session.client("ec2"), self.reservations)
        self.stubs = {name: Stubber(c) for name, c in
                      (("quotas", self.quotas), ("ssm", self.ssm), ("reservations", self.reservations))}

    def client(self, service: str, config: Any = None) -> Any:
        return {"ec2": self.ec2, "service-quotas": self.quotas, "ssm": self.ssm}[service]

    def quota(self, key: str, value: float) -> None:
        service, code, name = QUOTAS[key]
        self.stubs["quotas"].add_response(
            "get_service_quota", {"Quota": {"ServiceCode": service, "QuotaCode": code, "QuotaName": name,
                                            "Value": value}},
            {"ServiceCode": service, "QuotaCode": code})

    def quotas_for_prod(self, **values: float) -> None:
        """prod asks for G, P and standard vCPUs (sorted), then gp3, then Elastic IPs."""
        for key in ("G", "P", "standard", "gp3", "eip"):
            self.quota(key, values.get(key, ENOUGH[key]))

    def reservation(self, **fields: Any) -> None:
        cr = {"CapacityReservationId": RESERVATION, "InstanceType": "p5.48xlarge", "AvailabilityZone": "us-east-1b",
              "TotalInstanceCount": 4, "State": "scheduled",
              "StartDate": datetime.datetime(2026, 12, 1, 11, 30, tzinfo=datetime.UTC),
              "EndDate": datetime.datetime(2026, 12, 15, 11, 30, tzinfo=datetime.UTC), **fields}
        self.stubs["reservations"].add_response("describe_capacity_reservations", {"CapacityReservations": [cr]},
                                                {"CapacityReservationIds": [RESERVATION]})

    def amis(self, missing: tuple[str, ...] = (), version: str = "1.34") -> None:
        for variant in ("nvidia", "standard"):  # AL2023_x86_64_NVIDIA sorts before _STANDARD: asked first
            name = AMI_PARAMETER.format(version=version, variant=variant)
            if variant in missing:
                self.stubs["ssm"].add_client_error("get_parameter", service_error_code="ParameterNotFound",
                                                   http_status_code=400, expected_params={"Name": name})
            else:
                self.stubs["ssm"].add_response("get_parameter", {"Parameter": {
                    "Name": name, "Type": "String", "Value": "ami-0123456789abcdef0"}}, {"Name": name})


@pytest.fixture
def account() -> Iterator[Account]:
    with mock_aws():
        acct = Account()
        for stub in acct.stubs.values():
            stub.activate()
        yield acct
        for stub in acct.stubs.values():
            stub.assert_no_pending_responses()


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
    assert finding.message.startswith("AL2023_x86_64_NVIDIA for Kubernetes 1.34 is not published in us-east-1")


def test_a_deployer_outside_the_endpoint_allow_list(account: Account) -> None:
    account.quotas_for_prod()
    account.reservation()
    account.amis()
    (finding,) = aws_findings(_prod(), account, deployer_ip="192.0.2.10")
    assert (finding.check, finding.message) == (
        "endpoint", "this deployer's address 192.0.2.10 is in none of cluster.publicAccessCidrs (198.51.100.0/28)")
    assert finding.fix.startswith("add 192.0.2.10/32")


def test_a_missing_permission_names_the_iam_action_and_the_other_checks_still_run(account: Account) -> None:
    account.stubs["quotas"].add_client_error("get_service_quota", service_error_code="AccessDeniedException",
                                             http_status_code=400)
    account.reservation()
    account.amis()
    (finding,) = aws_findings(_prod(), account, deployer_ip=PROD_CIDR_IP)
    assert (finding.check, finding.message) == (
        "permission", "quotas: the credentials may not call servicequotas:GetServiceQuota")
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
