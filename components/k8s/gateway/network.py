"""Who reaches the gateway and whom it reaches: its NetworkPolicies, AuthorizationPolicies and the DestinationRule
for in-mesh callers (components.k8s.gateway builds the rest).

The namespace has the tenants' posture. NetworkPolicies deny all ingress and egress, then allow: clients
(the load balancer) to the listener port, Prometheus to the stats port and the sidecar's metrics, the
gateway to model servers in the tenant namespaces, DNS, istiod, the Collector (OTLP), and the token
issuers' JWKS ports. An empty AuthorizationPolicy denies everything the sidecar receives; Prometheus's
mesh identity is then allowed on the stats port. The listener port bypasses the sidecar (components.k8s.gateway), so
caller authorization there is the gateway's own (JWT, per-model tenants).

Clients inside the mesh (agents with a sidecar) call `http://aifactory-gateway.<namespace>.svc.cluster.local`
(`service_url`; `aifactory-gateway.<namespace>` also matches, the bare name only from the gateway's namespace).
Their sidecar routes that port by Host (Service port `appProtocol: http`), and under the mesh-wide STRICT mode it
would originate mTLS to any pod carrying the injected `security.istio.io/tlsMode: istio` label, the gateway's
included; the listener port is not captured, so Envoy would read a TLS handshake as HTTP. The DestinationRule
turns TLS off for the Service's port: the caller's sidecar sends plaintext HTTP, as the load balancer does, and
the gateway authorises the caller by its token (istio/istio@1.28.3 pilot/pkg/networking/core/cluster_tls.go
buildUpstreamTLSSettings: a DestinationRule's DISABLE wins over auto mTLS; pilot/pkg/model/push_context.go
BestEffortInferServiceMTLSMode reads only namespace- and mesh-wide PeerAuthentication).
"""

from __future__ import annotations

from typing import Any

from components.k8s import naming
from components.k8s.gateway.envoy.config import GatewayView, jwks_endpoint
from components.k8s.gateway.names import SERVICE_PORT, _meta, _selector, service_host

__all__ = [
    "NAMESPACE_NAME_LABEL",
    "SIDECAR_METRICS_PORTS",
    "ISTIOD_PORT",
    "DNS_PORTS",
    "OTLP_PORTS",
    "network_policies",
    "authorization_policies",
    "destination_rule",
]

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace
SIDECAR_METRICS_PORTS = (15020, 15090)  # istio-proxy's merged metrics and Envoy stats
ISTIOD_PORT = 15012  # xDS and certificates
DNS_PORTS = (("UDP", 53), ("TCP", 53))
OTLP_PORTS = (naming.OTEL_GRPC_PORT,)


def _ns_selector(namespace: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}}


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def _netpol(cfg: GatewayView, name: str, *, ingress: list[dict[str, Any]] | None = None,
            egress: list[dict[str, Any]] | None = None, pods: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"podSelector": {"matchLabels": pods} if pods else {}, "policyTypes": []}
    for kind, rules in (("Ingress", ingress), ("Egress", egress)):
        if rules is not None:
            spec["policyTypes"].append(kind)
            spec[kind.lower()] = rules
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": _meta(cfg, name),
            "spec": spec}


def network_policies(cfg: GatewayView) -> list[dict[str, Any]]:
    """Default deny in the gateway namespace, then each flow the gateway needs, by port."""
    gateway_pods = _selector()
    tenant_namespaces = sorted({cfg.tenant_of(m).namespace for m in cfg.models.values()})
    model_servers = {"podSelector": {"matchLabels": {naming.LABEL_COMPONENT: "model-server"}}}
    out = [
        _netpol(cfg, "default-deny", ingress=[], egress=[]),
        # clients reach the listener through the load balancer (on AWS the NLB's own addresses, health checks too)
        _netpol(cfg, "allow-clients", pods=gateway_pods, ingress=[{"ports": _tcp(naming.ENVOY_LISTENER_PORT)}]),
        _netpol(cfg, "allow-monitoring", pods=gateway_pods, ingress=[{
            "from": [_ns_selector(cfg.observability.namespace)],
            "ports": _tcp(naming.ENVOY_STATS_PORT, *SIDECAR_METRICS_PORTS)}]),
        _netpol(cfg, "allow-dns", egress=[{
            "to": [{**_ns_selector("kube-system"), "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
            "ports": [{"protocol": proto, "port": port} for proto, port in DNS_PORTS]}]),
        _netpol(cfg, "allow-istiod", egress=[{
            "to": [{**_ns_selector(naming.ISTIO_NAMESPACE), "podSelector": {"matchLabels": {"app": "istiod"}}}],
            "ports": _tcp(ISTIOD_PORT)}]),
        _netpol(cfg, "allow-collector", pods=gateway_pods, egress=[{
            "to": [_ns_selector(cfg.observability.namespace)], "ports": _tcp(*OTLP_PORTS)}]),
    ]
    if tenant_namespaces:
        out.append(_netpol(cfg, "allow-models", pods=gateway_pods, egress=[{
            "to": [{**_ns_selector(ns), **model_servers} for ns in tenant_namespaces],
            "ports": _tcp(naming.MODEL_HTTP_PORT)}]))
    jwks_ports = sorted({jwks_endpoint(i)[1] for i in cfg.gateway.auth.issuers})
    if jwks_ports:  # issuers may be anywhere (in the cluster, the VPC or the internet): by port only
        out.append(_netpol(cfg, "allow-token-issuers", pods=gateway_pods, egress=[{"ports": _tcp(*jwks_ports)}]))
    return out


def authorization_policies(cfg: GatewayView) -> list[dict[str, Any]]:
    """allow-nothing for everything the gateway's sidecar receives, then Prometheus on the stats port."""
    prometheus = naming.istio_principal(cfg.observability.namespace, naming.PROMETHEUS_SERVICE_ACCOUNT)

    def policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy", "metadata": _meta(cfg, name),
                "spec": spec}

    return [policy("allow-nothing", {}),
            policy("allow-monitoring", {"selector": {"matchLabels": _selector()}, "action": "ALLOW", "rules": [{
                "from": [{"source": {"principals": [prometheus]}}],
                "to": [{"operation": {"ports": [str(naming.ENVOY_STATS_PORT)]}}]}]})]



def destination_rule(cfg: GatewayView) -> dict[str, Any]:
    """In-mesh callers of the gateway Service send plaintext to its port: the listener is not behind the sidecar."""
    return {"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule", "metadata": _meta(cfg),
            "spec": {"host": service_host(cfg.gateway.namespace), "trafficPolicy": {"portLevelSettings": [
                {"port": {"number": SERVICE_PORT}, "tls": {"mode": "DISABLE"}}]}}}
