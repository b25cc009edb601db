"""Triton behind a workload name answered 400: the OpenAI frontend answers only to its repository's model names.

Server v2.71.0 (r26.07) python/openai/openai_frontend: main.py has no alias option; engine/triton_engine.py's chat,
completion and embedding read the request's `model` through TritonLLMEngine._get_model_and_lora_name(self,
request_model_name) -> (model name, LoRA name) and look it up in self.model_metadata (keyed by repository model
names); an unknown one is ClientError "Unknown model: <name>", answered 400 by routers/chat.py. The gateway routes on
the config key or the workload and forwards the body unchanged, and `aifactory verify` sends the config key, so
whichever name the repository's chat model had, the other answered 400. The kit starts main.py through
components/k8s/triton_names.py, which reads each of the model's names as the one the repository serves.

The real frontend imports the tritonserver wheel (in the Triton image only), so the launcher is run here, as the pod
runs it, over a frontend directory with the same layout and lookup method (engine/triton_engine.py,
TritonLLMEngine._get_model_and_lora_name, model_metadata; main.py importing it), written by the test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from components.k8s.engines.triton import TRITON_OPENAI_MAIN, triton_command, triton_names_script
from components.k8s.triton_names import FATAL_EXIT, served_name
from tests.support.stacks import stack_config

NAMES = ["assistant-fast", "assistant", "meta-llama/Llama-3.3-70B-Instruct"]  # prod's: key, workload, model id

ENGINE = '''
class TritonLLMEngine:
    def __init__(self, served):
        self.model_metadata = {name: object() for name in served}

    def _get_model_and_lora_name(self, request_model_name):
        return request_model_name, None

    def chat(self, model):
        name, _ = self._get_model_and_lora_name(model)
        return name if name in self.model_metadata else f"400 Unknown model: {model}"
'''

# The frontend's request models forbid unknown fields (schemas/openai.py, r26.07: ConfigDict(extra="forbid")).
SCHEMAS = '''
from pydantic import BaseModel, ConfigDict

class CreateChatCompletionRequest(BaseModel):
    model_config: ConfigDict = ConfigDict(extra="forbid")
    model: str
    messages: list

class CreateCompletionRequest(BaseModel):
    model_config: ConfigDict = ConfigDict(extra="forbid")
    model: str
    prompt: str
'''

# main.py imports the engine, and (through the routers) takes each request model's validator at import, as FastAPI
# does when a route is declared: a pydantic TypeAdapter over the model.
MAIN = '''
import json, sys
from engine.triton_engine import TritonLLMEngine
from pydantic import TypeAdapter, ValidationError
from schemas.openai import CreateChatCompletionRequest, CreateCompletionRequest

BODIES = {
    "chat": (CreateChatCompletionRequest, {"model": "assistant", "messages": [], "prompt_cache_key": "s-1",
                                           "parallel_tool_calls": True}),
    "completion": (CreateCompletionRequest, {"model": "assistant", "prompt": "hi", "prompt_cache_key": "s-1"}),
}


def status(model, body):
    try:
        TypeAdapter(model).validate_python(body)
    except ValidationError as e:
        return f"422 {e.errors()[0]['type']}"
    return "200"


if __name__ == "__main__":
    served = sys.argv[1].split(",")
    engine = TritonLLMEngine(served)
    print(json.dumps({"argv": sys.argv[1:], "answers": {m: engine.chat(m) for m in sys.argv[2:]},
                      "bodies": {k: status(*v) for k, v in BODIES.items()}}))
'''


def frontend(tmp_path: Path, engine: str = ENGINE, schemas: str = SCHEMAS) -> Path:
    for package, module, text in (("engine", "triton_engine", engine), ("schemas", "openai", schemas)):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
        (tmp_path / package / f"{module}.py").write_text(text)
    (tmp_path / "main.py").write_text(MAIN)
    return tmp_path / "main.py"


def launch(main_py: Path, served: list[str], *requested: str) -> subprocess.CompletedProcess[str]:
    """The pod's command line, with the test's main.py in place of the image's."""
    return subprocess.run([sys.executable, "-c", triton_names_script(), json.dumps(NAMES), "--", str(main_py),
                           ",".join(served), *requested], capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("served", [["assistant-fast"], ["assistant"], ["assistant", "ensemble", "tensorrt_llm"]])
def test_each_of_the_models_names_reaches_the_repository_model_named_after_any_of_them(
        tmp_path: Path, served: list[str]) -> None:
    """Named after the config key or after the workload, the chat model answers to the key, the workload and the
    model id; main.py gets its own arguments."""
    done = launch(frontend(tmp_path), served, *NAMES, "ensemble", "other")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    target = next(n for n in NAMES if n in served)
    assert out["argv"] == [",".join(served), *NAMES, "ensemble", "other"]
    assert out["answers"] == {
        **{name: target for name in NAMES},
        # other names reach the frontend unchanged: a repository model by its own name, anything else its 400
        "ensemble": "ensemble" if "ensemble" in served else "400 Unknown model: ensemble",
        "other": "400 Unknown model: other",
    }


def test_a_repository_serving_none_of_the_names_answers_as_the_frontend_does(tmp_path: Path) -> None:
    done = launch(frontend(tmp_path), ["ensemble"], "assistant", "ensemble")
    assert json.loads(done.stdout)["answers"] == {"assistant": "400 Unknown model: assistant", "ensemble": "ensemble"}


def test_a_frontend_without_the_lookup_stops_start_up(tmp_path: Path) -> None:
    """A frontend whose engine no longer has _get_model_and_lora_name fails loudly instead of serving 400s."""
    engine = ENGINE.replace("_get_model_and_lora_name", "_resolve")
    done = launch(frontend(tmp_path, engine), ["assistant-fast"], "assistant")
    assert done.returncode == FATAL_EXIT and done.stdout == ""
    assert done.stderr.strip() == (
        "aifactory triton-names: TritonLLMEngine._get_model_and_lora_name is gone from this frontend, so the kit's "
        "names of the model (assistant-fast, assistant, meta-llama/Llama-3.3-70B-Instruct) cannot be served; "
        "stopping")


def test_a_body_with_fields_the_frontend_does_not_declare_is_served_not_refused(tmp_path: Path) -> None:
    """OpenAI's SDK sends prompt_cache_key (the gateway's session affinity asks for it) and parallel_tool_calls; the
    frontend's forbidding models would answer 422 before the engine. Through the launcher they are ignored."""
    done = launch(frontend(tmp_path), ["assistant-fast"], "assistant")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["bodies"] == {"chat": "200", "completion": "200"}


def test_without_the_launcher_the_frontends_models_refuse_the_sdks_session_key(tmp_path: Path) -> None:
    """The control: main.py run directly, as `python3 main.py` would, answers both bodies 422."""
    main_py = frontend(tmp_path)
    done = subprocess.run([sys.executable, str(main_py), "assistant"], capture_output=True, text=True, timeout=60,
                          check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["bodies"] == {"chat": "422 extra_forbidden", "completion": "422 extra_forbidden"}


def test_a_frontend_without_the_request_models_stops_start_up(tmp_path: Path) -> None:
    schemas = SCHEMAS.replace("CreateCompletionRequest", "CompletionRequest")
    done = launch(frontend(tmp_path, schemas=schemas), ["assistant-fast"], "assistant")
    assert done.returncode == FATAL_EXIT and done.stdout == ""
    assert done.stderr.strip() == (
        "aifactory triton-names: schemas.openai.CreateCompletionRequest is gone from this frontend, so request bodies "
        "with fields it does not declare (prompt_cache_key) cannot be let through; stopping")


def test_served_name_reads_only_the_models_names() -> None:
    assert served_name("assistant", NAMES, {"assistant-fast": 1}) == "assistant-fast"
    assert served_name("assistant-fast", NAMES, {"assistant": 1, "assistant-fast": 1}) == "assistant-fast"
    assert served_name("ensemble", NAMES, {"assistant": 1}) == "ensemble"
    assert served_name("assistant", NAMES, {}) == "assistant"


def test_the_pods_command_starts_main_py_through_the_launcher_with_the_models_names() -> None:
    """prod's default route: the names are vLLM's served names (config key, workload, model id)."""
    model = stack_config("prod").models["assistant-fast"]
    command = triton_command(model)
    assert command[:6] == ["python3", "-c", triton_names_script(), json.dumps(NAMES, separators=(",", ":")), "--",
                           TRITON_OPENAI_MAIN]
    assert command[6:] == [
        "--model-repository=/model-cache/assistant-fast", "--tokenizer=meta-llama/Llama-3.3-70B-Instruct",
        "--host=0.0.0.0", "--openai-port=8000", "--default-max-tokens=4096", "--tool-call-parser=llama3"]
