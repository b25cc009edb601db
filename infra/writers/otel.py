"""otel/collector.yaml: the OpenTelemetry Collector configuration the stack runs (its ConfigMap's text)."""

from __future__ import annotations

from pathlib import Path

from components.k8s.observability import COLLECTOR_CONFIG_KEY, COLLECTOR_CONFIGMAP
from infra.artifacts import ArtifactContext, artifact
from infra.writers.kubernetes import registered_object

__all__ = ["write_otel"]


@artifact("otel", order=20)
def write_otel(ctx: ArtifactContext) -> list[Path]:
    namespace = ctx.result.config.observability.namespace
    config_map = registered_object(ctx.result.resources, "ConfigMap", namespace, COLLECTOR_CONFIGMAP)
    path = ctx.out / "otel" / "collector.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config_map["data"][COLLECTOR_CONFIG_KEY])
    return [path]
