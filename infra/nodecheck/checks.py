"""The acceptance checks: what each one runs on the node, when the pool profile makes it apply, what passes.

The profile is a `NodePool` (stack config) plus its catalog entry (`pool.instance`): GPU model and count,
NVLink links, PCIe generation and width, EFA devices, InfiniBand ports and rate, peak BF16 TFLOP/s and
memory bandwidth. `CHECKS` lists every check in table order. For each, `applies(pool)` returns None when
the check applies, else the reason it does not (shown as n/a). `run(probe, pool)` returns the pass detail,
or raises `CheckFailed` (the node is wrong) or `CannotRun` (the check could not run: also a failure).
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from components.catalog import GpuSpec
from components.k8s.naming import GPU_OPERATOR_NAMESPACE
from components.k8s.settings import NodePool
from infra.nodecheck import cluster, parsers
from infra.nodecheck.probe import DEFAULT_KILL_AFTER_S, CannotRun, Probe, describe_failure, missing_tool, run_bounded
from telemetry.names import DCGM

__all__ = [
    "Check",
    "CheckFailed",
    "CHECKS",
    "GPU_FIELDS",
    "CMD_UNAME",
    "CMD_DRIVER",
    "CMD_GPUS",
    "CMD_REMAPPED_ROWS",
    "CMD_NVLINK",
    "CMD_KERNEL_LOG",
    "CMD_UID",
    "CMD_HOSTNAME",
    "CMD_EFA",
    "CMD_MEMINFO",
    "CMD_IBSTAT",
    "CMD_CONTAINERD",
    "CMD_CONTAINERD_LIMITS",
    "dcgm_command",
    "DEFAULT_HTTP_TIMEOUT_S",
    "DEFAULT_BURN_IN_STARTUP_S",
    "burn_in_script",
]

DEFAULT_HTTP_TIMEOUT_S = 5
DEFAULT_BURN_IN_STARTUP_S = 120  # added to burnInSeconds for the hard limit: torch import, CUDA init

# One nvidia-smi query serves the GPU, persistence, ECC, PCIe and MIG checks (order = parsers.GpuRow).
# PCIe: the maximum generation the GPU and slot can train to (the current one drops at idle to save
# power), and the current width (a degraded link trains narrower, x8 instead of x16).
GPU_FIELDS = ("index", "name", "pci.bus_id", "driver_version", "persistence_mode", "ecc.mode.current",
              "pcie.link.gen.max", "pcie.link.width.current", "mig.mode.current")
CMD_UNAME = "uname -sr"
CMD_DRIVER = "cat /proc/driver/nvidia/version"
CMD_GPUS = f"nvidia-smi --query-gpu={','.join(GPU_FIELDS)} --format=csv,noheader"
CMD_REMAPPED_ROWS = ("nvidia-smi --query-remapped-rows=gpu_bus_id,remapped_rows.correctable,"
                     "remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure --format=csv,noheader")
CMD_NVLINK = "nvidia-smi nvlink --status"
# The journal's kernel messages of this boot, else the kernel ring buffer: `journalctl` exits 0 and prints
# nothing where the journal holds no kernel messages (privileged pods, minimal images), so the fallback is
# on empty output, not only on failure.
CMD_KERNEL_LOG = ('log=$(journalctl --dmesg --boot --output=cat --no-pager 2>/dev/null); '
                  'if [ -n "$log" ]; then printf \'%s\\n\' "$log"; else dmesg; fi')
CMD_UID = "id -u"
CMD_HOSTNAME = "cat /proc/sys/kernel/hostname"
CMD_EFA = "fi_info -p efa -t FI_EP_RDM"
CMD_MEMINFO = "cat /proc/meminfo"
CMD_IBSTAT = "ibstat"
CMD_CONTAINERD = "containerd config dump 2>/dev/null || cat /etc/containerd/config.toml"
# The limits of the running containerd (its oldest process), which every container inherits: RDMA memory
# registration (EFA, InfiniBand) pins memory, capped by RLIMIT_MEMLOCK unless the container has IPC_LOCK.
CMD_CONTAINERD_LIMITS = "pid=$(pgrep -xo containerd) && cat /proc/$pid/limits"


def dcgm_command(url: str) -> str:
    return f"curl -sS --max-time {DEFAULT_HTTP_TIMEOUT_S} {url}"


T = TypeVar("T")


class CheckFailed(Exception):
    """The check ran and the node does not meet the profile."""


@dataclass(frozen=True, slots=True)
class Check:
    id: str
    title: str
    applies: Callable[[NodePool], str | None]  # None: applies; else why not
    run: Callable[[Probe, NodePool], str]  # pass detail; raises CheckFailed or CannotRun


# ---------------------------------------------------------------------------------------------
# when a check applies


def _always(pool: NodePool) -> str | None:
    return None


def _gpu(pool: NodePool) -> str | None:
    return None if pool.gpu else f"{pool.instance_type} has no GPU"


def _nvlink(pool: NodePool) -> str | None:
    if pool.instance.gpu_count == 1:
        return _gpu(pool) or f"{pool.instance_type} has one GPU: no NVLink peer"
    return _gpu(pool) or (None if pool.instance.nvlink else f"{_spec(pool).name} has no NVLink")


def _mig(pool: NodePool) -> str | None:
    return _gpu(pool) or (None if pool.mig else f"no MIG layout (nodePools.{pool.name}.mig)")


def _efa(pool: NodePool) -> str | None:
    return None if pool.fabric == "efa" else f"fabric is {pool.fabric!r}"


def _hugepages(pool: NodePool) -> str | None:
    return None if pool.hugepages_mib > 0 else f"nodePools.{pool.name}.hugepagesMiB is 0"


def _infiniband(pool: NodePool) -> str | None:
    return None if pool.fabric == "infiniband" else f"fabric is {pool.fabric!r}"


def _rdma(pool: NodePool) -> str | None:
    return None if pool.fabric in ("efa", "infiniband") else f"fabric is {pool.fabric!r}"


def _burn_in(pool: NodePool) -> str | None:
    if pool.mig:
        return f"MIG layout {pool.mig}: a slice cannot reach a whole GPU's peak"
    return _gpu(pool)


# ---------------------------------------------------------------------------------------------
# the checks


def _spec(pool: NodePool) -> GpuSpec:
    spec = pool.instance.gpu
    if spec is None:  # applies() keeps GPU checks off CPU pools
        raise CannotRun(f"{pool.instance_type} has no GPU in the catalog")
    return spec


def _gpu_rows(probe: Probe) -> list[parsers.GpuRow]:
    rows = _parsed(parsers.parse_gpu_rows, probe.output(CMD_GPUS), GPU_FIELDS)
    if not rows:
        raise CannotRun("nvidia-smi lists no GPU")
    return rows


def _parsed(parse: Callable[..., T], *args: object) -> T:
    try:
        return parse(*args)
    except parsers.ParseError as err:
        raise CannotRun(f"unexpected output: {err}") from None


def _gpus_where(rows: list[parsers.GpuRow], bad: Callable[[parsers.GpuRow], bool]) -> str:
    return ", ".join(str(r.index) for r in rows if bad(r))


def check_host(probe: Probe, pool: NodePool) -> str:
    return probe.output(CMD_UNAME).strip()


def check_driver(probe: Probe, pool: NodePool) -> str:
    try:
        text = probe.output(CMD_DRIVER)
    except CannotRun as err:
        raise CheckFailed(f"NVIDIA kernel module not loaded: {err}") from None
    have = _parsed(parsers.parse_driver_version, text)
    need = pool.node_check.driver_min_version
    if parsers.parse_version(have) < parsers.parse_version(need):
        raise CheckFailed(f"driver {have} is older than {need} (nodePools.{pool.name}.nodeCheck.driverMinVersion)")
    return f"driver {have} (>= {need})"


def check_gpus(probe: Probe, pool: NodePool) -> str:
    rows, spec, want = _gpu_rows(probe), _spec(pool), pool.instance.gpu_count
    problems = [f"GPU {r.index} is {r.name!r}" for r in rows if r.name != spec.name]
    if len(rows) != want:
        problems.insert(0, f"{len(rows)} GPUs visible")
    if problems:
        raise CheckFailed(f"{'; '.join(problems)}; {pool.instance_type} has {want} x {spec.name}")
    return f"{want} x {spec.name}"


def check_persistence(probe: Probe, pool: NodePool) -> str:
    rows = _gpu_rows(probe)
    if off := _gpus_where(rows, lambda r: r.persistence_mode != "Enabled"):
        raise CheckFailed(f"persistence mode off on GPU {off} (run nvidia-persistenced)")
    return f"on for {len(rows)} GPUs"


def check_ecc(probe: Probe, pool: NodePool) -> str:
    rows = _gpu_rows(probe)
    remaps = _parsed(parsers.parse_remapped_rows, probe.output(CMD_REMAPPED_ROWS))
    problems = []
    if off := _gpus_where(rows, lambda r: r.ecc_mode != "Enabled"):
        problems.append(f"ECC not enabled on GPU {off}")
    if pending := [r.bus_id for r in remaps if r.pending]:
        problems.append(f"row remapping pending on {', '.join(pending)} (reset the GPU)")
    if failed := [r.bus_id for r in remaps if r.failure]:
        problems.append(f"row remapping failed on {', '.join(failed)} (replace the GPU)")
    if problems:
        raise CheckFailed("; ".join(problems))
    return f"ECC on for {len(rows)} GPUs; no pending or failed row remaps"


def check_xid(probe: Probe, pool: NodePool) -> str:
    read = probe.run(CMD_KERNEL_LOG)
    if read.rc != 0:
        raise CannotRun("cannot read the kernel log (the journal has no kernel messages and dmesg failed): "
                        + describe_failure("dmesg", read.rc, read.stderr or read.stdout))
    log = read.stdout
    if not [line for line in log.splitlines() if line.strip() and not line.startswith("-- ")]:
        uid = probe.run(CMD_UID)
        if uid.rc == 0 and uid.stdout.strip() == "0":
            raise CannotRun("the kernel log is empty although read as root: the journal holds no kernel messages "
                            "and the ring buffer is empty (cleared with dmesg -C?); XIDs cannot be ruled out")
        raise CannotRun("the kernel log is empty: reading it needs root (journalctl --dmesg, dmesg)")
    xids = parsers.parse_xids(log)
    if xids:
        events = ", ".join(f"XID {xid} on PCI:{bus}" for bus, xid in xids)
        raise CheckFailed(f"{len(xids)} XID event(s) since boot: {events}")
    return "no XID since boot"


def check_nvlink(probe: Probe, pool: NodePool) -> str:
    gpus = parsers.parse_nvlink_status(probe.output(CMD_NVLINK))
    want = _spec(pool).nvlink_links
    if not gpus:
        raise CannotRun("`nvidia-smi nvlink --status` lists no GPU")
    problems = []
    for index, links in sorted(gpus.items()):
        down = [f"link {n} {state}" for n, state in sorted(links.items()) if not parsers.link_is_up(state)]
        up = len(links) - len(down)
        if up < want:
            problems.append(f"GPU {index}: {up}/{want} links up" + (f" ({', '.join(down)})" if down else ""))
    if problems:
        raise CheckFailed("; ".join(problems))
    return f"{len(gpus)} GPUs x {want} links up"


def check_pcie(probe: Probe, pool: NodePool) -> str:
    rows, spec = _gpu_rows(probe), _spec(pool)

    def below(value: str, want: int) -> bool:
        return not value.isdigit() or int(value) < want

    problems = [f"GPU {r.index}: Gen{r.pcie_gen_max} x{r.pcie_width}" for r in rows
                if below(r.pcie_gen_max, spec.pcie_gen) or below(r.pcie_width, spec.pcie_width)]
    if problems:
        raise CheckFailed(f"{'; '.join(problems)}; expected Gen{spec.pcie_gen} x{spec.pcie_width}")
    return f"{len(rows)} GPUs at Gen{spec.pcie_gen} x{spec.pcie_width}"


def check_mig(probe: Probe, pool: NodePool) -> str:
    rows = _gpu_rows(probe)
    if off := _gpus_where(rows, lambda r: r.mig_mode != "Enabled"):
        raise CheckFailed(f"MIG mode not enabled on GPU {off}; layout {pool.mig} needs it on every GPU")
    return f"MIG enabled on {len(rows)} GPUs (layout {pool.mig})"


def check_efa(probe: Probe, pool: NodePool) -> str:
    devices = parsers.parse_efa_devices(probe.output(CMD_EFA))
    want = pool.instance.efa_devices
    if len(devices) != want:
        raise CheckFailed(f"{len(devices)} EFA devices, expected {want} on {pool.instance_type}")
    return f"{want} EFA devices"


def check_hugepages(probe: Probe, pool: NodePool) -> str:
    have = _parsed(parsers.parse_hugepages_mib, probe.output(CMD_MEMINFO))
    if have < pool.hugepages_mib:
        raise CheckFailed(f"{have} MiB of huge pages, expected at least {pool.hugepages_mib} MiB "
                          f"(nodePools.{pool.name}.hugepagesMiB)")
    return f"{have} MiB of huge pages (>= {pool.hugepages_mib})"


def check_infiniband(probe: Probe, pool: NodePool) -> str:
    ports = _parsed(parsers.parse_ibstat, probe.output(CMD_IBSTAT))
    inst = pool.instance
    ib = [p for p in ports if p.link_layer == "InfiniBand"]
    good = [p for p in ib if p.state == "Active" and p.rate_gbps >= inst.ib_rate_gbps]
    bad = [f"{p.name} {p.state} ({p.physical_state}, {p.rate_gbps:g} Gb/s)" for p in ib if p not in good]
    if len(good) < inst.ib_ports:
        raise CheckFailed(f"{len(good)} of {inst.ib_ports} InfiniBand ports Active at {inst.ib_rate_gbps} Gb/s"
                          + (f"; {', '.join(bad)}" if bad else f" ({len(ports)} ports listed, "
                             f"{len(ib)} with link layer InfiniBand)"))
    return f"{len(good)} InfiniBand ports Active at {inst.ib_rate_gbps} Gb/s" + (
        f" (also listed: {', '.join(bad)})" if bad else "")


def check_memlock(probe: Probe, pool: NodePool) -> str:
    soft, hard = _parsed(parsers.parse_memlock, probe.output(CMD_CONTAINERD_LIMITS))
    if (soft, hard) != ("unlimited", "unlimited"):
        raise CheckFailed(f"containerd runs with locked memory {soft}/{hard} bytes (soft/hard): containers "
                          f"inherit it and cannot register {pool.fabric} RDMA buffers; set LimitMEMLOCK=infinity "
                          "in a containerd.service drop-in (docs/serving.md, 'Locked memory for RDMA') and restart "
                          "containerd")
    return "containerd's locked-memory limit is unlimited (soft and hard)"


def check_container_runtime(probe: Probe, pool: NodePool) -> str:
    runtimes, default = _parsed(parsers.parse_nvidia_runtimes, probe.output(CMD_CONTAINERD))
    if not runtimes:
        raise CheckFailed("no containerd runtime runs nvidia-container-runtime (the NVIDIA container toolkit "
                          "has not configured containerd)")
    return "; ".join(f"runtime {name!r} -> {binary}" + (" (default)" if name == default else "")
                     for name, binary in sorted(runtimes.items()))


def _exporter_url(probe: Probe, pool: NodePool) -> tuple[str, str]:
    """(URL to fetch from the node, where it came from): the configured URL, else the operator's pod on the node."""
    if pool.node_check.dcgm_exporter_url:
        return pool.node_check.dcgm_exporter_url, f"nodePools.{pool.name}.nodeCheck.dcgmExporterUrl"
    if probe.kubectl is None:
        raise CannotRun("no cluster access to find the dcgm-exporter pod on this node; "
                        f"set nodePools.{pool.name}.nodeCheck.dcgmExporterUrl")
    names, addresses = cluster.node_of_url(probe.url, probe.kubectl)
    hostname = probe.run(CMD_HOSTNAME)
    if hostname.rc == 0 and hostname.stdout.strip():
        names.append(hostname.stdout.strip())
    pods = cluster.exporter_pods(probe.kubectl.json(["get", "pods", "-n", GPU_OPERATOR_NAMESPACE,
                                                      "-l", cluster.DCGM_EXPORTER_LABEL]))
    pod = cluster.exporter_on_node(pods, names=names, addresses=addresses, namespace=GPU_OPERATOR_NAMESPACE)
    return pod.url, f"pod {GPU_OPERATOR_NAMESPACE}/{pod.name}"


def check_dcgm_exporter(probe: Probe, pool: NodePool) -> str:
    url, source = _exporter_url(probe, pool)
    try:
        text = probe.output(dcgm_command(url))
    except CannotRun as err:
        raise CannotRun(f"DCGM exporter not reachable at {url} ({source}): {err}") from None
    samples = parsers.metric_samples(text, DCGM.GPU_UTIL)
    if not samples:
        raise CheckFailed(f"{url} ({source}) answers without {DCGM.GPU_UTIL}")
    return f"{len(samples)} {DCGM.GPU_UTIL} series from {source}"


def burn_in_script() -> str:
    """The text of burnin_script.py, sent to the node's python3 (works from an installed kit too)."""
    return importlib.resources.files("infra.nodecheck").joinpath("burnin_script.py").read_text()


def check_burn_in(probe: Probe, pool: NodePool) -> str:
    spec, nc = _spec(pool), pool.node_check
    limit = nc.burn_in_seconds + DEFAULT_BURN_IN_STARTUP_S
    run = run_bounded(probe, burn_in_script(), [str(nc.burn_in_seconds)], limit_s=limit)
    if run.leftovers:
        raise CheckFailed(f"left {len(run.leftovers)} process(es) behind (pids {', '.join(map(str, run.leftovers))}; "
                          + ("killed)" if run.killed else "still running after SIGKILL)"))
    if run.ignored_term:
        raise CheckFailed(f"burn-in did not finish within {limit} s and ignored SIGTERM: killed "
                          f"{DEFAULT_KILL_AFTER_S} s later (a process stuck in the driver: check the GPU)")
    if run.timed_out:
        raise CheckFailed(f"burn-in did not finish within {limit} s and was stopped")
    if run.rc == 127:
        raise CannotRun(f"burn-in: {describe_failure(missing_tool('python3', run.stderr), run.rc, run.stderr)}")
    if run.rc != 0:
        raise CannotRun(describe_failure("burn-in", run.rc, run.stderr))
    rows = _parsed(parsers.parse_burn_in, run.stdout)
    if not rows:
        raise CannotRun("burn-in measured no GPU")
    if len(rows) != pool.instance.gpu_count:
        raise CheckFailed(f"burn-in measured {len(rows)} GPUs; {pool.instance_type} has {pool.instance.gpu_count} "
                          f"(GPUs hidden from CUDA or failed to initialise)")
    tflops_min = nc.min_tflops_fraction * spec.bf16_dense_tflops
    gbs_min = nc.min_bandwidth_fraction * spec.memory_bandwidth_gbs
    slow = [f"GPU {r.gpu}: {r.tflops:g} TFLOP/s" for r in rows if r.tflops < tflops_min]
    slow += [f"GPU {r.gpu}: {r.bandwidth_gbs:g} GB/s" for r in rows if r.bandwidth_gbs < gbs_min]
    floor = (f"floor {tflops_min:.0f} TFLOP/s ({nc.min_tflops_fraction:.0%} of {spec.bf16_dense_tflops:g}) and "
             f"{gbs_min:.0f} GB/s ({nc.min_bandwidth_fraction:.0%} of {spec.memory_bandwidth_gbs:g})")
    if slow:
        raise CheckFailed(f"{'; '.join(slow)}; {floor}")
    low_t = min(r.tflops for r in rows)
    low_b = min(r.bandwidth_gbs for r in rows)
    return (f"{len(rows)} GPUs, lowest {low_t:g} TFLOP/s ({low_t / spec.bf16_dense_tflops:.0%} of peak), "
            f"{low_b:g} GB/s ({low_b / spec.memory_bandwidth_gbs:.0%} of peak)")


CHECKS: tuple[Check, ...] = (
    Check("host", "the node answers commands (kernel)", _always, check_host),
    Check("driver", "NVIDIA kernel module loaded, at least nodeCheck.driverMinVersion", _gpu, check_driver),
    Check("gpus", "GPU count and model equal the catalog's", _gpu, check_gpus),
    Check("persistence", "persistence mode on for every GPU", _gpu, check_persistence),
    Check("ecc", "ECC on, no pending or failed row remaps", _gpu, check_ecc),
    Check("xid", "no NVIDIA XID in the kernel log since boot", _gpu, check_xid),
    Check("nvlink", "every NVLink link of every GPU up", _nvlink, check_nvlink),
    Check("pcie", "PCIe generation and width as the catalog's", _gpu, check_pcie),
    Check("mig", "MIG mode on for the pool's MIG layout", _mig, check_mig),
    Check("efa", "fi_info shows the catalog's EFA device count", _efa, check_efa),
    Check("hugepages", "huge pages reserved as nodePools.X.hugepagesMiB", _hugepages, check_hugepages),
    Check("infiniband", "ibstat: the catalog's InfiniBand ports Active at its rate", _infiniband, check_infiniband),
    Check("memlock", "containerd (and so every container) may lock unlimited memory for RDMA", _rdma, check_memlock),
    Check("container-runtime", "containerd has the NVIDIA container runtime", _gpu, check_container_runtime),
    Check("dcgm-exporter", f"the node's DCGM exporter answers with {DCGM.GPU_UTIL}", _gpu, check_dcgm_exporter),
    Check("burn-in", "BF16 matmul TFLOP/s and memory bandwidth per GPU above the nodeCheck floors", _burn_in,
          check_burn_in),
)
