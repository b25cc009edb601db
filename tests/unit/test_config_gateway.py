"""The gateway's settings (aifactory:gateway): every key is read into the settings, absent ones take their
documented defaults (the `# default:` of each field in infra/config.py; docs/gateway.md, "Requests on a replica
that hangs", for maxEjectionPercent 67; "When every replica is saturated" for panicThresholdPercent 1), and the
replica bounds are checked with the key path.
"""

from __future__ import annotations

from typing import Any

import pytest

from components.k8s.settings import GatewaySettings
from infra.config import ConfigError, parse
from tests.support.stacks import stack_raw

KEYS = ("namespace", "minReplicas", "maxReplicas", "serviceType", "connectTimeoutSeconds", "retries",
        "outlierDetection", "circuitBreakers", "auth", "healthCheck", "requestHeadersTimeoutSeconds",
        "requestTimeoutSeconds", "streamIdleTimeoutSeconds", "idleTimeoutSeconds", "budgetService", "routing")


def _gateway(gateway: dict[str, Any] | None) -> GatewaySettings:
    raw = stack_raw("dev")
    if gateway is None:
        raw.pop("gateway", None)
    else:
        raw["gateway"] = gateway
    return parse(raw, stack="dev").gateway


def _problems(gateway: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as err:
        _gateway(gateway)
    return [str(p) for p in err.value.problems]


def test_every_key_is_read() -> None:
    g = _gateway({"namespace": "edge", "minReplicas": 3, "maxReplicas": 9, "serviceType": "NodePort",
                  "connectTimeoutSeconds": 1.5, "retries": {"attempts": 4, "budgetPercent": 10},
                  "outlierDetection": {"consecutive5xx": 5, "intervalSeconds": 3, "baseEjectionSeconds": 45,
                                       "maxEjectionPercent": 50, "panicThresholdPercent": 20},
                  "circuitBreakers": {"maxConnections": 100, "maxPendingRequests": 50, "maxRequests": 200},
                  "healthCheck": {"intervalSeconds": 1.5, "timeoutSeconds": 1, "unhealthyThreshold": 4,
                                  "healthyThreshold": 5},
                  "requestHeadersTimeoutSeconds": 5, "requestTimeoutSeconds": 120, "streamIdleTimeoutSeconds": 15,
                  "idleTimeoutSeconds": 600, "routing": {}})
    assert (g.namespace, g.min_replicas, g.max_replicas, g.service_type, g.connect_timeout_seconds) == (
        "edge", 3, 9, "NodePort", 1.5)
    assert (g.retries.attempts, g.retries.budget_percent) == (4, 10.0)
    od = g.outlier_detection
    assert (od.consecutive_5xx, od.interval_seconds, od.base_ejection_seconds, od.max_ejection_percent,
            od.panic_threshold_percent) == (5, 3.0, 45.0, 50, 20.0)
    cb = g.circuit_breakers
    assert (cb.max_connections, cb.max_pending_requests, cb.max_requests) == (100, 50, 200)
    hc = g.health_check
    assert (hc.interval_seconds, hc.timeout_seconds, hc.unhealthy_threshold, hc.healthy_threshold) == (1.5, 1.0, 4, 5)
    assert (g.request_headers_timeout_seconds, g.request_timeout_seconds, g.stream_idle_timeout_seconds,
            g.idle_timeout_seconds) == (5.0, 120.0, 15.0, 600.0)


def test_the_lower_bounds_themselves_are_accepted() -> None:
    g = _gateway({"connectTimeoutSeconds": 0.01, "retries": {"budgetPercent": 0, "attempts": 0}})
    assert (g.connect_timeout_seconds, g.retries.budget_percent, g.retries.attempts) == (0.01, 0.0, 0)
    assert _gateway({"connectTimeoutSeconds": 0.5}).connect_timeout_seconds == 0.5


def test_auth_is_read() -> None:
    auth = stack_raw("dev")["gateway"]["auth"]
    [issuer] = _gateway({"auth": auth}).auth.issuers
    assert (issuer.issuer, issuer.jwks_uri, issuer.audiences) == (
        "https://sso.dev.example.com/realms/aifactory",
        "https://sso.dev.example.com/realms/aifactory/protocol/openid-connect/certs", ("aifactory-gateway",))


def test_defaults() -> None:
    """As documented: 2-6 replicas behind a LoadBalancer, 2 s connect timeout, 2 retries within a 20 % budget, ejection
    after 3 consecutive 5xx (2 s interval, 30 s base, at most 67 %, panic under 30 %), 4096/2048/4096 circuit
    breakers, progress checks 2 s apart (8 s timeout, 1 to eject and 2 to return), 10/60/30/300 s timeouts."""
    for g in (_gateway(None), _gateway({})):
        assert (g.namespace, g.min_replicas, g.max_replicas, g.service_type, g.connect_timeout_seconds) == (
            "aifactory-gateway", 2, 6, "LoadBalancer", 2.0)
        assert (g.retries.attempts, g.retries.budget_percent) == (2, 20.0)
        od = g.outlier_detection
        assert (od.consecutive_5xx, od.interval_seconds, od.base_ejection_seconds, od.max_ejection_percent,
                od.panic_threshold_percent) == (3, 2.0, 30.0, 67, 1.0)
        cb = g.circuit_breakers
        assert (cb.max_connections, cb.max_pending_requests, cb.max_requests) == (4096, 2048, 4096)
        hc = g.health_check
        assert (hc.interval_seconds, hc.timeout_seconds, hc.unhealthy_threshold, hc.healthy_threshold) == (
            2.0, 8.0, 1, 2)
        assert (g.request_headers_timeout_seconds, g.request_timeout_seconds, g.stream_idle_timeout_seconds,
                g.idle_timeout_seconds) == (10.0, 60.0, 30.0, 300.0)


@pytest.mark.parametrize(("gateway", "bounds"), [
    ({"minReplicas": 1}, (1, 6)),
    ({"minReplicas": 5}, (5, 6)),
    ({"minReplicas": 8}, (8, 8)),  # maxReplicas defaults to at least minReplicas
    ({"maxReplicas": 1, "minReplicas": 1}, (1, 1)),
])
def test_replica_bounds(gateway: dict[str, Any], bounds: tuple[int, int]) -> None:
    g = _gateway(gateway)
    assert (g.min_replicas, g.max_replicas) == bounds


@pytest.mark.parametrize(("gateway", "problems"), [
    ({"minReplicas": 0}, ["gateway.minReplicas: 0 is below the minimum 1"]),
    ({"maxReplicas": 0}, ["gateway.maxReplicas: 0 is below the minimum 1"]),
    ({"minReplicas": 4, "maxReplicas": 3}, ["gateway.minReplicas: 4 is greater than maxReplicas 3"]),
    ({"minReplicas": "two"}, ["gateway.minReplicas: expected an integer, got a string 'two'"]),
    ({"serviceType": "ExternalName"},
     ["gateway.serviceType: 'ExternalName' is not allowed; choose one of: LoadBalancer, NodePort, ClusterIP"]),
    ({"replicas": 3}, [f"gateway.replicas: unknown key; allowed keys: {', '.join(KEYS)}"]),
    ({"healthCheck": {"intervalSeconds": 2, "timeoutSeconds": 9}},
     ["gateway.healthCheck: unhealthyThreshold x (timeoutSeconds + intervalSeconds) is 11 s, above 10 s: a replica "
      "that stops answering would still get new requests after its pod's preStop wait "
      "(components.k8s.defaults.GATEWAY_DETECTION_SECONDS); lower one of them"]),
    ({"retries": {"tries": 3}}, ["gateway.retries.tries: unknown key; allowed keys: attempts, budgetPercent"]),
    ({"outlierDetection": {"ejections": 3}},
     ["gateway.outlierDetection.ejections: unknown key; allowed keys: consecutive5xx, intervalSeconds, "
      "baseEjectionSeconds, maxEjectionPercent, panicThresholdPercent"]),
    ({"circuitBreakers": {"maxRetries": 3}},
     ["gateway.circuitBreakers.maxRetries: unknown key; allowed keys: maxConnections, maxPendingRequests, "
      "maxRequests"]),
    ({"namespace": "Edge_GW"}, ["gateway.namespace: 'Edge_GW' is not a DNS label (lowercase letters, digits and "
                                "'-', at most 63 characters)"]),
    ({"connectTimeoutSeconds": 0}, ["gateway.connectTimeoutSeconds: 0.0 is below the minimum 0.01"]),
    ({"retries": {"budgetPercent": -1}}, ["gateway.retries.budgetPercent: -1.0 is below the minimum 0"]),
])
def test_bad_gateway_settings_name_the_key(gateway: dict[str, Any], problems: list[str]) -> None:
    assert _problems(gateway) == problems


# (section, key, kind, minimum, maximum or None): the gateway's numeric settings and their documented limits
NUMBERS = [
    ("outlierDetection", "consecutive5xx", int, 1, None),
    ("outlierDetection", "intervalSeconds", float, 0.1, None),
    ("outlierDetection", "baseEjectionSeconds", float, 0.1, None),
    ("outlierDetection", "panicThresholdPercent", float, 0.0, 100.0),
    ("circuitBreakers", "maxConnections", int, 1, None),
    ("circuitBreakers", "maxPendingRequests", int, 1, None),
    ("circuitBreakers", "maxRequests", int, 1, None),
    ("retries", "attempts", int, 0, 10),
    ("retries", "budgetPercent", float, 0.0, 100.0),
    ("healthCheck", "intervalSeconds", float, 0.01, 5.0),
    ("healthCheck", "unhealthyThreshold", int, 1, 10),
    ("healthCheck", "healthyThreshold", int, 1, 10),
    ("", "requestHeadersTimeoutSeconds", float, 0.01, 3600.0),
    ("", "requestTimeoutSeconds", float, 0.01, 3600.0),
    ("", "streamIdleTimeoutSeconds", float, 0.01, 3600.0),
    ("", "idleTimeoutSeconds", float, 1.0, 86400.0),
]


# Beside a health-check key at its limit, the others as small as the preStop contract needs (unhealthyThreshold x
# (timeoutSeconds + intervalSeconds) at most 10 s: components.k8s.defaults.GATEWAY_DETECTION_SECONDS)
CHECK_BASE = {"intervalSeconds": {"unhealthyThreshold": 1}, "unhealthyThreshold": {"intervalSeconds": 0.01}}


def _set(section: str, key: str, value: Any) -> dict[str, Any]:
    if not section:
        return {key: value}
    base = CHECK_BASE.get(key, {}) if section == "healthCheck" else {}
    return {section: {**base, key: value}}


@pytest.mark.parametrize(("section", "key", "kind", "lo", "hi"), NUMBERS,
                         ids=lambda x: x if isinstance(x, str) else None)
def test_numeric_settings_accept_their_limits_and_refuse_past_them_naming_the_key(
        section: str, key: str, kind: type, lo: float, hi: float | None) -> None:
    path = f"gateway.{section}.{key}" if section else f"gateway.{key}"
    for limit in (lo, hi):
        if limit is not None:
            _gateway(_set(section, key, kind(limit)))  # the limits themselves are accepted
    below = lo - 1 if kind is int else (lo / 2 if lo else -1.0)
    assert _problems(_set(section, key, kind(below))) == [f"{path}: {kind(below)!r} is below the minimum {lo:g}"]
    if hi is not None:
        above = hi + 1 if kind is int else hi * 2
        assert _problems(_set(section, key, kind(above))) == [
            f"{path}: {kind(above)!r} is above the maximum {hi:g}"]
