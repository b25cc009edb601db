"""Exemplars on the kit's metrics: off by default (the kit's pipeline drops them), and when turned on they
point at the span of the step (or workflow) that was measured, not at whatever span was current.

Upstream facts: the SDK's default exemplar filter is trace_based, which samples measurements recorded in
the context of a sampled span (OTel metrics SDK spec, "ExemplarFilter": the default is TraceBased; the
Python SDK reads OTEL_METRICS_EXEMPLAR_FILTER, default trace_based). The Collector's prometheus exporter
exports exemplars only with `enable_open_metrics: true` (opentelemetry-collector-contrib
exporter/prometheusexporter README), which the kit's Collector config does not set.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.metrics._internal.exemplar import Exemplar
from opentelemetry.sdk.metrics.export import HistogramDataPoint

import telemetry
from telemetry import names
from telemetry.instrument import INSTRUMENTATION_NAME
from tests.support.telemetry import Harness, harness


@pytest.fixture
def h(monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    monkeypatch.delenv("OTEL_METRICS_EXEMPLAR_FILTER", raising=False)  # the SDK default: trace_based
    with harness() as instrumented:
        yield instrumented


def exemplars(h: Harness) -> dict[str, dict[str, list[Exemplar]]]:
    """Instrumentation scope -> metric name -> the exemplars of all its histogram points. One collection:
    the SDK hands each exemplar out once (collecting resets the reservoirs)."""
    data = h.reader.get_metrics_data()
    out: dict[str, dict[str, list[Exemplar]]] = {}
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    if isinstance(p, HistogramDataPoint):
                        out.setdefault(sm.scope.name, {}).setdefault(m.name, []).extend(p.exemplars)
    return out


def agent(tel: telemetry.Telemetry, h: Harness) -> None:
    with tel.workflow("answer"):
        with tel.step("tool", "search"):
            h.clock.advance(1)
            # Control: a plain histogram recorded under the same sampled span does get an exemplar, so the
            # SDK's filter is on and an empty result below is the kit's doing.
            h.meter_provider.get_meter("control").create_histogram("control").record(1.0)
        with tel.step("llm", "draft", model="m", provider="vllm") as run:
            h.clock.advance(2)
            run.usage(input_tokens=100, output_tokens=10)


def test_no_exemplars_by_default(h: Harness) -> None:
    agent(h.tel, h)
    found = exemplars(h)
    assert [e.span_id for e in found["control"]["control"]] == [h.spans()["execute_tool search"].context.span_id]
    kit = found[INSTRUMENTATION_NAME]
    assert set(kit) == {m.otel for m in (names.WORKFLOW_DURATION, names.STEP_DURATION, names.WORKFLOW_STEPS,
                                         names.GENAI_TOKEN_USAGE, names.GENAI_OPERATION_DURATION)}
    assert {name: found for name, found in kit.items() if found} == {}


def test_exemplars_on_point_at_the_measured_span(h: Harness) -> None:
    tel = telemetry.Telemetry(tenant="acme", tracer_provider=h.tracer_provider, meter_provider=h.meter_provider,
                              clock=h.clock, exemplars=True)
    agent(tel, h)
    spans = h.spans()
    workflow, tool, llm = (spans[n].context for n in ("invoke_workflow answer", "execute_tool search", "chat m"))
    found = {name: sorted((e.value, e.span_id, e.trace_id) for e in es)
             for name, es in exemplars(h)[INSTRUMENTATION_NAME].items()}
    assert found == {
        names.STEP_DURATION.otel: sorted([(1.0, tool.span_id, tool.trace_id), (2.0, llm.span_id, llm.trace_id)]),
        names.GENAI_OPERATION_DURATION.otel: [(2.0, llm.span_id, llm.trace_id)],
        names.GENAI_TOKEN_USAGE.otel: [(10, llm.span_id, llm.trace_id), (100, llm.span_id, llm.trace_id)],
        names.WORKFLOW_DURATION.otel: [(3.0, workflow.span_id, workflow.trace_id)],
        names.WORKFLOW_STEPS.otel: [(2, workflow.span_id, workflow.trace_id)],
    }
