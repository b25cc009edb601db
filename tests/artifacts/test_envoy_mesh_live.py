"""The gateway's requests and health checks must be routable by the gateway's Istio sidecar (issue #28, blocker 1).

The gateway pod's sidecar routes each request to a model's HTTP port by its Host header alone; a Host that names
none of the model Service's virtual-host domains goes to PassthroughCluster in plaintext, and the model's STRICT
sidecar resets it (tests.support.istio_sidecar models both sides from istio/istio@1.28.3). Here the real Envoy runs
the generated config in front of fake replicas that answer only a Host the gateway's sidecar would route to their
Service (from the gateway's namespace) and reset every other request, health checks included: every request path,
the variants' overflow gates (internal listeners) and every active health check must pass.

Envoy (v1.40) forwards the client's Host unless a route rewrites it (RouteAction.host_rewrite_literal), and an
HTTP health check sends the cluster's name unless HttpHealthCheck.host is set
(envoyproxy/envoy@v1.40.0 api/envoy/config/core/v3/health_check.proto).
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from infra.config import PlatformConfig, parse
from tests.support.envoy import start_gateway
from tests.support.fake_backends import Behaviour, EnvoyProcess, FakeBackend
from tests.support.istio_sidecar import routes_to_service, service_domains, service_fqdn
from tests.support.tokens import DEFAULT_AUDIENCE, Issuer

ISSUER = "https://issuer.test/realms/aifactory"
HEALTH_WAIT_S = 10.0  # bound on waiting for the first health checks (they run every 0.25 s)
_M = {"engine": "vllm", "model": "org/model", "toolCallParser": "none", "tenant": "alpha", "pool": "gpu"}
RAW = {
    "target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "fast"},
    "nodePools": {"gpu": {"instanceType": "dgx-h100"}},
    "tenants": {"alpha": {"gpuQuota": 16, "rateLimit": {"requestsPerSecond": 10000, "burst": 20000}},
                "beta": {"gpuQuota": 4, "namespace": "team-beta", "shareWith": ["alpha"]}},
    "models": {
        "chat": {**_M, "workload": "chat"},
        "chat-batch": {**_M, "workload": "chat", "priority": "batch"},
        "tri": {**_M, "engine": "triton", "tenant": "beta"},
        "plan-cheap": {**_M, "workload": "plan", "slo": {"e2eSeconds": 2}, "variant": {"costPerRequest": 0.001}},
        "plan-fast": {**_M, "workload": "plan", "slo": {"e2eSeconds": 0.5}, "variant": {"costPerRequest": 0.004}},
    },
    "gateway": {
        "auth": {"issuers": [{"issuer": ISSUER, "jwksUri": f"{ISSUER}/certs", "audiences": [DEFAULT_AUDIENCE]}]},
        "healthCheck": {"intervalSeconds": 0.25, "timeoutSeconds": 0.25, "unhealthyThreshold": 2,
                        "healthyThreshold": 1},
        "outlierDetection": {"intervalSeconds": 0.1},
    },
    "observability": {"prices": {"dgx-h100": 30.0}},
}
SATURATED = "plan-cheap"  # answers 503 to every request: the gateway overflows to plan-fast through its gate


def _fqdn(cfg: PlatformConfig, model: str) -> str:
    return service_fqdn(model, cfg.tenant_of(cfg.models[model]).namespace)


def _accepts(cfg: PlatformConfig, model: str) -> partial[bool]:
    """The Hosts the gateway's sidecar routes to the model's headless Service (not to PassthroughCluster)."""
    domains = service_domains(model, cfg.tenant_of(cfg.models[model]).namespace,
                              caller_namespace=cfg.gateway.namespace, headless=True)
    return partial(routes_to_service, domains=domains)


@dataclass
class Mesh:
    cfg: PlatformConfig
    envoy: EnvoyProcess
    backends: dict[str, FakeBackend]
    issuer: Issuer

    def post(self, path: str, headers: dict[str, str]) -> tuple[int, dict[str, object]]:
        c = http.client.HTTPConnection("127.0.0.1", self.envoy.listener_port, timeout=10)
        try:
            body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "stream": False}).encode()
            c.request("POST", path, body=body, headers={**self.issuer.bearer("alpha"), **headers,
                                                        "content-type": "application/json"})
            r = c.getresponse()
            raw = r.read()
            return r.status, json.loads(raw) if raw.startswith(b"{") else {"text": raw.decode()}
        finally:
            c.close()


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    cfg = parse(RAW, stack="mesh")
    workdir: Path = tmp_path_factory.mktemp("envoy-mesh")
    issuer = Issuer(ISSUER)
    with ExitStack() as stack:
        backends = {m: stack.enter_context(FakeBackend(
            m, Behaviour.UNAVAILABLE if m == SATURATED else Behaviour.OK, accepts_host=_accepts(cfg, m)))
            for m in cfg.models}
        envoy = start_gateway(stack, cfg, workdir, jwks=[issuer.jwks],
                              endpoints={m: [b.address] for m, b in backends.items()})
        yield Mesh(cfg, envoy, backends, issuer)


def test_the_sidecar_model_routes_only_the_services_names() -> None:
    """The domain set, as istio 1.28.3's generateVirtualHostDomains builds it for a sidecar in another namespace
    (no bare name) and in the Service's own (bare name too); ports are ignored, unknown names pass through."""
    other = service_domains("chat", "alpha", caller_namespace="aifactory-gateway", headless=True)
    assert {d for d in other if not d.startswith("*.")} == {
        "chat.alpha.svc.cluster.local", "chat.alpha.svc.cluster.local.", "chat.alpha", "chat.alpha.svc"}
    same = service_domains("chat", "alpha", caller_namespace="alpha", headless=False)
    assert same == {"chat.alpha.svc.cluster.local", "chat.alpha.svc.cluster.local.", "chat.alpha",
                    "chat.alpha.svc", "chat"}
    for host in ("chat.alpha.svc.cluster.local", "chat.alpha:8000", "CHAT.alpha.svc", "chat-0.chat.alpha"):
        assert routes_to_service(host, other), host
    # the client's Host as the load balancer gives it, the Envoy cluster name (health checks), a short name
    # from another namespace, another Service
    for host in ("gateway.example.com", "127.0.0.1:8080", "chat", "chat.beta", None):
        assert not routes_to_service(host, other), host


@pytest.mark.parametrize(("model", "path", "headers"), [
    ("chat", "/v1/chat/completions", {"x-model": "chat"}),
    ("chat-batch", "/v1/chat/completions", {"x-model": "chat", "x-priority": "batch"}),
    ("chat", "/models/chat/v1/completions", {}),
    ("tri", "/v1/chat/completions", {"x-model": "tri"}),
    ("plan-fast", "/v1/chat/completions", {"x-model": "plan", "x-aifactory-budget-ms": "700"}),
])
def test_every_model_route_reaches_the_model_through_the_sidecar(mesh: Mesh, model: str, path: str,
                                                                 headers: dict[str, str]) -> None:
    status, body = mesh.post(path, headers)
    assert (status, body.get("backend"), body.get("host")) == (200, model, _fqdn(mesh.cfg, model)), body
    assert mesh.backends[model].refused_hosts == []


def test_an_overflowing_variant_reaches_the_next_variant_by_its_own_name(mesh: Mesh) -> None:
    """The decision picks plan-cheap (no budget: the cheapest), which sheds load; the try goes on through
    plan-fast's gate (an internal listener), which must name plan-fast's Service, not plan-cheap's."""
    status, body = mesh.post("/v1/chat/completions", {"x-model": "plan"})
    assert (status, body.get("backend"), body.get("host")) == (200, "plan-fast", _fqdn(mesh.cfg, "plan-fast"))
    assert mesh.backends["plan-fast"].refused_hosts == []
    assert mesh.backends[SATURATED].refused_hosts == []  # it was reached (and said 503), not reset
    assert mesh.backends[SATURATED].hits >= 1


def test_every_active_health_check_passes_the_sidecar(mesh: Mesh) -> None:
    def checked() -> dict[str, int]:
        s = mesh.envoy.stats()
        return {m: s.get(f"cluster.{m}.health_check.success", 0) for m in mesh.cfg.models}

    deadline = time.monotonic() + HEALTH_WAIT_S
    while min(checked().values()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    stats = mesh.envoy.stats()
    # the checks themselves (the requests' Hosts are the other tests' business) reach the replica
    assert {m: stats.get(f"cluster.{m}.health_check.failure", 0) for m in mesh.cfg.models} == \
        {m: 0 for m in mesh.cfg.models}
    # as the health checker sees them (outlier ejection of the saturated variant aside)
    assert {m: stats.get(f"cluster.{m}.health_check.healthy") for m in mesh.cfg.models} == \
        {m: 1 for m in mesh.cfg.models}
    assert min(checked().values()) >= 2
    assert {m: b.refused_hosts[:1] for m, b in mesh.backends.items()} == {m: [] for m in mesh.backends}
