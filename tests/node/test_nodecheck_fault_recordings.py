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
    "driver": [("nodes-aws", "h100-strict", "p5.48xlarge")],  # 570.133.20 under the pool's 575.51 floor
    "gpus": [(*H100, "p5.48xlarge+wrong-gpu-count")],
    "persistence": [(*H100, "p5.48xlarge+persistence-off")],
    "ecc": [(*H100, "p5.48xlarge+row-remap-pending"), (*H100, "p5.48xlarge+row-remap-failure"),
            (*H100, "p5.48xlarge+ecc-off")],
    "xid": [(*H100, "p5.48xlarge+xid"), (*H100, "p5.48xlarge+kernel-log-unreadable")],
    "nvlink": [(*H100, "p5.48xlarge+nvlink-down")],
    "pcie": [(*H100, "p5.48xlarge+pcie-x8")],
    "mig": [("nodes-aws", "a100-mig", "p4d.24xlarge+mig-partial"), ("nodes-aws", "a100-mig", "p4d.24xlarge")],
    "efa": [(*H100, "p5.48xlarge+efa-31")],
    "hugepages": [("nodes-aws", "h100-strict", "p5.48xlarge")],  # 5120 MiB under the pool's 8192
    "infiniband": [("nodes-onprem", "h100-ib", "dgx-h100+ib-port-down")],
    "memlock": [(*H100, "p5.48xlarge+memlock-8m")],
    "container-runtime": [(*H100, "p5.48xlarge+no-nvidia-runtime")],
    "dcgm-exporter": [(*H100, "p5.48xlarge+exporter-not-ready"), (*H100, "p5.48xlarge+exporter-without-gpu-util")],
    "burn-in": [(*H100, "p5.48xlarge+slow-gpu"), (*H100, "p5.48xlarge+burn-in-7-gpus"),
                (*H100, "p5.48xlarge+burn-in-ignores-term")],
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
    (*H100, "p5.48xlarge+row-remap-failure", "ecc", "row remapping failed on 00000000:64:00.0 (replace the GPU)",
     NA_EFA_POOL),
    (*H100, "p5.48xlarge+no-nvidia-runtime", "container-runtime",
     "no containerd runtime runs nvidia-container-runtime (the NVIDIA container toolkit has not configured "
     "containerd)", NA_EFA_POOL),
    (*H100, "p5.48xlarge+kernel-log-unreadable", "xid",
     "could not run: the kernel log is empty: reading it needs root (journalctl --dmesg, dmesg)", NA_EFA_POOL),
    (*H100, "p5.48xlarge+exporter-without-gpu-util", "dcgm-exporter",
     "http://10.1.77.201:9400/metrics (pod gpu-operator/nvidia-dcgm-exporter-7xk2p) answers without "
     "DCGM_FI_DEV_GPU_UTIL", NA_EFA_POOL),
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
