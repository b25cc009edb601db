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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming, versions
from components.k8s.namespaces import create_namespace, namespace_labels
from components.vocabulary import GPU_TAINT_KEY, POOL_LABEL
from infra.config import NodePool, PlatformConfig
from telemetry.names import DCGM

__all__ = [
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


def dcgm_counters_csv() -> str:
    """The exporter's collectors file (`field, type, help` per line)."""
    lines = ["# aifactory DCGM exporter counters: the defaults plus SM activity, ECC, row remaps, XID."]
    lines += [f"{field}, {kind}, {help_}" for field, kind, help_ in DCGM_COUNTERS]
    return "\n".join(lines) + "\n"


def mig_strategy(cfg: PlatformConfig) -> str:
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


def gpu_operator_values(cfg: PlatformConfig) -> dict[str, Any]:
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

    namespace: k8s.core.v1.Namespace
    release: k8s.helm.v3.Release

    def __init__(self, name: str, *, cfg: PlatformConfig, after: Sequence[pulumi.Resource] = (),
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aifactory:k8s:GpuStack", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.namespace = create_namespace(
            f"{name}-ns", naming.GPU_OPERATOR_NAMESPACE,
            labels=namespace_labels(pod_security="privileged", kubernetes_version=cfg.kubernetes_version),
            opts=child)
        self.release = versions.release(
            f"{name}-operator", versions.GPU_OPERATOR, release_name=RELEASE_NAME,
            namespace=naming.GPU_OPERATOR_NAMESPACE, values=gpu_operator_values(cfg),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.namespace, *after]))
        self.mig_labels = [mig_node_patch(f"{name}-mig-{node}", node=node, pool=pool, opts=child)
                           for pool in cfg.gpu_pools if pool.mig and not cfg.is_aws for node in pool.nodes]
        self.register_outputs({"namespace": naming.GPU_OPERATOR_NAMESPACE})
