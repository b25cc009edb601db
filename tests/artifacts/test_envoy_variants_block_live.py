"""The shipped prod stack's gateway, run by the real Envoy on 127.0.0.1, outside the capacity block's window: the
`assistant` workload's block variant (`assistant-fast`, pool h100-block) has no replica at all, as when the block's
pool has no nodes (its StatefulSet's pods Pending, its headless Service without addresses: the model's cluster
resolves to no host). Interactive requests to `assistant` overflow to the on-demand variant
(`assistant-steady`, pool h200) and are served, one at a time and many at once; batch requests still go to
`assistant-batch`.

Only what a loopback run needs is changed (tests/support/envoy.py: listeners on 127.0.0.1, static endpoints for the
models' Services, a local JWKS) and, for a short run, the gateway's health checks (every 0.25 s).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass

import pytest

from tests.artifacts.test_envoy_variants_live import Answer, answer
from tests.support.envoy import start_gateway
from tests.support.fake_backends import Behaviour, EnvoyProcess, FakeBackend
from tests.support.stacks import stack_config, stack_raw
from tests.support.tokens import Issuer

BLOCK, ON_DEMAND, BATCH = "assistant-fast", "assistant-steady", "assistant-batch"
STEADY_REPLICAS = 2
# More requests at once than the overflow cluster's min_retry_concurrency (components/k8s/gateway/envoy/base.py
# DEFAULT_MIN_RETRY_CONCURRENCY, 16): every one of them is a retry on the next variant, all in flight together.
CONCURRENT = 48
HOLD_S = 1.0  # each on-demand replica holds a request this long, so that the CONCURRENT requests overlap


@dataclass
class Gateway:
    envoy: EnvoyProcess
    issuer: Issuer
    audience: str

    def ask(self, headers: dict[str, str] | None = None) -> Answer:
        h = {"x-model": "assistant", **self.issuer.bearer("assistant", audience=self.audience), **(headers or {})}
        return answer(self.envoy.listener_port, "/v1/chat/completions", h, b"{}", timeout=HOLD_S + 10)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = stack_raw("prod")["gateway"]
    cfg = stack_config("prod", gateway={**gw, "healthCheck": {
        "intervalSeconds": 0.25, "timeoutSeconds": 0.25, "unhealthyThreshold": 2, "healthyThreshold": 1}})
    (auth,) = cfg.gateway.auth.issuers
    issuer = Issuer(auth.issuer)
    with ExitStack() as stack:
        steady = [stack.enter_context(FakeBackend(f"{ON_DEMAND}-{i}", Behaviour.SLOW, delay=HOLD_S)).address
                  for i in range(STEADY_REPLICAS)]
        batch = stack.enter_context(FakeBackend(f"{BATCH}-0")).address
        # every other model has no replica either: only the assistant's on-demand and batch models run
        endpoints = {**{m: [] for m in cfg.models}, ON_DEMAND: steady, BATCH: [batch]}
        envoy = start_gateway(stack, cfg, tmp_path_factory.mktemp("envoy-block"), endpoints=endpoints,
                              jwks=[issuer.jwks])
        yield Gateway(envoy, issuer, auth.audiences[0])


def test_the_block_variant_has_no_host_that_could_serve(gateway: Gateway) -> None:
    """assistant-fast's cluster has no host: its Service publishes no address (no pod is ready)."""
    stats = gateway.envoy.stats()
    assert (stats[f"cluster.{BLOCK}.membership_total"], stats[f"cluster.{BLOCK}.membership_healthy"]) == (0, 0)


def test_an_interactive_request_overflows_to_the_on_demand_variant(gateway: Gateway) -> None:
    """The decision still names the block's variant (policy fastest: the lowest slo.e2eSeconds); the try on it finds
    no healthy host (503 behind its gate), and the decision's route retries it on assistant-steady, which serves."""
    retries = f"vhost.models.route.assistant__{BLOCK}__default.upstream_rq_retry"
    before = gateway.envoy.stats()
    a = gateway.ask()
    assert (a.status, a.backend.rpartition("-")[0], a.route, a.variant) == (
        200, ON_DEMAND, f"{BLOCK}; reason=default", ON_DEMAND)
    after = gateway.envoy.stats()
    assert (after[retries] - before.get(retries, 0),
            after[f"cluster.{ON_DEMAND}.upstream_rq_total"] - before.get(f"cluster.{ON_DEMAND}.upstream_rq_total", 0),
            after.get(f"cluster.{BLOCK}.upstream_rq_total", 0) - before.get(f"cluster.{BLOCK}.upstream_rq_total", 0)
            ) == (1, 1, 0)


def test_many_interactive_requests_at_once_all_overflow_and_are_served(gateway: Gateway) -> None:
    """Outside the window every interactive request is an overflow, so the retries in flight are all the requests in
    flight: none may be refused by the overflow cluster's retry budget (a refused retry is a 503, flag UO)."""
    overflow = f"cluster.assistant__{BLOCK}.upstream_rq_retry_overflow"
    before = gateway.envoy.stats()
    with ThreadPoolExecutor(max_workers=CONCURRENT) as pool:
        answers = list(pool.map(lambda _: gateway.ask(), range(CONCURRENT)))
    assert sorted({(a.status, a.variant) for a in answers}) == [(200, ON_DEMAND)], \
        sorted((a.status, a.backend) for a in answers if a.status != 200)[:5]
    assert {a.backend for a in answers} == {f"{ON_DEMAND}-{i}" for i in range(STEADY_REPLICAS)}
    assert gateway.envoy.stats().get(overflow, 0) - before.get(overflow, 0) == 0


def test_batch_requests_still_go_to_the_batch_model(gateway: Gateway) -> None:
    a = gateway.ask({"x-priority": "batch"})
    assert (a.status, a.backend, a.route, a.variant) == (200, f"{BATCH}-0", None, None)
