"""Cold start: where a model's weights are cached on the node, how fast that medium reads, and how long a
model takes to load from it (size / throughput), next to its start-up budget.

Pure functions of plain values (no stack config), so config validation, serving, preflight and docs/serving.md
share one estimate.

Cache media:
- `instance-store`: AWS types with local NVMe (catalog.INSTANCE_STORE: p4d/p4de 8 x 1,000 GB, p5/p5e/p5en/p6-b200
  8 x 3,840 GB). The node's user data asks nodeadm for `instance.localStorage.strategy: RAID0` (AL2023
  nodeadm NodeConfig API, "InstanceOptions.LocalStorage"): the drives become one RAID0 array mounted under
  /mnt/k8s-disks and the kubelet's and containerd's directories are bind-mounted onto it, so a pod's emptyDir
  (the model cache) lives on NVMe.
- `gp3`: other AWS types; the kit's gp3 class provisions DEFAULT_GP3_THROUGHPUT_MIBPS instead of the 125 MiB/s
  baseline (EBS user guide, "General Purpose SSD volumes": gp3 baseline 3,000 IOPS / 125 MiB/s, up to
  1,000 MiB/s at 0.25 MiB/s per provisioned IOPS).
- `existing`: the stack's `target.storageClass` (speed unknown to the kit: DEFAULT_EXISTING_STORAGE_MBPS assumed).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from components import catalog

__all__ = [
    "DEFAULT_GP3_THROUGHPUT_MIBPS",
    "DEFAULT_GP3_IOPS",
    "GP3_BASELINE_MIBPS",
    "DEFAULT_NVME_DRIVE_MBPS",
    "DEFAULT_EXISTING_STORAGE_MBPS",
    "BYTES_PER_PARAM",
    "CacheMedium",
    "ColdStart",
    "cache_medium",
    "parameter_billions",
    "weights_gib",
    "cold_start",
]

GP3_BASELINE_MIBPS = 125  # EBS gp3 baseline throughput
DEFAULT_GP3_THROUGHPUT_MIBPS = 1000  # gp3 maximum throughput (EBS user guide, gp3)
DEFAULT_GP3_IOPS = 4000  # gp3 allows 0.25 MiB/s per IOPS: 1,000 MiB/s needs at least 4,000 IOPS
# AWS does not publish per-drive throughput of these NVMe instance-store drives; 1,000 MB/s of sequential reads
# per drive is a conservative assumption (datacenter NVMe drives of this size read 2-7 GB/s).
DEFAULT_NVME_DRIVE_MBPS = 1000
DEFAULT_EXISTING_STORAGE_MBPS = 500  # an assumption for an existing cluster's class (Ceph RBD, NFS, local)
# Bytes per parameter as the checkpoint stores it: BF16 unless it was quantized before it was saved
# (a load-time fp8 model is read as BF16 and quantized in GPU memory).
BYTES_PER_PARAM = {"none": 2.0, "fp8": 1.0, "int8": 1.0, "awq": 0.5, "gptq": 0.5}
_MIB = 1 << 20
_GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class CacheMedium:
    kind: str  # instance-store | gp3 | existing
    mbps: float  # sequential read throughput, MB/s (10^6 bytes)
    detail: str


def cache_medium(*, instance_type: str, aws: bool) -> CacheMedium:
    """Where a pod on `instance_type` caches its model, and how fast it reads."""
    store = catalog.INSTANCE_STORE.get(instance_type) if aws else None
    if store is not None:
        return CacheMedium("instance-store", store.drives * DEFAULT_NVME_DRIVE_MBPS,
                           f"RAID0 of {store.drives} x {store.drive_gb:,} GB NVMe (assumed {DEFAULT_NVME_DRIVE_MBPS:,}"
                           " MB/s each)")
    if aws:
        mbps = DEFAULT_GP3_THROUGHPUT_MIBPS * _MIB / 1e6
        return CacheMedium("gp3", mbps, f"gp3 at {DEFAULT_GP3_THROUGHPUT_MIBPS:,} MiB/s")
    return CacheMedium("existing", DEFAULT_EXISTING_STORAGE_MBPS,
                       f"the cluster's storage class (assumed {DEFAULT_EXISTING_STORAGE_MBPS} MB/s)")


def parameter_billions(model_id: str) -> float | None:
    """The parameter count a model id states (`Llama-3.3-70B-Instruct` -> 70.0); None when it states none.
    Mixture-of-experts ids such as `8x7B` count every expert."""
    name = model_id.rsplit("/", 1)[-1]
    if m := re.search(r"(?<![\w.])(\d+)x(\d+(?:\.\d+)?)B(?![a-zA-Z])", name):
        return int(m.group(1)) * float(m.group(2))
    m = re.search(r"(?<![\w.])(\d+(?:\.\d+)?)B(?![a-zA-Z])", name.replace("_", "-"))
    return float(m.group(1)) if m else None


def weights_gib(*, model_id: str, quantization: str, prequantized: bool, configured: float | None) -> float | None:
    """GiB the checkpoint occupies: models.X.weightsGiB, else parameters x bytes per parameter on disk."""
    if configured is not None:
        return configured
    billions = parameter_billions(model_id)
    if billions is None:
        return None
    per_param = BYTES_PER_PARAM[quantization] if prequantized else BYTES_PER_PARAM["none"]
    return billions * 1e9 * per_param / _GIB


@dataclass(frozen=True, slots=True)
class ColdStart:
    weights_gib: float
    medium: CacheMedium
    budget_seconds: int

    @property
    def load_seconds(self) -> int:
        return math.ceil(self.weights_gib * _GIB / (self.medium.mbps * 1e6))

    @property
    def fits(self) -> bool:
        return self.load_seconds <= self.budget_seconds

    def explain(self) -> str:
        return (f"{self.weights_gib:,.1f} GiB / {self.medium.mbps:,.0f} MB/s ({self.medium.detail}) = "
                f"{self.load_seconds:,} s; start-up budget {self.budget_seconds:,} s")


def cold_start(*, model_id: str, quantization: str, prequantized: bool, configured_gib: float | None,
               instance_type: str, aws: bool, budget_seconds: int) -> ColdStart | None:
    """The expected load time of one model from its node's cache medium; None when its size is unknown."""
    gib = weights_gib(model_id=model_id, quantization=quantization, prequantized=prequantized,
                      configured=configured_gib)
    if gib is None:
        return None
    return ColdStart(gib, cache_medium(instance_type=instance_type, aws=aws), budget_seconds)
