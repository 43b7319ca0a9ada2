"""The duopoly of Defection-Free Collaborative Learning (Werner's thesis, ch. 3, §3.2 and §3.4).

Two firms sell models of qualities q_l <= q_h (q = 1 - f, f the average of the two firms' losses, eq. 3.1) to
consumers of types theta uniform on [0, 1], a type-theta consumer valuing a model of quality q at theta q
(Definition 2). Pure NumPy functions of the qualities:

* :func:`demands` (Lemma 21): D_l = (p_h - p_l)/(q_h - q_l) - p_l/q_l, D_h = 1 - (p_h - p_l)/(q_h - q_l);
* :func:`equilibrium_prices` and :func:`utilities` (Lemma 22, eq. 3.4): the Bertrand prices
  p_l* = q_l (q_h - q_l)/(4 q_h - q_l), p_h* = 2 q_h (q_h - q_l)/(4 q_h - q_l) and the price-optimal revenues
  U_l = q_l q_h (q_h - q_l)/(4 q_h - q_l)^2, U_h = 4 q_h^2 (q_h - q_l)/(4 q_h - q_l)^2;
* :func:`nash_objective` N = (U_l - U_l,0)(U_h - U_h,0) and :func:`nash_bargaining`, its maximiser under
  U_l >= U_l,0, U_h >= U_h,0 with q_h* the largest attainable quality (Proposition 2);
* :func:`quality_bound` B(a, b) of Algorithm 5 step 8: with a = rho_{t-1} = q_l,t-1/q_h,t-1 and
  b = q_h,t/q_h,t-1, B(a, b) q_h,t is the largest q_l,t at which the high-quality firm's revenue does not fall
  below its previous one (U_h(q_l,t, q_h,t) >= U_h(q_l,t-1, q_h,t-1); tested).

Both revenues are homogeneous of degree one in (q_l, q_h): U(q_l, q_h) = q_h U(rho, 1) with rho = q_l / q_h.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "demands",
    "equilibrium_prices",
    "revenues",
    "utilities",
    "bound_formula",
    "nash_objective",
    "nash_bargaining",
    "quality_bound",
    "LOW_FIRM_PEAK",
]

LOW_FIRM_PEAK = 4.0 / 7.0  # Proposition 1 (4): U_l grows in q_l up to q_l = 4/7 q_h, then falls


def _qualities(q_l, q_h):
    q_l, q_h = np.asarray(q_l, np.float64), np.asarray(q_h, np.float64)
    if not (np.all(np.isfinite(q_l)) and np.all(np.isfinite(q_h))):
        raise ValueError("qualities must be finite")
    if np.any(q_l <= 0) or np.any(q_h <= q_l):
        raise ValueError(f"qualities must satisfy 0 < q_l < q_h, got q_l={q_l}, q_h={q_h}")
    return q_l, q_h


def demands(q_l, q_h, p_l, p_h):
    """(D_l, D_h): the shares of consumers buying the low- and the high-quality model at prices p_l <= p_h
    (Lemma 21)."""
    q_l, q_h = _qualities(q_l, q_h)
    switch = (np.asarray(p_h) - np.asarray(p_l)) / (q_h - q_l)  # the type indifferent between the two models
    return switch - np.asarray(p_l) / q_l, 1.0 - switch


def equilibrium_prices(q_l, q_h):
    """(p_l*, p_h*) of Lemma 22: each firm's revenue-maximising price given the other's."""
    q_l, q_h = _qualities(q_l, q_h)
    return q_l * (q_h - q_l) / (4 * q_h - q_l), 2 * q_h * (q_h - q_l) / (4 * q_h - q_l)


def revenues(q_l, q_h):
    """eq. (3.4) without checks, on any arrays (NumPy or JAX, traced inside a compiled round): (U_l, U_h)."""
    denominator = (4 * q_h - q_l) ** 2
    return q_l * q_h * (q_h - q_l) / denominator, 4 * q_h**2 * (q_h - q_l) / denominator


def utilities(q_l, q_h):
    """(U_l, U_h): the firms' price-optimal revenues (eq. 3.4), for checked qualities 0 < q_l < q_h."""
    return revenues(*_qualities(q_l, q_h))


def nash_objective(q_l, q_h, q_l0, q_h0):
    """N(q_l, q_h; q_l0, q_h0) = (U_l - U_l,0)(U_h - U_h,0): the product of the firms' revenue gains over the
    disagreement point (q_l0, q_h0)."""
    u_l, u_h = utilities(q_l, q_h)
    u_l0, u_h0 = utilities(q_l0, q_h0)
    return (u_l - u_l0) * (u_h - u_h0)


def nash_bargaining(q_l0: float, q_h0: float, q_max: float) -> tuple:
    """(q_l*, q_h*): the Nash bargaining solution from the disagreement point (q_l0, q_h0) when the best
    attainable quality is ``q_max`` (>= q_h0). By Proposition 2 q_h* = q_max; q_l* maximises
    N(q_l, q_max) over the q_l in (0, q_max) where neither revenue falls below its disagreement value (a dense
    grid, then a bounded scalar search around its best point)."""
    from scipy.optimize import minimize_scalar

    q_l0, q_h0 = (float(x) for x in _qualities(q_l0, q_h0))
    if not np.isfinite(q_max) or q_max < q_h0:
        raise ValueError(f"q_max must be at least q_h0={q_h0}, got {q_max!r}")
    q_max = float(q_max)
    u_l0, u_h0 = utilities(q_l0, q_h0)
    grid = np.linspace(0.0, q_max, 200_001)[1:-1]
    u_l, u_h = utilities(grid, q_max)
    feasible = (u_l >= u_l0) & (u_h >= u_h0)
    if not feasible.any():
        return q_l0, q_h0
    value = np.where(feasible, (u_l - u_l0) * (u_h - u_h0), -np.inf)
    best = int(np.argmax(value))
    low, high = grid[max(best - 1, 0)], grid[min(best + 1, grid.size - 1)]
    found = minimize_scalar(
        lambda q: -nash_objective(q, q_max, q_l0, q_h0), bounds=(low, high), method="bounded", options={"xatol": 1e-12}
    )
    q_l = float(found.x) if -found.fun >= value[best] else float(grid[best])
    return q_l, q_max


def quality_bound(a, b):
    """B(a, b) of Algorithm 5 step 8 (module docstring): 4 - (4 - a)^2 / (2 (1 - a)) (b - sqrt(b^2 - 12 (1 - a)
    b / (4 - a)^2)), for a = rho_{t-1} in (0, 1) and b = q_h,t / q_h,t-1 >= 1."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if np.any(a <= 0) or np.any(a >= 1) or np.any(b < 1) or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError(f"B(a, b) needs 0 < a < 1 and b >= 1, got a={a}, b={b}")
    return bound_formula(a, b, np.sqrt)


def bound_formula(a, b, sqrt):
    """B(a, b) without checks, with ``sqrt`` of the array library (NumPy, or JAX inside a compiled round). For
    0 < a < 1 and b >= 1 the radicand b (b - 12 (1 - a) / (4 - a)^2) is positive: 12 (1 - a) / (4 - a)^2 < 1."""
    return 4 - (4 - a) ** 2 / (2 * (1 - a)) * (b - sqrt(b**2 - 12 * (1 - a) * b / (4 - a) ** 2))
