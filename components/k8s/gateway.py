"""Gateway: the Envoy inference gateway in front of every model (config: components.k8s.envoy_config).

    Namespace (istio-injection) -> ServiceAccount -> ConfigMap (envoy.yaml) -> Deployment -> Service
    -> metrics Service -> HorizontalPodAutoscaler -> PodDisruptionBudget -> ServiceMonitor (/stats/prometheus)
    -> NetworkPolicies (default deny + allows) -> AuthorizationPolicies (allow-nothing + Prometheus)

The namespace has the tenants' posture. NetworkPolicies deny all ingress and egress, then allow: clients
(the load balancer) to the listener port, Prometheus to the stats port and the sidecar's metrics, the
gateway to model servers in the tenant namespaces, DNS, istiod, the Collector (OTLP), and the token
issuers' JWKS ports. An empty AuthorizationPolicy denies everything the sidecar receives; Prometheus's
mesh identity is then allowed on the stats port. The listener port bypasses the sidecar (see below), so
caller authorization there is the gateway's own (JWT, per-model tenants).

The gateway's pods join the mesh for their outbound calls only: requests to model servers and spans to
the Collector leave through the sidecar with the gateway's mesh identity (what the tenants'
AuthorizationPolicies admit), while client traffic from the load balancer reaches Envoy directly
(the listener port is excluded from inbound capture). On AWS a LoadBalancer Service is an internal
NLB, made by the in-tree service controller (the kit installs no AWS Load Balancer Controller), with
the nodes as targets. Prometheus scrapes the stats port through a headless metrics Service, over
mTLS, so the load balancer carries client traffic only.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming, security
from components.k8s.envoy_config import GATEWAY_MEMORY_LIMIT_GIB, jwks_endpoint, render
from components.k8s.mesh import MESH_SCRAPE_TLS
from components.k8s.namespaces import create_namespace, namespace_labels
from components.k8s.serving import MONITORING_API_VERSION, register_object
from infra.config import PlatformConfig

__all__ = [
    "DEFAULT_ENVOY_IMAGE",
    "CONFIG_MAP",
    "CONFIG_HASH_ANNOTATION",
    "DEFAULT_CPU_TARGET_PERCENT",
    "SERVICE_PORT",
    "METRICS_SERVICE",
    "AWS_LB_ANNOTATIONS",
    "gateway_labels",
    "config_map",
    "deployment",
    "service",
    "metrics_service",
    "autoscaler",
    "disruption_budget",
    "service_monitor",
    "service_account",
    "network_policies",
    "authorization_policies",
    "gateway_objects",
    "Gateway",
]

DEFAULT_ENVOY_IMAGE = "envoyproxy/envoy:v1.40.0"  # the version the tests validate the config with
CONFIG_MAP = "envoy-config"
CONFIG_HASH_ANNOTATION = "aifactory.io/config-sha256"  # a config change rolls the pods
DEFAULT_CPU_TARGET_PERCENT = 60  # HPA target: headroom for bursts while new replicas start
SERVICE_PORT = 80
METRICS_SERVICE = f"{naming.GATEWAY_APP}-metrics"
METRICS_COMPONENT = "gateway-metrics"  # app.kubernetes.io/component of the metrics Service only
CONFIG_DIR = "/etc/envoy"
# The in-tree service controller's annotations (AWS cloud provider): an internal Network Load Balancer.
AWS_LB_ANNOTATIONS = {
    "service.beta.kubernetes.io/aws-load-balancer-type": "nlb",
    "service.beta.kubernetes.io/aws-load-balancer-internal": "true",
}


def gateway_labels() -> dict[str, str]:
    return naming.common_labels(naming.GATEWAY_APP, "gateway")


def _meta(cfg: PlatformConfig, name: str = naming.GATEWAY_APP) -> dict[str, Any]:
    return {"name": name, "namespace": cfg.gateway.namespace, "labels": gateway_labels()}


def _selector() -> dict[str, str]:
    return {"app.kubernetes.io/name": naming.GATEWAY_APP}


def config_map(cfg: PlatformConfig, envoy_yaml: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(cfg, CONFIG_MAP),
            "data": {"envoy.yaml": envoy_yaml}}


def deployment(cfg: PlatformConfig, envoy_yaml: str) -> dict[str, Any]:
    """Rolled when the config changes: the pod template carries the config's hash."""
    config_hash = hashlib.sha256(envoy_yaml.encode()).hexdigest()
    container = {
        "name": "envoy",
        "image": DEFAULT_ENVOY_IMAGE,
        "args": ["--config-path", f"{CONFIG_DIR}/envoy.yaml", "--log-level", "warn",
                 "--drain-time-s", "20", "--drain-strategy", "immediate"],
        "ports": [{"name": "http", "containerPort": naming.ENVOY_LISTENER_PORT, "protocol": "TCP"},
                  {"name": "stats", "containerPort": naming.ENVOY_STATS_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": "stats"}, "periodSeconds": 5,
                           "failureThreshold": 2},
        "livenessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 10, "failureThreshold": 3},
        "resources": security.resources("1", "512Mi", cpu_limit="2",
                                        memory_limit=f"{GATEWAY_MEMORY_LIMIT_GIB}Gi"),
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
        "securityContext": security.container_security_context(),
    }
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(cfg), "spec": {
        "selector": {"matchLabels": _selector()},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
        "template": {
            "metadata": {"labels": gateway_labels(), "annotations": {
                CONFIG_HASH_ANNOTATION: config_hash,
                "traffic.sidecar.istio.io/excludeInboundPorts": str(naming.ENVOY_LISTENER_PORT)}},
            "spec": {
                "serviceAccountName": naming.GATEWAY_SERVICE_ACCOUNT,
                "automountServiceAccountToken": False,
                "securityContext": security.pod_security_context(),
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                               "whenUnsatisfiable": "ScheduleAnyway",
                                               "labelSelector": {"matchLabels": _selector()}}],
                "containers": [container],
                "volumes": [{"name": "config", "configMap": {"name": CONFIG_MAP}}],
                "terminationGracePeriodSeconds": 30,
            },
        },
    }}


def service(cfg: PlatformConfig) -> dict[str, Any]:
    meta = _meta(cfg)
    if cfg.is_aws and cfg.gateway.service_type == "LoadBalancer":
        meta["annotations"] = dict(AWS_LB_ANNOTATIONS)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {
        "type": cfg.gateway.service_type,
        "selector": _selector(),
        "ports": [{"name": "http", "port": SERVICE_PORT, "targetPort": "http", "protocol": "TCP",
                   "appProtocol": "http"}],
    }}


def metrics_service(cfg: PlatformConfig) -> dict[str, Any]:
    """Headless, the stats port only: what the ServiceMonitor scrapes, one target per pod."""
    meta = _meta(cfg, METRICS_SERVICE)
    meta["labels"] = naming.common_labels(naming.GATEWAY_APP, METRICS_COMPONENT)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {
        "clusterIP": "None",
        "selector": _selector(),
        "ports": [{"name": "stats", "port": naming.ENVOY_STATS_PORT, "targetPort": "stats", "protocol": "TCP",
                   "appProtocol": "http"}],
    }}


def autoscaler(cfg: PlatformConfig) -> dict[str, Any]:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": _meta(cfg), "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": naming.GATEWAY_APP},
        "minReplicas": cfg.gateway.min_replicas,
        "maxReplicas": cfg.gateway.max_replicas,
        "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": DEFAULT_CPU_TARGET_PERCENT}}}],
    }}


def disruption_budget(cfg: PlatformConfig) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(cfg),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": _selector()}}}


def service_monitor(cfg: PlatformConfig) -> dict[str, Any]:
    return {"apiVersion": MONITORING_API_VERSION, "kind": "ServiceMonitor", "metadata": _meta(cfg), "spec": {
        "selector": {"matchLabels": metrics_service(cfg)["metadata"]["labels"]},
        "endpoints": [{"port": "stats", "path": "/stats/prometheus", "interval": "15s", **MESH_SCRAPE_TLS}],
    }}


def service_account(cfg: PlatformConfig) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(cfg, naming.GATEWAY_SERVICE_ACCOUNT),
            "automountServiceAccountToken": False}


NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace
SIDECAR_METRICS_PORTS = (15020, 15090)  # istio-proxy's merged metrics and Envoy stats
ISTIOD_PORT = 15012  # xDS and certificates
DNS_PORTS = (("UDP", 53), ("TCP", 53))
OTLP_PORTS = (naming.OTEL_GRPC_PORT,)


def _ns_selector(namespace: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}}


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def _netpol(cfg: PlatformConfig, name: str, *, ingress: list[dict[str, Any]] | None = None,
            egress: list[dict[str, Any]] | None = None, pods: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"podSelector": {"matchLabels": pods} if pods else {}, "policyTypes": []}
    for kind, rules in (("Ingress", ingress), ("Egress", egress)):
        if rules is not None:
            spec["policyTypes"].append(kind)
            spec[kind.lower()] = rules
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": _meta(cfg, name),
            "spec": spec}


def network_policies(cfg: PlatformConfig) -> list[dict[str, Any]]:
    """Default deny in the gateway namespace, then each flow the gateway needs, by port."""
    gateway_pods = _selector()
    tenant_namespaces = sorted({cfg.tenant_of(m).namespace for m in cfg.models.values()})
    model_servers = {"podSelector": {"matchLabels": {naming.LABEL_COMPONENT: "model-server"}}}
    out = [
        _netpol(cfg, "default-deny", ingress=[], egress=[]),
        # clients reach the listener through the load balancer (node ports, client or node source addresses)
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


def authorization_policies(cfg: PlatformConfig) -> list[dict[str, Any]]:
    """allow-nothing for everything the gateway's sidecar receives, then Prometheus on the stats port."""
    prometheus = naming.istio_principal(cfg.observability.namespace, naming.PROMETHEUS_SERVICE_ACCOUNT)

    def policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy", "metadata": _meta(cfg, name),
                "spec": spec}

    return [policy("allow-nothing", {}),
            policy("allow-monitoring", {"selector": {"matchLabels": _selector()}, "action": "ALLOW", "rules": [{
                "from": [{"source": {"principals": [prometheus]}}],
                "to": [{"operation": {"ports": [str(naming.ENVOY_STATS_PORT)]}}]}]})]


def gateway_objects(cfg: PlatformConfig) -> dict[str, dict[str, Any]]:
    """Every object in the gateway namespace by child-resource suffix, in apply order."""
    envoy_yaml = render(cfg)  # once: a large fleet's bootstrap is the slowest thing synth renders
    return {"serviceaccount": service_account(cfg), "configmap": config_map(cfg, envoy_yaml),
            "deployment": deployment(cfg, envoy_yaml),
            "service": service(cfg), "metrics-service": metrics_service(cfg),
            "horizontalpodautoscaler": autoscaler(cfg), "poddisruptionbudget": disruption_budget(cfg),
            "servicemonitor": service_monitor(cfg),
            **{f"networkpolicy-{p['metadata']['name']}": p for p in network_policies(cfg)},
            **{f"authorizationpolicy-{p['metadata']['name']}": p for p in authorization_policies(cfg)}}


class Gateway(pulumi.ComponentResource):
    """The Envoy inference gateway: its namespace and everything in it."""

    def __init__(self, name: str, *, cfg: PlatformConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aifactory:k8s:Gateway", name, None, opts)
        namespace = create_namespace(
            f"{name}-ns", cfg.gateway.namespace,
            labels=namespace_labels(pod_security="restricted", kubernetes_version=cfg.kubernetes_version,
                                    injection=True),
            opts=pulumi.ResourceOptions(parent=self))
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[namespace])
        for suffix, obj in gateway_objects(cfg).items():
            if obj["kind"] == "NetworkPolicy":
                k8s.networking.v1.NetworkPolicy(f"{name}-{suffix}", metadata=obj["metadata"], spec=obj["spec"],
                                                opts=in_ns)
            else:
                register_object(f"{name}-{suffix}", obj, in_ns)
        self.register_outputs({"namespace": cfg.gateway.namespace,
                               "service": f"{naming.GATEWAY_APP}.{cfg.gateway.namespace}.svc.cluster.local",
                               "port": SERVICE_PORT})
