"""Helpers for the real servers tests start (Envoy, Prometheus, the policy pack): ports and stopping."""

from __future__ import annotations

import ctypes
import signal
import socket
import subprocess
import sys
import threading
from typing import Any, Self

__all__ = ["free_port", "stop_process", "die_with_parent", "ServedInThread"]

DEFAULT_STOP_TIMEOUT_S = 10.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def die_with_parent() -> None:
    """Popen preexec_fn: the child gets SIGKILL when the test process dies (Linux prctl PR_SET_PDEATHSIG), so a
    server outlives no test run, not even one killed with SIGKILL (a CI timeout, a mutation run's time limit),
    where fixtures get no chance to stop it."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1  # <linux/prctl.h>
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)


def stop_process(proc: subprocess.Popen, timeout: float = DEFAULT_STOP_TIMEOUT_S) -> None:
    """Terminate, wait (bounded), then kill: a test's server never outlives it."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


class ServedInThread:
    """Base of the in-process fake servers: `_server` (a socketserver) runs in `_thread` from entering to leaving,
    and leaving shuts it down, closes its socket and joins the thread (bounded)."""

    _server: Any
    _thread: threading.Thread

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
