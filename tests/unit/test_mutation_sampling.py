"""`python -m tests.mutation --sample N --seed S`: the seeded, uniform sample of mutant names it runs and the Wilson
95% interval it reports for the module's score (the pure parts; the mutmut runs themselves are `make mutate`)."""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.mutation.__main__ import Result, summary
from tests.mutation.sampling import sample_names, wilson_interval

ROOT = Path(__file__).resolve().parents[2]
NAMES = [f"infra.config.x__reader__mutmut_{i}" for i in range(1, 301)]


def test_the_sample_is_the_standard_librarys_seeded_sample_of_the_sorted_names() -> None:
    # The documented contract: random.Random(seed).sample over the sorted names, so anyone can redraw it.
    expected = sorted(random.Random(22).sample(sorted(NAMES), 200))
    assert sample_names(NAMES, n=200, seed=22) == expected


def test_the_same_seed_draws_the_same_mutants_whatever_order_mutmut_lists_them_in() -> None:
    shuffled = list(reversed(NAMES)) + NAMES[:10]  # another order, and a name listed twice
    assert sample_names(shuffled, n=50, seed=7) == sample_names(NAMES, n=50, seed=7)
    assert sample_names(NAMES, n=50, seed=7) != sample_names(NAMES, n=50, seed=8)


def test_a_sample_has_n_distinct_names_of_the_module() -> None:
    drawn = sample_names(NAMES, n=200, seed=22)
    assert len(set(drawn)) == 200
    assert set(drawn) <= set(NAMES)


def test_a_sample_at_least_as_large_as_the_module_runs_every_mutant() -> None:
    assert sample_names(NAMES[:5], n=200, seed=22) == sorted(NAMES[:5])


def test_every_mutant_is_equally_likely_to_be_drawn() -> None:
    # 10 names, 3 drawn, 3000 seeds: each name 900 times expected, binomial sd sqrt(3000 x 0.3 x 0.7) = 25.
    names = [f"m_{i}" for i in range(10)]
    counts = Counter(name for seed in range(3000) for name in sample_names(names, n=3, seed=seed))
    assert set(counts) == set(names)
    assert all(800 <= c <= 1000 for c in counts.values()), counts


def test_a_sample_of_no_mutants_is_refused() -> None:
    with pytest.raises(ValueError, match="0 is not a positive number"):
        sample_names(NAMES, n=0, seed=1)


@pytest.mark.parametrize(("killed", "checked", "low", "high"), [
    # Newcombe, "Two-sided confidence intervals for the single proportion: comparison of seven methods",
    # Statistics in Medicine 17:857-872 (1998), Table II, method 3 (score interval without continuity correction).
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0000, 0.1611),
    (1, 29, 0.0061, 0.1718),
])
def test_the_wilson_interval_matches_newcombes_published_examples(killed: int, checked: int, low: float,
                                                                 high: float) -> None:
    got = wilson_interval(killed=killed, checked=checked)
    assert got == (pytest.approx(low, abs=5e-5), pytest.approx(high, abs=5e-5))


def test_the_wilson_interval_of_all_killed_ends_at_one() -> None:
    low, high = wilson_interval(killed=200, checked=200)
    assert high == 1.0
    assert 0.98 < low < 1.0  # n / (n + z^2) = 200 / 203.84


def test_the_wilson_interval_needs_mutants_checked() -> None:
    with pytest.raises(ValueError, match="killed 3 of 0 checked"):
        wilson_interval(killed=3, checked=0)


def test_the_report_line_of_a_sample_gives_the_module_scores_interval() -> None:
    line = summary("infra/config.py", Result(81, 263, [], 7371))
    assert line == ("infra/config.py: 81/263 mutants killed (30.8%), drawn from 7371: "
                    "module score 95% CI [25.5%, 36.6%]")
    assert summary("policies/kube.py", Result(472, 479, [])) == "policies/kube.py: 472/479 mutants killed (98.5%)"


def test_the_runner_refuses_a_sample_of_no_mutants_without_a_traceback() -> None:
    res = subprocess.run([sys.executable, "-m", "tests.mutation", "infra/config.py", "--sample", "0"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr == "--sample: 0 is not a positive number of mutants\n"
