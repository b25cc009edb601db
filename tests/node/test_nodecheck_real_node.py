"""What a real node trips on (issue 17), each against this machine's real shell and tools or the recordings.

- the kernel log: `journalctl` present with an empty journal must fall back to dmesg, and an empty log read
  as root must not be blamed on permissions;
- the burn-in: a process that ignores SIGTERM at the limit (`timeout --kill-after` exits 137) is a time-out,
  and the burn-in must measure as many GPUs as the catalog says;
- a missing program is named by what the shell or `timeout` said, not by the command's first word;
- the DCGM exporter is looked for where the GPU operator runs it (the exporter pod on the node);
- an unreachable host is one clear line (issue 19, item 11);
- single-GPU Hopper nodes (p5.4xlarge) can be accepted.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import testinfra

from infra.nodecheck import check_node, load_pool
from infra.nodecheck import checks as nc
from infra.nodecheck.cluster import ExporterPod, Kubectl, exporter_on_node, node_of_url
from infra.nodecheck.probe import CannotRun, Probe, run_bounded
from tests.node import replay

STACKS = Path(__file__).resolve().parent / "stacks"
ALL = [c.id for c in nc.CHECKS]
NA_EFA_POOL = {"mig", "infiniband"}
XID_LINE = "[ 8812.402918] NVRM: Xid (PCI:0000:53:00): 79, pid=4127, name=python3, GPU has fallen off the bus."


def fake_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **scripts: str) -> None:
    """Put shell scripts named after tools first on PATH (the local:// backend runs /bin/sh with our env)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


@pytest.fixture
def local() -> Probe:
    return Probe(testinfra.get_host("local://"))


def p5_pool():  # type: ignore[no-untyped-def]
    return load_pool("nodes-aws", "h100", STACKS)


# --- kernel log -------------------------------------------------------------------------------


def test_xid_falls_back_to_dmesg_when_the_journal_is_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           local: Probe) -> None:
    fake_tools(tmp_path, monkeypatch, journalctl="exit 0", dmesg=f"echo '[    0.000000] Linux version 6.1'\n"
                                                                 f"echo '{XID_LINE}'")
    with pytest.raises(nc.CheckFailed, match=r"^1 XID event\(s\) since boot: XID 79 on PCI:0000:53:00$"):
        nc.check_xid(local, p5_pool())


def test_xid_passes_on_a_clean_dmesg_behind_an_empty_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             local: Probe) -> None:
    fake_tools(tmp_path, monkeypatch, journalctl="exit 0", dmesg="echo '[    0.000000] Linux version 6.1'")
    assert nc.check_xid(local, p5_pool()) == "no XID since boot"


def test_an_empty_kernel_log_read_as_root_is_not_blamed_on_permissions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local: Probe) -> None:
    fake_tools(tmp_path, monkeypatch, journalctl="exit 0", dmesg="exit 0", id="echo 0")
    with pytest.raises(CannotRun) as err:
        nc.check_xid(local, p5_pool())
    assert str(err.value) == ("the kernel log is empty although read as root: the journal holds no kernel messages "
                              "and the ring buffer is empty (cleared with dmesg -C?); XIDs cannot be ruled out")


def test_an_empty_kernel_log_read_as_a_user_says_it_needs_root(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local: Probe) -> None:
    fake_tools(tmp_path, monkeypatch, journalctl="exit 0", dmesg="exit 0", id="echo 1000")
    with pytest.raises(CannotRun, match=r"^the kernel log is empty: reading it needs root"):
        nc.check_xid(local, p5_pool())


def test_a_dmesg_refused_says_so_in_dmesgs_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 local: Probe) -> None:
    # util-linux dmesg as a user with kernel.dmesg_restrict=1
    fake_tools(tmp_path, monkeypatch, journalctl="exit 1",
               dmesg="echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2; exit 1")
    with pytest.raises(CannotRun) as err:
        nc.check_xid(local, p5_pool())
    assert str(err.value) == ("cannot read the kernel log (the journal has no kernel messages and dmesg failed): "
                              "`dmesg` failed (exit 1): dmesg: read kernel buffer failed: Operation not permitted")


# --- burn-in ----------------------------------------------------------------------------------


def test_a_script_that_ignores_sigterm_is_a_time_out(local: Probe) -> None:
    script = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)"
    run = run_bounded(local, script, [], limit_s=1, kill_after_s=1)
    assert (run.rc, run.timed_out, run.ignored_term, run.leftovers) == (137, True, True, ())
    assert "timeout: sending signal KILL to command" in run.stderr


def test_a_script_killed_before_its_limit_is_not_a_time_out(local: Probe) -> None:
    # SIGKILL from elsewhere (the OOM killer) also ends in 137, without timeout's word
    run = run_bounded(local, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", [], limit_s=30)
    assert (run.rc, run.timed_out, run.ignored_term) == (137, False, False)


@pytest.mark.parametrize(("case", "detail"), [
    ("burn-in-ignores-term", "burn-in did not finish within 130 s and ignored SIGTERM: killed 10 s later "
                             "(a process stuck in the driver: check the GPU)"),
    ("burn-in-7-gpus", "burn-in measured 7 GPUs; p5.48xlarge has 8 (GPUs hidden from CUDA or failed to initialise)"),
    ("pcie-x8", "GPU 2: Gen5 x8; expected Gen5 x16"),
    ("row-remap-pending", "row remapping pending on 00000000:B9:00.0 (reset the GPU)"),
])
def test_one_more_fault_fails_exactly_its_check(case: str, detail: str) -> None:
    host = f"p5.48xlarge+{case}"
    results = {r.check: (r.status, r.detail) for r in check_node(
        replay.replay_host(host), p5_pool(), label=host, kubectl=replay.replay_kubectl(host))}
    failed = {c for c, (status, _) in results.items() if status == "fail"}
    assert len(failed) == 1, results
    check = failed.pop()
    assert results[check] == ("fail", detail)
    assert {c for c, (status, _) in results.items() if status == "pass"} == set(ALL) - NA_EFA_POOL - {check}


def test_seven_visible_gpus_fail_the_count_and_the_burn_in() -> None:
    host = "p5.48xlarge+wrong-gpu-count"
    results = {r.check: (r.status, r.detail) for r in check_node(
        replay.replay_host(host), p5_pool(), label=host, kubectl=replay.replay_kubectl(host))}
    assert {c for c, (s, _) in results.items() if s == "fail"} == {"gpus", "burn-in"}
    assert results["gpus"][1] == "7 GPUs visible; p5.48xlarge has 8 x NVIDIA H100 80GB HBM3"


def test_a_missing_program_is_named_by_the_shell_not_by_the_first_word(local: Probe) -> None:
    with pytest.raises(CannotRun) as err:
        local.output("uname -s && aifactory_no_such_tool --version")
    assert str(err.value).startswith("aifactory_no_such_tool: command not found on the node (exit 127): ")


def test_a_burn_in_without_python3_names_python3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 local: Probe) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("timeout", "mktemp", "cat", "rm", "pgrep", "sleep", "kill"):
        found = shutil.which(tool)
        if found is not None:
            (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))  # a node with coreutils and procps but no python3
    with pytest.raises(CannotRun) as err:
        nc.check_burn_in(local, p5_pool())
    assert re.match(r"burn-in: python3: command not found on the node \(exit 127\): timeout: failed to run command "
                    r".python3.: No such file or directory$", str(err.value)), str(err.value)


# --- DCGM exporter ----------------------------------------------------------------------------


def test_dcgm_exporter_is_fetched_from_the_pod_on_this_node() -> None:
    host = replay.replay_host("p5.48xlarge")
    results = {r.check: r for r in check_node(host, p5_pool(), label="ssh://ec2-user@10.1.77.12",
                                              kubectl=replay.replay_kubectl("p5.48xlarge"))}
    assert results["dcgm-exporter"].detail == ("8 DCGM_FI_DEV_GPU_UTIL series from pod "
                                               "gpu-operator/nvidia-dcgm-exporter-7xk2p")
    assert "curl -sS --max-time 5 http://10.1.77.201:9400/metrics" in host.backend.commands
    assert not [c for c in host.backend.commands if "127.0.0.1:9400" in c]


def test_a_configured_exporter_url_replaces_the_lookup() -> None:
    host = replay.replay_host("p5.48xlarge")
    results = {r.check: r for r in check_node(host, load_pool("nodes-aws", "h100-exporter-url", STACKS),
                                              label="p5", kubectl=None)}
    assert results["dcgm-exporter"].detail == ("8 DCGM_FI_DEV_GPU_UTIL series from "
                                               "nodePools.h100-exporter-url.nodeCheck.dcgmExporterUrl")
    assert "curl -sS --max-time 5 http://127.0.0.1:9400/metrics" in host.backend.commands


@pytest.mark.parametrize(("case", "kubectl", "detail"), [
    ("exporter-not-ready", True, "could not run: dcgm-exporter pod nvidia-dcgm-exporter-7xk2p on "
                                 "ip-10-1-77-12.ec2.internal is Running, not Ready"),
    ("healthy", False, "could not run: no cluster access to find the dcgm-exporter pod on this node; "
                       "set nodePools.h100.nodeCheck.dcgmExporterUrl"),
])
def test_dcgm_exporter_problems_name_the_pod_or_the_setting(case: str, kubectl: bool, detail: str) -> None:
    host = f"p5.48xlarge+{case}" if case != "healthy" else "p5.48xlarge"
    results = {r.check: r for r in check_node(replay.replay_host(host), p5_pool(), label=host,
                                              kubectl=replay.replay_kubectl(host) if kubectl else None)}
    assert (results["dcgm-exporter"].status, results["dcgm-exporter"].detail) == ("fail", detail)


def test_no_exporter_pod_on_the_node_lists_where_they_run() -> None:
    pods = [ExporterPod("nvidia-dcgm-exporter-q8m4d", "ip-10-1-77-13.ec2.internal", "10.1.77.13", "10.1.77.219",
                        "Running", True, 9400)]
    with pytest.raises(CannotRun) as err:
        exporter_on_node(pods, names=["ip-10-1-77-12"], addresses=["10.1.77.12"], namespace="gpu-operator")
    assert str(err.value) == ("no dcgm-exporter pod (app=nvidia-dcgm-exporter in namespace gpu-operator) on node "
                              "ip-10-1-77-12 / 10.1.77.12; pods run on: ip-10-1-77-13.ec2.internal")
    # a short kernel hostname matches the node's FQDN, and the host URL's address matches the pod's hostIP
    assert exporter_on_node(pods, names=["IP-10-1-77-13"], addresses=[], namespace="gpu-operator") == pods[0]
    assert exporter_on_node(pods, names=[], addresses=["10.1.77.13"], namespace="gpu-operator") == pods[0]


def test_the_host_url_names_the_node() -> None:
    kubectl = replay.replay_kubectl("dgx-h100")
    assert node_of_url("ssh://ec2-user@10.1.77.12", kubectl) == ([], ["10.1.77.12"])
    assert node_of_url("ssh://ec2-user@ip-10-1-77-12.ec2.internal", kubectl) == (["ip-10-1-77-12.ec2.internal"], [])
    assert node_of_url("kubectl://nodecheck-dgx07?namespace=aifactory-system", kubectl) == (["dgx07"], [])
    assert node_of_url("local://", kubectl) == ([], [])


def test_kubectl_missing_on_this_machine_is_a_clear_error() -> None:
    with pytest.raises(CannotRun, match=r"^aifactory-no-kubectl not found on this machine: it finds the exporter pod "
                                        r"on the node; install kubectl or set nodePools.P.nodeCheck.dcgmExporterUrl$"):
        Kubectl(argv=("aifactory-no-kubectl",)).json(["get", "pods"])


# --- unreachable hosts (issue 19, item 11) -----------------------------------------------------


def test_cli_prints_one_unreachable_line_per_host() -> None:
    """The real console script against two ssh:// hosts nothing listens on (loopback ports 1 and 2)."""
    aifactory = Path(sys.executable).with_name("aifactory")
    done = subprocess.run([str(aifactory), "node-check", "--stack", "nodes-aws", "--pool", "h100", "--stacks-dir",
                           str(STACKS), "--hosts", "ssh://nobody@127.0.0.1:1,ssh://nobody@127.0.0.1:2"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[1:] == [
        "ssh://nobody@127.0.0.1:1  host   FAIL    host unreachable: ssh: connect to host 127.0.0.1 port 1: "
        "Connection refused",
        "ssh://nobody@127.0.0.1:2  host   FAIL    host unreachable: ssh: connect to host 127.0.0.1 port 2: "
        "Connection refused",
        "node-check nodes-aws/h100 (p5.48xlarge, fabric efa): REJECTED: 2 host(s), 0 passed, 2 failed, "
        "0 not applicable",
    ]
    assert "RuntimeError" not in done.stdout + done.stderr
    assert "[ssh://nobody@127.0.0.1:1] host unreachable: ssh: connect to host 127.0.0.1 port 1: Connection refused" \
        in done.stderr.splitlines()


# --- single-GPU Hopper --------------------------------------------------------------------------


def test_a_single_h100_node_is_accepted() -> None:
    results = {r.check: (r.status, r.detail) for r in check_node(
        replay.replay_host("p5.4xlarge"), load_pool("nodes-aws", "h100-single", STACKS), label="p5.4xlarge",
        kubectl=replay.replay_kubectl("p5.4xlarge"))}
    assert {c for c, (s, _) in results.items() if s == "fail"} == set()
    assert results["gpus"] == ("pass", "1 x NVIDIA H100 80GB HBM3")
    assert results["nvlink"] == ("n/a", "p5.4xlarge has one GPU: no NVLink peer")
    assert results["burn-in"] == ("pass", "1 GPUs, lowest 714.8 TFLOP/s (72% of peak), 2926.3 GB/s (87% of peak)")
    assert {c for c, (s, _) in results.items() if s == "n/a"} == {"nvlink", "mig", "efa", "hugepages", "infiniband",
                                                                          "memlock"}


def test_node_check_imports_no_opentelemetry_sdk(tmp_path: Path) -> None:
    """node-check on a host with only testinfra and PyYAML: the kit's telemetry SDK must not be needed."""
    code = textwrap.dedent("""
        import sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "opentelemetry" or name.startswith("opentelemetry."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, Block())
        import telemetry.names
        from infra.cli import main
        import infra.nodecheck
        assert not [m for m in sys.modules if m.startswith("opentelemetry")]
        sys.exit(main(["node-check", "--stack", "nodes-onprem", "--pool", "cpu", "--hosts", "local://",
                       "--stacks-dir", sys.argv[1]]))
    """)
    done = subprocess.run([sys.executable, "-c", code, str(STACKS)], capture_output=True, text=True, timeout=120,
                          check=False, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith("node-check nodes-onprem/cpu (cpu-server, fabric none): ACCEPTED")
    with pytest.raises(subprocess.CalledProcessError):  # the blocker really blocks the SDK
        subprocess.run([sys.executable, "-c", code.replace("import telemetry.names", "import telemetry.instrument"),
                        str(STACKS)], capture_output=True, text=True, timeout=120, check=True,
                       cwd=Path(__file__).resolve().parents[2])
