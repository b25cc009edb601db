"""The synthetic exporter data is built from the upstream fixtures, and the kit's names agree with them.

The known-answer tests (test_dashboards.py, test_rules.py) query data that tests.support.synthetic writes under
the names, types and labels of tests/fixtures/metrics/*.yaml (each recorded from the exporter's source at the
pinned version). So a family renamed in telemetry/names.py, or a gauge the kit reads as a counter, is wrong on
the kit's side only: its panels read nothing or the wrong number, and these tests name it.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict

import pytest

import dashboards
from dashboards.config import ObservabilityConfig
from infra.monitoring import from_platform
from infra.synth import load_stack
from telemetry.names import DCGM, SGLANG, TRITON, VLLM
from tests.support import upstream
from tests.support.promql_uses import uses
from tests.support.synthetic import SCRAPE_LABELS, Synthetic, _Writer, generate

NODES = {"h100-block": 4, "h200": 2, "l40s": 1}
SAMPLE = re.compile(r"^(?P<name>[^{ ]+)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+) (?P<t>\d+)$")
LABEL = re.compile(r'(\w+)="[^"]*"')
RATE_FUNCTIONS = frozenset({"rate", "irate", "increase"})
SUFFIXES = ("_bucket", "_sum", "_count")


@pytest.fixture(scope="module")
def prod() -> ObservabilityConfig:
    return from_platform(load_stack("prod"))


@pytest.fixture(scope="module")
def data(prod: ObservabilityConfig) -> Synthetic:
    return generate(prod, nodes=NODES, start=int(time.time()) // 3600 * 3600 - 5 * 3600, minutes=10, step=60)


def _family(name: str) -> tuple[upstream.Family, str]:
    """The recorded family of one exposed series name, and the histogram suffix it carries ("" for none)."""
    for suffix in ("", *SUFFIXES):
        base = name.removesuffix(suffix) if suffix else name
        found = upstream.families().get(base)
        if found is not None and (suffix == "" or found.kind == "histogram"):
            return found, suffix
    raise AssertionError(f"{name}: no upstream family")


def test_every_exporter_series_is_an_upstream_family_written_as_its_type(data: Synthetic) -> None:
    """Each DCGM/vLLM/Triton series in the synthetic data is a recorded family: a counter never falls, a histogram is
    written as _bucket/_sum/_count, and its labels are the exporter's (or the scrape's)."""
    values: dict[str, list[float]] = defaultdict(list)
    for line in data.openmetrics.splitlines():
        if (m := SAMPLE.match(line)) and upstream.is_upstream(m["name"]):
            values[f'{m["name"]}{{{m["labels"] or ""}}}'].append(float(m["value"]))
    assert values, "no exporter series"
    kinds = set()
    for key, series in values.items():
        name = key.partition("{")[0]
        fam, suffix = _family(name)
        kinds.add(fam.kind)
        labels = set(LABEL.findall(key)) - SCRAPE_LABELS - ({"le"} if suffix == "_bucket" else set())
        assert {k for k in labels if not k.startswith("aifactory_io_")} <= fam.labels, key
        if fam.kind == "counter":
            assert series == sorted(series), f"{key} falls: not a counter"
        if fam.kind == "histogram":
            assert suffix, f"{key}: a histogram family written without _bucket/_sum/_count"
    assert kinds == {"counter", "gauge", "histogram"}
    # DCGM power is a level in watts, as upstream types it (a busy GPU: 100 + 5 x 60 = 400 W, every sample)
    power = [v for k, v in values.items() if k.startswith("DCGM_FI_DEV_POWER_USAGE{")]
    assert {tuple(set(v)) for v in power} == {(100 + 5 * 60.0,), (100 + 5 * 3.0,), (100.0,)}


def test_a_family_under_another_name_type_or_label_is_refused() -> None:
    """The generator cannot drift from the fixtures: a gauge written as a counter, a name upstream does not emit
    and a label the exporter does not set are errors naming the fixture."""
    w = _Writer([0, 60])
    with pytest.raises(ValueError, match="DCGM_FI_DEV_POWER_USAGE: written as a counter, but it is a gauge upstream"):
        w.counter("DCGM_FI_DEV_POWER_USAGE", {"gpu": "0"}, 1.0)
    with pytest.raises(KeyError, match=r"vllm:generation_tokens: no such family in .*vllm\.yaml"):
        w.level("vllm:generation_tokens", {"model_name": "m"}, 1.0)
    with pytest.raises(ValueError, match="labels model_name are not the exporter's"):
        w.level("nv_inference_count", {"model_name": "m"}, 1.0)
    with pytest.raises(ValueError, match="written as a counter, but it is a gauge upstream"):
        w.counter("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", {}, 1.0)  # declared counter, a throughput (semantics)


def _read_as(prod: ObservabilityConfig) -> dict[str, set[str]]:
    """name -> the kinds the kit's panels and rules read it as: through rate()/increase() a counter, by its
    _bucket/_sum/_count a histogram, otherwise a gauge."""
    exprs = [e for d in dashboards.build(prod).values() for _, e in dashboards.queries(d)]
    exprs += [r["expr"] for g in dashboards.prometheus_rules(prod)["groups"]
              for r in g["rules"]]
    out: dict[str, set[str]] = defaultdict(set)
    for expr in exprs:
        for use in uses(expr):
            if not upstream.is_upstream(use.name):
                continue
            base = next((use.name.removesuffix(s) for s in SUFFIXES if use.name.endswith(s)), use.name)
            kind = ("histogram" if base != use.name and upstream.families().get(base) is not None
                    else "counter" if use.range_function in RATE_FUNCTIONS else "gauge")
            out[base if kind == "histogram" else use.name].add(kind)
    return out


def test_the_kits_exporter_names_are_upstream_families_of_the_type_it_reads_them_as(
        prod: ObservabilityConfig, data: Synthetic) -> None:
    """Every DCGM/vLLM/Triton/SGLang name in telemetry/names.py is a recorded family; each one the kit's panels and
    rules read is read as the type upstream gives it (vllm:generation_tokens_total a counter,
    DCGM_FI_DEV_POWER_USAGE a gauge), and the synthetic data the known-answer tests query has it."""
    names = {f"{cls.__name__}.{attr}": value for cls in (DCGM, VLLM, TRITON, SGLANG)
             for attr, value in vars(cls).items()
             if isinstance(value, str) and upstream.is_upstream(value)}
    assert len(names) > 50
    assert sorted(k for k, v in names.items() if v not in upstream.families()) == []
    read = _read_as(prod)
    assert {n: kinds for n, kinds in read.items() if kinds != {upstream.family(n).kind}} == {}
    written = {m["name"] for line in data.openmetrics.splitlines() if (m := SAMPLE.match(line))}
    exposed = {n for n in written} | {n.removesuffix(s) for n in written for s in SUFFIXES if n.endswith(s)}
    assert sorted(set(read) - exposed) == []
    assert set(read) <= set(names.values())
