"""A model's Kubernetes objects besides its pods: ServiceAccount (IRSA for s3:// models), StatefulSet or
LeaderWorkerSet, headless Service, PodDisruptionBudget, KEDA ScaledObject and ServiceMonitor."""

from __future__ import annotations

from typing import Any

import pulumi

from components.k8s import naming
from components.k8s.autoscaler import IRSA_ANNOTATION
from components.k8s.engines import engine_named
from components.k8s.mesh import MESH_SCRAPE_TLS
from components.k8s.serving.lifecycle import CRON_TIMEZONE, block_end, cron_window, termination_grace_seconds
from components.k8s.serving.pod import await_annotations, model_ports, node_cache, pod_template
from components.k8s.serving.views import ServingView, model_labels, model_namespace, object_meta
from components.k8s.settings import Model
from components.k8s.storage import node_cache_objects
from telemetry.names import ENVOY, TRITON

__all__ = [
    "SCALE_DOWN_STABILIZATION_SECONDS",
    "KEDA_POLLING_SECONDS",
    "LWS_API_VERSION",
    "LWS_WORKER_INDEX_LABEL",
    "KEDA_API_VERSION",
    "MONITORING_API_VERSION",
    "PROMETHEUS_SERVICE",
    "PROMETHEUS_PORT",
    "prometheus_url",
    "s3_location",
    "s3_read_policy",
    "service_account",
    "workload_name",
    "workload",
    "service",
    "disruption_budget",
    "scaling_query",
    "wake_query",
    "keda_scaled",
    "scale_in_seconds",
    "block_cron",
    "until_block_end",
    "scaled_object",
    "service_monitor",
    "model_objects",
]

SCALE_DOWN_STABILIZATION_SECONDS = 300  # GPU replicas are slow to start: do not flap
KEDA_POLLING_SECONDS = 15
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
KEDA_API_VERSION = "keda.sh/v1alpha1"
MONITORING_API_VERSION = "monitoring.coreos.com/v1"
PROMETHEUS_SERVICE = "kps-prometheus"  # kube-prometheus-stack with fullnameOverride "kps" (observability.py)
PROMETHEUS_PORT = 9090


def prometheus_url(cfg: ServingView) -> str:
    return f"http://{PROMETHEUS_SERVICE}.{cfg.observability.namespace}.svc.cluster.local:{PROMETHEUS_PORT}"


def s3_location(uri: str) -> tuple[str, str]:
    """(bucket, key prefix) of an s3:// model URI; the prefix is a folder ('' or ending in '/')."""
    bucket, _, path = uri.removeprefix("s3://").partition("/")
    path = path.strip("/")
    return bucket, f"{path}/" if path else ""


def s3_read_policy(uri: str) -> dict[str, Any]:
    """The IAM policy of a model's IRSA role: list and read the objects under the URI, nothing else."""
    bucket, prefix = s3_location(uri)
    listing: dict[str, Any] = {"Sid": "ListModel", "Effect": "Allow", "Action": "s3:ListBucket",
                               "Resource": f"arn:aws:s3:::{bucket}"}
    if prefix:
        listing["Condition"] = {"StringLike": {"s3:prefix": [f"{prefix}*"]}}
    return {"Version": "2012-10-17", "Statement": [
        {"Sid": "ReadModel", "Effect": "Allow", "Action": "s3:GetObject",
         "Resource": f"arn:aws:s3:::{bucket}/{prefix}*"},
        listing,
    ]}


def service_account(cfg: ServingView, model: Model, *, role_arn: pulumi.Input[str] | None = None
                    ) -> dict[str, Any]:
    """The model's identity (mesh and, with `role_arn`, AWS through IRSA); no API token is mounted."""
    meta = object_meta(cfg, model, naming.model_service_account(model.name))
    if role_arn is not None:
        meta["annotations"] = {IRSA_ANNOTATION: role_arn}
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta, "automountServiceAccountToken": False}


def workload_name(model: Model) -> str:
    """The StatefulSet is named after the model; a LeaderWorkerSet is not, because the LWS controller
    creates a headless Service named after it (for LWS_LEADER_ADDRESS), and the model's Service owns
    the model's name."""
    return f"{model.name}{naming.LWS_SUFFIX}" if model.multi_node else model.name


def workload(cfg: ServingView, model: Model) -> dict[str, Any]:
    """A StatefulSet, or a LeaderWorkerSet when one replica spans nodes.

    A StatefulSet, so that each replica has a stable DNS name (the gateway reaches the ready ones by the Service's
    name: components.k8s.gateway.envoy.replicas): pod i is `<model>-<i>` under its governing Service, the model's
    headless Service (kubernetes/website content/en/docs/concepts/workloads/controllers/statefulset.md, "Stable
    Network ID").
    Pods are created and deleted in parallel (KEDA may add several at once; podManagementPolicy Parallel), and a
    rolling update replaces them one at a time from the highest ordinal, each deleted before its successor starts
    (a StatefulSet never surges, so each tenant's GPU quota, sized for replicas.max, always admits the
    successor), so a one-replica model is down from its pod's deletion until the new pod is ready, as with the
    Deployment (maxSurge 0) it replaces (what each model's rollouts cost: lifecycle.rollout_of). Models KEDA scales
    (keda_scaled) leave `replicas` to it (the field stays unmanaged by Pulumi)."""
    replicas = {} if keda_scaled(cfg, model) else {"replicas": model.replicas.min}
    if not model.multi_node:
        meta = {**object_meta(cfg, model), "annotations": await_annotations(cfg, model)}
        return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta, "spec": {
            **replicas,
            "serviceName": model.name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {naming.LABEL_MODEL: model.name}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": pod_template(cfg, model, "single"),
        }}
    return {"apiVersion": LWS_API_VERSION, "kind": "LeaderWorkerSet",
            "metadata": object_meta(cfg, model, workload_name(model)), "spec": {
        **replicas,
        "startupPolicy": "LeaderCreated",
        "rolloutStrategy": {"type": "RollingUpdate",
                            "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}},
        "leaderWorkerTemplate": {
            "size": model.nodes_per_replica,
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": pod_template(cfg, model, "leader"),
            "workerTemplate": pod_template(cfg, model, "worker"),
        },
    }}


def service(cfg: ServingView, model: Model) -> dict[str, Any]:
    """Headless, so the gateway sees (and balances across, and ejects) every replica; leaders only."""
    selector = {naming.LABEL_MODEL: model.name}
    if model.multi_node:
        selector[LWS_WORKER_INDEX_LABEL] = "0"
    ports = [{"name": p["name"], "port": p["containerPort"], "targetPort": p["name"], "protocol": "TCP",
              "appProtocol": "http"} for p in model_ports(model)]
    return {"apiVersion": "v1", "kind": "Service", "metadata": object_meta(cfg, model),
            "spec": {"clusterIP": "None", "selector": selector, "ports": ports}}


def disruption_budget(cfg: ServingView, model: Model) -> dict[str, Any]:
    """Voluntary disruptions (drains, node upgrades) take one replica at a time, never the model's last one.

    With one replica at most (replicas.max 1) maxUnavailable 1 would let a drain evict the only pod and the
    model would be down until a new one loads; minAvailable 1 makes the eviction API refuse (HTTP 429) until
    the operator scales the model up or deletes the pod deliberately. A model that may scale to zero
    (replicas.min 0) accepts that outage already: one at a time."""
    budget = {"minAvailable": 1} if model.replicas.max == 1 and model.replicas.min >= 1 else {"maxUnavailable": 1}
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": object_meta(cfg, model),
            "spec": {**budget, "selector": {"matchLabels": {naming.LABEL_MODEL: model.name}}}}


def _selector(cfg: ServingView, model: Model) -> str:
    # ServiceMonitor podTargetLabels copy the pod's aifactory.io/model label as aifactory_io_model
    return f'namespace="{model_namespace(cfg, model)}",{TRITON.L_POD_MODEL}="{model.name}"'


def scaling_query(cfg: ServingView, model: Model) -> tuple[str, str, str]:
    """(PromQL, KEDA metricType, threshold) of the model's queue signal: its engine's (components.k8s.engines),
    over the model's pods."""
    return engine_named(model.engine).scaling_query(_selector(cfg, model), model)


def wake_query(model: Model) -> str:
    """1 while the gateway turns the model's requests away for want of a ready replica, else 0.

    A model scaled to zero exports no queue metric, so scaling from zero needs the gateway's view;
    clamped to 1 (AverageValue, threshold 1), this trigger never asks for more than one replica."""
    return f'clamp_max(sum(rate({ENVOY.NO_HEALTHY}{{{ENVOY.L_CLUSTER}="{model.name}"}}[2m])), 1)'


def _trigger(cfg: ServingView, query: str, metric_type: str, threshold: str) -> dict[str, Any]:
    return {"type": "prometheus", "metricType": metric_type, "metadata": {
        "serverAddress": prometheus_url(cfg), "query": query, "threshold": threshold,
        "activationThreshold": "0", "ignoreNullValues": "true"}}


def keda_scaled(cfg: ServingView, model: Model) -> bool:
    """KEDA owns the model's replica count: it is autoscaled (replicas.max > min), or its pool is a capacity block
    with a window (block_cron: 0 replicas outside it)."""
    return model.replicas.autoscaled or block_cron(cfg, model) is not None


def scale_in_seconds(model: Model) -> int:
    """From KEDA's last active trigger until the model's pods are gone: its cooldown, a polling period, then the pods'
    termination (a multi-node replica's workers outlive its leader: the longest grace period)."""
    grace = termination_grace_seconds(model, "worker" if model.multi_node else "single")
    return SCALE_DOWN_STABILIZATION_SECONDS + KEDA_POLLING_SECONDS + grace


def block_cron(cfg: ServingView, model: Model) -> dict[str, Any] | None:
    """The cron trigger of a model on a capacity block: replicas.min (at least 1) from the block's start until its
    nodes go, less scale_in_seconds; nothing outside, so the model's pods are gone before its nodes and none waits
    Pending for nodes that do not exist (kube-prometheus-stack's KubePodNotReady and
    KubeStatefulSetReplicasMismatch stay silent). KEDA's cron scaler (keda.sh/docs/2.18/scalers/cron; kedacore/keda
    pkg/scalers/cron_scaler.go): metadata timezone, start and end (5-field cron), desiredReplicas, active from a start
    until the next end. None: not a block model."""
    window = cron_window(model, cfg.pool_of(model), scale_in_seconds=scale_in_seconds(model))
    if window is None:
        return None
    start, end = window
    return {"type": "cron", "metadata": {"timezone": CRON_TIMEZONE, "start": start, "end": end,
                                         "desiredReplicas": str(max(1, model.replicas.min))}}


def until_block_end(cfg: ServingView, model: Model, query: str) -> str:
    """`query` while the block model's window lasts, no sample from its end on (block_end: the cron's end), so the
    trigger goes inactive with the cron (ignoreNullValues: an empty result is 0) and KEDA scales the model to 0
    before its nodes go, however busy it is. Other models: `query` unchanged."""
    end = block_end(cfg.pool_of(model), scale_in_seconds=scale_in_seconds(model))
    if end is None:
        return query
    return f"({query}) and on() (vector(time()) < {int(end.timestamp())})"


def scaled_object(cfg: ServingView, model: Model) -> dict[str, Any]:
    """KEDA on the queue signal; models that may scale to zero also wake on the gateway's refusals. A block model
    (block_cron) is at 0 outside its window and at least replicas.min inside it, and does not wake on refusals: its
    queue trigger has no series while it has no pods, and outside the window a woken pod would only wait Pending.
    Its queue trigger ends with the window (until_block_end): a busy model's queue would otherwise keep it active,
    and its pods would be evicted with the nodes and wait Pending."""
    query, metric_type, threshold = scaling_query(cfg, model)
    triggers = [_trigger(cfg, until_block_end(cfg, model, query), metric_type, threshold)]
    cron = block_cron(cfg, model)
    if cron is not None:
        triggers.append(cron)
    elif model.replicas.min == 0:
        triggers.append(_trigger(cfg, wake_query(model), "AverageValue", "1"))
    kind, api = ("LeaderWorkerSet", LWS_API_VERSION) if model.multi_node else ("StatefulSet", "apps/v1")
    return {"apiVersion": KEDA_API_VERSION, "kind": "ScaledObject", "metadata": object_meta(cfg, model), "spec": {
        "scaleTargetRef": {"apiVersion": api, "kind": kind, "name": workload_name(model)},
        "minReplicaCount": 0 if cron is not None else model.replicas.min,
        "maxReplicaCount": model.replicas.max,
        "pollingInterval": KEDA_POLLING_SECONDS,
        "cooldownPeriod": SCALE_DOWN_STABILIZATION_SECONDS,
        "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {"scaleDown": {
            "stabilizationWindowSeconds": SCALE_DOWN_STABILIZATION_SECONDS,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 120}]}}}},
        "triggers": triggers,
    }}


def service_monitor(cfg: ServingView, model: Model) -> dict[str, Any]:
    """Scrapes the model Service's endpoints over mTLS: /metrics on the HTTP port (vLLM's server; Triton's OpenAI
    frontend serves Triton's metrics there, r26.07 python/openai/openai_frontend/frontend/fastapi/routers/
    observability.py).

    Selects the kit's model Service only (not the headless Service the LWS controller creates), and
    copies the pods' model and tenant labels onto the series."""
    port = "http"
    return {"apiVersion": MONITORING_API_VERSION, "kind": "ServiceMonitor", "metadata": object_meta(cfg, model),
            "spec": {
        "selector": {"matchLabels": {naming.LABEL_MODEL: model.name, **naming.MANAGED_BY}},
        "podTargetLabels": [naming.LABEL_MODEL, naming.LABEL_TENANT],
        "endpoints": [{"port": port, "path": "/metrics", "interval": "15s", **MESH_SCRAPE_TLS}],
    }}


def model_objects(cfg: ServingView, model: Model, *, role_arn: pulumi.Input[str] | None = None
                  ) -> list[dict[str, Any]]:
    """Every object of one model, in apply order (`role_arn`: the IRSA role of an s3:// model)."""
    cache = node_cache_objects(namespace=model_namespace(cfg, model), model=model.name, size_gib=model.cache_gib,
                               labels=model_labels(model)) if node_cache(cfg, model) else []
    objs = [service_account(cfg, model, role_arn=role_arn), *cache, workload(cfg, model), service(cfg, model),
            disruption_budget(cfg, model)]
    if keda_scaled(cfg, model):
        objs.append(scaled_object(cfg, model))
    return [*objs, service_monitor(cfg, model)]

