"""Critical-path contribution: how much of a workflow's wall time each step kind is responsible for.

The rule, applied at every instant of the workflow's window [start, end]:
- the *innermost* active steps own the instant: a step that has an active child step does not
  (a planning step waiting on the tool call it started is not itself the reason for the wait);
- when several innermost steps are active at once (parallel tool calls under asyncio.gather), they
  split the instant equally, so two overlapping 1 s tool calls cost 0.5 s each of the overlap;
- an instant covered by no step belongs to `idle_kind` ("other": the agent's own code between steps).

So the contributions are never negative and always add up to the window's length: a dashboard can
stack them and read the workflow's duration off the top.

One sweep over the sorted step boundaries; O(n log n) for n steps.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import itemgetter
from typing import NamedTuple

__all__ = ["DEFAULT_IDLE_KIND", "ROOT", "Step", "StepInterval", "critical_path", "serial_shares"]

DEFAULT_IDLE_KIND = "other"
ROOT = -1  # parent of a step that no other step encloses

_EVENT_ORDER = itemgetter(0, 1, 2)


class StepInterval(NamedTuple):
    """One finished step: its kind, its [start, end] (any time unit, usually ns), its sequence number
    (unique within the workflow, in start order) and the sequence number of its parent step (ROOT if none).
    A named tuple: the instrumentation makes one per step, so it is cheap to build."""

    kind: str
    start: int
    end: int
    seq: int
    parent: int = ROOT


# A StepInterval as a plain tuple, fields in the same order: what the instrumentation keeps per finished step
# (a plain tuple costs less to build than the named tuple, once per step).
Step = tuple[str, int, int, int, int]


def critical_path(steps: Iterable[StepInterval | Step], *, start: int, end: int,
                  idle_kind: str = DEFAULT_IDLE_KIND) -> dict[str, float]:
    """Time of [start, end] owned by each step kind (same unit as the inputs), keys sorted.

    steps: StepIntervals, or plain tuples in the same order (kind, start, end, seq, parent).
    Steps are clipped to the window. Kinds that own no time are left out.
    """
    if end < start:
        raise ValueError(f"workflow window ends before it starts: start={start}, end={end}")
    steps = steps if isinstance(steps, (list, tuple)) else list(steps)
    serial = _serial(steps, start, end, idle_kind)
    if serial is not None:
        return serial
    kind_of: dict[int, str] = {}
    parent_of: dict[int, int] = {}
    events: list[tuple[int, int, int]] = []
    for kind, step_start, step_end, step_seq, step_parent in steps:
        a, b = max(step_start, start), min(step_end, end)
        if a > b:
            continue
        kind_of[step_seq] = kind
        parent_of[step_seq] = step_parent
        # At equal times: starts before ends; parents start before and end after their children.
        events.append((a, 0, step_seq))
        events.append((b, 1, -step_seq))
    events.sort(key=_EVENT_ORDER)

    owned: dict[str, float] = {}
    active_children: dict[int, int] = {}  # active step -> its active children
    attached: set[int] = set()  # active steps counted in their parent's active_children
    leaves: dict[str, int] = {}  # kind -> active innermost steps of that kind
    n_leaves = 0
    now = start
    for t, is_end, signed_seq in events:
        if t > now:
            _share(owned, leaves, n_leaves, t - now, idle_kind)
            now = t
        seq = -signed_seq if is_end else signed_seq
        parent = parent_of[seq]
        if not is_end:
            active_children[seq] = 0
            leaves[kind_of[seq]] = leaves.get(kind_of[seq], 0) + 1
            n_leaves += 1
            if parent in active_children:
                attached.add(seq)
                active_children[parent] += 1
                if active_children[parent] == 1:
                    leaves[kind_of[parent]] -= 1
                    n_leaves -= 1
        else:
            if active_children.pop(seq) == 0:
                leaves[kind_of[seq]] -= 1
                n_leaves -= 1
            if seq in attached:
                attached.discard(seq)
                if parent in active_children:
                    active_children[parent] -= 1
                    if active_children[parent] == 0:
                        leaves[kind_of[parent]] += 1
                        n_leaves += 1
    if end > now:
        _share(owned, leaves, n_leaves, end - now, idle_kind)
    return {kind: owned[kind] for kind in sorted(owned) if owned[kind] != 0}


def _serial(steps: Iterable[StepInterval | Step], start: int, end: int, idle_kind: str) -> dict[str, float] | None:
    """The common case in one pass, without sorting: top-level steps that never overlap, in start order (a
    sequential agent). None when the steps are anything else (nested, parallel, out of order, outside the window)."""
    owned: dict[str, float] = {}
    now = start
    for kind, a, b, _seq, parent in steps:  # unpacked: one pass per step, no attribute look-ups (the hot path)
        if parent != ROOT or a < now or b < a or b > end:  # b < a: a clock stepped back; the sweep drops it
            return None
        owned[kind] = owned.get(kind, 0.0) + (b - a)
        now = b
    return serial_shares(owned, start=start, end=end, idle_kind=idle_kind)


def serial_shares(owned: dict[str, float], *, start: int, end: int,
                  idle_kind: str = DEFAULT_IDLE_KIND) -> dict[str, float]:
    """The shares of a serial chain of top-level steps inside [start, end], from the time each kind's steps took
    (`owned`, changed in place): the window's uncovered time goes to idle_kind, kinds that own nothing are left
    out, keys sorted. What critical_path gives for such a chain; the instrumentation sums `owned` as steps end."""
    covered = sum(owned.values())
    if end - start > covered:
        owned[idle_kind] = owned.get(idle_kind, 0.0) + (end - start - covered)
    return {kind: owned[kind] for kind in sorted(owned) if owned[kind] != 0}


def _share(owned: dict[str, float], leaves: dict[str, int], n_leaves: int, dt: int, idle_kind: str) -> None:
    """Split dt between the innermost active steps (equally per step), or give it to idle_kind."""
    if n_leaves == 0:
        owned[idle_kind] = owned.get(idle_kind, 0.0) + dt
        return
    for kind, count in leaves.items():
        if count:
            owned[kind] = owned.get(kind, 0.0) + dt * count / n_leaves
