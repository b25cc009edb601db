"""Whether a model's weights, and a minimum KV cache beside them, fit the GPU memory its replica gets.

Pure functions of plain values, like components/k8s/coldstart.py (whose weight estimate this shares), so the stack
model, preflight and the docs give one answer.

What a replica has: `gpus x GPU memory x utilization`, where utilization is the share of each GPU the engine
takes for weights + KV cache (vLLM `--gpu-memory-utilization`, which the kit sets). What it needs: the weights as
they sit in GPU memory (a load-time fp8 model is read as BF16 and kept as fp8: 1 byte per parameter; AWQ/GPTQ
0.5; BF16 2), and room for a KV cache. vLLM refuses to start when no KV block fits ("No available memory for the
cache blocks", vllm/v1/core/kv_cache_utils.py `check_enough_kv_cache_memory`), and a cache of a few blocks serves
one short sequence: the kit asks for at least MIN_KV_SHARE of what the engine takes to be left after the weights.
The KV cache a model needs per token depends on its architecture, which the kit does not know from an id; this is a
floor, not a sizing (preflight and the serving dashboard's KV panels are the sizing).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from components import catalog
from components.k8s.coldstart import BYTES_PER_PARAM, parameter_billions

__all__ = ["MIN_KV_SHARE", "GPU_BYTES_PER_PARAM", "MemoryFit", "memory_fit"]

MIN_KV_SHARE = 0.10  # of the memory the engine takes, left for the KV cache once the weights are in
# Bytes per parameter in GPU memory: the checkpoint's, except that a load-time fp8 model is quantized as it loads.
GPU_BYTES_PER_PARAM = {**BYTES_PER_PARAM, "fp8": 1.0}
_GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class MemoryFit:
    weights_gib: float
    gpus: int
    gpu_memory_gib: float
    utilization: float
    quantization: str
    billions: float | None

    @property
    def usable_gib(self) -> float:
        return self.gpus * self.gpu_memory_gib * self.utilization

    @property
    def needed_gib(self) -> float:
        return self.weights_gib / (1 - MIN_KV_SHARE)

    @property
    def fits(self) -> bool:
        return self.needed_gib <= self.usable_gib

    def explain(self) -> str:
        """Why it does not fit, and what would."""
        have = (f"{self.gpus} x {self.gpu_memory_gib:g} GiB x {self.utilization:g} = {self.usable_gib:,.1f} GiB")
        ways = []
        per_gpu = self.gpu_memory_gib * self.utilization
        if (more := math.ceil(self.needed_gib / per_gpu)) > self.gpus:
            ways.append(f"{more} GPUs of this kind (tensorParallel x pipelineParallel)")
        if self.billions is not None:
            lighter = [q for q in ("fp8", "awq") if GPU_BYTES_PER_PARAM[q] < GPU_BYTES_PER_PARAM[self.quantization]
                       and self.billions * 1e9 * GPU_BYTES_PER_PARAM[q] / _GIB / (1 - MIN_KV_SHARE)
                       <= self.usable_gib]
            if lighter:
                ways.append(f"quantization {' or '.join(lighter)}")
        need_per_gpu = self.needed_gib / (self.gpus * self.utilization)
        bigger = sorted({g.name for g in _gpus()
                         if g.memory_gib >= need_per_gpu and g.memory_gib > self.gpu_memory_gib})
        if bigger:
            ways.append(f"a pool of GPUs with at least {math.ceil(need_per_gpu)} GiB ({', '.join(bigger)})")
        return (f"needs {self.weights_gib:,.1f} GiB of weights ({self.quantization}) plus a KV cache of at least "
                f"{MIN_KV_SHARE:.0%} of the engine's memory, {self.needed_gib:,.1f} GiB in all; the replica has "
                f"{have}" + (f"; would fit: {'; '.join(ways)}" if ways else ""))


def _gpus() -> list[catalog.GpuSpec]:
    return [t.gpu for t in catalog.CATALOG.values() if t.gpu is not None]


def _mig_memory_gib(profile: str) -> float | None:
    """GPU memory of a MIG slice from its profile name (`1g.10gb` -> 10)."""
    m = re.fullmatch(r"\d+g\.(\d+)gb", profile)
    return float(m.group(1)) if m else None


def memory_fit(*, model_id: str, quantization: str, configured_gib: float | None, gpus: int,
               gpu_memory_gib: float, utilization: float, mig_profile: str | None = None) -> MemoryFit | None:
    """How model `model_id` sits in its replica's GPU memory; None when its size is unknown (no parameter count in
    the id and no models.X.weightsGiB)."""
    billions = parameter_billions(model_id)
    if configured_gib is not None:
        weights = configured_gib
    elif billions is not None:
        weights = billions * 1e9 * GPU_BYTES_PER_PARAM[quantization] / _GIB
    else:
        return None
    if mig_profile is not None:
        if (slice_gib := _mig_memory_gib(mig_profile)) is None:
            return None
        gpus, gpu_memory_gib = 1, slice_gib
    return MemoryFit(weights, gpus, gpu_memory_gib, utilization, quantization, billions)
