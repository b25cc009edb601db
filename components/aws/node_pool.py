"""GpuNodePool: one managed node group of GPU (or CPU) instances with its own launch template.

For `fabric: efa` the pool gets the catalog's interface layout, its own EFA security group, one
availability zone and a cluster placement group, unless it runs on reserved capacity (an ODCR or a
capacity block), which fixes placement itself: then the launch template names the reservation
(market type `capacity-block` for a block). An ODCR pool is pinned at the reserved count; a capacity-block
pool follows the EKS user guide (capacity-blocks, capacity-blocks-mng): desired size 0 outside the block's
window, a scheduled action on its Auto Scaling group that scales it to the reserved count when the block
starts and one that scales it to 0 `drain_minutes` (default 60; EKS: more than 30) before the block ends, only
those actions still ahead of `now`, no cluster-autoscaler discovery, and a desired size Pulumi never resets
(`ignore_changes`), so an update inside the window does not fight the schedule.
"""

import datetime
from typing import NotRequired, TypedDict

import pulumi
import pulumi_aws as aws

from components import catalog
from components.aws import iam
from components.aws.nodes import (
    AMI_TYPE_CPU,
    AMI_TYPE_GPU,
    DEFAULT_BLOCK_DRAIN_MINUTES,
    GPU_RESOURCE,
    MIN_BLOCK_DRAIN_MINUTES,
    UTC_FORMAT,
    NodeGroupSpec,
    Taint,
    efa_network_interfaces,
    efa_security_group,
    node_group,
    tag_problems,
)
from components.nodes import (
    DEFAULT_CPU_ROOT_VOLUME_GIB,
    DEFAULT_EFA_HUGEPAGES_MIB,
    DEFAULT_GPU_ROOT_VOLUME_GIB,
    TAINT_EFFECTS,
    TaintArgs,
)
from components.validation import Problems, check_shape
from components.vocabulary import POOL_LABEL, SYSTEM_POOL

__all__ = [
    "TYPE",
    "FABRICS",
    "CAPACITY_TYPES",
    "TAINT_EFFECTS",
    "DEFAULT_GPU_ROOT_VOLUME_GIB",
    "DEFAULT_CPU_ROOT_VOLUME_GIB",
    "DEFAULT_EFA_HUGEPAGES_MIB",
    "CapacityArgs",
    "TaintArgs",
    "GpuNodePoolArgs",
    "GpuNodePool",
    "pool_spec",
]

TYPE = "aifactory:index:GpuNodePool"
FABRICS = ("efa", "none")
CAPACITY_TYPES = ("on-demand", "odcr", "capacity-block")
class CapacityArgs(TypedDict):
    """Where the pool's instances come from."""

    type: NotRequired[str]
    """on-demand, odcr (On-Demand Capacity Reservation) or capacity-block. Default: on-demand."""
    reservation_id: NotRequired[str]
    """The reservation (cr-...); required for odcr and capacity-block. Default: none (on-demand)."""
    start_time: NotRequired[str]
    """A capacity block's start, UTC (2026-12-01T11:30:00Z); required for capacity-block. Default: none."""
    end_time: NotRequired[str]
    """A capacity block's end, UTC; required for capacity-block. Default: none."""
    drain_minutes: NotRequired[int]
    """capacity-block: scale the pool to 0 this many minutes before the end; more than 30 (EKS). Default: 60."""


class GpuNodePoolArgs(TypedDict):
    """Arguments of a GpuNodePool."""

    cluster_name: pulumi.Input[str]
    """The EKS cluster the pool joins."""
    vpc_id: pulumi.Input[str]
    """The cluster's VPC (the EFA security group lives there)."""
    cluster_security_group_id: pulumi.Input[str]
    """The cluster security group; EFA pools put their primary (card 0) interface in it."""
    availability_zones: list[str]
    """Zones of `subnet_ids`, in the same order. EFA pools: exactly one."""
    subnet_ids: list[pulumi.Input[str]]
    """Private subnets, one per zone of `availability_zones`."""
    instance_type: str
    """An instance type of the catalog (components.catalog), e.g. p5.48xlarge."""
    pool_name: NotRequired[str]
    """Value of the aifactory.io/pool node label, not `system` (GpuCluster's own). Default: the component's name."""
    kubernetes_version: NotRequired[str]
    """Kubelet version. Default: the cluster's version."""
    min_size: NotRequired[int]
    """Default: 1."""
    max_size: NotRequired[int]
    """Default: max(min_size, desired_size)."""
    desired_size: NotRequired[int]
    """Default: min_size."""
    fabric: NotRequired[str]
    """efa or none. Default: none."""
    capacity: NotRequired[CapacityArgs]
    """Default: on-demand."""
    placement_group: NotRequired[bool]
    """A cluster placement group. Default: true for EFA pools on on-demand capacity, else false."""
    root_volume_gib: NotRequired[int]
    """Encrypted gp3 root volume size. Default: 500 on GPU types, 100 on CPU types."""
    hugepages_mib: NotRequired[int]
    """2 MiB hugepages reserved at boot. Default: 5120 on EFA pools, else 0."""
    labels: NotRequired[dict[str, str]]
    """Extra node labels. Default: none beyond the kit's aifactory.io/* labels."""
    taints: NotRequired[list[TaintArgs]]
    """Default: nvidia.com/gpu=true:NoSchedule on GPU types, none on CPU types."""
    node_role_arn: NotRequired[pulumi.Input[str]]
    """Node IAM role. Default: a role of the pool's own with the worker, CNI, ECR read-only and SSM policies."""
    now: NotRequired[str]
    """UTC time (2026-12-01T11:30:00Z) a capacity block's schedule is computed against: only actions after it are
    created. Default: the wall clock when the program runs."""


def _sizes(problems: Problems, lo: int, hi: int, want: int) -> None:
    for key, value in (("minSize", lo), ("maxSize", hi), ("desiredSize", want)):
        if value < 0:
            problems.add(key, f"{value} is negative")
    if lo > hi:
        problems.add("minSize", f"{lo} is greater than maxSize {hi}")
    elif not lo <= want <= hi:
        problems.add("desiredSize", f"{want} is outside minSize..maxSize ({lo}..{hi})")


def _utc_problem(value: str) -> bool:
    try:
        _now(value)
    except (TypeError, ValueError):
        return True
    return False


def pool_spec(name: str, args: GpuNodePoolArgs) -> NodeGroupSpec:
    """Validate `args` and resolve every default; raises pulumi.InputPropertiesError with property paths."""
    check_shape("GpuNodePool", name, args, GpuNodePoolArgs)  # typos, unknown keys, wrong types: before any read
    problems = Problems("GpuNodePool", name)
    itype = args["instance_type"]
    inst = catalog.CATALOG.get(itype)
    if inst is None or inst.onprem:
        aws_types = [n for n, t in catalog.CATALOG.items() if not t.onprem]
        problems.add("instanceType",
                     f"{itype!r} is not a known AWS instance type; known: {', '.join(sorted(aws_types))}")
        problems.raise_any()
    assert inst is not None
    fabric = args.get("fabric", "none")
    if fabric not in FABRICS:
        problems.add("fabric", f"{fabric!r} is not allowed; choose one of: {', '.join(FABRICS)}")
    elif fabric == "efa" and not inst.supports_efa:
        problems.add("fabric", f"'efa' is not available on {itype}; EFA types: {', '.join(catalog.efa_types())}")
    zones, subnets = args["availability_zones"], args["subnet_ids"]
    if not zones:
        problems.add("availabilityZones", "must list at least one zone")
    elif fabric == "efa" and len(zones) > 1:
        problems.add("availabilityZones", f"{list(zones)}: an EFA pool must be in exactly one zone "
                                          "(EFA traffic does not cross zones)")
    if len(subnets) != len(zones):
        problems.add("subnetIds", f"lists {len(subnets)} subnet(s) for {len(zones)} zone(s); give one per zone")

    lo = args.get("min_size", 1)
    want = args.get("desired_size", lo)
    hi = args.get("max_size", max(lo, want))
    _sizes(problems, lo, hi, want)

    cap = args.get("capacity") or {}
    ctype, rid = cap.get("type", "on-demand"), cap.get("reservation_id")
    if ctype not in CAPACITY_TYPES:
        problems.add("capacity.type", f"{ctype!r} is not allowed; choose one of: {', '.join(CAPACITY_TYPES)}")
    elif ctype == "on-demand" and rid is not None:
        problems.add("capacity.reservationId", "only applies to capacity types 'odcr' and 'capacity-block'")
    elif ctype != "on-demand":
        if rid is None:
            problems.add("capacity.reservationId", f"is required for capacity type {ctype!r}")
        if ctype == "odcr" and not lo == hi == want:
            problems.add("desiredSize", f"a reservation fixes the node count: set minSize, maxSize and desiredSize "
                                        f"to the reserved count (got {lo}, {hi}, {want})")
        if ctype == "capacity-block" and (lo, want) != (0, 0):
            problems.add("desiredSize", f"a capacity block runs nodes only inside its window: set minSize and "
                                        f"desiredSize to 0, maxSize to the reserved count (got {lo}, {hi}, {want})")
    if "now" in args and _utc_problem(args["now"]):
        problems.add("now", f"{args['now']!r} is not a UTC time such as 2026-12-01T11:30:00Z")
    drain = cap.get("drain_minutes", DEFAULT_BLOCK_DRAIN_MINUTES)
    if ctype != "capacity-block" and "drain_minutes" in cap:
        problems.add("capacity.drainMinutes", "only applies to capacity type 'capacity-block'")
    elif drain < MIN_BLOCK_DRAIN_MINUTES:
        problems.add("capacity.drainMinutes", f"{drain} must be more than 30: EKS asks to scale a capacity-block "
                                              "node group to zero more than 30 minutes before the block ends")
    for key in ("start_time", "end_time"):
        if ctype == "capacity-block" and not cap.get(key):
            problems.add(f"capacity.{key.replace('_t', 'T')}", "is required for capacity type 'capacity-block'")
        elif ctype != "capacity-block" and key in cap:
            problems.add(f"capacity.{key.replace('_t', 'T')}", "only applies to capacity type 'capacity-block'")
    reserved = ctype != "on-demand"
    placement = args.get("placement_group", fabric == "efa" and not reserved)
    if placement and reserved:
        problems.add("placementGroup", f"true conflicts with capacity type {ctype!r}: the reservation fixes "
                                       "placement itself; remove placementGroup")

    taints = [Taint(t["key"], t["effect"], t.get("value", "")) for t in args["taints"]] if "taints" in args \
        else [Taint(GPU_RESOURCE, "NoSchedule", "true")] if inst.has_gpu else []
    for i, t in enumerate(taints):
        if t.effect not in TAINT_EFFECTS:
            problems.add(f"taints[{i}].effect",
                         f"{t.effect!r} is not allowed; choose one of: {', '.join(TAINT_EFFECTS)}")
    hugepages = args.get("hugepages_mib", DEFAULT_EFA_HUGEPAGES_MIB if fabric == "efa" else 0)
    if hugepages < 0 or hugepages % 2:
        problems.add("hugepagesMib", f"{hugepages} must be a non-negative multiple of 2 (2 MiB pages)")
    pool = args.get("pool_name", name)
    if pool == SYSTEM_POOL:
        default = "" if "pool_name" in args else " (by default the component's name)"
        problems.add("poolName", f"{pool!r}{default} is the {POOL_LABEL} value of GpuCluster's own system node "
                                 "group, which the kit's own controllers select (the AWS Load Balancer "
                                 "Controller's pods); set another poolName")
    problems.raise_any()
    spec = NodeGroupSpec(
        pool=pool,
        instance_type=itype,
        ami_type=AMI_TYPE_GPU if inst.has_gpu else AMI_TYPE_CPU,
        min_size=lo, max_size=hi, desired_size=want,
        root_volume_gib=args.get("root_volume_gib",
                                 DEFAULT_GPU_ROOT_VOLUME_GIB if inst.has_gpu else DEFAULT_CPU_ROOT_VOLUME_GIB),
        fabric=fabric,
        hugepages_mib=hugepages,
        labels=dict(args.get("labels") or {}),
        taints=tuple(taints),
        capacity_type=ctype,
        reservation_id=rid,
        block_window=(cap["start_time"], cap["end_time"]) if ctype == "capacity-block" else None,
        block_drain_minutes=drain,
        placement_group=placement,
    )
    for path, message in tag_problems(spec):  # node-template tags AWS would refuse on the node group and its ASG
        problems.add(path, message)
    problems.raise_any()
    return spec


def _now(now: str | None) -> datetime.datetime | None:
    return None if now is None else datetime.datetime.strptime(now, UTC_FORMAT).replace(tzinfo=datetime.UTC)


class GpuNodePool(pulumi.ComponentResource):
    """A managed node group of GPU instances with its own launch template, EFA fabric and placement."""

    node_group_name: pulumi.Output[str]
    """The EKS node group's name."""
    launch_template_id: pulumi.Output[str]
    """The pool's launch template."""
    node_role_arn: pulumi.Output[str]
    """The nodes' IAM role."""
    efa_security_group_id: pulumi.Output[str] | None
    """The pool's EFA security group (EFA pools only)."""
    placement_group_name: pulumi.Output[str] | None
    """The pool's cluster placement group (EFA pools on on-demand capacity only)."""

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE, name, None, opts)
        spec = pool_spec(name, args)
        child = pulumi.ResourceOptions(parent=self)
        role_arn = args["node_role_arn"] if "node_role_arn" in args else \
            iam.arn_with_policies(iam.node_role(f"{name}-node", opts=child))
        efa_sg = efa_security_group(f"{name}-efa", vpc_id=args["vpc_id"], opts=child) \
            if spec.fabric == "efa" else None
        placement = aws.ec2.PlacementGroup(f"{name}-pg", strategy="cluster", opts=child) \
            if spec.placement_group else None
        interfaces = efa_network_interfaces(
            spec.instance.network_cards, efa_security_group_id=efa_sg.id,
            control_security_group_id=args["cluster_security_group_id"]) if efa_sg is not None else None
        self.launch_template, self.node_group = node_group(
            name, spec,
            cluster_name=args["cluster_name"],
            kubernetes_version=args.get("kubernetes_version"),
            node_role_arn=role_arn,
            subnet_ids=args["subnet_ids"],
            network_interfaces=interfaces,
            placement_group=placement.name if placement is not None else None,
            now=_now(args.get("now")),
            opts=child,
        )
        self.spec = spec
        self.node_group_name = self.node_group.node_group_name
        self.launch_template_id = self.launch_template.id
        self.node_role_arn = pulumi.Output.from_input(role_arn)
        self.efa_security_group_id = efa_sg.id if efa_sg is not None else None
        self.placement_group_name = placement.name if placement is not None else None
        self.register_outputs({
            "nodeGroupName": self.node_group_name,
            "launchTemplateId": self.launch_template_id,
            "nodeRoleArn": self.node_role_arn,
            "efaSecurityGroupId": self.efa_security_group_id,
            "placementGroupName": self.placement_group_name,
        })
