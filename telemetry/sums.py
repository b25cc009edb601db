"""The sums a workflow's end adds to (critical-path seconds per step kind, deadlines met or missed): kept in the
process and collected through an observable counter, a cumulative monotonic Sum like a counter's, for a fraction
of a measurement's cost (see Sums for what differs).

Used by telemetry.instrument's Telemetry; one Sums per meter and metric, shared by every Telemetry on that meter.
"""

from __future__ import annotations

import threading
from importlib import import_module
from weakref import WeakKeyDictionary

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from telemetry import names

__all__ = ["Sum", "Sums", "placeholder", "sums_of"]


class Sum:
    """One attribute set's running total of a summed metric (see Sums)."""

    __slots__ = ("attributes", "total")

    def __init__(self, attributes: dict[str, str]) -> None:
        self.attributes = attributes
        self.total: float = 0


class Sums:
    """A monotonic sum the kit adds to once per workflow (critical-path seconds per step kind, deadlines met or
    missed), kept in the process and handed to the SDK by an observable counter when a reader collects: a
    workflow's end costs a float addition per attribute set instead of an SDK measurement (its attributes cleaned,
    copied and hashed each time: a third of a sequential workflow's metric cost). One per meter and metric, shared
    by every Telemetry on that meter (the SDK keeps the first callback registered under a name).

    What differs from a synchronous counter (opentelemetry-sdk 1.45.2): the totals are the same up to float
    rounding (added per workflow here, per collection interval there); a series' start time is the first
    collection that sees it, so a delta reader's first point for a new series covers a short interval (Prometheus
    and the Collector's prometheus exporter read cumulative totals and ignore it); a series is kept for the life
    of the process, also under delta temporality (bounded by workflows x step kinds); no exemplars."""

    def __init__(self, meter: metrics.Meter, metric: names.Metric) -> None:
        self.lock = threading.Lock()  # held while totals change, so concurrent workflows lose no addition
        self._sums: dict[tuple[tuple[str, str], ...], Sum] = {}
        meter.create_observable_counter(metric.otel, callbacks=[self._observe], unit=metric.unit,
                                        description=metric.description)

    def sum(self, attributes: dict[str, str]) -> Sum:
        """The running total of one attribute set (made on first use; dict.setdefault: no lock needed)."""
        key = tuple(sorted(attributes.items()))
        found = self._sums.get(key)
        return found if found is not None else self._sums.setdefault(key, Sum(attributes))

    def _observe(self, options: CallbackOptions) -> list[Observation]:
        with self.lock:
            return [Observation(s.total, s.attributes) for s in list(self._sums.values())]


_SUMS: WeakKeyDictionary[metrics.Meter, dict[str, Sums]] = WeakKeyDictionary()
_SUMS_LOCK = threading.Lock()


# The API's placeholder meter, handed out while no MeterProvider is set (opentelemetry-api 1.45.2,
# metrics/_internal/__init__.py: _ProxyMeter; it hands each instrument to the real meter once one is set). If a
# later API release moves it, nothing counts as a placeholder: sums register on whatever meter a Telemetry has.
_PLACEHOLDER_METER: type | None = getattr(import_module("opentelemetry.metrics._internal"), "_ProxyMeter", None)


def placeholder(meter: metrics.Meter) -> bool:
    """Whether `meter` is the API's placeholder (no MeterProvider set yet)."""
    return _PLACEHOLDER_METER is not None and type(meter) is _PLACEHOLDER_METER


def sums_of(meter: metrics.Meter, metric: names.Metric) -> Sums:
    """The one Sums of `metric` on `meter` (registered with it on first use)."""
    with _SUMS_LOCK:
        by_name = _SUMS.setdefault(meter, {})
        found = by_name.get(metric.otel)
        if found is None:
            found = by_name[metric.otel] = Sums(meter, metric)
        return found
