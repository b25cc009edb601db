"""GpuStack: the NVIDIA GPU operator (device plugin, GPU feature discovery, MIG manager, DCGM exporter).

On EKS accelerated AMIs the driver and container toolkit ship with the node image, so the operator
leaves them alone; on an existing cluster it installs both unless `target.hostsHaveDrivers`. The DCGM
exporter runs in Kubernetes mode (per-pod attribution) with a custom counters CSV that adds what the
dashboards and rules need beyond the defaults (SM activity, ECC, row remaps, XID, throttling), and a
ServiceMonitor. Operands run only on GPU nodes: the operator schedules them where feature discovery
finds an NVIDIA GPU, and they tolerate the GPU taint of every pool.

MIG: a pool's `mig` layout is applied by the operator's MIG manager to nodes labelled
`nvidia.com/mig.config=<layout>` (`mig_node_labels`); models request slices as `nvidia.com/mig-<profile>`
(`mig_resource`), which the `mixed` strategy advertises. On EKS the node group sets the label; on an
existing cluster the kit cannot launch or discover nodes, so the pool lists them (`nodePools.X.nodes`,
required with `mig`) and the kit labels each with a server-side-apply patch (`NodePatch`, pulumi-kubernetes
4.x), which owns only the labels it sets and gives them back on destroy.

GpuStack takes its own `args` (GpuStackArgs: the GPU pools' taints and MIG layouts, whether the hosts bring their
drivers), so a platform team can use it without the kit's stack config; infra.component_args maps PlatformConfig.
"""

# No `from __future__ import annotations`: TypedDict reads NotRequired (and the package analyzer the types) from
# evaluated annotations.
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, Protocol, TypedDict

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming, versions
from components.k8s.defaults import DEFAULT_KUBERNETES_VERSION
from components.k8s.namespaces import create_namespace, namespace_labels
from components.k8s.settings import InfinibandSettings, NodePool, Taint
from components.nodes import TAINT_EFFECTS, TaintArgs
from components.validation import Problems, check_shape
from components.vocabulary import GPU_TAINT_KEY, POOL_LABEL
from telemetry.names import DCGM

__all__ = [
    "TYPE",
    "GpuPoolArgs",
    "GpuStackArgs",
    "GpuStackView",
    "GpuStackSpec",
    "gpu_stack_spec",
    "RELEASE_NAME",
    "DCGM_COUNTERS_CONFIGMAP",
    "MIG_CONFIG_LABEL",
    "DCGM_COUNTERS",
    "dcgm_counters_csv",
    "mig_strategy",
    "mig_node_labels",
    "mig_resource",
    "mig_node_patch",
    "pool_tolerations",
    "gpu_operator_values",
    "GpuStack",
]

TYPE = "aifactory:k8s:GpuStack"  # the type token of the kit's existing stacks (part of every child's URN)
RELEASE_NAME = "gpu-operator"
DCGM_COUNTERS_CONFIGMAP = "aifactory-dcgm-counters"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
DEFAULT_SCRAPE_INTERVAL = "15s"

# (field, Prometheus type, help): the exporter's default set plus what the kit's dashboards and rules read.
DCGM_COUNTERS: tuple[tuple[str, str, str], ...] = (
    (DCGM.GPU_UTIL, "gauge", "GPU utilization (in %)."),
    (DCGM.FB_USED, "gauge", "Framebuffer memory used (in MiB)."),
    (DCGM.FB_FREE, "gauge", "Framebuffer memory free (in MiB)."),
    (DCGM.POWER, "gauge", "Power draw (in W)."),
    (DCGM.ENERGY, "counter", "Total energy consumption since boot (in mJ)."),
    (DCGM.GPU_TEMP, "gauge", "GPU temperature (in C)."),
    (DCGM.MEMORY_TEMP, "gauge", "Memory temperature (in C)."),
    (DCGM.SM_CLOCK, "gauge", "SM clock frequency (in MHz)."),
    (DCGM.MEM_CLOCK, "gauge", "Memory clock frequency (in MHz)."),
    (DCGM.CLOCK_THROTTLE_REASONS, "gauge", "Current clock throttle reasons (bitmask)."),
    (DCGM.XID, "gauge", "Value of the last XID error encountered."),
    (DCGM.PCIE_REPLAY, "counter", "Total number of PCIe retries."),
    (DCGM.NVLINK_BW, "counter", "Total number of NVLink bandwidth counters for all lanes."),
    (DCGM.ECC_SBE_VOLATILE, "counter", "Single-bit volatile ECC errors since the last driver load."),
    (DCGM.ECC_DBE_VOLATILE, "counter", "Double-bit volatile ECC errors since the last driver load."),
    (DCGM.UNCORRECTABLE_REMAPPED_ROWS, "counter", "Number of remapped rows for uncorrectable errors."),
    (DCGM.ROW_REMAP_PENDING, "gauge", "Whether a row remap is pending (reset the GPU to apply)."),
    (DCGM.ROW_REMAP_FAILURE, "gauge", "Whether remapping of rows has failed."),
    (DCGM.GR_ENGINE_ACTIVE, "gauge", "Ratio of time the graphics engine is active."),
    (DCGM.SM_ACTIVE, "gauge", "Ratio of cycles an SM has at least one warp assigned."),
    (DCGM.TENSOR_ACTIVE, "gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    (DCGM.DRAM_ACTIVE, "gauge", "Ratio of cycles the device memory interface is active."),
    (DCGM.PCIE_TX, "gauge", "Bytes per second transmitted over PCIe (headers included)."),
    (DCGM.PCIE_RX, "gauge", "Bytes per second received over PCIe (headers included)."),
)


class GpuPoolArgs(TypedDict):
    """A pool of GPU nodes the operator's operands must run on."""

    taints: NotRequired[list[TaintArgs]]
    """The nodes' taints, which the operands tolerate. Default: none (nvidia.com/gpu is always tolerated)."""
    mig: NotRequired[str]
    """The MIG layout the MIG manager applies (a mig-parted config name, e.g. all-1g.10gb). Default: whole GPUs."""
    nodes: NotRequired[list[str]]
    """Existing nodes of the pool that the kit labels with the pool's name and MIG layout (node groups that label
    their own nodes, like EKS's, list none). Default: none."""


class GpuStackArgs(TypedDict):
    """Arguments of a GpuStack."""

    pools: dict[str, GpuPoolArgs]
    """The GPU pools, by name (the aifactory.io/pool node label's value)."""
    hosts_have_drivers: NotRequired[bool]
    """The nodes bring the NVIDIA driver and container toolkit (EKS accelerated AMIs do). Default: false (the
    operator installs both)."""
    rdma: NotRequired[bool]
    """GPUDirect RDMA over InfiniBand: the operator's driver loads nvidia-peermem. Default: false."""
    hosts_have_ofed: NotRequired[bool]
    """With rdma: the hosts bring MLNX OFED/DOCA (else the network operator's driver container). Default: false."""
    kubernetes_version: NotRequired[str]
    """The cluster's Kubernetes minor version (the Pod Security labels' version). Default: 1.35."""


class _TargetView(Protocol):
    @property
    def hosts_have_drivers(self) -> bool: ...


class GpuStackView(Protocol):
    """What the build functions read: GpuStack's GpuStackSpec (from its args), or the kit's PlatformConfig."""

    @property
    def is_aws(self) -> bool: ...  # EKS: the node images bring drivers, node groups label their own nodes

    @property
    def target(self) -> _TargetView: ...

    @property
    def kubernetes_version(self) -> str: ...

    @property
    def gpu_pools(self) -> list[NodePool]: ...

    @property
    def infiniband_pools(self) -> list[NodePool]: ...

    @property
    def infiniband(self) -> InfinibandSettings | None: ...


@dataclass(frozen=True)
class _Target:
    hosts_have_drivers: bool


@dataclass(frozen=True)
class GpuStackSpec:
    """GpuStackArgs with every default applied (a GpuStackView). Pools carry only what the operator reads."""

    gpu_pools: list[NodePool]
    target: _Target
    infiniband: InfinibandSettings | None = None
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    is_aws: bool = False

    @property
    def infiniband_pools(self) -> list[NodePool]:
        return self.gpu_pools if self.infiniband is not None else []


_MIG_LAYOUT = re.compile(r"^[a-z0-9][-a-z0-9.]*$")  # a mig-parted config name (all-1g.10gb, all-balanced)


def gpu_stack_spec(name: str, args: GpuStackArgs) -> GpuStackSpec:
    """Validate `args` and resolve every default; raises pulumi.InputPropertiesError with property paths."""
    check_shape("GpuStack", name, args, GpuStackArgs)  # typos, unknown keys, wrong types: before any read
    problems = Problems("GpuStack", name)
    for key, pool in args["pools"].items():
        for i, t in enumerate(pool.get("taints") or ()):
            if t["effect"] not in TAINT_EFFECTS:
                problems.add(f"pools.{key}.taints[{i}].effect",
                             f"{t['effect']!r} is not allowed; choose one of: {', '.join(TAINT_EFFECTS)}")
        if "mig" in pool and not _MIG_LAYOUT.match(pool["mig"]):
            problems.add(f"pools.{key}.mig", f"{pool['mig']!r} is not a MIG layout name such as all-1g.10gb")
        if pool.get("nodes") and "mig" not in pool:
            problems.add(f"pools.{key}.nodes", "labels nodes with a MIG layout: set mig, or remove nodes")
    if args.get("hosts_have_ofed") and not args.get("rdma"):
        problems.add("hostsHaveOfed", "only applies with rdma: true")
    problems.raise_any()
    # The operator reads each pool's name, taints, MIG layout and nodes; the instance type does not matter here.
    pools = [NodePool(name=key, instance_type="", mig=p.get("mig"), nodes=tuple(p.get("nodes") or ()),
                      taints=tuple(Taint(t["key"], t["effect"], t.get("value", ""))  # type: ignore[arg-type]
                                   for t in p.get("taints") or ()))
             for key, p in args["pools"].items()]
    return GpuStackSpec(gpu_pools=pools, target=_Target(hosts_have_drivers=args.get("hosts_have_drivers", False)),
                        infiniband=InfinibandSettings(hosts_have_ofed=args.get("hosts_have_ofed", False))
                        if args.get("rdma") else None,
                        kubernetes_version=args.get("kubernetes_version", DEFAULT_KUBERNETES_VERSION))


def dcgm_counters_csv() -> str:
    """The exporter's collectors file (`field, type, help` per line)."""
    lines = ["# aifactory DCGM exporter counters: the defaults plus SM activity, ECC, row remaps, XID."]
    lines += [f"{field}, {kind}, {help_}" for field, kind, help_ in DCGM_COUNTERS]
    return "\n".join(lines) + "\n"


def mig_strategy(cfg: GpuStackView) -> str:
    """`mixed` as soon as one pool is partitioned: slices are then advertised per profile
    (`nvidia.com/mig-1g.10gb`), which is what models with `migProfile` request; else `single`."""
    return "mixed" if any(p.mig for p in cfg.gpu_pools) else "single"


def mig_node_labels(pool: NodePool) -> dict[str, str]:
    """Node labels that make the MIG manager apply the pool's layout (empty without a layout)."""
    return {MIG_CONFIG_LABEL: pool.mig} if pool.mig else {}


def mig_node_patch(name: str, *, node: str, pool: NodePool, opts: pulumi.ResourceOptions) -> k8s.core.v1.NodePatch:
    """The pool and MIG layout labels on one existing node (server-side apply: only these fields are ours)."""
    return k8s.core.v1.NodePatch(name, metadata={"name": node, "labels": {POOL_LABEL: pool.name,
                                                                          **mig_node_labels(pool)}}, opts=opts)


def mig_resource(profile: str) -> str:
    """The extended resource a MIG slice is requested as under the `mixed` strategy."""
    return f"nvidia.com/mig-{profile}"


def pool_tolerations(pools: list[NodePool]) -> list[dict[str, str]]:
    """Tolerations for every taint on `pools`, plus the GPU taint; deduplicated and sorted."""
    seen: dict[tuple[str, str], dict[str, str]] = {(GPU_TAINT_KEY, "NoSchedule"): {
        "key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}}
    for pool in pools:
        for taint in pool.taints:
            seen.setdefault((taint.key, taint.effect), {"key": taint.key, "operator": "Exists",
                                                         "effect": taint.effect})
    return [seen[k] for k in sorted(seen)]


def _resources(cpu: str, memory: str, cpu_limit: str, memory_limit: str) -> dict[str, Any]:
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu_limit, "memory": memory_limit}}


def gpu_operator_values(cfg: GpuStackView) -> dict[str, Any]:
    """Helm values of the GPU operator for this stack."""
    install_driver = not cfg.is_aws and not cfg.target.hosts_have_drivers
    rdma = bool(cfg.infiniband_pools)
    tolerations = pool_tolerations(cfg.gpu_pools)
    return {
        "operator": {"resources": _resources("200m", "256Mi", "500m", "512Mi")},
        "daemonsets": {"tolerations": tolerations, "priorityClassName": "system-node-critical"},
        "node-feature-discovery": {
            "worker": {"tolerations": tolerations, "resources": _resources("50m", "64Mi", "200m", "256Mi")},
            "master": {"resources": _resources("50m", "128Mi", "200m", "512Mi")},
            "gc": {"resources": _resources("10m", "64Mi", "100m", "128Mi")},
        },
        "driver": {
            "enabled": install_driver,
            "rdma": {"enabled": rdma, "useHostMofed": bool(rdma and cfg.infiniband and cfg.infiniband.hosts_have_ofed)},
        },
        "toolkit": {"enabled": install_driver},
        "mig": {"strategy": mig_strategy(cfg)},
        "migManager": {"enabled": any(p.mig for p in cfg.gpu_pools)},
        "dcgmExporter": {
            "enabled": True,
            "config": {"name": DCGM_COUNTERS_CONFIGMAP, "create": True, "data": dcgm_counters_csv()},
            # Kubernetes mode: attribute each GPU's series to the pod, namespace and container using it.
            "env": [{"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
                    {"name": "DCGM_EXPORTER_COLLECTORS", "value": "/etc/dcgm-exporter/dcgm-metrics.csv"}],
            # honorLabels: the exporter's pod/namespace labels name the workload using the GPU (Kubernetes mode);
            # without it they would be renamed exported_pod/exported_namespace and cost attribution breaks.
            "serviceMonitor": {"enabled": True, "interval": DEFAULT_SCRAPE_INTERVAL, "honorLabels": True},
            "resources": _resources("100m", "256Mi", "500m", "1Gi"),
        },
    }


class GpuStack(pulumi.ComponentResource):
    """The GPU operator release in its own (privileged: drivers and device plugins) namespace."""
    pulumi_type = TYPE  # the type token (part of every child's URN); the component package hosts a subclass
    # with `aifactory:index:<name>`, the token its schema names (components/__main__.py)

    release_name: pulumi.Output[str]
    """The GPU operator's Helm release."""

    def __init__(self, name: str, args: GpuStackArgs, opts: pulumi.ResourceOptions | None = None,
                 after: Sequence[pulumi.Resource] = ()) -> None:
        super().__init__(self.pulumi_type, name, None, opts)
        cfg = gpu_stack_spec(name, args)
        child = pulumi.ResourceOptions(parent=self)
        self.namespace: k8s.core.v1.Namespace = create_namespace(
            f"{name}-ns", naming.GPU_OPERATOR_NAMESPACE,
            labels=namespace_labels(pod_security="privileged", kubernetes_version=cfg.kubernetes_version),
            opts=child)
        self.release: k8s.helm.v3.Release = versions.release(
            f"{name}-operator", versions.GPU_OPERATOR, release_name=RELEASE_NAME,
            namespace=naming.GPU_OPERATOR_NAMESPACE, values=gpu_operator_values(cfg),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.namespace, *after]))
        self.mig_labels = [mig_node_patch(f"{name}-mig-{node}", node=node, pool=pool, opts=child)
                           for pool in cfg.gpu_pools if pool.mig and not cfg.is_aws for node in pool.nodes]
        self.release_name = self.release.name.apply(lambda n: n or RELEASE_NAME)
        self.register_outputs({"namespace": naming.GPU_OPERATOR_NAMESPACE})
