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
from infra.config import PlatformConfig
from infra.outputs import EXIT_FAILURE, EXIT_OK, UsageError, write_json

__all__ = ["AwsFinding", "QUOTAS", "REQUIRED_ACTIONS", "AMI_PARAMETER", "CONNECT_TIMEOUT_SECONDS",
           "READ_TIMEOUT_SECONDS", "RETRIES", "quota_code", "aws_findings", "aws_preflight_command", "session_for"]

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
}
# The IAM actions the checks call (a policy granting exactly these lets `preflight --aws` run whole).
REQUIRED_ACTIONS = (
    "servicequotas:GetServiceQuota",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeCapacityReservations",
    "ec2:DescribeAddresses",
    "ssm:GetParameter",
)
# EKS user guide, retrieve-ami-id: the recommended EKS-optimized AMI of a Kubernetes version, per AMI type, is a
# public SSM parameter; it is absent where EKS does not publish that AMI type for that version in the region.
AMI_PARAMETER = "/aws/service/eks/optimized-ami/{version}/amazon-linux-2023/x86_64/{variant}/recommended/image_id"
_AMI_VARIANT = {AMI_TYPE_GPU: "nvidia", AMI_TYPE_CPU: "standard"}
_DENIED = ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedAccess")
SYSTEM_POOL = "system"


@dataclass(frozen=True)
class AwsFinding:
    """One thing the account would refuse: which check, which pool (None: the stack), what and the fix."""

    check: str  # quota | offering | reservation | ami | endpoint | permission
    pool: str | None
    message: str
    fix: str

    def line(self) -> str:
        where = f"[{self.pool}] " if self.pool else ""
        return f"{self.check}: {where}{self.message}\n    fix: {self.fix}"


class _Denied(Exception):
    def __init__(self, action: str, detail: str) -> None:
        super().__init__(detail)
        self.action = action


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
    """One API call; an authorization error becomes _Denied naming the IAM action."""
    from botocore.exceptions import ClientError

    try:
        return fn(**kwargs)
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code", "")
        if code in _DENIED:
            raise _Denied(action, str(err)) from None
        raise


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


def _quota_findings(cfg: PlatformConfig, pools: list[_Pool], sq: Any, ec2: Any) -> list[AwsFinding]:
    """vCPUs per family at every pool's maxSize (on-demand and ODCR pools: reserved instances count against the
    on-demand quota; capacity blocks do not), gp3 storage of every root volume at maxSize, Elastic IPs for the NAT
    gateways beside the ones already allocated."""
    region = cfg.target.region or ""
    need: dict[str, tuple[int, list[str]]] = {}
    for p in pools:
        if p.capacity == "capacity-block":
            continue
        vcpus, names = need.get(quota_code(p.instance_type), (0, []))
        need[quota_code(p.instance_type)] = (vcpus + catalog.get(p.instance_type).vcpus * p.max_size,
                                             [*names, p.name])
    out: list[AwsFinding] = []
    for key, (vcpus, names) in sorted(need.items()):
        have = _quota(sq, key)
        if have < vcpus:
            out.append(AwsFinding("quota", ", ".join(names),
                                  f"needs {vcpus} vCPUs of '{QUOTAS[key][2]}' ({QUOTAS[key][1]}) at maxSize; the "
                                  f"account's quota is {have:g}", _increase(key, vcpus, region)))
    tib = math.ceil(sum(p.root_gib * p.max_size for p in pools) / 1024)
    if (have := _quota(sq, "gp3")) < tib:
        out.append(AwsFinding("quota", None, f"root volumes need {tib} TiB of gp3 at maxSize; the quota is "
                                             f"{have:g} TiB", _increase("gp3", tib, region)))
    assert cfg.network is not None
    nats = len(cfg.target.availability_zones) if cfg.network.nat_gateways == "one-per-az" else 1
    used = len(_call("ec2:DescribeAddresses", ec2.describe_addresses)["Addresses"])
    if (have := _quota(sq, "eip")) < used + nats:
        out.append(AwsFinding("quota", None, f"{nats} NAT gateway(s) need {nats} Elastic IP(s); {used} of the "
                                             f"quota of {have:g} are allocated already",
                              _increase("eip", used + nats, region) + "; or release unused addresses, or set "
                              "network.natGateways: single"))
    return out


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


def _reservation_findings(pools: list[_Pool], ec2: Any) -> list[AwsFinding]:
    """DescribeCapacityReservations for each reservation a pool names: it exists, is usable (active, or scheduled
    for a block not started yet), is in the pool's zone, of its type, holds maxSize instances, and a block's
    window covers the pool's schedule."""
    out: list[AwsFinding] = []
    for p in (p for p in pools if p.reservation_id is not None):
        try:
            found = _call("ec2:DescribeCapacityReservations", ec2.describe_capacity_reservations,
                          CapacityReservationIds=[p.reservation_id])["CapacityReservations"]
        except _Denied:
            raise
        except Exception as err:  # noqa: BLE001 - InvalidCapacityReservationId.NotFound/Malformed and kin
            code = getattr(err, "response", {}).get("Error", {}).get("Code", type(err).__name__)
            out.append(AwsFinding("reservation", p.name, f"{p.reservation_id}: {code}",
                                  "check capacity.reservationId and that the reservation is in this account "
                                  "and region"))
            continue
        if not found:
            out.append(AwsFinding("reservation", p.name, f"{p.reservation_id} not found",
                                  "check capacity.reservationId (account and region)"))
            continue
        cr = found[0]
        usable = ("active",) if p.capacity == "odcr" else ("active", "scheduled", "payment-pending")
        if cr.get("State") not in usable:
            out.append(AwsFinding("reservation", p.name, f"{p.reservation_id} is {cr.get('State')!r}; the pool "
                                                         f"needs {' or '.join(usable)}",
                                  "use a reservation that is active (or scheduled, for a capacity block)"))
        if cr.get("AvailabilityZone") not in p.zones:
            out.append(AwsFinding("reservation", p.name, f"{p.reservation_id} is in {cr.get('AvailabilityZone')}, "
                                                         f"the pool in {', '.join(p.zones)}",
                                  f"set nodePools.{p.name}.availabilityZones: [{cr.get('AvailabilityZone')}]"))
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


def _ami_findings(cfg: PlatformConfig, pools: list[_Pool], ssm: Any) -> list[AwsFinding]:
    """The EKS-optimized AL2023 AMI of each AMI type the pools use, for the stack's Kubernetes version."""
    out = []
    for ami_type in sorted({p.ami_type for p in pools}):
        name = AMI_PARAMETER.format(version=cfg.kubernetes_version, variant=_AMI_VARIANT[ami_type])
        try:
            _call("ssm:GetParameter", ssm.get_parameter, Name=name)
        except _Denied:
            raise
        except Exception as err:  # noqa: BLE001 - ParameterNotFound: no such AMI in this region/version
            code = getattr(err, "response", {}).get("Error", {}).get("Code", type(err).__name__)
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


def aws_findings(cfg: PlatformConfig, session: Any, *, deployer_ip: str | None) -> list[AwsFinding]:
    """Every account check, in a fixed order; a check the credentials may not run becomes one permission finding
    and the others still run."""
    if not cfg.is_aws:
        raise UsageError(f"preflight --aws applies to provider 'aws' stacks; {cfg.stack!r} targets "
                         f"{cfg.target.provider!r}")
    pools = _pools(cfg)
    ec2, sq, ssm = _client(session, "ec2"), _client(session, "service-quotas"), _client(session, "ssm")
    checks: Iterable[tuple[str, Callable[[], list[AwsFinding]]]] = (
        ("quotas", lambda: _quota_findings(cfg, pools, sq, ec2)),
        ("instance type offerings", lambda: _offering_findings(pools, ec2)),
        ("capacity reservations", lambda: _reservation_findings(pools, ec2)),
        ("AMI availability", lambda: _ami_findings(cfg, pools, ssm)),
        ("API endpoint access", lambda: _endpoint_findings(cfg, deployer_ip)),
    )
    out: list[AwsFinding] = []
    for what, check in checks:
        try:
            out += check()
        except _Denied as err:
            out.append(_denied(err, what))
    return out


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
        findings = aws_findings(cfg, session, deployer_ip=ip)
    except NoCredentialsError:
        raise UsageError("no AWS credentials: set AWS_PROFILE (or --profile) or the AWS_* variables") from None
    except BotoCoreError as err:
        raise UsageError(f"AWS did not answer: {err}") from None
    human = sys.stderr if json_out is not None and str(json_out) == "-" else sys.stdout
    print(f"preflight --aws {stack} ({cfg.target.region}): {len(findings)} finding(s)", file=human)
    for f in findings:
        print(f.line(), file=human)
    if json_out is not None:
        write_json(json_out, {"stack": stack, "region": cfg.target.region,
                              "findings": [asdict(f) for f in findings]})
    return EXIT_FAILURE if findings else EXIT_OK
