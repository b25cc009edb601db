"""The settings model of the Kubernetes components: the typed values their build functions read, their args
with every default applied.

A component converts its `args` (a TypedDict) into these; infra.config builds the same values from the stack
file and re-exports them. A light module on purpose: no Pulumi, nothing of infra/.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal, Protocol

from components.aws import catalog
from components.aws.defaults import DEFAULT_GPU_ROOT_VOLUME_GIB
from components.k8s.defaults import (
    CAPACITY_BLOCK_DRAIN_MINUTES,
    DEFAULT_DRIVER_MIN_VERSION,
    DEFAULT_GATEWAY_NAMESPACE,
    DEFAULT_GROUP_FORMATION_SECONDS,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MONITORING_NAMESPACE,
    DEFAULT_STARTUP_BUDGET_SECONDS,
    DEFAULT_TRY_IDLE_SECONDS,
)

__all__ = [
    "SETTING",
    "ENGINE_REGISTRY",
    "DEFAULT_HASH_BALANCE_FACTOR",
    "DNS_LABEL_PATTERN",
    "NOT_A_DNS_LABEL",
    "DURATION_PATTERN",
    "QUANTITY_PATTERN",
    "MIG_PROFILE_PATTERN",
    "DNS_SUBDOMAIN_PATTERN",
    "MIG_LAYOUTS",
    "MAX_REQUEST_BYTES_LIMIT",
    "setting",
    "NamespaceView",
    "InNamespace",
    "Tracing",
    "RateLimit",
    "Tenant",
    "Replicas",
    "ModelSlo",
    "Speculative",
    "Variant",
    "ROUTING_POLICIES",
    "DEFAULT_ROUTING_MARGIN_PERCENT",
    "DEFAULT_MAX_TOKEN_LIFETIME_SECONDS",
    "MAX_TOKEN_LIFETIME_LIMIT_SECONDS",
    "DEFAULT_MAX_DROP",
    "DEFAULT_MIN_BASELINE_SCORE",
    "DEFAULT_MAX_UNANSWERED",
    "FidelityJob",
    "CategoryGate",
    "Fidelity",
    "Model",
    "MODEL_TASKS",
    "QUANTIZATION_METHODS",
    "Quantization",
    "SessionAffinity",
    "Routing",
    "AlertRoutes",
    "Retries",
    "OutlierDetection",
    "CircuitBreakers",
    "HealthCheck",
    "JwtIssuer",
    "GatewayAuth",
    "GatewaySettings",
    "SecretRef",
    "Capacity",
    "Taint",
    "NodeCheck",
    "NodePool",
    "InfinibandSettings",
    "infiniband_settings",
    "WorkflowSlo",
    "ALERT_SEVERITIES",
    "ALERT_RECEIVER_TYPES",
    "AlertReceiver",
    "Heartbeat",
    "Alerting",
    "Ingest",
    "VolumeSizes",
    "ObservabilitySettings",
]


DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"  # a Kubernetes namespace or object name (RFC 1123 label)
NOT_A_DNS_LABEL = "is not a DNS label (lowercase letters, digits and '-', at most 63 characters)"
UTC_TIME_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"  # a capacity block's start or end
NOT_A_UTC_TIME = "is not a UTC time such as 2026-12-01T11:30:00Z"
MIG_PROFILE_PATTERN = r"^[1-7]g\.\d+gb$"  # a MIG profile as the GPU operator names its resources (1g.10gb)
# a Kubernetes object name (a node's): a DNS subdomain, at most 253 characters
DNS_SUBDOMAIN_PATTERN = r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# Layouts the GPU operator's MIG manager ships in its default config (mig-parted `default-mig-parted-config`).
MIG_LAYOUTS = (
    "all-1g.10gb",
    "all-1g.20gb",
    "all-2g.20gb",
    "all-3g.40gb",
    "all-4g.40gb",
    "all-7g.80gb",
    "all-balanced",
)
MAX_REQUEST_BYTES_LIMIT = 256 * 1024 * 1024  # the gateway buffers each body in memory before it forwards it
DURATION_PATTERN = r"^[1-9][0-9]*(h|d|w|y)$"  # a retention as Prometheus and Jaeger take it
SETTING = "aifactory.setting"  # the key of a stack setting's declaration in its dataclass field's metadata


def setting(default: Any = MISSING, *, doc: str, ge: float | None = None, le: float | None = None,
            pattern: str | None = None, invalid: str | None = None, derived: bool = False,
            default_factory: Any = MISSING, key: str | None = None, form: Any = None,
            choices: tuple[Any, ...] | str | None = None) -> Any:
    """A dataclass field that is also a stack file setting, declared once: its default (or `default_factory`), `doc`
    (what it does and, where the default is not a constant, how it is derived), inclusive bounds `ge`/`le` (of a
    number, or of a mapping's values), and a regular expression `pattern` (of a string, a list's strings, or a
    mapping's keys) with the message `invalid` for a value that does not match it; `choices` the allowed values
    (or ENGINE_REGISTRY: the engine registry's names, which the stack reader looks up, as the registry imports this
    module); `derived`: the default
    stands in for a value the stack model computes from other settings, or holds only under another setting (a
    provider's key), so the editor schema states none (`doc` says what it is). The stack file's key is the field
    name in camelCase, or `key`; `form`: the stack file's type where it is not the field's (a mapping the stack
    model turns into this value).
    infra/stack reads the declaration to validate the stack file and to write the editor schema and
    docs/stack-reference.md. Plain metadata: the components need nothing beyond the standard library."""
    meta = {"doc": doc, "ge": ge, "le": le, "pattern": pattern, "invalid": invalid, "derived": derived, "key": key,
            "form": form, "choices": choices}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata={SETTING: meta})
    return field(default=default, metadata={SETTING: meta})


class NamespaceView(Protocol):
    """A section of which a component reads only where it runs (the gateway's, observability's, a tenant's)."""

    @property
    def namespace(self) -> str: ...


@dataclass(frozen=True)
class InNamespace:
    """Where a part of the platform runs, when that is all a component needs of it."""

    namespace: str


@dataclass(frozen=True)
class Tracing:
    """Where the OpenTelemetry Collector runs and the share of traces the engines and the gateway sample."""

    namespace: str
    trace_sample_ratio: float


QUANTITY_PATTERN = r"^\d+(\.\d+)?(m|k|Ki|Mi|Gi|Ti|Pi|M|G|T|P)?$"  # a Kubernetes resource quantity (500m, 64Gi)


@dataclass(frozen=True, slots=True)
class RateLimit:
    """The gateway's token buckets for one tenant's callers; batch traffic (x-priority: batch) has a bucket of its
    own, so it cannot drain the interactive one."""

    requests_per_second: int = setting(50, ge=1, doc="Interactive requests per second the tenant's callers may "
                                                     "send (the bucket's refill).")
    burst: int = setting(100, ge=1, derived=True, doc="Interactive requests above the rate the bucket lets through "
                                                      "at once (default: 100, or requestsPerSecond when larger).")
    batch_requests_per_second: int = setting(50, ge=1, derived=True, doc="Batch requests per second (default: "
                                                                         "requestsPerSecond).")
    batch_burst: int = setting(100, ge=1, derived=True, doc="The batch bucket's burst (default: burst).")


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    namespace: str = setting("", pattern=DNS_LABEL_PATTERN, invalid=NOT_A_DNS_LABEL, derived=True,
                             doc="The tenant's namespace (default: the tenant's name); not one of Kubernetes' or "
                                 "the platform's own.")
    gpu_quota: int = setting(0, ge=0, doc="GPUs the tenant's namespace may request (its ResourceQuota); must cover "
                                          "what its models scale to.")
    cpu_quota: str = setting("0", pattern=QUANTITY_PATTERN, invalid="is not a Kubernetes quantity", derived=True,
                             doc="CPU the namespace may request, a Kubernetes quantity (default: what gpuQuota and "
                                 "migQuota imply on the tenant's pools, their nodes' share).")
    memory_quota: str = setting("0Gi", pattern=QUANTITY_PATTERN, invalid="is not a Kubernetes quantity",
                                derived=True, doc="Memory the namespace may request, a Kubernetes quantity "
                                                  "(default: as cpuQuota).")
    mig_quota: Mapping[str, int] = setting(default_factory=dict, ge=0, pattern=MIG_PROFILE_PATTERN, derived=True,
                                           doc="MIG slices the namespace may request, by profile (1g.10gb: 2) "
                                               "(default: per profile, what the tenant's models scale to; every MIG "
                                               "profile of the stack has a quota, 0 for a tenant that uses none).")
    rate_limit: RateLimit = setting(default_factory=RateLimit, doc="The gateway's token buckets for the tenant's "
                                                                   "callers.")
    share_with: tuple[str, ...] = setting((), pattern=DNS_LABEL_PATTERN, doc="Tenants whose callers may call this "
                                                                             "tenant's models (default: none).")


@dataclass(frozen=True, slots=True)
class SecretRef:
    """A key of a Kubernetes Secret in the observability namespace (created outside the stack config)."""

    name: str = setting(doc="The Secret's name.")
    key: str = setting(doc="The key in the Secret.")


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
    ttft_seconds: float = setting(0.5, ge=0.001, doc="p95 time to first token, seconds.")
    inter_token_seconds: float = setting(0.05, ge=0.001, doc="p95 time between output tokens, seconds.")
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


ROUTING_POLICIES = ("cost-within-deadline", "fastest", "cheapest")
# A variant fits a budget when the budget covers its slo.e2eSeconds plus this margin (gateway.routing.<workload>.
# marginPercent): the SLO is the engine's p95, while the caller also waits in the gateway and, when the variant is
# busy, in its queue. 25: in the variant benchmark (tests/bench/bench_variant_routing.py, README) queueing at the
# saturated cheap variant made a margin of 0 miss 4 points more deadlines than all-fastest; 25 misses 0.3 more.
DEFAULT_ROUTING_MARGIN_PERCENT = 25.0
# gateway.auth.maxTokenLifetimeSeconds: a token whose exp is further away than this is refused (jwt_authn max_lifetime)
DEFAULT_MAX_TOKEN_LIFETIME_SECONDS = 86400
MAX_TOKEN_LIFETIME_LIMIT_SECONDS = 30 * 86400
DEFAULT_MAX_DROP = 0.02  # gateway.routing.<workload>.fidelity.maxDrop: 2 points of the suite's score
# gateway.routing.<workload>.fidelity.minBaselineScore: a baseline right on fewer than half of its own workload's items
# is a broken endpoint or the wrong suite, and every variant would pass against it.
DEFAULT_MIN_BASELINE_SCORE = 0.5
# gateway.routing.<workload>.fidelity.maxUnanswered: share of items a variant may leave without an answer (an empty
# or null content, an error body without choices) before its evaluation fails: that is the endpoint, not the model.
DEFAULT_MAX_UNANSWERED = 0.05


@dataclass(frozen=True, slots=True)
class FidelityJob:
    """The evaluation as a Kubernetes Job in the gateway namespace (components/k8s/fidelity.py), run again
    whenever a variant, the suite or the gate changes: `aifactory eval` through the gateway, scores to the
    OpenTelemetry Collector as metrics."""

    image: str = setting(pattern=r"^\S+$", invalid="is not an image reference",
                         doc="An image with the kit and this repository's stacks/ (the stack file and its evals/), "
                             "e.g. your CI's.")
    token_secret: SecretRef = setting(doc="A Secret in the gateway namespace holding a bearer token the gateway "
                                          "accepts.")
    timeout_seconds: int = setting(3600, ge=60, le=86400, doc="The Job's deadline (activeDeadlineSeconds).")


@dataclass(frozen=True, slots=True)
class CategoryGate:
    """Guards on one category of a suite's items (gateway.routing.<workload>.fidelity.categories.<name>; `*`: every
    category not named), on the observed scores: a category too small for an interval still cannot collapse
    unseen behind the aggregate."""

    name: str  # an item's `category`, or `*`
    min_score: float | None = setting(None, ge=0, le=1, doc="The variant's score on the category's items must be at "
                                                            "least this (give it, maxDrop or both).")
    max_drop: float | None = setting(None, ge=0, le=1, doc="The variant's score on the category's items may be at "
                                                           "most this below the baseline's.")


@dataclass(frozen=True, slots=True)
class Fidelity:
    """A workload's fidelity gate (gateway.routing.<workload>.fidelity): a variant other than `baseline` gets
    traffic only with a current result of suite `suite` (stacks/evals/<suite>/) whose drop below the baseline's
    score on the same items is shown to be at most `max_drop` (infra/fidelity.py, README "Fidelity")."""

    suite: str = setting(pattern=DNS_LABEL_PATTERN, invalid="is not a suite directory name (a DNS label: lowercase "
                         "letters, digits, '-')", doc="The suite: a directory under stacks/evals/.")
    baseline: str = setting(doc="The variant (a model key) the others are compared with; it needs no result of its "
                                "own.")
    max_drop: float = setting(DEFAULT_MAX_DROP, ge=0, le=1, doc="Largest drop of a variant's score (a share, 0-1) "
                                                                "below the baseline's on the same items.")
    job: FidelityJob | None = setting(None, doc="Run the evaluation as a Job in the cluster (default: none: "
                                                "evaluate with `aifactory eval` from outside).")
    min_baseline_score: float = setting(DEFAULT_MIN_BASELINE_SCORE, ge=0, le=1, doc="Below this baseline score no "
                                                                                    "variant is judged (a broken "
                                                                                    "endpoint or the wrong suite).")
    max_unanswered: float = setting(DEFAULT_MAX_UNANSWERED, ge=0, le=1, doc="Share of items a variant may leave "
                                                                            "unanswered before its evaluation "
                                                                            "fails.")
    categories: tuple[CategoryGate, ...] = setting((), form=Mapping[str, CategoryGate],
                                                   doc="Guards per category of the suite's items (`*`: every "
                                                       "category not named) (default: none; only the aggregate is "
                                                       "gated).")

    def category_gate(self, category: str) -> CategoryGate | None:
        """The guards of `category`: its own entry, else `*`'s, else none."""
        named = {c.name: c for c in self.categories}
        return named.get(category) or named.get("*")


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
    mig_profile: str | None = setting(None, pattern=MIG_PROFILE_PATTERN, invalid="is not a MIG profile such as "
                                      "1g.10gb", doc="Serve on a MIG slice of this profile (requests "
                                                     "nvidia.com/mig-<profile>; the pool needs a mig layout) instead "
                                                     "of whole GPUs.")
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
                                                  "min(timeoutSeconds, 30); at most timeoutSeconds).")
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
    group_formation_seconds: int = setting(DEFAULT_GROUP_FORMATION_SECONDS, ge=30, le=86400,
                                           doc="Multi-node replicas: seconds the leader waits for its workers to "
                                               "join, on top of startupBudgetSeconds.")
    # session affinity (components.k8s.envoy_affinity): requests with a session key go to the replica that served
    # the session before, each replica taking at most this percentage of the average load; None: least-request.
    session_affinity_balance_factor: int | None = setting(None, key="sessionAffinity", form=SessionAffinity,
                                                          doc="Session affinity: {enabled, hashBalanceFactor}.")

    @property
    def multi_node(self) -> bool:
        return self.mig_profile is None and self.gpus_per_replica > self.gpus_per_node_hint

    # set by parse(): GPUs on one node of this model's pool (kept here so components need no lookup)
    gpus_per_node_hint: int = 8

    @property
    def nodes_per_replica(self) -> int:
        return max(1, self.gpus_per_replica // self.gpus_per_node_hint) if self.multi_node else 1


@dataclass(frozen=True, slots=True)
class Retries:
    attempts: int = setting(2, ge=0, le=10, doc="Retries of one request, on a connect failure, a reset, a 500, 502, "
                            "503 or 504, or a try idle longer than the model's tryIdleTimeoutSeconds.")
    budget_percent: float = setting(20.0, ge=0, le=100, doc="Retries a variant's overflow may add, at most this "
                                                           "share of the requests in flight, percent (Envoy's retry "
                                                           "budget). A model's own cluster allows 100: every try a "
                                                           "hung replica's hop ends must be able to retry.")


@dataclass(frozen=True, slots=True)
class OutlierDetection:
    consecutive_5xx: int = setting(3, ge=1, doc="Consecutive 5xx answers that eject a replica from its model's "
                                                "load balancing.")
    interval_seconds: float = setting(2.0, ge=0.1, doc="Seconds between ejection sweeps.")
    base_ejection_seconds: float = setting(30.0, ge=0.1, doc="How long a first ejection lasts, seconds (Envoy "
                                                             "multiplies it by the number of ejections).")
    max_ejection_percent: int = setting(67, ge=1, le=100, doc="At most this share of a model's replicas is ejected "
                                                             "at once, percent (67: 2 of 3, never the last of 3).")
    panic_threshold_percent: float = setting(30.0, ge=0, le=100, doc="No longer applied, kept so existing stacks "
                                                                    "stay valid: models have no panic mode, as "
                                                                    "their clusters hold replicas.max hosts, absent "
                                                                    "ones included (docs/gateway.md). Was: below "
                                                                    "this share of healthy replicas Envoy balanced "
                                                                    "over all of them, percent.")


@dataclass(frozen=True, slots=True)
class CircuitBreakers:
    max_connections: int = setting(4096, ge=1, doc="Connections to one model's replicas at once.")
    max_pending_requests: int = setting(2048, ge=1, doc="Requests waiting for a connection to one model.")
    max_requests: int = setting(4096, ge=1, doc="Requests in flight to one model at once.")


@dataclass(frozen=True, slots=True)
class HealthCheck:
    interval_seconds: float = setting(5.0, ge=0.01, le=300, doc="Seconds between the gateway's active health "
                                                                "checks of each replica.")
    timeout_seconds: float = setting(2.0, ge=0.01, derived=True, doc="Seconds a health check may take; at most "
                                                                     "intervalSeconds (default: 2, or intervalSeconds "
                                                                     "when that is shorter).")
    unhealthy_threshold: int = setting(2, ge=1, le=10, doc="Failed checks that take a replica out.")
    healthy_threshold: int = setting(2, ge=1, le=10, doc="Passed checks that bring it back.")


@dataclass(frozen=True, slots=True)
class JwtIssuer:
    issuer: str = setting(pattern=r"\S", invalid="is empty", doc="The tokens' iss, e.g. "
                                                                  "https://sso.example.com/realms/aifactory.")
    jwks_uri: str = setting(pattern=r"^https://[^/\s:]+(:\d+)?(/\S*)?$", invalid="is not an https:// URL",
                            doc="Where the issuer publishes its signing keys (https://).")
    audiences: tuple[str, ...] = setting((), doc="Accepted aud values (default: none, any aud); set it to the "
                                                 "gateway's client id.")
    # Set it when several issuers are configured, so one team's IdP cannot mint tokens for another team's tenant
    tenants: tuple[str, ...] | None = setting(None, derived=True, doc="The tenants this issuer's tokens may name in "
                                                                      "the tenant claim (default: any tenant).")


@dataclass(frozen=True, slots=True)
class GatewayAuth:
    issuers: tuple[JwtIssuer, ...] = setting((), doc="The JWT issuers whose tokens the gateway accepts (default: "
                                                     "none: every model request gets 401).")
    tenant_claim: str = setting("tenant", pattern=r"^[A-Za-z0-9_:.-]+$",
                                invalid="is not a claim name (letters, digits, _ : . -)",
                                doc="The JWT claim naming the caller's tenant.")
    max_token_lifetime_seconds: int = setting(DEFAULT_MAX_TOKEN_LIFETIME_SECONDS, ge=60,
                                              le=MAX_TOKEN_LIFETIME_LIMIT_SECONDS,
                                              doc="A token without exp, or whose exp is further away than this, "
                                                  "gets 401 (seconds).")


@dataclass(frozen=True, slots=True)
class Routing:
    """The stack file's form of gateway.routing.<workload> (GatewaySettings.routing, .routing_margins, .fidelity)."""

    policy: str = setting(ROUTING_POLICIES[0], choices=ROUTING_POLICIES,
                          doc="How a request picks a variant: the cheapest that fits its latency budget "
                              "(cost-within-deadline), the fastest, or the cheapest.")
    margin_percent: float | None = setting(None, ge=0, le=1000, derived=True,
                                           doc="How much more than a variant's slo.e2eSeconds a budget must hold "
                                               "for the variant to fit it, percent (default: 25).")
    fidelity: Fidelity | None = setting(None, doc="The workload's fidelity gate: a variant gets traffic only with "
                                                  "a current evaluation close enough to the baseline's (default: "
                                                  "none).")


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    namespace: str = setting(DEFAULT_GATEWAY_NAMESPACE, pattern=DNS_LABEL_PATTERN, invalid=NOT_A_DNS_LABEL,
                             doc="The gateway's namespace.")
    min_replicas: int = setting(2, ge=1, doc="Fewest gateway replicas (the autoscaler's floor).")
    max_replicas: int = setting(6, ge=1, derived=True, doc="Most gateway replicas (default: 6, or minReplicas when "
                                                           "larger).")
    service_type: Literal["LoadBalancer", "NodePort", "ClusterIP"] = setting(
        "LoadBalancer", doc="How clients reach the gateway: its Service's type.")
    connect_timeout_seconds: float = setting(2.0, ge=0.01, le=60, doc="Seconds to connect to a model replica.")
    retries: Retries = setting(default_factory=Retries, doc="Retries of a failed request on another replica.")
    outlier_detection: OutlierDetection = setting(default_factory=OutlierDetection,
                                                  doc="Ejection of replicas that keep failing.")
    circuit_breakers: CircuitBreakers = setting(default_factory=CircuitBreakers,
                                                doc="Limits on what one gateway replica sends to one model.")
    auth: GatewayAuth = setting(default_factory=GatewayAuth, doc="Who may call models: JWT issuers and the "
                                                                 "tenant claim.")
    health_check: HealthCheck = setting(default_factory=HealthCheck, doc="The gateway's active health checks of "
                                                                         "replicas.")
    request_headers_timeout_seconds: float = setting(10.0, ge=0.01, le=3600, doc="Seconds to receive a request's "
                                                                                 "headers (408 past it).")
    request_timeout_seconds: float = setting(60.0, ge=0.01, le=3600, doc="Seconds to receive a whole request, body "
                                                                         "included (408 past it).")
    stream_idle_timeout_seconds: float = setting(30.0, ge=0.01, le=3600, doc="Seconds a stream may idle; routes to a "
                                                                             "model use its timeoutSeconds instead.")
    idle_timeout_seconds: float = setting(300.0, ge=1, le=86400, doc="Seconds before an idle client connection is "
                                                                     "closed.")
    # workload -> routing policy among its variants; default: cost-within-deadline for every workload with variants
    routing: Mapping[str, str] = setting(default_factory=dict, form=Mapping[str, Routing], pattern=DNS_LABEL_PATTERN,
                                         doc="Per workload with variants: how a request picks one, and the "
                                             "variants' fidelity gate (default: cost-within-deadline, no gate).")
    # workload -> marginPercent over each variant's expected latency; default: DEFAULT_ROUTING_MARGIN_PERCENT
    routing_margins: Mapping[str, float] = field(default_factory=dict)
    # workload -> its fidelity gate (gateway.routing.<workload>.fidelity); default: none (every variant is routed)
    fidelity: Mapping[str, Fidelity] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Capacity:
    type: Literal["on-demand", "odcr", "capacity-block"] = setting(
        "on-demand", doc="Where the pool's instances come from: on-demand, an On-Demand Capacity Reservation (odcr) "
                         "or an EC2 Capacity Block for ML (capacity-block).")
    reservation_id: str | None = setting(None, pattern=r"^cr-[0-9a-f]{8,17}$",
                                         invalid="is not a reservation id (cr-...)",
                                         doc="The capacity reservation (cr-...); required for odcr and "
                                             "capacity-block.")
    start_time: str | None = setting(None, pattern=UTC_TIME_PATTERN, invalid=NOT_A_UTC_TIME,
                                     doc="capacity-block: the block's start, UTC (2026-12-01T11:30:00Z); required.")
    end_time: str | None = setting(None, pattern=UTC_TIME_PATTERN, invalid=NOT_A_UTC_TIME,
                                   doc="capacity-block: the block's end, UTC; required.")
    drain_minutes: int = setting(CAPACITY_BLOCK_DRAIN_MINUTES, doc="capacity-block: the pool scales to zero this "
                                                                   "many minutes before the block ends (more than "
                                                                   "30, as EKS asks).")

    @property
    def reserved(self) -> bool:
        return self.type != "on-demand"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str = setting(doc="The taint's key.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = setting(doc="What the taint does to pods that "
                                                                                 "do not tolerate it.")
    value: str = setting("", doc="The taint's value.")


@dataclass(frozen=True, slots=True)
class NodeCheck:
    driver_min_version: str = setting(DEFAULT_DRIVER_MIN_VERSION, pattern=r"^\d+(\.\d+){0,2}$",
                                      invalid="is not a driver version such as 550.54.15",
                                      doc="The oldest NVIDIA driver a node may run.")
    min_tflops_fraction: float = setting(0.7, ge=0, le=1, doc="A GPU passes the burn-in at this share of the "
                                                              "catalog's dense BF16 peak.")
    min_bandwidth_fraction: float = setting(0.7, ge=0, le=1, doc="A GPU passes at this share of the catalog's "
                                                                 "memory bandwidth.")
    burn_in_seconds: int = setting(10, ge=1, le=3600, doc="Seconds of the GPU burn-in.")
    dcgm_exporter_url: str | None = setting(None, pattern=r"^https?://[^\s/]+(/\S*)?$",
                                            invalid="is not an http(s):// URL such as http://127.0.0.1:9400/metrics",
                                            doc="Where the node check reads DCGM metrics (default: the GPU "
                                                "operator's exporter pod on the node, found with kubectl).")
    min_bus_bandwidth_fraction: float = setting(0.6, ge=0, le=1, doc="The all-reduce across nodes passes at this "
                                                                     "share of the fabric's line rate.")
    fabric_test_seconds: int = setting(300, ge=30, le=3600, doc="Hard limit of the all-reduce across nodes, "
                                                                "seconds.")


@dataclass(frozen=True, slots=True)
class NodePool:
    name: str
    instance_type: str = setting(doc="The pool's instance type: an EC2 type (provider aws) or an on-prem server "
                                     "type of the kit's catalog (provider existing).")
    min_size: int = setting(1, ge=0, derived=True, doc="Fewest nodes (default: 1; 0 for a capacity block).")
    max_size: int = setting(1, ge=0, derived=True, doc="Most nodes (default: the larger of minSize and "
                                                       "desiredSize).")
    desired_size: int = setting(1, ge=0, derived=True, doc="Nodes at creation (default: minSize).")
    fabric: Literal["efa", "infiniband", "none"] = setting("none", doc="The data-plane fabric between the pool's "
                                                                      "GPUs: efa (provider aws), infiniband "
                                                                      "(provider existing) or none.")
    availability_zones: tuple[str, ...] = setting((), derived=True, doc="provider aws: the pool's zones, of "
                                                                       "target.availabilityZones (default: an EFA "
                                                                       "pool the first zone, others every zone; a "
                                                                       "reservation's pool must list its one zone).")
    capacity: Capacity = setting(default_factory=Capacity, doc="provider aws: where the pool's instances come "
                                                               "from.")
    placement_group: bool = setting(False, derived=True, doc="Launch the nodes into a cluster placement group "
                                                             "(default: true for EFA pools on on-demand capacity; "
                                                             "provider aws).")
    root_volume_gib: int = setting(DEFAULT_GPU_ROOT_VOLUME_GIB, ge=20, le=16384, derived=True,
                                   doc="Each node's root volume, GiB (default: 500 for GPU types, 100 for CPU "
                                       "types).")
    hugepages_mib: int = setting(0, ge=0, derived=True, doc="2 MiB huge pages reserved on each node, MiB, a "
                                                            "multiple of 2 (default: 5120 on EFA pools, which "
                                                            "libfabric needs, else 0).")
    labels: Mapping[str, str] = setting(default_factory=dict, doc="Node labels beyond the kit's own (not its pool "
                                                                  "label, not nvidia.com/*).")
    taints: tuple[Taint, ...] = setting((), derived=True, doc="The nodes' taints (default: "
                                                              "nvidia.com/gpu=true:NoSchedule on GPU types, none "
                                                              "on CPU types).")
    mig: str | None = setting(None, choices=MIG_LAYOUTS, doc="The MIG layout the GPU operator's MIG manager applies "
                                                             "to the pool's GPUs (default: none, whole GPUs).")
    nodes: tuple[str, ...] = setting((), pattern=DNS_SUBDOMAIN_PATTERN, derived=True,
                                     invalid="is not a Kubernetes object name (a DNS subdomain)",
                                     doc="provider existing: the pool's node names; required with mig (the kit "
                                         "labels them nvidia.com/mig.config).")
    node_check: NodeCheck = setting(default_factory=NodeCheck, doc="The GPU node check's thresholds (aifactory "
                                                                   "node-check).")
    vllm_image: str | None = setting(None, pattern=r"^[\w.-]+(:\d+)?(/[\w.-]+)+(:[\w.-]+|@sha256:[0-9a-f]{64})$",
                                     invalid="is not an image reference with a tag or digest (registry/repo:tag)",
                                     doc="The vLLM image of the pool's models (default: the image for the pool's "
                                         "fabric).")

    @property
    def instance(self) -> catalog.InstanceType:
        return catalog.get(self.instance_type)

    @property
    def gpu(self) -> bool:
        return self.instance.has_gpu


@dataclass(frozen=True, slots=True)
class InfinibandSettings:
    network: Literal["ipoib", "sriov"] = setting("ipoib", doc="How pods reach the InfiniBand fabric: an IPoIB "
                                                              "secondary network, or SR-IOV virtual functions.")
    interfaces: tuple[str, ...] = setting(("ib0",), derived=True, doc="The hosts' IPoIB netdevs, one per compute "
                                                                      "rail (default: the InfiniBand pools' rails "
                                                                      "in the kit's catalog, else ib0).")
    ip_range: str = setting("192.168.100.0/22", doc="The RDMA network's addresses (the nv-ipam pool), a CIDR block "
                                                    "with room for every InfiniBand node.")
    hca_device_ids: tuple[str, ...] = setting(("101b",), pattern=r"^[0-9a-f]{4}$",
                                              invalid="is not a PCI device id such as 101b",
                                              doc="PCI device ids of the HCAs the RDMA device plugin shares "
                                                  "(101b: ConnectX-6; ConnectX-7 is 1021).")
    rdma_resource_name: str = setting("rdma_shared_device_a", pattern=r"^[a-z0-9_]+$",
                                      invalid="may hold only lowercase letters, digits and '_'",
                                      doc="The RDMA device plugin's resource (rdma/<name>) pods request.")
    rdma_hca_max: int = setting(63, ge=1, le=1000, doc="Pods that may share one HCA (the device plugin's "
                                                       "rdmaHcaMax).")
    hosts_have_ofed: bool = setting(False, doc="The hosts already run the OFED/DOCA driver (default: false, the "
                                               "network operator deploys it).")
    hcas: tuple[str, ...] = setting((), pattern=r"^[a-z0-9_]+$", invalid="is not an RDMA device name such as mlx5_0",
                                    derived=True, doc="The RDMA devices NCCL uses (NCCL_IB_HCA), one per interface "
                                                      "(default: the catalog rails' devices).")


@dataclass(frozen=True, slots=True)
class WorkflowSlo:
    latency_seconds: float = setting(30.0, ge=0.001, doc="A workflow is fast when it ends within this many seconds, "
                                                         "end to end.")
    latency_target: float = setting(0.99, ge=0.5, le=0.99999, doc="Share of workflows that must be fast (over 30 "
                                                                   "days; the rest is the latency error budget).")
    availability_target: float = setting(0.995, ge=0.5, le=0.99999, doc="Share of workflows that must succeed "
                                                                        "(over 30 days).")


ALERT_SEVERITIES = ("critical", "warning", "info")  # the severities the kit's (and the mixins') alerts carry
ALERT_RECEIVER_TYPES = ("slack", "pagerduty", "email", "webhook")


@dataclass(frozen=True, slots=True)
class AlertReceiver:
    """One Alertmanager receiver. Credentials are only ever a `secret` reference, never a config value:
    slack: the incoming-webhook URL; pagerduty: the Events v2 routing key; email: the SMTP password
    (optional); webhook: a bearer token (optional)."""

    name: str
    type: Literal["slack", "pagerduty", "email", "webhook"] = setting(doc="The receiver's kind, which decides the "
                                                                          "other keys it takes.")
    secret: SecretRef | None = setting(None, doc="The Secret holding the credential: slack the incoming-webhook "
                                                 "URL, pagerduty the Events v2 routing key (both required); email "
                                                 "the SMTP password, webhook a bearer token (default: none).")
    channel: str | None = setting(None, doc="slack: the channel (required).")
    to: str | None = setting(None, pattern=r"^[^@\s]+@[^@\s]+$", invalid="is not an email address",
                             doc="email: the address alerts go to (required).")
    sender: str | None = setting(None, key="from", pattern=r"^[^@\s]+@[^@\s]+$", invalid="is not an email address",
                                 doc="email: the sender's address (required).")
    smarthost: str | None = setting(None, pattern=r"^[A-Za-z0-9.-]+:\d{1,5}$",
                                    invalid="is not host:port such as smtp.example.com:587",
                                    doc="email: the SMTP server, host:port (required).")
    username: str | None = setting(None, doc="email: the SMTP user (default: no SMTP authentication).")
    url: str | None = setting(None, pattern=r"^https?://[^\s]+$", invalid="is not an http(s):// URL",
                              doc="webhook: where alerts are posted, http(s):// (required).")


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The dead-man's switch: the always-firing Watchdog alert goes to `receiver` every `repeat_interval`, and
    the service behind it (a webhook heartbeat, PagerDuty/Opsgenie heartbeat) pages when the pings stop."""

    receiver: str = setting(doc="The receiver (one of alerting.receivers) the Watchdog alert pings.")
    repeat_interval: str = setting("5m", pattern=r"^[1-9][0-9]*(m|h)$", invalid="is not an interval of whole "
                                   "minutes or hours such as 5m or 1h", doc="How often the Watchdog alert is sent "
                                                                            "again (Alertmanager's "
                                                                            "repeat_interval); the heartbeat "
                                                                            "service pages when pings stop.")


@dataclass(frozen=True, slots=True)
class AlertRoutes:
    """The stack file's form of observability.alerting.routes (Alerting.routes): receivers per severity."""

    critical: tuple[str, ...] = setting((), doc="Receivers of critical alerts.")
    warning: tuple[str, ...] = setting((), doc="Receivers of warning alerts.")
    info: tuple[str, ...] = setting((), doc="Receivers of info alerts.")


@dataclass(frozen=True, slots=True)
class Alerting:
    """Where alerts go: receivers by name, and per severity the receivers that get it."""

    receivers: Mapping[str, AlertReceiver] = setting(default_factory=dict, pattern=DNS_LABEL_PATTERN,
                                                     doc="Alertmanager receivers by name (default: none).")
    routes: Mapping[str, tuple[str, ...]] = setting(default_factory=dict, form=AlertRoutes,
                                                    doc="Per severity, the receivers that get its alerts (default: "
                                                        "none: alerts stay in the UI).")
    heartbeat: Heartbeat | None = setting(None, doc="The dead-man's switch (default: none: the Watchdog alert goes "
                                                    "nowhere).")


@dataclass(frozen=True, slots=True)
class Ingest:
    """Expected ingest, the basis of every backend's disk size (see docs/observability.md, "Observability data")."""

    samples_per_second: int = setting(10_000, ge=1, doc="Prometheus samples per second the cluster ingests.")
    log_gib_per_day: float = setting(5.0, ge=0.01, doc="Raw log lines per day, GiB.")
    spans_per_second: int = setting(500, ge=1, doc="Spans per second reaching the Collector (after mesh sampling).")


@dataclass(frozen=True, slots=True)
class VolumeSizes:
    """Pinned disk sizes (GiB) of the observability backends. A StatefulSet's volume claim template cannot
    change, so once a backend's volume exists its size should stop following retention and ingest: pin it here.
    Changing a pinned size needs a volume resize (docs/observability.md, "Observability data")."""

    prometheus_gib: int | None = setting(None, ge=1, doc="Prometheus's volume, GiB (default: sized from ingest and "
                                                         "retention).")
    loki_gib: int | None = setting(None, ge=1, doc="Loki's volume in single-binary mode, GiB (default: sized from "
                                                   "ingest and retention).")
    jaeger_gib: int | None = setting(None, ge=1, doc="Jaeger's volume, GiB (default: sized from span ingest and "
                                                     "traceRetention).")


@dataclass(frozen=True, slots=True)
class ObservabilitySettings:
    namespace: str = setting(DEFAULT_MONITORING_NAMESPACE, pattern=DNS_LABEL_PATTERN, invalid=NOT_A_DNS_LABEL,
                             doc="The namespace of Prometheus, Grafana, Loki, Jaeger and the Collector.")
    retention: str = setting("15d", pattern=DURATION_PATTERN, invalid="is not a retention such as 15d or 720h",
                             doc="How long Prometheus keeps metrics (and Loki logs).")
    loki_mode: Literal["single-binary", "simple-scalable"] = setting(
        "single-binary", doc="Loki's deployment mode; simple-scalable needs object storage (provider aws).")
    trace_sample_ratio: float = setting(1.0, ge=0, le=1, doc="Share of traces the Collector keeps.")
    idle_gpu_utilization_percent: float = setting(10.0, ge=0, le=100, doc="GPUs under this utilisation count as "
                                                                          "idle, percent.")
    prices: Mapping[str, float] = setting(default_factory=dict, ge=0, doc="$/hour of one node by instance type "
                                                                          "(default: the catalog's on-demand "
                                                                          "price; required for a type without "
                                                                          "one).")
    default_workflow_slo: WorkflowSlo = setting(default_factory=WorkflowSlo, key="slo",
                                                doc="The SLO of every agent workflow not named in workflows.")
    workflows: Mapping[str, WorkflowSlo] = setting(default_factory=dict, pattern=DNS_LABEL_PATTERN,
                                                   doc="SLOs of named workflows; what one does not set is slo's "
                                                       "(default: none named).")
    trace_retention: str = setting("7d", pattern=DURATION_PATTERN, invalid="is not a retention such as 7d or 168h",
                                   doc="How long Jaeger keeps traces.")
    mesh_trace_sampling_percent: float = setting(1.0, ge=0, le=100, doc="Share of requests that start a trace at "
                                                                        "the mesh, percent.")
    control_plane_metrics: bool = setting(False, doc="Scrape the control plane (opt-in: EKS exposes none, kubeadm "
                                                     "binds them to 127.0.0.1).")
    ingest: Ingest = setting(default_factory=Ingest, doc="Expected ingest, the basis of the backends' disk sizes.")
    alerting: Alerting = setting(default_factory=Alerting, doc="Where alerts go.")
    runbook_url: str | None = setting(None, pattern=r"^https?://[^\s#]+$",
                                      invalid="is not an http(s) URL without a #fragment (alerts append #<alert>)",
                                      doc="Alerts link to <runbookUrl>#<alert name in lowercase> (default: "
                                          "dashboards.config.DEFAULT_RUNBOOK_URL).")
    volumes: VolumeSizes = setting(default_factory=VolumeSizes, doc="Pinned disk sizes of the backends (default: "
                                                                    "nothing pinned).")


def infiniband_settings(given: Mapping[str, Any]) -> InfinibandSettings:
    """InfinibandSettings from a component's args (snake_case keys, lists for tuples); other keys are ignored and
    absent ones keep their defaults."""
    known = {f.name for f in fields(InfinibandSettings)}
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in given.items() if k in known}
    return InfinibandSettings(**values)
