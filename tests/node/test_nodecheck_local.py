"""node-check against this machine through testinfra's local:// backend (a CPU host, no GPU).

A CPU pool's profile applies the checks that make sense on a CPU host, and they pass; a GPU pool's
profile on the same host fails every GPU check with its reason (never a skip); the bounded script runner
stops a script at its limit and finds, kills and reports a process that escaped it.
"""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest
import testinfra

from infra.nodecheck import check_node, load_pool, node_check_command
from infra.nodecheck.probe import Probe, leftover_command, new_token, run_bounded

STACKS = Path(__file__).resolve().parent / "stacks"
UNAME = f"{os.uname().sysname} {os.uname().release}"


@pytest.fixture
def local() -> Probe:
    return Probe(testinfra.get_host("local://"))


def test_cpu_pool_on_local_host_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert node_check_command(stack="nodes-onprem", pool="cpu", hosts="local://", stacks_dir=STACKS) == 0
    out, err = capsys.readouterr()
    rows = [line.split(None, 3) for line in out.splitlines()[1:-1]]
    assert rows[0] == ["local://", "host", "PASS", UNAME]
    assert {r[1]: r[2] for r in rows[1:]} == {c: "N/A" for c in (
        "driver", "gpus", "persistence", "ecc", "xid", "nvlink", "pcie", "mig", "efa", "hugepages", "infiniband",
        "memlock", "container-runtime", "dcgm-exporter", "burn-in")}
    assert {r[3] for r in rows[1:]} == {"cpu-server has no GPU", "fabric is 'none'", "nodePools.cpu.hugepagesMiB is 0"}
    assert out.splitlines()[-1] == ("node-check nodes-onprem/cpu (cpu-server, fabric none): ACCEPTED: 1 host(s), "
                                    "1 passed, 0 failed, 15 not applicable")
    assert err.splitlines() == ["node-check nodes-onprem/cpu: 1 host(s); checks: host", "[local://] 1/1 host: PASS"]


def test_gpu_pool_on_a_host_without_gpu_fails_every_gpu_check_with_a_reason() -> None:
    results = {r.check: r for r in check_node(testinfra.get_host("local://"), load_pool("nodes-aws", "h100", STACKS),
                                              label="local://")}
    assert {c for c, r in results.items() if r.status == "n/a"} == {"mig", "infiniband"}
    for check in ("driver", "gpus", "persistence", "ecc", "nvlink", "pcie", "efa", "container-runtime",
                  "dcgm-exporter", "burn-in"):
        assert results[check].status == "fail", results[check]
    assert results["driver"].detail.startswith("NVIDIA kernel module not loaded: `cat /proc/driver/nvidia/version` "
                                               "failed (exit 1): cat: /proc/driver/nvidia/version: No such file")
    assert results["gpus"].detail.startswith("could not run: nvidia-smi: command not found on the node (exit 127)")
    assert results["burn-in"].detail.startswith("could not run: `burn-in` failed (exit 3): ")


def test_bounded_run_returns_output_and_leaves_nothing(local: Probe) -> None:
    run = run_bounded(local, "import sys; print('measured', sys.argv[2])", ["10"], limit_s=20)
    assert (run.rc, run.stdout, run.leftovers, run.killed, run.timed_out) == (0, "measured 10\n", (), True, False)


def test_bounded_run_stops_a_hung_script_at_its_limit(local: Probe) -> None:
    run = run_bounded(local, "import time\ntime.sleep(60)", [], limit_s=1)
    assert run.timed_out and run.leftovers == ()


def test_bounded_run_kills_and_reports_a_process_that_escaped(local: Probe) -> None:
    script = textwrap.dedent("""
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", sys.argv[1]],
                                 start_new_session=True)
        print(child.pid)
    """)
    token = new_token()
    run = run_bounded(local, script, [], limit_s=20, token=token)
    assert (run.rc, run.leftovers, run.killed) == (0, (int(run.stdout),), True)
    assert local.run(leftover_command(token)).rc == 1  # nothing carries the token any more


def test_leftover_pattern_does_not_match_its_own_shell() -> None:
    token = new_token()
    assert re.fullmatch(r"pgrep -f '\[a\]ifactory-node-check-[0-9a-f]{12}'", leftover_command(token))
    with pytest.raises(ValueError, match="is not a node-check token"):
        leftover_command("python")


def test_cli_wiring_and_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from infra.cli import main

    assert main(["node-check", "--stack", "nodes-onprem", "--pool", "cpu", "--hosts", "local://",
                 "--stacks-dir", str(STACKS)]) == 0
    capsys.readouterr()
    cases = [
        (("nodes-onprem", "gpu", "local://"),
         "stack 'nodes-onprem' has no node pool 'gpu'; pools: a100-mig, cpu, h100-ib"),
        (("nodes-nope", "cpu", "local://"),
         "Pulumi.nodes-nope.yaml: no such stack file; stacks: nodes-aws, nodes-onprem"),
        (("nodes-onprem", "cpu", "node-7"), "host 'node-7': unknown or missing scheme ''; use one of: ansible://, "),
        (("nodes-onprem", "cpu", " , "), "--hosts is empty; give testinfra URLs such as local://, ssh://user@node"),
        # no host: a usage error, not a node reported unreachable
        (("nodes-onprem", "cpu", "ssh://user@"), "host 'ssh://user@': names no host after ssh://; e.g. "
                                                 "ssh://user@10.0.0.5"),
        (("nodes-onprem", "cpu", "local://,kubectl://?namespace=gpu"),
         "host 'kubectl://?namespace=gpu': names no pod after kubectl://; e.g. kubectl://POD?namespace=NS"),
    ]
    for (stack, pool, hosts), message in cases:
        assert main(["node-check", "--stack", stack, "--pool", pool, "--hosts", hosts,
                     "--stacks-dir", str(STACKS)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and message in err, err
