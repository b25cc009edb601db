"""Serving pools: one ModelDeployment per configured model (vLLM, or Triton with TensorRT-LLM).

    [IRSA role: s3:// models on AWS] -> ServiceAccount -> StatefulSet | LeaderWorkerSet -> headless Service
    -> PodDisruptionBudget -> KEDA ScaledObject (when replicas.max > replicas.min) -> ServiceMonitor

A replica fits on one node (a StatefulSet) or spans `nodes_per_replica` nodes (a LeaderWorkerSet
whose leader and workers all get the pool's data-plane fabric: EFA devices + hugepages on AWS, the
RDMA device + network attachment on InfiniBand). Pods run in the tenant's namespace as the model's
own service account, select their pool by `aifactory.io/pool`, tolerate the pool's taints, and
request GPUs (or one MIG slice) with limits == requests. Every pod has its own model cache, a generic
ephemeral volume (storage.cache_storage_class_name); s3:// models are synced into it by an init
container with the model's IRSA role (read-only, the URI's prefix only).

Prometheus scrapes the model Service's endpoints through a ServiceMonitor (mTLS, `MESH_SCRAPE_TLS`),
which copies the pod's `aifactory.io/model` label onto every series (`aifactory_io_model`).

Autoscaling is KEDA (a `prometheus` trigger per model): the query lives next to the model, min 0
(scale to zero) works, and LeaderWorkerSets scale through their scale subresource. Each engine's queue signal
(vLLM: `vllm:num_requests_waiting` per replica; Triton: the average queue time per request) comes from its
module in components.k8s.engines, as do its image, command line, health paths and capabilities.

Everything here is a pure function of (PlatformConfig, Model) returning Kubernetes objects; the
component only registers them. The modules: views (what the build functions read), pod (the pod and its
container), objects (the model's other objects), args (ModelDeployment's arguments) and component (the
components). This package re-exports the names other modules import from components.k8s.serving.
"""

from components.k8s.defaults import DEFAULT_STARTUP_BUDGET_SECONDS
from components.k8s.engines.base import (
    CACHE_MOUNT,
    STORE_MOUNT,
    EngineTracing,
    model_path,
)
from components.k8s.engines.triton import (
    DEFAULT_TRITON_IMAGE,
    DEFAULT_TRITON_MAX_TOKENS,
    QFORMAT_ANNOTATION,
    TRITON_OPENAI_MAIN,
    TRTLLM_QFORMAT,
    triton_command,
)
from components.k8s.engines.vllm import (
    DEFAULT_EFA_VLLM_IMAGE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_NGRAM_LOOKUP_MAX,
    DEFAULT_VLLM_IMAGE,
    EFA_VLLM_VERSION,
    MULTI_NODE_SCRIPT,
    RAY_GCS_PORT,
    RAY_HEAD_PORTS,
    RAY_NODE_PORTS,
    RAY_WORKER_PORTS,
    VLLM_PORT_RANGE,
    VLLM_QUANTIZATION,
    VLLM_VERSION,
    multi_node_ports,
    nccl_guard_script,
    ray_start_flags,
    served_model_names,
    vllm_args,
    vllm_image,
)
from components.k8s.serving.args import (
    DEFAULT_CACHE_GIB,
    DEFAULT_TRACE_SAMPLE_RATIO,
    ENGINES,
    ModelDeploymentArgs,
    ModelInfinibandArgs,
    ModelPoolArgs,
    ReplicasArgs,
    ServingSpec,
    SpeculativeArgs,
    serving_spec,
)
from components.k8s.serving.component import (
    TYPE,
    ModelDeployment,
    ServingControllers,
    cache_prep,
    priority_classes,
    register_object,
    required_controllers,
)
from components.k8s.serving.objects import (
    KEDA_API_VERSION,
    LWS_API_VERSION,
    MONITORING_API_VERSION,
    PROMETHEUS_PORT,
    PROMETHEUS_SERVICE,
    disruption_budget,
    model_objects,
    prometheus_url,
    s3_location,
    s3_read_policy,
    scaled_object,
    scaling_query,
    service,
    service_account,
    service_monitor,
    wake_query,
    workload,
    workload_name,
)
from components.k8s.serving.pod import (
    AWAIT_TIMEOUT_ANNOTATION,
    CACHE_ACCESS_MODE,
    DEFAULT_FETCH_IMAGE,
    DEFAULT_IMAGE_PULL_SECONDS,
    DEFAULT_NODE_SHARE,
    DEFAULT_SHM_SIZE,
    ENGINE_USER,
    HF_TOKEN_SECRET,
    await_annotations,
    await_timeout_seconds,
    cache_volume,
    container_resources,
    engine_tracing,
    fabric_resources,
    gpu_resources,
    model_cold_start,
    pod_spec,
    pod_start_seconds,
    start_budget_seconds,
    startup_probe_seconds,
    user_env,
)
from components.k8s.serving.views import (
    ControllersView,
    ServingView,
    TargetView,
)

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
    "PROMETHEUS_SERVICE",
    "PROMETHEUS_PORT",
    "DEFAULT_TRITON_MAX_TOKENS",
    "served_model_names",
    "QFORMAT_ANNOTATION",
    "MULTI_NODE_SCRIPT",
    "DEFAULT_NGRAM_LOOKUP_MAX",
    "STORE_MOUNT",
    "HF_TOKEN_SECRET",
    "pod_start_seconds",
    "ENGINES",
    "TYPE",
    "DEFAULT_CACHE_GIB",
    "DEFAULT_TRACE_SAMPLE_RATIO",
]
