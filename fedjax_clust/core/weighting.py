"""How a server weights its clients when it averages: uniformly (the default) or by example count.

Every average of a round -- a group's gradients (Global, Ground-truth), a cluster's gradients or models (IFCA,
HypCluster), a cluster's updates (CFL), the global model's gradients (Ditto, kNN-Per) -- is

    mean_S(x) = sum_{i in S} w_i x_i / sum_{i in S} w_i     over the finite messages of the members S,

with w_i = 1 (``"uniform"``, every algorithm's default and what this package always computed) or w_i = n_i,
client i's number of training examples (``"examples"``: FedAvg's n_k / n, McMahan et al. 2017, Algorithm 1),
which equals the mean over the pooled examples when every client's message is the mean over its own examples.
A builder takes ``weighting="uniform"`` or :class:`ClientWeights` (what
``make_algorithm(..., weighting="examples")`` passes: the task's example counts); the weights are a per-client
constant, restricted to a round's participants like the Byzantine mask
(:func:`fedjax_clust.core.participants.client_rows`). Robust aggregators take no weights.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.core.ragged_batch import RaggedBatch
from fedjax_clust.core.validation import is_traced

__all__ = [
    "WEIGHTINGS",
    "ClientWeights",
    "example_counts",
    "resolve_weighting",
    "by_examples",
    "check_weighted_mean",
    "weighting_hparams",
]

WEIGHTINGS = ("uniform", "examples")


class ClientWeights(NamedTuple):
    """Per-client weights ``values`` (float [N] >= 0, not all 0) and the ``name`` a run records."""

    name: str
    values: np.ndarray


def example_counts(data):
    """[N]: each client's examples in ``data`` (a ragged batch's sizes, a padded dict's mask counts, or n for
    every client of an unmasked [N, n, ...] dataset); int64 NumPy, or a float32 jax array when ``data`` is
    traced (a sweep builds its algorithms inside its compiled program)."""
    if isinstance(data, RaggedBatch):
        sizes = data.sizes
    elif isinstance(data, dict) and "mask" in data:
        mask = data["mask"]
        sizes = jnp.sum(mask, axis=1) if is_traced(mask) else np.asarray(mask).sum(axis=1)
    else:
        leaf = jax.tree.leaves(data)[0]
        return np.full(leaf.shape[0], leaf.shape[1], np.int64)
    return jnp.asarray(sizes, jnp.float32) if is_traced(sizes) else np.asarray(sizes, np.int64)


def by_examples(data) -> ClientWeights:
    """Weights n_i, client i's examples in ``data`` (``weighting="examples"``)."""
    counts = example_counts(data)
    return ClientWeights("examples", counts if is_traced(counts) else np.asarray(counts, np.float32))


def resolve_weighting(weighting: Union[str, ClientWeights], num_clients: Optional[int] = None):
    """(name, weights): ("uniform", None) or (name, float32 [N] array); ValueError on anything else."""
    if isinstance(weighting, str):
        if weighting == "uniform":
            return "uniform", None
        if weighting == "examples":
            raise ValueError(
                'weighting="examples" needs the clients\' data: give make_algorithm(..., weighting="examples") '
                "or a builder weighting=fedjax_clust.core.weighting.by_examples(task.data)"
            )
        raise ValueError(f"weighting must be one of {WEIGHTINGS} or ClientWeights, got {weighting!r}")
    if not isinstance(weighting, ClientWeights):
        raise ValueError(f"weighting must be one of {WEIGHTINGS} or ClientWeights, got {weighting!r}")
    if is_traced(weighting.values):  # counts of traced data (a sweep's program): checked when they were concrete
        return weighting.name, jnp.asarray(weighting.values, jnp.float32)
    values = np.asarray(weighting.values, np.float64)
    if values.ndim != 1 or not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError("client weights must be a vector [N] of finite, positive numbers")
    if num_clients is not None and len(values) != num_clients:
        raise ValueError(f"client weights have {len(values)} entries for {num_clients} clients")
    return weighting.name, jnp.asarray(values, jnp.float32)


def check_weighted_mean(weights, aggregate) -> None:
    """Client weights weight the mean only: ValueError when ``aggregate`` is a robust rule."""
    if weights is not None and aggregate.aggregator_name == "private-mean":
        raise ValueError(
            'weighting="examples" does not apply with privacy: a client weight would scale its sensitivity '
            "beyond the clip bound; the private mean weighs every client the same"
        )
    if weights is not None and aggregate.aggregator_name != "mean":
        raise ValueError(
            f'weighting="examples" weights the mean; aggregator {aggregate.aggregator_name!r} takes no client weights'
        )


def weighting_hparams(name: str) -> dict:
    """What a run records: nothing for the default uniform mean (older runs' hparams unchanged), else
    ``{"weighting": name}``."""
    return {} if name == "uniform" else {"weighting": name}
