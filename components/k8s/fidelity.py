"""The fidelity gate in the cluster: a ConfigMap `aifactory-fidelity` in the gateway namespace recording, per gated
workload, each variant's verdict (infra/fidelity.py) at the time the gateway's config was built.

It makes the gate visible to whoever reads the state (the policy pack's `fidelity-gate` policy compares it with the
variants the gateway's Envoy config routes) and to operators (`kubectl -n <gateway ns> get cm aifactory-fidelity`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pulumi

from components.k8s.serving import register_object
from infra.config import PlatformConfig
from infra.fidelity import Verdict

__all__ = ["GATE_CONFIG_MAP", "GATE_KEY", "gate_document", "gate_config_map", "FidelityGate"]

GATE_CONFIG_MAP = "aifactory-fidelity"
GATE_KEY = "gate.json"


def gate_document(cfg: PlatformConfig, verdicts: Sequence[Verdict]) -> dict[str, Any]:
    """{workload: {suite, baseline, maxDrop, variants: {variant: {status, message}}}}, sorted."""
    out: dict[str, Any] = {}
    for workload, gate in sorted(cfg.gateway.fidelity.items()):
        out[workload] = {"suite": gate.suite, "baseline": gate.baseline, "maxDrop": gate.max_drop,
                         "variants": {v.variant: {"status": v.status, "message": v.message}
                                      for v in sorted(verdicts, key=lambda v: v.variant) if v.workload == workload}}
    return out


def gate_config_map(cfg: PlatformConfig, verdicts: Sequence[Verdict]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": GATE_CONFIG_MAP, "namespace": cfg.gateway.namespace,
                         "labels": {"app.kubernetes.io/name": GATE_CONFIG_MAP,
                                    "app.kubernetes.io/part-of": "aifactory"}},
            "data": {GATE_KEY: json.dumps(gate_document(cfg, verdicts), indent=2, sort_keys=True) + "\n"}}


def read_gate(data: Mapping[str, Any]) -> dict[str, Any]:
    """The gate document from a ConfigMap's data (empty when absent or unreadable)."""
    try:
        doc = json.loads(str(data.get(GATE_KEY) or "{}"))
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


class FidelityGate(pulumi.ComponentResource):
    """The gate's ConfigMap, beside the gateway (created after its namespace)."""

    def __init__(self, name: str, *, cfg: PlatformConfig, verdicts: Sequence[Verdict],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aifactory:k8s:FidelityGate", name, None, opts)
        register_object(f"{name}-configmap", gate_config_map(cfg, verdicts), pulumi.ResourceOptions(parent=self))
        self.register_outputs({"configMap": GATE_CONFIG_MAP})
