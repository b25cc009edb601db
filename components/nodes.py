"""What every layer knows of a node pool's nodes: their taints and the defaults of their volumes and hugepages.

The AWS node pools apply them (components.aws.node_pool), the Kubernetes components schedule onto them (GPU stack,
fabric, serving) and the stack config validates them (infra.stack.pools). A light module on purpose: it imports
nothing of the kit and no SDK, so config validation and the k8s layer read it without pulling in pulumi_aws.
"""

from typing import NotRequired, TypedDict

__all__ = [
    "TAINT_EFFECTS",
    "TaintArgs",
    "DEFAULT_GPU_ROOT_VOLUME_GIB",
    "DEFAULT_CPU_ROOT_VOLUME_GIB",
    "DEFAULT_EFA_HUGEPAGES_MIB",
]

DEFAULT_GPU_ROOT_VOLUME_GIB = 500  # container images of serving engines are large; model caches use PVCs
DEFAULT_CPU_ROOT_VOLUME_GIB = 100
DEFAULT_EFA_HUGEPAGES_MIB = 5120  # 2 MiB pages for libfabric/NCCL on EFA pools (AWS EFA samples: hugepages-2Mi 5120Mi)

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class TaintArgs(TypedDict):
    """A Kubernetes taint on every node of the pool."""

    key: str
    """Taint key, e.g. nvidia.com/gpu."""
    effect: str
    """NoSchedule, PreferNoSchedule or NoExecute."""
    value: NotRequired[str]
    """Taint value. Default: empty."""
