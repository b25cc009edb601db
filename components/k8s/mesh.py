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

The ephemeral ports cannot be exempted the same way: `excludeOutboundPorts` takes single ports, no ranges
(istio/istio@1.28.3 pkg/kube/inject/validate.go parsePorts), and no Service can declare a port chosen at run time.
So a connection to a peer's ephemeral port still crosses the sender's sidecar: its virtual outbound listener has
no protocol detection, and its catch-all filter chain TCP-proxies the connection to PassthroughCluster, plaintext,
to the original destination (pilot/pkg/networking/core/listener_builder.go buildVirtualOutboundListener,
buildOutboundCatchAllNetworkFilterChains), where the receiver's sidecar does not capture it. Two conditions keep it
working, both pinned here and in docs/contracts.md: the mesh's `outboundTrafficPolicy` stays ALLOW_ANY
(REGISTRY_ONLY sends the same connections to BlackHoleCluster; the kit sets ALLOW_ANY explicitly, Istio's default
in pkg/config/mesh/mesh.go), and no Service in the mesh declares an HTTP port in the nodes' ephemeral range
(Linux: 32768-60999), which would give every sidecar a `0.0.0.0:<port>` HTTP listener that such a connection
would meet instead (listener.go).

Mesh takes its own `args` (MeshArgs: the tenants, the models they serve, where the gateway and Prometheus run), so
a platform team can use it without the kit's stack config; infra.component_args maps PlatformConfig to them.
"""

# No `from __future__ import annotations`: TypedDict reads NotRequired (and the package analyzer the types) from
# evaluated annotations.
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, Protocol, TypedDict

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming, versions
from components.k8s.defaults import DEFAULT_GATEWAY_NAMESPACE, DEFAULT_KUBERNETES_VERSION, DEFAULT_MONITORING_NAMESPACE
from components.k8s.gateway.envoy.base import _seconds
from components.k8s.namespaces import create_namespace, namespace_labels
from components.k8s.settings import InNamespace, NamespaceView, Tenant
from components.k8s.tenancy import TenantModel, TenantModelArgs
from components.validation import Problems, check_shape

__all__ = [
    "TYPE",
    "DEFAULT_TRACE_SAMPLING_PERCENT",
    "MeshTenantArgs",
    "MeshArgs",
    "MeshView",
    "MeshSpec",
    "mesh_spec",
    "MTLS_MODE",
    "MESH_SCRAPE_TLS",
    "MODEL_SERVER_COMPONENT",
    "OTEL_TRACING_PROVIDER",
    "OUTBOUND_TRAFFIC_POLICY",
    "peer_authentication",
    "tracing_telemetry",
    "istiod_values",
    "authorization_policies",
    "INCLUDE_INBOUND_PORTS_ANNOTATION",
    "EXCLUDE_OUTBOUND_PORTS_ANNOTATION",
    "multi_node_sidecar_annotations",
    "NO_RETRIES",
    "engine_traffic_objects",
    "Mesh",
]

TYPE = "aifactory:k8s:Mesh"  # the type token of the kit's existing stacks (part of every child's URN)
DEFAULT_TRACE_SAMPLING_PERCENT = 1.0  # Istio's own default random sampling rate
MTLS_MODE = "STRICT"
MODEL_SERVER_COMPONENT = "model-server"  # naming.common_labels(component=...) of every model pod
OTEL_TRACING_PROVIDER = "otel"
# Sidecars pass traffic to destinations no Service declares (multi-node replicas' ephemeral NCCL, gloo and torch
# store ports) through, instead of dropping it (REGISTRY_ONLY): see the module docstring.
OUTBOUND_TRAFFIC_POLICY = "ALLOW_ANY"
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


class MeshTenantArgs(TypedDict):
    """A tenant namespace that gets allow-nothing authorization and the kit's ALLOW policies."""

    namespace: NotRequired[str]
    """The tenant's namespace. Default: the tenant's name."""


class MeshArgs(TypedDict):
    """Arguments of a Mesh."""

    tenants: dict[str, MeshTenantArgs]
    """The tenants, by name."""
    models: NotRequired[dict[str, TenantModelArgs]]
    """The models the tenants serve, by name (their callers and multi-node peers get ALLOW policies).
    Default: none."""
    kubernetes_version: NotRequired[str]
    """The cluster's Kubernetes minor version (the Pod Security labels' version). Default: 1.35."""
    gateway_namespace: NotRequired[str]
    """The namespace of the gateway (its service account may call every model). Default: aifactory-gateway."""
    monitoring_namespace: NotRequired[str]
    """Where Prometheus (allowed to scrape) and the OpenTelemetry Collector (the mesh's spans) run.
    Default: monitoring."""
    trace_sampling_percent: NotRequired[float]
    """Share of requests without a trace that sidecars start one for, percent. Default: 1."""


class MeshModelView(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def tenant(self) -> str: ...

    @property
    def callers(self) -> tuple[str, ...]: ...

    @property
    def multi_node(self) -> bool: ...


class _ObservabilityView(Protocol):
    @property
    def namespace(self) -> str: ...

    @property
    def mesh_trace_sampling_percent(self) -> float: ...


class MeshView(Protocol):
    """What the build functions read: Mesh's MeshSpec (from its args), or the kit's PlatformConfig."""

    @property
    def kubernetes_version(self) -> str: ...

    @property
    def tenants(self) -> Mapping[str, Tenant]: ...

    @property
    def models(self) -> Mapping[str, MeshModelView]: ...

    @property
    def gateway(self) -> NamespaceView: ...

    @property
    def observability(self) -> _ObservabilityView: ...


@dataclass(frozen=True)
class _Observability:
    namespace: str
    mesh_trace_sampling_percent: float


@dataclass(frozen=True)
class MeshSpec:
    """MeshArgs with every default applied (a MeshView)."""

    tenants: Mapping[str, Tenant]
    models: Mapping[str, TenantModel]
    gateway: InNamespace
    observability: _Observability
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION


def mesh_spec(name: str, args: MeshArgs) -> MeshSpec:
    """Validate `args` and resolve every default; raises pulumi.InputPropertiesError with property paths."""
    check_shape("Mesh", name, args, MeshArgs)  # typos, unknown keys, wrong types: before any read
    problems = Problems("Mesh", name)
    tenants, models = args["tenants"], args.get("models") or {}
    for key, m in models.items():
        if m["tenant"] not in tenants:
            problems.add(f"models.{key}.tenant", f"{m['tenant']!r} is not a tenant; tenants: {', '.join(tenants)}")
        for i, caller in enumerate(m.get("callers") or ()):
            if caller not in models:
                problems.add(f"models.{key}.callers[{i}]", f"{caller!r} is not a model; models: {', '.join(models)}")
    percent = args.get("trace_sampling_percent", DEFAULT_TRACE_SAMPLING_PERCENT)
    if not 0 <= percent <= 100:
        problems.add("traceSamplingPercent", f"{percent} is not between 0 and 100")
    problems.raise_any()
    return MeshSpec(
        tenants={k: Tenant(name=k, namespace=t.get("namespace", k)) for k, t in tenants.items()},
        models={k: TenantModel(name=k, tenant=m["tenant"], callers=tuple(m.get("callers") or ()),
                               multi_node=m.get("multi_node", False)) for k, m in models.items()},
        gateway=InNamespace(args.get("gateway_namespace", DEFAULT_GATEWAY_NAMESPACE)),
        observability=_Observability(args.get("monitoring_namespace", DEFAULT_MONITORING_NAMESPACE), percent),
        kubernetes_version=args.get("kubernetes_version", DEFAULT_KUBERNETES_VERSION))


def peer_authentication() -> dict[str, Any]:
    """The mesh-wide PeerAuthentication: mTLS required on every sidecar's inbound traffic."""
    return {"apiVersion": "security.istio.io/v1", "kind": "PeerAuthentication",
            "metadata": {"name": "default", "namespace": naming.ISTIO_NAMESPACE, "labels": dict(naming.MANAGED_BY)},
            "spec": {"mtls": {"mode": MTLS_MODE}}}


def tracing_telemetry(cfg: MeshView) -> dict[str, Any]:
    """Mesh-wide tracing to the Collector. Sidecars start a trace for `observability.meshTraceSamplingPercent`
    of the requests that arrive without one (default 1%, Istio's own default sampling rate). Envoy's
    OpenTelemetry tracer follows an incoming `traceparent`'s sampled flag (envoyproxy/envoy#35721; changed by
    envoyproxy/envoy#45830, after the pinned Istio's Envoy), so an instrumented agent's sampled trace stays whole."""
    return {"apiVersion": "telemetry.istio.io/v1", "kind": "Telemetry",
            "metadata": {"name": "mesh-default", "namespace": naming.ISTIO_NAMESPACE,
                         "labels": dict(naming.MANAGED_BY)},
            "spec": {"tracing": [{"providers": [{"name": OTEL_TRACING_PROVIDER}],
                                  "randomSamplingPercentage": cfg.observability.mesh_trace_sampling_percent}]}}


def istiod_values(cfg: MeshView) -> dict[str, Any]:
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
            "outboundTrafficPolicy": {"mode": OUTBOUND_TRAFFIC_POLICY},
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


# A VirtualService's `retries` for a route: none. Without a VirtualService (or with one that sets no `retries`) a
# sidecar gives every outbound HTTP route meshConfig.defaultHttpRetryPolicy, by default Istio's DefaultPolicy: 2
# retries on connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes; `attempts: 0` gives the
# route no retry policy at all (istio/istio@1.28.3 pilot/pkg/networking/core/route/route.go, `in.Retries` else
# GetDefaultHttpRetryPolicy; route/retry/retry.go, DefaultPolicy and ConvertPolicy).
NO_RETRIES: dict[str, int] = {"attempts": 0}


def engine_traffic_objects(*, namespace: str, hosts: Mapping[str, str], connect_timeout_seconds: float,
                           labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """The gateway's sidecar's policy towards the model Services `hosts` (model name -> Service FQDN): per model,
    a VirtualService that gives its route no retries and a DestinationRule whose connect timeout is the gateway
    cluster's, both in the gateway's `namespace` and exported to it alone (`exportTo: ["."]`).

    Why: the gateway retries a failed try itself, on another replica (previous_hosts) under a retry budget. Istio's
    default retries would multiply those tries 3x, and towards the same pod, since a headless Service is an
    ORIGINAL_DST cluster; Istio's default connect timeout (meshConfig.connectTimeout, 10 s: pkg/config/mesh/mesh.go)
    would hold each attempt at a dead pod 10 s where the gateway allows `connect_timeout_seconds` (its own connect
    goes to the local sidecar and never times out). Scoped to the gateway's namespace, not mesh-wide
    (meshConfig.defaultHttpRetryPolicy): agents calling a model through the mesh directly (`models.X.callers`) and
    other meshed services have no retries of their own and keep Istio's. A sidecar takes the DestinationRule of its
    own namespace before the Service's (pilot/pkg/model/push_context.go, destinationRule); one with no `tls` keeps
    auto mTLS (pilot/pkg/networking/core/cluster_tls.go, buildUpstreamTLSSettings); `connectionPool.tcp.connectTimeout`
    becomes the cluster's connect_timeout (cluster_traffic_policy.go, applyConnectionPool)."""
    out: list[dict[str, Any]] = []
    for model in sorted(hosts):
        host = hosts[model]
        meta = {"name": f"model-{model}", "namespace": namespace, "labels": dict(labels)}
        out.append({"apiVersion": "networking.istio.io/v1", "kind": "VirtualService", "metadata": meta,
                    "spec": {"hosts": [host], "exportTo": ["."],
                             "http": [{"route": [{"destination": {"host": host}}], "retries": dict(NO_RETRIES)}]}})
        out.append({"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule", "metadata": dict(meta),
                    "spec": {"host": host, "exportTo": ["."], "trafficPolicy": {"connectionPool": {"tcp": {
                        "connectTimeout": _seconds(connect_timeout_seconds)}}}}})
    return out


def _policy(name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(naming.MANAGED_BY)}, "spec": spec}


def _principal(cfg: MeshView, model: MeshModelView) -> str:
    return naming.istio_principal(cfg.tenants[model.tenant].namespace, naming.model_service_account(model.name))


def _allow(selector: dict[str, str], principals: list[str], ports: list[int] | None) -> dict[str, Any]:
    rule: dict[str, Any] = {"from": [{"source": {"principals": principals}}]}
    if ports is not None:
        rule["to"] = [{"operation": {"ports": [str(p) for p in ports]}}]
    return {"selector": {"matchLabels": selector}, "action": "ALLOW", "rules": [rule]}


def authorization_policies(cfg: MeshView) -> list[dict[str, Any]]:
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
    pulumi_type = TYPE  # the type token (part of every child's URN); the component package hosts a subclass
    # with `aifactory:index:<name>`, the token its schema names (components/__main__.py)

    mtls: pulumi.Output[str]
    """The mesh-wide mTLS mode (STRICT)."""
    istio_version: pulumi.Output[str]
    """The Istio release the charts are pinned to."""

    def __init__(self, name: str, args: MeshArgs, opts: pulumi.ResourceOptions | None = None,
                 tenant_namespaces: Mapping[str, k8s.core.v1.Namespace] | None = None,
                 after: Sequence[pulumi.Resource] = ()) -> None:
        """`tenant_namespaces`: the Namespace resources by tenant (each namespace's policies wait for it); default:
        none (the namespaces exist already)."""
        super().__init__(self.pulumi_type, name, None, opts)
        cfg = mesh_spec(name, args)
        # istio-system hosts the CNI node agent (host network and host paths): privileged.
        self.namespace: k8s.core.v1.Namespace = create_namespace(
            f"{name}-ns", naming.ISTIO_NAMESPACE,
            labels=namespace_labels(pod_security="privileged", kubernetes_version=cfg.kubernetes_version),
            opts=pulumi.ResourceOptions(parent=self))
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[self.namespace, *after])
        base = versions.release(f"{name}-base", versions.ISTIO_BASE, release_name="istio-base",
                                namespace=naming.ISTIO_NAMESPACE, values={}, opts=in_ns)
        cni = versions.release(f"{name}-cni", versions.ISTIO_CNI, release_name="istio-cni",
                               namespace=naming.ISTIO_NAMESPACE, values={}, opts=in_ns)
        self.istiod: k8s.helm.v3.Release = versions.release(
            f"{name}-istiod", versions.ISTIOD, release_name="istiod", namespace=naming.ISTIO_NAMESPACE,
            values=istiod_values(cfg), opts=pulumi.ResourceOptions(parent=self, depends_on=[base, cni, *after]))
        after_crds = pulumi.ResourceOptions(parent=self, depends_on=[base])
        self.peer_authentication = _custom(f"{name}-peer-authentication", peer_authentication(), after_crds)
        _custom(f"{name}-tracing", tracing_telemetry(cfg), after_crds)
        by_ns = {t.namespace: [tenant_namespaces[t.name]] if tenant_namespaces else [] for t in cfg.tenants.values()}
        # by namespace: what a tenant's pods wait for, so that none serves outside its tenant's policies
        self.policies: dict[str, list[k8s.apiextensions.CustomResource]] = {ns: [] for ns in by_ns}
        for policy in authorization_policies(cfg):
            ns = policy["metadata"]["namespace"]
            self.policies[ns].append(_custom(f"{name}-{ns}-{policy['metadata']['name']}", policy,
                                             pulumi.ResourceOptions(parent=self, depends_on=[base, *by_ns[ns]])))
        self.mtls = pulumi.Output.from_input(MTLS_MODE)
        self.istio_version = pulumi.Output.from_input(versions.ISTIO_VERSION)
        self.register_outputs({"mtls": MTLS_MODE, "istioVersion": versions.ISTIO_VERSION})
