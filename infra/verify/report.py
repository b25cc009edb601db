"""The report: one row per hop (ok or broken, what verify saw, the likely cause), as text and as JSON; and the
progress lines verify says while it asks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from infra.verify.endpoints import Endpoints

__all__ = [
    "Hop",
    "Report",
    "Progress",
    "progress_line",
    "format_report",
    "report_doc",
]


@dataclass(frozen=True, slots=True)
class Hop:
    """One row: a hop (of one model, or of the platform) and what verify found there."""

    hop: str
    model: str  # "" for platform-wide hops
    ok: bool
    saw: str
    cause: str = ""  # the likely cause when broken


@dataclass(frozen=True, slots=True)
class Report:
    stack: str
    endpoints: Endpoints
    hops: tuple[Hop, ...]

    @property
    def ok(self) -> bool:
        return all(h.ok for h in self.hops)


Progress = Callable[[str], None]  # hears what verify is doing while it does it (the CLI: stderr)


def progress_line(hop: str, model: str, text: str) -> str:
    """A progress line about one hop, under the `[n/2]` line of its phase."""
    return f"               {hop:<19} {f'{model}: ' if model else ''}{text}"


def format_report(report: Report) -> str:
    """One row per hop: status, hop, model, what it saw, and the likely cause of a broken one."""
    hop_w = max((len(h.hop) for h in report.hops), default=4)
    model_w = max((len(h.model) for h in report.hops), default=1) or 1
    lines = [f"verify {report.stack}: gateway {report.endpoints.gateway}"]
    for h in report.hops:
        lines.append(f"  {'ok' if h.ok else 'BROKEN':<6}  {h.hop:<{hop_w}}  {h.model or '-':<{model_w}}  {h.saw}")
        if not h.ok:
            lines.append(f"  {'':<6}  {'':<{hop_w}}  {'':<{model_w}}  likely: {h.cause}")
    broken = sum(not h.ok for h in report.hops)
    lines.append(f"{len(report.hops)} hop(s), {broken} broken" if broken else f"{len(report.hops)} hop(s), all ok")
    return "\n".join(lines) + "\n"


def report_doc(report: Report) -> dict[str, Any]:
    """What `--json` writes."""
    e = report.endpoints  # never `access`: it holds the kubeconfig's credentials
    endpoints = {"gateway": e.gateway, "prometheus": e.prometheus, "jaeger": e.jaeger, "loki": e.loki,
                 "alertmanager": e.alertmanager}
    return {"stack": report.stack, "ok": report.ok, "endpoints": endpoints,
            "hops": [asdict(h) for h in report.hops]}
