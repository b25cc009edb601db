"""Where the platform runs: `target`, and on AWS `cluster` and `network`."""

from __future__ import annotations

import ipaddress
import re
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from components.aws import catalog
from infra.stack.common import API_ACCESS, DEFAULT_SYSTEM_INSTANCE_TYPE, DNS_SUBDOMAIN, ROLE_ARN, _cidr, _known_type
from infra.stack.reader import (
    _Reader,
    _show,
    unknown_key,
)


@dataclass(frozen=True, slots=True)
class Target:
    provider: Literal["aws", "existing"]
    region: str | None = None  # aws: required
    availability_zones: tuple[str, ...] = ()  # aws: required, 2-6 zones of `region`
    kubeconfig: str | None = None  # existing: required, path to a kubeconfig file
    context: str | None = None  # existing: default: the kubeconfig's current-context
    hosts_have_drivers: bool = False  # existing: default false (the GPU operator installs driver + toolkit)
    storage_class: str | None = None  # existing: required, the StorageClass every claim the kit creates uses
    install_metrics_server: bool = True  # existing: default true (false when the cluster already runs one)

    @property
    def is_aws(self) -> bool:
        return self.provider == "aws"


@dataclass(frozen=True, slots=True)
class SystemPool:
    instance_type: str = DEFAULT_SYSTEM_INSTANCE_TYPE  # default: m7i.2xlarge
    min_size: int = 2  # default: 2
    max_size: int = 6  # default: 6
    desired_size: int = 3  # default: 3


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    name: str  # default: aifactory-<stack>
    public_access_cidrs: tuple[str, ...] = ()  # required (non-empty) for apiAccess public-and-private
    # default: none (only the creator has access); when set, exactly these roles: list the one you deploy with
    admin_role_arns: tuple[str, ...] = ()
    system_pool: SystemPool = field(default_factory=SystemPool)
    # required on AWS (parse() has no default: a wrong guess leaves `pulumi up` unable to reach the endpoint)
    api_access: Literal["public-and-private", "private"] = "private"
    # default: false; `private` needs true: the deployer runs in the VPC or a network connected to it
    deployer_in_vpc: bool = False
    # default: false; true: EKS deletion protection, and Pulumi `protect` on the cluster, its KMS key and the Loki
    # bucket (`pulumi destroy` stops before them; set false and `pulumi up` first to tear down)
    deletion_protection: bool = False
    # default: STANDARD (EKS upgrades the cluster when standard support ends); EXTENDED keeps the version, billed
    # for extended support (EKS's own default when unset)
    support_type: Literal["STANDARD", "EXTENDED"] = "STANDARD"
    # default: none pinned (each add-on at EKS's default version for kubernetesVersion, as DescribeAddonVersions
    # answers at deploy time); add-on name -> version pins it, so no `pulumi up` moves it until you do
    addon_versions: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NetworkSettings:
    vpc_cidr: str = "10.0.0.0/16"  # default: default_vpc_cidr(stack), a /16 of 10.0.0.0/8 per stack name
    nat_gateways: Literal["one-per-az", "single"] = "one-per-az"  # default: one NAT gateway per AZ
    flow_log_retention_days: int = 30  # default: 30


def _target(r: _Reader, raw: Any) -> Target | None:
    d = r.mapping(raw, "target", ("provider", "region", "availabilityZones", "kubeconfig", "context",
                                  "hostsHaveDrivers", "storageClass", "installMetricsServer"))
    if d is None:
        return None
    provider = r.value(d, "provider", "target", str, choices=("aws", "existing"))
    if provider == "aws":
        for key in ("kubeconfig", "context", "hostsHaveDrivers", "storageClass", "installMetricsServer"):
            if key in d:
                r.fail(f"target.{key}", "only applies to provider 'existing'")
        region = r.value(d, "region", "target", str,
                         check=lambda v: None if re.match(r"^[a-z]{2}(-[a-z]+)+-\d$", v) else
                         "is not an AWS region such as us-east-1")
        azs = r.strings(d, "availabilityZones", "target", derived=True)
        if "availabilityZones" not in d:
            r.fail("target.availabilityZones", "is required for provider 'aws' (2 to 6 zones)")
        elif isinstance(d.get("availabilityZones"), list) and not 2 <= len(azs) <= 6:  # a non-list: said above
            r.fail("target.availabilityZones", f"{_show(list(azs))} must list 2 to 6 zones (EKS needs two)")
        if region:
            for i, az in enumerate(azs):
                if not (az.startswith(region) and len(az) == len(region) + 1):
                    r.fail(f"target.availabilityZones[{i}]", f"{az!r} is not a zone of region {region!r}")
        if len(set(azs)) != len(azs):
            r.fail("target.availabilityZones", f"{_show(list(azs))} lists a zone twice")
        return Target("aws", region=region, availability_zones=azs)
    if provider == "existing":
        for key in ("region", "availabilityZones"):
            if key in d:
                r.fail(f"target.{key}", "only applies to provider 'aws'")
        return Target(
            "existing",
            kubeconfig=r.value(d, "kubeconfig", "target", str),
            context=r.value(d, "context", "target", str, None),
            hosts_have_drivers=r.value(d, "hostsHaveDrivers", "target", bool, False, derived=True),  # existing only
            storage_class=_storage_class(r, d),
            install_metrics_server=r.value(d, "installMetricsServer", "target", bool, True, derived=True),
        )
    return None


def _storage_class(r: _Reader, d: dict[str, Any]) -> str | None:
    """Required on existing clusters: the kit cannot know which class exists there, nor whether one is the
    default, and a claim without a class that exists stays Pending (its Helm release then times out)."""
    if "storageClass" not in d:
        r.fail("target.storageClass", "is required for provider 'existing': name the StorageClass every claim "
                                      "the kit creates uses (model caches, Loki, Prometheus); "
                                      "`kubectl get storageclass` lists them")
        return None
    return r.value(d, "storageClass", "target", str, check=lambda v: None if DNS_SUBDOMAIN.match(v) else
                   "is not a StorageClass name (a DNS subdomain)")


def _system_pool(r: _Reader, raw: Any, path: str) -> SystemPool:
    if raw is None:
        return SystemPool()
    d = r.mapping(raw, path, ("instanceType", "minSize", "maxSize", "desiredSize"))
    itype = r.value(d, "instanceType", path, str, DEFAULT_SYSTEM_INSTANCE_TYPE, check=_known_type)
    if itype in catalog.CATALOG and (catalog.get(itype).has_gpu or catalog.get(itype).onprem):
        r.fail(f"{path}.instanceType", f"{itype!r} is not an AWS CPU type; use e.g. m7i.2xlarge")
    lo = r.value(d, "minSize", path, int, 2, minimum=1)
    hi = r.value(d, "maxSize", path, int, max(lo, 6), minimum=1)
    want = r.value(d, "desiredSize", path, int, min(max(lo, 3), hi), minimum=1)
    _sizes(r, path, lo, hi, want)
    return SystemPool(itype, lo, hi, want)


def _sizes(r: _Reader, path: str, lo: int, hi: int, want: int) -> None:
    if lo > hi:
        r.fail(f"{path}.minSize", f"{lo} is greater than maxSize {hi}")
    elif not lo <= want <= hi:
        r.fail(f"{path}.desiredSize", f"{want} is outside minSize..maxSize ({lo}..{hi})")


def _cluster(r: _Reader, raw: Any, stack: str) -> ClusterSettings:
    d = r.mapping(raw if raw is not None else {}, "cluster",
                  ("name", "apiAccess", "deployerInVpc", "publicAccessCidrs", "adminRoleArns", "systemPool",
                   "deletionProtection", "supportType", "addonVersions"))

    def _public(v: str) -> str | None:
        if (msg := _cidr(v)) is not None:
            return msg
        net = ipaddress.ip_network(v, strict=False)
        if net.prefixlen == 0:
            return "opens the API endpoint to the whole internet; list your own networks instead"
        if reserved := next((str(p) for p in _NOT_ON_THE_INTERNET
                             if net.version == p.version and net.subnet_of(p)), None):  # type: ignore[arg-type]
            return (f"is inside {reserved}, which never reaches a public endpoint: the endpoint sees the public "
                    "address your traffic leaves from (your NAT or proxy: `curl -s https://checkip.amazonaws.com`); "
                    "list that, or use apiAccess 'private' with deployerInVpc from inside the VPC")
        return None

    access, in_vpc, cidrs = _api_access(r, d, _public)
    return ClusterSettings(
        api_access=access, deployer_in_vpc=in_vpc,
        name=r.value(d, "name", "cluster", str, f"aifactory-{stack}",
                     check=lambda v: None if re.match(r"^[A-Za-z][A-Za-z0-9-]{0,99}$", v) else
                     "is not a valid EKS cluster name"),
        public_access_cidrs=cidrs,
        admin_role_arns=r.strings(d, "adminRoleArns", "cluster",
                                  check=lambda v: None if ROLE_ARN.match(v) else "is not an IAM role ARN"),
        system_pool=_system_pool(r, (d or {}).get("systemPool"), "cluster.systemPool"),
        deletion_protection=r.value(d, "deletionProtection", "cluster", bool, False),
        support_type=r.value(d, "supportType", "cluster", str, "STANDARD", choices=("STANDARD", "EXTENDED")),
        addon_versions=_addon_versions(r, d),
    )


ADDON_VERSION = re.compile(r"^v\d+\.\d+\.\d+-eksbuild\.\d+$")


def _addon_versions(r: _Reader, d: dict[str, Any] | None) -> dict[str, str]:
    """cluster.addonVersions: pins for the cluster's add-ons (names of components.aws.cluster.ADDONS), each a version
    as DescribeAddonVersions lists it (v1.20.4-eksbuild.2)."""
    from components.aws.cluster import ADDONS

    pins = r.string_map(d, "addonVersions", "cluster")
    for name, version in pins.items():
        if name not in ADDONS:
            r.fail(f"cluster.addonVersions.{name}", unknown_key(name, ADDONS))
        elif not ADDON_VERSION.match(version):
            r.fail(f"cluster.addonVersions.{name}", f"{version!r} is not an EKS add-on version such as "
                                                    "v1.20.4-eksbuild.2 (aws eks describe-addon-versions)")
    return pins


# Private (RFC 1918), shared (RFC 6598 carrier-grade NAT), loopback and link-local ranges, IPv4 and IPv6 (RFC 4193,
# RFC 4291): traffic from them reaches a public endpoint only NATed to a public address, so a public-access CIDR
# inside one never matches a caller.
_NOT_ON_THE_INTERNET = tuple(ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
    "fc00::/7", "fe80::/10", "::1/128"))


def _api_access(r: _Reader, d: dict[str, Any] | None, public: Callable[[str], str | None]
                ) -> tuple[Any, bool, tuple[str, ...]]:
    """The deployer's network position: the same program creates the cluster and then Kubernetes objects
    through its endpoint, so the endpoint must answer the deployer. A private-only endpoint answers only
    inside the VPC and networks connected to it (EKS user guide, cluster-endpoint)."""
    access = r.value(d, "apiAccess", "cluster", str, None, choices=API_ACCESS)
    if d is not None and "apiAccess" not in d:
        r.fail("cluster.apiAccess", "is required: 'public-and-private' (the deployer reaches the public endpoint "
                                    "from cluster.publicAccessCidrs) or 'private' (the deployer runs inside the "
                                    "VPC or a network connected to it; set cluster.deployerInVpc: true)")
    in_vpc = r.value(d, "deployerInVpc", "cluster", bool, False)
    cidrs = r.strings(d, "publicAccessCidrs", "cluster", check=public)
    if access == "public-and-private" and not cidrs:
        r.fail("cluster.publicAccessCidrs", "is required (non-empty) for apiAccess 'public-and-private': list the "
                                            "networks the deployer and admins reach the API from")
    if access == "private":
        if not in_vpc:
            r.fail("cluster.deployerInVpc", f"{_show(in_vpc)}: apiAccess 'private' answers only inside the VPC; "
                                            "set true when the deployer runs there (or in a connected network), "
                                            "else use apiAccess 'public-and-private' with publicAccessCidrs")
        if cidrs:
            r.fail("cluster.publicAccessCidrs", "only applies to apiAccess 'public-and-private'")
    return access or "private", in_vpc, cidrs


def default_vpc_cidr(stack: str) -> str:
    """A /16 of 10.0.0.0/8 chosen by the stack's name (10.<16..255>.0.0/16), so two stacks of one account do not
    default to the same block: VPC peering and Transit Gateway routes (the path to a private endpoint from another
    VPC) need non-overlapping CIDRs. Deterministic, not unique: set `network.vpcCidr` per stack to be sure."""
    return f"10.{16 + zlib.crc32(stack.encode()) % 240}.0.0/16"


def _network(r: _Reader, raw: Any, stack: str) -> NetworkSettings:
    d = r.mapping(raw if raw is not None else {}, "network", ("vpcCidr", "natGateways", "flowLogRetentionDays"))
    return NetworkSettings(
        vpc_cidr=r.value(d, "vpcCidr", "network", str, default_vpc_cidr(stack), derived=True,
                         check=lambda v: _cidr(v) or (
            None if 16 <= ipaddress.ip_network(v).prefixlen <= 20 else "must be a /16 to /20 block")),
        nat_gateways=r.value(d, "natGateways", "network", str, "one-per-az", choices=("one-per-az", "single")),
        flow_log_retention_days=r.value(d, "flowLogRetentionDays", "network", int, 30,
                                        choices=(1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545,
                                                 731, 1827, 3653)),
    )
