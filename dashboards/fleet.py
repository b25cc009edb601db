"""GPU fleet (DCGM exporter): health and activity by pool, then per GPU of the selected nodes (All by default, as
dcgm-exporter's own dashboard, grafana.com 12239, opens). Every per-GPU panel reads one recorded selector
(dashboards.rules DCGM_PER_GPU), so it costs no more than 12239's equivalent at 1,024 GPUs (`make bench`)."""

from __future__ import annotations

from grafanalib.core import Dashboard

from dashboards.config import ObservabilityConfig
from dashboards.panels import Q, custom_variable, dashboard, query_variable, stat, timeseries
from dashboards.rules import R
from telemetry.names import DCGM

__all__ = ["UID", "GPU_PANELS", "build"]

UID = "aifactory-gpu-fleet"
POOL = 'pool=~"$pool"'
MIB = 1024 * 1024

# (title, description, unit, metric, pool aggregation, scale to the unit)
_POOL_PANELS = (
    ("GPU utilisation", "Mean DCGM_FI_DEV_GPU_UTIL per pool (5-minute average).", "percentunit", DCGM.GPU_UTIL,
     "avg", 1),
    ("Graphics engine active", "Mean DCGM_FI_PROF_GR_ENGINE_ACTIVE per pool.", "percentunit", DCGM.GR_ENGINE_ACTIVE,
     "avg", 1),
    ("Tensor pipe active", "Mean DCGM_FI_PROF_PIPE_TENSOR_ACTIVE per pool.", "percentunit", DCGM.TENSOR_ACTIVE,
     "avg", 1),
    ("DRAM active", "Mean DCGM_FI_PROF_DRAM_ACTIVE per pool (memory-bandwidth bound when high).", "percentunit",
     DCGM.DRAM_ACTIVE, "avg", 1),
    ("Framebuffer used", "GPU memory used per pool (DCGM_FI_DEV_FB_USED).", "bytes", DCGM.FB_USED, "sum", MIB),
    ("Power draw", "Total board power per pool (DCGM_FI_DEV_POWER_USAGE).", "watt", DCGM.POWER, "sum", 1),
    ("Hottest GPU", "Maximum GPU temperature per pool.", "celsius", DCGM.GPU_TEMP, "max", 1),
    ("Hottest HBM", "Maximum memory temperature per pool.", "celsius", DCGM.MEMORY_TEMP, "max", 1),
    ("SM clock", "Mean SM clock per pool; drops under load mean throttling.", "rotmhz", DCGM.SM_CLOCK, "avg", 1),
    ("NVLink throughput", "NVLink bytes per second (sent + received) per pool: DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, "
                          "a current throughput in 1000 KiB/s, in B/s.", "Bps", DCGM.NVLINK_BW, "sum",
     DCGM.NVLINK_BW_BYTES_PER_UNIT),
    ("PCIe TX", "PCIe bytes per second sent by the GPUs, per pool.", "Bps", DCGM.PCIE_TX, "sum", 1),
    ("PCIe RX", "PCIe bytes per second received by the GPUs, per pool.", "Bps", DCGM.PCIE_RX, "sum", 1),
    ("GPUs with an XID error", "GPUs whose last XID is non-zero, per pool.", "none", DCGM.XID, "count", 1),
    ("Pending row remaps", "GPUs with an HBM row remap pending (needs a GPU reset), per pool.", "none",
     DCGM.ROW_REMAP_PENDING, "sum", 1),
)

# (title, description, unit, metric, scale, take a rate)
GPU_PANELS = (
    ("GPU utilisation per GPU", "DCGM_FI_DEV_GPU_UTIL.", "percent", DCGM.GPU_UTIL, 1, False),
    ("Temperature per GPU", "DCGM_FI_DEV_GPU_TEMP.", "celsius", DCGM.GPU_TEMP, 1, False),
    ("Tensor pipe active per GPU", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE: share of cycles the tensor cores are busy.",
     "percentunit", DCGM.TENSOR_ACTIVE, 1, False),
    ("Power per GPU", "DCGM_FI_DEV_POWER_USAGE.", "watt", DCGM.POWER, 1, False),
    ("Framebuffer used per GPU", "DCGM_FI_DEV_FB_USED.", "bytes", DCGM.FB_USED, MIB, False),
    ("SM clock per GPU", "DCGM_FI_DEV_SM_CLOCK.", "rotmhz", DCGM.SM_CLOCK, 1, False),
    ("Clock throttle reasons per GPU", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS bitmask (NVML): 0x20/0x40 thermal, "
                                       "0x80 power brake, 0x8 HW slowdown.", "none", DCGM.CLOCK_THROTTLE_REASONS, 1,
     False),
    ("Last XID per GPU", "DCGM_FI_DEV_XID_ERRORS: the value of the last XID error (0: none).", "none", DCGM.XID, 1,
     False),
    ("Row remap failures per GPU", "DCGM_FI_DEV_ROW_REMAP_FAILURE (1: replace the GPU).", "none",
     DCGM.ROW_REMAP_FAILURE, 1, False),
    ("PCIe replays per GPU", "Rate of DCGM_FI_DEV_PCIE_REPLAY_COUNTER over 5 minutes: link errors retried.",
     "short", DCGM.PCIE_REPLAY, 1, True),
    ("NVLink throughput per GPU", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL (sent + received; a gauge in 1000 KiB/s), "
                                  "in B/s.", "Bps", DCGM.NVLINK_BW, DCGM.NVLINK_BW_BYTES_PER_UNIT, False),
)


def _scaled(expr: str, scale: int) -> str:
    return f"{expr} * {scale}" if scale != 1 else expr


def _per_gpu(metric: str, rate: bool) -> str:
    """The GPUs of the selected nodes: one selector on the series recorded with node and pool (dashboards.rules)."""
    return f'{R.dcgm_gpu(metric, rate)}{{node=~"$node", {POOL}}}'


def build(cfg: ObservabilityConfig) -> Dashboard:
    by_pool = [timeseries(f"{title} by pool", description, unit,
                          Q(_scaled(f"{R.dcgm_pool(metric, agg)}{{{POOL}}}", scale), "{{pool}}"), width=8)
               for title, description, unit, metric, agg, scale in _POOL_PANELS]
    per_gpu = [timeseries(title, f"{description} Selected nodes only.", unit,
                          Q(_scaled(_per_gpu(metric, rate), scale), "{{node}} GPU {{gpu}}"), width=8)
               for title, description, unit, metric, scale, rate in GPU_PANELS]
    mean_temp = stat("Mean GPU temperature", "Mean DCGM_FI_DEV_GPU_TEMP over the GPUs of the selected nodes.",
                     "celsius", Q(f"avg({_per_gpu(DCGM.GPU_TEMP, False)})"), width=8, decimals=1)
    return dashboard(
        uid=UID, title="aifactory / GPU fleet",
        description="DCGM exporter metrics: activity, memory, power, temperature, clocks and errors by pool and "
                    "per GPU.",
        tags=["gpu", "dcgm"],
        variables=[
            custom_variable("pool", "Pool", [p.name for p in cfg.pools]),
            query_variable("node", "Node", f'label_values({R.NODE_POOL}{{{POOL}}}, node)'),
        ],
        rows=[("By pool", by_pool), ("Per GPU on the selected nodes", [mean_temp, *per_gpu])],
    )
