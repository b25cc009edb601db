"""SGLang: `python3 -m sglang.launch_server` (its OpenAI-compatible HTTP server), on one node or across the nodes
of a LeaderWorkerSet.

For the structured, multi-turn generation agents do: RadixAttention shares the KV cache of common prefixes across
an agent's branches (on unless models.X.prefixCaching is false), and its grammar backend constrains tool calls and
JSON outputs. Every flag, path, port and metric the kit uses: docs/contracts.md, "SGLang".

Multi-node replicas need no Ray: every pod of the group runs the same launch_server with its node rank, and the
leader's rank 0 hosts the torch.distributed store the others join (`--dist-init-addr`). KV offload is its
hierarchical cache (HiCache) in host memory. No engine spans: `--enable-trace` raises at start-up unless the
OpenTelemetry SDK is installed, which the wheel lists only under its optional `tracing` extra, and nothing pinned
here shows the image installs it (docs/contracts.md, "SGLang").
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

from components.k8s import naming
from components.k8s.engines.base import (
    Engine,
    EngineSite,
    EngineTracing,
    ProgressCheck,
    Role,
    model_path,
    tokenizer_path,
)
from components.k8s.engines.vllm import EXIT_ON_SIGTERM, nccl_guard_script
from components.k8s.settings import Model
from telemetry.names import SGLANG

__all__ = [
    "SGLANG_VERSION",
    "DEFAULT_SGLANG_IMAGE",
    "SGLANG_LAUNCH",
    "SGLANG_QUANTIZATION",
    "SGLANG_SPECULATIVE",
    "SGLANG_DIST_INIT_PORT",
    "HICACHE_GB",
    "hicache_size_per_rank",
    "sglang_args",
    "multi_node_args",
    "Sglang",
    "ENGINE",
]

# SGLang 0.5.23 (PyPI, Oct 2026); its images are lmsysorg/sglang:v<version> (Docker Hub; docs/get-started/install
# names `v0.5.19-cu129` as the last CUDA 12 tag).
SGLANG_VERSION = "0.5.23"
DEFAULT_SGLANG_IMAGE = f"lmsysorg/sglang:v{SGLANG_VERSION}"
SGLANG_LAUNCH = ["python3", "-m", "sglang.launch_server"]  # sglang/launch_server.py
# `--quantization` (sglang/srt/arg_groups/choices.py QUANTIZATION_CHOICES): fp8 quantizes BF16 weights online;
# the others name pre-quantized checkpoints, which declare their method themselves (passed only on load).
SGLANG_QUANTIZATION: dict[str, str | None] = {
    "none": None, "fp8": "fp8", "awq": "awq_marlin", "gptq": "gptq_marlin", "int8": "w8a8_int8",
}
# `--speculative-algorithm` builtins (arg_groups/fields/spec.py): the kit's methods by their SGLang names.
SGLANG_SPECULATIVE = {"eagle3": "EAGLE3", "eagle": "EAGLE", "ngram": "NGRAM"}
# A multi-node replica's rendezvous: the torch.distributed TCP store its leader's rank 0 serves on this port
# (`--dist-init-addr host:port`, distributed/bootstrap.py _resolve_dist_init_method). Without DP attention no other
# fixed port crosses nodes (server_args.py PortArgs.init_new: IPC within a node); NCCL's and gloo's own sockets
# are ephemeral (components.k8s.mesh).
SGLANG_DIST_INIT_PORT = 20000
# `--hicache-size` is whole gigabytes of 10^9 bytes for each rank's host pool (mem_cache/pool_host/base.py:
# host_size * 1e9 // size_per_token; every TP and PP rank builds its own).
HICACHE_GB = 10**9


def _quantization_flag(model: Model) -> str | None:
    return None if model.quantized_checkpoint else SGLANG_QUANTIZATION[model.quantization]


def hicache_size_per_rank(model: Model) -> int:
    """models.X.kvOffloadGiB (GiB for the whole replica, as vLLM's --kv-offloading-size) as SGLang's per-rank
    `--hicache-size`: split over the replica's TP x PP ranks, rounded down to whole GB, at least 1 (0 would mean
    "size by --hicache-ratio" instead)."""
    assert model.kv_offload_gib is not None
    ranks = model.tensor_parallel * model.pipeline_parallel
    return max(1, math.floor(model.kv_offload_gib * 2**30 / HICACHE_GB / ranks))


SGLANG_READY_TIMEOUT_SECONDS = 25  # /health_generate's 1 s + 20 s, and a margin for the kubelet's request


def sglang_args(model: Model) -> list[str]:
    """`sglang.launch_server` arguments for the model's parallelism, quantization and features (flags: each field
    of sglang/srt/arg_groups/fields/*.py as `--<name with dashes>`, arg_utils._field_to_cli_name).

    One --served-model-name (SGLang takes one): the config key, which labels its metrics (model_name) as vLLM's
    first name does. --enable-metrics turns on /metrics (off by default: entrypoints/http_server.py adds the
    Prometheus middleware only with it)."""
    args = ["--model-path", model_path(model), "--host", "0.0.0.0", "--port", str(naming.MODEL_HTTP_PORT),
            "--served-model-name", model.name,
            "--tp-size", str(model.tensor_parallel), "--pp-size", str(model.pipeline_parallel),
            "--enable-metrics"]
    if model.task == "embed":
        args.append("--is-embedding")
    if (quant := _quantization_flag(model)) is not None:
        args += ["--quantization", quant]
    if model.expert_parallel:  # MoE experts sharded across the tensor-parallel ranks
        args += ["--ep-size", str(model.tensor_parallel)]
    if model.max_model_length is not None:
        args += ["--context-length", str(model.max_model_length)]
    if (tokenizer := tokenizer_path(model)) is not None:  # fields/serving.py tokenizer_path (default: model_path)
        args += ["--tokenizer-path", tokenizer]
    if not model.prefix_caching:
        args.append("--disable-radix-cache")
    if model.kv_offload_gib is not None:  # HiCache: evicted radix-tree KV kept in host memory (needs the radix
        # cache, which the stack model enforces: arg_groups/kv_cache_hook.py refuses it with --disable-radix-cache)
        args += ["--enable-hierarchical-cache", "--hicache-size", str(hicache_size_per_rank(model))]
    if (spec := model.speculative) is not None:
        args += ["--speculative-algorithm", SGLANG_SPECULATIVE[spec.method]]
        if spec.method == "ngram":  # drafts from the prompt
            args += ["--speculative-num-draft-tokens", str(spec.num_speculative_tokens)]
        else:  # a chain of num_speculative_tokens draft steps: top-1 each, verified as steps + 1 tokens
            if spec.draft_model is not None:
                args += ["--speculative-draft-model-path", spec.draft_model]
            args += ["--speculative-num-steps", str(spec.num_speculative_tokens), "--speculative-eagle-topk", "1",
                     "--speculative-num-draft-tokens", str(spec.num_speculative_tokens + 1)]
    if model.task != "embed":  # tool calls and reasoning as the OpenAI API returns them (tool_calls,
        # reasoning_content), not as text: `auto` picks the parsers the model's chat template calls for, and turns
        # a parser off with a warning when the template names none (entrypoints/engine.py, the template-detection
        # step; both flags default to None, i.e. off)
        args += ["--tool-call-parser", "auto", "--reasoning-parser", "auto"]
    return args


def multi_node_args(model: Model) -> list[str]:
    """A LeaderWorkerSet pod's place in the replica (parallel.py fields --nnodes, --node-rank, --dist-init-addr),
    from the environment LWS gives every container (kubernetes-sigs/lws@v0.9.0 pkg/utils/pod/pod_utils.go
    AddLWSVariables: LWS_LEADER_ADDRESS, LWS_GROUP_SIZE, LWS_WORKER_INDEX, 0 on the leader), which the kubelet
    expands in `$(VAR)` arguments. `--dist-timeout` (the torch.distributed timeout, rendezvous included) is
    the replica's group formation budget: a worker may land on a fresh node and pull the image first."""
    return ["--nnodes", "$(LWS_GROUP_SIZE)", "--node-rank", "$(LWS_WORKER_INDEX)",
            "--dist-init-addr", f"$(LWS_LEADER_ADDRESS):{SGLANG_DIST_INIT_PORT}",
            "--dist-timeout", str(model.group_formation_seconds)]


@dataclass(frozen=True, eq=False)
class Sglang(Engine):
    """SGLang's HTTP server (OpenAI-compatible and native APIs on one port); in a multi-node replica every pod
    runs it, the leader serving HTTP and the workers their ranks only (entrypoints/engine.py: a node_rank >= 1
    runs no tokenizer and answers only a health stub)."""

    def image(self, site: EngineSite, model: Model) -> str:
        return DEFAULT_SGLANG_IMAGE

    def command(self, model: Model, *, role: Role = "single", tracing: EngineTracing | None = None,
                fabric_name: str = "none") -> list[str]:
        """The leader of a replica on EFA or InfiniBand runs behind the kit's NCCL guard (components/k8s/
        nccl_guard.py, as vLLM's leader), which stops it when its ranks' NCCL picked TCP sockets over the fabric."""
        serve = [*SGLANG_LAUNCH, *sglang_args(model)]
        if role == "single":
            return serve
        serve += multi_node_args(model)
        if role == "worker":  # a non-zero rank ignores SIGTERM, waiting for rank 0 to stop it (entrypoints/engine.py,
            # the node_rank >= 1 branch): as its container's init it would then live to the grace period's SIGKILL
            # once rank 0 died abruptly. Under a shell that exits on SIGTERM (engines.vllm.EXIT_ON_SIGTERM) the
            # SIGTERM that follows its preStop (the leader's engine gone) ends the pod at once.
            return ["/bin/bash", "-c", f"{shlex.join(serve)}{EXIT_ON_SIGTERM}"]
        if fabric_name in ("efa", "infiniband"):
            return ["python3", "-c", nccl_guard_script(), fabric_name, "--", *serve]
        return serve

    def env(self, model: Model) -> list[dict[str, str]]:
        """/health without a generation: at 0.5.23 /health and /health_generate share one handler, which by default
        waits a second and then up to SGLANG_HEALTH_CHECK_TIMEOUT (20 s) for the scheduler's next output
        (entrypoints/http_server.py health_generate; environ.py SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION, default
        true). Off, /health answers at once (200 once started, 503 while starting or exiting): liveness stays cheap,
        and /health_generate keeps the generating check for readiness and the gateway's progress check
        (Sglang.progress_check)."""
        return [{"name": "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "value": "false"}]

    def progress_check(self, model: Model) -> ProgressCheck:
        """Its own /health_generate (its readiness path): 200 once any output of the scheduler arrives after the
        check began, polled each second after a first one-second wait; it also submits a 1-token generation
        (input_ids [0], not counted in its metrics: log_metrics False) whose task it cancels once it answers, so an idle
        replica proves itself and a busy one passes on its requests' progress without waiting for its own. A stuck
        scheduler gives 503 only after SGLANG_HEALTH_CHECK_TIMEOUT (20 s): the gateway's check times out first
        (sglang 0.5.23 srt/entrypoints/http_server.py health_generate; docs/contracts.md)."""
        return ProgressCheck("GET", self.ready_path)

    def scaling_query(self, selector: str, model: Model) -> tuple[str, str, str]:
        """Requests waiting in the scheduler's queue summed over replicas, AverageValue (a target per replica),
        like vLLM's. Each scheduler process exports its own series (labels tp_rank, pp_rank, moe_ep_rank): a pod
        counts once, by its largest."""
        return (f"sum(max by (pod) ({SGLANG.QUEUE}{{{selector}}}))", "AverageValue",
                str(model.replicas.target_queue_depth))

    def multi_node_ports(self) -> list[int]:
        return [SGLANG_DIST_INIT_PORT]


ENGINE = Sglang(
    name="sglang", title="SGLang",
    # entrypoints/http_server.py: /health answers 200 once the server has started (503 while starting or
    # shutting down) without generating (see Sglang.env); /health_generate waits a second, then up to
    # SGLANG_HEALTH_CHECK_TIMEOUT (20 s) for any output of the scheduler, running one token itself when idle:
    # its checks may take 21 s before the 503 that means a stuck scheduler.
    health_path="/health", ready_path="/health_generate", ready_timeout_seconds=SGLANG_READY_TIMEOUT_SECONDS,
    # a multimodal input the scheduler's entry rank cannot build is the request's own fault, yet answers 500
    # (srt/managers/scheduler.py _MultimodalInputProcessingError; tokenizer_manager.py raises HTTPException(500))
    request_fault_markers=("Multimodal input processing failed on the TP entry rank: ",),
    # entrypoints/http_server.py: /v1/chat/completions, /v1/completions, /v1/models, /v1/models/{model};
    # /v1/embeddings (an embedding model, --is-embedding).
    openai_apis={
        "generate": ("v1/chat/completions", "v1/completions", "v1/models", "v1/models/[^/]+"),
        "embed": ("v1/embeddings", "v1/models", "v1/models/[^/]+"),
    },
    metric_prefix="sglang:",
    quantization_methods=SGLANG_QUANTIZATION,
    load_time_quantization=frozenset({"fp8"}),
    multi_node=True, speculative=True, prefix_caching=True, expert_parallel=True, kv_offload=True,
    exports_spans=False,
    # None: its 500 is a request's own exception (0.5.23 srt/entrypoints/openai/serving_base.py
    # OpenAIServingBase.handle_request: any exception but HTTPException and ValueError -> 500 "Internal server
    # error"), the same on every replica. A crashed scheduler or detokenizer kills the server's whole process tree
    # (srt/utils/watchdog.py SubprocessWatchdog sends SIGQUIT; managers/tokenizer_manager.py
    # running_phase_sigquit_handler -> kill_process_tree): its requests in flight are reset, which the gateway retries.
    retriable_status_codes=(),
    # rank 0's torch.distributed TCP store, served by the leader's rank-0 scheduler for as long as it runs; the
    # leader stops every rank (the other nodes' too) with its ShutdownReq broadcast after its drain
    # (srt/entrypoints/engine.py, the node_rank >= 1 branch)
    leader_engine_port=SGLANG_DIST_INIT_PORT,
)
