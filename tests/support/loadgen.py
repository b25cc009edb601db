"""A compiled load generator for latency benches: h2load (Debian's nghttp2-client) paced at a fixed rate, per target.

The Python clients the benches used before (http.client in threads) put their own scheduling jitter and GIL waits into
every figure; at the gateway's sub-millisecond overhead that noise was as large as the thing measured. h2load is an
event loop in C++ (libev): each client is one keep-alive connection with one request in flight, sending its next
request on a timer of 1/rps; one that comes due while the previous answer is still out goes as soon as that answer is
in (paced, not strictly open-loop). `--log-file` gives every request's status and its time from being sent to the end
of its answer, in microseconds (nghttp2 v1.52.0 doc/h2load.1.rst: --rps, -n, --log-file, --h1, -d, -H).

h2load 1.52 does not pace an HTTP/1.1 request with a body: with `-d` over HTTP/1.1 it sends each request as soon as the
previous one ends, whatever `--rps` says (Debian bookworm's nghttp2-client 1.52.0, measured: 100 POSTs at 2 x 50 req/s
took 10 ms; its documentation does not say so; pinned by tests/artifacts/test_loadgen.py). Over HTTP/2 it paces them,
so a request with a body goes over HTTP/2 (cleartext, prior knowledge), to the direct target and the gateway alike.

`paced` runs one h2load per target at the same time, at the same rate over the same number of connections, so noise
on the machine hits every target alike; each h2load runs on the CPUs its target names (`taskset`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import die_with_parent, stop_process

__all__ = ["H2LOAD", "Target", "paced", "pin", "cpu_seconds"]

H2LOAD = "h2load"
RUN_MARGIN_S = 30.0  # an h2load run still going this long after its last request was due is stopped


@dataclass(frozen=True)
class Target:
    """Where one h2load sends its requests (127.0.0.1:port) and the CPUs it runs on (None: wherever)."""

    port: int
    cpus: frozenset[int] | None = None


def _tasks(pid: int) -> list[int]:
    return [int(t) for t in os.listdir(f"/proc/{pid}/task")]


def pin(pid: int, cpus: Iterable[int]) -> None:
    """Every thread of process `pid` on `cpus` (sched_setaffinity per thread, as `taskset -a -p` does): an Envoy's
    workers are threads, all started once it is ready."""
    for tid in _tasks(pid):
        os.sched_setaffinity(tid, set(cpus))


def cpu_seconds(pid: int) -> float:
    """CPU time process `pid` has run, all its threads (Linux schedstat, nanoseconds: finer than /proc/PID/stat's
    clock ticks)."""
    total = 0
    for tid in _tasks(pid):
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            continue
    return total / 1e9


def _command(target: Target, *, rate: int, clients: int, requests: int, http2: bool, path: str,
             headers: Mapping[str, str], body: Path | None, log: Path) -> list[str]:
    cmd = [H2LOAD, *([] if http2 else ["--h1"]), "-t", "1", "-c", str(clients), "--rps", str(rate // clients),
           "-n", str(requests), "--log-file", str(log)]
    for name, value in headers.items():
        cmd += ["-H", f"{name}: {value}"]
    if body is not None:
        cmd += ["-d", str(body)]
    cmd.append(f"http://127.0.0.1:{target.port}{path}")
    if target.cpus is not None:
        cmd = ["taskset", "-c", ",".join(str(c) for c in sorted(target.cpus)), *cmd]
    return cmd


def _latencies(log: Path, port: int, warmup_s: float) -> list[float]:
    """Milliseconds of the requests in an h2load log (start µs since the epoch, status, duration µs) sent `warmup_s`
    or later after the first; any status but 200 fails the run."""
    rows = [line.split("\t")[:3] for line in log.read_text().splitlines()]
    if not rows:
        raise RuntimeError(f"port {port}: h2load logged no request")
    bad = sorted({status for _, status, _ in rows if status != "200"})
    if bad:
        raise RuntimeError(f"port {port}: statuses {', '.join(bad)} among {len(rows)} requests (200 expected)")
    first = min(int(start) for start, _, _ in rows)
    return [int(micros) / 1000 for start, _, micros in rows if int(start) - first >= warmup_s * 1e6]


def paced(targets: Sequence[Target], *, rate: int, seconds: float, clients: int = 4, warmup_s: float = 0.5,
          path: str = "/", headers: Mapping[str, str] | None = None, body: bytes | None = None) -> list[list[float]]:
    """Latencies (ms) of the requests sent to each target, in `targets` order: `rate` req/s over `clients` keep-alive
    connections per target, all targets at once, for `warmup_s` (not counted) then `seconds`. A GET over HTTP/1.1, or
    with `body` a POST over HTTP/2 (see the module docstring)."""
    if shutil.which(H2LOAD) is None:
        raise RuntimeError(f"{H2LOAD} is not installed: `make tools` installs it (Debian package nghttp2-client)")
    if rate % clients:
        raise ValueError(f"rate {rate} req/s is not a multiple of {clients} clients: h2load paces each client")
    with tempfile.TemporaryDirectory(prefix="h2load-") as tmp:
        data = None
        if body is not None:
            data = Path(tmp) / "body"
            data.write_bytes(body)
        logs = [Path(tmp) / f"{i}.log" for i in range(len(targets))]
        requests = round(rate * (seconds + warmup_s))
        procs = [subprocess.Popen(_command(t, rate=rate, clients=clients, requests=requests, http2=body is not None,
                                           path=path, headers=headers or {}, body=data, log=log),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  preexec_fn=die_with_parent)
                 for t, log in zip(targets, logs, strict=True)]
        try:
            outputs = [p.communicate(timeout=seconds + warmup_s + RUN_MARGIN_S)[0].decode() for p in procs]
        finally:
            for p in procs:
                stop_process(p, timeout=5)
        for t, p, text in zip(targets, procs, outputs, strict=True):
            if p.returncode != 0:
                raise RuntimeError(f"h2load against port {t.port} exited {p.returncode}:\n{text[-2000:]}")
        return [_latencies(log, t.port, warmup_s) for t, log in zip(targets, logs, strict=True)]
