"""node-check against recorded tool output of healthy and broken GPU nodes (p5, p4d, DGX H100 on InfiniBand).

Every case asserts the full outcome: which checks fail (with their exact reason), that all the other
applicable checks pass, and which are not applicable for the pool's profile.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infra.nodecheck import check_node, load_pool, node_check_command
from infra.nodecheck import checks as nc
from tests.node import replay

STACKS = Path(__file__).resolve().parent / "stacks"

NA_EFA_POOL = {"mig", "infiniband"}
NA_IB_POOL = {"mig", "efa", "hugepages"}
ALL = [c.id for c in nc.CHECKS]


def outcome(stack: str, pool: str, host: str, **kw: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    results = check_node(replay.replay_host(host, **kw), load_pool(stack, pool, STACKS), label=host,
                         kubectl=replay.replay_kubectl(host))
    assert [r.check for r in results] == ALL
    return {r.check: (r.status, r.detail) for r in results}


def statuses(result: dict[str, tuple[str, str]]) -> dict[str, set[str]]:
    by: dict[str, set[str]] = {"pass": set(), "fail": set(), "n/a": set()}
    for check, (status, _) in result.items():
        by[status].add(check)
    return by


@pytest.mark.parametrize(("stack", "pool", "host", "na"), [
    ("nodes-aws", "h100", "p5.48xlarge", NA_EFA_POOL),
    ("nodes-aws", "a100", "p4d.24xlarge", NA_EFA_POOL),
    ("nodes-onprem", "h100-ib", "dgx-h100", NA_IB_POOL),
])
def test_healthy_nodes_pass_every_applicable_check(stack: str, pool: str, host: str, na: set[str]) -> None:
    result = outcome(stack, pool, host)
    assert statuses(result) == {"pass": set(ALL) - na, "fail": set(), "n/a": na}


def test_healthy_p5_details_name_what_was_verified() -> None:
    result = outcome("nodes-aws", "h100", "p5.48xlarge")
    assert {k: v[1] for k, v in result.items() if v[0] == "pass"} == {
        "host": "Linux 6.1.132-147.221.amzn2023.x86_64",
        "driver": "driver 570.133.20 (>= 550.54.15)",
        "gpus": "8 x NVIDIA H100 80GB HBM3",
        "persistence": "on for 8 GPUs",
        "ecc": "ECC on for 8 GPUs; no pending or failed row remaps",
        "xid": "no XID since boot",
        "nvlink": "8 GPUs x 18 links up",
        "pcie": "8 GPUs at Gen5 x16",
        "efa": "32 EFA devices",
        "hugepages": "5120 MiB of huge pages (>= 5120)",
        "memlock": "containerd's locked-memory limit is unlimited (soft and hard)",
        "container-runtime": "runtime 'nvidia' -> /usr/bin/nvidia-container-runtime (default)",
        "dcgm-exporter": "8 DCGM_FI_DEV_GPU_UTIL series from pod gpu-operator/nvidia-dcgm-exporter-7xk2p",
        "burn-in": "8 GPUs, lowest 707.5 TFLOP/s (72% of peak), 2911.9 GB/s (87% of peak)",
    }
    assert result["mig"] == ("n/a", "no MIG layout (nodePools.h100.mig)")
    assert result["infiniband"] == ("n/a", "fabric is 'efa'")


def test_healthy_dgx_reads_containerd_2_config_and_ignores_ethernet_ports() -> None:
    result = outcome("nodes-onprem", "h100-ib", "dgx-h100")
    assert result["infiniband"] == ("pass", "8 InfiniBand ports Active at 400 Gb/s")
    assert result["container-runtime"] == ("pass", "runtime 'nvidia' -> /usr/local/nvidia/toolkit/"
                                                   "nvidia-container-runtime (default); runtime 'nvidia-cdi' -> "
                                                   "/usr/local/nvidia/toolkit/nvidia-container-runtime.cdi")
    assert result["driver"] == ("pass", "driver 550.127.05 (>= 550.54.15)")
    assert result["efa"] == ("n/a", "fabric is 'infiniband'")
    assert result["hugepages"] == ("n/a", "nodePools.h100-ib.hugepagesMiB is 0")


@pytest.mark.parametrize(("stack", "pool", "host", "check", "detail"), [
    ("nodes-aws", "h100", "p5.48xlarge+xid", "xid",
     "1 XID event(s) since boot: XID 119 on PCI:0000:97:00"),
    ("nodes-aws", "h100", "p5.48xlarge+nvlink-down", "nvlink",
     "GPU 3: 17/18 links up (link 7 <inactive>)"),
    ("nodes-aws", "h100", "p5.48xlarge+efa-31", "efa",
     "31 EFA devices, expected 32 on p5.48xlarge"),
    # containerd's upstream unit sets no LimitMEMLOCK: systemd's default (8 MiB since v253) reaches containers
    ("nodes-aws", "h100", "p5.48xlarge+memlock-8m", "memlock",
     "containerd runs with locked memory 8388608/8388608 bytes (soft/hard): containers inherit it and cannot "
     "register efa RDMA buffers; set LimitMEMLOCK=infinity in a containerd.service drop-in (docs/serving.md, "
     "'Locked memory for RDMA') and restart containerd"),
    ("nodes-aws", "h100", "p5.48xlarge+slow-gpu", "burn-in",
     "GPU 5: 598.3 TFLOP/s; floor 692 TFLOP/s (70% of 989) and 2345 GB/s (70% of 3350)"),
    ("nodes-onprem", "h100-ib", "dgx-h100+ib-port-down", "infiniband",
     "7 of 8 InfiniBand ports Active at 400 Gb/s; mlx5_5/1 Down (Polling, 10 Gb/s)"),
])
def test_one_fault_fails_exactly_its_check(stack: str, pool: str, host: str, check: str, detail: str) -> None:
    result = outcome(stack, pool, host)
    na = NA_IB_POOL if "dgx" in host else NA_EFA_POOL
    assert statuses(result) == {"pass": set(ALL) - na - {check}, "fail": {check}, "n/a": na}
    assert result[check] == ("fail", detail)


def test_stack_config_sets_driver_floor_performance_floor_and_hugepages() -> None:
    result = outcome("nodes-aws", "h100-strict", "p5.48xlarge")
    assert statuses(result)["fail"] == {"driver", "hugepages", "burn-in"}
    assert result["driver"][1] == ("driver 570.133.20 is older than 575.51 "
                                   "(nodePools.h100-strict.nodeCheck.driverMinVersion)")
    assert result["hugepages"][1] == ("5120 MiB of huge pages, expected at least 8192 MiB "
                                      "(nodePools.h100-strict.hugepagesMiB)")
    assert result["burn-in"][1] == (
        "GPU 0: 712.4 TFLOP/s; GPU 1: 718.9 TFLOP/s; GPU 2: 709.6 TFLOP/s; GPU 3: 715.2 TFLOP/s; "
        "GPU 4: 720.3 TFLOP/s; GPU 5: 711.8 TFLOP/s; GPU 6: 707.5 TFLOP/s; GPU 7: 716.1 TFLOP/s; "
        "floor 742 TFLOP/s (75% of 989) and 2345 GB/s (70% of 3350)")


def test_a_check_that_applies_but_cannot_run_fails_with_the_tools_reason() -> None:
    result = outcome("nodes-aws", "a100", "p4d.24xlarge", missing=("fi_info-efa.txt", "dcgm-exporter-metrics.txt"))
    assert statuses(result)["fail"] == {"efa", "dcgm-exporter"}
    assert result["efa"][1] == ("could not run: fi_info: command not found on the node (exit 127): "
                                "sh: 1: fi_info: not found")
    assert result["dcgm-exporter"][1] == ("could not run: DCGM exporter not reachable at "
                                          "http://10.1.64.117:9400/metrics (pod gpu-operator/nvidia-dcgm-exporter-"
                                          "7xk2p): curl: command not found on the node (exit 127): sh: 1: curl: "
                                          "not found")


def test_a_node_of_another_type_fails_on_model_pcie_efa_and_nvlink() -> None:
    result = outcome("nodes-aws", "h100", "p4d.24xlarge")  # a p4d node labelled into the p5 pool
    assert statuses(result)["fail"] == {"gpus", "pcie", "efa", "nvlink", "burn-in"}
    assert result["gpus"] == ("fail", "GPU 0 is 'NVIDIA A100-SXM4-40GB'; GPU 1 is 'NVIDIA A100-SXM4-40GB'; "
                                      "GPU 2 is 'NVIDIA A100-SXM4-40GB'; GPU 3 is 'NVIDIA A100-SXM4-40GB'; "
                                      "GPU 4 is 'NVIDIA A100-SXM4-40GB'; GPU 5 is 'NVIDIA A100-SXM4-40GB'; "
                                      "GPU 6 is 'NVIDIA A100-SXM4-40GB'; GPU 7 is 'NVIDIA A100-SXM4-40GB'; "
                                      "p5.48xlarge has 8 x NVIDIA H100 80GB HBM3")
    assert result["pcie"] == ("fail", "GPU 0: Gen4 x16; GPU 1: Gen4 x16; GPU 2: Gen4 x16; GPU 3: Gen4 x16; "
                                      "GPU 4: Gen4 x16; GPU 5: Gen4 x16; GPU 6: Gen4 x16; GPU 7: Gen4 x16; "
                                      "expected Gen5 x16")
    assert result["efa"] == ("fail", "4 EFA devices, expected 32 on p5.48xlarge")
    assert result["nvlink"] == ("fail", "; ".join(f"GPU {i}: 12/18 links up" for i in range(8)))


def test_the_node_is_asked_once_per_command_and_the_burn_in_is_bounded_and_verified() -> None:
    host = replay.replay_host("p5.48xlarge")
    check_node(host, load_pool("nodes-aws", "h100", STACKS), label="p5")
    commands = host.backend.commands
    assert commands.count(nc.CMD_GPUS) == 1
    assert len(commands) == len(set(commands))
    burn = [c for c in commands if "python3 - " in c]
    assert len(burn) == 1
    lines = burn[0].splitlines()
    m = re.fullmatch(r"timeout --verbose --kill-after=10 130 python3 - (aifactory-node-check-[0-9a-f]{12}) 10 "
                     r"<<'AIFACTORY_NODE_CHECK_EOF' >\"\$out\" 2>\"\$err\"", lines[1])
    assert m is not None, lines[1]
    assert burn[0] == "\n".join([lines[0], lines[1], nc.burn_in_script(), "AIFACTORY_NODE_CHECK_EOF", lines[-1]])
    token = m.group(1)
    # the run's own token is looked for afterwards, after up to 2 s for SIGKILLed processes to finish exiting
    leftover = [c for c in commands if c.endswith(f"pgrep -f '[a]{token[1:]}'")]
    assert leftover == [f"i=0; while [ $i -lt 20 ]; do pgrep -f '[a]{token[1:]}' >/dev/null || exit 1; i=$((i+1)); "
                        f"sleep 0.1; done; pgrep -f '[a]{token[1:]}'"]


def test_cli_end_to_end_over_replay_urls(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    replay.register(monkeypatch)
    rc = node_check_command(stack="nodes-aws", pool="h100", hosts="replay://p5.48xlarge,replay://p5.48xlarge+efa-31",
                            stacks_dir=STACKS, kubectl=replay.replay_kubectl("p5.48xlarge"))
    out, err = capsys.readouterr()
    assert rc == 1
    lines = out.splitlines()
    assert lines[0].split() == ["HOST", "CHECK", "RESULT", "DETAIL"]
    assert len(lines) == 1 + 2 * len(ALL) + 1
    assert re.search(r"^replay://p5\.48xlarge\+efa-31\s+efa\s+FAIL\s+31 EFA devices, expected 32 on p5\.48xlarge$",
                     out, re.MULTILINE)
    assert re.search(r"^replay://p5\.48xlarge\s+efa\s+PASS\s+32 EFA devices$", out, re.MULTILINE)
    assert lines[-1] == ("node-check nodes-aws/h100 (p5.48xlarge, fabric efa): REJECTED: 2 host(s), "
                         "27 passed, 1 failed, 4 not applicable")
    assert "[replay://p5.48xlarge+efa-31] 9/14 efa: FAIL - 31 EFA devices, expected 32 on p5.48xlarge" in err
    assert "[replay://p5.48xlarge] 14/14 burn-in: PASS" in err

    assert node_check_command(stack="nodes-onprem", pool="h100-ib", hosts="replay://dgx-h100",
                              stacks_dir=STACKS, kubectl=replay.replay_kubectl("dgx-h100")) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "node-check nodes-onprem/h100-ib (dgx-h100, fabric infiniband): ACCEPTED: 1 host(s), "
        "13 passed, 0 failed, 3 not applicable")


def test_an_unusable_host_is_one_failed_row(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    replay.register(monkeypatch)
    assert node_check_command(stack="nodes-aws", pool="h100", hosts="replay://no-such-node", stacks_dir=STACKS) == 1
    out = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"replay://no-such-node  host   FAIL    host unusable: no recordings in "
                        r"\S+/no-such-node/healthy", out[1]), out[1]
    assert out[2] == ("node-check nodes-aws/h100 (p5.48xlarge, fabric efa): REJECTED: 1 host(s), 0 passed, 1 failed, "
                      "0 not applicable")
