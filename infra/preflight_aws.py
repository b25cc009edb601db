"""`aifactory preflight STACK --aws`: what only the AWS account can tell before `pulumi up`.

The offline preflight (infra/preflight.py) knows the program; it cannot know the account. A fresh account has
0 vCPUs of P-instance quota, on-demand p5/p5en capacity is often not offered in a zone at all, a reservation
may sit in another zone or end before its schedule, and the API endpoint's allow-list may not contain the
deployer: each would fail `pulumi up` only after the node group's 60-minute create timeout. This module asks the
account with the deployer's credentials, read-only (Get*/Describe*/List* calls, listed in REQUIRED_ACTIONS), each
call bounded by CONNECT/READ timeouts and RETRIES; a call the credentials may not make becomes a finding naming
the IAM action, not a failure of the whole run.

What it cannot know: whether on-demand or spot capacity is there at launch time (offerings say a type exists in a
zone, not that EC2 has free hosts), and what other stacks will take from the same quotas meanwhile.

Needs boto3 (`pip install 'aifactory[aws]'`). Exit codes: 0 no findings, 1 findings, 2 config or usage error.
"""

from __future__ import annotations

import datetime
import ipaddress
import math
import sys
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from components import catalog
from components.aws.nodes import AMI_TYPE_CPU, AMI_TYPE_GPU
from components.vocabulary import SYSTEM_POOL
from infra.config import PlatformConfig
from infra.outputs import EXIT_FAILURE, EXIT_OK, UsageError, write_json

__all__ = ["AwsFinding", "CheckOutcome", "QUOTAS", "REQUIRED_ACTIONS", "AMI_PARAMETER", "EKS_DISALLOWED_ZONE_IDS",
           "CONNECT_TIMEOUT_SECONDS", "READ_TIMEOUT_SECONDS", "RETRIES", "quota_code", "role_of_caller",
           "aws_checks", "aws_findings", "aws_preflight_command", "session_for"]

CONNECT_TIMEOUT_SECONDS = 5
READ_TIMEOUT_SECONDS = 15
RETRIES = 2  # botocore "standard" retry mode, attempts in all
CHECKIP_URL = "https://checkip.amazonaws.com"  # AWS's own "what is my address" service (plain text, one line)

# Service Quotas codes (Service Quotas console / `aws service-quotas list-service-quotas --service-code ec2`):
# vCPU quotas of running on-demand instances by family, Elastic IPs per region, gp3 storage per region (TiB).
QUOTAS = {
    "P": ("ec2", "L-417A185B", "Running On-Demand P instances (vCPUs)"),
    "G": ("ec2", "L-DB2E81BA", "Running On-Demand G and VT instances (vCPUs)"),
    "standard": ("ec2", "L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances (vCPUs)"),
    "eip": ("ec2", "L-0263D0A3", "EC2-VPC Elastic IPs"),
    "gp3": ("ebs", "L-7A658B76", "Storage for General Purpose SSD (gp3) volumes, in TiB"),
    # VPC quotas of what the Network component creates (codes as Service Quotas lists them for service `vpc`;
    # moto 5.2.5 records the same defaults in moto/servicequotas/resources/default_quotas/vpc.py)
    "vpc": ("vpc", "L-F678F1CE", "VPCs per Region"),
    "igw": ("vpc", "L-A4707A72", "Internet gateways per Region"),
    "nat": ("vpc", "L-FE5A380F", "NAT gateways per Availability Zone"),
}
# EKS refuses cluster subnets in these zones, named by zone ID because zone names map to different zones in each
# account (EKS user guide, network-reqs: "The subnets can't reside in the following Availability Zones";
# awsdocs/amazon-eks-user-guide@4d52b4d05e3478582e7d10a73cbd9ba9194dd5f7:latest/ug/networking/network-reqs.adoc).
EKS_DISALLOWED_ZONE_IDS = frozenset({"use1-az3", "usw1-az2", "cac1-az3"})
# The IAM actions the checks call (a policy granting exactly these lets `preflight --aws` run whole).
REQUIRED_ACTIONS = (
    "sts:GetCallerIdentity",
    "eks:DescribeClusterVersions",
    "eks:DescribeAddonVersions",
    "ec2:DescribeAvailabilityZones",
    "servicequotas:GetServiceQuota",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeCapacityReservations",
    "ec2:DescribeAddresses",
    "ec2:DescribeVpcs",
    "ec2:DescribeInternetGateways",
    "ec2:DescribeNatGateways",
    "ec2:DescribeSubnets",
    "ssm:GetParameter",
)
# EKS user guide, retrieve-ami-id: the recommended EKS-optimized AMI of a Kubernetes version, per AMI type, is a
# public SSM parameter; it is absent where EKS does not publish that AMI type for that version in the region.
AMI_PARAMETER = "/aws/service/eks/optimized-ami/{version}/amazon-linux-2023/x86_64/{variant}/recommended/image_id"
_AMI_VARIANT = {AMI_TYPE_GPU: "nvidia", AMI_TYPE_CPU: "standard"}
_DENIED = ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedAccess")


@dataclass(frozen=True)
class AwsFinding:
    """One thing the account would refuse: which check, which pool (None: the stack), what and the fix."""

    check: str  # identity | version | addon | zone | quota | offering | reservation | ami | endpoint | permission |
    # unanswered
    pool: str | None
    message: str
    fix: str

    def line(self) -> str:
        where = f"[{self.pool}] " if self.pool else ""
        return f"{self.check}: {where}{self.message}\n    fix: {self.fix}"


@dataclass(frozen=True)
class CheckOutcome:
    """How one check ended: `ok`, `N finding(s)`, `not asked (why)` or `could not ask (action: error code)`."""

    check: str
    outcome: str

    def line(self) -> str:
        return f"  {self.check}: {self.outcome}"


class _Denied(Exception):
    def __init__(self, action: str, detail: str) -> None:
        super().__init__(detail)
        self.action = action


class _Unanswered(Exception):
    """Any other error of a call (throttling, NoSuchResourceException, a timeout): the check could not ask."""

    def __init__(self, action: str, code: str, detail: str) -> None:
        super().__init__(detail)
        self.action, self.code, self.detail = action, code, detail


def quota_code(instance_type: str) -> str:
    """The vCPU quota family of an instance type: P, G (G and VT) or standard (A, C, D, H, I, M, R, T, Z)."""
    family = instance_type[0].lower()
    return "P" if family == "p" else "G" if family in ("g", "v") else "standard"


def session_for(cfg: PlatformConfig, profile: str | None = None) -> Any:
    """A boto3 session in the stack's region (the profile: `--profile`, else the ambient credentials)."""
    try:
        import boto3
    except ImportError:
        raise UsageError("preflight --aws needs boto3: pip install 'aifactory[aws]'") from None
    return boto3.Session(profile_name=profile, region_name=cfg.target.region)


def _client(session: Any, service: str) -> Any:
    from botocore.config import Config

    return session.client(service, config=Config(connect_timeout=CONNECT_TIMEOUT_SECONDS,
                                                 read_timeout=READ_TIMEOUT_SECONDS,
                                                 retries={"max_attempts": RETRIES, "mode": "standard"}))


def _call(action: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
    """One API call; an authorization error becomes _Denied naming the IAM action, any other error of the service or
    the connection _Unanswered (missing credentials stay fatal: no check could ask anything)."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        return fn(**kwargs)
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code", "")
        if code in _DENIED:
            raise _Denied(action, str(err)) from None
        raise _Unanswered(action, code or "error", err.response.get("Error", {}).get("Message", "")) from None
    except NoCredentialsError:
        raise
    except BotoCoreError as err:
        raise _Unanswered(action, type(err).__name__, str(err)) from None


def _denied(err: _Denied, what: str) -> AwsFinding:
    return AwsFinding("permission", None, f"{what}: the credentials may not call {err.action}",
                      f"grant {err.action} (read-only) to the role you deploy with; docs/deploying.md, \"Before the "
                      f"first `pulumi up`\", lists every action preflight --aws needs")


# --------------------------------------------------------------------------------------------
# what the stack needs


@dataclass(frozen=True)
class _Pool:
    name: str
    instance_type: str
    zones: tuple[str, ...]
    max_size: int
    root_gib: int
    capacity: str  # on-demand | odcr | capacity-block
    reservation_id: str | None
    window: tuple[str, str] | None
    ami_type: str


def _pools(cfg: PlatformConfig) -> list[_Pool]:
    assert cfg.cluster is not None
    sp = cfg.cluster.system_pool
    from components.aws.cluster import DEFAULT_SYSTEM_ROOT_VOLUME_GIB

    out = [_Pool(SYSTEM_POOL, sp.instance_type, cfg.target.availability_zones, sp.max_size,
                 DEFAULT_SYSTEM_ROOT_VOLUME_GIB, "on-demand", None, None, AMI_TYPE_CPU)]
    for p in cfg.node_pools.values():
        window = (p.capacity.start_time, p.capacity.end_time) \
            if p.capacity.start_time is not None and p.capacity.end_time is not None else None
        out.append(_Pool(p.name, p.instance_type, tuple(p.availability_zones), p.max_size, p.root_volume_gib,
                         p.capacity.type, p.capacity.reservation_id, window,
                         AMI_TYPE_GPU if catalog.get(p.instance_type).has_gpu else AMI_TYPE_CPU))
    return out


def _quota(sq: Any, key: str) -> float:
    service, code, _ = QUOTAS[key]
    return float(_call("servicequotas:GetServiceQuota", sq.get_service_quota, ServiceCode=service,
                       QuotaCode=code)["Quota"]["Value"])


def _increase(key: str, value: float, region: str) -> str:
    service, code, name = QUOTAS[key]
    return (f"request at least {value:g} for '{name}': aws service-quotas request-service-quota-increase "
            f"--service-code {service} --quota-code {code} --desired-value {value:g} --region {region}")


def _vcpu_need(pools: list[_Pool]) -> dict[str, tuple[int, list[str]]]:
    """vCPUs per quota family at every pool's maxSize (on-demand and ODCR pools: reserved instances count against the
    on-demand quota; capacity blocks do not), with the pools that need them."""
    need: dict[str, tuple[int, list[str]]] = {}
    for p in pools:
        if p.capacity == "capacity-block":
            continue
        vcpus, names = need.get(quota_code(p.instance_type), (0, []))
        need[quota_code(p.instance_type)] = (vcpus + catalog.get(p.instance_type).vcpus * p.max_size,
                                             [*names, p.name])
    return need


def _vcpu_check(key: str, vcpus: int, names: list[str], region: str, sq: Any) -> list[AwsFinding]:
    have = _quota(sq, key)
    if have >= vcpus:
        return []
    return [AwsFinding("quota", ", ".join(names), f"needs {vcpus} vCPUs of '{QUOTAS[key][2]}' ({QUOTAS[key][1]}) at "
                                                  f"maxSize; the account's quota is {have:g}",
                       _increase(key, vcpus, region))]


def _gp3_check(pools: list[_Pool], region: str, sq: Any) -> list[AwsFinding]:
    """gp3 storage of every root volume at maxSize."""
    tib = math.ceil(sum(p.root_gib * p.max_size for p in pools) / 1024)
    if (have := _quota(sq, "gp3")) < tib:
        return [AwsFinding("quota", None, f"root volumes need {tib} TiB of gp3 at maxSize; the quota is {have:g} TiB",
                           _increase("gp3", tib, region))]
    return []


def _nat_zone_names(cfg: PlatformConfig) -> list[str]:
    """The zones the Network component puts a NAT gateway (and its Elastic IP) in."""
    from components.aws.network import nat_zones

    assert cfg.network is not None
    return sorted(set(nat_zones(list(cfg.target.availability_zones), cfg.network.nat_gateways).values()))


def _eip_check(cfg: PlatformConfig, region: str, sq: Any, ec2: Any) -> list[AwsFinding]:
    """Elastic IPs for the NAT gateways beside the ones already allocated."""
    nats = len(_nat_zone_names(cfg))
    used = len(_call("ec2:DescribeAddresses", ec2.describe_addresses)["Addresses"])
    if (have := _quota(sq, "eip")) < used + nats:
        return [AwsFinding("quota", None, f"{nats} NAT gateway(s) need {nats} Elastic IP(s); {used} of the quota of "
                                          f"{have:g} are allocated already",
                           _increase("eip", used + nats, region) + "; or release unused addresses, or set "
                           "network.natGateways: single")]
    return []


def _count_check(key: str, what: str, used: int, region: str, sq: Any) -> list[AwsFinding]:
    """One more `what` (the stack's VPC, its internet gateway) beside the `used` ones the account has."""
    if (have := _quota(sq, key)) < used + 1:
        return [AwsFinding("quota", None, f"the stack creates one {what}; {used} of the quota of {have:g} exist "
                                          "already",
                           _increase(key, used + 1, region) + f"; or delete an unused {what}")]
    return []


def _nat_check(cfg: PlatformConfig, region: str, sq: Any, ec2: Any) -> list[AwsFinding]:
    """One NAT gateway in each NAT zone beside the pending or available ones already there (a per-zone quota)."""
    gateways = [g for g in _call("ec2:DescribeNatGateways", ec2.describe_nat_gateways)["NatGateways"]
                if g.get("State") in ("pending", "available")]
    subnets = sorted({g["SubnetId"] for g in gateways})
    zone_of = {sn["SubnetId"]: sn["AvailabilityZone"] for sn in _call(
        "ec2:DescribeSubnets", ec2.describe_subnets, SubnetIds=subnets)["Subnets"]} if subnets else {}
    have = _quota(sq, "nat")
    out = []
    for zone in _nat_zone_names(cfg):
        used = sum(zone_of.get(g["SubnetId"]) == zone for g in gateways)
        if have < used + 1:
            out.append(AwsFinding("quota", None, f"{zone} already has {used} NAT gateway(s), the quota of "
                                                 f"{have:g} per zone leaves no room for the stack's",
                                  _increase("nat", used + 1, region) + "; or delete an unused NAT gateway there"))
    return out


def _quota_checks(cfg: PlatformConfig, pools: list[_Pool], sq: Any,
                  ec2: Any) -> list[tuple[str, Callable[[], list[AwsFinding]]]]:
    """One check per quota, each asked on its own: a quota the region cannot answer for leaves the others asked."""
    region = cfg.target.region or ""
    checks: list[tuple[str, Callable[[], list[AwsFinding]]]] = [
        (f"quota {QUOTAS[key][1]}", lambda key=key, v=v, n=n: _vcpu_check(key, v, n, region, sq))  # type: ignore[misc]
        for key, (v, n) in sorted(_vcpu_need(pools).items())]
    return [*checks,
            (f"quota {QUOTAS['gp3'][1]}", lambda: _gp3_check(pools, region, sq)),
            (f"quota {QUOTAS['eip'][1]}", lambda: _eip_check(cfg, region, sq, ec2)),
            (f"quota {QUOTAS['vpc'][1]}", lambda: _count_check(
                "vpc", "VPC", len(_call("ec2:DescribeVpcs", ec2.describe_vpcs)["Vpcs"]), region, sq)),
            (f"quota {QUOTAS['igw'][1]}", lambda: _count_check(
                "igw", "internet gateway", len(_call("ec2:DescribeInternetGateways",
                                                     ec2.describe_internet_gateways)["InternetGateways"]), region, sq)),
            (f"quota {QUOTAS['nat'][1]}", lambda: _nat_check(cfg, region, sq, ec2))]


def _offering_findings(pools: list[_Pool], ec2: Any) -> list[AwsFinding]:
    """DescribeInstanceTypeOfferings per zone: a pool whose type is not offered in one of its zones never gets a
    node there (reserved pools: their reservation decides, see _reservation_findings)."""
    types = sorted({p.instance_type for p in pools})
    offered: dict[str, set[str]] = {}
    kwargs: dict[str, Any] = {"LocationType": "availability-zone",
                              "Filters": [{"Name": "instance-type", "Values": types}]}
    while True:
        page = _call("ec2:DescribeInstanceTypeOfferings", ec2.describe_instance_type_offerings, **kwargs)
        for o in page.get("InstanceTypeOfferings", []):
            offered.setdefault(o["InstanceType"], set()).add(o["Location"])
        if not page.get("NextToken"):
            break
        kwargs["NextToken"] = page["NextToken"]
    out = []
    for p in pools:
        missing = [z for z in p.zones if z not in offered.get(p.instance_type, set())]
        if missing and p.capacity == "on-demand":
            where = sorted(offered.get(p.instance_type, set()))
            fix = (f"use zones where {p.instance_type} is offered: {', '.join(where)}" if where else
                   f"{p.instance_type} is offered in no zone of this region: choose another type or region")
            out.append(AwsFinding("offering", p.name, f"{p.instance_type} is not offered in {', '.join(missing)}",
                                  fix + " (nodePools.<pool>.availabilityZones, or target.availabilityZones)"))
    return out


def _utc(value: str) -> datetime.datetime:
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


def _reservation_findings(p: _Pool, ec2: Any, zones: _Zones) -> list[AwsFinding]:
    """DescribeCapacityReservations for the reservation a pool names: it exists, is of the pool's kind (a capacity
    block's ReservationType is `capacity-block`, an ODCR's `default`), is usable (active, or scheduled for a block not
    started yet), is in the pool's zone (by zone ID too: a reservation shared from another account names the zone as
    that account maps it), of its type, holds maxSize instances, and a block's window covers the pool's schedule."""
    out: list[AwsFinding] = []
    assert p.reservation_id is not None
    try:
        found = _call("ec2:DescribeCapacityReservations", ec2.describe_capacity_reservations,
                      CapacityReservationIds=[p.reservation_id])["CapacityReservations"]
    except _Unanswered as err:
        if not err.code.startswith("InvalidCapacityReservationId"):  # NotFound, Malformed
            raise
        return [AwsFinding("reservation", p.name, f"{p.reservation_id}: {err.code}",
                           "check capacity.reservationId and that the reservation is in this account and region")]
    if not found:
        return [AwsFinding("reservation", p.name, f"{p.reservation_id} not found",
                           "check capacity.reservationId (account and region)")]
    cr = found[0]
    kind = "capacity-block" if p.capacity == "capacity-block" else "default"
    if (rtype := cr.get("ReservationType", "default")) != kind:
        out.append(AwsFinding("reservation", p.name, f"{p.reservation_id} is a {rtype!r} reservation, the pool's "
                                                     f"capacity.type {p.capacity!r} needs ReservationType {kind!r}",
                              f"set nodePools.{p.name}.capacity.type to "
                              f"{'capacity-block' if rtype == 'capacity-block' else 'odcr'}, or name a reservation of "
                              "that kind"))
    usable = ("active",) if p.capacity == "odcr" else ("active", "scheduled", "payment-pending")
    if cr.get("State") not in usable:
        out.append(AwsFinding("reservation", p.name, f"{p.reservation_id} is {cr.get('State')!r}; the pool "
                                                     f"needs {' or '.join(usable)}",
                              "use a reservation that is active (or scheduled, for a capacity block)"))
    if cr.get("AvailabilityZone") not in p.zones:
        out.append(AwsFinding("reservation", p.name, f"{p.reservation_id} is in {cr.get('AvailabilityZone')}, "
                                                     f"the pool in {', '.join(p.zones)}",
                              f"set nodePools.{p.name}.availabilityZones: [{cr.get('AvailabilityZone')}]"))
    elif (cr_id := cr.get("AvailabilityZoneId")) and zones.ids and cr_id not in {zones.ids.get(z) for z in p.zones}:
        out.append(AwsFinding("reservation", p.name, f"{p.reservation_id} is in zone ID {cr_id}; in this account "
                                                     + ", ".join(f"{z} is {zones.ids.get(z)}" for z in p.zones),
                              f"set nodePools.{p.name}.availabilityZones to the zone this account maps to {cr_id}: "
                              f"{zones.name_of(cr_id)}"))
    if cr.get("InstanceType") != p.instance_type:
        out.append(AwsFinding("reservation", p.name, f"{p.reservation_id} reserves {cr.get('InstanceType')}, "
                                                     f"the pool runs {p.instance_type}",
                              f"set nodePools.{p.name}.instanceType: {cr.get('InstanceType')}"))
    if int(cr.get("TotalInstanceCount", 0)) < p.max_size:
        out.append(AwsFinding("reservation", p.name, f"{p.reservation_id} holds "
                                                     f"{cr.get('TotalInstanceCount')} instance(s), the pool's "
                                                     f"maxSize is {p.max_size}",
                              f"set nodePools.{p.name}.maxSize to {cr.get('TotalInstanceCount')} or less"))
    if p.window is not None:
        start, end = (_utc(t) for t in p.window)
        cr_start, cr_end = cr.get("StartDate"), cr.get("EndDate")
        if cr_start is not None and cr_start > start or cr_end is not None and cr_end < end:
            out.append(AwsFinding("reservation", p.name,
                                  f"{p.reservation_id} runs {_iso(cr_start)} to {_iso(cr_end)}, the pool's "
                                  f"schedule {p.window[0]} to {p.window[1]}",
                                  f"set nodePools.{p.name}.capacity.startTime/endTime to the block's window"))
    return out


def _iso(value: Any) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if isinstance(value, datetime.datetime) else str(value)


class _Zones:
    """The account's zones (DescribeAvailabilityZones), asked once by the zone check and read by the reservation
    checks: zone name -> zone ID, which differs per account."""

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}

    def name_of(self, zone_id: str) -> str:
        return next((n for n, i in self.ids.items() if i == zone_id), f"(no zone of this account has ID {zone_id})")


def _zone_findings(cfg: PlatformConfig, pools: list[_Pool], ec2: Any, zones: _Zones) -> list[AwsFinding]:
    """Every zone of the stack exists in this account, is an availability zone (not a Local or Wavelength Zone), is
    available, and is not one of the zone IDs EKS refuses (EKS_DISALLOWED_ZONE_IDS: by ID, since names map to
    different zones per account)."""
    answer = _call("ec2:DescribeAvailabilityZones", ec2.describe_availability_zones, AllAvailabilityZones=True)
    found = {z["ZoneName"]: z for z in answer["AvailabilityZones"]}
    zones.ids.update({n: z["ZoneId"] for n, z in found.items()})
    out = []
    wanted = list(dict.fromkeys([*cfg.target.availability_zones, *(z for p in pools for z in p.zones)]))
    for name in wanted:
        z = found.get(name)
        users = ", ".join(p.name for p in pools if name in p.zones and p.name != SYSTEM_POOL) or None
        if z is None:
            out.append(AwsFinding("zone", users, f"{name} is not a zone of {cfg.target.region} in this account",
                                  f"choose zones of: {', '.join(sorted(found))} (target.availabilityZones)"))
        elif z.get("ZoneType", "availability-zone") != "availability-zone" or z.get("State") != "available":
            out.append(AwsFinding("zone", users, f"{name} is a {z.get('ZoneType')} in state {z.get('State')!r}",
                                  "use available availability zones (target.availabilityZones)"))
        elif z["ZoneId"] in EKS_DISALLOWED_ZONE_IDS and name in cfg.target.availability_zones:
            out.append(AwsFinding("zone", None, f"{name} is {z['ZoneId']} in this account, a zone EKS does not "
                                                "support for cluster subnets",
                                  f"replace {name} in target.availabilityZones (EKS user guide, network-reqs)"))
    return out


def role_of_caller(arn: str) -> str:
    """The IAM role ARN behind an STS caller ARN (arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION ->
    arn:aws:iam::ACCOUNT:role/ROLE); any other ARN (a user, a role) as it is. The assumed-role ARN drops the role's
    path, so a listed role with a path compares by account and name (see _is_admin)."""
    parts = arn.split(":", 5)
    if len(parts) == 6 and parts[2] == "sts" and parts[5].startswith("assumed-role/"):
        return f"arn:{parts[1]}:iam::{parts[4]}:role/{parts[5].split('/')[1]}"
    return arn


def _account_and_name(arn: str) -> tuple[str, str]:
    return arn.split(":")[4], arn.rsplit("/", 1)[-1]


def _is_admin(role_arn: str, admins: Iterable[str]) -> bool:
    return ":role/" in role_arn and any(_account_and_name(role_arn) == _account_and_name(a) for a in admins)


def _identity_findings(cfg: PlatformConfig, sts: Any) -> list[AwsFinding]:
    """With cluster.adminRoleArns the creator gets no access entry of its own (bootstrapClusterCreatorAdminPermissions
    false), so the caller must be one of them, or `pulumi up` fails with 401 right after creating the cluster."""
    assert cfg.cluster is not None
    admins = cfg.cluster.admin_role_arns
    arn = _call("sts:GetCallerIdentity", sts.get_caller_identity)["Arn"]
    role = role_of_caller(arn)
    if _is_admin(role, admins):
        return []
    as_role = f" (role {role})" if role != arn else ""
    return [AwsFinding("identity", None, f"the caller {arn}{as_role} is none of cluster.adminRoleArns "
                                         f"({', '.join(admins)}): the cluster gives its creator no access entry when "
                                         "admins are listed, so `pulumi up` fails with 401 once the cluster exists",
                       f"deploy with one of those roles, or add {role} to cluster.adminRoleArns")]


def _version_findings(cfg: PlatformConfig, eks: Any) -> list[AwsFinding]:
    """eks:DescribeClusterVersions: EKS offers the stack's version here and it is in standard support (with
    supportType STANDARD a version past it is upgraded by EKS, and the stack then asks for a downgrade)."""
    v = cfg.kubernetes_version
    found = _call("eks:DescribeClusterVersions", eks.describe_cluster_versions, clusterVersions=[v])["clusterVersions"]
    if not found:
        return [AwsFinding("version", None, f"EKS offers no Kubernetes {v} in {cfg.target.region}",
                           "choose a version `aws eks describe-cluster-versions` lists (kubernetesVersion)")]
    status = found[0].get("versionStatus") or found[0].get("status")
    if status != "STANDARD_SUPPORT":
        end = found[0].get("endOfStandardSupportDate")
        ended = end.date().isoformat() if isinstance(end, datetime.datetime) else end
        return [AwsFinding("version", None, f"Kubernetes {v} is in {status} on EKS (standard support ended {ended})",
                           "raise kubernetesVersion one minor version at a time (docs/deploying.md, \"Upgrading "
                           "Kubernetes\")")]
    return []


def _addon_findings(addon: str, version: str, kubernetes_version: str, eks: Any) -> list[AwsFinding]:
    """eks:DescribeAddonVersions for the cluster's version lists the pinned version of the add-on."""
    kwargs: dict[str, Any] = {"addonName": addon, "kubernetesVersion": kubernetes_version}
    offered: list[str] = []
    while True:
        page = _call("eks:DescribeAddonVersions", eks.describe_addon_versions, **kwargs)
        offered += [v["addonVersion"] for a in page.get("addons", []) for v in a.get("addonVersions", [])]
        if not page.get("nextToken"):
            break
        kwargs["nextToken"] = page["nextToken"]
    if version in offered:
        return []
    return [AwsFinding("addon", None, f"{addon} {version} is not offered for Kubernetes {kubernetes_version} "
                                      f"(DescribeAddonVersions lists {', '.join(offered[:3]) or 'none'}"
                                      f"{', ...' if len(offered) > 3 else ''})",
                       f"pin cluster.addonVersions.{addon} to a listed version: aws eks describe-addon-versions "
                       f"--kubernetes-version {kubernetes_version} --addon-name {addon}")]


def _addon_checks(cfg: PlatformConfig, eks: Any) -> list[tuple[str, Callable[[], list[AwsFinding]] | str]]:
    """One check per add-on at the version the program decides (the pin, else the kit's default); an add-on left to
    EKS's default version is not asked."""
    from components.aws.addons import addon_versions
    from components.aws.cluster import ADDONS

    assert cfg.cluster is not None
    decided = addon_versions(ADDONS, kubernetes_version=cfg.kubernetes_version,
                             pinned=dict(cfg.cluster.addon_versions))
    def check(addon: str) -> Callable[[], list[AwsFinding]]:
        return lambda: _addon_findings(addon, decided.versions[addon], cfg.kubernetes_version, eks)

    return [(f"add-on {a}", check(a) if a in decided.versions else "not asked (not pinned: EKS's default version)")
            for a in ADDONS]


def _ami_findings(cfg: PlatformConfig, pools: list[_Pool], ssm: Any) -> list[AwsFinding]:
    """The EKS-optimized AL2023 AMI of each AMI type the pools use, for the stack's Kubernetes version."""
    out = []
    for ami_type in sorted({p.ami_type for p in pools}):
        name = AMI_PARAMETER.format(version=cfg.kubernetes_version, variant=_AMI_VARIANT[ami_type])
        try:
            _call("ssm:GetParameter", ssm.get_parameter, Name=name)
        except _Unanswered as err:
            if err.code != "ParameterNotFound":  # no such AMI in this region/version; anything else: not asked
                raise
            code = err.code
            users = ", ".join(p.name for p in pools if p.ami_type == ami_type)
            out.append(AwsFinding("ami", users, f"{ami_type} for Kubernetes {cfg.kubernetes_version} is not "
                                                f"published in {cfg.target.region} ({name}: {code})",
                                  "choose a kubernetesVersion EKS publishes this AMI type for in the region, or "
                                  "another region"))
    return out


def _endpoint_findings(cfg: PlatformConfig, deployer_ip: str | None) -> list[AwsFinding]:
    """A public-and-private endpoint answers only cluster.publicAccessCidrs: the deployer's address must be in one,
    or `pulumi up` cannot reach the cluster it just created."""
    assert cfg.cluster is not None
    if cfg.cluster.api_access != "public-and-private" or deployer_ip is None:
        return []
    address = ipaddress.ip_address(deployer_ip)
    if any(address in ipaddress.ip_network(c) for c in cfg.cluster.public_access_cidrs):
        return []
    return [AwsFinding("endpoint", None, f"this deployer's address {deployer_ip} is in none of "
                                         f"cluster.publicAccessCidrs ({', '.join(cfg.cluster.public_access_cidrs)})",
                       f"add {deployer_ip}/32 (or your egress network) to cluster.publicAccessCidrs, or deploy from "
                       "inside one of those networks")]


def deployer_address(timeout: float = READ_TIMEOUT_SECONDS) -> str:
    """This machine's public IPv4 address as AWS sees it (checkip.amazonaws.com)."""
    with urllib.request.urlopen(CHECKIP_URL, timeout=timeout) as resp:  # noqa: S310 - a fixed https URL
        return str(ipaddress.ip_address(resp.read().decode().strip()))


def aws_checks(cfg: PlatformConfig, session: Any, *,
               deployer_ip: str | None) -> tuple[list[CheckOutcome], list[AwsFinding]]:
    """Every account check, in a fixed order, each to its end: a check the credentials may not run becomes a
    permission finding, one the service does not answer (throttling, NoSuchResourceException, a timeout) an
    `unanswered` finding, and the others still run. Returns each check's outcome and every finding."""
    if not cfg.is_aws:
        raise UsageError(f"preflight --aws applies to provider 'aws' stacks; {cfg.stack!r} targets "
                         f"{cfg.target.provider!r}")
    pools = _pools(cfg)
    ec2, sq, ssm = _client(session, "ec2"), _client(session, "service-quotas"), _client(session, "ssm")
    sts, eks = _client(session, "sts"), _client(session, "eks")
    zones = _Zones()
    checks: list[tuple[str, Callable[[], list[AwsFinding]] | str]] = [
        ("caller identity", (lambda: _identity_findings(cfg, sts)) if cfg.cluster and cfg.cluster.admin_role_arns
         else "not asked (no cluster.adminRoleArns: the creator gets the admin entry)"),
        ("Kubernetes version", lambda: _version_findings(cfg, eks)),
        *_addon_checks(cfg, eks),
        ("availability zones", lambda: _zone_findings(cfg, pools, ec2, zones)),
        *_quota_checks(cfg, pools, sq, ec2),
        ("instance type offerings", lambda: _offering_findings(pools, ec2)),
        *((f"capacity reservation {p.name}", lambda p=p: _reservation_findings(p, ec2, zones))
          for p in pools if p.reservation_id is not None),
        ("AMI availability", lambda: _ami_findings(cfg, pools, ssm)),
        ("API endpoint access", lambda: _endpoint_findings(cfg, deployer_ip)),
    ]
    outcomes: list[CheckOutcome] = []
    out: list[AwsFinding] = []
    denied: set[str] = set()
    for what, check in checks:
        if isinstance(check, str):
            outcomes.append(CheckOutcome(what, check))
            continue
        try:
            found = check()
        except _Denied as err:
            outcomes.append(CheckOutcome(what, f"could not ask ({err.action}: access denied)"))
            if err.action not in denied:  # one finding per IAM action, naming the first check that needed it
                denied.add(err.action)
                out.append(_denied(err, what))
            continue
        except _Unanswered as err:
            outcomes.append(CheckOutcome(what, f"could not ask ({err.action}: {err.code})"))
            out.append(AwsFinding("unanswered", None, f"{what}: {err.action} answered {err.code}"
                                                      f"{f' ({err.detail})' if err.detail else ''}",
                                  "run preflight --aws again (throttling passes); where the service does not answer "
                                  "in this region, check the value in the console before `pulumi up`"))
            continue
        outcomes.append(CheckOutcome(what, f"{len(found)} finding(s)" if found else "ok"))
        out += found
    return outcomes, out


def aws_findings(cfg: PlatformConfig, session: Any, *, deployer_ip: str | None) -> list[AwsFinding]:
    """Every finding of aws_checks."""
    return aws_checks(cfg, session, deployer_ip=deployer_ip)[1]


def aws_preflight_command(stack: str, *, stacks_dir: Path | None = None, profile: str | None = None,
                          deployer_ip: str | None = None, json_out: Path | None = None,
                          session: Any = None) -> int:
    """Load the stack config, ask the account, print each finding with its pool and fix."""
    from infra.synth import load_stack

    cfg = load_stack(stack, stacks_dir)
    session = session if session is not None else session_for(cfg, profile)  # a clear UsageError without boto3
    from botocore.exceptions import BotoCoreError, NoCredentialsError
    try:
        ip = deployer_ip if deployer_ip is not None else (
            deployer_address() if cfg.cluster is not None and cfg.cluster.api_access == "public-and-private"
            else None)
    except (OSError, ValueError) as err:
        raise UsageError(f"could not learn this deployer's public address from {CHECKIP_URL} ({err}); pass "
                         "--deployer-ip") from None
    try:
        outcomes, findings = aws_checks(cfg, session, deployer_ip=ip)
    except NoCredentialsError:
        raise UsageError("no AWS credentials: set AWS_PROFILE (or --profile) or the AWS_* variables") from None
    except BotoCoreError as err:
        raise UsageError(f"AWS did not answer: {err}") from None
    human = sys.stderr if json_out is not None and str(json_out) == "-" else sys.stdout
    print(f"preflight --aws {stack} ({cfg.target.region}): {len(findings)} finding(s)", file=human)
    for f in findings:
        print(f.line(), file=human)
    print("checks:", file=human)
    for o in outcomes:
        print(o.line(), file=human)
    if json_out is not None:
        write_json(json_out, {"stack": stack, "region": cfg.target.region,
                              "checks": [asdict(o) for o in outcomes],
                              "findings": [asdict(f) for f in findings]})
    return EXIT_FAILURE if findings else EXIT_OK
