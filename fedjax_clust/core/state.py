"""The batched state of all N clients, and where it starts.

A state has two parts. The clients' rows: every leaf of ``params``, ``opt_state`` and ``rows`` (an algorithm's
other per-client state: IFCA's cluster labels, Momentum-Clustering's momentums, FedSoft's importance weights)
has a leading client axis N, so partial participation gathers and scatters any algorithm's rows the same way.
The server's: ``extra`` (cluster models, the global model, ...) and ``round``, the shared round counter.
An algorithm whose clients own no model keeps its server models as ``params`` in a
:class:`~fedjax_clust.core.model_table.ModelTable` (R models and each client's row, not N copies);
``state.client_params`` gives every client's model as rows either way.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from fedjax_clust.core.model_table import client_models
from fedjax_clust.core.pytrees import broadcast_to_clients, leading_dim
from fedjax_clust.core.validation import check_int

PyTree = Any

__all__ = ["ClientState", "ClientParams", "init_client_state", "shared_params"]


class ClientState(NamedTuple):
    """State of all N clients (``params``, ``opt_state``, ``rows``: every leaf [N, ...]) and of the server
    (``extra``, ``round``); see the module docstring."""

    params: PyTree
    opt_state: PyTree
    round: jax.Array
    extra: PyTree = ()
    rows: PyTree = ()

    @property
    def client_params(self) -> PyTree:
        """Every client's model as rows [N, ...]: ``params`` itself, or the rows a server-held
        :class:`~fedjax_clust.core.model_table.ModelTable` stands for (Global, Ground-truth)."""
        return client_models(self.params)


class ClientParams(NamedTuple):
    """Per-client initial models for ``algorithm.init``: ``stacked`` leaves [N, ...] (client i starts at row
    i) instead of one model every client starts from. Accepted by the algorithms whose clients own their
    models (Federated-, Myopic-, Momentum-Clustering, Local, Global, Ground-truth, kNN-Per); the ones that
    start from shared cluster models (IFCA, HypCluster, CFL, Ditto) refuse it."""

    stacked: PyTree


def init_client_state(
    optimizer, params: PyTree, num_clients: int, extra: PyTree = (), rows: PyTree = ()
) -> ClientState:
    """All clients start from the same parameters x_{1,0} = ... = x_{N,0} (Algorithms 1, 2 and 4), or from
    their own rows when ``params`` is a :class:`ClientParams`."""
    num_clients = check_int("num_clients", num_clients)
    if isinstance(params, ClientParams):
        stacked = params.stacked
        if leading_dim(stacked, "ClientParams.stacked") != num_clients:
            raise ValueError(
                f"ClientParams.stacked must have a leading axis of num_clients={num_clients}, "
                f"got {leading_dim(stacked)}"
            )
    else:
        stacked = broadcast_to_clients(params, num_clients)
    opt_state = jax.vmap(optimizer.init)(stacked)
    return ClientState(stacked, opt_state, jnp.zeros((), jnp.int32), extra, rows)


def shared_params(params: PyTree, algorithm: str) -> PyTree:
    """``params`` for an algorithm that starts every client from one shared model; ValueError for
    per-client :class:`ClientParams`."""
    if isinstance(params, ClientParams):
        raise ValueError(
            f"algorithm {algorithm!r} starts from shared models and takes no per-client initial "
            "parameters (init='oracle'/'random' applies to the algorithms whose clients own models)"
        )
    return params
