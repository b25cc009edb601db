"""Token budgets: overspend under concurrency (reserve, then settle) against count-at-the-end; the check's latency.

Everything on 127.0.0.1: a real Redis (Debian's redis-server), the kit's budget service as its own process (python -m
components.k8s.gateway.budgets), two gateway replicas (the real Envoy on the kit's bootstrap), a stand-in engine that
streams one chunk per token and reports usage (tests.support.usage_engine).

1. Overspend: one tenant with a daily budget of BUDGET weighted tokens (outputWeight 1), STREAMS concurrent streams
   of MAX_TOKENS tokens each, half through each gateway, each stream sending requests until it gets a 429. Every
   admitted request costs the engine exactly USAGE tokens. Admissions are split by who decided them: the store (its
   reservation fitted; for these the tokens spent never exceed the budget plus one reservation, and "holds" or
   "VIOLATED" says so) and fail-open (the store did not answer within the service's timeout, or Envoy gave up on the
   service: admitted unreserved, counted, with the alert their ratio fires). The store's answer time under this load
   (the service's check histogram: the Redis round trip plus the service's own scheduling delay) is what the store
   timeout must stay above. The same load through a count-at-the-end scheme (what Envoy AI Gateway, LiteLLM and Kong
   do: admit while the counter is under the budget, add a request's usage when it ends), same store and engine.
2. Added latency: RATE requests/s of unstreamed chat completions to a gateway with the budget check and to one built
   from the same stack without budgets, both paced at once by h2load as POSTs over HTTP/2 (bench_gateway.measure),
   RUNS runs; then the same at LOW_RATE
   (the check's own cost, without queueing). Target: p99 added under 2 ms at RATE. Breakdown: the service's CPU per
   request (admission and metering, from /proc), the store's answer time as the service sees it.
3. Streamed answers: STREAM_CLIENTS concurrent clients, each streaming STREAM_TOKENS chunks as fast as the engine
   sends them, for STREAM_SECONDS to each gateway in turn, RUNS runs: time to the last byte with and without budgets.
   The response side is metered in observability mode: no chunk waits for the service's answer, so a slow or busy
   service never stalls a stream (tests/artifacts/test_envoy_budgets_live.py::
   test_a_slow_service_never_holds_a_streamed_answer pins that); what the check adds here is admission's one round
   trip and the CPU that Envoy's side stream and the service's metering take on the same host. Reported, no target:
   on a shared 2-core machine the numbers are mostly that CPU contention.
4. Store outage: OUTAGE_RATE requests/s with and without budgets while the store is frozen for OUTAGE_SECONDS: with
   the service's breaker on the store, only the first requests (and one probe a second) wait its timeout; the rest
   are admitted unreserved at once (fail-open). Reported: their latency, how many the breaker answered, settlements
   never written.
5. Where the service's CPU goes: Envoy's ext_proc messages for one unstreamed request (as the real Envoy sends them:
   admission's body with its attributes; metering's request body, response headers, response body and an empty
   end-of-stream body, each with the reservation's metadata) replayed to the service process by a gRPC client,
   REPLAYED requests, REPLAY_CONCURRENCY at once: the service's CPU per request for admission alone, for both, and
   for both without the response headers message (what reading the status from response_attributes would save).
   No Envoy in the loop, so less of the machine's noise than (2).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from google.protobuf import struct_pb2

from components.k8s.gateway.budgets.names import METADATA_NAMESPACE, PATH_ATTRIBUTE, ROUTE_ATTRIBUTE, TENANT_ATTRIBUTE
from components.k8s.gateway.budgets.store import window_key
from components.k8s.gateway.envoy.budgets import (
    BUDGET_MESSAGE_TIMEOUT_S,
    BUDGET_STORE_TIMEOUT_S,
    BUDGETS_CLUSTER,
    service_config,
)
from dashboards.budgets import STORE_FAILURE_RATIO
from infra.config import parse
from telemetry.names import BUDGET as METRICS
from tests.bench.bench_gateway import measure, percentile
from tests.support.envoy import start_gateway
from tests.support.processes import die_with_parent, free_port, stop_process
from tests.support.redis_server import RedisServer
from tests.support.tokens import DEFAULT_AUDIENCE, Issuer
from tests.support.usage_engine import UsageEngine

IDP = "https://idp.bench-budgets.test"
STREAMS = 64
MAX_TOKENS = 64
BUDGET = 30_000  # about 180 requests' usage: several rounds of the 64 streams
CHUNK_DELAY_S = 0.02  # 50 tokens/s per stream, a large model's decode speed
RATE = 500
LOW_RATE = 50
USAGE = 20 + MAX_TOKENS  # what the stand-in engine spends on each admitted request (prompt + generated)
SECONDS = 4.0
RUNS = 3
START_TIMEOUT_S = 15.0
STREAM_CLIENTS = 16
STREAM_TOKENS = 256
STREAM_SECONDS = 3.0
REPLAYED = 3000
OUTAGE_RATE = 200
OUTAGE_SECONDS = 3.0
REPLAY_CONCURRENCY = 16


def _raw(budget: int | None) -> dict[str, Any]:
    # request rate limits far above the load: every 429 is the budget's
    tenant: dict[str, Any] = {"gpuQuota": 1, "rateLimit": {"requestsPerSecond": 20000, "burst": 20000}}
    gateway: dict[str, Any] = {"auth": {"issuers": [{"issuer": IDP, "jwksUri": f"{IDP}/certs",
                                                     "audiences": [DEFAULT_AUDIENCE]}]}}
    if budget is not None:
        tenant["tokenBudget"] = {"perDay": budget, "outputWeight": 1}
        gateway["budgetService"] = {"image": "bench/aifactory-budgets:local"}
    return {"target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "fast"},
            "nodePools": {"gpu": {"instanceType": "dgx-h100"}}, "tenants": {"agents": tenant},
            "models": {"chat": {"engine": "vllm", "model": "org/model", "toolCallParser": "none", "pool": "gpu",
                                "tenant": "agents", "replicas": {"min": 1, "max": 1}}},
            "gateway": gateway, "observability": {"prices": {"dgx-h100": 30.0}}}


class _Service:
    """The budget service as its own process, as in the cluster."""

    def __init__(self, config: str, redis_url: str, workdir: Path) -> None:
        self.port, self.metrics_port = free_port(), free_port()
        (workdir / "budgets.json").write_text(config)
        self._log = (workdir / "budgets.log").open("wb")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "components.k8s.gateway.budgets", "--config", str(workdir / "budgets.json"),
             "--listen", f"127.0.0.1:{self.port}", "--redis-url", redis_url, "--metrics-port", str(self.metrics_port)],
            stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with __import__("socket").create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the budget service did not start") from None
                time.sleep(0.05)

    def metrics(self) -> dict[str, float]:
        """The service's samples, `name{labels}` -> value."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                if line and not line.startswith("#")}

    def cpu_seconds(self) -> float:
        """User and system CPU the service's process has used (Linux /proc)."""
        fields = Path(f"/proc/{self._proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        stop_process(self._proc)
        self._log.close()


def _post(port: int, headers: dict[str, str], body: bytes) -> int:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("POST", "/v1/chat/completions", body=body, headers=headers)
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


def _body(stream: bool) -> dict[str, Any]:
    return {"model": "chat", "messages": [{"role": "user", "content": "plan the next step"}], "stream": stream,
            "max_tokens": MAX_TOKENS}


def _streams(send: Any) -> int:
    """STREAMS workers, each sending until refused (or a bound on rounds); admitted requests."""
    admitted = [0] * STREAMS
    start = threading.Barrier(STREAMS)

    def worker(i: int) -> None:
        start.wait(timeout=30)
        for _ in range(1000):
            if not send(i):
                return
            admitted[i] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(STREAMS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(admitted)


def _sum(samples: dict[str, float], name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels`."""
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(v for k, v in samples.items() if k.split("{", 1)[0] == name and all(w in k for w in want))


def _bucket_quantile(samples: dict[str, float], name: str, q: float) -> str:
    """The smallest bucket bound of histogram `name` that holds the quantile `q` of its observations."""
    buckets = sorted((float(k.split('le="', 1)[1].split('"', 1)[0]), v) for k, v in samples.items()
                     if k.startswith(f"{name}_bucket{{"))
    total = buckets[-1][1] if buckets else 0
    for le, count in buckets:
        if total and count >= q * total:
            return f"<= {le * 1000:g} ms" if le != math.inf else f"> {buckets[-2][0] * 1000:g} ms"
    return "n/a"


def _store_answers(samples: dict[str, float]) -> str:
    """The store's answer time as the service sees it (the Redis round trip plus the service's scheduling delay)."""
    name = METRICS.CHECK_SECONDS
    count = _sum(samples, f"{name}_count")
    mean = _sum(samples, f"{name}_sum") / count * 1000 if count else 0.0
    return (f"{count:.0f} reservations, mean {mean:.2f} ms, p50 {_bucket_quantile(samples, name, 0.5)}, p99 "
            f"{_bucket_quantile(samples, name, 0.99)}, p99.9 {_bucket_quantile(samples, name, 0.999)}")


def overspend(tmp: Path) -> list[tuple[str, str]]:
    issuer = Issuer(IDP)
    headers = {**issuer.bearer("agents"), "content-type": "application/json"}
    body = json.dumps(_body(True)).encode()
    forwarded = json.dumps({**_body(True), "stream_options": {"include_usage": True}}, separators=(",", ":"))
    reservation = math.ceil(max(len(body), len(forwarded)) + MAX_TOKENS)
    cfg = parse(_raw(BUDGET), stack="bench-budgets")
    with ExitStack() as stack:
        store = stack.enter_context(RedisServer(tmp))
        service = _Service(service_config(cfg), store.url, tmp)
        stack.callback(service.close)
        engine = stack.enter_context(UsageEngine(prompt_tokens=20, completion_tokens=MAX_TOKENS,
                                                 chunk_delay=CHUNK_DELAY_S))
        engine.keep_bodies = False
        gateways = [start_gateway(stack, cfg, Path(tempfile.mkdtemp(dir=tmp)), jwks=[issuer.jwks],
                                  endpoints={"chat": [engine.address], BUDGETS_CLUSTER: [("127.0.0.1", service.port)]})
                    for _ in range(2)]
        key = window_key("tenant", "agents", "perDay", time.time())
        admitted = _streams(lambda i: _post(gateways[i % 2].listener_port, headers, body) == 200)
        time.sleep(0.5)  # settlements in flight
        counter, truth = int(store.client().get(key) or 0), engine.tokens_served
        samples = service.metrics()
        # fail-open: the service's store timeouts (admitted unreserved), and the streams each gateway's ext_proc let
        # on unprocessed (the service slower than Envoy's message timeout, or unreachable)
        timed_out = int(_sum(samples, METRICS.STORE_FAILURES, outcome="admitted"))
        gave_up = sum(v for g in gateways for k, v in g.stats().items()
                      if f"ext_proc.{METRICS.ENVOY_ADMISSION}." in k and k.endswith("failure_mode_allowed"))
        checks = _sum(samples, f"{METRICS.CHECK_SECONDS}_count")
        store_ratio = timed_out / checks if checks else 0.0

        # the same load, counted at the end: admit while the counter is under the budget, add usage at the end
        client = store.client()
        end_key = "bench:count-at-the-end"
        before = engine.tokens_served
        direct = json.dumps({**_body(True), "stream_options": {"include_usage": True}}).encode()

        def count_at_the_end(_: int) -> bool:
            if int(client.get(end_key) or 0) >= BUDGET:
                return False
            if _post(engine.address[1], {"content-type": "application/json"}, direct) != 200:
                return False
            client.incrby(end_key, USAGE)  # the usage the response reported
            return True

        end_admitted = _streams(count_at_the_end)
        end_truth = engine.tokens_served - before
    fail_open = timed_out + gave_up
    by_store = truth - fail_open * USAGE
    bound = BUDGET + reservation
    return [
        ("budget (weighted tokens/day)", f"{BUDGET}, {STREAMS} streams over 2 gateway replicas, "
                                         f"max_tokens {MAX_TOKENS} ({USAGE} tokens per request)"),
        ("store answered", f"{admitted - fail_open} requests admitted, engine spent {by_store} tokens: "
                           f"{'holds' if by_store <= bound else 'VIOLATED'} (bound: the budget plus one reservation, "
                           f"{bound}; overspend {max(0, by_store - BUDGET)})"),
        ("fail-open", f"{fail_open} requests admitted unreserved ({timed_out} store answers past "
                      f"{BUDGET_STORE_TIMEOUT_S:g} s, {gave_up} let on by Envoy past {BUDGET_MESSAGE_TIMEOUT_S:g} s): "
                      f"{fail_open * USAGE} tokens; TokenBudgetStoreFailing (warning) "
                      f"{'fires' if store_ratio > STORE_FAILURE_RATIO else 'silent'} at {store_ratio:.1%} of "
                      f"reservations (threshold {STORE_FAILURE_RATIO:.0%})"),
        ("all admitted", f"{admitted} requests, engine spent {truth} tokens (overspend {max(0, truth - BUDGET)}), "
                         f"store counter {counter} (fail-open requests settle what they used)"),
        ("store answer time", _store_answers(samples)),
        ("count at the end", f"{end_admitted} requests admitted, engine spent {end_truth} tokens: overspend "
                             f"{max(0, end_truth - BUDGET)} ({max(0, end_truth - BUDGET) / USAGE:.0f} "
                             "requests' usage past the budget)"),
    ]


def _with_and_without(stack: ExitStack, tmp: Path, completion_tokens: int
                      ) -> tuple[int, int, dict[str, str], _Service, RedisServer]:
    """A gateway with a budget too large to refuse anything and one from the same stack without budgets, to one
    engine: their listener ports, a caller's headers, the budget service and its store."""
    issuer = Issuer(IDP)
    budgeted, plain = parse(_raw(2_000_000_000), stack="bench-budgets"), parse(_raw(None), stack="bench-budgets")
    store = stack.enter_context(RedisServer(tmp))
    service = _Service(service_config(budgeted), store.url, tmp)
    stack.callback(service.close)
    engine = stack.enter_context(UsageEngine(prompt_tokens=20, completion_tokens=completion_tokens))
    engine.keep_bodies = False
    with_check = start_gateway(stack, budgeted, Path(tempfile.mkdtemp(dir=tmp)), jwks=[issuer.jwks],
                               endpoints={"chat": [engine.address], BUDGETS_CLUSTER: [("127.0.0.1", service.port)]})
    without = start_gateway(stack, plain, Path(tempfile.mkdtemp(dir=tmp)), jwks=[issuer.jwks],
                            endpoints={"chat": [engine.address]})
    return with_check.listener_port, without.listener_port, {**issuer.bearer("agents"),
                                                             "content-type": "application/json"}, service, store


def _pair(base: list[float], checked: list[float], digits: int) -> str:
    """p50 and p99 (ms) without and with the budget check."""
    return (f"p50 {statistics.median(base):.{digits}f} -> {statistics.median(checked):.{digits}f} ms, p99 "
            f"{percentile(base, 0.99):.{digits}f} -> {percentile(checked, 0.99):.{digits}f} ms")


def _spread(added: list[float], digits: int) -> str:
    return f"median {statistics.median(added):+.{digits}f} ms (min {min(added):+.{digits}f}, max " \
           f"{max(added):+.{digits}f})"


def latency(tmp: Path) -> list[tuple[str, str]]:
    body = json.dumps({**_body(False), "max_tokens": 8}).encode()
    rows = []
    with ExitStack() as stack:
        checked_port, base_port, headers, service, _ = _with_and_without(stack, tmp, 8)

        def runs(rate: int, label: str) -> list[tuple[str, str]]:
            added: list[float] = []
            out = []
            for i in range(RUNS):
                cpu, before = service.cpu_seconds(), service.metrics()
                base, checked = measure(base_port, checked_port, rate, SECONDS, headers, "POST",
                                        "/v1/chat/completions", body)
                cpu = (service.cpu_seconds() - cpu) * 1000 / len(checked)
                after = service.metrics()
                name = METRICS.CHECK_SECONDS
                n = _sum(after, f"{name}_count") - _sum(before, f"{name}_count")
                store_ms = (_sum(after, f"{name}_sum") - _sum(before, f"{name}_sum")) / n * 1000 if n else 0.0
                added.append(percentile(checked, 0.99) - percentile(base, 0.99))
                out.append((f"{label} run {i + 1}", f"{_pair(base, checked, 2)}; service CPU {cpu:.2f} ms/request, "
                                                    f"store answer {store_ms:.2f} ms mean"))
            return [*out, (f"p99 added at {rate} req/s", _spread(added, 2))]

        measure(base_port, checked_port, RATE, 1.0, headers, "POST", "/v1/chat/completions", body)  # warm up
        rows += runs(RATE, f"{RATE}/s")
        rows += runs(LOW_RATE, f"{LOW_RATE}/s")
    return [*rows, ("target", f"p99 added < 2 ms at {RATE} req/s")]


def _last_byte_ms(port: int, headers: dict[str, str], body: bytes, seconds: float) -> list[float]:
    """STREAM_CLIENTS clients streaming for `seconds`: each answer's time to its last byte, ms."""
    out: list[float] = []
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def client() -> None:
        while time.monotonic() < end:
            started = time.perf_counter()
            assert _post(port, headers, body) == 200
            with lock:
                out.append((time.perf_counter() - started) * 1000)

    threads = [threading.Thread(target=client) for _ in range(STREAM_CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def streamed(tmp: Path) -> list[tuple[str, str]]:
    body = json.dumps({**_body(True), "max_tokens": STREAM_TOKENS}).encode()
    added: list[float] = []
    rows = []
    with ExitStack() as stack:
        checked_port, base_port, headers, _, _ = _with_and_without(stack, tmp, STREAM_TOKENS)
        for _ in range(RUNS):
            base = _last_byte_ms(base_port, headers, body, STREAM_SECONDS)
            checked = _last_byte_ms(checked_port, headers, body, STREAM_SECONDS)
            added.append(percentile(checked, 0.99) - percentile(base, 0.99))
            rows.append((f"streamed run {len(rows) + 1}", f"{STREAM_TOKENS} chunks, last byte "
                                                          f"{_pair(base, checked, 1)} ({len(base)} / {len(checked)} "
                                                          "answers)"))
    return [*rows, (f"streamed p99 added, {STREAM_CLIENTS} clients", _spread(added, 1))]


def outage(tmp: Path) -> list[tuple[str, str]]:
    """OUTAGE_RATE requests/s with and without budgets while the store is frozen for OUTAGE_SECONDS (SIGSTOP: it
    accepts connections and never answers): the first requests wait the store timeout, then the breaker answers."""
    body = json.dumps({**_body(False), "max_tokens": 8}).encode()
    with ExitStack() as stack:
        checked_port, base_port, headers, service, store = _with_and_without(stack, tmp, 8)
        measure(base_port, checked_port, OUTAGE_RATE, 1.0, headers, "POST", "/v1/chat/completions", body)  # warm up
        before = service.metrics()
        store.pause()
        try:
            base, checked = measure(base_port, checked_port, OUTAGE_RATE, OUTAGE_SECONDS, headers, "POST",
                                    "/v1/chat/completions", body)
        finally:
            store.resume()
        deadline = time.monotonic() + START_TIMEOUT_S
        while service.metrics().get(METRICS.STORE_BREAKER_OPEN) and time.monotonic() < deadline:
            time.sleep(0.1)  # a probe after the cool-down closes it; the waiting settlements are written then
        time.sleep(1.0)
        after = service.metrics()

    def delta(name: str) -> int:
        return int(_sum(after, name) - _sum(before, name))
    failed, skipped = delta(METRICS.STORE_FAILURES), delta(METRICS.STORE_SKIPPED)
    return [("store frozen", f"{OUTAGE_RATE} req/s for {OUTAGE_SECONDS:g} s: {_pair(base, checked, 1)}; "
                             f"{failed} admitted unreserved, {skipped} of them by the open breaker without asking the "
                             f"store, {failed - skipped} after its {BUDGET_STORE_TIMEOUT_S:g} s timeout; "
                             f"settlements never written: {delta(METRICS.SETTLEMENTS_FAILED)}")]


def _replay_messages(answer: pb.ProcessingResponse, headers: bool) -> list[pb.ProcessingRequest]:
    """Metering's messages for one unstreamed answer, with the reservation admission answered."""
    meta = base_pb2.Metadata(filter_metadata={
        METADATA_NAMESPACE: answer.dynamic_metadata.fields[METADATA_NAMESPACE].struct_value})
    usage = {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28}
    body = json.dumps({"object": "chat.completion", "usage": usage, "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "one two three"}, "finish_reason": "length"}]})
    status = pb.HttpHeaders(headers=base_pb2.HeaderMap(headers=[
        base_pb2.HeaderValue(key=":status", raw_value=b"200"),
        base_pb2.HeaderValue(key="content-type", raw_value=b"application/json")]))
    parts = [{"request_body": pb.HttpBody(body=json.dumps(_body(False)).encode(), end_of_stream=True)},
             *([{"response_headers": status}] if headers else []),
             {"response_body": pb.HttpBody(body=body.encode())},
             {"response_body": pb.HttpBody(end_of_stream=True)}]
    return [pb.ProcessingRequest(**part, metadata_context=meta, observability_mode=True) for part in parts]


async def _replay(port: int, cpu: Callable[[], float], metering: bool, headers: bool) -> float:
    """The service's CPU (ms) per replayed request."""
    attrs = struct_pb2.Struct()
    attrs.update({ROUTE_ATTRIBUTE: "chat", PATH_ATTRIBUTE: "/v1/chat/completions", TENANT_ATTRIBUTE: "agents"})
    admission = pb.ProcessingRequest(request_body=pb.HttpBody(body=json.dumps(_body(False)).encode(),
                                                              end_of_stream=True),
                                     attributes={"envoy.filters.http.ext_proc": attrs})
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.ExternalProcessorStub(channel)
        slots = asyncio.Semaphore(REPLAY_CONCURRENCY)

        async def one() -> None:
            async with slots:
                call = stub.Process()
                await call.write(admission)
                answer = await call.read()
                await call.done_writing()
                if metering:
                    meter = stub.Process()
                    for message in _replay_messages(answer, headers):
                        await meter.write(message)
                    await meter.done_writing()
                    async for _ in meter:  # the service ends the stream at the body's end
                        pass
        await asyncio.gather(*(one() for _ in range(200)))  # warm up
        before = cpu()
        await asyncio.gather(*(one() for _ in range(REPLAYED)))
        return (cpu() - before) * 1000 / REPLAYED


def cpu_breakdown(tmp: Path) -> list[tuple[str, str]]:
    with ExitStack() as stack:
        store = stack.enter_context(RedisServer(tmp))
        service = _Service(service_config(parse(_raw(2_000_000_000), stack="bench-budgets")), store.url, tmp)
        stack.callback(service.close)
        admission, both, no_headers = (
            asyncio.run(_replay(service.port, service.cpu_seconds, metering, headers))
            for metering, headers in ((False, True), (True, True), (True, False)))
    return [("service CPU, replayed", f"admission {admission:.2f} ms/request, with metering {both:.2f} ms "
                                      f"(metering's stream, 4 messages and settlement: {both - admission:.2f} ms), "
                                      f"without the response headers message {no_headers:.2f} ms ({REPLAYED} "
                                      f"requests, {REPLAY_CONCURRENCY} at once)")]


def run() -> list[tuple[str, str]]:
    with (tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b,
          tempfile.TemporaryDirectory() as c, tempfile.TemporaryDirectory() as d,
          tempfile.TemporaryDirectory() as e):
        return (overspend(Path(a)) + latency(Path(b)) + streamed(Path(c)) + outage(Path(d))
                + cpu_breakdown(Path(e)))
