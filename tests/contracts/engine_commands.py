"""Every `vllm serve` command line the kit generates: the shipped stacks' models, and one-model stacks that take
each branch of serving.vllm_args (quantization methods, speculative decoding, KV offload, expert parallelism,
pooling tasks, multi-node on EFA), each with its SIGTERM drain (engines.vllm.shutdown_flags). Each with the vLLM
version of the image it runs in.

`python -m tests.contracts.engine_commands` prints them as JSON for tests/contracts/vllm_parse.py, which runs
them through vLLM's own parser (`make contracts`); tests/unit/test_engine_contracts.py checks them in CI against
the options recorded from the engines' sources (tests/fixtures/engines/cli.yaml).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from components.k8s import serving
from components.k8s.engines.vllm import shutdown_flags
from infra.config import PlatformConfig, parse
from tests.support.stacks import SHIPPED_STACKS, stack_config

__all__ = ["VARIANTS", "vllm_commands", "image_version", "main"]

# one-model stacks (on an 8 x H100 EFA pool of p5.48xlarge) that reach each flag vllm_args can emit
VARIANTS: dict[str, dict[str, Any]] = {
    "fp8-load-time": {"quantization": "fp8"},
    "awq": {"model": "org/m-AWQ", "quantization": "awq"},
    "gptq": {"model": "org/m-GPTQ-Int4", "quantization": "gptq"},
    "int8": {"model": "org/m-W8A8", "quantization": "int8"},
    "eagle3": {"speculative": {"method": "eagle3", "draftModel": "org/eagle3-head", "numSpeculativeTokens": 3}},
    "ngram": {"speculative": {"method": "ngram"}, "prefixCaching": False},
    "kv-offload": {"kvOffloadGiB": 64, "maxModelLength": 32768},
    "expert-parallel": {"model": "org/moe-8x7b", "tensorParallel": 8, "expertParallel": True},
    "embed": {"task": "embed"},
    "rerank": {"task": "rerank"},
    "multi-node-efa": {"tensorParallel": 8, "pipelineParallel": 2},
    "tokenizer": {"tokenizer": "org/m-8b-tokenizer"},
}


def _one_model(name: str, body: dict[str, Any]) -> PlatformConfig:
    model = {"engine": "vllm", "model": "org/m-8b", "toolCallParser": "none",
             "tenant": "t", "pool": "gpu", "weightsGiB": 16, **body}
    return parse({
        "target": {"provider": "aws", "region": "us-east-1", "availabilityZones": ["us-east-1a", "us-east-1b"]},
        "cluster": {"apiAccess": "private", "deployerInVpc": True},
        "nodePools": {"gpu": {"instanceType": "p5.48xlarge", "fabric": "efa", "minSize": 2, "maxSize": 2}},
        "tenants": {"t": {"gpuQuota": 64}},
        "models": {name: model},
    }, stack="contracts")


def image_version(image: str) -> str | None:
    """The vLLM release an image runs, for the kit's own images (None: a pool's own vllmImage)."""
    if image == serving.DEFAULT_VLLM_IMAGE:
        return serving.VLLM_VERSION
    if image.endswith(serving.DEFAULT_EFA_VLLM_IMAGE.rpartition("/")[2]):
        return serving.EFA_VLLM_VERSION
    return None


def vllm_commands() -> list[dict[str, Any]]:
    configs = [(s, stack_config(s)) for s in SHIPPED_STACKS]
    configs += [(f"variant:{name}", _one_model(name, body)) for name, body in VARIANTS.items()]
    out = []
    for where, cfg in configs:
        for model in sorted(cfg.models.values(), key=lambda m: m.name):
            if model.engine != "vllm":
                continue
            image = serving.vllm_image(cfg, model)
            out.append({"where": where, "model": model.name, "image": image, "version": image_version(image),
                        "multi_node": model.multi_node, "path": serving.model_path(model),
                        "args": [*serving.vllm_args(model, tracing=serving.engine_tracing(cfg)),
                                 *shutdown_flags(model)]})
    return out


def main() -> int:
    json.dump(vllm_commands(), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
