"""The duopoly of Defection-Free Collaborative Learning (thesis ch. 3): Lemma 22's prices against a numerical
maximisation of p D, Proposition 1's monotonicities on a grid, the Nash bargaining solution against a brute-force
search, and Algorithm 5's bound B(a, b)."""

import numpy as np
import pytest

from fedjax_clust.incentives.duopoly import (
    LOW_FIRM_PEAK,
    demands,
    equilibrium_prices,
    nash_bargaining,
    nash_objective,
    quality_bound,
    utilities,
)


@pytest.mark.parametrize("q_l, q_h", [(0.2, 0.9), (0.5, 0.6), (0.05, 0.3), (0.7, 0.95)])
def test_lemma_22_prices_are_mutual_best_responses(q_l, q_h):
    p_l, p_h = equilibrium_prices(q_l, q_h)
    grid = np.linspace(0.0, q_h, 400_001)
    revenue_l = grid * demands(q_l, q_h, grid, p_h)[0]
    revenue_l = np.where(grid <= p_h, revenue_l, -np.inf)
    revenue_h = grid * demands(q_l, q_h, p_l, grid)[1]
    revenue_h = np.where(grid >= p_l, revenue_h, -np.inf)
    assert grid[np.argmax(revenue_l)] == pytest.approx(p_l, abs=1e-5)
    assert grid[np.argmax(revenue_h)] == pytest.approx(p_h, abs=1e-5)
    u_l, u_h = utilities(q_l, q_h)
    d_l, d_h = demands(q_l, q_h, p_l, p_h)
    assert u_l == pytest.approx(p_l * d_l) and u_h == pytest.approx(p_h * d_h)
    assert 0 < d_l and 0 < d_h and d_l + d_h <= 1


def test_proposition_1_monotonicities():
    q_h = np.linspace(0.1, 1.0, 181)
    rho = np.linspace(0.01, 0.99, 197)
    R, H = np.meshgrid(rho, q_h)
    u_l, u_h = utilities(R * H, H)
    assert np.all(np.diff(u_h, axis=0) > 0)  # U_h increases in q_h (rho fixed ...)
    for q in (0.3, 0.6, 1.0):  # ... and, at fixed q_l, in q_h; decreases in q_l
        q_l = np.linspace(0.01, 0.99, 99) * q
        hs = np.linspace(q * 1.001, 1.5, 200)
        assert np.all(np.diff(utilities(np.full_like(hs, q_l[10]), hs)[1]) > 0)
        assert np.all(np.diff(utilities(np.full_like(hs, q_l[10]), hs)[0]) > 0)  # U_l increases in q_h
        assert np.all(np.diff(utilities(q_l, q)[1]) < 0)
        low = utilities(q_l, q)[0]
        rising = q_l < LOW_FIRM_PEAK * q
        assert np.all(np.diff(low[rising]) > 0) and np.all(np.diff(low[~rising]) < 0)
        fine = np.linspace(0.5, 0.65, 150_001) * q
        assert fine[np.argmax(utilities(fine, q)[0])] / q == pytest.approx(4 / 7, abs=1e-5)


@pytest.mark.parametrize("q_l0, q_h0, q_max", [(0.3, 0.6, 0.9), (0.1, 0.5, 0.55), (0.45, 0.8, 0.95)])
def test_nash_bargaining_against_a_brute_force_search(q_l0, q_h0, q_max):
    q_l, q_h = nash_bargaining(q_l0, q_h0, q_max)
    assert q_h == q_max  # Proposition 2
    ls = np.linspace(0.001, 0.999, 1999)
    hs = np.linspace(q_h0, q_max, 301)
    L, H = np.meshgrid(ls, hs)
    L = L * H
    u_l, u_h = utilities(L, H)
    u_l0, u_h0 = utilities(q_l0, q_h0)
    value = np.where((u_l >= u_l0) & (u_h >= u_h0), (u_l - u_l0) * (u_h - u_h0), -np.inf)
    best = np.unravel_index(np.argmax(value), value.shape)
    assert nash_objective(q_l, q_h, q_l0, q_h0) >= value[best] - 1e-12
    assert q_l == pytest.approx(L[best], abs=2e-3) and H[best] == pytest.approx(q_max)
    assert q_l >= q_l0  # the low firm gains quality too


def test_quality_bound_is_the_high_firms_break_even():
    rng = np.random.default_rng(0)
    for _ in range(200):
        a = rng.uniform(0.01, 0.99)
        q_prev = rng.uniform(0.1, 0.9)
        q_now = q_prev * rng.uniform(1.0, 1.3)
        bound = quality_bound(a, q_now / q_prev) * q_now
        before = utilities(a * q_prev, q_prev)[1]
        assert utilities(bound, q_now)[1] == pytest.approx(before, rel=1e-9)
        assert utilities(bound * 0.999, q_now)[1] > before  # below the bound the high firm gains
    assert quality_bound(0.5, 1.0) == pytest.approx(0.5)  # no gain of q_h: q_l may not move


@pytest.mark.parametrize(
    "call, word",
    [
        (lambda: utilities(0.6, 0.5), "q_l < q_h"),
        (lambda: utilities(0.0, 0.5), "q_l"),
        (lambda: utilities(np.nan, 0.5), "finite"),
        (lambda: nash_bargaining(0.3, 0.6, 0.5), "q_max"),
        (lambda: quality_bound(1.0, 1.1), "B"),
        (lambda: quality_bound(0.5, 0.9), "B"),
    ],
)
def test_bad_inputs(call, word):
    with pytest.raises(ValueError, match=word):
        call()
