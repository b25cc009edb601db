"""The preStop of a multi-node replica's worker, run as rendered (prod's deep-research worker: `python3 -c <script>
PORT BOUND POLL`) against a stand-in leader port on 127.0.0.1, with its bound and poll made short (docs/serving.md,
"Multi-node replicas"; docs/contracts.md, "Day 2: model pods").

- A leader whose port closes (its engine exited): the worker's wait ends within a poll interval, long before the
  bound.
- A leader whose port stays open (still draining): the wait ends at the bound, not before.
- A leader whose name no longer resolves (its pod is gone): the wait ends after two failed polls.
- No LWS_LEADER_ADDRESS: it cannot tell, and waits the whole bound.

LWS sets LWS_LEADER_ADDRESS in every container of the group (kubernetes-sigs/lws@v0.9.0 pkg/utils/pod/pod_utils.go
AddLWSVariables); an exec hook runs with the container's environment (containerd internal/cri/server/
container_execsync.go execInternal). Every wait here is bounded; no fixed sleep.

Once the wait ends, the kubelet sends SIGTERM to the container's main process, the init of its PID namespace, which
gets it only if it handles it (man7.org pid_namespaces(7)): the vLLM worker's shell exits on it
(engines.vllm.WORKER_EXIT_ON_SIGTERM), where multi-node-serving.sh's bash alone would not. Run as PID 1 of a new PID
namespace (`unshare`, which needs root: skipped without it).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.k8s.engines.vllm import WORKER_EXIT_ON_SIGTERM
from components.k8s.serving import workload
from tests.support.stacks import stack_config

POLL = 0.2  # seconds between polls in these runs (the rendered command says 2)
SLACK = 2.0  # a busy 2-core machine's scheduling, on top of what the script itself may take


@pytest.fixture(scope="module")
def rendered() -> list[str]:
    """prod's deep-research worker's preStop command, as rendered: python3 -c <script> 6379 945 2."""
    cfg = stack_config("prod")
    template = workload(cfg, cfg.models["deep-research"])["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    command = template["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "python3" and command[1] == "-c" and command[3:] == ["6379", "945", "2"]
    return list(command)


class Leader:
    """A stand-in leader port on 127.0.0.1 that accepts and closes each connection, counting them, until closed."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.polls = 0
        self.first = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            conn.close()
            self.polls += 1
            self.first.set()

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept (Linux); closing alone would not
        except OSError:  # closed already
            pass
        self.sock.close()
        self._thread.join(timeout=5)


@pytest.fixture
def leader() -> Iterator[Leader]:
    port = Leader()
    yield port
    port.close()


def _start(command: list[str], port: int, bound: float, address: str | None) -> subprocess.Popen[str]:
    """The rendered command with this interpreter, the stand-in's port, a short bound and poll."""
    env = {k: v for k, v in os.environ.items() if k != "LWS_LEADER_ADDRESS"}
    if address is not None:
        env["LWS_LEADER_ADDRESS"] = address
    return subprocess.Popen([sys.executable, *command[1:3], str(port), f"{bound:g}", f"{POLL:g}"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen[str], timeout: float) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode == 0, out
    return out


def test_the_wait_ends_within_a_poll_once_the_leaders_engine_has_exited(rendered: list[str], leader: Leader) -> None:
    proc = _start(rendered, leader.port, 60, "127.0.0.1")
    assert leader.first.wait(timeout=10), "the worker's preStop never polled the leader"
    leader.close()
    closed = time.monotonic()
    out = _finish(proc, timeout=30)
    assert out == (f"aifactory leader-wait: 127.0.0.1:{leader.port} refuses connections: the leader's engine has "
                   "exited\n")
    assert time.monotonic() - closed < POLL + SLACK  # one poll interval after the close, not the 60 s bound


def test_the_wait_lasts_the_bound_while_the_leader_still_drains(rendered: list[str], leader: Leader) -> None:
    started = time.monotonic()
    out = _finish(_start(rendered, leader.port, 2, "127.0.0.1"), timeout=2 + 10)
    assert time.monotonic() - started >= 2
    assert out == f"aifactory leader-wait: the leader's port {leader.port} is still open after 2 s, the bound: done\n"
    assert leader.polls >= 2  # it kept asking, every poll


def test_the_wait_ends_after_two_failed_polls_once_the_leaders_name_is_gone(rendered: list[str]) -> None:
    """The leader pod deleted: its name leaves the LWS's headless Service (RFC 6761 `.invalid` never resolves)."""
    out = _finish(_start(rendered, 6379, 60, "deep-research-lws-0.invalid"), timeout=30)
    assert out == ("aifactory leader-wait: deep-research-lws-0.invalid:6379 did not answer two polls in a row: the "
                   "leader is gone\n")


def test_without_the_leaders_address_it_waits_the_whole_bound(rendered: list[str], leader: Leader) -> None:
    started = time.monotonic()
    out = _finish(_start(rendered, leader.port, 1, None), timeout=1 + 10)
    assert time.monotonic() - started >= 1 and leader.polls == 0
    assert out == "aifactory leader-wait: LWS_LEADER_ADDRESS is not set: waiting the whole bound (1 s)\n"


SIGTERM_CAUGHT = 1 << 14  # /proc/<pid>/status SigCgt: bit (signal - 1), SIGTERM is 15


def _as_namespace_init(script: str) -> tuple[subprocess.Popen[bytes], int]:
    """`bash -c script` as PID 1 of a new PID namespace, and its PID as seen from here, once it runs."""
    outer = subprocess.Popen(["unshare", "--fork", "--pid", "--kill-child", "/bin/bash", "-c", script],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children = Path(f"/proc/{outer.pid}/task/{outer.pid}/children")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = children.read_text().split() if children.exists() else []
        if found:
            return outer, int(found[0])
        time.sleep(0.02)
    outer.kill()
    raise AssertionError("the namespace's init never started")


def _caught(pid: int) -> int:
    line = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("SigCgt:"))
    return int(line.split()[1], 16)


@pytest.fixture(scope="module")
def worker_command() -> str:
    cfg = stack_config("prod")
    template = workload(cfg, cfg.models["deep-research"])["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    command = template["spec"]["containers"][0]["command"]
    assert command[:2] == ["/bin/bash", "-c"] and command[2].endswith(WORKER_EXIT_ON_SIGTERM)
    if subprocess.run(["unshare", "--fork", "--pid", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare --pid needs root here")
    return command[2]


def test_the_vllm_worker_exits_on_the_sigterm_that_follows_its_prestop(worker_command: str, tmp_path: Path) -> None:
    """The rendered worker command, its multi-node-serving.sh replaced by a stand-in that never ends (a worker whose
    leader is gone keeps retrying to join it): as its namespace's init it exits on SIGTERM. The script alone, as the
    init (what `bash -c '<script> ...'` came to before), does not: the kernel drops the signal."""
    loop = tmp_path / "multi-node-serving.sh"
    loop.write_text("while true; do sleep 1; done\n")
    for wrapped, exits in ((f"bash {loop}{WORKER_EXIT_ON_SIGTERM}", True), (f"exec bash {loop}", False)):
        outer, init = _as_namespace_init(wrapped)
        try:
            deadline = time.monotonic() + 10  # the shell sets its trap right after starting the script
            while exits and not _caught(init) & SIGTERM_CAUGHT and time.monotonic() < deadline:
                time.sleep(0.02)
            assert bool(_caught(init) & SIGTERM_CAUGHT) == exits, wrapped
            os.kill(init, 15)
            if exits:
                assert outer.wait(timeout=10) == 0, wrapped
            else:
                with pytest.raises(subprocess.TimeoutExpired):  # still there: only SIGKILL ends it
                    outer.wait(timeout=1)
        finally:
            if outer.poll() is None:
                os.kill(init, 9)
                outer.wait(timeout=10)
