"""Bounds of the gateway's numeric settings: a value outside them is a clear error naming the key path, the value
and the limit, never a config handed to Envoy that means something else.

Envoy's outlier detection ejects at most `max_ejection_percent` of a cluster's hosts (envoy.config.cluster.v3.
OutlierDetection; default 10): above 100 the number is not a percentage of anything, so the kit refuses it
rather than letting a typo (500 for 50) eject every replica of a model.
"""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import ConfigError, parse
from tests.support.stacks import stack_raw

OD = "gateway.outlierDetection"


def gateway_problems(gateway: dict[str, Any]) -> list[str]:
    raw = stack_raw("dev")
    raw["gateway"] = gateway
    with pytest.raises(ConfigError) as err:
        parse(raw, stack="dev")
    return [str(p) for p in err.value.problems]


def accepted(gateway: dict[str, Any]) -> Any:
    raw = stack_raw("dev")
    raw["gateway"] = gateway
    return parse(raw, stack="dev").gateway


@pytest.mark.parametrize(("value", "message"), [
    (101, f"{OD}.maxEjectionPercent: 101 is above the maximum 100"),
    (500, f"{OD}.maxEjectionPercent: 500 is above the maximum 100"),
    (0, f"{OD}.maxEjectionPercent: 0 is below the minimum 1"),
])
def test_max_ejection_percent_outside_1_to_100_is_refused(value: int, message: str) -> None:
    """maxEjectionPercent is a percentage of the cluster's hosts: 1..100."""
    assert gateway_problems({"outlierDetection": {"maxEjectionPercent": value}}) == [message]


@pytest.mark.parametrize("value", [1, 100])
def test_max_ejection_percent_limits_are_accepted(value: int) -> None:
    assert accepted({"outlierDetection": {"maxEjectionPercent": value}}).outlier_detection.max_ejection_percent == value


@pytest.mark.parametrize(("gateway", "message"), [
    ({"retries": {"attempts": 11}}, "gateway.retries.attempts: 11 is above the maximum 10"),
    ({"retries": {"attempts": -1}}, "gateway.retries.attempts: -1 is below the minimum 0"),
    ({"retries": {"budgetPercent": 100.5}}, "gateway.retries.budgetPercent: 100.5 is above the maximum 100"),
    ({"connectTimeoutSeconds": 61}, "gateway.connectTimeoutSeconds: 61.0 is above the maximum 60"),
    ({"outlierDetection": {"consecutive5xx": 0}}, f"{OD}.consecutive5xx: 0 is below the minimum 1"),
])
def test_other_gateway_bounds_name_key_value_and_limit(gateway: dict[str, Any], message: str) -> None:
    """Retry attempts 0..10, retry budget 0..100 %, connect timeout up to 60 s, ejection after at least one 5xx."""
    assert gateway_problems(gateway) == [message]
