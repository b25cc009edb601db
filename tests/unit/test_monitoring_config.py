"""Monitoring's own args: an ObservabilityConfig a platform team builds by hand is checked before anything is
built, every invalid value at once with its property path; the shipped stacks' configs have none."""

import dataclasses

import pulumi
import pytest

from dashboards.config import Objective, ObservabilityConfig, Pool, ServedModel, VariantCost
from dashboards.deploy import check_config
from infra.monitoring import from_platform
from infra.synth import load_stack


def _hand_built() -> ObservabilityConfig:
    return ObservabilityConfig(
        stack="ml", namespace="monitoring", pools=(Pool("l40s", "g6e.12xlarge", 4, 10.49),),
        models=(ServedModel("llama-8b", "vllm", "chat", "l40s", 0.5, 0.05, 20.0, 5, 0.1),), tenants=("chat",),
        log_namespaces=("chat",), objectives=(Objective(None, 30.0, 0.99, 0.995),), idle_gpu_utilization_percent=10.0)


@pytest.mark.parametrize("stack", ["dev", "staging", "prod", "onprem"])
def test_the_shipped_stacks_configs_are_valid(stack: str) -> None:
    check_config("monitoring", from_platform(load_stack(stack)))


def test_a_hand_built_config_is_valid_and_every_bad_value_is_named_at_once() -> None:
    good = _hand_built()
    check_config("monitoring", good)
    bad = dataclasses.replace(
        good, namespace="Monitoring", pools=(Pool("l40s", "g6e.12xlarge", 0, -1.0, (7200, 3600)),),
        models=(ServedModel("llama-8b", "vllm", "chta", "l4", 0.5, 0.05, 0.0, 0, 0.1, -1),),
        objectives=(Objective("chat", 30.0, 1.0, 0.995),), idle_gpu_utilization_percent=110.0,
        variants=(VariantCost("chat", "llama-8b", -0.01, True),))
    with pytest.raises(pulumi.InputPropertiesError) as err:
        check_config("monitoring", bad)
    assert [(e["property_path"], e["reason"]) for e in err.value.errors] == [
        ("config.namespace", "'Monitoring' is not a namespace (a DNS label)"),
        ("config.pools[0].gpusPerNode", "0 is below 1"),
        ("config.pools[0].nodePricePerHour", "-1.0 is below 0"),
        ("config.pools[0].window", "(7200, 3600) does not end after it starts (UTC epoch seconds: start, stop)"),
        ("config.models[0].pool", "'l4' is not a pool; pools: l40s"),
        ("config.models[0].tenant", "'chta' is not one of tenants"),
        ("config.models[0].e2eSeconds", "0.0 is not above 0"),
        ("config.models[0].targetQueueDepth", "0 is below 1"),
        ("config.models[0].minReplicas", "-1 is below 0"),
        ("config.objectives", "must end with the default objective (workflow None), which every other workflow is "
                              "held to"),
        ("config.objectives[0].latencyTarget", "1.0 is not a fraction between 0 and 1 (exclusive)"),
        ("config.idleGpuUtilizationPercent", "110.0 is not a percentage (0 to 100)"),
        ("config.variants[0].costPerRequest", "-0.01 is below 0"),
    ]


def test_a_capacity_blocks_pool_has_nodes_from_its_start_until_it_scales_to_zero_and_replicas_min_carries() -> None:
    """prod's h100-block: 2026-12-01T11:30:00Z to 2026-12-15T11:30:00Z, scaled to zero drainMinutes (default 60)
    before its end (components/aws/node_pool.py's scheduled actions); the on-demand pools have no window."""
    cfg = from_platform(load_stack("prod"))
    assert {p.name: p.window for p in cfg.pools} == {
        "h100-block": (1796124600, 1796124600 + 14 * 86400 - 3600), "h200": None, "l40s": None}
    assert {m.name: m.min_replicas for m in cfg.models}["assistant-fast"] == 2
