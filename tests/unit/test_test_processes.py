"""The servers tests start die with the test process, even when it is SIGKILLed (a CI timeout, a mutation run's
time limit): fixtures get no chance to stop them then."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

PARENT = """
import subprocess, sys, time
from tests.support.processes import die_with_parent
child = subprocess.Popen(["sleep", "60"], preexec_fn=die_with_parent)
print(child.pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie (not yet reaped by init) counts as gone
        return f.read().split(") ", 1)[1][0] != "Z"


def test_a_server_dies_when_the_test_process_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True,
                              cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 5
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=10)
