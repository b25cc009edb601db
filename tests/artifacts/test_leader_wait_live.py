"""The preStop of a multi-node replica's worker, run as rendered (prod's deep-research worker: `python3 -c <script>
PORT BOUND POLL`) against a stand-in leader port on 127.0.0.1, with its bound and poll made short (docs/serving.md,
"Multi-node replicas"; docs/contracts.md, "Day 2: model pods").

- A leader whose port closes (its engine exited): the worker's wait ends within a poll interval, long before the
  bound.
- A leader whose port stays open (still draining): the wait ends at the bound, not before.
- A leader whose name no longer resolves (its pod is gone): the wait ends after two failed tries.
- A leader whose name later resolves to another pod (a rollout's replacement of the same name): the wait keeps
  polling the first address, and ends when that one closes.
- No LWS_LEADER_ADDRESS: it cannot tell, and waits the whole bound.
- Why it ended goes to the container's log (/proc/1/fd/1, the standard output of the namespace's init: run under
  `unshare --mount-proc`), or to its own standard output when that cannot be opened (the runs here, with a LOG that
  does not exist: the kubelet would discard it).

LWS sets LWS_LEADER_ADDRESS in every container of the group (kubernetes-sigs/lws@v0.9.0 pkg/utils/pod/pod_utils.go
AddLWSVariables); an exec hook runs with the container's environment (containerd internal/cri/server/
container_execsync.go execInternal). Every wait here is bounded; no fixed sleep.

Once the wait ends, the kubelet sends SIGTERM to the container's main process, the init of its PID namespace, which
gets it only if it handles it (man7.org pid_namespaces(7)): the vLLM worker's shell exits on it
(engines.vllm.EXIT_ON_SIGTERM), where multi-node-serving.sh's bash alone would not; so does the vLLM leader's while
its group forms, and once the script succeeded it execs its engine (here a stand-in) behind the NCCL guard, which
handles SIGTERM as the new init; the SGLang worker's shell exits on it too. Run as PID 1 of a new PID namespace
(`unshare`, which needs root: skipped without it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.k8s.engines.vllm import EXIT_ON_SIGTERM, MULTI_NODE_SCRIPT
from components.k8s.serving import workload
from tests.support.stacks import stack_config

POLL = 0.2  # seconds between polls in these runs (the rendered command says 2)
SLACK = 2.0  # a busy 2-core machine's scheduling, on top of what the script itself may take


@pytest.fixture(scope="module")
def rendered() -> list[str]:
    """prod's deep-research worker's preStop command, as rendered: python3 -c <script> 6379 945 2 /proc/1/fd/1."""
    cfg = stack_config("prod")
    template = workload(cfg, cfg.models["deep-research"])["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    command = template["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "python3" and command[1] == "-c" and command[3:] == ["6379", "945", "2", "/proc/1/fd/1"]
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


NO_LOG = "/nonexistent/aifactory-leader-wait.log"  # cannot be opened: the line goes to standard output


def _start(command: list[str], port: int, bound: float, address: str | None, log: str = NO_LOG,
           env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """The rendered command with this interpreter, the stand-in's port, a short bound and poll, and `log`."""
    env = {k: v for k, v in {**os.environ, **(env or {})}.items() if k != "LWS_LEADER_ADDRESS"}
    if address is not None:
        env["LWS_LEADER_ADDRESS"] = address
    return subprocess.Popen([sys.executable, *command[1:3], str(port), f"{bound:g}", f"{POLL:g}", log], env=env,
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


def test_the_wait_ends_after_two_failed_tries_once_the_leaders_name_is_gone(rendered: list[str]) -> None:
    """The leader pod deleted: its name leaves the LWS's headless Service (RFC 6761 `.invalid` never resolves)."""
    out = _finish(_start(rendered, 6379, 60, "deep-research-lws-0.invalid"), timeout=30)
    assert out == ("aifactory leader-wait: deep-research-lws-0.invalid did not resolve on two tries: the leader is "
                   "gone\n")


# Loaded by the script's interpreter at start-up (`site` imports sitecustomize from PYTHONPATH): the name
# AIFACTORY_TEST_NAME resolves to 127.0.0.1 the first time, to 127.0.0.2 every time after.
MOVING_NAME = """
import os, socket
_real, _calls = socket.getaddrinfo, []
def _moving(host, *args, **kwargs):
    if host == os.environ["AIFACTORY_TEST_NAME"]:
        _calls.append(host)
        host = "127.0.0.1" if len(_calls) == 1 else "127.0.0.2"
    return _real(host, *args, **kwargs)
socket.getaddrinfo = _moving
"""


def test_the_wait_keeps_its_leaders_address_when_the_name_moves_to_a_replacement(rendered: list[str],
                                                                                  tmp_path: Path) -> None:
    """A rollout re-creates the leader pod under the same name while the old worker still waits: the replacement's
    engine port is open (its Ray head up), the old leader's closes. The wait resolves the name once and ends on the
    old leader's address; resolving it at every poll, it would see the replacement's open port and hold the worker's
    GPUs to the bound. The old leader on 127.0.0.1, the replacement on 127.0.0.2 (same port)."""
    (tmp_path / "sitecustomize.py").write_text(MOVING_NAME)
    old = Leader()
    replacement = socket.socket()
    try:
        replacement.bind(("127.0.0.2", old.port))
        replacement.listen(64)
        env = {"PYTHONPATH": str(tmp_path), "AIFACTORY_TEST_NAME": "deep-research-lws-0.test"}
        proc = _start(rendered, old.port, 60, "deep-research-lws-0.test", env=env)
        assert old.first.wait(timeout=10), "the worker's preStop never polled its leader"
        deadline = time.monotonic() + 10
        while old.polls < 2 and time.monotonic() < deadline:  # it keeps polling the first address
            time.sleep(0.02)
        assert old.polls >= 2
        old.close()
        out = _finish(proc, timeout=10)  # not the 60 s bound
        assert out == (f"aifactory leader-wait: deep-research-lws-0.test (127.0.0.1):{old.port} refuses connections: "
                       "the leader's engine has exited\n")
    finally:
        old.close()
        replacement.close()


def test_the_reason_goes_to_the_containers_log(rendered: list[str], leader: Leader, tmp_path: Path) -> None:
    """LOG is opened for appending, and nothing goes to the hook's own output (which the kubelet discards)."""
    log = tmp_path / "container.log"
    log.write_text("engine line\n")
    out = _finish(_start(rendered, leader.port, 0.5, "127.0.0.1", log=str(log)), timeout=10)
    assert out == ""
    assert log.read_text() == (f"engine line\naifactory leader-wait: the leader's port {leader.port} is still open "
                               "after 0.5 s, the bound: done\n")


def test_without_the_leaders_address_it_waits_the_whole_bound(rendered: list[str], leader: Leader) -> None:
    started = time.monotonic()
    out = _finish(_start(rendered, leader.port, 1, None), timeout=1 + 10)
    assert time.monotonic() - started >= 1 and leader.polls == 0
    assert out == "aifactory leader-wait: LWS_LEADER_ADDRESS is not set: waiting the whole bound (1 s)\n"


SIGTERM_CAUGHT = 1 << 14  # /proc/<pid>/status SigCgt: bit (signal - 1), SIGTERM is 15
FOREVER = "while true; do sleep 1; done\n"  # a stand-in that never ends by itself


def _as_namespace_init(script: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """`bash -c script` as PID 1 of a new PID namespace, and its PID as seen from here, once it runs."""
    outer = subprocess.Popen(["unshare", "--fork", "--pid", "--kill-child", "/bin/bash", "-c", script],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
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


def _sigterm_ends(script: str, *, handler_within: float, env: dict[str, str] | None = None,
                  init_runs: str | None = None) -> bool:
    """Whether SIGTERM sent from outside ends `script` run as a namespace's init, once the init has a SIGTERM handler
    (polled for up to `handler_within` s). `init_runs`: the init's command line must then hold it (an exec: the
    same PID runs it)."""
    outer, init = _as_namespace_init(script, env)
    try:
        deadline = time.monotonic() + handler_within
        if init_runs is not None:  # first the exec, then its handler (the shell before it had one: its trap)
            while init_runs.encode() not in Path(f"/proc/{init}/cmdline").read_bytes():
                assert time.monotonic() < deadline, f"the init never ran {init_runs!r}"
                time.sleep(0.02)
        while not _caught(init) & SIGTERM_CAUGHT and time.monotonic() < deadline:
            time.sleep(0.02)
        caught = _caught(init) & SIGTERM_CAUGHT  # read before the signal: a handled one may end the init at once
        os.kill(init, 15)
        try:
            outer.wait(timeout=10 if caught else 1)
        except subprocess.TimeoutExpired:  # still there: only SIGKILL ends it
            return False
        return True
    finally:
        if outer.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # gone between the poll and the kill
                os.kill(init, 9)
            outer.wait(timeout=10)


def _rendered_command(model: str, role: str, engine: str = "vllm") -> str:
    cfg = stack_config("prod")
    m = dataclasses.replace(cfg.models[model], engine=engine)
    template = workload(cfg, m)["spec"]["leaderWorkerTemplate"][f"{role}Template"]
    command = template["spec"]["containers"][0]["command"]
    assert command[:2] == ["/bin/bash", "-c"], command
    return str(command[2])


@pytest.fixture(scope="module")
def unshare() -> None:
    if subprocess.run(["unshare", "--fork", "--pid", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare --pid needs root here")


@pytest.mark.usefixtures("unshare")
def test_the_vllm_worker_exits_on_the_sigterm_that_follows_its_prestop(tmp_path: Path) -> None:
    """The rendered worker command, its multi-node-serving.sh replaced by a stand-in that never ends (a worker whose
    leader is gone keeps retrying to join it): as its namespace's init it exits on SIGTERM. The script alone, as the
    init (what `bash -c '<script> ...'` came to before), does not: the kernel drops the signal."""
    loop = tmp_path / "multi-node-serving.sh"
    loop.write_text(FOREVER)
    worker = _rendered_command("deep-research", "worker")
    assert worker.startswith(f"{MULTI_NODE_SCRIPT} worker ") and worker.endswith(EXIT_ON_SIGTERM)
    assert _sigterm_ends(worker.replace(MULTI_NODE_SCRIPT, f"bash {loop}"), handler_within=10)
    assert not _sigterm_ends(f"exec bash {loop}", handler_within=1)


@pytest.mark.usefixtures("unshare")
def test_a_forming_vllm_leader_exits_on_sigterm(tmp_path: Path) -> None:
    """The rendered leader command while its group forms (multi-node-serving.sh polling for workers that never
    come: a stand-in that never ends) exits on SIGTERM: a group deleted while it forms frees its GPUs at once. The
    form before, `script && exec ...`, kept bash without a SIGTERM handler as the init: dropped."""
    loop = tmp_path / "multi-node-serving.sh"
    loop.write_text(FOREVER)
    leader = _rendered_command("deep-research", "leader")
    start, serve = leader.split(" && exec ")
    assert _sigterm_ends(leader.replace(MULTI_NODE_SCRIPT, f"bash {loop}"), handler_within=10)
    before = start.removesuffix(EXIT_ON_SIGTERM)
    assert before != start
    assert not _sigterm_ends(f"{before} && exec {serve}".replace(MULTI_NODE_SCRIPT, f"bash {loop}"),
                             handler_within=1)


@pytest.mark.usefixtures("unshare")
def test_a_formed_vllm_leader_execs_its_guard_which_passes_sigterm_on(tmp_path: Path) -> None:
    """Once multi-node-serving.sh succeeded (a stand-in that exits 0), the leader's shell execs the NCCL guard (prod
    is on EFA), which becomes the init (same PID, its command line), handles SIGTERM and passes it on to `vllm
    serve` (a stand-in on PATH that never ends by itself): the container then ends."""
    done = tmp_path / "multi-node-serving.sh"
    done.write_text("exit 0\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text(f"#!/bin/bash\n{FOREVER}")
    (bin_dir / "vllm").chmod(0o755)
    leader = _rendered_command("deep-research", "leader").replace(MULTI_NODE_SCRIPT, f"bash {done}")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    guard = '\0-c\0"""Start-up guard of a multi-node vLLM leader'  # python3 -c <nccl_guard.py>, as the init
    assert _sigterm_ends(leader, handler_within=10, env=env, init_runs=guard)


@pytest.mark.usefixtures("unshare")
def test_an_sglang_worker_exits_on_the_sigterm_that_follows_its_prestop(tmp_path: Path) -> None:
    """The rendered SGLang worker command, its launch_server replaced by a stand-in that never ends (a non-zero rank
    waiting for a rank 0 that died abruptly), exits on SIGTERM as its namespace's init."""
    loop = tmp_path / "rank.sh"
    loop.write_text(FOREVER)
    worker = _rendered_command("deep-research", "worker", engine="sglang")
    assert worker.startswith("python3 -m sglang.launch_server ")
    assert _sigterm_ends(worker.replace("python3 -m sglang.launch_server", f"bash {loop}"), handler_within=10)


def test_the_reason_goes_to_the_namespace_inits_standard_output(rendered: list[str], leader: Leader) -> None:
    """As rendered, LOG is /proc/1/fd/1: run under a new PID namespace with its own /proc (`unshare --mount-proc`),
    the line reaches the init's standard output (here a pipe read by the test: a container's is its log) while the
    script's own output goes nowhere."""
    if subprocess.run(["unshare", "--fork", "--pid", "--mount-proc", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare --pid --mount-proc needs root here")
    leader.close()  # its port refuses: the wait ends at once
    script = f'"$0" -c "$1" {leader.port} 60 {POLL:g} {rendered[6]} >/dev/null 2>&1; exit 0'
    out = subprocess.run(["unshare", "--fork", "--pid", "--mount-proc", "/bin/bash", "-c", script,
                          sys.executable, rendered[2]], env={**os.environ, "LWS_LEADER_ADDRESS": "127.0.0.1"},
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (f"aifactory leader-wait: 127.0.0.1:{leader.port} refuses connections: the leader's engine "
                          "has exited\n")
