"""Connected components of a graph given by its boolean adjacency matrix, as a jit-compiled pure function.

SR-FCA (ONE_SHOT and MERGE) clusters by the connected components of a threshold graph, an edge wherever
dist(u, v) <= lambda. Here every node starts with its own index as label; each iteration takes the smallest
label among a node and its neighbours and then jumps pointers (label <- label[label]). Labels only ever
move to nodes of the same component and decrease, so at the fixed point every component carries its
smallest node index. Each iteration is O(n^2); the loop stops at the fixed point (at most the component
diameter, usually far fewer thanks to the pointer jumps).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["connected_components", "component_sizes"]


def connected_components(adjacency, valid=None) -> jax.Array:
    """int32 [n]: for each node the smallest node index of its connected component.

    ``adjacency``: bool [n, n] (made symmetric here: an edge in either direction links); ``valid``: optional
    bool [n], nodes outside it have no edges (each is its own component).
    """
    adjacency = jnp.asarray(adjacency, bool)
    n = adjacency.shape[0]
    if adjacency.ndim != 2 or adjacency.shape[1] != n:
        raise ValueError(f"adjacency must be a square [n, n] matrix, got shape {adjacency.shape}")
    linked = adjacency | adjacency.T
    if valid is not None:
        valid = jnp.asarray(valid, bool)
        linked = linked & valid[:, None] & valid[None, :]
    labels = jnp.arange(n, dtype=jnp.int32)

    def body(carry):
        labels, _ = carry
        neighbours = jnp.min(jnp.where(linked, labels[None, :], n), axis=1).astype(jnp.int32)
        new = jnp.minimum(labels, neighbours)
        new = new[new]
        return new, jnp.any(new != labels)

    labels, _ = lax.while_loop(lambda carry: carry[1], body, (labels, jnp.asarray(True)))
    return labels


def component_sizes(labels, weights=None) -> jax.Array:
    """[n]: for each node the size (or the sum of ``weights``) of its component under ``labels`` from
    :func:`connected_components`."""
    n = labels.shape[0]
    weights = jnp.ones((n,), jnp.int32) if weights is None else weights
    return jax.ops.segment_sum(weights, labels, num_segments=n)[labels]
