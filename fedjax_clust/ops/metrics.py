"""Clustering quality: the misclustering error, and cluster labels from Federated-Clustering's balls.

Misclustering error (issue: every clustering algorithm reports it where the truth is known): the fraction
of clients whose inferred cluster disagrees with the true one after the best one-to-one matching of
inferred to true labels (Hungarian algorithm on the confusion matrix; inferred clusters left unmatched
count as wrong).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from scipy.optimize import linear_sum_assignment

from fedjax_clust.core.pytrees import ravel_rows
from fedjax_clust.ops.graph import connected_components

__all__ = ["misclustering_error", "cluster_estimation_error", "ball_components", "masked_mean", "masked_std"]


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
    rows, cols = linear_sum_assignment(-confusion)
    return 1.0 - confusion[rows, cols].sum() / truth.size


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
