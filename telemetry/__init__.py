"""OpenTelemetry instrumentation for agent workflows: GenAI spans and the compound-latency metrics.

    import telemetry

    telemetry.setup(service_name="support-agent", tenant="support")   # providers from OTEL_* variables

    @telemetry.workflow("triage")
    async def triage(ticket): ...

    with telemetry.step("tool", "search-kb"): ...

Modules: instrument (Telemetry: the public API, and the process-wide workflow/step/headers), scopes (workflow
and step scopes and their spans), runs (the runs they keep in OpenTelemetry's context, and the Recorder that
records their metrics), budget (latency budget and session in W3C baggage), sums (the observable sums a
workflow's end adds to), critical_path (the pure sweep), genai_spans (the same metrics from GenAI-instrumented
agents), providers (setup(): exporters from the environment), names (metric and label names shared with dashboards
and rules).

Exports are lazy (PEP 562 module `__getattr__`): `import telemetry.names` (what dashboards, rules and
node-check read) loads no OpenTelemetry SDK; `telemetry.workflow` and the others import their module on
first use. Each name in `__all__` lives in the first module of `_MODULES` that defines it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs see; nothing is imported at run time
    from telemetry.critical_path import StepInterval, critical_path
    from telemetry.genai_spans import GenAiSpanProcessor
    from telemetry.instrument import Telemetry, current, headers, install, remaining_budget_ms, step, workflow
    from telemetry.providers import Installation, Settings, settings_from_env, setup
    from telemetry.runs import StepRun, WorkflowRun
    from telemetry.scopes import Scope

__all__ = [
    "GenAiSpanProcessor",
    "Installation",
    "Scope",
    "Settings",
    "StepInterval",
    "StepRun",
    "Telemetry",
    "WorkflowRun",
    "critical_path",
    "current",
    "headers",
    "install",
    "remaining_budget_ms",
    "settings_from_env",
    "setup",
    "step",
    "workflow",
]

_MODULES = ("telemetry.critical_path", "telemetry.genai_spans", "telemetry.instrument", "telemetry.providers")


def __getattr__(name: str) -> Any:
    if name in __all__:
        for module_name in _MODULES:
            module = importlib.import_module(module_name)
            if hasattr(module, name):
                value = getattr(module, name)
                globals()[name] = value  # later look-ups skip __getattr__
                return value
    raise AttributeError(f"module 'telemetry' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
