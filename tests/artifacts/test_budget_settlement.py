"""What the budget service settles for a response, end to end through its ext_proc streams, against a real Redis
(Debian's redis-server on 127.0.0.1): admission reserves, metering reads the response as Envoy's observability mode
sends it (envoy.service.ext_proc.v3 ProcessingRequest: the request's metadata, then the response's headers and body
chunks, the last with end_of_stream; envoyproxy/envoy@v1.40.0 api/envoy/service/ext_proc/v3/
external_processor.proto), and the window's counter ends at what the settlement charged.

A 2xx that ended without `usage` (Triton's OpenAI frontend sends none unless the model outputs num_input_tokens and
num_output_tokens: triton-inference-server/server@r26.07 python/openai/openai_frontend/engine/utils/triton.py) keeps
its reservation, counted by workload; one cut before its end is charged what it generated."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import prometheus_client as prom
import pytest
import redis.asyncio as aredis
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from components.k8s.gateway.budgets.names import METADATA_NAMESPACE
from components.k8s.gateway.budgets.service import BudgetConfig, Processor
from components.k8s.gateway.budgets.store import Store, window_key
from components.k8s.gateway.budgets.usage import Policy
from telemetry.names import BUDGET
from tests.artifacts.test_budget_store import server as server  # noqa: F401 (the module fixture)
from tests.artifacts.test_budget_store_outage import BODY, NOW, _admit
from tests.support.redis_server import RedisServer

CONFIG = BudgetConfig(tenants={"finance": Policy({"perMinute": 100_000}, output_weight=4.0)}, workloads={},
                      models={}, store_timeout_seconds=0.5)
RESERVATION = len(BODY) + 4 * 10  # one byte per prompt token; max_tokens 10 at output weight 4
JSON, SSE = "application/json", "text/event-stream"


def _sse(*events: object) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


TEXT = {"choices": [{"delta": {"content": "tok"}}]}
CASES = {  # response: (content type, body chunks, whether the body ended) -> (weighted tokens charged, without usage)
    "unstreamed, ended without usage": ((JSON, [b'{"choices": [{"message": {"content": "hi"}}]', b"}"], True),
                                        (RESERVATION, 1)),
    "unstreamed with usage": ((JSON, [json.dumps({"choices": [], "usage": {
        "prompt_tokens": 12, "completion_tokens": 3}}).encode()], True), (12 + 4 * 3, 0)),
    "stream ended without usage": ((SSE, [_sse(TEXT, TEXT), b"data: [DONE]\n\n"], True), (RESERVATION, 1)),
    "stream cut after two chunks": ((SSE, [_sse(TEXT), _sse(TEXT)], False), (len(BODY) + 4 * 2, 0)),
}


async def _meter(p: Processor, admitted: pb.ProcessingResponse, content_type: str, chunks: list[bytes],
                 ended: bool) -> None:
    """The metering stream of a 200 answer; it settles as the body ends or as the stream closes early."""
    meta = admitted.dynamic_metadata.fields[METADATA_NAMESPACE].struct_value

    async def messages() -> AsyncIterator[pb.ProcessingRequest]:
        yield pb.ProcessingRequest(observability_mode=True, request_headers=pb.HttpHeaders(),
                                   metadata_context=base_pb2.Metadata(filter_metadata={METADATA_NAMESPACE: meta}))
        headers = base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode())
                                              for k, v in ((":status", "200"), ("content-type", content_type))])
        yield pb.ProcessingRequest(observability_mode=True, response_headers=pb.HttpHeaders(headers=headers))
        for i, chunk in enumerate(chunks):
            yield pb.ProcessingRequest(observability_mode=True, response_body=pb.HttpBody(
                body=chunk, end_of_stream=ended and i == len(chunks) - 1))
    assert [r async for r in p.Process(messages(), None)] == []  # type: ignore[arg-type]
    await p.drain()


@pytest.mark.parametrize("case", CASES)
def test_a_settlement_charges_the_usage_the_reservation_of_an_answer_without_it_or_what_a_cut_stream_generated(
        server: RedisServer, case: str) -> None:  # noqa: F811
    (content_type, chunks, ended), (charged, without_usage) = CASES[case]
    server.resume()
    server.client().flushall()
    registry = prom.CollectorRegistry()

    async def go() -> None:
        p = Processor(CONFIG, Store(aredis.Redis.from_url(server.url)), registry, clock=lambda: NOW)
        admitted = await _admit(p, "finance")
        assert int(server.client().get(window_key("tenant", "finance", "perMinute", NOW))) == RESERVATION
        await _meter(p, admitted, content_type, chunks, ended)
    asyncio.run(go())
    assert int(server.client().get(window_key("tenant", "finance", "perMinute", NOW))) == charged
    assert registry.get_sample_value(BUDGET.SETTLED_WITHOUT_USAGE, {BUDGET.L_WORKLOAD: "chat"}) == (
        without_usage or None)
    assert registry.get_sample_value(BUDGET.REQUESTS, {BUDGET.L_SCOPE: "tenant", BUDGET.L_NAME: "finance"}) == 1


def test_a_reservation_from_the_previous_release_still_settles(server: RedisServer) -> None:  # noqa: F811
    """Mid-rollout, admission on a replica of the previous release writes no maxTokens nor workload into the
    reservation: the metering replica settles it all the same (an answer without usage at its prompt's estimate, as
    that release did), never failing the stream."""
    server.resume()
    server.client().flushall()

    async def go() -> None:
        p = Processor(CONFIG, Store(aredis.Redis.from_url(server.url)), prom.CollectorRegistry(), clock=lambda: NOW)
        admitted = await _admit(p, "finance")
        fields = admitted.dynamic_metadata.fields[METADATA_NAMESPACE].struct_value.fields
        old = json.loads(fields["reservation"].string_value)
        del old["maxTokens"], old["workload"]
        fields["reservation"].string_value = json.dumps(old)
        await _meter(p, admitted, JSON, [b'{"choices": []}'], True)
    asyncio.run(go())
    assert int(server.client().get(window_key("tenant", "finance", "perMinute", NOW))) == len(BODY)
