"""The shape every algorithm shares: ``FederatedAlgorithm(name, init, round)`` over a batched ClientState.

Following optax's (init, update) pairs and FedJAX's ``FederatedAlgorithm(init, apply)``, an algorithm is a
pair of pure functions built by a function that takes its hyperparameters:

    algo = federated_clustering(example_loss, learning_rate=0.01, quantile=0.2)
    state = algo.init(params0, num_clients)               # leaves of state.params: [N, ...]
    state, metrics = jax.jit(algo.round)(state, data, key)  # data leaves: [N, n_samples, ...]

Unlike FedJAX, the N clients are never visited one by one: every client's parameters and optimiser state
live in one pytree with a leading client axis and each round is a single vmapped, jit-compiled function.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_clust.pytrees import broadcast_to_clients

PyTree = Any
ExampleLoss = Callable[[PyTree, PyTree], jax.Array]  # (params, one example) -> scalar

__all__ = ["ClientState", "FederatedAlgorithm", "client_loss", "sample_minibatch", "client_optimizer",
           "init_client_state", "apply_client_updates", "check_common_hparams"]


class ClientState(NamedTuple):
    """State of all N clients: every leaf has a leading client axis (``round`` and ``extra`` aside)."""
    params: PyTree
    opt_state: PyTree
    round: jax.Array
    extra: PyTree = ()


class FederatedAlgorithm(NamedTuple):
    """An algorithm: ``init(params, num_clients) -> ClientState`` and
    ``round(state, data, key) -> (state, metrics)``, a pure function to be jit-compiled.

    ``evaluate(state) -> metrics``, when given, replaces ``task.evaluate(state.params)`` for algorithms
    whose personalised predictor is not a parameter vector per client (kNN-Per)."""
    name: str
    init: Callable[[PyTree, int], ClientState]
    round: Callable[[ClientState, PyTree, jax.Array], tuple]
    hparams: dict
    evaluate: Optional[Callable[[ClientState], dict]] = None


def client_loss(example_loss: ExampleLoss) -> Callable[[PyTree, PyTree], jax.Array]:
    """Mean of ``example_loss`` over a batch of examples (leading axis): f_i on a minibatch B_i."""
    def loss(params, batch):
        return jnp.mean(jax.vmap(example_loss, in_axes=(None, 0))(params, batch))
    return loss


def sample_minibatch(data: PyTree, batch_size: Optional[int], key: jax.Array) -> PyTree:
    """A fresh minibatch of ``batch_size`` examples per client, drawn without replacement.

    ``data`` leaves are [N, n, ...]; returns leaves [N, batch_size, ...]. ``None`` (or n) is the full batch.
    """
    leaves = jax.tree.leaves(data)
    num_clients, n = leaves[0].shape[:2]
    if batch_size is None or batch_size >= n:
        return data
    scores = jax.random.uniform(key, (num_clients, n))
    idx = jnp.argsort(scores, axis=1)[:, :batch_size]
    return jax.tree.map(lambda x: jnp.take_along_axis(x, idx.reshape(idx.shape + (1,) * (x.ndim - 2)), axis=1), data)


def client_optimizer(learning_rate: float, momentum: float = 0.0, nesterov: bool = False):
    """SGD with optional heavy-ball momentum, applied to whatever update direction the algorithm computes
    (the paper authors' neural-network runs: SGD, momentum 0.9)."""
    return optax.sgd(learning_rate, momentum=momentum if momentum else None, nesterov=nesterov)


def init_client_state(optimizer, params: PyTree, num_clients: int, extra: PyTree = ()) -> ClientState:
    """All clients start from the same parameters x_{1,0} = ... = x_{N,0} (Algorithms 1, 2 and 4)."""
    if isinstance(num_clients, bool) or not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
        raise ValueError(f"num_clients must be a positive integer, got {num_clients!r}")
    stacked = broadcast_to_clients(params, int(num_clients))
    opt_state = jax.vmap(optimizer.init)(stacked)
    return ClientState(stacked, opt_state, jnp.zeros((), jnp.int32), extra)


def apply_client_updates(optimizer, state: ClientState, directions: PyTree) -> ClientState:
    """x_i <- x_i - eta * (optimiser transform of direction v_i), for all clients at once."""
    updates, opt_state = jax.vmap(optimizer.update)(directions, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    return state._replace(params=params, opt_state=opt_state)


def check_common_hparams(learning_rate, momentum, batch_size, local_steps=0):
    """ValueError naming the argument for the hyperparameters every algorithm takes."""
    if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float, np.number)) \
            or not math.isfinite(learning_rate) or learning_rate <= 0:
        raise ValueError(f"learning_rate must be a positive finite number, got {learning_rate!r}")
    if not isinstance(momentum, (int, float, np.number)) or not (0.0 <= momentum < 1.0):
        raise ValueError(f"momentum must lie in [0, 1), got {momentum!r}")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer))
                                   or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer or None (full batch), got {batch_size!r}")
    if isinstance(local_steps, bool) or not isinstance(local_steps, (int, np.integer)) or local_steps < 0:
        raise ValueError(f"local_steps must be a non-negative integer, got {local_steps!r}")
