"""The node-check parsers, profile applicability and the burn-in script's arithmetic, without a node."""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from infra.nodecheck import parsers as p
from infra.nodecheck import plan
from infra.nodecheck.checks import CMD_GPUS, CheckFailed, check_mig
from infra.nodecheck.probe import CannotRun, Probe
from infra.nodecheck.runner import load_pool

STACKS = Path(__file__).resolve().parents[1] / "node" / "stacks"


@dataclass
class Answer:
    rc: int
    stdout: str
    stderr: str = ""


class StubHost:
    def __init__(self, answers: dict[str, Answer]) -> None:
        self.answers = answers

    def run(self, command: str) -> Answer:
        return self.answers.get(command, Answer(127, "", f"sh: 1: {command.split()[0]}: not found"))


def test_versions_compare_as_integers() -> None:
    assert p.parse_version("550.100") > p.parse_version("550.54.15")
    assert p.parse_version("575") > p.parse_version("570.133.20")
    with pytest.raises(p.ParseError, match="'r550' is not a version"):
        p.parse_version("r550")


@pytest.mark.parametrize(("text", "version"), [
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build  "
     "(dvs-builder@U16-I3-D08-1-2)  Thu Mar 27 00:37:46 UTC 2025\nGCC version:  gcc version 11.5.0\n", "570.133.20"),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024\n"
     "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) \n", "550.127.05"),
    ("NVRM version: NVIDIA UNIX aarch64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024", "535.183.01"),
])
def test_driver_version_from_both_kernel_module_flavours(text: str, version: str) -> None:
    assert p.parse_driver_version(text) == version


def test_gpu_rows_keep_nvidia_smi_text_and_reject_other_shapes() -> None:
    fields = ("index", "name", "pci.bus_id", "driver_version", "persistence_mode", "ecc.mode.current",
              "pcie.link.gen.max", "pcie.link.width.current", "mig.mode.current")
    rows = p.parse_gpu_rows("0, NVIDIA L40S, 00000000:9E:00.0, 570.133.20, Enabled, Enabled, 4, 16, [N/A]\n", fields)
    assert rows == [p.GpuRow(0, "NVIDIA L40S", "00000000:9E:00.0", "570.133.20", "Enabled", "Enabled", "4", "16",
                             "[N/A]")]
    with pytest.raises(p.ParseError, match="line 1: expected 9 fields"):
        p.parse_gpu_rows("No devices were found\n", fields)


def test_remap_flags_accept_csv_and_query_spellings() -> None:
    rows = p.parse_remapped_rows("00000000:53:00.0, 0, 0, 0, 0\n00000000:64:00.0, 3, 1, 1, 0\n"
                                 "00000000:75:00.0, 0, 2, No, Yes\n00000000:9E:00.0, [N/A], [N/A], [N/A], [N/A]\n")
    assert [(r.bus_id, r.pending, r.failure) for r in rows] == [
        ("00000000:53:00.0", False, False), ("00000000:64:00.0", True, False),
        ("00000000:75:00.0", False, True), ("00000000:9E:00.0", False, False)]


def test_nvlink_status_and_link_state() -> None:
    gpus = p.parse_nvlink_status("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n\t Link 0: 26.562 GB/s\n"
                                 "\t Link 1: <inactive>\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)\n"
                                 "\t Link 0: 0 GB/s\n")
    assert gpus == {0: {0: "26.562 GB/s", 1: "<inactive>"}, 1: {0: "0 GB/s"}}
    assert [p.link_is_up(s) for s in ("26.562 GB/s", "25 GB/s", "<inactive>", "0 GB/s")] == [True, True, False, False]


def test_xids_from_journal_and_dmesg_lines() -> None:
    log = ("NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.133.20\n"
           "NVRM: Xid (PCI:0000:97:00): 119, pid=3312, name=nvidia-smi, Timeout after 6s\n"
           "[ 8123.004512] NVRM: Xid (PCI:0000:53:00): 79, pid='<unknown>', name=<unknown>, "
           "GPU has fallen off the bus.\n")
    assert p.parse_xids(log) == [("0000:97:00", 119), ("0000:53:00", 79)]


def test_efa_devices_are_counted_once_per_domain() -> None:
    block = "provider: {p}\n    fabric: {f}\n    domain: {d}\n    version: 201.0\n    type: FI_EP_RDM\n"
    text = "".join(block.format(p=pr, f=f, d=d) for pr, f, d in [
        ("efa", "efa-direct", "rdmap79s0-rdm"), ("efa", "efa", "rdmap79s0-rdm"),
        ("efa", "efa", "rdmap80s0-rdm"), ("shm", "shm", "shm")])
    assert p.parse_efa_devices(text) == ["rdmap79s0", "rdmap80s0"]


def test_ibstat_ports_with_link_layers() -> None:
    text = ("CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tPort 1:\n\t\tState: Active\n"
            "\t\tPhysical state: LinkUp\n\t\tRate: 400\n\t\tLink layer: InfiniBand\n"
            "CA 'mlx5_1'\n\tCA type: MT4129\n\tNumber of ports: 2\n\tPort 1:\n\t\tState: Down\n"
            "\t\tPhysical state: Polling\n\t\tRate: 10\n\t\tLink layer: InfiniBand\n\tPort 2:\n"
            "\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 200\n\t\tLink layer: Ethernet\n")
    assert p.parse_ibstat(text) == [p.IbPort("mlx5_0", 1, "Active", "LinkUp", 400, "InfiniBand"),
                                    p.IbPort("mlx5_1", 1, "Down", "Polling", 10, "InfiniBand"),
                                    p.IbPort("mlx5_1", 2, "Active", "LinkUp", 200, "Ethernet")]


def test_hugepages_in_mib() -> None:
    assert p.parse_hugepages_mib("HugePages_Total:    2560\nHugepagesize:       2048 kB\n") == 5120
    assert p.parse_hugepages_mib("HugePages_Total:       4\nHugepagesize:    1048576 kB\n") == 4096
    with pytest.raises(p.ParseError, match="no HugePages_Total"):
        p.parse_hugepages_mib("MemTotal: 1 kB\n")


def test_nvidia_runtimes_from_containerd_config() -> None:
    v2 = ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "runc"\n'
          '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
          'BinaryName = "/usr/bin/nvidia-container-runtime"\n'
          '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\nBinaryName = "/usr/sbin/runc"\n')
    assert p.parse_nvidia_runtimes(v2) == ({"nvidia": "/usr/bin/nvidia-container-runtime"}, "runc")
    assert p.parse_nvidia_runtimes("version = 3\n") == ({}, "")
    with pytest.raises(p.ParseError, match="not valid TOML"):
        p.parse_nvidia_runtimes("[plugins\n")


def test_metric_samples_skip_comments_and_prefix_matches() -> None:
    text = ("# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
            'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 0\nDCGM_FI_DEV_GPU_UTIL_X{gpu="0"} 1\nDCGM_FI_DEV_GPU_UTIL 3\n')
    assert p.metric_samples(text, "DCGM_FI_DEV_GPU_UTIL") == ['DCGM_FI_DEV_GPU_UTIL{gpu="0"} 0',
                                                               "DCGM_FI_DEV_GPU_UTIL 3"]


def test_burn_in_rows_and_per_gpu_errors() -> None:
    assert p.parse_burn_in('{"gpu": 0, "tflops": 712.4, "bandwidth_gbs": 2921.7}\n') == [p.BurnInRow(0, 712.4, 2921.7)]
    with pytest.raises(p.ParseError, match="GPU 2: OutOfMemoryError: CUDA out of memory"):
        p.parse_burn_in('{"gpu": 2, "error": "OutOfMemoryError: CUDA out of memory"}\n')
    with pytest.raises(p.ParseError, match="not JSON"):
        p.parse_burn_in("Traceback (most recent call last):\n")


def test_mig_pool_profile_checks_mig_mode_and_skips_the_whole_gpu_burn_in() -> None:
    pool = load_pool("nodes-onprem", "a100-mig", STACKS)
    why = {check.id: reason for check, reason in plan(pool)}
    assert why["mig"] is None
    assert why["burn-in"] == "MIG layout all-1g.10gb: a slice cannot reach a whole GPU's peak"
    line = "{i}, NVIDIA A100-SXM4-80GB, 00000000:{b}:00.0, 550.127.05, Enabled, Enabled, 4, 16, {m}\n"
    enabled = "".join(line.format(i=i, b=b, m="Enabled") for i, b in enumerate(("07", "0F")))
    assert check_mig(Probe(StubHost({CMD_GPUS: Answer(0, enabled)})), pool) == \
        "MIG enabled on 2 GPUs (layout all-1g.10gb)"
    mixed = line.format(i=0, b="07", m="Enabled") + line.format(i=1, b="0F", m="Disabled")
    with pytest.raises(CheckFailed, match=r"^MIG mode not enabled on GPU 1; layout all-1g.10gb needs it on every GPU$"):
        check_mig(Probe(StubHost({CMD_GPUS: Answer(0, mixed)})), pool)
    with pytest.raises(CannotRun, match=r"^`nvidia-smi --query-gpu=.*` failed \(exit 9\): NVIDIA-SMI has failed"):
        check_mig(Probe(StubHost({CMD_GPUS: Answer(9, "", "NVIDIA-SMI has failed because it couldn't "
                                                          "communicate with the NVIDIA driver.")})), pool)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fake_torch(clock: FakeClock) -> types.ModuleType:
    """Just enough of torch for one GPU: a matmul takes 1 ms, a 1 GiB copy 0.5 ms of fake time."""

    class Tensor:
        def copy_(self, src: Tensor) -> None:
            clock.now += 0.0005

    torch = types.ModuleType("torch")
    torch.bfloat16, torch.uint8 = "bf16", "u8"  # type: ignore[attr-defined]
    torch.device = lambda kind, index: (kind, index)  # type: ignore[attr-defined]
    torch.randn = lambda *a, **k: Tensor()  # type: ignore[attr-defined]
    torch.empty = lambda *a, **k: Tensor()  # type: ignore[attr-defined]
    torch.empty_like = lambda t: Tensor()  # type: ignore[attr-defined]

    def mm(a: Tensor, b: Tensor, out: Tensor) -> None:
        clock.now += 0.001

    torch.mm = mm  # type: ignore[attr-defined]
    torch.cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 1,  # type: ignore[attr-defined]
                                       synchronize=lambda device: None)
    return torch


def test_burn_in_script_reports_what_the_parser_reads(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from infra.nodecheck import burnin_script

    clock = FakeClock()
    monkeypatch.setitem(sys.modules, "torch", fake_torch(clock))
    monkeypatch.setattr(burnin_script.time, "perf_counter", clock)
    assert burnin_script.main(["-", "aifactory-node-check-0", "0.2"]) == 0
    out = capsys.readouterr().out
    # 2 * 8192^3 flop per 1 ms = 1099.5 TFLOP/s; 2 GiB moved per 0.5 ms = 4295.0 GB/s
    assert json.loads(out) == {"gpu": 0, "tflops": 1099.5, "bandwidth_gbs": 4295.0}
    assert p.parse_burn_in(out) == [p.BurnInRow(0, 1099.5, 4295.0)]


def test_burn_in_script_without_torch_exits_3(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from infra.nodecheck import burnin_script

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    assert burnin_script.main(["-", "aifactory-node-check-0", "1"]) == 3
    assert "burn-in needs PyTorch with CUDA on the node" in capsys.readouterr().err


@pytest.mark.parametrize(("stderr", "tool"), [
    ("sh: 1: nvidia-smi: not found", "nvidia-smi"),  # dash
    ("/bin/sh: 1: fi_info: not found", "fi_info"),  # dash as /bin/sh
    ("bash: line 1: ibstat: command not found", "ibstat"),  # bash -c
    ("bash: curl: command not found", "curl"),  # interactive bash
    ("sh: dmesg: not found", "dmesg"),  # busybox ash
    ("timeout: failed to run command \u2018python3\u2019: No such file or directory", "python3"),  # GNU, UTF-8
    ("timeout: failed to run command 'mpirun': No such file or directory", "mpirun"),  # GNU, C locale
    ("", "journalctl"),  # nothing said: the command's first word
])
def test_the_missing_program_is_read_from_what_the_shell_said(stderr: str, tool: str) -> None:
    from infra.nodecheck.probe import missing_tool

    assert missing_tool("journalctl --dmesg || dmesg", stderr) == tool
