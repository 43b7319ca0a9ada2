"""Clustering quality: the misclustering error, and cluster labels from Federated-Clustering's balls.

Misclustering error (issue: every clustering algorithm reports it where the truth is known): the fraction
of clients whose inferred cluster disagrees with the true one after the best one-to-one matching of
inferred to true labels (Hungarian algorithm on the confusion matrix; inferred clusters left unmatched
count as wrong).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax
from scipy.optimize import linear_sum_assignment

__all__ = ["misclustering_error", "ball_components", "masked_mean", "masked_std"]


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
    (the smallest client index of each component). Label propagation inside jit, O(N^2) per pass."""
    n = balls.shape[0]
    adjacency = balls | balls.T | jnp.eye(n, dtype=bool)

    def spread(labels):
        return jnp.min(jnp.where(adjacency, labels[None, :], n), axis=1)

    def cond(carry):
        labels, previous = carry
        return jnp.any(labels != previous)

    def body(carry):
        labels, _ = carry
        return spread(labels), labels

    start = jnp.arange(n)
    labels, _ = lax.while_loop(cond, body, (spread(start), start))
    return labels
