"""The shipped stacks as tests use them: names, raw `aifactory:*` values, validated configs."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from infra.config import PlatformConfig, parse
from infra.synth import load_stack, raw_for_validation, read_stack_config, shipped_stacks, stack_file

__all__ = ["SHIPPED_STACKS", "stack_raw", "stack_config", "prod_without_variants"]

SHIPPED_STACKS = shipped_stacks()


def stack_raw(stack: str) -> dict[str, Any]:
    """A shipped stack's `aifactory:*` values (keys without the namespace), a fresh copy to mutate."""
    return copy.deepcopy(_raw(stack))


@cache
def _raw(stack: str) -> dict[str, Any]:
    return raw_for_validation(read_stack_config(stack_file(stack)))


@cache
def _config(stack: str) -> PlatformConfig:
    return load_stack(stack)


def stack_config(stack: str, **overrides: Any) -> PlatformConfig:
    """A shipped stack's PlatformConfig; top-level `overrides` replace keys before validation."""
    if not overrides:
        return _config(stack)
    return parse({**stack_raw(stack), **overrides}, stack=stack)


@cache
def prod_without_variants() -> PlatformConfig:
    """prod with each workload of variants as one plain model: finance-8b (AWQ) without its variant settings and
    without the unquantised baseline finance-8b-bf16; assistant-fast without its variant settings and without the
    on-demand assistant-steady (and embed-rerank's call rights for it); no routing. The tests of plain model routes
    use it; the variants' routing is tested on its own (tests/unit/test_envoy_variants.py, test_fidelity_eval.py,
    tests/artifacts/test_envoy_variants_block_live.py)."""
    raw = stack_raw("prod")
    models = {k: v for k, v in raw["models"].items() if k not in ("finance-8b-bf16", "assistant-steady")}
    models["finance-8b"] = {k: v for k, v in models["finance-8b"].items() if k not in ("variant", "slo")}
    models["assistant-fast"] = {k: v for k, v in models["assistant-fast"].items() if k != "variant"}
    rerank = models["embed-rerank"]
    models["embed-rerank"] = {**rerank, "callers": [c for c in rerank["callers"] if c != "assistant-steady"]}
    gateway = {k: v for k, v in raw["gateway"].items() if k != "routing"}
    return parse({**raw, "models": models, "gateway": gateway}, stack="prod")
