"""fabric-check: NCCL all-reduce across nodes, judged on recorded runs (healthy EFA, socket fallback, slow link,
healthy InfiniBand) and run for real through local:// with stand-ins for mpirun (bounded time, leftovers, a
missing mpirun).

Expected figures come from the recordings (tests/node/recordings/README.md says how they were written) and
the catalog's line rates (p5.48xlarge 3200 Gbps EFA = 400 GB/s; DGX H100 8 x 400 Gb/s InfiniBand = 400 GB/s).
"""

from __future__ import annotations

import dataclasses
import shutil
import stat
from pathlib import Path

import pytest
import testinfra

from infra.cli import main
from infra.nodecheck import fabric, load_pool
from infra.nodecheck.probe import CannotRun
from tests.node import replay

STACKS = Path(__file__).resolve().parent / "stacks"
REC = replay.RECORDINGS


def recorded(path: str) -> str:
    return (REC / path / "nccl-all-reduce.txt").read_text()


def verdict(path: str, stack: str = "nodes-aws", pool: str = "h100") -> fabric.FabricVerdict:
    text = recorded(path)
    return fabric.judge(fabric.parse_nccl_tests(text), fabric.parse_nccl_log(text), pool=load_pool(stack, pool, STACKS),
                        hosts=2)


def test_parsers_read_the_table_and_the_nccl_log() -> None:
    text = recorded("p5.48xlarge/healthy")
    rows = fabric.parse_nccl_tests(text)
    assert [(r.size_bytes, r.busbw_gbs, r.wrong) for r in rows] == [
        (1 << 30, 331.88, 0), (1 << 31, 347.51, 0), (1 << 32, 355.84, 0), (1 << 33, 359.40, 0), (1 << 34, 360.41, 0)]
    assert fabric.parse_nccl_log(text) == fabric.NcclLog(frozenset({"Libfabric"}), frozenset({"efa"}),
                                                         "2.23.4+cuda12.6")
    assert fabric.parse_nccl_log(recorded("p5.48xlarge/nccl-socket")).networks == {"Socket"}
    with pytest.raises(fabric.ParseError, match="printed no result row"):
        fabric.parse_nccl_tests("# nThread 1 nGpus 1\n# Out of bounds values : 0 OK\n")


def test_a_healthy_efa_run_passes_with_its_figure() -> None:
    assert verdict("p5.48xlarge/healthy") == fabric.FabricVerdict(
        True, "2 nodes x 8 GPUs over Libfabric: 360.41 GB/s bus bandwidth at 16 GiB (90% of 400 GB/s, the "
              "p5.48xlarge fabric's 3200 Gbps)")


def test_a_socket_fallback_fails_on_the_plugin_and_the_bandwidth() -> None:
    assert verdict("p5.48xlarge/nccl-socket") == fabric.FabricVerdict(
        False, "NCCL used network Socket, expected Libfabric (aws-ofi-nccl) with provider efa: traffic went over "
               "TCP sockets, not the fabric; 11.21 GB/s bus bandwidth at 16 GiB (3% of 400 GB/s, the p5.48xlarge "
               "fabric's 3200 Gbps); floor 240 GB/s (nodePools.h100.nodeCheck.minBusBandwidthFraction 0.6)")


def test_a_slow_link_fails_on_bandwidth_only() -> None:
    assert verdict("p5.48xlarge/nccl-slow-link") == fabric.FabricVerdict(
        False, "168.05 GB/s bus bandwidth at 16 GiB (42% of 400 GB/s, the p5.48xlarge fabric's 3200 Gbps); floor "
               "240 GB/s (nodePools.h100.nodeCheck.minBusBandwidthFraction 0.6)")


def test_infiniband_needs_the_ib_plugin() -> None:
    assert verdict("dgx-h100/healthy", "nodes-onprem", "h100-ib") == fabric.FabricVerdict(
        True, "2 nodes x 8 GPUs over IB: 382.95 GB/s bus bandwidth at 16 GiB (96% of 400 GB/s, the dgx-h100 "
              "fabric's 3200 Gbps)")
    # the EFA run's log judged for an InfiniBand pool: the plugin is wrong
    text = recorded("p5.48xlarge/healthy")
    ib = fabric.judge(fabric.parse_nccl_tests(text), fabric.parse_nccl_log(text),
                      pool=load_pool("nodes-onprem", "h100-ib", STACKS), hosts=2)
    assert ib.detail.startswith("NCCL used network Libfabric, expected IB: ")


def test_wrong_values_and_a_non_efa_provider_fail() -> None:
    text = recorded("p5.48xlarge/healthy").replace("360.12      0", "360.12      3").replace(
        "Selected Provider is efa", "Selected Provider is tcp", 1)
    result = fabric.judge(fabric.parse_nccl_tests(text), fabric.parse_nccl_log(text),
                          pool=load_pool("nodes-aws", "h100", STACKS), hosts=2)
    assert result == fabric.FabricVerdict(False, "aws-ofi-nccl selected provider tcp, not efa; "
                                                 "3 wrong value(s) in the all-reduce results")


def test_the_mpirun_line() -> None:
    command = fabric.mpirun_command(hosts=["10.1.77.12", "10.1.77.13"], gpus_per_host=8, fabric="efa", limit_s=300)
    assert command.splitlines()[1] == (
        "timeout --verbose --kill-after=10 300 mpirun --allow-run-as-root -np 16 -H 10.1.77.12:8,10.1.77.13:8 "
        "--bind-to none -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT,NET -x FI_PROVIDER=efa -x PATH -x "
        "LD_LIBRARY_PATH all_reduce_perf -b 1G -e 16G -f 2 -g 1 -c 1 >\"$out\" 2>\"$err\"")


def test_cli_over_replay_hosts(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    replay.register(monkeypatch)
    args = ["fabric-check", "--stack", "nodes-aws", "--pool", "h100", "--stacks-dir", str(STACKS), "--hosts"]
    assert main([*args, "replay://p5.48xlarge,replay://p5.48xlarge"]) == 0
    out, err = capsys.readouterr()
    assert out == ("fabric-check nodes-aws/h100 (p5.48xlarge, fabric efa): ACCEPTED: 2 nodes x 8 GPUs over Libfabric: "
                   "360.41 GB/s bus bandwidth at 16 GiB (90% of 400 GB/s, the p5.48xlarge fabric's 3200 Gbps)\n")
    assert err == "fabric-check nodes-aws/h100: all_reduce_perf across 2 host(s), at most 300 s\n"
    assert main([*args, "replay://p5.48xlarge+nccl-socket,replay://p5.48xlarge"]) == 1
    assert capsys.readouterr().out.startswith("fabric-check nodes-aws/h100 (p5.48xlarge, fabric efa): REJECTED: "
                                              "NCCL used network Socket")


@pytest.mark.parametrize(("pool", "hosts", "message"), [
    ("l40s", "local://,local://", "pool 'l40s' has fabric 'none': fabric-check needs an 'efa' or 'infiniband' pool"),
    ("h100", "local://", "fabric-check needs at least 2 hosts of the pool; got 1"),
])
def test_usage_errors(pool: str, hosts: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fabric-check", "--stack", "nodes-aws", "--pool", pool, "--hosts", hosts,
                 "--stacks-dir", str(STACKS)]) == 2
    assert capsys.readouterr() == ("", f"aifactory: {message}\n")


def tools_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **scripts: str) -> None:
    """A PATH of the coreutils/procps the run needs plus stand-in scripts (no real mpirun on this machine)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("timeout", "mktemp", "cat", "rm", "pgrep", "kill", "sleep", "setsid"):
        if (found := shutil.which(tool)) is not None:
            (bin_dir / tool).symlink_to(found)
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(bin_dir))


def local_pool(seconds: int):  # type: ignore[no-untyped-def]
    pool = load_pool("nodes-aws", "h100", STACKS)
    return dataclasses.replace(pool, node_check=dataclasses.replace(pool.node_check, fabric_test_seconds=seconds))


def local_hosts() -> list[tuple[str, object]]:
    return [("local://", testinfra.get_host("local://")), ("local://", testinfra.get_host("local://"))]


def test_a_missing_mpirun_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools_dir(tmp_path, monkeypatch)
    with pytest.raises(CannotRun) as err:
        fabric.run_fabric_test(local_hosts(), local_pool(30))
    assert str(err.value).startswith("mpirun: command not found on the node (exit 127): timeout: failed to run "
                                     "command "), str(err.value)


def test_a_hung_run_is_stopped_at_its_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools_dir(tmp_path, monkeypatch, mpirun="trap '' TERM; sleep 30")
    result = fabric.run_fabric_test(local_hosts(), local_pool(1), kill_after_s=1)
    assert result == fabric.FabricVerdict(False, "the all-reduce did not finish within 1 s and was stopped "
                                                 "(it ignored SIGTERM)")


def test_a_rank_left_running_is_killed_and_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = (REC / "p5.48xlarge/healthy/nccl-all-reduce.txt").resolve()
    tools_dir(tmp_path, monkeypatch, all_reduce_perf="sleep 30",
              mpirun=f"setsid all_reduce_perf >/dev/null 2>&1 </dev/null &\ncat {table}")
    result = fabric.run_fabric_test(local_hosts(), local_pool(30))
    assert not result.ok
    assert result.detail.startswith("local://: all_reduce_perf pid ") and result.detail.endswith(
        " left running (killed)"), result.detail
    pid = int(result.detail.split(" pid ")[1].split()[0])
    stat_file = Path(f"/proc/{pid}/stat")  # gone, or a zombie its (container) init has not reaped yet
    assert not stat_file.exists() or stat_file.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_node_check_settings_are_validated_with_their_key_path() -> None:
    from infra.config import ConfigError, parse

    raw = {"target": {"provider": "aws", "region": "us-east-1", "availabilityZones": ["us-east-1a", "us-east-1b"]},
           "cluster": {"apiAccess": "public-and-private", "publicAccessCidrs": ["203.0.113.0/24"]},
           "nodePools": {"gpu": {"instanceType": "p5.48xlarge", "fabric": "efa", "nodeCheck": {
               "dcgmExporterUrl": "127.0.0.1:9400", "minBusBandwidthFraction": 1.5, "fabricTestSeconds": 5}}}}
    with pytest.raises(ConfigError) as err:
        parse(raw, stack="t")
    assert [str(p) for p in err.value.problems] == [
        "nodePools.gpu.nodeCheck.dcgmExporterUrl: '127.0.0.1:9400' is not an http(s):// URL such as "
        "http://127.0.0.1:9400/metrics",
        "nodePools.gpu.nodeCheck.minBusBandwidthFraction: 1.5 is above the maximum 1",
        "nodePools.gpu.nodeCheck.fabricTestSeconds: 5 is below the minimum 30",
    ]
    raw["nodePools"]["gpu"]["nodeCheck"] = {}
    check = parse(raw, stack="t").node_pools["gpu"].node_check
    assert (check.dcgm_exporter_url, check.min_bus_bandwidth_fraction, check.fabric_test_seconds) == (None, 0.6, 300)
