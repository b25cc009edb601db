"""Node pools (stack key `nodePools`) and the InfiniBand fabric (`infiniband`): instance type, size, capacity,
placement, node labels and taints, MIG layout, the GPU node check's thresholds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from components import catalog
from components.k8s.defaults import CAPACITY_BLOCK_DRAIN_MINUTES, DEFAULT_DRIVER_MIN_VERSION
from components.k8s.settings.base import DNS_SUBDOMAIN_PATTERN, setting
from components.nodes import DEFAULT_GPU_ROOT_VOLUME_GIB

# A label's (or taint's) key and value as Kubernetes validates them (kubernetes@v1.34.0
# staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go IsQualifiedName, IsValidLabelValue): an optional
# DNS-subdomain prefix and '/', then a name of at most 63 characters; a value of at most 63, possibly empty.
QUALIFIED_NAME_PATTERN = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                          r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
NOT_A_QUALIFIED_NAME = ("is not a label key: an optional DNS-subdomain prefix and '/', then at most 63 letters, "
                        "digits, '-', '_' or '.', starting and ending with a letter or digit")
LABEL_VALUE_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
NOT_A_LABEL_VALUE = ("is not a label value: at most 63 letters, digits, '-', '_' or '.', starting and ending with a "
                     "letter or digit")

__all__ = [
    "UTC_TIME_PATTERN",
    "QUALIFIED_NAME_PATTERN",
    "NOT_A_QUALIFIED_NAME",
    "LABEL_VALUE_PATTERN",
    "NOT_A_LABEL_VALUE",
    "NOT_A_UTC_TIME",
    "MIG_LAYOUTS",
    "Capacity",
    "Taint",
    "NodeCheck",
    "NodePool",
    "InfinibandSettings",
    "infiniband_settings",
]


UTC_TIME_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"  # a capacity block's start or end
NOT_A_UTC_TIME = "is not a UTC time such as 2026-12-01T11:30:00Z"
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


@dataclass(frozen=True, slots=True)
class Capacity:
    type: Literal["on-demand", "odcr", "capacity-block"] = setting(
        "on-demand", doc="Where the pool's instances come from: on-demand, an On-Demand Capacity Reservation (odcr) "
                         "or an EC2 Capacity Block for ML (capacity-block).")
    reservation_id: str | None = setting(None, pattern=r"^cr-[0-9a-f]{8,17}$",
                                         invalid="is not a reservation id (cr-...)",
                                         doc="The capacity reservation (cr-...); required for odcr and "
                                             "capacity-block.")
    start_time: str | None = setting(None, pattern=UTC_TIME_PATTERN, invalid=NOT_A_UTC_TIME,
                                     doc="capacity-block: the block's start, UTC (2026-12-01T11:30:00Z); required.")
    end_time: str | None = setting(None, pattern=UTC_TIME_PATTERN, invalid=NOT_A_UTC_TIME,
                                   doc="capacity-block: the block's end, UTC; required.")
    drain_minutes: int = setting(CAPACITY_BLOCK_DRAIN_MINUTES, doc="capacity-block: the pool scales to zero this "
                                                                   "many minutes before the block ends (more than "
                                                                   "30, as EKS asks).")

    @property
    def reserved(self) -> bool:
        return self.type != "on-demand"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str = setting(pattern=QUALIFIED_NAME_PATTERN, invalid=NOT_A_QUALIFIED_NAME, doc="The taint's key.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = setting(doc="What the taint does to pods that "
                                                                                 "do not tolerate it.")
    value: str = setting("", pattern=LABEL_VALUE_PATTERN, invalid=NOT_A_LABEL_VALUE, doc="The taint's value.")


@dataclass(frozen=True, slots=True)
class NodeCheck:
    driver_min_version: str = setting(DEFAULT_DRIVER_MIN_VERSION, pattern=r"^\d+(\.\d+){0,2}$",
                                      invalid="is not a driver version such as 550.54.15",
                                      doc="The oldest NVIDIA driver a node may run.")
    min_tflops_fraction: float = setting(0.7, ge=0, le=1, doc="A GPU passes the burn-in at this share of the "
                                                              "catalog's dense BF16 peak.")
    min_bandwidth_fraction: float = setting(0.7, ge=0, le=1, doc="A GPU passes at this share of the catalog's "
                                                                 "memory bandwidth.")
    burn_in_seconds: int = setting(10, ge=1, le=3600, doc="Seconds of the GPU burn-in.")
    dcgm_exporter_url: str | None = setting(None, pattern=r"^https?://[^\s/]+(/\S*)?$",
                                            invalid="is not an http(s):// URL such as http://127.0.0.1:9400/metrics",
                                            doc="Where the node check reads DCGM metrics (default: the GPU "
                                                "operator's exporter pod on the node, found with kubectl).")
    min_bus_bandwidth_fraction: float = setting(0.6, ge=0, le=1, doc="The all-reduce across nodes passes at this "
                                                                     "share of the fabric's line rate.")
    fabric_test_seconds: int = setting(300, ge=30, le=3600, doc="Hard limit of the all-reduce across nodes, "
                                                                "seconds.")


@dataclass(frozen=True, slots=True)
class NodePool:
    name: str
    instance_type: str = setting(doc="The pool's instance type: an EC2 type (provider aws) or an on-prem server "
                                     "type of the kit's catalog (provider existing).")
    min_size: int = setting(1, ge=0, derived=True, doc="Fewest nodes (default: 1; 0 for a capacity block).")
    max_size: int = setting(1, ge=0, derived=True, doc="Most nodes (default: the larger of minSize and "
                                                       "desiredSize).")
    desired_size: int = setting(1, ge=0, derived=True, doc="Nodes at creation (default: minSize).")
    fabric: Literal["efa", "infiniband", "none"] = setting("none", doc="The data-plane fabric between the pool's "
                                                                      "GPUs: efa (provider aws), infiniband "
                                                                      "(provider existing) or none.")
    availability_zones: tuple[str, ...] = setting((), derived=True, doc="provider aws: the pool's zones, of "
                                                                       "target.availabilityZones (default: an EFA "
                                                                       "pool the first zone, others every zone; a "
                                                                       "reservation's pool must list its one zone).")
    capacity: Capacity = setting(default_factory=Capacity, doc="provider aws: where the pool's instances come "
                                                               "from.")
    placement_group: bool = setting(False, derived=True, doc="Launch the nodes into a cluster placement group "
                                                             "(default: true for EFA pools on on-demand capacity; "
                                                             "provider aws).")
    root_volume_gib: int = setting(DEFAULT_GPU_ROOT_VOLUME_GIB, ge=20, le=16384, derived=True,
                                   doc="Each node's root volume, GiB (default: 500 for GPU types, 100 for CPU "
                                       "types).")
    hugepages_mib: int = setting(0, ge=0, derived=True, doc="2 MiB huge pages reserved on each node, MiB, a "
                                                            "multiple of 2 (default: 5120 on EFA pools, which "
                                                            "libfabric needs, else 0).")
    labels: Mapping[str, str] = setting(default_factory=dict, pattern=QUALIFIED_NAME_PATTERN,
                                        invalid=NOT_A_QUALIFIED_NAME,
                                        doc="Node labels beyond the kit's own (not its pool label, not nvidia.com/*, "
                                            "none in the kubernetes.io and k8s.io namespaces but under "
                                            "node.kubernetes.io/ and kubelet.kubernetes.io/).")
    taints: tuple[Taint, ...] = setting((), derived=True, doc="The nodes' taints (default: "
                                                              "nvidia.com/gpu=true:NoSchedule on GPU types, none "
                                                              "on CPU types).")
    mig: str | None = setting(None, choices=MIG_LAYOUTS, doc="The MIG layout the GPU operator's MIG manager applies "
                                                             "to the pool's GPUs (default: none, whole GPUs).")
    nodes: tuple[str, ...] = setting((), pattern=DNS_SUBDOMAIN_PATTERN, derived=True,
                                     invalid="is not a Kubernetes object name (a DNS subdomain)",
                                     doc="provider existing: the pool's node names; required with mig (the kit "
                                         "labels them nvidia.com/mig.config).")
    node_check: NodeCheck = setting(default_factory=NodeCheck, doc="The GPU node check's thresholds (aifactory "
                                                                   "node-check).")
    vllm_image: str | None = setting(None, pattern=r"^[\w.-]+(:\d+)?(/[\w.-]+)+(:[\w.-]+|@sha256:[0-9a-f]{64})$",
                                     invalid="is not an image reference with a tag or digest (registry/repo:tag)",
                                     doc="The vLLM image of the pool's models (default: the image for the pool's "
                                         "fabric).")

    @property
    def instance(self) -> catalog.InstanceType:
        return catalog.get(self.instance_type)

    @property
    def gpu(self) -> bool:
        return self.instance.has_gpu


@dataclass(frozen=True, slots=True)
class InfinibandSettings:
    network: Literal["ipoib", "sriov"] = setting("ipoib", doc="How pods reach the InfiniBand fabric: an IPoIB "
                                                              "secondary network, or SR-IOV virtual functions.")
    interfaces: tuple[str, ...] = setting(("ib0",), derived=True, doc="The hosts' IPoIB netdevs, one per compute "
                                                                      "rail (default: the InfiniBand pools' rails "
                                                                      "in the kit's catalog, else ib0).")
    ip_range: str = setting("192.168.100.0/22", doc="The RDMA network's addresses (the nv-ipam pool), a CIDR block "
                                                    "with room for every InfiniBand node.")
    hca_device_ids: tuple[str, ...] = setting(("101b",), pattern=r"^[0-9a-f]{4}$",
                                              invalid="is not a PCI device id such as 101b",
                                              doc="PCI device ids of the HCAs the RDMA device plugin shares "
                                                  "(101b: ConnectX-6; ConnectX-7 is 1021).")
    rdma_resource_name: str = setting("rdma_shared_device_a", pattern=r"^[a-z0-9_]+$",
                                      invalid="may hold only lowercase letters, digits and '_'",
                                      doc="The RDMA device plugin's resource (rdma/<name>) pods request.")
    rdma_hca_max: int = setting(63, ge=1, le=1000, doc="Pods that may share one HCA (the device plugin's "
                                                       "rdmaHcaMax).")
    hosts_have_ofed: bool = setting(False, doc="The hosts already run the OFED/DOCA driver (default: false, the "
                                               "network operator deploys it).")
    hcas: tuple[str, ...] = setting((), pattern=r"^[a-z0-9_]+$", invalid="is not an RDMA device name such as mlx5_0",
                                    derived=True, doc="The RDMA devices NCCL uses (NCCL_IB_HCA), one per interface "
                                                      "(default: the catalog rails' devices).")



def infiniband_settings(given: Mapping[str, Any]) -> InfinibandSettings:
    """InfinibandSettings from a component's args (snake_case keys, lists for tuples); other keys are ignored and
    absent ones keep their defaults."""
    known = {f.name for f in fields(InfinibandSettings)}
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in given.items() if k in known}
    return InfinibandSettings(**values)
