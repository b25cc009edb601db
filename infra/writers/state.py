"""state.json: the program result in Pulumi's stack-export format."""

from __future__ import annotations

from pathlib import Path

from infra.artifacts import ArtifactContext, artifact, dump_json
from infra.synth import state_export


@artifact("state", order=0)
def write_state(ctx: ArtifactContext) -> list[Path]:
    path = ctx.out / "state.json"
    path.write_text(dump_json(state_export(ctx.result)))
    return [path]
