"""Names in the gateway's bootstrap that logs and stats are read by: unique routes in every shipped stack."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from components.k8s import envoy_config as ec
from tests.support.stacks import SHIPPED_STACKS, stack_config


def _route_names(bootstrap: dict[str, Any]) -> list[str]:
    """Every named route of every listener's connection manager (the variants' gates included)."""
    return [r["name"] for listener in bootstrap["static_resources"]["listeners"]
            for chain in listener["filter_chains"] for f in chain["filters"]
            for vhost in f["typed_config"].get("route_config", {}).get("virtual_hosts", [])
            for r in vhost["routes"] if "name" in r]


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_route_name_is_unique(stack: str) -> None:
    """The access log's `route` names one route: in prod, workload `assistant`'s batch routes
    (`assistant.batch-body`) and model `assistant-batch`'s own key in the body (`assistant-batch-body`) once had the
    same names, with their twins."""
    names = _route_names(ec.bootstrap(stack_config(stack)))
    assert names and [n for n, k in Counter(names).items() if k > 1] == []


def test_a_batch_models_routes_and_its_own_key_route_differ() -> None:
    names = set(_route_names(ec.bootstrap(stack_config("prod"))))
    assert {"assistant.batch", "assistant.batch-path", "assistant.batch-body", "assistant.batch-body-unstreamed",
            "assistant-batch-body", "assistant-batch-body-unstreamed", "assistant-batch-body-too-large"} <= names
    assert {n for n in names if n.startswith(ec.REFUSAL_ROUTE_PREFIX)} == {
        f"gateway:{n}" for n in ("method-not-allowed", "connect-not-allowed", "too-large", "unknown-model",
                                 "not-served")}
