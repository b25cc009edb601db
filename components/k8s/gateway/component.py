"""Gateway: the Envoy inference gateway in front of every model (config: components.k8s.gateway.envoy.config).

    Namespace (istio-injection) -> ServiceAccount -> ConfigMap (envoy.yaml) -> Deployment -> Service
    -> metrics Service -> HorizontalPodAutoscaler -> PodDisruptionBudget -> ServiceMonitor (/stats/prometheus)
    -> NetworkPolicies (default deny + allows) -> AuthorizationPolicies (allow-nothing + Prometheus)
    -> DestinationRule (in-mesh clients reach the listener in plaintext)
    -> per model: VirtualService + DestinationRule (the sidecar adds no retries; the gateway's connect timeout)

The gateway's pods join the mesh for their outbound calls only: requests to model servers and spans to
the Collector leave through the sidecar with the gateway's mesh identity (what the tenants'
AuthorizationPolicies admit), while client traffic from the load balancer reaches Envoy directly
(the listener port is excluded from inbound capture). On AWS a LoadBalancer Service is an internal
NLB made by the AWS Load Balancer Controller (components.k8s.load_balancer), with the gateway's pods as targets
(`ip`): a node leaving cuts no connection, and a terminating pod keeps serving until the NLB has stopped sending it
new connections and its last request has ended (drain_seconds). Prometheus scrapes the stats port through a
headless metrics Service, over mTLS, so the load balancer carries client traffic only.

Modules: gateway_args (GatewayArgs), gateway_spec (validation and defaults), gateway_names (object names, labels,
the Service's address), gateway_network (NetworkPolicies, AuthorizationPolicies, the in-mesh DestinationRule:
the namespace's posture and how in-mesh clients reach the listener); this module builds the Envoy workload and
registers every object.

Gateway takes its own `args` (GatewayArgs: the models it routes to, their tenants, its settings), so a platform
team can run it without the kit's stack config; infra.component_args maps PlatformConfig to them.
"""

# No `from __future__ import annotations`: the package analyzer reads Gateway's argument types from evaluated
# annotations.
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming, security, versions
from components.k8s.defaults import DEFAULT_GATEWAY_NAMESPACE, DEFAULT_KUBERNETES_VERSION, DEFAULT_MONITORING_NAMESPACE
from components.k8s.gateway.args import (
    BudgetServiceArgs,
    CircuitBreakersArgs,
    GatewayArgs,
    GatewayAuthArgs,
    GatewayModelArgs,
    GatewayTenantArgs,
    GatewayVariantArgs,
    HealthCheckArgs,
    JwtIssuerArgs,
    OutlierDetectionArgs,
    RateLimitArgs,
    RetriesArgs,
    RoutingArgs,
    TokenBudgetArgs,
)
from components.k8s.gateway.budget_objects import STORE_RELEASE, budget_objects, store_values
from components.k8s.gateway.drain import prestop
from components.k8s.gateway.envoy.base import longest_request_seconds, model_host
from components.k8s.gateway.envoy.budgets import any_budget
from components.k8s.gateway.envoy.config import (
    CLIENT_CONNECTION_MAX_SECONDS,
    CLIENT_DRAIN_SECONDS,
    GATEWAY_MEMORY_LIMIT_GIB,
    GATEWAY_STAT_PREFIX,
    GatewayView,
    render,
)
from components.k8s.gateway.names import (
    CONFIG_HASH_ANNOTATION,
    SERVICE_PORT,
    _meta,
    _selector,
    gateway_labels,
    service_host,
    service_url,
)
from components.k8s.gateway.network import (
    NAMESPACE_NAME_LABEL,
    SIDECAR_METRICS_PORTS,
    authorization_policies,
    destination_rule,
    network_policies,
)
from components.k8s.gateway.spec import (
    DEFAULT_TRACE_SAMPLE_RATIO,
    ENGINES,
    PRIORITIES,
    SERVICE_TYPES,
    GatewaySpec,
    gateway_spec,
)
from components.k8s.mesh import MESH_SCRAPE_TLS, engine_traffic_objects
from components.k8s.namespaces import create_namespace, namespace_labels
from components.k8s.serving import AWAIT_TIMEOUT_ANNOTATION, MONITORING_API_VERSION, register_object
from components.k8s.serving.lifecycle import proxy_drain_annotations
from components.validation import Problems
from components.vocabulary import (
    DEREGISTRATION_DELAY,
    NLB_CLASS,
    NLB_TARGET_GROUP_ATTRIBUTES,
    NLB_TARGET_TYPE,
    READINESS_GATE_INJECT,
)

__all__ = [
    "TYPE",
    "DEFAULT_GATEWAY_NAMESPACE",
    "DEFAULT_KUBERNETES_VERSION",
    "DEFAULT_MONITORING_NAMESPACE",
    "DEFAULT_TRACE_SAMPLE_RATIO",
    "ENGINES",
    "PRIORITIES",
    "SERVICE_TYPES",
    "GatewayArgs",
    "GatewayModelArgs",
    "GatewayVariantArgs",
    "GatewayTenantArgs",
    "RateLimitArgs",
    "RetriesArgs",
    "OutlierDetectionArgs",
    "CircuitBreakersArgs",
    "HealthCheckArgs",
    "JwtIssuerArgs",
    "GatewayAuthArgs",
    "RoutingArgs",
    "TokenBudgetArgs",
    "BudgetServiceArgs",
    "GatewaySpec",
    "gateway_spec",
    "DEFAULT_ENVOY_IMAGE",
    "CONFIG_MAP",
    "CONFIG_HASH_ANNOTATION",
    "DEFAULT_CPU_TARGET_PERCENT",
    "SERVICE_PORT",
    "METRICS_SERVICE",
    "AWS_LB_ANNOTATIONS",
    "NLB_DEREGISTRATION_WINDOW_SECONDS",
    "NLB_MAX_DEREGISTRATION_DELAY_SECONDS",
    "NLB_REGISTRATION_SECONDS",
    "GATEWAY_POD_START_SECONDS",
    "rollout_await_seconds",
    "nlb_targets",
    "accept_seconds",
    "drain_seconds",
    "prestop_hook",
    "deregistration_delay_seconds",
    "check_deregistration_delay",
    "gateway_labels",
    "config_map",
    "termination_grace_seconds",
    "deployment",
    "service",
    "metrics_service",
    "autoscaler",
    "disruption_budget",
    "service_monitor",
    "service_account",
    "network_policies",
    "NAMESPACE_NAME_LABEL",
    "SIDECAR_METRICS_PORTS",
    "authorization_policies",
    "service_host",
    "service_url",
    "destination_rule",
    "OBJECT_NEEDS",
    "object_needs",
    "apply_order",
    "replace_on_changes",
    "gateway_objects",
    "Gateway",
]


TYPE = "aifactory:k8s:Gateway"  # the type token of the kit's existing stacks (part of every child's URN)
DEFAULT_ENVOY_IMAGE = "envoyproxy/envoy:v1.40.0"  # the version the tests validate the config with
CONFIG_MAP = "envoy-config"
DEFAULT_CPU_TARGET_PERCENT = 60  # HPA target: headroom for bursts while new replicas start
METRICS_SERVICE = f"{naming.GATEWAY_APP}-metrics"
METRICS_COMPONENT = "gateway-metrics"  # app.kubernetes.io/component of the metrics Service only
CONFIG_DIR = "/etc/envoy"
# The AWS Load Balancer Controller's Service annotations (kubernetes-sigs/aws-load-balancer-controller@v3.5.0:
# docs/guide/service/annotations.md; the Service's loadBalancerClass, NLB_CLASS, hands it to that controller, and the
# in-tree one ignores a Service with a class. Not `aws-load-balancer-type: external`, the other way to hand it over:
# docs/guide/service/nlb.md warns never to add that to an existing Service, and the class cannot be added to one
# either, but its refusal makes the kit replace the Service: replace_on_changes). The target group's attributes are
# the gateway's own (service()).
AWS_LB_ANNOTATIONS = {
    # the NLB reaches each gateway pod's IP directly: no node, no kube-proxy on the way
    NLB_TARGET_TYPE: "ip",
    # the controller's default too, but the annotation is what keeps an existing NLB's scheme from changing
    "service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
    # Off by default: with few gateway pods (the HPA's minimum is 2), a zone of the NLB may hold none, and that
    # zone's address would answer nothing.
    "service.beta.kubernetes.io/aws-load-balancer-attributes": "load_balancing.cross_zone.enabled=true",
}
# After the controller deregisters a target, the NLB goes on opening new connections to it for a while: "a few
# minutes" for the load balancer to stop routing to it (docs.aws.amazon.com/elasticloadbalancing/latest/network/
# target-group-register-targets.html), about two minutes whatever the deregistration delay as measured upstream
# (kubernetes-sigs/aws-load-balancer-controller#2366, aws/containers-roadmap#470). The gateway pod keeps accepting
# them for this long (its preStop), then drains them: two minutes, and a minute for the controller to see the
# endpoint go and call DeregisterTargets (rate limits, retries).
NLB_DEREGISTRATION_WINDOW_SECONDS = 180
# A new target's registration and first health checks: "a few minutes" (the same page). With readiness gates a
# rolling update waits that long for each new pod, one at a time (maxSurge 1, maxUnavailable 0), and a new Envoy pod
# starts (a small image, its first DNS answers and health checks) within GATEWAY_POD_START_SECONDS before that.
NLB_REGISTRATION_SECONDS = 300
GATEWAY_POD_START_SECONDS = 60
# The target group attribute's range (0-3600 s: the same annotations.md, target-group-attributes).
NLB_MAX_DEREGISTRATION_DELAY_SECONDS = 3600


def config_map(cfg: GatewayView, envoy_yaml: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(cfg, CONFIG_MAP),
            "data": {"envoy.yaml": envoy_yaml}}


# Seconds between the pod's termination starting and SIGTERM reaching Envoy beyond the longest request, and left
# after it for Envoy to exit before the kubelet kills it.
DRAIN_MARGIN_SECONDS = 10
# Without an NLB the pod's endpoint leaves kube-proxy's rules and the in-mesh callers' sidecars within seconds of its
# termination starting: the gateway keeps accepting connections that long (the margin's seconds).
ENDPOINTS_LEAVE_SECONDS = DRAIN_MARGIN_SECONDS


def nlb_targets(cfg: GatewayView) -> bool:
    """Whether the gateway's pods are an NLB's targets (an AWS stack's LoadBalancer Service)."""
    return cfg.is_aws and cfg.gateway.service_type == "LoadBalancer"


def accept_seconds(cfg: GatewayView) -> int:
    """How long a terminating gateway pod may still be sent new connections: behind an NLB (ip targets)
    NLB_DEREGISTRATION_WINDOW_SECONDS, else ENDPOINTS_LEAVE_SECONDS."""
    return NLB_DEREGISTRATION_WINDOW_SECONDS if nlb_targets(cfg) else ENDPOINTS_LEAVE_SECONDS


def drain_seconds(cfg: GatewayView) -> int:
    """The longest a terminating gateway pod keeps serving: its preStop's bound. Envoy exits on SIGTERM without
    draining (its --drain-time-s applies to hot restarts and /drain_listeners:
    envoyproxy/envoy@v1.40.0:docs/root/intro/arch_overview/operations/draining.rst), so the preStop waits first, with
    Envoy still accepting connections: the endpoint leaves the Service at once; behind an NLB (ip targets) new
    connections may still arrive for NLB_DEREGISTRATION_WINDOW_SECONDS. A client's connection takes its last new
    request within CLIENT_CONNECTION_MAX_SECONDS + CLIENT_DRAIN_SECONDS of opening (max_connection_duration, then the
    connection manager's drain: `Connection: close`), and that request may last the longest any route allows (a
    model's timeoutSeconds). So nothing a client sent is still in flight, and no client connection open, when Envoy
    gets SIGTERM. The preStop (prestop_hook) ends as soon as no request is in flight after the fixed phases: an idle
    pod's takes accept_seconds + 65 s, only a request still running holds it, up to this bound."""
    window = NLB_DEREGISTRATION_WINDOW_SECONDS if nlb_targets(cfg) else 0
    return (window + CLIENT_CONNECTION_MAX_SECONDS + CLIENT_DRAIN_SECONDS + longest_request_seconds(cfg)
            + DRAIN_MARGIN_SECONDS)


def prestop_hook(cfg: GatewayView) -> dict[str, Any]:
    """The Envoy container's preStop (components.k8s.gateway.drain): accept for accept_seconds, wait
    CLIENT_CONNECTION_MAX_SECONDS + CLIENT_DRAIN_SECONDS for every client connection to close or drain, then read the
    gateway listener's requests in flight every second until none is left, at most drain_seconds in all."""
    return prestop(stat_prefix=GATEWAY_STAT_PREFIX, accept_seconds=accept_seconds(cfg),
                   close_seconds=CLIENT_CONNECTION_MAX_SECONDS + CLIENT_DRAIN_SECONDS,
                   bound_seconds=drain_seconds(cfg))


def termination_grace_seconds(cfg: GatewayView) -> int:
    """The gateway pod's terminationGracePeriodSeconds: its preStop's bound (drain_seconds) and a margin for Envoy's
    exit."""
    return drain_seconds(cfg) + DRAIN_MARGIN_SECONDS


def deregistration_delay_seconds(cfg: GatewayView) -> int:
    """The NLB target group's deregistration delay: the pod's whole grace period. The controller deregisters a pod
    only once its termination has begun, so the target stays draining (its connections forwarded) for as long as
    the pod may still serve one, and a shorter delay would let the NLB drop a connection the pod still serves. A
    draining target with no connection left is removed at once (the delay is an upper bound), so a long one costs
    nothing once the pod is done."""
    return termination_grace_seconds(cfg)


def check_deregistration_delay(name: str, cfg: GatewayView) -> None:
    """Behind an NLB, the pod's grace (the deregistration delay) must fit the attribute's range: raise
    pulumi.InputPropertiesError naming each model whose timeoutSeconds is too long."""
    if not nlb_targets(cfg) or deregistration_delay_seconds(cfg) <= NLB_MAX_DEREGISTRATION_DELAY_SECONDS:
        return
    most = NLB_MAX_DEREGISTRATION_DELAY_SECONDS - (deregistration_delay_seconds(cfg) - longest_request_seconds(cfg))
    problems = Problems("Gateway", name)
    for key, m in cfg.models.items():
        if m.timeout_seconds > most:
            problems.add(f"models.{key}.timeoutSeconds",
                         f"{m.timeout_seconds:g} s is longer than an AWS NLB can drain: the gateway pod's grace would "
                         f"pass the target group's deregistration delay limit of "
                         f"{NLB_MAX_DEREGISTRATION_DELAY_SECONDS} s; at most {most} s")
    problems.raise_any()


def rollout_await_seconds(cfg: GatewayView) -> int:
    """How long `pulumi up` waits for a rollout behind an NLB: each of up to maxReplicas pods, one at a time, starts
    and becomes a healthy target. (pulumi-kubernetes' default for a Deployment is 600 s: pulumi/pulumi-kubernetes
    @v4.32.0 provider/pkg/await/deployment.go DefaultDeploymentTimeoutMins.)"""
    return cfg.gateway.max_replicas * (GATEWAY_POD_START_SECONDS + NLB_REGISTRATION_SECONDS)


def deployment(cfg: GatewayView, envoy_yaml: str) -> dict[str, Any]:
    """Rolled when the config changes: the pod template carries the config's hash. A pod being replaced or
    evicted serves its requests in flight to their end before Envoy stops (prestop_hook, at most drain_seconds).
    Behind an NLB a new pod is ready once it is a healthy target (its readiness gate), so `pulumi up` waits
    rollout_await_seconds."""
    config_hash = hashlib.sha256(envoy_yaml.encode()).hexdigest()
    grace = termination_grace_seconds(cfg)
    container = {
        "name": "envoy",
        "image": DEFAULT_ENVOY_IMAGE,
        "args": ["--config-path", f"{CONFIG_DIR}/envoy.yaml", "--log-level", "warn",
                 "--drain-time-s", "20", "--drain-strategy", "immediate"],
        "ports": [{"name": "http", "containerPort": naming.ENVOY_LISTENER_PORT, "protocol": "TCP"},
                  {"name": "stats", "containerPort": naming.ENVOY_STATS_PORT, "protocol": "TCP"}],
        # /ready is LIVE once every cluster has its first DNS answer and each model's replicas their first round of
        # checks (Envoy's cluster manager initialises the clusters before the listeners take traffic)
        "readinessProbe": {"httpGet": {"path": "/ready", "port": "stats"}, "periodSeconds": 5,
                           "failureThreshold": 2},
        "livenessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 10, "failureThreshold": 3},
        "resources": security.resources("1", "512Mi", cpu_limit="2",
                                        memory_limit=f"{GATEWAY_MEMORY_LIMIT_GIB}Gi"),
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
        "securityContext": security.container_security_context(),
        # ends when the pod's last request does (bash in the image: components.k8s.gateway.drain)
        "lifecycle": {"preStop": prestop_hook(cfg)},
    }
    meta = _meta(cfg)
    if nlb_targets(cfg):
        meta["annotations"] = {AWAIT_TIMEOUT_ANNOTATION: str(rollout_await_seconds(cfg))}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
        "selector": {"matchLabels": _selector()},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
        "template": {
            # behind an NLB the controller's webhook gives each new pod a readiness gate: ready once a healthy target
            "metadata": {"labels": {**gateway_labels(), **({READINESS_GATE_INJECT: "enabled"} if nlb_targets(cfg)
                                                           else {})}, "annotations": {
                CONFIG_HASH_ANNOTATION: config_hash,
                "traffic.sidecar.istio.io/excludeInboundPorts": str(naming.ENVOY_LISTENER_PORT),
                # its outbound sidecar carries the requests to the models until the pod ends
                **proxy_drain_annotations(grace)}},
            "spec": {
                "serviceAccountName": naming.GATEWAY_SERVICE_ACCOUNT,
                "automountServiceAccountToken": False,
                "securityContext": security.pod_security_context(),
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                               "whenUnsatisfiable": "ScheduleAnyway",
                                               "labelSelector": {"matchLabels": _selector()}}],
                "containers": [container],
                "volumes": [{"name": "config", "configMap": {"name": CONFIG_MAP}}],
                "terminationGracePeriodSeconds": grace,
            },
        },
    }}


def service(cfg: GatewayView) -> dict[str, Any]:
    """On AWS an internal NLB of the AWS Load Balancer Controller with the pods as targets, each kept draining for
    the pod's grace (deregistration_delay_seconds) and never cut when the delay ends (connection termination off)."""
    meta = _meta(cfg)
    spec: dict[str, Any] = {"type": cfg.gateway.service_type}
    if nlb_targets(cfg):
        meta["annotations"] = {**AWS_LB_ANNOTATIONS, NLB_TARGET_GROUP_ATTRIBUTES: (
            f"{DEREGISTRATION_DELAY}={deregistration_delay_seconds(cfg)},"
            "deregistration_delay.connection_termination.enabled=false")}
        spec["loadBalancerClass"] = NLB_CLASS
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {
        **spec,
        "selector": _selector(),
        "ports": [{"name": "http", "port": SERVICE_PORT, "targetPort": "http", "protocol": "TCP",
                   "appProtocol": "http"}],
    }}


def metrics_service(cfg: GatewayView) -> dict[str, Any]:
    """Headless, the stats port only: what the ServiceMonitor scrapes, one target per pod. It publishes not-ready
    addresses: the Endpoints controller leaves a pod with a deletionTimestamp out of a Service's endpoints unless the
    Service sets publishNotReadyAddresses (kubernetes/kubernetes@v1.34.0
    staging/src/k8s.io/endpointslice/util/controller_utils.go ShouldPodBeInEndpoints, called with it as
    includeTerminating by pkg/controller/endpoint/endpoints_controller.go), and prometheus-operator's ServiceMonitors
    discover targets from Endpoints unless told otherwise. A terminating gateway pod drains for up to its grace, and
    its requests in flight are what GatewayDrainCutsRequests reads: it stays a target until it is gone. Nothing but
    the scrape uses this Service."""
    meta = _meta(cfg, METRICS_SERVICE)
    meta["labels"] = naming.common_labels(naming.GATEWAY_APP, METRICS_COMPONENT)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": _selector(),
        "ports": [{"name": "stats", "port": naming.ENVOY_STATS_PORT, "targetPort": "stats", "protocol": "TCP",
                   "appProtocol": "http"}],
    }}


def autoscaler(cfg: GatewayView) -> dict[str, Any]:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": _meta(cfg), "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": naming.GATEWAY_APP},
        "minReplicas": cfg.gateway.min_replicas,
        "maxReplicas": cfg.gateway.max_replicas,
        "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": DEFAULT_CPU_TARGET_PERCENT}}}],
    }}


def disruption_budget(cfg: GatewayView) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(cfg),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": _selector()}}}


def service_monitor(cfg: GatewayView) -> dict[str, Any]:
    return {"apiVersion": MONITORING_API_VERSION, "kind": "ServiceMonitor", "metadata": _meta(cfg), "spec": {
        "selector": {"matchLabels": metrics_service(cfg)["metadata"]["labels"]},
        "endpoints": [{"port": "stats", "path": "/stats/prometheus", "interval": "15s", **MESH_SCRAPE_TLS}],
    }}


def service_account(cfg: GatewayView) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(cfg, naming.GATEWAY_SERVICE_ACCOUNT),
            "automountServiceAccountToken": False}


# What each object waits for beyond its namespace, by child-resource suffix (gateway_objects' keys): only where an
# ordering matters. The Deployment's pods name the ServiceAccount (the ServiceAccount admission plugin refuses a
# pod whose account does not exist: kubernetes/kubernetes plugin/pkg/admission/serviceaccount/admission.go) and
# mount envoy.yaml from the ConfigMap, which Envoy reads once at start. A changed envoy.yaml replaces the ConfigMap
# (pulumi-kubernetes replaces ConfigMaps, delete before replace for a named one: pulumi/pulumi-kubernetes@v4.32.0
# provider/pkg/provider/diff.go, provider.go Diff); the new config hash rolls the pods only after it, so no new pod
# starts with the old config or finds none. What the gateway needs from outside (istiod, the Prometheus
# operator's CRD, the model Services Envoy resolves) is the component's own depends_on: its children register
# after it, and `pulumi destroy` removes them before it and it before what it depends on (the engine counts a
# resource's parent among its dependencies: pulumi/pulumi@v3.259.0 pkg/resource/graph/dependency_graph.go
# DependenciesOf, pkg/resource/deploy/step_generator.go ScheduleDeletes).
OBJECT_NEEDS: Mapping[str, tuple[str, ...]] = {"deployment": ("serviceaccount", "configmap")}


def object_needs(cfg: GatewayView) -> Mapping[str, tuple[str, ...]]:
    """OBJECT_NEEDS, and behind an NLB the Deployment after the Service too: the controller's webhook gives a pod its
    readiness gate only when the pod is created after its Service's target group binding exists
    (kubernetes-sigs/aws-load-balancer-controller@v3.5.0:docs/deploy/pod_readiness_gate.md), and pulumi-kubernetes
    finishes a LoadBalancer Service once the controller has made its NLB."""
    if not nlb_targets(cfg):
        return OBJECT_NEEDS
    return {**OBJECT_NEEDS, "deployment": (*OBJECT_NEEDS["deployment"], "service")}


def apply_order(suffixes: Sequence[str], needs: Mapping[str, tuple[str, ...]]) -> list[str]:
    """`suffixes` in their order, except that each comes after what it needs."""
    out: list[str] = []

    def visit(suffix: str) -> None:
        if suffix not in out:
            for need in needs.get(suffix, ()):
                visit(need)
            out.append(suffix)

    for suffix in suffixes:
        visit(suffix)
    return out


def replace_on_changes(cfg: GatewayView) -> dict[str, list[str]]:
    """The properties whose change replaces an object, by child-resource suffix. Behind an NLB, the Service's
    loadBalancerClass: it may not change once set (the API server refuses the update: kubernetes/kubernetes
    pkg/apis/core/validation/validation.go validateLoadBalancerClassField, unset to set included), so a Service
    the in-tree controller made is replaced (deleted first: it keeps its name), and its NLB with it."""
    return {"service": ["spec.loadBalancerClass"]} if nlb_targets(cfg) else {}


def gateway_objects(cfg: GatewayView) -> dict[str, dict[str, Any]]:
    """Every object in the gateway namespace by child-resource suffix, in apply order."""
    envoy_yaml = render(cfg)  # once: a large fleet's bootstrap is the slowest thing synth renders
    return {"serviceaccount": service_account(cfg), "configmap": config_map(cfg, envoy_yaml),
            "deployment": deployment(cfg, envoy_yaml),
            "service": service(cfg), "metrics-service": metrics_service(cfg),
            "horizontalpodautoscaler": autoscaler(cfg), "poddisruptionbudget": disruption_budget(cfg),
            "servicemonitor": service_monitor(cfg),
            **{f"networkpolicy-{p['metadata']['name']}": p for p in network_policies(cfg)},
            **{f"authorizationpolicy-{p['metadata']['name']}": p for p in authorization_policies(cfg)},
            "destinationrule": destination_rule(cfg),
            # the sidecar adds no retries of its own to the gateway's tries, and connects within the gateway's time
            **{f"{o['kind'].lower()}-{o['metadata']['name']}": o for o in engine_traffic_objects(
                namespace=cfg.gateway.namespace, hosts={m.name: model_host(cfg, m) for m in cfg.models.values()},
                connect_timeout_seconds=cfg.gateway.connect_timeout_seconds, labels=gateway_labels())},
            **budget_objects(cfg)}  # the token budget service (components.k8s.gateway.budget_objects), if any


class Gateway(pulumi.ComponentResource):
    """The Envoy inference gateway: its namespace and everything in it."""
    pulumi_type = TYPE  # the type token (part of every child's URN); the component package hosts a subclass
    # with `aifactory:index:<name>`, the token its schema names (components/__main__.py)

    namespace: pulumi.Output[str]
    """The gateway's namespace."""
    service: pulumi.Output[str]
    """The gateway Service's in-cluster host name."""

    def __init__(self, name: str, args: GatewayArgs, opts: pulumi.ResourceOptions | None = None, *,
                 after: Sequence[pulumi.Resource] = ()) -> None:
        """`after`: what the token budgets' store (a Helm release with a volume claim) waits for besides the
        namespace, as the platform's releases do (on EKS: the system nodes, the add-ons, the storage class)."""
        super().__init__(self.pulumi_type, name, None, opts)
        cfg = gateway_spec(name, args)
        check_deregistration_delay(name, cfg)
        namespace = create_namespace(
            f"{name}-ns", cfg.gateway.namespace,
            labels={**namespace_labels(pod_security="restricted", kubernetes_version=cfg.kubernetes_version,
                                       injection=True),
                    **({READINESS_GATE_INJECT: "enabled"} if nlb_targets(cfg) else {})},
            opts=pulumi.ResourceOptions(parent=self))
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[namespace])
        made: dict[str, pulumi.Resource] = {}
        objects, needs_of, replaced = gateway_objects(cfg), object_needs(cfg), replace_on_changes(cfg)
        for suffix in apply_order(list(objects), needs_of):
            obj = objects[suffix]
            needs = [made[n] for n in needs_of.get(suffix, ())]
            opts_ = in_ns.merge(pulumi.ResourceOptions(depends_on=needs)) if needs else in_ns
            if suffix in replaced:
                opts_ = opts_.merge(pulumi.ResourceOptions(replace_on_changes=replaced[suffix]))
            if obj["kind"] == "NetworkPolicy":
                made[suffix] = k8s.networking.v1.NetworkPolicy(f"{name}-{suffix}", metadata=obj["metadata"],
                                                               spec=obj["spec"], opts=opts_)
            else:
                made[suffix] = register_object(f"{name}-{suffix}", obj, opts_)
        if any_budget(cfg):  # the token budgets' store
            versions.release(f"{name}-budget-store", versions.VALKEY, release_name=STORE_RELEASE,
                             namespace=cfg.gateway.namespace, values=store_values(cfg),
                             opts=pulumi.ResourceOptions(parent=self, depends_on=[namespace, *after]))
        self.namespace = pulumi.Output.from_input(cfg.gateway.namespace)
        self.service = pulumi.Output.from_input(service_host(cfg.gateway.namespace))
        self.register_outputs({"namespace": cfg.gateway.namespace,
                               "service": service_host(cfg.gateway.namespace),
                               "port": SERVICE_PORT})
