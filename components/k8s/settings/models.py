"""Models (stack key `models`): what a model serves, on which engine, pool and GPUs, how it scales, its latency
objectives and, as a variant of its workload, its cost."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from components.k8s.defaults import (
    DEFAULT_GROUP_FORMATION_SECONDS,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_STARTUP_BUDGET_SECONDS,
    DEFAULT_TRY_IDLE_SECONDS,
)
from components.k8s.settings.base import (
    DNS_LABEL_PATTERN,
    MAX_REQUEST_BYTES_LIMIT,
    MIG_PROFILE_PATTERN,
    NOT_A_DNS_LABEL,
    NOT_A_MIG_PROFILE,
    setting,
)

__all__ = [
    "Replicas",
    "ModelSlo",
    "Speculative",
    "Variant",
    "MODEL_TASKS",
    "QUANTIZATION_METHODS",
    "ENGINE_REGISTRY",
    "DEFAULT_HASH_BALANCE_FACTOR",
    "Quantization",
    "SessionAffinity",
    "Model",
]


# models.X.tokenizer: a Hugging Face Hub id (NAME or ORG/NAME: huggingface_hub's repo id characters), or a path
# relative to the model's uri, which starts with `.` or `..` (components.k8s.engines.base.tokenizer_path)
_TOKENIZER_PATTERN = (r"^(\.\.?(/[A-Za-z0-9_.-]+)*/?"
                     r"|[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?)$")
_NOT_A_TOKENIZER = ("is neither a Hugging Face Hub id (ORG/NAME) nor a directory in the model's storage relative to "
                   "its uri (./DIR or ../DIR)")


@dataclass(frozen=True, slots=True)
class Replicas:
    min: int = setting(1, ge=0, doc="Fewest replicas (0: the model scales to zero when idle).")
    max: int = setting(1, ge=1, derived=True, doc="Most replicas; above min the model is autoscaled (default: min, "
                                                  "at least 1).")
    target_queue_depth: int = setting(5, ge=1, doc="Autoscaling target: requests waiting per replica (vLLM and "
                                                   "SGLang).")
    target_queue_time_ms: int = setting(100, ge=1, doc="Autoscaling target: average queue time per request, "
                                                       "milliseconds (Triton).")

    @property
    def autoscaled(self) -> bool:
        return self.max > self.min


@dataclass(frozen=True, slots=True)
class ModelSlo:
    ttft_seconds: float = setting(0.5, ge=0.001, derived=True,
                                  doc="p95 time to first token, seconds: a bucket edge of the engine's histogram "
                                      "(default: 0.5 where that is one, as on vLLM, else the next edge above it, "
                                      "0.6 on SGLang); none on Triton, which exports no such histogram.")
    inter_token_seconds: float = setting(0.05, ge=0.001, derived=True,
                                         doc="p95 time between output tokens, seconds: a bucket edge of the engine's "
                                             "histogram (default: 0.05 where that is one, as on vLLM, else the next "
                                             "edge above it, 0.06 on SGLang); none on Triton.")
    e2e_seconds: float = setting(20.0, ge=0.01, doc="p95 end-to-end request latency, seconds; a variant fits a "
                                                    "request's budget by it.")


@dataclass(frozen=True, slots=True)
class Speculative:
    draft_model: str | None = setting(None, doc="The drafter (an EAGLE or EAGLE-3 head's model id); required "
                                                "except for method ngram, which drafts from the prompt.")
    num_speculative_tokens: int = setting(5, ge=1, le=16, doc="Tokens drafted per step.")
    method: Literal["eagle3", "eagle", "ngram"] = setting("eagle3", doc="How tokens are drafted (the methods the "
                                                                        "pinned vLLM's V1 engine supports).")


@dataclass(frozen=True, slots=True)
class Variant:
    """The model is one of its workload's variants: the gateway routes each request to one of them by the caller's
    remaining latency budget (gateway.routing). Its expected latency is its slo.e2eSeconds."""

    cost_per_request: float | None = setting(None, ge=0, doc="$ per request (default: derived from "
                                                              "requestsPerSecond and the pool's GPU price; give one "
                                                              "of the two).")
    requests_per_second: float | None = setting(None, ge=0.0001, doc="One replica's throughput, requests per "
                                                                     "second: the cost is GPU $/h x GPUs / (rps x "
                                                                     "3600).")
    max_requests: int | None = setting(None, ge=1, doc="Requests one gateway replica keeps in flight to the variant "
                                                       "before its circuit breaker sends further ones to the next "
                                                       "variant (default: gateway.circuitBreakers.maxRequests).")



MODEL_TASKS = ("generate", "embed", "rerank")
QUANTIZATION_METHODS = Literal["none", "fp8", "awq", "gptq", "int8"]


# The choices of models.*.engine: the engine registry's names (components.k8s.engines, which imports this module),
# looked up by the stack reader (infra.stack.declared) where a choice names this marker.
ENGINE_REGISTRY = "the engine registry"
DEFAULT_HASH_BALANCE_FACTOR = 125  # percent of the average load a replica may take (Envoy: 100 or more)


@dataclass(frozen=True, slots=True)
class Quantization:
    """The stack file's long form of models.<name>.quantization (Model.quantization and .quantized_checkpoint)."""

    method: QUANTIZATION_METHODS = setting(doc="The quantization method.")
    checkpoint: Literal["pre-quantized", "load-time"] = setting(
        "pre-quantized", derived=True, doc="pre-quantized: the checkpoint carries its own quantization config (the "
                                           "engine reads it); load-time: the engine quantizes BF16 weights as it "
                                           "loads them (default: load-time for fp8 where the engine can, else "
                                           "pre-quantized: awq, gptq and int8 exist only as checkpoints).")


@dataclass(frozen=True, slots=True)
class SessionAffinity:
    """The stack file's form of models.<name>.sessionAffinity (Model.session_affinity_balance_factor)."""

    enabled: bool = setting(True, derived=True, doc="Send a session's requests to the replica that served it "
                                                    "before (default: on for a generate model whose engine reuses KV "
                                                    "blocks across requests and whose prefixCaching is on).")
    hash_balance_factor: int = setting(DEFAULT_HASH_BALANCE_FACTOR, ge=100, le=1000,
                                       doc="Percent of the average load one replica may take before a session "
                                           "moves to another (Envoy's hash_balance_factor).")


@dataclass(frozen=True, slots=True)
class Model:
    name: str
    engine: str = setting(choices=ENGINE_REGISTRY, doc="The serving engine (an engine of the registry, "
                                                     "components/k8s/engines).")
    model: str = setting(doc="The served model id (the checkpoint's Hugging Face id, e.g. "
                             "meta-llama/Llama-3.1-8B-Instruct); clients name the model by it.")
    tenant: str = setting(doc="The tenant that owns the model (a key of tenants): its namespace, quota and callers.")
    pool: str = setting(doc="The GPU node pool the model runs on (a key of nodePools).")
    uri: str = setting("", derived=True, doc="Where the weights come from: hf://ORG/NAME, s3://BUCKET/PATH (provider "
                                             "aws) or pvc://CLAIM/PATH (default: hf://<model>).")
    tensor_parallel: int = setting(1, ge=1, le=64, doc="GPUs one copy of the weights is split across (a power of "
                                                       "two: the engine divides the attention heads by it).")
    pipeline_parallel: int = setting(1, ge=1, le=64, doc="Pipeline stages of one replica; with tensorParallel, the "
                                                         "replica's GPUs (a multiple of a node's GPUs spans nodes).")
    gpus_per_replica: int = setting(1, ge=1, derived=True, doc="GPUs of one replica (default: tensorParallel x "
                                                               "pipelineParallel, which it must equal unless "
                                                               "migProfile is set).")
    mig_profile: str | None = setting(None, pattern=MIG_PROFILE_PATTERN, invalid=NOT_A_MIG_PROFILE,
                                      doc="Serve on a MIG slice of this profile (requests nvidia.com/mig-<profile>; "
                                          "the pool needs a mig layout) instead of whole GPUs.")
    quantization: QUANTIZATION_METHODS = setting("none", form=QUANTIZATION_METHODS | Quantization,
                                                 doc="How the weights are quantized: a method (none, fp8, awq, gptq, "
                                                     "int8), or {method, checkpoint} (default: none).")
    max_model_length: int | None = setting(None, ge=256, doc="Longest context (prompt plus output) the engine "
                                                             "accepts, tokens (default: the model's own).")
    prefix_caching: bool = setting(True, derived=True, doc="Reuse KV blocks across requests that share a prefix "
                                                           "(default: on where the engine can; an explicit true is "
                                                           "refused where it cannot).")
    speculative: Speculative | None = setting(None, doc="Speculative decoding (default: none; engines that can).")
    replicas: Replicas = setting(default_factory=Replicas, doc="How many replicas, and the autoscaler's targets.")
    workload: str = setting("", pattern=DNS_LABEL_PATTERN, invalid=NOT_A_DNS_LABEL, derived=True,
                            doc="The workload the model serves (default: the model's name); models sharing one are "
                                "routed by x-priority or, as variants, by latency budget.")
    priority: Literal["interactive", "batch"] = setting("interactive", doc="Which traffic of its workload the model "
                                                                          "takes (x-priority), and its pods' "
                                                                          "PriorityClass.")
    timeout_seconds: float = setting(60.0, ge=0.1, le=3600, doc="The gateway's timeout of one request to the "
                                                                "model, seconds.")
    slo: ModelSlo = setting(default_factory=ModelSlo, doc="The model's latency objectives (alerts, dashboards, "
                                                          "variant routing).")
    callers: tuple[str, ...] = setting((), doc="Models allowed to call this one through the mesh (default: none).")
    cache_gib: int = setting(200, ge=1, doc="Size of the model cache volume the weights are downloaded to, GiB.")
    startup_budget_seconds: int = setting(DEFAULT_STARTUP_BUDGET_SECONDS, ge=60, le=86400,
                                          doc="Seconds a replica may take to download, load and warm up before its "
                                              "startup probe gives up; must cover the expected load time.")
    max_request_bytes: int = setting(DEFAULT_MAX_REQUEST_BYTES, ge=1024, le=MAX_REQUEST_BYTES_LIMIT,
                                     doc="Largest request body the gateway forwards to the model, bytes (413 past "
                                         "it; the gateway buffers each body in memory).")
    try_idle_timeout_seconds: float = setting(DEFAULT_TRY_IDLE_SECONDS, ge=0.01, derived=True,
                                              doc="Longest silence of a replica (before its first byte or between "
                                                  "two) before the gateway retries on another one; a streamed "
                                                  "generation resets it with every token (default: "
                                                  "max(30, 3 x slo.ttftSeconds); at most timeoutSeconds; "
                                                  "validate warns at or below 1.5 x slo.ttftSeconds).")
    # quantization.checkpoint: pre-quantized (the checkpoint carries its own quantization config; the engine
    # reads it and gets no --quantization) or load-time (vLLM quantizes BF16 weights as it loads them).
    # default: load-time for fp8, pre-quantized for awq/gptq/int8 (which only exist as checkpoints)
    quantized_checkpoint: bool = False
    expert_parallel: bool = setting(False, doc="Place whole MoE experts on the tensor-parallel GPUs instead of "
                                               "sharding each (needs tensorParallel > 1 and an engine that can).")
    kv_offload_gib: float | None = setting(None, ge=0.1, doc="Host memory the engine offloads KV cache blocks to, "
                                                             "GiB (default: none; needs prefixCaching).")
    weights_gib: float | None = setting(None, ge=0.01, doc="Size of the weights, GiB, for the memory and "
                                                           "start-up checks (default: estimated from the model id's "
                                                           "parameter count and quantization).")
    variant: Variant | None = setting(None, doc="The model is one of its workload's variants, routed by the "
                                                "caller's latency budget (`variant:` alone marks it; default: none).")
    task: Literal["generate", "embed", "rerank"] = setting("generate", doc="What the model does, which decides the "
                                                                           "API paths the gateway routes to it: "
                                                                           "chat/completions, embeddings or "
                                                                           "score/rerank.")
    tool_call_parser: str | None = setting(None, doc="vLLM: the parser of the model's tool calls "
                                                     "(`--tool-call-parser`; none: no tool calls). Default: the "
                                                     "model family's (Llama 3.1-3.3, Qwen2.5/QwQ/Qwen3, "
                                                     "Qwen3-Coder, Mistral AI); required for a chat model of "
                                                     "another family.")
    tokenizer: str | None = setting(None, pattern=_TOKENIZER_PATTERN, invalid=_NOT_A_TOKENIZER,
                                    doc="The tokenizer the engine builds prompts with: a Hugging Face Hub id "
                                        "(ORG/NAME, downloaded at start-up: the tenant needs HTTPS egress, and its "
                                        "hf-token Secret for a gated id), or a directory in the model's storage "
                                        "relative to its uri (./DIR or ../DIR, within the pvc:// claim or the "
                                        "s3:// download). Default: vLLM and SGLang read the weights' own; Triton "
                                        "downloads the model id's from the Hub, so a Triton model whose tenant "
                                        "has no HTTPS egress (only pvc:// models) needs a directory here.")
    group_formation_seconds: int = setting(DEFAULT_GROUP_FORMATION_SECONDS, ge=30, le=86400,
                                           doc="Multi-node replicas: seconds the leader waits for its workers to "
                                               "join, on top of startupBudgetSeconds.")
    # session affinity (components.k8s.gateway.envoy.affinity): requests with a session key go to the replica that
    # served
    # the session before, each replica taking at most this percentage of the average load; None: least-request.
    session_affinity_balance_factor: int | None = setting(None, key="sessionAffinity", form=SessionAffinity,
                                                          doc="Session affinity: {enabled, hashBalanceFactor}.")

    @property
    def multi_node(self) -> bool:
        """A replica spans nodes (a LeaderWorkerSet): `spans_nodes` where given, else its GPUs exceed a node's."""
        if self.spans_nodes is not None:
            return self.spans_nodes
        return self.mig_profile is None and self.gpus_per_replica > self.gpus_per_node_hint

    # set by parse(): GPUs on one node of this model's pool (kept here so components need no lookup)
    gpus_per_node_hint: int = 8
    # Whether a replica spans nodes, where that is known but not the GPUs behind it: the gateway's args carry
    # multi_node alone. None: derived from the GPUs, as above.
    spans_nodes: bool | None = None

    @property
    def nodes_per_replica(self) -> int:
        return max(1, self.gpus_per_replica // self.gpus_per_node_hint) if self.multi_node else 1
