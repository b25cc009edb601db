"""ModelDeployment's arguments (TypedDicts whose docstrings the component package's schema reads), their checks,
and ServingSpec: the arguments with every default applied (a ServingView)."""

# No `from __future__ import annotations`: TypedDict reads NotRequired (and the package analyzer the types) from
# evaluated annotations.
import datetime
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict, cast

from components import catalog
from components.k8s.defaults import (
    CAPACITY_BLOCK_DRAIN_MINUTES,
    DEFAULT_GROUP_FORMATION_SECONDS,
    DEFAULT_MONITORING_NAMESPACE,
    DEFAULT_STARTUP_BUDGET_SECONDS,
)
from components.k8s.engines import ENGINE_NAMES
from components.k8s.engines import ENGINES as REGISTRY
from components.k8s.settings import (
    Capacity,
    InfinibandSettings,
    Model,
    NodePool,
    Replicas,
    Speculative,
    Taint,
    Tenant,
    Tracing,
    default_of,
    infiniband_settings,
)
from components.k8s.settings.pools import NOT_A_UTC_TIME
from components.nodes import DEFAULT_EFA_HUGEPAGES_MIB, TaintArgs
from components.validation import Problems, check_shape
from components.vocabulary import GPU_TAINT_KEY

__all__ = [
    "ENGINES",
    "FABRICS",
    "CAPACITY_TYPES",
    "QUANTIZATIONS",
    "SPECULATIVE_METHODS",
    "DEFAULT_TRACE_SAMPLE_RATIO",
    "DEFAULT_CACHE_GIB",
    "ModelPoolArgs",
    "SpeculativeArgs",
    "ReplicasArgs",
    "ModelInfinibandArgs",
    "ModelDeploymentArgs",
    "ServingSpec",
    "serving_spec",
]

ENGINES = ENGINE_NAMES  # the registry's (components.k8s.engines)
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
    """The nodes' instance type, from the kit's catalog (components.catalog): GPUs, vCPUs, memory, EFA devices."""
    fabric: NotRequired[str]
    """efa, infiniband or none: the data plane a multi-node replica's pods use. Default: none."""
    hugepages_mib: NotRequired[int]
    """2 MiB hugepages on each node; multi-node pods on EFA request them. Default: 5120 on EFA pools, else 0."""
    capacity_type: NotRequired[str]
    """on-demand, odcr or capacity-block (nodes exist only in the block's window: pulumi does not wait for the
    pods). Default: on-demand."""
    capacity_start_time: NotRequired[str]
    """capacity-block: the block's start, UTC (2026-12-01T11:30:00Z); with its end, the model has replicas only
    inside the window (a KEDA cron trigger). Default: none (no window: the model is scaled as any other)."""
    capacity_end_time: NotRequired[str]
    """capacity-block: the block's end, UTC. Default: none."""
    capacity_drain_minutes: NotRequired[int]
    """capacity-block: the pool scales to zero this many minutes before the block's end. Default: 60."""
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
    timeout_seconds: NotRequired[float]
    """The longest request the gateway allows the model (its route timeout): how long the engine drains its
    requests on SIGTERM, within the pod's grace period. Default: 60."""
    group_formation_seconds: NotRequired[int]
    """Multi-node replicas: how long the leader waits for its workers to join Ray, on top of the start-up budget.
    Default: 900."""
    task: NotRequired[str]
    """generate, embed or rerank (a cross-encoder; vllm only): the API paths the gateway routes. Default: generate."""
    weights_gib: NotRequired[float]
    """Default: estimated from the model id's parameter count and quantization."""
    tool_call_parser: NotRequired[str]
    """The engine's tool call parser (none: no tool calls). Default: the model family's (the engine's module)."""
    tokenizer: NotRequired[str]
    """The tokenizer: a Hub id, or a directory relative to the uri (./DIR, ../DIR; components.k8s.engines.base
    tokenizer_path). Default: vLLM and SGLang the weights' own, Triton the model id (from the Hub)."""
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


_WINDOW_KEYS = {"capacity_start_time": "capacityStartTime", "capacity_end_time": "capacityEndTime"}


def _utc_time(value: str) -> bool:
    try:
        datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return False
    return True


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
    if args["engine"] in REGISTRY:
        _choice(problems, "task", args.get("task", "generate"), REGISTRY[args["engine"]].tasks)
    if "speculative" in args:
        _choice(problems, "speculative.method", args["speculative"].get("method", "eagle3"), SPECULATIVE_METHODS)
    for field_, camel in (("tensor_parallel", "tensorParallel"), ("pipeline_parallel", "pipelineParallel"),
                          ("gpus_per_replica", "gpusPerReplica"), ("cache_gib", "cacheGib"),
                          ("startup_budget_seconds", "startupBudgetSeconds"),
                          ("group_formation_seconds", "groupFormationSeconds")):
        value = cast(int, args.get(field_, 1))
        if value < 1:
            problems.add(camel, f"{value} must be at least 1")
    tp, pp = args.get("tensor_parallel", 1), args.get("pipeline_parallel", 1)
    if "mig_profile" not in args and args.get("gpus_per_replica", tp * pp) != tp * pp:
        problems.add("gpusPerReplica", f"{args.get('gpus_per_replica')} must equal tensorParallel x "
                                       f"pipelineParallel ({tp * pp})")
    timeout = args.get("timeout_seconds", default_of(Model, "timeout_seconds"))
    if not 0.1 <= timeout <= 3600:
        problems.add("timeoutSeconds", f"{timeout} must be between 0.1 and 3600 (seconds)")
    window: dict[str, str] = {key: cast(str, pool.get(key)) for key in _WINDOW_KEYS if key in pool}
    for key, when in window.items():
        if not _utc_time(when):
            problems.add(f"pool.{_WINDOW_KEYS[key]}", f"{when!r} {NOT_A_UTC_TIME}")
    if window and (len(window) != 2 or pool.get("capacity_type") != "capacity-block"):
        problems.add("pool.capacityStartTime", "capacityStartTime and capacityEndTime go together, on a pool of "
                                               "capacityType capacity-block")
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
    capacity = Capacity(type=cast(Any, p.get("capacity_type", "on-demand")), start_time=p.get("capacity_start_time"),
                        end_time=p.get("capacity_end_time"),
                        drain_minutes=p.get("capacity_drain_minutes", CAPACITY_BLOCK_DRAIN_MINUTES))
    return NodePool(name=p["name"], instance_type=p["instance_type"], fabric=cast(Any, fabric),
                    hugepages_mib=p.get("hugepages_mib", DEFAULT_EFA_HUGEPAGES_MIB if fabric == "efa" else 0),
                    capacity=capacity, taints=taints, vllm_image=p.get("vllm_image"))


def _deployment_model(name: str, args: ModelDeploymentArgs, pool: NodePool) -> Model:
    tp, pp = args.get("tensor_parallel", 1), args.get("pipeline_parallel", 1)
    engine, quant = args["engine"], args.get("quantization", "none")
    sp = args.get("speculative")
    replicas = args.get("replicas") or {}
    rmin = replicas.get("min", 1)
    model_name = args.get("model_name", name)
    return Model(
        name=model_name, engine=cast(Any, engine), model=args["model"], tenant=args["tenant"],
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
        quantized_checkpoint=args.get("quantized_checkpoint", REGISTRY[engine].default_quantized_checkpoint(quant)),
        expert_parallel=args.get("expert_parallel", False), kv_offload_gib=args.get("kv_offload_gib"),
        weights_gib=args.get("weights_gib"), tokenizer=args.get("tokenizer"),
        tool_call_parser=args.get("tool_call_parser"),
        task=cast(Any, args.get("task", "generate")),
        group_formation_seconds=args.get("group_formation_seconds", DEFAULT_GROUP_FORMATION_SECONDS),
        timeout_seconds=args.get("timeout_seconds", default_of(Model, "timeout_seconds")),
        gpus_per_node_hint=pool.instance.gpu_count if pool.gpu else 8)


def serving_spec(name: str, args: ModelDeploymentArgs) -> ServingSpec:
    """Validate `args` and resolve every default; raises pulumi.InputPropertiesError with property paths."""
    check_shape("ModelDeployment", name, args, ModelDeploymentArgs)  # typos, unknown keys, wrong types
    problems = Problems("ModelDeployment", name)
    _deployment_problems(problems, args)
    problems.raise_any()
    pool = _pool(args["pool"])
    model = _deployment_model(name, args, pool)
    for key, message in REGISTRY[model.engine].model_problems(model):  # what the stack model asks the engine too
        problems.add(key, message)
    problems.raise_any()
    return ServingSpec(
        model=model, pool=pool,
        tenant=Tenant(name=args["tenant"], namespace=args.get("namespace", args["tenant"])),
        target=_Target(region=args.get("aws_region"), storage_class=args.get("storage_class")),
        observability=Tracing(namespace=args.get("monitoring_namespace", DEFAULT_MONITORING_NAMESPACE),
                                     trace_sample_ratio=args.get("trace_sample_ratio", DEFAULT_TRACE_SAMPLE_RATIO)),
        infiniband=infiniband_settings(args["infiniband"]) if "infiniband" in args else None,
        priority_class_name=args.get("priority_class_name"))

