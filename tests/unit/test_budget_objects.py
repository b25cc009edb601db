"""What the gateway deploys for token budgets (components/k8s/gateway/budget_objects.py, envoy/budgets.py): nothing
without budgets; with them, the service, its config, the Valkey chart's values and the flows the namespace allows."""

from __future__ import annotations

import json
from typing import Any

from components.k8s.gateway.budget_objects import STORE_RELEASE, budget_objects, store_url, store_values
from components.k8s.gateway.component import gateway_objects
from components.k8s.gateway.envoy.budgets import budget_clusters, budget_filters, budget_streams, service_config
from components.k8s.gateway.spec import GatewaySpec, gateway_spec
from components.k8s.storage import cache_storage_class_name
from infra.component_args import gateway_args
from infra.config import PlatformConfig, parse
from tests.support.stacks import stack_raw

IMAGE = "registry.example/aifactory-budgets:1"


def _cfg(budget: dict[str, Any] | None = None, **service: Any) -> PlatformConfig:
    raw = stack_raw("dev")
    if budget is not None:
        raw["tenants"]["demo"]["tokenBudget"] = budget
        raw.setdefault("gateway", {})["budgetService"] = {"image": IMAGE, **service}
    return parse(raw, stack="dev")


def _spec(cfg: PlatformConfig) -> GatewaySpec:
    """What the Gateway component builds from: the stack through its args (the store's class comes from there)."""
    return gateway_spec("gateway", gateway_args(cfg))


def test_nothing_is_deployed_without_budgets() -> None:
    cfg = _cfg()
    assert budget_objects(cfg) == {} and budget_filters(cfg) == [] and budget_clusters(cfg) == []
    assert not [k for k in gateway_objects(cfg) if k.startswith("budgets-") or "budget-store" in k]


def test_the_service_reads_its_budgets_and_reaches_the_store() -> None:
    cfg = _cfg({"perMinute": 1000, "outputWeight": 2})
    objs = budget_objects(cfg)
    dep = objs["budgets-deployment"]["spec"]["template"]["spec"]
    container = dep["containers"][0]
    assert container["image"] == IMAGE
    assert container["args"] == ["--config", "/etc/aifactory-budgets/budgets.json", "--listen", "0.0.0.0:9000",
                                 "--redis-url", "redis://aifactory-budgets-valkey.aifactory-gateway.svc.cluster.local"
                                 ":6379/0", "--metrics-port", "9090", "--shutdown-grace-seconds", "60"]
    assert store_url(cfg).startswith(f"redis://{STORE_RELEASE}.")
    assert json.loads(objs["budgets-configmap"]["data"]["budgets.json"]) == json.loads(service_config(cfg)) == {
        "tenants": {"demo": {"limits": {"perMinute": 1000}, "outputWeight": 2.0, "defaultMaxTokens": 4096,
                             "promptBytesPerToken": 1.0, "onStoreFailure": "open"}},
        "workloads": {}, "models": {"chat": "chat"}, "storeTimeoutSeconds": 0.5,
        # a reservation's deadline: the workload's longest route timeout (its model's timeoutSeconds, 60 s by default)
        # plus 16 s: admission's answer (1), the metering stream's deferred close (5), the settlement's drain (8), the
        # replicas' clocks apart (2)
        "requestSeconds": {"chat": 60.0}, "sweepMarginSeconds": 16, "sweepIntervalSeconds": 10.0}
    # the service's pods are not the gateway's: the gateway Service must not select them
    assert objs["budgets-deployment"]["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "aifactory-budgets"}


def test_only_the_gateway_reaches_the_service_and_only_the_service_reaches_the_store() -> None:
    objs = budget_objects(_cfg({"perDay": 10}))
    service = objs["networkpolicy-allow-budgets"]["spec"]
    assert service["ingress"][0] == {"from": [{"podSelector": {"matchLabels": {
        "app.kubernetes.io/name": "aifactory-gateway"}}}], "ports": [{"protocol": "TCP", "port": 9000}]}
    store = objs["authorizationpolicy-allow-budget-store"]["spec"]["rules"]
    assert [r["from"][0]["source"]["principals"] for r in store] == [
        ["cluster.local/ns/aifactory-gateway/sa/aifactory-budgets"],
        ["cluster.local/ns/aifactory-gateway/sa/aifactory-budgets-valkey"],
        ["cluster.local/ns/monitoring/sa/prometheus"]]
    assert [r["to"][0]["operation"]["ports"] for r in store] == [["6379"], ["6379"], ["9121"]]


def test_the_store_keeps_an_append_only_file_on_a_volume() -> None:
    """valkey-io/valkey-helm@valkey-0.11.0 valkey/values.yaml: dataStorage for the standalone primary, replica.* for
    a primary with replicas (each with its claim)."""
    cfg = _cfg({"perDay": 10})
    sc = cache_storage_class_name(cfg)
    assert sc  # the stack's class for volumes: the store's claims are not left to a default the cluster may lack
    standalone = store_values(_spec(cfg))
    assert standalone["valkeyConfig"] == ("appendonly yes\nappendfsync everysec\nmaxmemory 768mb\n"
                                          "maxmemory-policy noeviction\n")
    assert standalone["dataStorage"] == {"enabled": True, "requestedSize": "8Gi", "className": sc}
    assert "replica" not in standalone
    replicated = store_values(_spec(_cfg({"perDay": 10}, storeReplicas=2, storeVolumeGiB=20)))
    assert replicated["replica"] == {"enabled": True, "replicas": 2,
                                     "persistence": {"size": "20Gi", "storageClass": sc}}
    assert replicated["fullnameOverride"] == STORE_RELEASE


def test_the_stores_memory_is_bounded_below_its_pods_limit_and_never_evicts() -> None:
    """maxmemory (Valkey's "mb": MiB) a quarter below the container's memory limit, for what it does not bound (the
    append-only file's rewrite fork, replica output buffers), and noeviction: a window's counter or a reservation's
    record is never evicted, writes past the bound are refused."""
    values = store_values(_spec(_cfg({"perDay": 10})))
    assert values["resources"]["limits"]["memory"] == "1Gi"
    lines = values["valkeyConfig"].splitlines()
    assert lines[2:] == ["maxmemory 768mb", "maxmemory-policy noeviction"]
    bound = int(lines[2].removeprefix("maxmemory ").removesuffix("mb")) * 2**20
    assert 2**30 - bound == 256 * 2**20  # the limit, 1Gi, less the bound: the headroom


def test_the_stores_exporter_is_scraped_through_the_mesh() -> None:
    """The chart's exporter sidecar (valkey-io/valkey-helm@valkey-0.11.0 valkey/values.yaml `metrics.*`: image
    ghcr.io/oliver006/redis_exporter:v1.79.0, port 9121; templates/metrics-svc.yaml: Service <release>-metrics, port
    "metrics", labelled with the selector labels and app.kubernetes.io/component: metrics). The chart's own
    ServiceMonitor (templates/servicemonitor.yaml) has no scheme or tlsConfig: it stays off, and the kit's scrapes
    the Service's port with the mesh's certificate, as Prometheus may reach 9121 of the store pods and nothing else."""
    cfg = _cfg({"perDay": 10})
    assert store_values(_spec(cfg))["metrics"] == {
        "enabled": True,
        "exporter": {"port": 9121,
                     "image": {"registry": "ghcr.io", "repository": "oliver006/redis_exporter", "tag": "v1.79.0"},
                     "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                                   "limits": {"cpu": "50m", "memory": "128Mi"}},
                     "securityContext": {"allowPrivilegeEscalation": False, "privileged": False,
                                         "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                                         "capabilities": {"drop": ["ALL"]},
                                         "seccompProfile": {"type": "RuntimeDefault"}}},
        "service": {"enabled": True, "ports": {"http": 9121}, "appProtocol": "http"},
        "serviceMonitor": {"enabled": False}, "podMonitor": {"enabled": False}}
    objs = budget_objects(cfg)
    assert objs["budget-store-servicemonitor"] == {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": {"name": "aifactory-budgets-valkey-metrics", "namespace": "aifactory-gateway",
                     "labels": objs["budgets-service"]["metadata"]["labels"]},
        "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "valkey",
                                              "app.kubernetes.io/instance": "aifactory-budgets-valkey",
                                              "app.kubernetes.io/component": "metrics"}},
                 "endpoints": [{"port": "metrics", "interval": "15s", "scheme": "https", "tlsConfig": {
                     "caFile": "/etc/prom-certs/root-cert.pem", "certFile": "/etc/prom-certs/cert-chain.pem",
                     "keyFile": "/etc/prom-certs/key.pem", "insecureSkipVerify": True}}]}}
    ingress = objs["networkpolicy-allow-budget-store"]["spec"]["ingress"]
    assert ingress[1] == {"from": [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "monitoring"}}}], "ports": [{"protocol": "TCP", "port": 9121}]}
    assert len(ingress) == 2


def test_fail_closed_tenants_get_a_filter_of_their_own() -> None:
    raw = stack_raw("dev")
    raw["tenants"]["demo"]["tokenBudget"] = {"perDay": 10, "onStoreFailure": "closed"}
    raw["tenants"]["other"] = {"gpuQuota": 0, "tokenBudget": {"perDay": 10}}
    raw.setdefault("gateway", {})["budgetService"] = {"image": IMAGE}
    filters = budget_filters(parse(raw, stack="dev"))
    assert [f["name"] for f in filters] == ["aifactory.budgets", "aifactory.budgets_closed", "aifactory.budgets_meter"]
    open_, closed, _ = (f["typed_config"] for f in filters)
    assert (open_["extension_config"]["typed_config"]["failure_mode_allow"],
            closed["extension_config"]["typed_config"]["failure_mode_allow"]) == (True, False)
    skip_open = open_["xds_matcher"]["matcher_list"]["matchers"][0]["predicate"]
    assert skip_open["single_predicate"]["value_match"]["safe_regex"]["regex"] == "^(?:demo)$"
    assert "not_matcher" in closed["xds_matcher"]["matcher_list"]["matchers"][0]["predicate"]


def test_the_service_reads_the_header_the_gateway_sets() -> None:
    """The service's image carries components/k8s/gateway/budgets/ alone, so it names the tenant header itself."""
    from components.k8s.gateway.budgets import names
    from components.k8s.gateway.envoy.base import TENANT_HEADER
    assert names.TENANT_HEADER == TENANT_HEADER


def test_a_terminating_service_pod_serves_its_streams_to_their_end() -> None:
    """An ext_proc stream lives as long as its request: on SIGTERM the service lets its streams run for the longest
    request a route allows (dev's chat: timeoutSeconds 60), after a preStop past the gateway's DNS refresh (5 s +
    5 s), and the pod's grace (and its classic Istio sidecar's drain) covers both plus 10 s for the settlements."""
    template = budget_objects(_cfg({"perDay": 10}))["budgets-deployment"]["spec"]["template"]
    container = template["spec"]["containers"][0]
    assert container["args"][-2:] == ["--shutdown-grace-seconds", "60"]
    assert container["lifecycle"] == {"preStop": {"sleep": {"seconds": 10}}}
    assert template["spec"]["terminationGracePeriodSeconds"] == 10 + 60 + 10
    assert template["metadata"]["annotations"]["proxy.istio.io/config"] == '{"terminationDrainDuration": "80s"}'


def test_a_terminating_service_pod_stays_scraped_while_it_drains() -> None:
    """The ServiceMonitor scrapes a headless metrics Service that publishes not-ready addresses: the Endpoints
    controller leaves a pod with a deletionTimestamp out of a Service's endpoints unless it does
    (kubernetes/kubernetes@v1.34.0 staging/src/k8s.io/endpointslice/util/controller_utils.go ShouldPodBeInEndpoints),
    and TokenBudgetDrainCutsStreams reads a terminating pod's streams in flight. The gRPC Service keeps the default
    (a terminating pod takes no new streams through it) and no metrics port, so each pod is scraped once."""
    objs = budget_objects(_cfg({"perDay": 10}))
    svc, monitor = objs["budgets-metrics-service"], objs["budgets-servicemonitor"]
    assert svc["metadata"] == {"name": "aifactory-budgets-metrics", "namespace": "aifactory-gateway", "labels": {
        "app.kubernetes.io/name": "aifactory-budgets", "app.kubernetes.io/component": "token-budgets-metrics",
        "app.kubernetes.io/managed-by": "aifactory"}}
    assert svc["spec"] == {"clusterIP": "None", "publishNotReadyAddresses": True,
                           "selector": {"app.kubernetes.io/name": "aifactory-budgets"},
                           "ports": [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP",
                                      "appProtocol": "http"}]}
    assert monitor["spec"]["selector"] == {"matchLabels": svc["metadata"]["labels"]}
    # its job label stays the service's name (ServiceMonitorSpec.JobLabel: the value of that label of the Service;
    # prometheus-operator/prometheus-operator pkg/apis/monitoring/v1/servicemonitor_types.go)
    assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"
    assert svc["metadata"]["labels"]["app.kubernetes.io/name"] == "aifactory-budgets"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    grpc = objs["budgets-service"]["spec"]
    assert "publishNotReadyAddresses" not in grpc
    assert [p["name"] for p in grpc["ports"]] == ["grpc"]
    assert objs["budgets-service"]["metadata"]["labels"]["app.kubernetes.io/component"] == "token-budgets"


def test_admission_waits_for_the_service_and_metering_never_does() -> None:
    """Admission (the 429 decision) is synchronous on the request side only, one message per request: the body, with
    the route, path and tenant as attributes (CEL expressions, sent with the request's first message); the response
    goes to a second filter in observability mode (envoyproxy/envoy@v1.40.0
    api/envoy/extensions/filters/http/ext_proc/v3/ext_proc.proto: ExternalProcessor.request_attributes,
    observability_mode, metadata_options.forwarding_namespaces), which gets the reservation from admission's dynamic
    metadata with the request's body: the body passes the metering filter only once admission (BUFFERED, before it)
    has answered, so every admitted request's metering stream opens before the engine is reached (the request's
    headers would not do: with admission's header mode SKIP they pass on before its answer)."""
    admit, meter = (f["typed_config"] for f in budget_filters(_cfg({"perDay": 10})))
    assert admit["processing_mode"] == {"request_header_mode": "SKIP", "request_body_mode": "BUFFERED",
                                        "response_header_mode": "SKIP", "response_body_mode": "NONE",
                                        "request_trailer_mode": "SKIP", "response_trailer_mode": "SKIP"}
    assert (admit["failure_mode_allow"], admit["message_timeout"], "observability_mode" in admit) == (True, "1s", False)
    assert admit["metadata_options"] == {"receiving_namespaces": {"untyped": ["aifactory.budget"]}}
    assert admit["request_attributes"] == ["xds.route_name", "request.path", "request.headers['x-aifactory-tenant']"]
    assert "allow_mode_override" not in admit
    assert meter["processing_mode"] == {"request_header_mode": "SKIP", "request_body_mode": "STREAMED",
                                        "response_header_mode": "SEND", "response_body_mode": "STREAMED",
                                        "request_trailer_mode": "SKIP", "response_trailer_mode": "SKIP"}
    assert (meter["observability_mode"], meter["failure_mode_allow"]) == (True, True)
    # each filter's stats apart (http.<prefix>.ext_proc.<stat_prefix>.*): the alerts read them
    assert (admit["stat_prefix"], meter["stat_prefix"]) == ("budgets", "budgets_meter")
    assert meter["metadata_options"] == {"forwarding_namespaces": {"untyped": ["aifactory.budget"]}}


def test_the_service_cluster_holds_two_streams_per_request_the_models_can_have_in_flight() -> None:
    """Envoy's default breakers (1,024 requests per cluster, envoyproxy/envoy@v1.40.0
    api/envoy/config/cluster/v3/circuit_breaker.proto) would overflow before the model's 4,096: the cluster takes a
    meter stream and an admission stream for each (envoy/budgets.py, `budget_streams`)."""
    cfg = _cfg({"perMinute": 1000})
    [cluster] = budget_clusters(cfg)
    assert cluster["circuit_breakers"] == {"thresholds": [{
        "priority": "DEFAULT", "max_connections": 8192, "max_pending_requests": 8192, "max_requests": 8192,
        "track_remaining": True}]}
    assert cluster["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"][
        "explicit_http_config"] == {"http2_protocol_options": {"max_concurrent_streams": 8192}}
    raw = stack_raw("dev")
    raw["tenants"]["demo"]["tokenBudget"] = {"perMinute": 1000}
    raw.setdefault("gateway", {})["budgetService"] = {"image": IMAGE}
    raw["gateway"]["circuitBreakers"] = {"maxRequests": 100}
    raw["models"]["other"] = {**raw["models"]["chat"]}
    raw["tenants"]["demo"]["gpuQuota"] = 4
    assert budget_streams(parse(raw, stack="dev")) == 2 * (100 + 100)
