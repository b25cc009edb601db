"""Helpers for the real servers tests start (Envoy, Prometheus, the policy pack): ports and stopping."""

from __future__ import annotations

import socket
import subprocess

__all__ = ["free_port", "stop_process"]

DEFAULT_STOP_TIMEOUT_S = 10.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
