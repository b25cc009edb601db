"""The token budget service's objects in the gateway namespace, and the values of its store's chart (the official
Valkey chart, components.k8s.versions.VALKEY): only when a tenant or workload declares a budget.

    ConfigMap aifactory-budgets (budgets.json) -> ServiceAccount -> Deployment (the kit's image, gRPC 9000,
    metrics 9090) -> Service (gRPC) -> metrics Service (headless) -> PodDisruptionBudget -> ServiceMonitor ->
    NetworkPolicies and AuthorizationPolicies: the gateway to the service, the service to Valkey, Valkey to its
    replicas, Prometheus to the service's metrics

The gateway namespace denies everything (components.k8s.gateway.network); each flow here is allowed by port and by
workload, in the NetworkPolicies and, since the namespace is in the mesh, in the AuthorizationPolicies (by the
callers' service accounts).
"""

from __future__ import annotations

import hashlib
from typing import Any

from components.k8s import naming, security
from components.k8s.gateway.budgets.names import SETTLE_DRAIN_SECONDS
from components.k8s.gateway.envoy.base import DEFAULT_DNS_REFRESH_SECONDS, GatewayView, longest_request_seconds
from components.k8s.gateway.envoy.budgets import (
    BUDGETS_GRPC_PORT,
    BUDGETS_METRICS_PORT,
    BUDGETS_SERVICE,
    any_budget,
    service_config,
)
from components.k8s.gateway.names import CONFIG_HASH_ANNOTATION, _selector
from components.k8s.mesh import MESH_SCRAPE_TLS
from components.k8s.serving import MONITORING_API_VERSION
from components.k8s.serving.lifecycle import PRESTOP_MARGIN_SECONDS, proxy_drain_annotations
from telemetry.names import BUDGET

__all__ = ["STORE_RELEASE", "STORE_PORT", "STORE_HOST", "budget_objects", "store_values", "store_config",
           "STORE_MEMORY_LIMIT_MIB", "STORE_MAXMEMORY_MIB", "store_url",
           "PRESTOP_SECONDS", "shutdown_grace_seconds", "termination_grace_seconds", "STORE_METRICS_PORT",
           "STORE_EXPORTER_IMAGE", "STORE_METRICS_SERVICE"]

STORE_RELEASE = BUDGET.STORE_RELEASE  # the Helm release; the chart names its Service and pods after it
STORE_PORT = 6379
CONFIG_DIR = "/etc/aifactory-budgets"
METRICS_SERVICE = f"{BUDGETS_SERVICE}-metrics"  # headless, scraped by the ServiceMonitor
METRICS_COMPONENT = "token-budgets-metrics"
STORE_HOST = f"{STORE_RELEASE}"  # the chart's read-write Service (the primary), in the gateway namespace


def _labels() -> dict[str, str]:
    return naming.common_labels(BUDGETS_SERVICE, "token-budgets")


def _meta(cfg: GatewayView, name: str = BUDGETS_SERVICE) -> dict[str, Any]:
    return {"name": name, "namespace": cfg.gateway.namespace, "labels": _labels()}


def _pods() -> dict[str, str]:
    return {"app.kubernetes.io/name": BUDGETS_SERVICE}


def _store_pods() -> dict[str, str]:
    # the chart's selector labels (valkey-io/valkey-helm valkey-0.11.0 valkey/templates/_helpers.tpl, selectorLabels)
    return {"app.kubernetes.io/name": "valkey", "app.kubernetes.io/instance": STORE_RELEASE}


def store_url(cfg: GatewayView) -> str:
    return f"redis://{STORE_HOST}.{cfg.gateway.namespace}.svc.cluster.local:{STORE_PORT}/0"


# Each Valkey pod's memory limit, and the dataset's bound below it (maxmemory, MiB: Valkey's "mb" is 1024 x 1024
# bytes). The 256 MiB between them are for what maxmemory does not bound: the pages the append-only file's rewrite
# (a fork) copies as writes go on, the replicas' output buffers (not counted against maxmemory: valkey-io/valkey
# valkey.conf, MEMORY MANAGEMENT), client buffers and the allocator's fragmentation. With noeviction, a write past
# maxmemory is refused (an OOM error reply) and nothing is evicted: the budget service's store breaker counts those
# replies as the store's failure (service.STORE_WIDE_REPLIES), and each budget answers as its onStoreFailure says.
STORE_MEMORY_LIMIT_MIB = 1024
STORE_MAXMEMORY_MIB = 768


def store_config() -> str:
    """valkey.conf lines for every store pod: an append-only file fsynced every second, a memory bound that refuses
    writes past it rather than evicting a window's counter or a reservation's record."""
    return (f"appendonly yes\nappendfsync everysec\nmaxmemory {STORE_MAXMEMORY_MIB}mb\n"
            "maxmemory-policy noeviction\n")


# The chart's metrics exporter (valkey-io/valkey-helm valkey-0.11.0 valkey/values.yaml `metrics.*`): a redis_exporter
# sidecar in every store pod, reading its own Valkey over localhost:6379 (the exporter's default address), listening
# on 9121, behind the chart's Service <release>-metrics (templates/metrics-svc.yaml, port "metrics"). The chart's
# ServiceMonitor (templates/servicemonitor.yaml) renders no scheme or tlsConfig, so it cannot scrape through the
# store pods' STRICT sidecars: it stays off and the kit renders its own, with MESH_SCRAPE_TLS. The image is the
# chart's default, pinned as the chart pins it.
STORE_METRICS_PORT = 9121
STORE_EXPORTER_IMAGE = {"registry": "ghcr.io", "repository": "oliver006/redis_exporter", "tag": "v1.79.0"}
STORE_METRICS_SERVICE = f"{STORE_RELEASE}-metrics"


def _store_metrics_values() -> dict[str, Any]:
    return {"enabled": True,
            "exporter": {"port": STORE_METRICS_PORT, "image": dict(STORE_EXPORTER_IMAGE),
                         "resources": security.resources("50m", "64Mi", memory_limit="128Mi"),
                         "securityContext": security.container_security_context()},
            "service": {"enabled": True, "ports": {"http": STORE_METRICS_PORT}, "appProtocol": "http"},
            "serviceMonitor": {"enabled": False}, "podMonitor": {"enabled": False}}


def store_values(cfg: GatewayView) -> dict[str, Any]:
    """The Valkey chart's values (valkey-io/valkey-helm valkey-0.11.0 valkey/values.yaml): store_config() as
    `valkeyConfig` (the chart's ConfigMap <release>-config, mounted at /usr/local/etc/valkey/valkey.conf, which its
    init script appends to the generated config: templates/configmap.yaml, statefulset.yaml, init_config.yaml), a
    persistent volume for every pod; with storeReplicas, a primary and that many replicas; the metrics exporter
    (_store_metrics_values), scraped by the kit's own ServiceMonitor."""
    b = cfg.gateway.budget_service
    volume: dict[str, Any] = {"size": f"{b.store_volume_gib}Gi"}
    out: dict[str, Any] = {
        "fullnameOverride": STORE_RELEASE,
        "valkeyConfig": store_config(),
        "resources": security.resources("250m", "256Mi", memory_limit=f"{STORE_MEMORY_LIMIT_MIB // 1024}Gi"),
        "metrics": _store_metrics_values(),
    }
    if b.store_replicas:
        out["replica"] = {"enabled": True, "replicas": b.store_replicas,
                          "persistence": {**volume, **({"storageClass": b.store_storage_class}
                                                       if b.store_storage_class else {})}}
    else:
        out["dataStorage"] = {"enabled": True, "requestedSize": volume["size"],
                              **({"className": b.store_storage_class} if b.store_storage_class else {})}
    return out


# A terminating service pod: its endpoint leaves the Service at once, but the gateway's Envoy keeps its HTTP/2
# connection to the pod (and re-resolves the Service's name every DEFAULT_DNS_REFRESH_SECONDS), so the pod keeps
# serving, streams started meanwhile included, for PRESTOP_SECONDS before the process gets SIGTERM. Then it refuses
# new streams (gRPC GOAWAY: Envoy's next request opens a connection to another replica) and lets those in flight
# run to their end (shutdown_grace_seconds), settles them and writes the settlements (SETTLE_MARGIN_SECONDS: the
# service's bound on that, and a margin).
PRESTOP_SECONDS = DEFAULT_DNS_REFRESH_SECONDS + PRESTOP_MARGIN_SECONDS
SETTLE_MARGIN_SECONDS = SETTLE_DRAIN_SECONDS + 2


def shutdown_grace_seconds(cfg: GatewayView) -> int:
    """How long the service lets its streams in flight run after SIGTERM: an ext_proc stream lives as long as its
    request, so the longest request any route allows (a model's timeoutSeconds)."""
    return longest_request_seconds(cfg)


def termination_grace_seconds(cfg: GatewayView) -> int:
    """terminationGracePeriodSeconds: the preStop, the streams' drain, the settlements."""
    return PRESTOP_SECONDS + shutdown_grace_seconds(cfg) + SETTLE_MARGIN_SECONDS


def _deployment(cfg: GatewayView, config: str) -> dict[str, Any]:
    b = cfg.gateway.budget_service
    grace = termination_grace_seconds(cfg)
    container = {
        "name": "budgets",
        "image": b.image,
        "args": ["--config", f"{CONFIG_DIR}/budgets.json", "--listen", f"0.0.0.0:{BUDGETS_GRPC_PORT}",
                 "--redis-url", store_url(cfg), "--metrics-port", str(BUDGETS_METRICS_PORT),
                 "--shutdown-grace-seconds", str(shutdown_grace_seconds(cfg))],
        "ports": [{"name": "grpc", "containerPort": BUDGETS_GRPC_PORT, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": BUDGETS_METRICS_PORT, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": "grpc"}, "periodSeconds": 5},
        "livenessProbe": {"tcpSocket": {"port": "grpc"}, "periodSeconds": 10, "failureThreshold": 3},
        "resources": security.resources("500m", "256Mi", cpu_limit="2", memory_limit="512Mi"),
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
        "securityContext": security.container_security_context(),
        # the kubelet's own sleep (no shell in the image needed): PodLifecycleSleepAction, on since Kubernetes 1.30
        "lifecycle": {"preStop": {"sleep": {"seconds": PRESTOP_SECONDS}}},
    }
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(cfg), "spec": {
        "replicas": b.replicas,
        "selector": {"matchLabels": _pods()},
        "template": {
            "metadata": {"labels": _labels(), "annotations": {
                CONFIG_HASH_ANNOTATION: hashlib.sha256(config.encode()).hexdigest(),
                # a classic Istio sidecar drains as long as the pod may live (components.k8s.serving.lifecycle)
                **proxy_drain_annotations(grace)}},
            "spec": {"serviceAccountName": BUDGETS_SERVICE, "automountServiceAccountToken": False,
                     "terminationGracePeriodSeconds": grace,
                     "securityContext": security.pod_security_context(),
                     "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                                    "whenUnsatisfiable": "ScheduleAnyway",
                                                    "labelSelector": {"matchLabels": _pods()}}],
                     "containers": [container],
                     "volumes": [{"name": "config", "configMap": {"name": BUDGETS_SERVICE}}]}}}}


def _netpol(cfg: GatewayView, name: str, pods: dict[str, str], **rules: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = {"podSelector": {"matchLabels": pods},
                            "policyTypes": [k.title() for k in rules], **rules}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": _meta(cfg, name),
            "spec": spec}


def _port(p: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p}]


def _authz(cfg: GatewayView, name: str, pods: dict[str, str], rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy", "metadata": _meta(cfg, name),
            "spec": {"selector": {"matchLabels": pods}, "action": "ALLOW", "rules": rules}}


def _from(cfg: GatewayView, account: str, port: int, namespace: str | None = None) -> dict[str, Any]:
    return {"from": [{"source": {"principals": [naming.istio_principal(namespace or cfg.gateway.namespace, account)]}}],
            "to": [{"operation": {"ports": [str(port)]}}]}


def _metrics_labels() -> dict[str, str]:
    return naming.common_labels(BUDGETS_SERVICE, METRICS_COMPONENT)


def _metrics_service(cfg: GatewayView) -> dict[str, Any]:
    """Headless, the metrics port only: what the ServiceMonitor scrapes, one target per pod. It publishes not-ready
    addresses, as the gateway's metrics Service does (components.k8s.gateway.component.metrics_service: without it
    the Endpoints controller leaves a pod with a deletionTimestamp out), so a terminating service pod stays a target
    while it drains its metering streams, which TokenBudgetDrainCutsStreams reads. The client Service (gRPC) keeps
    the default: a terminating pod takes no new streams through it."""
    meta = _meta(cfg, METRICS_SERVICE)
    meta["labels"] = _metrics_labels()
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": _pods(),
        "ports": [{"name": "metrics", "port": BUDGETS_METRICS_PORT, "targetPort": "metrics", "protocol": "TCP",
                   "appProtocol": "http"}]}}


def budget_objects(cfg: GatewayView) -> dict[str, dict[str, Any]]:
    """Every object of the budget service by child-resource suffix, in apply order; none without budgets."""
    if not any_budget(cfg):
        return {}
    config = service_config(cfg)
    monitoring = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": cfg.observability.namespace}}}
    return {
        "budgets-configmap": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(cfg),
                              "data": {"budgets.json": config}},
        "budgets-serviceaccount": {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(cfg),
                                   "automountServiceAccountToken": False},
        "budgets-deployment": _deployment(cfg, config),
        "budgets-service": {"apiVersion": "v1", "kind": "Service", "metadata": _meta(cfg), "spec": {
            "selector": _pods(),
            "ports": [{"name": "grpc", "port": BUDGETS_GRPC_PORT, "targetPort": "grpc", "protocol": "TCP",
                       "appProtocol": "grpc"}]}},
        "budgets-metrics-service": _metrics_service(cfg),
        "budgets-poddisruptionbudget": {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                                        "metadata": _meta(cfg),
                                        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": _pods()}}},
        "budgets-servicemonitor": {"apiVersion": MONITORING_API_VERSION, "kind": "ServiceMonitor",
                                   "metadata": _meta(cfg), "spec": {
                                       "selector": {"matchLabels": _metrics_labels()},
                                       # the job stays the service's name, not its metrics Service's
                                       # (prometheus-operator/prometheus-operator pkg/apis/monitoring/v1/
                                       # servicemonitor_types.go, ServiceMonitorSpec.JobLabel)
                                       "jobLabel": "app.kubernetes.io/name",
                                       # the pod is in the mesh (STRICT mTLS, 9090 captured): Prometheus
                                       # presents its workload certificate, as for every meshed scrape
                                       "endpoints": [{"port": "metrics", "interval": "15s", **MESH_SCRAPE_TLS}]}},
        # the chart's metrics Service (its labels: the chart's selector labels and component "metrics"); the store
        # pods are meshed like the service's
        "budget-store-servicemonitor": {"apiVersion": MONITORING_API_VERSION, "kind": "ServiceMonitor",
                                        "metadata": _meta(cfg, STORE_METRICS_SERVICE), "spec": {
                                            "selector": {"matchLabels": {**_store_pods(),
                                                                         "app.kubernetes.io/component": "metrics"}},
                                            "endpoints": [{"port": "metrics", "interval": "15s",
                                                           **MESH_SCRAPE_TLS}]}},
        # the gateway reaches the service; the service, Prometheus aside, reaches only the store
        "networkpolicy-allow-gateway-to-budgets": _netpol(cfg, "allow-gateway-to-budgets", _selector(), egress=[
            {"to": [{"podSelector": {"matchLabels": _pods()}}], "ports": _port(BUDGETS_GRPC_PORT)}]),
        "networkpolicy-allow-budgets": _netpol(cfg, "allow-budgets", _pods(), ingress=[
            {"from": [{"podSelector": {"matchLabels": _selector()}}], "ports": _port(BUDGETS_GRPC_PORT)},
            {"from": [monitoring], "ports": _port(BUDGETS_METRICS_PORT)}],
            egress=[{"to": [{"podSelector": {"matchLabels": _store_pods()}}], "ports": _port(STORE_PORT)}]),
        "networkpolicy-allow-budget-store": _netpol(cfg, "allow-budget-store", _store_pods(), ingress=[
            {"from": [{"podSelector": {"matchLabels": _pods()}}, {"podSelector": {"matchLabels": _store_pods()}}],
             "ports": _port(STORE_PORT)},
            {"from": [monitoring], "ports": _port(STORE_METRICS_PORT)}],
            egress=[{"to": [{"podSelector": {"matchLabels": _store_pods()}}], "ports": _port(STORE_PORT)}]),
        "authorizationpolicy-allow-budgets": _authz(cfg, "allow-budgets", _pods(), [
            _from(cfg, naming.GATEWAY_SERVICE_ACCOUNT, BUDGETS_GRPC_PORT),
            _from(cfg, naming.PROMETHEUS_SERVICE_ACCOUNT, BUDGETS_METRICS_PORT, cfg.observability.namespace)]),
        "authorizationpolicy-allow-budget-store": _authz(cfg, "allow-budget-store", _store_pods(), [
            _from(cfg, BUDGETS_SERVICE, STORE_PORT), _from(cfg, STORE_RELEASE, STORE_PORT),
            _from(cfg, naming.PROMETHEUS_SERVICE_ACCOUNT, STORE_METRICS_PORT, cfg.observability.namespace)]),
    }
