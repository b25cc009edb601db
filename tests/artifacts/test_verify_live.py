"""`aifactory verify` against the real Envoy gateway (the stack's generated config, rebound to 127.0.0.1), a real
Prometheus scraping it, and stand-ins for the engine and for Jaeger's, Loki's and Alertmanager's query APIs: a
healthy platform, then each hop broken on its own.

What is real here: the gateway (routing, JWT auth, retries, its access log with the trace id, its OpenTelemetry
spans exported over OTLP/gRPC to a local receiver), Prometheus (scraping the gateway's stats listener and an
exporter of the engine's, sidecar's, DCGM's and kube-state-metrics' series, answering /api/v1/query). The stand-ins
answer in the upstream APIs' formats: Jaeger's GET /api/traces/{id} built from the spans the gateway really
exported plus the engine's (a child of the gateway span whose traceparent the engine received, as vLLM's tracing
does); Loki's query_range over the gateway's real access log and the engine namespace's lines; Alertmanager's
GET /api/v2/alerts. Everything listens on 127.0.0.1; every wait is bounded.
"""

from __future__ import annotations

import json
import re
import secrets
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from components.k8s.gateway.envoy.config import COLLECTOR_CLUSTER, SERVICE_NAME, bootstrap
from infra import cli
from infra.config import PlatformConfig, parse
from infra.verify import Endpoints, Hop, Report, format_report, verify
from tests.support.envoy import await_replicas, rebind
from tests.support.fake_backends import EnvoyProcess, answered_gateway_check, free_port
from tests.support.prometheus import PrometheusServer
from tests.support.telemetry import Span
from tests.support.tokens import DEFAULT_AUDIENCE, Issuer

MODEL = "chat"
TENANT = "alpha"
GPU_NODES = ("gpu-node-1", "gpu-node-2")
ISSUER = "https://issuer.test/realms/aifactory"
WAIT_S = 20.0  # a healthy platform's signals: the gateway's spans (flushed every 0.2 s here), 1 s scrapes
BROKEN_WAIT_S = 3.0  # how long verify keeps looking for a signal that will not come
SETTLE_S = 15.0  # bound on waiting for Prometheus to reflect an exporter change

RAW: dict[str, Any] = {
    "target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "fast"},
    "nodePools": {"gpu": {"instanceType": "dgx-h100"}},
    "tenants": {TENANT: {"gpuQuota": 16}},
    "models": {MODEL: {"engine": "vllm", "model": "org/model", "toolCallParser": "none",
                       "tenant": TENANT, "pool": "gpu",
                       "replicas": {"min": 1, "max": 2}}},
    "gateway": {
        "auth": {"issuers": [{"issuer": ISSUER, "jwksUri": f"{ISSUER}/certs", "audiences": [DEFAULT_AUDIENCE]}]},
        # the engine's 5xx cases are verify's to name: outlier detection would eject the only replica (a model
        # with no healthy replica answers 503: components.k8s.gateway.envoy.replicas, no panic mode)
        "outlierDetection": {"consecutive5xx": 1000},
        "healthCheck": {"intervalSeconds": 0.25, "timeoutSeconds": 0.25, "unhealthyThreshold": 2,
                        "healthyThreshold": 1},
    },
    # traceSampleRatio is the Collector's (not run here): the gateway traces every request whatever it says, and
    # verify's requests carry a sampled traceparent of their own.
    "observability": {"prices": {"dgx-h100": 30.0}, "traceSampleRatio": 0.0},
}


@dataclass
class Platform:
    """What the stand-ins serve; each broken-hop test changes one thing, `heal()` restores all."""

    spans: list[Span] = field(default_factory=list)
    engine_logs: list[str] = field(default_factory=list)
    engine_status: int = 200
    engine_exports_spans: bool = True
    jaeger_has_traces: bool = True
    loki_has_lines: bool = True
    watchdog: bool = True
    engine_series: bool = True
    queue_series: bool = True
    dcgm_nodes: tuple[str, ...] = GPU_NODES
    lock: threading.Lock = field(default_factory=threading.Lock)

    def heal(self) -> None:
        self.engine_status, self.engine_exports_spans, self.jaeger_has_traces = 200, True, True
        self.loki_has_lines = self.watchdog = self.engine_series = self.queue_series = True
        self.dcgm_nodes = GPU_NODES

    def exposition(self) -> str:
        """The engine's, the model sidecar's, DCGM's and kube-state-metrics' series as scraped (with the labels
        the kit's ServiceMonitors and PodMonitor give them: namespace, aifactory_io_model)."""
        eng = f'model_name="{MODEL}",namespace="{TENANT}",aifactory_io_model="{MODEL}"'
        lines = []
        if self.engine_series:
            lines.append(f"vllm:num_requests_running{{{eng}}} 0")
            if self.queue_series:
                lines.append(f"vllm:num_requests_waiting{{{eng}}} 0")
        lines.append(f'istio_requests_total{{reporter="destination",destination_workload_namespace="{TENANT}",'
                     f'destination_workload="{MODEL}",response_code="200"}} {len(self.engine_logs)}')
        lines += [f'kube_node_labels{{node="{n}",label_aifactory_io_pool="gpu"}} 1' for n in GPU_NODES]
        lines += [f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",Hostname="{n}"}} 40' for n in self.dcgm_nodes]
        return "\n".join(lines) + "\n"


class _Sink(trace_service_pb2_grpc.TraceServiceServicer):
    """The Collector's OTLP/gRPC trace receiver, as the gateway's `otel_collector` cluster reaches it."""

    def __init__(self, platform: Platform) -> None:
        self.platform = platform

    def Export(self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any  # noqa: N802 (gRPC name)
               ) -> trace_service_pb2.ExportTraceServiceResponse:
        with self.platform.lock:
            for rs in request.resource_spans:
                service = next((a.value.string_value for a in rs.resource.attributes if a.key == "service.name"), "")
                self.platform.spans += [Span(service, s.name, s.trace_id.hex(), s.span_id.hex(),
                                             s.parent_span_id.hex()) for ss in rs.scope_spans for s in ss.spans]
        return trace_service_pb2.ExportTraceServiceResponse()


def _send(handler: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str = "application/json") -> None:
    handler.send_response(status)
    handler.send_header("content-type", content_type)
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _engine(platform: Platform) -> type[BaseHTTPRequestHandler]:
    """A vLLM stand-in: OpenAI chat completions (whole or as server-sent events); the span vLLM's tracing would
    start under the received traceparent; the line the model's sidecar would log with the request id."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def do_GET(self) -> None:  # noqa: N802 - the gateway's health checks
            _send(self, 200, b"")

        def do_POST(self) -> None:  # noqa: N802
            if answered_gateway_check(self):  # the gateway's progress checks pass: what breaks here is a request's hop
                return
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            with platform.lock:
                platform.engine_logs.append(json.dumps({"request_id": self.headers.get("x-request-id"),
                                                        "path": self.path, "response_code": platform.engine_status}))
                _, trace_id, parent, flags = (self.headers.get("traceparent") or "00-0-0-00").split("-")
                # parent-based sampling, as the kit configures vLLM's tracer (OTEL_TRACES_SAMPLER)
                if platform.engine_exports_spans and platform.engine_status == 200 and flags == "01":
                    # On a cluster two Istio sidecars trace between them (the kit's mesh-default Telemetry): the
                    # gateway pod's outbound span, then the model pod's inbound one, whose id reaches the engine.
                    for service in ("aifactory-gateway.aifactory-gateway", f"{MODEL}.{TENANT}"):
                        hop = secrets.token_hex(8)
                        platform.spans.append(Span(service, "sidecar", trace_id, hop, parent))
                        parent = hop
                    platform.spans.append(Span(MODEL, "llm_request", trace_id, secrets.token_hex(8), parent))
            if platform.engine_status != 200:
                _send(self, platform.engine_status, b'{"error": "engine failure"}')
            elif body.get("stream"):
                chunk = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "OK"}}]}
                events = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
                _send(self, 200, events, "text/event-stream")
            else:
                _send(self, 200, json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "model": MODEL,
                                             "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                                 "role": "assistant", "content": "OK"}}]}).encode())

    return Handler


_LOKI_QUERY = re.compile(r'^\{namespace=~?"([^"]+)"\} \|= "([^"]+)"$')


def _observability(platform: Platform, access_log: Path, gateway_ns: str) -> type[BaseHTTPRequestHandler]:
    """Stand-ins of Jaeger's, Loki's and Alertmanager's query APIs, and the exporter Prometheus scrapes."""

    def trace(trace_id: str) -> dict[str, Any] | None:
        with platform.lock:
            spans = [s for s in platform.spans if s.trace_id == trace_id]
        if not spans or not platform.jaeger_has_traces:
            return None
        pids = {svc: f"p{i + 1}" for i, svc in enumerate(sorted({s.service for s in spans}))}
        return {"traceID": trace_id, "processes": {p: {"serviceName": svc, "tags": []} for svc, p in pids.items()},
                "spans": [{"traceID": trace_id, "spanID": s.span_id, "operationName": s.name, "processID":
                           pids[s.service], "references": [{"refType": "CHILD_OF", "traceID": trace_id,
                                                            "spanID": s.parent_span_id}] if s.parent_span_id else []}
                          for s in spans]}

    def loki(query: str) -> list[dict[str, Any]]:
        m = _LOKI_QUERY.match(query)
        assert m is not None, query
        namespaces, needle = m.group(1).split("|"), m.group(2)
        if not platform.loki_has_lines:
            return []
        with platform.lock:
            by_ns = {gateway_ns: access_log.read_text().splitlines(), TENANT: list(platform.engine_logs)}
        return [{"stream": {"namespace": ns}, "values": [[str(time.time_ns()), line] for line in lines
                                                          if needle in line]}
                for ns, lines in by_ns.items() if ns in namespaces and any(needle in x for x in lines)]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def do_GET(self) -> None:  # noqa: N802
            url = urllib.parse.urlsplit(self.path)
            params = dict(urllib.parse.parse_qsl(url.query))
            if url.path == "/metrics":
                _send(self, 200, platform.exposition().encode(), "text/plain; version=0.0.4")
            elif url.path.startswith("/api/traces/"):
                found = trace(url.path.rsplit("/", 1)[1])
                _send(self, 200 if found else 404, json.dumps(
                    {"data": [found]} if found else {"data": None, "errors": [{"code": 404,
                                                                              "msg": "trace not found"}]}).encode())
            elif url.path == "/loki/api/v1/query_range":
                _send(self, 200, json.dumps({"status": "success", "data": {
                    "resultType": "streams", "result": loki(params["query"])}}).encode())
            elif url.path == "/api/v2/alerts":
                assert params == {"filter": 'alertname="Watchdog"', "active": "true"}
                alerts = [{"labels": {"alertname": "Watchdog", "severity": "none"}, "startsAt":
                           "2026-11-25T00:00:00Z", "status": {"state": "active"}}] if platform.watchdog else []
                _send(self, 200, json.dumps(alerts).encode())
            else:
                _send(self, 404, b"{}")

    return Handler


@dataclass
class Env:
    cfg: PlatformConfig
    platform: Platform
    endpoints: Endpoints
    issuer: Issuer
    prometheus: PrometheusServer

    def token(self) -> str:
        return self.issuer.token(tenant=TENANT)

    def run(self, *, wait: float = WAIT_S, token: str | None = "", endpoints: Endpoints | None = None) -> Report:
        return verify(self.cfg, stack="live", endpoints=endpoints or self.endpoints,
                      token=self.token() if token == "" else token, wait_seconds=wait, poll_seconds=0.25,
                      request_timeout_seconds=10, query_timeout_seconds=5)

    def settle(self, expr: str, *, present: bool) -> None:
        """Wait (bounded) until Prometheus has scraped an exporter change."""
        deadline = time.monotonic() + SETTLE_S
        while bool(self.prometheus.query(expr)) != present:
            assert time.monotonic() < deadline, f"{expr} still {'absent' if present else 'present'}"
            time.sleep(0.2)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up on an answer (verify's bounded waits) is normal here


def _serve(stack: ExitStack, handler: type[BaseHTTPRequestHandler]) -> int:
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    stack.callback(stop)
    return int(server.server_address[1])


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    cfg = parse(RAW, stack="live")
    workdir = tmp_path_factory.mktemp("verify")
    platform, issuer = Platform(), Issuer(ISSUER)
    with ExitStack() as stack:
        engine_port = _serve(stack, _engine(platform))
        admin, listener, stats, collector_port = free_port(), free_port(), free_port(), free_port()
        config = rebind(bootstrap(cfg), listener_port=listener, stats_port=stats, admin_port=admin,
                        endpoints={MODEL: [("127.0.0.1", engine_port)], COLLECTOR_CLUSTER: [("127.0.0.1",
                                                                                            collector_port)]},
                        jwks=[issuer.jwks])
        # Envoy's OpenTelemetry tracer batches spans for 5 s (runtime tracing.opentelemetry.flush_interval_ms)
        config["layered_runtime"]["layers"].insert(0, {"name": "test", "static_layer": {
            "tracing.opentelemetry.flush_interval_ms": 200}})
        envoy = stack.enter_context(EnvoyProcess(config, workdir, admin_port=admin, listener_port=listener))
        await_replicas(envoy, {MODEL: 1})  # no panic mode: the model serves once its replica passes its checks
        # the receiver starts after Envoy (which retries it): no fork while gRPC's threads run
        sink = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Sink(platform), sink)
        sink.add_insecure_port(f"127.0.0.1:{collector_port}")
        sink.start()
        stack.callback(lambda: sink.stop(grace=None).wait(5))
        obs_port = _serve(stack, _observability(platform, envoy.access_log, cfg.gateway.namespace))
        prometheus = stack.enter_context(PrometheusServer(workdir / "prometheus", scrape_configs=[
            {"job_name": "gateway", "metrics_path": "/stats/prometheus",
             "static_configs": [{"targets": [f"127.0.0.1:{stats}"]}]},
            {"job_name": "exporters", "static_configs": [{"targets": [f"127.0.0.1:{obs_port}"]}]}]))
        local = f"http://127.0.0.1:{obs_port}"
        endpoints = Endpoints(gateway=f"http://127.0.0.1:{listener}", prometheus=prometheus.url, jaeger=local,
                              loki=local, alertmanager=local)
        yield Env(cfg, platform, endpoints, issuer, prometheus)


@pytest.fixture
def live(env: Env) -> Iterator[Env]:
    env.platform.heal()
    yield env
    env.platform.heal()


def _rows(report: Report) -> dict[str, Hop]:
    return {h.hop: h for h in report.hops}


def _broken(report: Report) -> dict[str, str]:
    return {h.hop: h.cause for h in report.hops if not h.ok}


def _stacks_dir(tmp_path: Path) -> Path:
    """A stacks directory holding the test stack as Pulumi.live.yaml (what `--stacks-dir` reads)."""
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    stacks.joinpath("Pulumi.live.yaml").write_text(yaml.safe_dump(
        {"config": {f"aifactory:{k}": v for k, v in RAW.items()}}))
    return stacks


ALL_HOPS = ["request", "stream", "trace", "logs", "metrics:gateway", "metrics:engine", "metrics:sidecar",
            "metrics:autoscaling", "gpu-metrics", "alerting"]


def test_a_healthy_platform_passes_every_hop(live: Env) -> None:
    report = live.run()
    assert [h.hop for h in report.hops] == ALL_HOPS
    assert _broken(report) == {}, format_report(report)
    rows = _rows(report)
    assert rows["request"].saw.endswith("'OK'")
    assert rows["stream"].saw.endswith("2 event(s)")
    # the gateway's own span (exported by the real Envoy) with the engine's under it, in the trace verify started
    assert rows["trace"].saw.endswith(f"{MODEL} under {SERVICE_NAME}")
    assert f"{live.cfg.gateway.namespace} 1, {TENANT} 1" in rows["logs"].saw  # the access log and the sidecar's
    assert rows["metrics:autoscaling"].saw.startswith(f'sum(vllm:num_requests_waiting{{namespace="{TENANT}",')
    assert rows["gpu-metrics"].saw == "2 GPU node(s) of pools gpu; DCGM series on 2"


def test_the_cli_prints_a_row_per_hop_writes_json_and_exits_1_on_a_broken_hop(
        live: Env, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stacks = _stacks_dir(tmp_path)
    token = tmp_path / "token"
    token.write_text(live.token() + "\n")
    live.platform.watchdog = False
    e = live.endpoints
    code = cli.main(["verify", "live", "--stacks-dir", str(stacks), "--token-file", str(token), "--wait", "3",
                     "--gateway-url", e.gateway, "--prometheus-url", e.prometheus, "--jaeger-url", e.jaeger,
                     "--loki-url", e.loki, "--alertmanager-url", e.alertmanager, "--json", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert code == 1
    assert "  BROKEN  alerting" in out and "likely: Prometheus does not deliver alerts to Alertmanager" in out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["ok"] is False and [h["hop"] for h in doc["hops"]] == ALL_HOPS
    assert [h["hop"] for h in doc["hops"] if not h["ok"]] == ["alerting"]


def test_bad_input_is_a_usage_error_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stacks = _stacks_dir(tmp_path)
    code = cli.main(["verify", "live", "--stacks-dir", str(stacks), "--gateway-url", "gateway:80",
                     "--model", "nope", "--token-file", str(tmp_path / "missing")])
    err = capsys.readouterr().err
    assert code == 2
    assert "--gateway-url: 'gateway:80' is not an http(s):// URL with a host" in err
    assert "--model: nope: not a model of live; models: chat" in err
    assert "--token-file" in err and "No such file or directory" in err


def test_gateway_down(live: Env) -> None:
    report = live.run(endpoints=replace(live.endpoints, gateway=f"http://127.0.0.1:{free_port()}"), wait=BROKEN_WAIT_S)
    broken = _broken(report)
    assert set(broken) == {"request", "stream"}
    assert broken["request"].startswith("the gateway is unreachable from here")
    assert "trace" not in _rows(report)  # nothing was answered: no signal to look for


@pytest.mark.parametrize("token, cause", [
    (None, "the gateway refused the token: no --token-file was given"),
    ("other-issuer", "the gateway refused the token: check that --token-file holds a current token"),
])
def test_auth_refused(live: Env, token: str | None, cause: str) -> None:
    if token is not None:
        token = Issuer("https://other.test").token(tenant=TENANT)
    report = live.run(token=token, wait=BROKEN_WAIT_S)
    rows = _rows(report)
    assert rows["request"].saw.startswith("401 ")
    broken = _broken(report)
    assert broken["request"].startswith(cause) and broken["stream"].startswith(cause)


def test_engine_5xx(live: Env) -> None:
    live.platform.engine_status = 500
    report = live.run(wait=BROKEN_WAIT_S)
    rows = _rows(report)
    assert rows["request"].saw.startswith("500 ") and rows["stream"].saw.startswith("500 ")
    assert _broken(report)["request"] == ("the engine answered with a server error: see the model's pod logs "
                                          "(kubectl logs, or Loki)")


def test_trace_missing(live: Env) -> None:
    live.platform.jaeger_has_traces = False
    broken = _broken(live.run(wait=BROKEN_WAIT_S))
    assert set(broken) == {"trace"}
    assert broken["trace"].startswith("the gateway's spans do not reach Jaeger")


def test_engine_span_missing(live: Env) -> None:
    live.platform.engine_exports_spans = False
    report = live.run(wait=BROKEN_WAIT_S)
    broken = _broken(report)
    assert set(broken) == {"trace"}
    assert broken["trace"].startswith(f"no span of service {MODEL} under the gateway's span")
    assert _rows(report)["trace"].saw == f"1 span(s) of {SERVICE_NAME}"  # the gateway's own, from the real Envoy


def test_logs_missing(live: Env) -> None:
    live.platform.loki_has_lines = False
    broken = _broken(live.run(wait=BROKEN_WAIT_S))
    assert set(broken) == {"logs"}
    assert broken["logs"].startswith("the gateway's access log does not reach Loki")


def test_engine_metrics_missing(live: Env) -> None:
    live.platform.engine_series = False
    live.settle('vllm:num_requests_running{namespace="alpha"}', present=False)
    broken = _broken(live.run(wait=BROKEN_WAIT_S))
    assert set(broken) == {"metrics:engine", "metrics:autoscaling"}
    assert broken["metrics:engine"].startswith("Prometheus does not scrape the engine")


def test_keda_query_has_no_data(live: Env) -> None:
    live.platform.queue_series = False
    live.settle('vllm:num_requests_waiting{namespace="alpha"}', present=False)
    broken = _broken(live.run(wait=BROKEN_WAIT_S))
    assert set(broken) == {"metrics:autoscaling"}
    assert broken["metrics:autoscaling"].startswith("KEDA's query has no data, so KEDA reads 0")


def test_dcgm_missing_on_a_gpu_node(live: Env) -> None:
    live.platform.dcgm_nodes = GPU_NODES[:1]
    live.settle(f'DCGM_FI_DEV_GPU_UTIL{{Hostname="{GPU_NODES[1]}"}}', present=False)
    report = live.run(wait=BROKEN_WAIT_S)
    assert set(_broken(report)) == {"gpu-metrics"}
    assert _rows(report)["gpu-metrics"].saw == (f"2 GPU node(s) of pools gpu; DCGM series on 1; none from "
                                                f"{GPU_NODES[1]}")


def test_watchdog_missing(live: Env) -> None:
    live.platform.watchdog = False
    broken = _broken(live.run(wait=BROKEN_WAIT_S))
    assert set(broken) == {"alerting"}
    assert broken["alerting"].startswith("Prometheus does not deliver alerts to Alertmanager")


def _api_server(services: dict[str, str], token: str, seen: list[str]) -> type[BaseHTTPRequestHandler]:
    """A stand-in of the Kubernetes API server's service proxy: GET /api/v1/namespaces/NS/services/NAME:PORT/proxy/
    PATH for an authenticated caller, forwarded to the Service (here a local URL per NAME)."""
    route = re.compile(r"^/api/v1/namespaces/([^/]+)/services/([^/:]+):(\d+)/proxy(/.*)$")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def do_GET(self) -> None:  # noqa: N802
            m = route.match(self.path)
            if self.headers.get("authorization") != f"Bearer {token}":
                _send(self, 401, b'{"kind": "Status", "code": 401}')
                return
            assert m is not None, self.path
            seen.append(f"{m.group(1)}/{m.group(2)}:{m.group(3)}")
            with urllib.request.urlopen(services[m.group(2)] + m.group(4), timeout=10) as r:
                _send(self, r.status, r.read(), r.headers.get("content-type", "application/json"))

    return Handler


def test_kubeconfig_reaches_the_backends_through_the_api_servers_service_proxy(live: Env, tmp_path: Path) -> None:
    """--kubeconfig: no port-forward, no URL but the gateway's; the exec plugin's token authenticates to the API
    server, and the Services are the ones the kit's releases name (kps-prometheus:9090, jaeger:16686,
    loki-gateway:80, kps-alertmanager:9093 in the observability namespace)."""
    seen: list[str] = []
    local = live.endpoints.jaeger
    with ExitStack() as stack:
        port = _serve(stack, _api_server({"kps-prometheus": live.prometheus.url, "jaeger": local,
                                          "loki-gateway": local, "kps-alertmanager": local}, "kube-token", seen))
        credential = json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                                 "status": {"token": "kube-token"}})
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "live",
            "contexts": [{"name": "live", "context": {"cluster": "c", "user": "u"}}],
            "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "u", "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                                      "command": sys.executable,
                                                      "args": ["-c", f"print({credential!r})"]}}}]}))
        stacks = _stacks_dir(tmp_path)
        token = tmp_path / "token"
        token.write_text(live.token())
        code = cli.main(["verify", "live", "--stacks-dir", str(stacks), "--token-file", str(token), "--wait", "20",
                         "--kubeconfig", str(kubeconfig), "--gateway-url", live.endpoints.gateway,
                         "--json", str(tmp_path / "r.json")])
    text = (tmp_path / "r.json").read_text()
    doc = json.loads(text)
    assert code == 0, [h for h in doc["hops"] if not h["ok"]]
    assert "kube-token" not in text
    assert doc["endpoints"]["prometheus"] == (f"http://127.0.0.1:{port}/api/v1/namespaces/monitoring/services/"
                                              "kps-prometheus:9090/proxy")
    assert set(seen) == {"monitoring/kps-prometheus:9090", "monitoring/jaeger:16686", "monitoring/loki-gateway:80",
                         "monitoring/kps-alertmanager:9093"}


def test_an_unusable_kubeconfig_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stacks = _stacks_dir(tmp_path)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({"current-context": "gone", "contexts": []}))
    code = cli.main(["verify", "live", "--stacks-dir", str(stacks), "--kubeconfig", str(kubeconfig)])
    assert code == 2
    assert f"--kubeconfig: {kubeconfig}: no context named 'gone' (current-context)" in capsys.readouterr().err
