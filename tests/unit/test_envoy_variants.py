"""Deadline-aware routing decisions and their budget matchers, without Envoy (the live test runs them)."""

from __future__ import annotations

import copy
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from components.k8s.gateway.envoy import affinity as envoy_affinity
from components.k8s.gateway.envoy import config as envoy_config
from components.k8s.gateway.envoy.config import at_least_regex, decisions, overflow_order, workloads
from components.k8s.gateway.envoy.variants import variant_models
from infra.config import ConfigError, parse
from telemetry.instrument import BUDGET_BAGGAGE_KEY
from tests.artifacts.test_envoy_variants_live import RAW
from tests.support.stacks import prod_without_variants, stack_config


@given(n=st.integers(min_value=0, max_value=10**7), x=st.integers(min_value=0, max_value=10**8),
       zeros=st.integers(min_value=0, max_value=2))
def test_at_least_regex_matches_exactly_the_integers_from_n(n: int, x: int, zeros: int) -> None:
    # Python's re and RE2 agree on this subset (classes, counted repetition, alternation)
    assert bool(re.fullmatch(at_least_regex(n), "0" * zeros + str(x))) == (x >= n)


def test_the_gateway_reads_the_baggage_key_telemetry_sends() -> None:
    assert envoy_config.BUDGET_BAGGAGE_KEY == BUDGET_BAGGAGE_KEY


def _three_variants() -> dict:
    raw = copy.deepcopy(RAW)
    m = {"engine": "vllm", "model": "org/model", "toolCallParser": "none",
         "tenant": "alpha", "pool": "gpu", "workload": "w"}
    raw["models"] = {
        "w-int4": {**m, "slo": {"e2eSeconds": 2}, "variant": {"costPerRequest": 0.001}},
        "w-mid": {**m, "slo": {"e2eSeconds": 3}, "variant": {"costPerRequest": 0.002}},  # pricier and slower
        "w-fp8": {**m, "slo": {"e2eSeconds": 0.25}, "variant": {"costPerRequest": 0.004}},
    }
    raw["gateway"] = {k: v for k, v in raw["gateway"].items() if k != "routing"}
    return raw


def test_a_variant_that_is_pricier_and_slower_is_never_chosen_by_budget() -> None:
    cfg = parse(_three_variants(), stack="t")
    (w,) = workloads(cfg)
    got = [(d.name, d.chosen.name, d.reason) for d in decisions(cfg, w)]
    assert got == [
        ("w.w-int4.fits-budget", "w-int4", "fits-budget"),
        ("w.w-int4.fits-budget.baggage", "w-int4", "fits-budget"),
        ("w.w-fp8.fits-budget", "w-fp8", "fits-budget"),
        ("w.w-fp8.fits-budget.baggage", "w-fp8", "fits-budget"),
        ("w.w-fp8.rescued", "w-fp8", "rescued"),
        ("w.w-fp8.rescued.baggage", "w-fp8", "rescued"),
        ("w.w-int4.default", "w-int4", "default"),
    ]
    fits = decisions(cfg, w)[2].headers
    # 0.25 s plus the default 25% margin: 312.5 ms, rounded up
    assert fits == ({"name": "x-aifactory-budget-ms", "range_match": {"start": 313, "end": 10**12}},)
    # overflow: the chosen one, then the others fastest first
    assert [m.name for m in overflow_order(w, cfg.models["w-int4"])] == ["w-int4", "w-fp8", "w-mid"]
    assert [m.name for m in overflow_order(w, cfg.models["w-fp8"])] == ["w-fp8", "w-int4", "w-mid"]


def test_policy_cheapest_routes_everything_to_the_cheapest() -> None:
    raw = _three_variants()
    raw["gateway"]["routing"] = {"w": {"policy": "cheapest"}}
    cfg = parse(raw, stack="t")
    (w,) = workloads(cfg)
    assert [(d.chosen.name, d.reason, d.headers) for d in decisions(cfg, w)] == [("w-int4", "default", ())]


def test_the_workloads_margin_moves_every_threshold() -> None:
    """marginPercent 10: the cheap variant (2 s) fits from 2200 ms, the fast one (0.25 s) from 275 ms; 0: the SLOs."""
    for margin, cheap, fast in ((10, 2200, 275), (0, 2000, 250)):
        raw = _three_variants()
        raw["gateway"]["routing"] = {"w": {"marginPercent": margin}}
        cfg = parse(raw, stack="t")
        (w,) = workloads(cfg)
        starts = [(d.chosen.name, d.reason, d.headers[0]["range_match"]) for d in decisions(cfg, w)
                  if d.headers and "range_match" in d.headers[0]]
        assert starts == [("w-int4", "fits-budget", {"start": cheap, "end": 10**12}),
                          ("w-fp8", "fits-budget", {"start": fast, "end": 10**12}),
                          ("w-fp8", "rescued", {"start": 0, "end": fast})]
        assert decisions(cfg, w)[1].headers[1]["string_match"]["safe_regex"]["regex"].find(at_least_regex(cheap)) > 0


@pytest.mark.parametrize(("margin", "problem"), [
    (-5, "gateway.routing.w.marginPercent: -5.0 is below the minimum 0"),
    ("wide", "gateway.routing.w.marginPercent: expected a number, got a string 'wide'"),
    (1001, "gateway.routing.w.marginPercent: 1001.0 is above the maximum 1000"),
])
def test_a_bad_margin_names_its_key(margin: object, problem: str) -> None:
    raw = _three_variants()
    raw["gateway"]["routing"] = {"w": {"marginPercent": margin}}
    with pytest.raises(ConfigError) as e:
        parse(raw, stack="t")
    assert problem in str(e.value)


def test_each_variant_is_reached_through_its_overflow_gate() -> None:
    """The aggregate clusters list the variants' gates; a gate is an internal listener whose router forwards to the
    variant's cluster and drops x-envoy-overloaded (which forbids a retry); prod, without variants, has none."""
    cfg = parse(_three_variants(), stack="t")
    boot = envoy_config.bootstrap(cfg)
    clusters = {c["name"]: c for c in boot["static_resources"]["clusters"]}
    assert clusters["w__w-int4"]["cluster_type"]["typed_config"]["clusters"] == [
        "w-int4__gate", "w-fp8__gate", "w-mid__gate", "w-fp8__last__gate", "w-int4__last__gate", "w-mid__last__gate"]
    gate = clusters["w-int4__gate"]
    assert gate["load_assignment"]["endpoints"][0]["lb_endpoints"][0] == {
        "endpoint": {"address": {"envoy_internal_address": {"server_listener_name": "w-int4__gate"}}},
        "metadata": {"filter_metadata": {"aifactory": {"variant": "w-int4"}}}}
    listeners = {lst["name"]: lst for lst in boot["static_resources"]["listeners"]}
    assert sorted(listeners) == [
        "gateway", "stats", "w-fp8__gate", "w-fp8__last__gate", "w-int4__gate", "w-int4__last__gate", "w-mid__gate",
        "w-mid__last__gate"]
    hcm = listeners["w-int4__gate"]["filter_chains"][0]["filters"][0]["typed_config"]
    [route] = hcm["route_config"]["virtual_hosts"][0]["routes"]
    retry = route["route"].pop("retry_policy")
    assert route == {"match": {"prefix": "/"}, "request_body_buffer_limit": 8 * 1024 * 1024,
                     "route": {"cluster": "w-int4", "timeout": "0s",
                               "host_rewrite_literal": "w-int4.alpha.svc.cluster.local",
                               # the variant's replica is picked here: by the session key
                               "hash_policy": envoy_affinity.hash_policy()}}
    # the body kept to send it again (the model's maxRequestBytes); a failed try goes once more to another
    # replica of the variant (the model route's retry_on and previous_hosts), timed by the decision's route
    assert retry == {"retry_on": "connect-failure,refused-stream,reset,retriable-status-codes",
                     "retriable_status_codes": [500, 502, 503], "num_retries": 1,
                     "retry_host_predicate": [{"name": "envoy.retry_host_predicates.previous_hosts", "typed_config": {
                         "@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3."
                                  "PreviousHostsPredicate"}}],
                     "host_selection_retry_max_attempts": envoy_affinity.AFFINITY_HOST_SELECTION_ATTEMPTS}
    assert [f["typed_config"].get("suppress_envoy_headers") for f in hcm["http_filters"]] == [True]
    assert [e["name"] for e in boot["bootstrap_extensions"]] == ["envoy.bootstrap.internal_listener"]
    prod = envoy_config.bootstrap(prod_without_variants())
    assert "bootstrap_extensions" not in prod
    assert [lst["name"] for lst in prod["static_resources"]["listeners"] if "__replica-" not in lst["name"]] == [
        "gateway", "stats"]


def test_a_variants_max_requests_is_its_clusters_breaker() -> None:
    raw = _three_variants()
    raw["models"]["w-int4"]["variant"]["maxRequests"] = 12
    boot = envoy_config.bootstrap(parse(raw, stack="t"))
    limits = {c["name"]: c["circuit_breakers"]["thresholds"][0]["max_requests"]
              for c in boot["static_resources"]["clusters"] if c["name"] in ("w-int4", "w-fp8")}
    assert limits == {"w-int4": 12, "w-fp8": 4096}  # w-fp8: gateway.circuitBreakers.maxRequests' default
    raw["models"]["w-int4"]["variant"]["maxRequests"] = 0
    with pytest.raises(ConfigError) as e:
        parse(raw, stack="t")
    assert "models.w-int4.variant.maxRequests: 0 is below the minimum 1" in str(e.value)


def test_every_try_the_variants_can_take_may_overflow_at_once() -> None:
    """An aggregate cluster counts no requests of its own, so its retry budget is its min_retry_concurrency alone
    (envoy_variants.overflow_retries): the sum of the workload's variants' breakers and their last resorts', on every
    decision's cluster."""
    raw = _three_variants()
    raw["models"]["w-int4"]["variant"]["maxRequests"] = 12
    raw["gateway"]["retries"] = {"budgetPercent": 30}
    boot = envoy_config.bootstrap(parse(raw, stack="t"))
    budgets = {c["name"]: c["circuit_breakers"]["thresholds"][0]["retry_budget"]
               for c in boot["static_resources"]["clusters"] if c["name"].startswith("w__")}
    # 12 + 4096 + 4096 (w-mid, w-fp8: gateway.circuitBreakers.maxRequests' default), and each variant's last resort's
    # breaker (gateway.circuitBreakers.maxRequests): 3 x 4096
    assert budgets == {name: {"budget_percent": {"value": 30.0}, "min_retry_concurrency": 8204 + 3 * 4096}
                       for name in ("w__w-int4", "w__w-fp8")}


@pytest.mark.parametrize(("engines", "decision_codes"), [
    ({"w-int4": "triton", "w-mid": "triton", "w-fp8": "triton"}, [500, 502, 503]),
    ({"w-int4": "triton", "w-mid": "vllm", "w-fp8": "triton"}, [500, 502, 503]),
])
def test_a_variants_gate_retries_its_engines_statuses_and_a_decision_any_variants(
        engines: dict[str, str], decision_codes: list[int]) -> None:
    """A gate retries a try on another replica of its variant on a 500, 502 or 503 whatever its engine (a replica
    answering 500 to everything is a black hole otherwise: issue 44 item 8); a decision's route sends a failed try to
    the next variant on the same."""
    raw = _three_variants()
    for name, engine in engines.items():  # with session affinity the gate retries (gate_listener)
        raw["models"][name].update(engine=engine, sessionAffinity={"enabled": True})
    boot = envoy_config.bootstrap(parse(raw, stack="t"))
    listeners = {lst["name"]: lst for lst in boot["static_resources"]["listeners"]}
    for name in engines:
        hcm = listeners[f"{name}__gate"]["filter_chains"][0]["filters"][0]["typed_config"]
        [route] = hcm["route_config"]["virtual_hosts"][0]["routes"]
        assert route["route"]["retry_policy"]["retriable_status_codes"] == (
            [500, 502, 503]), name
    [vhost] = listeners["gateway"]["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]["virtual_hosts"]
    decision_routes = [r for r in vhost["routes"] if r["name"].startswith("w.")]
    # 7 decisions, by header, path and body, each with its non-streamed twin (and its 413 twin, which answers itself)
    decision_routes = [r for r in decision_routes if "route" in r]
    assert len(decision_routes) == 2 * 3 * 7
    assert {str(r["route"]["retry_policy"]["retriable_status_codes"]) for r in decision_routes} == {
        str(decision_codes)}


def test_the_panic_threshold_is_applied_to_every_model_and_last_resort_never_to_a_variants_own_cluster() -> None:
    """gateway.outlierDetection.panicThresholdPercent (default 1: panic only when no replica passes) is each model
    cluster's and each variant's last resort's healthy_panic_threshold; a variant's own cluster keeps 0 (its tries
    go to the next variant). Before, the key was accepted and not applied."""
    def thresholds(raw: dict[str, object]) -> dict[str, float]:
        boot = envoy_config.bootstrap(parse(raw, stack="t"))
        return {c["name"]: c["common_lb_config"]["healthy_panic_threshold"]["value"]
                for c in boot["static_resources"]["clusters"] if "common_lb_config" in c}

    raw = _three_variants()
    raw["models"]["solo"] = {"engine": "vllm", "model": "org/model", "toolCallParser": "none", "tenant": "alpha",
                             "pool": "gpu"}
    variants = {"w-int4": 0, "w-mid": 0, "w-fp8": 0}
    assert thresholds(raw) == {**variants, "solo": 1, **{f"{v}__last": 1 for v in variants}}
    raw["gateway"]["outlierDetection"] = {"panicThresholdPercent": 50}
    assert thresholds(raw) == {**variants, "solo": 50, **{f"{v}__last": 50 for v in variants}}


def test_prods_variant_routes_reach_every_variant_then_every_last_resort() -> None:
    """prod (issue 44, B1): the assistant's decision tries assistant-fast, assistant-steady, then each one's last
    resort, with a retry per step (3: gateway.retries.attempts is 2); a request naming a variant by its key goes to
    `<variant>__direct` (its gate, then its last resort's: issue 44 m2, a try its breaker refuses is retried on the
    last resort), under the route stat_prefix of the same name, retried on the next step (previous_priorities),
    the gates setting the Host; each last resort is its variant's replicas with no health checks and a model's
    breaker."""
    cfg = stack_config("prod")
    boot = envoy_config.bootstrap(cfg)
    clusters = {c["name"]: c for c in boot["static_resources"]["clusters"]}
    members = {n: c["cluster_type"]["typed_config"]["clusters"] for n, c in clusters.items() if "__" in n
               and "cluster_type" in c and c["cluster_type"]["name"] == "envoy.clusters.aggregate"}
    assert members["assistant__assistant-fast"] == ["assistant-fast__gate", "assistant-steady__gate",
                                                    "assistant-fast__last__gate", "assistant-steady__last__gate"]
    assert members["assistant-fast__direct"] == ["assistant-fast__gate", "assistant-fast__last__gate"]
    [vhost] = boot["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"][
        "route_config"]["virtual_hosts"]
    routes = {r["name"]: r for r in vhost["routes"]}
    assert routes["assistant.assistant-fast.default"]["route"]["retry_policy"]["num_retries"] == 3
    direct = routes["assistant-fast/key-body"]
    assert (direct["stat_prefix"], direct["route"]["cluster"], "host_rewrite_literal" in direct["route"],
            direct["route"]["retry_policy"]["num_retries"],
            direct["route"]["retry_policy"]["retry_priority"]["name"]) == (
        "assistant-fast__direct", "assistant-fast__direct", False, 2, "envoy.retry_priorities.previous_priorities")
    last = clusters["assistant-steady__last"]
    assert "health_checks" not in last and "health_checks" in clusters["assistant-steady"]
    assert last["load_assignment"]["endpoints"] == clusters["assistant-steady"]["load_assignment"]["endpoints"]
    assert last["circuit_breakers"]["thresholds"][0]["max_requests"] == 4096
    # one per variant an aggregate reaches (a variant the fidelity gate holds back has none)
    assert {n for n in clusters if n.endswith("__last")} == {f"{m.name}__last" for m in variant_models(cfg)}
