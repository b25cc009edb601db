"""A minimal OTLP/gRPC trace receiver on 127.0.0.1, in a process of its own: what the Collector's otlp receiver is
to the gateway, for live tests and benches that must export somewhere real (an exporter pointed at a port nothing
listens on spends CPU on every failed connect and retry, which a deployed gateway does not).

It answers every `opentelemetry.proto.collector.trace.v1.TraceService/Export` with an empty response and counts
the spans it received, by name (opentelemetry-proto's ExportTraceServiceRequest; the service and method names are
opentelemetry-proto's `opentelemetry/proto/collector/trace/v1/trace_service.proto`). Its own process keeps its
parsing off the caller's interpreter lock, so a latency bench's client threads do not wait on it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter
from concurrent import futures
from pathlib import Path
from types import TracebackType
from typing import IO, Any

__all__ = ["TRACE_SERVICE", "TraceSink"]

TRACE_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
START_TIMEOUT_S = 30.0
ROOT = Path(__file__).resolve().parents[2]


def serve(commands: IO[str], answers: IO[str]) -> None:
    """The receiver: prints its port, then answers each command line (`names`: a JSON object of span counts by
    name) until `stop` or the end of `commands`."""
    import grpc
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    names: Counter[str] = Counter()
    lock = threading.Lock()

    def export(request: bytes, _context: Any) -> bytes:
        got = [s.name for rs in ExportTraceServiceRequest.FromString(request).resource_spans
               for ss in rs.scope_spans for s in ss.spans]
        with lock:
            names.update(got)
        return b""  # an empty ExportTraceServiceResponse: everything accepted

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        TRACE_SERVICE, {"Export": grpc.unary_unary_rpc_method_handler(export)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, file=answers, flush=True)
    for line in commands:
        if line.strip() != "names":
            break
        with lock:
            print(json.dumps(dict(names)), file=answers, flush=True)
    server.stop(grace=None).wait(5)


class TraceSink:
    """`with TraceSink() as sink:` `sink.port` takes OTLP/gRPC exports; `sink.names()` counts the spans that
    arrived by name, `sink.spans` in all."""

    def __init__(self) -> None:
        self.port = 0
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def _ask(self, command: str) -> str:
        assert self._proc is not None and self._proc.stdin is not None and self._proc.stdout is not None
        with self._lock:
            self._proc.stdin.write(command + "\n")
            self._proc.stdin.flush()
            return self._proc.stdout.readline()

    def names(self) -> dict[str, int]:
        """How many spans of each name arrived."""
        return dict(json.loads(self._ask("names")))

    @property
    def spans(self) -> int:
        return sum(self.names().values())

    def __enter__(self) -> TraceSink:
        self._proc = subprocess.Popen([sys.executable, "-m", "tests.support.otlp_sink"], cwd=ROOT, text=True,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self._proc.stdout is not None
        ready = threading.Event()
        first: list[str] = []

        def read_port() -> None:
            first.append(self._proc.stdout.readline() if self._proc and self._proc.stdout else "")
            ready.set()

        threading.Thread(target=read_port, daemon=True).start()
        if not ready.wait(START_TIMEOUT_S) or not first[0].strip().isdigit():
            self._stop()
            raise RuntimeError(f"the OTLP sink did not start within {START_TIMEOUT_S:g} s")
        self.port = int(first[0])
        return self

    def _stop(self) -> None:
        if self._proc is None:
            return
        try:
            if self._proc.stdin is not None:
                self._proc.stdin.write("stop\n")
                self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5)
        if self._proc.stdout is not None:
            self._proc.stdout.close()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop()


if __name__ == "__main__":
    serve(sys.stdin, sys.stdout)
