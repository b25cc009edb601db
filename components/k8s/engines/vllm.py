"""vLLM: `vllm serve` (the OpenAI-compatible server) on one node, or across nodes on Ray (a LeaderWorkerSet).

Every flag, path, port and metric the kit uses: docs/contracts.md, "Engines".
"""

from __future__ import annotations

import importlib.resources
import json
import re
import shlex
from dataclasses import dataclass

from components.k8s import naming
from components.k8s.engines.base import (
    Engine,
    EngineSite,
    EngineTracing,
    Role,
    drain_seconds,
    model_path,
    tokenizer_path,
    tokenizer_problems,
)
from components.k8s.settings import Model
from telemetry.names import VLLM

__all__ = [
    "VLLM_VERSION",
    "DEFAULT_VLLM_IMAGE",
    "EFA_VLLM_VERSION",
    "DEFAULT_EFA_VLLM_IMAGE",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DEFAULT_NGRAM_LOOKUP_MAX",
    "VLLM_QUANTIZATION",
    "VLLM_TOOL_CALL_PARSERS",
    "TOOL_CALL_PARSER_FAMILIES",
    "NO_TOOL_CALL_PARSER",
    "MULTI_NODE_SCRIPT",
    "RAY_GCS_PORT",
    "EXIT_ON_SIGTERM",
    "RAY_NODE_PORTS",
    "RAY_HEAD_PORTS",
    "RAY_WORKER_PORTS",
    "VLLM_PORT_RANGE",
    "served_model_names",
    "tool_call_parser",
    "vllm_image",
    "vllm_args",
    "shutdown_flags",
    "ray_start_flags",
    "multi_node_ports",
    "nccl_guard_script",
    "Vllm",
    "ENGINE",
]

# vLLM 0.33.0 (PyPI, Nov 2026): its wheel's METADATA requires opentelemetry-sdk/-api/-exporter-otlp, which the
# image's `uv pip install dist/*.whl` then installs, so `--otlp-traces-endpoint` finds the SDK (0.11.0 lacked it and
# raised "OpenTelemetry is not available" at start-up: vllm/tracing/otel.py init_otel_tracer). Also the InfiniBand
# default: NCCL's built-in IB transport needs only libibverbs, which vLLM's docker/Dockerfile installs in its
# vllm-base stage (libibverbs-dev).
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
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # share of GPU memory for weights + KV cache
DEFAULT_NGRAM_LOOKUP_MAX = 4
# `vllm serve --quantization`: Marlin kernels for AWQ/GPTQ (every catalog GPU is compute capability >= 8.0);
# int8 means W8A8 INT8 checkpoints, which LLM Compressor writes in the compressed-tensors format.
VLLM_QUANTIZATION: dict[str, str | None] = {
    "none": None, "fp8": "fp8", "awq": "awq_marlin", "gptq": "gptq_marlin", "int8": "compressed-tensors",
}
# `--tool-call-parser` names registered at both pinned releases (vllm/tool_parsers/__init__.py
# _TOOL_PARSERS_TO_REGISTER of the 0.33.0 and 0.27.1 wheels: 0.27.1's are a subset of 0.33.0's), so a name is good on
# the stock image and on the EFA DLC alike. With `--enable-auto-tool-choice`, a name outside the registry stops the
# server at start-up (vllm/entrypoints/common/cli_args.py validate_api_server_args: "invalid tool call parser").
VLLM_TOOL_CALL_PARSERS = frozenset({
    "apertus", "cohere_command3", "cohere_command4", "deepseek_v3", "deepseek_v31", "deepseek_v32", "deepseek_v4",
    "ernie45", "functiongemma", "gemma4", "gigachat3", "glm45", "glm47", "granite", "granite-20b-fc", "granite4",
    "hermes", "hunyuan_a13b", "hy_v3", "inkling", "internlm", "jamba", "kimi_k2", "kimi_k3", "lfm2", "llama3_json",
    "llama4_json", "llama4_pythonic", "longcat", "mimo", "minicpm5", "minimax_m2", "minimax_m3", "mistral", "olmo3",
    "openai", "phi4_mini_json", "poolside_v1", "pythonic", "qwen3_coder", "qwen3_xml", "seed_oss", "step3",
    "step3p5", "xlam",
})
# models.X.toolCallParser: serve a chat model without tool calls (no flags: a request with tools gets vLLM's 400).
NO_TOOL_CALL_PARSER = "none"
# The parser each model family's chat template calls for, by the served model id (first match wins):
# - Llama 3.1, 3.2, 3.3: JSON tool calls after <|python_tag|> or bare (vllm/tool_parsers/llama_tool_parser.py
#   Llama3JsonToolParser, "for Llama 3.x and 4 models"); Llama 3.0's template has no tools.
# - Qwen3-Coder: XML tool calls (qwen3_xml, Qwen3EngineToolParser, also registered as qwen3_coder).
# - Qwen2.5, QwQ, Qwen3: Hermes-style <tool_call> JSON (0.33.0 registers qwen3_json as an alias of hermes, its
#   comment "Qwen2.5/QwQ/Qwen3 JSON tool calls"; 0.27.1 has only hermes). Qwen3.5 and later are not matched.
# - Mistral AI's models: [TOOL_CALLS] (mistral_tool_parser.py MistralToolParser; vLLM loads their tokenizer with
#   mistral-common when the repository has tekken.json or tokenizer.model.v*, vllm/tokenizers/registry.py).
TOOL_CALL_PARSER_FAMILIES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("Llama 3.1-3.3", re.compile(r"(?<![a-z0-9])llama-3\.[123](?![0-9])", re.IGNORECASE), "llama3_json"),
    ("Qwen3-Coder", re.compile(r"(?<![a-z0-9])qwen3-coder(?![a-z0-9])", re.IGNORECASE), "qwen3_xml"),
    ("Qwen2.5, QwQ, Qwen3", re.compile(r"(?<![a-z0-9])(qwen2\.5|qwq|qwen3)(?![.0-9])", re.IGNORECASE), "hermes"),
    ("Mistral AI (mistralai/)", re.compile(r"^mistralai/", re.IGNORECASE), "mistral"),
)
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


# A multi-node container ends on SIGTERM while multi-node-serving.sh runs: the worker's for its whole life, the
# leader's while its group forms (the script starts `ray start --head`, then polls for the workers up to
# ray_init_timeout).
# The container's main process (PID 1 of its PID namespace) would otherwise be the script's bash (or, for the
# leader, a `bash -c 'script && exec ...'`: a list is not exec'd, so bash stays), and the kernel delivers a signal
# sent from outside the namespace to its init only when the init has a handler for it (man7.org pid_namespaces(7),
# "The namespace init process"): bash sets none for SIGTERM, so the pod would live on to its grace period's SIGKILL,
# a worker's script retrying to join a leader that is gone (`ray start --block` exits 1 once its raylet loses the
# GCS), a forming leader holding its GPUs and its Ray head. So the script runs in the background under a shell that
# exits on SIGTERM; the kernel then kills what is left in the container. The leader `exec`s its engine only once the
# script succeeded (`wait` gives its status): from then on the engine, or the NCCL guard, is PID 1 and handles
# SIGTERM itself (components/k8s/nccl_guard.py passes it on to `vllm serve`; vllm serve's API server raises on it
# while it initializes and drains on it once serving: vllm/entrypoints/openai/api_server.py setup_server,
# launchers/launcher.py serve_http). The worker's preStop holds its SIGTERM back until its leader's engine has
# exited (components.k8s.serving.lifecycle).
EXIT_ON_SIGTERM = " & trap 'exit 0' TERM; wait $!"


def served_model_names(model: Model) -> list[str]:
    """Names vLLM answers to. The first one labels its metrics (model_name), so it is the config key the
    dashboards and rules select on; the workload (what the gateway routes) and the model id follow."""
    return list(dict.fromkeys((model.name, model.workload, model.model)))


def tool_call_parser(model: Model) -> str | None:
    """The `--tool-call-parser` of a chat model: models.X.toolCallParser, else its family's (TOOL_CALL_PARSER_FAMILIES);
    None for a pooling model, for toolCallParser none, and for a family the kit knows no parser of (which the stack
    model refuses: Vllm.model_problems)."""
    if model.task != "generate" or model.tool_call_parser == NO_TOOL_CALL_PARSER:
        return None
    if model.tool_call_parser is not None:
        return model.tool_call_parser
    return next((parser for _, family, parser in TOOL_CALL_PARSER_FAMILIES if family.search(model.model)), None)


def vllm_image(cfg: EngineSite, model: Model) -> str:
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
    if (tokenizer := tokenizer_path(model)) is not None:  # ModelConfig.tokenizer (default: the model's own)
        args += ["--tokenizer", tokenizer]
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
    if (parser := tool_call_parser(model)) is not None:  # agents' tool calls: without these flags vLLM answers a
        # request with `tools` (tool_choice "auto", the default with tools) 400 '"auto" tool choice requires
        # --enable-auto-tool-choice and --tool-call-parser to be set' (v0.33.0 vllm/renderers/online_renderer.py)
        args += ["--enable-auto-tool-choice", "--tool-call-parser", parser]
    if tracing is not None:
        args += ["--otlp-traces-endpoint", tracing.grpc_endpoint]
    return args


def shutdown_flags(model: Model) -> list[str]:
    """What `vllm serve` does on SIGTERM. By default (--shutdown-timeout 0) it aborts every request in flight: the
    engine core finishes them all as aborted (v0.33.0 vllm/engine/arg_utils.py `--shutdown-timeout`, default 0,
    "0 = abort, >0 = wait"; vllm/v1/engine/core.py EngineCore._handle_shutdown). With N > 0 the API server's SIGTERM
    handler (vllm/entrypoints/launchers/launcher.py serve_http handle_shutdown) stops the engine in drain mode: the
    engine core refuses new requests (_reject_add_in_shutdown: aborted at once), finishes those in flight and exits,
    killed after N s (vllm/v1/utils.py shutdown: SIGTERM, join up to the timeout, then kill); only then does the
    HTTP server stop. N is the model's drain (engines.base.drain_seconds: its gateway route timeout); the pod's
    grace period covers it (components.k8s.serving.lifecycle). The EFA image's 0.27.1 has the same option and
    logic (vllm/entrypoints/launcher.py, v1/engine/core.py). Not in vllm_args: it decides no answer, so the
    fidelity fingerprint does not record it."""
    return ["--shutdown-timeout", str(drain_seconds(model))]


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


def _ray_timeout(model: Model) -> list[str]:
    """multi-node-serving.sh's own option (not passed to `ray start`): how long the leader polls for all
    workers, and a worker retries joining, before giving up (`ray_init_timeout`, default 300 s)."""
    return [f"--ray_init_timeout={model.group_formation_seconds}"]


@dataclass(frozen=True, eq=False)
class Vllm(Engine):
    """vLLM's OpenAI-compatible server; multi-node replicas start Ray with the image's multi-node-serving.sh."""

    def image(self, site: EngineSite, model: Model) -> str:
        return vllm_image(site, model)

    def command(self, model: Model, *, role: Role = "single", tracing: EngineTracing | None = None,
                fabric_name: str = "none") -> list[str]:
        serve = ["vllm", "serve", model_path(model), *vllm_args(model, tracing=tracing), *shutdown_flags(model)]
        if role == "single":
            return serve
        if role == "leader":
            start = [MULTI_NODE_SCRIPT, "leader", "--ray_cluster_size=$(LWS_GROUP_SIZE)", *_ray_timeout(model),
                     *ray_start_flags(head=True)]
            if fabric_name in ("efa", "infiniband"):
                serve = ["python3", "-c", nccl_guard_script(), fabric_name, "--", *serve]
            return ["/bin/bash", "-c", f"{shlex.join(start)}{EXIT_ON_SIGTERM} && exec {shlex.join(serve)}"]
        worker = shlex.join([MULTI_NODE_SCRIPT, "worker", "--ray_address=$(LWS_LEADER_ADDRESS)",
                             *_ray_timeout(model), *ray_start_flags(head=False)])
        return ["/bin/bash", "-c", f"{worker}{EXIT_ON_SIGTERM}"]

    def evaluated_args(self, model: Model) -> list[str]:
        """Its flags without `vllm serve <path>`: what the gate has recorded for vLLM since it began."""
        return vllm_args(model)

    def scaling_query(self, selector: str, model: Model) -> tuple[str, str, str]:
        """Waiting requests summed over replicas, AverageValue (a target per replica)."""
        return (f"sum({VLLM.WAITING}{{{selector}}})", "AverageValue", str(model.replicas.target_queue_depth))

    def trace_env(self, model: Model, tracing: EngineTracing) -> list[dict[str, str]]:
        """vLLM's tracer is the OTel SDK's TracerProvider(resource=...) (v0.33.0 vllm/tracing/otel.py
        init_otel_tracer; Resource.create merges OTEL_SERVICE_NAME), which reads the SDK's sampler and service
        name from the environment: follow the caller's sampled flag (parentbased), sample requests without a
        context at the stack's ratio."""
        return [{"name": "OTEL_SERVICE_NAME", "value": model.name},
                {"name": "OTEL_TRACES_SAMPLER", "value": "parentbased_traceidratio"},
                {"name": "OTEL_TRACES_SAMPLER_ARG", "value": repr(tracing.sample_ratio)}]

    def model_problems(self, model: Model) -> list[tuple[str, str]]:
        """A tokenizer directory outside the model's storage (tokenizer_problems); the tool call parser's problems
        (_tool_call_problems)."""
        return [*tokenizer_problems(model), *self._tool_call_problems(model)]

    def _tool_call_problems(self, model: Model) -> list[tuple[str, str]]:
        """A chat model takes tool calls only with a parser: refuse one whose family has none the kit knows unless
        toolCallParser names it (or none), and a name neither pinned release registers."""
        given = model.tool_call_parser
        allowed = f"{', '.join(sorted(VLLM_TOOL_CALL_PARSERS))}, or {NO_TOOL_CALL_PARSER} (no tool calls)"
        if given not in (None, NO_TOOL_CALL_PARSER) and model.task != "generate":
            return [("toolCallParser", f"{given!r} is not read for task {model.task!r} (tool calls are chat "
                                       "completions'); remove it")]
        if given not in (None, NO_TOOL_CALL_PARSER) and given not in VLLM_TOOL_CALL_PARSERS:
            return [("toolCallParser", f"{given!r} is not a tool call parser both pinned vLLM releases "
                                       f"register ({VLLM_VERSION}, {EFA_VLLM_VERSION}); choose one of: {allowed}")]
        if model.task == "generate" and tool_call_parser(model) is None and given is None:
            families = "; ".join(f"{name}: {parser}" for name, _, parser in TOOL_CALL_PARSER_FAMILIES)
            return [("toolCallParser", f"is required for {model.model!r}: the kit knows the tool call parser of "
                                       f"these families only ({families}), and without one vLLM answers every "
                                       "request with tools 400; set the parser the model's chat template calls "
                                       f"for: {allowed}")]
        return []

    def multi_node_env(self) -> list[dict[str, str]]:
        return [{"name": "VLLM_PORT", "value": str(VLLM_PORT_RANGE[0])}]

    def multi_node_ports(self) -> list[int]:
        return multi_node_ports()


ENGINE = Vllm(
    name="vllm", title="vLLM",
    # /health fails when its engine is dead (v0.33.0 entrypoints/serve/instrumentator/health.py); /v1/models
    # answers once the model is loaded (entrypoints/openai/models/api_router.py).
    health_path="/health", ready_path="/v1/models",
    # v0.33.0: /v1/chat/completions, /v1/completions (vllm/entrypoints/openai/), /v1/embeddings
    # (entrypoints/pooling/embed/api_router.py), /v1/models (entrypoints/openai/models/api_router.py); a
    # cross-encoder (runner pooling, score task) serves /score, /v1/score, /rerank, /v1/rerank, /v2/rerank
    # (entrypoints/pooling/scoring/api_router.py).
    openai_apis={
        "generate": ("v1/chat/completions", "v1/completions", "v1/embeddings", "v1/models"),
        "embed": ("v1/embeddings", "v1/models"),
        "rerank": ("rerank", "v1/rerank", "v2/rerank", "score", "v1/score", "v1/models"),
    },
    metric_prefix="vllm:",
    quantization_methods=VLLM_QUANTIZATION,
    load_time_quantization=frozenset({"fp8"}),  # vLLM quantizes BF16 weights on load only to FP8 (dynamic scales)
    multi_node=True, speculative=True, prefix_caching=True, expert_parallel=True, kv_offload=True,
    exports_spans=True,
    # 500: what the API server answers every request in flight when its engine dies (EngineDeadError: vllm-project/
    # vllm@v0.33.0 vllm/entrypoints/serve/exception_handling/error_response.py create_error_response), the server
    # then exiting (handlers/vllm_error.py engine_error_handler -> vllm/entrypoints/launchers/launcher.py
    # terminate_if_errored); another replica serves them. Also EngineGenerateError's (a VLLMServerError, 500), which
    # may be the request's own: a retry costs it a try per attempt, never an ejection.
    retriable_status_codes=(500,),
    # Ray's GCS on the leader: the leader's container runs `ray start --head` (its daemons, the GCS among them, left
    # running in the container) and then execs the engine as the container's main process; when the engine exits
    # the container ends and the kernel kills every process left in its PID namespace, the GCS with them.
    leader_engine_port=RAY_GCS_PORT,
)
