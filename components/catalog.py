"""Instance catalog: the one place hardware facts about node types live.

Config validation, the node pool components (EFA interface layout), the EFA device plugin's
instance list, the cost dashboards (default prices) and the node acceptance suite (expected GPU
count, NVLink, PCIe, EFA devices, peak TFLOPs and bandwidth) all read this module.

Sources (docs/contracts.md, "AWS"): EFA device counts from aws-samples/awsome-distributed-training
`instance-profiles.conf`; vCPUs, memory, GPUs, network cards and EFA interfaces checked against EC2's
DescribeInstanceTypes answers in tests/fixtures/aws_instance_types.yaml; on-demand prices us-east-1 Linux
mid-2026 (config defaults only, every one overridable by `observability.prices`); peak dense BF16 TFLOPs
and HBM bandwidth from NVIDIA data sheets (SXM parts; dense, i.e. without 2:4 sparsity). Types marked
`onprem=True` describe servers of an existing cluster (InfiniBand data plane); they have no on-demand price,
so a stack that uses one must give an amortised price in `observability.prices`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["GpuSpec", "InstanceType", "CATALOG", "EFA_GBPS", "INSTANCE_STORE", "InstanceStore", "IB_RAILS",
           "IbRail", "EFA_GPUDIRECT_RDMA", "FP8_MIN_COMPUTE_CAPABILITY", "get", "efa_types", "gpu_types",
           "known_types", "fabric_gbps", "supports_fp8"]


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model as the node acceptance suite and dashboards see it."""

    name: str  # as `nvidia-smi --query-gpu=name` prints it
    product_label: str  # node label nvidia.com/gpu.product set by GPU feature discovery
    memory_gib: int
    bf16_dense_tflops: float  # peak dense BF16 tensor TFLOP/s per GPU
    memory_bandwidth_gbs: float  # peak device memory bandwidth per GPU, GB/s
    nvlink_links: int  # NVLink links per GPU (0: PCIe-only part)
    pcie_gen: int
    pcie_width: int
    mig_capable: bool
    compute_capability: tuple[int, int] = (0, 0)  # CUDA compute capability (NVIDIA "CUDA GPUs" table)

    @property
    def generation(self) -> str:
        """The architecture name of the compute capability (8.0/8.6 Ampere, 8.9 Ada, 9.0 Hopper, 10.x Blackwell)."""
        return {(8, 0): "Ampere", (8, 6): "Ampere", (8, 9): "Ada Lovelace", (9, 0): "Hopper",
                (10, 0): "Blackwell"}.get(self.compute_capability, "unknown")


@dataclass(frozen=True, slots=True)
class InstanceType:
    name: str
    vcpus: int
    memory_gib: int
    gpu: GpuSpec | None
    gpu_count: int
    network_cards: int  # maximum network cards (one EFA interface per card on EFA types)
    efa_devices: int  # EFA devices the node shows (`fi_info -p efa`); 0 = no EFA support
    on_demand_usd_per_hour: float | None
    ib_ports: int = 0  # InfiniBand HCAs ports for the data plane (on-prem servers)
    ib_rate_gbps: int = 0
    onprem: bool = False

    @property
    def has_gpu(self) -> bool:
        return self.gpu_count > 0

    @property
    def supports_efa(self) -> bool:
        return self.efa_devices > 0

    @property
    def nvlink(self) -> bool:
        return self.gpu is not None and self.gpu.nvlink_links > 0


# MIG devices per GPU of the single-profile layouts the kit offers, by GPU memory (GiB), as the GPU operator's MIG
# manager applies them (gpu-operator v25.10.1 assets/state-mig-manager/0400_configmap.yaml, mig-parted's default
# config: device filters per GPU model). A layout a GPU has no entry for is one the MIG manager fails to apply.
MIG_LAYOUT_DEVICES: dict[str, dict[int, int]] = {
    "all-1g.10gb": {80: 7, 40: 4},  # A100/H100 80 GB: 7 x 1g.10gb; A100 40 GB: 4 (a 1g.10gb holds 2 memory slices)
    "all-1g.20gb": {80: 4},
    "all-2g.20gb": {80: 3},
    "all-3g.40gb": {80: 2},
    "all-4g.40gb": {80: 1},
    "all-7g.80gb": {80: 1},
}


def mig_devices_per_gpu(layout: str, gpu: GpuSpec) -> int | None:
    """How many MIG devices a single-profile layout gives one GPU of this model; None: the layout does not apply to
    it (or is not a single-profile layout)."""
    return MIG_LAYOUT_DEVICES.get(layout, {}).get(gpu.memory_gib) if gpu.mig_capable else None


A100_40 = GpuSpec("NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB", 40, 312.0, 1555.0, 12, 4, 16, True, (8, 0))
A100_80 = GpuSpec("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB", 80, 312.0, 2039.0, 12, 4, 16, True, (8, 0))
H100 = GpuSpec("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3", 80, 989.0, 3350.0, 18, 5, 16, True, (9, 0))
H200 = GpuSpec("NVIDIA H200", "NVIDIA-H200", 141, 989.0, 4800.0, 18, 5, 16, True, (9, 0))
B200 = GpuSpec("NVIDIA B200", "NVIDIA-B200", 180, 2250.0, 7700.0, 18, 5, 16, True, (10, 0))
A10G = GpuSpec("NVIDIA A10G", "NVIDIA-A10G", 24, 70.0, 600.0, 0, 4, 16, False, (8, 6))
L4 = GpuSpec("NVIDIA L4", "NVIDIA-L4", 24, 121.0, 300.0, 0, 4, 16, False, (8, 9))
L40S = GpuSpec("NVIDIA L40S", "NVIDIA-L40S", 48, 362.0, 864.0, 0, 4, 16, False, (8, 9))


def _types() -> dict[str, InstanceType]:
    t = InstanceType
    rows = [
        # --- EFA training/inference types
        t("p4d.24xlarge", 96, 1152, A100_40, 8, 4, 4, 21.96),
        t("p4de.24xlarge", 96, 1152, A100_80, 8, 4, 4, 27.45),
        t("p5.48xlarge", 192, 2048, H100, 8, 32, 32, 55.04),
        t("p5e.48xlarge", 192, 2048, H200, 8, 32, 32, 60.00),
        t("p5en.48xlarge", 192, 2048, H200, 8, 16, 16, 63.30),
        t("p6-b200.48xlarge", 192, 2048, B200, 8, 8, 8, 113.93),
        # --- single-GPU Hopper (AWS "P5 single GPU", Aug 2025): one H100 SXM, 16 vCPUs, 256 GiB, up to 100 Gbps,
        # one network card with one EFA interface (DescribeInstanceTypes, as recorded in tests/fixtures/
        # aws_instance_types.yaml). AWS sells no single-H200 size (p5e/p5en are 48xlarge only).
        t("p5.4xlarge", 16, 256, H100, 1, 1, 1, 6.88),
        # --- g-family: EFA (one interface) from the 8xlarge sizes up; four on g6e.48xlarge
        t("g5.xlarge", 4, 16, A10G, 1, 1, 0, 1.006),
        t("g5.2xlarge", 8, 32, A10G, 1, 1, 0, 1.212),
        t("g5.12xlarge", 48, 192, A10G, 4, 1, 1, 5.672),
        t("g5.48xlarge", 192, 768, A10G, 8, 1, 1, 16.288),
        t("g6.xlarge", 4, 16, L4, 1, 1, 0, 0.805),
        t("g6.2xlarge", 8, 32, L4, 1, 1, 0, 0.978),
        t("g6.12xlarge", 48, 192, L4, 4, 1, 1, 4.602),
        t("g6.48xlarge", 192, 768, L4, 8, 1, 1, 13.350),
        t("g6e.xlarge", 4, 32, L40S, 1, 1, 0, 1.861),
        t("g6e.2xlarge", 8, 64, L40S, 1, 1, 0, 2.242),
        t("g6e.12xlarge", 48, 384, L40S, 4, 1, 1, 10.49),
        t("g6e.48xlarge", 192, 1536, L40S, 8, 4, 4, 30.13),
        # --- CPU types for system pools
        t("m6i.xlarge", 4, 16, None, 0, 1, 0, 0.192),
        t("m6i.2xlarge", 8, 32, None, 0, 1, 0, 0.384),
        t("m6i.4xlarge", 16, 64, None, 0, 1, 0, 0.768),
        t("m7i.xlarge", 4, 16, None, 0, 1, 0, 0.2016),
        t("m7i.2xlarge", 8, 32, None, 0, 1, 0, 0.4032),
        t("m7i.4xlarge", 16, 64, None, 0, 1, 0, 0.8064),
        t("c7i.2xlarge", 8, 16, None, 0, 1, 0, 0.357),
        # --- on-prem servers (existing clusters, InfiniBand NDR 400 Gb/s, one HCA per GPU)
        t("dgx-h100", 224, 2048, H100, 8, 0, 0, None, ib_ports=8, ib_rate_gbps=400, onprem=True),
        t("hgx-h200", 224, 2048, H200, 8, 0, 0, None, ib_ports=8, ib_rate_gbps=400, onprem=True),
        t("dgx-a100", 256, 1024, A100_80, 8, 0, 0, None, ib_ports=8, ib_rate_gbps=200, onprem=True),
        t("cpu-server", 64, 256, None, 0, 0, 0, None, onprem=True),
    ]
    return {row.name: row for row in rows}


CATALOG: MappingProxyType[str, InstanceType] = MappingProxyType(_types())

# EFA network bandwidth per instance, Gbps, as AWS lists it ("Network bandwidth"; EC2 accelerated computing
# specifications): what an all-reduce across nodes can reach at most (fabric-check's expectation).
EFA_GBPS: MappingProxyType[str, int] = MappingProxyType({
    "p4d.24xlarge": 400, "p4de.24xlarge": 400, "p5.48xlarge": 3200, "p5e.48xlarge": 3200, "p5en.48xlarge": 3200,
    "p6-b200.48xlarge": 3200, "g5.48xlarge": 100, "g6.48xlarge": 100, "g6e.48xlarge": 400,
})


# Compute capabilities: NVIDIA "CUDA GPUs - Compute Capability" (developer.nvidia.com/cuda-gpus): A100 8.0,
# A10G 8.6, L4/L40S 8.9, H100/H200 9.0, B200 10.0.
# FP8 tensor-core math (W8A8) needs compute capability 8.9 or newer: vLLM v0.11.0
# docs/features/quantization/fp8.md ("FP8 computation is supported on NVIDIA GPUs with compute capability > 8.9
# (Ada Lovelace, Hopper)"; Ampere only runs FP8 checkpoints weight-only through FP8 Marlin, W8A16), and
# TensorRT-LLM's FP8 recipes require Ada/Hopper or newer. The kit refuses FP8 below 8.9.
FP8_MIN_COMPUTE_CAPABILITY = (8, 9)


def supports_fp8(gpu: GpuSpec) -> bool:
    return gpu.compute_capability >= FP8_MIN_COMPUTE_CAPABILITY


@dataclass(frozen=True, slots=True)
class InstanceStore:
    """Local NVMe instance store of an instance type (AWS "Instance store volumes" table, EC2 docs
    instance-store-volumes.html / the accelerated computing specifications)."""

    drives: int
    drive_gb: int  # decimal GB per drive, as AWS lists it

    @property
    def total_gb(self) -> int:
        return self.drives * self.drive_gb


# Instance store per type (EC2 accelerated computing specifications, "Instance storage"): p5/p5e/p5en and
# p6-b200 8 x 3,840 GB NVMe SSD; p4d/p4de 8 x 1,000 GB NVMe SSD. g-family sizes have fewer, smaller drives
# and are left out (their caches stay on gp3).
INSTANCE_STORE: MappingProxyType[str, InstanceStore] = MappingProxyType({
    "p4d.24xlarge": InstanceStore(8, 1000), "p4de.24xlarge": InstanceStore(8, 1000),
    "p5.48xlarge": InstanceStore(8, 3840), "p5e.48xlarge": InstanceStore(8, 3840),
    "p5en.48xlarge": InstanceStore(8, 3840), "p6-b200.48xlarge": InstanceStore(8, 3840),
})

# GPUDirect RDMA over EFA (FI_EFA_USE_DEVICE_RDMA=1): the p4d and later P types (AWS EFA docs, "Supported
# instance types": RDMA read on p4d/p4de/p5/p5e/p5en/p6); the g-family EFA sizes have no GPUDirect RDMA.
EFA_GPUDIRECT_RDMA = frozenset({"p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge",
                                "p6-b200.48xlarge"})


@dataclass(frozen=True, slots=True)
class IbRail:
    """One compute InfiniBand port: its RDMA device (NCCL_IB_HCA) and its IPoIB netdev (network attachment)."""

    hca: str
    netdev: str


# The compute rails of a DGX H100: 8 single-port ConnectX-7 (400 Gb/s NDR) behind the OSFP cages, one per GPU;
# mlx5_1/2 and mlx5_7/8 are the two dual-port storage/in-band ConnectX-7 cards and carry no NCCL traffic.
# NVIDIA DGX H100/H200 user guide, "Network ports" (netdev, RDMA device per OSFP port), and the NCCL_IB_HCA
# list NVIDIA's DGX H100 recipes use (mlx5_0,3,4,5,6,9,10,11). tests/node/recordings/dgx-h100 has the same
# device names. Other on-prem types have vendor-specific names: set `infiniband.interfaces` / `hcas`.
IB_RAILS: MappingProxyType[str, tuple[IbRail, ...]] = MappingProxyType({
    "dgx-h100": tuple(IbRail(h, n) for h, n in (
        ("mlx5_0", "ibp24s0"), ("mlx5_3", "ibp64s0"), ("mlx5_4", "ibp79s0"), ("mlx5_5", "ibp94s0"),
        ("mlx5_6", "ibp154s0"), ("mlx5_9", "ibp192s0"), ("mlx5_10", "ibp206s0"), ("mlx5_11", "ibp220s0"))),
})


def known_types() -> list[str]:
    return sorted(CATALOG)


def get(name: str) -> InstanceType:
    """The catalog entry for `name`; KeyError names the known types."""
    try:
        return CATALOG[name]
    except KeyError:
        raise KeyError(f"unknown instance type {name!r}; known: {', '.join(known_types())}") from None


def efa_types() -> list[str]:
    return sorted(n for n, t in CATALOG.items() if t.supports_efa)


def fabric_gbps(name: str) -> int:
    """The data-plane line rate of one node, Gbps: EFA bandwidth, or InfiniBand ports x rate; 0: no fabric."""
    inst = get(name)
    return EFA_GBPS.get(name, 0) if inst.supports_efa else inst.ib_ports * inst.ib_rate_gbps


def gpu_types() -> list[str]:
    return sorted(n for n, t in CATALOG.items() if t.has_gpu)
