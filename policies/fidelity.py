"""The fidelity gate over a stack's state: the gateway routes a workload's traffic (its deadline decisions and
their overflow) only to variants with a passing, current fidelity result, the baseline excepted.

The gate is the state's `aifactory-fidelity` ConfigMap (components/k8s/fidelity.py: each gated variant's
verdict when the gateway was built), or, in `aifactory preflight`, the verdicts the stack's results file and
suites give now (infra/fidelity.py). The variants routed are the members of the aggregate clusters
(`envoy.clusters.aggregate`, named `<workload>__<variant>`, whose members reach each variant through its overflow
gate `<variant>__gate`) in the gateway's Envoy bootstrap (ConfigMap
`envoy-config`, key envoy.yaml; components/k8s/gateway/envoy/config.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from pulumi_policy import Severity

from components.k8s.naming import DIRECT_SUFFIX, FIDELITY_CONFIG_MAP, FIDELITY_KEY, variant_of_member
from policies.base import MANDATORY, stack_policy
from policies.preflight import Finding, Res, from_policy_resources

__all__ = ["RULE", "ENVOY_CONFIG_KEY", "routed_variants", "state_gate", "fidelity_findings", "POLICIES"]

RULE = "fidelity-gate"
ENVOY_CONFIG_KEY = "envoy.yaml"
AGGREGATE = "envoy.clusters.aggregate"
_ROUTABLE = ("baseline", "passed")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _config_maps(resources: Sequence[Res]) -> list[Res]:
    return [r for r in resources if r.type == "kubernetes:core/v1:ConfigMap"]


def routed_variants(resources: Sequence[Res]) -> dict[str, tuple[Res, dict[str, list[str]]]]:
    """Per gateway ConfigMap (by label): {variant: the aggregate clusters that route to it, sorted}."""
    out: dict[str, tuple[Res, dict[str, list[str]]]] = {}
    for r in _config_maps(resources):
        text = (r.props.get("data") or {}).get(ENVOY_CONFIG_KEY)
        if not isinstance(text, str):
            continue
        doc = yaml.load(text, Loader=_Loader) or {}
        routed: dict[str, list[str]] = {}
        for c in (doc.get("static_resources") or {}).get("clusters") or []:
            ct = c.get("cluster_type") or {}
            # a workload's aggregates (each variant's gate and its last resort's); not a variant's own-key routes
            if ct.get("name") == AGGREGATE and not c["name"].endswith(DIRECT_SUFFIX):
                for member in (ct.get("typed_config") or {}).get("clusters") or []:
                    routed.setdefault(variant_of_member(member), []).append(c["name"])
        out[r.label] = (r, {k: sorted(set(v)) for k, v in routed.items()})
    return out


def state_gate(resources: Sequence[Res]) -> dict[str, Any]:
    """The gate document of the state's `aifactory-fidelity` ConfigMap (empty without one)."""
    for r in _config_maps(resources):
        if r.name == FIDELITY_CONFIG_MAP:
            return read_gate(r.props.get("data") or {})
    return {}


def read_gate(data: Mapping[str, Any]) -> dict[str, Any]:
    """The gate document from a ConfigMap's data (empty when absent or unreadable)."""
    try:
        doc = json.loads(str(data.get(FIDELITY_KEY) or "{}"))
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def fidelity_findings(resources: Sequence[Res], gate: Mapping[str, Any] | None = None) -> list[Finding]:
    """One finding per variant the gateway routes a workload's traffic to without a passing, current result."""
    gate = state_gate(resources) if gate is None else gate
    findings = []
    for label, (res, routed) in sorted(routed_variants(resources).items()):
        for workload, g in sorted(gate.items()):
            for variant, verdict in sorted((g.get("variants") or {}).items()):
                clusters = routed.get(variant)
                if not clusters or verdict.get("status") in _ROUTABLE:
                    continue
                findings.append(Finding(
                    RULE, label,
                    f"{verdict.get('message')}; yet the gateway routes workload {workload!r}'s traffic to it "
                    f"(aggregate clusters {', '.join(clusters)})",
                    f"evaluate and record it (`aifactory eval <stack> --workload {workload}`), or rebuild the gateway "
                    "(synth / pulumi up), which routes only variants that passed", res.urn))
    return findings


def _check(resources: Sequence[Any], _cfg: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(f"{f.resource}: {f.message}", f.urn) for f in fidelity_findings(from_policy_resources(resources))]


POLICIES = [
    stack_policy(
        name=RULE,
        description="The gateway routes a workload's traffic only to variants with a passing, current fidelity "
                    "result (the baseline excepted).",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Run `aifactory eval STACK --workload W`, commit stacks/evals/results/STACK.yaml, and deploy "
                    "again: the gateway is built with only the variants that passed.",
        check=_check,
    ),
]
