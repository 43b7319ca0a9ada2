"""Intervals over seeds and paired comparisons between algorithms: the statistics of a study.

A study (:mod:`fedjax_clust.run.study`) runs every algorithm on the same seeds, and a seed redraws everything
random in a run: the task's data (a task built from the seed), which clients attack, the initial models and
every round's keys (minibatches, subgroups, the attackers' noise). Two algorithms' runs on one seed therefore
share their data and attackers (and, with the same model and a shared start, their initial model), so their
difference on that seed is one draw of the difference between the algorithms; the differences over seeds are
independent draws. That is what makes a *paired* comparison valid
and much tighter than comparing two independent intervals when the seed moves both algorithms the same way.

Choices, as a researcher reading the table should know them:

* **Interval of a mean**: the Student-t interval, mean +- t_{(1+c)/2, n-1} s / sqrt(n), with s the sample
  standard deviation (n - 1 in the denominator) of the n seeds' final metrics and c the confidence (0.95). It
  assumes the seeds' values are independent and roughly normal; with few seeds the t multiplier grows
  quickly (n = 2: 12.71, n = 3: 4.30, n = 5: 2.78, n = 10: 2.26), which is why fewer than 3 seeds gets a
  warning (:data:`FEW_SEEDS`). One seed has no interval (its bounds are None).
* **Paired difference**: the same t interval over the per-seed differences a_s - b_s (the paired t
  interval); ``wins`` counts the seeds where a is better than b (higher for an accuracy, lower for a loss or a
  distance), ``ties`` where they are equal.
* **An ordering claim** ("a is better than b", a paper's table read as a ranking) is judged by the paired
  interval (:func:`ordering_verdict`): it *holds* when the whole interval lies on a's better side of zero,
  *fails* when it lies on the other side, and is *within the seeds' spread* when it contains zero; a
  difference of means alone never decides it.
* **Non-finite runs**: a run that stopped on non-finite models has no final metric. It is counted
  (``nonfinite``) and left out of the mean and the interval, and a paired difference uses only the seeds on
  which both runs finished, so n says how many values each number rests on.

Quantiles come from ``scipy.stats.t``.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Optional, Sequence

import numpy as np

__all__ = [
    "Interval",
    "PairedDifference",
    "t_interval",
    "paired_difference",
    "ordering_verdict",
    "t_multiplier",
    "higher_is_better",
    "FEW_SEEDS",
    "FewSeedsWarning",
]

FEW_SEEDS = 3  # fewer seeds than this: the t interval is very wide (n = 2: 12.7 standard errors)
# names of metrics where less is better (losses, distances, error rates, spreads, counts of broken clients, costs)
LOWER_IS_BETTER = ("loss", "dist", "error", "misclustering", "std", "nonfinite", "seconds", "bytes")


class FewSeedsWarning(UserWarning):
    """A t interval over fewer than :data:`FEW_SEEDS` seeds (its multiplier is 12.7 at n = 2)."""


def higher_is_better(metric: str) -> bool:
    """Whether a larger value of ``metric`` is better: accuracies yes; names containing any word of
    :data:`LOWER_IS_BETTER` (losses, distances, error rates, standard deviations, non-finite counts, seconds,
    bytes) no. A study takes the direction as an argument where the name misleads."""
    return not any(word in metric for word in LOWER_IS_BETTER)


def t_multiplier(n: int, confidence: float = 0.95) -> float:
    """t_{(1+c)/2, n-1}: the half-width of the t interval in standard errors (n >= 2)."""
    from scipy import stats

    return float(stats.t.ppf((1.0 + confidence) / 2.0, n - 1))


@dataclasses.dataclass(frozen=True)
class Interval:
    """The mean of ``n`` finite values with its standard deviation and ``confidence`` t interval [low, high]
    (None when n < 2; mean and std None when n = 0); ``nonfinite`` values were left out."""

    n: int
    mean: Optional[float]
    std: Optional[float]
    low: Optional[float]
    high: Optional[float]
    confidence: float
    nonfinite: int = 0

    @property
    def half_width(self) -> Optional[float]:
        return None if self.low is None or self.high is None or self.mean is None else self.high - self.mean

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "half_width": self.half_width}


@dataclasses.dataclass(frozen=True)
class PairedDifference:
    """a - b over the ``n`` seeds on which both finished: its :class:`Interval` (``difference``), and the
    seeds where a is better (``wins``), equal (``ties``) or worse (``losses``) by the metric's direction."""

    difference: Interval
    wins: int
    ties: int
    losses: int

    def to_dict(self) -> dict:
        return {**self.difference.to_dict(), "wins": self.wins, "ties": self.ties, "losses": self.losses}


def _finite(values: Sequence) -> tuple:
    array = np.asarray([np.nan if v is None else v for v in values], np.float64)
    keep = np.isfinite(array)
    return array[keep], int(np.sum(~keep))


def t_interval(values: Sequence, confidence: float = 0.95, *, warn: bool = True) -> Interval:
    """The Student-t interval of the mean of ``values`` (None or non-finite entries left out and counted);
    see the module docstring. Warns (:class:`FewSeedsWarning`) when fewer than :data:`FEW_SEEDS` values
    remain and ``warn``."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    finite, nonfinite = _finite(values)
    n = int(finite.size)
    if n == 0:
        return Interval(0, None, None, None, None, confidence, nonfinite)
    mean = float(np.mean(finite))
    if n == 1:
        if warn:
            warnings.warn("one value: no interval (run more seeds)", FewSeedsWarning, stacklevel=2)
        return Interval(1, mean, None, None, None, confidence, nonfinite)
    if warn and n < FEW_SEEDS:
        warnings.warn(
            f"a t interval over {n} values is {t_multiplier(n, confidence):.1f} standard errors wide on each side; "
            f"run at least {FEW_SEEDS} seeds",
            FewSeedsWarning,
            stacklevel=2,
        )
    std = float(np.std(finite, ddof=1))
    half = t_multiplier(n, confidence) * std / math.sqrt(n)
    return Interval(n, mean, std, mean - half, mean + half, confidence, nonfinite)


def paired_difference(
    a: Sequence, b: Sequence, confidence: float = 0.95, *, higher_better: bool = True, warn: bool = True
) -> PairedDifference:
    """a - b seed by seed (``a[s]`` and ``b[s]`` from the same seed), over the seeds where both are finite:
    the paired t interval of the mean difference, and wins / ties / losses of a (see the module docstring)."""
    if len(a) != len(b):
        raise ValueError(f"paired values need one value per seed on both sides, got {len(a)} and {len(b)}")
    x = np.asarray([np.nan if v is None else v for v in a], np.float64)
    y = np.asarray([np.nan if v is None else v for v in b], np.float64)
    both = np.isfinite(x) & np.isfinite(y)
    diff = x[both] - y[both]
    interval = t_interval(list(diff), confidence, warn=warn)
    interval = dataclasses.replace(interval, nonfinite=int(np.sum(~both)))
    better = diff > 0 if higher_better else diff < 0
    ties = int(np.sum(diff == 0))
    wins = int(np.sum(better))
    return PairedDifference(interval, wins, ties, int(diff.size) - wins - ties)


def ordering_verdict(difference: PairedDifference, *, higher_better: bool = True) -> str:
    """Whether "a is better than b" holds for the paired difference a - b (see the module docstring): "holds"
    when its t interval lies wholly on a's better side of 0 (above for a metric where higher is better, below
    otherwise), "fails" when it lies wholly on the other side, "within the seeds' spread" when it contains 0,
    "one seed" when there is no interval (a single seed where both are finite), and "no finite seed pair" when
    no seed has both finite (one of them diverged on every seed)."""
    low, high = difference.difference.low, difference.difference.high
    if difference.difference.n == 0:
        return "no finite seed pair"
    if low is None or high is None:
        return "one seed"
    if not higher_better:
        low, high = -high, -low
    if low > 0:
        return "holds"
    if high < 0:
        return "fails"
    return "within the seeds' spread"
