"""A model's pods: the engine container (image, command and environment from its engine, components.k8s.engines),
its resources, probes, volumes and the s3:// fetch init container, and how long a pod may take to start."""

from __future__ import annotations

import math
from typing import Any

from components import catalog
from components.k8s import coldstart, fabric, mesh, naming, security
from components.k8s.engines import EngineTracing, engine_named, model_path
from components.k8s.engines.base import CACHE_MOUNT, STORE_MOUNT, Role
from components.k8s.gpu_stack import mig_resource
from components.k8s.serving.lifecycle import container_lifecycle, sidecar_annotations, termination_grace_seconds
from components.k8s.serving.views import ServingView, model_labels
from components.k8s.settings import Model, NodePool
from components.k8s.storage import cache_storage_class_name, node_cache_claim_name

__all__ = [
    "ENGINE_USER",
    "ENGINE_HOME",
    "DEFAULT_FETCH_IMAGE",
    "DEFAULT_SHM_SIZE",
    "DEFAULT_NODE_SHARE",
    "AWAIT_TIMEOUT_ANNOTATION",
    "SKIP_AWAIT_ANNOTATION",
    "DEFAULT_IMAGE_PULL_SECONDS",
    "CACHE_ACCESS_MODE",
    "PROBE_PERIOD_SECONDS",
    "HF_TOKEN_SECRET",
    "engine_tracing",
    "gpu_resources",
    "fabric_resources",
    "container_resources",
    "start_budget_seconds",
    "startup_probe_seconds",
    "pod_start_seconds",
    "await_timeout_seconds",
    "await_annotations",
    "user_env",
    "model_cold_start",
    "node_cache",
    "cache_volume",
    "pod_spec",
    "pod_template",
    "model_ports",
]

# The engines run as security.DEFAULT_UID, which has no passwd entry in either image: torch's compile/inductor
# path calls getpass.getuser(), which reads LOGNAME, USER, LNAME, USERNAME before the passwd database and raises
# (KeyError on Python 3.12) when none is set and the UID has no entry (pytorch/pytorch#140765;
# vllm-project/vllm#44548, #46734). HOME is the pod's writable /tmp (caches of torch, triton, HF).
ENGINE_USER = "aifactory"
ENGINE_HOME = "/tmp"
DEFAULT_FETCH_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.27.50"  # s3:// model URIs: `aws s3 sync` into the cache
DEFAULT_SHM_SIZE = "16Gi"  # /dev/shm for NCCL and the engine's worker processes
DEFAULT_NODE_SHARE = 0.8  # share of a node's CPU and memory pods may take (the rest: kubelet, daemonsets)
# DEFAULT_STARTUP_BUDGET_SECONDS (infra.config): download + load + warm-up before the startup probe gives up;
# each model's own is models.X.startupBudgetSeconds.
# pulumi-kubernetes waits 10 minutes for a StatefulSet (as for a Deployment) unless its `pulumi.com/timeoutSeconds`
# annotation says otherwise (pulumi/pulumi-kubernetes@v4.34.2 provider/pkg/await/statefulset.go
# `DefaultStatefulSetTimeoutMins = 10`: until readyReplicas = spec.replicas and currentRevision = updateRevision;
# deployment.go `DefaultDeploymentTimeoutMins = 10`; metadata/annotations.go
# `AnnotationTimeoutSeconds`, read with strconv.Atoi in metadata/overrides.go): a 70B model takes longer.
AWAIT_TIMEOUT_ANNOTATION = "pulumi.com/timeoutSeconds"
SKIP_AWAIT_ANNOTATION = "pulumi.com/skipAwait"  # metadata/annotations.go AnnotationSkipAwait
DEFAULT_IMAGE_PULL_SECONDS = 600  # pulling a multi-GB engine image onto a fresh node, before the probe starts
CACHE_ACCESS_MODE = "ReadWriteOnce"  # one volume per pod: every class (EBS included) can provision it
PROBE_PERIOD_SECONDS = 10
HF_TOKEN_SECRET = "hf-token"  # optional Secret (key `token`) in the tenant namespace for gated HF models


def engine_tracing(cfg: ServingView) -> EngineTracing:
    """The stack's engine tracing: the Collector in the observability namespace, observability.traceSampleRatio
    (for requests that reach an engine without a traceparent; the gateway traces every request it routes and the
    Collector applies the ratio once: components.k8s.gateway.envoy.config.GATEWAY_TRACE_PERCENT)."""
    host = f"{naming.OTEL_COLLECTOR_SERVICE}.{cfg.observability.namespace}.svc.cluster.local"
    return EngineTracing(grpc_endpoint=f"http://{host}:{naming.OTEL_GRPC_PORT}",
                         sample_ratio=cfg.observability.trace_sample_ratio)



def _gpus_per_pod(model: Model) -> int:
    return model.gpus_per_node_hint if model.multi_node else model.gpus_per_replica


def gpu_resources(model: Model) -> dict[str, int]:
    """Whole GPUs, or one MIG slice (GPU operator, mixed strategy: nvidia.com/mig-<profile>)."""
    if model.mig_profile is not None:
        return {mig_resource(model.mig_profile): 1}
    return {"nvidia.com/gpu": _gpus_per_pod(model)}


def fabric_resources(cfg: ServingView, model: Model) -> dict[str, int | str]:
    """Data-plane devices each pod of a multi-node replica requests; none for single-node replicas."""
    pool = cfg.pool_of(model)
    if not model.multi_node:
        return {}
    if pool.fabric == "efa":
        out: dict[str, int | str] = {"vpc.amazonaws.com/efa": pool.instance.efa_devices}
        if pool.hugepages_mib:
            out["hugepages-2Mi"] = f"{pool.hugepages_mib}Mi"
        return out
    if pool.fabric == "infiniband" and cfg.infiniband is not None:
        return dict(fabric.rdma_pod_resources(cfg.infiniband))
    return {}


def _node_share(model: Model, pool: NodePool) -> float:
    if model.mig_profile is not None:  # a <g>g slice is g sevenths of one GPU
        return int(model.mig_profile.split("g", 1)[0]) / 7 / pool.instance.gpu_count
    return _gpus_per_pod(model) / pool.instance.gpu_count


def container_resources(cfg: ServingView, model: Model) -> dict[str, Any]:
    """CPU and memory in proportion to the pod's share of the node's GPUs; requests == limits."""
    pool = cfg.pool_of(model)
    share = _node_share(model, pool) * DEFAULT_NODE_SHARE
    cpu = max(1, math.floor(pool.instance.vcpus * share))
    memory = max(4, math.floor(pool.instance.memory_gib * share))
    return security.resources(str(cpu), f"{memory}Gi", extra={**gpu_resources(model),
                                                              **fabric_resources(cfg, model)})


def _fabric_env(cfg: ServingView, model: Model) -> list[dict[str, str]]:
    """NCCL and libfabric settings of a multi-node replica's pods.

    NCCL_DEBUG=INFO (INIT and NET subsystems) prints the network NCCL selected, which the leader's guard
    checks (nccl_guard.py). Bootstrap and Ray/vLLM sockets use the pod network (eth0), never an IPoIB
    attachment. EFA: FI_PROVIDER=efa, and FI_EFA_USE_DEVICE_RDMA=1 on types with GPUDirect RDMA
    (catalog.EFA_GPUDIRECT_RDMA; aws-ofi-nccl 1.6-era setting, harmless later). InfiniBand: NCCL_IB_HCA lists
    the rails' RDMA devices exactly (`=` prefix: NCCL otherwise matches prefixes, mlx5_1 would match mlx5_10)."""
    if not model.multi_node:
        return []
    pool = cfg.pool_of(model)
    env = [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "NCCL_DEBUG_SUBSYS", "value": "INIT,NET"},
           {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"}, {"name": "GLOO_SOCKET_IFNAME", "value": "eth0"},
           *engine_named(model.engine).multi_node_env()]
    if pool.fabric == "efa":
        env.append({"name": "FI_PROVIDER", "value": "efa"})
        if pool.instance_type in catalog.EFA_GPUDIRECT_RDMA:
            env.append({"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"})
    elif pool.fabric == "infiniband" and cfg.infiniband is not None and cfg.infiniband.hcas:
        env.append({"name": "NCCL_IB_HCA", "value": "=" + ",".join(cfg.infiniband.hcas)})
    return env


def _rdma(cfg: ServingView, model: Model) -> bool:
    return model.multi_node and cfg.pool_of(model).fabric == "infiniband" and cfg.infiniband is not None



def _probe(path: str, *, failures: int, timeout: int = 5) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": PROBE_PERIOD_SECONDS,
            "timeoutSeconds": timeout, "failureThreshold": failures}


def start_budget_seconds(model: Model) -> int:
    """What the engine may take to serve once its container starts: the model's start-up budget (download, load,
    warm-up), and for a multi-node replica first the Ray group formation (the leader waits up to
    groupFormationSeconds for its workers, then loads)."""
    return model.startup_budget_seconds + (model.group_formation_seconds if model.multi_node else 0)


def _startup_failures(model: Model) -> int:
    return math.ceil(start_budget_seconds(model) / PROBE_PERIOD_SECONDS)


def startup_probe_seconds(model: Model) -> int:
    """How long the startup probe lets the engine start: initialDelaySeconds (0) + period x failureThreshold."""
    return PROBE_PERIOD_SECONDS * _startup_failures(model)


def pod_start_seconds(model: Model) -> int:
    """How long one pod may take to become ready: pull its image, sync an s3:// model (up to the start-up
    budget again) and start within its probe budget."""
    fetch = model.startup_budget_seconds if model.uri.startswith("s3://") else 0
    return DEFAULT_IMAGE_PULL_SECONDS + fetch + startup_probe_seconds(model)


def await_timeout_seconds(model: Model) -> int:
    """How long `pulumi up` waits for the model's StatefulSet: a rolling update replaces the pods one at a
    time, up to replicas.max of them, each within pod_start_seconds. A StatefulSet has no progress deadline:
    a pod that never becomes ready is reported when this timeout passes (pulumi-kubernetes logs the pods'
    errors every 10 s while it waits)."""
    return max(1, model.replicas.max) * pod_start_seconds(model)


def await_annotations(cfg: ServingView, model: Model) -> dict[str, str]:
    """How pulumi-kubernetes awaits the model's StatefulSet. On a capacity-block pool nodes exist only inside
    the block's window, so `pulumi up` does not wait for pods there (they start when the block does)."""
    out = {AWAIT_TIMEOUT_ANNOTATION: str(await_timeout_seconds(model))}
    if cfg.pool_of(model).capacity.type == "capacity-block":
        out[SKIP_AWAIT_ANNOTATION] = "true"
    return out




def model_ports(model: Model) -> list[dict[str, Any]]:
    """One port for every engine: the OpenAI API, its health paths and its Prometheus /metrics."""
    return [{"name": "http", "containerPort": naming.MODEL_HTTP_PORT, "protocol": "TCP"}]


def user_env() -> list[dict[str, str]]:
    """A user the engine's process can resolve without a passwd entry (see ENGINE_USER), and a writable home."""
    return [{"name": "HOME", "value": ENGINE_HOME}, {"name": "USER", "value": ENGINE_USER},
            {"name": "LOGNAME", "value": ENGINE_USER}]


def _env(cfg: ServingView, model: Model) -> list[dict[str, Any]]:
    return [
        *user_env(),
        {"name": "HF_HOME", "value": f"{CACHE_MOUNT}/hf"},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": HF_TOKEN_SECRET, "key": "token",
                                                            "optional": True}}},
        *_fabric_env(cfg, model),
        *engine_named(model.engine).env(model),
    ]


def model_cold_start(cfg: ServingView, model: Model) -> coldstart.ColdStart | None:
    """The model's expected load time from its node's cache medium, next to its start-up budget."""
    return coldstart.cold_start(model_id=model.model, quantization=model.quantization,
                                prequantized=engine_named(model.engine).prequantized(model),
                                configured_gib=model.weights_gib, instance_type=cfg.pool_of(model).instance_type,
                                aws=cfg.is_aws,
                                budget_seconds=model.startup_budget_seconds)


def node_cache(cfg: ServingView, model: Model) -> bool:
    """True when the model's pool caches weights on the node's NVMe array, shared by the node's pods."""
    return coldstart.cache_medium(instance_type=cfg.pool_of(model).instance_type,
                                  aws=cfg.is_aws).kind == "instance-store"


def cache_volume(cfg: ServingView, model: Model) -> dict[str, Any]:
    """The pod's model cache. On AWS types with NVMe instance store, the model's node-local cache on the RAID0
    array (storage.node_cache_objects: one download per node, shared by the node's pods of the model, 8 x 1 GB/s
    instead of an EBS volume). Elsewhere a generic ephemeral volume (a claim created and deleted with the pod)."""
    if node_cache(cfg, model):
        claim = node_cache_claim_name(model.name, model.cache_gib)
        return {"name": "model-cache", "persistentVolumeClaim": {"claimName": claim}}
    spec: dict[str, Any] = {"accessModes": [CACHE_ACCESS_MODE],
                            "resources": {"requests": {"storage": f"{model.cache_gib}Gi"}}}
    if (storage_class := cache_storage_class_name(cfg, size_gib=model.cache_gib)) is not None:
        spec["storageClassName"] = storage_class
    return {"name": "model-cache", "ephemeral": {"volumeClaimTemplate": {
        "metadata": {"labels": model_labels(model)}, "spec": spec}}}


def _volumes(cfg: ServingView, model: Model) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    mounts: list[dict[str, Any]]
    volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": DEFAULT_SHM_SIZE}},
               {"name": "tmp", "emptyDir": {}},
               cache_volume(cfg, model)]
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "tmp", "mountPath": "/tmp"},
              {"name": "model-cache", "mountPath": CACHE_MOUNT}]
    scheme, _, rest = model.uri.partition("://")
    if scheme == "pvc":
        claim = rest.partition("/")[0]
        volumes.append({"name": "model-store", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})
        mounts.append({"name": "model-store", "mountPath": f"{STORE_MOUNT}/{claim}", "readOnly": True})
    return volumes, mounts


def _fetch_container(model: Model) -> list[dict[str, Any]]:
    """s3:// URIs: copy the model into the cache before the engine starts (idempotent `sync`).

    Credentials come from the model's IRSA role: EKS's pod identity webhook projects a web-identity
    token into every container of a pod whose service account carries the role annotation (this
    does not need the API token that `automountServiceAccountToken: false` leaves out)."""
    if not model.uri.startswith("s3://"):
        return []
    return [{
        "name": "fetch-model",
        "image": DEFAULT_FETCH_IMAGE,
        "command": ["aws", "s3", "sync", "--only-show-errors", model.uri, model_path(model)],
        "env": user_env(),
        "volumeMounts": [{"name": "model-cache", "mountPath": CACHE_MOUNT}, {"name": "tmp", "mountPath": "/tmp"}],
        "resources": security.resources("1", "2Gi"),
        "securityContext": security.container_security_context(),
    }]



def _probes(model: Model) -> dict[str, Any]:
    """Startup waits for the model to load (its start-up budget), then liveness and readiness on the engine's
    health and ready paths (components.k8s.engines)."""
    engine = engine_named(model.engine)
    ready = engine.ready_timeout_seconds
    return {"startupProbe": _probe(engine.ready_path, failures=_startup_failures(model), timeout=ready),
            "livenessProbe": _probe(engine.health_path, failures=3),
            "readinessProbe": _probe(engine.ready_path, failures=2, timeout=ready)}


def pod_spec(cfg: ServingView, model: Model, *, role: Role = "single") -> dict[str, Any]:
    """The model server pod. role: single, leader or worker (workers serve no HTTP: no ports or probes)."""
    pool = cfg.pool_of(model)
    engine = engine_named(model.engine)
    tracing = engine_tracing(cfg)
    volumes, mounts = _volumes(cfg, model)
    container: dict[str, Any] = {
        "name": model.engine,
        "image": engine.image(cfg, model),
        "command": engine.command(model, role=role, tracing=tracing, fabric_name=pool.fabric),
        "env": [*_env(cfg, model), *engine.trace_env(model, tracing)],
        "resources": container_resources(cfg, model),
        "volumeMounts": mounts,
        # stop getting new work before SIGTERM, then drain (components.k8s.serving.lifecycle)
        "lifecycle": container_lifecycle(model, role),
        # No IPC_LOCK, even for RDMA: Pod Security `restricted` forbids adding it, and none is needed to
        # register (pin) memory when containers start with RLIMIT_MEMLOCK unlimited. containerd's upstream
        # unit sets no LimitMEMLOCK, so the kit raises it on the node (AWS: a containerd drop-in in the user
        # data, components/aws/nodes.py; on-prem: the documented drop-in, docs/serving.md) and node-check's `memlock`
        # check verifies it on containerd's running process.
        "securityContext": security.container_security_context(),
    }
    if role != "worker":
        container |= {"ports": model_ports(model), **_probes(model)}
    return {
        "serviceAccountName": naming.model_service_account(model.name),
        **({"priorityClassName": pc} if (pc := cfg.priority_class_of(model)) is not None else {}),
        "automountServiceAccountToken": False,
        "securityContext": security.pod_security_context(fs_group=security.DEFAULT_UID),
        "nodeSelector": {naming.LABEL_POOL: pool.name},
        "tolerations": [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
                        if t.value else {"key": t.key, "operator": "Exists", "effect": t.effect}
                        for t in pool.taints],
        **({"initContainers": fetch} if (fetch := _fetch_container(model)) else {}),
        "containers": [container],
        "volumes": volumes,
        "terminationGracePeriodSeconds": termination_grace_seconds(model, role),
    }


def pod_template(cfg: ServingView, model: Model, role: Role) -> dict[str, Any]:
    engine = engine_named(model.engine)
    annotations: dict[str, str] = {}
    if _rdma(cfg, model) and cfg.infiniband is not None:
        annotations |= fabric.rdma_networks_annotation(cfg.infiniband)
    if model.multi_node:
        annotations |= mesh.multi_node_sidecar_annotations(outbound_excluded=engine.multi_node_ports())
    annotations |= engine.pod_annotations(model)
    annotations |= sidecar_annotations(model, role)
    meta: dict[str, Any] = {"labels": model_labels(model)}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": pod_spec(cfg, model, role=role)}

