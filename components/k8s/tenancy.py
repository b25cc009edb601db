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

Tenancy takes its own `args` (TenancyArgs), so a platform team can use it without the kit's stack config;
infra.component_args maps PlatformConfig to them.
"""

# No `from __future__ import annotations`: TypedDict reads NotRequired (and the package analyzer the types) from
# evaluated annotations.
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming
from components.k8s.defaults import DEFAULT_GATEWAY_NAMESPACE, DEFAULT_KUBERNETES_VERSION, DEFAULT_MONITORING_NAMESPACE
from components.k8s.gpu_stack import mig_resource
from components.k8s.namespaces import create_namespace, namespace_labels
from components.k8s.settings import Tenant
from components.validation import Problems, check_shape

__all__ = [
    "TYPE",
    "DEFAULT_KUBERNETES_VERSION",
    "DEFAULT_GATEWAY_NAMESPACE",
    "DEFAULT_MONITORING_NAMESPACE",
    "TenantArgs",
    "TenantModelArgs",
    "TenancyArgs",
    "TenantModel",
    "TenancySpec",
    "tenancy_spec",
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

TYPE = "aifactory:k8s:Tenancy"  # the type token of the kit's existing stacks (part of every child's URN)


class TenantArgs(TypedDict):
    """One tenant: a namespace of its own with quotas."""

    cpu_quota: str
    """requests.cpu and limits.cpu of the namespace, a Kubernetes quantity (e.g. 96 or 1500m)."""
    memory_quota: str
    """requests.memory and limits.memory of the namespace, a Kubernetes quantity (e.g. 1024Gi)."""
    namespace: NotRequired[str]
    """The tenant's namespace. Default: the tenant's name."""
    gpu_quota: NotRequired[int]
    """Whole GPUs the namespace may request (requests.nvidia.com/gpu). Default: 0."""
    mig_quota: NotRequired[dict[str, int]]
    """MIG slices per profile (e.g. 1g.10gb: 7) the namespace may request. Default: none (no MIG quota)."""


class TenantModelArgs(TypedDict):
    """A model served in a tenant namespace: what the tenant's network policies need to know of it."""

    tenant: str
    """The tenant (a key of `tenants`) whose namespace runs the model."""
    callers: NotRequired[list[str]]
    """Models (keys of `models`) allowed to call this one through the mesh. Default: none."""
    multi_node: NotRequired[bool]
    """One replica spans several nodes, whose pods talk to each other. Default: false."""
    downloads_weights: NotRequired[bool]
    """The model server downloads over HTTPS as it starts: its weights (hf://, s3://) or its tokenizer (a Hub id:
    Triton's, unless models.X.tokenizer names a directory). Default: false."""


class TenancyArgs(TypedDict):
    """Arguments of a Tenancy."""

    tenants: dict[str, TenantArgs]
    """The tenants, by name (a DNS label)."""
    models: NotRequired[dict[str, TenantModelArgs]]
    """The models the tenants serve, by name. Default: none."""
    kubernetes_version: NotRequired[str]
    """The cluster's Kubernetes minor version (the Pod Security labels' version). Default: 1.35."""
    gateway_namespace: NotRequired[str]
    """The namespace of the gateway that calls the model servers. Default: aifactory-gateway."""
    monitoring_namespace: NotRequired[str]
    """The namespace of Prometheus and the OpenTelemetry Collector. Default: monitoring."""


@dataclass(frozen=True, slots=True)
class TenantModel:
    """What a tenant's network policies need to know of one of its models."""

    name: str
    tenant: str
    callers: tuple[str, ...] = ()
    multi_node: bool = False
    downloads_weights: bool = False


@dataclass(frozen=True, slots=True)
class TenancySpec:
    """TenancyArgs with every default applied: what the build functions below read."""

    tenants: Mapping[str, Tenant]
    models: Mapping[str, TenantModel]
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    gateway_namespace: str = DEFAULT_GATEWAY_NAMESPACE
    monitoring_namespace: str = DEFAULT_MONITORING_NAMESPACE


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # RFC 1123 label: namespace names
_QUANTITY = re.compile(r"^\d+(\.\d+)?(m|k|Ki|Mi|Gi|Ti|Pi|Ei|M|G|T|P|E)?$")  # a Kubernetes quantity (no exponent)


def _dns_problem(problems: Problems, path: str, value: str) -> None:
    if not _DNS_LABEL.match(value):
        problems.add(path, f"{value!r} is not a DNS label (lowercase letters, digits and '-', at most 63)")


def tenancy_spec(name: str, args: TenancyArgs) -> TenancySpec:
    """Validate `args` and resolve every default; raises pulumi.InputPropertiesError with property paths."""
    check_shape("Tenancy", name, args, TenancyArgs)  # typos, unknown keys, wrong types: before any read
    problems = Problems("Tenancy", name)
    tenants: dict[str, Tenant] = {}
    for key, t in args["tenants"].items():
        path = f"tenants.{key}"
        _dns_problem(problems, path, key)
        namespace = t.get("namespace", key)
        _dns_problem(problems, f"{path}.namespace", namespace)
        gpus, mig = t.get("gpu_quota", 0), dict(t.get("mig_quota") or {})
        if gpus < 0:
            problems.add(f"{path}.gpuQuota", f"{gpus} is negative")
        for profile, count in mig.items():
            if count < 0:
                problems.add(f"{path}.migQuota.{profile}", f"{count} is negative")
        for field_, value in (("cpuQuota", t["cpu_quota"]), ("memoryQuota", t["memory_quota"])):
            if not _QUANTITY.match(value):
                problems.add(f"{path}.{field_}", f"{value!r} is not a Kubernetes quantity such as 96, 1500m or 1024Gi")
        tenants[key] = Tenant(name=key, namespace=namespace, gpu_quota=gpus, cpu_quota=t["cpu_quota"],
                              memory_quota=t["memory_quota"], mig_quota=mig)
    models_args = args.get("models") or {}
    models: dict[str, TenantModel] = {}
    for key, m in models_args.items():
        path = f"models.{key}"
        if m["tenant"] not in args["tenants"]:
            problems.add(f"{path}.tenant", f"{m['tenant']!r} is not a tenant; tenants: {', '.join(args['tenants'])}")
        for i, caller in enumerate(m.get("callers") or []):
            if caller not in models_args:
                problems.add(f"{path}.callers[{i}]", f"{caller!r} is not a model; models: {', '.join(models_args)}")
        models[key] = TenantModel(name=key, tenant=m["tenant"], callers=tuple(m.get("callers") or ()),
                                  multi_node=m.get("multi_node", False),
                                  downloads_weights=m.get("downloads_weights", False))
    gateway = args.get("gateway_namespace", DEFAULT_GATEWAY_NAMESPACE)
    monitoring = args.get("monitoring_namespace", DEFAULT_MONITORING_NAMESPACE)
    _dns_problem(problems, "gatewayNamespace", gateway)
    _dns_problem(problems, "monitoringNamespace", monitoring)
    problems.raise_any()
    return TenancySpec(tenants=tenants, models=models, gateway_namespace=gateway, monitoring_namespace=monitoring,
                       kubernetes_version=args.get("kubernetes_version", DEFAULT_KUBERNETES_VERSION))


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


def tenant_namespace_labels(spec: TenancySpec, tenant: Tenant) -> dict[str, str]:
    return namespace_labels(pod_security="restricted", kubernetes_version=spec.kubernetes_version, injection=True,
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


def _model_pods(model: TenantModel) -> dict[str, str]:
    return {naming.LABEL_MODEL: model.name}


def _namespace_of(spec: TenancySpec, model: TenantModel) -> str:
    return spec.tenants[model.tenant].namespace


def network_policies(spec: TenancySpec, tenant: Tenant) -> list[dict[str, Any]]:
    """Every NetworkPolicy of one tenant namespace: default deny, then the allows."""
    monitoring = spec.monitoring_namespace
    models = [m for m in spec.models.values() if m.tenant == tenant.name]
    out = [
        _netpol(tenant, "default-deny", pods={}, ingress=[], egress=[]),
        _netpol(tenant, "allow-dns", pods={}, egress=[{
            "to": [_pods("kube-system", {"k8s-app": "kube-dns"})],
            "ports": [{"protocol": proto, "port": port} for proto, port in DNS_PORTS]}]),
        _netpol(tenant, "allow-istiod", pods={}, egress=[{
            "to": [_pods(naming.ISTIO_NAMESPACE, {"app": "istiod"})], "ports": _tcp(ISTIOD_PORTS)}]),
        _netpol(tenant, "allow-gateway", pods=MODEL_SERVERS, ingress=[{
            "from": [_ns(spec.gateway_namespace)], "ports": _tcp([naming.MODEL_HTTP_PORT])}]),
        _netpol(tenant, "allow-monitoring", pods={},
                ingress=[{"from": [_ns(monitoring)], "ports": _tcp(PROMETHEUS_SCRAPE_PORTS)}],
                egress=[{"to": [_ns(monitoring)], "ports": _tcp(COLLECTOR_PORTS)}]),
    ]
    for model in models:
        if model.callers:
            sources = [_pods(_namespace_of(spec, spec.models[c]), _model_pods(spec.models[c]))
                       for c in sorted(model.callers)]
            out.append(_netpol(tenant, f"allow-callers-{model.name}", pods=_model_pods(model), ingress=[{
                "from": sources, "ports": _tcp([naming.MODEL_HTTP_PORT])}]))
        callees = sorted(m.name for m in spec.models.values() if model.name in m.callers)
        if callees:
            targets = [_pods(_namespace_of(spec, spec.models[c]), _model_pods(spec.models[c])) for c in callees]
            out.append(_netpol(tenant, f"allow-calls-{model.name}", pods=_model_pods(model), egress=[{
                "to": targets, "ports": _tcp([naming.MODEL_HTTP_PORT])}]))
        if model.multi_node:
            peers = [{"podSelector": {"matchLabels": _model_pods(model)}}]
            out.append(_netpol(tenant, f"allow-peers-{model.name}", pods=_model_pods(model),
                               ingress=[{"from": peers}], egress=[{"to": peers}]))
    if any(m.downloads_weights for m in models):
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
    """Tenant namespaces and their quotas, limits and default-deny network policies."""
    pulumi_type = TYPE  # the type token (part of every child's URN); the component package hosts a subclass
    # with `aifactory:index:<name>`, the token its schema names (components/__main__.py)

    namespace_names: pulumi.Output[dict[str, str]]
    """Each tenant's namespace, by tenant name."""

    def __init__(self, name: str, args: TenancyArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(self.pulumi_type, name, None, opts)
        spec = tenancy_spec(name, args)
        self.namespaces: dict[str, k8s.core.v1.Namespace] = {}  # by tenant name
        for tenant in spec.tenants.values():
            ns = create_namespace(f"{name}-{tenant.name}", tenant.namespace,
                                  labels=tenant_namespace_labels(spec, tenant),
                                  opts=pulumi.ResourceOptions(parent=self))
            self.namespaces[tenant.name] = ns
            in_ns = pulumi.ResourceOptions(parent=self, depends_on=[ns])
            for obj in [resource_quota(tenant), limit_range(tenant), *network_policies(spec, tenant)]:
                _object(f"{name}-{tenant.name}-{obj['kind'].lower()}-{obj['metadata']['name']}", obj, in_ns)
        self.namespace_names = pulumi.Output.all(**{t: ns.metadata.name for t, ns in self.namespaces.items()})
        self.register_outputs({"namespaces": {t: ns.metadata.name for t, ns in self.namespaces.items()}})

