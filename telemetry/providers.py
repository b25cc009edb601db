"""Configure OTel tracer and meter providers for an agent service, from the standard OTEL_* variables.

    handle = telemetry.setup(service_name="support-agent", tenant="support")   # once, at start-up
    ...
    handle.shutdown()                                                          # flushes, stops the endpoint

Variables (arguments win over the environment):
    OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES   service.name; `tenant=<name>` names the tenant;
                                                  `workflow=<name>` names the agent runs genai_spans records
    OTEL_TRACES_EXPORTER     otlp (default) | console | none    (console: each span as JSON on stdout when it
                                                                 ends: a way to see a trace locally)
    OTEL_METRICS_EXPORTER    otlp (default) | prometheus | console | none    (console: every
                             OTEL_METRIC_EXPORT_INTERVAL, default 60 s, and at shutdown)
    (The OTel SDK environment-variable specification also names zipkin and the deprecated logging; the kit
    refuses them, naming the values it takes.)
    OTEL_EXPORTER_OTLP_PROTOCOL (or _TRACES_ / _METRICS_PROTOCOL)   http/protobuf (default) | grpc
    OTEL_EXPORTER_OTLP_ENDPOINT, _HEADERS, ...     read by the OTLP exporters themselves (the platform's
                                                   Collector: http://<collector>:4318, or :4317 for grpc)
    OTEL_EXPORTER_PROMETHEUS_HOST / _PORT          the local endpoint; default 127.0.0.1:9464
    OTEL_METRIC_EXPORT_INTERVAL, OTEL_TRACES_SAMPLER(_ARG)   read by the SDK itself

The tenant goes on the resource (spans) AND on every metric data point as the `tenant` attribute:
resource attributes reach Prometheus only as target_info (the kit's Collector keeps them off the series:
resource_to_telemetry_conversion is off), while the dashboards filter every series by `tenant`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor

from telemetry import names
from telemetry.instrument import DEFAULT_CLOCK, Telemetry, install, resource_attributes

__all__ = [
    "DEFAULT_PROMETHEUS_HOST",
    "DEFAULT_PROMETHEUS_PORT",
    "DEFAULT_OTLP_PROTOCOL",
    "TRACES_EXPORTERS",
    "METRICS_EXPORTERS",
    "OTLP_PROTOCOLS",
    "Settings",
    "Installation",
    "settings_from_env",
    "setup",
    "otlp_endpoint",
    "DEFAULT_PROBE_TIMEOUT_SECONDS",
]

DEFAULT_PROMETHEUS_HOST = "127.0.0.1"  # local use only; the platform scrapes through the Collector (OTLP)
DEFAULT_PROMETHEUS_PORT = 9464  # the OTel Prometheus exporter's conventional port
DEFAULT_OTLP_PROTOCOL = "http/protobuf"  # the OTel specification's default
TRACES_EXPORTERS = ("otlp", "console", "none")
METRICS_EXPORTERS = ("otlp", "prometheus", "console", "none")
OTLP_PROTOCOLS = ("http/protobuf", "grpc")
DEFAULT_PROBE_TIMEOUT_SECONDS = 1.0  # shutdown: an OTLP endpoint that accepts no TCP connection in this long is down


@dataclass(frozen=True, slots=True)
class Settings:
    """What setup() will do, decided from its arguments and the environment."""

    tenant: str
    service_name: str | None  # None: the SDK's default (unknown_service:<process>)
    workflow: str | None = None  # the name of every agent run the GenAI span processor records; None: the spans'

    traces_exporter: str = "otlp"
    metrics_exporter: str = "otlp"
    traces_protocol: str = DEFAULT_OTLP_PROTOCOL
    metrics_protocol: str = DEFAULT_OTLP_PROTOCOL
    prometheus_host: str = DEFAULT_PROMETHEUS_HOST
    prometheus_port: int = DEFAULT_PROMETHEUS_PORT


def settings_from_env(environ: Mapping[str, str], *, service_name: str | None = None,
                      tenant: str | None = None, workflow: str | None = None) -> Settings:
    """Settings from OTEL_* variables; every problem reported at once, each naming the variable."""
    errors: list[str] = []
    resource = resource_attributes(environ)

    def choice(var: str, allowed: tuple[str, ...], default: str) -> str:
        value = environ.get(var, "").strip().lower() or default
        if value not in allowed:
            errors.append(f"{var}={value!r}: allowed values are {', '.join(allowed)}")
            return default
        return value

    tenant = tenant or resource.get(names.L_TENANT)
    if not tenant:
        errors.append("no tenant: pass setup(tenant=...) or set OTEL_RESOURCE_ATTRIBUTES=tenant=<name> "
                      "(the dashboards filter every series by tenant)")
    if workflow is not None and (not isinstance(workflow, str) or not workflow.strip()):
        errors.append(f"workflow={workflow!r}: expected a non-empty name (the workflow label of the agent runs "
                      "GenAiSpanProcessor records), or None to name them from their spans")
        workflow = None
    protocol = choice("OTEL_EXPORTER_OTLP_PROTOCOL", OTLP_PROTOCOLS, DEFAULT_OTLP_PROTOCOL)
    port_text = environ.get("OTEL_EXPORTER_PROMETHEUS_PORT", "").strip() or str(DEFAULT_PROMETHEUS_PORT)
    if not port_text.isdigit() or int(port_text) > 65535:
        errors.append(f"OTEL_EXPORTER_PROMETHEUS_PORT={port_text!r}: expected a port number 0-65535 (0: any free port)")
        port_text = str(DEFAULT_PROMETHEUS_PORT)
    settings = Settings(
        tenant=tenant or "",
        service_name=service_name or environ.get("OTEL_SERVICE_NAME") or resource.get(SERVICE_NAME) or None,
        workflow=workflow or resource.get(names.L_WORKFLOW) or None,
        traces_exporter=choice("OTEL_TRACES_EXPORTER", TRACES_EXPORTERS, "otlp"),
        metrics_exporter=choice("OTEL_METRICS_EXPORTER", METRICS_EXPORTERS, "otlp"),
        traces_protocol=choice("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", OTLP_PROTOCOLS, protocol),
        metrics_protocol=choice("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", OTLP_PROTOCOLS, protocol),
        prometheus_host=environ.get("OTEL_EXPORTER_PROMETHEUS_HOST", "").strip() or DEFAULT_PROMETHEUS_HOST,
        prometheus_port=int(port_text),
    )
    if errors:
        raise ValueError("telemetry setup: " + "; ".join(errors))
    return settings


@dataclass(slots=True)
class Installation:
    """What setup() started; shutdown() flushes the exporters and stops the Prometheus endpoint."""

    settings: Settings
    telemetry: Telemetry
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    prometheus_url: str | None = None  # http://host:port/metrics when metrics_exporter is prometheus
    _stops: list[Callable[[], Any]] = field(default_factory=list)

    _otlp: list[tuple[str, Any]] = field(default_factory=list)  # (signal, exporter) of each OTLP exporter

    def shutdown(self) -> None:
        """Flush and stop. An OTLP endpoint that does not accept a connection within
        DEFAULT_PROBE_TIMEOUT_SECONDS is reported once and its exporter stopped first, so shutdown never waits out
        the exporters' retries (about 10 s each, OTEL_EXPORTER_OTLP_TIMEOUT) for a collector that is not there."""
        install(None)
        for signal, exporter in self._otlp:
            endpoint = otlp_endpoint(signal, self.settings, os.environ)
            if (why := _unreachable(endpoint)) is not None:
                _UNREACHABLE.say(endpoint, why)
                with _UNREACHABLE.silenced():
                    exporter.shutdown()
        with _UNREACHABLE.silenced() if _UNREACHABLE.said else _nothing():
            for stop in (self.tracer_provider.shutdown, self.meter_provider.shutdown, *self._stops):
                stop()


def setup(*, service_name: str | None = None, tenant: str | None = None, workflow: str | None = None,
          set_global: bool = True,
          clock: Callable[[], int] = DEFAULT_CLOCK, genai_spans: bool = False, threads: bool = True,
          exemplars: bool = False, critical_path_attributes: bool = False) -> Installation:
    """Providers, exporters and the installed Telemetry for this process (see the module docstring).

    workflow: the workflow label of every agent run the GenAI span processor records in this process (genai_spans),
    for a service that runs one agent: it wins over the names its spans carry (which smolagents and LlamaIndex do
    not record; see docs/telemetry.md); also OTEL_RESOURCE_ATTRIBUTES=workflow=<name>; default: the spans' names.
    Kit workflows keep the names they are given.
    set_global: also make the providers OTel's global ones, so other instrumentation (HTTP clients,
    gRPC) exports through them; default: True (OTel allows that once per process).
    genai_spans: also compute the workflow metrics from other instrumentations' GenAI spans
    (telemetry.genai_spans, for agents already instrumented); default: False.
    threads: carry the OTel context (and so the current workflow) into threads and executors with
    OpenTelemetry's threading instrumentation, when opentelemetry-instrumentation-threading is installed;
    default: True. shutdown() undoes it.
    exemplars: exemplars on the kit's metrics, linking each to its step's span (Telemetry(exemplars=));
    default: False.
    critical_path_attributes: each workflow span also carries its critical-path shares
    (Telemetry(critical_path_attributes=)); default: False.
    """
    settings = settings_from_env(os.environ, service_name=service_name, tenant=tenant, workflow=workflow)
    attributes = {names.L_TENANT: settings.tenant}
    if settings.workflow:
        attributes[names.L_WORKFLOW] = settings.workflow
    if settings.service_name:
        attributes[SERVICE_NAME] = settings.service_name
    resource = Resource.create(attributes)

    tracer_provider = TracerProvider(resource=resource)
    otlp: list[tuple[str, Any]] = []
    _UNREACHABLE.install()
    if settings.traces_exporter == "otlp":
        otlp.append(("traces", _otlp_span_exporter(settings.traces_protocol)))
        tracer_provider.add_span_processor(BatchSpanProcessor(otlp[-1][1]))
    elif settings.traces_exporter == "console":
        tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stdout)))  # each as it ends
    readers: list[MetricReader] = []
    stops: list[Callable[[], Any]] = []
    prometheus_url = None
    if settings.metrics_exporter == "otlp":
        otlp.append(("metrics", _otlp_metric_exporter(settings.metrics_protocol)))
        readers.append(PeriodicExportingMetricReader(otlp[-1][1]))
    elif settings.metrics_exporter == "console":
        readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter(out=sys.stdout)))
    elif settings.metrics_exporter == "prometheus":
        reader, prometheus_url, stop = _prometheus_endpoint(settings.prometheus_host, settings.prometheus_port)
        readers.append(reader)
        stops.append(stop)
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    if set_global:
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(meter_provider)
    tel = Telemetry(tenant=settings.tenant, tracer_provider=tracer_provider, meter_provider=meter_provider,
                    clock=clock, exemplars=exemplars, critical_path_attributes=critical_path_attributes)
    if genai_spans:
        from telemetry.genai_spans import GenAiSpanProcessor

        tracer_provider.add_span_processor(GenAiSpanProcessor(tel))
    if threads:
        stops.extend(_instrument_threads())
    install(tel)
    return Installation(settings, tel, tracer_provider, meter_provider, prometheus_url, stops, otlp)


def otlp_endpoint(signal: str, settings: Settings, environ: Mapping[str, str]) -> str:
    """Where the `signal` (traces, metrics) exporter sends: the OTel specification's variables and defaults
    (OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT, then OTEL_EXPORTER_OTLP_ENDPOINT; http://localhost:4318 for
    http/protobuf, http://localhost:4317 for grpc)."""
    protocol = settings.traces_protocol if signal == "traces" else settings.metrics_protocol
    default = "http://localhost:4317" if protocol == "grpc" else "http://localhost:4318"
    return (environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT") or
            environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or default)


def _unreachable(endpoint: str, timeout: float = DEFAULT_PROBE_TIMEOUT_SECONDS) -> str | None:
    """Why nothing accepts a TCP connection at `endpoint`, or None when something does."""
    url = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "localhost", port), timeout=timeout):
            return None
    except OSError as err:
        return err.strerror or type(err).__name__


class _SayOnce(logging.Filter):
    """Turns the OTLP exporters' per-batch retry warnings into one line per process: the endpoint is unreachable."""

    LOGGERS = ("opentelemetry.exporter.otlp.common.http", "opentelemetry.exporter.otlp.proto.grpc.exporter",
               "opentelemetry.exporter.otlp.proto.http.trace_exporter",
               "opentelemetry.exporter.otlp.proto.http.metric_exporter", "opentelemetry.sdk.trace.export",
               "opentelemetry.sdk._shared_internal")
    NOISE = ("Transient error", "Failed to export", "already shutdown", "Exception while exporting")

    def __init__(self) -> None:
        super().__init__()
        self.said = False
        self._silent = 0

    def install(self) -> None:
        for name in self.LOGGERS:
            if self not in logging.getLogger(name).filters:
                logging.getLogger(name).addFilter(self)

    def say(self, endpoint: str | None, why: str) -> None:
        if not self.said:
            self.said = True
            where = f" {endpoint}" if endpoint else ""
            print(f"telemetry: the OTLP endpoint{where} is unreachable ({why}); spans and metrics are dropped (set "
                  "OTEL_EXPORTER_OTLP_ENDPOINT to the platform's Collector, or OTEL_*_EXPORTER=none)",
                  file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def silenced(self) -> Iterator[None]:
        self._silent += 1
        try:
            yield
        finally:
            self._silent -= 1

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not any(n in message for n in self.NOISE):
            return True
        if not self._silent and not self.said:
            self.say(None, message.split("(Caused by", 1)[0].strip()[:160])
        return False


_UNREACHABLE = _SayOnce()
_nothing = contextlib.nullcontext


def _instrument_threads() -> list[Callable[[], None]]:
    """Instrument threading if the instrumentation is installed and nothing instrumented it yet; the undo."""
    try:
        from opentelemetry.instrumentation.threading import ThreadingInstrumentor
    except ImportError:
        return []
    instrumentor = ThreadingInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        return []
    instrumentor.instrument()
    return [instrumentor.uninstrument]


def _prometheus_endpoint(host: str, port: int) -> tuple[MetricReader, str, Callable[[], None]]:
    """A Prometheus reader on its own registry, served on host:port (port 0: any free port)."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=True)
    reader = PrometheusMetricReader(registry=registry)
    server, thread = start_http_server(port, addr=host, registry=registry)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return reader, f"http://{host}:{server.server_port}/metrics", stop


def _otlp_span_exporter(protocol: str) -> Any:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # type: ignore[assignment]
    return OTLPSpanExporter()


def _otlp_metric_exporter(protocol: str) -> Any:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter  # type: ignore[assignment]
    return OTLPMetricExporter()
