"""envoy/envoy.yaml: the inference gateway's Envoy bootstrap (the same bytes as its ConfigMap)."""

from __future__ import annotations

from pathlib import Path

from components.k8s.envoy_config import render
from infra.artifacts import ArtifactContext, artifact

__all__ = ["ENVOY_CONFIG_PATH", "write_envoy"]

ENVOY_CONFIG_PATH = Path("envoy") / "envoy.yaml"


@artifact("envoy", order=20)
def write_envoy(ctx: ArtifactContext) -> list[Path]:
    path = ctx.out / ENVOY_CONFIG_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(ctx.result.config))
    return [path]
