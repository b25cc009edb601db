"""Gateway: Envoy routes, clusters, rate limits and tracing from the config; the gateway's objects."""

from __future__ import annotations

import hashlib

import pytest

from components.k8s import envoy_config as ec
from components.k8s import gateway as gw
from infra.config import PlatformConfig
from infra.synth import read_stack_config, run_program, stack_file
from tests.support.stacks import stack_config

stack = stack_config


def test_workloads_pair_interactive_and_batch_models() -> None:
    ws = {w.name: (w.default.name, w.batch.name if w.batch else None) for w in ec.workloads(stack("prod"))}
    assert ws == {"assistant": ("assistant-fast", "assistant-batch"), "deep-research": ("deep-research", None),
                  "embed-rerank": ("embed-rerank", None), "finance-8b": ("finance-8b", None)}


def test_route_table_order_and_matches() -> None:
    routes = ec.routes(stack("prod"))
    assert [(r["name"], r.get("route", {}).get("cluster")) for r in routes] == [
        ("assistant-batch", "assistant-batch"), ("assistant", "assistant-fast"),
        ("assistant-batch-path", "assistant-batch"), ("assistant-path", "assistant-fast"),
        ("deep-research", "deep-research"), ("deep-research-path", "deep-research"),
        ("embed-rerank", "embed-rerank"), ("embed-rerank-path", "embed-rerank"),
        ("finance-8b", "finance-8b"), ("finance-8b-path", "finance-8b"),
        ("unknown-model", None),
    ]
    assert routes[0]["match"] == {"prefix": "/", "headers": [
        {"name": "x-model", "string_match": {"exact": "assistant"}},
        {"name": "x-priority", "string_match": {"exact": "batch"}}]}
    assert routes[3]["match"] == {"prefix": "/models/assistant/"}
    assert routes[3]["route"]["prefix_rewrite"] == "/"
    assert routes[-1]["direct_response"]["status"] == 404


def test_routes_carry_model_timeouts_retries_and_tenant() -> None:
    by_name = {r["name"]: r for r in ec.routes(stack("prod"))}
    assert by_name["assistant-batch"]["route"]["timeout"] == "600s"
    assert by_name["embed-rerank"]["route"]["timeout"] == "10s"
    assert by_name["finance-8b"]["route"]["timeout"] == "60s"
    retry = by_name["assistant"]["route"]["retry_policy"]
    assert (retry["retry_on"], retry["retriable_status_codes"], retry["num_retries"]) == \
        ("connect-failure,reset,retriable-status-codes", [503], 2)
    assert retry["retry_host_predicate"][0]["name"] == "envoy.retry_host_predicates.previous_hosts"
    assert by_name["finance-8b"]["metadata"] == {"filter_metadata": {"aifactory": {"tenant": "finance"}}}


def test_model_cluster_balancing_breakers_and_ejection() -> None:
    cfg = stack("prod")
    c = ec.model_cluster(cfg, cfg.models["deep-research"])
    assert c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"] == {
        "socket_address": {"address": "deep-research.research.svc.cluster.local", "port_value": 8000}}
    assert (c["type"], c["lb_policy"], c["connect_timeout"]) == ("STRICT_DNS", "LEAST_REQUEST", "2s")
    assert c["circuit_breakers"]["thresholds"] == [{
        "priority": "DEFAULT", "max_connections": 4096, "max_pending_requests": 2048, "max_requests": 4096,
        "retry_budget": {"budget_percent": {"value": 20.0}, "min_retry_concurrency": 16}}]
    assert c["outlier_detection"] == {"consecutive_5xx": 3, "interval": "2s", "base_ejection_time": "30s",
                                      "max_ejection_percent": 50}


def test_one_token_bucket_per_tenant_with_models() -> None:
    f = ec.rate_limit_filter(stack("prod"))["typed_config"]
    assert [(d["entries"], d["token_bucket"]) for d in f["descriptors"]] == [
        ([{"key": "tenant", "value": "assistant"}], {"max_tokens": 800, "tokens_per_fill": 400, "fill_interval": "1s"}),
        ([{"key": "tenant", "value": "finance"}], {"max_tokens": 40, "tokens_per_fill": 20, "fill_interval": "1s"}),
        ([{"key": "tenant", "value": "research"}], {"max_tokens": 100, "tokens_per_fill": 50, "fill_interval": "1s"}),
        ([{"key": "tenant", "value": "search"}], {"max_tokens": 100, "tokens_per_fill": 50, "fill_interval": "1s"}),
    ]
    assert f["always_consume_default_token_bucket"] is False
    assert f["filter_enforced"]["default_value"] == {"numerator": 100, "denominator": "HUNDRED"}


def test_tracing_goes_to_the_collector_at_the_stack_sample_ratio() -> None:
    cfg = stack("prod")
    hcm = ec.gateway_listener(cfg)["filter_chains"][0]["filters"][0]["typed_config"]
    assert hcm["tracing"]["random_sampling"] == {"value": 20.0}
    grpc = hcm["tracing"]["provider"]["typed_config"]["grpc_service"]
    assert grpc["envoy_grpc"] == {"cluster_name": "otel_collector"}
    col = ec.collector_cluster(cfg)
    assert col["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"] == \
        {"address": "otel-collector.monitoring.svc.cluster.local", "port_value": 4317}
    assert set(hcm["access_log"][0]["typed_config"]["log_format"]["json_format"]) >= {
        "request_id", "upstream_service_time_ms", "duration_ms", "upstream_host", "trace_id"}


def test_stats_listener_exposes_only_metrics_and_readiness() -> None:
    listener = ec.stats_listener()
    routes = listener["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]["virtual_hosts"][0]["routes"]
    assert [r["match"] for r in routes] == [{"path": "/stats/prometheus"}, {"path": "/ready"}]
    assert listener["address"]["socket_address"]["port_value"] == 9902


def test_rebind_needs_endpoints_for_every_dns_cluster() -> None:
    with pytest.raises(ValueError, match=r"^rebind: no endpoints for cluster\(s\) chat, otel_collector$"):
        ec.rebind(ec.bootstrap(stack("dev")), listener_port=1, stats_port=2, admin_port=3, endpoints={})


def test_rebind_makes_static_loopback_clusters_and_leaves_the_input_alone() -> None:
    original = ec.bootstrap(stack("dev"))
    out = ec.rebind(original, listener_port=10080, stats_port=10081, admin_port=10082,
                    endpoints={"chat": [("127.0.0.1", 9000), ("127.0.0.1", 9001)],
                               "otel_collector": [("127.0.0.1", 9002)]})
    chat = next(c for c in out["static_resources"]["clusters"] if c["name"] == "chat")
    assert chat["type"] == "STATIC" and "dns_refresh_rate" not in chat
    assert [e["endpoint"]["address"]["socket_address"]["port_value"]
            for e in chat["load_assignment"]["endpoints"][0]["lb_endpoints"]] == [9000, 9001]
    assert [x["address"]["socket_address"] for x in out["static_resources"]["listeners"]] == [
        {"address": "127.0.0.1", "port_value": 10080}, {"address": "127.0.0.1", "port_value": 10081}]
    assert original == ec.bootstrap(stack("dev"))


# --- Kubernetes objects -------------------------------------------------------------------------


def test_aws_load_balancer_is_an_internal_nlb_of_the_in_tree_controller() -> None:
    svc = gw.service(stack("prod"))
    assert svc["spec"]["type"] == "LoadBalancer"
    # no AWS Load Balancer Controller is installed: `external` (and its scheme/target-type keys) would stay pending
    assert svc["metadata"]["annotations"] == {"service.beta.kubernetes.io/aws-load-balancer-type": "nlb",
                                              "service.beta.kubernetes.io/aws-load-balancer-internal": "true"}
    assert svc["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP",
                                     "appProtocol": "http"}]
    assert "annotations" not in gw.service(stack("onprem"))["metadata"]


def test_prometheus_scrapes_the_stats_port_through_a_headless_service_over_mesh_tls() -> None:
    cfg = stack("prod")
    svc, monitor = gw.metrics_service(cfg), gw.service_monitor(cfg)
    assert svc["metadata"] == {"name": "aifactory-gateway-metrics", "namespace": "aifactory-gateway", "labels": {
        "app.kubernetes.io/name": "aifactory-gateway", "app.kubernetes.io/component": "gateway-metrics",
        "app.kubernetes.io/managed-by": "aifactory"}}
    assert svc["spec"] == {"clusterIP": "None", "selector": {"app.kubernetes.io/name": "aifactory-gateway"},
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
    hpa = gw.autoscaler(stack("prod"))
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 12)
    assert gw.disruption_budget(stack("prod"))["spec"]["maxUnavailable"] == 1


def test_configmap_holds_the_rendered_bootstrap_and_pods_roll_on_change() -> None:
    prod, dev = stack("prod"), stack("dev")
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


def test_gateway_component_creates_an_injected_namespace_and_its_objects() -> None:
    def program(cfg: PlatformConfig) -> None:
        gw.Gateway("gateway", cfg=cfg)

    result = run_program("dev", read_stack_config(stack_file("dev")), program)
    comp = next(r for r in result.resources if r.type == "aifactory:k8s:Gateway")
    children = {r.name: r for r in result.resources if r.parent == comp.urn}
    assert sorted(children) == ["gateway-configmap", "gateway-deployment", "gateway-horizontalpodautoscaler",
                                "gateway-metrics-service", "gateway-ns", "gateway-poddisruptionbudget",
                                "gateway-service", "gateway-serviceaccount", "gateway-servicemonitor"]
    assert children["gateway-metrics-service"].inputs["metadata"]["name"] == "aifactory-gateway-metrics"
    ns = children["gateway-ns"].inputs["metadata"]
    assert ns["name"] == "aifactory-gateway" and ns["labels"]["istio-injection"] == "enabled"
    assert children["gateway-serviceaccount"].inputs["metadata"]["name"] == "aifactory-gateway"
    assert children["gateway-deployment"].dependencies == [children["gateway-ns"].urn]
