"""Every request the gateway sends through its Istio sidecar names its destination Service (issue #28, blocker 1).

The gateway's sidecar routes a model's HTTP port by Host alone (istio/istio@1.28.3 pilot/pkg/networking/core:
listener.go, httproute.go); a Host naming no Service is passed through in plaintext and reset by the model's STRICT
sidecar (cluster_builder.go, filterchain_options.go). Structural checks over every shipped stack and a stack with
variants; tests/artifacts/test_envoy_mesh_live.py runs the same config in the real Envoy against the modelled
sidecar.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from components.k8s import mesh, serving
from components.k8s.gateway import component as gw
from components.k8s.gateway.envoy import config as ec
from components.k8s.gateway.envoy.replicas import replicas_host
from components.k8s.naming import variant_of_member
from infra.config import PlatformConfig, parse
from tests.artifacts.test_envoy_mesh_live import RAW as VARIANTS_RAW
from tests.support.istio_sidecar import routes_to_service, service_domains
from tests.support.stacks import SHIPPED_STACKS, stack_config


def _configs() -> list[tuple[str, PlatformConfig]]:
    return [*((s, stack_config(s)) for s in SHIPPED_STACKS), ("variants", parse(VARIANTS_RAW, stack="variants"))]


CONFIGS = _configs()


def _routes(listener: dict[str, Any]) -> list[dict[str, Any]]:
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    return [r for vh in hcm["route_config"]["virtual_hosts"] for r in vh["routes"]]


def _address(cluster: dict[str, Any]) -> str:
    return str(cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
               ["socket_address"]["address"])


def _model_address(cfg: PlatformConfig, clusters: dict[str, dict[str, Any]], model: str) -> str:
    """The Service of `model` whose pods its cluster reaches: the cluster resolves the model Service's absolute name
    (its ready replicas; for a multi-node model the leaders it selects: components.k8s.gateway.envoy.replicas); the
    Host the gateway's sidecar routes by is the same name without the trailing dot."""
    m = cfg.models[variant_of_member(model)]  # a variant's last resort resolves the same name
    assert _address(clusters[model]) == replicas_host(cfg, m) == f"{ec.model_host(cfg, m)}."
    return ec.model_host(cfg, m)


def _gateway_sidecar_routes(cfg: PlatformConfig, model: str, host: str) -> bool:
    m = cfg.models[model]
    return routes_to_service(host, service_domains(m.name, cfg.tenant_of(m).namespace,
                                                   caller_namespace=cfg.gateway.namespace, headless=True))


@pytest.mark.parametrize(("stack", "cfg"), CONFIGS, ids=[s for s, _ in CONFIGS])
def test_every_try_to_a_model_carries_its_services_name(stack: str, cfg: PlatformConfig) -> None:
    boot = ec.bootstrap(cfg)
    clusters = {c["name"]: c for c in boot["static_resources"]["clusters"]}
    listeners = {lst["name"]: lst for lst in boot["static_resources"]["listeners"]}
    checked = set()
    for route in _routes(listeners["gateway"]):
        if "route" not in route:
            continue  # a direct response (401, 404, 413)
        target = route["route"]["cluster"]
        if target in cfg.models:  # straight to the model's cluster: this route sets the Host
            host = route["route"]["host_rewrite_literal"]
            assert host == _model_address(cfg, clusters, target), route["name"]
            assert _gateway_sidecar_routes(cfg, target, host), route["name"]
            checked.add(target)
            continue
        members = clusters[target]["cluster_type"]["typed_config"]["clusters"]
        # a variant decision, or a variant named by its key (`<variant>__direct`): an aggregate cluster over the
        # variants' gates (and their last resorts'); each gate sets its variant's Host
        assert "host_rewrite_literal" not in route["route"], route["name"]
        for gate in members:
            (gate_route,) = _routes(listeners[gate])
            assert gate_route["route"]["host_rewrite_literal"] == _model_address(
                cfg, clusters, gate_route["route"]["cluster"]), gate
            variant = variant_of_member(gate)
            assert _gateway_sidecar_routes(cfg, variant, gate_route["route"]["host_rewrite_literal"]), gate
            checked.add(variant)
    assert checked == set(cfg.models)  # every model is reached, and only this way


@pytest.mark.parametrize(("stack", "cfg"), CONFIGS, ids=[s for s, _ in CONFIGS])
def test_every_health_check_names_the_models_service(stack: str, cfg: PlatformConfig) -> None:
    """Envoy's HttpHealthCheck.host defaults to the cluster's name (envoyproxy/envoy@v1.40.0
    api/envoy/config/core/v3/health_check.proto), which is no Service name: the sidecar would pass it through."""
    boot = ec.bootstrap(cfg)
    clusters = [c for c in boot["static_resources"]["clusters"] if c.get("health_checks")]
    # each model's cluster; gates, aggregates, collector: not checked
    of = {m: m for m in cfg.models}
    assert sorted(c["name"] for c in clusters) == sorted(of)
    by_name = {c["name"]: c for c in boot["static_resources"]["clusters"]}
    for c in clusters:
        model = of[c["name"]]
        hosts = [hc["http_health_check"]["host"] for hc in c["health_checks"]]
        assert hosts == [_model_address(cfg, by_name, model)], c["name"]
        assert _gateway_sidecar_routes(cfg, model, hosts[0])
        assert not _gateway_sidecar_routes(cfg, model, c["name"])  # the default would not pass


def test_spans_name_the_collectors_service() -> None:
    cfg = stack_config("prod")
    tracing = ec.gateway_listener(cfg)["filter_chains"][0]["filters"][0]["typed_config"]["tracing"]
    grpc = tracing["provider"]["typed_config"]["grpc_service"]["envoy_grpc"]
    assert grpc["authority"] == _address(ec.collector_cluster(cfg)) == "otel-collector.monitoring.svc.cluster.local"


def test_in_mesh_clients_reach_the_gateway_listener_in_plaintext() -> None:
    """The listener port bypasses the gateway's sidecar, so an in-mesh caller's sidecar must not originate mTLS to it
    (under STRICT it would, to any pod labelled security.istio.io/tlsMode: istio: istio/istio@1.28.3
    pilot/pkg/networking/core/cluster_tls.go); a DestinationRule's DISABLE wins over auto mTLS."""
    cfg = stack_config("prod")
    objects = gw.gateway_objects(cfg)
    ns = cfg.gateway.namespace
    (port,) = objects["service"]["spec"]["ports"]
    assert (port["port"], port["appProtocol"]) == (gw.SERVICE_PORT, "http")  # routed by Host: see below
    annotations = objects["deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["traffic.sidecar.istio.io/excludeInboundPorts"] == "8080"  # the listener (targetPort http)
    dr = objects["destinationrule"]
    assert (dr["apiVersion"], dr["kind"], dr["metadata"]["namespace"]) == ("networking.istio.io/v1", "DestinationRule",
                                                                           ns)
    assert dr["spec"] == {"host": "aifactory-gateway.aifactory-gateway.svc.cluster.local", "trafficPolicy": {
        "portLevelSettings": [{"port": {"number": 80}, "tls": {"mode": "DISABLE"}}]}}
    # the URL in-cluster clients are told to use names the Service for a sidecar in any namespace
    host = urlsplit(gw.service_url(ns)).netloc
    for caller in ("research", ns):
        assert routes_to_service(host, service_domains("aifactory-gateway", ns, caller_namespace=caller,
                                                       headless=False)), caller
    assert dr["spec"]["host"] == gw.service_host(ns) == host.removesuffix(":80")


@pytest.mark.parametrize(("stack", "cfg"), CONFIGS, ids=[s for s, _ in CONFIGS])
def test_the_gateways_sidecar_adds_no_retries_and_connects_within_the_gateways_timeout(
        stack: str, cfg: PlatformConfig) -> None:
    """Per model Service, in the gateway's namespace only: a VirtualService whose route has `retries.attempts: 0`
    (a route without one gets Istio's default, 2 retries to the same pod of a headless Service: istio/istio@1.28.3
    pilot/pkg/networking/core/route/route.go, route/retry/retry.go DefaultPolicy; `attempts: 0` gives no retry
    policy, ConvertPolicy), and a DestinationRule whose connect timeout is the gateway cluster's (Istio's default is
    10 s: pkg/config/mesh/mesh.go). No port: each of the Service's ports keeps its own cluster (GetDestinationCluster);
    no `tls`: auto mTLS stays (cluster_tls.go)."""
    objects = gw.gateway_objects(cfg)
    ns = cfg.gateway.namespace
    clusters = {c["name"]: c for c in ec.bootstrap(cfg)["static_resources"]["clusters"]}
    vs = {k: o for k, o in objects.items() if o["kind"] == "VirtualService"}
    drs = {k: o for k, o in objects.items() if o["kind"] == "DestinationRule" and k != "destinationrule"}
    assert sorted(vs) == [f"virtualservice-model-{m}" for m in sorted(cfg.models)]
    assert sorted(drs) == [f"destinationrule-model-{m}" for m in sorted(cfg.models)]
    for name, model in cfg.models.items():
        host = f"{name}.{cfg.tenant_of(model).namespace}.svc.cluster.local"
        assert host == _model_address(cfg, clusters, name)  # the Service whose pods the gateway resolves
        v, d = vs[f"virtualservice-model-{name}"], drs[f"destinationrule-model-{name}"]
        assert (v["apiVersion"], v["metadata"]["name"], v["metadata"]["namespace"]) == (
            "networking.istio.io/v1", f"model-{name}", ns)
        assert v["spec"] == {"hosts": [host], "exportTo": ["."],
                             "http": [{"route": [{"destination": {"host": host}}], "retries": {"attempts": 0}}]}
        assert (d["apiVersion"], d["metadata"]["name"], d["metadata"]["namespace"]) == (
            "networking.istio.io/v1", f"model-{name}", ns)
        assert d["spec"] == {"host": host, "exportTo": ["."],
                             "trafficPolicy": {"connectionPool": {"tcp": {"connectTimeout": "2s"}}}}
        assert clusters[name]["connect_timeout"] == "2s"  # the gateway's own (gateway.connectTimeoutSeconds)


def test_the_sidecars_connect_timeout_follows_the_gateways() -> None:
    raw = {**VARIANTS_RAW, "gateway": {**VARIANTS_RAW.get("gateway", {}), "connectTimeoutSeconds": 1.5}}
    cfg = parse(raw, stack="variants")
    timeouts = {o["spec"]["trafficPolicy"]["connectionPool"]["tcp"]["connectTimeout"]
                for k, o in gw.gateway_objects(cfg).items() if k.startswith("destinationrule-model-")}
    cluster_timeouts = {c["connect_timeout"] for c in ec.bootstrap(cfg)["static_resources"]["clusters"]
                        if c["name"] in cfg.models}
    assert timeouts == cluster_timeouts == {"1.500s"}


LINUX_EPHEMERAL_PORTS = range(32768, 61000)  # net.ipv4.ip_local_port_range's default, 32768-60999


@pytest.mark.parametrize(("stack", "cfg"), CONFIGS[:len(SHIPPED_STACKS)], ids=list(SHIPPED_STACKS))
def test_multi_node_peers_ephemeral_ports_pass_through_the_senders_sidecar(stack: str, cfg: PlatformConfig) -> None:
    """NCCL, gloo and torch's store listen on ephemeral ports, which excludeOutboundPorts cannot list (single ports
    only: istio/istio@1.28.3 pkg/kube/inject/validate.go parsePorts). The sender's sidecar TCP-proxies them to
    PassthroughCluster only under ALLOW_ANY (listener_builder.go buildOutboundCatchAllNetworkFilterChains; the kit
    pins it), the receiver captures only the HTTP port, and no Service the kit makes gives sidecars an HTTP listener
    on a port in the ephemeral range (listener.go: 0.0.0.0:<port> for every HTTP Service port)."""
    assert mesh.istiod_values(cfg)["meshConfig"]["outboundTrafficPolicy"] == {"mode": "ALLOW_ANY"}
    multi = [m for m in cfg.models.values() if m.multi_node]
    for m in multi:
        lws = serving.workload(cfg, m)["spec"]["leaderWorkerTemplate"]
        for role in ("leaderTemplate", "workerTemplate"):
            annotations = lws[role]["metadata"]["annotations"]
            assert annotations["traffic.sidecar.istio.io/includeInboundPorts"] == "8000", (m.name, role)
            excluded = {int(p) for p in annotations["traffic.sidecar.istio.io/excludeOutboundPorts"].split(",")}
            assert excluded == set(serving.multi_node_ports()), (m.name, role)
    services = [serving.service(cfg, m) for m in cfg.models.values()]
    services += [gw.service(cfg), gw.metrics_service(cfg)]
    http_ports = [(s["metadata"]["name"], p["port"]) for s in services for p in s["spec"]["ports"]
                  if p.get("appProtocol") in ("http", "grpc")]
    assert http_ports and [hp for hp in http_ports if hp[1] in LINUX_EPHEMERAL_PORTS] == []
    assert all(p not in LINUX_EPHEMERAL_PORTS for p in serving.multi_node_ports())
