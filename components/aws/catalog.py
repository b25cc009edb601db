"""Instance catalog: the one place hardware facts about node types live.

Config validation, the node pool components (EFA interface layout), the EFA device plugin's
instance list, the cost dashboards (default prices) and the node acceptance suite (expected GPU
count, NVLink, PCIe, EFA devices, peak TFLOPs and bandwidth) all read this module.

Sources (see shared/reference/FACTS.md): EFA device counts from aws-samples/awsome-distributed-training
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

__all__ = ["GpuSpec", "InstanceType", "CATALOG", "EFA_GBPS", "get", "efa_types", "gpu_types", "known_types",
           "fabric_gbps"]


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


A100_40 = GpuSpec("NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB", 40, 312.0, 1555.0, 12, 4, 16, True)
A100_80 = GpuSpec("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB", 80, 312.0, 2039.0, 12, 4, 16, True)
H100 = GpuSpec("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3", 80, 989.0, 3350.0, 18, 5, 16, True)
H200 = GpuSpec("NVIDIA H200", "NVIDIA-H200", 141, 989.0, 4800.0, 18, 5, 16, True)
B200 = GpuSpec("NVIDIA B200", "NVIDIA-B200", 180, 2250.0, 7700.0, 18, 5, 16, True)
A10G = GpuSpec("NVIDIA A10G", "NVIDIA-A10G", 24, 70.0, 600.0, 0, 4, 16, False)
L4 = GpuSpec("NVIDIA L4", "NVIDIA-L4", 24, 121.0, 300.0, 0, 4, 16, False)
L40S = GpuSpec("NVIDIA L40S", "NVIDIA-L40S", 48, 362.0, 864.0, 0, 4, 16, False)


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
