"""The order-statistic engine (fedjax_clust.ops.order_stats) against np.sort: ties, signed zeros, NaN, +-inf,
float32 and float64, odd and even counts, every k from 1 to c, both selections."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_clust.ops.order_stats import (
    from_order_keys,
    kth_smallest,
    kth_smallest_keys,
    max_key,
    order_keys,
    radix_select,
)

SELECTS = ("search", "radix")
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, np.copysign(np.nan, -1.0), 1.0, 1.0, -1.0, 2.5, -2.5]


def _rows(dtype, count, seed):
    """12 rows of ``count`` values: ties, both zeros, +-inf, NaN of both signs (a row without, one with
    several), the smallest normals and the largest finite values, shuffled."""
    rng = np.random.default_rng(seed)
    info = np.finfo(dtype)
    pool = np.array(SPECIAL + [info.tiny, -info.tiny, info.max, -info.max, 3.0, 3.0, 3.0], dtype)
    rows = rng.standard_normal((12, count)).astype(dtype)
    rows[:, : count // 2] = rng.choice(pool, size=(12, count // 2))
    rows[0] = rng.integers(-2, 3, size=count).astype(dtype)  # integers only: many ties, -0.0 never
    rows[1] = np.where(rng.random(count) < 0.5, -0.0, 0.0).astype(dtype)  # zeros of both signs only
    rows[2] = np.nan
    rows[2, 0] = -np.inf
    rows[3] = np.where(np.isnan(rows[3]), 7.0, rows[3])  # no NaN
    return np.stack([rng.permutation(r) for r in rows])


def _check_against_sort(rows, got, k):
    """got [rows] is np.sort(rows)[:, k - 1], including which zero (the -0.0 keys sit below +0.0's) and NaN
    after +inf."""
    want = np.sort(rows, axis=1)[:, k - 1]
    np.testing.assert_array_equal(got, want)  # equal values; NaN where np.sort puts NaN
    assert got.dtype == rows.dtype
    zero = want == 0
    negative_zeros = np.sum((rows == 0) & np.signbit(rows), axis=1)
    below = np.sum(rows < 0, axis=1)
    np.testing.assert_array_equal(np.signbit(got[zero]), (k - below <= negative_zeros)[zero])


@pytest.mark.parametrize("select", SELECTS)
@pytest.mark.parametrize("count", [1, 2, 7, 16, 33])
def test_kth_smallest_float32_equals_np_sort(count, select):
    rows = _rows(np.float32, count, seed=count)
    f = jax.jit(lambda r, k: kth_smallest(r, k, select=select))
    for k in range(1, count + 1):  # every k, both ends included
        _check_against_sort(rows, np.asarray(f(rows, k)), k)


@pytest.mark.parametrize("select", SELECTS)
@pytest.mark.parametrize("count", [8, 13])
def test_kth_smallest_float64_equals_np_sort(count, select):
    rows = _rows(np.float64, count, seed=100 + count)
    rows[5] = 10.0 ** np.random.default_rng(1).uniform(-300, 300, size=count)  # a huge spread
    with jax.enable_x64(True):
        f = jax.jit(lambda r, k: kth_smallest(r, k, select=select))
        for k in (1, 2, count // 2, count // 2 + 1, count - 1, count):
            got = np.asarray(f(jnp.asarray(rows), k))
            assert got.dtype == np.float64
            _check_against_sort(rows, got, k)


@pytest.mark.parametrize("select", SELECTS)
def test_kth_smallest_along_an_axis_with_one_k_per_row(select):
    """axis=0 and a k per column: the same as sorting every column."""
    rows = _rows(np.float32, 21, seed=3)  # [12, 21]
    k = np.random.default_rng(4).integers(1, 13, size=21)
    got = np.asarray(kth_smallest(rows, jnp.asarray(k), axis=0, select=select))
    np.testing.assert_array_equal(got, np.sort(rows, axis=0)[k - 1, np.arange(21)])


@pytest.mark.parametrize("select", SELECTS)
def test_padding_keys_and_traced_ranks(select):
    """Rows padded with the largest key (the aggregators' non-members) and a traced k per row counting the
    real entries only: the k-th smallest of the real entries."""
    rng = np.random.default_rng(5)
    values = rng.standard_normal((30, 11)).astype(np.float32)
    real = rng.random((30, 11)) < 0.6
    real[:, 0] = True
    keys = jnp.where(real, order_keys(values), max_key(np.int32))
    k = np.array([rng.integers(1, r.sum() + 1) for r in real])
    got = np.asarray(
        from_order_keys(jax.jit(lambda kk, k: kth_smallest_keys(kk, k, select=select))(keys, k), jnp.float32)
    )
    want = [np.sort(v[r])[kk - 1] for v, r, kk in zip(values, real, k)]
    np.testing.assert_array_equal(got, want)


def test_order_keys_order_like_the_floats():
    """key(a) < key(b) iff a < b over a sorted list of floats (subnormals to the largest, +-0, +-inf); every NaN
    (either sign) gets the largest key; from_order_keys inverts order_keys."""
    f = np.float32
    ladder = np.array(
        [
            -np.inf,
            -np.finfo(f).max,
            -1.0,
            -np.finfo(f).tiny,
            -1e-45,
            -0.0,
            0.0,
            1e-45,
            np.finfo(f).tiny,
            1.0,
            np.finfo(f).max,
            np.inf,
        ],
        f,
    )
    keys = np.asarray(order_keys(ladder))
    assert np.all(np.diff(keys) > 0) and keys.dtype == np.int32
    np.testing.assert_array_equal(
        np.asarray(from_order_keys(jnp.asarray(keys), jnp.float32)).view(np.int32), ladder.view(np.int32)
    )  # bit for bit, -0.0 included
    nans = np.array([np.nan, -np.nan], f)
    assert np.all(np.asarray(order_keys(nans)) == np.iinfo(np.int32).max)
    with jax.enable_x64(True):
        wide = np.asarray(order_keys(jnp.asarray(ladder.astype(np.float64))))
        assert wide.dtype == np.int64 and np.all(np.diff(wide) > 0)


def test_the_radix_select_is_loop_free_and_the_search_is_not():
    """On an accelerator every iteration of a while loop is a round trip: the radix path has none."""
    rows = jnp.ones((4, 16), jnp.float32)
    hlo = {s: jax.jit(lambda r, s=s: kth_smallest(r, 3, select=s)).lower(rows).as_text() for s in SELECTS}
    assert "while" in hlo["search"] and "while" not in hlo["radix"]


def test_radix_select_nonnegative_skips_the_sign_pass_only():
    """For keys >= 0 the sign pass can be skipped: the same answer."""
    rng = np.random.default_rng(6)
    keys = order_keys(jnp.asarray(np.abs(rng.standard_normal((9, 40))).astype(np.float32)))
    k = jnp.asarray(rng.integers(1, 41, size=9), jnp.int32)
    np.testing.assert_array_equal(
        np.asarray(radix_select(keys, k, nonnegative=True)), np.asarray(radix_select(keys, k))
    )


def test_the_attack_radius_rule_equals_the_sort_it_replaced():
    """The ball-edge attacker's radius (Federated-Clustering): entry max(k, 1) - 1 of the sorted row of honest
    squared distances (inf for attackers, NaN for a non-finite honest message), k = 0 with no honest client."""
    rng = np.random.default_rng(7)
    sq = (rng.standard_normal((16, 25)) ** 2).astype(np.float32)
    sq[3, :5] = np.nan
    honest = rng.random((16, 25)) < 0.7
    honest[4] = False  # nobody honest: k = 0
    row = jnp.where(honest, sq, jnp.inf)
    for quantile in (0.1, 0.5, 1.0):
        k = np.floor((honest.sum(1) - 1) * quantile + 1e-9).astype(int) + 1
        k = np.maximum(np.where(honest.sum(1) == 0, 0, k), 1)
        want = np.asarray(jnp.take_along_axis(jnp.sort(row, axis=1), jnp.asarray(k - 1)[:, None], axis=1))[:, 0]
        for select in SELECTS:
            np.testing.assert_array_equal(np.asarray(kth_smallest(row, jnp.asarray(k), select=select)), want)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: kth_smallest(jnp.ones(5), 0), "k must"),
        (lambda: kth_smallest(jnp.ones(5), 6), "k must"),
        (lambda: kth_smallest(jnp.ones(5), 1.5), "k must"),
        (lambda: kth_smallest(jnp.ones(5, jnp.int32), 1), "floating"),
        (lambda: kth_smallest(jnp.ones((0,)), 1), "non-empty"),
        (lambda: kth_smallest(jnp.ones(5), 1, select="sort"), "one of"),
    ],
)
def test_bad_input_is_a_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
