"""Managed node groups with their own launch templates: the pieces GPU pools and the system pool share.

Everything that decides a property is a small pure function (tests call them directly); `node_group`
turns a `NodeGroupSpec` into its resources. Interface layout for EFA follows the AWS EC2 guide
("efa-acc-inst-types"): network card 0 carries the primary interface, type `efa` (ENA + EFA), in the
control-plane security group and the pool's EFA group; every other card carries one `efa-only`
interface at device index 0 in the EFA group only, so the data-plane fabric never carries IP.

cluster-autoscaler builds the node it would add to an empty group from the group's node-template
tags. It learns a managed node group's labels and taints from DescribeNodegroup, but extended
resources (nvidia.com/gpu, vpc.amazonaws.com/efa, hugepages-2Mi) only from Auto Scaling group tags,
and EKS does not copy node group tags to the group's ASG (eksctl #1571, containers-roadmap #608/#724):
`node_group` tags the ASG itself, so a pool can scale from zero for pods that request them.

A capacity-block pool is sized by its schedule, not by the autoscaler: its Auto Scaling group lacks the kit's
discovery tag (AUTOSCALED_TAG; EKS's own autoscaler tags are on every managed group, so the kit's autoscaler does
not discover by them) and the node template, so cluster-autoscaler neither launches into the block outside its
window (the launch fails, and it keeps retrying) nor scales the pool back up after the drain. The schedule is
one-time Auto Scaling actions, and AWS rejects a one-time action whose start time is in the past and deletes each
one after it runs (EC2 Auto Scaling API, PutScheduledUpdateGroupAction, StartTime; user guide, "Scheduled scaling"):
`node_group` creates only the actions still ahead of `now`, starts a group created inside the window at the
reserved count, and never deletes an action itself (`retain_on_delete`: an action that ran is already gone, and
the ASG's actions go with the ASG).
"""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components import catalog
from components.k8s.naming import LABEL_POOL
from components.vocabulary import AUTOSCALED_TAG

__all__ = [
    "AMI_TYPE_GPU",
    "AMI_TYPE_CPU",
    "ROOT_DEVICE_NAME",
    "DEFAULT_IMDS_HOP_LIMIT",
    "DEFAULT_KUBELET_CONFIG",
    "LABEL_INSTANCE_TYPE",
    "LABEL_FABRIC",
    "LABEL_GPU_PRODUCT",
    "GPU_RESOURCE",
    "EFA_RESOURCE",
    "HUGEPAGES_RESOURCE",
    "MIME_BOUNDARY",
    "Taint",
    "NodeGroupSpec",
    "efa_network_interfaces",
    "metadata_options",
    "root_volume",
    "user_data",
    "LOCAL_STORAGE_STRATEGY",
    "MEMLOCK_DROPIN",
    "node_labels",
    "eks_taints",
    "node_template_tags",
    "tag_problems",
    "MAX_TAG_KEY_CHARS",
    "MAX_TAGS_PER_RESOURCE",
    "autoscaler_tags",
    "capacity_options",
    "node_group_instance_types",
    "efa_security_group",
    "EFA_RULE_DESCRIPTION",
    "asg_node_template_tags",
    "asg_tags",
    "AUTOSCALED_TAG",
    "block_schedule",
    "block_desired_size",
    "DEFAULT_BLOCK_DRAIN_MINUTES",
    "MIN_BLOCK_DRAIN_MINUTES",
    "node_group",
]

AMI_TYPE_GPU = "AL2023_x86_64_NVIDIA"  # drivers and container toolkit preinstalled
AMI_TYPE_CPU = "AL2023_x86_64_STANDARD"
ROOT_DEVICE_NAME = "/dev/xvda"  # AL2023 root device
# 1: a response cannot cross the extra hop into a pod's network namespace, so pods cannot take the node
# role's credentials (EKS best practices, "Restrict access to the instance profile assigned to the worker
# node"); every kit pod that calls AWS uses IRSA, and host-network agents (VPC CNI) are one hop away. The EBS
# CSI node plugin falls back to Kubernetes metadata (aws-ebs-csi-driver docs/install.md, "Kubernetes metadata").
DEFAULT_IMDS_HOP_LIMIT = 1
# EKS user guide, "Capacity Blocks for ML" with managed node groups: scale the node group to zero *more* than
# 30 minutes before the block's end time (EC2 starts terminating the block's instances 30 minutes before it ends).
DEFAULT_BLOCK_DRAIN_MINUTES = 60
MIN_BLOCK_DRAIN_MINUTES = 31
UTC_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
DEFAULT_ROOT_VOLUME_TYPE = "gp3"
# Kubelet settings every pool gets: graceful node shutdown lets serving pods drain their requests,
# parallel pulls keep multi-GB inference images from queueing behind each other.
DEFAULT_KUBELET_CONFIG: Mapping[str, object] = {
    "shutdownGracePeriod": "90s",
    "shutdownGracePeriodCriticalPods": "30s",
    "serializeImagePulls": False,
}
LABEL_INSTANCE_TYPE = "aifactory.io/instance-type"
LABEL_FABRIC = "aifactory.io/fabric"
LABEL_GPU_PRODUCT = "aifactory.io/gpu-product"
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
HUGEPAGES_RESOURCE = "hugepages-2Mi"
MIME_BOUNDARY = "==AIFACTORY=="
LOCAL_STORAGE_STRATEGY = "RAID0"
CONTAINERD_DROPIN_DIR = "/etc/systemd/system/containerd.service.d"
MEMLOCK_DROPIN = "90-aifactory-memlock.conf"
AUTOSCALER_TAG = "k8s.io/cluster-autoscaler"
# What the kit's cluster-autoscaler discovers groups by. Not the upstream pair (k8s.io/cluster-autoscaler/enabled,
# .../<cluster>): EKS puts those on the Auto Scaling group of EVERY managed node group itself (EKS user guide,
# "Managed node groups": node group resources are tagged for the Cluster Autoscaler), and nothing can take them off
# a capacity-block pool's group. Only groups the autoscaler may size carry this tag, on the group itself.
# EC2 accepts only `A-Za-z0-9 ._-:/()#,@[]+=&;{}!$*` in a security-group rule description (no apostrophe):
# terraform-provider-aws internal/service/ec2/validate.go validSecurityGroupRuleDescription (EC2 API IpRange and
# UserIdGroupPair Description); pulumi preview fails on anything else (hashicorp/terraform-provider-aws#18874).
EFA_RULE_DESCRIPTION = "EFA: all traffic within the pool fabric"
_EKS_TAINT_EFFECT = {"NoSchedule": "NO_SCHEDULE", "PreferNoSchedule": "PREFER_NO_SCHEDULE",
                     "NoExecute": "NO_EXECUTE"}


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute (Kubernetes spelling)
    value: str = ""


@dataclass(frozen=True, slots=True)
class NodeGroupSpec:
    """What one managed node group is; `node_group` builds it."""

    pool: str
    instance_type: str
    ami_type: str
    min_size: int
    max_size: int
    desired_size: int
    root_volume_gib: int
    fabric: str = "none"  # efa | none
    hugepages_mib: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    capacity_type: str = "on-demand"  # on-demand | odcr | capacity-block
    reservation_id: str | None = None
    block_window: tuple[str, str] | None = None  # capacity-block: (start, end) UTC, e.g. 2026-12-01T11:30:00Z
    block_drain_minutes: int = DEFAULT_BLOCK_DRAIN_MINUTES  # capacity-block: scale to 0 this long before the end
    placement_group: bool = False  # a cluster placement group (EFA pools on on-demand capacity)

    @property
    def instance(self) -> catalog.InstanceType:
        return catalog.get(self.instance_type)


# --------------------------------------------------------------------------------------------
# pure builders


def efa_network_interfaces(network_cards: int, *, efa_security_group_id: pulumi.Input[str],
                           control_security_group_id: pulumi.Input[str]) -> list[dict]:
    """One interface per network card: card 0 primary `efa`, the others `efa-only`, all at device index 0."""
    return [
        {
            "network_card_index": card,
            "device_index": 0,
            "interface_type": "efa" if card == 0 else "efa-only",
            "security_groups": [control_security_group_id, efa_security_group_id] if card == 0
            else [efa_security_group_id],
            "delete_on_termination": "true",
        }
        for card in range(network_cards)
    ]


def metadata_options() -> dict:
    """IMDSv2 only (session tokens required), hop limit 1, no instance tags in metadata."""
    return {"http_endpoint": "enabled", "http_tokens": "required",
            "http_put_response_hop_limit": DEFAULT_IMDS_HOP_LIMIT, "instance_metadata_tags": "disabled"}


def root_volume(size_gib: int) -> dict:
    """The encrypted gp3 root volume (AWS-managed EBS key unless the account's default says otherwise)."""
    return {"device_name": ROOT_DEVICE_NAME,
            "ebs": {"volume_size": size_gib, "volume_type": DEFAULT_ROOT_VOLUME_TYPE, "encrypted": "true",
                    "delete_on_termination": "true"}}


def user_data(*, hugepages_mib: int, kubelet_config: Mapping[str, object] = DEFAULT_KUBELET_CONFIG,
              local_storage: bool = False, memlock: bool = False) -> str:
    """nodeadm user data (MIME multipart): a NodeConfig with kubelet settings, and hugepages when asked.

    EKS merges its own NodeConfig (cluster endpoint, CA) into managed node groups; this part only adds
    kubelet settings. The hugepages script runs in cloud-final, before nodeadm starts the kubelet, so
    the kubelet advertises `hugepages-2Mi` from its first registration (EFA's libfabric uses them).

    `local_storage` (types with NVMe instance store): `instance.localStorage.strategy: RAID0` (nodeadm
    NodeConfig API, InstanceOptions.LocalStorage): nodeadm builds one RAID0 array of the drives and mounts the
    kubelet's and containerd's directories on it, so emptyDir model caches and image layers live on NVMe.
    `memlock` (RDMA pools): containerd's upstream unit sets no LimitMEMLOCK, so containers start with the
    8 MiB default and cannot register (pin) RDMA buffers without IPC_LOCK, which Pod Security `restricted`
    forbids. A systemd drop-in raises it to infinity before nodeadm starts containerd (try-restart covers
    an AMI that started it earlier); containers inherit containerd's limit.
    """
    spec: dict[str, object] = {"kubelet": {"config": dict(kubelet_config)}}
    if local_storage:
        spec["instance"] = {"localStorage": {"strategy": LOCAL_STORAGE_STRATEGY}}
    node_config = {"apiVersion": "node.eks.aws/v1alpha1", "kind": "NodeConfig", "spec": spec}
    parts = [("application/node.eks.aws", "---\n" + json.dumps(node_config, sort_keys=True) + "\n")]
    if memlock:
        parts.append(('text/x-shellscript; charset="us-ascii"',
                      "#!/bin/bash\nset -euo pipefail\n"
                      f"mkdir -p {CONTAINERD_DROPIN_DIR}\n"
                      f"printf '[Service]\\nLimitMEMLOCK=infinity\\n' > {CONTAINERD_DROPIN_DIR}/{MEMLOCK_DROPIN}\n"
                      "systemctl daemon-reload\nsystemctl try-restart containerd.service\n"))
    if hugepages_mib:
        pages = hugepages_mib // 2
        parts.append(('text/x-shellscript; charset="us-ascii"',
                      "#!/bin/bash\nset -euo pipefail\n"
                      f"echo 'vm.nr_hugepages = {pages}' > /etc/sysctl.d/90-aifactory-hugepages.conf\n"
                      f"sysctl -w vm.nr_hugepages={pages}\n"))
    body = "".join(f"--{MIME_BOUNDARY}\nContent-Type: {ctype}\n\n{text}\n" for ctype, text in parts)
    header = f'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="{MIME_BOUNDARY}"\n\n'
    return f"{header}{body}--{MIME_BOUNDARY}--\n"


def node_labels(spec: NodeGroupSpec) -> dict[str, str]:
    """The kit's labels (pool, instance type, fabric, GPU product) over the pool's own labels."""
    inst = spec.instance
    kit = {LABEL_POOL: spec.pool, LABEL_INSTANCE_TYPE: spec.instance_type, LABEL_FABRIC: spec.fabric}
    if inst.gpu is not None:
        kit[LABEL_GPU_PRODUCT] = inst.gpu.product_label
    return {**dict(sorted(spec.labels.items())), **kit}


def eks_taints(taints: Sequence[Taint]) -> list[dict]:
    """Taints in the EKS API's spelling (NO_SCHEDULE, ...)."""
    return [{"key": t.key, "value": t.value, "effect": _EKS_TAINT_EFFECT[t.effect]} for t in taints]


def node_template_tags(spec: NodeGroupSpec) -> dict[str, str]:
    """cluster-autoscaler node-template tags: the labels, taints and extended resources of a pool's nodes."""
    template = f"{AUTOSCALER_TAG}/node-template"
    tags = {f"{template}/label/{key}": value for key, value in node_labels(spec).items()}
    tags.update({f"{template}/taint/{t.key}": f"{t.value}:{t.effect}" for t in spec.taints})
    inst = spec.instance
    if inst.has_gpu:
        tags[f"{template}/resources/{GPU_RESOURCE}"] = str(inst.gpu_count)
    if spec.fabric == "efa":
        tags[f"{template}/resources/{EFA_RESOURCE}"] = str(inst.network_cards)
    if spec.hugepages_mib:
        tags[f"{template}/resources/{HUGEPAGES_RESOURCE}"] = f"{spec.hugepages_mib}Mi"
    return tags


# AWS tags (EC2, Auto Scaling, EKS): keys of at most 128 characters, at most 50 user tags per resource (AWS General
# Reference, "Tagging AWS resources": tag naming limits and requirements). A label becomes the template tag
# `k8s.io/cluster-autoscaler/node-template/label/<key>` (46 characters before the key), so a label key of more than
# 82 characters, or a pool with many labels and taints, is a tag AWS refuses on the node group and its ASG.
MAX_TAG_KEY_CHARS = 128
MAX_TAGS_PER_RESOURCE = 50


def tag_problems(spec: NodeGroupSpec) -> list[tuple[str, str]]:
    """(property path, message) for every template tag whose key AWS refuses, and for more tags than AWS allows on
    the node group or its Auto Scaling group."""
    template = f"{AUTOSCALER_TAG}/node-template"
    out = [(f"labels.{key}", f"the key makes the cluster-autoscaler tag '{template}/label/{key}' "
                             f"({len(template) + 7 + len(key)} characters); AWS tag keys take at most "
                             f"{MAX_TAG_KEY_CHARS}: shorten the label key to {MAX_TAG_KEY_CHARS - len(template) - 7} "
                             "characters or fewer")
           for key in sorted(spec.labels) if len(f"{template}/label/{key}") > MAX_TAG_KEY_CHARS]
    out += [(f"taints[{i}].key", f"the key makes the cluster-autoscaler tag '{template}/taint/{t.key}', longer than "
                                 f"the {MAX_TAG_KEY_CHARS} characters AWS allows a tag key")
            for i, t in enumerate(spec.taints) if len(f"{template}/taint/{t.key}") > MAX_TAG_KEY_CHARS]
    if (n := len(autoscaler_tags("cluster", spec))) > MAX_TAGS_PER_RESOURCE:  # the name changes no count
        out.append(("labels", f"{len(spec.labels)} labels make the node group {n} tags (one per label, taint and "
                              f"extended resource, and the autoscaler's own); AWS allows {MAX_TAGS_PER_RESOURCE} per "
                              f"resource: drop {n - MAX_TAGS_PER_RESOURCE} label(s)"))
    return out


def autoscaler_tags(cluster_name: str, spec: NodeGroupSpec) -> dict[str, str]:
    """The node group's tags: cluster-autoscaler auto-discovery, and the node template too (the autoscaler
    also caches the tags DescribeNodegroup returns, next to the labels and taints)."""
    if spec.capacity_type == "capacity-block":
        return {}  # the schedule owns the size (module docstring)
    return {f"{AUTOSCALER_TAG}/enabled": "true", f"{AUTOSCALER_TAG}/{cluster_name}": "owned",
            AUTOSCALED_TAG: "true", **node_template_tags(spec)}


def asg_tags(spec: NodeGroupSpec) -> dict[str, str]:
    """What the kit puts on the node group's Auto Scaling group (EKS copies no node group tag there): the
    autoscaler's discovery tag and the node template; nothing on a capacity-block pool's group."""
    if spec.capacity_type == "capacity-block":
        return {}
    return {AUTOSCALED_TAG: "true", **node_template_tags(spec)}


def capacity_options(capacity_type: str, reservation_id: str | None, instance_type: str | None = None) -> dict:
    """Launch-template arguments for reserved capacity: the reservation, and for a block the market and the
    instance type. EKS rejects a capacity-block node group whose launch template lacks any of MarketType
    `capacity-block`, the CapacityReservationId or the InstanceType (EKS user guide, ml/capacity-blocks-mng); the
    node group then names no instance type itself (`node_group_instance_types`)."""
    if capacity_type == "on-demand":
        return {}
    opts: dict = {"capacity_reservation_specification": {
        "capacity_reservation_target": {"capacity_reservation_id": reservation_id}}}
    if capacity_type == "capacity-block":
        opts["instance_market_options"] = {"market_type": "capacity-block"}
        opts["instance_type"] = instance_type
    return opts


def node_group_instance_types(spec: NodeGroupSpec) -> list[str] | None:
    """The node group's instanceTypes: none where the launch template names the type (a capacity block), since EKS
    takes the instance type from the launch template or the node group, not both (EKS user guide, launch-templates,
    "Instance types")."""
    return None if spec.capacity_type == "capacity-block" else [spec.instance_type]


def _autoscaled_options(spec: NodeGroupSpec) -> pulumi.ResourceOptions:
    # cluster-autoscaler owns the desired size of a pool that can scale; Pulumi must not reset it.
    return pulumi.ResourceOptions(ignore_changes=["scalingConfig.desiredSize"] if spec.max_size > spec.min_size
                                  else None)


def _eks_capacity_type(capacity_type: str) -> str:
    return "CAPACITY_BLOCK" if capacity_type == "capacity-block" else "ON_DEMAND"


# --------------------------------------------------------------------------------------------
# resources


def efa_security_group(name: str, *, vpc_id: pulumi.Input[str], opts: pulumi.ResourceOptions) -> aws.ec2.SecurityGroup:
    """The EFA fabric's group: all traffic in from and out to itself, nothing else.

    Rules are inline, so Pulumi manages them exclusively: a rule added out of band is removed. Descriptions use
    only the characters EC2 accepts in a rule description (EFA_RULE_DESCRIPTION).
    """
    about = EFA_RULE_DESCRIPTION
    return aws.ec2.SecurityGroup(
        name, vpc_id=vpc_id, description="EFA data plane: members only",
        ingress=[aws.ec2.SecurityGroupIngressArgs(protocol="-1", from_port=0, to_port=0, self=True, description=about)],
        egress=[aws.ec2.SecurityGroupEgressArgs(protocol="-1", from_port=0, to_port=0, self=True, description=about)],
        opts=opts)


def _asg_name(resources: Sequence[aws.eks.outputs.NodeGroupResource]) -> str:
    names = [g.name for r in resources for g in r.autoscaling_groups or () if g.name]
    if not names:
        raise ValueError("EKS reported no Auto Scaling group for the node group")
    return names[0]


def asg_node_template_tags(name: str, spec: NodeGroupSpec, *, node_group: aws.eks.NodeGroup,
                           opts: pulumi.ResourceOptions) -> list[aws.autoscaling.Tag]:
    """The discovery tag and node template on the node group's Auto Scaling group (`name`-asg-<what>), where the
    autoscaler reads them. Not propagated: instances get their labels from the kubelet, not from tags."""
    asg_name = node_group.resources.apply(_asg_name)
    prefix = f"{AUTOSCALER_TAG}/node-template/"
    return [aws.autoscaling.Tag(f"{name}-asg-" + ("autoscaled" if key == AUTOSCALED_TAG else key.removeprefix(prefix)),
                                autoscaling_group_name=asg_name,
                                tag=aws.autoscaling.TagTagArgs(key=key, value=value, propagate_at_launch=False),
                                opts=opts)
            for key, value in asg_tags(spec).items()]


def _utc(value: str) -> datetime.datetime:
    return datetime.datetime.strptime(value, UTC_FORMAT).replace(tzinfo=datetime.UTC)


def _block_times(spec: NodeGroupSpec) -> list[tuple[str, datetime.datetime, int]]:
    assert spec.block_window is not None
    start, end = spec.block_window
    drain = _utc(end) - datetime.timedelta(minutes=spec.block_drain_minutes)
    return [("block-start", _utc(start), spec.max_size), ("block-end", drain, 0)]


def block_schedule(spec: NodeGroupSpec, *, now: datetime.datetime) -> list[tuple[str, str, int]]:
    """(suffix, UTC time, desired size) of a capacity-block pool's scheduled actions still ahead of `now`: the
    reserved count when the block starts, 0 `block_drain_minutes` before it ends. Min and max sizes stay as the
    node group sets them (-1: unchanged). An action at or before `now` is left out: AWS refuses a start time in
    the past, and a one-time action that ran no longer exists."""
    if spec.block_window is None:
        return []
    return [(suffix, when.strftime(UTC_FORMAT), desired) for suffix, when, desired in _block_times(spec)
            if when > now]


def block_desired_size(spec: NodeGroupSpec, *, now: datetime.datetime) -> int:
    """The desired size a node group is created with: a capacity-block pool created inside its window (start
    passed, drain ahead) starts at the reserved count, since its start action can no longer be scheduled."""
    if spec.block_window is None:
        return spec.desired_size
    (_, start, reserved), (_, drain, _) = _block_times(spec)
    return reserved if start <= now < drain else spec.desired_size


def node_group(
    name: str,
    spec: NodeGroupSpec,
    *,
    cluster_name: pulumi.Input[str],
    kubernetes_version: str | None,
    node_role_arn: pulumi.Input[str],
    subnet_ids: Sequence[pulumi.Input[str]],
    network_interfaces: list[dict] | None,
    placement_group: pulumi.Input[str] | None,
    opts: pulumi.ResourceOptions,
    now: datetime.datetime | None = None,
) -> tuple[aws.ec2.LaunchTemplate, aws.eks.NodeGroup]:
    """The launch template (`name`-lt), managed node group (`name`-ng), its ASG's node-template tags and, for a
    capacity block, the scheduled actions still ahead of `now` (UTC; default: the wall clock)."""
    now = now if now is not None else datetime.datetime.now(datetime.UTC)
    # Nested inputs are plain dicts (engine-shaped, as the schema allows); the SDK's overloads only type
    # its Args classes, hence the ignores on these constructors.
    lt = aws.ec2.LaunchTemplate(  # type: ignore[call-overload]
        f"{name}-lt",
        description=f"{spec.pool}: {spec.instance_type} ({spec.fabric})",
        metadata_options=metadata_options(),
        block_device_mappings=[root_volume(spec.root_volume_gib)],
        user_data=base64.b64encode(user_data(
            hugepages_mib=spec.hugepages_mib, local_storage=spec.instance_type in catalog.INSTANCE_STORE,
            memlock=spec.fabric == "efa").encode()).decode(),
        network_interfaces=network_interfaces,
        placement={"group_name": placement_group} if placement_group is not None else None,
        tag_specifications=[{"resource_type": "instance", "tags": {LABEL_POOL: spec.pool}}],
        update_default_version=True,
        **capacity_options(spec.capacity_type, spec.reservation_id, spec.instance_type),
        opts=opts,
    )
    ng = aws.eks.NodeGroup(  # type: ignore[call-overload]
        f"{name}-ng",
        cluster_name=cluster_name,
        version=kubernetes_version,
        node_role_arn=node_role_arn,
        subnet_ids=list(subnet_ids),
        ami_type=spec.ami_type,
        instance_types=node_group_instance_types(spec),
        capacity_type=_eks_capacity_type(spec.capacity_type),
        scaling_config={"min_size": spec.min_size, "max_size": spec.max_size,
                        "desired_size": block_desired_size(spec, now=now)},
        update_config={"max_unavailable": 1},
        launch_template={"id": lt.id, "version": lt.latest_version.apply(str)},
        labels=node_labels(spec),
        taints=eks_taints(spec.taints),
        tags=pulumi.Output.from_input(cluster_name).apply(lambda cluster: autoscaler_tags(cluster, spec)),
        opts=pulumi.ResourceOptions.merge(opts, _autoscaled_options(spec)),
    )
    asg_node_template_tags(name, spec, node_group=ng, opts=opts)
    asg_name = ng.resources.apply(_asg_name) if spec.block_window is not None else None
    for suffix, when, desired in block_schedule(spec, now=now):
        aws.autoscaling.Schedule(f"{name}-{suffix}", autoscaling_group_name=asg_name,
                                 scheduled_action_name=f"aifactory-{spec.pool}-{suffix}", start_time=when,
                                 desired_capacity=desired, min_size=-1, max_size=-1,
                                 opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(retain_on_delete=True)))
    return lt, ng
