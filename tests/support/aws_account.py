"""A simulated AWS account for `preflight --aws`: moto where it implements the call (STS, EC2 zones, VPCs, gateways,
addresses, instance type offerings, Service Quotas' `vpc` codes), botocore's Stubber with responses in the API's
own shape (validated against botocore's service model) where it does not (EKS DescribeClusterVersions and
DescribeAddonVersions, EC2 DescribeCapacityReservations, the EKS AMIs' public SSM parameters (moto refuses the
reserved /aws/ names), Service Quotas' EC2/EBS codes when a test gives them).
Never a live account: use inside `moto.mock_aws()`."""

from __future__ import annotations

import datetime
from typing import Any

import boto3
from botocore.stub import Stubber

from components.aws.cluster import ADDONS
from infra.preflight_aws import AMI_PARAMETER, QUOTAS

ACCOUNT = "123456789012"  # moto's account; the shipped stacks' adminRoleArns are in it
ENOUGH = {"P": 2000, "G": 1000, "standard": 500, "gp3": 50, "eip": 5}
RESERVATION = "cr-0a1b2c3d4e5f60718"  # prod's h100-block capacity block
REGION = "us-east-1"


class _Split:
    """One client whose named calls go to another (a stubbed one) and the rest to moto's."""

    def __init__(self, moto_client: Any, stubbed: Any, calls: tuple[str, ...],
                 when: Any = lambda kwargs: True) -> None:
        self._moto, self._stubbed, self._calls, self._when = moto_client, stubbed, calls, when

    def __getattr__(self, name: str) -> Any:
        if name not in self._calls:
            return getattr(self._moto, name)
        return lambda **kw: getattr(self._stubbed if self._when(kw) else self._moto, name)(**kw)


class Account:
    """What boto3.Session gives preflight --aws: a client per service. `caller_role`: the role the deployer's
    credentials assumed (None: moto's default IAM user); `stub_ec2_quotas`: answer EC2/EBS quota codes from stubs
    (moto's Service Quotas answers only `vpc` codes and raises NoSuchResourceException for the rest)."""

    def __init__(self, *, caller_role: str | None = "platform-admin", stub_ec2_quotas: bool = True) -> None:
        session = boto3.Session(region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing")
        self.sts = session.client("sts")
        if caller_role is not None:
            creds = self.sts.assume_role(RoleArn=f"arn:aws:iam::{ACCOUNT}:role/{caller_role}",
                                         RoleSessionName="deployer")["Credentials"]
            self.sts = boto3.Session(region_name=REGION, aws_access_key_id=creds["AccessKeyId"],
                                     aws_secret_access_key=creds["SecretAccessKey"],
                                     aws_session_token=creds["SessionToken"]).client("sts")
        stubbed_quotas, self.reservations, self.eks = (session.client(s) for s in ("service-quotas", "ec2", "eks"))
        self.moto_quotas = session.client("service-quotas")
        self.quotas = _Split(self.moto_quotas, stubbed_quotas, ("get_service_quota",),
                             lambda kw: stub_ec2_quotas and kw["ServiceCode"] != "vpc")
        self.ssm = session.client("ssm")
        self.ec2 = _Split(session.client("ec2"), self.reservations, ("describe_capacity_reservations",))
        self.stubs = {"quotas": Stubber(stubbed_quotas), "reservations": Stubber(self.reservations),
                      "eks": Stubber(self.eks), "ssm": Stubber(self.ssm)}

    def client(self, service: str, config: Any = None) -> Any:
        return {"ec2": self.ec2, "service-quotas": self.quotas, "ssm": self.ssm, "sts": self.sts,
                "eks": self.eks}[service]

    def activate(self) -> Account:
        for stub in self.stubs.values():
            stub.activate()
        return self

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
              "TotalInstanceCount": 4, "State": "scheduled", "ReservationType": "capacity-block",
              "StartDate": datetime.datetime(2026, 12, 1, 11, 30, tzinfo=datetime.UTC),
              "EndDate": datetime.datetime(2026, 12, 15, 11, 30, tzinfo=datetime.UTC), **fields}
        self.stubs["reservations"].add_response("describe_capacity_reservations", {"CapacityReservations": [cr]},
                                                {"CapacityReservationIds": [RESERVATION]})

    def amis(self, missing: tuple[str, ...] = (), version: str = "1.35") -> None:
        """The EKS AMIs' public SSM parameters (a missing one: ParameterNotFound). AL2023_x86_64_NVIDIA sorts before
        _STANDARD: asked first."""
        for variant in ("nvidia", "standard"):
            name = AMI_PARAMETER.format(version=version, variant=variant)
            if variant in missing:
                self.stubs["ssm"].add_client_error("get_parameter", service_error_code="ParameterNotFound",
                                                   http_status_code=400, expected_params={"Name": name})
            else:
                self.stubs["ssm"].add_response("get_parameter", {"Parameter": {
                    "Name": name, "Type": "String", "Value": "ami-0123456789abcdef0"}}, {"Name": name})

    def eks_offers(self, version: str = "1.35", *, status: str = "STANDARD_SUPPORT",
                   addons: dict[str, str] | None = None) -> None:
        """DescribeClusterVersions for `version`, then DescribeAddonVersions of each add-on the stack pins, offering
        `addons` (default: the pins of the shipped stacks)."""
        self.stubs["eks"].add_response("describe_cluster_versions", {"clusterVersions": [{
            "clusterVersion": version, "status": status, "versionStatus": status,
            "endOfStandardSupportDate": datetime.datetime(2027, 3, 27, tzinfo=datetime.UTC)}]},
            {"clusterVersions": [version]})
        from tests.support.stacks import stack_config
        offered = addons if addons is not None else dict(stack_config("prod").cluster.addon_versions)
        for addon in ADDONS:
            self.stubs["eks"].add_response("describe_addon_versions", {"addons": [{
                "addonName": addon, "addonVersions": [{"addonVersion": offered[addon], "compatibilities": [
                    {"clusterVersion": version, "defaultVersion": True}]}]}]},
                {"addonName": addon, "kubernetesVersion": version})

    def assert_no_pending(self) -> None:
        for stub in self.stubs.values():
            stub.assert_no_pending_responses()
