"""Mesh: Istio (base, CNI, istiod at one pinned version) with mesh-wide STRICT mTLS and
allow-nothing-by-default authorization in every tenant namespace.

Tenant namespaces run under Pod Security `restricted`, so sidecars are set up by the Istio CNI node
agent instead of a privileged init container. In each tenant namespace an empty ALLOW policy denies
everything; explicit ALLOW policies then admit, by mesh identity (SPIFFE principal):
- the Envoy gateway to every model server's HTTP port;
- callers a model declares (`models.X.callers`) to that model's HTTP port;
- the pods of one multi-node replica set to each other (leader and workers);
- Prometheus (which joins the mesh for its scrapes only, see `MESH_SCRAPE_TLS`) to metrics ports.

Multi-node replicas (one vLLM replica over a LeaderWorkerSet): Ray and NCCL connect pod IP to pod IP on ports
no Service declares, several of them ephemeral (NCCL's bootstrap and socket listeners, gloo, torch's store bind
port 0). A sender's sidecar passes such traffic through in plaintext, and the receiver's STRICT sidecar rejects
it, so a replica never forms. The kit keeps the sidecar, and mTLS, on the model's HTTP port only
(`traffic.sidecar.istio.io/includeInboundPorts`), and exempts the replica's pinned Ray and vLLM ports from
outbound capture (`excludeOutboundPorts`; serving.multi_node_ports). What stays outside mTLS: the Ray control
plane, vLLM's tensor-parallel bootstrap and NCCL's TCP bootstrap between the pods of ONE model. Why that is
acceptable: the tenant's NetworkPolicies (tenancy.py, `allow-peers-<model>` on top of default-deny) admit that
traffic only from pods of the same model in the same namespace, every other port still requires mTLS and an
ALLOW policy, and the bulk tensor traffic rides EFA/InfiniBand RDMA, which no sidecar can see or encrypt anyway.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming, versions
from components.k8s.namespaces import create_namespace, namespace_labels
from infra.config import Model, PlatformConfig

__all__ = [
    "MTLS_MODE",
    "MESH_SCRAPE_TLS",
    "MODEL_SERVER_COMPONENT",
    "OTEL_TRACING_PROVIDER",
    "peer_authentication",
    "tracing_telemetry",
    "istiod_values",
    "authorization_policies",
    "INCLUDE_INBOUND_PORTS_ANNOTATION",
    "EXCLUDE_OUTBOUND_PORTS_ANNOTATION",
    "multi_node_sidecar_annotations",
    "Mesh",
]

MTLS_MODE = "STRICT"
MODEL_SERVER_COMPONENT = "model-server"  # naming.common_labels(component=...) of every model pod
OTEL_TRACING_PROVIDER = "otel"
PROMETHEUS_CERTS_DIR = "/etc/prom-certs"
# What a ServiceMonitor endpoint of a meshed workload sets (Istio's pattern for Prometheus under STRICT
# mTLS): Prometheus presents its own workload certificate, written by its sidecar (see
# observability.prometheus_mesh_pod_settings). Only ServiceMonitor endpoints can: a PodMonitor's
# tlsConfig (SafeTLSConfig) has no file fields, so the operator would drop them and the scrape fail.
MESH_SCRAPE_TLS: dict[str, Any] = {
    "scheme": "https",
    "tlsConfig": {
        "caFile": f"{PROMETHEUS_CERTS_DIR}/root-cert.pem",
        "certFile": f"{PROMETHEUS_CERTS_DIR}/cert-chain.pem",
        "keyFile": f"{PROMETHEUS_CERTS_DIR}/key.pem",
        "insecureSkipVerify": True,  # pod IPs are not in the SPIFFE certificate's SANs
    },
}


def peer_authentication() -> dict[str, Any]:
    """The mesh-wide PeerAuthentication: mTLS required on every sidecar's inbound traffic."""
    return {"apiVersion": "security.istio.io/v1", "kind": "PeerAuthentication",
            "metadata": {"name": "default", "namespace": naming.ISTIO_NAMESPACE, "labels": dict(naming.MANAGED_BY)},
            "spec": {"mtls": {"mode": MTLS_MODE}}}


def tracing_telemetry(cfg: PlatformConfig) -> dict[str, Any]:
    """Mesh-wide tracing to the Collector. Sidecars start a trace for `observability.meshTraceSamplingPercent`
    of the requests that arrive without one (default 1%, Istio's own default sampling rate). Envoy's
    OpenTelemetry tracer follows an incoming `traceparent`'s sampled flag (envoyproxy/envoy#35721; changed by
    envoyproxy/envoy#45830, after the pinned Istio's Envoy), so an instrumented agent's sampled trace stays whole."""
    return {"apiVersion": "telemetry.istio.io/v1", "kind": "Telemetry",
            "metadata": {"name": "mesh-default", "namespace": naming.ISTIO_NAMESPACE,
                         "labels": dict(naming.MANAGED_BY)},
            "spec": {"tracing": [{"providers": [{"name": OTEL_TRACING_PROVIDER}],
                                  "randomSamplingPercentage": cfg.observability.mesh_trace_sampling_percent}]}}


def istiod_values(cfg: PlatformConfig) -> dict[str, Any]:
    collector = f"{naming.OTEL_COLLECTOR_SERVICE}.{cfg.observability.namespace}.svc.cluster.local"
    return {
        "pilot": {
            "autoscaleMin": 2,
            "cni": {"enabled": True},
            "resources": {"requests": {"cpu": "500m", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}},
        },
        "global": {
            "logAsJson": True,
            "proxy": {"resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                    "limits": {"cpu": "1", "memory": "512Mi"}}},
        },
        "meshConfig": {
            "accessLogFile": "/dev/stdout",
            "accessLogEncoding": "JSON",
            "extensionProviders": [{"name": OTEL_TRACING_PROVIDER,
                                    "opentelemetry": {"service": collector, "port": naming.OTEL_GRPC_PORT}}],
        },
    }


# Istio's sidecar traffic annotations (istio.io "Annotations": traffic.sidecar.istio.io/includeInboundPorts,
# excludeOutboundPorts; honoured by the istio-cni plugin as by the init container). Ports, comma-separated.
INCLUDE_INBOUND_PORTS_ANNOTATION = "traffic.sidecar.istio.io/includeInboundPorts"
EXCLUDE_OUTBOUND_PORTS_ANNOTATION = "traffic.sidecar.istio.io/excludeOutboundPorts"


def multi_node_sidecar_annotations(*, outbound_excluded: Sequence[int]) -> dict[str, str]:
    """Pod annotations of a multi-node replica's leader and workers: inbound capture (and mTLS) on the model's
    HTTP port only; the replica's pinned peer ports bypass the outbound capture."""
    return {INCLUDE_INBOUND_PORTS_ANNOTATION: str(naming.MODEL_HTTP_PORT),
            EXCLUDE_OUTBOUND_PORTS_ANNOTATION: ",".join(str(p) for p in sorted(set(outbound_excluded)))}


def _policy(name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(naming.MANAGED_BY)}, "spec": spec}


def _principal(cfg: PlatformConfig, model: Model) -> str:
    return naming.istio_principal(cfg.tenant_of(model).namespace, naming.model_service_account(model.name))


def _allow(selector: dict[str, str], principals: list[str], ports: list[int] | None) -> dict[str, Any]:
    rule: dict[str, Any] = {"from": [{"source": {"principals": principals}}]}
    if ports is not None:
        rule["to"] = [{"operation": {"ports": [str(p) for p in ports]}}]
    return {"selector": {"matchLabels": selector}, "action": "ALLOW", "rules": [rule]}


def authorization_policies(cfg: PlatformConfig) -> list[dict[str, Any]]:
    """Every AuthorizationPolicy in the tenant namespaces, tenant by tenant (config order)."""
    gateway = naming.istio_principal(cfg.gateway.namespace, naming.GATEWAY_SERVICE_ACCOUNT)
    prometheus = naming.istio_principal(cfg.observability.namespace, naming.PROMETHEUS_SERVICE_ACCOUNT)
    servers = {naming.LABEL_COMPONENT: MODEL_SERVER_COMPONENT}
    out: list[dict[str, Any]] = []
    for tenant in cfg.tenants.values():
        ns = tenant.namespace
        out.append(_policy("allow-nothing", ns, {}))
        out.append(_policy("allow-gateway", ns, _allow(servers, [gateway], [naming.MODEL_HTTP_PORT])))
        out.append(_policy("allow-monitoring", ns, _allow(
            servers, [prometheus], [naming.MODEL_HTTP_PORT, naming.TRITON_METRICS_PORT])))
        for model in (m for m in cfg.models.values() if m.tenant == tenant.name):
            selector = {naming.LABEL_MODEL: model.name}
            if model.callers:
                callers = sorted(_principal(cfg, cfg.models[c]) for c in model.callers)
                out.append(_policy(f"allow-callers-{model.name}", ns,
                                   _allow(selector, callers, [naming.MODEL_HTTP_PORT])))
            if model.multi_node:
                out.append(_policy(f"allow-peers-{model.name}", ns, _allow(selector, [_principal(cfg, model)], None)))
    return out


def _custom(name: str, obj: dict[str, Any], opts: pulumi.ResourceOptions) -> k8s.apiextensions.CustomResource:
    return k8s.apiextensions.CustomResource(name, api_version=obj["apiVersion"], kind=obj["kind"],
                                            metadata=obj["metadata"], spec=obj["spec"], opts=opts)


class Mesh(pulumi.ComponentResource):
    """Istio control plane, STRICT mTLS and the tenant namespaces' authorization policies."""

    namespace: k8s.core.v1.Namespace
    istiod: k8s.helm.v3.Release

    def __init__(self, name: str, *, cfg: PlatformConfig, tenant_namespaces: Mapping[str, k8s.core.v1.Namespace],
                 after: Sequence[pulumi.Resource] = (), opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aifactory:k8s:Mesh", name, None, opts)
        # istio-system hosts the CNI node agent (host network and host paths): privileged.
        self.namespace = create_namespace(
            f"{name}-ns", naming.ISTIO_NAMESPACE,
            labels=namespace_labels(pod_security="privileged", kubernetes_version=cfg.kubernetes_version),
            opts=pulumi.ResourceOptions(parent=self))
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[self.namespace, *after])
        base = versions.release(f"{name}-base", versions.ISTIO_BASE, release_name="istio-base",
                                namespace=naming.ISTIO_NAMESPACE, values={}, opts=in_ns)
        cni = versions.release(f"{name}-cni", versions.ISTIO_CNI, release_name="istio-cni",
                               namespace=naming.ISTIO_NAMESPACE, values={}, opts=in_ns)
        self.istiod = versions.release(
            f"{name}-istiod", versions.ISTIOD, release_name="istiod", namespace=naming.ISTIO_NAMESPACE,
            values=istiod_values(cfg), opts=pulumi.ResourceOptions(parent=self, depends_on=[base, cni, *after]))
        after_crds = pulumi.ResourceOptions(parent=self, depends_on=[base])
        _custom(f"{name}-peer-authentication", peer_authentication(), after_crds)
        _custom(f"{name}-tracing", tracing_telemetry(cfg), after_crds)
        by_ns = {t.namespace: tenant_namespaces[t.name] for t in cfg.tenants.values()}
        for policy in authorization_policies(cfg):
            ns = policy["metadata"]["namespace"]
            _custom(f"{name}-{ns}-{policy['metadata']['name']}", policy,
                    pulumi.ResourceOptions(parent=self, depends_on=[base, by_ns[ns]]))
        self.register_outputs({"mtls": MTLS_MODE, "istioVersion": versions.ISTIO_VERSION})
