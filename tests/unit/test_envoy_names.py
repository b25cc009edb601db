"""Names in the gateway's bootstrap that logs and stats are read by: unique routes in every shipped stack."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from components.k8s.gateway.envoy import config as ec
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
    assert {"assistant.batch", "assistant.batch/path", "assistant.batch/body", "assistant.batch/body/unstreamed",
            "assistant-batch/key-body", "assistant-batch/key-body/unstreamed",
            "assistant-batch/key-body/too-large"} <= names
    assert {n for n in names if n.startswith(ec.REFUSAL_ROUTE_PREFIX)} == {
        f"gateway:{n}" for n in ("method-not-allowed", "connect-not-allowed", "too-large", "unknown-model",
                                 "not-served")}


def test_no_two_routes_share_a_name_whatever_the_workloads_are_called() -> None:
    """Workloads named like another's routes once took their names: `foo-path` and `foo-body` beside `foo`, a model
    `foo-unstreamed`, and model `bar`'s own key beside a workload `bar` of other models. Route names separate their
    parts with characters no DNS label holds (envoy_base.ROUTE_NAME_SEPARATOR); a workload named `gateway` keeps
    clear of the gateway's own refusals (`gateway:`)."""
    model = {"engine": "vllm", "model": "org/model", "toolCallParser": "none", "tenant": "alpha", "pool": "gpu"}
    names = ("foo", "foo-path", "foo-body", "foo-unstreamed", "foo-too-large", "foo-key-body", "gateway")
    models = {n: dict(model) for n in names}
    models["bar"] = {**model, "workload": "baz"}  # a model's own key ...
    models["qux"] = {**model, "workload": "bar"}  # ... and a workload of that name
    models["foo-batch"] = {**model, "workload": "foo", "priority": "batch"}
    cfg = stack_config("onprem", models=models, tenants={"alpha": {"gpuQuota": 16}},
                       nodePools={"gpu": {"instanceType": "dgx-h100"}}, infiniband=None)
    names_ = _route_names(ec.bootstrap(cfg))
    assert [n for n, k in Counter(names_).items() if k > 1] == []
    assert {"foo", "foo/path", "foo/body", "foo-path", "foo-path/path", "foo-body/body", "foo/unstreamed",
            "foo-unstreamed", "foo.batch", "foo-batch/key-body", "bar/body", "bar/key-body", "gateway",
            "gateway/path", "gateway:not-served"} <= set(names_)
    # every name is its subject (a DNS label, or dotted: a batch model or a variant decision), then its parts
    assert all(n.startswith(ec.REFUSAL_ROUTE_PREFIX) or ":" not in n for n in names_)
