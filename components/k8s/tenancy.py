"""Tenancy: one namespace per tenant with quotas, default limits and default-deny networking.

Each tenant namespace enforces Pod Security `restricted` and gets Istio sidecars. A ResourceQuota
caps GPUs (`requests.nvidia.com/gpu`: Kubernetes accepts only `requests.` quotas for extended
resources, which cannot be overcommitted), MIG slices of every profile the stack's nodes advertise
(`requests.nvidia.com/mig-<profile>`: without a quota an extended resource is unlimited), and CPU and
memory requests and limits, which config derives from the GPU and MIG quotas on the tenant's pools
(infra.config: a smaller CPU/memory quota would reject model pods the GPU quota admits); a LimitRange
gives containers that set nothing a small request and limit. NetworkPolicies deny all ingress and egress,
then allow: DNS, istiod (xDS and certificates), the gateway to model servers, Prometheus scrapes,
telemetry to the Collector, callers declared by `models.X.callers`, the pods of one multi-node replica
to each other, and HTTPS to the internet (not private ranges) for tenants whose models download
weights from hf:// or s3://.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming
from components.k8s.gpu_stack import mig_resource
from components.k8s.namespaces import create_namespace, namespace_labels
from infra.config import Model, PlatformConfig, Tenant

__all__ = [
    "GPU_QUOTA_KEY",
    "DEFAULT_CONTAINER_REQUEST",
    "DEFAULT_CONTAINER_LIMIT",
    "PRIVATE_RANGES",
    "ISTIOD_PORTS",
    "tenant_namespace_labels",
    "resource_quota",
    "limit_range",
    "network_policies",
    "Tenancy",
]

GPU_QUOTA_KEY = "requests.nvidia.com/gpu"
DEFAULT_CONTAINER_REQUEST = {"cpu": "100m", "memory": "128Mi"}
DEFAULT_CONTAINER_LIMIT = {"cpu": "1", "memory": "1Gi"}
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16")
ISTIOD_PORTS = (15012,)  # xDS and the CA (workload certificates); the webhook port is called by the API server
PROMETHEUS_SCRAPE_PORTS = (naming.MODEL_HTTP_PORT, naming.TRITON_METRICS_PORT, 15020, 15090)  # + sidecar stats
COLLECTOR_PORTS = (naming.OTEL_GRPC_PORT, 4318)  # OTLP gRPC and HTTP
DNS_PORTS = (("UDP", 53), ("TCP", 53))
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
MODEL_SERVERS = {naming.LABEL_COMPONENT: "model-server"}


def tenant_namespace_labels(cfg: PlatformConfig, tenant: Tenant) -> dict[str, str]:
    return namespace_labels(pod_security="restricted", kubernetes_version=cfg.kubernetes_version, injection=True,
                            extra={naming.LABEL_TENANT: tenant.name})


def _meta(name: str, tenant: Tenant) -> dict[str, Any]:
    labels = {**naming.MANAGED_BY, naming.LABEL_TENANT: tenant.name}
    return {"name": name, "namespace": tenant.namespace, "labels": labels}


def resource_quota(tenant: Tenant) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": _meta("tenant-quota", tenant),
            "spec": {"hard": {
                GPU_QUOTA_KEY: str(tenant.gpu_quota),
                **{f"requests.{mig_resource(p)}": str(n) for p, n in sorted(tenant.mig_quota.items())},
                "requests.cpu": tenant.cpu_quota,
                "limits.cpu": tenant.cpu_quota,
                "requests.memory": tenant.memory_quota,
                "limits.memory": tenant.memory_quota,
            }}}


def limit_range(tenant: Tenant) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "LimitRange", "metadata": _meta("tenant-defaults", tenant),
            "spec": {"limits": [{"type": "Container", "defaultRequest": dict(DEFAULT_CONTAINER_REQUEST),
                                 "default": dict(DEFAULT_CONTAINER_LIMIT)}]}}


def _ns(namespace: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}}


def _pods(namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {**_ns(namespace), "podSelector": {"matchLabels": labels}}


def _tcp(ports: tuple[int, ...] | list[int]) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def _netpol(tenant: Tenant, name: str, *, pods: dict[str, str], ingress: list[dict[str, Any]] | None = None,
            egress: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"podSelector": {"matchLabels": pods} if pods else {}, "policyTypes": []}
    if ingress is not None:
        spec["policyTypes"].append("Ingress")
        spec["ingress"] = ingress
    if egress is not None:
        spec["policyTypes"].append("Egress")
        spec["egress"] = egress
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": _meta(name, tenant),
            "spec": spec}


def _model_pods(model: Model) -> dict[str, str]:
    return {naming.LABEL_MODEL: model.name}


def network_policies(cfg: PlatformConfig, tenant: Tenant) -> list[dict[str, Any]]:
    """Every NetworkPolicy of one tenant namespace: default deny, then the allows."""
    monitoring = cfg.observability.namespace
    models = [m for m in cfg.models.values() if m.tenant == tenant.name]
    out = [
        _netpol(tenant, "default-deny", pods={}, ingress=[], egress=[]),
        _netpol(tenant, "allow-dns", pods={}, egress=[{
            "to": [_pods("kube-system", {"k8s-app": "kube-dns"})],
            "ports": [{"protocol": proto, "port": port} for proto, port in DNS_PORTS]}]),
        _netpol(tenant, "allow-istiod", pods={}, egress=[{
            "to": [_pods(naming.ISTIO_NAMESPACE, {"app": "istiod"})], "ports": _tcp(ISTIOD_PORTS)}]),
        _netpol(tenant, "allow-gateway", pods=MODEL_SERVERS, ingress=[{
            "from": [_ns(cfg.gateway.namespace)], "ports": _tcp([naming.MODEL_HTTP_PORT])}]),
        _netpol(tenant, "allow-monitoring", pods={},
                ingress=[{"from": [_ns(monitoring)], "ports": _tcp(PROMETHEUS_SCRAPE_PORTS)}],
                egress=[{"to": [_ns(monitoring)], "ports": _tcp(COLLECTOR_PORTS)}]),
    ]
    for model in models:
        if model.callers:
            sources = [_pods(cfg.tenant_of(cfg.models[c]).namespace, _model_pods(cfg.models[c]))
                       for c in sorted(model.callers)]
            out.append(_netpol(tenant, f"allow-callers-{model.name}", pods=_model_pods(model), ingress=[{
                "from": sources, "ports": _tcp([naming.MODEL_HTTP_PORT])}]))
        callees = sorted(m.name for m in cfg.models.values() if model.name in m.callers)
        if callees:
            targets = [_pods(cfg.tenant_of(cfg.models[c]).namespace, _model_pods(cfg.models[c])) for c in callees]
            out.append(_netpol(tenant, f"allow-calls-{model.name}", pods=_model_pods(model), egress=[{
                "to": targets, "ports": _tcp([naming.MODEL_HTTP_PORT])}]))
        if model.multi_node:
            peers = [{"podSelector": {"matchLabels": _model_pods(model)}}]
            out.append(_netpol(tenant, f"allow-peers-{model.name}", pods=_model_pods(model),
                               ingress=[{"from": peers}], egress=[{"to": peers}]))
    if any(m.uri.startswith(("hf://", "s3://")) for m in models):
        out.append(_netpol(tenant, "allow-model-downloads", pods=MODEL_SERVERS, egress=[{
            "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": list(PRIVATE_RANGES)}}], "ports": _tcp([443])}]))
    return out


def _object(name: str, obj: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    kind = obj["kind"]
    if kind == "ResourceQuota":
        return k8s.core.v1.ResourceQuota(name, metadata=obj["metadata"], spec=obj["spec"], opts=opts)
    if kind == "LimitRange":
        return k8s.core.v1.LimitRange(name, metadata=obj["metadata"], spec=obj["spec"], opts=opts)
    return k8s.networking.v1.NetworkPolicy(name, metadata=obj["metadata"], spec=obj["spec"], opts=opts)


class Tenancy(pulumi.ComponentResource):
    """Tenant namespaces and their quotas, limits and network policies."""

    namespaces: dict[str, k8s.core.v1.Namespace]  # by tenant name

    def __init__(self, name: str, *, cfg: PlatformConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aifactory:k8s:Tenancy", name, None, opts)
        self.namespaces = {}
        for tenant in cfg.tenants.values():
            ns = create_namespace(f"{name}-{tenant.name}", tenant.namespace,
                                  labels=tenant_namespace_labels(cfg, tenant),
                                  opts=pulumi.ResourceOptions(parent=self))
            self.namespaces[tenant.name] = ns
            in_ns = pulumi.ResourceOptions(parent=self, depends_on=[ns])
            for obj in [resource_quota(tenant), limit_range(tenant), *network_policies(cfg, tenant)]:
                _object(f"{name}-{tenant.name}-{obj['kind'].lower()}-{obj['metadata']['name']}", obj, in_ns)
        self.register_outputs({"namespaces": {t: ns.metadata.name for t, ns in self.namespaces.items()}})

