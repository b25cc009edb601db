"""The fidelity gate's statistics (infra/fidelity_stats.py) against published values.

Newcombe's hybrid score interval for paired data is pinned to the paper's own worked example, R. G. Newcombe,
"Improved confidence intervals for the difference between binomial proportions based on paired data", Statistics in
Medicine 17:2635-2650 (1998), method 10 (also the value petelaud/ratesci@v1.1.0:tests/testthat/test3.R checks
its MOVER-Wilson with Newcombe's correlation correction against), and to the examples of Fagerland, Lydersen and
Laake, "Recommended tests and confidence intervals for paired binomial proportions", Statistics in Medicine
33:2850-2875 (2014), as ocbe-uio/contingencytables@v3.0.0:tests/testthat/test-ch8.R (the authors' own package)
and petelaud/ratesci@v1.1.0:tests/testthat/test3.R print them.
"""

from __future__ import annotations

import math

import pytest

from infra.fidelity_stats import (
    ALPHA,
    Table,
    drop_interval,
    holm,
    items_needed,
    min_items,
    p_value,
    resolution,
    run_alpha,
    wilson,
    z_for,
)

Z95 = z_for(0.025)


@pytest.mark.parametrize(("table", "low", "high"), [
    # Newcombe (1998), the paper's example e=20, f=12, g=2, h=16 (n=50): method 10 gives 0.0562 to 0.3292
    (Table(20, 12, 2, 16), 0.0562, 0.3292),
    # Fagerland et al. (2014): airway hyper-responsiveness before/after stem cell transplantation (Bentur 2009)
    (Table(1, 1, 7, 12), -0.507, -0.026),
    # contingencytables' chapter 8: complete response before/after consolidation therapy (Cavo 2012)
    (Table(59, 6, 16, 80), -0.1186, -0.0046),
    # and its edge case of no discordant pairs at n=2: the interval keeps its width
    (Table(1, 0, 0, 1), -0.5734, 0.5734),
])
def test_newcombe_method_10_gives_the_published_intervals(table: Table, low: float, high: float) -> None:
    drop, lo, hi = drop_interval(table, z=Z95)
    digits = len(str(low).split(".")[1])
    assert drop == pytest.approx((table.baseline_only - table.variant_only) / table.n)
    assert (round(lo, digits), round(hi, digits)) == (low, high)


def test_twelve_identical_answers_show_no_small_drop() -> None:
    """The Wald interval of the paired differences is [0, 0] when the two never disagree; Newcombe's is not:
    12 items right on both sides bound the drop at z^2 / (12 + z^2) = 0.242."""
    drop, low, high = drop_interval(Table(12, 0, 0, 0), z=Z95)
    assert drop == 0.0
    assert high == pytest.approx(Z95**2 / (12 + Z95**2), abs=1e-12) and round(high, 3) == 0.242
    assert p_value(Table(12, 0, 0, 0), 0.03) > ALPHA  # no pass at maxDrop 0.03


def test_94_vs_95_percent_is_not_shown_within_three_points() -> None:
    """200 items, the baseline right on 190, the variant on 188 (3 lost, 1 gained). The Wald bound was 0.0296,
    within maxDrop 0.03; the score interval's is 0.0387."""
    t = Table(187, 3, 1, 9)
    drop, _, high = drop_interval(t, z=Z95)
    assert drop == pytest.approx(0.01)
    assert round(high, 4) == 0.0387
    d = [1.0] * 3 + [-1.0] + [0.0] * 196  # the old Wald bound, for the record
    mean = sum(d) / 200
    wald = mean + Z95 * math.sqrt(sum((x - mean) ** 2 for x in d) / 199 / 200)
    assert round(wald, 4) == 0.0296
    assert p_value(t, 0.03) > ALPHA


def test_p_value_is_the_level_at_which_the_bound_meets_max_drop() -> None:
    t = Table(180, 2, 1, 17)
    p = p_value(t, 0.04)
    assert 0 < p < ALPHA
    assert drop_interval(t, z=z_for(p))[2] == pytest.approx(0.04, abs=1e-9)
    assert p_value(Table(150, 40, 0, 10), 0.05) == 1.0  # the observed drop 0.2 is above maxDrop itself


def test_holm_steps_down_and_stops_at_the_first_p_value_above_its_level() -> None:
    # m = 3 at alpha 0.05: 0.01 <= 0.05/3 rejected; 0.03 > 0.05/2 stops; 0.04 is not rejected though <= 0.05
    assert holm({"a": 0.01, "b": 0.04, "c": 0.03}, alpha=0.05) == {
        "a": (0.05 / 3, True), "c": (0.025, False), "b": (0.05, False)}
    assert holm({"a": 0.01, "b": 0.02}, alpha=0.05) == {"a": (0.025, True), "b": (0.05, True)}


def test_the_runs_of_an_unchanged_variant_spend_less_than_alpha() -> None:
    assert [run_alpha(k) for k in (1, 2, 3)] == [0.0125, 0.00625, 0.003125]
    assert sum(run_alpha(k) for k in range(1, 40)) < ALPHA


@pytest.mark.parametrize(("max_drop", "alpha"), [(0.03, 0.025), (0.03, 0.0125), (0.05, 0.0125), (0.02, 0.0125)])
def test_min_items_is_the_fewest_at_which_every_concordant_run_passes(max_drop: float, alpha: float) -> None:
    n = min_items(max_drop, alpha=alpha)
    assert n is not None
    z = z_for(alpha)
    worst = max(drop_interval(Table(k, 0, 0, n - k), z=z)[2] for k in range(n + 1))
    worse = max(drop_interval(Table(k, 0, 0, n - 1 - k), z=z)[2] for k in range(n))
    assert worst <= max_drop < worse
    # the all-right suite is not the worst case: a single item wrong on both sides weakens the correlation
    assert n > z * z * (1 - max_drop) / max_drop


def test_min_items_for_the_shipped_gate() -> None:
    """prod's finance-8b gate: maxDrop 0.03, one variant, its first run at 1.25% one-sided."""
    assert min_items(0.03, alpha=run_alpha(1)) == 178
    assert min_items(0.03, alpha=0.025) == 139


def test_items_needed_and_resolution() -> None:
    t = Table(187, 3, 1, 9)  # 94% vs 95% at n=200
    n = items_needed(t, 0.03, alpha=0.025)
    assert n is not None
    assert drop_interval(t.scaled(n), z=Z95)[2] <= 0.03 < drop_interval(t.scaled(n - 1), z=Z95)[2]
    assert items_needed(Table(150, 40, 0, 10), 0.05, alpha=0.025) is None  # its drop is above maxDrop already
    # the suite's resolution for this variant: its 4 disagreements split 2/2, no drop
    assert resolution(t, alpha=0.025) == drop_interval(Table(187, 2, 2, 9), z=Z95)[2]


def test_wilson_matches_newcombe_1998s_single_proportion_example() -> None:
    """0 of 20: 0 to 0.1611 (the single-proportion example ratesci's tests pin, from Newcombe 1998)."""
    low, high = wilson(0, 20, z=Z95)
    assert (low, round(high, 4)) == (0.0, 0.1611)
