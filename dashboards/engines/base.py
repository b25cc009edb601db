"""The dashboards' side of a serving engine: its recording rules, alerts, queue target and panels.

The layering keeps dashboards/ from importing components/ (tests/unit/test_layering.py), so an engine has two
modules of its own: components.k8s.engines.<name> (what it runs as) and dashboards.engines.<name> (how it is
watched), each registered under the same name; tests/unit/test_engine_registry.py holds the two registries equal.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from dashboards.config import ObservabilityConfig, ServedModel
from dashboards.rule_parts import Alert, Record

__all__ = ["MODEL", "EngineRules", "SloHistogram"]

MODEL = 'model=~"$model"'  # the dashboards' model variable


@dataclass(frozen=True, slots=True)
class SloHistogram:
    """A latency histogram of an engine that a model's SLO is judged on (models.<name>.slo): the share of its
    observations above the SLO is read at the SLO's own bucket edge, so the SLO must be one of `edges`."""

    buckets: str  # its recorded bucket rates {model, le}
    edges: tuple[float, ...]  # its bucket edges in seconds: the engine's defaults at the pinned version
    # The gateway's progress checks are observations of it (one each: a 1-token generation's first token), which the
    # model SLO rules subtract (dashboards.rules._model_slo_records). Default: False (the engine leaves them out, or
    # a 1-token generation has no such observation).
    counts_progress_checks: bool = False

    def nearest(self, value: float) -> tuple[float, ...]:
        """The edges on either side of `value` (one at either end of the range)."""
        below = [e for e in self.edges if e < value]
        above = [e for e in self.edges if e > value]
        return tuple(x for x in (max(below, default=None), min(above, default=None)) if x is not None)


@dataclass(frozen=True, eq=False)
class EngineRules(ABC):
    """What the rules and dashboards build for one engine. Every series it records is by `model` (the config key)."""

    name: str  # models.X.engine
    title: str  # the dashboards' row and panel titles
    generated_tokens: str  # its recorded generated tokens/s by model, which the cost rules read for every engine
    # Its time-to-first-token and inter-token latency histograms, which the model SLO rules read for every engine.
    # Default: None, the engine exports no such histogram and a model on it can have no such SLO.
    ttft: SloHistogram | None = None
    itl: SloHistogram | None = None

    @abstractmethod
    def queue_target(self, model: ServedModel) -> Record:
        """The model's autoscaling target as a constant series (the queue alert joins against it)."""

    @abstractmethod
    def records(self, cfg: ObservabilityConfig) -> list[Record]:
        """Its recording rules, in the serving group before the every-engine generated-tokens series."""

    def late_records(self, cfg: ObservabilityConfig) -> list[Record]:
        """Its recording rules after the generated-tokens series (their place in the rules file)."""
        return []

    def alerts(self, cfg: ObservabilityConfig) -> list[Alert]:
        """Its alerts (after the GPU alerts)."""
        return []

    @abstractmethod
    def panels(self) -> list[Any]:
        """Its row of the serving dashboard."""

    def compound_panels(self) -> list[Any]:
        """Its panels in the compound-AI dashboard's model row."""
        return []
