"""Which 500 is whose, in the rendered config (components.k8s.gateway.envoy.failures; live behaviour:
tests/artifacts/test_envoy_failures_live.py)."""

from __future__ import annotations

from typing import Any

import pytest

from components.k8s.gateway.envoy import config as ec
from components.k8s.gateway.envoy import failures
from tests.support.stacks import stack_config

T = "type.googleapis.com/envoy."


def _model_clusters(cfg: Any) -> list[dict[str, Any]]:
    return [c for c in ec.bootstrap(cfg)["static_resources"]["clusters"] if c["name"] in cfg.models]


SKIP_UNLESS_500 = {"matcher_list": {"matchers": [{
    "predicate": {"not_matcher": {"single_predicate": {
        "input": {"name": "status", "typed_config": {"@type": T + "type.matcher.v3.HttpResponseHeaderMatchInput",
                                                     "header_name": ":status"}},
        "value_match": {"exact": "500"}}}},
    "on_match": {"action": {"name": "skip", "typed_config": {
        "@type": T + "extensions.filters.common.matcher.action.v3.SkipFilter"}}}}]}}


def test_every_model_cluster_passes_each_500_through_the_replica_name_and_the_request_fault_filter() -> None:
    """HTTP/1.1 to the replicas as before; a try's 500 goes through the upstream codec, the header mutation that names
    the replica, then the Lua filter, before the router retries on it or counts it (Envoy runs upstream filters'
    encode side last to first). Both are skipped for any other status: a 200 meets neither."""
    cfg = stack_config("prod")
    clusters = _model_clusters(cfg)
    assert {c["name"] for c in clusters} == set(cfg.models)
    for c in clusters:
        options = c["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
        assert options["explicit_http_config"] == {"http_protocol_options": {}}, c["name"]
        lua, replica, codec = options["http_filters"]
        assert lua == {"name": "aifactory.request_fault", "typed_config": {
            "@type": T + "extensions.common.matching.v3.ExtensionWithMatcher",
            "extension_config": {"name": "envoy.filters.http.lua", "typed_config": {
                "@type": T + "extensions.filters.http.lua.v3.Lua",
                "default_source_code": {"inline_string": failures.fault_script(cfg.models[c["name"]].engine)}}},
            "xds_matcher": SKIP_UNLESS_500}}
        assert replica == {"name": "aifactory.replica_address", "typed_config": {
            "@type": T + "extensions.common.matching.v3.ExtensionWithMatcher",
            "extension_config": {"name": "envoy.filters.http.header_mutation", "typed_config": {
                "@type": T + "extensions.filters.http.header_mutation.v3.HeaderMutation",
                "mutations": {"response_mutations": [{"append": {
                    "header": {"key": "x-aifactory-replica", "value": "%UPSTREAM_REMOTE_ADDRESS%"},
                    "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}}]}}},
            "xds_matcher": SKIP_UNLESS_500}}
        assert codec == {"name": "envoy.filters.http.upstream_codec", "typed_config": {
            "@type": T + "extensions.filters.http.upstream_codec.v3.UpstreamCodec"}}


@pytest.mark.parametrize("engine", ["vllm", "sglang", "triton"])
def test_the_filter_reads_a_body_only_where_the_engine_can_say_whose_fault(engine: str) -> None:
    """Only SGLang's 500 bodies can say the request is at fault (its multimodal input error), so only its script
    reads a body; every script drops the replica's name, ends a request failed by two replicas with the internal
    452 (not retried, not counted; the gateway's own filter answers the client 500) and one its engine says is at
    fault with 422."""
    script = failures.fault_script(engine)
    assert script.splitlines()[:4] == [
        "function envoy_on_response(handle)",
        "  local headers = handle:headers()",
        '  local replica = headers:get("x-aifactory-replica") or ""',
        '  headers:remove("x-aifactory-replica")',
    ]
    assert ("handle:body()" in script) is (engine == "sglang")
    assert ('"Multimodal input processing failed on the TP entry rank: "' in script) is (engine == "sglang")
    assert '  local status = "422"\n' in script
    assert 'elseif first ~= replica then\n    why = "failed-on-two-replicas"\n    status = "452"\n' in script
    assert 'headers:replace(":status", status)' in script
    assert ('why = "engine-says-request"' in script) is (engine == "sglang")


def test_the_gateway_answers_500_for_a_request_two_replicas_failed_and_meets_nothing_else() -> None:
    """The gateway's own filter, last before the router (so that every filter before it, the access log and the
    downstream stats see the client's status): a Lua filter that makes the internal 452 a 500, skipped unless the
    answer is 452 with x-aifactory-fault: failed-on-two-replicas (no engine sends 452: failures' docstring)."""
    cfg = stack_config("prod")
    hcm = ec.gateway_listener(cfg)["filter_chains"][0]["filters"][0]["typed_config"]
    *_, meter, last, router = hcm["http_filters"]
    assert (meter["name"], router["name"]) == ("aifactory.budgets_meter", "envoy.filters.http.router")

    def header_is(name: str, value: str) -> dict[str, Any]:
        return {"single_predicate": {
            "input": {"name": name.lstrip(":"), "typed_config": {
                "@type": T + "type.matcher.v3.HttpResponseHeaderMatchInput", "header_name": name}},
            "value_match": {"exact": value}}}

    assert last == {"name": "aifactory.failed_on_two_replicas", "typed_config": {
        "@type": T + "extensions.common.matching.v3.ExtensionWithMatcher",
        "extension_config": {"name": "envoy.filters.http.lua", "typed_config": {
            "@type": T + "extensions.filters.http.lua.v3.Lua",
            "default_source_code": {"inline_string": 'function envoy_on_response(handle)\n'
                                                     '  handle:headers():replace(":status", "500")\nend\n'}}},
        "xds_matcher": {"matcher_list": {"matchers": [{
            "predicate": {"not_matcher": {"and_matcher": {"predicate": [
                header_is(":status", "452"), header_is("x-aifactory-fault", "failed-on-two-replicas")]}}},
            "on_match": {"action": {"name": "skip", "typed_config": {
                "@type": T + "extensions.filters.common.matcher.action.v3.SkipFilter"}}}}]}}}}
    assert (failures.FAILED_TWICE_UPSTREAM_STATUS, failures.FAILED_TWICE_CLIENT_STATUS) == (452, 500)


def test_only_sglang_says_in_a_500_that_the_request_is_at_fault() -> None:
    from components.k8s.engines import ENGINES

    assert {name: e.request_fault_markers for name, e in ENGINES.items()} == {
        "vllm": (), "triton": (), "sglang": ("Multimodal input processing failed on the TP entry rank: ",)}


def test_least_request_models_draw_four_random_replicas_and_retry_draws_200_times() -> None:
    """A model without session affinity: least request of 4 random choices, so a retry's re-draws can leave a
    replica that fails fast (a full scan returned it on every draw); 200 re-draws while previous_hosts rejects."""
    cfg = stack_config("prod")
    plain = {m.name for m in cfg.models.values() if m.session_affinity_balance_factor is None}
    assert plain
    for c in _model_clusters(cfg):
        if c["name"] in plain:
            assert c["load_balancing_policy"] == {"policies": [{"typed_extension_config": {
                "name": "envoy.load_balancing_policies.least_request",
                "typed_config": {"@type": T + "extensions.load_balancing_policies.least_request.v3.LeastRequest",
                                 "selection_method": "N_CHOICES", "choice_count": 4}}}]}
    draws = {r["route"]["cluster"]: r["route"]["retry_policy"]["host_selection_retry_max_attempts"]
             for r in ec.routes(cfg) if "route" in r and r["route"].get("cluster") in plain}
    assert draws and set(draws.values()) == {200}


@pytest.mark.parametrize("status, retried", [(500, True), (422, False)])
def test_openais_sdk_retries_the_clients_500_and_not_the_engines_422(status: int, retried: bool) -> None:
    """What the gateway's statuses make OpenAI's Python SDK do (openai==2.54.0 openai/_base_client.py
    `_should_retry`): it retries a 500 (a request two replicas failed: the client's own retries stay bounded by its
    max_retries) and not a 422 (the engine said the request is at fault)."""
    import httpx
    from openai._base_client import SyncAPIClient

    client = SyncAPIClient(version="test", base_url="http://127.0.0.1:1", _strict_response_validation=False)
    response = httpx.Response(status, request=httpx.Request("POST", "http://127.0.0.1:1/v1/chat/completions"))
    assert client._should_retry(response) is retried
