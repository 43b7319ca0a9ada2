"""Clustering quality: the misclustering error, and cluster labels from Federated-Clustering's balls.

Misclustering error (issue: every clustering algorithm reports it where the truth is known): the fraction
of clients whose inferred cluster disagrees with the true one after the best one-to-one matching of
inferred to true labels (Hungarian algorithm on the confusion matrix; inferred clusters left unmatched
count as wrong).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from fedjax_clust.core.pytrees import ravel_rows
from fedjax_clust.ops.graph import connected_components

__all__ = [
    "best_matching",
    "misclustering_error",
    "cluster_estimation_error",
    "ball_components",
    "masked_mean",
    "masked_std",
]


def misclustering_error(inferred, truth) -> float:
    """Fraction of clients misclustered under the best matching of inferred to true labels (host-side)."""
    inferred = np.asarray(inferred).ravel()
    truth = np.asarray(truth).ravel()
    if inferred.shape != truth.shape:
        raise ValueError(f"inferred labels have shape {inferred.shape}, the truth {truth.shape}")
    _, inferred = np.unique(inferred, return_inverse=True)
    _, truth = np.unique(truth, return_inverse=True)
    confusion = np.zeros((inferred.max() + 1, truth.max() + 1), np.int64)
    np.add.at(confusion, (inferred, truth), 1)
    return 1.0 - confusion[tuple(best_matching(confusion))].sum() / truth.size


def best_matching(weights) -> tuple:
    """(rows, cols) of a one-to-one matching of the rows and columns of ``weights`` (a 2-D array) with the
    largest total weight; it matches min(rows, columns) pairs, in increasing order of the smaller side.

    The Hungarian algorithm with potentials (Kuhn 1955; the O(n^2 m) shortest-augmenting-path form): the smaller
    side's n entries are added one at a time, each by a shortest augmenting path found by Dijkstra steps over
    the reduced costs, every step vectorised over the m entries of the larger side. A confusion matrix's smaller
    side is the true clusters (K), so n^2 = K^2 steps of length m (the inferred clusters) whatever N. Exact in
    integers and floats alike (tested against scipy's ``linear_sum_assignment``, which is not imported here:
    scipy.optimize takes a quarter of a second to import on every start-up)."""
    weights = np.asarray(weights, np.float64)
    if weights.ndim != 2:
        raise ValueError(f"weights must be a 2-D array, got shape {weights.shape}")
    flipped = weights.shape[0] > weights.shape[1]
    cost = -(weights.T if flipped else weights)  # n <= m rows; the largest weight is the smallest cost
    n, m = cost.shape
    u, v = np.zeros(n + 1), np.zeros(m + 1)  # potentials (index 0: the virtual start)
    owner = np.zeros(m + 1, np.int64)  # owner[j]: the row (1-based) matched to column j, 0 for none
    way = np.zeros(m + 1, np.int64)
    for i in range(1, n + 1):
        owner[0], j0 = i, 0
        reach = np.full(m + 1, np.inf)
        used = np.zeros(m + 1, bool)
        while True:
            used[j0] = True
            i0 = owner[j0]
            reduced = cost[i0 - 1] - u[i0] - v[1:]
            better = ~used[1:] & (reduced < reach[1:])
            reach[1:] = np.where(better, reduced, reach[1:])
            way[1:] = np.where(better, j0, way[1:])
            free = np.flatnonzero(~used[1:]) + 1
            j1 = free[np.argmin(reach[free])]
            delta = reach[j1]
            u[owner[used]] += delta
            v[used] -= delta
            reach[~used] -= delta
            j0 = j1
            if owner[j0] == 0:
                break
        while j0:  # flip the matching along the augmenting path
            j1 = way[j0]
            owner[j0] = owner[j1]
            j0 = j1
    cols = np.flatnonzero(owner[1:]) + 1
    rows = owner[cols] - 1
    cols = cols - 1
    order = np.argsort(rows)
    rows, cols = rows[order], cols[order]
    return (cols, rows) if flipped else (rows, cols)


def cluster_estimation_error(params, optima, true_clusters, labels, honest=None) -> float:
    """Ghosh et al.'s estimation error (seeds/003, §6.1), max_i ||w_hat_i - w*_i||_2 / sqrt(d) over the true
    clusters i, on the host.

    ``params`` and ``optima`` are per-client models and optima (arrays [N, ...] or pytrees of them), ``labels``
    [N] the estimated cluster of each client, ``honest`` [N] the clients counted (default all). The paper does
    not say how an estimated cluster is matched to a true one; here w_hat_i is the model of the estimated
    cluster that holds most of true cluster i's counted clients (ties: the smallest label), so a cluster lost
    to a merge is charged the error of the model its clients got. d counts every parameter.
    """
    flat = np.asarray(ravel_rows(params)[0], np.float64)
    best = np.asarray(ravel_rows(optima)[0], np.float64)
    if flat.shape != best.shape:
        raise ValueError(f"params rows {flat.shape} and optima rows {best.shape} differ")
    truth, labels = np.asarray(true_clusters).ravel(), np.asarray(labels).ravel()
    counted = np.ones(truth.shape, bool) if honest is None else np.asarray(honest, bool)
    if not (truth.shape == labels.shape == counted.shape == (flat.shape[0],)):
        raise ValueError("true_clusters, labels and honest need one entry per client")
    errors = []
    for cluster in np.unique(truth[counted]):
        members = np.flatnonzero(counted & (truth == cluster))
        values, counts = np.unique(labels[members], return_counts=True)
        holder = members[labels[members] == values[np.argmax(counts)]][0]
        errors.append(np.linalg.norm(flat[holder] - best[holder]) / np.sqrt(flat.shape[1]))
    return float(np.max(errors))


def masked_mean(values, mask=None):
    """Mean of per-client ``values`` [N] over the clients where ``mask`` [N] is True (all when None),
    selected with ``where`` so a masked-out NaN never enters; NaN when the mask is empty."""
    if mask is None:
        return jnp.mean(values)
    count = jnp.sum(mask)
    total = jnp.sum(jnp.where(mask, values, 0))
    return jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.nan)


def masked_std(values, mask=None):
    """Standard deviation over clients of ``values`` [N] where ``mask`` is True (population form, ddof 0)."""
    mean = masked_mean(values, mask)
    return jnp.sqrt(masked_mean(jnp.square(values - mean), mask))


def ball_components(balls):
    """Cluster labels of Federated-Clustering: connected components of the graph i -- j whenever j lies in
    client i's ball at the last clustering step (or i in j's). ``balls`` [N, N] bool; returns [N] labels
    (the smallest client index of each component), by :func:`fedjax_clust.ops.graph.connected_components`
    (O(N^2) per pass). Its own label propagation over ``balls | balls.T`` crashed XLA:CPU (jax 0.10.2) with a
    segmentation fault from N = 1,024 on one CPU device."""
    return connected_components(balls)
