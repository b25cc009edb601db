"""One request, one trace: client -> the real Envoy gateway -> an engine, captured by a local OTLP receiver.

The gateway is the kit's generated Envoy config (its OpenTelemetry tracer exports OTLP/gRPC to the
`otel_collector` cluster); the engine is a stand-in that does what vLLM does with a request
(vllm/tracing.py: the W3C traceparent extracted with TraceContextTextMapPropagator, a span started under it,
exported by the OTel SDK's TracerProvider() and OTLP/gRPC exporter to `--otlp-traces-endpoint`), run with
the flags and environment the kit gives a vLLM pod. Both export to a gRPC OTLP TraceService on 127.0.0.1.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import ExitStack
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from components.k8s import serving
from components.k8s.gateway.envoy.config import COLLECTOR_CLUSTER, SERVICE_NAME, bootstrap
from infra.config import PlatformConfig, parse
from tests.support.envoy import await_replicas, rebind
from tests.support.fake_backends import EnvoyProcess, answered_gateway_check, free_port, request
from tests.support.telemetry import Span
from tests.support.tokens import DEFAULT_AUDIENCE, Issuer

MODEL = "chat"
WAIT_S = 15.0  # Envoy's OpenTelemetry tracer flushes every 5 s (runtime tracing.opentelemetry.flush_interval_ms)
CLIENT_TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_PARENT = "00f067aa0ba902b7"
ISSUER = Issuer("https://issuer.test")  # the gateway refuses every request without a token of a stack issuer


def stack(ratio: float) -> PlatformConfig:
    return parse({
        "target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "standard"},
        "nodePools": {"gpu": {"instanceType": "dgx-h100"}},
        "tenants": {"alpha": {"gpuQuota": 8}},
        "models": {MODEL: {"engine": "vllm", "model": "org/model", "toolCallParser": "none",
                           "tenant": "alpha", "pool": "gpu"}},
        "observability": {"prices": {"dgx-h100": 30.0}, "traceSampleRatio": ratio},
        "gateway": {"auth": {"issuers": [{"issuer": ISSUER.issuer, "jwksUri": f"{ISSUER.issuer}/certs",
                                          "audiences": [DEFAULT_AUDIENCE]}]}},
    }, stack="traces")


class _Sink(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.lock = threading.Lock()

    def Export(self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any  # noqa: N802 (gRPC name)
               ) -> trace_service_pb2.ExportTraceServiceResponse:
        with self.lock:
            for rs in request.resource_spans:
                service = next((a.value.string_value for a in rs.resource.attributes if a.key == "service.name"), "")
                self.spans += [Span(service, s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex())
                               for ss in rs.scope_spans for s in ss.spans]
        return trace_service_pb2.ExportTraceServiceResponse()

    def wait(self, service: str, *, timeout: float = WAIT_S) -> list[Span]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                found = [s for s in self.spans if s.service == service]
            if found:
                return found
            time.sleep(0.1)
        return []


@pytest.fixture
def sink() -> Iterator[tuple[_Sink, int]]:
    """An OTLP/gRPC trace receiver on 127.0.0.1, as the Collector's otlp receiver is to the pods."""
    servicer = _Sink()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, port
    finally:
        server.stop(grace=None).wait(5)


@dataclass
class _Engine:
    provider: TracerProvider
    headers: list[dict[str, str]] = field(default_factory=list)


def _engine_handler(engine: _Engine) -> type[BaseHTTPRequestHandler]:
    tracer = engine.provider.get_tracer("vllm.entrypoints.openai.api_server")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def do_POST(self) -> None:  # noqa: N802 - the gateway's progress checks (vLLM traces them: not read here)
            if not answered_gateway_check(self):
                self.send_error(404)

        def do_GET(self) -> None:  # noqa: N802
            body = b'{"ok": true}'
            if self.path != "/health":  # the gateway's active health checks: vLLM traces only API requests
                headers = {k.lower(): v for k, v in self.headers.items()}
                engine.headers.append(headers)
                context = TraceContextTextMapPropagator().extract(headers)
                with tracer.start_as_current_span("llm_request", context=context, kind=SpanKind.SERVER):
                    pass
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


def _vllm_trace_setup(cfg: PlatformConfig, collector_port: int, monkeypatch: pytest.MonkeyPatch) -> TracerProvider:
    """What vLLM builds from the kit's pod: TracerProvider() under the pod's OTEL_* environment and an OTLP/gRPC
    exporter to the `--otlp-traces-endpoint` value (its scheme and port kept, the host rebound to loopback)."""
    model = cfg.models[MODEL]
    container = serving.pod_spec(cfg, model)["containers"][0]
    for env in container["env"]:
        if env["name"].startswith("OTEL_"):
            monkeypatch.setenv(env["name"], env["value"])
    command = container["command"]
    endpoint = command[command.index("--otlp-traces-endpoint") + 1]
    scheme, _, rest = endpoint.partition("://")
    assert (scheme, rest.rpartition(":")[2]) == ("http", "4317")  # plaintext OTLP/gRPC (the sidecar does mTLS)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{collector_port}")))
    return provider


@pytest.fixture
def gateway(request_ratio: float, sink: tuple[_Sink, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
            ) -> Iterator[tuple[int, _Engine]]:
    cfg = stack(request_ratio)
    _, collector_port = sink
    engine = _Engine(_vllm_trace_setup(cfg, collector_port, monkeypatch))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _engine_handler(engine))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    admin, listener, stats = free_port(), free_port(), free_port()
    config = rebind(bootstrap(cfg), listener_port=listener, stats_port=stats, admin_port=admin,
                    endpoints={MODEL: [("127.0.0.1", server.server_address[1])],
                               COLLECTOR_CLUSTER: [("127.0.0.1", collector_port)]}, jwks=[ISSUER.jwks])
    try:
        with ExitStack() as stack_:
            envoy = stack_.enter_context(EnvoyProcess(config, tmp_path, admin_port=admin, listener_port=listener))
            await_replicas(envoy, {MODEL: 1})  # no panic mode: the replica serves once it passes its checks
            yield listener, engine
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        engine.provider.shutdown()


@pytest.mark.parametrize("request_ratio", [1.0])
@pytest.mark.parametrize("flags", ["01", "00"])
def test_one_request_shares_a_trace_id_across_gateway_and_engine_sampled_by_its_caller_or_not(
        gateway: tuple[int, _Engine], sink: tuple[_Sink, int], flags: str) -> None:
    """The agent's traceparent continues through the gateway (its span a child of the agent's) into the engine
    (a child of the gateway's span): one trace id from agent to engine. Also when its flags say "not sampled" (00),
    as a meshed caller's sidecar sends for all but the mesh's sampling percentage of an uninstrumented client's
    requests: the gateway's always_on sampler traces it anyway and sends 01 on, so the engine (parent-based, as vLLM
    samples) traces it too. Without that sampler Envoy exports no span and passes 00 on
    (components.k8s.gateway.envoy.observability GATEWAY_SAMPLER)."""
    port, _ = gateway
    spans, _ = sink
    traceparent = f"00-{CLIENT_TRACE_ID}-{CLIENT_PARENT}-{flags}"
    status, _ = request(port, "/v1/chat/completions",
                        {"x-model": MODEL, "traceparent": traceparent, **ISSUER.bearer("alpha")})
    assert status == 200
    [engine_span] = spans.wait(MODEL)
    [gateway_span] = spans.wait(SERVICE_NAME)
    assert (gateway_span.trace_id, gateway_span.parent_span_id) == (CLIENT_TRACE_ID, CLIENT_PARENT)
    assert (engine_span.name, engine_span.trace_id, engine_span.parent_span_id) == \
        ("llm_request", CLIENT_TRACE_ID, gateway_span.span_id)


@pytest.mark.parametrize("request_ratio", [1.0, 0.2, 0.0])
def test_a_trace_the_gateway_starts_reaches_the_engine(gateway: tuple[int, _Engine], sink: tuple[_Sink, int]) -> None:
    """Whatever traceSampleRatio says, the gateway traces every request and the engine continues its trace: the
    ratio is applied once, by the Collector's probabilistic_sampler, after spanmetrics
    (components.k8s.gateway.envoy.config
    GATEWAY_TRACE_PERCENT)."""
    port, engine = gateway
    spans, _ = sink
    assert request(port, "/v1/completions", {"x-model": MODEL, **ISSUER.bearer("alpha")})[0] == 200
    [engine_span] = spans.wait(MODEL)
    [gateway_span] = spans.wait(SERVICE_NAME)
    assert engine_span.trace_id == gateway_span.trace_id != "0" * 32
    assert engine_span.parent_span_id == gateway_span.span_id
