"""The generated gateway config, run by the real Envoy on 127.0.0.1 in front of fake model servers."""

from __future__ import annotations

import http.client
import json
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.k8s.envoy_config import bootstrap, rebind
from infra.config import PlatformConfig, parse
from tests.support.fake_backends import Behaviour, EnvoyProcess, FakeBackend, free_port, request

TENANT_RPS, TENANT_BURST = 1, 5
SLOW_TIMEOUT_S = 0.5
POOL_REQUESTS = 2000
CLIENTS = 8

_MODEL = {"engine": "vllm", "model": "org/model", "tenant": "alpha", "pool": "gpu"}
RAW = {
    "target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "fast"},
    "nodePools": {"gpu": {"instanceType": "dgx-h100"}},
    "tenants": {"alpha": {"gpuQuota": 8, "rateLimit": {"requestsPerSecond": 10000, "burst": 20000}},
                "capped": {"gpuQuota": 2, "rateLimit": {"requestsPerSecond": TENANT_RPS, "burst": TENANT_BURST}}},
    "models": {
        "chat-fast": {**_MODEL, "workload": "chat", "priority": "interactive"},
        "chat-batch": {**_MODEL, "workload": "chat", "priority": "batch"},
        "embed": _MODEL,
        "flaky-503": _MODEL,
        "flaky-reset": _MODEL,
        "slow": {**_MODEL, "timeoutSeconds": SLOW_TIMEOUT_S},
        "limited": {**_MODEL, "tenant": "capped"},
        "limited-2": {**_MODEL, "tenant": "capped"},
    },
    "observability": {"prices": {"dgx-h100": 30.0}, "traceSampleRatio": 1.0},
}
BACKENDS = {
    "chat-fast": [Behaviour.OK],
    "chat-batch": [Behaviour.OK],
    "embed": [Behaviour.OK],
    "flaky-503": [Behaviour.OK, Behaviour.UNAVAILABLE, Behaviour.OK],
    "flaky-reset": [Behaviour.OK, Behaviour.RESET, Behaviour.OK],
    "slow": [Behaviour.SLOW],
    "limited": [Behaviour.OK],
    "limited-2": [Behaviour.OK],
}


@dataclass
class Gateway:
    cfg: PlatformConfig
    envoy: EnvoyProcess
    backends: dict[str, list[FakeBackend]]
    stats_port: int

    @property
    def port(self) -> int:
        return self.envoy.listener_port

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict]:
        status, body = request(self.port, path, headers)
        return status, json.loads(body) if body.startswith(b"{") else {"text": body.decode()}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    cfg = parse(RAW, stack="live")
    workdir: Path = tmp_path_factory.mktemp("envoy")
    with ExitStack() as stack:
        backends = {m: [stack.enter_context(FakeBackend(f"{m}-{i}", b)) for i, b in enumerate(bs)]
                    for m, bs in BACKENDS.items()}
        collector = ("127.0.0.1", free_port())  # nothing listens: spans are dropped, requests unaffected
        endpoints = {m: [b.address for b in bs] for m, bs in backends.items()} | {"otel_collector": [collector]}
        admin, listener, stats = free_port(), free_port(), free_port()
        config = rebind(bootstrap(cfg), listener_port=listener, stats_port=stats, admin_port=admin,
                        endpoints=endpoints)
        envoy = stack.enter_context(EnvoyProcess(config, workdir, admin_port=admin, listener_port=listener))
        yield Gateway(cfg, envoy, backends, stats)


def test_model_header_routes_to_the_workloads_interactive_model(gateway: Gateway) -> None:
    status, body = gateway.get("/v1/models", {"x-model": "chat"})
    assert (status, body["backend"], body["path"]) == (200, "chat-fast-0", "/v1/models")
    assert len(body["request_id"]) == 36  # Envoy's generated UUID reaches the model server


def test_priority_batch_routes_to_the_batch_model(gateway: Gateway) -> None:
    status, body = gateway.get("/v1/chat/completions", {"x-model": "chat", "x-priority": "batch"})
    assert (status, body["backend"]) == (200, "chat-batch-0")
    status, body = gateway.get("/v1/chat/completions", {"x-model": "chat", "x-priority": "interactive"})
    assert (status, body["backend"]) == (200, "chat-fast-0")


def test_path_prefix_routes_and_is_rewritten(gateway: Gateway) -> None:
    status, body = gateway.get("/models/embed/v1/embeddings")
    assert (status, body["backend"], body["path"]) == (200, "embed-0", "/v1/embeddings")
    status, body = gateway.get("/models/chat/v1/completions", {"x-priority": "batch"})
    assert (status, body["backend"], body["path"]) == (200, "chat-batch-0", "/v1/completions")


def test_unknown_model_gets_404_naming_the_models(gateway: Gateway) -> None:
    status, body = gateway.get("/v1/models", {"x-model": "nope"})
    assert status == 404
    assert body["text"] == ("unknown model: send header x-model or path /models/<model>/ with one of: "
                            "chat, embed, flaky-503, flaky-reset, limited, limited-2, slow\n")


def _hammer(port: int, model: str, n: int) -> Counter[int]:
    def worker(count: int) -> Counter[int]:
        codes: Counter[int] = Counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            for _ in range(count):
                try:
                    status, _ = request(port, "/v1/completions", {"x-model": model}, conn=conn)
                except (OSError, http.client.HTTPException):
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                    status = 0
                codes[status] += 1
        finally:
            conn.close()
        return codes

    with ThreadPoolExecutor(CLIENTS) as pool:
        return sum(pool.map(worker, [n // CLIENTS] * CLIENTS), Counter())


@pytest.mark.parametrize("model", ["flaky-503", "flaky-reset"])
def test_bad_replica_is_retried_around_and_ejected(gateway: Gateway, model: str) -> None:
    bad = BACKENDS[model].index(next(b for b in BACKENDS[model] if b is not Behaviour.OK))
    codes = _hammer(gateway.port, model, POOL_REQUESTS)
    assert sum(codes.values()) == POOL_REQUESTS
    assert codes[200] >= 0.999 * POOL_REQUESTS, codes
    stats = gateway.envoy.stats()
    assert stats[f"cluster.{model}.outlier_detection.ejections_active"] == 1
    assert stats[f"cluster.{model}.outlier_detection.ejections_enforced_consecutive_5xx"] == 1
    bad_hits = gateway.backends[model][bad].hits
    good_hits = sum(b.hits for i, b in enumerate(gateway.backends[model]) if i != bad)
    assert bad_hits < 50  # ejected after a handful of failures
    # every failure on the bad replica was retried (or refused by the retry budget), on another replica
    assert stats[f"cluster.{model}.upstream_rq_retry"] + stats.get(f"cluster.{model}.upstream_rq_retry_overflow", 0) \
        == bad_hits
    assert good_hits == codes[200]  # the healthy replicas served every success


def test_tenant_past_its_rate_gets_429_across_its_models(gateway: Gateway) -> None:
    models = ["limited", "limited-2"] * (3 * TENANT_BURST // 2 + 1)  # one bucket for both of the tenant's models
    statuses = [gateway.get("/v1/models", {"x-model": m})[0] for m in models]
    assert statuses[:TENANT_BURST] == [200] * TENANT_BURST  # the burst is served
    assert statuses.count(429) >= TENANT_BURST  # 15 requests in far less than 5 s cannot all refill
    assert gateway.envoy.stats()["tenant_rate_limit.http_local_rate_limit.rate_limited"] >= TENANT_BURST
    # other tenants are not affected
    assert gateway.get("/v1/models", {"x-model": "embed"})[0] == 200


def test_slow_backend_times_out_with_504(gateway: Gateway) -> None:
    status, body = gateway.get("/v1/completions", {"x-model": "slow"})
    assert (status, body["text"]) == (504, "upstream request timeout")
    assert gateway.envoy.stats()["cluster.slow.upstream_rq_timeout"] == 1


def test_access_log_is_json_with_request_id_and_upstream_timing(gateway: Gateway) -> None:
    status, body = gateway.get("/v1/models", {"x-model": "embed"})
    lines = [json.loads(x) for x in gateway.envoy.access_log_lines(body["request_id"])]
    assert len(lines) == 1
    entry = lines[0]
    assert (entry["model"], entry["route"], entry["status"], entry["upstream_cluster"], entry["flags"]) == \
        ("embed", "embed", 200, "embed", "-")
    assert entry["upstream_host"] == f"127.0.0.1:{gateway.backends['embed'][0].port}"
    assert isinstance(entry["duration_ms"], int) and entry["upstream_service_time_ms"].isdigit()
    assert len(entry["trace_id"]) == 32  # traced (sample ratio 1.0)


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
