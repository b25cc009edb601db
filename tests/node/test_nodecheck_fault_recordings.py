"""Every node check that can fail has a fault recording that fails it (tests/node/recordings/README.md).

FAULTS lists, per check of infra.nodecheck.checks.CHECKS, the recorded nodes (stack, pool, replay host) on which
it must fail; a check added to CHECKS without one fails test_every_check_has_a_fault_recording. The cases not
already asserted in test_nodecheck_replay.py / test_nodecheck_real_node.py are asserted here in full: the one
check that fails, with its exact reason, and every other applicable check passing.

nvidia-smi facts the recordings follow (nvidia-smi --help-query-gpu, --help-query-remapped-rows): persistence_mode,
ecc.mode.current and mig.mode.current read "Enabled"/"Disabled"; remapped_rows.failure is 1 when a row remap
failed (the GPU needs replacing), remapped_rows.pending 1 when one waits for a GPU reset. journalctl prints
"-- No entries --" when the caller may not read the kernel messages.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.nodecheck import check_node, load_pool
from infra.nodecheck import checks as nc
from tests.node import replay

STACKS = Path(__file__).resolve().parent / "stacks"
ALL = [c.id for c in nc.CHECKS]
NA_EFA_POOL = {"mig", "infiniband"}
# the A100 MIG pool has no fabric and no huge pages; its burn-in does not apply (a slice has no whole-GPU peak)
NA_MIG_POOL = {"efa", "hugepages", "infiniband", "memlock", "burn-in"}
H100 = ("nodes-aws", "h100")

# check -> the recorded faults that fail it: (stack, pool, replay host)
FAULTS: dict[str, list[tuple[str, str, str]]] = {
    "driver": [("nodes-aws", "h100-strict", "p5.48xlarge"),  # 570.133.20 under the pool's 575.51 floor
               (*H100, "p5.48xlarge+no-driver")],
    "gpus": [(*H100, "p5.48xlarge+wrong-gpu-count"), (*H100, "p5.48xlarge+mixed-gpus")],
    "persistence": [(*H100, "p5.48xlarge+persistence-off")],
    "ecc": [(*H100, "p5.48xlarge+row-remap-pending"), (*H100, "p5.48xlarge+row-remap-failure"),
            (*H100, "p5.48xlarge+ecc-off"), (*H100, "p5.48xlarge+remaps-on-three-gpus")],
    "xid": [(*H100, "p5.48xlarge+xid"), (*H100, "p5.48xlarge+kernel-log-unreadable"),
            (*H100, "p5.48xlarge+kernel-log-fails"), (*H100, "p5.48xlarge+kernel-log-empty-root"),
            (*H100, "p5.48xlarge+xid-twice")],
    "nvlink": [(*H100, "p5.48xlarge+nvlink-down"), (*H100, "p5.48xlarge+nvlink-two-down")],
    "pcie": [(*H100, "p5.48xlarge+pcie-x8")],
    "mig": [("nodes-aws", "a100-mig", "p4d.24xlarge+mig-partial"), ("nodes-aws", "a100-mig", "p4d.24xlarge")],
    "efa": [(*H100, "p5.48xlarge+efa-31")],
    "hugepages": [("nodes-aws", "h100-strict", "p5.48xlarge")],  # 5120 MiB under the pool's 8192
    "infiniband": [("nodes-onprem", "h100-ib", "dgx-h100+ib-port-down"),
                   ("nodes-onprem", "h100-ib", "dgx-h100+ib-port-slow"),
                   ("nodes-onprem", "h100-ib", "dgx-h100+ib-ethernet-only"),
                   ("nodes-onprem", "h100-ib", "dgx-h100+ib-two-ports-down")],
    "memlock": [(*H100, "p5.48xlarge+memlock-8m")],
    "container-runtime": [(*H100, "p5.48xlarge+no-nvidia-runtime")],
    "dcgm-exporter": [(*H100, "p5.48xlarge+exporter-not-ready"), (*H100, "p5.48xlarge+exporter-without-gpu-util")],
    "burn-in": [(*H100, "p5.48xlarge+slow-gpu"), (*H100, "p5.48xlarge+burn-in-7-gpus"),
                (*H100, "p5.48xlarge+burn-in-ignores-term"), (*H100, "p5.48xlarge+burn-in-timeout"),
                (*H100, "p5.48xlarge+burn-in-leftovers"), (*H100, "p5.48xlarge+burn-in-leftovers-unkillable"),
                (*H100, "p5.48xlarge+burn-in-no-python"), (*H100, "p5.48xlarge+burn-in-cuda-error"),
                (*H100, "p5.48xlarge+burn-in-no-gpu"), (*H100, "p5.48xlarge+burn-in-slow-memory")],
}
# `host` fails only when the node cannot be asked at all: test_nodecheck_replay.py::
# test_an_unusable_host_is_one_failed_row (a replay host with no recordings).
HOST_FAULT = "tests/node/test_nodecheck_replay.py::test_an_unusable_host_is_one_failed_row"


def _outcome(stack: str, pool: str, host: str) -> dict[str, tuple[str, str]]:
    results = check_node(replay.replay_host(host), load_pool(stack, pool, STACKS), label=host,
                         kubectl=replay.replay_kubectl(host))
    assert [r.check for r in results] == ALL
    return {r.check: (r.status, r.detail) for r in results}


def test_every_check_has_a_fault_recording() -> None:
    assert sorted(set(ALL) - set(FAULTS) - {"host"}) == []
    assert sorted(set(FAULTS) - set(ALL)) == []
    path, _, function = HOST_FAULT.partition("::")
    assert f"def {function}(" in (Path(__file__).resolve().parents[2] / path).read_text()
    for cases in FAULTS.values():
        for _, _, host in cases:
            kind, _, case = host.partition("+")
            assert (replay.RECORDINGS / kind / (case or "healthy")).is_dir(), host


@pytest.mark.parametrize(("check", "stack", "pool", "host"),
                         [(check, *case) for check, cases in FAULTS.items() for case in cases],
                         ids=lambda x: x)
def test_each_fault_recording_fails_its_check(check: str, stack: str, pool: str, host: str) -> None:
    assert _outcome(stack, pool, host)[check][0] == "fail"


@pytest.mark.parametrize(("stack", "pool", "host", "check", "detail", "na"), [
    (*H100, "p5.48xlarge+persistence-off", "persistence", "persistence mode off on GPU 4 (run nvidia-persistenced)",
     NA_EFA_POOL),
    (*H100, "p5.48xlarge+ecc-off", "ecc", "ECC not enabled on GPU 6", NA_EFA_POOL),
    (*H100, "p5.48xlarge+row-remap-failure", "ecc",
     "row remapping failed on 00000000:64:00.0, 00000000:A8:00.0 (replace the GPU)", NA_EFA_POOL),
    (*H100, "p5.48xlarge+no-nvidia-runtime", "container-runtime",
     "no containerd runtime runs nvidia-container-runtime (the NVIDIA container toolkit has not configured "
     "containerd)", NA_EFA_POOL),
    (*H100, "p5.48xlarge+kernel-log-unreadable", "xid",
     "could not run: the kernel log is empty: reading it needs root (journalctl --dmesg, dmesg)", NA_EFA_POOL),
    (*H100, "p5.48xlarge+exporter-without-gpu-util", "dcgm-exporter",
     "http://10.1.77.201:9400/metrics (pod gpu-operator/nvidia-dcgm-exporter-7xk2p) answers without "
     "DCGM_FI_DEV_GPU_UTIL", NA_EFA_POOL),
    (*H100, "p5.48xlarge+kernel-log-fails", "xid",
     "could not run: cannot read the kernel log (the journal has no kernel messages and dmesg failed): `dmesg` failed "
     "(exit 1): dmesg: read kernel buffer failed: Operation not permitted", NA_EFA_POOL),
    (*H100, "p5.48xlarge+kernel-log-empty-root", "xid",
     "could not run: the kernel log is empty although read as root: the journal holds no kernel messages and the ring "
     "buffer is empty (cleared with dmesg -C?); XIDs cannot be ruled out", NA_EFA_POOL),
    # burn-in: what the bounded run and the leftover search report (infra/nodecheck/probe.py run_bounded)
    (*H100, "p5.48xlarge+burn-in-timeout", "burn-in", "burn-in did not finish within 130 s and was stopped",
     NA_EFA_POOL),
    (*H100, "p5.48xlarge+burn-in-leftovers", "burn-in", "left 2 process(es) behind (pids 48211, 48212; killed)",
     NA_EFA_POOL),
    (*H100, "p5.48xlarge+burn-in-leftovers-unkillable", "burn-in",
     "left 2 process(es) behind (pids 48211, 48212; still running after SIGKILL)", NA_EFA_POOL),
    (*H100, "p5.48xlarge+burn-in-no-python", "burn-in",
     "could not run: burn-in: python3: command not found on the node (exit 127): sh: 2: python3: not found",
     NA_EFA_POOL),
    (*H100, "p5.48xlarge+burn-in-cuda-error", "burn-in",
     "could not run: `burn-in` failed (exit 1): RuntimeError: CUDA error: no CUDA-capable device is detected",
     NA_EFA_POOL),
    (*H100, "p5.48xlarge+burn-in-no-gpu", "burn-in", "could not run: burn-in measured no GPU", NA_EFA_POOL),
    (*H100, "p5.48xlarge+burn-in-slow-memory", "burn-in",
     "GPU 3: 2101.6 GB/s; floor 692 TFLOP/s (70% of 989) and 2345 GB/s (70% of 3350)", NA_EFA_POOL),
    ("nodes-onprem", "h100-ib", "dgx-h100+ib-port-slow", "infiniband",
     "7 of 8 InfiniBand ports Active at 400 Gb/s; mlx5_0/1 Active (LinkUp, 200 Gb/s)", {"mig", "efa", "hugepages"}),
    ("nodes-onprem", "h100-ib", "dgx-h100+ib-ethernet-only", "infiniband",
     "0 of 8 InfiniBand ports Active at 400 Gb/s (12 ports listed, 0 with link layer InfiniBand)",
     {"mig", "efa", "hugepages"}),
    # several faults of one kind are all named, in the tool's order
    (*H100, "p5.48xlarge+remaps-on-three-gpus", "ecc",
     "row remapping pending on 00000000:B9:00.0, 00000000:CA:00.0 (reset the GPU); row remapping failed on "
     "00000000:64:00.0 (replace the GPU)", NA_EFA_POOL),
    (*H100, "p5.48xlarge+xid-twice", "xid",
     "2 XID event(s) since boot: XID 119 on PCI:0000:97:00, XID 48 on PCI:0000:b9:00", NA_EFA_POOL),
    (*H100, "p5.48xlarge+nvlink-two-down", "nvlink",
     "GPU 3: 16/18 links up (link 6 <inactive>, link 7 <inactive>)", NA_EFA_POOL),
    ("nodes-onprem", "h100-ib", "dgx-h100+ib-two-ports-down", "infiniband",
     "6 of 8 InfiniBand ports Active at 400 Gb/s; mlx5_0/1 Down (Disabled, 10 Gb/s), mlx5_5/1 Down (Polling, "
     "10 Gb/s)", {"mig", "efa", "hugepages"}),
    ("nodes-aws", "a100-mig", "p4d.24xlarge+mig-partial", "mig",
     "MIG mode not enabled on GPU 7; layout all-balanced needs it on every GPU", NA_MIG_POOL),
    ("nodes-aws", "a100-mig", "p4d.24xlarge", "mig",
     "MIG mode not enabled on GPU 0, 1, 2, 3, 4, 5, 6, 7; layout all-balanced needs it on every GPU", NA_MIG_POOL),
], ids=lambda x: x if isinstance(x, str) and "+" in x else None)
def test_one_fault_fails_exactly_its_check(stack: str, pool: str, host: str, check: str, detail: str,
                                           na: set[str]) -> None:
    result = _outcome(stack, pool, host)
    assert {c for c, (s, _) in result.items() if s == "fail"} == {check}
    assert {c for c, (s, _) in result.items() if s == "n/a"} == na
    assert result[check] == ("fail", detail)


def test_a_mig_node_with_mig_on_everywhere_passes() -> None:
    result = _outcome("nodes-aws", "a100-mig", "p4d.24xlarge+mig-on")
    assert result["mig"] == ("pass", "MIG enabled on 8 GPUs (layout all-balanced)")
    assert {c for c, (s, _) in result.items() if s == "fail"} == set()


def test_a_gpu_of_another_model_and_a_missing_one_are_both_named() -> None:
    assert _outcome(*H100, "p5.48xlarge+mixed-gpus")["gpus"] == (
        "fail", "7 GPUs visible; GPU 7 is 'NVIDIA H100 PCIe'; p5.48xlarge has 8 x NVIDIA H100 80GB HBM3")


def test_without_the_kernel_module_the_driver_check_says_so_and_nvidia_smi_checks_cannot_run() -> None:
    """nvidia-smi exits 9 when the NVIDIA driver is not loaded (nvidia-smi(1), RETURN VALUE)."""
    result = _outcome(*H100, "p5.48xlarge+no-driver")
    assert result["driver"] == ("fail", "NVIDIA kernel module not loaded: `cat /proc/driver/nvidia/version` failed "
                                        "(exit 1): cat: /proc/driver/nvidia/version: No such file or directory")
    assert {c for c, (s, _) in result.items() if s == "fail"} == {
        "driver", "gpus", "persistence", "ecc", "nvlink", "pcie", "dcgm-exporter", "burn-in"}
    assert result["nvlink"] == ("fail", "could not run: `nvidia-smi nvlink --status` failed (exit 9): NVIDIA-SMI has "
                                        "failed because it couldn't communicate with the NVIDIA driver. Make sure "
                                        "that the latest NVIDIA driver is installed and running.")


def test_boundaries_pass_a_driver_at_the_floor_a_burn_in_at_the_floors_and_a_spare_ib_port_down() -> None:
    assert _outcome("nodes-aws", "h100-driver-at-floor", "p5.48xlarge")["driver"] == (
        "pass", "driver 570.133.20 (>= 570.133.20)")
    # GPU 2 measured exactly 70% of 989 TFLOP/s and of 3350 GB/s: at the floor is not below it
    assert _outcome(*H100, "p5.48xlarge+burn-in-at-floor")["burn-in"] == (
        "pass", "8 GPUs, lowest 692.3 TFLOP/s (70% of peak), 2345 GB/s (70% of peak)")
    assert _outcome("nodes-onprem", "h100-ib", "dgx-h100+ib-storage-port-down")["infiniband"] == (
        "pass", "8 InfiniBand ports Active at 400 Gb/s (also listed: mlx5_1/1 Down (Polling, 10 Gb/s), "
                "mlx5_2/1 Down (Polling, 10 Gb/s))")


def test_gpu_checks_do_not_apply_to_a_cpu_pool_nor_nvlink_to_a_gpu_without_it() -> None:
    cpu = _outcome("nodes-onprem", "cpu", "p5.48xlarge")
    assert {c: d for c, (s, d) in cpu.items() if s == "n/a" and d == "cpu-server has no GPU"}.keys() == {
        "driver", "gpus", "persistence", "ecc", "xid", "nvlink", "pcie", "mig", "container-runtime", "dcgm-exporter",
        "burn-in"}
    assert cpu["host"][0] == "pass"
    # the L40S has no NVLink (components/catalog.py, NVIDIA L40S datasheet: PCIe only)
    assert _outcome("nodes-aws", "l40s", "p5.48xlarge")["nvlink"] == ("n/a", "NVIDIA L40S has no NVLink")
