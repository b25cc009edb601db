"""`aifactory fabric-check`: an NCCL all-reduce across 2+ nodes of a pool, judged against the fabric's line rate.

How it runs: nccl-tests' `all_reduce_perf` under Open MPI's `mpirun`, started on the FIRST host through its
testinfra URL (the same URLs node-check takes), one rank per GPU on every host (`-H a:8,b:8`, ranks reach the
other nodes over ssh, as AWS's and NVIDIA's multi-node NCCL recipes do). Why mpirun and not a Kubernetes
Job/LeaderWorkerSet: it checks the hosts node-check just accepted, before they join the cluster or take pods,
and needs nothing the node acceptance does not already need (a shell on each host); a Job would test the pod
network attachments instead, which is the deployment's business, not the node's.

Bounded and clean: `timeout --verbose --kill-after` stops mpirun at `nodeCheck.fabricTestSeconds` (mpirun
takes its remote ranks down with it); afterwards every host is asked for a left-over `all_reduce_perf`
(`pgrep -x`), which is killed by pid and reported.

What it judges (pure functions over the recorded text, see tests/node/recordings/README.md):
- nccl-tests' result table (src/common.cu: `size count type redop root` then `time algbw busbw #wrong` for
  out-of-place and in-place), "# Out of bounds values : N OK|FAILED";
- NCCL's own INFO log (NCCL_DEBUG=INFO, printed by every rank): `NCCL INFO Using network <name>` (NCCL
  src/init.cc: the network plugin in use: `IB`, `Socket`, or a plugin's name; aws-ofi-nccl registers
  `Libfabric`, older releases `AWS Libfabric`) and aws-ofi-nccl's `NET/OFI Selected Provider is <prov>`
  (src/nccl_ofi_net.c: the libfabric provider; `efa` on EFA, `tcp`/`sockets` when it fell back).
The pool fails when any rank used `Socket`, when the expected plugin (EFA: Libfabric with provider efa;
InfiniBand: IB) is absent, when values were wrong, or when the bus bandwidth at the largest message size is
below `nodeCheck.minBusBandwidthFraction` of the node's fabric line rate (catalog: EFA Gbps per instance,
InfiniBand ports x rate) in GB/s.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import testinfra

from components import catalog
from components.k8s import nccl_guard
from components.k8s.settings import NodePool
from infra.nodecheck.checks import CMD_HOSTNAME
from infra.nodecheck.probe import DEFAULT_KILL_AFTER_S, BoundedRun, CannotRun, describe_failure
from infra.outputs import EXIT_FAILURE, EXIT_OK, EXIT_USAGE

__all__ = [
    "NcclRow",
    "NcclLog",
    "FabricVerdict",
    "DEFAULT_ALL_REDUCE_PERF",
    "DEFAULT_MIN_HOSTS",
    "CMD_LEFTOVERS",
    "parse_nccl_tests",
    "parse_nccl_log",
    "expected_busbw_gbs",
    "judge",
    "mpirun_command",
    "fabric_check_command",
]

DEFAULT_ALL_REDUCE_PERF = "all_reduce_perf"  # nccl-tests binary, on the nodes' PATH unless --all-reduce-perf
DEFAULT_MIN_HOSTS = 2
DEFAULT_SIZES = ("1G", "16G")  # -b / -e: large messages, where bus bandwidth reaches the line rate
CMD_LEFTOVERS = "pgrep -x all_reduce_perf"


class ParseError(ValueError):
    """all_reduce_perf printed no result table."""


@dataclass(frozen=True, slots=True)
class NcclRow:
    size_bytes: int
    busbw_gbs: float  # the better of out-of-place and in-place
    wrong: int


@dataclass(frozen=True, slots=True)
class NcclLog:
    networks: frozenset[str]  # "Using network X" of every rank
    providers: frozenset[str]  # aws-ofi-nccl "Selected Provider is X"
    version: str  # "NCCL version 2.23.4+cuda12.6", or ""


_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+-?\d+\s+"
                  r"(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$")


def _number(text: str) -> float:
    return float(text) if re.fullmatch(r"[\d.]+", text) else 0.0


def parse_nccl_tests(text: str) -> list[NcclRow]:
    """Result rows of all_reduce_perf (rank 0's table), in size order."""
    rows = []
    for line in text.splitlines():
        if (m := _ROW.match(line)) is None:
            continue
        _, _, oop_bw, oop_wrong, _, _, ip_bw, ip_wrong = m.groups()[2:]
        wrong = sum(int(w) for w in (oop_wrong, ip_wrong) if w.isdigit())
        rows.append(NcclRow(int(m.group(1)), max(_number(oop_bw), _number(ip_bw)), wrong))
    if not rows:
        raise ParseError("all_reduce_perf printed no result row (size count type redop root time algbw busbw ...)")
    return rows


def parse_nccl_log(text: str) -> NcclLog:
    networks = frozenset(m.group(1).strip() for m in re.finditer(r"NCCL INFO Using network (.+)$", text, re.MULTILINE))
    providers = frozenset(nccl_guard.PROVIDER.findall(text))
    version = re.search(r"NCCL version (\S+)", text)
    return NcclLog(networks, providers, version.group(1) if version else "")


def expected_busbw_gbs(pool: NodePool) -> float:
    """The fabric's line rate of one node in GB/s: what a cross-node all-reduce's bus bandwidth approaches."""
    return catalog.fabric_gbps(pool.instance_type) / 8


@dataclass(frozen=True, slots=True)
class FabricVerdict:
    ok: bool
    detail: str


def _size(n: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def judge(rows: Sequence[NcclRow], log: NcclLog, *, pool: NodePool, hosts: int) -> FabricVerdict:
    """Pass/fail of one all-reduce run for the pool's fabric."""
    problems = []
    if pool.fabric == "efa":
        want, plugin_ok = "Libfabric (aws-ofi-nccl) with provider efa", any("Libfabric" in n for n in log.networks)
        if log.providers - {"efa"}:
            problems.append(f"aws-ofi-nccl selected provider {', '.join(sorted(log.providers - {'efa'}))}, not efa")
    else:
        want, plugin_ok = "IB", bool(set(nccl_guard.IB_NETWORKS) & set(log.networks))
    used = ", ".join(sorted(log.networks)) or "none (no 'NCCL INFO Using network' line: NCCL_DEBUG=INFO not set?)"
    if "Socket" in log.networks or not plugin_ok:
        problems.insert(0, f"NCCL used network {used}, expected {want}: traffic went over TCP sockets, "
                           "not the fabric")
    if wrong := sum(r.wrong for r in rows):
        problems.append(f"{wrong} wrong value(s) in the all-reduce results")
    largest = max(rows, key=lambda r: r.size_bytes)
    expect = expected_busbw_gbs(pool)
    floor = pool.node_check.min_bus_bandwidth_fraction * expect
    figure = (f"{largest.busbw_gbs:g} GB/s bus bandwidth at {_size(largest.size_bytes)} "
              f"({largest.busbw_gbs / expect:.0%} of {expect:g} GB/s, the {pool.instance_type} fabric's "
              f"{catalog.fabric_gbps(pool.instance_type)} Gbps)")
    if largest.busbw_gbs < floor:
        problems.append(f"{figure}; floor {floor:g} GB/s (nodePools.{pool.name}.nodeCheck.minBusBandwidthFraction "
                        f"{pool.node_check.min_bus_bandwidth_fraction:g})")
    if problems:
        return FabricVerdict(False, "; ".join(problems))
    return FabricVerdict(True, f"{hosts} nodes x {pool.instance.gpu_count} GPUs over {used}: {figure}")


def mpirun_command(*, hosts: Sequence[str], gpus_per_host: int, fabric: str, limit_s: int,
                   all_reduce_perf: str = DEFAULT_ALL_REDUCE_PERF, kill_after_s: int = DEFAULT_KILL_AFTER_S) -> str:
    """The bounded mpirun line run on the first host; output to files, printed once `timeout` returns."""
    env = ["NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,NET"] + (["FI_PROVIDER=efa"] if fabric == "efa" else [])
    argv = ["mpirun", "--allow-run-as-root", "-np", str(len(hosts) * gpus_per_host),
            "-H", ",".join(f"{h}:{gpus_per_host}" for h in hosts), "--bind-to", "none",
            *[x for e in env for x in ("-x", e)], "-x", "PATH", "-x", "LD_LIBRARY_PATH",
            all_reduce_perf, "-b", DEFAULT_SIZES[0], "-e", DEFAULT_SIZES[1], "-f", "2", "-g", "1", "-c", "1"]
    if any("'" in a for a in argv):
        raise ValueError("host names and paths must not contain quotes")
    line = " ".join(f"'{a}'" if not re.fullmatch(r"[\w@%+=:,./-]+", a) else a for a in argv)
    return ('out=$(mktemp) && err=$(mktemp) || exit 125\n'
            f'timeout --verbose --kill-after={int(kill_after_s)} {int(limit_s)} {line} >"$out" 2>"$err"\n'
            'rc=$?; cat "$out"; cat "$err" >&2; rm -f "$out" "$err"; exit $rc')


# ---------------------------------------------------------------------------------------------
# the command


def _mpi_name(url: str, host: Any) -> str:
    """How the other ranks reach this host: the address in an ssh:// URL, else its kernel hostname."""
    parts = urlsplit(url)
    if parts.scheme in ("ssh", "paramiko", "safe-ssh") and parts.hostname:
        return parts.hostname
    out = host.run(CMD_HOSTNAME)
    if out.rc != 0 or not out.stdout.strip():
        raise CannotRun(f"{url}: cannot read its hostname for mpirun -H")
    return str(out.stdout.strip())


def _leftovers(url: str, host: Any) -> str | None:
    found = host.run(CMD_LEFTOVERS)
    pids = [p for p in found.stdout.split() if p.isdigit()] if found.rc == 0 else []
    if not pids:
        return None
    killed = host.run(f"kill -KILL {' '.join(pids)}").rc == 0
    return f"{url}: all_reduce_perf pid {', '.join(pids)} left running ({'killed' if killed else 'kill failed'})"


def run_fabric_test(hosts: Sequence[tuple[str, Any]], pool: NodePool, *,
                    all_reduce_perf: str = DEFAULT_ALL_REDUCE_PERF,
                    kill_after_s: int = DEFAULT_KILL_AFTER_S) -> FabricVerdict:
    """Run the all-reduce from the first host across all of them, clean up on every host, judge the result."""
    names = [_mpi_name(url, host) for url, host in hosts]
    limit = pool.node_check.fabric_test_seconds
    command = mpirun_command(hosts=names, gpus_per_host=pool.instance.gpu_count, fabric=pool.fabric,
                             limit_s=limit, all_reduce_perf=all_reduce_perf, kill_after_s=kill_after_s)
    result = hosts[0][1].run(command)
    run = BoundedRun(result.rc, result.stdout, result.stderr, (), True)
    left = [msg for url, host in hosts if (msg := _leftovers(url, host))]
    if run.timed_out:
        return FabricVerdict(False, f"the all-reduce did not finish within {limit} s and was stopped"
                             + ("" if not run.ignored_term else " (it ignored SIGTERM)")
                             + (f"; {'; '.join(left)}" if left else ""))
    if left:
        return FabricVerdict(False, "; ".join(left))
    if run.rc != 0:
        text = run.stderr or run.stdout
        meaningful = "\n".join(line for line in text.splitlines() if re.search(r"[A-Za-z]", line))
        raise CannotRun(describe_failure("mpirun", run.rc, meaningful))
    try:
        rows = parse_nccl_tests(run.stdout)
    except ParseError as err:
        raise CannotRun(str(err)) from None
    return judge(rows, parse_nccl_log(run.stdout + "\n" + run.stderr), pool=pool, hosts=len(hosts))


def fabric_check_command(*, stack: str, pool: str, hosts: str, stacks_dir: Path | None,
                         all_reduce_perf: str = DEFAULT_ALL_REDUCE_PERF) -> int:
    """The CLI entry point: 0 the fabric passed, 1 it failed or could not run, 2 bad stack, pool or hosts."""
    from infra.nodecheck.runner import UsageError, load_pool, parse_hosts, unreachable
    from infra.nodecheck.runner import stderr_line as err

    try:
        profile = load_pool(stack, pool, stacks_dir)
        urls = parse_hosts(hosts)
        if profile.fabric not in ("efa", "infiniband"):
            raise UsageError(f"pool {pool!r} has fabric {profile.fabric!r}: fabric-check needs an 'efa' or "
                             "'infiniband' pool")
        if len(urls) < DEFAULT_MIN_HOSTS:
            raise UsageError(f"fabric-check needs at least {DEFAULT_MIN_HOSTS} hosts of the pool; got {len(urls)}")
    except UsageError as usage:
        err(f"aifactory: {usage}")
        return EXIT_USAGE
    try:
        found = [(url, testinfra.get_host(url)) for url in urls]
    except Exception as bad:  # noqa: BLE001 - a host URL testinfra cannot use
        err(f"aifactory: host unusable: {bad}")
        return EXIT_FAILURE
    with ThreadPoolExecutor(max_workers=len(found)) as pool_:
        reach = list(pool_.map(lambda item: unreachable(item[1]), found))
    if down := [f"{url}: host unreachable: {why}" for (url, _), why in zip(found, reach, strict=True) if why]:
        print("\n".join(down))
        print(f"fabric-check {stack}/{pool}: REJECTED: {len(down)} of {len(urls)} host(s) unreachable")
        return EXIT_FAILURE
    err(f"fabric-check {stack}/{pool}: all_reduce_perf across {len(urls)} host(s), at most "
        f"{profile.node_check.fabric_test_seconds} s")
    try:
        verdict = run_fabric_test(found, profile, all_reduce_perf=all_reduce_perf)
    except CannotRun as cannot:
        verdict = FabricVerdict(False, f"could not run: {cannot}")
    print(f"fabric-check {stack}/{pool} ({profile.instance_type}, fabric {profile.fabric}): "
          f"{'ACCEPTED' if verdict.ok else 'REJECTED'}: {verdict.detail}")
    return EXIT_OK if verdict.ok else EXIT_FAILURE
