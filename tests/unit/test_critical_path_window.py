"""Critical path over a window that some steps fall outside of (found by `make mutate`: a step wholly before the
window must be dropped on its own, not end the walk over the steps after it)."""

from __future__ import annotations

from telemetry.critical_path import ROOT, StepInterval, critical_path


def test_a_step_outside_the_window_does_not_hide_the_steps_after_it() -> None:
    """Window [10, 30]: a retrieval that ended at 5 (a prefetch before the workflow's span) owns nothing; the
    LLM call 10-20 and the tool call 20-30 after it own their ten units each."""
    steps = [StepInterval("retrieval", 0, 5, 0, ROOT), StepInterval("llm", 10, 20, 1, ROOT),
             StepInterval("tool", 20, 30, 2, ROOT)]
    assert critical_path(steps, start=10, end=30) == {"llm": 10.0, "tool": 10.0}


def test_steps_clipped_to_the_window_own_only_their_part_inside_it() -> None:
    """An LLM call 0-15 and a tool call 25-40 in window [10, 30]: 5 units each; the gap 15-25 is idle."""
    steps = [StepInterval("llm", 0, 15, 0, ROOT), StepInterval("tool", 25, 40, 1, ROOT)]
    assert critical_path(steps, start=10, end=30) == {"llm": 5.0, "other": 10.0, "tool": 5.0}
