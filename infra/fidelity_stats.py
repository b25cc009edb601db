"""The fidelity gate's statistics: how sure the data are that a variant loses at most `maxDrop` of its baseline's
score on the same items.

Each item is a pair (baseline right?, variant right?), so a run is a paired 2x2 table and the drop is the difference
of two correlated proportions: (baseline_only - variant_only) / n. Its interval is Newcombe's hybrid score interval
for paired data, method 10 of R. G. Newcombe, "Improved confidence intervals for the difference between binomial
proportions based on paired data", Statistics in Medicine 17:2635-2650 (1998): the Wilson intervals of the two
marginal scores, combined with the correlation estimate phi (with the paper's adjustment of the numerator by n/2).
Unlike the Wald interval of the paired differences, it keeps its width when the two never disagree (12 items
right on both sides: drop at most 0.242, not 0) and at few disagreements. Fagerland, Lydersen and Laake,
"Recommended tests and confidence intervals for paired binomial proportions", Statistics in Medicine
33:2850-2875 (2014), recommend it for all sample sizes. No released Python library implements it (statsmodels 0.15.0
has the independent-samples Newcombe interval, `confint_proportions_2indep`, and for paired tables only tests and
a private risk-ratio interval; `confint_proportions_paired` is in its development docs, unreleased), so it is
written here from the paper and pinned to the paper's worked example in tests/unit/test_fidelity_stats.py.

A variant passes when the upper end of its drop's one-sided interval is at most maxDrop: H0 "drop > maxDrop" is
rejected. The one-sided level ALPHA (2.5%, the upper end of a two-sided 95% interval) is spent over the recorded
runs of an unchanged variant, ALPHA / 2**k on its k-th run (1.25%, 0.625%, ...), and each run's level is shared by
the variants of one gate with Holm's step-down procedure (S. Holm, "A simple sequentially rejective multiple test
procedure", Scandinavian Journal of Statistics 6:65-70 (1979)). So in one run the chance that any of a gate's
variants whose true drop exceeds maxDrop passes is at most the run's level, and the chance that an unchanged variant
whose true drop exceeds maxDrop ever passes, however often it is evaluated again, is below ALPHA.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

__all__ = ["ALPHA", "MAX_ITEMS", "z_for", "wilson", "Table", "drop_interval", "p_value", "holm", "run_alpha",
           "min_items", "items_needed", "resolution"]

ALPHA = 0.025  # one-sided: a variant passes when the upper end of a two-sided 95% interval is at most maxDrop
MAX_ITEMS = 1_000_000  # items_needed() looks no further
_P_STEPS = 60  # bisection steps of p_value(): below 1e-15


def z_for(alpha: float) -> float:
    """The standard normal quantile of a one-sided level `alpha` (1.96 at 0.025)."""
    return NormalDist().inv_cdf(1 - alpha)


def wilson(correct: float, n: float, *, z: float) -> tuple[float, float]:
    """The Wilson score interval of a proportion (Wilson 1927): sound near 0 and 1, unlike mean +- z x stderr."""
    if n <= 0:
        return 0.0, 1.0
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(max(0.0, p * (1 - p) / n + z * z / (4 * n * n)))
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True, slots=True)
class Table:
    """A run's paired 2x2 table of one variant against the baseline, in items (fractional only in items_needed)."""

    both: float  # right on both
    baseline_only: float  # right on the baseline, wrong on the variant: lost
    variant_only: float  # wrong on the baseline, right on the variant: gained
    neither: float  # wrong on both

    @classmethod
    def of(cls, baseline: Sequence[float], variant: Sequence[float]) -> Table:
        if len(baseline) != len(variant) or not baseline:
            raise ValueError("paired scores need the same, non-empty items")
        pairs = [(b >= 0.5, v >= 0.5) for b, v in zip(baseline, variant, strict=True)]
        return cls(pairs.count((True, True)), pairs.count((True, False)), pairs.count((False, True)),
                   pairs.count((False, False)))

    @property
    def n(self) -> float:
        return self.both + self.baseline_only + self.variant_only + self.neither

    @property
    def drop(self) -> float:
        return (self.baseline_only - self.variant_only) / self.n

    def scaled(self, n: float) -> Table:
        f = n / self.n
        return Table(self.both * f, self.baseline_only * f, self.variant_only * f, self.neither * f)


def drop_interval(t: Table, *, z: float) -> tuple[float, float, float]:
    """(drop, low, high): baseline score minus variant score and its interval, each end at one-sided level
    1 - Phi(z); Newcombe (1998) method 10."""
    n = t.n
    r1, r2 = t.both + t.baseline_only, t.variant_only + t.neither  # baseline right / wrong
    c1, c2 = t.both + t.variant_only, t.baseline_only + t.neither  # variant right / wrong
    p1, p2 = r1 / n, c1 / n
    l1, u1 = wilson(r1, n, z=z)
    l2, u2 = wilson(c1, n, z=z)
    if min(r1, r2, c1, c2) <= 0:
        phi = 0.0
    else:
        b = t.both * t.neither - t.baseline_only * t.variant_only
        c = b - n / 2 if b > n / 2 else (b if b < 0 else 0.0)
        phi = c / math.sqrt(r1 * r2 * c1 * c2)
    est = p1 - p2
    delta = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    eps = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return est, max(-1.0, est - delta), min(1.0, est + eps)


def p_value(t: Table, max_drop: float) -> float:
    """The smallest one-sided level at which the drop's upper end is at most `max_drop` (1.0 when not even at
    0.5, the point estimate): the p-value of H0 "drop > max_drop" by inverting the interval."""
    if drop_interval(t, z=0.0)[2] > max_drop + 1e-12:
        return 1.0
    lo, hi = 0.0, 40.0  # z: the upper end grows with z
    if drop_interval(t, z=hi)[2] <= max_drop + 1e-12:
        return 0.0
    for _ in range(_P_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if drop_interval(t, z=mid)[2] <= max_drop + 1e-12 else (lo, mid)
    return 1 - NormalDist().cdf(lo)


def holm(p_values: Mapping[str, float], *, alpha: float) -> dict[str, tuple[float, bool]]:
    """Holm's step-down procedure over one gate's variants: {variant: (its level, rejected)}. The i-th smallest
    p-value (i from 1) is tested at alpha / (m - i + 1), and only while every smaller one was rejected."""
    order = sorted(p_values, key=lambda k: (p_values[k], k))
    m = len(order)
    out: dict[str, tuple[float, bool]] = {}
    going = True
    for i, name in enumerate(order):
        level = alpha / (m - i)
        going = going and p_values[name] <= level
        out[name] = (level, going)
    return out


def run_alpha(run: int, *, alpha: float = ALPHA) -> float:
    """The level spent on the `run`-th recorded run (from 1) of an unchanged variant against an unchanged suite
    and baseline: alpha / 2**run (1.25%, 0.625%, ...), whose sum over any number of runs is below alpha."""
    return alpha / 2**run


def _worst_concordant(n: int, z: float) -> float:
    """The largest upper end of the drop over the tables on which the two never disagree, whatever the score."""
    return max(drop_interval(Table(k, 0, 0, n - k), z=z)[2] for k in range(n + 1))


@functools.lru_cache(maxsize=64)
def min_items(max_drop: float, *, alpha: float) -> int | None:
    """The fewest items with which a variant that agrees with the baseline on every item passes at `max_drop`,
    whatever the baseline's score (None above MAX_ITEMS, as for maxDrop 0)."""
    z = z_for(alpha)
    if max_drop <= 0:
        return None
    # the all-right table's bound is z^2 / (n + z^2): a lower bound of the worst case, a start for the search
    n = max(1, math.floor(z * z * (1 - max_drop) / max_drop))
    while n <= MAX_ITEMS and _worst_concordant(n, z) > max_drop:
        n += max(1, n // 200)
    if n > MAX_ITEMS:
        return None
    while n > 1 and _worst_concordant(n - 1, z) <= max_drop:
        n -= 1
    return n


def items_needed(t: Table, max_drop: float, *, alpha: float) -> int | None:
    """How many items a suite would need for this variant to pass at `max_drop` if the shares of its table held
    (None: its observed drop is already above max_drop, or more than MAX_ITEMS)."""
    z = z_for(alpha)
    if t.drop >= max_drop:
        return None

    def passes(n: int) -> bool:
        return drop_interval(t.scaled(n), z=z)[2] <= max_drop

    hi = max(2, int(t.n))
    while not passes(hi):
        hi *= 2
        if hi > MAX_ITEMS:
            return None
    lo = 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if passes(mid) else (mid, hi)
    return hi


def resolution(t: Table, *, alpha: float) -> float:
    """The smallest drop bound this suite could give the variant: the upper end had it disagreed with the baseline
    as often as it did, but with no drop (its disagreements split evenly between lost and gained)."""
    half = (t.baseline_only + t.variant_only) / 2
    return drop_interval(Table(t.both, half, half, t.neither), z=z_for(alpha))[2]
