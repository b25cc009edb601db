"""The *Compound latency* dashboard's row "Latency, cost and fidelity per variant": each panel's query, run by a
real Prometheus over backfilled data whose answer is known (histogram buckets that put each variant's p95 at a
computed point, fidelity scores pushed an hour before the query, as an evaluation Job leaves them)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

import dashboards
from dashboards.config import ObservabilityConfig
from infra.config import parse
from infra.monitoring import from_platform
from infra.synth import load_stack, raw_for_validation
from tests.support.prometheus import PrometheusServer, backfill
from tests.unit.test_fidelity_eval import STACK

pytestmark = pytest.mark.slow

STEP = 15
MINUTES = 70  # the fidelity points are pushed at the start: over an hour before the query
RATE = 10.0  # requests per second to each variant
# (upper bound ms, share of requests at or below it): p95 by linear interpolation inside the bucket holding it
BUCKETS = {
    "chat-bf16": ((250, 0.5), (500, 0.9), (1000, 1.0)),  # p95 = 500 + 500 x (0.95 - 0.9) / 0.1 = 750 ms
    "chat-good": ((1000, 0.5), (2000, 1.0)),  # 1000 + 1000 x 0.45 / 0.5 = 1900 ms
    "chat-bad": ((2000, 0.8), (4000, 1.0)),  # 2000 + 2000 x 0.15 / 0.2 = 3500 ms
}
P95_MS = {"chat-bf16": 750.0, "chat-good": 1900.0, "chat-bad": 3500.0}
SCORES = {"chat-bf16": (0.95, 0.0), "chat-good": (0.94, 0.024), "chat-bad": (0.80, 0.194)}  # (score, drop bound)


@pytest.fixture(scope="module")
def obs() -> ObservabilityConfig:
    raw = raw_for_validation({k: json.dumps(v) for k, v in STACK.items()})
    return from_platform(parse(raw, stack="t"))


def _openmetrics(start: int, end: int) -> str:
    lines = ["# TYPE envoy_cluster_upstream_rq_time histogram"]
    for variant, buckets in BUCKETS.items():
        series = [(f'le="{le}.0"', share) for le, share in buckets] + [('le="+Inf"', 1.0)]
        for t in range(start, end + 1, STEP):
            n = RATE * (t - start)
            for le, share in series:
                lines.append(f'envoy_cluster_upstream_rq_time_bucket{{envoy_cluster_name="{variant}",{le}}} '
                             f"{n * share:g} {t}")
            lines.append(f'envoy_cluster_upstream_rq_time_count{{envoy_cluster_name="{variant}"}} {n:g} {t}')
            lines.append(f'envoy_cluster_upstream_rq_time_sum{{envoy_cluster_name="{variant}"}} {n * 500:g} {t}')
    for metric, index in (("aifactory_fidelity_score", 0), ("aifactory_fidelity_drop_bound", 1)):
        lines.append(f"# TYPE {metric} gauge")
        for variant, values in SCORES.items():
            # pushed once, over an hour before the query; the Collector's Prometheus exporter stops exposing a point
            # 5 minutes after its last update (prometheusexporter README, `metric_expiration` default 5m), so the
            # panel must look back (last_over_time) rather than at the current sample
            lines.append(f'{metric}{{workload="chat",variant="{variant}",suite="chat-arith"}} {values[index]} '
                         f"{start}")
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer, int]]:
    work = tmp_path_factory.mktemp("trilemma")
    start = (int(time.time()) - 5 * 3600) // 3600 * 3600  # clear of the head block's last 3 hours
    end = start + MINUTES * 60
    backfill(_openmetrics(start, end), work / "tsdb", workdir=work)
    with PrometheusServer(work / "server", tsdb=work / "tsdb") as server:
        yield server, end


def _panel(obs: ObservabilityConfig, title: str) -> list[str]:
    board = dashboards.build(obs)["compound-latency"]
    return [e for t, e in dashboards.queries(board) if t == title]


def _by(server: PrometheusServer, expr: str, at: int, *labels: str) -> dict[tuple[str, ...], float]:
    return {tuple(r["metric"][k] for k in labels): float(r["value"][1]) for r in server.query(expr, at)}


def test_the_row_has_latency_cost_and_fidelity_side_by_side(obs: ObservabilityConfig) -> None:
    titles = [t for t, _ in dashboards.queries(dashboards.build(obs)["compound-latency"])]
    i = titles.index("Latency p95 by variant")
    assert titles[i:i + 4] == ["Latency p95 by variant", "Cost per request by variant",
                               "Fidelity by variant (last evaluation)", "Fidelity by variant (last evaluation)"]
    # a stack without variants has no such row
    plain = dashboards.build(from_platform(load_stack("dev")))["compound-latency"]
    assert "Latency p95 by variant" not in [t for t, _ in dashboards.queries(plain)]


def test_latency_is_each_variants_p95(obs: ObservabilityConfig, prom: tuple[PrometheusServer, int]) -> None:
    server, end = prom
    (expr,) = _panel(obs, "Latency p95 by variant")
    got = _by(server, expr, end, "envoy_cluster_name")
    assert got == pytest.approx({(v,): ms for v, ms in P95_MS.items()})


def test_cost_is_each_variants_configured_cost_per_request(obs: ObservabilityConfig,
                                                            prom: tuple[PrometheusServer, int]) -> None:
    server, end = prom
    (expr,) = _panel(obs, "Cost per request by variant")
    # STACK's costPerRequest values (tests/unit/test_fidelity_eval.py)
    assert _by(server, expr, end, "workload", "variant") == {("chat", "chat-bf16"): 0.004,
                                                               ("chat", "chat-good"): 0.002,
                                                               ("chat", "chat-bad"): 0.001}


def test_fidelity_is_the_last_evaluation_long_after_it_was_pushed(obs: ObservabilityConfig,
                                                                  prom: tuple[PrometheusServer, int]) -> None:
    server, end = prom
    score, bound = _panel(obs, "Fidelity by variant (last evaluation)")
    assert _by(server, score, end, "variant") == {(v,): s for v, (s, _) in SCORES.items()}
    assert _by(server, bound, end, "variant") == {(v,): b for v, (_, b) in SCORES.items()}
