"""The gateway's active health check is a progress check (issue 44 item 6): per engine, a request that passes only when
the engine produces, rendered from the engine registry (components.k8s.engines: Engine.progress_check), while the
kubelet's liveness probe stays on the engine's cheap /health. Upstream facts: docs/contracts.md, "Day 2: progress
checks" (vllm 0.33.0 entrypoints/openai/completion/api_router.py, entrypoints/serve/engine/serving.py _check_model;
triton-inference-server/server@r26.07 python/openai/openai_frontend/frontend/fastapi/routers/completions.py,
engine/triton_engine.py; sglang 0.5.23 srt/entrypoints/http_server.py health_generate; Envoy v1.40.0
api/envoy/config/core/v3/health_check.proto HttpHealthCheck.send, method, request_headers_to_add)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.k8s import serving
from components.k8s.defaults import GATEWAY_DETECTION_SECONDS
from components.k8s.engines import ENGINES
from components.k8s.gateway.envoy import replicas
from components.k8s.gateway.envoy.base import model_host
from infra.cli import main
from infra.config import PlatformConfig
from tests.support.stacks import stack_config, stack_raw

UNSAMPLED = {"header": {"key": "traceparent", "value": "00-6169666163746f72792d636865636b21-656e766f792d6863-00"},
             "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}
JSON_HEADERS = [{"header": {"key": "content-type", "value": "application/json"},
                 "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}, UNSAMPLED]


def _check(cfg: PlatformConfig, name: str) -> dict[str, Any]:
    return replicas.health_check(cfg, cfg.models[name])


def _body(http: dict[str, Any]) -> dict[str, Any]:
    """The JSON the check sends: Envoy's `send.text` is the payload in hex."""
    raw: dict[str, Any] = json.loads(bytes.fromhex(http["send"]["text"]))
    return raw


def _raw_with_models(**models: dict[str, Any]) -> dict[str, Any]:
    """dev's config with more models like its `chat` (each overriding some keys), and room for them in its quota."""
    raw = stack_raw("dev")
    base = raw["models"]["chat"]
    return {**raw, "tenants": {k: {**t, "gpuQuota": 16} for k, t in raw["tenants"].items()},
            "models": {**raw["models"], **{k: {**base, **v} for k, v in models.items()}}}


def _with_models(**models: dict[str, Any]) -> PlatformConfig:
    raw = _raw_with_models(**models)
    return stack_config("dev", tenants=raw["tenants"], models=raw["models"])


@pytest.mark.parametrize(("stack", "model", "engine"), [
    ("prod", "deep-research", "vllm"), ("prod", "assistant-fast", "triton"), ("staging", "llama-8b-trt", "triton"),
    ("dev", "chat", "vllm")])
def test_a_generating_model_on_vllm_or_triton_is_checked_with_a_one_token_completion(
        stack: str, model: str, engine: str) -> None:
    """POST /v1/completions {"model": <config key>, "prompt": "hi", "max_tokens": 1}, not streamed, JSON, to the
    model Service's Host: 200 only once a token is generated. The config key is the first name vLLM serves
    (--served-model-name) and a name Triton's frontend answers to (triton_names.py); a name it does not serve is
    vLLM's 404 "The model ... does not exist" or Triton's 400 "Unknown model", a failing check."""
    cfg = stack_config(stack)
    m = cfg.models[model]
    assert m.engine == engine
    hc = _check(cfg, model)
    assert hc["http_health_check"] == {
        "path": "/v1/completions", "method": "POST", "host": model_host(cfg, m),
        "send": {"text": _check(cfg, model)["http_health_check"]["send"]["text"]},
        "request_headers_to_add": JSON_HEADERS}
    assert hc["http_health_check"]["send"]["text"] == (
        '{"max_tokens":1,"model":"' + model + '","prompt":"hi"}').encode().hex()
    assert _body(hc["http_health_check"]) == {"model": model, "prompt": "hi", "max_tokens": 1}
    assert m.name in serving.served_model_names(m)[:1]
    # one check waiting 8 s for its token takes the replica out, not a queue shorter than that (docs/gateway.md)
    assert (hc["timeout"], hc["interval"], hc["unhealthy_threshold"]) == ("8s", "2s", 1)


def test_an_embedding_or_rerank_model_is_checked_with_its_own_tasks_smallest_request() -> None:
    """Pooling models generate no token: a one-word embedding (vLLM) or a one-document rerank (vLLM's
    cross-encoders: /v1/rerank, query and documents)."""
    cfg = _with_models(**{"emb-vllm": {"task": "embed", "model": "BAAI/bge-m3"}})
    http = _check(cfg, "emb-vllm")["http_health_check"]
    assert (http["path"], http["method"], http["request_headers_to_add"]) == ("/v1/embeddings", "POST", JSON_HEADERS)
    assert _body(http) == {"model": "emb-vllm", "input": "hi"}
    prod = stack_config("prod")
    http = _check(prod, "embed-rerank")["http_health_check"]
    assert (http["path"], http["method"]) == ("/v1/rerank", "POST")
    assert _body(http) == {"model": "embed-rerank", "query": "hi", "documents": ["hi"]}


def test_onprems_classifier_is_a_decoder_that_its_one_token_check_can_pass() -> None:
    """onprem's `classifier` was DistilBERT (an encoder, no generation head) on Triton with task generate: Triton's
    OpenAI frontend sends any repository model but a vLLM-backend one TensorRT-LLM's generation tensors (text_input,
    max_tokens, ...) and answers the check an error on every replica, forever (triton-inference-server/server@r26.07:
    python/openai/openai_frontend/engine/triton_engine.py _determine_request_converter, engine/utils/triton.py
    _create_trtllm_generate_request). It is now a small instruct decoder on the same MIG slice, whose TensorRT-LLM
    repository takes them: the same 1-token completion, sent to the frontend that the kit starts over that
    repository, with the tokenizer from the claim and the model id among the names it answers to."""
    cfg = stack_config("onprem")
    m = cfg.models["classifier"]
    assert (m.engine, m.task, m.model, m.mig_profile) == ("triton", "generate", "Qwen/Qwen2.5-1.5B-Instruct",
                                                          "1g.10gb")
    http = _check(cfg, "classifier")["http_health_check"]
    assert (http["path"], http["method"], http["request_headers_to_add"]) == ("/v1/completions", "POST",
                                                                              JSON_HEADERS)
    assert _body(http) == {"model": "classifier", "prompt": "hi", "max_tokens": 1}
    obj = serving.workload(cfg, m)
    [c] = [c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == "triton"]
    assert (obj["kind"], c["image"]) == ("StatefulSet", "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3")
    assert c["command"][:2] == ["python3", "-c"]
    assert c["command"][3:] == [
        '["classifier","Qwen/Qwen2.5-1.5B-Instruct"]', "--", "/opt/tritonserver/python/openai/openai_frontend/main.py",
        "--model-repository=/models/model-store/classifier-trt",
        "--tokenizer=/models/model-store/classifier-tokenizer", "--host=0.0.0.0", "--openai-port=8000",
        "--default-max-tokens=4096"]
    assert c["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "1"


def test_validate_refuses_an_embedding_model_on_triton(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Triton's OpenAI frontend embeds only through Triton's vLLM backend; for any other backend (the kit's image is
    TensorRT-LLM's and it passes no --backend) every /v1/embeddings is ClientError 400 "TRT-LLM backend and Python
    backend do not support embedding requests" (triton-inference-server/server@r26.07:
    python/openai/openai_frontend/engine/utils/triton.py _create_trtllm_embedding_request; the embedding example of
    python/openai/README.md runs the vllm-python-py3 image), so its progress check could never pass: validate says
    so, with the engines that serve the task."""
    raw = _raw_with_models(**{"emb-trt": {"engine": "triton", "task": "embed", "model": "BAAI/bge-m3",
                                          "uri": "pvc://model-store/bge"}})
    (tmp_path / "Pulumi.s.yaml").write_text(yaml.safe_dump({"config": {f"aifactory:{k}": v for k, v in raw.items()}}))
    assert main(["validate", "s", "--stacks-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("  - ")] == [
        "  - models.emb-trt.task: 'embed' is not served by engine 'triton'; its tasks: generate (task 'embed' needs "
        "engine 'vllm' or 'sglang')"]


def test_an_sglang_model_is_checked_on_its_health_generate() -> None:
    """SGLang's own progress check, GET /health_generate, no body: 200 once its scheduler produced anything after the
    check began (its own 1-token generation when idle), at whole seconds from 1 s on; so the checks' timeout
    (8 s) lets a replica whose output came within 7 s pass."""
    cfg = stack_config("prod")
    hc = _check(cfg, "assistant-tools")
    assert hc["http_health_check"] == {"path": "/health_generate",
                                       "host": "assistant-tools.assistant.svc.cluster.local",
                                       "request_headers_to_add": [UNSAMPLED]}
    assert hc["timeout"] == "8s"


@pytest.mark.parametrize("stack", ["dev", "staging", "prod", "onprem"])
def test_every_progress_check_says_not_sampled_so_no_tracer_records_it(stack: str) -> None:
    """Each model's check, whatever its engine and task, carries one W3C traceparent whose flags are 00 (not sampled)
    and whose ids are valid (non-zero hex of the right lengths: an invalid one is no parent to the W3C propagator, and
    vLLM would sample the check as a root). Its parent-based tracers drop it:
    docs/contracts.md, "Progress checks are not traced" (envoyproxy/envoy#35721 for the pinned Istio's sidecars;
    vllm 0.33.0 vllm/tracing/otel.py with the SDK's ParentBased sampler; live:
    tests/artifacts/test_progress_checks_untraced.py)."""
    cfg = stack_config(stack)
    for name in cfg.models:
        added = _check(cfg, name)["http_health_check"]["request_headers_to_add"]
        [traceparent] = [h["header"]["value"] for h in added if h["header"]["key"] == "traceparent"]
        version, trace_id, parent_id, flags = traceparent.split("-")
        assert (version, flags) == ("00", "00"), name
        assert (len(trace_id), len(parent_id)) == (32, 16), name
        assert int(trace_id, 16) and int(parent_id, 16), name
        assert (bytes.fromhex(trace_id), bytes.fromhex(parent_id)) == (b"aifactory-check!", b"envoy-hc"), name


@pytest.mark.parametrize("stack", ["dev", "staging", "prod", "onprem"])
def test_the_kubelets_liveness_stays_on_the_cheap_health_and_the_window_stays_ten_seconds(stack: str) -> None:
    """Liveness is the engine's /health (a saturated replica must not be restarted); only the gateway's check
    generates. unhealthyThreshold x (timeout + interval) = 1 x (8 + 2) = GATEWAY_DETECTION_SECONDS."""
    cfg = stack_config(stack)
    assert cfg.gateway.health_check.detection_seconds == GATEWAY_DETECTION_SECONDS == 10
    for m in cfg.models.values():
        obj = serving.workload(cfg, m)
        spec = obj["spec"]
        template = spec["template"] if obj["kind"] == "StatefulSet" else spec["leaderWorkerTemplate"]["leaderTemplate"]
        [c] = [c for c in template["spec"]["containers"] if c["name"] == m.engine]
        assert c["livenessProbe"]["httpGet"]["path"] == ENGINES[m.engine].health_path, m.name
        assert c["livenessProbe"]["httpGet"]["path"] != _check(cfg, m.name)["http_health_check"]["path"], m.name
