"""otel/collector.yaml: the OpenTelemetry Collector configuration the stack runs (its ConfigMap's text)."""

from __future__ import annotations

from pathlib import Path

from components.k8s.otel_config import collector_config
from infra.artifacts import ArtifactContext, artifact, dump_yaml

__all__ = ["write_otel"]


@artifact("otel", order=20)
def write_otel(ctx: ArtifactContext) -> list[Path]:
    path = ctx.out / "otel" / "collector.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_yaml(collector_config(ctx.result.config)))
    return [path]
