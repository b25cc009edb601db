"""Hostile or careless input at the real Envoy gateway (issue 31, items 10-13), on 127.0.0.1 with fake models.

Refusals that the request's headers decide are answered before its body is read: each test sends the headers
of a request that declares a large body, sends none of it, and reads the answer (a gateway that waits for the
body would answer nothing, or 408 once its request timeout passes).
Callers present RS256 tokens of a local issuer (tests.support.tokens, a local JWKS).
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from components.k8s.gateway.envoy.config import bootstrap
from infra.config import PlatformConfig, parse
from telemetry.names import ENVOY
from tests.support.envoy import await_replicas, rebind, start_gateway
from tests.support.fake_backends import Behaviour, EnvoyProcess, FakeBackend, free_port, request
from tests.support.tokens import DEFAULT_AUDIENCE, Issuer

ISSUER = "https://issuer.test/realms/aifactory"
BODY_LIMIT = 4096  # the `chat` model's maxRequestBytes (the others keep the default 8 MiB)
LARGE_BODY = 7 * 1024 * 1024  # declared, never sent: under the largest limit, past `chat`'s
MAX_TOKEN_LIFETIME_S = 3600
REQUEST_TIMEOUT_S = 20.0  # the gateway's 408 for a body never sent: far beyond every read below
ANSWER_WAIT_S = 5.0  # how long a test waits for an answer sent before the body (bounded; not a speed claim)
# How long a test waits to see that no answer comes before the body: the gateway's refusals before a body come
# within milliseconds here (the cases above), so a second of silence says it awaits the body.
NO_ANSWER_WAIT_S = 1.0
HC_INTERVAL_S, HC_TIMEOUT_S, HC_UNHEALTHY = 0.5, 0.5, 2  # fake replicas on a busy machine may answer late
POOL_TIMEOUT_S = 8  # the `pool` model's timeoutSeconds: the route timeout a hung try would wait for
POOL_REQUESTS = 60
POOL_REPLICAS = 3
SERIES_PER_MODEL_CLUSTER = 256  # a model cluster's series on /stats/prometheus (Envoy 1.40, the kit's cluster config),
# its answers here all 200: each further status answered adds its code's and its class's series (258 with a 503)

_MODEL = {"engine": "vllm", "model": "org/model", "toolCallParser": "none", "tenant": "alpha", "pool": "gpu"}
RAW = {
    "target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "fast"},
    "nodePools": {"gpu": {"instanceType": "dgx-h100"}},
    "tenants": {"alpha": {"gpuQuota": 32, "rateLimit": {"requestsPerSecond": 10000, "burst": 20000}},
                "gamma": {"gpuQuota": 1}},
    "models": {
        "chat": {**_MODEL, "maxRequestBytes": BODY_LIMIT},
        "gamma-chat": {**_MODEL, "tenant": "gamma"},
        "pool": {**_MODEL, "timeoutSeconds": POOL_TIMEOUT_S, "replicas": {"min": 1, "max": POOL_REPLICAS}},
        # may run 4 replicas, runs 2 here: ordinals 2 and 3 have no pod (no DNS record)
        "spare": {**_MODEL, "replicas": {"min": 1, "max": 4}},
    },
    "gateway": {
        "auth": {"issuers": [{"issuer": ISSUER, "jwksUri": f"{ISSUER}/certs", "audiences": [DEFAULT_AUDIENCE]}],
                 "maxTokenLifetimeSeconds": MAX_TOKEN_LIFETIME_S},
        "healthCheck": {"intervalSeconds": HC_INTERVAL_S, "timeoutSeconds": HC_TIMEOUT_S,
                        "unhealthyThreshold": HC_UNHEALTHY, "healthyThreshold": 1},
        "outlierDetection": {"intervalSeconds": 0.1},
        "requestTimeoutSeconds": REQUEST_TIMEOUT_S,
        "streamIdleTimeoutSeconds": REQUEST_TIMEOUT_S,
    },
    "observability": {"prices": {"dgx-h100": 30.0}, "traceSampleRatio": 0.0},
}
BACKENDS = {"chat": 1, "gamma-chat": 1, "pool": POOL_REPLICAS, "spare": 2}


@dataclass
class Gateway:
    cfg: PlatformConfig
    envoy: EnvoyProcess
    backends: dict[str, list[FakeBackend]]
    issuer: Issuer

    @property
    def port(self) -> int:
        return self.envoy.listener_port

    def auth(self, tenant: str = "alpha", **kwargs: object) -> str:
        return self.issuer.bearer(tenant, **kwargs)["authorization"]

    def hits(self, model: str) -> int:
        return sum(b.hits for b in self.backends[model])


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    cfg = parse(RAW, stack="input")
    issuer = Issuer(ISSUER)
    with ExitStack() as stack:
        backends = {m: [stack.enter_context(FakeBackend(f"{m}-{i}")) for i in range(n)] for m, n in BACKENDS.items()}
        envoy = start_gateway(stack, cfg, tmp_path_factory.mktemp("envoy"), jwks=[issuer.jwks],
                              endpoints={m: [b.address for b in bs] for m, bs in backends.items()})
        yield Gateway(cfg, envoy, backends, issuer)


def _answer_before_body(port: int, head: str, *, wait_s: float = ANSWER_WAIT_S) -> tuple[int | None, bytes]:
    """Send the request line and headers `head` (which declare a body), none of the body, and read the answer:
    (status, body), or (None, b"") when none comes within `wait_s`."""
    with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
        sock.sendall(head.encode() + b"\r\n")
        data = b""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            head_end = data.find(b"\r\n\r\n")
            if head_end >= 0:
                length = next((int(x.split(b":")[1]) for x in data[:head_end].lower().split(b"\r\n")
                               if x.startswith(b"content-length:")), 0)
                if len(data) >= head_end + 4 + length:
                    break
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                break
            data += chunk
    if not data.startswith(b"HTTP/1.1 "):
        return None, b""
    return int(data.split()[1]), data.partition(b"\r\n\r\n")[2]


def _head(method: str, target: str, *, length: int = LARGE_BODY, **headers: str) -> str:
    lines = [f"{method} {target} HTTP/1.1", "host: gateway", f"content-length: {length}",
             "content-type: application/json", *(f"{k.replace('_', '-')}: {v}" for k, v in headers.items())]
    return "".join(f"{x}\r\n" for x in lines)


# --- 10: methods, CONNECT, a token for every request ---------------------------------------------------------


def _connect(*headers: str) -> str:
    """An HTTP/1.1 CONNECT: everything after its headers is its body (Envoy's codec refuses one that declares a
    content-length, 400, or chunked encoding, 501)."""
    return "".join(f"{x}\r\n" for x in ("CONNECT chat:443 HTTP/1.1", "host: chat:443", *headers))


def test_connect_is_refused_at_once_with_or_without_a_token(gateway: Gateway) -> None:
    """A CONNECT has no :path: no path route matches it and jwt_authn's `prefix: /` rule does not apply. Without
    a route the buffer filter held its stream until the stream idle timeout (no answer here); with its
    connect_matcher route the connection manager refuses it before any filter (403 upgrade_failed)."""
    before = {m: gateway.hits(m) for m in BACKENDS}
    for head in (_connect(), _connect(f"authorization: {gateway.auth()}")):
        assert _answer_before_body(gateway.port, head)[0] == 403
    deadline = time.monotonic() + ANSWER_WAIT_S  # both lines flushed (bounded)
    while len(lines := gateway.envoy.access_log_lines('"method":"CONNECT"')) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [(json.loads(x)["status"], json.loads(x)["details"]) for x in lines] == [(403, "upgrade_failed")] * 2
    assert {m: gateway.hits(m) for m in BACKENDS} == before


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS"])
def test_head_and_options_get_405_naming_the_methods_served(gateway: Gateway, method: str) -> None:
    """HEAD and OPTIONS are refused like any method the OpenAI API does not use (docs/gateway.md, "Methods"), and
    every 405 carries `Allow` (RFC 9110 section 15.5.6); HEAD's answer has no content (section 9.3.2)."""
    before = gateway.hits("chat")
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=5)
    try:
        conn.request(method, "/v1/models", headers={"x-model": "chat", "authorization": gateway.auth()})
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    assert (resp.status, resp.getheader("allow")) == (405, "GET, POST")
    assert body == (b"" if method == "HEAD" else b"method not allowed: the gateway serves GET, POST\n")
    assert gateway.hits("chat") == before


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "PROPFIND"])
def test_methods_the_openai_api_does_not_use_get_405_before_their_body(gateway: Gateway, method: str) -> None:
    before = gateway.hits("chat")
    status, body = _answer_before_body(gateway.port, _head(method, "/v1/chat/completions", x_model="chat",
                                                           authorization=gateway.auth()))
    assert (status, body) == (405, b"method not allowed: the gateway serves GET, POST\n")
    # and without a token: 401, whatever the method or path
    assert _answer_before_body(gateway.port, _head(method, "/v1/chat/completions", x_model="chat"))[0] == 401
    assert gateway.hits("chat") == before


@pytest.mark.parametrize("path", ["/", "/admin", "/v1/models", "/stats/prometheus", "/nothing/here?x=1"])
def test_every_path_needs_a_token(gateway: Gateway, path: str) -> None:
    assert _answer_before_body(gateway.port, _head("POST", path))[0] == 401
    assert _answer_before_body(gateway.port, _head("GET", path, length=0))[0] == 401


def test_an_unserved_path_gets_404_before_its_body(gateway: Gateway) -> None:
    status, body = _answer_before_body(gateway.port, _head("POST", "/v2/upload", authorization=gateway.auth()))
    assert status == 404 and body.startswith(b"not served: the gateway routes only /{")


# --- 11: authorization and size from the headers, before the body ------------------------------------------


@pytest.mark.parametrize("target,headers", [("/v1/chat/completions", {"x_model": "gamma-chat"}),
                                            ("/models/gamma-chat/v1/chat/completions", {})])
def test_a_caller_the_model_refuses_gets_403_before_its_body(gateway: Gateway, target: str,
                                                             headers: dict[str, str]) -> None:
    before = gateway.hits("gamma-chat")
    status, body = _answer_before_body(gateway.port, _head("POST", target, authorization=gateway.auth("alpha"),
                                                           **headers))
    assert (status, body) == (403, b"RBAC: access denied")
    # past the model's size limit too: who may call comes first
    status, _ = _answer_before_body(gateway.port, _head("POST", target, length=10 * 1024 * 1024,
                                                        authorization=gateway.auth("alpha"), **headers))
    assert status == 403
    assert gateway.hits("gamma-chat") == before


@pytest.mark.parametrize("target,headers", [("/v1/chat/completions", {"x_model": "chat"}),
                                            ("/models/chat/v1/chat/completions", {})])
def test_a_declared_content_length_past_the_models_limit_gets_413_before_its_body(
        gateway: Gateway, target: str, headers: dict[str, str]) -> None:
    before = gateway.hits("chat")
    for length in (BODY_LIMIT + 1, LARGE_BODY):
        status, body = _answer_before_body(gateway.port, _head("POST", target, length=length,
                                                               authorization=gateway.auth(), **headers))
        assert (status, body) == (413, b"request body larger than 4096 bytes (models.chat.maxRequestBytes)\n")
    assert gateway.hits("chat") == before
    # at the limit, the body is read and the model called
    status, raw = request(gateway.port, target.replace("chat/completions", "embeddings"),
                          {"authorization": gateway.auth(), **{k.replace("_", "-"): v for k, v in headers.items()}},
                          body=b"x" * BODY_LIMIT)
    assert (status, json.loads(raw)["body_bytes"]) == (200, BODY_LIMIT)



def test_a_body_routed_request_past_every_models_limit_gets_413_before_its_body(gateway: Gateway) -> None:
    """OpenAI SDKs name the model only in the body: past the largest limit, no model could take it, so the
    gateway answers from the declared content-length instead of buffering the body first."""
    before = {m: gateway.hits(m) for m in BACKENDS}
    largest = 8 * 1024 * 1024  # the default maxRequestBytes of the other models
    status, body = _answer_before_body(gateway.port, _head("POST", "/v1/chat/completions", length=largest + 1,
                                                           authorization=gateway.auth()))
    assert (status, body) == (413, f"request body larger than {largest} bytes, the most any model here takes "
                                   "(models.<name>.maxRequestBytes)\n".encode())
    # without a token, still 401 first
    status, _ = _answer_before_body(gateway.port, _head("POST", "/v1/chat/completions", length=largest + 1))
    assert status == 401
    # under it, the body is awaited (it could name a model that takes it): no answer before the body
    status, _ = _answer_before_body(gateway.port, _head("POST", "/v1/chat/completions", length=largest,
                                                        authorization=gateway.auth()), wait_s=NO_ANSWER_WAIT_S)
    assert status is None
    assert {m: gateway.hits(m) for m in BACKENDS} == before

# --- 12: tokens, logs, headers -------------------------------------------------------------------------------


def _get(gateway: Gateway, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    return request(gateway.port, path, {"x-model": "chat", **headers})


def test_tokens_without_exp_or_valid_past_the_max_lifetime_get_401(gateway: Gateway) -> None:
    before = gateway.hits("chat")
    for kwargs in ({"expires_in": None}, {"expires_in": MAX_TOKEN_LIFETIME_S + 600}, {"expires_in": 10 * 365 * 86400}):
        status, body = _get(gateway, "/v1/models", {"authorization": gateway.auth(**kwargs)})
        assert status == 401, (kwargs, body)
    assert gateway.hits("chat") == before
    assert _get(gateway, "/v1/models", {"authorization": gateway.auth(expires_in=MAX_TOKEN_LIFETIME_S - 600)}
                )[0] == 200


def test_query_strings_stay_out_of_the_access_log(gateway: Gateway) -> None:
    secret = gateway.auth().removeprefix("Bearer ")
    status, raw = _get(gateway, f"/v1/models?access_token={secret}&x=1", {"authorization": gateway.auth()})
    assert status == 200
    request_id = json.loads(raw)["request_id"]
    [line] = gateway.envoy.access_log_lines(request_id)
    assert json.loads(line)["path"] == "/v1/models"
    assert secret not in gateway.envoy.access_log.read_text()


def test_headers_with_underscores_are_refused(gateway: Gateway) -> None:
    before = gateway.hits("chat")
    status, _ = request(gateway.port, "/v1/models", {"x_model": "chat", "authorization": gateway.auth()})
    assert status == 400
    assert gateway.hits("chat") == before


def test_client_sent_x_envoy_headers_never_reach_a_model_or_steer_the_gateway(gateway: Gateway) -> None:
    status, raw = _get(gateway, "/v1/models", {"authorization": gateway.auth(), "x-envoy-anything": "1",
                                               "x-envoy-retry-on": "5xx", "x-envoy-max-retries": "9",
                                               "x-envoy-upstream-rq-timeout-ms": "1",
                                               "x-envoy-force-trace": "true"})
    assert status == 200
    names = json.loads(raw)["header_names"]
    # only those the router itself adds after the filters: the route's timeout, the Host and path it rewrote
    assert [n for n in names if n.startswith("x-envoy-")] == [
        "x-envoy-expected-rq-timeout-ms", "x-envoy-original-host", "x-envoy-original-path"]


# What Envoy 1.40 offers to end a try in flight (docs/gateway.md, "Requests on a replica that hangs"), on the kit's own
# bootstrap with one change. It does not ship.

_T = "type.googleapis.com/envoy."
_CODEC = {"name": "envoy.filters.http.upstream_codec",
          "typed_config": {"@type": _T + "extensions.filters.http.upstream_codec.v3.UpstreamCodec"}}
_END_TRY_LUA = """
function envoy_on_request(handle)
  if handle:headers():get("x-end-try") ~= nil then
    handle:respond({[":status"] = "503"}, "ended by an upstream filter")
  end
end
"""


def _pool_config(gateway: Gateway, change: Callable[[dict[str, Any]], None]) -> tuple[dict[str, Any], int, int]:
    """The gateway's bootstrap rebound to the same fake replicas, with `change` applied; (config, admin, listener)."""
    admin, listener = free_port(), free_port()
    endpoints = {m: [b.address for b in bs] for m, bs in gateway.backends.items()}
    config = rebind(bootstrap(gateway.cfg), listener_port=listener, stats_port=free_port(), admin_port=admin,
                    endpoints={**endpoints, "otel_collector": [("127.0.0.1", free_port())]},
                    jwks=[gateway.issuer.jwks])
    change(config)
    return config, admin, listener


def test_a_local_reply_from_an_upstream_filter_reaches_the_client_unretried(
        gateway: Gateway, tmp_path: Path) -> None:
    """Candidate (a): an upstream HTTP filter (ext_proc and Lua are both accepted in a cluster's
    HttpProtocolOptions.http_filters at 1.40) that ends a try. Its local reply goes to the downstream filter
    manager, not through the router (envoyproxy/envoy@v1.40.0 source/common/router/upstream_request.cc,
    UpstreamFilterManager::sendLocalReply), so a 503 the route would retry reaches the client at once. ext_proc's
    ImmediateResponse takes the same path (ext_proc.cc, sendImmediateResponse)."""
    def lua_upstream(config: dict[str, Any]) -> None:
        pool = next(c for c in config["static_resources"]["clusters"] if c["name"] == "pool")
        pool["typed_extension_protocol_options"] = {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": _T + "extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http_protocol_options": {}},
            "http_filters": [{"name": "envoy.filters.http.lua", "typed_config": {
                "@type": _T + "extensions.filters.http.lua.v3.Lua",
                "default_source_code": {"inline_string": _END_TRY_LUA}}}, _CODEC]}}

    config, admin, listener = _pool_config(gateway, lua_upstream)
    auth = {"authorization": gateway.auth(), "content-type": "application/json", "x-model": "pool"}
    body = json.dumps({"model": "pool", "messages": []}).encode()
    with EnvoyProcess(config, tmp_path, admin_port=admin, listener_port=listener) as envoy:
        await_replicas(envoy, {"pool": POOL_REPLICAS})
        assert request(listener, "/v1/chat/completions", auth, body=body)[0] == 200
        hits, before = gateway.hits("pool"), envoy.stats()
        assert request(listener, "/v1/chat/completions", {**auth, "x-end-try": "1"}, body=body) == (
            503, b"ended by an upstream filter")
        after = envoy.stats()
    assert gateway.hits("pool") == hits

    # retry_on has retriable-status-codes (503) and 3 retries: none was made (and the try reached no replica)
    assert after.get("cluster.pool.upstream_rq_retry", 0) == before.get("cluster.pool.upstream_rq_retry", 0)


# --- 13: a replica that fails its checks with requests in flight -------------------------------------------------
# The tests marked `alone` (tests/conftest.py) read the replicas' checks (HC_TIMEOUT_S): on a machine busy with other
# tests a fake replica that answers late fails them, and a healthy one is taken out.


def _await_healthy(envoy: EnvoyProcess, cluster: str, n: int) -> None:
    """Until `cluster` has `n` healthy hosts (bounded)."""
    deadline = time.monotonic() + 10 * HC_INTERVAL_S
    while envoy.stats().get(f"cluster.{cluster}.membership_healthy", 0) < n:
        assert time.monotonic() < deadline, f"{cluster}: Envoy never saw {n} healthy hosts"
        time.sleep(HC_INTERVAL_S / 2)


@pytest.mark.alone
def test_failing_checks_steer_new_requests_away_and_leave_the_ones_in_flight_to_finish(gateway: Gateway) -> None:
    """Checks steer, they never kill (issue 44 item 5): one replica of three answers neither its checks nor its
    requests for a while (a saturated engine whose /health runs on the same event loop: vllm-project/vllm#38157),
    then answers them all. Requests sent once its checks have failed never reach it; the non-streamed requests it
    already held are not reset and re-run on the others, they finish with its answers. Before (a hop per replica
    whose failed checks closed its connections), every one of them was reset and retried on the peers."""
    replicas = gateway.backends["pool"]
    auth = {"authorization": gateway.auth(), "content-type": "application/json", "x-model": "pool"}
    body = json.dumps({"model": "pool", "messages": []}).encode()
    _await_healthy(gateway.envoy, "pool", POOL_REPLICAS)
    assert Counter(request(gateway.port, "/v1/chat/completions", auth, body=body)[0] for _ in range(6)) == {200: 6}
    before = gateway.envoy.stats()
    replicas[1].behaviour = Behaviour.STALL

    def one(_: int) -> int:
        return request(gateway.port, "/v1/chat/completions", auth, body=body, timeout=2 * POOL_TIMEOUT_S)[0]

    with ThreadPoolExecutor(POOL_REQUESTS) as pool:
        held = [pool.submit(one, i) for i in range(POOL_REQUESTS)]
        deadline = time.monotonic() + 20 * HC_INTERVAL_S
        while gateway.envoy.stats().get("cluster.pool.membership_healthy", 0) > POOL_REPLICAS - 1:
            assert time.monotonic() < deadline, "pool: the stalled replica was never taken out"
            time.sleep(HC_INTERVAL_S / 4)
        on_it = replicas[1].hits
        later = Counter(pool.map(one, range(POOL_REQUESTS)))
        assert replicas[1].hits == on_it  # nothing new reached it once out
        replicas[1].behaviour = Behaviour.OK  # it answers again: what it held is answered
        replicas[1].release_held()
        statuses = Counter(f.result() for f in held)
    stats = gateway.envoy.stats()
    assert later == {200: POOL_REQUESTS} and statuses == {200: POOL_REQUESTS}
    # none of its requests was reset by the failed checks and re-run elsewhere
    assert stats.get("cluster.pool.upstream_cx_destroy_remote_with_active_rq", 0) == before.get(
        "cluster.pool.upstream_cx_destroy_remote_with_active_rq", 0)
    assert stats.get("cluster.pool.upstream_rq_retry", 0) == before.get("cluster.pool.upstream_rq_retry", 0)


@pytest.mark.alone
def test_a_replica_answering_503_is_retried_around_and_ejected_while_it_passes_its_checks(
        gateway: Gateway, tmp_path: Path) -> None:
    """A replica that answers 503 is retried around (previous_hosts) and, after consecutive gateway failures,
    ejected by outlier detection, though it passes its checks. On a gateway of its own (the ejection would outlast
    this test)."""
    config, admin, listener = _pool_config(gateway, lambda _: None)
    replicas = gateway.backends["pool"]
    auth = {"authorization": gateway.auth(), "content-type": "application/json", "x-model": "pool"}
    body = json.dumps({"model": "pool", "messages": []}).encode()
    ejections = "cluster.pool.outlier_detection.ejections_enforced_consecutive_gateway_failure"
    with EnvoyProcess(config, tmp_path, admin_port=admin, listener_port=listener) as envoy:
        await_replicas(envoy, {"pool": POOL_REPLICAS})
        hits = replicas[0].hits
        replicas[0].behaviour = Behaviour.UNAVAILABLE
        statuses = Counter[int]()
        try:  # until replica 0 is ejected (bounded): each 500 is retried on another replica
            while statuses.total() < POOL_REQUESTS and envoy.stats().get(ejections, 0) == 0:
                statuses[request(listener, "/v1/chat/completions", auth, body=body)[0]] += 1
        finally:
            replicas[0].behaviour = Behaviour.OK
        stats = envoy.stats()
    assert statuses == {200: statuses.total()} and stats[ejections] == 1
    assert stats["cluster.pool.upstream_rq_retry_success"] >= 1
    # replica 0 answered its health checks all along
    assert replicas[0].hits > hits
    assert stats["cluster.pool.health_check.success"] >= 1
    assert stats.get("cluster.pool.health_check.failure", 0) == 0


@pytest.mark.alone
def test_a_model_whose_replicas_all_fail_their_checks_still_sends_them_its_requests_and_recovers(
        gateway: Gateway) -> None:
    """`spare` may run 4 replicas (replicas.max) and runs 2: every request is served by those two. When both fail
    their health checks (here: each holds every request and check, as a saturated engine queues its progress check
    past the check's timeout), the model does not answer 503 no healthy upstream: with no replica passing, Envoy
    balances over all of them (panic mode below 1% passing: components.k8s.gateway.envoy.replicas.
    PANIC_WHEN_NONE_PASSES; envoyproxy/envoy@v1.40.0 source/extensions/load_balancing_policies/common/
    load_balancer_impl.cc, `isHostSetInPanic`), and the request is served once its replica answers; when they pass
    again, the model is out of panic. Before (threshold 0) the model answered 503 at once to every request."""
    replicas = gateway.backends["spare"]
    auth = {"authorization": gateway.auth(), "content-type": "application/json", "x-model": "spare"}
    body = json.dumps({"model": "spare", "messages": []}).encode()
    _await_healthy(gateway.envoy, "spare", 2)
    before = [b.hits for b in replicas]
    assert Counter(request(gateway.port, "/v1/chat/completions", auth, body=body)[0] for _ in range(40)) == {200: 40}
    assert all(b.hits > n for b, n in zip(replicas, before, strict=True))  # both served
    assert gateway.envoy.stats().get("cluster.spare.upstream_rq_retry", 0) == 0
    assert gateway.envoy.stats()["cluster.spare.membership_total"] == 2  # its hosts: the running replicas
    for b in replicas:
        b.behaviour = Behaviour.STALL
    try:
        deadline = time.monotonic() + 20 * HC_INTERVAL_S  # both out (bounded)
        while gateway.envoy.stats().get("cluster.spare.membership_healthy", 0) > 0:
            assert time.monotonic() < deadline, "spare: its stalled replicas were never taken out"
            time.sleep(HC_INTERVAL_S / 2)
        panic = gateway.envoy.stats().get("cluster.spare.lb_healthy_panic", 0)
        hits = sum(b.hits for b in replicas)
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(request, gateway.port, "/v1/chat/completions", auth, body=body,
                                 timeout=2 * POOL_TIMEOUT_S)
            deadline = time.monotonic() + ANSWER_WAIT_S
            while sum(b.hits for b in replicas) == hits:  # sent to a replica failing its checks
                assert time.monotonic() < deadline, "spare: the request reached no replica"
                time.sleep(0.02)
            for b in replicas:
                b.release_held()
            assert answer.result()[0] == 200
        assert gateway.envoy.stats()["cluster.spare.lb_healthy_panic"] == panic + 1
    finally:
        for b in replicas:
            b.behaviour = Behaviour.OK
            b.release_held()
    _await_healthy(gateway.envoy, "spare", 2)
    panic = gateway.envoy.stats()["cluster.spare.lb_healthy_panic"]
    assert request(gateway.port, "/v1/chat/completions", auth, body=body)[0] == 200
    assert gateway.envoy.stats()["cluster.spare.lb_healthy_panic"] == panic  # passing again: no panic


EJECTION_S = 120  # far longer than the test: an ejection cannot end by itself here


def test_a_models_last_ready_replica_is_never_ejected(gateway: Gateway, tmp_path: Path) -> None:
    """`spare` may run 4 replicas and runs 2; both reset every request. maxEjectionPercent (67) is a share of the
    cluster's hosts (Envoy v1.40 outlier_detection_impl.cc, DetectorImpl::ejectHost), which are now the running
    replicas, so one is ejected and the other stays to serve once it answers again (issue 44 item 7). Before, the
    cluster held 4 hosts, absent ordinals included, and both were ejected: the model answered 503. On a gateway of
    its own."""
    def long_ejection(config: dict[str, Any]) -> None:
        spare = next(c for c in config["static_resources"]["clusters"] if c["name"] == "spare")
        spare["outlier_detection"]["base_ejection_time"] = f"{EJECTION_S}s"

    config, admin, listener = _pool_config(gateway, long_ejection)
    replicas = gateway.backends["spare"]
    auth = {"authorization": gateway.auth(), "content-type": "application/json", "x-model": "spare"}
    body = json.dumps({"model": "spare", "messages": []}).encode()
    ejected = "cluster.spare.outlier_detection.ejections_active"
    with EnvoyProcess(config, tmp_path, admin_port=admin, listener_port=listener) as envoy:
        await_replicas(envoy, {"spare": 2})
        statuses = Counter[int]()
        try:
            for b in replicas:
                b.behaviour = Behaviour.RESET
            for _ in range(POOL_REQUESTS):  # each meets both replicas (retries): one is ejected, never both
                statuses[request(listener, "/v1/chat/completions", auth, body=body)[0]] += 1
            stats = envoy.stats()
            assert stats[ejected] == 1, statuses
            assert stats["cluster.spare.outlier_detection.ejections_overflow"] >= 1  # the second was held back
        finally:
            for b in replicas:
                b.behaviour = Behaviour.OK
        assert request(listener, "/v1/chat/completions", auth, body=body)[0] == 200


# --- series per model -------------------------------------------------------------------------------------------


def _prometheus(envoy: EnvoyProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{envoy.admin_port}/stats/prometheus", timeout=5) as r:
        return str(r.read().decode())


def test_a_model_adds_its_clusters_series_and_no_per_replica_ones(gateway: Gateway) -> None:
    """Series on /stats/prometheus per model: its cluster's (the dashboards and rules read them: telemetry.names.ENVOY),
    none per replica ordinal (issue 44 item 12: a hop per ordinal added about 260 series per gateway pod, prod ~9.9k
    before its stats_matcher). The count per model is stated in docs/observability.md."""
    text = _prometheus(gateway.envoy)
    series = [line for line in text.splitlines() if not line.startswith("#")]
    assert not [line for line in series if "__replica" in line or "@aifactory" in line]
    spare = {line.rsplit(" ", 1)[0] for line in series if 'envoy_cluster_name="spare"' in line}
    assert {line.split("{")[0] for line in spare} >= {ENVOY.RQ_TOTAL, ENVOY.RQ_RETRY, ENVOY.EJECTIONS,
                                                       ENVOY.EJECTIONS_ENFORCED, ENVOY.NO_HEALTHY}
    assert len(spare) == SERIES_PER_MODEL_CLUSTER, len(spare)
