"""A counted quantity as a function of the number of clients N, fitted over a profile's grid to extrapolate it.

A round's FLOPs, bytes, kernels and peak memory are polynomials in N for the package's algorithms (N models,
N^2 cross-gradients, N^2 / G in subgroups, chunked loops whose trip count grows with N), so

    q(N) ~ c_0 + c_1 N + c_2 N^2,   c_k >= 0,

fitted by least squares on the *relative* error over the N of a profile (every subset of the three terms
solved, the best one with non-negative coefficients kept: a count never falls as N grows). The largest
relative residual on the grid is kept with the fit, so an extrapolation whose polynomial does not describe the
measured points says so. :func:`solve_for` finds the N at which an increasing function of N reaches a target
(a round of one second, the device's memory).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Callable, Optional, Sequence

import numpy as np

__all__ = ["Curve", "fit_curve", "solve_for", "MAX_CLIENTS"]

DEGREES = (0, 1, 2)
MAX_CLIENTS = 1e12  # no solution below this N: "never" (a cost that does not grow with N)


@dataclasses.dataclass(frozen=True)
class Curve:
    """q(N) = sum_k coefficients[k] N^degrees[k]; ``residual`` the largest |fit / value - 1| over the grid."""

    degrees: tuple
    coefficients: tuple
    residual: float

    def __call__(self, n):
        n = np.asarray(n, float)
        return sum(c * n**d for d, c in zip(self.degrees, self.coefficients))


def fit_curve(clients: Sequence[float], values: Sequence[float]) -> Curve:
    """The non-negative polynomial in N of degree at most 2 (module docstring) fitted to ``values`` at
    ``clients``; ValueError with fewer than two points or a negative value."""
    n = np.asarray(clients, float)
    y = np.asarray(values, float)
    if n.shape != y.shape or n.size < 2:
        raise ValueError(f"fit_curve needs at least two (N, value) pairs, got {n.size} and {y.size}")
    if np.any(y < 0) or not np.all(np.isfinite(y)):
        raise ValueError(f"fit_curve needs finite values >= 0, got {values!r}")
    if not np.any(y > 0):
        return Curve((0,), (0.0,), 0.0)
    weight = 1.0 / np.where(y > 0, y, y[y > 0].min())
    best = None
    for size in range(1, len(DEGREES) + 1):
        for degrees in itertools.combinations(DEGREES, size):
            if len(degrees) > n.size:
                continue
            basis = np.stack([n**d for d in degrees], axis=1)
            coefficients, *_ = np.linalg.lstsq(basis * weight[:, None], y * weight, rcond=None)
            if np.any(coefficients < 0):
                continue
            fitted = basis @ coefficients
            loss = float(np.sum(((fitted - y) * weight) ** 2))
            if best is None or loss < best[0] - 1e-12:
                best = (loss, degrees, coefficients, fitted)
    assert best is not None  # the constant fit is never negative
    _, degrees, coefficients, fitted = best
    residual = float(np.max(np.abs(fitted - y) * weight))
    return Curve(tuple(int(d) for d in degrees), tuple(float(c) for c in coefficients), residual)


def solve_for(
    fn: Callable[[float], float], target: float, low: float = 1.0, high: float = MAX_CLIENTS
) -> Optional[float]:
    """The N in [low, high] at which the non-decreasing ``fn`` reaches ``target`` (bisection on log N, to 0.1%);
    ``low`` if ``fn(low)`` already does, None if ``fn(high)`` does not."""
    if fn(low) >= target:
        return low
    if fn(high) < target:
        return None
    a, b = math.log(low), math.log(high)
    while b - a > 1e-3:
        mid = 0.5 * (a + b)
        if fn(math.exp(mid)) >= target:
            b = mid
        else:
            a = mid
    return math.exp(b)
