"""Threshold-Clustering (Werner et al., *Provably Personalized and Robust Federated Learning*, Algorithm 3).

Given points z_1..z_N and K centre initialisations v_{k,0}, every step l = 1..M applies update rule (4)
to each centre independently:

    v_{k,l} = (1/N) * sum_i [ z_i * 1(||z_i - v_{k,l-1}|| <= tau_{k,l})
                            + v_{k,l-1} * 1(||z_i - v_{k,l-1}|| >  tau_{k,l}) ]
            = v_{k,l-1} + (1/N) * sum_{i in ball} (z_i - v_{k,l-1})

i.e. a point inside the ball of radius tau around the current centre keeps its value, any other point is
replaced by ("clipped to") the centre, and all N are averaged.

Radius rules (exactly one is given):
  * ``radius``: a fixed tau, a scalar or one value per cluster.
  * ``radius="theory"``: tau ~ sqrt(sigma * Delta) as in Theorems 3 and 4, with sigma and Delta estimated
    from the points (see ``_theory_sq_radius``).
  * ``quantile`` q in (0, 1]: tau_{k,l} is recomputed at every step as the q-quantile of the N distances
    ||z_i - v_{k,l-1}|| (the paper's "20th percentile" rule of §4.2 and the 10th of §4.3). The ball then
    holds the k = floor((N - 1) q) + 1 nearest points (ties at the boundary included), which is exactly the
    set {i : ||z_i - v|| <= np.quantile(dists, q)} for numpy's default (linear) quantile. q = 1 gives the
    plain mean of all points. The paper authors' scripts instead take tau = the (floor(N q) + 1)-th smallest
    distance and keep the points strictly closer, i.e. the floor(N q) nearest (fewer at ties). The two
    rules pick the same ball whenever N q is an integer (the paper's settings: N = 300, q = 0.2 -> 60;
    16 clients per group, q = 0.25 -> 4) and can differ by one point otherwise (N = 9, q = 0.2: ours 2,
    theirs 1) and at ties on the boundary. We keep the numpy-quantile definition (q = 1 is the mean, the
    ball is never empty).

Implementation notes (measured on a 2-core CPU, see docs/performance.md):
  * Distances are computed as ||z - v||^2 = ||z'||^2 - 2 z'.u + ||u||^2 with z' = z - v_0 and u = v - v_0,
    i.e. the expansion is taken around the centre's *initial* value. This keeps the per-step work at two
    matrix-vector products (XLA's CPU code for them is ~1.5x faster than the direct difference form) while
    the cancellation error is relative to the distance from v_0, the scale at which inclusion is decided.
  * The quantile threshold is found without sorting, by the package's order-statistic engine
    (:mod:`fedjax_clust.ops.order_stats`): the k-th smallest squared distance is selected by a
    safeguarded interpolation search over the float bit patterns (int32 for float32, int64 for float64;
    they order like the non-negative floats), counting the points below a candidate at each iteration.
    Interpolation steps alternate with bisection steps, so it needs at most ~64 counting passes and
    typically a handful; the search stops as soon as a candidate has exactly k points below it, which
    already fixes the ball. A full sort per step
    was ~10x slower on CPU.
"""

from __future__ import annotations

import math
from typing import Literal, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fedjax_clust.core.validation import check_fraction, check_int, check_radius, check_rank
from fedjax_clust.ops.order_stats import (
    SELECTS,
    from_order_keys,
    full_bracket,
    order_keys,
    radix_select,
    resolve_select,
    search,
    warm_bracket,
)

__all__ = [
    "threshold_clustering",
    "quantile_rank",
    "kth_smallest_threshold",
    "threshold_cluster_one",
    "threshold_cluster_blocks",
    "kmeans",
    "kmeans_plus_plus",
    "nearest_center",
    "QUANTILE_SELECTS",
    "resolve_select",
]

SHIFTED_COPY_MAX_BYTES = 1 << 20  # threshold_cluster_blocks: rows up to 1 MB are shifted once


def quantile_rank(num_points, quantile):
    """k = floor((n - 1) q) + 1: the ball of the quantile rule holds the k nearest of n points.

    Works on Python numbers and on traced arrays (a small epsilon guards float32 rounding of (n-1) q when
    it is an integer in exact arithmetic).
    """
    if isinstance(num_points, (int, np.integer)) and isinstance(quantile, (float, int, np.floating)):
        return int(math.floor((num_points - 1) * float(quantile) + 1e-9)) + 1
    n = jnp.asarray(num_points, jnp.float32)
    return (jnp.floor((n - 1.0) * quantile + 1e-4) + 1.0).astype(jnp.int32)


def _invalid_key(key_dtype):
    """The bit pattern of +inf: above every finite non-negative float of that width."""
    return np.array(0x7FF0000000000000 if jnp.dtype(key_dtype).itemsize == 8 else 0x7F800000, key_dtype)


def _to_keys(sq_dists, valid=None):
    """Order keys of the squared distances (:func:`fedjax_clust.ops.order_stats.order_keys`) with every
    negative value and -0.0 folded to +0.0's key 0; invalid entries get the +inf key, which no candidate
    threshold reaches."""
    keys = jnp.maximum(order_keys(sq_dists), 0)
    return keys if valid is None else jnp.where(valid, keys, _invalid_key(keys.dtype))


QUANTILE_SELECTS = SELECTS
QuantileSelect = Literal[QUANTILE_SELECTS]
# a Threshold-Clustering radius as a builder option: a number, or "theory" (see check_radius_rule)
Radius = Union[float, Literal["theory"], None]
# the radius rule of Federated- and Momentum-Clustering when neither a radius nor a quantile is given: the
# 20th percentile of the distances at every step (Werner et al. §4.2, MNIST)
DEFAULT_QUANTILE = 0.2


def _warm_bracket(keys, k, valid, lo_guess, hi_guess):
    """Use (lo_guess, hi_guess) where it is a valid bracket, else the widest one, row by row."""
    # Fallback without extra passes: every key lies in (-1, +inf key) and finite keys are all counted.
    num = keys.shape[-1] if valid is None else jnp.sum(valid.astype(jnp.int32), axis=-1)
    return warm_bracket(keys, k, lo_guess, hi_guess, (-1, _invalid_key(keys.dtype) - 1, 0, num))


def kth_smallest_threshold(sq_dists, k, valid=None, *, select="auto"):
    """A threshold t with {i : sq_dists[i] <= t} equal to the k smallest entries (ties at the k-th included).

    ``sq_dists``: [..., N] non-negative floats (float32, or float64 with ``jax_enable_x64``); ``k``: int or
    int array broadcastable to the leading dims, 1 <= k <= number of valid entries; ``valid``: optional
    bool [..., N], invalid entries never count. Exact (no approximation); see the module docstring.
    ``select``: "search" (bracketed search), "radix" (fixed-pass radix select) or "auto" (see
    :func:`resolve_select`); the methods may return different thresholds, never different sets below them.
    """
    resolve_select(select)
    sq_dists = jnp.asarray(sq_dists)
    if sq_dists.ndim < 1 or sq_dists.shape[-1] < 1:
        raise ValueError(f"sq_dists must have shape [..., N] with N >= 1, got shape {sq_dists.shape}")
    check_rank("k", k, sq_dists.shape[-1], "the number of entries")
    return _kth_smallest_threshold(sq_dists, k, valid, select)


def _kth_smallest_threshold(sq_dists, k, valid=None, select="search"):
    sq_dists = lax.stop_gradient(sq_dists.astype(jnp.result_type(sq_dists.dtype, jnp.float32)))
    keys = _to_keys(sq_dists, valid)
    k = jnp.broadcast_to(jnp.asarray(k, jnp.int32), keys.shape[:-1])
    if resolve_select(select) == "radix":
        hi = radix_select(keys, k, nonnegative=True)
    else:
        _, hi = search(keys, k, *full_bracket(keys, k, valid))
    return from_order_keys(hi, sq_dists.dtype)


def _key_of_distance(dist, up):
    """Key of dist^2 widened outwards by a relative 1e-5 (float32 rounding of the distances); -1 below 0."""
    sq = jnp.square(dist) * (1.0 + 1e-5 if up else 1.0 - 1e-5)
    key = _to_keys(sq)
    return jnp.where(dist > 0, key, -1) if not up else key


def _key_to_distance(key, dtype):
    value = from_order_keys(jnp.maximum(key, 0), dtype)
    return jnp.where(key < 0, -1.0, jnp.sqrt(value))


def _block_dots(blocks, vectors, client_axis):
    """[N]: sum over blocks of every point's block times the block's vector."""
    return sum(b @ v if client_axis == 0 else v @ b for b, v in zip(blocks, vectors))


def _block_weighted_sums(blocks, weights, client_axis):
    """Per block, sum_j weights_j * point_j ([D_k] each)."""
    return [weights @ b if client_axis == 0 else b @ weights for b in blocks]


def threshold_cluster_blocks(
    blocks, center, *, client_axis, steps, radius=None, quantile=None, valid=None, unbatched=False, select="auto"
):
    """Algorithm 3 for a single centre on N points stored as 2-D blocks that split the coordinates.

    ``blocks``: list of arrays, each [N, D_k] (``client_axis=0``) or [D_k, N] (``client_axis=1``); point j
    is the concatenation of row (column) j of every block, so a pytree of per-client gradients is used
    as is, one block per leaf, without concatenating or transposing it. ``center``: list of [D_k].
    Returns (list of the centre's blocks after ``steps`` updates of eq. (4), bool [N] ball used by the
    last update; for steps == 0 the ball at the initial centre). ``valid`` optional bool [N]: invalid
    points are ignored and the average runs over the valid ones. No argument checking (jit-internal kernel).
    ``unbatched=True`` promises that the call is not vmapped (one row per loop iteration), so that a branch
    (``lax.cond``) costs nothing on rows without non-finite points (see below).

    Non-finite points: a point with a NaN or infinite coordinate (or so far from the centre that
    ||z - c||^2 overflows) is at an infinite distance, outside every ball (also a ball of radius inf), and,
    as eq. (4) says of every point outside the ball, contributes the centre itself: it still counts in the
    average's N but never moves the centre. The masked sums select with ``where`` (never 0 * NaN), so one
    client sending NaN or inf cannot make another client's centre non-finite; the result equals the one
    where that client's point is finite but far outside every ball. The quantile rule ranks the points as
    usual (k from all valid points) and, when k exceeds the finite points, takes all of them. A non-finite
    initial centre (the client's own message) stays non-finite.

    The centre is kept as v = c + u with c the initial centre: ||z_j - v||^2 = ||z_j - c||^2 - 2 (z_j - c).u
    + ||u||^2, and every step is two matrix-vector products over the blocks ((z - c).u and
    sum_j m_j (z_j - c)). Rows above ``SHIFTED_COPY_MAX_BYTES`` never get a shifted copy: the products run
    on the blocks as stored, with the shift applied to their results (z.u - c.u, sum_j m_j z_j - |m| c);
    smaller rows are shifted once, which saves a few operations per step (what counts for them on XLA:CPU),
    and their non-finite entries are zeroed in that same pass. A large row is zeroed in a copy only when the
    call is batched; unbatched, the masked sums branch on "the row holds a non-finite point", so the
    common all-finite row reads its block as it is (a zeroed copy of every 11 MB MLP row made the N = 256
    MLP round 9-12% slower on the 2-core CPU). Small models
    prefer the client axis last (XLA's CPU GEMVs over [D, N] with tiny D are ~2x faster), large ones the
    natural [N, D] layout of a vmapped gradient. With the quantile rule the k-th distance is searched only
    inside a bracket carried over from the previous step: the centre moved by delta = ||v_l - v_{l-1}||,
    so by the triangle inequality every distance, hence the k-th smallest, moved by at most delta. The
    bracket is checked (two counting passes) and replaced by the full one for any row where rounding
    broke it. ``select`` picks how the quantile rule finds the k-th distance (see :func:`resolve_select`):
    "search" is the bracketed search just described, "radix" the fixed-pass radix select (no loop, no
    bracket), "auto" the first on a CPU and the second on an accelerator; the ball is the same.
    """
    dtype = blocks[0].dtype
    reduce_axis = 1 - client_axis
    shifted = [b - (c[None, :] if client_axis == 0 else c[:, None]) for b, c in zip(blocks, center)]
    if sum(b.size for b in blocks) * dtype.itemsize <= SHIFTED_COPY_MAX_BYTES:
        # small rows: one shifted copy (fewer operations per step), its non-finite entries zeroed in the same
        # pass (0 * inf = NaN in the masked sums otherwise); a point is finite if its row had none
        finite = [jnp.isfinite(z) for z in shifted]
        blocks, offset = [jnp.where(f, z, 0) for f, z in zip(finite, shifted)], None
        zz = sum(jnp.sum(jnp.square(z), axis=reduce_axis) for z in blocks)
        finite_point = (sum(jnp.sum(~f, axis=reduce_axis) for f in finite) == 0) & jnp.isfinite(zz)
    else:
        # large rows: never copy the block shifted (the shift fuses into the zz pass, NaN/inf propagate to zz)
        offset = center
        zz = sum(jnp.sum(jnp.square(z), axis=reduce_axis) for z in shifted)
        finite_point = jnp.isfinite(zz)
        if not unbatched:  # one zeroed copy of the row
            blocks = [jnp.where(jnp.isfinite(b), b, 0) for b in blocks]
    usable = finite_point if valid is None else finite_point & valid  # non-finite: outside every ball
    zeroed = offset is None or not unbatched
    all_finite = jnp.all(finite_point)
    if valid is not None:
        n = jnp.maximum(jnp.sum(valid.astype(dtype)), 1.0)
    else:
        n = jnp.asarray(blocks[0].shape[client_axis], dtype)

    def dot(a, b):
        return sum(jnp.dot(x, y) for x, y in zip(a, b))

    def sq_dists(u):
        zu = _block_dots(blocks, u, client_axis)
        if offset is not None:
            zu = zu - dot(offset, u)
        return jnp.where(usable, jnp.maximum(zz - 2.0 * zu + dot(u, u), 0.0), jnp.inf)

    def masked_sums(m):
        """sum_{j in ball} (g_j - c), or of g_j; on raw large blocks, rows with a non-finite point branch to
        the sums over a zeroed copy (the all-finite branch reads the block as it is)."""
        if zeroed:
            return _block_weighted_sums(blocks, m, client_axis)
        return lax.cond(
            all_finite,
            lambda: _block_weighted_sums(blocks, m, client_axis),
            lambda: _block_weighted_sums([jnp.where(jnp.isfinite(b), b, 0) for b in blocks], m, client_axis),
        )

    def update(u, inside):
        m = inside.astype(dtype)
        count = jnp.sum(m)
        sums = masked_sums(m)
        if offset is not None:
            sums = [s - count * c for s, c in zip(sums, offset)]
        return [ui + (s - count * ui) / n for ui, s in zip(u, sums)]

    def result(u):
        return [c + ui for c, ui in zip(center, u)]

    u0 = [jnp.zeros_like(c) for c in center]
    num_points = blocks[0].shape[client_axis]
    if radius is not None:
        if isinstance(radius, str):  # "theory": tau^2 = sigma_hat * Delta_hat, fixed for all steps
            r2 = _theory_sq_radius(jnp.where(finite_point, zz, jnp.inf), valid, select)  # non-finite: last
        else:
            r2 = jnp.square(jnp.asarray(radius, dtype))

        def ball(u):
            return (sq_dists(u) <= r2) & usable

        if steps == 0:
            return center, ball(u0)

        def step(_, carry):
            u, _ = carry
            inside = ball(u)
            return update(u, inside), inside

        u, last = lax.fori_loop(0, steps, step, (u0, jnp.zeros((num_points,), bool)))
        return result(u), last

    num = num_points if valid is None else jnp.sum(valid.astype(jnp.int32))
    k = jnp.minimum(quantile_rank(num, quantile), jnp.sum(usable.astype(jnp.int32)))

    def keys_at(u):
        return _to_keys(lax.stop_gradient(sq_dists(u)), usable)

    if resolve_select(select) == "radix":  # no bracket: a fixed number of passes from any centre

        def first_ball(u):
            keys = keys_at(u)
            return (keys <= radix_select(keys, k, nonnegative=True)) & usable, ()

        def next_ball(new_u, u, bracket):
            return first_ball(new_u)
    else:  # the search, warm-started from the previous step's bracket (widened by the centre's move)

        def first_ball(u):
            keys = keys_at(u)
            lo, hi = search(keys, k, *full_bracket(keys, k, usable))
            return (keys <= hi) & usable, (_key_to_distance(lo, dtype), _key_to_distance(hi, dtype))

        def next_ball(new_u, u, bracket):
            lo_d, hi_d = bracket
            delta = jnp.sqrt(sum(jnp.sum(jnp.square(a - b)) for a, b in zip(new_u, u)))
            keys = keys_at(new_u)
            lo, hi = search(
                keys,
                k,
                *_warm_bracket(
                    keys, k, usable, _key_of_distance(lo_d - delta, up=False), _key_of_distance(hi_d + delta, up=True)
                ),
            )
            return (keys <= hi) & usable, (_key_to_distance(lo, dtype), _key_to_distance(hi, dtype))

    inside0, bracket0 = first_ball(u0)
    if steps == 0:
        return center, inside0

    def step(_, carry):
        u, inside, bracket = carry
        new_u = update(u, inside)
        return (new_u,) + next_ball(new_u, u, bracket)

    # Steps 1..M-1 each update with the current ball and find the next one; the last update follows.
    u, inside, _ = lax.fori_loop(0, steps - 1, step, (u0, inside0, bracket0))
    return result(update(u, inside)), inside


def threshold_cluster_one(points, center, *, steps, radius=None, quantile=None, valid=None, select="auto"):
    """Algorithm 3 for one centre on points [N, D] (rows); see :func:`threshold_cluster_blocks`."""
    (center,), inside = threshold_cluster_blocks(
        [jnp.asarray(points).T],
        [center],
        client_axis=1,
        steps=steps,
        radius=radius,
        quantile=quantile,
        valid=valid,
        select=select,
    )
    return center, inside


THEORY_QUANTILES = (0.1, 0.9)


def _kth_value(sq_dists, k, valid, select="search"):
    """The k-th smallest entry itself (not just a separating threshold)."""
    thr = _kth_smallest_threshold(sq_dists, k, valid, select)
    inside = sq_dists <= thr if valid is None else (sq_dists <= thr) & valid
    return jnp.max(jnp.where(inside, sq_dists, 0.0), axis=-1)


def _theory_sq_radius(sq_dists, valid=None, select="search"):
    """tau^2 for the theory rule tau ~ sqrt(sigma * Delta) (Werner et al. §3, Theorems 3 and 4).

    sigma and Delta are estimated from the distances to the initial centre: sigma_hat is the 10th and
    Delta_hat the 90th percentile distance (a near, within-cluster scale and a far, between-cluster one;
    this presumes the centre's cluster holds more than 10% and less than 90% of the points). The radius is
    computed once and held for every step.
    """
    num = sq_dists.shape[-1] if valid is None else jnp.sum(valid.astype(jnp.int32), axis=-1)
    sigma_sq = _kth_value(sq_dists, quantile_rank(num, THEORY_QUANTILES[0]), valid, select)
    delta_sq = _kth_value(sq_dists, quantile_rank(num, THEORY_QUANTILES[1]), valid, select)
    return jnp.sqrt(sigma_sq * delta_sq)


def check_radius_rule(radius, quantile, num_clusters: Optional[int] = None):
    """Validate 'exactly one of radius / quantile'; raise ValueError naming the argument."""
    if (radius is None) == (quantile is None):
        raise ValueError(
            "give exactly one of radius= (fixed tau or 'theory') or quantile= (per-step "
            f"percentile rule), got radius={radius!r}, quantile={quantile!r}"
        )
    if quantile is not None:
        check_fraction("quantile", quantile)
    else:
        check_radius(radius, num_clusters)


def _float_array(name: str, value) -> jax.Array:
    """``value`` as a JAX array of real numbers; ValueError naming ``name`` for strings, objects, complex."""
    array = np.asarray(value) if not isinstance(value, jax.Array) else value
    if not (jnp.issubdtype(array.dtype, jnp.floating) or jnp.issubdtype(array.dtype, jnp.integer)):
        raise ValueError(f"{name} must be an array of real numbers, got dtype {array.dtype}")
    return jnp.asarray(array)


def threshold_clustering(points, centers, *, steps, radius=None, quantile=None, select="auto"):
    """Threshold-Clustering, Werner et al. Algorithm 3 with update rule (4).

    Args:
      points: [N, d] points z_i to cluster.
      centers: [K, d] centre initialisations v_{k,0}.
      steps: number of update steps M (>= 0).
      radius: fixed tau (distance units), a scalar or an array of K per-cluster radii; ``jnp.inf`` makes
        every step the plain mean of all points; or ``"theory"``: tau = sqrt(sigma_hat * Delta_hat), the
        radius of the paper's theorems with sigma and Delta estimated per centre from the distances to its
        initial value (10th and 90th percentile distance), held for all steps.
      quantile: q in (0, 1]: tau_{k,l} is the q-quantile of the N distances from v_{k,l-1}, recomputed at
        every step (the paper's percentile rule).
      select: how the quantile rule finds its k-th distance: "search", "radix" or "auto" (default; see
        :func:`resolve_select`). The result does not depend on it.

    Exactly one of ``radius`` and ``quantile`` must be given. Returns the [K, d] centre estimates v_{k,M}.
    Jit-compatible (``steps`` is static), vmappable, and differentiable w.r.t. ``points`` and ``centers``
    almost everywhere (ball membership is piecewise constant and treated as such). float32 points run at
    full float32 matmul precision on every device; float64 points (with ``jax_enable_x64``) in float64.
    A point with a NaN or infinite coordinate lies outside every ball and never moves a centre (see
    :func:`threshold_cluster_blocks`).
    """
    check_int("steps", steps, 0)
    points = _float_array("points", points)
    centers = _float_array("centers", centers)
    if points.ndim != 2:
        raise ValueError(f"points must have shape [N, d], got shape {points.shape}")
    if centers.ndim != 2 or centers.shape[1] != points.shape[1]:
        raise ValueError(f"centers must have shape [K, d] with d={points.shape[1]}, got shape {centers.shape}")
    if points.shape[0] == 0:
        raise ValueError("points must hold at least one point (N >= 1)")
    check_radius_rule(radius, quantile, centers.shape[0])
    select = resolve_select(select)
    with jax.default_matmul_precision("highest"):
        return threshold_clustering_unchecked(points, centers, steps, radius, quantile, select)


def threshold_clustering_unchecked(points, centers, steps, radius, quantile, select):
    """:func:`threshold_clustering` past its checks (``select`` resolved, shapes checked), at the caller's matmul
    precision: what a builder that checked its options once calls inside its round."""
    dtype = jnp.result_type(points.dtype, centers.dtype, jnp.float32)
    points = points.astype(dtype)
    centers = centers.astype(dtype)
    if isinstance(radius, str):
        return jax.vmap(lambda c: threshold_cluster_one(points, c, steps=steps, radius=radius, select=select)[0])(
            centers
        )
    if quantile is not None:
        run = lambda c: threshold_cluster_one(points, c, steps=steps, quantile=quantile, select=select)[0]
        return jax.vmap(run)(centers)
    radii = jnp.broadcast_to(jnp.asarray(radius, dtype), centers.shape[:1])
    run = lambda c, r: threshold_cluster_one(points, c, steps=steps, radius=r)[0]
    return jax.vmap(run)(centers, radii)


def kmeans_plus_plus(points, num_clusters: int, key):
    """k-means++ seeding (Arthur & Vassilvitskii 2007): the first centre uniformly at random, each next one
    with probability proportional to the squared distance to the nearest centre chosen so far (uniform
    when every point already coincides with a centre). ``points`` [N, d] -> [K, d]. Points with a NaN or
    infinite coordinate are never chosen (unless no point is finite)."""
    n = points.shape[0]
    finite = jnp.all(jnp.isfinite(points), axis=-1)
    any_finite = jnp.any(finite)
    keys = jax.random.split(key, num_clusters)
    uniform = jnp.where(any_finite, finite / jnp.maximum(jnp.sum(finite), 1), 1.0 / n)
    first = points[jax.random.choice(keys[0], n, p=uniform)]
    centers = jnp.zeros((num_clusters,) + points.shape[1:], points.dtype).at[0].set(first)

    def sq_to(center):
        sq = jnp.sum(jnp.square(points - center), axis=-1)
        return jnp.where(finite & jnp.isfinite(sq), sq, 0.0)

    def add(k, carry):
        centers, nearest = carry
        total = jnp.sum(nearest)
        probs = jnp.where(total > 0, nearest / jnp.where(total > 0, total, 1.0), uniform)
        pick = points[jax.random.choice(keys[k], n, p=probs)]
        return centers.at[k].set(pick), jnp.minimum(nearest, sq_to(pick))

    centers, _ = lax.fori_loop(1, num_clusters, add, (centers, sq_to(first)))
    return centers


def nearest_center(points, centers):
    """Index of the nearest centre for every point (ties, and points at no finite distance: the lowest)."""
    sq = jnp.sum(jnp.square(points[:, None, :] - centers[None, :, :]), axis=-1)
    return jnp.argmin(jnp.where(jnp.isnan(sq), jnp.inf, sq), axis=1)


def kmeans(points, num_clusters: int, key, *, steps: int = 10):
    """k-means: k-means++ seeding then ``steps`` Lloyd iterations, all inside jit.

    Returns (centres [K, d], labels [N]). A centre that loses all its points keeps its previous value.
    Points with a NaN or infinite coordinate never enter a centre's mean (their label is the lowest index
    at no finite distance). Used as the server's clustering step of Myopic-Clustering (the paper does not
    name one).
    """
    centers = kmeans_plus_plus(points, num_clusters, key)
    finite = jnp.all(jnp.isfinite(points), axis=-1)
    clean = jnp.where(finite[:, None], points, 0)

    def lloyd(_, centers):
        labels = nearest_center(points, centers)
        onehot = jax.nn.one_hot(labels, num_clusters, dtype=points.dtype) * finite[:, None].astype(points.dtype)
        counts = jnp.sum(onehot, axis=0)
        sums = onehot.T @ clean
        return jnp.where(counts[:, None] > 0, sums / jnp.maximum(counts, 1.0)[:, None], centers)

    centers = lax.fori_loop(0, steps, lloyd, centers)
    return centers, nearest_center(points, centers)
