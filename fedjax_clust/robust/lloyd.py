"""Outlier-robust clustering of points: Stage II of the 3-stage algorithm of Ghosh, Hong, Yin and Ramchandran
(seeds/003, Alg. 1 and 2), as jit-compiled pure functions.

Every variant alternates, from initial labels z^(0), (i) a centre per bucket (the points sharing a label) and
(ii) the reassignment of every point to its closest centre, z_i <- argmin_g ||y_i - theta_g||:

* ``lloyd``: the bucket's sample mean (K-means; an adversarial point far away drags its centre);
* ``k-geomedians``: the bucket's geometric median (smoothed Weiszfeld, see
  :func:`fedjax_clust.robust.aggregators.geometric_median`);
* ``trimmed-k-means`` (Alg. 2): the geometric median mu of the bucket, then the sample mean of the bucket's
  points inside the ball ||y - mu|| <= ``radius`` (the paper's C sigma sqrt(d)); a bucket with no point in
  the ball keeps mu.

A bucket that loses every point keeps its last centre (a NaN centre at the start, which no point picks).
The "edge cutting" threshold rule of §3.2 (clusters = connected components of {||y_i - y_j|| <= threshold})
is :func:`threshold_components`.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
from jax import lax

from fedjax_clust.core.validation import check_choice, check_int, check_real
from fedjax_clust.ops.graph import connected_components
from fedjax_clust.robust.aggregators import geometric_median

__all__ = ["ROBUST_LLOYD", "robust_lloyd", "threshold_components"]

ROBUST_LLOYD = ("lloyd", "k-geomedians", "trimmed-k-means")


def _centre(points, members, rule, radius, weiszfeld_steps):
    if rule == "lloyd":
        count = jnp.sum(members)
        total = jnp.sum(jnp.where(members[:, None], points, 0), axis=0)
        return jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.nan)
    median = geometric_median(points, members, iterations=weiszfeld_steps)
    if rule == "k-geomedians":
        return median
    inside = members & (jnp.linalg.norm(points - median[None, :], axis=1) <= radius)
    count = jnp.sum(inside)
    mean = jnp.sum(jnp.where(inside[:, None], points, 0), axis=0) / jnp.maximum(count, 1)
    return jnp.where(count > 0, mean, median)


def robust_lloyd(
    points,
    initial_labels,
    num_clusters: int,
    *,
    rule: str = "trimmed-k-means",
    iterations: int = 10,
    radius: Optional[float] = None,
    weiszfeld_steps: int = 20,
):
    """(labels [iterations + 1, m] from z^(0) to z^(S), centres [K, d] of the last iteration).

    ``points`` [m, d] (e.g. the clients' local ERMs, flattened), ``initial_labels`` [m] in [0, K); ``rule`` one
    of ``ROBUST_LLOYD``; ``radius`` the trimming ball of "trimmed-k-means" (required there).
    """
    check_choice("rule", rule, ROBUST_LLOYD)
    check_int("num_clusters", num_clusters)
    check_int("iterations", iterations, 0)
    check_int("weiszfeld_steps", weiszfeld_steps)
    if rule == "trimmed-k-means":
        if radius is None:
            raise ValueError("trimmed-k-means needs the radius of its trimming ball (the paper's C sigma sqrt(d))")
        check_real("radius", radius, low=0.0, low_open=True)
    points = jnp.asarray(points)
    if points.ndim != 2:
        raise ValueError(f"points must be [m, d], got shape {points.shape}")
    labels0 = jnp.asarray(initial_labels, jnp.int32)
    return _robust_lloyd(points, labels0, num_clusters, rule, iterations, radius, weiszfeld_steps)


def _robust_lloyd(points, labels0, num_clusters, rule, iterations, radius, weiszfeld_steps):
    groups = jnp.arange(num_clusters)
    initial = jnp.full((num_clusters, points.shape[1]), jnp.nan, points.dtype)

    def step(carry, _):
        labels, centres = carry
        fresh = jax.vmap(lambda g: _centre(points, labels == g, rule, radius, weiszfeld_steps))(groups)
        keep = jnp.any(labels[None, :] == groups[:, None], axis=1)
        centres = jnp.where(keep[:, None], fresh, centres)
        dist = jnp.linalg.norm(points[:, None, :] - centres[None, :, :], axis=-1)
        labels = jnp.argmin(jnp.where(jnp.isnan(dist), jnp.inf, dist), axis=1).astype(jnp.int32)
        return (labels, centres), labels

    (_, centres), history = lax.scan(step, (labels0, initial), None, length=iterations)
    return jnp.concatenate([labels0[None], history]), centres


def threshold_components(points, threshold: float):
    """The "edge cutting" rule: labels [m], the smallest index of each point's connected component in the
    graph with an edge wherever ||y_i - y_j|| <= ``threshold``."""
    check_real("threshold", threshold, low=0.0)
    points = jnp.asarray(points)
    dist = jnp.linalg.norm(points[:, None, :] - points[None, :, :], axis=-1)
    return connected_components(dist <= threshold)
