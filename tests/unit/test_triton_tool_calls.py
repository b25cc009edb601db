"""Triton chat models take tool calls: the OpenAI frontend's `--tool-call-parser <the family's parser>` (review M4).

Without it Triton's OpenAI frontend (server v2.71.0 = r26.07, python/openai/openai_frontend/engine/triton_engine.py
_verify_chat_tool_call_settings) answers a chat request with `tools` 400 "having tools in the request requires
--tool-call-parser to be set" (tool_choice "auto": '"auto" tool choice requires --tool-call-parser to be set'), so the
default `assistant` route, Triton, returned no tool_calls. The frontend registers two parsers, `llama3` and `mistral`
(engine/utils/tool_call_parsers; README.md "Tool Calling"), named unlike vLLM's: tests/fixtures/engines/cli.yaml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from components.k8s.engines.triton import (
    TRITON_TOOL_CALL_PARSER_FAMILIES,
    TRITON_TOOL_CALL_PARSERS,
    triton_command,
    triton_tool_call_parser,
)
from components.k8s.engines.vllm import TOOL_CALL_PARSER_FAMILIES
from infra.cli import main
from infra.config import ConfigError, PlatformConfig, parse
from tests.support.stacks import SHIPPED_STACKS, stack_config

CLI = yaml.safe_load((Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "cli.yaml").read_text())
FLAG = "--tool-call-parser"


def one_model(**model: Any) -> dict[str, Any]:
    """A one-model Triton stack on an existing cluster (8 x H100 nodes)."""
    return {
        "target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "fast"},
        "nodePools": {"gpu": {"instanceType": "dgx-h100"}},
        "tenants": {"t": {"gpuQuota": 8}},
        "models": {"m": {"engine": "triton", "uri": "pvc://store/engines/m", "tenant": "t", "pool": "gpu",
                         "weightsGiB": 16, **model}},
        "observability": {"prices": {"dgx-h100": 30.0}},
    }


def parsed(**model: Any) -> PlatformConfig:
    return parse(one_model(**model), stack="unit")


def problems(**model: Any) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parsed(**model)
    return [f"{p.path}: {p.message}" for p in err.value.problems]


def tool_flags(command: list[str]) -> list[str]:
    return [a for a in command if a.startswith(f"{FLAG}=")]


def test_every_shipped_triton_chat_model_takes_tool_calls_with_its_familys_parser() -> None:
    """prod's default `assistant` route (Llama 3.3 70B) and staging's Llama 3.1 8B get llama3; the onprem classifier
    (Qwen2.5, a family the frontend has no parser of) gets none."""
    got = {(name, m.name): tool_flags(triton_command(m)) for name in SHIPPED_STACKS
           for m in stack_config(name).models.values() if m.engine == "triton"}
    assert got == {
        ("staging", "llama-8b-trt"): [f"{FLAG}=llama3"],
        ("prod", "assistant-fast"): [f"{FLAG}=llama3"],
        ("onprem", "classifier"): [],
    }


@pytest.mark.parametrize(("model_id", "parser"), [
    ("meta-llama/Llama-3.1-8B-Instruct", "llama3"),
    ("meta-llama/Llama-3.2-3B-Instruct", "llama3"),
    ("meta-llama/Llama-3.3-70B-Instruct", "llama3"),
    ("hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4", "llama3"),
    ("meta-llama/Meta-Llama-3-8B-Instruct", None),  # Llama 3.0: its chat template has no tools
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistral"),
    ("Qwen/Qwen2.5-7B-Instruct", None),  # vLLM's hermes: the frontend has no such parser
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct", None),
])
def test_the_parser_follows_the_model_family(model_id: str, parser: str | None) -> None:
    model = parsed(model=model_id).models["m"]
    assert triton_tool_call_parser(model) == parser
    assert tool_flags(triton_command(model)) == ([f"{FLAG}={parser}"] if parser else [])


def test_the_kits_parser_names_are_the_ones_the_frontend_registers_and_its_flag_exists() -> None:
    """The frontend's parsers at r26.07 (cli.yaml); an unknown name stops it at start-up (get_tool_parser_cls
    raises KeyError). The families are vLLM's patterns, one source for both engines."""
    assert TRITON_TOOL_CALL_PARSERS == set(CLI["triton_tool_call_parsers"]["26.07"]) == {"llama3", "mistral"}
    assert {p for _, _, p in TRITON_TOOL_CALL_PARSER_FAMILIES} == TRITON_TOOL_CALL_PARSERS
    vllm = {family: pattern for family, pattern, _ in TOOL_CALL_PARSER_FAMILIES}
    assert all(vllm[family] is pattern for family, pattern, _ in TRITON_TOOL_CALL_PARSER_FAMILIES)
    assert FLAG in CLI["triton_openai_frontend"]["26.07"]


def test_the_user_names_the_parser_or_none() -> None:
    # an override wins over the family's parser; none serves chat without tool calls
    assert tool_flags(triton_command(parsed(model="org/llama-ft", toolCallParser="llama3").models["m"])) == \
        [f"{FLAG}=llama3"]
    assert tool_flags(triton_command(parsed(model="meta-llama/Llama-3.1-8B-Instruct", toolCallParser="none")
                                     .models["m"])) == []


def test_a_parser_the_frontend_does_not_register_or_cannot_use_is_refused() -> None:
    assert problems(model="Qwen/Qwen3-8B", toolCallParser="hermes") == [
        "models.m.toolCallParser: 'hermes' is not a tool call parser of Triton's OpenAI frontend (26.07); choose one "
        "of: llama3, mistral, or none (no tool calls)"]
    assert problems(model="meta-llama/Llama-3.1-8B-Instruct", toolCallParser="llama3_json") == [
        "models.m.toolCallParser: 'llama3_json' is not a tool call parser of Triton's OpenAI frontend (26.07); "
        "choose one of: llama3, mistral, or none (no tool calls)"]


def test_validate_names_the_key_the_value_and_the_frontends_parsers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = one_model(model="Qwen/Qwen3-8B", toolCallParser="hermes")
    (tmp_path / "Pulumi.s.yaml").write_text(yaml.safe_dump({"config": {f"aifactory:{k}": v for k, v in raw.items()}}))
    assert main(["validate", "s", "--stacks-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert ("models.m.toolCallParser: 'hermes' is not a tool call parser of Triton's OpenAI frontend (26.07); "
            "choose one of: llama3, mistral, or none (no tool calls)") in err
