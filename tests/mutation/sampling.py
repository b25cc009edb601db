"""The pure parts of `python -m tests.mutation --sample N`: which mutants a seeded sample runs, and the Wilson score
interval of the module's mutation score estimated from that sample (killed of checked)."""

from __future__ import annotations

import random
from collections.abc import Iterable
from math import sqrt

Z_95 = 1.959963984540054  # the standard normal's 97.5% quantile: a two-sided 95% interval


def sample_names(names: Iterable[str], *, n: int, seed: int) -> list[str]:
    """`n` of `names` drawn uniformly without replacement, reproducibly: random.Random(seed).sample over the sorted,
    de-duplicated names (so the order mutmut lists them in does not matter), returned sorted. All of them when `n`
    is at least their number."""
    if n < 1:
        raise ValueError(f"--sample: {n} is not a positive number of mutants")
    pool = sorted(set(names))
    if n >= len(pool):
        return pool
    return sorted(random.Random(seed).sample(pool, n))


def wilson_interval(*, killed: int, checked: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval (no continuity correction) for the proportion killed/checked; `z` the normal
    quantile of the confidence level (default: Z_95, a 95% interval). Newcombe (1998), method 3."""
    if checked < 1 or not 0 <= killed <= checked:
        raise ValueError(f"killed {killed} of {checked} checked: need 0 <= killed <= checked and checked >= 1")
    p = killed / checked
    z2n = z * z / checked
    centre = (p + z2n / 2) / (1 + z2n)
    half = z * sqrt(p * (1 - p) / checked + z2n / (4 * checked)) / (1 + z2n)
    return max(0.0, centre - half), min(1.0, centre + half)
