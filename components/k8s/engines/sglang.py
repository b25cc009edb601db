"""SGLang: `python3 -m sglang.launch_server` (its OpenAI-compatible HTTP server) on one node.

For the structured, multi-turn generation agents do: RadixAttention shares the KV cache of common prefixes across
an agent's branches (on unless models.X.prefixCaching is false), and its grammar backend constrains tool calls and
JSON outputs. Every flag, path, port and metric the kit uses: docs/contracts.md, "SGLang".

Not (yet) served: multi-node replicas (--nnodes/--node-rank/--dist-init-addr exist, the LeaderWorkerSet wiring does
not), KV offload (its hierarchical cache), and engine spans: the wheel's OpenTelemetry packages are its optional
`tracing` extra, and nothing pinned says the image installs them.
"""

from __future__ import annotations

from dataclasses import dataclass

from components.k8s import naming
from components.k8s.engines.base import Engine, EngineSite, EngineTracing, Role, model_path
from components.k8s.values import Model
from telemetry.names import SGLANG

__all__ = [
    "SGLANG_VERSION",
    "DEFAULT_SGLANG_IMAGE",
    "SGLANG_LAUNCH",
    "SGLANG_QUANTIZATION",
    "SGLANG_SPECULATIVE",
    "sglang_args",
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


def _quantization_flag(model: Model) -> str | None:
    return None if model.quantized_checkpoint else SGLANG_QUANTIZATION[model.quantization]


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
    if not model.prefix_caching:
        args.append("--disable-radix-cache")
    if (spec := model.speculative) is not None:
        args += ["--speculative-algorithm", SGLANG_SPECULATIVE[spec.method]]
        if spec.method == "ngram":  # drafts from the prompt
            args += ["--speculative-num-draft-tokens", str(spec.num_speculative_tokens)]
        else:  # a chain of num_speculative_tokens draft steps: top-1 each, verified as steps + 1 tokens
            if spec.draft_model is not None:
                args += ["--speculative-draft-model-path", spec.draft_model]
            args += ["--speculative-num-steps", str(spec.num_speculative_tokens), "--speculative-eagle-topk", "1",
                     "--speculative-num-draft-tokens", str(spec.num_speculative_tokens + 1)]
    return args


@dataclass(frozen=True, eq=False)
class Sglang(Engine):
    """SGLang's HTTP server (OpenAI-compatible and native APIs on one port)."""

    def image(self, site: EngineSite, model: Model) -> str:
        return DEFAULT_SGLANG_IMAGE

    def command(self, model: Model, *, role: Role = "single", tracing: EngineTracing | None = None,
                fabric_name: str = "none") -> list[str]:
        return [*SGLANG_LAUNCH, *sglang_args(model)]

    def scaling_query(self, selector: str, model: Model) -> tuple[str, str, str]:
        """Requests waiting in the scheduler's queue summed over replicas, AverageValue (a target per replica),
        like vLLM's. Each scheduler process exports its own series (labels tp_rank, pp_rank, moe_ep_rank): a pod
        counts once, by its largest."""
        return (f"sum(max by (pod) ({SGLANG.QUEUE}{{{selector}}}))", "AverageValue",
                str(model.replicas.target_queue_depth))


ENGINE = Sglang(
    name="sglang", title="SGLang",
    # entrypoints/http_server.py: /health answers 200 once the server has started (503 while starting or
    # shutting down) without generating; /health_generate also generates one token when the server is idle.
    health_path="/health", ready_path="/health_generate",
    # entrypoints/http_server.py: /v1/chat/completions, /v1/completions, /v1/models, /v1/models/{model};
    # /v1/embeddings (an embedding model, --is-embedding).
    openai_apis={
        "generate": ("v1/chat/completions", "v1/completions", "v1/models", "v1/models/[^/]+"),
        "embed": ("v1/embeddings", "v1/models", "v1/models/[^/]+"),
    },
    metric_prefix="sglang:",
    quantization_methods=SGLANG_QUANTIZATION,
    load_time_quantization=frozenset({"fp8"}),
    multi_node=False, speculative=True, prefix_caching=True, expert_parallel=True, kv_offload=False,
    exports_spans=False,
)
