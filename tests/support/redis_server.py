"""A real Redis (Debian's redis-server) on 127.0.0.1 for the token budget tests and bench: no persistence, stopped
with the test; `pause()` freezes it (SIGSTOP: a store that accepts connections and never answers), `resume()` thaws
it; `stop()` ends it (connections refused) and `start()` starts it again, empty, on the same port. `config`: config
file lines it reads first (the options above override theirs)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Self

import redis

from tests.support.processes import die_with_parent, free_port, stop_process

__all__ = ["REDIS_SERVER", "RedisServer"]

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"  # Debian package redis-server (make test)
START_TIMEOUT_S = 10.0


class RedisServer:
    def __init__(self, workdir: Path, config: str = "") -> None:
        self.workdir = workdir
        self.config = config
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2)

    def __enter__(self) -> Self:
        return self.start()

    def start(self) -> Self:
        conf = self.workdir / "redis.conf"
        conf.write_text(self.config)
        self._proc = subprocess.Popen(
            [REDIS_SERVER, str(conf), "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly",
             "no", "--dir", str(self.workdir), "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if self.client().ping():
                    return self
            except redis.ConnectionError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    stop_process(self._proc)
                    raise RuntimeError(f"redis-server did not start on 127.0.0.1:{self.port}") from None
                time.sleep(0.02)

    def pause(self) -> None:
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self._proc is not None:
            self.resume()
            stop_process(self._proc)
            self._proc = None

    def __exit__(self, *exc: object) -> None:
        self.stop()
