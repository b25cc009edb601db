"""vLLM chat models take tool calls: `--enable-auto-tool-choice --tool-call-parser <the family's parser>`.

Without the flags vLLM answers a chat request with `tools` (tool_choice "auto", which it defaults to when tools are
given) 400 '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set' (v0.33.0 and
v0.27.1 vllm/renderers/online_renderer.py, create_error_response's default BAD_REQUEST), so every agent's tool call
failed. The parser names are the ones both pinned wheels register (tests/fixtures/engines/cli.yaml).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from components.k8s.engines.vllm import (
    TOOL_CALL_PARSER_FAMILIES,
    VLLM_TOOL_CALL_PARSERS,
    tool_call_parser,
    vllm_args,
)
from infra.cli import main
from infra.config import ConfigError, PlatformConfig, parse
from tests.support.stacks import SHIPPED_STACKS, stack_config

CLI = yaml.safe_load((Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "cli.yaml").read_text())
TOOL_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser")


def one_model(**model: Any) -> dict[str, Any]:
    """A one-model stack on an existing cluster (8 x H100 nodes)."""
    return {
        "target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "fast"},
        "nodePools": {"gpu": {"instanceType": "dgx-h100"}},
        "tenants": {"t": {"gpuQuota": 8}},
        "models": {"m": {"engine": "vllm", "tenant": "t", "pool": "gpu", "weightsGiB": 16, **model}},
        "observability": {"prices": {"dgx-h100": 30.0}},
    }


def parsed(**model: Any) -> PlatformConfig:
    return parse(one_model(**model), stack="unit")


def problems(**model: Any) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parsed(**model)
    return [f"{p.path}: {p.message}" for p in err.value.problems]


def tool_args(args: list[str]) -> list[str]:
    i = args.index(TOOL_FLAGS[0]) if TOOL_FLAGS[0] in args else len(args)
    return args[i:i + 3]


def test_every_shipped_vllm_chat_model_takes_tool_calls_with_its_familys_parser() -> None:
    """Llama 3.1/3.3 (AWQ re-uploads included) get llama3_json, Qwen2.5 hermes; the reranker none."""
    got = {(name, m.name): tool_args(vllm_args(m)) for name in SHIPPED_STACKS
           for m in stack_config(name).models.values() if m.engine == "vllm"}
    llama = [*TOOL_FLAGS, "llama3_json"]
    assert got == {
        ("dev", "chat"): [*TOOL_FLAGS, "hermes"],
        ("staging", "llama-70b"): llama,
        ("prod", "assistant-batch"): llama, ("prod", "assistant-steady"): llama,
        ("prod", "deep-research"): llama, ("prod", "embed-rerank"): [],
        ("prod", "finance-8b"): llama, ("prod", "finance-8b-bf16"): llama,
        ("onprem", "llama-70b"): llama, ("onprem", "llama-405b"): llama,
    }


@pytest.mark.parametrize(("model_id", "parser"), [
    ("meta-llama/Llama-3.1-8B-Instruct", "llama3_json"),
    ("meta-llama/Llama-3.2-3B-Instruct", "llama3_json"),
    ("meta-llama/Llama-3.3-70B-Instruct", "llama3_json"),
    ("hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4", "llama3_json"),
    ("meta-llama/Llama-3.1-405B-Instruct-FP8", "llama3_json"),
    ("meta-llama/Meta-Llama-3-8B-Instruct", None),  # Llama 3.0: its chat template has no tools
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", None),
    ("Qwen/Qwen2.5-7B-Instruct", "hermes"),
    ("Qwen/QwQ-32B", "hermes"),
    ("Qwen/Qwen3-8B", "hermes"),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "hermes"),
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3_xml"),
    ("Qwen/Qwen3.5-27B", None),  # a later generation: not assumed
    ("Qwen/Qwen2-7B-Instruct", None),
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistral"),
    ("mistralai/Mistral-Small-3.2-24B-Instruct-2506", "mistral"),
    ("org/llama-30b", None),
    ("deepseek-ai/DeepSeek-V3", None),
])
def test_the_parser_follows_the_model_family(model_id: str, parser: str | None) -> None:
    m = parsed(model=model_id, toolCallParser="none").models["m"]
    assert next((p for _, f, p in TOOL_CALL_PARSER_FAMILIES if f.search(m.model)), None) == parser


def test_the_kits_parser_names_are_the_ones_both_pinned_vllm_wheels_register() -> None:
    """vllm/tool_parsers/__init__.py _TOOL_PARSERS_TO_REGISTER of the 0.33.0 and 0.27.1 wheels (cli.yaml); with
    --enable-auto-tool-choice an unregistered name stops the server at start-up (validate_api_server_args)."""
    assert VLLM_TOOL_CALL_PARSERS == set(CLI["vllm_choices"]["--tool-call-parser"])
    assert not VLLM_TOOL_CALL_PARSERS & set(CLI["vllm_tool_call_parsers_only_0_33_0"])
    assert {p for _, _, p in TOOL_CALL_PARSER_FAMILIES} == {"llama3_json", "qwen3_xml", "hermes", "mistral"}
    assert {p for _, _, p in TOOL_CALL_PARSER_FAMILIES} <= VLLM_TOOL_CALL_PARSERS
    for version in ("0.33.0", "0.27.1"):
        assert set(TOOL_FLAGS) <= set(CLI["vllm"][version])


def test_a_chat_model_of_a_family_without_a_known_parser_is_refused_at_validate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = one_model(model="deepseek-ai/DeepSeek-V3")
    (tmp_path / "Pulumi.s.yaml").write_text(yaml.safe_dump({"config": {f"aifactory:{k}": v for k, v in raw.items()}}))
    assert main(["validate", "s", "--stacks-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert ("models.m.toolCallParser: is required for 'deepseek-ai/DeepSeek-V3': the kit knows the tool call parser "
            "of these families only (Llama 3.1-3.3: llama3_json; Qwen3-Coder: qwen3_xml; Qwen2.5, QwQ, Qwen3: "
            "hermes; Mistral AI (mistralai/): mistral), and without one vLLM answers every request with tools 400; "
            "set the parser the model's chat template calls for: apertus, cohere_command3, ") in err
    assert "step3p5, xlam, or none (no tool calls)" in err


def test_the_user_names_the_parser_or_none() -> None:
    assert tool_args(vllm_args(parsed(model="deepseek-ai/DeepSeek-V3", toolCallParser="deepseek_v3").models["m"])) \
        == [*TOOL_FLAGS, "deepseek_v3"]
    # an override wins over the family's parser
    assert tool_call_parser(parsed(model="meta-llama/Llama-3.2-3B-Instruct", toolCallParser="pythonic")
                            .models["m"]) == "pythonic"
    # none: no flags, the model serves chat without tool calls
    assert tool_args(vllm_args(parsed(model="Qwen/Qwen3-8B", toolCallParser="none").models["m"])) == []


def test_a_parser_name_vllm_does_not_register_or_cannot_use_is_refused() -> None:
    [problem] = problems(model="org/m", toolCallParser="qwen3_json")  # 0.33.0 only: the EFA DLC (0.27.1) lacks it
    assert problem.startswith("models.m.toolCallParser: 'qwen3_json' is not a tool call parser both pinned vLLM "
                              "releases register (0.33.0, 0.27.1); choose one of: apertus, ")
    assert problems(model="BAAI/bge-m3", task="embed", toolCallParser="hermes") == [
        "models.m.toolCallParser: 'hermes' is not read for task 'embed' (tool calls are chat completions'); remove it"]
    assert problems(model="Qwen/Qwen3-8B", engine="sglang", toolCallParser="hermes") == [
        "models.m.toolCallParser: is not read by engine 'sglang'; remove it"]
    # none is what a pooling model and the other engines do anyway: accepted
    assert tool_args(vllm_args(parsed(model="BAAI/bge-m3", task="embed", toolCallParser="none").models["m"])) == []
    assert parsed(model="Qwen/Qwen3-8B", engine="sglang", toolCallParser="none").models["m"].engine == "sglang"
