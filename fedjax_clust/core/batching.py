"""Client data as one batch: padding masks, masked means, the client loss f_i, minibatch draws and the
per-client map.

A dataset is either padded -- every leaf has leading axes [N clients, n examples], clients with fewer
examples carry a boolean ``"mask"`` entry (True for real examples) that every loss, draw and metric reads --
or ragged (:class:`~fedjax_clust.core.ragged_batch.RaggedBatch`: flat examples with per-client starts and
sizes). :func:`sample_minibatch` draws a padded [N, B] batch from either; :func:`map_clients` runs a
per-client function over a batch of either kind (vmapped, or once per size bucket for a ragged full pass).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp

from fedjax_clust.core.model_table import client_models, is_table, table_rows
from fedjax_clust.core.pytrees import take_rows
from fedjax_clust.core.ragged_batch import RaggedBatch, floyd_sample

PyTree = Any
ExampleLoss = Callable[[PyTree, PyTree], jax.Array]  # (params, one example) -> scalar

__all__ = [
    "MASK_KEY",
    "ExampleLoss",
    "example_mask",
    "minibatch_positions",
    "masked_example_mean",
    "client_loss",
    "sample_minibatch",
    "map_clients",
    "padded_batch",
    "largest_client",
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

    Ragged ``data`` (:class:`~fedjax_clust.core.ragged_batch.RaggedBatch`): ``batch_size`` B draws B distinct
    indices per client by Floyd's algorithm (O(N B^2), independent of the largest client) and gathers them
    into a padded [N, B] batch with the same rule for small clients; ``None`` returns ``data`` itself, a full
    pass that :func:`map_clients` runs bucket by bucket. (A padded draw argsorts [N, n_max] scores, so its
    cost grows with the largest client.)
    """
    if isinstance(data, RaggedBatch):
        if batch_size is None:
            return data
        local, valid = minibatch_positions(data, batch_size, key)
        return data.take_examples(data.starts[:, None] + local, valid)
    if batch_size is None or batch_size >= largest_client(data):
        return data
    idx, _ = minibatch_positions(data, batch_size, key)
    return jax.tree.map(lambda x: jnp.take_along_axis(x, idx.reshape(idx.shape + (1,) * (x.ndim - 2)), axis=1), data)


def minibatch_positions(data: PyTree, batch_size: int, key: jax.Array):
    """The draw of :func:`sample_minibatch` (``batch_size`` below a padded dataset's n, or any B of a ragged
    one): (positions [N, B] in each client's own examples, valid bool [N, B], False on a small client's
    padding)."""
    if isinstance(data, RaggedBatch):
        return floyd_sample(key, data.sizes, batch_size)
    num_clients, n = jax.tree.leaves(data)[0].shape[:2]
    scores = jax.random.uniform(key, (num_clients, n))
    mask = example_mask(data)
    if mask is not None:  # real examples first, in random order; padding (score 2) after them
        scores = jnp.where(mask, scores, 2.0)
    idx = jnp.argsort(scores, axis=1)[:, :batch_size]
    return idx, (jnp.ones(idx.shape, bool) if mask is None else jnp.take_along_axis(mask, idx, axis=1))


def largest_client(data: PyTree) -> int:
    """The most examples a client of ``data`` holds in its layout: a ragged batch's n_max, a padded
    dataset's n (its second axis)."""
    if isinstance(data, RaggedBatch):
        return data.n_max
    return int(jax.tree.leaves(data)[0].shape[1])


def padded_batch(batch: PyTree) -> PyTree:
    """``batch`` in the padded layout: a ragged batch padded to its largest client (costs N n_max; for code
    that needs one [N, n, ...] array, e.g. the cross-gradients of every model on every client), any other
    batch as it is."""
    return batch.padded() if isinstance(batch, RaggedBatch) else batch


def map_clients(fn: Callable, rows: PyTree, batch: PyTree) -> PyTree:
    """``fn(row_i, batch_i)`` for every client i, stacked [N, ...]: ``jax.vmap(fn)(rows, batch)``.

    ``rows`` has leading axis N (or is None: ``fn(None, batch_i)``), or is a
    :class:`~fedjax_clust.core.model_table.ModelTable` of the clients' models: a one-row table (FedAvg's
    model) is passed to every client unbatched, never copied; a larger one's rows are gathered by the
    assignment. For a ragged ``batch`` (a full pass, :func:`sample_minibatch` with ``batch_size=None``) the
    clients are run size bucket by size bucket (:mod:`fedjax_clust.core.ragged_batch`): each bucket's clients
    gathered padded to the bucket's largest size and vmapped, the outputs put back in client order. Equal to
    the vmap over the padded layout up to float summation order: ``fn`` sees each client's examples followed
    by masked padding.
    """
    if is_table(rows) and table_rows(rows) == 1:
        shared = jax.tree.map(lambda x: x[0], rows.models)
        return map_clients(lambda _, example_batch: fn(shared, example_batch), None, batch)
    if not isinstance(batch, RaggedBatch):
        return jax.vmap(fn)(client_models(rows), batch)
    order, buckets = batch.bucket_plan()
    parts = []
    for lo, hi, capacity in buckets:
        clients = order[lo:hi]
        sub_rows = None if rows is None else client_models(take_rows(rows, clients))
        parts.append(jax.vmap(fn)(sub_rows, batch.gather(clients, capacity)))
    stacked = jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0), *parts) if len(parts) > 1 else parts[0]
    position = jnp.zeros_like(order).at[order].set(jnp.arange(order.shape[0], dtype=order.dtype))
    return jax.tree.map(lambda x: jnp.take(x, position, axis=0), stacked)


def local_sgd_steps(grad_fn, start, data, key, *, steps, learning_rate, batch_size, combine=None):
    """``steps`` plain SGD steps of every row from ``start``, fresh minibatches; with ``combine(grads, key)`` each
    step uses the directions it makes of the rows' gradients (e.g. a cluster's aggregate). The local-training
    engine's τ-step form (:func:`fedjax_clust.core.local_training.local_training`) with SGD, its rows only."""
    import optax

    from fedjax_clust.core.local_training import StepDirection, local_training  # it imports this module

    return local_training(
        grad_fn,
        start,
        data,
        key,
        optimizer=optax.sgd(learning_rate),
        steps=steps,
        batch_size=batch_size,
        direction=StepDirection(combine=combine),
    ).params
