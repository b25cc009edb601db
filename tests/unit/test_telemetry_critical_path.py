"""critical_path(): exact ownership on serial, parallel and nested step graphs; invariants under hypothesis."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.critical_path import ROOT, StepInterval, critical_path


def steps(*rows: tuple[str, int, int, int]) -> list[StepInterval]:
    """(kind, start, end, parent index or ROOT) rows; the row index is the step's sequence number."""
    return [StepInterval(kind, start, end, seq, parent) for seq, (kind, start, end, parent) in enumerate(rows)]


@pytest.mark.parametrize(("graph", "expected"), [
    pytest.param(steps(("llm", 10, 40, ROOT), ("tool", 40, 70, ROOT)),
                 {"llm": 30, "other": 40, "tool": 30}, id="serial-with-idle-gaps"),
    pytest.param(steps(("tool", 0, 60, ROOT), ("retrieval", 20, 80, ROOT), ("llm", 80, 100, ROOT)),
                 {"llm": 20, "retrieval": 40, "tool": 40}, id="parallel-overlap-split-equally"),
    pytest.param(steps(("tool", 0, 30, ROOT), ("tool", 0, 30, ROOT), ("llm", 0, 30, ROOT), ("llm", 30, 100, ROOT)),
                 {"llm": 80, "tool": 20}, id="three-way-split-per-step-not-per-kind"),
    pytest.param(steps(("planning", 0, 100, ROOT), ("tool", 20, 50, 0), ("llm", 40, 90, 0)),
                 {"llm": 45, "planning": 30, "tool": 25}, id="nested-parallel-children-own-their-time"),
    pytest.param(steps(("planning", 10, 90, ROOT), ("tool", 20, 60, 0), ("retrieval", 30, 40, 1)),
                 {"other": 20, "planning": 40, "retrieval": 10, "tool": 30}, id="nested-three-levels"),
    pytest.param(steps(("tool", 0, 50, ROOT), ("llm", 10, 80, 0)),
                 {"llm": 70, "other": 20, "tool": 10}, id="child-outlives-parent"),
    pytest.param(steps(("tool", -10, 20, ROOT), ("llm", 90, 130, ROOT), ("llm", 150, 160, ROOT)),
                 {"llm": 10, "other": 70, "tool": 20}, id="clipped-to-the-window"),
    pytest.param(steps(("tool", 30, 30, ROOT)), {"other": 100}, id="zero-length-step-owns-nothing"),
    pytest.param([], {"other": 100}, id="no-steps"),
])
def test_exact_contributions(graph: list[StepInterval], expected: dict[str, float]) -> None:
    assert critical_path(graph, start=0, end=100) == expected


def test_idle_time_goes_to_the_named_kind() -> None:
    assert critical_path(steps(("llm", 0, 40, ROOT)), start=0, end=100, idle_kind="agent") == {"agent": 60, "llm": 40}


def test_keys_are_sorted_for_deterministic_output() -> None:
    result = critical_path(steps(("tool", 0, 10, ROOT), ("llm", 10, 20, ROOT), ("retrieval", 20, 30, ROOT)),
                           start=0, end=30)
    assert list(result) == ["llm", "retrieval", "tool"]


def test_empty_window() -> None:
    assert critical_path(steps(("llm", 0, 0, ROOT)), start=0, end=0) == {}


def test_a_step_ending_before_it_starts_owns_nothing() -> None:
    """A clock stepped back inside a step: the step is dropped, never a negative share (the sequential shortcut
    and the sweep agree)."""
    assert critical_path(steps(("tool", 11, 9, ROOT)), start=10, end=12) == {"other": 2}
    assert critical_path(steps(("llm", 10, 11, ROOT), ("tool", 11, 9, ROOT)), start=10, end=12) == {"llm": 1,
                                                                                                  "other": 1}


def test_window_ending_before_it_starts_is_an_error() -> None:
    with pytest.raises(ValueError, match="ends before it starts: start=10, end=5"):
        critical_path([], start=10, end=5)


@st.composite
def step_graphs(draw: st.DrawFn) -> tuple[list[StepInterval], int]:
    """Random trees: a child starts no earlier than its parent; ends are free (children may outlive
    parents, steps may run past the window); kinds from a small set so kinds collide."""
    window = draw(st.integers(min_value=1, max_value=10_000))
    graph: list[StepInterval] = []
    for seq in range(draw(st.integers(min_value=0, max_value=25))):
        parent = draw(st.integers(min_value=-1, max_value=seq - 1))
        lower = graph[parent].start if parent >= 0 else -100
        start = draw(st.integers(min_value=lower, max_value=window + 100))
        end = draw(st.integers(min_value=start, max_value=window + 200))
        graph.append(StepInterval(draw(st.sampled_from(["llm", "tool", "retrieval", "other"])), start, end, seq,
                                  parent))
    return graph, window


@settings(max_examples=300, deadline=None)
@given(step_graphs())
def test_contributions_are_never_negative_and_add_up_to_the_duration(case: tuple[list[StepInterval], int]) -> None:
    graph, window = case
    result = critical_path(graph, start=0, end=window)
    assert all(v > 0 for v in result.values())
    assert math.isclose(sum(result.values()), window, rel_tol=1e-9)


@settings(max_examples=100, deadline=None)
@given(step_graphs())
def test_a_single_kind_covering_the_window_owns_all_of_it(case: tuple[list[StepInterval], int]) -> None:
    graph, window = case
    relabelled = [StepInterval("tool", s.start, s.end, s.seq + 1, s.parent + 1 if s.parent >= 0 else 0)
                  for s in graph]
    result = critical_path([StepInterval("tool", 0, window, 0), *relabelled], start=0, end=window)
    assert result == {"tool": pytest.approx(window)}
