"""Client models held by the server: a table of R models and each client's row of it.

An algorithm whose clients own no model of their own -- FedAvg (one global model), Ground-truth (one model per
true cluster) -- need not keep N copies of its server models. Its ``state.params`` (and ``opt_state``) is a
:class:`ModelTable`: ``models`` with leaves [R, ...] and ``assignment`` int32 [N], client i's model being
row ``assignment[i]``. The state then costs R models and N integers, whatever N, and a round whose cohort
is S clients reads S rows of data and writes R models (:mod:`fedjax_clust.algorithms.fixed_clusters`).

Everything that reads client models treats a table as the N rows it stands for, without building them when it
can: :func:`~fedjax_clust.core.pytrees.take_rows` gives the same table with the chosen clients' assignment,
:func:`~fedjax_clust.core.pytrees.leading_dim` counts clients, :func:`~fedjax_clust.core.pytrees.finite_rows`
looks up each client's row, and :func:`~fedjax_clust.core.batching.map_clients` broadcasts a one-row table
(no copy at all) and gathers the rows of a larger one per call. :func:`client_models` builds the N rows
explicitly (what a metric over each client's parameter vector needs: the distance to the optimum, the
candidates of an unseen client).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

PyTree = Any

__all__ = ["ModelTable", "is_table", "client_models", "client_model", "table_rows"]


class ModelTable(NamedTuple):
    """``models`` (leaves [R, ...]) and ``assignment`` (int32 [N]): client i's model is row ``assignment[i]``
    (module docstring)."""

    models: PyTree
    assignment: jax.Array


def is_table(tree) -> bool:
    return isinstance(tree, ModelTable)


def table_rows(table: ModelTable) -> int:
    """R, the number of models the table holds."""
    return jax.tree.leaves(table.models)[0].shape[0]


def client_models(tree: PyTree) -> PyTree:
    """The N clients' models as rows [N, ...]: a table's rows gathered by its assignment, anything else as it
    is."""
    if not is_table(tree):
        return tree
    return jax.tree.map(lambda x: jnp.take(x, tree.assignment, axis=0), tree.models)


def client_model(tree: PyTree, client) -> PyTree:
    """Client ``client``'s model (one row, no leading axis) of rows [N, ...] or of a table."""
    if is_table(tree):
        return jax.tree.map(lambda x: x[tree.assignment[client]], tree.models)
    return jax.tree.map(lambda x: x[client], tree)
