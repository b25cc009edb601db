"""`aifactory preflight STACK`: predict, before `pulumi up`, what the real system would reject or time out on.

The rules live in policies/preflight.py (one implementation: the state-only ones are also mandatory
policies of the pack). This module adds what only the stack config knows: where the deployer runs
(`cluster.deployerInVpc`), the node pools of an existing cluster (EKS pools come from the node groups in
the state), and an existing cluster's storage class (`target.storageClass`). It reads the state that
synth produces (the program run in-process under mocks) or a given stack export.

Exit codes: 0 no findings, 1 findings, 2 config or usage error.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from components.k8s.serving.lifecycle import (
    Rollout,
    block_end,
    block_over,
    block_window,
    next_cron_start,
    rollout_of,
)
from components.k8s.serving.objects import block_cron, scale_in_seconds
from components.k8s.serving.pod import pod_start_seconds
from components.k8s.serving.views import model_namespace
from components.vocabulary import POOL_LABEL
from dashboards.gateway_alerts import block_over_fix
from infra.config import PlatformConfig
from policies import preflight as rules

__all__ = ["REPORT_FILE", "BLOCK_OVER_RULE", "RULES", "config_pools", "run_rules", "ended_block_findings", "rollouts",
           "report", "format_text", "format_rollouts", "preflight_command"]

REPORT_FILE = "preflight-report.json"
# The one rule that reads the clock, so only `aifactory preflight` runs it: synth's preflight report (and the policy
# pack) stay the same bytes for the same stack, whatever the date.
BLOCK_OVER_RULE = "capacity-block-over"
RULES = (*rules.RULES, BLOCK_OVER_RULE)  # what `aifactory preflight` runs, in its report's order


NODE_PATCH = "kubernetes:core/v1:NodePatch"


def config_pools(cfg: PlatformConfig, resources: Sequence[rules.Res] = ()) -> list[rules.Pool]:
    """An existing cluster's pools as the config declares them: nodes carry `aifactory.io/pool=<name>` and the
    pool's `labels`, its taints, and a catalog entry's capacity, plus the labels the stack's NodePatches put on
    the pool's nodes. A MIG layout counts only where the nodes carry the `nvidia.com/mig.config` label the GPU
    operator's MIG manager acts on (the kit applies it with a NodePatch per listed node)."""
    patched: dict[str, dict[str, str]] = {}
    for r in resources:
        if r.type == NODE_PATCH:
            node_labels = dict((r.props.get("metadata") or {}).get("labels") or {})
            if POOL_LABEL in node_labels:
                patched.setdefault(node_labels[POOL_LABEL], {}).update(node_labels)
    out = []
    for pool in cfg.node_pools.values():
        labels = {POOL_LABEL: pool.name, **pool.labels, **patched.get(pool.name, {})}
        taints = tuple((t.key, t.value, t.effect) for t in pool.taints)
        out.append(rules.Pool(pool.name, labels, taints,
                              rules.allocatable(pool.instance_type, mig=labels.get(rules.MIG_CONFIG_LABEL)),
                              pool.instance_type))
    return out


def run_rules(resources: Sequence[rules.Res], cfg: PlatformConfig, *,
              gate: Mapping[str, Any] | None = None) -> list[rules.Finding]:
    """Every preflight rule over a stack's resources, in a fixed order (rule, then resource). `gate`: the fidelity
    gate as the stack's files say now (default: the state's own record of it)."""
    from policies.fidelity import fidelity_findings

    eks = any(r.type == rules.EKS_CLUSTER for r in resources)
    pools = rules.node_group_pools(resources) if eks else config_pools(cfg, resources)
    deployer_in_vpc = cfg.cluster.deployer_in_vpc if cfg.cluster is not None else False
    findings = [
        *rules.quota_findings(resources),
        *rules.pod_security_findings(resources),
        *rules.storage_findings(resources, eks=eks, configured_class=cfg.target.storage_class),
        *rules.volume_fit_findings(resources),
        *rules.crd_order_findings(resources),
        *rules.await_findings(resources),
        *rules.release_order_findings(resources),
        *rules.endpoint_findings(resources, deployer_in_vpc=deployer_in_vpc),
        *rules.schedule_findings(resources, pools),
        *rules.drain_findings(resources),
        *rules.lb_target_findings(resources, pools if eks else []),
        *rules.sidecar_findings(resources, kubernetes_version=None if eks else cfg.kubernetes_version),
        *fidelity_findings(resources, gate),
    ]
    return sorted(findings, key=lambda f: (rules.RULES.index(f.rule), f.resource, f.message))


def ended_block_findings(cfg: PlatformConfig, *, now: datetime.datetime) -> list[rules.Finding]:
    """Each block model whose capacity block is over at `now`: its ScaledObject's cron trigger has no year and
    comes back on the block's start date of every later year (components.k8s.serving.lifecycle.next_cron_start),
    when KEDA scales the model up on a pool that has no nodes then: its pods wait Pending, holding the tenant's GPU
    quota, and kube-prometheus-stack's KubePodNotReady fires (docs/serving.md, "Capacity-block models outside the
    window"). The finding names the cron's next window, or the one under way at `now`."""
    out = []
    for model in sorted(cfg.models.values(), key=lambda m: m.name):
        pool = cfg.pool_of(model)
        over, cron, window = block_over(pool), block_cron(cfg, model), block_window(pool)
        end = block_end(pool, scale_in_seconds=scale_in_seconds(model))
        if over is None or cron is None or window is None or end is None or now < over:
            continue
        again = next_cron_start(pool, now - (end - window[0]))  # the first window that has not ended by `now`
        assert again is not None
        meta = cron["metadata"]
        out.append(rules.Finding(
            BLOCK_OVER_RULE, f"ScaledObject/{model_namespace(cfg, model)}/{model.name}",
            f"the capacity block of pool {pool.name} ended at {over:%Y-%m-%dT%H:%M:%SZ}, but KEDA's cron trigger has "
            f"no year (start {meta['start']!r}, end {meta['end']!r}, {meta['timezone']}): "
            f"{'since' if again <= now else 'on'} {again:%Y-%m-%dT%H:%M:%SZ} it asks for {meta['desiredReplicas']} "
            f"replica(s) of {model.name} on a pool with no nodes, whose pods wait Pending and hold the tenant's GPU "
            "quota",
            block_over_fix(pool.name)))
    return out


def rollouts(cfg: PlatformConfig) -> dict[str, Rollout]:
    """What a rolling update does to each model of the stack, by name (components.k8s.serving.lifecycle.rollout_of:
    replicas.min 2 or more keeps serving, 1 is an outage until the new pod is ready, unless another variant of its
    workload, off the capacity blocks, takes its requests meanwhile)."""
    block = {m.name for m in cfg.models.values() if block_window(cfg.pool_of(m)) is not None}
    always = [m for m in cfg.models.values() if m.name not in block]
    return {m.name: rollout_of(m, others=always, block=m.name in block, start_seconds=pod_start_seconds(m))
            for m in sorted(cfg.models.values(), key=lambda m: m.name)}


def report(findings: Sequence[rules.Finding], *, stack: str, resources: int,
           rollout: Mapping[str, Rollout] | None = None, names: Sequence[str] = rules.RULES) -> dict[str, Any]:
    """The JSON report over the rules `names` (synth's: the state's rules; `aifactory preflight`'s: RULES)."""
    counts = {rule: sum(f.rule == rule for f in findings) for rule in names}
    out = {"stack": stack, "resources": resources, "rules": list(names), "summary": counts,
           "findings": [f.as_dict() for f in findings]}
    if rollout is not None:
        out["rollouts"] = {name: {"kind": r.kind, "detail": r.detail} for name, r in rollout.items()}
    return out


def format_text(findings: Sequence[rules.Finding], *, stack: str, resources: int) -> str:
    lines = [f"preflight {stack}: {len(RULES)} rules over {resources} resources: {len(findings)} finding(s)"]
    for rule in RULES:
        group = [f for f in findings if f.rule == rule]
        if group:
            lines.append(f"\n{rule} ({len(group)})")
            lines.extend(f"  {f.resource}\n      {f.message}\n      fix: {f.fix}" for f in group)
    return "\n".join(lines) + "\n"


def format_rollouts(rollout: Mapping[str, Rollout]) -> str:
    """The rollout statement of each model (not a finding: the trade-off each model makes, docs/serving.md)."""
    if not rollout:
        return ""
    lines = ["\nrollouts (what a rolling update does to each model)"]
    lines.extend(f"  {name}: {r.kind}: {r.detail}" for name, r in rollout.items())
    return "\n".join(lines) + "\n"


def _state_entries(stack: str, state: Path | None, stacks_dir: Path | None) -> tuple[list[dict[str, Any]],
                                                                                     PlatformConfig]:
    from infra.config import parse
    from infra.synth import raw_for_validation, read_stack_config, run_program, stack_file, state_export
    from policies.runner import read_state

    values = read_stack_config(stack_file(stack, stacks_dir))
    cfg = parse(raw_for_validation(values), stack=stack)  # fail fast, before any Pulumi runtime work (as synth)
    if state is not None:
        return read_state(state), cfg
    return state_export(run_program(stack, values, stacks_dir=stacks_dir))["deployment"]["resources"], cfg


def _current_gate(cfg: PlatformConfig, stacks_dir: Path | None) -> dict[str, Any]:
    """The fidelity gate from the stack's results file and suites as they are now (a deployed state is checked
    against today's results, not the ones it was built with)."""
    from components.k8s.fidelity import gate_document
    from infra import fidelity

    return gate_document(cfg, fidelity.load_verdicts(cfg, stacks_dir or fidelity.default_stacks_dir()))


def preflight_command(stack: str, *, state: Path | None = None, stacks_dir: Path | None = None,
                      json_out: Path | None = None, now: datetime.datetime | None = None) -> int:
    """`aifactory preflight`: 0 clean, 1 findings, 2 unusable state (config errors raise ConfigError).

    `json_out`: also write the report as JSON there (`-`: stdout, and the text goes to stderr). `now`: the time the
    capacity blocks are judged at (default: the clock's, UTC)."""
    from infra.outputs import write_json
    from policies.runner import PolicyInputError

    try:
        entries, cfg = _state_entries(stack, state, stacks_dir)
    except PolicyInputError as err:
        print(f"aifactory: preflight: {err}", file=sys.stderr, flush=True)
        return 2
    resources = rules.from_entries(entries)
    findings = [*run_rules(resources, cfg, gate=_current_gate(cfg, stacks_dir)),
                *ended_block_findings(cfg, now=now or datetime.datetime.now(datetime.UTC))]
    human = sys.stderr if json_out is not None and str(json_out) == "-" else sys.stdout
    rollout = rollouts(cfg)
    human.write(format_text(findings, stack=stack, resources=len(resources)) + format_rollouts(rollout))
    if json_out is not None:
        write_json(json_out, report(findings, stack=stack, resources=len(resources), rollout=rollout, names=RULES))
    return 1 if findings else 0
