"""telemetry/names.py matches what the OTel Prometheus exporter really exposes for the kit's instruments:
family names (unit suffix, _total, brace units dropped), sample names and label sets (dots -> underscores)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import telemetry
from telemetry import names
from telemetry.testing import VirtualClock

EXPORTER_LABELS = {"otel_scope_name", "otel_scope_version", "otel_scope_schema_url"}


def exercise(tel: telemetry.Telemetry, clock: VirtualClock) -> None:
    """Touch every instrument, including the error paths (a budget: the step budget and deadline metrics)."""
    with tel.workflow("w", budget_s=10):
        with tel.step("llm", "draft", model="m", provider="vllm") as run:
            clock.advance(1)
            run.usage(input_tokens=10, output_tokens=2)
        try:
            with tel.step("llm", "retry", model="m", provider="vllm"):
                raise TimeoutError
        except TimeoutError:
            pass


@pytest.fixture(scope="module")
def exposed() -> Iterator[dict[str, tuple[str, set[str], set[str]]]]:
    """Prometheus family name -> (type, sample names, label names) from the exporter's text output."""
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    clock = VirtualClock()
    exercise(telemetry.Telemetry(tenant="t", meter_provider=provider, clock=clock), clock)
    text = generate_latest(registry).decode()
    provider.shutdown()
    yield {f.name: (f.type, {s.name for s in f.samples}, {k for s in f.samples for k in s.labels})
           for f in text_string_to_metric_families(text)}


@pytest.mark.parametrize("metric", names.KIT_METRICS, ids=lambda m: m.otel)
def test_prometheus_names_and_labels_match_the_exporter(
        metric: names.Metric, exposed: dict[str, tuple[str, set[str], set[str]]]) -> None:
    if metric.kind == "histogram":
        family, samples = metric.prom, {f"{metric.prom}_{s}" for s in ("bucket", "count", "sum")}
        extra = EXPORTER_LABELS | {"le"}
    else:
        family, samples = metric.prom.removesuffix("_total"), {metric.prom}
        extra = EXPORTER_LABELS
    assert family in exposed, f"{metric.otel} is not exposed as {family}; exposed: {sorted(exposed)}"
    kind, sample_names, label_names = exposed[family]
    assert kind == metric.kind
    assert sample_names == samples
    assert label_names == set(metric.labels) | extra


def test_every_exposed_kit_family_is_declared(exposed: dict[str, tuple[str, set[str], set[str]]]) -> None:
    declared = {m.prom.removesuffix("_total") for m in names.KIT_METRICS}
    assert set(exposed) - {"target_info"} == declared  # target_info: the resource attributes


def test_label_constants_are_prometheus_safe_forms_of_the_otel_attributes() -> None:
    assert (names.L_TOKEN_TYPE, names.L_REQUEST_MODEL, names.L_OPERATION, names.L_PROVIDER) == (
        "gen_ai_token_type", "gen_ai_request_model", "gen_ai_operation_name", "gen_ai_provider_name")


def test_every_metric_has_the_tenant_and_workflow_labels() -> None:
    assert all({names.L_TENANT, names.L_WORKFLOW} <= set(m.labels) for m in names.KIT_METRICS)
