"""dashboards/*.json (Grafana import format), written from the ConfigMaps the program ships, and
rules/aifactory.rules.yaml (a Prometheus rules file)."""

from __future__ import annotations

from pathlib import Path

from dashboards.deploy import DASHBOARD_LABEL
from infra.artifacts import ArtifactContext, artifact, dump_yaml
from infra.writers.kubernetes import kubernetes_objects

__all__ = ["RULES_FILE", "write_dashboards", "write_rules"]

RULES_FILE = "aifactory.rules.yaml"


@artifact("dashboards")
def write_dashboards(ctx: ArtifactContext) -> list[Path]:
    namespace = ctx.result.config.observability.namespace
    out = ctx.out / "dashboards"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for obj in kubernetes_objects(ctx.result.resources):
        labels = obj["metadata"].get("labels") or {}
        if obj["kind"] != "ConfigMap" or obj["metadata"].get("namespace") != namespace or \
                not DASHBOARD_LABEL.items() <= labels.items():
            continue
        for filename, text in obj["data"].items():  # one `<key>.json` per dashboard ConfigMap
            path = out / filename
            path.write_text(text)
            written.append(path)
    return sorted(written)


@artifact("rules")
def write_rules(ctx: ArtifactContext) -> list[Path]:
    # Rendered from the same pure function as the PrometheusRule's spec, not read back from it: the
    # recorded spec has lost its key order (protobuf Structs are unordered) and rules are read by people.
    from dashboards.core import prometheus_rules
    from infra.monitoring import from_platform

    path = ctx.out / "rules" / RULES_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_yaml(prometheus_rules(from_platform(ctx.result.config))))
    return [path]
