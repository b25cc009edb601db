"""Serving pools: one ModelDeployment per configured model (vLLM, or Triton with TensorRT-LLM).

    [IRSA role: s3:// models on AWS] -> ServiceAccount -> Deployment | LeaderWorkerSet -> headless Service
    -> PodDisruptionBudget -> KEDA ScaledObject (when replicas.max > replicas.min) -> ServiceMonitor

A replica fits on one node (a Deployment) or spans `nodes_per_replica` nodes (a LeaderWorkerSet
whose leader and workers all get the pool's data-plane fabric: EFA devices + hugepages on AWS, the
RDMA device + network attachment on InfiniBand). Pods run in the tenant's namespace as the model's
own service account, select their pool by `aifactory.io/pool`, tolerate the pool's taints, and
request GPUs (or one MIG slice) with limits == requests. Every pod has its own model cache, a generic
ephemeral volume (storage.cache_storage_class_name); s3:// models are synced into it by an init
container with the model's IRSA role (read-only, the URI's prefix only).

Prometheus scrapes the model Service's endpoints through a ServiceMonitor (mTLS, `MESH_SCRAPE_TLS`),
which copies the pod's `aifactory.io/model` label onto every series (`aifactory_io_model`).

Autoscaling is KEDA (a `prometheus` trigger per model): the query lives next to the model, min 0
(scale to zero) works, and LeaderWorkerSets scale through their scale subresource. vLLM scales on
`vllm:num_requests_waiting` per replica, Triton on the average queue time per request.

Everything here is a pure function of (PlatformConfig, Model) returning Kubernetes objects; the
component only registers them.
"""

# No `from __future__ import annotations`: TypedDict reads NotRequired (and the package analyzer the types) from
# evaluated annotations.
import importlib.resources
import json
import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NotRequired, Protocol, TypedDict, cast

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.aws import catalog
from components.aws.defaults import DEFAULT_EFA_HUGEPAGES_MIB
from components.aws.errors import Problems, check_shape
from components.aws.iam import arn_with_policies, irsa_role
from components.aws.node_pool import TaintArgs
from components.k8s import coldstart, fabric, mesh, naming, security, versions
from components.k8s.autoscaler import IRSA_ANNOTATION
from components.k8s.defaults import (
    DEFAULT_GROUP_FORMATION_SECONDS,
    DEFAULT_MONITORING_NAMESPACE,
    DEFAULT_STARTUP_BUDGET_SECONDS,
    SERVING_PRIORITY_CLASSES,
)
from components.k8s.envoy_config import HEALTH_PATHS, OPENAI_APIS, ObservabilityView
from components.k8s.gpu_stack import mig_resource, pool_tolerations
from components.k8s.mesh import MESH_SCRAPE_TLS
from components.k8s.storage import (
    cache_prep_daemonset,
    cache_storage_class_name,
    node_cache_claim_name,
    node_cache_objects,
    node_cache_path,
)
from components.k8s.values import (
    Capacity,
    InfinibandSettings,
    Model,
    NodePool,
    Replicas,
    Speculative,
    Taint,
    Tenant,
    Tracing,
    infiniband_settings,
)
from components.vocabulary import GPU_TAINT_KEY
from telemetry.names import ENVOY, TRITON, VLLM

if TYPE_CHECKING:
    from components.aws.cluster import GpuCluster

__all__ = [
    "TargetView",
    "ServingView",
    "ControllersView",
    "ModelPoolArgs",
    "SpeculativeArgs",
    "ReplicasArgs",
    "ModelInfinibandArgs",
    "ModelDeploymentArgs",
    "ServingSpec",
    "serving_spec",
    "DEFAULT_VLLM_IMAGE",
    "DEFAULT_EFA_VLLM_IMAGE",
    "vllm_image",
    "RAY_GCS_PORT",
    "RAY_NODE_PORTS",
    "RAY_HEAD_PORTS",
    "RAY_WORKER_PORTS",
    "VLLM_PORT_RANGE",
    "ray_start_flags",
    "multi_node_ports",
    "nccl_guard_script",
    "model_cold_start",
    "DEFAULT_TRITON_IMAGE",
    "VLLM_VERSION",
    "EFA_VLLM_VERSION",
    "TRITON_OPENAI_MAIN",
    "ENGINE_USER",
    "user_env",
    "DEFAULT_FETCH_IMAGE",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DEFAULT_SHM_SIZE",
    "DEFAULT_NODE_SHARE",
    "DEFAULT_STARTUP_BUDGET_SECONDS",
    "AWAIT_TIMEOUT_ANNOTATION",
    "GPU_ROLLING_UPDATE",
    "DEFAULT_IMAGE_PULL_SECONDS",
    "startup_probe_seconds",
    "start_budget_seconds",
    "await_timeout_seconds",
    "await_annotations",
    "VLLM_QUANTIZATION",
    "TRTLLM_QFORMAT",
    "LWS_API_VERSION",
    "KEDA_API_VERSION",
    "MONITORING_API_VERSION",
    "CACHE_MOUNT",
    "CACHE_ACCESS_MODE",
    "prometheus_url",
    "model_path",
    "vllm_args",
    "triton_command",
    "EngineTracing",
    "engine_tracing",
    "gpu_resources",
    "fabric_resources",
    "container_resources",
    "cache_volume",
    "pod_spec",
    "s3_location",
    "s3_read_policy",
    "service_account",
    "workload_name",
    "workload",
    "service",
    "disruption_budget",
    "scaled_object",
    "service_monitor",
    "scaling_query",
    "wake_query",
    "model_objects",
    "required_controllers",
    "priority_classes",
    "cache_prep",
    "register_object",
    "ModelDeployment",
    "ServingControllers",
]

class TargetView(Protocol):
    @property
    def region(self) -> str | None: ...  # AWS: the region (per-region DLC images)

    @property
    def storage_class(self) -> str | None: ...  # an existing cluster: the class every claim names


class ServingView(Protocol):
    """What a model's build functions read: ModelDeployment's ServingSpec (from its args), or the kit's whole
    PlatformConfig, which has the same attributes."""

    @property
    def is_aws(self) -> bool: ...

    @property
    def target(self) -> TargetView: ...

    @property
    def infiniband(self) -> InfinibandSettings | None: ...

    @property
    def observability(self) -> ObservabilityView: ...

    def tenant_of(self, model: Model) -> Tenant: ...

    def pool_of(self, model: Model) -> NodePool: ...

    def priority_class_of(self, model: Model) -> str | None: ...


class ControllersView(ServingView, Protocol):
    """What ServingControllers reads besides: every model and pool of the stack."""

    @property
    def models(self) -> Mapping[str, Model]: ...

    @property
    def node_pools(self) -> Mapping[str, NodePool]: ...


# vLLM 0.33.0 (PyPI, Nov 2026): its wheel's METADATA requires opentelemetry-sdk/-api/-exporter-otlp, which the
# image's `uv pip install dist/*.whl` then installs, so `--otlp-traces-endpoint` finds the SDK (0.11.0 lacked it and
# raised "OpenTelemetry is not available" at start-up: vllm/tracing/otel.py init_otel_tracer). Also the InfiniBand
# default: NCCL's built-in IB transport needs only libibverbs, which vLLM's docker/Dockerfile installs in its
# vllm-base stage (libibverbs-dev). Every flag, path, port and metric the kit uses: docs/contracts.md, "Engines".
VLLM_VERSION = "0.33.0"
DEFAULT_VLLM_IMAGE = f"vllm/vllm-openai:v{VLLM_VERSION}"
# Multi-node replicas on EFA: the stock image has no libfabric or aws-ofi-nccl (NCCL would fall back to TCP
# sockets). AWS's vLLM Deep Learning Container is vllm/vllm-openai plus the EFA installer (libfabric,
# aws-ofi-nccl under /opt/amazon, on LD_LIBRARY_PATH). Its newest release is behind the stock image: vLLM 0.27.1
# with EFA installer 1.47.0, published as `vllm:0.27-gpu-py312-ec2` (aws/deep-learning-containers
# .github/config/image/vllm/ec2-ubuntu.yml `prod_image`, base_image vllm/vllm-openai:v0.27.1; docker/vllm/Dockerfile).
# A major.minor tag, so it follows AWS's patch releases; no digest is published in the repository.
# `{region}` is the stack's region (DLC images are published per region); nodePools.X.vllmImage overrides it.
EFA_VLLM_VERSION = "0.27.1"
DEFAULT_EFA_VLLM_IMAGE = "763104351884.dkr.ecr.{region}.amazonaws.com/vllm:0.27-gpu-py312-ec2"
# Triton 26.07 (server v2.71.0) with TensorRT-LLM. Its image is built by server build.py create_dockerfile_linux,
# which copies python/openai (the OpenAI-compatible frontend) to /opt/tritonserver/python/openai and installs the
# tritonserver/tritonfrontend wheels and python/openai/requirements.txt.
DEFAULT_TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3"
TRITON_OPENAI_MAIN = "/opt/tritonserver/python/openai/openai_frontend/main.py"
# What Triton's frontend generates for a request without max_tokens/max_completion_tokens: its own default is 16
# (r26.07 main.py --default-max-tokens; engine/utils/triton.py), which cuts an unmodified OpenAI client's answers
# after 16 tokens where vLLM would fill the context. A request's own max_tokens always wins; a prompt plus this
# must fit the TensorRT-LLM engine's max_seq_len.
DEFAULT_TRITON_MAX_TOKENS = 4096
# The engines run as security.DEFAULT_UID, which has no passwd entry in either image: torch's compile/inductor
# path calls getpass.getuser(), which reads LOGNAME, USER, LNAME, USERNAME before the passwd database and raises
# (KeyError on Python 3.12) when none is set and the UID has no entry (pytorch/pytorch#140765;
# vllm-project/vllm#44548, #46734). HOME is the pod's writable /tmp (caches of torch, triton, HF).
ENGINE_USER = "aifactory"
ENGINE_HOME = "/tmp"
DEFAULT_FETCH_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.27.50"  # s3:// model URIs: `aws s3 sync` into the cache
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # vLLM: share of GPU memory for weights + KV cache
DEFAULT_SHM_SIZE = "16Gi"  # /dev/shm for NCCL and the engine's worker processes
DEFAULT_NODE_SHARE = 0.8  # share of a node's CPU and memory pods may take (the rest: kubelet, daemonsets)
# DEFAULT_STARTUP_BUDGET_SECONDS (infra.config): download + load + warm-up before the startup probe gives up;
# each model's own is models.X.startupBudgetSeconds.
# pulumi-kubernetes waits 10 minutes for a Deployment unless its `pulumi.com/timeoutSeconds` annotation says
# otherwise (provider/pkg/await/deployment.go `DefaultDeploymentTimeoutMins = 10`; metadata/annotations.go
# `AnnotationTimeoutSeconds`, read with strconv.Atoi in metadata/overrides.go): a 70B model takes longer.
AWAIT_TIMEOUT_ANNOTATION = "pulumi.com/timeoutSeconds"
SKIP_AWAIT_ANNOTATION = "pulumi.com/skipAwait"  # metadata/annotations.go AnnotationSkipAwait
DEFAULT_IMAGE_PULL_SECONDS = 600  # pulling a multi-GB engine image onto a fresh node, before the probe starts
# GPU Deployments replace a pod before starting its successor (as LeaderWorkerSets do, see workload()): each
# tenant's GPU quota is what its models scale to (replicas.max x GPUs), so a surge pod at maximum scale would be
# refused by ResourceQuota admission and the rollout would stall until its deadline. policies/preflight.py
# reports a Deployment whose surge its namespace's quota cannot admit.
GPU_ROLLING_UPDATE: dict[str, Any] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
CACHE_ACCESS_MODE = "ReadWriteOnce"  # one volume per pod: every class (EBS included) can provision it
PROBE_PERIOD_SECONDS = 10
SCALE_DOWN_STABILIZATION_SECONDS = 300  # GPU replicas are slow to start: do not flap
KEDA_POLLING_SECONDS = 15
CACHE_MOUNT = "/model-cache"
STORE_MOUNT = "/models"  # pvc:// URIs: the claim, read-only
HF_TOKEN_SECRET = "hf-token"  # optional Secret (key `token`) in the tenant namespace for gated HF models
MULTI_NODE_SCRIPT = "/vllm-workspace/examples/online_serving/multi-node-serving.sh"  # in the vLLM image
# Every port the Ray processes of a multi-node replica listen on, pinned (Ray's defaults are random ports and
# a 10002-19999 worker range): `ray start` options (Ray docs, "Cluster Management CLI", ray start; Ray
# python/ray/scripts/scripts.py). multi-node-serving.sh (vllm-project/vllm examples/online_serving) passes every
# argument it does not know to `ray start`, and starts the head with `--port=$ray_port` (default 6379: GCS).
RAY_GCS_PORT = 6379
RAY_NODE_PORTS: dict[str, int] = {  # on the leader and every worker
    "--node-manager-port": 6380,  # raylet
    "--object-manager-port": 6381,
    "--runtime-env-agent-port": 6382,
    "--dashboard-agent-grpc-port": 6383,  # also the metrics agent port
    "--dashboard-agent-listen-port": 6384,  # default 52365
    "--metrics-export-port": 6385,
}
RAY_HEAD_PORTS: dict[str, int] = {"--ray-client-server-port": 6386}  # default 10001; the leader only
RAY_WORKER_PORTS = (6400, 6463)  # --min/--max-worker-port: 64 Ray worker processes per node (vLLM: one per GPU)
# vLLM's own sockets (torch.distributed init, its ZeroMQ message queues) take ports from get_open_port(),
# which counts up from VLLM_PORT when it is set (vllm/envs.py VLLM_PORT; vllm/utils get_open_port).
VLLM_PORT_RANGE = (6500, 6515)
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
KEDA_API_VERSION = "keda.sh/v1alpha1"
MONITORING_API_VERSION = "monitoring.coreos.com/v1"
PROMETHEUS_SERVICE = "kps-prometheus"  # kube-prometheus-stack with fullnameOverride "kps" (observability.py)
PROMETHEUS_PORT = 9090

# `vllm serve --quantization`: Marlin kernels for AWQ/GPTQ (every catalog GPU is compute capability >= 8.0);
# int8 means W8A8 INT8 checkpoints, which LLM Compressor writes in the compressed-tensors format.
VLLM_QUANTIZATION: dict[str, str | None] = {
    "none": None, "fp8": "fp8", "awq": "awq_marlin", "gptq": "gptq_marlin", "int8": "compressed-tensors",
}
# TensorRT-LLM quantizes when the engine is built (`quantize.py --qformat`), not when Triton serves it:
# the URI must hold an engine built with this format; pods carry it as an annotation for audits.
TRTLLM_QFORMAT: dict[str, str] = {"none": "full_prec", "fp8": "fp8", "awq": "int4_awq", "int8": "int8_sq"}
QFORMAT_ANNOTATION = "aifactory.io/trtllm-qformat"


def prometheus_url(cfg: ServingView) -> str:
    return f"http://{PROMETHEUS_SERVICE}.{cfg.observability.namespace}.svc.cluster.local:{PROMETHEUS_PORT}"


def _namespace(cfg: ServingView, model: Model) -> str:
    return cfg.tenant_of(model).namespace


def _meta(cfg: ServingView, model: Model, name: str | None = None) -> dict[str, Any]:
    return {"name": name or model.name, "namespace": _namespace(cfg, model), "labels": _labels(model)}


def _labels(model: Model) -> dict[str, str]:
    return naming.model_labels(model.name, model.tenant, model.pool)


# --------------------------------------------------------------------------------------------
# engine command lines


def model_path(model: Model) -> str:
    """What the engine loads: the HF id (downloaded into the cache), or a path in the cache / claim."""
    scheme, _, rest = model.uri.partition("://")
    if scheme == "hf":
        return rest
    if scheme == "s3":
        return f"{CACHE_MOUNT}/{model.name}"
    claim, _, path = rest.partition("/")
    return f"{STORE_MOUNT}/{claim}/{path}".rstrip("/")


DEFAULT_NGRAM_LOOKUP_MAX = 4


def served_model_names(model: Model) -> list[str]:
    """Names vLLM answers to. The first one labels its metrics (model_name), so it is the config key the
    dashboards and rules select on; the workload (what the gateway routes) and the model id follow."""
    return list(dict.fromkeys((model.name, model.workload, model.model)))


@dataclass(frozen=True, slots=True)
class EngineTracing:
    """Where and how often vLLM exports OpenTelemetry spans (the OTel Collector, the gateway's ratio).

    vLLM exports OTLP/gRPC to `grpc_endpoint` (v0.33.0 vllm/tracing/otel.py get_span_exporter: grpc unless
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL says otherwise). Triton's OpenAI frontend takes no trace options
    (r26.07 python/openai/openai_frontend/main.py), so Triton models export no engine spans."""

    grpc_endpoint: str
    sample_ratio: float  # requests that reach an engine without a trace context: share traced


def engine_tracing(cfg: ServingView) -> EngineTracing:
    """The stack's engine tracing: the Collector in the observability namespace, observability.traceSampleRatio
    (for requests that reach an engine without a traceparent; the gateway traces every request it routes and the
    Collector applies the ratio once: components.k8s.envoy_config.GATEWAY_TRACE_PERCENT)."""
    host = f"{naming.OTEL_COLLECTOR_SERVICE}.{cfg.observability.namespace}.svc.cluster.local"
    return EngineTracing(grpc_endpoint=f"http://{host}:{naming.OTEL_GRPC_PORT}",
                         sample_ratio=cfg.observability.trace_sample_ratio)


def _trace_env(model: Model, tracing: EngineTracing) -> list[dict[str, str]]:
    """vLLM's tracer is the OTel SDK's TracerProvider(resource=...) (v0.33.0 vllm/tracing/otel.py
    init_otel_tracer; Resource.create merges OTEL_SERVICE_NAME), which reads the SDK's
    sampler and service name from the environment: follow the caller's sampled flag (parentbased), sample
    requests without a context at the stack's ratio."""
    if model.engine != "vllm":
        return []
    return [{"name": "OTEL_SERVICE_NAME", "value": model.name},
            {"name": "OTEL_TRACES_SAMPLER", "value": "parentbased_traceidratio"},
            {"name": "OTEL_TRACES_SAMPLER_ARG", "value": repr(tracing.sample_ratio)}]


def vllm_image(cfg: ServingView, model: Model) -> str:
    """The vLLM image of a model: nodePools.X.vllmImage, else the fabric's image for multi-node replicas (EFA:
    AWS's DLC with libfabric + aws-ofi-nccl), else the stock image."""
    pool = cfg.pool_of(model)
    if pool.vllm_image is not None:
        return pool.vllm_image
    if model.multi_node and pool.fabric == "efa":
        return DEFAULT_EFA_VLLM_IMAGE.format(region=cfg.target.region)
    return DEFAULT_VLLM_IMAGE


def _quantization_flag(model: Model) -> str | None:
    """`--quantization` only where vLLM must quantize on load: a pre-quantized checkpoint declares its own
    method (config.json quantization_config), which vLLM reads, and refuses a contradicting flag."""
    if model.quantized_checkpoint:
        return None
    return VLLM_QUANTIZATION[model.quantization]


def vllm_args(model: Model, *, tracing: EngineTracing | None = None) -> list[str]:
    """`vllm serve` arguments (after the model) for the model's parallelism, quantization and features.

    With `tracing`, `--otlp-traces-endpoint` (vLLM's ObservabilityConfig.otlp_traces_endpoint): one span per
    request with its queue, prefill, decode and TTFT times as attributes, child of the request's traceparent.
    `--collect-detailed-traces` stays off: its own help says it involves costly and blocking operations
    (model forward / execute timing on every step)."""
    args = ["--host", "0.0.0.0", "--port", str(naming.MODEL_HTTP_PORT),
            "--served-model-name", *served_model_names(model),
            "--tensor-parallel-size", str(model.tensor_parallel),
            "--pipeline-parallel-size", str(model.pipeline_parallel),
            "--gpu-memory-utilization", str(DEFAULT_GPU_MEMORY_UTILIZATION)]
    if model.task != "generate":  # embeddings and cross-encoders run on vLLM's pooling runner (score: the
        # classification head of a *ForSequenceClassification model; v0.33.0 vllm/config/model.py RunnerOption)
        args += ["--runner", "pooling"]
    if (quant := _quantization_flag(model)) is not None:
        args += ["--quantization", quant]
    if model.expert_parallel:
        args.append("--enable-expert-parallel")
    if model.max_model_length is not None:
        args += ["--max-model-len", str(model.max_model_length)]
    args.append("--enable-prefix-caching" if model.prefix_caching else "--no-enable-prefix-caching")
    if model.speculative is not None:
        spec: dict[str, str | int] = {"method": model.speculative.method,
                                      "num_speculative_tokens": model.speculative.num_speculative_tokens}
        if model.speculative.draft_model is not None:
            spec["model"] = model.speculative.draft_model
        else:  # ngram drafts from the prompt: the longest n-gram it looks up
            spec["prompt_lookup_max"] = DEFAULT_NGRAM_LOOKUP_MAX
        args += ["--speculative-config", json.dumps(spec, sort_keys=True, separators=(",", ":"))]
    if model.kv_offload_gib is not None:  # CacheConfig.kv_offloading_size (GiB, summed over TP ranks): vLLM sets
        # up its native OffloadingConnector with cpu_bytes_to_use itself (vllm/config/vllm.py, v0.27.1 and v0.33.0)
        args += ["--kv-offloading-size", f"{model.kv_offload_gib:g}"]
    if model.multi_node:
        args += ["--distributed-executor-backend", "ray"]
    if tracing is not None:
        args += ["--otlp-traces-endpoint", tracing.grpc_endpoint]
    return args


def triton_command(model: Model) -> list[str]:
    """Triton's OpenAI-compatible frontend over the TensorRT-LLM model repository, on the model's HTTP port.

    `tritonserver` alone serves only the KServe v2 API; the OpenAI API is the frontend in
    triton-inference-server/server python/openai (r26.07 openai_frontend/main.py), which starts an in-process
    Triton server and serves /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models, plus /health/ready
    and Triton's Prometheus /metrics, all on --openai-port (default 9000). The KServe frontends stay off
    (--enable-kserve-frontends not given). --tokenizer is the model's HF id (chat templates; HF_TOKEN for gated
    ones). A TensorRT-LLM engine of TP x PP > 1 runs in the backend's orchestrator mode (TRTLLM_ORCHESTRATOR=1, see
    _triton_env): the frontend does not support leader mode (mpirun), per python/openai/README.md "Model
    Parallelism Support". main.py exposes no trace or metrics options: see docs/contracts.md for what that drops.
    """
    return ["python3", TRITON_OPENAI_MAIN, f"--model-repository={model_path(model)}", f"--tokenizer={model.model}",
            "--host=0.0.0.0", f"--openai-port={naming.MODEL_HTTP_PORT}",
            f"--default-max-tokens={DEFAULT_TRITON_MAX_TOKENS}"]


def _triton_env(model: Model) -> list[dict[str, str]]:
    """tensorrtllm_backend's orchestrator mode: the backend spawns one MPI worker per GPU itself."""
    if model.engine != "triton" or model.tensor_parallel * model.pipeline_parallel == 1:
        return []
    return [{"name": "TRTLLM_ORCHESTRATOR", "value": "1"}]


# --------------------------------------------------------------------------------------------
# resources


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
           {"name": "VLLM_PORT", "value": str(VLLM_PORT_RANGE[0])}]
    if pool.fabric == "efa":
        env.append({"name": "FI_PROVIDER", "value": "efa"})
        if pool.instance_type in catalog.EFA_GPUDIRECT_RDMA:
            env.append({"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"})
    elif pool.fabric == "infiniband" and cfg.infiniband is not None and cfg.infiniband.hcas:
        env.append({"name": "NCCL_IB_HCA", "value": "=" + ",".join(cfg.infiniband.hcas)})
    return env


def _rdma(cfg: ServingView, model: Model) -> bool:
    return model.multi_node and cfg.pool_of(model).fabric == "infiniband" and cfg.infiniband is not None


# --------------------------------------------------------------------------------------------
# pods


def _probe(path: str, *, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": PROBE_PERIOD_SECONDS,
            "timeoutSeconds": 5, "failureThreshold": failures}


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
    """How long `pulumi up` waits for the model's Deployment: a rolling update replaces the pods one at a
    time (GPU_ROLLING_UPDATE), up to replicas.max of them, each within pod_start_seconds. A pod
    that never becomes ready is reported sooner by the Deployment's progress deadline (see workload())."""
    return max(1, model.replicas.max) * pod_start_seconds(model)


def await_annotations(cfg: ServingView, model: Model) -> dict[str, str]:
    """How pulumi-kubernetes awaits the model's Deployment. On a capacity-block pool nodes exist only inside
    the block's window, so `pulumi up` does not wait for pods there (they start when the block does)."""
    out = {AWAIT_TIMEOUT_ANNOTATION: str(await_timeout_seconds(model))}
    if cfg.pool_of(model).capacity.type == "capacity-block":
        out[SKIP_AWAIT_ANNOTATION] = "true"
    return out


# What each engine answers once it can serve, besides HEALTH_PATHS (liveness: vLLM's /health fails when its engine
# died): vLLM lists its models (v0.33.0 vllm/entrypoints/openai/models/api_router.py), Triton's frontend has only
# /health/ready (r26.07 routers/observability.py: 200 when the in-process server is ready).
READY_PATHS = {"vllm": "/v1/models", "triton": "/health/ready"}


def _probes(model: Model) -> dict[str, Any]:
    """Startup waits for the model to load (its start-up budget), then liveness and readiness per engine."""
    live, ready = HEALTH_PATHS[model.engine], READY_PATHS[model.engine]
    return {"startupProbe": _probe(ready, failures=_startup_failures(model)),
            "livenessProbe": _probe(live, failures=3),
            "readinessProbe": _probe(ready, failures=2)}


def _ports(model: Model) -> list[dict[str, Any]]:
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
        *_triton_env(model),
    ]


def model_cold_start(cfg: ServingView, model: Model) -> coldstart.ColdStart | None:
    """The model's expected load time from its node's cache medium, next to its start-up budget."""
    return coldstart.cold_start(model_id=model.model, quantization=model.quantization,
                                prequantized=model.quantized_checkpoint or model.engine == "triton",
                                configured_gib=model.weights_gib, instance_type=cfg.pool_of(model).instance_type,
                                aws=cfg.is_aws,
                                budget_seconds=model.startup_budget_seconds)


def _node_cache(cfg: ServingView, model: Model) -> bool:
    """True when the model's pool caches weights on the node's NVMe array, shared by the node's pods."""
    return coldstart.cache_medium(instance_type=cfg.pool_of(model).instance_type,
                                  aws=cfg.is_aws).kind == "instance-store"


def cache_volume(cfg: ServingView, model: Model) -> dict[str, Any]:
    """The pod's model cache. On AWS types with NVMe instance store, the model's node-local cache on the RAID0
    array (storage.node_cache_objects: one download per node, shared by the node's pods of the model, 8 x 1 GB/s
    instead of an EBS volume). Elsewhere a generic ephemeral volume (a claim created and deleted with the pod)."""
    if _node_cache(cfg, model):
        claim = node_cache_claim_name(model.name, model.cache_gib)
        return {"name": "model-cache", "persistentVolumeClaim": {"claimName": claim}}
    spec: dict[str, Any] = {"accessModes": [CACHE_ACCESS_MODE],
                            "resources": {"requests": {"storage": f"{model.cache_gib}Gi"}}}
    if (storage_class := cache_storage_class_name(cfg)) is not None:
        spec["storageClassName"] = storage_class
    return {"name": "model-cache", "ephemeral": {"volumeClaimTemplate": {
        "metadata": {"labels": _labels(model)}, "spec": spec}}}


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


def ray_start_flags(*, head: bool) -> list[str]:
    """`ray start` options that pin every port a Ray node opens (the GCS port is the script's --ray_port)."""
    ports = {**RAY_NODE_PORTS, **(RAY_HEAD_PORTS if head else {})}
    flags = [f"{flag}={port}" for flag, port in ports.items()]
    flags += [f"--min-worker-port={RAY_WORKER_PORTS[0]}", f"--max-worker-port={RAY_WORKER_PORTS[1]}"]
    return [f"--ray_port={RAY_GCS_PORT}", *flags, *(["--include-dashboard=false"] if head else [])]


def multi_node_ports() -> list[int]:
    """Every fixed port the leader's and workers' processes listen on besides the model's HTTP port."""
    ranges = [range(lo, hi + 1) for lo, hi in (RAY_WORKER_PORTS, VLLM_PORT_RANGE)]
    return sorted({RAY_GCS_PORT, *RAY_NODE_PORTS.values(), *RAY_HEAD_PORTS.values(), *(p for r in ranges for p in r)})


def nccl_guard_script() -> str:
    """The text of nccl_guard.py, run by the leader image's python3 around `vllm serve`."""
    return importlib.resources.files("components.k8s").joinpath("nccl_guard.py").read_text()


def _engine_command(model: Model, role: str, *, tracing: EngineTracing | None = None, fabric_name: str = "none"
                    ) -> list[str]:
    """The engine container's command. role: single (Deployment), leader or worker (LeaderWorkerSet)."""
    if model.engine == "triton":
        return triton_command(model)
    serve = ["vllm", "serve", model_path(model), *vllm_args(model, tracing=tracing)]
    if role == "single":
        return serve
    if role == "leader":
        start = [MULTI_NODE_SCRIPT, "leader", "--ray_cluster_size=$(LWS_GROUP_SIZE)", *_ray_timeout(model),
                 *ray_start_flags(head=True)]
        if fabric_name in ("efa", "infiniband"):
            serve = ["python3", "-c", nccl_guard_script(), fabric_name, "--", *serve]
        return ["/bin/bash", "-c", f"{shlex.join(start)} && exec {shlex.join(serve)}"]
    return ["/bin/bash", "-c", shlex.join([MULTI_NODE_SCRIPT, "worker", "--ray_address=$(LWS_LEADER_ADDRESS)",
                                           *_ray_timeout(model), *ray_start_flags(head=False)])]


def _ray_timeout(model: Model) -> list[str]:
    """multi-node-serving.sh's own option (not passed to `ray start`): how long the leader polls for all
    workers, and a worker retries joining, before giving up (`ray_init_timeout`, default 300 s)."""
    return [f"--ray_init_timeout={model.group_formation_seconds}"]


def pod_spec(cfg: ServingView, model: Model, *, role: str = "single") -> dict[str, Any]:
    """The model server pod. role: single, leader or worker (workers serve no HTTP: no ports or probes)."""
    pool = cfg.pool_of(model)
    volumes, mounts = _volumes(cfg, model)
    container: dict[str, Any] = {
        "name": model.engine,
        "image": vllm_image(cfg, model) if model.engine == "vllm" else DEFAULT_TRITON_IMAGE,
        "command": _engine_command(model, role, tracing=engine_tracing(cfg), fabric_name=pool.fabric),
        "env": [*_env(cfg, model), *_trace_env(model, engine_tracing(cfg))],
        "resources": container_resources(cfg, model),
        "volumeMounts": mounts,
        # No IPC_LOCK, even for RDMA: Pod Security `restricted` forbids adding it, and none is needed to
        # register (pin) memory when containers start with RLIMIT_MEMLOCK unlimited. containerd's upstream
        # unit sets no LimitMEMLOCK, so the kit raises it on the node (AWS: a containerd drop-in in the user
        # data, components/aws/nodes.py; on-prem: the documented drop-in, README) and node-check's `memlock`
        # check verifies it on containerd's running process.
        "securityContext": security.container_security_context(),
    }
    if role != "worker":
        container |= {"ports": _ports(model), **_probes(model)}
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
        "terminationGracePeriodSeconds": 60,
    }


def _template(cfg: ServingView, model: Model, role: str) -> dict[str, Any]:
    annotations: dict[str, str] = {}
    if _rdma(cfg, model) and cfg.infiniband is not None:
        annotations |= fabric.rdma_networks_annotation(cfg.infiniband)
    if model.multi_node:
        annotations |= mesh.multi_node_sidecar_annotations(outbound_excluded=multi_node_ports())
    if model.engine == "triton":
        annotations[QFORMAT_ANNOTATION] = TRTLLM_QFORMAT[model.quantization]
    meta: dict[str, Any] = {"labels": _labels(model)}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": pod_spec(cfg, model, role=role)}


# --------------------------------------------------------------------------------------------
# objects


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
    meta = _meta(cfg, model, naming.model_service_account(model.name))
    if role_arn is not None:
        meta["annotations"] = {IRSA_ANNOTATION: role_arn}
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta, "automountServiceAccountToken": False}


def workload_name(model: Model) -> str:
    """The Deployment is named after the model; a LeaderWorkerSet is not, because the LWS controller
    creates a headless Service named after it (for LWS_LEADER_ADDRESS), and the model's Service owns
    the model's name."""
    return f"{model.name}-lws" if model.multi_node else model.name


def workload(cfg: ServingView, model: Model) -> dict[str, Any]:
    """A Deployment, or a LeaderWorkerSet when one replica spans nodes.

    Autoscaled models leave `replicas` to KEDA (the field stays unmanaged by Pulumi)."""
    replicas = {} if model.replicas.autoscaled else {"replicas": model.replicas.min}
    if not model.multi_node:
        meta = {**_meta(cfg, model), "annotations": await_annotations(cfg, model)}
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
            **replicas,
            "selector": {"matchLabels": {naming.LABEL_MODEL: model.name}},
            # The controller marks a rollout failed (Progressing=False, ProgressDeadlineExceeded) when no new pod
            # becomes available for this long; the default 600 s (apps/v1 DeploymentSpec) is shorter than one
            # model pod's start, so every slow model would read as stuck. pulumi-kubernetes reports the condition
            # as a warning while it waits (provider/pkg/await/deployment.go processDeploymentEvent).
            "progressDeadlineSeconds": pod_start_seconds(model),
            "strategy": GPU_ROLLING_UPDATE,
            "template": _template(cfg, model, "single"),
        }}
    return {"apiVersion": LWS_API_VERSION, "kind": "LeaderWorkerSet",
            "metadata": _meta(cfg, model, workload_name(model)), "spec": {
        **replicas,
        "startupPolicy": "LeaderCreated",
        "rolloutStrategy": {"type": "RollingUpdate",
                            "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}},
        "leaderWorkerTemplate": {
            "size": model.nodes_per_replica,
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": _template(cfg, model, "leader"),
            "workerTemplate": _template(cfg, model, "worker"),
        },
    }}


def service(cfg: ServingView, model: Model) -> dict[str, Any]:
    """Headless, so the gateway sees (and balances across, and ejects) every replica; leaders only."""
    selector = {naming.LABEL_MODEL: model.name}
    if model.multi_node:
        selector[LWS_WORKER_INDEX_LABEL] = "0"
    ports = [{"name": p["name"], "port": p["containerPort"], "targetPort": p["name"], "protocol": "TCP",
              "appProtocol": "http"} for p in _ports(model)]
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(cfg, model),
            "spec": {"clusterIP": "None", "selector": selector, "ports": ports}}


def disruption_budget(cfg: ServingView, model: Model) -> dict[str, Any]:
    """Voluntary disruptions (drains, node upgrades) take one replica at a time, never the model's last one.

    With one replica at most (replicas.max 1) maxUnavailable 1 would let a drain evict the only pod and the
    model would be down until a new one loads; minAvailable 1 makes the eviction API refuse (HTTP 429) until
    the operator scales the model up or deletes the pod deliberately. A model that may scale to zero
    (replicas.min 0) accepts that outage already: one at a time."""
    budget = {"minAvailable": 1} if model.replicas.max == 1 and model.replicas.min >= 1 else {"maxUnavailable": 1}
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(cfg, model),
            "spec": {**budget, "selector": {"matchLabels": {naming.LABEL_MODEL: model.name}}}}


def _selector(cfg: ServingView, model: Model) -> str:
    # ServiceMonitor podTargetLabels copy the pod's aifactory.io/model label as aifactory_io_model
    return f'namespace="{_namespace(cfg, model)}",{TRITON.L_POD_MODEL}="{model.name}"'


def scaling_query(cfg: ServingView, model: Model) -> tuple[str, str, str]:
    """(PromQL, KEDA metricType, threshold) of the model's queue signal.

    vLLM: waiting requests summed over replicas, AverageValue (target per replica).
    Triton: average queue time per request over 1 minute in ms, Value (a latency, not a sum), of the repository
    model that queues most (Triton's `model` label names repository models: a TensorRT-LLM ensemble's
    tensorrt_llm, or a single classifier; the bottleneck decides, whatever it is called)."""
    sel = _selector(cfg, model)
    if model.engine == "vllm":
        return (f"sum({VLLM.WAITING}{{{sel}}})", "AverageValue", str(model.replicas.target_queue_depth))
    by = f"sum by ({TRITON.L_MODEL})"
    query = (f"max({by} (rate({TRITON.QUEUE_DURATION_US}{{{sel}}}[1m])) / 1000 / "
             f"clamp_min({by} (rate({TRITON.REQUEST_SUCCESS}{{{sel}}}[1m])), 1e-9))")
    return (query, "Value", str(model.replicas.target_queue_time_ms))


def wake_query(model: Model) -> str:
    """1 while the gateway turns the model's requests away for want of a ready replica, else 0.

    A model scaled to zero exports no queue metric, so scaling from zero needs the gateway's view;
    clamped to 1 (AverageValue, threshold 1), this trigger never asks for more than one replica."""
    return f'clamp_max(sum(rate({ENVOY.NO_HEALTHY}{{{ENVOY.L_CLUSTER}="{model.name}"}}[2m])), 1)'


def _trigger(cfg: ServingView, query: str, metric_type: str, threshold: str) -> dict[str, Any]:
    return {"type": "prometheus", "metricType": metric_type, "metadata": {
        "serverAddress": prometheus_url(cfg), "query": query, "threshold": threshold,
        "activationThreshold": "0", "ignoreNullValues": "true"}}


def scaled_object(cfg: ServingView, model: Model) -> dict[str, Any]:
    """KEDA on the queue signal; models that may scale to zero also wake on the gateway's refusals."""
    triggers = [_trigger(cfg, *scaling_query(cfg, model))]
    if model.replicas.min == 0:
        triggers.append(_trigger(cfg, wake_query(model), "AverageValue", "1"))
    kind, api = ("LeaderWorkerSet", LWS_API_VERSION) if model.multi_node else ("Deployment", "apps/v1")
    return {"apiVersion": KEDA_API_VERSION, "kind": "ScaledObject", "metadata": _meta(cfg, model), "spec": {
        "scaleTargetRef": {"apiVersion": api, "kind": kind, "name": workload_name(model)},
        "minReplicaCount": model.replicas.min,
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
    return {"apiVersion": MONITORING_API_VERSION, "kind": "ServiceMonitor", "metadata": _meta(cfg, model),
            "spec": {
        "selector": {"matchLabels": {naming.LABEL_MODEL: model.name, **naming.MANAGED_BY}},
        "podTargetLabels": [naming.LABEL_MODEL, naming.LABEL_TENANT],
        "endpoints": [{"port": port, "path": "/metrics", "interval": "15s", **MESH_SCRAPE_TLS}],
    }}


def model_objects(cfg: ServingView, model: Model, *, role_arn: pulumi.Input[str] | None = None
                  ) -> list[dict[str, Any]]:
    """Every object of one model, in apply order (`role_arn`: the IRSA role of an s3:// model)."""
    cache = node_cache_objects(namespace=_namespace(cfg, model), model=model.name, size_gib=model.cache_gib,
                               labels=_labels(model)) if _node_cache(cfg, model) else []
    objs = [service_account(cfg, model, role_arn=role_arn), *cache, workload(cfg, model), service(cfg, model),
            disruption_budget(cfg, model)]
    if model.replicas.autoscaled:
        objs.append(scaled_object(cfg, model))
    return [*objs, service_monitor(cfg, model)]


# --------------------------------------------------------------------------------------------
# components

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


TYPE = "aifactory:k8s:ModelDeployment"  # the type token of the kit's existing stacks (part of every child's URN)
ENGINES = ("vllm", "triton")
FABRICS = ("efa", "infiniband", "none")
CAPACITY_TYPES = ("on-demand", "odcr", "capacity-block")
QUANTIZATIONS = ("none", "fp8", "awq", "gptq", "int8")
SPECULATIVE_METHODS = ("eagle3", "eagle", "ngram")
DEFAULT_TRACE_SAMPLE_RATIO = 1.0  # every request the engine sees may be traced (the caller's sampling decides)
DEFAULT_CACHE_GIB = 200


class ModelPoolArgs(TypedDict):
    """The node pool the model's pods run on: nodes labelled aifactory.io/pool=<name>."""

    name: str
    """The pool's name (the aifactory.io/pool node label's value)."""
    instance_type: str
    """The nodes' instance type, from the kit's catalog (components.aws.catalog): GPUs, vCPUs, memory, EFA devices."""
    fabric: NotRequired[str]
    """efa, infiniband or none: the data plane a multi-node replica's pods use. Default: none."""
    hugepages_mib: NotRequired[int]
    """2 MiB hugepages on each node; multi-node pods on EFA request them. Default: 5120 on EFA pools, else 0."""
    capacity_type: NotRequired[str]
    """on-demand, odcr or capacity-block (nodes exist only in the block's window: pulumi does not wait for the
    pods). Default: on-demand."""
    taints: NotRequired[list[TaintArgs]]
    """The nodes' taints, which the pods tolerate. Default: nvidia.com/gpu=true:NoSchedule."""
    vllm_image: NotRequired[str]
    """Default: vllm/vllm-openai:v0.33.0, or AWS's vLLM image with EFA libraries for multi-node replicas on EFA."""


class SpeculativeArgs(TypedDict):
    """Speculative decoding (vLLM)."""

    method: NotRequired[str]
    """eagle3, eagle or ngram. Default: eagle3."""
    draft_model: NotRequired[str]
    """The drafter (an EAGLE head); required unless ngram. Default: none."""
    num_speculative_tokens: NotRequired[int]
    """Default: 5."""


class ReplicasArgs(TypedDict):
    """How many replicas; KEDA scales between min and max when max > min."""

    min: NotRequired[int]
    """Default: 1."""
    max: NotRequired[int]
    """Default: max(min, 1)."""
    target_queue_depth: NotRequired[int]
    """vLLM: waiting requests per replica KEDA scales to. Default: 5."""
    target_queue_time_ms: NotRequired[int]
    """Triton: average queue time per request KEDA scales to. Default: 100."""


class ModelInfinibandArgs(TypedDict):
    """The InfiniBand RDMA network a multi-node replica on an infiniband pool attaches to (NVIDIA network operator)."""

    hcas: NotRequired[list[str]]
    """The rails' RDMA devices (NCCL_IB_HCA). Default: none (NCCL picks)."""
    network: NotRequired[str]
    """ipoib or sriov: the network attachment the pods get. Default: ipoib."""
    interfaces: NotRequired[list[str]]
    """The rails' netdevs. Default: [ib0]."""
    rdma_resource_name: NotRequired[str]
    """The shared RDMA device plugin's resource. Default: rdma_shared_device_a."""


class ModelDeploymentArgs(TypedDict):
    """Arguments of a ModelDeployment."""

    engine: str
    """vllm, or triton (TensorRT-LLM)."""
    model: str
    """The served model id, e.g. meta-llama/Llama-3.1-8B-Instruct."""
    tenant: str
    """The tenant the model belongs to (the aifactory.io/tenant label)."""
    pool: ModelPoolArgs
    """The node pool the pods run on."""
    model_name: NotRequired[str]
    """The model's name: its Service, labels and service account (a DNS label). Default: the component's name."""
    namespace: NotRequired[str]
    """The tenant's namespace, where everything of the model is created. Default: the tenant."""
    uri: NotRequired[str]
    """Where the weights are: hf://<id>, s3://bucket/prefix (needs the cluster) or pvc://<claim>/<path>.
    Default: hf://<model>."""
    tensor_parallel: NotRequired[int]
    """Default: 1."""
    pipeline_parallel: NotRequired[int]
    """Default: 1."""
    gpus_per_replica: NotRequired[int]
    """Default: tensorParallel x pipelineParallel (more than a node's GPUs: a multi-node LeaderWorkerSet)."""
    mig_profile: NotRequired[str]
    """One MIG slice per pod, e.g. 1g.10gb. Default: whole GPUs."""
    quantization: NotRequired[str]
    """none, fp8, awq, gptq or int8. Default: none."""
    quantized_checkpoint: NotRequired[bool]
    """The checkpoint carries its own quantization (the engine gets no --quantization). Default: false for fp8 on
    vLLM (quantized on load), true otherwise."""
    max_model_length: NotRequired[int]
    """Default: the engine's (the model's own context length)."""
    prefix_caching: NotRequired[bool]
    """Default: true."""
    expert_parallel: NotRequired[bool]
    """Default: false."""
    kv_offload_gib: NotRequired[float]
    """GiB of host memory for offloaded KV cache blocks, summed over the replica's TP ranks (vLLM). Default: none."""
    speculative: NotRequired[SpeculativeArgs]
    """Default: none."""
    replicas: NotRequired[ReplicasArgs]
    """Default: one replica."""
    workload: NotRequired[str]
    """Another name the engine answers to (the gateway's API model). Default: the model's name."""
    cache_gib: NotRequired[int]
    """The model cache volume per pod. Default: 200."""
    startup_budget_seconds: NotRequired[int]
    """Download + load + warm-up before the startup probe gives up. Default: 1800."""
    group_formation_seconds: NotRequired[int]
    """Multi-node replicas: how long the leader waits for its workers to join Ray, on top of the start-up budget.
    Default: 900."""
    task: NotRequired[str]
    """generate, embed or rerank (a cross-encoder; vllm only): the API paths the gateway routes. Default: generate."""
    weights_gib: NotRequired[float]
    """Default: estimated from the model id's parameter count and quantization."""
    aws_region: NotRequired[str]
    """The cluster is EKS in this region (EFA images, node-local NVMe caches, the kit's gp3 class).
    Default: none (an existing cluster)."""
    storage_class: NotRequired[str]
    """The StorageClass of the model cache volumes; required off AWS. Default: the kit's gp3 class on AWS."""
    infiniband: NotRequired[ModelInfinibandArgs]
    """Default: none (infiniband pools then get no RDMA devices)."""
    priority_class_name: NotRequired[str]
    """An existing PriorityClass for the pods (the kit's ServingControllers creates aifactory-serving-interactive
    and aifactory-serving-batch). Default: none (the cluster's default priority)."""
    monitoring_namespace: NotRequired[str]
    """Where Prometheus (KEDA's queries) and the OpenTelemetry Collector (the engines' spans) run.
    Default: monitoring."""
    trace_sample_ratio: NotRequired[float]
    """Share of requests the engines trace. Default: 1.0."""


@dataclass(frozen=True)
class _Target:
    region: str | None
    storage_class: str | None


@dataclass(frozen=True)
class ServingSpec:
    """ModelDeploymentArgs with every default applied: what the build functions read (a ServingView)."""

    model: Model
    tenant: Tenant
    pool: NodePool
    target: _Target
    observability: Tracing
    infiniband: InfinibandSettings | None = None
    priority_class_name: str | None = None

    @property
    def is_aws(self) -> bool:
        return self.target.region is not None

    def tenant_of(self, model: Model) -> Tenant:
        return self.tenant

    def pool_of(self, model: Model) -> NodePool:
        return self.pool

    def priority_class_of(self, model: Model) -> str | None:
        return self.priority_class_name


def _choice(problems: Problems, path: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        problems.add(path, f"{value!r} is not allowed; choose one of: {', '.join(allowed)}")


def _deployment_problems(problems: Problems, args: ModelDeploymentArgs) -> None:
    _choice(problems, "engine", args["engine"], ENGINES)
    pool = args["pool"]
    if pool["instance_type"] not in catalog.CATALOG:
        problems.add("pool.instanceType", f"{pool['instance_type']!r} is not a known instance type; known: "
                                          f"{', '.join(catalog.known_types())}")
    _choice(problems, "pool.fabric", pool.get("fabric", "none"), FABRICS)
    _choice(problems, "pool.capacityType", pool.get("capacity_type", "on-demand"), CAPACITY_TYPES)
    _choice(problems, "quantization", args.get("quantization", "none"), QUANTIZATIONS)
    if args["engine"] in OPENAI_APIS:
        _choice(problems, "task", args.get("task", "generate"), tuple(OPENAI_APIS[args["engine"]]))
    if "speculative" in args:
        _choice(problems, "speculative.method", args["speculative"].get("method", "eagle3"), SPECULATIVE_METHODS)
    for field_, camel in (("tensor_parallel", "tensorParallel"), ("pipeline_parallel", "pipelineParallel"),
                          ("gpus_per_replica", "gpusPerReplica"), ("cache_gib", "cacheGib"),
                          ("startup_budget_seconds", "startupBudgetSeconds"),
                          ("group_formation_seconds", "groupFormationSeconds")):
        value = cast(int, args.get(field_, 1))
        if value < 1:
            problems.add(camel, f"{value} must be at least 1")
    replicas = args.get("replicas") or {}
    lo, hi = replicas.get("min", 1), replicas.get("max", max(replicas.get("min", 1), 1))
    if lo < 0 or lo > hi:
        problems.add("replicas.min", f"{lo} must be between 0 and replicas.max ({hi})")
    uri = args.get("uri", "")
    if uri and not uri.startswith(("hf://", "s3://", "pvc://")):
        problems.add("uri", f"{uri!r} is not hf://<id>, s3://<bucket>/<prefix> or pvc://<claim>/<path>")
    if "aws_region" not in args and "storage_class" not in args:
        problems.add("storageClass", "is required off AWS (no awsRegion): the class the model cache volumes use")


def _pool(p: ModelPoolArgs) -> NodePool:
    fabric = p.get("fabric", "none")
    taints = tuple(Taint(t["key"], cast(Any, t["effect"]), t.get("value", "")) for t in p["taints"]) \
        if "taints" in p else (Taint(GPU_TAINT_KEY, "NoSchedule", "true"),)
    return NodePool(name=p["name"], instance_type=p["instance_type"], fabric=cast(Any, fabric),
                    hugepages_mib=p.get("hugepages_mib", DEFAULT_EFA_HUGEPAGES_MIB if fabric == "efa" else 0),
                    capacity=Capacity(type=cast(Any, p.get("capacity_type", "on-demand"))), taints=taints,
                    vllm_image=p.get("vllm_image"))


def _deployment_model(name: str, args: ModelDeploymentArgs, pool: NodePool) -> Model:
    tp, pp = args.get("tensor_parallel", 1), args.get("pipeline_parallel", 1)
    engine, quant = args["engine"], args.get("quantization", "none")
    sp = args.get("speculative")
    replicas = args.get("replicas") or {}
    rmin = replicas.get("min", 1)
    model_name = args.get("model_name", name)
    return Model(
        name=model_name, engine=cast(Literal["vllm", "triton"], engine), model=args["model"], tenant=args["tenant"],
        pool=pool.name, uri=args.get("uri", f"hf://{args['model']}"), tensor_parallel=tp, pipeline_parallel=pp,
        gpus_per_replica=args.get("gpus_per_replica", tp * pp), mig_profile=args.get("mig_profile"),
        quantization=cast(Any, quant), max_model_length=args.get("max_model_length"),
        prefix_caching=args.get("prefix_caching", True),
        speculative=None if sp is None else Speculative(
            sp.get("draft_model"), sp.get("num_speculative_tokens", 5), cast(Any, sp.get("method", "eagle3"))),
        replicas=Replicas(rmin, replicas.get("max", max(rmin, 1)), replicas.get("target_queue_depth", 5),
                          replicas.get("target_queue_time_ms", 100)),
        workload=args.get("workload", model_name), cache_gib=args.get("cache_gib", DEFAULT_CACHE_GIB),
        startup_budget_seconds=args.get("startup_budget_seconds", DEFAULT_STARTUP_BUDGET_SECONDS),
        quantized_checkpoint=args.get("quantized_checkpoint", not (quant == "fp8" and engine == "vllm")),
        expert_parallel=args.get("expert_parallel", False), kv_offload_gib=args.get("kv_offload_gib"),
        weights_gib=args.get("weights_gib"),
        task=cast(Any, args.get("task", "generate")),
        group_formation_seconds=args.get("group_formation_seconds", DEFAULT_GROUP_FORMATION_SECONDS),
        gpus_per_node_hint=pool.instance.gpu_count if pool.gpu else 8)


def serving_spec(name: str, args: ModelDeploymentArgs) -> ServingSpec:
    """Validate `args` and resolve every default; raises pulumi.InputPropertiesError with property paths."""
    check_shape("ModelDeployment", name, args, ModelDeploymentArgs)  # typos, unknown keys, wrong types
    problems = Problems("ModelDeployment", name)
    _deployment_problems(problems, args)
    problems.raise_any()
    pool = _pool(args["pool"])
    return ServingSpec(
        model=_deployment_model(name, args, pool), pool=pool,
        tenant=Tenant(name=args["tenant"], namespace=args.get("namespace", args["tenant"])),
        target=_Target(region=args.get("aws_region"), storage_class=args.get("storage_class")),
        observability=Tracing(namespace=args.get("monitoring_namespace", DEFAULT_MONITORING_NAMESPACE),
                                     trace_sample_ratio=args.get("trace_sample_ratio", DEFAULT_TRACE_SAMPLE_RATIO)),
        infiniband=infiniband_settings(args["infiniband"]) if "infiniband" in args else None,
        priority_class_name=args.get("priority_class_name"))


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
        self.namespace = pulumi.Output.from_input(_namespace(cfg, model))
        self.service = pulumi.Output.from_input(model.name)
        self.kind = pulumi.Output.from_input(workload(cfg, model)["kind"])
        self.register_outputs({"namespace": _namespace(cfg, model), "service": model.name,
                               "kind": workload(cfg, model)["kind"]})

    def _s3_role(self, name: str, cfg: ServingView, model: Model, cluster: "GpuCluster | None") -> aws.iam.Role:
        if cluster is None:
            raise ValueError(f"models.{model.name}.uri: {model.uri!r} needs the EKS cluster for its IRSA role; "
                             "pass cluster= (s3:// needs provider aws; use pvc:// or hf:// elsewhere)")
        return irsa_role(f"{name}-s3", cluster=cluster, namespace=_namespace(cfg, model),
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
    models = [m for m in cfg.models.values() if _node_cache(cfg, m)]
    if not models:
        return None
    pools = [cfg.node_pools[p] for p in sorted({m.pool for m in models})]
    return cache_prep_daemonset(paths=[node_cache_path(_namespace(cfg, m), m.name) for m in models],
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
