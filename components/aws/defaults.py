"""Node pool defaults shared by the components (library use) and the stack config (infra.config).

A light module on purpose: config validation imports it without pulling in pulumi_aws.
"""

__all__ = ["DEFAULT_GPU_ROOT_VOLUME_GIB", "DEFAULT_CPU_ROOT_VOLUME_GIB", "DEFAULT_EFA_HUGEPAGES_MIB"]

DEFAULT_GPU_ROOT_VOLUME_GIB = 500  # container images of serving engines are large; model caches use PVCs
DEFAULT_CPU_ROOT_VOLUME_GIB = 100
DEFAULT_EFA_HUGEPAGES_MIB = 5120  # 2 MiB pages for libfabric/NCCL on EFA pools (AWS EFA samples: hugepages-2Mi 5120Mi)
