"""The latency budget per request (#15): headers() sends this step's share of the workflow's remaining budget when
the workflow declared its steps; workflows with a deadline record the budget left at each step's start and
whether they met the deadline. Exact numbers in virtual time (worked by hand below each test's clock moves)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import baggage
from opentelemetry.baggage.propagation import W3CBaggagePropagator

from telemetry import names
from tests.support.telemetry import Harness, harness, labels


@pytest.fixture
def h() -> Iterator[Harness]:
    with harness() as instrumented:
        yield instrumented


def sent_budget(h: Harness) -> int:
    """The budget the gateway reads: aifactory.budget_ms of the baggage headers() sends (OTel's W3C parser)."""
    return int(str(baggage.get_baggage("aifactory.budget_ms", W3CBaggagePropagator().extract(h.tel.headers()))))


def test_each_request_gets_its_steps_share_of_the_remaining_budget(h: Harness) -> None:
    tel, clock, got = h.tel, h.clock, []
    with tel.workflow("plan", budget_s=2, steps=4):
        with tel.step("llm", "one"):  # 2000 ms left, 4 steps left: 500
            got.append(sent_budget(h))
            clock.advance(0.3)
        with tel.step("llm", "two"):  # 1700 ms, 3 left: 566 (whole ms, rounded down)
            got.append(sent_budget(h))
            clock.advance(0.2)
        with tel.step("tool", "three"):  # 1500 ms, 2 left: 750; a nested step is part of this step
            with tel.step("llm", "nested"):
                got.append(sent_budget(h))
                clock.advance(0.5)
        with tel.step("llm", "four"):  # 1000 ms, 1 left: all of it
            got.append(sent_budget(h))
            clock.advance(0.2)
        with tel.step("llm", "extra"):  # more steps than declared: the whole 800 ms left
            got.append(sent_budget(h))
    assert got == [500, 566, 750, 1000, 800]


def test_without_declared_steps_a_request_gets_the_whole_remaining_budget(h: Harness) -> None:
    with h.tel.workflow("plan", budget_s=2), h.tel.step("llm", "one"):
        h.clock.advance(0.5)
        assert sent_budget(h) == 1500


def test_an_inner_workflow_without_steps_spends_the_outer_steps_share(h: Harness) -> None:
    tel, clock = h.tel, h.clock
    with tel.workflow("outer", budget_s=3, steps=3):
        with tel.step("planning", "plan"):
            clock.advance(0.6)
        with tel.step("tool", "delegate"), tel.workflow("inner"):  # 2400 ms left, 2 outer steps left
            assert sent_budget(h) == 1200
            with tel.step("llm", "a"):
                clock.advance(0.4)
            with tel.step("llm", "b"):  # the inner workflow's steps are not the outer's: still 2 left
                assert sent_budget(h) == 1000


def test_the_budget_left_at_each_steps_start_is_recorded(h: Harness) -> None:
    tel, clock = h.tel, h.clock
    with tel.workflow("plan", budget_s=2):
        clock.advance(0.5)
        with tel.step("llm", "draft"):  # 1.5 s left
            clock.advance(1.25)
        with tel.step("llm", "polish"):  # 0.25 s left
            clock.advance(0.5)
        with tel.step("tool", "late"):  # past the deadline: 0
            pass
    with tel.workflow("plain"), tel.step("llm", "x"):  # no deadline: nothing recorded
        pass
    assert h.points(names.STEP_BUDGET) == {
        labels(workflow="plan", step_kind="llm"): (1.75, 2), labels(workflow="plan", step_kind="tool"): (0.0, 1)}


def test_workflows_with_a_deadline_count_whether_they_met_it(h: Harness) -> None:
    tel, clock = h.tel, h.clock
    for seconds in (1.5, 2.0, 2.001, 3):  # a 2 s budget: ending exactly at the deadline meets it
        with tel.workflow("plan", budget_s=2):
            clock.advance(seconds)
    with tel.workflow("plain"):
        clock.advance(9)
    assert h.points(names.WORKFLOW_DEADLINES) == {
        labels(workflow="plan", deadline="met"): 2, labels(workflow="plan", deadline="missed"): 2}


@pytest.mark.parametrize("steps", [0, -1, 2.5, "3", True])
def test_bad_steps_are_refused(h: Harness, steps: object) -> None:
    with pytest.raises(ValueError, match=f"workflow 'w': steps must be a whole number >= 1, got {steps!r}"):
        h.tel.workflow("w", budget_s=1, steps=steps)  # type: ignore[arg-type]
