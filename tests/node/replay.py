"""A testinfra backend that answers node-check's commands from recorded tool output (CI has no GPU).

Host URL `replay://KIND` replays tests/node/recordings/KIND/healthy/; `replay://KIND+CASE` first looks in
KIND/CASE/ (only the files that differ from a healthy node) and falls back to KIND/healthy/. A command
with no recording answers like a shell whose tool is missing: exit 127, "sh: 1: TOOL: not found".
`FILE.rc` next to a recording holds a non-zero exit status (pgrep exits 1 when nothing matches), `FILE.stderr`
what the command printed on stderr. `true` (node-check's reachability probe) always succeeds.

`replay_kubectl(KIND)` is a `Kubectl` whose program prints KIND/healthy/kubectl-get-pods-dcgm-exporter.json
(or KIND/CASE/...) for `kubectl get pods ... -o json`: what the cluster says about the exporter pods.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import testinfra.backend
from testinfra.backend.base import BaseBackend, CommandResult

from infra.nodecheck import checks
from infra.nodecheck.cluster import Kubectl

__all__ = ["RECORDINGS", "ReplayBackend", "replay_host", "replay_kubectl", "register"]

RECORDINGS = Path(__file__).resolve().parent / "recordings"

# node-check's commands -> recording file names (see recordings/README.md)
FILES = {
    checks.CMD_UNAME: "uname.txt",
    checks.CMD_DRIVER: "proc-driver-nvidia-version.txt",
    checks.CMD_GPUS: "nvidia-smi-query-gpu.csv",
    checks.CMD_REMAPPED_ROWS: "nvidia-smi-query-remapped-rows.csv",
    checks.CMD_NVLINK: "nvidia-smi-nvlink-status.txt",
    checks.CMD_KERNEL_LOG: "kernel-log.txt",
    checks.CMD_UID: "id-u.txt",
    checks.CMD_HOSTNAME: "hostname.txt",
    checks.CMD_EFA: "fi_info-efa.txt",
    checks.CMD_MEMINFO: "proc-meminfo.txt",
    checks.CMD_IBSTAT: "ibstat.txt",
    checks.CMD_CONTAINERD: "containerd-config.toml",
    checks.CMD_CONTAINERD_LIMITS: "containerd-limits.txt",
}
# commands that carry a per-run token: matched by pattern
PATTERNS = ((re.compile(r"^timeout --verbose --kill-after=\d+ \d+ python3 - ", re.MULTILINE), "burn-in.jsonl"),
            # the leftover check, alone or after its settle loop (probe.settled_leftover_command): what pgrep says last
            (re.compile(r"^(i=0; while .* done; )?pgrep -f "), "burn-in-leftovers.txt"),
            (re.compile(r"^curl -sS --max-time \d+ https?://\S+$"), "dcgm-exporter-metrics.txt"),
            (re.compile(r"^timeout --verbose --kill-after=\d+ \d+ mpirun ", re.MULTILINE), "nccl-all-reduce.txt"),
            (re.compile(r"^pgrep -x all_reduce_perf$"), "nccl-leftovers.txt"),
            (re.compile(r"^kill -KILL "), "kill-leftovers.txt"))


class ReplayBackend(BaseBackend):
    NAME = "replay"

    def __init__(self, hostname: str, *args: Any, missing: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(hostname, *args, **kwargs)
        kind, _, case = hostname.partition("+")
        self.dirs = [RECORDINGS / kind / c for c in ((case, "healthy") if case else ("healthy",))]
        for d in self.dirs:
            if not d.is_dir():
                raise ValueError(f"no recordings in {d}")
        self.missing = missing
        self.commands: list[str] = []

    def _recording(self, command: str) -> Path | None:
        name = FILES.get(command) or next((f for p, f in PATTERNS if p.search(command)), None)
        if name is None or name in self.missing:
            return None
        return next((d / name for d in self.dirs if (d / name).is_file()), None)

    def run(self, command: str, *args: str, **kwargs: Any) -> CommandResult:
        cmd = self.get_command(command, *args)
        self.commands.append(cmd)
        if cmd == "true":
            return self.result(0, cmd.encode(), "", "")
        path = self._recording(cmd)
        if path is None:
            return self.result(127, cmd.encode(), "", f"sh: 1: {cmd.split()[0]}: not found\n")
        rc_file = path.with_suffix(".rc")
        rc = int(rc_file.read_text()) if rc_file.is_file() else 0
        err_file = path.with_suffix(".stderr")
        return self.result(rc, cmd.encode(), path.read_text(), err_file.read_text() if err_file.is_file() else "")


def replay_host(name: str, *, missing: tuple[str, ...] = ()) -> Any:
    """A testinfra Host over the recordings (not cached, so each test sees its own command log)."""
    from testinfra.host import Host

    backend = ReplayBackend(name, missing=missing)
    host = Host(backend)
    backend.set_host(host)
    return host


def replay_kubectl(name: str) -> Kubectl:
    """A Kubectl whose program answers from the recordings of `name` (KIND or KIND+CASE)."""
    return Kubectl(argv=(sys.executable, str(Path(__file__).resolve().parent / "replay_kubectl.py"), name))


def register(monkeypatch: Any) -> None:
    """Make `replay://` a testinfra URL scheme for the duration of a test (CLI-level tests)."""
    monkeypatch.setitem(testinfra.backend.BACKENDS, "replay", f"{__name__}.ReplayBackend")
