"""threshold_clustering equals a per-point loop of eq. (4); limiting cases of the radius rules."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_clust import kth_smallest_threshold, threshold_clustering


def reference(points, centers, steps, radius=None, quantile=None):
    """Plain per-point loop of Werner et al. eq. (4), float64."""
    points = np.asarray(points, np.float64)
    out = []
    for k, v in enumerate(np.asarray(centers, np.float64)):
        for _ in range(steps):
            dists = np.array([np.linalg.norm(z - v) for z in points])
            if quantile is not None:
                tau = np.quantile(dists, quantile)
            else:
                tau = np.broadcast_to(radius, (len(centers),))[k]
            total = np.zeros_like(v)
            for z, dist in zip(points, dists):
                total += z if dist <= tau else v
            v = total / len(points)
        out.append(v)
    return np.stack(out)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("rule", ["radius", "quantile"])
def test_matches_per_point_loop(seed, rule):
    rng = np.random.default_rng(seed)
    n, d, k = 37, 6, 3
    means = rng.normal(scale=4.0, size=(k, d))
    points = means[rng.integers(0, k, n)] + rng.normal(size=(n, d))
    centers = points[rng.choice(n, k, replace=False)] + 0.1 * rng.normal(size=(k, d))
    if rule == "radius":
        kwargs = dict(radius=float(rng.uniform(2.0, 5.0)))
    else:
        kwargs = dict(quantile=float(rng.uniform(0.1, 0.6)))
    got = threshold_clustering(jnp.asarray(points, jnp.float32), jnp.asarray(centers, jnp.float32), steps=5, **kwargs)
    want = reference(points, centers, 5, **kwargs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_infinite_radius_is_mean():
    rng = np.random.default_rng(0)
    points = rng.normal(size=(20, 4)).astype(np.float32)
    centers = rng.normal(size=(2, 4)).astype(np.float32) * 10
    got = threshold_clustering(points, centers, steps=1, radius=jnp.inf)
    np.testing.assert_allclose(got, np.broadcast_to(points.mean(0), (2, 4)), rtol=1e-5, atol=1e-5)
    got_q = threshold_clustering(points, centers, steps=3, quantile=1.0)
    np.testing.assert_allclose(got_q, np.broadcast_to(points.mean(0), (2, 4)), rtol=1e-5, atol=1e-5)


def test_zero_radius_leaves_centre_unchanged():
    rng = np.random.default_rng(1)
    points = rng.normal(size=(15, 3)).astype(np.float32)
    centers = np.array([[10.0, -3.0, 2.5]], np.float32)
    np.testing.assert_allclose(threshold_clustering(points, centers, steps=10, radius=0.0), centers)


def test_far_outlier_has_no_influence():
    rng = np.random.default_rng(2)
    inliers = rng.normal(size=(30, 5)).astype(np.float32)
    outlier = np.full((1, 5), 1e4, np.float32)
    center = inliers[:1]
    with_outlier = threshold_clustering(np.concatenate([inliers, outlier]), center, steps=4, radius=3.0)
    # Without the outlier the same points are inside; the average divides by N, so compare the update rule.
    ref = reference(np.concatenate([inliers, outlier]), center, 4, radius=3.0)
    np.testing.assert_allclose(with_outlier, ref, rtol=1e-5, atol=1e-5)
    assert np.linalg.norm(with_outlier - center) < 3.0  # never dragged towards 1e4
    # moving the outlier further away changes nothing
    further = threshold_clustering(np.concatenate([inliers, outlier * 100]), center, steps=4, radius=3.0)
    np.testing.assert_allclose(with_outlier, further, rtol=1e-5, atol=1e-5)


def test_per_cluster_radii_act_independently():
    rng = np.random.default_rng(3)
    points = rng.normal(size=(25, 4)).astype(np.float32) * 3
    centers = points[[0, 5]] + 0.2
    both = threshold_clustering(points, centers, steps=6, radius=np.array([1.0, 8.0]))
    first = threshold_clustering(points, centers[:1], steps=6, radius=1.0)
    second = threshold_clustering(points, centers[1:], steps=6, radius=8.0)
    np.testing.assert_allclose(both, np.concatenate([first, second]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(both, reference(points, centers, 6, radius=np.array([1.0, 8.0])), rtol=1e-4, atol=1e-4)
    # the radius really differs in effect: cluster 1 with cluster 2's radius moves elsewhere
    assert not np.allclose(first, threshold_clustering(points, centers[:1], steps=6, radius=8.0), atol=1e-3)


def test_jit_vmap_and_grad():
    rng = np.random.default_rng(4)
    points = jnp.asarray(rng.normal(size=(3, 12, 2)), jnp.float32)
    centers = points[:, :1]
    f = jax.jit(jax.vmap(lambda p, c: threshold_clustering(p, c, steps=3, quantile=0.5)))
    out = f(points, centers)
    for b in range(3):
        np.testing.assert_allclose(out[b], reference(points[b], centers[b], 3, quantile=0.5), rtol=1e-4, atol=1e-5)
    for rule in (dict(radius=1.5), dict(quantile=0.4)):
        g = jax.grad(lambda p: jnp.sum(threshold_clustering(p, p[:1], steps=2, **rule)))(points[0])
        assert g.shape == points[0].shape and np.all(np.isfinite(g)) and np.any(g != 0)


@pytest.mark.parametrize("select", ["search", "radix"])
@pytest.mark.parametrize("seed", range(3))
def test_kth_smallest_threshold_exact(seed, select):
    rng = np.random.default_rng(seed)
    rows = rng.exponential(size=(50, 40)).astype(np.float32) ** rng.uniform(0.5, 4)
    rows[::7, :10] = 0.0  # ties at zero
    rows[3, :] = 1.0  # a row of identical values
    rows[4, 5:25] = rows[4, 5]  # a large tie block
    rows[5] = np.float32(10.0) ** rng.uniform(-37, 37, size=40)  # a huge spread, subnormal to 1e37
    rows[6, :3] = np.finfo(np.float32).max
    rows[7, ::2] = np.finfo(np.float32).tiny * 3  # near the smallest normal (XLA:CPU flushes subnormals to 0)
    k = rng.integers(1, 41, size=50)
    thr = np.asarray(kth_smallest_threshold(rows, k, select=select))
    want = np.sort(rows, axis=1)[np.arange(50), k - 1]
    np.testing.assert_array_equal(rows <= thr[:, None], rows <= want[:, None])


@pytest.mark.parametrize("select", ["search", "radix"])
def test_kth_smallest_threshold_float64(select):
    """float64 keys (int64 bit patterns, 16 radix passes): the ball of np.sort's k-th value."""
    rng = np.random.default_rng(5)
    rows = 10.0 ** rng.uniform(-300, 300, size=(20, 33))
    rows[0, 5:20] = rows[0, 5]
    rows[1, :4] = 0.0
    k = rng.integers(1, 34, size=20)
    with jax.enable_x64(True):
        thr = np.asarray(kth_smallest_threshold(jnp.asarray(rows), k, select=select))
        assert thr.dtype == np.float64
    want = np.sort(rows, axis=1)[np.arange(20), k - 1]
    np.testing.assert_array_equal(rows <= thr[:, None], rows <= want[:, None])


def test_radix_select_is_a_fixed_program():
    """The radix select compiles to straight-line code: no while loop (each iteration of one is a
    device-to-host round trip on an accelerator), unlike the search."""
    rows = jnp.ones((4, 16), jnp.float32)
    hlo = {
        s: jax.jit(lambda r, s=s: kth_smallest_threshold(r, 3, select=s)).lower(rows).as_text()
        for s in ("search", "radix")
    }
    assert "while" in hlo["search"] and "while" not in hlo["radix"]


@pytest.mark.parametrize("rule", [dict(quantile=0.3), dict(quantile=1.0), dict(radius="theory")])
def test_radix_and_search_give_the_same_clustering(rule):
    rng = np.random.default_rng(8)
    points = jnp.asarray(np.concatenate([rng.normal(size=(40, 5)), rng.normal(6.0, 1.0, size=(20, 5))]), jnp.float32)
    points = points.at[7].set(points[3])  # a tie
    centers = points[:3]
    got = {s: np.asarray(threshold_clustering(points, centers, steps=6, select=s, **rule)) for s in ("search", "radix")}
    np.testing.assert_array_equal(got["search"], got["radix"])
    with pytest.raises(ValueError, match="quantile_select"):
        threshold_clustering(points, centers, steps=1, select="sort", **rule)


def test_kth_smallest_threshold_with_invalid_entries():
    rows = np.array([[3.0, 1.0, 0.5, 2.0], [4.0, 4.0, 1.0, 0.0]], np.float32)
    valid = np.array([[True, False, True, True], [True, True, True, False]])
    thr = np.asarray(kth_smallest_threshold(rows, np.array([2, 3]), valid))
    assert list((rows[0] <= thr[0]) & valid[0]) == [False, False, True, True]
    assert list((rows[1] <= thr[1]) & valid[1]) == [True, True, True, False]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(radius=1.0, quantile=0.5), "exactly one"),
        (dict(), "exactly one"),
        (dict(quantile=0.0), "quantile"),
        (dict(quantile=1.5), "quantile"),
        (dict(radius=-1.0), "radius"),
        (dict(radius=np.ones(3)), "radius"),
    ],
)
def test_bad_radius_rules(kwargs, match):
    with pytest.raises(ValueError, match=match):
        threshold_clustering(np.zeros((4, 2)), np.zeros((2, 2)), steps=1, **kwargs)


def test_bad_shapes():
    with pytest.raises(ValueError, match="points"):
        threshold_clustering(np.zeros(4), np.zeros((1, 4)), steps=1, radius=1.0)
    with pytest.raises(ValueError, match="centers"):
        threshold_clustering(np.zeros((4, 2)), np.zeros((1, 3)), steps=1, radius=1.0)
    with pytest.raises(ValueError, match="steps"):
        threshold_clustering(np.zeros((4, 2)), np.zeros((1, 2)), steps=-1, radius=1.0)


def test_theory_radius_recovers_a_separated_cluster():
    rng = np.random.default_rng(0)
    near = rng.normal(size=(30, 2)).astype(np.float32)
    far = (rng.normal(size=(30, 2)) + 10).astype(np.float32)
    points = np.concatenate([near, far])
    dist = np.linalg.norm(points - points[0], axis=1)
    tau = np.sqrt(np.quantile(dist, 0.1, method="lower") * np.quantile(dist, 0.9, method="lower"))
    want = reference(points, points[:1], 10, radius=tau)
    got = threshold_clustering(points, points[:1], steps=10, radius="theory")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[0], near.mean(0), atol=0.05)  # the far blob never enters the ball
    with pytest.raises(ValueError, match="theory"):
        threshold_clustering(points, points[:1], steps=1, radius="practice")


@pytest.mark.parametrize("client_axis", [0, 1])
@pytest.mark.parametrize("rule", [dict(radius=3.0), dict(quantile=0.4)])
def test_blocks_kernel_equals_concatenated_points(client_axis, rule):
    """Points split over blocks of coordinates (either layout), with invalid points, give eq. (4) on the
    concatenated valid points."""
    from fedjax_clust.ops.clustering import threshold_cluster_blocks

    rng = np.random.default_rng(11)
    n, widths = 23, (3, 5, 1)
    points = rng.normal(scale=2.0, size=(n, sum(widths)))
    valid = rng.random(n) < 0.8
    valid[0] = True
    splits = np.split(points.astype(np.float32), np.cumsum(widths)[:-1], axis=1)
    blocks = [jnp.asarray(b if client_axis == 0 else b.T) for b in splits]
    center = [jnp.asarray(b[0]) for b in splits]
    got, ball = jax.jit(
        lambda bl, c, v: threshold_cluster_blocks(bl, c, client_axis=client_axis, steps=4, valid=v, **rule)
    )(blocks, center, jnp.asarray(valid))
    want = reference(points[valid], points[:1], 4, **rule)[0]
    np.testing.assert_allclose(np.concatenate([np.asarray(g) for g in got]), want, rtol=1e-4, atol=1e-4)
    assert not np.any(np.asarray(ball) & ~valid)
