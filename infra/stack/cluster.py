"""Where the platform runs: `target`, and on AWS `cluster` and `network`."""

from __future__ import annotations

import ipaddress
import re
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from components import catalog
from components.k8s.settings import setting
from infra.stack.common import DEFAULT_SYSTEM_INSTANCE_TYPE, DNS_SUBDOMAIN, ROLE_ARN, _cidr, _known_type
from infra.stack.messages import got as _got
from infra.stack.reader import (
    _Reader,
    _show,
    unknown_key,
)


@dataclass(frozen=True, slots=True)
class Target:
    provider: Literal["aws", "existing"] = setting(doc="aws: the kit creates the VPC, EKS cluster and node groups; "
                                                       "existing: it deploys onto a cluster you run (kubeconfig).")
    region: str | None = setting(None, pattern=r"^[a-z]{2}(-[a-z]+)+-\d$", invalid="is not an AWS region such as "
                                 "us-east-1", doc="aws: the AWS region (required).")
    availability_zones: tuple[str, ...] = setting((), derived=True, doc="aws: the cluster's zones, 2 to 6 of region "
                                                                       "(required).")
    kubeconfig: str | None = setting(None, doc="existing: the kubeconfig file of the cluster (required).")
    context: str | None = setting(None, doc="existing: the kubeconfig context (default: its current-context).")
    hosts_have_drivers: bool = setting(False, derived=True,
                                       doc="existing: the nodes already run the NVIDIA driver and container toolkit "
                                           "(default: false, the GPU operator installs them).")
    storage_class: str | None = setting(None, pattern=DNS_SUBDOMAIN.pattern, invalid="is not a StorageClass name "
                                        "(a DNS subdomain)", doc="existing: the StorageClass of every claim the kit "
                                                                 "creates (model caches, Loki, Prometheus); "
                                                                 "required.")
    install_metrics_server: bool = setting(True, derived=True,
                                           doc="existing: install metrics-server (default: true; false when the "
                                               "cluster already runs one).")

    @property
    def is_aws(self) -> bool:
        return self.provider == "aws"


@dataclass(frozen=True, slots=True)
class SystemPool:
    instance_type: str = setting(DEFAULT_SYSTEM_INSTANCE_TYPE, doc="The AWS CPU instance type of the system node "
                                                                   "group (gateway, observability, operators).")
    min_size: int = setting(2, ge=1, doc="Fewest system nodes.")
    max_size: int = setting(6, ge=1, derived=True, doc="Most system nodes (default: 6, or minSize when larger).")
    desired_size: int = setting(3, ge=1, derived=True, doc="System nodes at creation (default: 3, within "
                                                           "minSize..maxSize).")


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    name: str = setting("", pattern=r"^[A-Za-z][A-Za-z0-9-]{0,99}$", invalid="is not a valid EKS cluster name",
                        derived=True, doc="The EKS cluster's name (default: aifactory-<stack>).")
    public_access_cidrs: tuple[str, ...] = setting((), derived=True, doc="Networks the public API endpoint answers "
                                                                        "(required, non-empty, for apiAccess "
                                                                        "public-and-private; at most 40).")
    admin_role_arns: tuple[str, ...] = setting((), pattern=ROLE_ARN.pattern, invalid="is not an IAM role ARN",
                                               doc="IAM roles with cluster admin access; when set, exactly these: "
                                                   "list the one you deploy with (default: none, only the "
                                                   "creator).")
    system_pool: SystemPool = setting(default_factory=SystemPool, doc="The CPU node group of the platform's own "
                                                                      "components.")
    api_access: Literal["public-and-private", "private"] = setting(
        "private", derived=True, doc="Where the API endpoint answers (required: a wrong guess leaves `pulumi up` "
                                     "unable to reach it): public-and-private (from publicAccessCidrs) or private "
                                     "(inside the VPC; needs deployerInVpc).")
    deployer_in_vpc: bool = setting(False, doc="The deployer runs inside the VPC or a network connected to it "
                                               "(apiAccess private needs it).")
    deletion_protection: bool = setting(False, doc="EKS deletion protection, and Pulumi `protect` on the cluster, "
                                                   "its KMS key and the Loki bucket (set false and `pulumi up` "
                                                   "before tearing down).")
    support_type: Literal["STANDARD", "EXTENDED"] = setting(
        "STANDARD", doc="STANDARD: EKS upgrades the cluster when standard support ends; EXTENDED keeps the "
                        "version, billed for extended support.")
    addon_versions: Mapping[str, str] = setting(default_factory=dict, doc="Add-on name -> version (as "
                                                                          "DescribeAddonVersions lists it, "
                                                                          "v1.20.4-eksbuild.2) pins the add-on, so "
                                                                          "no `pulumi up` moves it until you do "
                                                                          "(default: none pinned, each at EKS's "
                                                                          "default for kubernetesVersion).")


FLOW_LOG_RETENTION_DAYS = Literal[1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1827, 3653]


@dataclass(frozen=True, slots=True)
class NetworkSettings:
    vpc_cidr: str = setting("10.0.0.0/16", derived=True, doc="The VPC's block, a /16 to /20 (default: a /16 of "
                                                             "10.0.0.0/8 chosen by the stack's name).")
    nat_gateways: Literal["one-per-az", "single"] = setting("one-per-az", doc="One NAT gateway per zone, or a "
                                                                               "single one (cheaper, one zone's "
                                                                               "outage cuts egress).")
    flow_log_retention_days: FLOW_LOG_RETENTION_DAYS = setting(30, doc="Days the VPC flow logs are kept (a "
                                                                       "CloudWatch Logs retention).")


_AWS_ONLY = ("region", "availabilityZones")
_EXISTING_ONLY = ("kubeconfig", "context", "hostsHaveDrivers", "storageClass", "installMetricsServer")


def _target(r: _Reader, raw: Any) -> Target | None:
    if raw is None or not isinstance(raw, dict):
        r.fail("target", f"expected a mapping, got {_got(raw)}")
        return None
    v = r.fields(Target, raw, "target")
    d = {k: x for k, x in raw.items() if x is not None}
    provider = v["provider"]
    for key in _EXISTING_ONLY if provider == "aws" else _AWS_ONLY if provider == "existing" else ():
        if key in d:
            r.fail(f"target.{key}", f"only applies to provider {'existing' if provider == 'aws' else 'aws'!r}")
    if provider == "aws":
        region = v["region"]
        if "region" not in d:
            r.fail("target.region", "is required")
        azs = v["availability_zones"]
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
        if "kubeconfig" not in d:
            r.fail("target.kubeconfig", "is required")
        if "storageClass" not in d:
            # the kit cannot know which class exists there, nor whether one is the default, and a claim without a
            # class that exists stays Pending (its Helm release then times out)
            r.fail("target.storageClass", "is required for provider 'existing': name the StorageClass every claim "
                                          "the kit creates uses (model caches, Loki, Prometheus); "
                                          "`kubectl get storageclass` lists them")
        return Target("existing", kubeconfig=v["kubeconfig"], context=v["context"],
                      hosts_have_drivers=v["hosts_have_drivers"], storage_class=v["storage_class"],
                      install_metrics_server=v["install_metrics_server"])
    return None


def _system_pool(r: _Reader, raw: Any, path: str) -> SystemPool:
    v = r.fields(SystemPool, raw, path)
    d = raw if isinstance(raw, dict) else {}
    itype = v["instance_type"]
    if (problem := _known_type(itype)) is not None:
        r.fail(f"{path}.instanceType", f"{_show(itype)} {problem}")
    elif catalog.get(itype).has_gpu or catalog.get(itype).onprem:
        r.fail(f"{path}.instanceType", f"{itype!r} is not an AWS CPU type; use e.g. m7i.2xlarge")
    lo = v["min_size"]
    if not r.is_set(d, path, "maxSize"):
        v["max_size"] = max(lo, v["max_size"])  # the declared default, or minSize when larger
    if not r.is_set(d, path, "desiredSize"):
        v["desired_size"] = min(max(lo, v["desired_size"]), v["max_size"])
    _sizes(r, path, lo, v["max_size"], v["desired_size"])
    return SystemPool(**v)


def _sizes(r: _Reader, path: str, lo: int, hi: int, want: int) -> None:
    if lo > hi:
        r.fail(f"{path}.minSize", f"{lo} is greater than maxSize {hi}")
    elif not lo <= want <= hi:
        r.fail(f"{path}.desiredSize", f"{want} is outside minSize..maxSize ({lo}..{hi})")


def _cluster(r: _Reader, raw: Any, stack: str) -> ClusterSettings:
    v = r.fields(ClusterSettings, raw, "cluster", handled=("systemPool",))
    d = {k: x for k, x in raw.items() if x is not None} if isinstance(raw, dict) else {}
    if not r.is_set(d, "cluster", "name"):
        v["name"] = f"aifactory-{stack}"

    def _public(v: str) -> str | None:
        if (msg := _cidr(v)) is not None:
            return msg
        net = ipaddress.ip_network(v, strict=False)
        if net.version == 6:  # EKS UpdateClusterConfig: no IPv6 CIDR blocks on an IPv4 cluster (the kit's)
            return "is an IPv6 network: the kit's EKS cluster is IPv4, whose public endpoint takes IPv4 CIDRs only"
        if net.prefixlen == 0:
            return "opens the API endpoint to the whole internet; list your own networks instead"
        if reserved := next((str(p) for p in _NOT_ON_THE_INTERNET
                             if net.version == p.version and net.subnet_of(p)), None):  # type: ignore[arg-type]
            return (f"is inside {reserved}, which never reaches a public endpoint: the endpoint sees the public "
                    "address your traffic leaves from (your NAT or proxy: `curl -s https://checkip.amazonaws.com`); "
                    "list that, or use apiAccess 'private' with deployerInVpc from inside the VPC")
        return None

    v["public_access_cidrs"] = _api_access(r, d, v, _public)
    _addon_versions(r, v["addon_versions"])
    return ClusterSettings(**v, system_pool=_system_pool(r, d.get("systemPool"), "cluster.systemPool"))


ADDON_VERSION = re.compile(r"^v\d+\.\d+\.\d+-eksbuild\.\d+$")


def _addon_versions(r: _Reader, pins: Mapping[str, str]) -> None:
    """cluster.addonVersions: pins for the cluster's add-ons (names of components.aws.cluster.ADDONS), each a version
    as DescribeAddonVersions lists it (v1.20.4-eksbuild.2)."""
    from components.aws.cluster import ADDONS

    for name, version in pins.items():
        if name not in ADDONS:
            r.fail(f"cluster.addonVersions.{name}", unknown_key(name, ADDONS))
        elif not ADDON_VERSION.match(version):
            r.fail(f"cluster.addonVersions.{name}", f"{version!r} is not an EKS add-on version such as "
                                                    "v1.20.4-eksbuild.2 (aws eks describe-addon-versions)")


# Private (RFC 1918), shared (RFC 6598 carrier-grade NAT), loopback and link-local IPv4 ranges (an IPv6 network is
# refused before: the cluster is IPv4): traffic from them reaches a public endpoint only NATed to a public address,
# so a public-access CIDR inside one never matches a caller.
_NOT_ON_THE_INTERNET = tuple(ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16"))


# Amazon EKS service quotas: "Public endpoint access CIDR ranges per cluster", 40, not adjustable (Service Quotas
# code L-93A74D60; awsdocs/amazon-eks-user-guide, service-quotas).
MAX_PUBLIC_ACCESS_CIDRS = 40


def _api_access(r: _Reader, d: dict[str, Any], v: dict[str, Any], public: Callable[[str], str | None]
                ) -> tuple[str, ...]:
    """The public-access CIDRs, checked against the deployer's network position: the same program creates the
    cluster and then Kubernetes objects through its endpoint, so the endpoint must answer the deployer. A
    private-only endpoint answers only inside the VPC and networks connected to it (EKS user guide,
    cluster-endpoint)."""
    access, in_vpc = v["api_access"], v["deployer_in_vpc"]
    if "apiAccess" not in d:
        r.fail("cluster.apiAccess", "is required: 'public-and-private' (the deployer reaches the public endpoint "
                                    "from cluster.publicAccessCidrs) or 'private' (the deployer runs inside the "
                                    "VPC or a network connected to it; set cluster.deployerInVpc: true)")
    given: list[Any] = d["publicAccessCidrs"] if isinstance(d.get("publicAccessCidrs"), list) else []
    kept: list[str] = []
    for i, cidr in enumerate(given):  # a non-string item was reported as the list was read
        if isinstance(cidr, str) and (problem := public(cidr)) is not None:
            r.fail(f"cluster.publicAccessCidrs[{i}]", f"{_show(cidr)} {problem}")
        elif isinstance(cidr, str):
            kept.append(cidr)
    cidrs = tuple(kept)
    if "apiAccess" not in d:
        return cidrs
    if len(cidrs) > MAX_PUBLIC_ACCESS_CIDRS:
        r.fail("cluster.publicAccessCidrs", f"has {len(cidrs)} entries; EKS takes at most {MAX_PUBLIC_ACCESS_CIDRS} "
                                            "per cluster (a quota AWS does not raise): list wider networks")
    if r.problems_at("cluster.apiAccess") or r.problems_at("cluster.publicAccessCidrs"):
        return cidrs
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
    return cidrs


def default_vpc_cidr(stack: str) -> str:
    """A /16 of 10.0.0.0/8 chosen by the stack's name (10.<16..255>.0.0/16), so two stacks of one account do not
    default to the same block: VPC peering and Transit Gateway routes (the path to a private endpoint from another
    VPC) need non-overlapping CIDRs. Deterministic, not unique: set `network.vpcCidr` per stack to be sure."""
    return f"10.{16 + zlib.crc32(stack.encode()) % 240}.0.0/16"


def _network(r: _Reader, raw: Any, stack: str) -> NetworkSettings:
    v = r.fields(NetworkSettings, raw, "network")
    d = raw if isinstance(raw, dict) else {}
    if not r.is_set(d, "network", "vpcCidr"):
        v["vpc_cidr"] = default_vpc_cidr(stack)
    elif (problem := _cidr(v["vpc_cidr"]) or (None if 16 <= ipaddress.ip_network(v["vpc_cidr"]).prefixlen <= 20
                                              else "must be a /16 to /20 block")) is not None:
        r.fail("network.vpcCidr", f"{_show(v['vpc_cidr'])} {problem}")
        v["vpc_cidr"] = default_vpc_cidr(stack)
    return NetworkSettings(**v)
