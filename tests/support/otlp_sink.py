"""A minimal OTLP/gRPC trace receiver on 127.0.0.1, in a process of its own: what the Collector's otlp receiver is
to the gateway, for live tests and benches that must export somewhere real (an exporter pointed at a port nothing
listens on spends CPU on every failed connect and retry, which a deployed gateway does not).

It answers every `opentelemetry.proto.collector.trace.v1.TraceService/Export` with an empty response and counts
the spans it received (opentelemetry-proto's ExportTraceServiceRequest; the service and method names are
opentelemetry-proto's `opentelemetry/proto/collector/trace/v1/trace_service.proto`). Its own process keeps its
parsing off the caller's interpreter lock, so a latency bench's client threads do not wait on it.
"""

from __future__ import annotations

import multiprocessing
from concurrent import futures
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from types import TracebackType
from typing import Any

__all__ = ["TRACE_SERVICE", "TraceSink"]

TRACE_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
START_TIMEOUT_S = 30.0


def _serve(conn: Connection, spans: Synchronized) -> None:  # type: ignore[type-arg]
    import grpc
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    def export(request: bytes, _context: Any) -> bytes:
        n = sum(len(ss.spans) for rs in ExportTraceServiceRequest.FromString(request).resource_spans
                for ss in rs.scope_spans)
        with spans.get_lock():
            spans.value += n
        return b""  # an empty ExportTraceServiceResponse: everything accepted

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        TRACE_SERVICE, {"Export": grpc.unary_unary_rpc_method_handler(export)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    conn.send(port)
    conn.recv()  # until the owner says stop (or goes away)
    server.stop(grace=None).wait(5)


class TraceSink:
    """`with TraceSink() as sink:` `sink.port` takes OTLP/gRPC exports; `sink.spans` counts what arrived."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: gRPC does not survive fork
        self._conn, child = ctx.Pipe()
        self._count = ctx.Value("q", 0)
        self._proc = ctx.Process(target=_serve, args=(child, self._count), daemon=True)
        self.port = 0

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    @property
    def spans(self) -> int:
        with self._count.get_lock():
            return int(self._count.value)

    def __enter__(self) -> TraceSink:
        self._proc.start()
        if not self._conn.poll(START_TIMEOUT_S):
            self._proc.kill()
            raise RuntimeError(f"the OTLP sink did not start within {START_TIMEOUT_S:g} s")
        self.port = int(self._conn.recv())
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self._conn.send("stop")
        except OSError:
            pass
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
