"""dashboards/*.json (Grafana import format) and rules/aifactory.rules.yaml (a Prometheus rules file)."""

from __future__ import annotations

from pathlib import Path

from infra.artifacts import ArtifactContext, artifact, dump_yaml

__all__ = ["RULES_FILE", "write_dashboards", "write_rules"]

RULES_FILE = "aifactory.rules.yaml"


@artifact("dashboards")
def write_dashboards(ctx: ArtifactContext) -> list[Path]:
    from dashboards.core import build, dashboard_json

    out = ctx.out / "dashboards"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for key, board in sorted(build(ctx.result.config).items()):
        path = out / f"{key}.json"
        path.write_text(dashboard_json(board))
        written.append(path)
    return written


@artifact("rules")
def write_rules(ctx: ArtifactContext) -> list[Path]:
    from dashboards.core import prometheus_rules

    path = ctx.out / "rules" / RULES_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_yaml(prometheus_rules(ctx.result.config)))
    return [path]
