"""The generated Envoy bootstrap carries what the stack config says (and the kit's documented defaults where the
config says nothing). Expected values are written here from the stack's own YAML or from the test's overrides,
never read back from the builder.

Values are found by walking the bootstrap (clusters by name, the local_ratelimit filter by name, every
route's retry_policy), so they do not depend on where the builder nests them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from components.k8s.gateway.envoy import affinity as affinity
from components.k8s.gateway.envoy import config as ec
from components.k8s.gateway.envoy.variants import variant_models
from tests.support.stacks import stack_config, stack_raw

# stacks/Pulumi.prod.yaml, `aifactory:tenants` (rateLimit as written; `search` has none, so it gets the
# documented default of tenants.X.rateLimit: 50 requests/s, burst max(100, rps)) -> (per second, burst)
PROD_TENANT_BUCKETS = {"assistant": (400, 800), "research": (50, 100), "search": (50, 100), "finance": (20, 40)}
# stacks/Pulumi.prod.yaml, `aifactory:models`: the model backends (one Envoy cluster each)
PROD_MODELS = ["assistant-batch", "assistant-fast", "assistant-steady", "assistant-tools", "deep-research",
               "embed-rerank", "finance-8b", "finance-8b-bf16"]


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def _rate_limit(boot: dict[str, Any]) -> dict[str, Any]:
    [f] = [d for d in _walk(boot) if d.get("name") == "envoy.filters.http.local_ratelimit"]
    return f["typed_config"]


def _retry_policies(boot: dict[str, Any]) -> list[dict[str, Any]]:
    """Route retry policies (route.v3.RetryPolicy has retry_on; the JWKS fetch's core RetryPolicy has not)."""
    return [d["retry_policy"] for d in _walk(boot) if "retry_on" in d.get("retry_policy", {})]


def _clusters(boot: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in boot["static_resources"]["clusters"]}


def _bucket(per_second: int, burst: int) -> dict[str, Any]:
    return {"max_tokens": burst, "tokens_per_fill": per_second, "fill_interval": "1s"}


def test_each_tenant_bucket_is_its_rate_limit_from_the_stack() -> None:
    """One token bucket per tenant with models: tokens_per_fill = requestsPerSecond each second, max_tokens =
    burst."""
    rl = _rate_limit(ec.bootstrap(stack_config("prod")))
    got = {d["entries"][0]["value"]: d["token_bucket"] for d in rl["descriptors"]}
    assert got == {t: _bucket(rps, burst) for t, (rps, burst) in PROD_TENANT_BUCKETS.items()}


def test_unrouted_requests_share_a_default_bucket_of_100_per_second() -> None:
    """Requests that match no model (404s, scanners, typos) are limited by the filter's default bucket:
    100 requests/s per replica (the kit's documented default, components/k8s/gateway/envoy/config.py), refilled every
    second, so a client with a wrong model name is told 404 rather than 429, and a scan cannot exhaust any
    tenant's bucket (always_consume_default_token_bucket false: routed requests spend only their tenant's)."""
    rl = _rate_limit(ec.bootstrap(stack_config("prod")))
    assert rl["token_bucket"] == _bucket(100, 100)
    assert rl["always_consume_default_token_bucket"] is False


def test_retry_policy_reselects_hosts_and_takes_attempts_from_the_stack() -> None:
    """Every model route retries `gateway.retries.attempts` times (here 4, set by the test), each retry
    avoiding the hosts already tried (previous_hosts predicate) with up to 200 host re-selections
    (failures.LEAST_REQUEST_HOST_DRAWS): Envoy's default is one re-selection
    (route.v3.RetryPolicy.host_selection_retry_max_attempts: "If unspecified, this will default to retrying once"),
    after which the host last picked is used even if it just failed; LEAST_REQUEST's four random choices return a
    replica that fails fast (it holds the fewest requests) with probability 15/16 per draw of 2 replicas."""
    cfg = stack_config("prod", gateway={**stack_raw("prod")["gateway"],
                                        "retries": {"attempts": 4, "budgetPercent": 25}})
    policies = _retry_policies(ec.bootstrap(cfg))
    gateway = [lst for lst in ec.bootstrap(cfg)["static_resources"]["listeners"] if lst["name"] == "gateway"]
    # (a variant's overflow gate listener forwards to its cluster without retries: the gateway's route retried)
    routes = [d["route"] for d in _walk(gateway) if isinstance(d.get("route"), dict)
              and d["route"].get("cluster") in {m.name for m in cfg.models.values()}]
    assert routes and all("retry_policy" in r for r in routes)  # every route to a model retries
    for p in policies:  # the gates' own single retry too (components.k8s.gateway.envoy.variants, GATE_RETRIES)
        assert [h["name"] for h in p["retry_host_predicate"]] == ["envoy.retry_host_predicates.previous_hosts"]
    assert all(r["retry_policy"]["num_retries"] == 4 for r in routes)
    # a model with session affinity re-draws up to AFFINITY_HOST_SELECTION_ATTEMPTS times (Maglev's retry draws,
    # components.k8s.gateway.envoy.affinity); the others LEAST_REQUEST_HOST_DRAWS times
    hashed = {m.name for m in cfg.models.values() if m.session_affinity_balance_factor is not None}
    assert hashed and hashed != {m.name for m in cfg.models.values()}
    for r in routes:
        assert r["retry_policy"]["host_selection_retry_max_attempts"] == (
            affinity.AFFINITY_HOST_SELECTION_ATTEMPTS if r["cluster"] in hashed else 200), r["cluster"]


def test_outlier_detection_and_breakers_are_the_stack_gateway_settings() -> None:
    """gateway.outlierDetection / circuitBreakers / retries.budgetPercent land on every model cluster."""
    cfg = stack_config("prod", gateway={
        **stack_raw("prod")["gateway"],
        "retries": {"budgetPercent": 25},
        "outlierDetection": {"consecutive5xx": 4, "intervalSeconds": 5, "baseEjectionSeconds": 60,
                             "maxEjectionPercent": 35},
        "circuitBreakers": {"maxConnections": 1000, "maxPendingRequests": 500, "maxRequests": 900}})
    clusters = _clusters(ec.bootstrap(cfg))
    # and on each variant's last resort (components.k8s.gateway.envoy.replicas.last_resort_cluster)
    assert sorted(n for n, c in clusters.items() if "outlier_detection" in c) == sorted(
        [*PROD_MODELS, *(f"{m.name}__last" for m in variant_models(cfg))])
    for name in PROD_MODELS:
        c = clusters[name]
        # every 5xx and gateway failure counts toward ejection, and a passing health check does not end it (a
        # replica answering 500 while /health passes: envoy_replicas.outlier_detection, issue 44 item 8)
        assert c["outlier_detection"] == {"consecutive_5xx": 4, "enforcing_consecutive_5xx": 100,
                                          "consecutive_gateway_failure": 4,
                                          "enforcing_consecutive_gateway_failure": 100,
                                          "interval": "5s", "base_ejection_time": "60s",
                                          "max_ejection_percent": 35,
                                          "successful_active_health_check_uneject_host": False}
        [t] = c["circuit_breakers"]["thresholds"]
        assert (t["max_connections"], t["max_pending_requests"], t["max_requests"]) == (1000, 500, 900)
        # no check resets a replica's tries any more (envoy_replicas): the model's cluster has the stack's budget
        assert t["retry_budget"]["budget_percent"] == {"value": 25.0}
    overflow = [c for n, c in clusters.items() if "retry_budget" in str(c) and n not in PROD_MODELS]
    assert overflow and {c["circuit_breakers"]["thresholds"][0]["retry_budget"]["budget_percent"]["value"]
                         for c in overflow} == {25.0}
