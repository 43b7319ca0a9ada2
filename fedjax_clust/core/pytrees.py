"""Small helpers for pytrees whose leaves share leading (client) axes."""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Tuple

import jax
import jax.numpy as jnp

from fedjax_clust.core.model_table import ModelTable
from fedjax_clust.core.ragged_batch import RaggedBatch

PyTree = Any

__all__ = [
    "num_entries",
    "tree_bytes",
    "row_size",
    "leading_dim",
    "ravel_rows",
    "broadcast_to_clients",
    "take_rows",
    "segment_mean",
    "finite_mean",
    "finite_rows",
    "row_sq_norms",
]


def num_entries(tree: PyTree) -> int:
    """The number of scalars in ``tree`` (the sum of its leaves' sizes; shapes are enough, e.g.
    ``jax.ShapeDtypeStruct`` leaves)."""
    return sum(math.prod(jnp.shape(x)) for x in jax.tree.leaves(tree))


def tree_bytes(tree: PyTree) -> int:
    """The bytes of ``tree``'s leaves (their sizes times their dtypes' widths; shapes are enough)."""
    return sum(jnp.dtype(x.dtype).itemsize * math.prod(jnp.shape(x)) for x in jax.tree.leaves(tree))


def row_size(tree: PyTree, num_rows: int) -> int:
    """The scalars of one row of ``tree``, whose leaves share a leading axis of ``num_rows`` (e.g. the
    parameters of one client's model in a batched [N, ...] pytree)."""
    return num_entries(tree) // num_rows


def leading_dim(tree: PyTree, name: str = "tree") -> int:
    """The common size of the first axis of every leaf; ValueError if there is none or they differ. A
    ragged batch and a model table count as their clients."""
    leaves = [
        x.sizes if isinstance(x, RaggedBatch) else x.assignment if isinstance(x, ModelTable) else x
        for x in jax.tree.leaves(tree, is_leaf=_is_indexed)
    ]
    if not leaves:
        raise ValueError(f"{name} must be a non-empty pytree of arrays")
    sizes = {jnp.shape(x)[0] if jnp.ndim(x) > 0 else None for x in leaves}
    if None in sizes or len(sizes) != 1:
        raise ValueError(f"every leaf of {name} must share the same leading axis, got sizes {sorted(map(str, sizes))}")
    return sizes.pop()


def ravel_rows(tree: PyTree, num_lead: int = 1) -> Tuple[jax.Array, Callable[[jax.Array], PyTree]]:
    """Flatten each row of a stacked pytree: leaves [*lead, ...] -> one array [*lead, D].

    Returns the array and ``unravel(vec[D]) -> pytree of one row``.
    """
    leaves, treedef = jax.tree.flatten(tree)
    lead = jnp.shape(leaves[0])[:num_lead]
    shapes = [jnp.shape(x)[num_lead:] for x in leaves]
    sizes = [math.prod(shape) for shape in shapes]
    flat = jnp.concatenate([jnp.reshape(x, lead + (-1,)) for x in leaves], axis=-1)
    dtypes = [x.dtype for x in leaves]

    def unravel(vec):
        parts, start = [], 0
        for shape, size, dt in zip(shapes, sizes, dtypes):
            parts.append(jnp.reshape(vec[..., start : start + size], vec.shape[:-1] + shape).astype(dt))
            start += size
        return jax.tree.unflatten(treedef, parts)

    return flat, unravel


def broadcast_to_clients(tree: PyTree, num_clients: int) -> PyTree:
    """Stack ``num_clients`` copies of one pytree along a new leading axis."""
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (num_clients,) + jnp.shape(x)), tree)


def row_sq_norms(tree: PyTree) -> jax.Array:
    """[N] squared Euclidean norm of each row (leading axis) over all leaves."""
    squares = [jnp.sum(jnp.square(x.reshape(x.shape[0], -1)), axis=1) for x in jax.tree.leaves(tree)]
    return functools.reduce(jnp.add, squares)


def finite_rows(tree: PyTree) -> jax.Array:
    """bool [N]: row i has no NaN or infinite entry in any leaf (leaves share the leading axis N; a model
    table's client i is finite when its row is)."""
    if isinstance(tree, ModelTable):
        return jnp.take(finite_rows(tree.models), tree.assignment, axis=0)
    leaves = jax.tree.leaves(tree)
    return functools.reduce(
        jnp.logical_and, [jnp.all(jnp.isfinite(jnp.reshape(x, (x.shape[0], -1))), axis=1) for x in leaves]
    )


def segment_mean(tree: PyTree, labels, num_segments: int, weights=None):
    """(mean of the finite rows of each leaf sharing a label, members per label); labels in [0, num_segments).

    ``weights`` (float [N] >= 0, None: uniform) makes each mean sum_i w_i x_i / sum_i w_i over the segment's
    finite rows (:mod:`fedjax_clust.core.weighting`: e.g. each client's example count, McMahan et al.'s
    n_k / n); the member count stays a count of rows.

    Every server-side average of the package goes through here. A row with a NaN or infinite entry (in any
    leaf) is a message no server can use: it is left out of its segment's mean (selected with ``where``, so
    0 * NaN never enters the sum), which keeps one bad client from making every receiver non-finite. A
    segment whose members are all non-finite gets NaN, so a group that diverges as a whole stays visible
    to the divergence check; a label no row carries gets a mean of 0 and a member count of 0. This is
    sanitisation, not robustness: finite but malicious rows still enter the mean.
    """
    finite = finite_rows(tree)
    members = jax.ops.segment_sum(jnp.ones(labels.shape, jnp.float32), labels, num_segments=num_segments)
    usable = jax.ops.segment_sum(finite.astype(jnp.float32), labels, num_segments=num_segments)
    all_bad = (members > 0) & (usable == 0)

    if weights is not None:
        weights = jnp.asarray(weights, jnp.float32)
        mass = jax.ops.segment_sum(jnp.where(finite, weights, 0.0), labels, num_segments=num_segments)

    def mean(x):
        shape = (-1,) + (1,) * (x.ndim - 1)
        if weights is None:
            sums = jax.ops.segment_sum(jnp.where(finite.reshape(shape), x, 0), labels, num_segments=num_segments)
            means = sums / jnp.maximum(usable, 1.0).reshape(shape).astype(x.dtype)
        else:
            weighted = jnp.where(finite.reshape(shape), x * weights.reshape(shape).astype(x.dtype), 0)
            sums = jax.ops.segment_sum(weighted, labels, num_segments=num_segments)
            means = sums / jnp.where(mass > 0, mass, 1.0).reshape(shape).astype(x.dtype)
        return jnp.where(all_bad.reshape(shape), jnp.nan, means)

    return jax.tree.map(mean, tree), members


def finite_mean(tree: PyTree, weights=None) -> PyTree:
    """Mean over the leading axis of the finite rows (see :func:`segment_mean`, ``weights`` too); NaN if none
    is finite."""
    n = leading_dim(tree)
    means, _ = segment_mean(tree, jnp.zeros((n,), jnp.int32), 1, weights)
    return jax.tree.map(lambda x: x[0], means)


def take_rows(tree: PyTree, index) -> PyTree:
    """Rows ``index`` (any integer array shape) of every leaf; out-of-range indices are clipped. A ragged
    batch inside ``tree`` gives its clients ``index`` (:meth:`~fedjax_clust.core.ragged_batch.RaggedBatch.select`),
    a model table the same models with those clients' assignment (:mod:`fedjax_clust.core.model_table`)."""

    def rows(x):
        if isinstance(x, RaggedBatch):
            return x.select(index)
        if isinstance(x, ModelTable):
            return x._replace(assignment=jnp.take(x.assignment, index, axis=0, mode="clip"))
        return jnp.take(x, index, axis=0, mode="clip")

    return jax.tree.map(rows, tree, is_leaf=_is_indexed)


def _is_indexed(x) -> bool:
    return isinstance(x, (RaggedBatch, ModelTable))
