"""The session affinity panels (dashboards/affinity.py, issue 34) on the generated serving dashboard, against a real
Prometheus, with known answers (tests/artifacts/panel_answers.py ANSWERED_ELSEWHERE points here).

Data, counters at constant rates (every 5-minute rate exact) and constant gauges, worked by hand:

- model `chat`, three replicas: prefix-cache queries 100 tokens/s each, hits 90, 60 and 30/s -> hit rates 0.9,
  0.6, 0.3; finished requests 5, 3 and 2/s -> shares 0.5, 0.3, 0.2; requests running 6, 3, 3 -> busiest 6 over
  the mean 4 = 1.5.
- model `solo`, one replica: queries 10/s, hits 5/s -> 0.5; its requests are all its own (share 1); running 2
  -> 1.0.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import dashboards
from dashboards import affinity, serving
from infra.config import parse
from infra.monitoring import from_platform
from telemetry.names import VLLM
from tests.artifacts.test_envoy_affinity_live import RAW
from tests.support.prometheus import PrometheusServer, serve_recent

STEP_S = 60
MINUTES = 30
# model -> per replica: (prefix queries/s, prefix hits/s, finished requests/s, requests running)
DATA = {"chat": [(100.0, 90.0, 5.0, 6.0), (100.0, 60.0, 3.0, 3.0), (100.0, 30.0, 2.0, 3.0)],
        "solo": [(10.0, 5.0, 1.0, 2.0)]}


def _openmetrics(times: list[int]) -> str:
    lines: list[str] = []
    for model, replicas in DATA.items():
        for i, (queries, hits, done, running) in enumerate(replicas):
            labels = f'{VLLM.L_MODEL}="{model}",pod="{model}-{i}",namespace="alpha",job="{model}"'
            for name, extra, per_s in ((VLLM.PREFIX_QUERIES, "", queries), (VLLM.PREFIX_HITS, "", hits),
                                       (VLLM.REQUEST_SUCCESS, ',finished_reason="stop"', done)):
                lines.extend(f"{name}{{{labels}{extra}}} {per_s * (t - times[0] + 3600)!r} {t}" for t in times)
            lines.extend(f"{VLLM.RUNNING}{{{labels}}} {running!r} {t}" for t in times)
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer, int]]:
    work = tmp_path_factory.mktemp("affinity-panels")
    with serve_recent(work, _openmetrics, minutes=MINUTES, step_s=STEP_S) as served:
        yield served


def _serving_row(title: str) -> list[tuple[str, str]]:
    """(title, query) of each panel of the serving dashboard's row `title`, as the dashboards are generated."""
    doc = json.loads(dashboards.dashboard_json(dashboards.build(from_platform(parse(RAW, stack="affinity")))
                                               ["serving"]))
    out: list[tuple[str, str]] = []
    row = None
    for p in doc["panels"]:
        if p["type"] == "row":
            row = p["title"]
        elif row == title:
            out.extend((p["title"], t["expr"]) for t in p["targets"])
    return out


def test_the_panels_are_on_the_serving_dashboard_after_the_prefix_cache_hit_rate() -> None:
    """The generated serving dashboard's vLLM row has the three panels, with their queries, right after the
    model-wide prefix cache hit rate."""
    cfg = from_platform(parse(RAW, stack="affinity"))
    row = _serving_row("vLLM")
    at = [t for t, _ in row].index(serving.AFFINITY_AFTER) + 1
    assert row[at:at + 3] == [(p.title, p.targets[0].expr) for p in affinity.panels(cfg)]
    assert [t for t, _ in row[at:at + 3]] == ["Prefix cache hit rate per replica", "Requests per replica",
                                              "Busiest replica over the mean"]


def _values(prom: tuple[PrometheusServer, int], title: str) -> dict[tuple[str, ...], float]:
    """The serving dashboard's panel `title` (the $model variable on All) at the end of the data."""
    server, at = prom
    [expr] = [e for t, e in _serving_row("vLLM") if t == title]
    rows = server.query(expr.replace("$model", ".*"), at)
    return {tuple(r["metric"].get(k, "") for k in (VLLM.L_MODEL, "pod") if k in r["metric"]): float(r["value"][1])
            for r in rows}


def test_prefix_cache_hit_rate_per_replica(prom: tuple[PrometheusServer, int]) -> None:
    assert _values(prom, "Prefix cache hit rate per replica") == pytest.approx({
        ("chat", "chat-0"): 0.9, ("chat", "chat-1"): 0.6, ("chat", "chat-2"): 0.3, ("solo", "solo-0"): 0.5},
        rel=1e-9)


def test_requests_per_replica_are_shares_of_the_model(prom: tuple[PrometheusServer, int]) -> None:
    assert _values(prom, "Requests per replica") == pytest.approx({
        ("chat", "chat-0"): 0.5, ("chat", "chat-1"): 0.3, ("chat", "chat-2"): 0.2, ("solo", "solo-0"): 1.0},
        rel=1e-9)


def test_busiest_replica_over_the_mean(prom: tuple[PrometheusServer, int]) -> None:
    assert _values(prom, "Busiest replica over the mean") == pytest.approx({("chat",): 1.5, ("solo",): 1.0},
                                                                          rel=1e-9)
