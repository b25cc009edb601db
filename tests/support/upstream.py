"""The upstream metric fixtures (tests/fixtures/metrics/*.yaml) as data: family name -> type and labels.

The synthetic exporter data (tests/support/synthetic.py) asks this module for every DCGM exporter, vLLM, SGLang and
Triton family it writes: the name must be one the fixture records (recorded from the upstream source at the
pinned version, named in each fixture), the kind of series it writes (a level or a count growing at a rate) is
the fixture's type, and its labels are the fixture's. telemetry/names.py is never the other side.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

__all__ = ["FIXTURES", "EXPORTERS", "Family", "families", "family", "is_upstream"]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"
# name prefix -> fixture file: every family of that exporter starts with its prefix
EXPORTERS = {"DCGM_FI_": "dcgm-exporter.yaml", "vllm:": "vllm.yaml", "nv_": "triton.yaml", "sglang:": "sglang.yaml"}


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    kind: str  # counter | gauge | histogram | summary: how the value behaves (`semantics` where it overrides `type`)
    declared: str  # the `# TYPE` the exporter writes
    labels: frozenset[str]  # the exporter's own labels (all versions' spellings), not the scrape's
    exporter: str  # the fixture file


@cache
def families() -> dict[str, Family]:
    out = {}
    for file in EXPORTERS.values():
        doc: dict[str, Any] = yaml.safe_load((FIXTURES / file).read_text())
        top = [*doc["labels"], *(doc.get("labels_in_later_versions") or ())]
        for name, row in {**doc["metrics"], **(doc.get("extra_fields") or {})}.items():
            out[name] = Family(name, row.get("semantics", row["type"]), row["type"],
                               frozenset(top) | frozenset(row.get("labels") or ()), file)
    return out


def is_upstream(name: str) -> bool:
    """Whether `name` belongs to an exporter a fixture records (by its prefix)."""
    return name.startswith(tuple(EXPORTERS))


def family(name: str) -> Family:
    """The recorded family `name`; a KeyError naming the fixture when upstream emits no such family."""
    found = families().get(name)
    if found is None:
        file = next((f for p, f in EXPORTERS.items() if name.startswith(p)), "none")
        raise KeyError(f"{name}: no such family in tests/fixtures/metrics/{file}")
    return found
