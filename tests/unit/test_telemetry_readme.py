"""docs/telemetry.md is true: its decorator example runs as written, and its metrics table lists
every metric the kit emits with its Prometheus name, type and labels (telemetry/names.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from telemetry import names

PAGE = Path(__file__).resolve().parents[2] / "docs" / "telemetry.md"


def section() -> str:
    return PAGE.read_text()


def test_the_decorator_example_runs_and_its_trace_can_be_seen_locally(tmp_path: Path) -> None:
    """The first python block, run as a script with OTEL_TRACES_EXPORTER=console (what the page says to do to
    see a trace locally): it names nothing it does not define, and prints the workflow's spans."""
    example = re.findall(r"```python\n(.*?)```", section(), flags=re.S)[0]
    script = tmp_path / "agent.py"
    script.write_text(example)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="none")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False,
                         env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[-1] == "answered from 2 searches (2 headers sent)"
    spans = [json.loads(chunk + "}") for chunk in "\n".join(lines[:-1]).split("\n}") if chunk.strip()]
    assert sorted(s["name"] for s in spans) == ["chat llama-3-70b", "execute_tool search-kb", "execute_tool search-kb",
                                                "invoke_workflow answer-ticket", "plan plan"]
    workflow = next(s for s in spans if s["name"] == "invoke_workflow answer-ticket")
    assert {s["context"]["trace_id"] for s in spans} == {workflow["context"]["trace_id"]}
    assert {s["parent_id"] for s in spans if s is not workflow} == {workflow["context"]["span_id"]}
    assert res.stderr == ""


def test_the_metrics_table_lists_every_metric_the_kit_emits() -> None:
    rows = {}
    for line in section().splitlines():
        cells = [c.strip() for c in line.replace("\\|", "/").strip().strip("|").split("|")]  # \| in a cell
        if len(cells) == 4 and cells[0].startswith("`") and cells[1].startswith("`") and "_" in cells[1]:
            rows[cells[0].split("`")[1]] = cells[1:]
    assert set(rows) == {m.otel for m in names.KIT_METRICS}
    for metric in names.KIT_METRICS:
        prom, kind, labels = rows[metric.otel]
        assert prom == f"`{metric.prom}`"
        assert kind == metric.kind
        assert re.findall(r"`([a-z_]+)`", labels) == list(metric.labels), metric.otel
