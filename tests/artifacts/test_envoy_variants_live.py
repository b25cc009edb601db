"""Deadline-aware routing between a workload's variants, run by the real Envoy on 127.0.0.1 (#15).

Each workload has a cheap, slow variant (expected latency 2 s, slo.e2eSeconds) and a fast, pricier one
(0.5 s). The budget arrives as x-aifactory-budget-ms or as the W3C baggage member aifactory.budget_ms that
telemetry's headers() sends. Expected decisions follow the issue's rule, worked by hand from the thresholds:
each SLO plus the default 25% margin (gateway.routing.<workload>.marginPercent), 2500 ms and 625 ms: cheapest
variant that fits, else the fastest; no budget: the workload's policy.
"""

from __future__ import annotations

import copy
import http.client
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from infra.config import parse
from telemetry.instrument import BUDGET_BAGGAGE_KEY
from tests.support.envoy import start_gateway
from tests.support.fake_backends import Behaviour, EnvoyProcess, FakeBackend, free_port
from tests.support.tokens import DEFAULT_AUDIENCE, Issuer

ISSUER = "https://issuer.test/realms/aifactory"
_M = {"engine": "vllm", "model": "org/model", "toolCallParser": "none", "tenant": "alpha", "pool": "gpu"}


def _variants(workload: str) -> dict[str, dict[str, object]]:
    return {
        f"{workload}-cheap": {**_M, "workload": workload, "slo": {"e2eSeconds": 2},
                              "variant": {"costPerRequest": 0.001}},
        f"{workload}-fast": {**_M, "workload": workload, "slo": {"e2eSeconds": 0.5},
                             "variant": {"costPerRequest": 0.004}},
    }


RAW = {
    "target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "fast"},
    "nodePools": {"gpu": {"instanceType": "dgx-h100"}},
    "tenants": {"alpha": {"gpuQuota": 32, "rateLimit": {"requestsPerSecond": 10000, "burst": 20000}}},
    "models": {
        **_variants("plan"), **_variants("quick"), **_variants("sat"), **_variants("down"),
        "plan-batch": {**_M, "workload": "plan", "priority": "batch"},
        "plain": _M,
    },
    "gateway": {
        "auth": {"issuers": [{"issuer": ISSUER, "jwksUri": f"{ISSUER}/certs", "audiences": [DEFAULT_AUDIENCE]}]},
        "healthCheck": {"intervalSeconds": 0.25, "timeoutSeconds": 0.25, "unhealthyThreshold": 2,
                        "healthyThreshold": 1},
        "outlierDetection": {"intervalSeconds": 0.1},
        "routing": {"quick": {"policy": "fastest"}},
    },
    "observability": {"prices": {"dgx-h100": 30.0}},
}
SATURATED = "sat-cheap"  # sheds load: every request gets 503 (a full engine queue)
DOWN = "down-cheap"  # nothing listens: connects fail, health checks fail


@dataclass
class Answer:
    status: int
    backend: str
    route: str | None  # x-aifactory-route: the decision
    variant: str | None  # x-aifactory-variant: the variant that served


def answer(port: int, path: str, headers: dict[str, str], body: bytes, *, timeout: float = 10) -> Answer:
    """POST to the gateway on `port`; the fake backend that answered (or Envoy's own body) and the variant headers."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", path, body=body, headers={"content-type": "application/json", **headers})
        resp = c.getresponse()
        raw = resp.read()
        backend = json.loads(raw)["backend"] if raw.startswith(b"{") else raw.decode()
        return Answer(resp.status, backend, resp.getheader("x-aifactory-route"), resp.getheader("x-aifactory-variant"))
    finally:
        c.close()


@dataclass
class Gateway:
    envoy: EnvoyProcess
    issuer: Issuer

    def ask(self, workload: str, headers: dict[str, str] | None = None, *, path: str = "/v1/chat/completions",
            body: bytes | None = None) -> Answer:
        h = {**self.issuer.bearer("alpha"), **({"x-model": workload} if body is None else {}), **(headers or {})}
        return answer(self.envoy.listener_port, path, h, body or b"{}")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    cfg = parse(copy.deepcopy(RAW), stack="live")
    workdir: Path = tmp_path_factory.mktemp("envoy-variants")
    issuer = Issuer(ISSUER)
    with ExitStack() as stack:
        endpoints: dict[str, list[tuple[str, int]]] = {}
        for name in cfg.models:
            if name == DOWN:
                endpoints[name] = [("127.0.0.1", free_port())]  # nothing listens there
                continue
            behaviour = Behaviour.UNAVAILABLE if name == SATURATED else Behaviour.OK
            endpoints[name] = [stack.enter_context(FakeBackend(f"{name}-0", behaviour)).address]
        yield Gateway(start_gateway(stack, cfg, workdir, endpoints=endpoints, jwks=[issuer.jwks], down=[DOWN]),
                      issuer)


def _decision(variant: str, reason: str) -> str:
    return f"{variant}; reason={reason}"


@pytest.mark.parametrize(("budget", "variant", "reason"), [
    ("60000", "plan-cheap", "fits-budget"),
    ("2500", "plan-cheap", "fits-budget"),  # exactly the cheap variant's threshold (2 s + 25%): it fits
    ("2499", "plan-fast", "fits-budget"),  # too tight for the cheap one
    ("2000", "plan-fast", "fits-budget"),  # the cheap one's SLO alone, without the margin: too tight
    ("625", "plan-fast", "fits-budget"),
    ("624", "plan-fast", "rescued"),  # nothing fits: the fastest
    ("0", "plan-fast", "rescued"),
])
def test_budget_header_picks_the_cheapest_variant_that_fits(gateway: Gateway, budget: str, variant: str,
                                                              reason: str) -> None:
    a = gateway.ask("plan", {"x-aifactory-budget-ms": budget})
    assert (a.status, a.backend, a.route, a.variant) == (200, f"{variant}-0", _decision(variant, reason), variant)


@pytest.mark.parametrize(("baggage", "variant", "reason"), [
    (f"{BUDGET_BAGGAGE_KEY}=2500,aifactory.deadline_ms=1795000000000", "plan-cheap", "fits-budget"),
    (f"tenant=a, {BUDGET_BAGGAGE_KEY} = 1200 ;prop=1", "plan-fast", "fits-budget"),
    (f"aifactory.deadline_ms=1795000000000,{BUDGET_BAGGAGE_KEY}=120", "plan-fast", "rescued"),
    ("aifactory.deadline_ms=1795000000000", "plan-cheap", "default"),  # no budget member
    (f"x{BUDGET_BAGGAGE_KEY}=120", "plan-cheap", "default"),  # another key
])
def test_budget_in_baggage_as_telemetry_sends_it(gateway: Gateway, baggage: str, variant: str, reason: str) -> None:
    a = gateway.ask("plan", {"baggage": baggage})
    assert (a.status, a.backend, a.route) == (200, f"{variant}-0", _decision(variant, reason))


def test_the_budget_header_wins_over_baggage(gateway: Gateway) -> None:
    a = gateway.ask("plan", {"x-aifactory-budget-ms": "100", "baggage": f"{BUDGET_BAGGAGE_KEY}=9000"})
    assert (a.backend, a.route) == ("plan-fast-0", _decision("plan-fast", "rescued"))


def test_no_budget_takes_the_workloads_policy(gateway: Gateway) -> None:
    a = gateway.ask("plan")  # cost-within-deadline without a budget: the cheapest
    assert (a.backend, a.route) == ("plan-cheap-0", _decision("plan-cheap", "default"))
    a = gateway.ask("plan", {"x-aifactory-budget-ms": "soon"})  # not a number of ms: no budget
    assert (a.backend, a.route) == ("plan-cheap-0", _decision("plan-cheap", "default"))
    for headers in ({}, {"x-aifactory-budget-ms": "60000"}):  # policy fastest ignores the budget
        a = gateway.ask("quick", headers)
        assert (a.backend, a.route) == ("quick-fast-0", _decision("quick-fast", "default"))


def test_path_and_body_routes_decide_the_same_way(gateway: Gateway) -> None:
    a = gateway.ask("plan", {"x-aifactory-budget-ms": "900", "x-model": ""}, path="/models/plan/v1/chat/completions")
    assert (a.backend, a.route) == ("plan-fast-0", _decision("plan-fast", "fits-budget"))
    body = json.dumps({"model": "plan", "messages": []}).encode()
    a = gateway.ask("plan", {"x-aifactory-budget-ms": "9000"}, body=body)
    assert (a.backend, a.route) == ("plan-cheap-0", _decision("plan-cheap", "fits-budget"))


def test_batch_priority_still_goes_to_the_batch_model(gateway: Gateway) -> None:
    a = gateway.ask("plan", {"x-priority": "batch", "x-aifactory-budget-ms": "100"})
    assert (a.status, a.backend, a.route) == (200, "plan-batch-0", None)


def test_a_workload_without_variants_shows_no_decision(gateway: Gateway) -> None:
    a = gateway.ask("plain", {"x-aifactory-budget-ms": "100"})
    assert (a.status, a.backend, a.route, a.variant) == (200, "plain-0", None, None)


def test_a_saturated_variant_overflows_to_the_next(gateway: Gateway) -> None:
    """sat-cheap answers 503 (its queue is full): the try is retried on the next variant, not failed; the
    decision's route counts the overflow as a retry, the fast variant's cluster the request it served."""
    retries = "vhost.models.route.sat__sat-cheap__fits-budget.upstream_rq_retry"
    served = "cluster.sat-fast.upstream_rq_total"  # per-code stats go to the route's (aggregate) cluster
    before = gateway.envoy.stats()
    for _ in range(3):
        a = gateway.ask("sat", {"x-aifactory-budget-ms": "60000"})
        assert (a.status, a.backend, a.route, a.variant) == (
            200, "sat-fast-0", _decision("sat-cheap", "fits-budget"), "sat-fast")
    after = gateway.envoy.stats()
    assert (after[retries] - before.get(retries, 0), after[served] - before.get(served, 0)) == (3, 3)


def _wait_unhealthy(envoy: EnvoyProcess, cluster: str) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if envoy.stats().get(f"cluster.{cluster}.membership_healthy") == 0:
            return
        time.sleep(0.05)
    raise AssertionError(f"{cluster} still has healthy hosts")


def test_a_variant_that_is_down_leaves_the_other_to_serve(gateway: Gateway) -> None:
    _wait_unhealthy(gateway.envoy, DOWN)
    for _ in range(3):
        a = gateway.ask("down", {"x-aifactory-budget-ms": "60000"})
        assert (a.status, a.backend, a.route, a.variant) == (
            200, "down-fast-0", _decision("down-cheap", "fits-budget"), "down-fast")


def test_decisions_are_counted_per_route_stat_prefix(gateway: Gateway) -> None:
    before = gateway.envoy.stats()
    key = "vhost.models.route.plan__plan-fast__rescued.upstream_rq_completed"
    for _ in range(2):
        gateway.ask("plan", {"x-aifactory-budget-ms": "10"})
    gateway.ask("plan", {"baggage": f"{BUDGET_BAGGAGE_KEY}=10"})
    assert gateway.envoy.stats()[key] - before.get(key, 0) == 3


def test_the_gateway_pods_drain_hook_reads_its_gauge_through_the_kits_stats_matcher(gateway: Gateway) -> None:
    """The bootstrap leaves the gates' stats out (`stats_config`, `http.gate_` among them): the preStop's gauge,
    http.gateway.downstream_rq_active, must stay readable, or the hook would wait every pod's whole bound. The
    hook as the kit renders it (components.k8s.gateway.drain), its timings short, ends drained on this gateway."""
    import subprocess

    from components.k8s.gateway.drain import prestop
    from components.k8s.gateway.envoy.config import GATEWAY_STAT_PREFIX

    command = prestop(stat_prefix=GATEWAY_STAT_PREFIX, accept_seconds=0.1, close_seconds=0.1, bound_seconds=5,
                      poll_seconds=0.1, admin_port=gateway.envoy.admin_port, log="/nonexistent/drain.log")
    done = subprocess.run(command["exec"]["command"], capture_output=True, text=True, timeout=15)
    assert "http.gateway.downstream_rq_active" in gateway.envoy.stats()
    assert done.stdout.startswith("aifactory gateway-drain: drained: no request in flight"), done.stdout


# --- a variant whose circuit breaker is tripped ---------------------------------------------------------------
# One request in flight to busy-cheap (its variant.maxRequests 1; busy-fast keeps gateway.circuitBreakers'
# default): while busy-cheap holds one (its backend answers after HOLD_S), Envoy's breaker refuses a second try.
# Envoy never retries that refusal itself (RetryPolicyImpl::wouldRetryFromReset returns false for
# StreamResetReason::Overflow, and wouldRetryFromHeaders for a response with x-envoy-overloaded: envoyproxy/envoy
# source/common/router/retry_policy_impl.cc), so the gateway reaches each variant through its overflow gate (see
# components/k8s/gateway/envoy/config.py): the breaker's refusal comes back to the route as a plain 503, which the route
# retries on the next variant.
HOLD_S = 2.0
BUSY = _variants("busy")


@pytest.fixture(scope="module")
def busy_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, FakeBackend]]:
    raw = copy.deepcopy(RAW)
    raw["models"] = copy.deepcopy(BUSY)
    raw["models"]["busy-cheap"]["variant"]["maxRequests"] = 1
    raw["gateway"] = {**raw["gateway"], "routing": {}}
    cfg = parse(raw, stack="live")
    issuer = Issuer(ISSUER)
    with ExitStack() as stack:
        cheap = stack.enter_context(FakeBackend("busy-cheap-0", Behaviour.SLOW, delay=HOLD_S))
        fast = stack.enter_context(FakeBackend("busy-fast-0"))
        envoy = start_gateway(stack, cfg, tmp_path_factory.mktemp("envoy-busy"), jwks=[issuer.jwks],
                              endpoints={"busy-cheap": [cheap.address], "busy-fast": [fast.address]})
        yield Gateway(envoy, issuer), cheap


def test_a_variant_whose_breaker_is_tripped_overflows_to_the_next(busy_gateway: tuple[Gateway, FakeBackend]) -> None:
    gateway, cheap = busy_gateway
    before = gateway.envoy.stats()
    with ThreadPoolExecutor(max_workers=1) as pool:
        held = pool.submit(gateway.ask, "busy", {"x-aifactory-budget-ms": "60000"})
        deadline = time.monotonic() + 5
        while cheap.hits < 1:  # the first request holds busy-cheap's one allowed request
            assert time.monotonic() < deadline, "the first request never reached busy-cheap"
            time.sleep(0.01)
        a = gateway.ask("busy", {"x-aifactory-budget-ms": "60000"})
        assert (a.status, a.backend, a.route, a.variant) == (
            200, "busy-fast-0", _decision("busy-cheap", "fits-budget"), "busy-fast")
        first = held.result(timeout=HOLD_S + 5)
    assert (first.status, first.backend, first.variant) == (200, "busy-cheap-0", "busy-cheap")
    after = gateway.envoy.stats()
    # the breaker's refusal (Envoy 1.40 counts a max_requests refusal in upstream_rq_active_overflow), the retry on
    # the decision's route, and busy-cheap's cluster counting only the try it served
    keys = ("cluster.busy-cheap.upstream_rq_active_overflow",
            "vhost.models.route.busy__busy-cheap__fits-budget.upstream_rq_retry",
            "cluster.busy-cheap.upstream_rq_total", "cluster.busy-fast.upstream_rq_total")
    assert [after[k] - before.get(k, 0) for k in keys] == [1, 1, 1, 1]
