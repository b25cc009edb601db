"""The ticket (warning) burn-rate windows, each pair alone, under the real promtool and the rules file synth writes.

Google SRE workbook ("Alerting on SLOs", multiwindow multi-burn-rate, 30-day SLO): ticket when the 2h AND 1d
windows burn faster than 3x the error budget, or the 6h AND 3d windows faster than 1x. The warning alert is the
OR of the two pairs, so a case where both pairs hold cannot tell a wrong factor in one of them: each case here
makes exactly one pair hold (or neither), with no page window over its threshold.

Known answers are computed by hand from the series below (runs and failed runs per minute, segment by segment);
the dev stack's `demo-agent` workflow leaves availabilityTarget at its documented default, 0.995 (infra/config.py
`# default: 99.5% of workflows succeed`), so the budget is 0.005: 2h/1d threshold 0.015, 6h/3d threshold 0.005.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.artifacts import ArtifactContext
from infra.synth import read_stack_config, run_program, stack_file
from infra.writers.dashboards import RULES_FILE, write_rules
from tests.support.prometheus import promtool

BUDGET = 0.005
STEP_MINUTES = 10  # samples and rule evaluations every 10 minutes: a day of data stays quick to evaluate
LABELS = {"workflow": "demo-agent", "tenant": "demo"}
ALERT = "WorkflowErrorBudgetBurn"
COUNT = "aifactory_workflow_duration_seconds_count"

Segment = tuple[int, float, float]  # (minutes, runs per minute, fraction of runs that fail)


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The rules file `aifactory synth dev` writes (build/dev/rules/aifactory.rules.yaml)."""
    out = tmp_path_factory.mktemp("synth")
    ctx = ArtifactContext(result=run_program("dev", read_stack_config(stack_file("dev"))), out=out)
    [path] = [p for p in write_rules(ctx) if p.name == RULES_FILE]
    return path


def _counter(segments: Sequence[Segment], *, failed: bool) -> str:
    """promtool notation, one sample every STEP_MINUTES, from 0: the failed (or succeeded) runs."""
    out, value = ["0"], 0.0
    for minutes, runs, fail in segments:
        per_step = runs * STEP_MINUTES * (fail if failed else 1 - fail)
        out.append(f"{value + per_step:g}+{per_step:g}x{minutes // STEP_MINUTES - 1}")
        value += per_step * minutes / STEP_MINUTES
    return " ".join(out)


def _window_ratio(segments: Sequence[Segment], *, end: int, minutes: int) -> float:
    """Failed / all runs in (end - minutes, end]: the hand computation the cases are designed with."""
    failed = total = 0.0
    start = 0
    for length, runs, fail in segments:
        lo, hi = max(start, end - minutes), min(start + length, end)
        if hi > lo:
            failed += (hi - lo) * runs * fail
            total += (hi - lo) * runs
        start += length
    return failed / total


_TEMPLATE = re.compile(r"\{\{\s*(.*?)\s*\}\}")


def _render(text: str, labels: dict[str, str], value: float) -> str:
    """The three template forms the SLO alerts use (Prometheus humanizePercentage: %.4g of value * 100)."""
    def one(m: re.Match[str]) -> str:
        expr = m.group(1)
        if expr.startswith("$labels."):
            return labels[expr.removeprefix("$labels.")]
        assert expr == "$value | humanizePercentage", expr
        return f"{value * 100:.4g}%"
    return _TEMPLATE.sub(one, text)


def _warning(rules: dict[str, Any], value: float) -> dict[str, Any]:
    [rule] = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == ALERT
              and r["labels"] == {"objective": "demo-agent", "severity": "warning", "slo": "availability"}]
    labels = {**LABELS, **rule["labels"]}
    return {"exp_labels": labels,
            "exp_annotations": {k: _render(v, labels, value) for k, v in rule["annotations"].items()}}


def _case(rules: dict[str, Any], segments: Sequence[Segment], *, fires: bool) -> dict[str, Any]:
    end = sum(m for m, _, _ in segments)
    short = _window_ratio(segments, end=end, minutes=120)
    series = {f'{COUNT}{{workflow="demo-agent", tenant="demo", status="error"}}': _counter(segments, failed=True),
              f'{COUNT}{{workflow="demo-agent", tenant="demo", status="ok"}}': _counter(segments, failed=False)}
    return {"interval": f"{STEP_MINUTES}m",
            "input_series": [{"series": s, "values": v} for s, v in series.items()],
            "alert_rule_test": [{"eval_time": f"{end}m", "alertname": ALERT,
                                 "exp_alerts": [_warning(rules, short)] if fires else []}]}


# 18h of runs failing at 8x budget, 4h of heavy good traffic, then 3h failing at `last` x budget: at the end the
# 2h window reads `last` x budget and the 1d window about 4.1x, while the 6h window, diluted by the good hours,
# stays under 1x (so the 6h/3d pair is false) and 30m/5m stay under the page factors (6x, 14.4x).
def _two_hour_segments(last: float) -> list[Segment]:
    return [(18 * 60, 100, 8 * BUDGET), (4 * 60, 400, 0.0), (3 * 60, 100, last * BUDGET)]


# Seven hours failing at a steady `rate` x budget: every window reads the same ratio.
def _six_hour_segments(rate: float) -> list[Segment]:
    return [(7 * 60, 100, rate * BUDGET)]


def test_the_cases_make_exactly_one_ticket_pair_hold() -> None:
    """The hand computation behind each case: which windows are over which threshold at the evaluation time."""
    def ratios(segments: list[Segment]) -> dict[str, float]:
        end = sum(m for m, _, _ in segments)
        return {w: _window_ratio(segments, end=end, minutes=m) / BUDGET
                for w, m in (("5m", 5), ("30m", 30), ("1h", 60), ("2h", 120), ("6h", 360), ("1d", 1440),
                             ("3d", 4320))}

    fire = ratios(_two_hour_segments(4))
    assert (fire["2h"], round(fire["1d"], 2), fire["6h"]) == (pytest.approx(4), 4.11, pytest.approx(0.8))
    assert max(fire["5m"], fire["1h"]) < 14.4 and fire["30m"] < 6
    assert ratios(_two_hour_segments(2.5))["2h"] == pytest.approx(2.5)
    assert all(r == pytest.approx(1.5) for r in ratios(_six_hour_segments(1.5)).values())


def test_ticket_windows_fire_alone_and_stay_silent_below_their_factor(rules_file: Path, tmp_path: Path) -> None:
    """2h/1d over 3x (6h/3d under 1x): the ticket fires; 2h at 2.5x: silent. 6h/3d at 1.5x (2h/1d under 3x):
    fires; at 0.8x: silent. Each firing case fails if its pair's factor is wrong (e.g. 3 -> 30)."""
    rules = yaml.safe_load(rules_file.read_text())
    tests = [_case(rules, _two_hour_segments(4), fires=True), _case(rules, _two_hour_segments(2.5), fires=False),
             _case(rules, _six_hour_segments(1.5), fires=True), _case(rules, _six_hour_segments(0.8), fires=False)]
    (tmp_path / RULES_FILE).write_bytes(rules_file.read_bytes())
    test_file = tmp_path / "burn-rate-test.yaml"
    test_file.write_text(yaml.safe_dump({
        "rule_files": [RULES_FILE], "evaluation_interval": f"{STEP_MINUTES}m",
        "group_eval_order": [g["name"] for g in rules["groups"]], "tests": tests}, sort_keys=False))
    res = promtool("test", "rules", str(test_file))
    assert res.returncode == 0, (res.stdout + res.stderr)[-6000:]
    assert "SUCCESS" in res.stdout
