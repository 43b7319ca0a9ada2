"""Client data as one batch: padding masks, masked means, the client loss f_i and minibatch draws.

Every leaf of a dataset has leading axes [N clients, n examples]; clients with fewer examples are padded
and carry a boolean ``"mask"`` entry (True for real examples) that every loss, draw and metric reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp

from fedjax_clust.core.keys import attack_key

PyTree = Any
ExampleLoss = Callable[[PyTree, PyTree], jax.Array]  # (params, one example) -> scalar

__all__ = [
    "MASK_KEY",
    "ExampleLoss",
    "example_mask",
    "masked_example_mean",
    "client_loss",
    "sample_minibatch",
    "local_sgd_steps",
]

MASK_KEY = "mask"


def example_mask(batch: PyTree) -> Optional[jax.Array]:
    """The padding mask of a batch of examples (``batch["mask"]``, True for real examples), or None.

    Clients holding different numbers of examples are stored padded to the largest one, with a boolean
    ``"mask"`` entry beside the arrays of a dict-of-arrays dataset (:mod:`fedjax_clust.data`); every loss,
    minibatch draw and metric of the package reads it through this function.
    """
    if isinstance(batch, Mapping) and MASK_KEY in batch:
        return batch[MASK_KEY]
    return None


def masked_example_mean(values: jax.Array, mask: Optional[jax.Array]) -> jax.Array:
    """Mean over the last axis of ``values`` counting only ``mask``-ed entries (all with ``mask=None``).

    A batch without a real example has mean 0 (and gradient 0), not NaN. Padded entries are excluded
    with ``where``, so a non-finite value computed on padding never reaches the mean.
    """
    if mask is None:
        return jnp.mean(values, axis=-1)
    total = jnp.sum(jnp.where(mask, values, 0.0), axis=-1)
    return total / jnp.maximum(jnp.sum(mask, axis=-1), 1).astype(total.dtype)


def client_loss(example_loss: ExampleLoss) -> Callable[[PyTree, PyTree], jax.Array]:
    """Mean of ``example_loss`` over a batch of examples (leading axis): f_i on a minibatch B_i.

    With a padding mask (:func:`example_mask`) the mean runs over the real examples only,
    f_i(x) = sum_b m_b l(x; z_b) / max(sum_b m_b, 1), so a padded client's loss and gradient equal those of
    its unpadded data.
    """

    def loss(params, batch):
        return masked_example_mean(jax.vmap(example_loss, in_axes=(None, 0))(params, batch), example_mask(batch))

    return loss


def sample_minibatch(data: PyTree, batch_size: Optional[int], key: jax.Array) -> PyTree:
    """A fresh minibatch of ``batch_size`` examples per client, drawn without replacement.

    ``data`` leaves are [N, n, ...]; returns leaves [N, batch_size, ...]. ``None`` (or n) is the full batch.
    With a padding mask the draw is uniform over each client's real examples; a client holding fewer than
    ``batch_size`` of them gets all of them (the rest of its batch is padding, masked out of the loss).
    """
    leaves = jax.tree.leaves(data)
    num_clients, n = leaves[0].shape[:2]
    if batch_size is None or batch_size >= n:
        return data
    scores = jax.random.uniform(key, (num_clients, n))
    mask = example_mask(data)
    if mask is not None:  # real examples first, in random order; padding (score 2) after them
        scores = jnp.where(mask, scores, 2.0)
    idx = jnp.argsort(scores, axis=1)[:, :batch_size]
    return jax.tree.map(lambda x: jnp.take_along_axis(x, idx.reshape(idx.shape + (1,) * (x.ndim - 2)), axis=1), data)


def local_sgd_steps(grad_fn, start, data, key, *, steps, learning_rate, batch_size, combine=None):
    """``steps`` SGD steps of every row from ``start``, fresh minibatches; with ``combine(grads, key)`` each
    step uses the directions it makes of the rows' gradients (e.g. a cluster's aggregate)."""

    def step(e, x):
        k = jax.random.fold_in(key, e)
        g = jax.vmap(grad_fn)(x, sample_minibatch(data, batch_size, k))
        if combine is not None:
            g = combine(g, attack_key(k))
        return jax.tree.map(lambda p, d: p - learning_rate * d, x, g)

    return jax.lax.fori_loop(0, steps, step, start)
