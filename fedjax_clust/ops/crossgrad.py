"""The N x N cross-gradient evaluation of Federated-Clustering (Werner et al., Algorithm 2, line 5).

Client j evaluates its stochastic gradient g_j(x_i) at every client's model x_i. Stacked, that is a pytree
whose leaves have leading axes [N_models, N_clients]. It is computed as one ``vmap`` over clients inside a
``lax.map`` over models with ``batch_size=chunk_size``: peak memory is chunk_size x N_clients x (model size)
instead of N_models x N_clients x (model size). A remainder chunk handles N_models not divisible by
chunk_size.

:func:`cross_gradients` materialises all N x N gradients (for analysis, and as the reference the tests check
against finite differences). Federated-Clustering is built on the same two pieces,
:func:`~fedjax_clust.parallel.row_plan.map_rows` over the models (the execution plan's chunked map, also
importable from here) and :func:`messages_at` over the clients, but clusters each model's row as soon as it
is computed, so it never holds more than a chunk of rows (see :mod:`fedjax_clust.parallel.row_plan`).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp

from fedjax_clust.core.pytrees import leading_dim
from fedjax_clust.core.validation import check_matmul_precision
from fedjax_clust.parallel.row_plan import check_chunk_size, map_rows  # noqa: F401 - public here too

__all__ = ["cross_gradients", "gradients_at", "messages_at", "map_rows"]

PyTree = Any


def messages_at(message_fn: Callable, params: PyTree, data: PyTree, client_axis: int = 0) -> PyTree:
    """``message_fn(params, client_data)`` of every client at one model: leaves [N_clients, ...] (or
    [..., N_clients] with ``client_axis=-1``, the layout Threshold-Clustering prefers for small models)."""
    return jax.vmap(message_fn, in_axes=(None, 0), out_axes=client_axis)(params, data)


def gradients_at(loss_fn: Callable, params: PyTree, data: PyTree, client_axis: int = 0) -> PyTree:
    """Gradients of every client's loss at one model (see :func:`messages_at`).

    ``loss_fn(params, client_data) -> scalar``; ``data`` has leading axis N_clients.
    """
    return messages_at(jax.grad(loss_fn), params, data, client_axis)


def cross_gradients(
    loss_fn: Callable,
    params: PyTree,
    data: PyTree,
    *,
    chunk_size: Optional[int] = None,
    matmul_precision: str = "highest",
):
    """All cross-gradients g_j(x_i): leaves with leading axes [N_models, N_clients, ...].

    Args:
      loss_fn: ``loss_fn(params, client_data) -> scalar``, the loss of one client's data at one model.
      params: model pytree with a leading axis N_models >= 1. One model lacking that axis is refused when it
        shows: params [M > 1] of scalar rows that ``loss_fn`` also accepts whole (a model's vector read as M
        scalar models). A heuristic with one false alarm: M > 1 models of scalar parameters whose loss
        broadcasts over a vector of M; give those as [N_models, 1].
      data: client data pytree with a leading axis N_clients >= 1.
      chunk_size: models per chunk (None: all at once). Peak memory of the gradients is
        chunk_size x N_clients x (model size).
      matmul_precision: precision of the loss's matmuls ("highest", default: full float32 on every
        device; "high" / "default" allow TF32 on a GPU, bfloat16 passes on a TPU).
    """
    check_chunk_size(chunk_size)
    check_matmul_precision(matmul_precision)
    if not callable(loss_fn):
        raise ValueError(f"loss_fn must be a function (params, client_data) -> scalar, got {loss_fn!r}")
    for name, tree, axis in (("params", params, "N_models"), ("data", data, "N_clients")):
        if leading_dim(tree, name) == 0:
            raise ValueError(
                f"{name} must hold at least one row along its leading axis {axis}, got 0 "
                f"(shapes {[jnp.shape(x) for x in jax.tree.leaves(tree)]})"
            )
    first = lambda tree: jax.tree.map(lambda x: x[0], tree)  # noqa: E731
    scalar_rows = all(jnp.ndim(x) == 0 for x in jax.tree.leaves(first(params)))
    if scalar_rows and leading_dim(params) > 1 and _scalar_loss(loss_fn, params, first(data)):
        # params[0] is all scalars while params itself is a valid model of one client: the model axis is missing
        raise ValueError(
            f"params looks like one model without the leading N_models axis (loss_fn accepts params "
            f"{[jnp.shape(x) for x in jax.tree.leaves(params)]} as one model); stack the models "
            "(params[None] for one), and give a model of scalar parameters as [N_models, 1]"
        )
    try:
        out = jax.eval_shape(loss_fn, first(params), first(data))
    except (TypeError, ValueError) as error:  # e.g. params of another size than the data's features
        raise ValueError(
            f"loss_fn(params[0], data[0]) fails: {str(error).splitlines()[0]} (check the shapes of params and data)"
        ) from None
    if getattr(out, "shape", None) != ():
        raise ValueError(f"loss_fn must return a scalar for one model and one client, got {out!r}")
    with jax.default_matmul_precision(matmul_precision):
        return _cross_gradients(loss_fn, params, data, chunk_size)


def _scalar_loss(loss_fn, params, client_data) -> bool:
    """Whether ``loss_fn(params, client_data)`` traces to a scalar."""
    try:
        return getattr(jax.eval_shape(loss_fn, params, client_data), "shape", None) == ()
    except Exception:  # noqa: BLE001 - any failure means: params is not one model
        return False


@partial(jax.jit, static_argnums=(0, 3))
def _cross_gradients(loss_fn, params, data, chunk_size):
    return map_rows(lambda p: gradients_at(loss_fn, p, data), params, chunk_size)
