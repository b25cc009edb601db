"""A Telemetry over in-memory span and metric readers with a virtual clock: exact spans and metric points."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import telemetry
from telemetry import names
from telemetry.instrument import INSTRUMENTATION_NAME
from telemetry.testing import DEFAULT_START_NS, VirtualClock


@dataclass(frozen=True)
class Span:
    """One exported span as the live tests' OTLP receivers record it (hex ids; "" for no parent)."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str

S = 10**9  # ns per second
TENANT = "acme"


@dataclass
class Harness:
    tel: telemetry.Telemetry
    clock: VirtualClock
    spans_exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def spans(self) -> dict[str, ReadableSpan]:
        finished = self.spans_exporter.get_finished_spans()
        by_name = {s.name: s for s in finished}
        assert len(by_name) == len(finished), "span names are unique in these tests"
        return by_name

    def points(self, metric: names.Metric) -> dict[frozenset[tuple[str, Any]], Any]:
        """attributes -> value (counters) or (sum, count) (histograms)."""
        data = self.reader.get_metrics_data()
        out: dict[frozenset[tuple[str, Any]], Any] = {}
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                if sm.scope.name != INSTRUMENTATION_NAME:
                    continue  # other instrumentations' own metrics (e.g. an SDK's gen_ai.* histograms)
                for m in sm.metrics:
                    if m.name != metric.otel:
                        continue
                    for p in m.data.data_points:
                        key = frozenset(p.attributes.items())
                        out[key] = (p.sum, p.count) if isinstance(p, HistogramDataPoint) else p.value
        return out

    def all_points(self) -> dict[str, dict[frozenset[tuple[str, Any]], Any]]:
        """Every kit metric by name: two runs of an agent compare equal when their metrics do."""
        return {m.otel: self.points(m) for m in (names.WORKFLOW_DURATION, names.STEP_DURATION, names.CRITICAL_PATH,
                                                 names.WORKFLOW_STEPS, names.STEP_ERRORS, names.GENAI_TOKEN_USAGE,
                                                 names.GENAI_OPERATION_DURATION)}


def labels(**kv: str) -> frozenset[tuple[str, str]]:
    return frozenset({"tenant": TENANT, **kv}.items())


def at(seconds: float) -> int:
    return DEFAULT_START_NS + round(seconds * S)


@contextmanager
def harness(resource: dict[str, str] | None = None) -> Iterator[Harness]:
    """resource: attributes of the tracer provider's resource (as OTEL_RESOURCE_ATTRIBUTES or setup() give)."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=Resource.create(resource or {}))
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    clock = VirtualClock()
    tel = telemetry.Telemetry(tenant=TENANT, tracer_provider=tracer_provider, meter_provider=meter_provider,
                              clock=clock)
    try:
        yield Harness(tel, clock, exporter, reader, tracer_provider, meter_provider)
    finally:
        meter_provider.shutdown()
        tracer_provider.shutdown()
