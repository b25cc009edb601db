"""PlatformConfig: the typed model of one environment (one Pulumi stack).

Stack files (`stacks/Pulumi.<env>.yaml`) hold structured objects under the `aifactory:` namespace,
exactly as the Pulumi CLI passes them to a program. `load()` reads them through `pulumi.Config`;
`parse()` is the pure function behind it that tests and `aifactory synth` also use.

Validation collects every problem before it raises: each `Problem` names the key path
(`nodePools.gpu-a.fabric`), the value received and what is allowed. Every optional field below
documents its default next to it.
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import ipaddress
import math
import re
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from components.aws import catalog
from components.aws.defaults import DEFAULT_CPU_ROOT_VOLUME_GIB, DEFAULT_EFA_HUGEPAGES_MIB, DEFAULT_GPU_ROOT_VOLUME_GIB
from components.k8s import coldstart
from components.k8s.defaults import (
    CAPACITY_BLOCK_DRAIN_MINUTES,
    DEFAULT_GROUP_FORMATION_SECONDS,
    DEFAULT_KUBERNETES_VERSION,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_STARTUP_BUDGET_SECONDS,
    DEFAULT_TRY_IDLE_SECONDS,
    IPAM_BLOCK_SIZE,
    SERVING_PRIORITY_CLASSES,
)
from components.k8s.envoy_config import OPENAI_APIS
from components.k8s.settings import (
    ALERT_RECEIVER_TYPES,
    ALERT_SEVERITIES,
    DEFAULT_MAX_DROP,
    DEFAULT_MAX_TOKEN_LIFETIME_SECONDS,
    DEFAULT_MAX_UNANSWERED,
    DEFAULT_MIN_BASELINE_SCORE,
    DEFAULT_ROUTING_MARGIN_PERCENT,
    MAX_TOKEN_LIFETIME_LIMIT_SECONDS,
    MODEL_TASKS,
    ROUTING_POLICIES,
    Alerting,
    AlertReceiver,
    Capacity,
    CategoryGate,
    CircuitBreakers,
    Fidelity,
    FidelityJob,
    GatewayAuth,
    GatewaySettings,
    HealthCheck,
    Heartbeat,
    InfinibandSettings,
    Ingest,
    JwtIssuer,
    Model,
    ModelSlo,
    NodeCheck,
    NodePool,
    ObservabilitySettings,
    OutlierDetection,
    RateLimit,
    Replicas,
    Retries,
    SecretRef,
    Speculative,
    Taint,
    Tenant,
    Variant,
    VolumeSizes,
    WorkflowSlo,
)
from components.vocabulary import GPU_TAINT_KEY, POOL_LABEL, SYSTEM_NAMESPACES
from infra.stack.reader import (
    DNS_LABEL,
    ConfigError,
    Problem,
    _given,
    _kind,
    _Reader,
    _show,
    did_you_mean,
    unknown_key,
)

__all__ = [
    "NAMESPACE",
    "TOP_LEVEL_KEYS",
    "DEFAULT_KUBERNETES_VERSION",
    "DEFAULT_STARTUP_BUDGET_SECONDS",
    "SUPPORTED_KUBERNETES_VERSIONS",
    "ConfigError",
    "Problem",
    "PlatformConfig",
    "Variant",
    "ROUTING_POLICIES",
    "DEFAULT_ROUTING_MARGIN_PERCENT",
    "Fidelity",
    "FidelityJob",
    "DEFAULT_MAX_DROP",
    "DEFAULT_MIN_BASELINE_SCORE",
    "DEFAULT_MAX_UNANSWERED",
    "CategoryGate",
    "Target",
    "ClusterSettings",
    "SystemPool",
    "NetworkSettings",
    "NodePool",
    "Capacity",
    "Taint",
    "NodeCheck",
    "InfinibandSettings",
    "Tenant",
    "RateLimit",
    "Model",
    "Replicas",
    "ModelSlo",
    "Speculative",
    "GatewaySettings",
    "Retries",
    "OutlierDetection",
    "CircuitBreakers",
    "GatewayAuth",
    "JwtIssuer",
    "HealthCheck",
    "ObservabilitySettings",
    "WorkflowSlo",
    "SecretRef",
    "AlertReceiver",
    "Alerting",
    "Heartbeat",
    "VolumeSizes",
    "Ingest",
    "ALERT_SEVERITIES",
    "ALERT_RECEIVER_TYPES",
    "parse",
    "load",
    "POOL_LABEL",
    "IPAM_BLOCK_SIZE",
    "GPU_TAINT_KEY",
]

NAMESPACE = "aifactory"
DEFAULT_STACKS_DIR = Path(__file__).resolve().parent.parent / "stacks"  # Pulumi.yaml's stackConfigDir
SUPPORTED_KUBERNETES_VERSIONS = ("1.31", "1.32", "1.33", "1.34", "1.35", "1.36")
DEFAULT_SYSTEM_INSTANCE_TYPE = "m7i.2xlarge"
MAX_REQUEST_BYTES_LIMIT = 256 * 1024 * 1024  # the gateway buffers each body in memory before it forwards it
# Layouts the GPU operator's MIG manager ships in its default config (mig-parted `default-mig-parted-config`).
MIG_LAYOUTS = (
    "all-1g.10gb",
    "all-1g.20gb",
    "all-2g.20gb",
    "all-3g.40gb",
    "all-4g.40gb",
    "all-7g.80gb",
    "all-balanced",
)
SPECULATIVE_METHODS = ("eagle3", "eagle", "ngram")  # what the pinned vLLM's V1 engine supports
MIG_PROFILE_RE = re.compile(r"^[1-7]g\.\d+gb$")
# Namespaces of the platform's components other than the gateway and observability (whose names are settings).
_KIT_NAMESPACES = frozenset({"istio-system", "gpu-operator", "nvidia-network-operator", "aifactory-system"})
DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
API_ACCESS = ("public-and-private", "private")
UTC_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
MIN_CAPACITY_BLOCK_DRAIN_MINUTES = 31
DURATION = re.compile(r"^[1-9][0-9]*(h|d|w|y)$")
RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{8,17}$")
ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$")

# The keys a stack may set under `aifactory:`; anything else is a typo and is reported.
TOP_LEVEL_KEYS = (
    "target",
    "kubernetesVersion",
    "cluster",
    "network",
    "nodePools",
    "infiniband",
    "tenants",
    "models",
    "gateway",
    "observability",
)


def namespace_typo_problem(full_key: str, path: str) -> Problem | None:
    """The problem of a `ns:key` whose namespace misspells the kit's (reported at `path`), or None."""
    ns, _, key = full_key.partition(":")
    if not namespace_typo(ns):
        return None
    return Problem(path, f"namespace {ns!r} is not the kit's: nothing reads this key; did you mean "
                         f"'{NAMESPACE}:{key}'?")


def namespace_typo(namespace: str) -> bool:
    """Whether a stack config namespace is a misspelling of the kit's own (`aifactroy:`, `AIFactory:`): its keys
    would be passed to nobody. Provider namespaces (aws:, kubernetes:, pulumi:) are far from it."""
    return namespace != NAMESPACE and (namespace.lower() == NAMESPACE
                                       or bool(difflib.get_close_matches(namespace.lower(), [NAMESPACE], cutoff=0.75)))


# --------------------------------------------------------------------------------------------
# errors




# --------------------------------------------------------------------------------------------
# model


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


@dataclass(frozen=True, slots=True)
class PlatformConfig:
    stack: str
    target: Target
    kubernetes_version: str
    cluster: ClusterSettings | None
    network: NetworkSettings | None
    node_pools: Mapping[str, NodePool]
    infiniband: InfinibandSettings | None
    tenants: Mapping[str, Tenant]
    models: Mapping[str, Model]
    gateway: GatewaySettings
    observability: ObservabilitySettings

    @property
    def is_aws(self) -> bool:
        return self.target.is_aws

    @property
    def gpu_pools(self) -> list[NodePool]:
        return [p for p in self.node_pools.values() if p.gpu]

    @property
    def efa_pools(self) -> list[NodePool]:
        return [p for p in self.node_pools.values() if p.fabric == "efa"]

    @property
    def infiniband_pools(self) -> list[NodePool]:
        return [p for p in self.node_pools.values() if p.fabric == "infiniband"]

    def price_per_hour(self, instance_type: str) -> float:
        """$/hour of one node: the stack's override, else the catalog's on-demand price."""
        if instance_type in self.observability.prices:
            return self.observability.prices[instance_type]
        price = catalog.get(instance_type).on_demand_usd_per_hour
        if price is None:  # parse() guarantees an override exists for every type in use
            raise KeyError(f"no price for {instance_type}")
        return price

    def pool_of(self, model: Model) -> NodePool:
        return self.node_pools[model.pool]

    def priority_class_of(self, model: Model) -> str | None:
        """The PriorityClass of the model's pods (ServingControllers creates it)."""
        return SERVING_PRIORITY_CLASSES[model.priority][0]

    def tenant_of(self, model: Model) -> Tenant:
        return self.tenants[model.tenant]

    def variants_of(self, workload: str) -> list[Model]:
        """The workload's variants, cheapest first (ties: faster first, then by name); empty without variants."""
        vs = [m for m in self.models.values() if m.workload == workload and m.variant is not None]
        return sorted(vs, key=lambda m: (self.cost_per_request(m), m.slo.e2e_seconds, m.name))

    def cost_per_request(self, model: Model) -> float:
        """$ per request of a variant: its costPerRequest, else one replica's GPUs at the pool's price per GPU-hour
        over the requests it serves in an hour (parse() guarantees one of the two is known)."""
        v = model.variant
        if v is None:
            raise KeyError(f"{model.name} is not a variant")
        if v.cost_per_request is not None:
            return v.cost_per_request
        pool = self.pool_of(model)
        per_gpu_hour = self.price_per_hour(pool.instance_type) / pool.instance.gpu_count
        assert v.requests_per_second is not None  # parse() guarantees it
        return per_gpu_hour * model.gpus_per_replica / (v.requests_per_second * 3600)

    def routing_policy(self, workload: str) -> str:
        """The workload's routing policy among its variants."""
        return self.gateway.routing.get(workload, ROUTING_POLICIES[0])

    def routing_margin_percent(self, workload: str) -> float:
        """How much more than a variant's slo.e2eSeconds a budget must hold for the variant to fit it, percent."""
        return self.gateway.routing_margins.get(workload, DEFAULT_ROUTING_MARGIN_PERCENT)


# --------------------------------------------------------------------------------------------
# reading




def _reserved_namespace(value: str) -> str | None:
    """Why a namespace cannot be a tenant's (Kubernetes' own, kube-*, or one the platform runs in), or None."""
    if value in SYSTEM_NAMESPACES or value.startswith("kube-"):
        named = sorted(n for n in SYSTEM_NAMESPACES if not n.startswith("kube-"))
        return f"is reserved for the platform (kube-*, {', '.join(named)})"
    return None


def _dns_label(value: str) -> str | None:
    return None if DNS_LABEL.match(value) else "is not a DNS label (lowercase letters, digits, '-')"


def _cidr(value: str) -> str | None:
    try:
        ipaddress.ip_network(value, strict=True)
    except ValueError:
        return "is not a CIDR block such as 10.0.0.0/16"
    return None


def _known_type(value: str) -> str | None:
    if value in catalog.CATALOG:
        return None
    return f"is not a known instance type; known: {', '.join(catalog.known_types())}"


# --------------------------------------------------------------------------------------------
# sections


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
        elif not 2 <= len(azs) <= 6:
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
        if ipaddress.ip_network(v).prefixlen == 0:
            return "opens the API endpoint to the whole internet; list your own networks instead"
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


_POOL_KEYS = ("instanceType", "minSize", "maxSize", "desiredSize", "fabric", "availabilityZones", "capacity",
              "placementGroup", "rootVolumeGiB", "hugepagesMiB", "labels", "taints", "mig", "nodes", "nodeCheck",
              "vllmImage")


def _node_pool(r: _Reader, name: str, d: dict[str, Any], target: Target | None) -> NodePool | None:
    path = f"nodePools.{name}"
    r.allow(d, path, _POOL_KEYS)
    itype = r.value(d, "instanceType", path, str, check=_known_type)
    if itype is None:
        return None
    inst = catalog.get(itype)
    aws = target is not None and target.is_aws
    if target is not None and inst.onprem == aws:
        kinds = [n for n, t in catalog.CATALOG.items() if t.onprem != aws]
        r.fail(f"{path}.instanceType", f"{itype!r} is not available for provider {target.provider!r}; "
                                       f"choose one of: {', '.join(sorted(kinds))}")
    block = isinstance(d.get("capacity"), dict) and d["capacity"].get("type") == "capacity-block"
    lo = r.value(d, "minSize", path, int, 0 if block else 1, minimum=0)
    want = r.value(d, "desiredSize", path, int, lo, minimum=0)
    hi = r.value(d, "maxSize", path, int, max(lo, want), minimum=0)
    _sizes(r, path, lo, hi, want)

    fabric = r.value(d, "fabric", path, str, "none", choices=("efa", "infiniband", "none"))
    if fabric == "efa":
        if not inst.supports_efa:
            r.fail(f"{path}.fabric", f"'efa' is not available on {itype}; EFA types: {', '.join(catalog.efa_types())}")
        if target is not None and not aws:
            r.fail(f"{path}.fabric", "'efa' needs provider 'aws'; existing clusters use 'infiniband'")
    if fabric == "infiniband":
        if inst.ib_ports == 0:
            ib = sorted(n for n, t in catalog.CATALOG.items() if t.ib_ports)
            r.fail(f"{path}.fabric", f"'infiniband' is not available on {itype}; InfiniBand types: {', '.join(ib)}")
        if aws:
            r.fail(f"{path}.fabric", "'infiniband' needs provider 'existing'; AWS pools use 'efa'")
    if fabric != "none" and not inst.has_gpu:
        r.fail(f"{path}.fabric", f"{fabric!r} is for GPU pools; {itype} has no GPU")

    target_azs = target.availability_zones if target is not None else ()
    azs = r.strings(d, "availabilityZones", path, derived=True)  # default: the pool's zones (below)
    if "availabilityZones" in d:
        if not aws:
            r.fail(f"{path}.availabilityZones", "only applies to provider 'aws'")
        for i, az in enumerate(azs):
            if target_azs and az not in target_azs:
                r.fail(f"{path}.availabilityZones[{i}]", f"{az!r} is not one of target.availabilityZones "
                                                         f"({', '.join(target_azs)})")
        if not azs:
            r.fail(f"{path}.availabilityZones", "must list at least one zone")
    elif aws:
        azs = target_azs[:1] if fabric == "efa" else target_azs
    if fabric == "efa" and len(azs) > 1:
        r.fail(f"{path}.availabilityZones", f"{_show(list(azs))}: an EFA pool must be in exactly one zone "
                                            "(EFA traffic does not cross zones)")

    cap_raw = d.get("capacity")
    capacity = Capacity()
    if cap_raw is not None:
        cd = r.mapping(cap_raw, f"{path}.capacity", ("type", "reservationId", "startTime", "endTime",
                                                     "drainMinutes"))
        ctype = r.value(cd, "type", f"{path}.capacity", str, "on-demand",
                        choices=("on-demand", "odcr", "capacity-block"))
        rid = r.value(cd, "reservationId", f"{path}.capacity", str, None,
                      check=lambda v: None if RESERVATION_ID.match(v) else "is not a reservation id (cr-...)")
        if ctype != "on-demand" and rid is None and cd is not None and "reservationId" not in cd:
            r.fail(f"{path}.capacity.reservationId", f"is required for capacity type {ctype!r}")
        if ctype == "on-demand" and cd is not None and "reservationId" in cd:
            r.fail(f"{path}.capacity.reservationId", "only applies to capacity types 'odcr' and 'capacity-block'")
        if not aws and target is not None:
            r.fail(f"{path}.capacity", "only applies to provider 'aws'")
        drain = r.value(cd, "drainMinutes", f"{path}.capacity", int, CAPACITY_BLOCK_DRAIN_MINUTES,
                        check=lambda v: None if v >= MIN_CAPACITY_BLOCK_DRAIN_MINUTES else
                        "must be more than 30: EKS asks to scale a capacity-block node group to zero more than "
                        "30 minutes before the block ends")
        if ctype != "capacity-block" and cd is not None and "drainMinutes" in cd:
            r.fail(f"{path}.capacity.drainMinutes", "only applies to capacity type 'capacity-block'")
        start, end = _block_window(r, cd, f"{path}.capacity", ctype, drain_minutes=drain)
        capacity = Capacity(ctype, rid, start, end, drain)
        if aws and ctype != "on-demand" and len(azs) != 1 and not r.problems_at(f"{path}.availabilityZones"):
            # ODCRs and capacity blocks are zonal (EKS user guide, capacity blocks: give the node group only the
            # subnet of the reservation's zone): other zones have nothing reserved to launch into
            r.fail(f"{path}.availabilityZones", f"{_show(list(azs))}: a {ctype} reservation is in one zone; list "
                                                "exactly that zone")
        if ctype == "odcr" and not (lo == hi == want):
            r.fail(f"{path}.desiredSize", f"an ODCR reservation fixes the node count: set minSize, maxSize and "
                                          f"desiredSize equal to the reserved count (got {lo}, {hi}, {want})")
        if ctype == "capacity-block" and (lo, want) != (0, 0):
            r.fail(f"{path}.desiredSize", f"a capacity block runs nodes only inside its window: set minSize and "
                                          f"desiredSize to 0 and maxSize to the reserved count (got {lo}, {hi}, "
                                          f"{want}); scheduled actions scale the pool at the block's start and end")
    pg_default = fabric == "efa" and not capacity.reserved
    pg = r.value(d, "placementGroup", path, bool, pg_default)
    if pg and capacity.reserved:
        r.fail(f"{path}.placementGroup", f"true conflicts with capacity type {capacity.type!r}: the reservation "
                                         "fixes placement itself; remove placementGroup")
    if pg and not aws and target is not None:
        r.fail(f"{path}.placementGroup", "only applies to provider 'aws'")

    root = r.value(d, "rootVolumeGiB", path, int,
                   DEFAULT_GPU_ROOT_VOLUME_GIB if inst.has_gpu else DEFAULT_CPU_ROOT_VOLUME_GIB,
                   minimum=20, maximum=16384)
    huge = r.value(d, "hugepagesMiB", path, int, DEFAULT_EFA_HUGEPAGES_MIB if fabric == "efa" else 0,
                   minimum=0, check=lambda v: None if v % 2 == 0 else "must be a multiple of 2 (2 MiB pages)")
    labels = r.string_map(d, "labels", path)
    for key in labels:
        if key == POOL_LABEL or key.startswith("nvidia.com/"):
            r.fail(f"{path}.labels.{key}", "is set by the kit; choose another key")

    taints: list[Taint] = []
    if "taints" in d:
        raw_t = r.value(d, "taints", path, list, [], derived=True)  # default: the GPU taint (below)
        for i, t in enumerate(raw_t):
            tp = f"{path}.taints[{i}]"
            td = r.mapping(t, tp, ("key", "value", "effect"))
            key = r.value(td, "key", tp, str)
            eff = r.value(td, "effect", tp, str, choices=("NoSchedule", "PreferNoSchedule", "NoExecute"))
            val = r.value(td, "value", tp, str, "")
            if key and eff:
                taints.append(Taint(key, eff, val))
    elif inst.has_gpu:
        taints.append(Taint(GPU_TAINT_KEY, "NoSchedule", "true"))

    mig = r.value(d, "mig", path, str, None, choices=MIG_LAYOUTS)
    if mig is not None and (inst.gpu is None or not inst.gpu.mig_capable):
        mig_types = [n for n, t in catalog.CATALOG.items() if t.gpu is not None and t.gpu.mig_capable]
        r.fail(f"{path}.mig", f"{itype} GPUs do not support MIG; MIG types: {', '.join(sorted(mig_types))}")
    elif mig is not None and inst.gpu is not None and mig in catalog.MIG_LAYOUT_DEVICES and \
            catalog.mig_devices_per_gpu(mig, inst.gpu) is None:
        fitting = [lay for lay in MIG_LAYOUTS if catalog.mig_devices_per_gpu(lay, inst.gpu) is not None
                   or lay not in catalog.MIG_LAYOUT_DEVICES]
        r.fail(f"{path}.mig", f"{mig!r} does not fit {itype}'s {inst.gpu.name} ({inst.gpu.memory_gib} GB): the GPU "
                              f"operator's MIG manager would fail to apply it; layouts for it: {', '.join(fitting)}")

    node_check = r.section(NodeCheck, d.get("nodeCheck"), f"{path}.nodeCheck")
    nodes = r.strings(d, "nodes", path, check=_dns_subdomain, derived=True)  # provider existing only
    if "nodes" in d and aws:
        r.fail(f"{path}.nodes", "only applies to provider 'existing' (EKS labels the nodes it launches)")
    if mig is not None and target is not None and not aws and not nodes:
        r.fail(f"{path}.nodes", f"is required for a MIG pool on provider 'existing': list the pool's node names "
                                f"(kubectl get nodes -l {POOL_LABEL}={name}); the kit labels them "
                                f"nvidia.com/mig.config={mig} so the GPU operator's MIG manager partitions them")
    if len(set(nodes)) != len(nodes):
        r.fail(f"{path}.nodes", f"{_show(list(nodes))} lists a node twice")
    image = r.value(d, "vllmImage", path, str, None,
                    check=lambda v: None if re.match(r"^[\w.-]+(:\d+)?(/[\w.-]+)+(:[\w.-]+|@sha256:[0-9a-f]{64})$", v)
                    else "is not an image reference with a tag or digest (registry/repo:tag)")
    return NodePool(name, itype, lo, hi, want, fabric, tuple(azs), capacity, pg, root, huge, labels,
                    tuple(taints), mig, nodes, node_check, image)


def _dns_subdomain(value: str) -> str | None:
    return None if DNS_SUBDOMAIN.match(value) else "is not a Kubernetes object name (a DNS subdomain)"


def _block_window(r: _Reader, cd: dict[str, Any] | None, path: str, ctype: str, *,
                  drain_minutes: int) -> tuple[str | None, str | None]:
    """A capacity block's start and end (UTC): the pool scales up at the start and to zero `drainMinutes` before
    the end (EKS user guide, capacity-blocks: "scale to zero more than 30 minutes before the ... end time")."""
    times = {}
    for key in ("startTime", "endTime"):
        times[key] = r.value(cd, key, path, str, None, check=_utc_time)
        if ctype == "capacity-block" and cd is not None and key not in cd:
            r.fail(f"{path}.{key}", f"is required for capacity type 'capacity-block': the block's {key[:-4]} "
                                    "(UTC, e.g. 2026-12-01T11:30:00Z, as `aws ec2 describe-capacity-reservations` "
                                    "shows it)")
        elif ctype != "capacity-block" and cd is not None and key in cd:
            r.fail(f"{path}.{key}", "only applies to capacity type 'capacity-block'")
    start, end = times["startTime"], times["endTime"]
    if start is not None and end is not None:
        s, e = _utc(start), _utc(end)
        if s is not None and e is not None and (e - s).total_seconds() <= drain_minutes * 60:
            r.fail(f"{path}.endTime", f"{end!r} must be more than {drain_minutes} minutes after startTime {start!r} "
                                      f"(the pool scales to zero drainMinutes={drain_minutes} before the block ends)")
    return start, end


def _utc_time(value: str) -> str | None:
    ok = UTC_TIME.match(value) and _utc(value) is not None
    return None if ok else "is not a UTC time such as 2026-12-01T11:30:00Z"


def _utc(value: str) -> datetime.datetime | None:
    try:
        return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return None


def _infiniband(r: _Reader, raw: Any) -> InfinibandSettings:
    path = "infiniband"
    d = r.mapping(raw if raw is not None else {}, path, ("network", "interfaces", "ipRange", "hcaDeviceIds",
                                                         "rdmaResourceName", "rdmaHcaMax", "hostsHaveOfed", "hcas"))
    return InfinibandSettings(
        network=r.value(d, "network", path, str, "ipoib", choices=("ipoib", "sriov")),
        interfaces=r.strings(d, "interfaces", path, ("ib0",), derived=True),  # default: the catalog's rails
        ip_range=r.value(d, "ipRange", path, str, "192.168.100.0/22", check=_cidr),
        hca_device_ids=r.strings(d, "hcaDeviceIds", path, ("101b",),
                                 check=lambda v: None if re.match(r"^[0-9a-f]{4}$", v) else
                                 "is not a PCI device id such as 101b"),
        rdma_resource_name=r.value(d, "rdmaResourceName", path, str, "rdma_shared_device_a",
                                   check=lambda v: None if re.match(r"^[a-z0-9_]+$", v) else
                                   "may hold only lowercase letters, digits and '_'"),
        rdma_hca_max=r.value(d, "rdmaHcaMax", path, int, 63, minimum=1, maximum=1000),
        hosts_have_ofed=r.value(d, "hostsHaveOfed", path, bool, False),
        hcas=r.strings(d, "hcas", path, (), derived=True, check=lambda v: None if re.match(r"^[a-z0-9_]+$", v) else
                       "is not an RDMA device name such as mlx5_0"),
    )


def _ib_rails(r: _Reader, ib: InfinibandSettings, raw: Any, pools: Mapping[str, NodePool]) -> InfinibandSettings:
    """Every compute rail of the InfiniBand pools' servers: interfaces and HCAs default to the catalog's rails
    (catalog.IB_RAILS); fewer than the catalog's ports would leave rails idle, so that is refused."""
    d = raw if isinstance(raw, dict) else {}
    ib_pools = [p for p in pools.values() if p.fabric == "infiniband"]
    types = sorted({p.instance_type for p in ib_pools})
    rails = {catalog.IB_RAILS.get(t, ()) for t in types}
    known = next(iter(rails)) if len(rails) == 1 else ()
    interfaces = ib.interfaces if _given(d, "interfaces") else tuple(x.netdev for x in known) or ib.interfaces
    hcas = ib.hcas if _given(d, "hcas") else () if _given(d, "interfaces") else tuple(x.hca for x in known)
    for t in types:
        ports = catalog.get(t).ib_ports
        if len(interfaces) < ports:
            hint = (f"the catalog's rails: {', '.join(x.netdev for x in catalog.IB_RAILS[t])}"
                    if t in catalog.IB_RAILS else f"list all {ports} compute ports (IPoIB netdevs)")
            r.fail("infiniband.interfaces", f"{_show(list(interfaces))} uses {len(interfaces)} of the {ports} "
                                            f"InfiniBand rails of {t}: cross-node traffic would get "
                                            f"{len(interfaces)}/{ports} of the bandwidth; remove it for {hint}")
    if hcas and len(hcas) != len(interfaces):
        r.fail("infiniband.hcas", f"{_show(list(hcas))} names {len(hcas)} RDMA devices for {len(interfaces)} "
                                  "interfaces: give one per interface, in the same order")
    return dataclasses.replace(ib, interfaces=interfaces, hcas=hcas)


def _tenant(r: _Reader, name: str, d: dict[str, Any]) -> Tenant:
    path = f"tenants.{name}"
    allowed = ("namespace", "gpuQuota", "cpuQuota", "memoryQuota", "migQuota", "rateLimit", "shareWith")
    r.allow(d, path, allowed)
    ns = r.value(d, "namespace", path, str, name, check=lambda v: _dns_label(v) or _reserved_namespace(v))
    if "namespace" not in d and (why := _reserved_namespace(name)) is not None:
        # No namespace set: the tenant's name is its namespace, and must pass the same check.
        r.fail(path, f"the tenant's namespace defaults to its name, and {name!r} {why}; rename the tenant or set "
                     f"{path}.namespace to a namespace of its own")
    quantity = re.compile(r"^\d+(\.\d+)?(m|k|Ki|Mi|Gi|Ti|Pi|M|G|T|P)?$")
    rl_path = f"{path}.rateLimit"
    rld = r.mapping(d.get("rateLimit") or {}, rl_path, ("requestsPerSecond", "burst", "batchRequestsPerSecond",
                                                        "batchBurst"))
    rps = r.value(rld, "requestsPerSecond", rl_path, int, 50, minimum=1)
    burst = r.value(rld, "burst", rl_path, int, max(100, rps), minimum=1)
    return Tenant(
        name=name,
        namespace=ns,
        gpu_quota=r.value(d, "gpuQuota", path, int, 0, minimum=0),
        cpu_quota=r.value(d, "cpuQuota", path, str, "0", derived=True,
                          check=lambda v: None if quantity.match(v) else "is not a Kubernetes quantity"),
        memory_quota=r.value(d, "memoryQuota", path, str, "0Gi", derived=True,
                             check=lambda v: None if quantity.match(v) else "is not a Kubernetes quantity"),
        mig_quota=_mig_quota(r, d, path),
        rate_limit=RateLimit(rps, burst, r.value(rld, "batchRequestsPerSecond", rl_path, int, rps, minimum=1),
                             r.value(rld, "batchBurst", rl_path, int, burst, minimum=1)),
        share_with=r.strings(d, "shareWith", path, check=_dns_label),
    )


def _mig_quota(r: _Reader, d: dict[str, Any], path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    r.keyed(f"{path}.migQuota", int, key_pattern=MIG_PROFILE_RE.pattern, minimum=0)
    for profile, count in (r.value(d, "migQuota", path, dict, None) or {}).items():
        if not MIG_PROFILE_RE.match(str(profile)):
            r.fail(f"{path}.migQuota.{profile}", "is not a MIG profile such as 1g.10gb")
        elif isinstance(count, bool) or not isinstance(count, int) or count < 0:
            r.fail(f"{path}.migQuota.{profile}", f"expected a slice count (an integer >= 0), got {_show(count)}")
        else:
            out[str(profile)] = count
    return out


_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(m|k|Ki|Mi|Gi|Ti|Pi|M|G|T|P)?$")
_SCALE = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
          "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50}


def _quantity(value: str) -> float:
    """A Kubernetes quantity as a number (cores, or bytes); the value was checked against the pattern."""
    m = _QUANTITY.match(value)
    return float(m.group(1)) * _SCALE[m.group(2)] if m else 0.0


def _mig_slices(profile: str) -> int:
    """Compute slices (sevenths of a GPU) of a MIG profile: 1g.10gb is 1, 3g.40gb is 3."""
    return int(profile.split("g", 1)[0])


def _quota_profiles(pools: Mapping[str, NodePool], models: Mapping[str, Model]) -> list[str]:
    """MIG profiles the stack's nodes advertise as extended resources (a quota names each, or it is unlimited):
    what models request and the single-profile layouts (`all-1g.10gb` advertises nvidia.com/mig-1g.10gb)."""
    used = {m.mig_profile for m in models.values() if m.mig_profile}
    layouts = {p.mig.removeprefix("all-") for p in pools.values() if p.mig and MIG_PROFILE_RE.match(
        p.mig.removeprefix("all-"))}
    return sorted(used | layouts)


def _derive_quotas(r: _Reader, raw: Any, tenants: dict[str, Tenant], models: Mapping[str, Model],
                   pools: Mapping[str, NodePool]) -> dict[str, Tenant]:
    """Each tenant's CPU, memory and MIG quotas from what its GPU quota implies on its pools.

    A tenant's GPU (and MIG slice) quota admits pods whose CPU and memory are that many GPUs' share of
    a node (serving sizes model pods at 80% of that share, leaving room for the sidecar); a CPU or memory
    quota below it would reject pods the GPU quota admits (ResourceQuota admission rejects a pod whose
    requests or limits exceed what is left). The share is taken on the tenant's pool with the most CPU and
    memory per GPU. An explicit cpuQuota/memoryQuota may only raise it; migQuota defaults to what the
    tenant's models scale to, and every MIG profile of the stack is quota'd (0 for tenants that use none).
    """
    raw_tenants = raw if isinstance(raw, dict) else {}
    profiles = _quota_profiles(pools, models)
    out: dict[str, Tenant] = {}
    for name, t in tenants.items():
        body = raw_tenants.get(name)
        given: dict[str, Any] = body if isinstance(body, dict) else {}
        path = f"tenants.{name}"
        mine = [m for m in models.values() if m.tenant == name]
        need_mig = {p: sum(m.replicas.max for m in mine if m.mig_profile == p) for p in profiles}
        mig = {p: t.mig_quota[p] if p in t.mig_quota else need_mig[p] for p in sorted(set(profiles) | set(t.mig_quota))}
        for p, n in t.mig_quota.items():
            if n < need_mig.get(p, 0):
                r.fail(f"{path}.migQuota.{p}", f"{n} is less than the {need_mig[p]} slices its models can scale "
                                               f"to (replicas.max); raise it to at least {need_mig[p]}")
        gpu_pools = [pools[m.pool] for m in mine if m.pool in pools and pools[m.pool].gpu] or \
            [p for p in pools.values() if p.gpu]
        gpus = t.gpu_quota + sum(n * _mig_slices(p) for p, n in mig.items()) / 7
        cpu = math.ceil(gpus * max((p.instance.vcpus / p.instance.gpu_count for p in gpu_pools), default=0))
        mem = math.ceil(gpus * max((p.instance.memory_gib / p.instance.gpu_count for p in gpu_pools), default=0))
        cpu_q, mem_q = str(cpu), f"{mem}Gi"
        if _given(given, "cpuQuota"):
            if _quantity(t.cpu_quota) < cpu:
                r.fail(f"{path}.cpuQuota", f"{t.cpu_quota!r} is less than the {cpu} cores its GPU quota implies on "
                                           "its pools; pods the GPU quota admits would be rejected: raise it or "
                                           "remove it (default: derived)")
            cpu_q = t.cpu_quota
        if _given(given, "memoryQuota"):
            if _quantity(t.memory_quota) < mem * 2 ** 30:
                r.fail(f"{path}.memoryQuota", f"{t.memory_quota!r} is less than the {mem}Gi its GPU quota implies on "
                                              "its pools; pods the GPU quota admits would be rejected: raise it or "
                                              "remove it (default: derived)")
            mem_q = t.memory_quota
        out[name] = dataclasses.replace(t, cpu_quota=cpu_q, memory_quota=mem_q, mig_quota=mig)
    return out


_MODEL_KEYS = ("engine", "model", "uri", "tenant", "pool", "tensorParallel", "pipelineParallel", "gpusPerReplica",
               "migProfile", "quantization", "maxModelLength", "prefixCaching", "speculative", "replicas",
               "workload", "priority", "timeoutSeconds", "slo", "callers", "cacheGiB", "startupBudgetSeconds",
               "maxRequestBytes", "tryIdleTimeoutSeconds", "expertParallel", "kvOffloadGiB", "weightsGiB",
               "variant", "task", "groupFormationSeconds")


def _model(r: _Reader, name: str, d: dict[str, Any], pools: Mapping[str, NodePool],
           tenants: Mapping[str, Tenant], *, aws: bool) -> Model | None:
    path = f"models.{name}"
    r.allow(d, path, _MODEL_KEYS)
    engine = r.value(d, "engine", path, str, choices=("vllm", "triton"))
    model_id = r.value(d, "model", path, str)
    tenant = r.value(d, "tenant", path, str)
    if tenant is not None and tenant not in tenants:
        r.fail(f"{path}.tenant", f"{tenant!r} is not a tenant; tenants: {', '.join(sorted(tenants)) or '(none)'}")
    pool_name = r.value(d, "pool", path, str)
    pool = pools.get(pool_name) if pool_name else None
    if pool_name is not None and pool is None:
        r.fail(f"{path}.pool", f"{pool_name!r} is not a node pool; pools: {', '.join(sorted(pools)) or '(none)'}")
    elif pool is not None and not pool.gpu:
        r.fail(f"{path}.pool", f"{pool_name!r} has no GPUs ({pool.instance_type}); "
                               f"GPU pools: {', '.join(p.name for p in pools.values() if p.gpu) or '(none)'}")
    tp = r.value(d, "tensorParallel", path, int, 1, minimum=1, maximum=64)
    pp = r.value(d, "pipelineParallel", path, int, 1, minimum=1, maximum=64)
    mig = r.value(d, "migProfile", path, str, None,
                  check=lambda v: None if MIG_PROFILE_RE.match(v) else "is not a MIG profile such as 1g.10gb")
    gpus = r.value(d, "gpusPerReplica", path, int, tp * pp, minimum=1)
    if mig is None and gpus != tp * pp:
        r.fail(f"{path}.gpusPerReplica", f"{gpus} must equal tensorParallel x pipelineParallel ({tp * pp})")
    per_node = pool.instance.gpu_count if pool is not None and pool.gpu else 8
    # The key the user wrote for the replica's shape, so every message below names it.
    shape = next((k for k in ("tensorParallel", "pipelineParallel", "gpusPerReplica") if k in d), "tensorParallel")
    if tp & (tp - 1):
        # vLLM checks total_num_attention_heads % tensor_parallel_size == 0 when it loads the model (vllm
        # config/model.py, verify_with_parallel_config); the kit cannot read the model's head count, and head
        # counts are powers of two times small factors (Llama 3.x: 32, 64, 128), so 3, 5, 6 or 7 rarely divide.
        r.fail(f"{path}.tensorParallel", f"{tp} is not a power of two: the engine splits the model's attention heads "
                                         "evenly across tensorParallel GPUs (vLLM requires heads % tensorParallel "
                                         "== 0); use 1, 2, 4, 8 or 16")
    if pool is not None and pool.gpu:
        if mig is not None:
            if pool.mig is None:
                r.fail(f"{path}.migProfile", f"pool {pool.name!r} has no MIG layout; set nodePools.{pool.name}.mig")
            if tp * pp != 1:
                r.fail(f"{path}.migProfile",
                       "a MIG slice serves one shard: tensorParallel and pipelineParallel must be 1")
        elif gpus > per_node and gpus % per_node:
            r.fail(f"{path}.{shape}", f"{gpus} GPUs span nodes of {per_node} GPUs ({pool.instance_type}); "
                                      f"a multi-node replica needs a multiple of {per_node}")
        elif gpus > per_node and engine == "triton":
            r.fail(f"{path}.engine", f"'triton' cannot serve a replica of {gpus} GPUs across nodes of {per_node} "
                                     f"({pool.instance_type}); use engine 'vllm' or fit the replica on one node")
        elif gpus > per_node and pool.fabric == "none":
            r.fail(f"{path}.{shape}", f"{gpus} GPUs need {gpus // per_node} nodes, but pool "
                                      f"{pool.name!r} has no data-plane fabric (efa or infiniband)")
        elif gpus > per_node and gpus // per_node > pool.max_size:
            r.fail(f"{path}.{shape}", f"one replica of {gpus} GPUs (tensorParallel x pipelineParallel) needs "
                                      f"{gpus // per_node} nodes of {per_node} GPUs ({pool.instance_type}), but "
                                      f"nodePools.{pool.name}.maxSize is {pool.max_size}")
    quant, prequantized = _quantization(r, d.get("quantization", "none"), f"{path}.quantization", engine=engine,
                                        pool=pool, model_id=model_id)
    if engine == "triton" and quant == "gptq":
        r.fail(f"{path}.quantization", "'gptq' is not supported by Triton's TensorRT-LLM backend; "
                                       "choose one of: none, fp8, awq, int8")
    spec = None
    if d.get("speculative") is not None:
        sp = f"{path}.speculative"
        sd = r.mapping(d["speculative"], sp, ("method", "draftModel", "numSpeculativeTokens"))
        if sd is not None and sd.get("method") == "draft_model":
            r.fail(f"{sp}.method", "'draft_model' is not supported by the V1 engine of the kit's pinned vLLM "
                                   "(it raises NotImplementedError); use eagle3 with an EAGLE-3 head, or ngram")
            sd = {k: v for k, v in sd.items() if k != "method"}
        method = r.value(sd, "method", sp, str, "eagle3", choices=SPECULATIVE_METHODS)
        draft = r.value(sd, "draftModel", sp, str) if method != "ngram" else None
        if method == "ngram" and sd is not None and "draftModel" in sd:
            r.fail(f"{sp}.draftModel", "is not used by method 'ngram' (it drafts from the prompt); remove it")
        spec = Speculative(draft, r.value(sd, "numSpeculativeTokens", sp, int, 5, minimum=1, maximum=16), method)
        if engine == "triton":
            r.fail(sp, "speculative decoding is configured for vLLM only; remove it or use engine 'vllm'")
        elif pp > 1:
            r.fail(sp, f"vLLM's speculative decoding does not support pipeline parallelism "
                       f"(pipelineParallel is {pp}); remove it or use tensorParallel only")
    rp = f"{path}.replicas"
    rd = r.mapping(d.get("replicas") or {}, rp, ("min", "max", "targetQueueDepth", "targetQueueTimeMs"))
    rmin = r.value(rd, "min", rp, int, 1, minimum=0)
    rmax = r.value(rd, "max", rp, int, max(rmin, 1), minimum=1)
    if rmin > rmax:
        r.fail(f"{rp}.min", f"{rmin} is greater than max {rmax}")
    replicas = Replicas(rmin, rmax, r.value(rd, "targetQueueDepth", rp, int, 5, minimum=1),
                        r.value(rd, "targetQueueTimeMs", rp, int, 100, minimum=1))
    if pool is not None and pool.gpu and mig is None and not r.problems_at(path):
        _fits_pool(r, path, gpus, per_node, rmax, pool)
    slo = r.section(ModelSlo, d.get("slo"), f"{path}.slo")
    timeout = r.value(d, "timeoutSeconds", path, float, 60.0, minimum=0.1, maximum=3600)
    try_idle = r.value(d, "tryIdleTimeoutSeconds", path, float, min(timeout, DEFAULT_TRY_IDLE_SECONDS), minimum=0.01)
    if try_idle > timeout:
        r.fail(f"{path}.tryIdleTimeoutSeconds", f"{try_idle:g} is longer than timeoutSeconds {timeout:g}; "
                                                f"use at most {timeout:g}")
    if None in (engine, model_id, tenant, pool_name):
        return None
    model = Model(
        name=name, engine=engine, model=model_id, tenant=tenant, pool=pool_name,
        uri=r.value(d, "uri", path, str, f"hf://{model_id}",
                    check=lambda v: _model_uri(v, aws=aws)),
        tensor_parallel=tp, pipeline_parallel=pp, gpus_per_replica=gpus, mig_profile=mig, quantization=quant,
        max_model_length=r.value(d, "maxModelLength", path, int, None, minimum=256),
        prefix_caching=_prefix_caching(r, d, path, engine),
        speculative=spec, replicas=replicas,
        workload=r.value(d, "workload", path, str, name, check=_dns_label),
        priority=r.value(d, "priority", path, str, "interactive", choices=("interactive", "batch")),
        timeout_seconds=timeout,
        slo=slo,
        callers=r.strings(d, "callers", path),
        cache_gib=r.value(d, "cacheGiB", path, int, 200, minimum=1),
        startup_budget_seconds=r.value(d, "startupBudgetSeconds", path, int, DEFAULT_STARTUP_BUDGET_SECONDS,
                                       minimum=60, maximum=86400),
        gpus_per_node_hint=per_node,
        max_request_bytes=r.value(d, "maxRequestBytes", path, int, DEFAULT_MAX_REQUEST_BYTES, minimum=1024,
                                  maximum=MAX_REQUEST_BYTES_LIMIT),
        try_idle_timeout_seconds=try_idle,
        quantized_checkpoint=prequantized,
        expert_parallel=_expert_parallel(r, d, path, engine, tp),
        kv_offload_gib=_kv_offload(r, d, path, engine),
        weights_gib=r.value(d, "weightsGiB", path, float, None, minimum=0.01),
        variant=_variant(r, d, path),
        task=_task(r, d, path, engine),
        group_formation_seconds=r.value(d, "groupFormationSeconds", path, int, DEFAULT_GROUP_FORMATION_SECONDS,
                                        minimum=30, maximum=86400),
    )
    if pool is not None and pool.gpu:
        _cold_start_fits(r, model, pool, aws=aws)
    return model


def _variant(r: _Reader, d: dict[str, Any], path: str) -> Variant | None:
    if "variant" not in d:
        return None
    vp = f"{path}.variant"
    vd = r.mapping(d["variant"] if d["variant"] is not None else {}, vp,
                   ("costPerRequest", "requestsPerSecond", "maxRequests"))
    cost = r.value(vd, "costPerRequest", vp, float, None, minimum=0)
    rps = r.value(vd, "requestsPerSecond", vp, float, None, minimum=0.0001)
    if vd is not None and "costPerRequest" in vd and "requestsPerSecond" in vd:
        r.fail(f"{vp}.costPerRequest", "contradicts requestsPerSecond (the cost is derived from it); give one of them")
    return Variant(cost, rps, r.value(vd, "maxRequests", vp, int, None, minimum=1))


def _variant_checks(r: _Reader, models: Mapping[str, Model],
                    routing: Mapping[str, str]) -> None:
    """Variants of one workload: at least two, interactive, one tenant, no plain interactive model beside them,
    a cost that can be derived; gateway.routing names only workloads with variants."""
    groups: dict[str, list[Model]] = {}
    for m in sorted(models.values(), key=lambda m: m.name):
        if m.variant is not None:
            groups.setdefault(m.workload, []).append(m)
            path = f"models.{m.name}"
            if m.priority != "interactive":
                r.fail(f"{path}.priority", f"{m.priority!r}: variants serve interactive requests; a workload's batch "
                                           "requests (x-priority: batch) go to its one batch model, without variant")
            if r.problems_at(f"{path}.variant"):
                pass
            elif m.variant.cost_per_request is None and m.variant.requests_per_second is None:
                r.fail(f"{path}.variant.requestsPerSecond", "is required to derive the cost per request (pool GPU "
                                                            "price x GPUs per replica / throughput); or give "
                                                            "costPerRequest")
            elif m.variant.cost_per_request is None and m.mig_profile is not None:
                r.fail(f"{path}.variant.costPerRequest", f"is required: a MIG slice ({m.mig_profile}) has no price "
                                                         "per GPU to derive it from")
    for workload, vs in groups.items():
        first = vs[0]
        if len(vs) < 2:
            r.fail(f"models.{first.name}.variant", f"workload {workload!r} has no other variant; declare another model "
                                                   f"with workload {workload!r} and variant, or remove variant")
        for m in vs[1:]:
            if m.tenant != first.tenant:
                r.fail(f"models.{m.name}.tenant", f"{m.tenant!r} differs from {first.tenant!r} (models.{first.name}): "
                                                  f"variants of workload {workload!r} share one tenant")
        for m in sorted(models.values(), key=lambda m: m.name):
            if m.workload == workload and m.variant is None and m.priority == "interactive":
                r.fail(f"models.{m.name}.variant", f"is required: workload {workload!r} has variants "
                                                   f"({', '.join(v.name for v in vs)}); its interactive models are "
                                                   "all variants")
    for workload in routing:
        if workload not in groups:
            r.fail(f"gateway.routing.{workload}", f"{workload!r} is not a workload with variants; workloads with "
                                                  f"variants: {', '.join(sorted(groups)) or '(none)'}")


def _task(r: _Reader, d: dict[str, Any], path: str, engine: str | None) -> Literal["generate", "embed", "rerank"]:
    """models.X.task; each engine serves the tasks envoy_config.OPENAI_APIS lists for it."""
    task = r.value(d, "task", path, str, "generate", choices=MODEL_TASKS)
    served = tuple(OPENAI_APIS[engine]) if engine in OPENAI_APIS else MODEL_TASKS
    if task is not None and task not in served:
        r.fail(f"{path}.task", f"{task!r} is not served by engine {engine!r}; its tasks: {', '.join(served)} "
                               "(a reranker needs engine 'vllm')")
        return "generate"
    return task if task in ("embed", "rerank") else "generate"


def _cold_start_fits(r: _Reader, model: Model, pool: NodePool, *, aws: bool) -> None:
    """The start-up budget must cover at least reading the weights from the node's cache (coldstart.py)."""
    est = coldstart.cold_start(model_id=model.model, quantization=model.quantization,
                               prequantized=model.quantized_checkpoint or model.engine == "triton",
                               configured_gib=model.weights_gib, instance_type=pool.instance_type, aws=aws,
                               budget_seconds=model.startup_budget_seconds)
    if est is not None and not est.fits:
        r.fail(f"models.{model.name}.startupBudgetSeconds",
               f"{model.startup_budget_seconds} s is shorter than the expected load time: {est.explain()}; raise "
               f"it to at least {est.load_seconds} s plus download and warm-up (or set weightsGiB if the estimate "
               "from the model id is wrong)")


QUANT_METHODS = ("none", "fp8", "awq", "gptq", "int8")
QUANT_CHECKPOINTS = ("pre-quantized", "load-time")
LOAD_TIME_METHODS = ("fp8",)  # vLLM quantizes BF16 weights on load only to FP8 (dynamic scales)
# Model ids that name their checkpoint's quantization (Meta's -FP8, RedHatAI/neuralmagic -FP8-dynamic / -w8a8,
# -AWQ, -GPTQ-Int4, ...): such a checkpoint is pre-quantized whatever the config says.
QUANTIZED_ID = re.compile(r"(?<![a-zA-Z0-9])(FP8|AWQ|GPTQ|W8A8|W4A16|INT4|INT8)(?![a-zA-Z0-9])", re.IGNORECASE)


def _quantization(r: _Reader, raw: Any, path: str, *, engine: str | None, pool: NodePool | None,
                  model_id: str | None = None) -> tuple[Any, bool]:
    """(method, pre-quantized checkpoint) of `quantization`: a method name, or {method, checkpoint}.

    A pre-quantized checkpoint carries its own quantization config (config.json quantization_config), which
    vLLM reads; an explicit `--quantization` that contradicts it is refused at start-up (vLLM v0.33.0
    vllm/config/model.py ModelConfig._verify_quantization: "Quantization method specified in the model config
    (...) does not match the quantization method specified in the `quantization` argument (...)").
    Meta's Llama-3.1-405B-Instruct-FP8 declares fbgemm_fp8, so `--quantization fp8` crash-loops it."""
    if isinstance(raw, dict):
        qd = r.mapping(raw, path, ("method", "checkpoint"))
        method = r.value(qd, "method", path, str, choices=QUANT_METHODS) or "none"
        ckpt = r.value(qd, "checkpoint", path, str, _default_checkpoint(method, engine), choices=QUANT_CHECKPOINTS)
    else:
        method = r.value({"quantization": raw}, "quantization", path.rsplit(".", 1)[0], str, "none",
                         choices=QUANT_METHODS) or "none"
        ckpt = _default_checkpoint(method, engine)
    if method == "none":
        return method, False
    if ckpt == "load-time" and method not in LOAD_TIME_METHODS:
        r.fail(f"{path}.checkpoint", f"'load-time' is not possible for {method!r}: vLLM quantizes on load only to "
                                     f"{', '.join(LOAD_TIME_METHODS)}; {method} needs a pre-quantized checkpoint")
    named = QUANTIZED_ID.search(model_id.rsplit("/", 1)[-1]) if isinstance(model_id, str) else None
    if ckpt == "load-time" and named is not None:
        r.fail(path, f"{model_id!r} is a quantized checkpoint ({named.group(1)} in its name) but quantization "
                     f"{_show(raw)} quantizes on load, and vLLM refuses a --quantization that contradicts the "
                     f"checkpoint: set quantization: {{method: {method}, checkpoint: pre-quantized}}")
    if ckpt == "load-time" and engine == "triton":
        r.fail(f"{path}.checkpoint", "'load-time' is not possible with engine 'triton': TensorRT-LLM quantizes when "
                                     "the engine is built; use checkpoint: pre-quantized")
    gpu = pool.instance.gpu if pool is not None else None
    if method == "fp8" and pool is not None and gpu is not None and not catalog.supports_fp8(gpu):
        need = ".".join(map(str, catalog.FP8_MIN_COMPUTE_CAPABILITY))
        r.fail(f"{path}.method" if isinstance(raw, dict) else path,
               f"'fp8' needs compute capability {need} or newer (Ada Lovelace, Hopper, Blackwell); pool "
               f"{pool.name!r} has {gpu.name} ({gpu.generation}, {'.'.join(map(str, gpu.compute_capability))}): "
               "use a Hopper pool, or an awq/gptq/int8 checkpoint")
    return method, ckpt == "pre-quantized"


def _default_checkpoint(method: str, engine: str | None) -> str:
    return "load-time" if method in LOAD_TIME_METHODS and engine == "vllm" else "pre-quantized"


def _prefix_caching(r: _Reader, d: dict[str, Any], path: str, engine: str | None) -> bool:
    """vLLM: on by default (agent workloads resend long shared prefixes). Triton/TensorRT-LLM reuses KV blocks
    only when the model repository's tensorrt_llm config sets `enable_kv_cache_reuse` (tensorrtllm_backend
    docs/model_config.md), which the kit does not write: off, and an explicit true is refused."""
    if engine == "triton":
        if d.get("prefixCaching") is True:
            r.fail(f"{path}.prefixCaching", "Triton's TensorRT-LLM backend reuses KV blocks only when the model "
                                            "repository's tensorrt_llm config.pbtxt sets enable_kv_cache_reuse "
                                            "(the kit does not write it): set it there and remove prefixCaching")
        return False
    return bool(r.value(d, "prefixCaching", path, bool, True, derived=True))  # default: on for vLLM only


def _expert_parallel(r: _Reader, d: dict[str, Any], path: str, engine: str | None, tp: int | None) -> bool:
    """`--enable-expert-parallel` (vLLM v0.33.0 vllm/engine/arg_utils.py, ParallelConfig.enable_expert_parallel):
    MoE experts are placed whole on the tensor-parallel ranks instead of sharded across them."""
    ep = bool(r.value(d, "expertParallel", path, bool, False))
    if ep and engine == "triton":
        r.fail(f"{path}.expertParallel", "is configured for vLLM only (TensorRT-LLM sets expert parallelism when "
                                         "the engine is built); remove it or use engine 'vllm'")
    if ep and tp == 1:
        r.fail(f"{path}.expertParallel", "needs tensorParallel > 1: expert parallelism spreads the experts over the "
                                         "tensor-parallel GPUs")
    return ep


def _kv_offload(r: _Reader, d: dict[str, Any], path: str, engine: str | None) -> float | None:
    """KV cache offload to host memory: vLLM's `--kv-offloading-size` (GiB; CacheConfig.kv_offloading_size),
    which sets up its native OffloadingConnector with `cpu_bytes_to_use` (v0.33.0 vllm/config/vllm.py; the CPU
    spec, vllm/v1/kv_offload/cpu/spec.py, raises without it: the `num_cpu_blocks` of 0.11.0 is no longer read).
    Offloaded blocks are found by their prefix-cache hashes, so prefix caching must stay on."""
    gib = r.value(d, "kvOffloadGiB", path, float, None, minimum=0.1)
    if gib is not None and engine == "triton":
        r.fail(f"{path}.kvOffloadGiB", "is configured for vLLM only; remove it or use engine 'vllm'")
    if gib is not None and d.get("prefixCaching") is False:
        r.fail(f"{path}.kvOffloadGiB", "needs prefixCaching: offloaded KV blocks are found by their prefix "
                                       "hashes; remove prefixCaching: false or kvOffloadGiB")
    return gib


def _fits_pool(r: _Reader, path: str, gpus: int, per_node: int, rmax: int, pool: NodePool) -> None:
    """replicas.max replicas of this model fit in its pool at maxSize.

    Assumes the model has the pool to itself (models sharing a pool are checked one at a time) and that a
    replica's GPUs are on nodes of their own: a multi-node replica takes whole nodes (replicas.max x nodes per
    replica <= maxSize); single-node replicas pack onto nodes (a node holds GPUs-per-node // gpusPerReplica).
    """
    if gpus > per_node:
        need = rmax * (gpus // per_node)
        how = f"{rmax} x {gpus // per_node} nodes per replica"
    else:
        need = -(-rmax // (per_node // gpus))
        how = f"{rmax} replicas of {gpus} GPU(s), {per_node // gpus} per {per_node}-GPU node"
    if need > pool.max_size:
        r.fail(f"{path}.replicas.max", f"{rmax} replicas need {need} nodes of {pool.instance_type} ({how}), but "
                                       f"nodePools.{pool.name}.maxSize is {pool.max_size}; lower replicas.max "
                                       f"or raise maxSize to {need} (this assumes the model has the pool to itself)")


def _model_uri(value: str, *, aws: bool) -> str | None:
    if not re.match(r"^(hf|s3|pvc)://.+", value):
        return "is not a model URI; use hf://ORG/NAME, s3://BUCKET/PATH or pvc://CLAIM/PATH"
    if value.startswith("s3://") and not aws:
        return "needs provider aws (the model reads it with an IRSA role); use pvc:// or hf://"
    return None


def _gateway(r: _Reader, raw: Any) -> GatewaySettings:
    p = "gateway"
    v = r.fields(GatewaySettings, raw, p, handled=("retries", "outlierDetection", "circuitBreakers", "auth",
                                                   "healthCheck", "routing"))
    d = {k: x for k, x in raw.items() if x is not None} if isinstance(raw, dict) else {}
    if "maxReplicas" not in d or r.problems_at(f"{p}.maxReplicas"):  # default: 6, or minReplicas when larger
        v["max_replicas"] = max(v["min_replicas"], v["max_replicas"])
    if v["min_replicas"] > v["max_replicas"]:
        r.fail(f"{p}.minReplicas", f"{v['min_replicas']} is greater than maxReplicas {v['max_replicas']}")
    return GatewaySettings(
        **v,
        retries=r.section(Retries, d.get("retries"), f"{p}.retries"),
        outlier_detection=r.section(OutlierDetection, d.get("outlierDetection"), f"{p}.outlierDetection"),
        circuit_breakers=r.section(CircuitBreakers, d.get("circuitBreakers"), f"{p}.circuitBreakers"),
        auth=_gateway_auth(r, d.get("auth")),
        health_check=_health_check(r, d.get("healthCheck")),
        routing=_routing(r, d.get("routing")),
        routing_margins=_routing_margins(r, d.get("routing")),
        fidelity=_fidelity(r, d.get("routing")),
    )


def _routing(r: _Reader, raw: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for workload, body in r.named(raw if raw is not None else {}, "gateway.routing").items():
        wp = f"gateway.routing.{workload}"
        wd = r.mapping(body, wp, ("policy", "marginPercent", "fidelity"))
        policy = r.value(wd, "policy", wp, str, ROUTING_POLICIES[0], choices=ROUTING_POLICIES)
        if policy is not None:
            out[workload] = policy
    return out


def _routing_margins(r: _Reader, raw: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for workload, body in (raw if isinstance(raw, dict) else {}).items():
        if isinstance(body, dict) and "marginPercent" in body:
            margin = r.value(body, "marginPercent", f"gateway.routing.{workload}", float, None, minimum=0,
                             maximum=1000)
            if margin is not None:
                out[workload] = margin
    return out


def _fidelity(r: _Reader, raw: Any) -> dict[str, Fidelity]:
    out: dict[str, Fidelity] = {}
    for workload, body in (raw if isinstance(raw, dict) else {}).items():
        if not isinstance(body, dict) or body.get("fidelity") is None:
            continue  # _routing reports the mapping itself
        fp = f"gateway.routing.{workload}.fidelity"
        fd = r.mapping(body["fidelity"], fp, ("suite", "baseline", "maxDrop", "job", "minBaselineScore",
                                              "maxUnanswered", "categories"))
        suite = r.value(fd, "suite", fp, str, check=lambda v: None if DNS_LABEL.match(v) else
                        "is not a suite directory name (a DNS label: lowercase letters, digits, '-')")
        baseline = r.value(fd, "baseline", fp, str)
        max_drop = r.value(fd, "maxDrop", fp, float, DEFAULT_MAX_DROP, minimum=0, maximum=1)
        job = _fidelity_job(r, (fd or {}).get("job"), f"{fp}.job")
        floor = r.value(fd, "minBaselineScore", fp, float, DEFAULT_MIN_BASELINE_SCORE, minimum=0, maximum=1)
        unanswered = r.value(fd, "maxUnanswered", fp, float, DEFAULT_MAX_UNANSWERED, minimum=0, maximum=1)
        categories = _category_gates(r, (fd or {}).get("categories"), f"{fp}.categories")
        if suite is not None and baseline is not None:
            out[workload] = Fidelity(suite, baseline, max_drop, job, floor, unanswered, categories)
    return out


def _category_gates(r: _Reader, raw: Any, path: str) -> tuple[CategoryGate, ...]:
    """categories: {<category> | "*": {minScore, maxDrop}}: at least one of the two each."""
    if raw is None:
        return ()
    out = []
    for name, body in (r.mapping(raw, path, None) or {}).items():
        cp = f"{path}.{name}"
        cd = r.mapping(body, cp, ("minScore", "maxDrop"))
        if cd is None:
            continue
        floor = r.value(cd, "minScore", cp, float, None, minimum=0, maximum=1)
        drop = r.value(cd, "maxDrop", cp, float, None, minimum=0, maximum=1)
        if floor is None and drop is None:
            if not r.problems_at(cp):
                r.fail(cp, "needs minScore (the variant's score on the category's items at least this) or maxDrop "
                           "(at most this below the baseline's)")
            continue
        out.append(CategoryGate(name, floor, drop))
    return tuple(sorted(out, key=lambda c: c.name))


def _fidelity_job(r: _Reader, raw: Any, path: str) -> FidelityJob | None:
    if raw is None:
        return None
    d = r.mapping(raw, path, ("image", "tokenSecret", "timeoutSeconds"))
    image = r.value(d, "image", path, str, check=lambda v: None if v.strip() and " " not in v else
                    "is not an image reference")
    sd = r.mapping((d or {}).get("tokenSecret") or {}, f"{path}.tokenSecret", ("name", "key"))
    name = r.value(sd, "name", f"{path}.tokenSecret", str)
    key = r.value(sd, "key", f"{path}.tokenSecret", str)
    timeout = r.value(d, "timeoutSeconds", path, int, 3600, minimum=60, maximum=86400)
    if image is None or name is None or key is None:
        return None
    return FidelityJob(image, SecretRef(name, key), timeout)


def _fidelity_checks(r: _Reader, models: Mapping[str, Model], fidelity: Mapping[str, Fidelity]) -> None:
    """A gate's baseline is one of its workload's variants (the workload itself is checked with gateway.routing)."""
    for workload, gate in fidelity.items():
        variants = sorted(m.name for m in models.values() if m.workload == workload and m.variant is not None)
        if variants and gate.baseline not in variants:
            r.fail(f"gateway.routing.{workload}.fidelity.baseline",
                   f"{gate.baseline!r} is not a variant of workload {workload!r}; its variants: {', '.join(variants)}")
        if gate.job is not None and workload in variants:
            r.fail(f"gateway.routing.{workload}.fidelity.job",
                   f"cannot reach variant {workload!r} through the gateway: a model named like its workload has no "
                   "route of its own (the name routes to the workload); rename the model, or evaluate it with "
                   "`aifactory eval --url-for`")


def _https_url(value: str) -> str | None:
    return None if re.match(r"^https://[^/\s:]+(:\d+)?(/\S*)?$", value) else "is not an https:// URL"


def _gateway_auth(r: _Reader, raw: Any) -> GatewayAuth:
    p = "gateway.auth"
    d = r.mapping(raw if raw is not None else {}, p, ("issuers", "tenantClaim", "maxTokenLifetimeSeconds"))
    issuers: list[JwtIssuer] = []
    seen: set[str] = set()
    raw_issuers = r.value(d, "issuers", p, list, [])
    for i, item in enumerate(raw_issuers):
        ip = f"{p}.issuers[{i}]"
        idd = r.mapping(item, ip, ("issuer", "jwksUri", "audiences", "tenants"))
        if idd is None:
            continue
        issuer = r.value(idd, "issuer", ip, str, check=lambda v: None if v.strip() else "is empty")
        jwks = r.value(idd, "jwksUri", ip, str, check=_https_url)
        if issuer in seen:
            r.fail(f"{ip}.issuer", f"{issuer!r} is listed twice")
        elif issuer is not None and jwks is not None:
            issuers.append(JwtIssuer(issuer, jwks, r.strings(idd, "audiences", ip),
                                     r.strings(idd, "tenants", ip, derived=True) if "tenants" in idd else None))
        if issuer is not None:
            seen.add(issuer)
    return GatewayAuth(tuple(issuers), r.value(d, "tenantClaim", p, str, "tenant",
                                               check=lambda v: None if re.match(r"^[A-Za-z0-9_:.-]+$", v)
                                               else "is not a claim name (letters, digits, _ : . -)"),
                       r.value(d, "maxTokenLifetimeSeconds", p, int, DEFAULT_MAX_TOKEN_LIFETIME_SECONDS, minimum=60,
                               maximum=MAX_TOKEN_LIFETIME_LIMIT_SECONDS))


def _health_check(r: _Reader, raw: Any) -> HealthCheck:
    """gateway.healthCheck; timeoutSeconds is at most intervalSeconds, and its default no longer than it."""
    p = "gateway.healthCheck"
    hc = r.section(HealthCheck, raw, p)
    given = _given(raw if isinstance(raw, dict) else None, "timeoutSeconds") and \
        not r.problems_at(f"{p}.timeoutSeconds")
    if given and hc.timeout_seconds > hc.interval_seconds:
        r.fail(f"{p}.timeoutSeconds", f"{_show(hc.timeout_seconds)} is above the maximum {hc.interval_seconds:g}")
        given = False
    return hc if given else dataclasses.replace(hc, timeout_seconds=min(HealthCheck().timeout_seconds,
                                                                        hc.interval_seconds))


def _workflow_slo(r: _Reader, raw: Any, path: str, base: WorkflowSlo) -> WorkflowSlo:
    d = r.mapping(raw if raw is not None else {}, path, ("latencySeconds", "latencyTarget", "availabilityTarget"))
    return WorkflowSlo(
        r.value(d, "latencySeconds", path, float, base.latency_seconds, minimum=0.001),
        r.value(d, "latencyTarget", path, float, base.latency_target, minimum=0.5, maximum=0.99999),
        r.value(d, "availabilityTarget", path, float, base.availability_target, minimum=0.5, maximum=0.99999),
    )


def _secret_ref(r: _Reader, d: Mapping[str, Any] | None, path: str, *, required: bool) -> SecretRef | None:
    if d is None or d.get("secret") is None:
        if required and d is not None:
            r.fail(f"{path}.secret", "is required: {name: <Secret in the observability namespace>, key: <its key>}")
        return None
    sd = r.mapping(d["secret"], f"{path}.secret", ("name", "key"))
    name = r.value(sd, "name", f"{path}.secret", str, check=_dns_label)
    key = r.value(sd, "key", f"{path}.secret", str,
                  check=lambda v: None if re.match(r"^[-._a-zA-Z0-9]+$", v) else "is not a Secret key")
    return SecretRef(name, key) if name and key else None


_RECEIVER_KEYS: dict[str, tuple[str, ...]] = {
    "slack": ("type", "channel", "secret"),
    "pagerduty": ("type", "secret"),
    "email": ("type", "to", "from", "smarthost", "username", "secret"),
    "webhook": ("type", "url", "secret"),
}
# Keys that would put a credential into the stack config in plain text: refused with the fix.
_PLAIN_SECRETS = ("apiUrl", "routingKey", "serviceKey", "password", "authPassword", "token", "bearerToken")


def _receiver(r: _Reader, name: str, d: dict[str, Any]) -> AlertReceiver | None:
    path = f"observability.alerting.receivers.{name}"
    r.keys_by_hand(path, tuple(sorted({k for keys in _RECEIVER_KEYS.values() for k in keys})))
    typ = r.value(d, "type", path, str, choices=ALERT_RECEIVER_TYPES)
    for key in d:
        if key in _PLAIN_SECRETS:
            r.fail(f"{path}.{key}", "credentials never go into the stack config; store it in a Kubernetes Secret "
                                    "and reference it with secret: {name, key}")
        elif typ is not None and key not in _RECEIVER_KEYS[typ]:
            r.fail(f"{path}.{key}", f"unknown key for type {typ!r}{did_you_mean(key, _RECEIVER_KEYS[typ])}; "
                                   f"allowed keys: {', '.join(_RECEIVER_KEYS[typ])}")
    if typ is None:
        return None
    secret = _secret_ref(r, d, path, required=typ in ("slack", "pagerduty"))
    if typ == "slack":
        return AlertReceiver(name, typ, secret, channel=r.value(d, "channel", path, str))
    if typ == "email":
        email = lambda v: None if re.match(r"^[^@\s]+@[^@\s]+$", v) else "is not an email address"  # noqa: E731
        return AlertReceiver(name, typ, secret, to=r.value(d, "to", path, str, check=email),
                             sender=r.value(d, "from", path, str, check=email),
                             smarthost=r.value(d, "smarthost", path, str, check=lambda v: None if re.match(
                                 r"^[A-Za-z0-9.-]+:\d{1,5}$", v) else "is not host:port such as smtp.example.com:587"),
                             username=r.value(d, "username", path, str, None))
    if typ == "webhook":
        return AlertReceiver(name, typ, secret, url=r.value(d, "url", path, str, check=lambda v: None if re.match(
            r"^https?://[^\s]+$", v) else "is not an http(s):// URL"))
    return AlertReceiver(name, typ, secret)


def _alerting(r: _Reader, raw: Any) -> Alerting:
    path = "observability.alerting"
    d = r.mapping(raw if raw is not None else {}, path, ("receivers", "routes", "heartbeat"))
    receivers = {n: rc for n, b in r.named((d or {}).get("receivers") or {}, f"{path}.receivers").items()
                 if (rc := _receiver(r, n, b)) is not None}
    routes: dict[str, tuple[str, ...]] = {}
    rd = r.mapping((d or {}).get("routes") or {}, f"{path}.routes", ALERT_SEVERITIES)
    for severity in ALERT_SEVERITIES:
        names = r.strings(rd, severity, f"{path}.routes")
        for i, n in enumerate(names):
            if n not in receivers:
                r.fail(f"{path}.routes.{severity}[{i}]",
                       f"{n!r} is not a receiver; receivers: {', '.join(sorted(receivers)) or '(none)'}")
        if names:
            routes[severity] = names
    return Alerting(receivers, routes, _heartbeat(r, (d or {}).get("heartbeat"), receivers))


def _heartbeat(r: _Reader, raw: Any, receivers: Mapping[str, AlertReceiver]) -> Heartbeat | None:
    path = "observability.alerting.heartbeat"
    if raw is None:
        return None
    d = r.mapping(raw, path, ("receiver", "repeatInterval"))
    if d is None:
        return None
    name = r.value(d, "receiver", path, str, check=lambda v: None if v in receivers else
                   f"is not a receiver; receivers: {', '.join(sorted(receivers)) or '(none)'}")
    every = r.value(d, "repeatInterval", path, str, "5m", check=lambda v: None if re.match(r"^[1-9][0-9]*(m|h)$", v)
                    else "is not an interval of whole minutes or hours such as 5m or 1h")
    return Heartbeat(name, every) if name is not None and name in receivers else None


def _observability(r: _Reader, raw: Any, *, aws: bool = True) -> ObservabilitySettings:
    p = "observability"
    v = r.fields(ObservabilitySettings, raw, p, handled=("prices", "slo", "workflows", "ingest", "alerting",
                                                         "volumes"))
    d = {k: x for k, x in raw.items() if x is not None} if isinstance(raw, dict) else {}
    prices: dict[str, float] = {}
    r.keyed(f"{p}.prices", float, minimum=0)
    for itype, price in ((d or {}).get("prices") or {}).items() if isinstance((d or {}).get("prices"), dict) else ():
        if _known_type(str(itype)) is not None:
            r.fail(f"{p}.prices.{itype}", _known_type(str(itype)) or "")
        elif isinstance(price, bool) or not isinstance(price, int | float) or price < 0:
            r.fail(f"{p}.prices.{itype}", f"expected a price in $/hour (a number >= 0), got {_show(price)}")
        else:
            prices[itype] = float(price)
    if d is not None and "prices" in d and not isinstance(d["prices"], dict):
        r.fail(f"{p}.prices", f"expected a mapping of instance type to $/hour, got {_kind(d['prices'])}")
    base = _workflow_slo(r, (d or {}).get("slo"), f"{p}.slo", WorkflowSlo())
    workflows = {}
    for wname, body in r.named((d or {}).get("workflows") or {}, f"{p}.workflows").items():
        workflows[wname] = _workflow_slo(r, body, f"{p}.workflows.{wname}", base)
    if not aws and (d or {}).get("lokiMode") == "simple-scalable":
        r.fail(f"{p}.lokiMode", "'simple-scalable' needs object storage, which the kit creates on provider aws only; "
                                "use 'single-binary' (one replica on its volume) on provider existing")
    return ObservabilitySettings(
        **v,
        prices=prices,
        default_workflow_slo=base,
        workflows=workflows,
        ingest=r.section(Ingest, d.get("ingest"), f"{p}.ingest"),
        alerting=_alerting(r, d.get("alerting")),
        volumes=r.section(VolumeSizes, d.get("volumes"), f"{p}.volumes"),
    )


# --------------------------------------------------------------------------------------------
# entry points


def parse(raw: Mapping[str, Any], *, stack: str, reader: _Reader | None = None) -> PlatformConfig:
    """Validate raw `aifactory:*` values (structured, key without namespace) into a PlatformConfig.

    Raises ConfigError listing every problem found, each with its key path. `reader`: the reader to walk the
    values with (default: a fresh one; infra/config_schema.py passes one that also records what it reads).
    """
    r = reader if reader is not None else _Reader()
    if not isinstance(raw, Mapping):
        raise ConfigError([Problem("config", f"expected a mapping, got {_kind(raw)}")])
    for key in raw:
        if key not in TOP_LEVEL_KEYS:
            r.fail(str(key), f"unknown key{did_you_mean(str(key), TOP_LEVEL_KEYS)}; allowed keys under "
                             f"'{NAMESPACE}:': {', '.join(TOP_LEVEL_KEYS)}")
    if "target" not in raw:
        r.fail("target", "is required (provider: aws with region and availabilityZones, or provider: existing "
                         "with kubeconfig)")
    target = _target(r, raw["target"]) if "target" in raw else None
    aws = target is not None and target.is_aws
    k8s = r.value(raw, "kubernetesVersion", "", str, DEFAULT_KUBERNETES_VERSION,
                  choices=SUPPORTED_KUBERNETES_VERSIONS)
    cluster = network = None
    if aws:
        cluster = _cluster(r, raw.get("cluster"), stack)
        network = _network(r, raw.get("network"), stack)
    elif target is not None:
        for key in ("cluster", "network"):
            if key in raw:
                r.fail(key, "only applies to provider 'aws'")

    pools: dict[str, NodePool] = {}
    if "nodePools" not in raw:
        r.fail("nodePools", "is required: at least one GPU pool")
    for name, body in r.named(raw.get("nodePools", {}), "nodePools").items():
        if (pool := _node_pool(r, name, body, target)) is not None:
            pools[name] = pool
    if "nodePools" in raw and isinstance(raw["nodePools"], dict) and not any(p.gpu for p in pools.values()):
        if not r.problems:
            r.fail("nodePools", "needs at least one GPU pool")

    infiniband = None
    if any(p.fabric == "infiniband" for p in pools.values()) or "infiniband" in raw:
        infiniband = _infiniband(r, raw.get("infiniband"))
        infiniband = _ib_rails(r, infiniband, raw.get("infiniband"), pools)
        if aws and "infiniband" in raw:
            r.fail("infiniband", "only applies to provider 'existing'")
        _ip_range_fits(r, infiniband, pools)

    tenants = {n: _tenant(r, n, b) for n, b in r.named(raw.get("tenants", {}), "tenants").items()}
    seen_ns: dict[str, str] = {}
    for t in tenants.values():
        if t.namespace in seen_ns:
            r.fail(f"tenants.{t.name}.namespace", f"{t.namespace!r} is already tenant {seen_ns[t.namespace]!r}'s")
        seen_ns[t.namespace] = t.name

    models: dict[str, Model] = {}
    # `variant:` alone (null) still marks a model as a variant of its workload (then asked for its cost)
    for name, body in r.named(raw.get("models", {}), "models", keep_null=("variant",)).items():
        if (m := _model(r, name, body, pools, tenants, aws=aws)) is not None:
            models[name] = m
    _cross_model_checks(r, models, tenants)
    if cluster is not None:
        _aws_name_lengths(r, cluster.name, pools, models)
    tenants = _derive_quotas(r, raw.get("tenants"), tenants, models, pools)

    gateway = _gateway(r, raw.get("gateway"))
    _variant_checks(r, models, gateway.routing)
    _issuer_tenants(r, gateway.auth, tenants)
    _fidelity_checks(r, models, gateway.fidelity)
    observability = _observability(r, raw.get("observability"), aws=aws)
    for pool in pools.values():
        if catalog.get(pool.instance_type).on_demand_usd_per_hour is None and \
                pool.instance_type not in observability.prices:
            r.fail(f"observability.prices.{pool.instance_type}",
                   f"is required: {pool.instance_type} (pool {pool.name!r}) has no on-demand price; "
                   "give its amortised $/hour")
    for section, ns in (("gateway", gateway.namespace), ("observability", observability.namespace)):
        if ns in seen_ns and _reserved_namespace(ns) is None:  # a reserved one is reported with the tenant
            r.fail(f"tenants.{seen_ns[ns]}", f"namespace {ns!r} is {section}.namespace; a tenant needs a namespace "
                                             "of its own")
        if ns == "default" or ns.startswith("kube-") or ns in _KIT_NAMESPACES:
            r.fail(f"{section}.namespace", f"{ns!r} is reserved for Kubernetes or another platform component "
                                           f"(kube-*, default, {', '.join(sorted(_KIT_NAMESPACES))})")
    if gateway.namespace == observability.namespace:
        r.fail("gateway.namespace", f"{gateway.namespace!r} is also observability.namespace; give each its own")

    if r.problems or target is None:
        raise ConfigError(r.problems or [Problem("target", "is required")])
    return PlatformConfig(stack, target, k8s, cluster, network, pools, infiniband, tenants, models, gateway,
                          observability)


def _ip_range_fits(r: _Reader, ib: InfinibandSettings, pools: Mapping[str, NodePool]) -> None:
    nodes = sum(p.max_size for p in pools.values() if p.fabric == "infiniband")
    have = ipaddress.ip_network(ib.ip_range).num_addresses
    if have < IPAM_BLOCK_SIZE * nodes:
        prefix = 32 - max(1, (IPAM_BLOCK_SIZE * nodes - 1).bit_length())
        r.fail("infiniband.ipRange", f"{ib.ip_range!r} has {have} addresses, too few for {nodes} InfiniBand nodes x "
                                     f"{IPAM_BLOCK_SIZE} per node; use a /{prefix} or larger")


# Pulumi autonames a resource `<name>-<7 random characters>` and refuses (at preview) a name whose result is longer
# than the provider's limit (pulumi-aws resources.go: IAM roles AutoName("name", 64, "-"); S3 buckets 63). The kit's
# longest autonamed names: "<cluster>-logs-bucket" (bucket), "<cluster>-<pool>-node" (node role),
# "model-<model>-s3" (an s3:// model's IRSA role).
AUTONAME_SUFFIX = 8
IAM_ROLE_NAME_MAX = 64
S3_BUCKET_NAME_MAX = 63


def _aws_name_lengths(r: _Reader, cluster: str, pools: Mapping[str, NodePool], models: Mapping[str, Model]) -> None:
    room = S3_BUCKET_NAME_MAX - AUTONAME_SUFFIX - len("-logs-bucket")
    if len(cluster) > room:
        r.fail("cluster.name", f"{cluster!r} is {len(cluster)} characters; at most {room} fit the names AWS allows "
                               f"for what the kit derives from it (the Loki bucket '{cluster}-logs-bucket-xxxxxxx' "
                               f"would pass S3's {S3_BUCKET_NAME_MAX})")
        return
    for p in pools.values():
        role = f"{cluster}-{p.name}-node"
        if len(role) + AUTONAME_SUFFIX > IAM_ROLE_NAME_MAX:
            r.fail(f"nodePools.{p.name}", f"pool name {p.name!r} is too long with cluster {cluster!r}: the node "
                                          f"role '{role}-xxxxxxx' would pass IAM's {IAM_ROLE_NAME_MAX} characters; "
                                          f"keep cluster name + pool name within "
                                          f"{IAM_ROLE_NAME_MAX - AUTONAME_SUFFIX - len('--node')} characters")
    for m in models.values():
        role = f"model-{m.name}-s3"
        if m.uri.startswith("s3://") and len(role) + AUTONAME_SUFFIX > IAM_ROLE_NAME_MAX:
            r.fail(f"models.{m.name}", f"an s3:// model's name is at most "
                                       f"{IAM_ROLE_NAME_MAX - AUTONAME_SUFFIX - len('model--s3')} characters: its "
                                       f"IRSA role '{role}-xxxxxxx' would pass IAM's {IAM_ROLE_NAME_MAX}")


def _issuer_tenants(r: _Reader, auth: GatewayAuth, tenants: Mapping[str, Tenant]) -> None:
    """An issuer's `tenants` name tenants of the stack, at least one."""
    for i, issuer in enumerate(auth.issuers):
        path = f"gateway.auth.issuers[{i}].tenants"
        if issuer.tenants is None or r.problems_at(path):
            continue
        if not issuer.tenants:
            r.fail(path, "is empty: its tokens could call nothing; list the tenants it may name, or leave tenants "
                         "out (any tenant)")
        for j, t in enumerate(issuer.tenants):
            if t not in tenants:
                r.fail(f"{path}[{j}]", f"{t!r} is not a tenant; tenants: {', '.join(sorted(tenants)) or '(none)'}")


def _cross_model_checks(r: _Reader, models: Mapping[str, Model], tenants: Mapping[str, Tenant]) -> None:
    by_workload: dict[tuple[str, str], list[Model]] = {}
    for m in models.values():
        if m.variant is None:  # variants: _variant_checks
            by_workload.setdefault((m.workload, m.priority), []).append(m)
        for i, caller in enumerate(m.callers):
            if caller not in models:
                r.fail(f"models.{m.name}.callers[{i}]",
                       f"{caller!r} is not a model; models: {', '.join(sorted(models))}")
    for (workload, priority), ms in by_workload.items():
        if len(ms) > 1:
            names = ", ".join(sorted(x.name for x in ms))
            r.fail(f"models.{ms[1].name}.workload", f"{workload!r} already has a {priority} model ({names}); "
                                                   "a workload has at most one interactive and one batch model")
    for t in tenants.values():
        for i, other in enumerate(t.share_with):
            if other not in tenants or other == t.name:
                r.fail(f"tenants.{t.name}.shareWith[{i}]",
                       f"{other!r} is not another tenant; other tenants: "
                       f"{', '.join(sorted(set(tenants) - {t.name})) or '(none)'}")
        need = sum(m.replicas.max * (m.gpus_per_replica if m.mig_profile is None else 0)
                   for m in models.values() if m.tenant == t.name)
        if need > t.gpu_quota and not r.problems_at(f"tenants.{t.name}.gpuQuota"):  # a malformed quota is not 0
            r.fail(f"tenants.{t.name}.gpuQuota", f"{t.gpu_quota} is less than the {need} GPUs its models can scale "
                                                 f"to (replicas.max x gpusPerReplica); raise it to at least {need}")


def raw_from_pulumi() -> dict[str, Any]:
    """The `aifactory:*` stack config as the Pulumi CLI passed it, structured values decoded."""
    import pulumi
    from pulumi.runtime import config as runtime_config

    keys = set(runtime_config.CONFIG.get()) | set(runtime_config.get_config_env())
    cfg = pulumi.Config(NAMESPACE)
    raw: dict[str, Any] = {}
    typos = [p for full in sorted(keys) if (p := namespace_typo_problem(full, full)) is not None]
    if typos:
        raise ConfigError(typos)
    for full in sorted(keys):
        ns, _, key = full.partition(":")
        if ns != NAMESPACE:
            continue
        text = cfg.get(key)
        if text is None:
            continue
        # The CLI passes structured values (objects, lists) as JSON text and scalars as plain text:
        # decode only the former, so kubernetesVersion "1.34" stays a string.
        raw[key] = cfg.get_object(key) if text.lstrip()[:1] in ("{", "[") else text
    return raw


def load() -> PlatformConfig:
    """The current stack's PlatformConfig, read through pulumi.Config."""
    import pulumi

    return parse(raw_from_pulumi(), stack=pulumi.get_stack())
