"""Spans per request through the gateway: what the Collector's ingest (observability.ingest.spansPerSecond) must
count (docs/observability.md, "Spans per request"), worked out by hand per shipped stack.

Per request: the gateway's span (1; live: tests/artifacts/test_bench_gateway_tracing.py); the hop to the model, a
span from the gateway pod's sidecar and one from the model pod's (Istio 1.28.3 sidecars record one span per request
per connection manager and spawn no upstream span: istio/istio@1.28.3 pilot/pkg/networking/core/tracing.go
configureFromProviderConfig; each follows the gateway's sampled traceparent); vLLM's `llm_request` span (SGLang and
Triton export none: components/k8s/engines); with token budgets, two ext_proc streams, each a gateway span
(live: tests/artifacts/test_gateway_spans_live.py) and a hop to the budget service (2 sidecar spans).
"""

from __future__ import annotations

import pytest

from components.k8s.engines import ENGINES
from components.k8s.gateway.envoy.budgets import any_budget
from components.k8s.observability.sizing import spans_per_request
from tests.support.stacks import stack_config


def test_the_formula_counts_every_hop() -> None:
    # gateway 1 + model hop 2 + vLLM 1
    assert spans_per_request(engine_spans=1, token_budgets=False) == 4
    # + admission and metering: 2 x (gateway child span 1 + budget hop 2)
    assert spans_per_request(engine_spans=1, token_budgets=True) == 10
    assert spans_per_request(engine_spans=0, token_budgets=True) == 9
    # a retried request: each try is a hop of its own, and the engine that served it records its span
    assert spans_per_request(engine_spans=1, token_budgets=False, tries=2) == 7


@pytest.mark.parametrize(("stack", "expected"), [
    ("dev", {"chat": 4}),
    ("staging", {"llama-70b": 4, "llama-8b-trt": 3}),
    ("prod", {"assistant-fast": 9, "assistant-steady": 10, "assistant-batch": 10, "assistant-tools": 9,
              "deep-research": 10, "embed-rerank": 10, "finance-8b": 10, "finance-8b-bf16": 10}),
    ("onprem", {"llama-70b": 4, "llama-405b": 4, "classifier": 3}),
])
def test_shipped_stacks_spans_per_request(stack: str, expected: dict[str, int]) -> None:
    """Prod has token budgets (tenants and workloads); the others none. Triton (assistant-fast, llama-8b-trt,
    classifier) and SGLang (assistant-tools) export no engine span."""
    cfg = stack_config(stack)
    assert {m.name: spans_per_request(engine_spans=int(ENGINES[m.engine].exports_spans), token_budgets=any_budget(cfg))
            for m in cfg.models.values()} == expected
