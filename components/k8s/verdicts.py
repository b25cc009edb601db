"""The fidelity gate's verdict on one variant: what infra/fidelity.py judges and the FidelityGate component records.

Kept apart from components/k8s/fidelity.py (which imports Pulumi) so that the CLI can judge variants without loading
Pulumi or OpenTelemetry: node-check, which shares the CLI, must run on GPU nodes without the OpenTelemetry SDK.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Verdict"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """A gated variant's verdict when the gateway is built (infra/fidelity.py judges it; this component records it)."""

    workload: str
    variant: str
    status: str  # baseline | passed | failed | stale | missing | underpowered (the suite cannot show maxDrop) | error
    # (the evaluation is no evidence: a baseline below its floor, too many unanswered items)
    message: str

    @property
    def routable(self) -> bool:
        return self.status in ("baseline", "passed")
