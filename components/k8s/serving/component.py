"""The serving components: ModelDeployment (one model's objects) and ServingControllers (KEDA, LeaderWorkerSet,
the node cache DaemonSet and the PriorityClasses the stack's models need), and how both register objects."""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming, security, versions
from components.k8s.defaults import SERVING_PRIORITY_CLASSES
from components.k8s.gpu_stack import pool_tolerations
from components.k8s.serving.args import ModelDeploymentArgs, serving_spec
from components.k8s.serving.objects import keda_scaled, model_objects, s3_read_policy, workload
from components.k8s.serving.pod import node_cache
from components.k8s.serving.views import ControllersView, ServingView, model_namespace
from components.k8s.settings import Model
from components.k8s.storage import cache_prep_daemonset, node_cache_path

if TYPE_CHECKING:
    from components.identity import WorkloadIdentity

__all__ = [
    "TYPE",
    "WORKLOAD_KINDS",
    "register_object",
    "ModelPrerequisites",
    "object_prerequisites",
    "ModelDeployment",
    "ServingControllers",
    "cache_prep",
    "priority_classes",
    "required_controllers",
]

TYPE = "aifactory:k8s:ModelDeployment"  # the type token of the kit's existing stacks (part of every child's URN)
WORKLOAD_KINDS = frozenset({"StatefulSet", "LeaderWorkerSet"})  # the objects that make the model's pods

_TYPED = {
    "ServiceAccount": k8s.core.v1.ServiceAccount,
    "ConfigMap": k8s.core.v1.ConfigMap,
    "HorizontalPodAutoscaler": k8s.autoscaling.v2.HorizontalPodAutoscaler,
    "StatefulSet": k8s.apps.v1.StatefulSet,
    "Service": k8s.core.v1.Service,
    "PodDisruptionBudget": k8s.policy.v1.PodDisruptionBudget,
    "PersistentVolume": k8s.core.v1.PersistentVolume,
    "PersistentVolumeClaim": k8s.core.v1.PersistentVolumeClaim,
    "DaemonSet": k8s.apps.v1.DaemonSet,
    "PriorityClass": k8s.scheduling.v1.PriorityClass,
}


def object_constructor(obj: dict[str, Any]) -> tuple[Callable[..., pulumi.CustomResource], dict[str, Any]]:
    """The typed constructor of a Kubernetes object dict (custom resources: CustomResource) and its keywords."""
    fields = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    typed = _TYPED.get(obj["kind"])
    if typed is None:
        return k8s.apiextensions.CustomResource, {"api_version": obj["apiVersion"], "kind": obj["kind"], **fields}
    if obj["kind"] == "ServiceAccount":
        fields["automount_service_account_token"] = fields.pop("automountServiceAccountToken")
    if obj["kind"] == "PriorityClass":
        fields["preemption_policy"] = fields.pop("preemptionPolicy")
        fields["global_default"] = fields.pop("globalDefault")
    return typed, fields


def register_object(name: str, obj: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """Register a Kubernetes object dict with its typed constructor (custom resources: CustomResource)."""
    constructor, fields = object_constructor(obj)
    return constructor(name, **fields, opts=opts)


@dataclass(frozen=True)
class ModelPrerequisites:
    """What a model's objects wait for at `pulumi up` (and outlive at `pulumi destroy`), each object only what it
    needs: its objects, and the stack's models, are then created side by side rather than each after the whole
    platform. Default: nothing (the cluster has it all already)."""

    namespace: Sequence[pulumi.Resource] = ()
    """Every namespaced object: the tenant's Namespace (the API server refuses objects in a missing namespace)."""
    crds: Mapping[str, Sequence[pulumi.Resource]] = field(default_factory=dict)
    """Custom resources, by API group: what installs the group's CRDs and runs its controller. Created before,
    the API server answers 'no matches for kind'; destroyed after, the controller is gone when its finalizers
    should be removed."""
    pods: Sequence[pulumi.Resource] = ()
    """The Deployment or LeaderWorkerSet: what its pods need when they are created: Istio's injection webhook (a
    pod created before istiod runs without a sidecar, outside its tenant's AuthorizationPolicies, until restarted),
    those policies, nodes of its pool, the StorageClass its cache volume names."""
    priority_classes: Mapping[str, pulumi.Resource] = field(default_factory=dict)
    """By name: the workload waits for the PriorityClass its pods name (the Priority admission plugin refuses a
    pod whose class does not exist)."""
    node_cache: Sequence[pulumi.Resource] = ()
    """A workload whose pods mount the node-local cache: what makes its directories on the nodes (the prep
    DaemonSet; the kubelet does not mount a hostPath of type Directory that does not exist)."""


def object_prerequisites(obj: dict[str, Any], after: ModelPrerequisites, *, priority_class: str | None = None,
                         node_cache: bool = False) -> list[pulumi.Resource]:
    """What one of a model's objects waits for (see ModelPrerequisites); `priority_class` and `node_cache`: what
    the model's pods name and mount."""
    out: list[pulumi.Resource] = [*after.namespace] if obj["metadata"].get("namespace") else []
    out += after.crds.get(obj["apiVersion"].rpartition("/")[0], ())
    if obj["kind"] in WORKLOAD_KINDS:
        out += after.pods
        if priority_class is not None and priority_class in after.priority_classes:
            out.append(after.priority_classes[priority_class])
        if node_cache:
            out += after.node_cache
    return out


def _depends_on(opts: pulumi.ResourceOptions | None) -> list[Any]:
    """A component's `depends_on` as a list (the option takes one resource or a list)."""
    deps = opts.depends_on if opts is not None else None
    return [] if deps is None else list(deps) if isinstance(deps, list) else [deps]


def _children_of(component: pulumi.ComponentResource, opts: pulumi.ResourceOptions | None) -> pulumi.ResourceOptions:
    """Children record the component's own dependencies: the engine orders creation by the parent, but
    `pulumi destroy` only by recorded dependencies, and would otherwise remove KEDA, LWS, Istio or the
    Prometheus operator (and their CRDs) before the custom resources they serve."""
    return pulumi.ResourceOptions(parent=component, depends_on=opts.depends_on if opts is not None else None)


class ModelDeployment(pulumi.ComponentResource):
    """One model's serving pool in its tenant's namespace (see the module docstring for the objects).

    An s3:// model needs `cluster` (its IRSA role trusts the cluster's OIDC provider), and then `opts`
    must carry the Kubernetes and AWS providers."""
    pulumi_type = TYPE  # the type token (part of every child's URN); the component package hosts a subclass
    # with `aifactory:index:<name>`, the token its schema names (components/__main__.py)

    namespace: pulumi.Output[str]
    """The namespace the model runs in."""
    service: pulumi.Output[str]
    """The model's Service (port 8000, OpenAI API)."""
    kind: pulumi.Output[str]
    """StatefulSet, or LeaderWorkerSet for a multi-node replica."""

    def __init__(self, name: str, args: ModelDeploymentArgs, opts: pulumi.ResourceOptions | None = None,
                 cluster: "WorkloadIdentity | None" = None, after: ModelPrerequisites | None = None) -> None:
        """`after`: what each object waits for (default: nothing); `opts.depends_on` applies to every object."""
        super().__init__(self.pulumi_type, name, None, opts)
        cfg = serving_spec(name, args)
        model = cfg.model
        inherited = _depends_on(opts)
        after = after or ModelPrerequisites()
        # the ARN with the role's policy as a dependency: the model's pods start only once they may read the bucket
        role_arn = self._s3_role(name, cfg, model, cluster) if model.uri.startswith("s3://") \
            else None
        priority_class, cached = cfg.priority_class_of(model), node_cache(cfg, model)
        # the model's objects by kind (the gateway waits for the Service it resolves); not a class annotation: the
        # package's analyzer reads those as the component's outputs
        self.objects: dict[str, pulumi.CustomResource] = {}
        for obj in model_objects(cfg, model, role_arn=role_arn):
            needs = object_prerequisites(obj, after, priority_class=priority_class, node_cache=cached)
            if obj["kind"] == "ScaledObject":  # KEDA scales the workload: it must exist first
                needs = [*needs, *(self.objects[k] for k in sorted(WORKLOAD_KINDS) if k in self.objects)]
            # Called here, not through register_object, and the options built, not merged from the children's:
            # the SDK turns every frame under a resource's constructor into a source position (pulumi 3.272
            # runtime/resource.py _get_stack_trace), and ResourceOptions.merge deep-copies; ~1,100 objects a stack.
            constructor, fields = object_constructor(obj)
            self.objects[obj["kind"]] = constructor(f"{name}-{obj['kind'].lower()}", **fields,
                                                    opts=pulumi.ResourceOptions(parent=self,
                                                                                depends_on=[*inherited, *needs]))
        self.namespace = pulumi.Output.from_input(model_namespace(cfg, model))
        self.service = pulumi.Output.from_input(model.name)
        self.kind = pulumi.Output.from_input(workload(cfg, model)["kind"])
        self.register_outputs({"namespace": model_namespace(cfg, model), "service": model.name,
                               "kind": workload(cfg, model)["kind"]})

    def _s3_role(self, name: str, cfg: ServingView, model: Model,
                 cluster: "WorkloadIdentity | None") -> pulumi.Output[str]:
        if cluster is None:
            raise ValueError(f"models.{model.name}.uri: {model.uri!r} needs the EKS cluster for its IRSA role; "
                             "pass cluster= (s3:// needs provider aws; use pvc:// or hf:// elsewhere)")
        return cluster.service_account_role(f"{name}-s3", namespace=model_namespace(cfg, model),
                                            service_account=naming.model_service_account(model.name),
                                            inline_policy=s3_read_policy(model.uri),
                                            opts=pulumi.ResourceOptions(parent=self))


class ServingControllers(pulumi.ComponentResource):
    """The controllers serving objects need: KEDA (autoscaled models), LeaderWorkerSet (multi-node ones)."""

    releases: dict[str, k8s.helm.v3.Release]
    """By chart name (keda, lws)."""
    cache_prep: pulumi.CustomResource | None
    """The DaemonSet that makes the node-local cache directories (None: no model caches on its nodes)."""
    priority_classes: dict[str, pulumi.CustomResource]
    """The PriorityClasses the models name, by name."""

    def __init__(self, name: str, *, cfg: ControllersView, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aifactory:k8s:ServingControllers", name, None, opts)
        child = _children_of(self, opts)
        self.releases = {
            chart.chart: versions.release(f"{name}-{chart.chart}", chart, release_name=chart.chart,
                                          namespace=naming.SYSTEM_NAMESPACE, values={}, opts=child)
            for chart in required_controllers(cfg)
        }
        prep = cache_prep(cfg)
        self.cache_prep = register_object(f"{name}-cache-prep", prep, child) if prep is not None else None
        self.priority_classes = {pc["metadata"]["name"]: register_object(f"{name}-{pc['metadata']['name']}", pc, child)
                                 for pc in priority_classes(cfg)}
        self.register_outputs({"charts": [r.chart for r in self.releases.values()]})


def cache_prep(cfg: ControllersView) -> dict[str, Any] | None:
    """The DaemonSet that makes the node-local cache directories of the models on NVMe pools (None: no such model)."""
    models = [m for m in cfg.models.values() if node_cache(cfg, m)]
    if not models:
        return None
    pools = [cfg.node_pools[p] for p in sorted({m.pool for m in models})]
    return cache_prep_daemonset(paths=[node_cache_path(model_namespace(cfg, m), m.name) for m in models],
                                uid=security.DEFAULT_UID, pool_names=[p.name for p in pools],
                                pool_label=naming.LABEL_POOL, tolerations=pool_tolerations(pools),
                                namespace=naming.SYSTEM_NAMESPACE)


def priority_classes(cfg: ControllersView) -> list[dict[str, Any]]:
    """The PriorityClasses the stack's model pods name (SERVING_PRIORITY_CLASSES), cluster-scoped."""
    names = {cfg.priority_class_of(m) for m in cfg.models.values()}
    return [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
             "metadata": {"name": name, "labels": dict(naming.MANAGED_BY)}, "value": value, "preemptionPolicy": policy,
             "globalDefault": False, "description": f"aifactory model pods of priority {priority}"}
            for priority, (name, value, policy) in SERVING_PRIORITY_CLASSES.items() if name in names]


def required_controllers(cfg: ControllersView) -> list[versions.HelmChart]:
    models = cfg.models.values()
    return ([versions.KEDA] if any(keda_scaled(cfg, m) for m in models) else []) + \
        ([versions.LWS] if any(m.multi_node for m in models) else [])
