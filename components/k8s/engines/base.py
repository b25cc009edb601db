"""The interface every serving engine implements, and what the engines share.

An engine is a frozen dataclass whose fields are facts (paths, APIs, capabilities) and whose methods build what
differs (image, command line, environment, the scaling query). Serving objects, the gateway's health and API
paths and the capability checks read an engine from the registry (components.k8s.engines.ENGINES); nothing
else branches on an engine's name.

A light module on purpose: no Pulumi, nothing of infra/.
"""

from __future__ import annotations

import json
import math
import posixpath
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from components.k8s.settings import Model, NodePool

__all__ = [
    "Role",
    "Task",
    "CAPABILITIES",
    "CACHE_MOUNT",
    "STORE_MOUNT",
    "EngineTarget",
    "EngineSite",
    "EngineTracing",
    "ProgressCheck",
    "PROGRESS_PROMPT",
    "openai_progress_check",
    "Engine",
    "model_path",
    "drain_seconds",
    "tokenizer_path",
    "tokenizer_problems",
]

Role = Literal["single", "leader", "worker"]  # a Deployment's pod, or a LeaderWorkerSet's leader / worker
Task = Literal["generate", "embed", "rerank"]
# The capability flags an engine declares (Engine.capabilities lists the ones it has).
CAPABILITIES = ("multi_node", "speculative", "prefix_caching", "expert_parallel", "kv_offload", "exports_spans",
                "quantizes_on_load")
CACHE_MOUNT = "/model-cache"
STORE_MOUNT = "/models"  # pvc:// URIs: the claim, read-only


def model_path(model: Model) -> str:
    """What the engine loads: the HF id (downloaded into the cache), or a path in the cache / claim."""
    scheme, _, rest = model.uri.partition("://")
    if scheme == "hf":
        return rest
    if scheme == "s3":
        return f"{CACHE_MOUNT}/{model.name}"
    claim, _, path = rest.partition("/")
    return f"{STORE_MOUNT}/{claim}/{path}".rstrip("/")


def drain_seconds(model: Model) -> int:
    """How long a model's engine may drain its requests in flight once it gets SIGTERM: the longest request the
    gateway allows the model (its route timeout, models.X.timeoutSeconds: components.k8s.gateway.envoy.config
    `_route`), whole seconds. A request older than that has already been given up by the gateway."""
    return math.ceil(model.timeout_seconds)


def _storage(model: Model) -> str | None:
    """What the pod mounts of the model's own storage: a pvc:// uri's whole claim, an s3:// uri's download; None
    for hf:// (the Hub's cache keeps no tree a setting could name)."""
    scheme, _, rest = model.uri.partition("://")
    if scheme == "pvc":
        return f"{STORE_MOUNT}/{rest.partition('/')[0]}"
    return model_path(model) if scheme == "s3" else None


def _is_path(tokenizer: str) -> bool:
    return tokenizer in (".", "..") or tokenizer.startswith(("./", "../"))


def tokenizer_path(model: Model) -> str | None:
    """models.X.tokenizer as the engine's flag takes it: a Hub id as given; a directory relative to the model's uri
    (`./DIR`, `../DIR`) as its path in the pod, from model_path (pvc://model-store/classifier-trt with
    ../classifier-tokenizer: /models/model-store/classifier-tokenizer). Each engine's flag takes either: an
    existing local directory is read as it is, anything else is a Hub id (docs/contracts.md, "Engines"). None: not
    set."""
    given = model.tokenizer
    if given is None or not _is_path(given):
        return given
    return posixpath.normpath(f"{model_path(model)}/{given}")


def tokenizer_problems(model: Model) -> list[tuple[str, str]]:
    """models.X.tokenizer as a directory must lie in what the pod mounts of the model's storage (tokenizer_path)."""
    if model.tokenizer is None or not _is_path(model.tokenizer):
        return []
    storage = _storage(model)
    if storage is None:
        return [("tokenizer", f"{model.tokenizer!r} is a directory in the model's storage, but uri {model.uri} is "
                              "downloaded from the Hub into a cache of its own; give the tokenizer's Hub id "
                              "(ORG/NAME)")]
    path = tokenizer_path(model)
    if path is None or (path != storage and not path.startswith(f"{storage}/")):
        return [("tokenizer", f"{model.tokenizer!r} leads out of the model's storage ({path}); the pod mounts only "
                              f"{storage} of uri {model.uri}: give a directory within it")]
    return []


class EngineTarget(Protocol):
    @property
    def region(self) -> str | None: ...  # AWS: the region (per-region images)


class EngineSite(Protocol):
    """What an engine reads of the stack to pick its image: the model's pool and the target's region."""

    @property
    def target(self) -> EngineTarget: ...

    def pool_of(self, model: Model) -> NodePool: ...


@dataclass(frozen=True, slots=True)
class EngineTracing:
    """Where and how often an engine exports OpenTelemetry spans (the OTel Collector, the gateway's ratio).

    vLLM exports OTLP/gRPC to `grpc_endpoint` (v0.33.0 vllm/tracing/otel.py get_span_exporter: grpc unless
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL says otherwise). Triton's OpenAI frontend takes no trace options
    (r26.07 python/openai/openai_frontend/main.py), so Triton models export no engine spans."""

    grpc_endpoint: str
    sample_ratio: float  # requests that reach an engine without a trace context: share traced


# What the gateway's progress checks ask an OpenAI-compatible engine to read or generate: one short word, one token
# of text in the common tokenizers (a BOS token may come before it).
PROGRESS_PROMPT = "hi"


@dataclass(frozen=True, slots=True)
class ProgressCheck:
    """The request the gateway's active health check sends a replica: it passes (200) only when the engine produces
    (a token, an embedding, a score), so a replica whose engine is stuck while its /health passes fails it
    (components.k8s.gateway.envoy.replicas.health_check; docs/gateway.md, "Requests on a replica that hangs")."""

    method: Literal["GET", "POST"]
    path: str
    body: Mapping[str, Any] | None = None  # sent as JSON (content-type application/json); None: no body

    def payload(self) -> bytes:
        """The body's bytes: compact JSON with sorted keys (deterministic), or nothing."""
        if self.body is None:
            return b""
        return json.dumps(self.body, sort_keys=True, separators=(",", ":")).encode()


def openai_progress_check(model: Model) -> ProgressCheck:
    """The smallest OpenAI request of the model's task that makes the engine produce, naming the model by its config
    key (the first name vLLM serves and labels metrics with, and the name Triton's frontend answers through
    components/k8s/triton_names.py): a 1-token completion (max_tokens 1, not streamed), a one-word embedding, or a
    one-document rerank. docs/contracts.md, "Day 2: progress checks"."""
    if model.task == "embed":
        return ProgressCheck("POST", "/v1/embeddings", {"model": model.name, "input": PROGRESS_PROMPT})
    if model.task == "rerank":
        return ProgressCheck("POST", "/v1/rerank", {"model": model.name, "query": PROGRESS_PROMPT,
                                                    "documents": [PROGRESS_PROMPT]})
    return ProgressCheck("POST", "/v1/completions", {"model": model.name, "prompt": PROGRESS_PROMPT,
                                                     "max_tokens": 1})


@dataclass(frozen=True, eq=False)
class Engine(ABC):
    """One serving engine: its facts as fields, what it builds as methods."""

    name: str  # models.X.engine; also the engine container's name
    title: str  # how people write it (dashboards, messages)
    health_path: str  # liveness (the kubelet's): fails when the engine is dead, stays cheap under load
    ready_path: str  # startup and readiness: answers once the model is loaded
    # The OpenAI API paths it serves per task (RE2 alternatives after the root): its keys are its tasks.
    openai_apis: Mapping[str, tuple[str, ...]]
    metric_prefix: str  # every metric its /metrics serves starts with this (vllm:, nv_)
    # The kit's quantization methods it serves, and what each is called on the engine's side (a flag's value, a
    # build format); None: no quantization.
    quantization_methods: Mapping[str, str | None]
    # Methods it quantizes to as it loads unquantized weights: a model's default checkpoint is load-time for these.
    load_time_quantization: frozenset[str]
    multi_node: bool  # one replica across nodes (a LeaderWorkerSet)
    speculative: bool  # speculative decoding (models.X.speculative)
    prefix_caching: bool  # models.X.prefixCaching may be on
    expert_parallel: bool  # models.X.expertParallel
    kv_offload: bool  # models.X.kvOffloadGiB
    exports_spans: bool  # its process exports OTLP spans under the caller's traceparent
    # The engine's own HTTP statuses that another replica may answer better, so the gateway retries them there
    # (besides the way's 502 and 503: components.k8s.gateway.envoy.base.PROXY_RETRIABLE_STATUS_CODES). A status the
    # engine
    # gives a request whatever replica serves it stays out: a retry would only repeat it on every replica.
    retriable_status_codes: tuple[int, ...]
    # How long a startup or readiness check on ready_path may take to answer (the kubelet's timeoutSeconds).
    ready_timeout_seconds: int = 5
    # Text in a 500's body by which the engine says the request itself is at fault: the gateway answers it 422 at
    # once, neither retried nor counted against the replica (components.k8s.gateway.envoy.failures; docs/contracts.md,
    # "Which 500 is the request's"). Empty: none of its 500s says so.
    request_fault_markers: tuple[str, ...] = ()
    # A multi-node replica's leader port that its workers reach directly (one of multi_node_ports, outside the
    # sidecar's outbound capture) and that stays open exactly as long as the leader's engine runs: a worker's preStop
    # waits for it to close (components.k8s.serving.lifecycle). None: the engine has no multi-node replicas.
    leader_engine_port: int | None = None

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(self.openai_apis)

    @property
    def quantizes_on_load(self) -> bool:
        return bool(self.load_time_quantization)

    @property
    def capabilities(self) -> frozenset[str]:
        """The capability flags (CAPABILITIES) this engine has."""
        return frozenset(c for c in CAPABILITIES if getattr(self, c))

    def default_quantized_checkpoint(self, quantization: str) -> bool:
        """A model's checkpoint carries its own quantization unless the engine quantizes to that method on load."""
        return quantization not in self.load_time_quantization

    def prequantized(self, model: Model) -> bool:
        """The weights it loads are already in their serving precision (what the cold-start estimate reads)."""
        return model.quantized_checkpoint or not self.quantizes_on_load

    @abstractmethod
    def image(self, site: EngineSite, model: Model) -> str:
        """The engine container's image for `model`."""

    @abstractmethod
    def command(self, model: Model, *, role: Role = "single", tracing: EngineTracing | None = None,
                fabric_name: str = "none") -> list[str]:
        """The engine container's command (role: single, or a multi-node replica's leader / worker)."""

    @abstractmethod
    def scaling_query(self, selector: str, model: Model) -> tuple[str, str, str]:
        """(PromQL, KEDA metricType, threshold) of the model's queue signal; `selector` picks its pods' series."""

    def progress_check(self, model: Model) -> ProgressCheck:
        """The gateway's active health check of a replica: a request that passes only when the engine produces, not
        its /health (which a stuck engine may pass). By default the OpenAI request of the model's task
        (openai_progress_check)."""
        return openai_progress_check(model)

    def evaluated_args(self, model: Model) -> list[str]:
        """The part of its command that the fidelity gate's fingerprint records (infra.fidelity.evaluated_facts):
        what decides the answers, recorded the same way for as long as results exist. By default the command."""
        return self.command(model)

    def model_problems(self, model: Model) -> list[tuple[str, str]]:
        """(key under models.X, message) for each setting of `model` this engine cannot serve as given; the stack
        model reports them with their key path. By default: a parser named in models.X.toolCallParser (vLLM's
        flag) is read by no other engine; `none` says what every other engine does anyway. A tokenizer directory
        outside the model's storage (tokenizer_problems), whatever the engine."""
        if model.tool_call_parser not in (None, "none"):
            return [*tokenizer_problems(model), ("toolCallParser", f"is not read by engine {self.name!r}; remove it")]
        return tokenizer_problems(model)

    def tokenizer(self, model: Model) -> str | None:
        """The tokenizer its command names (tokenizer_path: a Hub id, or a directory in the pod), or None: the engine
        reads the one beside the weights."""
        return tokenizer_path(model)

    def tokenizer_from_hub(self, model: Model) -> bool:
        """Whether its server downloads the tokenizer from the Hugging Face Hub as it starts (a Hub id: HTTPS egress
        for the model's tenant, whatever its uri)."""
        named = self.tokenizer(model)
        return named is not None and not named.startswith("/")

    def env(self, model: Model) -> list[dict[str, str]]:
        """Engine settings of the container's environment (after the kit's user, cache and fabric settings)."""
        return []

    def trace_env(self, model: Model, tracing: EngineTracing) -> list[dict[str, str]]:
        """The OpenTelemetry SDK's settings of an engine that exports spans (last in the environment)."""
        return []

    def multi_node_env(self) -> list[dict[str, str]]:
        """The engine's own socket settings in a multi-node replica's pods."""
        return []

    def multi_node_ports(self) -> list[int]:
        """Every fixed port a multi-node replica's processes listen on besides the model's HTTP port."""
        return []

    def pod_annotations(self, model: Model) -> dict[str, str]:
        """Annotations of the engine's pods (audits)."""
        return {}
