"""`aifactory node-check`: run the pool's checks on each host, print progress and a pass/fail table.

Why testinfra's host API rather than `pytest.main(["--hosts", ...])` over a test module: the suite is a
product command, not a test session. Driving `testinfra.get_host(url)` keeps every testinfra backend
(local, ssh, paramiko, kubectl, docker, ...) and its URL syntax, while the command owns what a test
session would blur: a check that does not apply is "n/a" with the profile's reason, a check that applies
and cannot run is "fail" with the tool's reason (never a skip), progress is one line per check, hosts run
in parallel, and no conftest, rootdir or plugin discovery depends on where the kit is installed or on an
outer pytest session (the CI tests call this very function).

Exit codes (infra.commands): 0 every applicable check passed on every host; 1 a check failed; 2 bad stack,
pool or host URL (the message names what exists).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import testinfra
import testinfra.backend

from components.k8s.settings import NodePool
from infra.config import ConfigError, PlatformConfig
from infra.nodecheck.checks import CHECKS, Check, CheckFailed
from infra.nodecheck.cluster import Kubectl
from infra.nodecheck.probe import CannotRun, Probe
from infra.outputs import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, UsageError
from infra.synth import StackFileError, load_stack

__all__ = [
    "CheckResult",
    "DEFAULT_PARALLEL_HOSTS",
    "plan",
    "check_node",
    "load_pool",
    "kubectl_for",
    "unreachable",
    "UNREACHABLE_CHECK",
    "parse_hosts",
    "format_table",
    "node_check_command",
]

DEFAULT_PARALLEL_HOSTS = 8  # hosts checked at once (each runs its checks in order)
UNREACHABLE_CHECK = "host"  # the one row an unreachable host gets, instead of one failure per check
Status = Literal["pass", "fail", "n/a"]
Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class CheckResult:
    host: str
    check: str
    status: Status
    detail: str


def plan(pool: NodePool) -> list[tuple[Check, str | None]]:
    """Every check with None when the profile makes it apply, else the reason it does not."""
    return [(check, check.applies(pool)) for check in CHECKS]


def _run_one(check: Check, probe: Probe, pool: NodePool) -> tuple[Status, str]:
    try:
        return "pass", check.run(probe, pool)
    except CheckFailed as err:
        return "fail", str(err)
    except CannotRun as err:
        return "fail", f"could not run: {err}"
    except Exception as err:  # noqa: BLE001 - a broken connection or a bug in one check fails that check only
        return "fail", f"could not run: {type(err).__name__}: {err}"


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def unreachable(host: Any) -> str | None:
    """None when the host runs a command; else why not, in the transport's own words.

    testinfra's ssh backend raises RuntimeError(CommandResult) when ssh exits 255 (connection failed);
    paramiko raises its own errors; kubectl/docker answer with a failing exit status.
    """
    try:
        result = host.run("true")
    except Exception as err:  # noqa: BLE001 - whatever the backend raises, the host is unreachable
        detail = err.args[0] if err.args else err
        text = getattr(detail, "stderr", None) or getattr(detail, "stdout", None) or str(detail)
        return _first_line(str(text)) or type(err).__name__
    if result.rc != 0:
        return _first_line(result.stderr or result.stdout) or f"`true` exited {result.rc}"
    return None


def check_node(host: Any, pool: NodePool, *, label: str, progress: Progress | None = None,
               kubectl: Kubectl | None = None) -> list[CheckResult]:
    """Run the pool's checks on one testinfra host, in table order; one row if the host is unreachable."""
    if (why := unreachable(host)) is not None:
        if progress is not None:
            progress(f"[{label}] host unreachable: {why}")
        return [CheckResult(label, UNREACHABLE_CHECK, "fail", f"host unreachable: {why}")]
    probe = Probe(host, url=label, kubectl=kubectl)
    steps = plan(pool)
    total = sum(why is None for _, why in steps)
    results, done = [], 0
    for check, not_applicable in steps:
        if not_applicable is not None:
            results.append(CheckResult(label, check.id, "n/a", not_applicable))
            continue
        status, detail = _run_one(check, probe, pool)
        results.append(CheckResult(label, check.id, status, detail))
        done += 1
        if progress is not None:
            progress(f"[{label}] {done}/{total} {check.id}: {status.upper()}"
                     + (f" - {detail}" if status == "fail" else ""))
    return results


def _load(stack: str, stacks_dir: Path | None) -> PlatformConfig:
    try:
        return load_stack(stack, stacks_dir)
    except (StackFileError, ConfigError) as err:
        raise UsageError(str(err)) from None


def _pool(cfg: PlatformConfig, pool: str) -> NodePool:
    if pool not in cfg.node_pools:
        raise UsageError(f"stack {cfg.stack!r} has no node pool {pool!r}; pools: {', '.join(sorted(cfg.node_pools))}")
    return cfg.node_pools[pool]


def load_pool(stack: str, pool: str, stacks_dir: Path | None) -> NodePool:
    """The pool's profile from the stack config; UsageError names the stacks or pools that exist."""
    return _pool(_load(stack, stacks_dir), pool)


def kubectl_for(cfg: PlatformConfig) -> Kubectl:
    """kubectl for the stack's cluster: an existing cluster's kubeconfig and context; on AWS kubectl's own
    ($KUBECONFIG or ~/.kube/config, as `aws eks update-kubeconfig` writes it)."""
    if cfg.is_aws or cfg.target.kubeconfig is None:
        return Kubectl()
    return Kubectl(kubeconfig=str(Path(cfg.target.kubeconfig).expanduser()), context=cfg.target.context)


def parse_hosts(hosts: str) -> list[str]:
    """Comma-separated testinfra host URLs; UsageError on an empty list or an unknown backend."""
    urls = [h.strip() for h in hosts.split(",") if h.strip()]
    if not urls:
        raise UsageError("--hosts is empty; give testinfra URLs such as local://, ssh://user@node, "
                         "kubectl://POD?namespace=NS")
    for url in urls:
        scheme = url.partition("://")[0] if "://" in url else ""
        if scheme not in testinfra.backend.BACKENDS:
            raise UsageError(f"host {url!r}: unknown or missing scheme {scheme!r}; use one of: "
                             + ", ".join(f"{s}://" for s in sorted(testinfra.backend.BACKENDS)))
        host = url.partition("://")[2].partition("?")[0].rpartition("@")[2]
        if scheme not in _HOSTLESS_BACKENDS and not host.strip("/"):
            raise UsageError(f"host {url!r}: names no {_EXAMPLE.get(scheme, ('host', ''))[0]} after {scheme}://"
                             f"{_EXAMPLE.get(scheme, ('', ''))[1]}")
    return urls


# testinfra backends whose URL needs no host: this machine, or a directory on it
_HOSTLESS_BACKENDS = frozenset({"local", "chroot", "ansible"})  # ansible:// is every host of the inventory
_EXAMPLE = {"ssh": ("host", "; e.g. ssh://user@10.0.0.5"), "safe-ssh": ("host", "; e.g. safe-ssh://user@10.0.0.5"),
            "paramiko": ("host", "; e.g. paramiko://user@10.0.0.5"),
            "kubectl": ("pod", "; e.g. kubectl://POD?namespace=NS"), "openshift": ("pod", "; e.g. openshift://POD"),
            "docker": ("container", ""), "podman": ("container", ""), "lxc": ("container", "")}


def format_table(results: Sequence[CheckResult]) -> str:
    headers = ("HOST", "CHECK", "RESULT", "DETAIL")
    rows = [(r.host, r.check, r.status.upper(), r.detail) for r in results]
    widths = [max(len(row[i]) for row in (headers, *rows)) for i in range(3)]
    return "\n".join(f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c:<{widths[2]}}  {d}".rstrip()
                     for a, b, c, d in (headers, *rows))


def _summary(stack: str, pool: NodePool, hosts: int, results: Sequence[CheckResult]) -> str:
    count = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "n/a")}
    verdict = "ACCEPTED" if count["fail"] == 0 else "REJECTED"
    return (f"node-check {stack}/{pool.name} ({pool.instance_type}, fabric {pool.fabric}): {verdict}: "
            f"{hosts} host(s), {count['pass']} passed, {count['fail']} failed, {count['n/a']} not applicable")


_STDERR_LOCK = threading.Lock()


def stderr_line(message: str) -> None:
    """One whole line on stderr: hosts are checked in threads, and print() writes the text and its newline in two
    calls, so two hosts' lines could interleave on one line."""
    with _STDERR_LOCK:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()


def node_check_command(*, stack: str, pool: str, hosts: str, stacks_dir: Path | None,
                       kubectl: Kubectl | None = None, json_out: Path | None = None) -> int:
    """The CLI entry point: check every host against the pool's profile; exit 0 only if all applicable pass.

    `kubectl` (default: the stack's cluster, see kubectl_for) finds the DCGM exporter pod of each node."""
    try:
        cfg = _load(stack, stacks_dir)
        profile = _pool(cfg, pool)
        urls = parse_hosts(hosts)
    except UsageError as err:
        stderr_line(f"aifactory: {err}")
        return EXIT_USAGE
    cluster = kubectl or kubectl_for(cfg)
    applicable = [c.id for c, why in plan(profile) if why is None]
    stderr_line(f"node-check {stack}/{pool}: {len(urls)} host(s); checks: {', '.join(applicable)}")

    def one(url: str) -> list[CheckResult]:
        try:
            host = testinfra.get_host(url)
        except Exception as err:  # noqa: BLE001 - an unusable host fails its row, the others still run
            stderr_line(f"[{url}] host unusable: {err}")
            return [CheckResult(url, UNREACHABLE_CHECK, "fail", f"host unusable: {err}")]
        return check_node(host, profile, label=url, progress=stderr_line, kubectl=cluster)

    with ThreadPoolExecutor(max_workers=min(len(urls), DEFAULT_PARALLEL_HOSTS)) as pool_:
        results = [r for per_host in pool_.map(one, urls) for r in per_host]
    human = sys.stderr if json_out is not None and str(json_out) == "-" else sys.stdout
    print(format_table(results), file=human)
    print(_summary(stack, profile, len(urls), results), file=human)
    if json_out is not None:  # `--json OUT` (`-`: stdout); infra.commands checked the target before any work
        from infra.outputs import write_json

        write_json(json_out, {"stack": stack, "pool": profile.name, "instanceType": profile.instance_type,
                              "accepted": all(r.status != "fail" for r in results),
                              "results": [{"host": r.host, "check": r.check, "status": r.status, "detail": r.detail}
                                          for r in results]})
    return EXIT_OK if all(r.status != "fail" for r in results) else EXIT_FAILURE
