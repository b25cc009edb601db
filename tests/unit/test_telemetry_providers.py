"""setup(): settings from OTEL_* variables, the local Prometheus endpoint, and OTLP export to a Collector
(a loopback OTLP/HTTP receiver here), with the tenant reaching every metric as a label."""

from __future__ import annotations

import json
import os
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import AGGREGATION_TEMPORALITY_CUMULATIVE
from prometheus_client.parser import text_string_to_metric_families

import telemetry
from telemetry.providers import Settings, settings_from_env
from telemetry.testing import VirtualClock


@pytest.mark.parametrize(("env", "kwargs", "expected"), [
    pytest.param({"OTEL_RESOURCE_ATTRIBUTES": "tenant=search"}, {},
                 Settings(tenant="search", service_name=None), id="defaults"),
    pytest.param({"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs,tenant=a%2Cb",
                  "OTEL_METRICS_EXPORTER": "Prometheus", "OTEL_TRACES_EXPORTER": "none",
                  "OTEL_EXPORTER_PROMETHEUS_HOST": "0.0.0.0", "OTEL_EXPORTER_PROMETHEUS_PORT": "9500"}, {},
                 Settings(tenant="a,b", service_name="from-attrs", traces_exporter="none",
                          metrics_exporter="prometheus", prometheus_host="0.0.0.0", prometheus_port=9500),
                 id="local-prometheus"),
    pytest.param({"OTEL_SERVICE_NAME": "env-name", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                  "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf", "OTEL_RESOURCE_ATTRIBUTES": "tenant=x"},
                 {"tenant": "arg-tenant"},
                 Settings(tenant="arg-tenant", service_name="env-name", traces_protocol="grpc",
                          metrics_protocol="http/protobuf"), id="arguments-and-per-signal-protocols-win"),
    pytest.param({}, {"tenant": "t", "service_name": "arg-name"}, Settings(tenant="t", service_name="arg-name"),
                 id="arguments-only"),
])
def test_settings_from_env(env: dict[str, str], kwargs: dict[str, str], expected: Settings) -> None:
    assert settings_from_env(env, **kwargs) == expected


def test_every_bad_setting_is_reported_at_once_naming_the_variable() -> None:
    env = {"OTEL_TRACES_EXPORTER": "zipkin", "OTEL_METRICS_EXPORTER": "logging",
           "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_EXPORTER_PROMETHEUS_PORT": "http"}
    with pytest.raises(ValueError) as err:
        settings_from_env(env)
    assert str(err.value) == (
        "telemetry setup: no tenant: pass setup(tenant=...) or set OTEL_RESOURCE_ATTRIBUTES=tenant=<name> (the "
        "dashboards filter every series by tenant); OTEL_EXPORTER_OTLP_PROTOCOL='http/json': allowed values are "
        "http/protobuf, grpc; OTEL_EXPORTER_PROMETHEUS_PORT='http': expected a port number 0-65535 (0: any free "
        "port); OTEL_TRACES_EXPORTER='zipkin': allowed values are otlp, console, none; "
        "OTEL_METRICS_EXPORTER='logging': allowed values are otlp, prometheus, console, none")


def test_console_exporters_show_a_trace_and_the_metrics_locally(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """OTEL_TRACES_EXPORTER=console / OTEL_METRICS_EXPORTER=console (standard values of the OTel SDK
    environment-variable specification): the SDK's ConsoleSpanExporter prints each span as JSON when it ends,
    ConsoleMetricExporter the metrics at shutdown (both to sys.stdout as it is at setup())."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "console")
    clock = VirtualClock()
    handle = telemetry.setup(service_name="agent", tenant="search", set_global=False, clock=clock, threads=False)
    try:
        run_agent(clock)
        spans = [json.loads(chunk) for chunk in capsys.readouterr().out.split("\n}\n") if chunk.strip()
                 for chunk in [chunk + "}"]]
    finally:
        handle.shutdown()
    assert [(s["name"], s["attributes"].get("gen_ai.tool.name")) for s in spans] == [
        ("execute_tool search", "search"), ("invoke_workflow answer", None)]
    assert spans[0]["parent_id"] == spans[1]["context"]["span_id"]
    assert spans[1]["resource"]["attributes"]["tenant"] == "search"
    printed = capsys.readouterr().out
    assert '"name": "aifactory.workflow.duration"' in printed and '"workflow": "answer"' in printed


def run_agent(clock: VirtualClock) -> None:
    @telemetry.workflow("answer")
    def answer() -> None:
        with telemetry.step("tool", "search"):
            clock.advance(2)

    answer()


def test_prometheus_endpoint_on_loopback_serves_tenant_labelled_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", "0")
    clock = VirtualClock()
    handle = telemetry.setup(service_name="agent", tenant="search", set_global=False, clock=clock)
    try:
        assert handle.prometheus_url is not None and handle.prometheus_url.startswith("http://127.0.0.1:")
        run_agent(clock)
        with urllib.request.urlopen(handle.prometheus_url, timeout=10) as resp:
            text = resp.read().decode()
    finally:
        handle.shutdown()
    samples = {(s.name, s.labels.get("tenant"), s.labels.get("workflow")): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples[("aifactory_workflow_duration_seconds_sum", "search", "answer")] == 2.0
    assert samples[("aifactory_workflow_critical_path_seconds_total", "search", "answer")] == 2.0
    info = next(s for f in text_string_to_metric_families(text) for s in f.samples if s.name == "target_info")
    assert (info.labels["service_name"], info.labels["tenant"]) == ("agent", "search")
    assert telemetry.current() is not handle.telemetry  # shutdown uninstalls it
    telemetry.install(None)


class _Receiver(BaseHTTPRequestHandler):
    received: dict[str, list[bytes]]

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.setdefault(self.path, []).append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def otlp_receiver() -> Iterator[tuple[str, dict[str, list[bytes]]]]:
    received: dict[str, list[bytes]] = {}
    handler = type("Receiver", (_Receiver,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_otlp_export_carries_tenant_on_resource_and_data_points(
        monkeypatch: pytest.MonkeyPatch, otlp_receiver: tuple[str, dict[str, list[bytes]]]) -> None:
    endpoint, received = otlp_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "tenant=support,deployment.environment=dev")
    clock = VirtualClock()
    handle = telemetry.setup(service_name="agent", set_global=False, clock=clock)
    try:
        run_agent(clock)
    finally:
        handle.shutdown()  # flushes both exporters
    traces = ExportTraceServiceRequest.FromString(received["/v1/traces"][0])
    spans = [s for rs in traces.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert sorted(s.name for s in spans) == ["execute_tool search", "invoke_workflow answer"]
    resource = {a.key: a.value.string_value for a in traces.resource_spans[0].resource.attributes}
    assert (resource["service.name"], resource["tenant"], resource["deployment.environment"]) == (
        "agent", "support", "dev")
    request = ExportMetricsServiceRequest.FromString(received["/v1/metrics"][-1])
    metrics = {m.name: m for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    point = metrics["aifactory.workflow.duration"].histogram.data_points[0]
    assert {a.key: a.value.string_value for a in point.attributes} == {
        "tenant": "support", "workflow": "answer", "status": "ok"}
    assert (point.sum, point.count) == (2.0, 1)


def test_setup_adds_the_genai_span_processor_and_carries_context_into_threads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """setup(genai_spans=True): an instrumented agent (util-genai spans) gets the workflow metrics; threads
    are instrumented while the installation lives, so its tool run in an executor lands in the workflow."""
    from concurrent.futures import ThreadPoolExecutor

    from opentelemetry.instrumentation.threading import ThreadingInstrumentor
    from opentelemetry.util.genai.handler import TelemetryHandler

    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", "0")
    clock = VirtualClock()
    monkeypatch.setattr("opentelemetry.sdk.trace.time_ns", clock)  # the instrumentation's spans, in virtual time
    handle = telemetry.setup(service_name="agent", tenant="search", set_global=False, clock=clock, genai_spans=True)
    try:
        assert ThreadingInstrumentor().is_instrumented_by_opentelemetry
        handler = TelemetryHandler(tracer_provider=handle.tracer_provider, meter_provider=handle.meter_provider)

        def tool() -> None:
            with handler.tool("search"):
                clock.advance(2)

        with ThreadPoolExecutor(max_workers=1) as pool, handler.invoke_local_agent(agent_name="answer"):
            clock.advance(1)
            pool.submit(tool).result(timeout=10)
        assert handle.prometheus_url is not None
        with urllib.request.urlopen(handle.prometheus_url, timeout=10) as resp:
            text = resp.read().decode()
    finally:
        handle.shutdown()
    assert not ThreadingInstrumentor().is_instrumented_by_opentelemetry  # shutdown undid it
    samples = {(s.name, s.labels.get("workflow"), s.labels.get("step_kind")): s.value
               for f in text_string_to_metric_families(text) for s in f.samples if s.labels.get("tenant") == "search"}
    assert samples[("aifactory_workflow_critical_path_seconds_total", "answer", "tool")] == 2.0
    assert samples[("aifactory_workflow_critical_path_seconds_total", "answer", "other")] == 1.0
    assert samples[("aifactory_workflow_duration_seconds_sum", "answer", None)] == 3.0
    telemetry.install(None)


def test_no_collector_one_message_and_a_prompt_exit(tmp_path) -> None:
    """README's instrumentation with nothing listening at the OTLP endpoint: one stderr line naming the endpoint,
    no retry warnings (the exporters retry each batch for ~10 s by default: OTEL_EXPORTER_OTLP_TIMEOUT)."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:  # a port that nothing listens on (bound, then closed)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "agent.py"
    script.write_text(
        "import asyncio, telemetry\n"
        "handle = telemetry.setup(service_name='support-agent', tenant='support')\n"
        "@telemetry.workflow('answer-ticket')\n"
        "async def answer():\n"
        "    with telemetry.step('planning', 'plan'):\n"
        "        await asyncio.sleep(0.01)\n"
        "asyncio.run(answer())\n"
        "handle.shutdown()\n"
        "print('done')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{port}"
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env,
                         check=False)
    assert res.returncode == 0 and res.stdout == "done\n"
    assert res.stderr.splitlines() == [
        f"telemetry: the OTLP endpoint http://127.0.0.1:{port} is unreachable (Connection refused); spans and "
        "metrics are dropped (set OTEL_EXPORTER_OTLP_ENDPOINT to the platform's Collector, or "
        "OTEL_*_EXPORTER=none)"]


@pytest.mark.parametrize("exemplars", [False, True], ids=["default-off", "on"])
def test_otlp_export_carries_step_exemplars_only_when_asked(
        monkeypatch: pytest.MonkeyPatch, otlp_receiver: tuple[str, dict[str, list[bytes]]], exemplars: bool) -> None:
    """setup(exemplars=True): the step-duration point exported over OTLP carries an exemplar with the step
    span's ids (the SDK's default trace_based filter, sampled spans); by default it carries none."""
    endpoint, received = otlp_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.delenv("OTEL_METRICS_EXEMPLAR_FILTER", raising=False)
    clock = VirtualClock()
    handle = telemetry.setup(service_name="agent", tenant="search", set_global=False, clock=clock, exemplars=exemplars)
    try:
        run_agent(clock)
    finally:
        handle.shutdown()
    traces = ExportTraceServiceRequest.FromString(received["/v1/traces"][0])
    step = next(s for rs in traces.resource_spans for ss in rs.scope_spans for s in ss.spans
                if s.name == "execute_tool search")
    request = ExportMetricsServiceRequest.FromString(received["/v1/metrics"][-1])
    metrics = {m.name: m for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    found = [(e.as_double, e.span_id, e.trace_id) for p in metrics["aifactory.step.duration"].histogram.data_points
             for e in p.exemplars]
    assert found == ([(2.0, step.span_id, step.trace_id)] if exemplars else [])


@pytest.mark.parametrize("asked", [False, True], ids=["default-off", "on"])
def test_otlp_workflow_span_carries_critical_path_only_when_asked(
        monkeypatch: pytest.MonkeyPatch, otlp_receiver: tuple[str, dict[str, list[bytes]]], asked: bool) -> None:
    """setup(critical_path_attributes=True): the exported workflow span carries its shares (seconds); by default
    it carries only the GenAI attributes."""
    endpoint, received = otlp_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    clock = VirtualClock()
    handle = telemetry.setup(service_name="agent", tenant="search", set_global=False, clock=clock,
                             critical_path_attributes=asked)
    try:
        run_agent(clock)
    finally:
        handle.shutdown()
    traces = ExportTraceServiceRequest.FromString(received["/v1/traces"][0])
    workflow = next(s for rs in traces.resource_spans for ss in rs.scope_spans for s in ss.spans
                    if s.name == "invoke_workflow answer")
    attributes = {a.key: a.value.double_value or a.value.string_value for a in workflow.attributes}
    assert attributes == {"gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": "answer",
                          **({"aifactory.critical_path.tool": 2.0} if asked else {})}
    # Either way the metric goes out over OTLP as the cumulative monotonic Sum the Collector turns into a
    # Prometheus counter (aifactory_workflow_critical_path_seconds_total).
    request = ExportMetricsServiceRequest.FromString(received["/v1/metrics"][-1])
    shares = next(m.sum for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
                  if m.name == "aifactory.workflow.critical_path")
    assert (shares.is_monotonic, shares.aggregation_temporality) == (True, AGGREGATION_TEMPORALITY_CUMULATIVE)
    assert [(p.as_double, {a.key: a.value.string_value for a in p.attributes}) for p in shares.data_points] == [
        (2.0, {"tenant": "search", "workflow": "answer", "step_kind": "tool"})]


def test_setup_names_the_agent_runs_of_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """setup(workflow=...) (or OTEL_RESOURCE_ATTRIBUTES=workflow=...) puts the name on the resource, where the GenAI
    span processor reads it: a LlamaIndex run (which names no agent) is recorded under it."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    assert settings_from_env({"OTEL_RESOURCE_ATTRIBUTES": "tenant=t,workflow=triage"}).workflow == "triage"
    assert settings_from_env({}, tenant="t", workflow="answer").workflow == "answer"
    with pytest.raises(ValueError) as err:
        settings_from_env({}, tenant="t", workflow=" ")
    assert str(err.value) == ("telemetry setup: workflow=' ': expected a non-empty name (the workflow label of the "
                              "agent runs GenAiSpanProcessor records), or None to name them from their spans")
    handle = telemetry.setup(tenant="search", workflow="support", set_global=False, clock=VirtualClock(),
                             genai_spans=True, threads=False)
    try:
        assert handle.tracer_provider.resource.attributes["workflow"] == "support"
        tracer = handle.tracer_provider.get_tracer("openinference.instrumentation.llama_index")
        tracer.start_span("FunctionAgent.run", attributes={"openinference.span.kind": "CHAIN"}).end()
        assert {a.get("workflow") for a in handle.telemetry._attrs.values()} == {"support"}
    finally:
        handle.shutdown()
