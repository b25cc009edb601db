"""Models (`models`): parallelism, quantization, speculative decoding, replicas, variants, engine checks.

What an engine can do (multi-node replicas, quantization methods and which it applies on load, speculative decoding,
prefix caching, expert parallelism, KV offload, tasks) is asked of the engine registry (components.k8s.engines),
never branched on by name: a new engine's module is all these checks need.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Mapping
from typing import Any, Literal

from components import catalog
from components.k8s import coldstart, naming
from components.k8s.defaults import default_try_idle_seconds
from components.k8s.engines import ENGINES
from components.k8s.engines.vllm import DEFAULT_GPU_MEMORY_UTILIZATION
from components.k8s.gateway.envoy.config import OPENAI_APIS
from components.k8s.memory_fit import memory_fit
from components.k8s.settings import (
    MODEL_TASKS,
    QUANTIZATION_METHODS,
    Model,
    ModelSlo,
    NodePool,
    Quantization,
    SessionAffinity,
    Speculative,
    Tenant,
    Variant,
    default_of,
)
from dashboards.rules import MODEL_SLOS, model_slo_default, model_slo_problems
from infra.stack import declared
from infra.stack.reader import (
    _Reader,
    _show,
)


def _model(r: _Reader, name: str, d: dict[str, Any], pools: Mapping[str, NodePool],
           tenants: Mapping[str, Tenant], *, aws: bool) -> Model | None:
    path = f"models.{name}"
    v = r.fields(Model, d, path, handled=("speculative", "variant"))
    engine = v.pop("engine")
    eng = ENGINES.get(engine) if engine is not None else None
    model_id = v["model"]
    tenant = v["tenant"]
    # a tenant or pool whose entry was reported (a bad name, not a mapping) is not reported again here
    if tenant is not None and tenant not in tenants and not r.problems_at(f"tenants.{tenant}"):
        r.fail(f"{path}.tenant", f"{tenant!r} is not a tenant; tenants: {', '.join(sorted(tenants)) or '(none)'}")
    pool_name = v["pool"]
    pool = pools.get(pool_name) if pool_name else None
    if pool_name is not None and pool is None and not r.problems_at(f"nodePools.{pool_name}"):
        r.fail(f"{path}.pool", f"{pool_name!r} is not a node pool; pools: {', '.join(sorted(pools)) or '(none)'}")
    elif pool is not None and not pool.gpu:
        r.fail(f"{path}.pool", f"{pool_name!r} has no GPUs ({pool.instance_type}); "
                               f"GPU pools: {', '.join(p.name for p in pools.values() if p.gpu) or '(none)'}")
    tp, pp, mig = v["tensor_parallel"], v["pipeline_parallel"], v["mig_profile"]
    if not r.is_set(d, path, "gpusPerReplica"):
        v["gpus_per_replica"] = tp * pp
    gpus = v["gpus_per_replica"]
    if mig is None and gpus != tp * pp:
        r.fail(f"{path}.gpusPerReplica", f"{gpus} must equal tensorParallel x pipelineParallel ({tp * pp})")
    per_node = pool.instance.gpu_count if pool is not None and pool.gpu else 8
    # The key the user wrote for the replica's shape, so every message below names it.
    shape = next((k for k in ("tensorParallel", "pipelineParallel", "gpusPerReplica") if k in d), "tensorParallel")
    if tp & (tp - 1):
        # vLLM checks total_num_attention_heads % tensor_parallel_size == 0 when it loads the model (vllm
        # config/model.py, verify_with_parallel_config); the kit cannot read the model's head count, and head
        # counts are powers of two times small factors (Llama 3.x: 32, 64, 128), so 3, 5, 6 or 7 rarely divide.
        r.fail(f"{path}.tensorParallel", f"{tp} is not a power of two: the engine splits the model's attention heads "
                                         "evenly across tensorParallel GPUs (vLLM requires heads % tensorParallel "
                                         "== 0); use 1, 2, 4, 8 or 16")
    if pool is not None and pool.gpu:
        if mig is not None:
            if pool.mig is None:
                r.fail(f"{path}.migProfile", f"pool {pool.name!r} has no MIG layout; set nodePools.{pool.name}.mig")
            if tp * pp != 1:
                r.fail(f"{path}.migProfile",
                       "a MIG slice serves one shard: tensorParallel and pipelineParallel must be 1")
        elif gpus > per_node and gpus % per_node:
            r.fail(f"{path}.{shape}", f"{gpus} GPUs span nodes of {per_node} GPUs ({pool.instance_type}); "
                                      f"a multi-node replica needs a multiple of {per_node}")
        elif gpus > per_node and eng is not None and not eng.multi_node:
            r.fail(f"{path}.engine", f"{engine!r} cannot serve a replica of {gpus} GPUs across nodes of {per_node} "
                                     f"({pool.instance_type}); use engine {_with('multi_node')} or fit the replica "
                                     "on one node")
        elif gpus > per_node and pool.fabric == "none":
            r.fail(f"{path}.{shape}", f"{gpus} GPUs need {gpus // per_node} nodes, but pool "
                                      f"{pool.name!r} has no data-plane fabric (efa or infiniband)")
        elif gpus > per_node and gpus // per_node > pool.max_size:
            r.fail(f"{path}.{shape}", f"one replica of {gpus} GPUs (tensorParallel x pipelineParallel) needs "
                                      f"{gpus // per_node} nodes of {per_node} GPUs ({pool.instance_type}), but "
                                      f"nodePools.{pool.name}.maxSize is {pool.max_size}")
    quant, prequantized = _quantization(r, d.get("quantization", UNQUANTIZED), f"{path}.quantization", engine=engine,
                                        pool=pool, model_id=model_id)
    if eng is not None and quant in QUANT_METHODS and quant not in eng.quantization_methods:
        r.fail(f"{path}.quantization", f"{quant!r} is not supported by engine {engine!r}; choose one of: "
                                       f"{', '.join(m for m in QUANT_METHODS if m in eng.quantization_methods)}")
    spec = None
    if d.get("speculative") is not None:
        sp = f"{path}.speculative"
        sd = d["speculative"]
        if isinstance(sd, dict) and sd.get("method") == "draft_model":
            r.fail(f"{sp}.method", "'draft_model' is not supported by the V1 engine of the kit's pinned vLLM "
                                   "(it raises NotImplementedError); use eagle3 with an EAGLE-3 head, or ngram")
            sd = {k: x for k, x in sd.items() if k != "method"}
        spec = r.section(Speculative, sd, sp)
        if spec.method == "ngram" and spec.draft_model is not None:
            r.fail(f"{sp}.draftModel", "is not used by method 'ngram' (it drafts from the prompt); remove it")
            spec = dataclasses.replace(spec, draft_model=None)
        elif spec.method != "ngram" and spec.draft_model is None and not r.problems_at(f"{sp}.draftModel"):
            r.fail(f"{sp}.draftModel", "is required")
        if eng is not None and not eng.speculative:
            r.fail(sp, f"speculative decoding is not available with engine {engine!r}; remove it or use engine "
                       f"{_with('speculative')}")
        elif pp > 1:
            r.fail(sp, f"vLLM's speculative decoding does not support pipeline parallelism "
                       f"(pipelineParallel is {pp}); remove it or use tensorParallel only")
    rp = f"{path}.replicas"
    replicas = v.pop("replicas")
    if not r.is_set(d["replicas"] if isinstance(d.get("replicas"), dict) else {}, rp, "max"):
        replicas = dataclasses.replace(replicas, max=max(replicas.min, 1))
    rmax = replicas.max
    if replicas.min > rmax:
        r.fail(f"{rp}.min", f"{replicas.min} is greater than max {rmax}")
    if pool is not None and pool.gpu and mig is None and not r.problems_at(path):
        _fits_pool(r, path, gpus, per_node, rmax, pool)
    timeout = v["timeout_seconds"]
    if v["try_idle_timeout_seconds"] > timeout and r.is_set(d, path, "tryIdleTimeoutSeconds"):
        r.fail(f"{path}.tryIdleTimeoutSeconds", f"{v['try_idle_timeout_seconds']:g} is longer than timeoutSeconds "
                                                f"{timeout:g}; use at most {timeout:g}")
    if not r.is_set(d, path, "workload"):
        v["workload"] = name
    if eng is not None:
        v["slo"] = _latency_slo(r, d, path, engine, v["slo"])
    if not r.is_set(d, path, "tryIdleTimeoutSeconds"):
        v["try_idle_timeout_seconds"] = default_try_idle_seconds(timeout, v["slo"].ttft_seconds)
    v["prefix_caching"] = _prefix_caching(r, d, path, engine, v["prefix_caching"])
    _expert_parallel(r, path, engine, tp, v["expert_parallel"])
    _kv_offload(r, d, path, engine, v["kv_offload_gib"])
    v["task"] = _task(r, path, engine, v["task"])
    if not r.is_set(d, path, "uri"):
        v["uri"] = f"hf://{model_id}"
    elif (problem := _model_uri(v["uri"], aws=aws)) is not None:
        r.fail(f"{path}.uri", f"{_show(v['uri'])} {problem}")
        v["uri"] = f"hf://{model_id}"
    if None in (engine, model_id, tenant, pool_name):
        return None
    model = Model(
        name=name, engine=engine,
        quantization=quant, speculative=spec, replicas=replicas,
        gpus_per_node_hint=per_node,
        quantized_checkpoint=prequantized,
        variant=_variant(r, d, path),
        session_affinity_balance_factor=_session_affinity(r, d, path, engine),
        **v,
    )
    if pool is not None and pool.gpu:
        _cold_start_fits(r, model, pool, aws=aws)
        _fits_gpus(r, model, pool)
    for problem in naming.model_name_problems(name, multi_node=model.multi_node, max_replicas=model.replicas.max):
        r.fail(path, problem)
    for key, problem in ENGINES[engine].model_problems(model):
        r.fail(f"{path}.{key}", problem)
    return model


def _latency_slo(r: _Reader, d: dict[str, Any], path: str, engine: str, slo: ModelSlo) -> ModelSlo:
    """models.X.slo.ttftSeconds / interTokenSeconds: the alerts count the share of requests above each at that bucket
    edge of the engine's histogram (dashboards.rules), so a value given must be an edge, and an engine without the
    histogram (Triton) takes none; a default that is not an edge becomes the next edge above it."""
    sp = f"{path}.slo"
    sd = d["slo"] if isinstance(d.get("slo"), dict) else {}
    given = {key: getattr(slo, field_) for _, _, _, field_, key, _ in MODEL_SLOS if r.is_set(sd, sp, key)}
    for key, problem in model_slo_problems(engine, given):
        r.fail(f"{sp}.{key}", problem)
    defaults = {field_: model_slo_default(engine, key, getattr(slo, field_))
                for _, _, _, field_, key, _ in MODEL_SLOS if key not in given}
    return dataclasses.replace(slo, **defaults)


def _with(capability: str) -> str:
    """The engines that have `capability` (an Engine flag), as a message offers them: 'vllm' or 'sglang'."""
    return " or ".join(repr(n) for n, e in ENGINES.items() if getattr(e, capability))


def _session_affinity(r: _Reader, d: dict[str, Any], path: str, engine: str | None) -> int | None:
    """models.X.sessionAffinity: {enabled (default: true for a generate model whose engine reuses KV blocks across
    requests and whose prefixCaching is on: affinity buys nothing else, and costs least-request balancing),
    hashBalanceFactor (percent of the average load one replica may take, 100-1000, default 125)} -> the balance
    factor, or None when off."""
    sp = f"{path}.sessionAffinity"
    v = r.fields(SessionAffinity, d.get("sessionAffinity"), sp)
    caches = engine in ENGINES and ENGINES[engine].prefix_caching and d.get("prefixCaching") is not False
    sd = d["sessionAffinity"] if isinstance(d.get("sessionAffinity"), dict) else {}
    on = v["enabled"] if r.is_set(sd, sp, "enabled") else d.get("task", "generate") == "generate" and caches
    return v["hash_balance_factor"] if on else None


def _variant(r: _Reader, d: dict[str, Any], path: str) -> Variant | None:
    if "variant" not in d:
        return None
    variant = r.section(Variant, d["variant"], f"{path}.variant")
    if variant.cost_per_request is not None and variant.requests_per_second is not None:
        r.fail(f"{path}.variant.costPerRequest", "contradicts requestsPerSecond (the cost is derived from it); give "
                                                 "one of them")
    return variant


def _task(r: _Reader, path: str, engine: str | None, task: str) -> Literal["generate", "embed", "rerank"]:
    """models.X.task; each engine serves the tasks envoy_config.OPENAI_APIS lists for it, and the message names the
    engines that serve the task asked for (Triton: generate only, see components/k8s/engines/triton.py)."""
    served = tuple(OPENAI_APIS[engine]) if engine in OPENAI_APIS else MODEL_TASKS
    if task not in served:
        others = " or ".join(repr(n) for n, e in ENGINES.items() if task in e.tasks)
        r.fail(f"{path}.task", f"{task!r} is not served by engine {engine!r}; its tasks: {', '.join(served)}"
                               + (f" (task {task!r} needs engine {others})" if others else ""))
        return "generate"
    return "embed" if task == "embed" else "rerank" if task == "rerank" else "generate"


def _cold_start_fits(r: _Reader, model: Model, pool: NodePool, *, aws: bool) -> None:
    """The start-up budget must cover at least reading the weights from the node's cache (coldstart.py)."""
    est = coldstart.cold_start(model_id=model.model, quantization=model.quantization,
                               prequantized=ENGINES[model.engine].prequantized(model),
                               configured_gib=model.weights_gib, instance_type=pool.instance_type, aws=aws,
                               budget_seconds=model.startup_budget_seconds)
    if est is not None and not est.fits:
        r.fail(f"models.{model.name}.startupBudgetSeconds",
               f"{model.startup_budget_seconds} s is shorter than the expected load time: {est.explain()}; raise "
               f"it to at least {est.load_seconds} s plus download and warm-up (or set weightsGiB if the estimate "
               "from the model id is wrong)")


QUANT_METHODS: tuple[str, ...] = typing.get_args(QUANTIZATION_METHODS)  # declared once, on the settings model
UNQUANTIZED: str = default_of(Model, "quantization")  # "none"
LOAD_TIME_METHODS = ("fp8",)  # vLLM quantizes BF16 weights on load only to FP8 (dynamic scales)
# Model ids that name their checkpoint's quantization (Meta's -FP8, RedHatAI/neuralmagic -FP8-dynamic / -w8a8,
# -AWQ, -GPTQ-Int4, ...): such a checkpoint is pre-quantized whatever the config says.
QUANTIZED_ID = re.compile(r"(?<![a-zA-Z0-9])(FP8|AWQ|GPTQ|W8A8|W4A16|INT4|INT8)(?![a-zA-Z0-9])", re.IGNORECASE)


def _quantization(r: _Reader, raw: Any, path: str, *, engine: str | None, pool: NodePool | None,
                  model_id: str | None = None) -> tuple[Any, bool]:
    """(method, pre-quantized checkpoint) of `quantization`: a method name, or {method, checkpoint}.

    A pre-quantized checkpoint carries its own quantization config (config.json quantization_config), which
    vLLM reads; an explicit `--quantization` that contradicts it is refused at start-up (vLLM v0.33.0
    vllm/config/model.py ModelConfig._verify_quantization: "Quantization method specified in the model config
    (...) does not match the quantization method specified in the `quantization` argument (...)").
    Meta's Llama-3.1-405B-Instruct-FP8 declares fbgemm_fp8, so `--quantization fp8` crash-loops it."""
    if isinstance(raw, dict):
        q = r.fields(Quantization, raw, path)
        method = q["method"] or UNQUANTIZED
        ckpt = q["checkpoint"] if r.is_set(raw, path, "checkpoint") else _default_checkpoint(method, engine)
    else:
        method = declared.value_of(r, Quantization, "method", raw, path) or UNQUANTIZED
        ckpt = _default_checkpoint(method, engine)
    if method == "none":
        return method, False
    if ckpt == "load-time" and method not in LOAD_TIME_METHODS:
        r.fail(f"{path}.checkpoint", f"'load-time' is not possible for {method!r}: vLLM quantizes on load only to "
                                     f"{', '.join(LOAD_TIME_METHODS)}; {method} needs a pre-quantized checkpoint")
    named = QUANTIZED_ID.search(model_id.rsplit("/", 1)[-1]) if isinstance(model_id, str) else None
    if ckpt == "load-time" and named is not None:
        r.fail(path, f"{model_id!r} is a quantized checkpoint ({named.group(1)} in its name) but quantization "
                     f"{_show(raw)} quantizes on load, and vLLM refuses a --quantization that contradicts the "
                     f"checkpoint: set quantization: {{method: {method}, checkpoint: pre-quantized}}")
    eng = ENGINES.get(engine) if engine is not None else None
    if ckpt == "load-time" and method in LOAD_TIME_METHODS and eng is not None \
            and method not in eng.load_time_quantization:
        r.fail(f"{path}.checkpoint", f"'load-time' is not possible with engine {engine!r}: it does not quantize "
                                     f"{method} weights as it loads them; use checkpoint: pre-quantized")
    gpu = pool.instance.gpu if pool is not None else None
    if method == "fp8" and pool is not None and gpu is not None and not catalog.supports_fp8(gpu):
        need = ".".join(map(str, catalog.FP8_MIN_COMPUTE_CAPABILITY))
        r.fail(f"{path}.method" if isinstance(raw, dict) else path,
               f"'fp8' needs compute capability {need} or newer (Ada Lovelace, Hopper, Blackwell); pool "
               f"{pool.name!r} has {gpu.name} ({gpu.generation}, {'.'.join(map(str, gpu.compute_capability))}): "
               "use a Hopper pool, or an awq/gptq/int8 checkpoint")
    return method, ckpt == "pre-quantized"


def _default_checkpoint(method: str, engine: str | None) -> str:
    eng = ENGINES.get(engine) if engine is not None else None
    return "load-time" if eng is not None and method in eng.load_time_quantization else "pre-quantized"


def _prefix_caching(r: _Reader, d: dict[str, Any], path: str, engine: str | None, given: bool) -> bool:
    """On by default where the engine reuses KV blocks across requests (agent workloads resend long shared
    prefixes); off, and an explicit true refused, where it does not as the kit deploys it (Triton: TensorRT-LLM
    reuses KV blocks only when the model repository's tensorrt_llm config sets `enable_kv_cache_reuse`,
    tensorrtllm_backend docs/model_config.md, which the kit does not write)."""
    eng = ENGINES.get(engine) if engine is not None else None
    if eng is not None and not eng.prefix_caching:
        if d.get("prefixCaching") is True:
            r.fail(f"{path}.prefixCaching", f"engine {engine!r} does not reuse KV blocks across requests as the kit "
                                            "deploys it (Triton: only when the model repository's tensorrt_llm "
                                            "config.pbtxt sets enable_kv_cache_reuse, which the kit does not "
                                            "write): set it there and remove prefixCaching")
        return False
    return given  # default: on where the engine can


def _expert_parallel(r: _Reader, path: str, engine: str | None, tp: int, ep: bool) -> None:
    """`--enable-expert-parallel` (vLLM v0.33.0 vllm/engine/arg_utils.py, ParallelConfig.enable_expert_parallel):
    MoE experts are placed whole on the tensor-parallel ranks instead of sharded across them."""
    if ep and engine in ENGINES and not ENGINES[engine].expert_parallel:
        r.fail(f"{path}.expertParallel", f"is not available with engine {engine!r}; remove it or use engine "
                                         f"{_with('expert_parallel')}")
    if ep and tp == 1:
        r.fail(f"{path}.expertParallel", "needs tensorParallel > 1: expert parallelism spreads the experts over the "
                                         "tensor-parallel GPUs")


def _kv_offload(r: _Reader, d: dict[str, Any], path: str, engine: str | None, gib: float | None) -> None:
    """KV cache offload to host memory: vLLM's `--kv-offloading-size` (GiB; CacheConfig.kv_offloading_size),
    which sets up its native OffloadingConnector with `cpu_bytes_to_use` (v0.33.0 vllm/config/vllm.py; the CPU
    spec, vllm/v1/kv_offload/cpu/spec.py, raises without it: the `num_cpu_blocks` of 0.11.0 is no longer read).
    Offloaded blocks are found by their prefix-cache hashes, so prefix caching must stay on."""
    if gib is not None and engine in ENGINES and not ENGINES[engine].kv_offload:
        r.fail(f"{path}.kvOffloadGiB", f"is not available with engine {engine!r}; remove it or use engine "
                                       f"{_with('kv_offload')}")
    if gib is not None and d.get("prefixCaching") is False:
        r.fail(f"{path}.kvOffloadGiB", "needs prefixCaching: offloaded KV blocks are found by their prefix "
                                       "hashes; remove prefixCaching: false or kvOffloadGiB")


def _fits_pool(r: _Reader, path: str, gpus: int, per_node: int, rmax: int, pool: NodePool) -> None:
    """replicas.max replicas of this model fit in its pool at maxSize.

    Assumes the model has the pool to itself (models sharing a pool are checked one at a time) and that a
    replica's GPUs are on nodes of their own: a multi-node replica takes whole nodes (replicas.max x nodes per
    replica <= maxSize); single-node replicas pack onto nodes (a node holds GPUs-per-node // gpusPerReplica).
    """
    if gpus > per_node:
        need = rmax * (gpus // per_node)
        how = f"{rmax} x {gpus // per_node} nodes per replica"
    else:
        need = -(-rmax // (per_node // gpus))
        how = f"{rmax} replicas of {gpus} GPU(s), {per_node // gpus} per {per_node}-GPU node"
    if need > pool.max_size:
        r.fail(f"{path}.replicas.max", f"{rmax} replicas need {need} nodes of {pool.instance_type} ({how}), but "
                                       f"nodePools.{pool.name}.maxSize is {pool.max_size}; lower replicas.max "
                                       f"or raise maxSize to {need} (this assumes the model has the pool to itself)")


# S3 general purpose bucket naming rules (AWS S3 User Guide, "General purpose bucket naming rules"): 3-63 characters
# of lowercase letters, digits, '.' and '-', starting and ending with a letter or digit, no '..', not an IPv4
# address, none of the reserved prefixes and suffixes.
_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_S3_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_S3_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def _s3_bucket_problem(bucket: str) -> str | None:
    if any(c in bucket for c in "*?"):
        return ("has a wildcard: the model's IAM role would read every bucket it matches; name the bucket (S3 bucket "
                "names have no wildcards)")
    if (not _S3_BUCKET.match(bucket) or ".." in bucket or re.fullmatch(r"\d+\.\d+\.\d+\.\d+", bucket)
            or bucket.startswith(_S3_RESERVED_PREFIXES) or bucket.endswith(_S3_RESERVED_SUFFIXES)):
        return (f"({len(bucket)} characters) is not an S3 bucket name: 3-63 lowercase letters, digits, '.' and '-', "
                "starting and ending with a letter or digit, no '..', not an IP address (S3 bucket naming rules)")
    return None


def _model_uri(value: str, *, aws: bool) -> str | None:
    if not re.match(r"^(hf|s3|pvc)://.+", value):
        return "is not a model URI; use hf://ORG/NAME, s3://BUCKET/PATH or pvc://CLAIM/PATH"
    if value.startswith("s3://") and not aws:
        return "needs provider aws (the model reads it with an IRSA role); use pvc:// or hf://"
    if value.startswith("s3://"):
        bucket, _, key = value.removeprefix("s3://").partition("/")
        if (problem := _s3_bucket_problem(bucket)) is not None:
            return f"bucket {bucket!r} {problem}"
        if any(c in key for c in "*?"):
            return ("has a wildcard in its path: IAM reads it as a pattern and the model's role would read every "
                    "object it matches; name the prefix the model is under")
    return None


def _fits_gpus(r: _Reader, model: Model, pool: NodePool) -> None:
    """The weights and a minimum KV cache fit the replica's GPU memory (components/k8s/memory_fit.py)."""
    gpu = pool.instance.gpu
    if gpu is None:
        return
    fit = memory_fit(model_id=model.model, quantization=model.quantization, configured_gib=model.weights_gib,
                     gpus=model.gpus_per_replica, gpu_memory_gib=gpu.memory_gib,
                     utilization=DEFAULT_GPU_MEMORY_UTILIZATION, mig_profile=model.mig_profile)
    if fit is not None and not fit.fits:
        r.fail(f"models.{model.name}.model", f"{model.model!r} does not fit pool {pool.name!r} "
                                             f"({pool.instance_type}): {fit.explain()} (or set weightsGiB if the "
                                             "estimate from the model id is wrong)")
