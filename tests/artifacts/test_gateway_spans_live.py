"""What the gateway itself sends the Collector per request, through the real Envoy 1.40 with token budgets on (the
kit's budget service and a real Redis): the Collector ingest sizing's gateway terms (components/k8s/observability/
sizing.py spans_per_request; docs/observability.md, "Spans per request").

Envoy facts: the gateway's HCM sets no spawn_upstream_span, so a request is one span (its name: the connection
manager's direction, `ingress`); each ext_proc filter opens one gRPC stream per request whose parent span is the
request's (envoyproxy/envoy@v1.40.0 source/extensions/filters/http/ext_proc/ext_proc.cc: StreamOptions
setParentSpan), and Envoy's gRPC client records a child span for it. Admission and metering are two filters, on every
request, a tenant without a budget too. Without budgets the gateway sends one span per request
(tests/artifacts/test_bench_gateway_tracing.py).
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.k8s.gateway.budgets.service import BudgetConfig
from components.k8s.gateway.envoy.base import COLLECTOR_CLUSTER
from components.k8s.gateway.envoy.budgets import BUDGETS_CLUSTER, service_config
from components.k8s.gateway.envoy.config import bootstrap
from components.k8s.observability.sizing import BUDGET_STREAMS, GATEWAY_SPANS
from infra.config import parse
from tests.support.budget_service import BudgetService
from tests.support.envoy import await_replicas, rebind
from tests.support.fake_backends import EnvoyProcess, free_port
from tests.support.otlp_sink import TraceSink
from tests.support.redis_server import RedisServer
from tests.support.tokens import DEFAULT_AUDIENCE, Issuer
from tests.support.usage_engine import UsageEngine

IDP = "https://idp.spans.test"
RAW = {
    "target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "fast"},
    "nodePools": {"gpu": {"instanceType": "dgx-h100"}},
    "tenants": {"budgeted": {"gpuQuota": 1, "shareWith": ["free"], "tokenBudget": {"perMinute": 100_000}},
                "free": {"gpuQuota": 0}},
    "models": {"chat": {"engine": "vllm", "model": "org/model", "toolCallParser": "none", "pool": "gpu",
                        "tenant": "budgeted"}},
    "gateway": {"auth": {"issuers": [{"issuer": IDP, "jwksUri": f"{IDP}/certs", "audiences": [DEFAULT_AUDIENCE]}]},
                "budgetService": {"image": "registry.example/aifactory-budgets:test"}},
    "observability": {"prices": {"dgx-h100": 30.0}},
}
REQUEST_SPAN = "ingress"
STREAM_SPAN = "async envoy.service.ext_proc.v3.ExternalProcessor.Process egress"
WAIT_S = 15.0  # Envoy's tracer flushes every 5 s (its default), or at 5 buffered spans


@dataclass
class Live:
    envoy: EnvoyProcess
    sink: TraceSink
    issuer: Issuer

    def post(self, tenant: str, *, stream: bool) -> int:
        c = http.client.HTTPConnection("127.0.0.1", self.envoy.listener_port, timeout=10)
        try:
            body = {"model": "chat", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
            c.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                      headers={**self.issuer.bearer(tenant), "content-type": "application/json"})
            r = c.getresponse()
            r.read()
            return r.status
        finally:
            c.close()

    def names_once(self, total: int) -> dict[str, int]:
        """The span counts by name once `total` spans arrived (or what arrived within WAIT_S)."""
        deadline = time.monotonic() + WAIT_S
        while sum((names := self.sink.names()).values()) < total and time.monotonic() < deadline:
            time.sleep(0.1)
        return names


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    cfg = parse(RAW, stack="spans")
    issuer = Issuer(IDP)
    with ExitStack() as stack:
        sink = stack.enter_context(TraceSink())
        redis = stack.enter_context(RedisServer(tmp_path_factory.mktemp("redis")))
        engine = stack.enter_context(UsageEngine())
        port, admin, listener = free_port(), free_port(), free_port()
        config = rebind(bootstrap(cfg), listener_port=listener, stats_port=free_port(), admin_port=admin,
                        endpoints={"chat": [engine.address], BUDGETS_CLUSTER: [("127.0.0.1", port)],
                                   COLLECTOR_CLUSTER: [sink.address]}, jwks=[issuer.jwks])
        envoy = stack.enter_context(EnvoyProcess(config, Path(tmp_path_factory.mktemp("envoy")), admin_port=admin,
                                                 listener_port=listener))
        await_replicas(envoy, {"chat": 1})
        # after Envoy: no fork while the service's gRPC threads run (tests.support.budget_service)
        stack.enter_context(BudgetService(BudgetConfig.load_text(service_config(cfg)), redis.url, port=port))
        yield Live(envoy, sink, issuer)


def test_with_budgets_every_request_sends_its_span_and_one_per_budget_stream(live: Live) -> None:
    statuses = [live.post(tenant, stream=stream) for tenant in ("budgeted", "free") for stream in (False, True)]
    assert statuses == [200] * 4
    per_request = GATEWAY_SPANS + BUDGET_STREAMS
    assert per_request == 3
    assert live.names_once(4 * per_request) == {REQUEST_SPAN: 4 * GATEWAY_SPANS, STREAM_SPAN: 4 * BUDGET_STREAMS}
