"""Progress lines from hosts checked in parallel threads reach stderr whole, one host per line."""

from __future__ import annotations

import sys
import threading

import pytest

from infra.nodecheck.runner import stderr_line


class _Interleaving:
    """A stream that lets a second writer in after the first write of a line: print() writes the text and its
    newline in two calls, so without a lock two threads' lines meet on one line (seen on a loaded CI machine)."""

    def __init__(self) -> None:
        self.text = ""
        self._both_wrote = threading.Barrier(2)

    def write(self, s: str) -> int:
        self.text += s
        if s.strip():
            try:  # the other thread's first write, if it can get in (0.5 s: bounded when a lock keeps it out)
                self._both_wrote.wait(timeout=0.5)
            except threading.BrokenBarrierError:
                pass
        return len(s)

    def flush(self) -> None:
        pass


def test_lines_written_from_two_threads_are_never_joined(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _Interleaving()
    monkeypatch.setattr(sys, "stderr", stream)
    threads = [threading.Thread(target=stderr_line, args=(f"[host-{i}] host unreachable",)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=5)
    assert sorted(stream.text.splitlines()) == ["[host-1] host unreachable", "[host-2] host unreachable"]
