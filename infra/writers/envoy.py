"""envoy/envoy.yaml: the inference gateway's Envoy bootstrap (its ConfigMap's bytes)."""

from __future__ import annotations

from pathlib import Path

from components.k8s.gateway import CONFIG_MAP
from infra.artifacts import ArtifactContext, artifact
from infra.writers.kubernetes import registered_object

__all__ = ["ENVOY_CONFIG_PATH", "write_envoy"]

ENVOY_CONFIG_PATH = Path("envoy") / "envoy.yaml"


@artifact("envoy", order=20)
def write_envoy(ctx: ArtifactContext) -> list[Path]:
    cfg = ctx.result.config
    config_map = registered_object(ctx.result.resources, "ConfigMap", cfg.gateway.namespace, CONFIG_MAP)
    path = ctx.out / ENVOY_CONFIG_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config_map["data"]["envoy.yaml"])
    return [path]
