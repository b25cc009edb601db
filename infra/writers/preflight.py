"""preflight-report.json: what the real system would reject or time out on (infra/preflight.py), next to
the policy report. Findings are reported, not failures of synth: `aifactory preflight` exits 1 on them."""

from __future__ import annotations

from pathlib import Path

from infra.artifacts import ArtifactContext, artifact, dump_json
from infra.preflight import REPORT_FILE, report, run_rules
from infra.synth import state_export
from policies.preflight import from_entries

__all__ = ["write_preflight_report"]


@artifact("preflight", order=85)
def write_preflight_report(ctx: ArtifactContext) -> list[Path]:
    resources = from_entries(state_export(ctx.result)["deployment"]["resources"])
    findings = run_rules(resources, ctx.result.config)
    ctx.preflight.extend(findings)
    path = ctx.out / REPORT_FILE
    path.write_text(dump_json(report(findings, stack=ctx.result.stack, resources=len(resources))))
    return [path]
