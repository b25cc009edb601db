"""Gateway: Envoy routes, clusters, rate limits and tracing from the config; the gateway's objects."""

from __future__ import annotations

import hashlib
import math

import pulumi
import pytest

from components.k8s import otel_config
from components.k8s.defaults import GATEWAY_DETECTION_SECONDS
from components.k8s.gateway import component as gw
from components.k8s.gateway.envoy import config as ec
from components.k8s.gateway.envoy import replicas
from infra.component_args import gateway_args
from infra.config import ConfigError, PlatformConfig, parse
from infra.synth import read_stack_config, run_program, stack_file
from tests.support.envoy import rebind
from tests.support.stacks import prod_without_variants, stack_config, stack_raw

stack = stack_config


def test_workloads_pair_interactive_and_batch_models() -> None:
    ws = {w.name: (w.default.name, w.batch.name if w.batch else None) for w in ec.workloads(prod_without_variants())}
    assert ws == {"assistant": ("assistant-fast", "assistant-batch"), "assistant-tools": ("assistant-tools", None),
                  "deep-research": ("deep-research", None), "embed-rerank": ("embed-rerank", None),
                  "finance-8b": ("finance-8b", None)}


def test_route_table_is_header_then_path_then_body_then_404s() -> None:
    routes = ec.routes(prod_without_variants())
    names = [r["name"] for r in routes]
    header = ["assistant.batch", "assistant", "assistant-tools", "deep-research", "embed-rerank", "finance-8b"]
    body = ["assistant.batch/body", "assistant/body", "assistant-tools/body", "deep-research/body", "embed-rerank/body",
            "finance-8b/body", "assistant-batch/key-body", "assistant-fast/key-body"]  # the last two: a model's own key
    # first the methods the API does not use (tests/artifacts/test_envoy_input_live.py); each model route comes
    # after its 413 and non-streamed twins (see below)
    # before the body routes, a 413 from the headers for a body no model takes (its model is not known yet)
    twins = [[x for n in names_ for x in (f"{n}/too-large", f"{n}/unstreamed", n)]
             for names_ in ((*header, *(f"{h}/path" for h in header)), body)]
    assert names == ["gateway:method-not-allowed", "gateway:connect-not-allowed", *twins[0], "gateway:too-large",
                     *twins[1], "gateway:unknown-model", "gateway:not-served"]
    by_name = {r["name"]: r for r in routes}
    assert [by_name[n]["route"]["cluster"] for n in header] == [
        "assistant-batch", "assistant-fast", "assistant-tools", "deep-research", "embed-rerank", "finance-8b"]
    # assistant-tools is SGLang: its OpenAI paths (components.k8s.engines.sglang), /v1/models/{model} included
    assert by_name["assistant-tools/path"]["match"] == {"safe_regex": {
        "regex": r"^/models/(?i:assistant\-tools)/(?:v1/chat/completions|v1/completions|v1/models|v1/models/[^/]+)$"}}
    # header routes: any model name case, on the engine's OpenAI paths, with or without a /models/<x> prefix
    assert by_name["assistant.batch"]["match"] == {
        "safe_regex": {"regex": "^(?:/models/[^/]+)?/(?:v1/chat/completions|v1/completions|v1/embeddings|v1/models)$"},
        "headers": [{"name": "x-model", "string_match": {"exact": "assistant", "ignore_case": True}},
                    {"name": "x-priority", "string_match": {"exact": "batch", "ignore_case": True}}]}
    # assistant-fast is Triton: its OpenAI front end also serves /v1/models/{model_name}
    assert by_name["assistant/path"]["match"] == {"safe_regex": {
        "regex": "^/models/(?i:assistant)/(?:v1/chat/completions|v1/completions|v1/embeddings|v1/models|"
                 "v1/models/[^/]+)$"}}
    assert by_name["assistant/path"]["route"]["regex_rewrite"] == {"pattern": {"regex": "^/models/[^/]+/"},
                                                                   "substitution": "/"}
    # a JSON body that does not ask to stream: the try may stay silent for the whole timeoutSeconds
    unstreamed = by_name["deep-research/path/unstreamed"]
    assert unstreamed["match"] == {**by_name["deep-research/path"]["match"], "dynamic_metadata": [
        {"filter": "aifactory", "path": [{"key": "stream"}], "value": {"bool_match": True}, "invert": True}],
        "headers": [{"name": ":method", "string_match": {"exact": "POST"}}]}
    assert unstreamed["route"]["retry_policy"]["per_try_idle_timeout"] == "900s"
    assert by_name["deep-research/path"]["route"]["retry_policy"]["per_try_idle_timeout"] == "60s"
    assert {k: v for k, v in unstreamed["route"].items() if k != "retry_policy"} == \
        {k: v for k, v in by_name["deep-research/path"]["route"].items() if k != "retry_policy"}
    assert by_name["finance-8b/body"]["match"] == {
        "safe_regex": {"regex": "^/(?:v1/chat/completions|v1/completions|v1/embeddings|v1/models)$"},
        "dynamic_metadata": [{"filter": "aifactory", "path": [{"key": "model"}],
                              "value": {"string_match": {"exact": "finance-8b"}}}]}
    assert "regex_rewrite" not in by_name["finance-8b/body"]["route"]
    assert by_name["finance-8b/body/too-large"]["match"]["headers"] == [
        {"name": "content-length", "invert_match": True, "range_match": {"start": 0, "end": 8 * 1024 * 1024 + 1}}]
    assert by_name["finance-8b/body/too-large"]["direct_response"]["status"] == 413
    assert [by_name[f"gateway:{n}"]["direct_response"]["status"] for n in ("unknown-model", "not-served")] == \
        [404, 404]
    assert by_name["gateway:not-served"]["match"] == {"prefix": "/"}


def test_every_model_route_gives_its_callers_and_body_limit() -> None:
    by_name = {r["name"]: r for r in ec.routes(prod_without_variants())}
    # search shares its models with assistant (stacks/Pulumi.prod.yaml)
    rbac = by_name["embed-rerank"]["typed_per_filter_config"]["envoy.filters.http.rbac"]
    assert rbac["rbac"]["rules"] == {"action": "ALLOW", "policies": {"callers": {
        "permissions": [{"any": True}],
        "principals": [{"header": {"name": "x-aifactory-tenant", "string_match": {"exact": "assistant"}}},
                       {"header": {"name": "x-aifactory-tenant", "string_match": {"exact": "search"}}}]}}}
    finance = by_name["finance-8b/path"]["typed_per_filter_config"]
    assert finance["envoy.filters.http.rbac"]["rbac"]["rules"]["policies"]["callers"]["principals"] == [
        {"header": {"name": "x-aifactory-tenant", "string_match": {"exact": "finance"}}}]
    assert finance["aifactory.body_limit"]["buffer"] == {"max_request_bytes": 8388608}
    assert by_name["finance-8b"]["request_body_buffer_limit"] == 8388608


def test_a_500_is_retried_on_another_replica_for_every_engine() -> None:
    """A replica that answers 500 to every request while its /health passes is a black hole unless its 500s are
    retried elsewhere (issue 44 item 8: 28-46% served on prod's config before). vLLM answers 500 to every request in
    flight when its engine dies (vllm-project/vllm@v0.33.0 vllm/entrypoints/serve/exception_handling/
    error_response.py); Triton's OpenAI frontend and SGLang answer 500 to an exception a request raises
    (triton-inference-server/server@r26.07 python/openai/openai_frontend/frontend/fastapi/routers/chat.py; SGLang
    0.5.23 srt/entrypoints/openai/serving_base.py), a request's own or a broken replica's: another replica tells.
    502 and 503 (the way to the replica) too. Every route of a model, and its twins, carries them."""
    cfg = prod_without_variants()
    engines = {"assistant": "triton", "assistant-tools": "sglang", "deep-research": "vllm", "assistant.batch": "vllm"}
    assert [cfg.models[m].engine for m in ("assistant-fast", "assistant-tools", "deep-research", "assistant-batch")] \
        == list(engines.values())
    by_name = {r["name"]: r for r in ec.routes(cfg)}
    for workload in engines:
        for suffix in ("", "/path", "/body"):
            for twin in ("", "/unstreamed"):
                retry = by_name[f"{workload}{suffix}{twin}"]["route"]["retry_policy"]
                assert retry["retriable_status_codes"] == [500, 502, 503], (workload, suffix, twin)


def test_routes_carry_model_timeouts_retries_and_tenant() -> None:
    by_name = {r["name"]: r for r in ec.routes(prod_without_variants())}
    assert by_name["assistant.batch"]["route"]["timeout"] == "600s"
    assert by_name["embed-rerank"]["route"]["timeout"] == "10s"
    assert by_name["finance-8b"]["route"]["timeout"] == "60s"
    # the route's idle timeout replaces the connection manager's: a 900 s request is not cut at 300 s
    assert by_name["deep-research"]["route"]["timeout"] == by_name["deep-research"]["route"]["idle_timeout"] == "900s"
    retry = by_name["deep-research"]["route"]["retry_policy"]
    assert (retry["retry_on"], retry["retriable_status_codes"], retry["num_retries"]) == \
        ("connect-failure,refused-stream,reset,retriable-status-codes", [500, 502, 503], 2)
    assert retry["retry_host_predicate"][0]["name"] == "envoy.retry_host_predicates.previous_hosts"
    # per-try protection: max(30 s, 3 x the TTFT SLO) of silence, at most timeoutSeconds (deep-research: 20 s TTFT)
    assert [by_name[n]["route"]["retry_policy"]["per_try_idle_timeout"] for n in
            ("assistant", "assistant.batch", "embed-rerank", "deep-research")] == ["30s", "30s", "10s", "60s"]
    # session_affinity: the route hashes the session key (the access log's session_lb reads it)
    assert by_name["finance-8b"]["metadata"] == {"filter_metadata": {"aifactory": {
        "tenant": "finance", "priority": "interactive", "session_affinity": True}}}
    assert by_name["embed-rerank"]["metadata"] == {"filter_metadata": {"aifactory": {
        "tenant": "search", "priority": "interactive"}}}
    assert by_name["assistant.batch"]["metadata"]["filter_metadata"]["aifactory"]["priority"] == "batch"


def test_model_cluster_balancing_breakers_and_ejection() -> None:
    cfg = prod_without_variants()
    c = ec.model_cluster(cfg, cfg.models["deep-research"])
    # its replicas directly: every address of its headless Service's absolute name (a multi-node model's Service
    # selects the group leaders), no hop (issue 44 item 13)
    assert c["cluster_type"] == {"name": "envoy.cluster.dns", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.clusters.dns.v3.DnsCluster", "dns_refresh_rate": "5s",
        "dns_lookup_family": "V4_ONLY"}}
    assert c["load_assignment"] == {"cluster_name": "deep-research", "endpoints": [{"lb_endpoints": [
        {"endpoint": {"address": {"socket_address": {
            "address": "deep-research.research.svc.cluster.local.", "port_value": 8000}}}}]}]}
    assert c["connect_timeout"] == "2s"
    # a replica whose record is gone (its pod is being deleted) takes no new request though it passes its checks
    assert c["ignore_health_on_host_removal"] is True
    # a chat model: session affinity by default (Maglev, a replica at most 125% of the average load)
    assert c["load_balancing_policy"] == {"policies": [{"typed_extension_config": {
        "name": "envoy.load_balancing_policies.maglev",
        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.load_balancing_policies.maglev.v3.Maglev",
                         "consistent_hashing_lb_config": {"hash_balance_factor": 125}}}}]}
    # an embedding model: no sessions, least-request of four random choices (a retry can leave a failing replica)
    assert ec.model_cluster(cfg, cfg.models["embed-rerank"])["load_balancing_policy"] == {
        "policies": [{"typed_extension_config": {
            "name": "envoy.load_balancing_policies.least_request",
            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.load_balancing_policies.least_request.v3."
                                      "LeastRequest", "selection_method": "N_CHOICES", "choice_count": 4}}}]}
    # panic only when no replica passes (below 1% of 100 or fewer): a saturated model queues instead of answering 503;
    # a variant none of whose replicas passes sends its tries to its workload's next variant instead (no panic)
    assert c["common_lb_config"] == {"healthy_panic_threshold": {"value": 1}, "update_merge_window": "0s"}
    prod = stack_config("prod")
    variant = next(m for m in prod.models.values() if m.variant is not None)
    assert ec.model_cluster(prod, variant)["common_lb_config"]["healthy_panic_threshold"] == {"value": 0}
    # no check resets tries any more: the stack's retry budget (gateway.retries.budgetPercent, default 20)
    assert c["circuit_breakers"]["thresholds"] == [{
        "priority": "DEFAULT", "max_connections": 4096, "max_pending_requests": 2048, "max_requests": 4096,
        "retry_budget": {"budget_percent": {"value": 20.0}, "min_retry_concurrency": 16}}]
    # every 5xx and gateway failure counts, enforced; a passing check does not end the ejection (issue 44 item 8)
    assert c["outlier_detection"] == {"consecutive_5xx": 3, "enforcing_consecutive_5xx": 100,
                                      "consecutive_gateway_failure": 3, "enforcing_consecutive_gateway_failure": 100,
                                      "interval": "2s", "base_ejection_time": "30s", "max_ejection_percent": 67,
                                      "successful_active_health_check_uneject_host": False}
    # progress checks 2 s after the last one's answer (a 1-token completion: tests/unit/test_progress_checks.py), one
    # that waits 8 s without a token takes the replica out; replicas held unhealthy (and a new gateway's, before
    # traffic) re-checked every second
    hc = c["health_checks"][0]
    assert {k: v for k, v in hc.items() if k != "http_health_check"} == {
        "timeout": "8s", "interval": "2s", "no_traffic_interval": "1s", "no_traffic_healthy_interval": "2s",
        "unhealthy_interval": "1s", "unhealthy_threshold": 1, "healthy_threshold": 2}
    assert hc["http_health_check"]["path"] == "/v1/completions"


def test_the_gateway_stops_sending_to_a_departing_or_failing_replica_within_the_pods_prestop_contract() -> None:
    """components.k8s.defaults.GATEWAY_DETECTION_SECONDS: the model pods' preStop outwaits it. A record gone: CoreDNS
    answers it for its TTL (5 s), then the next refresh (5 s) drops the host; a replica that stops producing: 1
    progress check of 8 s timeout, at most 2 s after the previous one. Every shipped stack meets it, and a
    stack whose checks would not is refused, naming the key."""
    assert replicas.dns_detection_seconds() == 10 <= GATEWAY_DETECTION_SECONDS
    for env in ("dev", "staging", "prod", "onprem"):
        hc = stack(env).gateway.health_check
        assert hc.detection_seconds == 10.0 <= GATEWAY_DETECTION_SECONDS, env
    with pytest.raises(ConfigError) as err:
        stack_config("dev", gateway={**stack_raw("dev")["gateway"], "healthCheck": {"intervalSeconds": 5,
                                                                                     "timeoutSeconds": 8}})
    assert "gateway.healthCheck: unhealthyThreshold x (timeoutSeconds + intervalSeconds) is 13 s, above 10 s" in str(
        err.value)


def test_one_token_bucket_per_calling_tenant_and_priority() -> None:
    f = ec.rate_limit_filter(prod_without_variants())["typed_config"]

    def bucket(rps: int, burst: int) -> dict[str, object]:
        return {"max_tokens": burst, "tokens_per_fill": rps, "fill_interval": "1s"}

    assert [(d["entries"][0]["value"], d["entries"][1]["value"], d["token_bucket"]) for d in f["descriptors"]] == [
        ("assistant", "batch", bucket(400, 800)), ("assistant", "interactive", bucket(400, 800)),
        ("finance", "batch", bucket(20, 40)), ("finance", "interactive", bucket(20, 40)),
        ("research", "batch", bucket(50, 100)), ("research", "interactive", bucket(50, 100)),
        ("search", "batch", bucket(50, 100)), ("search", "interactive", bucket(50, 100)),
    ]
    assert [d["entries"][0]["key"] for d in f["descriptors"]] == ["tenant"] * 8
    # the caller's tenant (the header the gateway sets from the token), then the routed model's priority
    assert f["rate_limits"] == [{"actions": [
        {"request_headers": {"header_name": "x-aifactory-tenant", "descriptor_key": "tenant"}},
        {"metadata": {"descriptor_key": "priority", "source": "ROUTE_ENTRY",
                      "metadata_key": {"key": "aifactory", "path": [{"key": "priority"}]}}}]}]
    assert f["always_consume_default_token_bucket"] is False
    assert f["filter_enforced"]["default_value"] == {"numerator": 100, "denominator": "HUNDRED"}


def test_tracing_goes_to_the_collector_which_alone_samples() -> None:
    """prod keeps 20% of traces: the gateway traces every request and the Collector's probabilistic_sampler keeps
    20% by trace id after spanmetrics counted them all; a gateway sampling 20% too would keep 4% (found by the
    end-to-end review) and make spanmetrics' RED figures a sample."""
    cfg = stack("prod")
    assert cfg.observability.trace_sample_ratio == 0.2
    hcm = ec.gateway_listener(cfg)["filter_chains"][0]["filters"][0]["typed_config"]
    assert hcm["tracing"]["random_sampling"] == {"value": 100.0}
    # ... and whatever an incoming traceparent says (its sampler decides, not the parent's flag)
    assert hcm["tracing"]["provider"]["typed_config"]["sampler"]["name"] == \
        "envoy.tracers.opentelemetry.samplers.always_on"
    collector = otel_config.collector_config(cfg)
    assert collector["processors"]["probabilistic_sampler"] == {"sampling_percentage": 20.0}
    pipelines = collector["service"]["pipelines"]
    assert pipelines["traces/spanmetrics"]["processors"] == ["memory_limiter", "k8sattributes", "batch"]
    assert "probabilistic_sampler" in pipelines["traces/sampled"]["processors"]
    grpc = hcm["tracing"]["provider"]["typed_config"]["grpc_service"]
    # :authority: the Collector Service's name, which the gateway's sidecar routes (not the cluster's name)
    assert grpc["envoy_grpc"] == {"cluster_name": "otel_collector",
                                  "authority": "otel-collector.monitoring.svc.cluster.local"}
    col = ec.collector_cluster(cfg)
    assert col["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"] == \
        {"address": "otel-collector.monitoring.svc.cluster.local", "port_value": 4317}
    assert set(hcm["access_log"][0]["typed_config"]["log_format"]["json_format"]) >= {
        "request_id", "upstream_service_time_ms", "duration_ms", "upstream_host", "trace_id"}


def _hcm(cfg: PlatformConfig) -> dict:
    return ec.gateway_listener(cfg)["filter_chains"][0]["filters"][0]["typed_config"]


def test_listener_bounds_slow_clients_and_normalises_paths() -> None:
    hcm = _hcm(prod_without_variants())
    assert {k: hcm[k] for k in ("request_headers_timeout", "request_timeout", "stream_idle_timeout",
                                "common_http_protocol_options", "normalize_path", "merge_slashes",
                                "path_with_escaped_slashes_action")} == {
        "request_headers_timeout": "10s", "request_timeout": "60s", "stream_idle_timeout": "30s",
        "common_http_protocol_options": {"idle_timeout": "300s", "max_connection_duration": "60s",
                                         "headers_with_underscores_action": "REJECT_REQUEST"},
        "normalize_path": True, "merge_slashes": True,
        "path_with_escaped_slashes_action": "REJECT_REQUEST"}


def test_filters_authenticate_then_buffer_then_route_on_the_body_then_authorise_then_limit() -> None:
    assert [f["name"] for f in _hcm(prod_without_variants())["http_filters"]] == [
        "envoy.filters.http.header_mutation", "envoy.filters.http.jwt_authn", "aifactory.callers",
        "aifactory.refusals", "envoy.filters.http.buffer", "envoy.filters.http.json_to_metadata",
        "aifactory.session_baggage", "aifactory.session", "aifactory.session_key",
        "aifactory.session_key_header", "aifactory.body_limit", "envoy.filters.http.rbac",
        "envoy.filters.http.local_ratelimit", "aifactory.budgets", "aifactory.budgets_closed",
        "aifactory.budgets_meter", "aifactory.failed_on_two_replicas", "envoy.filters.http.router"]
    strip, jwt, _, _, _, body, *_ = _hcm(prod_without_variants())["http_filters"]
    assert strip["typed_config"]["mutations"] == {"request_mutations": [
        {"remove": "x-aifactory-tenant"}, {"remove_on_match": {"key_matcher": {"prefix": "x-envoy-"}}}]}
    assert body["typed_config"]["request_rules"] == {"rules": [
        {"selectors": [{"key": "model"}],
         "on_present": {"metadata_namespace": "aifactory", "key": "model", "type": "STRING"}},
        {"selectors": [{"key": "stream"}],
         "on_present": {"metadata_namespace": "aifactory", "key": "stream", "type": "PROTOBUF_VALUE"},
         "on_missing": {"metadata_namespace": "aifactory", "key": "stream", "value": False}},
        {"selectors": [{"key": "prompt_cache_key"}],
         "on_present": {"metadata_namespace": "aifactory", "key": "prompt_cache_key", "type": "STRING"}}],
        "allow_content_types": ["application/json", "application/json; charset=utf-8",
                                "application/json;charset=utf-8", "application/json; charset=UTF-8",
                                "application/json;charset=UTF-8"],
        "allow_empty_content_type": True}
    assert jwt["typed_config"]["providers"] == {"issuer-0": {
        "issuer": "https://example.okta.com/oauth2/aus4aifactoryprod",
        "remote_jwks": {"http_uri": {"uri": "https://example.okta.com/oauth2/aus4aifactoryprod/v1/keys",
                                     "cluster": "jwks-0", "timeout": "5s"},
                        "cache_duration": "600s", "async_fetch": {}, "retry_policy": {"num_retries": 3}},
        "forward": False, "from_headers": [{"name": "Authorization", "value_prefix": "Bearer "}],
        "require_expiration": True, "max_lifetime": "86400s",
        "claim_to_headers": [{"header_name": "x-aifactory-tenant", "claim_name": "tenant"}],
        "jwt_cache_config": {"jwt_cache_size": 1000},
        "audiences": ["api://aifactory-gateway"]}}
    assert jwt["typed_config"]["rules"] == [{"match": {"prefix": "/"}, "requires": {"provider_name": "issuer-0"}},
                                            {"match": {"connect_matcher": {}},
                                             "requires": {"provider_name": "issuer-0"}}]
    onprem = ec.jwt_filter(stack("onprem"))["typed_config"]["providers"]["issuer-0"]
    assert onprem["claim_to_headers"] == [{"header_name": "x-aifactory-tenant", "claim_name": "aifactory_tenant"}]


def test_two_issuers_are_alternatives() -> None:
    raw = stack_raw("dev")
    raw["gateway"]["auth"]["issuers"].append({"issuer": "https://b.example.com", "jwksUri": "https://b.example.com:8443/k"})
    cfg = parse(raw, stack="dev")
    jwt = ec.jwt_filter(cfg)["typed_config"]
    assert jwt["rules"][0]["requires"] == {"requires_any": {"requirements": [
        {"provider_name": "issuer-0"}, {"provider_name": "issuer-1"}]}}
    assert "audiences" not in jwt["providers"]["issuer-1"]  # none configured: any audience
    cluster = ec.jwks_cluster(cfg, 1)
    assert (cluster["type"], cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]) == (
        "LOGICAL_DNS", {"address": {"socket_address": {"address": "b.example.com", "port_value": 8443}}})
    tls = cluster["transport_socket"]["typed_config"]
    assert tls["sni"] == "b.example.com"
    assert tls["common_tls_context"]["validation_context"] == {
        "trusted_ca": {"filename": "/etc/ssl/certs/ca-certificates.crt"},
        "match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": "b.example.com"}}]}


def test_without_an_issuer_every_request_is_refused() -> None:
    raw = stack_raw("dev")
    del raw["gateway"]
    cfg = parse(raw, stack="dev")
    vhost = _hcm(cfg)["route_config"]["virtual_hosts"][0]
    assert vhost["routes"] == [{"name": "no-issuer", "match": {"prefix": "/"}, "direct_response": {
        "status": 401, "body": {"inline_string": "no token issuer is configured (gateway.auth.issuers): every "
                                                 "request is refused\n"}}}]
    assert "envoy.filters.http.jwt_authn" not in [f["name"] for f in _hcm(cfg)["http_filters"]]


def test_request_stats_per_calling_tenant() -> None:
    assert _hcm(stack("staging"))["route_config"]["virtual_hosts"][0]["virtual_clusters"] == [
        {"name": "caller-search", "headers": [{"name": "x-aifactory-tenant", "string_match": {"exact": "search"}}]},
        {"name": "caller-support", "headers": [{"name": "x-aifactory-tenant", "string_match": {"exact": "support"}}]}]


def _problems(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse(raw, stack="t")
    return [str(p) for p in err.value.problems]


def test_gateway_auth_and_limits_config_errors_name_the_key() -> None:
    raw = stack_raw("dev")
    raw["gateway"]["auth"] = {"tenantClaim": "a b", "issuers": [
        {"issuer": "https://a", "jwksUri": "http://a/keys"}, {"jwksUri": "https://a/keys"},
        {"issuer": "https://a", "jwksUri": "https://a/k2"}]}
    raw["tenants"]["demo"]["shareWith"] = ["nobody"]
    raw["models"]["chat"].update(tryIdleTimeoutSeconds=90, maxRequestBytes=10)
    assert sorted(_problems(raw)) == sorted([
        "gateway.auth.issuers[0].jwksUri: 'http://a/keys' is not an https:// URL",
        "gateway.auth.issuers[1].issuer: is required",
        "gateway.auth.issuers[2].issuer: 'https://a' is listed twice",
        "gateway.auth.tenantClaim: 'a b' is not a claim name (letters, digits, _ : . -)",
        "tenants.demo.shareWith[0]: 'nobody' is not another tenant; other tenants: (none)",
        "models.chat.tryIdleTimeoutSeconds: 90 is longer than timeoutSeconds 60; use at most 60",
        "models.chat.maxRequestBytes: 10 is below the minimum 1024",
    ])


def test_issuer_tenants_must_be_tenants_of_the_stack() -> None:
    raw = stack_raw("dev")
    raw["gateway"]["auth"] = {"issuers": [
        {"issuer": "https://a", "jwksUri": "https://a/keys", "tenants": ["demo", "nobody"]},
        {"issuer": "https://b", "jwksUri": "https://b/keys", "tenants": []},
        {"issuer": "https://c", "jwksUri": "https://c/keys", "tenants": "demo"}]}
    assert _problems(raw) == [
        "gateway.auth.issuers[2].tenants: expected a list, got a string 'demo'",
        "gateway.auth.issuers[0].tenants[1]: 'nobody' is not a tenant; tenants: demo",
        "gateway.auth.issuers[1].tenants: is empty: its tokens could call nothing; list the tenants it may name, or "
        "leave tenants out (any tenant)"]


def test_without_issuer_tenants_no_issuer_check_is_added() -> None:
    # one IdP for every tenant (the shipped stacks): no payload in metadata, no extra filter
    names = [f["name"] for f in _hcm(stack("staging"))["http_filters"]]
    assert "aifactory.issuer_tenants" not in names and "envoy.filters.http.jwt_authn" in names


def test_gateway_defaults_are_documented_values() -> None:
    cfg = stack_config("staging")
    gw_cfg, model, tenant = cfg.gateway, cfg.models["llama-70b"], cfg.tenants["search"]
    assert (gw_cfg.auth.tenant_claim, gw_cfg.request_headers_timeout_seconds, gw_cfg.request_timeout_seconds,
            gw_cfg.stream_idle_timeout_seconds, gw_cfg.idle_timeout_seconds) == ("tenant", 10.0, 60.0, 30.0, 300.0)
    assert (gw_cfg.outlier_detection.max_ejection_percent, gw_cfg.outlier_detection.panic_threshold_percent) == (
        67, 1.0)
    assert (model.max_request_bytes, model.try_idle_timeout_seconds) == (8 * 1024 * 1024, 30.0)
    assert cfg.models["llama-8b-trt"].try_idle_timeout_seconds == 30.0  # min(timeoutSeconds 30, 30)
    assert (tenant.rate_limit.batch_requests_per_second, tenant.rate_limit.batch_burst) == (100, 200)
    assert cfg.tenants["support"].share_with == ("search",)


def test_stats_listener_exposes_only_metrics_and_readiness() -> None:
    listener = ec.stats_listener()
    routes = listener["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]["virtual_hosts"][0]["routes"]
    assert [r["match"] for r in routes] == [{"path": "/stats/prometheus"}, {"path": "/ready"}]
    assert listener["address"]["socket_address"]["port_value"] == 9902


def test_rebind_needs_endpoints_for_every_dns_cluster() -> None:
    with pytest.raises(ValueError, match=r"^rebind: no endpoints for cluster\(s\) chat, otel_collector$"):
        rebind(ec.bootstrap(stack("dev")), listener_port=1, stats_port=2, admin_port=3, endpoints={},
                  jwks=["{}"])
    with pytest.raises(ValueError, match=r"^rebind: 1 issuer\(s\) need as many local JWKS, got 0$"):
        rebind(ec.bootstrap(stack("dev")), listener_port=1, stats_port=2, admin_port=3, endpoints={})


def test_rebind_makes_static_loopback_clusters_and_leaves_the_input_alone() -> None:
    original = ec.bootstrap(stack("dev"))
    out = rebind(original, listener_port=10080, stats_port=10081, admin_port=10082,
                    endpoints={"chat": [("127.0.0.1", 9000)],
                               "otel_collector": [("127.0.0.1", 9002)]}, jwks=['{"keys": []}'])
    assert "jwks-0" not in [c["name"] for c in out["static_resources"]["clusters"]]
    jwt = ec.http_filters(stack("dev"))[1]["typed_config"]
    assert "remote_jwks" in jwt["providers"]["issuer-0"]
    rebound = out["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    assert rebound["http_filters"][1]["typed_config"]["providers"]["issuer-0"]["local_jwks"] == {
        "inline_string": '{"keys": []}'}
    clusters = {c["name"]: c for c in out["static_resources"]["clusters"]}
    # chat's cluster: the replicas given, as static endpoints
    assert clusters["chat"]["type"] == "STATIC" and "cluster_type" not in clusters["chat"]
    assert [e["endpoint"]["address"] for e in clusters["chat"]["load_assignment"]["endpoints"][0]["lb_endpoints"]
            ] == [{"socket_address": {"address": "127.0.0.1", "port_value": 9000}}]
    assert [x["address"] for x in out["static_resources"]["listeners"]] == [
        {"socket_address": {"address": "127.0.0.1", "port_value": 10080}},
        {"socket_address": {"address": "127.0.0.1", "port_value": 10081}}]
    with pytest.raises(ValueError, match=r"^rebind: no endpoints for cluster\(s\) chat$"):
        rebind(original, listener_port=1, stats_port=2, admin_port=3, jwks=['{"keys": []}'],
               endpoints={"otel_collector": [("127.0.0.1", 9002)]})
    assert original == ec.bootstrap(stack("dev"))


# --- Kubernetes objects -------------------------------------------------------------------------


def test_aws_load_balancer_is_an_internal_nlb_of_the_aws_load_balancer_controller_with_pod_targets() -> None:
    """The controller takes a Service of its class, service.k8s.aws/nlb (kubernetes-sigs/aws-load-balancer-controller
    @v3.5.0: pkg/service/service_utils.go IsServiceSupported; docs/guide/service/nlb.md), and reads its NLB's target
    type, scheme and load balancer / target group attributes from these annotations (docs/guide/service/
    annotations.md). Before, the in-tree controller's NLB targeted the system pool's nodes, and a node leaving cut
    every connection through it."""
    cfg = stack_config("prod")
    svc = gw.service(cfg)
    assert svc["spec"]["type"] == "LoadBalancer"
    assert svc["spec"]["loadBalancerClass"] == "service.k8s.aws/nlb"
    assert svc["metadata"]["annotations"] == {
        "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip",
        "service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
        "service.beta.kubernetes.io/aws-load-balancer-attributes": "load_balancing.cross_zone.enabled=true",
        "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes":
            "deregistration_delay.timeout_seconds=1165,deregistration_delay.connection_termination.enabled=false"}
    assert svc["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP",
                                     "appProtocol": "http"}]
    # the class may not change once set: the in-tree controller's Service (and NLB) is replaced, not updated
    assert gw.replace_on_changes(cfg) == {"service": ["spec.loadBalancerClass"]}
    onprem = gw.service(stack("onprem"))
    assert "annotations" not in onprem["metadata"] and "loadBalancerClass" not in onprem["spec"]
    assert gw.replace_on_changes(stack("onprem")) == {}


@pytest.mark.parametrize(("name", "grace"), [("prod", 1165), ("dev", 325), ("staging", 325)])
def test_every_aws_stacks_target_group_keeps_a_gateway_pod_draining_for_its_whole_grace(name: str,
                                                                                       grace: int) -> None:
    """The deregistration delay (0-3600 s: annotations.md, target-group-attributes) is the pod's grace: the
    controller deregisters a pod once its termination has begun, so its target stays draining while the pod may
    serve, and connection termination is off, so the delay's end resets nothing."""
    cfg = stack_config(name)
    pod = gw.deployment(cfg, "{}")["spec"]["template"]
    attrs = dict(a.split("=") for a in gw.service(cfg)["metadata"]["annotations"][
        "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes"].split(","))
    assert attrs == {"deregistration_delay.timeout_seconds": str(grace),
                     "deregistration_delay.connection_termination.enabled": "false"}
    assert pod["spec"]["terminationGracePeriodSeconds"] == grace
    # the controller's webhook gives the pod its readiness gate: a rollout waits for a healthy target
    assert pod["metadata"]["labels"]["elbv2.k8s.aws/pod-readiness-gate-inject"] == "enabled"
    onprem = gw.deployment(stack("onprem"), "{}")
    assert "elbv2.k8s.aws/pod-readiness-gate-inject" not in onprem["spec"]["template"]["metadata"]["labels"]
    assert "annotations" not in onprem["metadata"]


def test_behind_an_nlb_the_gateway_pods_are_created_after_their_service() -> None:
    """The controller's webhook gives a pod its readiness gate only if the pod is created after its Service's target
    group binding (kubernetes-sigs/aws-load-balancer-controller@v3.5.0:docs/deploy/pod_readiness_gate.md): the
    Deployment waits for the Service (and so for the NLB the controller makes), on a first install and when the
    in-tree controller's Service is replaced. Elsewhere the order is as before."""
    order = list(gw.gateway_objects(stack_config("prod")))
    needs = gw.object_needs(stack_config("prod"))
    assert needs["deployment"] == ("serviceaccount", "configmap", "service")
    applied = gw.apply_order(order, needs)
    assert applied.index("service") < applied.index("deployment") and sorted(applied) == sorted(order)
    onprem = list(gw.gateway_objects(stack_config("onprem")))
    assert gw.object_needs(stack_config("onprem")) == {"deployment": ("serviceaccount", "configmap")}
    assert gw.apply_order(onprem, gw.object_needs(stack_config("onprem"))) == onprem


def test_pulumi_waits_for_a_rollout_whose_pods_each_become_a_healthy_target() -> None:
    """With readiness gates a rolling update (maxSurge 1, maxUnavailable 0) replaces one pod at a time, each ready
    only once the NLB has registered it and found it healthy, which "can take a few minutes"
    (docs.aws.amazon.com/elasticloadbalancing/latest/network/target-group-register-targets.html). pulumi-kubernetes
    would give the whole Deployment its default 600 s (pulumi/pulumi-kubernetes@v4.32.0 provider/pkg/await/
    deployment.go): prod's 12 replicas get 12 x (60 s to start + 300 s to become a healthy target)."""
    cfg = stack_config("prod")
    assert cfg.gateway.max_replicas == 12
    assert gw.deployment(cfg, "{}")["metadata"]["annotations"] == {"pulumi.com/timeoutSeconds": "4320"}


def test_the_nlbs_health_check_reaches_envoy_past_the_istio_sidecar() -> None:
    """Without health-check annotations the controller checks each ip target over TCP on the traffic port
    (kubernetes-sigs/aws-load-balancer-controller@v3.5.0: docs/guide/service/annotations.md healthcheck-protocol,
    healthcheck-port), the port each pod is registered with: the named targetPort's container port (the target
    group's own port is then a placeholder 1: pkg/service/model_build_target_group.go buildTargetGroupPort). That is
    Envoy's listener, which the sidecar does not capture, and which the gateway's NetworkPolicy opens to any source
    (the NLB's own addresses: client IP preservation is off for ip targets unless set)."""
    cfg = stack_config("prod")
    svc = gw.service(cfg)
    assert svc["metadata"]["annotations"]["service.beta.kubernetes.io/aws-load-balancer-nlb-target-type"] == "ip"
    assert not [k for k in svc["metadata"]["annotations"] if "healthcheck" in k]
    assert "externalTrafficPolicy" not in svc["spec"]  # Cluster: TCP on the traffic port
    template = gw.deployment(cfg, "{}")["spec"]["template"]
    target_port = svc["spec"]["ports"][0]["targetPort"]
    [port] = [p for p in template["spec"]["containers"][0]["ports"] if p["name"] == target_port]
    assert port["containerPort"] == 8080
    assert template["metadata"]["annotations"]["traffic.sidecar.istio.io/excludeInboundPorts"] == "8080"
    [clients] = [p for p in gw.network_policies(cfg) if p["metadata"]["name"] == "allow-clients"]
    assert clients["spec"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": 8080}]}]


def test_a_model_timeout_longer_than_an_nlb_can_drain_is_refused_with_its_path() -> None:
    """The deregistration delay is at most 3600 s; the gateway pod's grace adds 265 s to the longest timeout."""
    raw = stack_raw("prod")
    raw["models"]["deep-research"]["timeoutSeconds"] = 3400
    with pytest.raises(pulumi.InputPropertiesError) as err:
        gw.check_deregistration_delay("gateway", gw.gateway_spec("gateway", gateway_args(parse(raw, stack="prod"))))
    assert [(e["property_path"], e["reason"]) for e in err.value.errors] == [(
        "models.deep-research.timeoutSeconds", "3400 s is longer than an AWS NLB can drain: the gateway pod's grace "
        "would pass the target group's deregistration delay limit of 3600 s; at most 3335 s")]
    raw["models"]["deep-research"]["timeoutSeconds"] = 3335
    gw.check_deregistration_delay("gateway", gw.gateway_spec("gateway", gateway_args(parse(raw, stack="prod"))))


def test_prometheus_scrapes_the_stats_port_through_a_headless_service_over_mesh_tls() -> None:
    """The Service publishes not-ready addresses so that a terminating gateway pod stays a scrape target for its whole
    drain (review round 10: without it the Endpoints controller drops the pod at its deletion, and
    GatewayDrainCutsRequests, which reads the pod's requests in flight, could never fire): kubernetes/kubernetes@v1.34.0
    staging/src/k8s.io/endpointslice/util/controller_utils.go ShouldPodBeInEndpoints."""
    cfg = prod_without_variants()
    svc, monitor = gw.metrics_service(cfg), gw.service_monitor(cfg)
    assert svc["metadata"] == {"name": "aifactory-gateway-metrics", "namespace": "aifactory-gateway", "labels": {
        "app.kubernetes.io/name": "aifactory-gateway", "app.kubernetes.io/component": "gateway-metrics",
        "app.kubernetes.io/managed-by": "aifactory"}}
    assert svc["spec"] == {"clusterIP": "None", "publishNotReadyAddresses": True,
                           "selector": {"app.kubernetes.io/name": "aifactory-gateway"},
                           "ports": [{"name": "stats", "port": 9902, "targetPort": "stats", "protocol": "TCP",
                                      "appProtocol": "http"}]}
    assert (monitor["apiVersion"], monitor["kind"], monitor["metadata"]["name"]) == (
        "monitoring.coreos.com/v1", "ServiceMonitor", "aifactory-gateway")
    assert monitor["spec"] == {
        "selector": {"matchLabels": svc["metadata"]["labels"]},
        "endpoints": [{"port": "stats", "path": "/stats/prometheus", "interval": "15s", "scheme": "https",
                       "tlsConfig": {"caFile": "/etc/prom-certs/root-cert.pem",
                                     "certFile": "/etc/prom-certs/cert-chain.pem",
                                     "keyFile": "/etc/prom-certs/key.pem", "insecureSkipVerify": True}}]}
    # the client Service's labels differ in component: the monitor selects the metrics Service only
    assert gw.service(cfg)["metadata"]["labels"]["app.kubernetes.io/component"] == "gateway"


def test_hpa_and_pdb_follow_the_gateway_settings() -> None:
    hpa = gw.autoscaler(prod_without_variants())
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 12)
    assert gw.disruption_budget(prod_without_variants())["spec"]["maxUnavailable"] == 1


def test_configmap_holds_the_rendered_bootstrap_and_pods_roll_on_change() -> None:
    prod, dev = prod_without_variants(), stack("dev")
    objects = gw.gateway_objects(prod)
    assert objects["configmap"]["data"] == {"envoy.yaml": ec.render(prod)}
    annotations = objects["deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["traffic.sidecar.istio.io/excludeInboundPorts"] == "8080"
    envoy_yaml = objects["configmap"]["data"]["envoy.yaml"]
    assert annotations[gw.CONFIG_HASH_ANNOTATION] == hashlib.sha256(envoy_yaml.encode()).hexdigest()
    dev_pod = gw.gateway_objects(dev)["deployment"]["spec"]["template"]["metadata"]
    assert annotations[gw.CONFIG_HASH_ANNOTATION] != dev_pod["annotations"][gw.CONFIG_HASH_ANNOTATION]
    container = objects["deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "envoyproxy/envoy:v1.40.0"
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "stats"}
    # /ready is LIVE once each model's replicas had their first checks: no delay of its own (there were hops, whose
    # first checks came after it)
    assert "initialDelaySeconds" not in container["readinessProbe"]


def test_gateway_namespace_denies_by_default_and_allows_each_flow() -> None:
    cfg = prod_without_variants()
    pols = {p["metadata"]["name"]: p["spec"] for p in gw.network_policies(cfg)}
    gateway_pods = {"matchLabels": {"app.kubernetes.io/name": "aifactory-gateway"}}

    def ns(name: str) -> dict:
        return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}

    assert pols["default-deny"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [],
                                    "egress": []}
    assert pols["allow-clients"] == {"podSelector": gateway_pods, "policyTypes": ["Ingress"],
                                     "ingress": [{"ports": [{"protocol": "TCP", "port": 8080}]}]}
    assert pols["allow-monitoring"]["ingress"] == [{"from": [ns("monitoring")], "ports": [
        {"protocol": "TCP", "port": 9902}, {"protocol": "TCP", "port": 15020}, {"protocol": "TCP", "port": 15090}]}]
    assert pols["allow-models"] == {"podSelector": gateway_pods, "policyTypes": ["Egress"], "egress": [{
        "to": [{**ns(t), "podSelector": {"matchLabels": {"app.kubernetes.io/component": "model-server"}}}
               for t in ("assistant", "finance", "research", "search")],
        "ports": [{"protocol": "TCP", "port": 8000}]}]}
    assert pols["allow-dns"]["egress"][0]["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    assert pols["allow-istiod"]["egress"][0]["ports"] == [{"protocol": "TCP", "port": 15012}]
    assert pols["allow-collector"]["egress"] == [{"to": [ns("monitoring")], "ports": [{"protocol": "TCP",
                                                                                         "port": 4317}]}]
    assert pols["allow-token-issuers"]["egress"] == [{"ports": [{"protocol": "TCP", "port": 443}]}]
    authz = {p["metadata"]["name"]: p["spec"] for p in gw.authorization_policies(cfg)}
    assert authz == {"allow-nothing": {}, "allow-monitoring": {
        "selector": gateway_pods, "action": "ALLOW", "rules": [{
            "from": [{"source": {"principals": ["cluster.local/ns/monitoring/sa/prometheus"]}}],
            "to": [{"operation": {"ports": ["9902"]}}]}]}}


def test_gateway_component_creates_an_injected_namespace_and_its_objects() -> None:
    def program(cfg: PlatformConfig) -> None:
        gw.Gateway("gateway", gateway_args(cfg))

    result = run_program("dev", read_stack_config(stack_file("dev")), program)
    comp = next(r for r in result.resources if r.type == "aifactory:k8s:Gateway")
    children = {r.name: r for r in result.resources if r.parent == comp.urn}
    assert sorted(children) == [
        "gateway-authorizationpolicy-allow-monitoring", "gateway-authorizationpolicy-allow-nothing",
        "gateway-configmap", "gateway-deployment", "gateway-destinationrule", "gateway-destinationrule-model-chat",
        "gateway-horizontalpodautoscaler", "gateway-metrics-service",
        "gateway-networkpolicy-allow-clients", "gateway-networkpolicy-allow-collector",
        "gateway-networkpolicy-allow-dns", "gateway-networkpolicy-allow-istiod",
        "gateway-networkpolicy-allow-models", "gateway-networkpolicy-allow-monitoring",
        "gateway-networkpolicy-allow-token-issuers", "gateway-networkpolicy-default-deny", "gateway-ns",
        "gateway-poddisruptionbudget", "gateway-service", "gateway-serviceaccount", "gateway-servicemonitor",
        "gateway-virtualservice-model-chat"]
    assert children["gateway-networkpolicy-default-deny"].type == "kubernetes:networking.k8s.io/v1:NetworkPolicy"
    assert children["gateway-authorizationpolicy-allow-nothing"].type == \
        "kubernetes:security.istio.io/v1:AuthorizationPolicy"
    assert children["gateway-metrics-service"].inputs["metadata"]["name"] == "aifactory-gateway-metrics"
    ns = children["gateway-ns"].inputs["metadata"]
    assert ns["name"] == "aifactory-gateway" and ns["labels"]["istio-injection"] == "enabled"
    assert ns["labels"]["elbv2.k8s.aws/pod-readiness-gate-inject"] == "enabled"  # dev is an AWS stack
    assert children["gateway-serviceaccount"].inputs["metadata"]["name"] == "aifactory-gateway"
    # the pods name the account and mount envoy.yaml (why: tests/unit/test_dependencies.py), and behind the NLB come
    # after their Service (their readiness gates); the rest: the namespace
    assert sorted(children["gateway-deployment"].dependencies) == sorted(
        children[n].urn for n in ("gateway-ns", "gateway-serviceaccount", "gateway-configmap", "gateway-service"))
    assert children["gateway-service"].dependencies == [children["gateway-ns"].urn]


def test_envoy_sheds_load_before_its_container_is_oom_killed() -> None:
    """Bodies are buffered whole before RBAC and the rate limit run, so many large or slow uploads could fill the
    heap and the kernel would OOM-kill the gateway (every tenant's streams with it). The overload manager's heap
    budget is 3/4 of the container's memory limit: from 85% the streams buffering most are reset, at 95% new
    requests get 503 (config/overload/v3: fixed_heap monitor, reset_high_memory_stream needs
    buffer_factory_config)."""
    cfg = prod_without_variants()
    boot = ec.bootstrap(cfg)
    limit = gw.deployment(cfg, ec.render(cfg))["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limit["memory"] == "1Gi"
    om = boot["overload_manager"]
    heap = next(m for m in om["resource_monitors"] if m["name"] == "envoy.resource_monitors.fixed_heap")
    assert heap["typed_config"]["max_heap_size_bytes"] == 3 * 1024**3 // 4
    assert {a["name"]: a["triggers"] for a in om["actions"]} == {
        "envoy.overload_actions.reset_high_memory_stream": [
            {"name": "envoy.resource_monitors.fixed_heap",
             "scaled": {"scaling_threshold": 0.85, "saturation_threshold": 0.95}}],
        "envoy.overload_actions.stop_accepting_requests": [
            {"name": "envoy.resource_monitors.fixed_heap", "threshold": {"value": 0.95}}]}
    assert om["buffer_factory_config"] == {"minimum_account_to_track_power_of_two": 20}


def test_a_terminating_gateway_pod_serves_its_requests_in_flight_to_their_end() -> None:
    """Envoy exits on SIGTERM at once (--drain-time-s is for hot restarts and /drain_listeners:
    envoyproxy/envoy@v1.40.0:docs/root/intro/arch_overview/operations/draining.rst; the end-to-end review cut a
    request in flight that way on the real binary), so every rollout, scale-down and node drain cut requests. The pod
    now waits before SIGTERM, out of the Service's endpoints meanwhile, and the kubelet waits for that: a client's
    keep-alive connection is told to close within 60 s (max_connection_duration) plus the 5 s drain_timeout, and the
    last request it carried may last the longest a route allows (prod: deep-research's 900 s), plus 10 s. Its
    outbound Istio sidecar drains as long as the pod may live (a classic sidecar otherwise aborts 5 s after
    termination starts: istio/istio@1.28.3 pkg/config/mesh/mesh.go TerminationDrainDuration)."""
    cfg = stack_config("prod")
    longest = max(m.timeout_seconds for m in cfg.models.values())
    assert longest == 900
    template = gw.deployment(cfg, "{}")["spec"]["template"]
    spec = template["spec"]
    [envoy] = spec["containers"]
    # behind the NLB (ip targets) Envoy first accepts new connections for the 180 s the NLB may still send them
    assert gw.drain_seconds(cfg) == 180 + 975
    assert spec["terminationGracePeriodSeconds"] == 1165
    assert template["metadata"]["annotations"]["proxy.istio.io/config"] == '{"terminationDrainDuration": "1165s"}'
    hcm = _hcm(cfg)
    assert hcm["stat_prefix"] == "gateway"
    assert hcm["common_http_protocol_options"]["max_connection_duration"] == "60s"
    assert hcm["drain_timeout"] == "5s"


def test_the_gateway_pods_prestop_ends_when_its_last_request_does_within_the_same_bound() -> None:
    """Round 8: the preStop was a fixed kubelet sleep of drain_seconds (prod 1155 s), busy or idle, so a prod system
    node holding a gateway pod outlasted an EKS managed node group update's 15 minutes whatever the traffic. Now it is
    bash (the image envoyproxy/envoy:v1.40.0 is Ubuntu: envoyproxy/envoy@v1.40.0 ci/Dockerfile-envoy, stage `envoy`)
    running components.k8s.gateway.drain's script with the stack's numbers: accept for the NLB window (180 s; without
    an NLB the 10 s endpoints take to leave), wait 60 + 5 s for every client connection to close or drain, then read
    Envoy's admin on 127.0.0.1:9901 (where the bootstrap binds it) for the gateway listener's
    http.gateway.downstream_rq_active every second until 0, at most drain_seconds (the grace is unchanged, and
    with it the NLB's deregistration delay). What the script does: tests/artifacts/test_gateway_drain_live.py."""
    from components.k8s.gateway.drain import DRAIN_WAIT_SCRIPT

    cfg = stack_config("prod")
    [envoy] = gw.deployment(cfg, "{}")["spec"]["template"]["spec"]["containers"]
    assert envoy["lifecycle"] == {"preStop": {"exec": {"command": [
        "bash", "-c", DRAIN_WAIT_SCRIPT, "gateway-drain", "9901", "http.gateway.downstream_rq_active",
        "180", "65", "1155", "1", "2", "/proc/1/fd/1"]}}}
    assert ec.bootstrap(cfg)["admin"]["address"] == {"socket_address": {"address": "127.0.0.1", "port_value": 9901}}
    onprem = stack_config("onprem")
    onprem_longest = math.ceil(max(m.timeout_seconds for m in onprem.models.values()))
    [onprem_envoy] = gw.deployment(onprem, "{}")["spec"]["template"]["spec"]["containers"]
    assert onprem_envoy["lifecycle"]["preStop"]["exec"]["command"][6:10] == ["10", "65", str(75 + onprem_longest), "1"]
    assert gw.termination_grace_seconds(onprem) == 75 + onprem_longest + 10


def test_the_drain_hooks_timings_are_checked() -> None:
    """A bound shorter than the fixed phases could never see them through; a zero poll would spin."""
    from components.k8s.gateway.drain import prestop

    with pytest.raises(ValueError, match=r"^bound_seconds: 60 is shorter than accept_seconds \+ close_seconds "
                                         r"\(10 \+ 65\): the bound must cover both fixed phases$"):
        prestop(stat_prefix="gateway", accept_seconds=10, close_seconds=65, bound_seconds=60)
    with pytest.raises(ValueError, match=r"^poll_seconds: 0 is not a positive number of seconds$"):
        prestop(stat_prefix="gateway", accept_seconds=10, close_seconds=65, bound_seconds=100, poll_seconds=0)
    assert prestop(stat_prefix="gw", accept_seconds=0.25, close_seconds=0.5, bound_seconds=3,
                   poll_seconds=0.1)["exec"]["command"][4:] == [
        "9901", "http.gw.downstream_rq_active", "0.25", "0.5", "3", "0.1", "2", "/proc/1/fd/1"]


def test_every_route_to_a_chat_model_hashes_the_session_key_and_no_other_does() -> None:
    """Session affinity needs the hash policy on every route form (header, path, body; streamed or not): Envoy
    hashes only on the route that picked the cluster (envoy_affinity)."""
    cfg = prod_without_variants()
    # the session header: the client's, else the one the session filters set from the body or the baggage
    hashed = [{"header": {"header_name": "x-aifactory-session"}}]
    for r in ec.routes(cfg):
        if "route" not in r:
            continue  # a direct response
        model = cfg.models[r["route"]["cluster"]]
        # on by default where it pays: a generate model whose engine reuses KV blocks (not Triton as deployed)
        expected = hashed if model.task == "generate" and model.prefix_caching else None
        assert r["route"].get("hash_policy") == expected, r["name"]
        # a retry's replica: 20 Maglev draws with affinity (a session of 2 replicas stays on its failed one with
        # probability 2^-20, not 1/8 as with Envoy's usual 3), least-request's 200 without (four random choices)
        assert r["route"]["retry_policy"]["host_selection_retry_max_attempts"] == (20 if expected else 200), r["name"]
    assert {m.name for m in cfg.models.values() if m.session_affinity_balance_factor is not None} == {
        m.name for m in cfg.models.values() if m.engine != "triton" and m.task == "generate"}
    # the session header is taken from the body's prompt_cache_key, else the baggage's aifactory.session member,
    # only when the client sent none
    [baggage] = [f for f in ec.http_filters(cfg) if f["name"] == "aifactory.session_baggage"]
    assert baggage["typed_config"]["request_rules"] == [{"header": "baggage", "on_header_present": {
        "metadata_namespace": "aifactory", "key": "session_baggage", "type": "STRING", "regex_value_rewrite": {
            # every baggage matches: the member's value, or nothing (no metadata) without the member
            "pattern": {"regex": r"^(?:(?:.*,)?[ \t]*aifactory\.session[ \t]*=[ \t]*([^,; \t]*).*|.*)$"},
            "substitution": r"\1"}}},
        # the client's own header, before the session filter adds one (the access log's session_source)
        {"header": "x-aifactory-session", "on_header_present": {
            "metadata_namespace": "aifactory", "key": "session_header", "value": "header", "type": "STRING"}}]
    [session] = [f for f in ec.http_filters(cfg) if f["name"] == "aifactory.session"]
    assert session["typed_config"]["mutations"] == {"request_mutations": [{"append": {
        "header": {"key": "x-aifactory-session", "value": f"%DYNAMIC_METADATA(aifactory:{key})%"},
        "append_action": "ADD_IF_ABSENT"}} for key in ("prompt_cache_key", "session_baggage")]}


def test_a_long_prefill_models_try_idle_timeout_leaves_room_for_its_first_token() -> None:
    """prod's deep-research (20 s TTFT SLO on 128k prompts, queue up to 20): its streamed tries are silent until the
    first token, and a 30 s try idle timeout (the old default) cut the slow ones the SLO allows and re-ran them on
    another replica. Unset, it is now 3 x the TTFT SLO where that is above 30 s (60 s), at most timeoutSeconds; the
    other prod models keep 30 s (or their timeout)."""
    cfg = stack_config("prod")
    assert {n: m.try_idle_timeout_seconds for n, m in cfg.models.items()} == {
        "assistant-fast": 30.0, "assistant-steady": 30.0, "assistant-batch": 30.0, "assistant-tools": 30.0,
        "deep-research": 60.0, "embed-rerank": 10.0, "finance-8b": 30.0, "finance-8b-bf16": 30.0}
    # streamed routes: 60 s; unstreamed ones: the whole timeoutSeconds
    assert {r["route"]["retry_policy"]["per_try_idle_timeout"] for r in ec.routes(cfg)
            if r.get("route", {}).get("cluster") == "deep-research"} == {"60s", "900s"}


def test_a_try_idle_timeout_at_most_one_and_a_half_ttft_slos_is_warned_about() -> None:
    """Set explicitly at or below 1.5 x the TTFT SLO: valid, warned about (validate and synth), naming both keys and
    their values; the shipped stacks have no such warning."""
    from infra.stack.checks import try_idle_warnings

    raw = stack_raw("prod")
    raw["models"]["deep-research"]["tryIdleTimeoutSeconds"] = 30
    assert try_idle_warnings(parse(raw, stack="prod").models) == [
        "models.deep-research.tryIdleTimeoutSeconds: 30 s is at most 1.5 x models.deep-research.slo.ttftSeconds "
        "(20 s): a streamed try whose first token comes later is reset and re-run on another replica; set it above "
        "30 s (unset: max(30, 3 x ttftSeconds), at most timeoutSeconds)"]
    raw["models"]["deep-research"]["tryIdleTimeoutSeconds"] = 30.5
    assert try_idle_warnings(parse(raw, stack="prod").models) == []
    for stack in ("dev", "staging", "prod", "onprem"):
        assert try_idle_warnings(stack_config(stack).models) == [], stack
