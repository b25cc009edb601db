"""Triton Inference Server with TensorRT-LLM, behind its OpenAI-compatible frontend, on one node.

Every flag, path, port and metric the kit uses: docs/contracts.md, "Engines".
"""

from __future__ import annotations

import importlib.resources
import json
from dataclasses import dataclass

from components.k8s import naming
from components.k8s.engines.base import (
    Engine,
    EngineSite,
    EngineTracing,
    Role,
    model_path,
    tokenizer_path,
    tokenizer_problems,
)
from components.k8s.engines.vllm import NO_TOOL_CALL_PARSER, TOOL_CALL_PARSER_FAMILIES, served_model_names
from components.k8s.settings import Model
from telemetry.names import TRITON

__all__ = [
    "DEFAULT_TRITON_IMAGE",
    "TRITON_OPENAI_MAIN",
    "DEFAULT_TRITON_MAX_TOKENS",
    "TRTLLM_QFORMAT",
    "QFORMAT_ANNOTATION",
    "TRITON_TOOL_CALL_PARSERS",
    "TRITON_TOOL_CALL_PARSER_FAMILIES",
    "triton_tool_call_parser",
    "triton_names_script",
    "triton_frontend_args",
    "triton_command",
    "Triton",
    "ENGINE",
]

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
# TensorRT-LLM quantizes when the engine is built (`quantize.py --qformat`), not when Triton serves it:
# the URI must hold an engine built with this format; pods carry it as an annotation for audits.
TRTLLM_QFORMAT: dict[str, str] = {"none": "full_prec", "fp8": "fp8", "awq": "int4_awq", "int8": "int8_sq"}
QFORMAT_ANNOTATION = "aifactory.io/trtllm-qformat"
# `--tool-call-parser` names the frontend registers (server v2.71.0 python/openai/openai_frontend/engine/utils/
# tool_call_parsers: ToolParserManager.register_module("llama3") on Llama3JsonToolParser, ("mistral") on
# MistralToolParser; README.md "Tool Calling"). A name outside these stops the frontend at start-up (TritonLLMEngine
# __init__: ToolParserManager.get_tool_parser_cls raises KeyError). Both read the generated text whatever the
# backend: llama3 JSON objects after <|python_tag|> or bare, mistral a JSON array after [TOOL_CALLS] or bare.
TRITON_TOOL_CALL_PARSERS = frozenset({"llama3", "mistral"})
# The parser each family calls for, by the served model id: vLLM's family patterns (one source for both engines),
# with the frontend's names. README "Tool Calling": llama3 for Llama 3.1, 3.2 and 3.3, mistral for Mistral's Instruct
# models. The frontend has no parser of the other families vLLM knows (Qwen's Hermes-style and XML tool calls).
_FAMILY = {family: pattern for family, pattern, _ in TOOL_CALL_PARSER_FAMILIES}
TRITON_TOOL_CALL_PARSER_FAMILIES = (
    ("Llama 3.1-3.3", _FAMILY["Llama 3.1-3.3"], "llama3"),
    ("Mistral AI (mistralai/)", _FAMILY["Mistral AI (mistralai/)"], "mistral"),
)


def triton_tool_call_parser(model: Model) -> str | None:
    """The frontend's `--tool-call-parser` for a chat model (every Triton model: the engine serves task generate
    only): models.X.toolCallParser, else its family's (TRITON_TOOL_CALL_PARSER_FAMILIES); None for toolCallParser
    none and for a family the frontend has no parser of. Without the flag the frontend answers a chat request with
    `tools` 400 "having tools in the request requires --tool-call-parser to be set", or with tool_choice "auto"
    '"auto" tool choice requires --tool-call-parser to be set' (engine/triton_engine.py
    _verify_chat_tool_call_settings)."""
    if model.tool_call_parser == NO_TOOL_CALL_PARSER:
        return None
    if model.tool_call_parser is not None:
        return model.tool_call_parser
    return next((parser for _, family, parser in TRITON_TOOL_CALL_PARSER_FAMILIES if family.search(model.model)),
                None)


def triton_names_script() -> str:
    """The text of triton_names.py, run by the image's python3 around the frontend's main.py."""
    return importlib.resources.files("components.k8s").joinpath("triton_names.py").read_text()


def triton_frontend_args(model: Model) -> list[str]:
    """main.py's options: the model repository, the tokenizer, the OpenAI port, generation defaults, tool calls.

    `tritonserver` alone serves only the KServe v2 API; the OpenAI API is the frontend in
    triton-inference-server/server python/openai (r26.07 openai_frontend/main.py), which starts an in-process
    Triton server and serves /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models, plus /health/ready
    and Triton's Prometheus /metrics, all on --openai-port (default 9000). The KServe frontends stay off
    (--enable-kserve-frontends not given). --tokenizer (chat templates) is models.X.tokenizer (tokenizer_path: a
    Hub id, or a directory in the pod), else the model's HF id; the frontend loads it as it starts
    (engine/utils/tokenizer.py get_tokenizer: AutoTokenizer.from_pretrained, which reads a local directory as it is
    and downloads anything else from the Hub: HTTPS egress, and HF_TOKEN for gated ids; docs/serving.md, "Triton's
    tokenizer"). A TensorRT-LLM engine of TP x PP > 1 runs in the backend's orchestrator mode
    (TRTLLM_ORCHESTRATOR=1, see Triton.env): the frontend does not support leader mode (mpirun), per
    python/openai/README.md "Model Parallelism Support". main.py exposes no trace or metrics options: see
    docs/contracts.md for what that drops. A chat model whose family has a parser gets `--tool-call-parser`
    (triton_tool_call_parser).
    """
    parser = triton_tool_call_parser(model)
    return [f"--model-repository={model_path(model)}", f"--tokenizer={_tokenizer(model)}",
            "--host=0.0.0.0", f"--openai-port={naming.MODEL_HTTP_PORT}",
            f"--default-max-tokens={DEFAULT_TRITON_MAX_TOKENS}",
            *([f"--tool-call-parser={parser}"] if parser is not None else [])]


def triton_command(model: Model) -> list[str]:
    """The frontend's main.py with triton_frontend_args, started by triton_names.py so that it answers to the
    model's config key, workload and model id (vLLM's served names), whichever of them names the repository's chat
    model: the frontend itself answers only to repository model names and has no alias option."""
    return ["python3", "-c", triton_names_script(),
            json.dumps(served_model_names(model), separators=(",", ":")), "--",
            TRITON_OPENAI_MAIN, *triton_frontend_args(model)]


@dataclass(frozen=True, eq=False)
class Triton(Engine):
    """Triton's OpenAI frontend (an in-process Triton server) over a TensorRT-LLM model repository."""

    def image(self, site: EngineSite, model: Model) -> str:
        return DEFAULT_TRITON_IMAGE

    def command(self, model: Model, *, role: Role = "single", tracing: EngineTracing | None = None,
                fabric_name: str = "none") -> list[str]:
        return triton_command(model)

    def tokenizer(self, model: Model) -> str:
        """models.X.tokenizer, else the model id: the frontend needs one for its chat templates (triton_frontend_args)
        and has none of its own, so a model without the setting has its tokenizer downloaded from the Hub."""
        return _tokenizer(model)

    def scaling_query(self, selector: str, model: Model) -> tuple[str, str, str]:
        """Average queue time per request over 1 minute in ms, Value (a latency, not a sum), of the repository
        model that queues most (Triton's `model` label names repository models: a TensorRT-LLM ensemble's
        tensorrt_llm, or a BLS model; the bottleneck decides, whatever it is called)."""
        by = f"sum by ({TRITON.L_MODEL})"
        query = (f"max({by} (rate({TRITON.QUEUE_DURATION_US}{{{selector}}}[1m])) / 1000 / "
                 f"clamp_min({by} (rate({TRITON.REQUEST_SUCCESS}{{{selector}}}[1m])), 1e-9))")
        return (query, "Value", str(model.replicas.target_queue_time_ms))

    def env(self, model: Model) -> list[dict[str, str]]:
        """tensorrtllm_backend's orchestrator mode: the backend spawns one MPI worker per GPU itself."""
        if model.tensor_parallel * model.pipeline_parallel == 1:
            return []
        return [{"name": "TRTLLM_ORCHESTRATOR", "value": "1"}]

    def pod_annotations(self, model: Model) -> dict[str, str]:
        return {QFORMAT_ANNOTATION: TRTLLM_QFORMAT[model.quantization]}

    def model_problems(self, model: Model) -> list[tuple[str, str]]:
        """A tokenizer directory outside the model's storage (tokenizer_problems) or inside its model repository;
        the tool call parser's problems (_tool_call_problems)."""
        return [*tokenizer_problems(model), *_repository_tokenizer_problems(model), *_tool_call_problems(model)]


def _tokenizer(model: Model) -> str:
    return tokenizer_path(model) or model.model


def _repository_tokenizer_problems(model: Model) -> list[tuple[str, str]]:
    """A tokenizer directory inside the model repository would be loaded as a model: the frontend starts Triton
    with --model-control-mode none by default, which loads every model of the repository at start-up (r26.07
    main.py), Triton takes each subdirectory of the repository as a model (triton-inference-server/core
    src/model_repository_manager: GetDirectorySubdirs of the repository path), and a directory of tokenizer files
    is no model. Its root (`.`) is allowed: files there are no model."""
    repository = model_path(model)
    path = tokenizer_path(model)
    if model.tokenizer is None or path is None or not path.startswith(f"{repository}/"):
        return []
    return [("tokenizer", f"{model.tokenizer!r} is a directory of the model repository ({repository}), which Triton "
                          "would load as a model at start-up; keep the tokenizer beside the repository (e.g. "
                          "../tokenizer) or in its root (.)")]


def _tool_call_problems(model: Model) -> list[tuple[str, str]]:
    """toolCallParser: one of the frontend's parsers, or none. A chat model of a family the frontend has no parser
    of is served without tool calls (there is no parser to choose)."""
    given = model.tool_call_parser
    if given in (None, NO_TOOL_CALL_PARSER):
        return []
    if given not in TRITON_TOOL_CALL_PARSERS:
        allowed = f"{', '.join(sorted(TRITON_TOOL_CALL_PARSERS))}, or {NO_TOOL_CALL_PARSER} (no tool calls)"
        return [("toolCallParser", f"{given!r} is not a tool call parser of Triton's OpenAI frontend (26.07); "
                                   f"choose one of: {allowed}")]
    return []


ENGINE = Triton(
    name="triton", title="Triton",
    # The OpenAI frontend answers /health/ready (r26.07 routers/observability.py: 200 when the in-process server is
    # ready), not KServe's /v2/health/*; it has no other health path, so liveness and readiness share it.
    health_path="/health/ready", ready_path="/health/ready",
    # server r26.07 python/openai/openai_frontend/frontend/fastapi/routers/: /v1/chat/completions, /v1/completions,
    # /v1/embeddings, /v1/models, /v1/models/{model_name}; no score/rerank API. Task generate only: the frontend
    # embeds only through Triton's vLLM backend (engine/triton_engine.py _determine_request_converter: any other
    # backend, and the kit passes no --backend, gets utils/triton.py _create_trtllm_embedding_request, which raises
    # ClientError "TRT-LLM backend and Python backend do not support embedding requests", a 400 on every replica;
    # the embedding example of python/openai/README.md runs the 26.07-vllm-python-py3 image), and
    # DEFAULT_TRITON_IMAGE is the TensorRT-LLM one. Its completions and chat send TensorRT-LLM's generation tensors
    # (text_input, max_tokens, ...: _create_trtllm_generate_request) to a repository model of any other backend, so
    # the model must be a decoder whose repository takes them (docs/serving.md, "What Triton can serve").
    openai_apis={
        "generate": ("v1/chat/completions", "v1/completions", "v1/embeddings", "v1/models", "v1/models/[^/]+"),
    },
    metric_prefix="nv_",
    quantization_methods={"none": None, **{k: v for k, v in TRTLLM_QFORMAT.items() if k != "none"}},
    load_time_quantization=frozenset(),  # TensorRT-LLM quantizes when the engine is built
    # TensorRT-LLM's KV block reuse needs enable_kv_cache_reuse in the model repository (tensorrtllm_backend
    # docs/model_config.md), which the kit does not write; its frontend takes no trace options (main.py).
    multi_node=False, speculative=False, prefix_caching=False, expert_parallel=False, kv_offload=False,
    exports_spans=False,
    # None: the frontend answers 500 to every exception a request raises that is not its ClientError (400), the same
    # on every replica: an error the in-process server returns for the request's inputs as well as its own
    # ServerError (r26.07 python/openai/openai_frontend/frontend/fastapi/routers/chat.py,
    # completions.py, embeddings.py: `except Exception` -> HTTPException(StatusCode.SERVER_ERROR);
    # utils/utils.py StatusCode.SERVER_ERROR = 500). The Triton server runs inside the frontend's process
    # (main.py), so a dead server is a dead pod: a reset or a refused connection, which the gateway retries.
    retriable_status_codes=(),
)
