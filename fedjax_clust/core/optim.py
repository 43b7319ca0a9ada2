"""The step a client takes with the direction its algorithm computes (SGD with heavy-ball or averaged momentum,
or Adam)."""

from __future__ import annotations

import numbers
from typing import Any, Literal, NamedTuple, get_args

import jax
import jax.numpy as jnp
import optax

from fedjax_clust.core.participants import keep_non_participants
from fedjax_clust.core.state import ClientState
from fedjax_clust.core.validation import (
    check_choice,
    check_int,
    check_learning_rate,
    check_real,
)

PyTree = Any

__all__ = [
    "MOMENTUM_FORMS",
    "MomentumForm",
    "CLIENT_OPTIMIZERS",
    "ClientOptimizerName",
    "DEFAULT_MOMENTUM",
    "averaged_momentum",
    "client_optimizer",
    "apply_client_updates",
    "check_common_hparams",
    "check_optimizer",
    "optimizer_hparams",
    "step_rows",
]

MOMENTUM_FORMS = ("heavy-ball", "average")
MomentumForm = Literal[MOMENTUM_FORMS]  # the type hint the command line reads the choices from
ClientOptimizerName = Literal["sgd", "adam"]
CLIENT_OPTIMIZERS = get_args(ClientOptimizerName)
ADAM_B2, ADAM_EPS = 0.999, 1e-8  # PyTorch's and optax's defaults
# the client momentum of the builders and make_algorithm: the paper authors ran Federated-Clustering and the
# baselines with SGD momentum 0.9 (their scripts; Werner et al. §4)
DEFAULT_MOMENTUM = 0.9


class AveragedMomentumState(NamedTuple):
    count: jax.Array
    buffer: PyTree


def averaged_momentum(beta: float) -> optax.GradientTransformation:
    """The paper authors' momentum buffer, an exponential average of the update directions v_t:

        m_1 = v_1,     m_t = (1 - beta) v_t + beta m_{t-1}     (t >= 2),

    whose steady state is v itself, whereas heavy-ball momentum m_t = v_t + beta m_{t-1} grows to
    v / (1 - beta) (10x at beta = 0.9). beta = 0 is the plain direction.
    """

    def init(params):
        return AveragedMomentumState(jnp.zeros((), jnp.int32), jax.tree.map(jnp.zeros_like, params))

    def update(updates, state, params=None):
        del params
        first = state.count == 0
        buffer = jax.tree.map(lambda v, m: jnp.where(first, v, (1.0 - beta) * v + beta * m), updates, state.buffer)
        return buffer, AveragedMomentumState(state.count + 1, buffer)

    return optax.GradientTransformation(init, update)


def client_optimizer(
    learning_rate: float, momentum: float = 0.0, momentum_form: str = "heavy-ball", optimizer: str = "sgd"
):
    """The step every client takes with the direction v its algorithm computes.

    ``optimizer="sgd"`` (default): x <- x - eta * m. ``momentum_form="heavy-ball"``: m_t = v_t + beta m_{t-1},
    m_0 = 0 (optax SGD; PyTorch's SGD momentum). ``"average"``: the paper authors' buffer, see
    :func:`averaged_momentum`. At the same eta the heavy-ball steady-state step is 1 / (1 - beta) times the
    average form's. ``momentum=0`` is plain SGD in both forms.

    ``optimizer="adam"`` (Kingma & Ba 2015, Algorithm 1) with ``momentum`` as its first-moment decay beta_1
    (the default 0.9 of ``make_algorithm`` is Adam's usual one), beta_2 = 0.999, epsilon = 1e-8 (PyTorch's and
    optax's defaults): m_t = beta_1 m_{t-1} + (1 - beta_1) v_t, s_t = beta_2 s_{t-1} + (1 - beta_2) v_t^2,
    x <- x - eta * (m_t / (1 - beta_1^t)) / (sqrt(s_t / (1 - beta_2^t)) + epsilon), elementwise. It keeps two
    buffers the size of the model per client; ``momentum_form`` applies to SGD only.
    """
    check_optimizer(optimizer, momentum_form)
    if optimizer == "adam":
        return optax.adam(learning_rate, b1=momentum, b2=ADAM_B2, eps=ADAM_EPS)
    # No buffer only for a momentum that is a plain zero number; an array (e.g. a sweep's per-run momentum,
    # traced) keeps one even where it is 0, which takes the same steps.
    buffered = not (isinstance(momentum, numbers.Real) and momentum == 0)
    if momentum_form == "average" and buffered:
        return optax.chain(averaged_momentum(momentum), optax.scale(-learning_rate))
    return optax.sgd(learning_rate, momentum=momentum if buffered else None)


def apply_client_updates(optimizer, state: ClientState, directions: PyTree) -> ClientState:
    """x_i <- x_i - eta * (optimiser transform of direction v_i), for all clients at once."""
    updates, opt_state = jax.vmap(optimizer.update)(directions, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    return state._replace(params=params, opt_state=opt_state)


def check_common_hparams(
    learning_rate, momentum=0.0, batch_size=None, local_steps=0, momentum_form="heavy-ball", optimizer="sgd"
):
    """ValueError naming the argument for the hyperparameters every algorithm takes (see
    :mod:`fedjax_clust.core.validation`)."""
    check_learning_rate(learning_rate)
    check_real("momentum", momentum, low=0.0, high=1.0, high_open=True)
    if batch_size is not None:
        check_int("batch_size", batch_size)
    check_int("local_steps", local_steps, 0)
    check_optimizer(optimizer, momentum_form)


def check_optimizer(optimizer: str, momentum_form: str = "heavy-ball"):
    """ValueError unless ``optimizer`` is a client optimiser and ``momentum_form`` one that applies to it (the
    momentum forms are SGD's)."""
    check_choice("momentum_form", momentum_form, MOMENTUM_FORMS)
    check_choice("optimizer", optimizer, CLIENT_OPTIMIZERS)
    if optimizer == "adam" and momentum_form != "heavy-ball":
        raise ValueError(f"momentum_form={momentum_form!r} applies to optimizer='sgd', not 'adam'")


def optimizer_hparams(optimizer: str) -> dict:
    """The hparams entry of a client optimiser: none for SGD (records written before the option read alike)."""
    return {} if optimizer == "sgd" else {"optimizer": optimizer}


def step_rows(rule, rows: PyTree, opt, directions: PyTree, learning_rate: float, keep=None):
    """(rows, opt) after one step of every row (leading axis) of ``rows`` along ``directions``: plain SGD,
    w - eta d, when ``rule`` is None (``opt`` passes through untouched), else the optimiser ``rule``'s step
    (e.g. :func:`client_optimizer`'s Adam), vmapped over the rows with ``opt`` their states. Rows where ``keep``
    (bool [rows]) is False stay as they were, optimiser state included (None: every row steps): the
    non-participants of a round, or cluster slots without members."""
    if rule is None:
        stepped = jax.tree.map(lambda w, d: w - learning_rate * d, rows, directions)
        return keep_non_participants(stepped, rows, keep), opt
    updates, new_opt = jax.vmap(rule.update)(directions, opt, rows)
    return keep_non_participants((jax.tree.map(jnp.add, rows, updates), new_opt), (rows, opt), keep)
