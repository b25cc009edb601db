"""The serving components: ModelDeployment (one model's objects) and ServingControllers (KEDA, LeaderWorkerSet,
the node cache DaemonSet and the PriorityClasses the stack's models need), and how both register objects."""

from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.aws.iam import arn_with_policies, irsa_role
from components.k8s import naming, security, versions
from components.k8s.defaults import SERVING_PRIORITY_CLASSES
from components.k8s.gpu_stack import pool_tolerations
from components.k8s.serving.args import ModelDeploymentArgs, serving_spec
from components.k8s.serving.objects import model_objects, s3_read_policy, workload
from components.k8s.serving.pod import node_cache
from components.k8s.serving.views import ControllersView, ServingView, model_namespace
from components.k8s.storage import cache_prep_daemonset, node_cache_path
from components.k8s.values import Model

if TYPE_CHECKING:
    from components.aws.cluster import GpuCluster

__all__ = [
    "TYPE",
    "register_object",
    "ModelDeployment",
    "ServingControllers",
    "cache_prep",
    "priority_classes",
    "required_controllers",
]

TYPE = "aifactory:k8s:ModelDeployment"  # the type token of the kit's existing stacks (part of every child's URN)

_TYPED = {
    "ServiceAccount": k8s.core.v1.ServiceAccount,
    "ConfigMap": k8s.core.v1.ConfigMap,
    "HorizontalPodAutoscaler": k8s.autoscaling.v2.HorizontalPodAutoscaler,
    "Deployment": k8s.apps.v1.Deployment,
    "Service": k8s.core.v1.Service,
    "PodDisruptionBudget": k8s.policy.v1.PodDisruptionBudget,
    "PersistentVolume": k8s.core.v1.PersistentVolume,
    "PersistentVolumeClaim": k8s.core.v1.PersistentVolumeClaim,
    "DaemonSet": k8s.apps.v1.DaemonSet,
    "PriorityClass": k8s.scheduling.v1.PriorityClass,
}


def register_object(name: str, obj: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """Register a Kubernetes object dict with its typed constructor (custom resources: CustomResource)."""
    fields = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    typed = _TYPED.get(obj["kind"])
    if typed is not None:
        if obj["kind"] == "ServiceAccount":
            fields["automount_service_account_token"] = fields.pop("automountServiceAccountToken")
        if obj["kind"] == "PriorityClass":
            fields["preemption_policy"] = fields.pop("preemptionPolicy")
            fields["global_default"] = fields.pop("globalDefault")
        return typed(name, **fields, opts=opts)
    return k8s.apiextensions.CustomResource(name, api_version=obj["apiVersion"], kind=obj["kind"], **fields,
                                            opts=opts)


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
    """Deployment, or LeaderWorkerSet for a multi-node replica."""

    def __init__(self, name: str, args: ModelDeploymentArgs, opts: pulumi.ResourceOptions | None = None,
                 cluster: "GpuCluster | None" = None) -> None:
        super().__init__(self.pulumi_type, name, None, opts)
        cfg = serving_spec(name, args)
        model = cfg.model
        child = _children_of(self, opts)
        # the ARN with the role's policy as a dependency: the model's pods start only once they may read the bucket
        role_arn = arn_with_policies(self._s3_role(name, cfg, model, cluster)) if model.uri.startswith("s3://") \
            else None
        for obj in model_objects(cfg, model, role_arn=role_arn):
            register_object(f"{name}-{obj['kind'].lower()}", obj, child)
        self.namespace = pulumi.Output.from_input(model_namespace(cfg, model))
        self.service = pulumi.Output.from_input(model.name)
        self.kind = pulumi.Output.from_input(workload(cfg, model)["kind"])
        self.register_outputs({"namespace": model_namespace(cfg, model), "service": model.name,
                               "kind": workload(cfg, model)["kind"]})

    def _s3_role(self, name: str, cfg: ServingView, model: Model, cluster: "GpuCluster | None") -> aws.iam.Role:
        if cluster is None:
            raise ValueError(f"models.{model.name}.uri: {model.uri!r} needs the EKS cluster for its IRSA role; "
                             "pass cluster= (s3:// needs provider aws; use pvc:// or hf:// elsewhere)")
        return irsa_role(f"{name}-s3", cluster=cluster, namespace=model_namespace(cfg, model),
                         service_account=naming.model_service_account(model.name),
                         inline_policy=s3_read_policy(model.uri), opts=pulumi.ResourceOptions(parent=self))


class ServingControllers(pulumi.ComponentResource):
    """The controllers serving objects need: KEDA (autoscaled models), LeaderWorkerSet (multi-node ones)."""

    releases: list[k8s.helm.v3.Release]

    def __init__(self, name: str, *, cfg: ControllersView, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aifactory:k8s:ServingControllers", name, None, opts)
        child = _children_of(self, opts)
        self.releases = [
            versions.release(f"{name}-{chart.chart}", chart, release_name=chart.chart,
                             namespace=naming.SYSTEM_NAMESPACE, values={}, opts=child)
            for chart in required_controllers(cfg)
        ]
        if (prep := cache_prep(cfg)) is not None:
            register_object(f"{name}-cache-prep", prep, child)
        for pc in priority_classes(cfg):
            register_object(f"{name}-{pc['metadata']['name']}", pc, child)
        self.register_outputs({"charts": [r.chart for r in self.releases]})


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
    return ([versions.KEDA] if any(m.replicas.autoscaled for m in models) else []) + \
        ([versions.LWS] if any(m.multi_node for m in models) else [])
