"""Start-up of Triton's OpenAI frontend answering to the kit's names of a model (sent as `python3 -c`, so it uses
only the standard library).

    python3 -c "<this file's text>" NAMES_JSON -- /opt/tritonserver/python/openai/openai_frontend/main.py ARGS...

The frontend answers only to the names of the repository's models and has no alias option (server v2.71.0 = r26.07
python/openai/openai_frontend/main.py parse_args): its chat, completion and embedding handlers read the request's
`model` through TritonLLMEngine._get_model_and_lora_name and look the result up in model_metadata, and a name it does
not serve is ClientError "Unknown model: <name>", which routers/*.py answer 400 (engine/triton_engine.py). The
gateway routes a request on the model's config key or its workload and forwards the body unchanged, clients send
the model id too, and `aifactory verify` sends the config key: whichever one the repository's chat model is named
after, the others answered 400.

NAMES_JSON is the model's names, in order (config key, workload, model id: what vLLM serves). This wraps
_get_model_and_lora_name so a request naming any of them is read as the first of them the repository serves; other
names, and every name when the repository serves none of them, reach the frontend unchanged. The wrapper is
installed before main.py runs (main.py imports the same module object), and start-up stops (exit 3) if the frontend
no longer has the method, instead of serving 400s.

It also lets chat and completion bodies carry fields the frontend's schema does not declare. Its request models
forbid unknown fields (schemas/openai.py CreateChatCompletionRequest and CreateCompletionRequest,
`ConfigDict(extra="forbid")`), and FastAPI answers such a body 422 before the engine sees it; but OpenAI's SDK sends
`prompt_cache_key`, which the gateway's session affinity asks clients for (docs/gateway.md), and
`parallel_tool_calls`, neither declared at r26.07. They are ignored, as vLLM ignores fields it does not know (vllm
0.33.0 vllm/entrypoints/serve/engine/protocol.py OpenAIBaseModel: extra allowed, logged, unused). The models are
rebuilt before main.py imports the routers, whose endpoints take their validators at import (fastapi 0.121.2,
python/openai/requirements.txt).
"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path
from typing import Any

LOOKUP = "_get_model_and_lora_name"  # TritonLLMEngine's (engine/triton_engine.py, r26.07)
RELAXED = ("CreateChatCompletionRequest", "CreateCompletionRequest")  # schemas/openai.py, r26.07
FATAL_EXIT = 3


def served_name(requested: str, names: list[str], served: Any) -> str:
    """The repository model a request for `requested` goes to: the first of `names` in `served` (the frontend's
    model_metadata) when `requested` is one of `names`; else `requested` itself."""
    if requested in names:
        return next((name for name in names if name in served), requested)
    return requested


def install(engine_class: Any, names: list[str]) -> None:
    """Wrap the engine class's model lookup so that each of `names` is read as the one the repository serves."""
    lookup = getattr(engine_class, LOOKUP, None)
    if lookup is None:
        raise LookupError(f"aifactory triton-names: {engine_class.__name__}.{LOOKUP} is gone from this frontend, "
                          f"so the kit's names of the model ({', '.join(names)}) cannot be served; stopping")

    def lookup_served(self: Any, request_model_name: str) -> Any:
        return lookup(self, served_name(request_model_name, names, self.model_metadata))

    setattr(engine_class, LOOKUP, lookup_served)


def relax(schemas: Any) -> None:
    """Let the frontend's chat and completion request models ignore fields they do not declare."""
    for name in RELAXED:
        model = getattr(schemas, name, None)
        if model is None:
            raise LookupError(f"aifactory triton-names: schemas.openai.{name} is gone from this frontend, so request "
                              f"bodies with fields it does not declare (prompt_cache_key) cannot be let through; "
                              f"stopping")
        model.model_config["extra"] = "ignore"
        model.model_rebuild(force=True)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: triton_names NAMES_JSON -- MAIN_PY ARGS...", file=sys.stderr)
        return 2
    names, main_py = json.loads(argv[1]), argv[3]
    sys.path.insert(0, str(Path(main_py).parent))  # as when main.py runs as a script: its packages first
    import schemas.openai  # type: ignore[import-not-found]
    from engine.triton_engine import TritonLLMEngine  # type: ignore[import-not-found]

    try:
        install(TritonLLMEngine, names)
        relax(schemas.openai)
    except LookupError as gone:
        print(gone, file=sys.stderr)
        return FATAL_EXIT
    sys.argv = [main_py, *argv[4:]]
    runpy.run_path(main_py, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
