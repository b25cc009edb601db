"""OpenTelemetry instrumentation for agent workflows: GenAI spans and the compound-latency metrics.

    import telemetry

    telemetry.setup(service_name="support-agent", tenant="support")   # providers from OTEL_* variables

    @telemetry.workflow("triage")
    async def triage(ticket): ...

    with telemetry.step("tool", "search-kb"): ...

Modules: instrument (scopes, spans, metrics), critical_path (the pure sweep), providers (setup():
exporters from the environment), names (metric and label names shared with dashboards and rules).
"""

from telemetry.critical_path import StepInterval, critical_path
from telemetry.genai_spans import GenAiSpanProcessor
from telemetry.instrument import (
    Scope,
    StepRun,
    Telemetry,
    WorkflowRun,
    current,
    headers,
    install,
    remaining_budget_ms,
    step,
    workflow,
)
from telemetry.providers import Installation, Settings, settings_from_env, setup

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
