"""policy-report.json: the CrossGuard pack run offline over the synth result; mandatory violations fail synth."""

from __future__ import annotations

from pathlib import Path

from infra.artifacts import ArtifactContext, artifact, dump_json
from infra.synth import state_export
from policies.runner import report, run_policies, state_resources

__all__ = ["write_policy_report"]


@artifact("policy", order=90)
def write_policy_report(ctx: ArtifactContext) -> list[Path]:
    entries = [e for e in state_resources(state_export(ctx.result)) if e["type"] != "pulumi:pulumi:Stack"]
    violations = run_policies(entries)
    path = ctx.out / "policy-report.json"
    ctx.policy = report(violations, resources=len(entries))
    path.write_text(dump_json(ctx.policy))
    ctx.failures.extend(f"policy {v.policy} ({v.severity}, mandatory): {v.resource_name}: {v.message}"
                        for v in violations if v.mandatory)
    return [path]
