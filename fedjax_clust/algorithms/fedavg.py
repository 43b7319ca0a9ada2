"""FedAvg and its server optimisers (FedAvgM, FedAdagrad, FedAdam, FedYogi) and FedProx: local training, then one
step of the server model along the average of the clients' model deltas.

Round t, server model x_t, the round's clients i (all N, or the participants) with weights w_i (uniform, or their
example counts n_i with ``weighting="examples"``, McMahan et al.'s n_k / n):

1. every client starts at x_t and trains locally (:func:`~fedjax_clust.core.local_training.local_training`):
   E epochs over its examples in batches of B (McMahan et al. 2017, Algorithm 1), or tau steps of B examples,
   with its client optimiser (SGD with ``client_momentum``, or Adam), whose state starts fresh each round;
   FedProx (Li et al. 2020, eq. (2)) adds the proximal gradient mu (x - x_t) to every local step;
2. it sends its delta Delta_i = x_i - x_t (a Byzantine client sends the attack instead); the server averages
   them, Delta_t = sum_i w_i Delta_i / sum_i w_i over the finite deltas (or the robust ``aggregator``; under
   central privacy the private mean: every delta clipped, the sum noised: DP-FedAvg, McMahan et al. 2018);
3. the server steps along Delta_t with its optimiser (Reddi et al. 2021, Algorithm 2, "ServerOpt"; the
   pseudo-gradient is -Delta_t), server learning rate eta:

   * ``sgd`` (FedAvg):        x_{t+1} = x_t + eta Delta_t (eta = 1: the plain average of the client models);
   * ``momentum`` (FedAvgM, Hsu et al. 2019): v_t = beta v_{t-1} + Delta_t, x_{t+1} = x_t + eta v_t;
   * ``adagrad`` / ``adam`` / ``yogi`` (FedAdagrad / FedAdam / FedYogi):
     m_t = beta_1 m_{t-1} + (1 - beta_1) Delta_t, and
     v_t = v_{t-1} + Delta_t^2 (Adagrad), beta_2 v_{t-1} + (1 - beta_2) Delta_t^2 (Adam),
     v_{t-1} - (1 - beta_2) Delta_t^2 sign(v_{t-1} - Delta_t^2) (Yogi);
     x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau), elementwise, with m_{-1} = 0 and v_{-1} = tau^2;
     ``server_bias_correction`` gives Kingma and Ba's Adam instead (optax's, FedJAX's): v_{-1} = 0 and
     x_{t+1} = x_t + eta m_hat / (sqrt(v_hat) + tau), m_hat = m_t / (1 - beta_1^t), v_hat = v_t / (1 - beta_2^t).

SCAFFOLD (Karimireddy et al. 2020, Algorithm 1 with Option II; ``scaffold``): the server keeps a control variate
c and every client its own c_i (client rows [N, ...], all 0 at the start); each local step's gradient becomes
g_i(y) - c_i + c; after K_i steps the client's c_i+ = c_i - c + (x_t - y_i) / (K_i eta_l) (K_i its own step count,
so a smaller client's epochs count its own steps), and it sends (Delta y_i, c_i+ - c_i); the server steps x along
the mean Delta y and sets c <- c + (1 / N) sum_i (c_i+ - c_i), i.e. |S| / N times the mean over the round's |S|
clients (Algorithm 1, line 17). The pair is one message: an attacker replaces both, and a robust aggregator or
example weights apply to both (the paper's means are uniform; with ``weighting="examples"`` the control mean is
weighted too). Option II's formula assumes plain SGD steps, so control variates refuse client momentum and Adam.
Central privacy is refused: c_i+ - c_i is a second release per round that the accountant does not count.

Choices (documented): v_{-1} = tau^2, the least value Algorithm 2 allows (Flower 1.42's FedAdagrad / FedAdam /
FedYogi start v at 0: the two differ by at most tau^2 in v); no bias correction, as in Algorithm 2 (FedJAX's server
optimisers are optax's, whose Adam corrects its bias: ``server_bias_correction=True`` is that Adam, checked side by
side with FedJAX; Flower 1.42's FedAdam scales eta by sqrt(1 - beta_2^(t+1)) / (1 - beta_1^(t+1)) at its round t,
one round ahead of Kingma and Ba's t, and keeps tau outside: neither form). A round in which no delta is finite
(every client diverged or was silenced) leaves the server model and its optimiser state as they were.

The clients own no model between rounds: the state is the server model (a one-row
:class:`~fedjax_clust.core.model_table.ModelTable` every client reads, so nothing grows with N) and the server
optimiser's buffers; a round of S participants costs S clients' local training and one server step. Every
client is evaluated with the server model, and so is an unseen client.

``global`` (:mod:`fedjax_clust.algorithms.fixed_clusters`) is the seed papers' baseline: one gradient step per
round on the averaged gradient with the clients' momentum kept across rounds; ``fedavg`` with one local step
of plain SGD (``local_steps=1``, ``client_momentum=0``) and ``server_learning_rate=1`` takes the same first
step (x - eta mean_i g_i) and differs only in where momentum lives.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Callable, Literal, NamedTuple, Optional, Union, get_args

import jax
import jax.numpy as jnp

from fedjax_clust.algorithms.registry import AlgorithmSpec, Traffic, two_way_traffic
from fedjax_clust.core.algorithm import FederatedAlgorithm
from fedjax_clust.core.batching import client_loss
from fedjax_clust.core.keys import attack_key, privacy_key
from fedjax_clust.core.local_training import StepDirection, local_training
from fedjax_clust.core.model_table import ModelTable
from fedjax_clust.core.optim import ClientOptimizerName, check_common_hparams, client_optimizer
from fedjax_clust.core.option_groups import group_fields, is_option_group, option_group, take_legacy
from fedjax_clust.core.participants import client_rows
from fedjax_clust.core.pytrees import broadcast_to_clients, leading_dim
from fedjax_clust.core.state import ClientState, shared_params
from fedjax_clust.core.unseen import GLOBAL_ROW
from fedjax_clust.core.validation import check_choice, check_int, check_mask_size, check_real, is_traced
from fedjax_clust.core.weighting import ClientWeights, check_weighted_mean, resolve_weighting, weighting_hparams
from fedjax_clust.parallel.row_plan import ChunkSize
from fedjax_clust.robust.adversary import NO_ATTACKERS, Attackers, adversary, robust_hparams
from fedjax_clust.robust.aggregators import (
    aggregate_segments_with_state,
    aggregator_metrics,
    aggregator_state,
    resolve_aggregator,
)

__all__ = ["SERVER_OPTIMIZERS", "ServerOptimizer", "FedAvgClients", "FedAvgServer", "fedavg", "make_server_optimizer"]

ADAM_B1 = 0.9  # the clients' Adam: beta_1 (beta_2 and epsilon: client_optimizer's)
ServerOptimizerName = Literal["sgd", "momentum", "adagrad", "adam", "yogi"]
SERVER_OPTIMIZERS = get_args(ServerOptimizerName)


class ServerOptimizer(NamedTuple):
    """``init(model) -> state``; ``update(delta, state, model) -> (model, state)``: one server step along the
    averaged delta (module docstring, step 3)."""

    init: Callable
    update: Callable


def make_server_optimizer(
    name: str, learning_rate, momentum=0.9, beta2=0.99, tau=1e-3, *, bias_correction=False, initial_v=None
) -> ServerOptimizer:
    """The server optimiser ``name`` of :data:`SERVER_OPTIMIZERS` with learning rate eta, ``momentum`` (FedAvgM's
    beta; the adaptive ones' beta_1), ``beta2`` and ``tau`` (the adaptive ones'), as in the module docstring.

    ``bias_correction`` (``adam`` only): Kingma and Ba's Adam, as optax's (FedJAX's server optimisers): v starts
    at 0, and after the t-th step x_{t+1} = x_t + eta m_hat / (sqrt(v_hat) + tau) with m_hat = m_t / (1 - beta_1^t),
    v_hat = v_t / (1 - beta_2^t). ``initial_v``: v_{-1} of the adaptive optimisers (default tau^2, or 0 with
    bias correction); Flower's FedAdagrad / FedYogi start at 0."""
    check_choice("server_optimizer", name, SERVER_OPTIMIZERS)
    if bias_correction and name != "adam":
        raise ValueError(f"bias correction applies to server_optimizer='adam', not {name!r}")
    if initial_v is None:
        initial_v = 0.0 if bias_correction else tau * tau
    else:
        check_real("initial_v", initial_v, low=0.0)

    def tree(f, *trees):
        return jax.tree.map(f, *trees)

    if name == "sgd":
        return ServerOptimizer(lambda model: (), lambda d, s, x: (tree(lambda p, u: p + learning_rate * u, x, d), s))
    if name == "momentum":

        def momentum_update(d, v, x):
            v = tree(lambda b, u: momentum * b + u, v, d)
            return tree(lambda p, b: p + learning_rate * b, x, v), v

        return ServerOptimizer(lambda model: tree(jnp.zeros_like, model), momentum_update)

    def second_moment(v, d):
        if name == "adagrad":
            return v + d * d
        if name == "adam":
            return beta2 * v + (1.0 - beta2) * d * d
        return v - (1.0 - beta2) * d * d * jnp.sign(v - d * d)  # yogi

    def init(model):
        state = {"m": tree(jnp.zeros_like, model), "v": tree(lambda p: jnp.full_like(p, initial_v), model)}
        return {**state, "t": jnp.zeros((), jnp.float32)} if bias_correction else state

    def update(d, state, x):
        m = tree(lambda b, u: momentum * b + (1.0 - momentum) * u, state["m"], d)
        v = tree(second_moment, state["v"], d)
        new = {"m": m, "v": v}
        if bias_correction:
            t = state["t"] + 1.0
            new["t"] = t
            m_scale, v_scale = 1.0 / (1.0 - momentum**t), 1.0 / (1.0 - beta2**t)
            step = tree(lambda a, b: a * m_scale / (jnp.sqrt(b * v_scale) + tau), m, v)
        else:
            step = tree(lambda a, b: a / (jnp.sqrt(b) + tau), m, v)
        return tree(lambda p, u: p + learning_rate * u, x, step), new

    return ServerOptimizer(init, update)


@option_group
class FedAvgClients:
    """What every client of FedAvg does in a round (module docstring, step 1): ``fedavg``'s ``clients`` option
    (an option group, :mod:`fedjax_clust.core.option_groups`: ``make_algorithm``, the command line and sweeps
    take its fields by name).

    Args:
      local_epochs: E, passes over each client's examples per round in batches of ``batch_size`` (a client takes
        E ceil(n_i / B) steps); neither this nor ``local_steps``: one epoch.
      local_steps: tau, local steps per round, each on a fresh minibatch of ``batch_size`` examples (instead of
        epochs).
      local_shuffle: with local_epochs, each epoch reads a client's examples in a fresh random order (default);
        False: in their stored order (FedJAX's skip_shuffle: what a side-by-side check with it needs).
      optimizer: the clients' optimiser, "sgd" (default, with ``client_momentum``) or "adam" (beta_1 0.9,
        beta_2 0.999, epsilon 1e-8); its state starts fresh every round.
      client_momentum: heavy-ball momentum of the clients' SGD within a round (default 0: plain SGD, McMahan et
        al.'s).
      prox_mu: FedProx's mu >= 0, the weight of the proximal term (mu / 2) ||x - x_t||^2 of every local step
        (0: none).
      control_variates: SCAFFOLD's control variates (Option II; the registered scaffold sets it): every local
        step is corrected by c - c_i, see the module docstring.
    """

    local_epochs: Optional[int] = None
    local_steps: Optional[int] = None
    local_shuffle: bool = True
    optimizer: ClientOptimizerName = "sgd"
    client_momentum: float = 0.0
    prox_mu: float = 0.0
    control_variates: bool = False


@option_group
class FedAvgServer:
    """FedAvg's server optimiser (module docstring, step 3; :func:`make_server_optimizer`): ``fedavg``'s ``server``
    option (an option group, :mod:`fedjax_clust.core.option_groups`).

    Args:
      server_optimizer: "sgd" (FedAvg), "momentum" (FedAvgM), "adagrad", "adam" or "yogi" (Reddi et al.
        2021); the registered fedavgm / fedadagrad / fedadam / fedyogi fix it.
      server_learning_rate: eta, the server's step along the averaged delta (1: the plain model average).
      server_momentum: FedAvgM's beta, and beta_1 of the adaptive server optimisers.
      server_beta2: beta_2 of FedAdam's and FedYogi's second moment.
      server_tau: tau, the adaptive server optimisers' adaptivity (their epsilon; v starts at tau^2).
      server_bias_correction: Adam's bias correction (Kingma and Ba; optax's and so FedJAX's Adam): v starts at 0
        and the step is eta m_hat / (sqrt(v_hat) + tau) with m_hat = m / (1 - beta_1^t), v_hat = v / (1 - beta_2^t)
        (default False: Reddi et al.'s Algorithm 2, none). fedadam only.
    """

    server_optimizer: ServerOptimizerName = "sgd"
    server_learning_rate: float = 1.0
    server_momentum: float = 0.9
    server_beta2: float = 0.99
    server_tau: float = 1e-3
    server_bias_correction: bool = False


def fedavg(
    example_loss,
    *,
    learning_rate: float,
    batch_size: Optional[int] = None,
    clients: FedAvgClients = FedAvgClients(),
    server: FedAvgServer = FedAvgServer(),
    aggregator="mean",
    attackers: Attackers = NO_ATTACKERS,
    weighting: Union[str, ClientWeights] = "uniform",
    client_chunk: ChunkSize = "auto",
    **legacy,
) -> FederatedAlgorithm:
    """FedAvg with a client and a server optimiser (module docstring); ``learning_rate`` is the clients' step.

    Args:
      clients: the clients' local training, a :class:`FedAvgClients` (local_epochs or local_steps,
        local_shuffle, optimizer, client_momentum, prox_mu, control_variates).
      server: the server's optimiser, a :class:`FedAvgServer` (server_optimizer, server_learning_rate,
        server_momentum, server_beta2, server_tau, server_bias_correction).
      attackers: the Byzantine clients and their attack (:class:`~fedjax_clust.robust.adversary.Attackers`).
      weighting: the deltas' weights: "uniform" (default) or ClientWeights (``make_algorithm``'s "examples": n_i,
        McMahan et al.'s n_k / n); :mod:`fedjax_clust.core.weighting`.
      client_chunk: clients whose local training runs at once: "auto" (default: on a CPU, chunks of about 12 MiB
        of model rows, every client at once on an accelerator), an integer, or None / "all" (every client at
        once); the models agree to float32 rounding (:mod:`fedjax_clust.core.local_training`, "Chunks").
      legacy: the deprecated keywords of the two groups' fields, ``attack`` and ``byzantine`` (fedjax-clust
        0.3.0: ``clients`` / ``server`` / ``attackers``).
    """
    clients, server, attackers = take_legacy("fedavg", legacy, clients=clients, server=server, attackers=attackers)
    attack, byzantine = attackers.attack, attackers.byzantine
    local_epochs, local_steps, local_shuffle = clients.local_epochs, clients.local_steps, clients.local_shuffle
    optimizer, client_momentum = clients.optimizer, clients.client_momentum
    prox_mu, control_variates = clients.prox_mu, clients.control_variates
    server_optimizer, server_learning_rate = server.server_optimizer, server.server_learning_rate
    server_momentum, server_beta2, server_tau = server.server_momentum, server.server_beta2, server.server_tau
    server_bias_correction = server.server_bias_correction
    check_common_hparams(learning_rate, client_momentum, batch_size, optimizer=optimizer)
    if local_epochs is not None and local_steps is not None:
        raise ValueError("fedavg takes local_epochs or local_steps, not both")
    if local_steps is not None:
        check_int("local_steps", local_steps, 1)
        if not local_shuffle:
            raise ValueError("local_shuffle applies to local_epochs: local steps draw their minibatches at random")
    epochs = (
        None if local_steps is not None else (1 if local_epochs is None else check_int("local_epochs", local_epochs))
    )
    check_choice("server_optimizer", server_optimizer, SERVER_OPTIMIZERS)
    check_real("server_learning_rate", server_learning_rate, low=0.0, low_open=True)
    check_real("server_momentum", server_momentum, low=0.0, high=1.0, high_open=True)
    check_real("server_beta2", server_beta2, low=0.0, high=1.0, high_open=True)
    check_real("server_tau", server_tau, low=0.0, low_open=True)
    check_real("prox_mu", prox_mu, low=0.0)
    chunk = None if client_chunk in (None, "all") else client_chunk
    if chunk is not None and chunk != "auto":
        chunk = check_int("client_chunk", chunk, 1)
    _refuse_unused(server_optimizer, optimizer, client_momentum, server_momentum, server_beta2, server_tau)
    if server_bias_correction and server_optimizer != "adam":
        raise ValueError(
            f"server_bias_correction does nothing with server_optimizer={server_optimizer!r}; it applies to 'adam'"
        )
    if control_variates and (optimizer != "sgd" or is_traced(client_momentum) or client_momentum != 0):
        raise ValueError(
            "control variates (SCAFFOLD Option II: c_i+ = c_i - c + (x - y_i) / (K eta)) assume the clients' plain "
            "SGD steps: give optimizer='sgd' and client_momentum=0"
        )
    aggregate = resolve_aggregator(aggregator)
    mask, send = adversary(attack, byzantine, "fedavg")
    weighting_name, weights_j = resolve_weighting(weighting)
    check_weighted_mean(weights_j, aggregate)
    grad_fn = jax.grad(client_loss(example_loss))
    client_step = client_optimizer(
        learning_rate, ADAM_B1 if optimizer == "adam" else client_momentum, "heavy-ball", optimizer
    )
    server_step = make_server_optimizer(
        server_optimizer,
        server_learning_rate,
        server_momentum,
        server_beta2,
        server_tau,
        bias_correction=bool(server_bias_correction),
    )

    def init(params, num_clients):
        params = shared_params(params, "fedavg")
        check_mask_size(mask, num_clients)
        held = aggregator_state(aggregate)
        extra = {"server": server_step.init(params), **({} if held is None else {"aggregator": held})}
        model = ModelTable(broadcast_to_clients(params, 1), jnp.zeros((num_clients,), jnp.int32))
        rows: object = ()
        if control_variates:  # c = 0 on the server, c_i = 0 for every client (Algorithm 1's initialisation)
            zeros = jax.tree.map(jnp.zeros_like, params)
            extra.update(control=zeros, population=jnp.asarray(num_clients, jnp.float32))
            rows = broadcast_to_clients(zeros, num_clients)
        return ClientState(model, (), jnp.zeros((), jnp.int32), extra, rows)

    def round_fn(state, data, key, participants=None):
        model = jax.tree.map(lambda x: x[0], state.params.models)
        clients = leading_dim(state.params.assignment, "assignment")
        start = broadcast_to_clients(model, clients)
        correction = None
        if control_variates:  # every step's gradient plus c - c_i (Algorithm 1, line 10)
            correction = jax.tree.map(lambda c, ci: c[None] - ci, state.extra["control"], state.rows)
        trained = local_training(
            grad_fn,
            start,
            data,
            key,
            optimizer=client_step,
            epochs=epochs,
            steps=local_steps,
            batch_size=batch_size,
            direction=StepDirection(prox=prox_mu, reference=model, correction=correction),
            shuffle=local_shuffle,
            client_chunk=chunk,
        )
        deltas = jax.tree.map(jnp.subtract, trained.params, start)
        message, control = deltas, None
        if control_variates:
            control = _new_controls(state.rows, state.extra["control"], deltas, trained.steps, learning_rate)
            message = {"model": deltas, "control": jax.tree.map(jnp.subtract, control, state.rows)}
        messages = send(message, attack_key(key), participants=participants)
        held = state.extra.get("aggregator")
        per_group, members, held = aggregate_segments_with_state(
            aggregate,
            held,
            messages,
            jnp.zeros((clients,), jnp.int32),
            1,
            client_rows(weights_j, participants),
            privacy_key(key),
        )
        delta = jax.tree.map(lambda x: x[0], per_group)
        old = {k: v for k, v in state.extra.items() if k in ("server", "control")}
        new = dict(old)
        if control_variates:  # c <- c + (|S| / N) mean_i Delta c_i = c + (1 / N) sum_i Delta c_i (line 17)
            delta, mean_control = delta["model"], delta["control"]
            share = members[0].astype(jnp.float32) / state.extra["population"]
            new["control"] = jax.tree.map(lambda c, d: c + share * d, old["control"], mean_control)
        stepped, new["server"] = server_step.update(delta, old["server"], model)
        heard = members[0] > 0  # a round that heard no finite message changes nothing
        model, kept = jax.tree.map(lambda n, o: jnp.where(heard, n, o), (stepped, new), (model, old))
        extra = {**state.extra, **kept, **({} if held is None else {"aggregator": held})}
        params = state.params._replace(models=broadcast_to_clients(model, 1))
        metrics = {**aggregator_metrics(aggregate, held), "local_steps": jnp.mean(trained.steps.astype(jnp.float32))}
        rows = state.rows if control is None else control
        return state._replace(params=params, round=state.round + 1, extra=extra, rows=rows), metrics

    hparams = dict(
        learning_rate=learning_rate,
        batch_size=batch_size,
        **({"local_steps": local_steps} if local_steps is not None else {"local_epochs": epochs}),
        **({"local_shuffle": False} if not local_shuffle else {}),
        **({"optimizer": optimizer} if optimizer != "sgd" else {}),
        client_momentum=client_momentum,
        server_optimizer=server_optimizer,
        server_learning_rate=server_learning_rate,
        **({"server_momentum": server_momentum} if server_optimizer != "sgd" else {}),
        **(
            {"server_beta2": server_beta2, "server_tau": server_tau}
            if server_optimizer in ("adagrad", "adam", "yogi")
            else {}
        ),
        **({"server_bias_correction": True} if server_bias_correction else {}),
        **({"client_chunk": chunk} if chunk != "auto" else {}),
        **({"prox_mu": prox_mu} if not (isinstance(prox_mu, (int, float)) and prox_mu == 0) else {}),
        **({"control_variates": True} if control_variates else {}),
        **robust_hparams(aggregate, attack),
        **weighting_hparams(weighting_name),
    )
    return FederatedAlgorithm("fedavg", init, round_fn, hparams, unseen=GLOBAL_ROW)


def _new_controls(controls, server_control, deltas, steps, learning_rate):
    """SCAFFOLD's Option II (Karimireddy et al. 2020, Algorithm 1, line 12) for every client of the round:
    c_i+ = c_i - c + (x - y_i) / (K_i eta_l) = c_i - c - Delta y_i / (K_i eta_l), K_i its local steps; a client
    that took no step keeps its c_i."""
    took = steps > 0
    scale = jnp.where(took, 1.0 / (jnp.maximum(steps, 1).astype(jnp.float32) * learning_rate), 0.0)

    def one(ci, c, d):
        shape = (-1,) + (1,) * (d.ndim - 1)
        new = ci - c[None] - scale.reshape(shape) * d
        return jnp.where(took.reshape(shape), new, ci)

    return jax.tree.map(one, controls, server_control, deltas)


def _refuse_unused(server, client, client_momentum, momentum, beta2, tau) -> None:
    """A ValueError for an option the chosen optimisers do not read (two runs that differ only in it would be the
    same run): client momentum with Adam, the server's beta / beta_2 / tau where its optimiser has none. Traced
    values (a sweep's) are not checked."""
    defaults = {"server_momentum": 0.9, "server_beta2": 0.99, "server_tau": 1e-3}
    given = {"server_momentum": momentum, "server_beta2": beta2, "server_tau": tau}
    reads = {
        "sgd": (),
        "momentum": ("server_momentum",),
        "adagrad": ("server_momentum", "server_tau"),
        "adam": ("server_momentum", "server_beta2", "server_tau"),
        "yogi": ("server_momentum", "server_beta2", "server_tau"),
    }[server]
    for option, value in given.items():
        if option not in reads and not is_traced(value) and value != defaults[option]:
            raise ValueError(f"{option} does nothing with server_optimizer={server!r}; it applies to {_users(option)}")
    if client == "adam" and not is_traced(client_momentum) and client_momentum != 0:
        raise ValueError("client_momentum applies to optimizer='sgd' (Adam's beta_1 is 0.9)")


def _users(option: str) -> str:
    return {
        "server_momentum": "'momentum', 'adagrad', 'adam' and 'yogi'",
        "server_beta2": "'adam' and 'yogi'",
        "server_tau": "'adagrad', 'adam' and 'yogi'",
    }[option]


def _preset(name: str, **fixed):
    """fedavg with ``fixed`` options (fields of its option groups) and their defaults changed
    (``server_learning_rate``, ``prox_mu``): the builder the registry reads for ``name``, whose signature's group
    defaults hold them; the fixed ``server_optimizer`` and ``control_variates`` are hidden (no option)."""
    hidden = [k for k in fixed if k == "server_optimizer"] + ["control_variates"]
    signature = inspect.signature(fedavg)
    parameters = []
    for p in signature.parameters.values():
        if is_option_group(p.default):
            mine = {k: v for k, v in fixed.items() if k in group_fields(p.default)}
            p = p.replace(default=dataclasses.replace(p.default, **mine)) if mine else p
        parameters.append(p)
    groups = {p.name: p.default for p in parameters if is_option_group(p.default)}

    @functools.wraps(fedavg)
    def builder(example_loss, **options):
        return fedavg(example_loss, **{**groups, **options})._replace(name=name)

    builder.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]  # the registry reads it
    builder.__name__ = name.replace("-", "_")
    return builder, tuple(hidden)


_PRESETS: tuple[tuple[str, dict, str], ...] = (
    ("fedavg", {}, "FedAvg (McMahan et al. 2017): local epochs or steps, the clients' deltas averaged"),
    ("fedavgm", {"server_optimizer": "momentum"}, "FedAvgM (Hsu et al. 2019): FedAvg with server momentum"),
    (
        "fedadagrad",
        {"server_optimizer": "adagrad", "server_learning_rate": 0.1},
        "FedAdagrad (Reddi et al. 2021): FedAvg with an Adagrad server",
    ),
    (
        "fedadam",
        {"server_optimizer": "adam", "server_learning_rate": 0.01},
        "FedAdam (Reddi et al. 2021): FedAvg with an Adam server",
    ),
    (
        "fedyogi",
        {"server_optimizer": "yogi", "server_learning_rate": 0.01},
        "FedYogi (Reddi et al. 2021): FedAvg with a Yogi server",
    ),
    ("fedprox", {"prox_mu": 0.01}, "FedProx (Li et al. 2020): FedAvg with a proximal term in local training"),
    (
        "scaffold",
        {"control_variates": True},
        "SCAFFOLD (Karimireddy et al. 2020, Option II): local steps corrected by control variates c - c_i",
    ),
)


def _scaffold_traffic(num_clients: int, num_params: int, num_clusters: int = 1, subgroups: int = 1) -> Traffic:
    """SCAFFOLD's round: a client downloads (x, c) and uploads (Delta y_i, Delta c_i), two models each way."""
    one = two_way_traffic(num_clients, num_params, num_clusters, subgroups)
    return Traffic(2 * one.down_bytes, 2 * one.up_bytes, 1, 1)


def _spec(name, fixed, summary):
    builder, hidden = _preset(name, **fixed)
    return AlgorithmSpec(
        name,
        lambda task, **options: builder(task.example_loss, **options),
        builder=builder,
        traffic=_scaffold_traffic if fixed.get("control_variates") else two_way_traffic,
        hidden=hidden,
        # the averaged delta, the only thing a round releases; SCAFFOLD's control variates are releases of
        # their own, which the accountant does not count: it refuses central privacy
        private_releases=None if fixed.get("control_variates") else (lambda options: 1),
        summary=summary,
    )


SPECS = tuple(_spec(*preset) for preset in _PRESETS)
