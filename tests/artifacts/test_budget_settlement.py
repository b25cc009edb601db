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

import grpc
import prometheus_client as prom
import pytest
import redis.asyncio as aredis
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from components.k8s.gateway.budgets.names import METADATA_NAMESPACE
from components.k8s.gateway.budgets.service import BudgetConfig, Processor, serve, shutdown
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
BOUND_S = 10.0


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


def test_a_metering_stream_cut_at_shutdown_leaves_the_streams_gauge_and_settles_what_it_metered(
        server: RedisServer) -> None:  # noqa: F811
    """The service's shutdown path, through real gRPC (grpc/grpc@v1.85.3 src/python/grpcio/grpc/aio/_server.py:
    server.stop(grace) cancels the RPCs still running past `grace`): a metering stream held open past the grace reads
    1 in the streams gauge, then 0 once it is cut, and its settlement (written before the process would exit) charges
    the prompt's estimate and the one chunk it saw."""
    server.resume()
    server.client().flushall()
    registry = prom.CollectorRegistry()

    def metering() -> float | None:
        return registry.get_sample_value(BUDGET.STREAMS_IN_FLIGHT, {BUDGET.L_STREAM: BUDGET.METERING})

    async def go() -> None:
        grpc_server, p, port = await serve(CONFIG, listen="127.0.0.1:0", redis_url=server.url, registry=registry,
                                           clock=lambda: NOW)
        admitted = await _admit(p, "finance")
        meta = admitted.dynamic_metadata.fields[METADATA_NAMESPACE].struct_value
        headers = base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode())
                                              for k, v in ((":status", "200"), ("content-type", SSE))])
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = pb_grpc.ExternalProcessorStub(channel).Process()
            for req in (pb.ProcessingRequest(observability_mode=True, request_headers=pb.HttpHeaders(),
                                             metadata_context=base_pb2.Metadata(
                                                 filter_metadata={METADATA_NAMESPACE: meta})),
                        pb.ProcessingRequest(observability_mode=True,
                                             response_headers=pb.HttpHeaders(headers=headers)),
                        pb.ProcessingRequest(observability_mode=True,
                                             response_body=pb.HttpBody(body=_sse(TEXT)))):
                await call.write(req)
            async with asyncio.timeout(BOUND_S):
                while metering() != 1:
                    await asyncio.sleep(0.01)
            await shutdown(grpc_server, p, 0.1)
            assert metering() == 0
            assert registry.get_sample_value(BUDGET.STREAMS_IN_FLIGHT, {BUDGET.L_STREAM: BUDGET.ADMISSION}) == 0
            call.cancel()
    asyncio.run(go())
    assert int(server.client().get(window_key("tenant", "finance", "perMinute", NOW))) == len(BODY) + 4 * 1
