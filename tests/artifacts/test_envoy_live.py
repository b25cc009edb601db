"""The generated gateway config, run by the real Envoy on 127.0.0.1 in front of fake model servers.

Times are scaled down through the stack config (health checks every 0.25 s, a 0.3 s try idle timeout,
a 0.5 s stream idle timeout standing in for Envoy's 300 s default), so each case takes a second or two.
Callers present RS256 tokens of a local issuer (tests.support.tokens, a local JWKS).
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import re
import socket
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.k8s.gateway.envoy.config import CLIENT_KEEPALIVE_IDLE_S, bootstrap, client_keepalive
from components.k8s.observability.prometheus import TRACE_ID_MATCHER
from infra.config import PlatformConfig, parse
from tests.support.envoy import await_replicas, rebind
from tests.support.fake_backends import Behaviour, EnvoyProcess, FakeBackend, free_port, request
from tests.support.tokens import DEFAULT_AUDIENCE, Issuer

TENANT_RPS, TENANT_BURST = 1, 5
SLOW_TIMEOUT_S = 0.5
TRY_IDLE_S = 0.3  # the `hung` model's per-try protection
STREAM_IDLE_S = 0.5  # the connection manager's stream idle timeout (Envoy's default is 300 s)
LONG_SILENCE_S = 1.0  # the `long` model answers after this much silence: longer than STREAM_IDLE_S
REQUEST_HEADERS_TIMEOUT_S = 1.0
REQUEST_TIMEOUT_S = 1.5
BODY_LIMIT = 4096  # the `embed` model's maxRequestBytes
POOL_REQUESTS = 2000
CLIENTS = 8
ISSUER = "https://issuer.test/realms/aifactory"

_MODEL = {"engine": "vllm", "model": "org/model", "toolCallParser": "none", "tenant": "alpha", "pool": "gpu"}
RAW = {
    "target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "fast"},
    "nodePools": {"gpu": {"instanceType": "dgx-h100"}},
    "tenants": {"alpha": {"gpuQuota": 32, "rateLimit": {"requestsPerSecond": 10000, "burst": 20000}},
                "beta": {"gpuQuota": 1, "shareWith": ["alpha"]},
                "gamma": {"gpuQuota": 1},
                "capped": {"gpuQuota": 2, "shareWith": ["alpha"], "rateLimit": {
                    "requestsPerSecond": TENANT_RPS, "burst": TENANT_BURST,
                    "batchRequestsPerSecond": TENANT_RPS, "batchBurst": TENANT_BURST}}},
    "models": {
        "chat-fast": {**_MODEL, "workload": "chat", "priority": "interactive"},
        "chat-batch": {**_MODEL, "workload": "chat", "priority": "batch"},
        "embed": {**_MODEL, "maxRequestBytes": BODY_LIMIT},
        "tri": {**_MODEL, "engine": "triton"},
        "rerank": {**_MODEL, "task": "rerank"},
        "flaky-503": _MODEL,
        "flaky-reset": _MODEL,
        "two-500": _MODEL,
        "tri-500": {**_MODEL, "engine": "triton"},
        "vllm-500": {**_MODEL},  # a copy: the replicas loop below sets replicas on each entry
        "hung": {**_MODEL, "timeoutSeconds": 10, "tryIdleTimeoutSeconds": TRY_IDLE_S},
        # least-request is what keeps traffic off a slow replica: a model without session affinity (with it,
        # requests that carry no session key are spread at random under the load bound: envoy_affinity)
        "lagging": {**_MODEL, "sessionAffinity": {"enabled": False}},
        "slow": {**_MODEL, "timeoutSeconds": SLOW_TIMEOUT_S, "tryIdleTimeoutSeconds": SLOW_TIMEOUT_S / 2},
        "long": {**_MODEL, "timeoutSeconds": 5},
        "long-stream": {**_MODEL, "timeoutSeconds": 5, "tryIdleTimeoutSeconds": TRY_IDLE_S},
        "long-quiet": {**_MODEL, "timeoutSeconds": 5, "tryIdleTimeoutSeconds": TRY_IDLE_S},
        "beta-chat": {**_MODEL, "tenant": "beta"},
        "gamma-chat": {**_MODEL, "tenant": "gamma"},
        "lim-fast": {**_MODEL, "tenant": "capped", "workload": "lim"},
        "lim-batch": {**_MODEL, "tenant": "capped", "workload": "lim", "priority": "batch"},
    },
    "gateway": {
        "auth": {"issuers": [{"issuer": ISSUER, "jwksUri": f"{ISSUER}/certs", "audiences": [DEFAULT_AUDIENCE]}]},
        "healthCheck": {"intervalSeconds": 0.25, "timeoutSeconds": 0.25, "unhealthyThreshold": 2,
                        "healthyThreshold": 1},
        "outlierDetection": {"intervalSeconds": 0.1},
        "requestHeadersTimeoutSeconds": REQUEST_HEADERS_TIMEOUT_S,
        "requestTimeoutSeconds": REQUEST_TIMEOUT_S,
        "streamIdleTimeoutSeconds": STREAM_IDLE_S,
    },
    "observability": {"prices": {"dgx-h100": 30.0}, "traceSampleRatio": 1.0},
}
OK3 = [Behaviour.OK] * 3
BACKENDS = {
    "chat-fast": [Behaviour.OK],
    "chat-batch": [Behaviour.OK],
    "embed": [Behaviour.OK],
    "tri": [Behaviour.OK],
    "rerank": [Behaviour.OK],
    "flaky-503": [Behaviour.OK, Behaviour.UNAVAILABLE, Behaviour.OK],
    "flaky-reset": [Behaviour.OK, Behaviour.RESET, Behaviour.OK],
    "two-500": [Behaviour.OK, Behaviour.ERROR, Behaviour.ERROR],
    "tri-500": [Behaviour.ERROR, Behaviour.ERROR],
    "vllm-500": [Behaviour.ERROR, Behaviour.ERROR],
    "hung": OK3,  # one of them hangs during the test
    "lagging": [Behaviour.OK, Behaviour.OK, Behaviour.SLOW],
    "slow": [Behaviour.SLOW],
    "long": [Behaviour.SLOW],
    "long-stream": [Behaviour.STREAM],
    "long-quiet": [Behaviour.SLOW],
    "beta-chat": [Behaviour.OK],
    "gamma-chat": [Behaviour.OK],
    "lim-fast": [Behaviour.OK],
    "lim-batch": [Behaviour.OK],
}
for _name, _replicas in BACKENDS.items():  # as many replicas as fake replicas
    if len(_replicas) > 1:
        RAW["models"][_name]["replicas"] = {"min": 1, "max": len(_replicas)}
# SLOW waits, STREAM chunk gaps
DELAYS = {"lagging": 0.2, "long": LONG_SILENCE_S, "long-stream": 0.2, "long-quiet": 2 * TRY_IDLE_S}


@dataclass
class Gateway:
    cfg: PlatformConfig
    envoy: EnvoyProcess
    backends: dict[str, list[FakeBackend]]
    stats_port: int
    issuer: Issuer

    @property
    def port(self) -> int:
        return self.envoy.listener_port

    def auth(self, tenant: str | None = "alpha", **kwargs: object) -> dict[str, str]:
        return self.issuer.bearer(tenant, **kwargs)

    def get(self, path: str, headers: dict[str, str] | None = None, *, tenant: str | None = "alpha",
            body: bytes | None = None) -> tuple[int, dict]:
        """A request as `tenant` (a valid token; none when tenant is None and no authorization is given)."""
        h = {**(self.auth(tenant) if tenant is not None else {}), **(headers or {})}
        status, raw = request(self.port, path, h, body=body)
        return status, json.loads(raw) if raw.startswith(b"{") else {"text": raw.decode()}

    def hits(self, model: str) -> int:
        return sum(b.hits for b in self.backends[model])


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    cfg = parse(RAW, stack="live")
    workdir: Path = tmp_path_factory.mktemp("envoy")
    issuer = Issuer(ISSUER)
    with ExitStack() as stack:
        backends = {m: [stack.enter_context(FakeBackend(f"{m}-{i}", b, delay=DELAYS.get(m, 3.0)))
                        for i, b in enumerate(bs)] for m, bs in BACKENDS.items()}
        collector = ("127.0.0.1", free_port())  # nothing listens: spans are dropped, requests unaffected
        endpoints = {m: [b.address for b in bs] for m, bs in backends.items()} | {"otel_collector": [collector]}
        admin, listener, stats = free_port(), free_port(), free_port()
        config = rebind(bootstrap(cfg), listener_port=listener, stats_port=stats, admin_port=admin,
                        endpoints=endpoints, jwks=[issuer.jwks])
        envoy = stack.enter_context(EnvoyProcess(config, workdir, admin_port=admin, listener_port=listener))
        await_replicas(envoy, {m: len(bs) for m, bs in BACKENDS.items()})
        yield Gateway(cfg, envoy, backends, stats, issuer)


def _chat(model: str) -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode()


JSON = {"content-type": "application/json"}


# --- client connections ----------------------------------------------------------------------------

def _accepted(port: int, client_port: int) -> tuple[int, int] | None:
    """(timer, ticks to it) of the gateway's established socket for one client connection, from /proc/net/tcp: `tr` 2
    is the keepalive timer (0: no timer on an idle socket), `tm->when` is in USER_HZ ticks (100 a second)
    (torvalds/linux@v6.12:net/ipv4/tcp_ipv4.c get_tcp4_sock)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state = fields[1], fields[2], fields[3]
        if (int(local.split(":")[1], 16), int(remote.split(":")[1], 16), state) == (port, client_port, "01"):
            timer, ticks = fields[5].split(":")
            return int(timer, 16), int(ticks, 16)
    return None


def test_client_connections_carry_tcp_keepalive_so_an_nlb_keeps_a_silent_long_request(gateway: Gateway) -> None:
    """An NLB forgets a flow silent for 350 s: the gateway's accepted sockets have keepalive probes due within
    CLIENT_KEEPALIVE_IDLE_S (the numbers in the config are Linux's, which this machine's socket module has)."""
    assert [(o["level"], o["name"]) for o in client_keepalive()] == [
        (socket.SOL_SOCKET, socket.SO_KEEPALIVE), (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
        (socket.IPPROTO_TCP, socket.TCP_KEEPINTVL), (socket.IPPROTO_TCP, socket.TCP_KEEPCNT)]
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as client:
        client_port = client.getsockname()[1]
        deadline = time.monotonic() + 5
        while (accepted := _accepted(gateway.port, client_port)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert accepted is not None
        timer, ticks = accepted
        assert timer == 2
        assert (CLIENT_KEEPALIVE_IDLE_S - 10) * 100 < ticks <= CLIENT_KEEPALIVE_IDLE_S * 100


# --- routing ---------------------------------------------------------------------------------------


def test_model_header_routes_to_the_workloads_interactive_model(gateway: Gateway) -> None:
    status, body = gateway.get("/v1/models", {"x-model": "chat"})
    assert (status, body["backend"], body["path"]) == (200, "chat-fast-0", "/v1/models")
    assert len(body["request_id"]) == 36  # Envoy's generated UUID reaches the model server


def test_priority_batch_routes_to_the_batch_model(gateway: Gateway) -> None:
    status, body = gateway.get("/v1/chat/completions", {"x-model": "chat", "x-priority": "batch"})
    assert (status, body["backend"]) == (200, "chat-batch-0")
    status, body = gateway.get("/v1/chat/completions", {"x-model": "chat", "x-priority": "interactive"})
    assert (status, body["backend"]) == (200, "chat-fast-0")


def test_model_and_priority_values_are_case_insensitive(gateway: Gateway) -> None:
    status, body = gateway.get("/v1/chat/completions", {"x-model": "CHAT", "x-priority": "Batch"})
    assert (status, body["backend"]) == (200, "chat-batch-0")
    status, body = gateway.get("/models/Chat/v1/models")
    assert (status, body["backend"], body["path"]) == (200, "chat-fast-0", "/v1/models")


def test_path_prefix_routes_and_is_rewritten(gateway: Gateway) -> None:
    status, body = gateway.get("/models/embed/v1/embeddings")
    assert (status, body["backend"], body["path"]) == (200, "embed-0", "/v1/embeddings")
    status, body = gateway.get("/models/chat/v1/completions", {"x-priority": "batch"})
    assert (status, body["backend"], body["path"]) == (200, "chat-batch-0", "/v1/completions")


def test_body_model_routes_unmodified_openai_clients(gateway: Gateway) -> None:
    status, body = gateway.get("/v1/chat/completions", JSON, body=_chat("chat"))
    assert (status, body["backend"], body["path"]) == (200, "chat-fast-0", "/v1/chat/completions")
    status, body = gateway.get("/v1/chat/completions", {**JSON, "x-priority": "batch"}, body=_chat("chat"))
    assert (status, body["backend"]) == (200, "chat-batch-0")
    status, body = gateway.get("/v1/chat/completions", JSON, body=_chat("chat-batch"))  # a model's own key
    assert (status, body["backend"]) == (200, "chat-batch-0")
    for content_type in ("application/json; charset=utf-8", None):  # what other clients send, or nothing
        headers = {"content-type": content_type} if content_type else {}
        status, body = gateway.get("/v1/embeddings", headers, body=_chat("embed"))
        assert (status, body["backend"]) == (200, "embed-0"), content_type
    status, body = gateway.get("/v1/chat/completions", JSON, body=_chat("nope"))
    assert status == 404 and body["text"].startswith("unknown model: name one in header x-model")


def test_precedence_is_header_then_path_then_body(gateway: Gateway) -> None:
    status, body = gateway.get("/models/chat/v1/embeddings", {**JSON, "x-model": "embed"}, body=_chat("tri"))
    assert (status, body["backend"], body["path"]) == (200, "embed-0", "/v1/embeddings")
    status, body = gateway.get("/models/embed/v1/embeddings", JSON, body=_chat("chat"))
    assert (status, body["backend"]) == (200, "embed-0")


def test_unknown_model_gets_404_naming_the_models(gateway: Gateway) -> None:
    status, body = gateway.get("/v1/models", {"x-model": "nope"})
    assert status == 404
    assert body["text"] == ("unknown model: name one in header x-model, path /models/<model>/v1/... or the body's "
                            "\"model\", on a path its engine serves; models: beta-chat, chat, embed, flaky-503, "
                            "flaky-reset, gamma-chat, hung, lagging, lim, long, long-quiet, long-stream, rerank, "
                            "slow, tri, tri-500, two-500, vllm-500\n")


# --- paths -------------------------------------------------------------------------------------------


def test_only_the_engines_openai_paths_are_routable(gateway: Gateway) -> None:
    before = gateway.hits("chat-fast")
    for path, headers in (("/models/chat/metrics", {}), ("/metrics", {"x-model": "chat"}),
                          ("/v1/load_lora_adapter", {"x-model": "chat"}), ("/health", {"x-model": "chat"}),
                          ("/models/chat/v1/models/org/model", {})):  # vLLM serves no /v1/models/{id}
        status, body = gateway.get(path, headers)
        assert status == 404, path
    assert gateway.hits("chat-fast") == before
    status, body = gateway.get("/models/chat/v1/load_lora_adapter")
    assert (status, body["text"]) == (404, "not served: the gateway routes only /{rerank, score, v1/chat/completions, "
                                            "v1/completions, v1/embeddings, v1/models, v1/models/<name>, v1/rerank, "
                                            "v1/score, v2/rerank} (optionally under /models/<model>)\n")
    # Triton's OpenAI front end serves GET /v1/models/{model_name}
    status, body = gateway.get("/models/tri/v1/models/tri")
    assert (status, body["backend"], body["path"]) == (200, "tri-0", "/v1/models/tri")


def test_a_reranker_takes_the_score_and_rerank_paths_and_nothing_else(gateway: Gateway) -> None:
    """A cross-encoder on vLLM v0.33.0 serves /score, /v1/score, /rerank, /v1/rerank, /v2/rerank
    (vllm/entrypoints/pooling/scoring/api_router.py): routed by path prefix, header and body model, unchanged;
    a generation path is not routed to it, and a chat model gets no rerank path."""
    rerank = json.dumps({"model": "rerank", "query": "q", "documents": ["a", "b"]}).encode()
    for path in ("/rerank", "/v1/rerank", "/v2/rerank", "/score", "/v1/score"):
        status, body = gateway.get(f"/models/rerank{path}", JSON, body=rerank)
        assert (status, body["backend"], body["path"]) == (200, "rerank-0", path)
        status, body = gateway.get(path, JSON, body=rerank)
        assert (status, body["backend"], body["path"]) == (200, "rerank-0", path)
        assert gateway.get(path, {"x-model": "chat"})[0] == 404
    status, body = gateway.get("/v1/chat/completions", {"x-model": "rerank"})
    assert status == 404


def test_paths_are_normalised_before_routing(gateway: Gateway) -> None:
    status, body = gateway.get("/models/gamma-chat/../chat/v1/models")
    assert (status, body["backend"], body["path"]) == (200, "chat-fast-0", "/v1/models")
    status, body = gateway.get("/models/chat//v1//models")
    assert (status, body["backend"], body["path"]) == (200, "chat-fast-0", "/v1/models")
    assert gateway.get("/models/chat%2Fv1/models")[0] == 400  # escaped slashes are refused


# --- caller identity ---------------------------------------------------------------------------------


def test_requests_without_a_valid_token_get_401(gateway: Gateway) -> None:
    before = gateway.hits("chat-fast")
    other = Issuer(ISSUER)  # same issuer name, another key
    for headers in ({}, {"authorization": "Bearer not-a-jwt"}, other.bearer("alpha"),
                    gateway.auth("alpha", issuer="https://elsewhere.test"),
                    gateway.auth("alpha", expires_in=-120)):
        assert gateway.get("/v1/models", {"x-model": "chat", **headers}, tenant=None)[0] == 401, headers
    # a valid token for another audience: Envoy's jwt_authn answers 403 (JwtAudienceNotAllowed)
    status, body = gateway.get("/v1/models", {"x-model": "chat", **gateway.auth("alpha", audience="someone-else")},
                               tenant=None)
    assert (status, body["text"]) == (403, "Audiences in Jwt are not allowed")
    # a valid token in the URL (jwt_authn's default access_token parameter) is not taken: the header only
    token = gateway.auth("alpha")["authorization"].removeprefix("Bearer ")
    assert gateway.get(f"/v1/models?access_token={token}", {"x-model": "chat"}, tenant=None)[0] == 401
    assert gateway.hits("chat-fast") == before


def test_a_tenant_calls_its_own_and_shared_models_and_nothing_else(gateway: Gateway) -> None:
    assert gateway.get("/v1/models", {"x-model": "chat"}, tenant="alpha")[0] == 200
    assert gateway.get("/v1/models", {"x-model": "beta-chat"}, tenant="alpha")[0] == 200  # beta shares with alpha
    status, body = gateway.get("/v1/models", {"x-model": "gamma-chat"}, tenant="alpha")
    assert (status, body["text"]) == (403, "RBAC: access denied")
    assert gateway.get("/v1/models", {"x-model": "gamma-chat"}, tenant="gamma")[0] == 200
    assert gateway.get("/v1/models", {"x-model": "chat"}, tenant="gamma")[0] == 403  # alpha shares nothing
    assert gateway.get("/v1/models", {"x-model": "chat"}, tenant="beta")[0] == 403  # sharing is one way
    assert gateway.get("/v1/chat/completions", JSON, tenant="gamma", body=_chat("chat"))[0] == 403  # body too
    assert gateway.get("/v1/models", {"x-model": "chat", **gateway.auth(None)},
                       tenant=None)[0] == 403  # a token without the tenant claim


def test_the_gateway_sets_the_callers_tenant_header_and_drops_the_token(gateway: Gateway) -> None:
    status, body = gateway.get("/v1/models", {"x-model": "chat", "x-aifactory-tenant": "gamma"}, tenant="alpha")
    assert (status, body["tenant"], body["authorization"]) == (200, "alpha", None)
    # a forged header does not open another tenant's model
    assert gateway.get("/v1/models", {"x-model": "gamma-chat", "x-aifactory-tenant": "gamma"},
                       tenant="alpha")[0] == 403


def test_access_log_and_stats_carry_the_callers_tenant(gateway: Gateway) -> None:
    status, body = gateway.get("/v1/models", {"x-model": "embed"}, tenant="alpha")
    lines = [json.loads(x) for x in gateway.envoy.access_log_lines(body["request_id"])]
    assert len(lines) == 1
    entry = lines[0]
    assert (entry["caller_tenant"], entry["model"], entry["route"], entry["status"], entry["upstream_cluster"],
            entry["flags"]) == ("alpha", "embed", "embed", 200, "embed", "-")
    # the replica itself (components.k8s.gateway.envoy.replicas): its pod's address
    assert entry["upstream_host"] == "{}:{}".format(*gateway.backends["embed"][0].address)
    assert isinstance(entry["duration_ms"], int) and entry["upstream_service_time_ms"].isdigit()
    assert len(entry["trace_id"]) == 32  # traced (sample ratio 1.0)
    stats = gateway.envoy.stats()
    assert stats["vhost.models.vcluster.caller-alpha.upstream_rq_200"] >= 1
    gamma = gateway.envoy.stats().get("vhost.models.vcluster.caller-gamma.upstream_rq_200", 0)
    gateway.get("/v1/models", {"x-model": "gamma-chat"}, tenant="gamma")
    assert gateway.envoy.stats()["vhost.models.vcluster.caller-gamma.upstream_rq_200"] == gamma + 1


def test_grafanas_trace_id_link_matches_the_real_access_log_line(gateway: Gateway) -> None:
    """The Loki datasource's derived field (components/k8s/observability/prometheus.py TRACE_ID_MATCHER) finds the
    trace id in the line Envoy itself writes, and Jaeger's trace-to-logs line filter (`|= "<trace id>"`) finds it."""
    status, body = gateway.get("/v1/models", {"x-model": "embed"}, tenant="alpha")
    [line] = gateway.envoy.access_log_lines(body["request_id"])
    trace_id = json.loads(line)["trace_id"]
    found = re.search(TRACE_ID_MATCHER, line)
    assert found is not None and found.group(1) == trace_id
    assert line.count(trace_id) == 1


# --- rate limits ----------------------------------------------------------------------------------------


def test_buckets_are_per_calling_tenant_and_batch_cannot_starve_interactive(gateway: Gateway) -> None:
    batch = [gateway.get("/v1/models", {"x-model": "lim", "x-priority": "batch"}, tenant="capped")[0]
             for _ in range(3 * TENANT_BURST)]
    assert batch[:TENANT_BURST] == [200] * TENANT_BURST  # the burst is served
    assert batch.count(429) >= TENANT_BURST  # 15 requests in far less than 5 s cannot all refill
    # the same tenant's interactive traffic has its own bucket
    assert gateway.get("/v1/models", {"x-model": "lim"}, tenant="capped")[0] == 200
    interactive = [gateway.get("/v1/models", {"x-model": "lim"}, tenant="capped")[0]
                   for _ in range(3 * TENANT_BURST)]
    assert interactive.count(429) >= TENANT_BURST
    # another caller of the same models (capped shares them with alpha) is not affected
    assert gateway.get("/v1/models", {"x-model": "lim"}, tenant="alpha")[0] == 200
    assert gateway.get("/v1/models", {"x-model": "lim", "x-priority": "batch"}, tenant="alpha")[0] == 200
    assert gateway.envoy.stats()["tenant_rate_limit.http_local_rate_limit.rate_limited"] >= 2 * TENANT_BURST


def test_an_operator_can_lift_the_tenant_limits_at_runtime_without_a_redeploy(gateway: Gateway) -> None:
    """The limiter's enforcement is the runtime key tenant_rate_limit_enforced (LocalRateLimit.filter_enforced,
    a RuntimeFractionalPercent): during an incident an operator sets it to 0 on the admin interface
    (`POST /runtime_modify?tenant_rate_limit_enforced=0`) and callers over their bucket are served, still counted
    as rate limited; 100 puts the limits back."""
    def over_the_bucket() -> list[int]:
        return [gateway.get("/v1/models", {"x-model": "lim"}, tenant="capped")[0] for _ in range(3 * TENANT_BURST)]

    assert 429 in over_the_bucket()
    try:
        assert request(gateway.envoy.admin_port, "/runtime_modify?tenant_rate_limit_enforced=0", body=b"")[0] == 200
        assert 429 not in over_the_bucket()
    finally:
        request(gateway.envoy.admin_port, "/runtime_modify?tenant_rate_limit_enforced=100", body=b"")
    assert 429 in over_the_bucket()


# --- failing, hung and slow replicas -----------------------------------------------------------------------
# The tests marked `alone` (tests/conftest.py) count tries, pick replicas by relative speed or race a chunk against the
# try idle timer: on a machine busy with other tests a fake replica that answers late is a slow or failing one.


def test_a_500_is_retried_on_another_replica_whatever_the_engine(gateway: Gateway) -> None:
    """Triton's and vLLM's 500s alike are retried (retriable_status_codes [500, 502, 503]) on a replica the request
    has not tried (previous_hosts): a replica whose engine is broken answers 500 to everything, and only another
    replica tells it from a request that fails everywhere. Both models have two replicas that answer 500 to every
    request; one of them stays (a model's last ready replica is never ejected: maxEjectionPercent 67 of 2). The
    second replica's 500 ends the request: not retried again nor counted against that replica (the router sees 452),
    answered to the client as 500 (components.k8s.gateway.envoy.failures): a model whose every replica fails is a
    server error, not the client's 422. Before issue 44: Triton's 500 was tried once."""
    assert gateway.cfg.gateway.retries.attempts >= 1  # else the case proves nothing
    requests = 3
    for model in ("tri-500", "vllm-500"):
        before = gateway.hits(model)
        codes = Counter(gateway.get("/v1/chat/completions", {"x-model": model, **JSON}, body=_chat(model))[0]
                        for _ in range(requests))
        assert (model, codes, gateway.hits(model) - before) == (model, Counter({500: requests}), requests * 2)
        stats = gateway.envoy.stats()
        assert (stats[f"cluster.{model}.upstream_rq_retry"], stats[f"cluster.{model}.upstream_rq_452"]) == \
            (requests, requests)
        assert all(b.hits >= 1 for b in gateway.backends[model])


def _hammer(gateway: Gateway, model: str, n: int) -> Counter[int]:
    headers = {"x-model": model, **gateway.auth("alpha")}

    def worker(count: int) -> Counter[int]:
        codes: Counter[int] = Counter()
        conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=10)
        try:
            for _ in range(count):
                try:
                    status, _ = request(gateway.port, "/v1/completions", headers, conn=conn)
                except (OSError, http.client.HTTPException):
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=10)
                    status = 0
                codes[status] += 1
        finally:
            conn.close()
        return codes

    with ThreadPoolExecutor(CLIENTS) as pool:
        return sum(pool.map(worker, [n // CLIENTS] * CLIENTS), Counter())


@pytest.mark.alone
@pytest.mark.parametrize("model", ["flaky-503", "flaky-reset"])
def test_bad_replica_is_retried_around_and_ejected(gateway: Gateway, model: str) -> None:
    bad = BACKENDS[model].index(next(b for b in BACKENDS[model] if b is not Behaviour.OK))
    codes = _hammer(gateway, model, POOL_REQUESTS)
    assert sum(codes.values()) == POOL_REQUESTS
    assert codes[200] >= 0.999 * POOL_REQUESTS, codes
    stats = gateway.envoy.stats()
    ejections = stats[f"cluster.{model}.outlier_detection.ejections_enforced_consecutive_gateway_failure"]
    assert ejections >= 1 and stats[f"cluster.{model}.outlier_detection.ejections_enforced_total"] == ejections
    bad_hits = gateway.backends[model][bad].hits
    good_hits = sum(b.hits for i, b in enumerate(gateway.backends[model]) if i != bad)
    # ejected after a handful of failures, and kept out though its health check passes (issue 44 item 8: before,
    # it was back at its next check and ejected again after as many failures)
    assert bad_hits < 20 * ejections and bad_hits < 0.1 * good_hits
    # every failure on the bad replica was retried (or refused by the retry budget), on another replica
    assert stats[f"cluster.{model}.upstream_rq_retry"] + stats.get(f"cluster.{model}.upstream_rq_retry_overflow", 0) \
        == bad_hits
    assert good_hits == codes[200]  # the healthy replicas served every success


@pytest.mark.alone
def test_two_of_three_replicas_failing_with_500_are_retried_around_and_ejected(gateway: Gateway) -> None:
    """A replica answering 500 to every request while its /health passes (issue 44 item 8): each 500 is retried on
    another replica (retriable_status_codes), and consecutive 5xx eject it, enforced and not undone by its passing
    checks (components.k8s.gateway.envoy.replicas.outlier_detection; maxEjectionPercent 67 of 3 ready replicas lets
    both go). Before: never ejected, 34 of 2000 requests got the 500 (all three tries met the failing replicas).
    A request that meets both failing replicas before their ejection ends as a 500 to the client (a second
    replica's 500, not retried and not counted against it: components.k8s.gateway.envoy.failures); the route
    cluster counts it as 452, never as a client's 422. So each client 500 spends one of the 500s a failing replica
    answers before its ejection (its first try's; the retry's is the 452) and there are at most consecutive_5xx of
    those per failing replica: at most 2 x consecutive_5xx of the 2000 (6: 99.7%). How many of the first few
    tries happen to meet both failing replicas is chance (0 to 3 seen here), so the bound is the mechanism's, not
    a share."""
    codes = _hammer(gateway, "two-500", POOL_REQUESTS)
    stats = gateway.envoy.stats()
    assert set(codes) <= {200, 500} and codes[500] <= 2 * gateway.cfg.gateway.outlier_detection.consecutive_5xx, codes
    assert stats.get("cluster.two-500.upstream_rq_422", 0) == 0
    assert stats.get("cluster.two-500.upstream_rq_452", 0) == codes[500]
    assert stats["cluster.two-500.outlier_detection.ejections_enforced_consecutive_5xx"] == 2
    assert stats["cluster.two-500.outlier_detection.ejections_active"] == 2
    bad_hits = sum(b.hits for b in gateway.backends["two-500"][1:])
    assert bad_hits < 20  # a few tries each before its ejection, each retried
    assert gateway.backends["two-500"][0].hits == codes[200]


@pytest.mark.alone
def test_a_hung_replica_costs_one_try_idle_timeout_then_is_taken_out(gateway: Gateway) -> None:
    replicas = gateway.backends["hung"]
    assert _hammer(gateway, "hung", 200)[200] == 200
    replicas[1].behaviour = Behaviour.HANG
    codes = _hammer(gateway, "hung", POOL_REQUESTS)
    assert codes == Counter({200: POOL_REQUESTS})  # every request answered by a healthy replica
    stats = gateway.envoy.stats()
    # requests that met the hung replica were retried after TRY_IDLE_S, not held for the route's 10 s
    assert stats["cluster.hung.upstream_rq_per_try_idle_timeout"] >= 1
    assert stats["cluster.hung.upstream_rq_retry_success"] >= 1
    assert stats.get("cluster.hung.upstream_rq_timeout", 0) == 0
    # the engine's health endpoint hangs too: active checks take it out (waited for, bounded)
    deadline = time.monotonic() + 10 * REQUEST_TIMEOUT_S
    while stats.get("cluster.hung.health_check.failure", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
        stats = gateway.envoy.stats()
    assert stats["cluster.hung.health_check.failure"] >= 2
    assert stats["cluster.hung.membership_healthy"] == 2


def _paced(gateway: Gateway, model: str, rate: float, n: int) -> Counter[int]:
    """`n` requests sent `rate` per second (each on its own connection), whatever the answers' times."""
    headers = {"x-model": model, **gateway.auth("alpha")}
    start = time.monotonic()

    def one(i: int) -> int:
        time.sleep(max(0.0, start + i / rate - time.monotonic()))
        return request(gateway.port, "/v1/completions", headers)[0]

    with ThreadPoolExecutor(4 * CLIENTS) as pool:
        return Counter(pool.map(one, range(n)))


@pytest.mark.alone
def test_a_slow_replica_gets_little_traffic(gateway: Gateway) -> None:
    assert _paced(gateway, "lagging", 200, 400) == Counter({200: 400})
    fast, slow = sum(b.hits for b in gateway.backends["lagging"][:2]), gateway.backends["lagging"][2].hits
    # least requests in flight of four replicas drawn at random: the slow one holds each request 0.2 s, so it is
    # picked only when all four draws are it (1/81) or the fast ones are as busy. Two choices (Envoy's default): 1/9.
    assert slow < 0.05 * (fast + slow), (fast, slow)


@pytest.mark.alone
def test_a_streamed_generation_longer_than_the_try_idle_timeout_is_not_cut(gateway: Gateway) -> None:
    """Chunks 0.2 s apart for 1 s: each one resets the 0.3 s per-try idle timer."""
    status, raw = request(gateway.port, "/v1/chat/completions", {**JSON, **gateway.auth()}, body=_chat("long-stream"))
    assert status == 200
    assert raw.count(b"data: {}") == 4 and b'"backend": "long-stream-0"' in raw
    assert gateway.envoy.stats().get("cluster.long-stream.upstream_rq_per_try_idle_timeout", 0) == 0


def test_slow_backend_times_out_with_504(gateway: Gateway) -> None:
    status, body = gateway.get("/v1/completions", {"x-model": "slow"})
    assert (status, body["text"]) == (504, "upstream request timeout")
    assert gateway.envoy.stats()["cluster.slow.upstream_rq_timeout"] == 1


def test_a_request_longer_than_the_stream_idle_timeout_completes_within_its_model_timeout(gateway: Gateway) -> None:
    """The model answers after LONG_SILENCE_S of silence, longer than the connection manager's
    stream_idle_timeout (standing in for Envoy's 300 s default) and shorter than its timeoutSeconds."""
    status, body = gateway.get("/v1/completions", {"x-model": "long"})
    assert (status, body["backend"]) == (200, "long-0")
    status, body = gateway.get("/v1/completions", JSON, body=_chat("long"))  # routed by the body
    assert (status, body["backend"]) == (200, "long-0")


def test_a_non_streamed_generation_longer_than_the_try_idle_timeout_is_not_cut(gateway: Gateway) -> None:
    """A non-streamed answer is silent until it is complete: its try may last the model's timeoutSeconds.
    The same silence on a streamed request is a hung replica: abandoned after the try idle timeout."""
    for body in ({"model": "long-quiet", "messages": []}, {"model": "long-quiet", "stream": False}):
        status, answer = gateway.get("/v1/chat/completions", JSON, body=json.dumps(body).encode())
        assert (status, answer["backend"]) == (200, "long-quiet-0")
    status, _ = gateway.get("/v1/chat/completions", {**JSON, "x-model": "long-quiet"}, body=b'{"stream": false}')
    assert status == 200
    # content types json_to_metadata compares exactly, or does not parse at all: still a non-streamed generation
    for content_type in ("application/json; charset=UTF-8", "application/json;charset=UTF-8", "text/plain"):
        status, _ = gateway.get("/v1/chat/completions", {**JSON, "content-type": content_type, "x-model": "long-quiet"},
                                body=b'{"messages": []}')
        assert status == 200, content_type
    assert gateway.envoy.stats().get("cluster.long-quiet.upstream_rq_per_try_idle_timeout", 0) == 0
    status, _ = gateway.get("/v1/chat/completions", JSON, body=b'{"model": "long-quiet", "stream": true}')
    assert status == 504  # each of the 3 tries abandoned after TRY_IDLE_S, on the only replica
    assert gateway.envoy.stats()["cluster.long-quiet.upstream_rq_per_try_idle_timeout"] == 3
    # a bodyless GET is no generation: the try idle timeout applies, JSON content type or not
    assert gateway.get("/v1/models", {**JSON, "x-model": "long-quiet"})[0] == 504
    assert gateway.envoy.stats()["cluster.long-quiet.upstream_rq_per_try_idle_timeout"] == 6


# --- slow clients and bodies ---------------------------------------------------------------------------------


def _read_status(sock: socket.socket, deadline: float) -> int | None:
    """The status code of the response on `sock`, or None when it closes or the deadline passes first."""
    data = b""
    while time.monotonic() < deadline and b"\r\n" not in data:
        try:
            chunk = sock.recv(4096)
        except TimeoutError:
            continue
        if not chunk:
            break
        data += chunk
    return int(data.split()[1]) if data.startswith(b"HTTP/1.1 ") else None


def _trickle(port: int, head: bytes, parts: list[bytes], *, gap: float) -> int | None:
    """Send `head`, then one of `parts` every `gap` seconds until the gateway answers; its status code."""
    with socket.create_connection(("127.0.0.1", port), timeout=gap) as sock:
        sock.sendall(head)
        deadline = time.monotonic() + 5 * REQUEST_TIMEOUT_S
        for part in parts:
            status = _read_status(sock, time.monotonic() + gap)
            if status is not None or time.monotonic() > deadline:
                return status
            try:
                sock.sendall(part)
            except OSError:
                return _read_status(sock, deadline)
        return _read_status(sock, deadline)


def test_slow_header_senders_get_408(gateway: Gateway) -> None:
    head = b"GET /v1/models HTTP/1.1\r\nhost: gateway\r\n"
    lines = [f"x-pad-{i}: {i}\r\n".encode() for i in range(40)]  # one line every 0.2 s: 8 s if never cut
    assert _trickle(gateway.port, head, lines, gap=0.2) == 408


def test_slow_body_senders_get_408_and_never_reach_a_model(gateway: Gateway) -> None:
    before = gateway.hits("embed")
    body = b"x" * 40
    auth = gateway.auth("alpha")["authorization"]
    head = (f"POST /v1/embeddings HTTP/1.1\r\nhost: gateway\r\nx-model: embed\r\nauthorization: {auth}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n").encode()
    assert _trickle(gateway.port, head, [body[i:i + 1] for i in range(len(body))], gap=0.2) == 408
    assert gateway.hits("embed") == before  # the body is received in full before a model is called


def test_bodies_past_the_models_limit_get_413(gateway: Gateway) -> None:
    before = gateway.hits("embed")
    status, _ = gateway.get("/v1/embeddings", {"x-model": "embed"}, body=b"x" * (BODY_LIMIT + 1))
    assert status == 413
    padded = json.dumps({"model": "embed", "input": "x" * BODY_LIMIT}).encode()
    assert gateway.get("/v1/embeddings", JSON, body=padded)[0] == 413  # routed by the body
    assert gateway.get("/v1/embeddings", {**JSON, "x-model": "embed"}, body=padded)[0] == 413  # by the header
    assert gateway.hits("embed") == before
    status, body = gateway.get("/v1/embeddings", {"x-model": "embed"}, body=b"x" * BODY_LIMIT)
    assert (status, body["body_bytes"]) == (200, BODY_LIMIT)
    assert gateway.get("/v1/chat/completions", {"x-model": "chat"}, body=b"x" * 2 * BODY_LIMIT)[0] == 200


# --- the process ------------------------------------------------------------------------------------------------


def test_envoy_accepts_the_config_without_deprecation_warnings(gateway: Gateway) -> None:
    warnings = [x for x in gateway.envoy.error_log.read_text().splitlines() if "[warning]" in x]
    assert [w for w in warnings if "deprecat" in w.lower() or "will be ignored" in w] == []


def test_stats_port_serves_prometheus_metrics_and_nothing_else_of_the_admin_interface(gateway: Gateway) -> None:
    gateway.get("/v1/models", {"x-model": "nobody-home"})  # a 404, so the counters below exist and move
    status, body = request(gateway.stats_port, "/stats/prometheus")
    text = body.decode()
    assert status == 200
    assert 'envoy_cluster_upstream_rq_total{envoy_cluster_name="embed"}' in text
    assert 'envoy_cluster_upstream_cx_none_healthy{envoy_cluster_name="embed"}' in text  # the wake-up signal
    assert request(gateway.stats_port, "/ready")[0] == 200
    for admin_only in ("/config_dump", "/clusters", "/quitquitquit", "/stats"):
        assert request(gateway.stats_port, admin_only)[0] == 404, admin_only


def test_the_gateway_is_the_edge_it_appends_the_client_address_and_sets_a_request_id(gateway: Gateway) -> None:
    """Envoy appends the downstream peer's address to x-forwarded-for only with use_remote_address true (Envoy docs,
    HTTP header manipulation, "x-forwarded-for"), and sets x-request-id with generate_request_id (UUID-shaped)."""
    status, body = gateway.get("/v1/models", {"x-model": "embed"})
    assert status == 200
    # the client sent none: the one address is the peer Envoy saw (this sandbox's loopback peers may not read
    # 127.0.0.1); without use_remote_address the header would be absent
    assert ipaddress.ip_address(body["forwarded_for"])
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", body["request_id"])
