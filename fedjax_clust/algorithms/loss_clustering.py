"""K cluster models, each client assigned to the model with the lowest loss on its data.

* IFCA (Ghosh et al. 2020), as discussed in Werner et al. §2.1: every round each client evaluates its
  minibatch loss at the K cluster models and picks the lowest (k_i = argmin_k f_i(theta_k)).
    - Option I (gradient averaging): theta_k <- theta_k - eta * mean_{i : k_i = k} g_i(theta_k); with
      ``optimizer="adam"`` the server steps each theta_k with its own Adam on that mean gradient instead
      (:func:`fedjax_clust.core.optim.client_optimizer`, beta_1 = 0.9; SR-FCA's MNIST configuration trains every
      method with Adam, Vardhan et al. §6). The K Adam states are server state; a cluster no client picks keeps
      its model and its Adam state (our choice: its step count does not advance).
    - Option II (model averaging): each client runs tau local SGD steps from theta_{k_i} (LocalUpdate) and
      theta_k <- mean_{i : k_i = k} of the clients' local models.
* HypCluster (Mansour et al. 2021), "a centralized version of Option II": the server assigns clients by
  loss, then runs tau SGD steps per cluster, each step with the uniform mean over the cluster's members of
  their fresh minibatch gradients at the cluster model. Every member weighs the same whatever its size: this
  is not SGD on the members' pooled examples, which would weigh each member by its examples (two members,
  model a x with x = 1, loss (a x - y)^2 / 2, a = 0, learning rate 1, full batches, one member holding one
  example y = 0 and the other three y = 1: this step gives a = 0.5, the pooled examples 0.75; a test checks
  it). ``weighting="examples"`` (:mod:`fedjax_clust.core.weighting`) weighs each member by its example count
  n_i instead, which with full batches is the pooled examples' gradient (0.75 above; the same test).

Every average (IFCA's per-cluster gradients or models, HypCluster's per-step gradients) is uniform over the
members by default, or weighted by ``weighting``.

A cluster no client picks keeps its model; a client whose message (gradient or local model) is non-finite
is left out of its cluster's average (see :func:`fedjax_clust.core.pytrees.segment_mean`). A client's personal
model is the model of its cluster.

Byzantine clients (``attackers``: ``attack`` / ``byzantine``, see :mod:`fedjax_clust.robust.attacks`) replace everything
they send: the K losses that pick their cluster (so an attacker can join any cluster it likes), and their
gradients (IFCA Option I, every HypCluster step) or local models (Option II). For Option II the attack acts
on the local update Delta_i = theta_i^local - theta_{k_i} (the attacker sends theta_{k_i} + attack(Delta)),
so that "large gradient" or "sign flip" keep their meaning on a model message. ``aggregator`` (a name of
:data:`fedjax_clust.robust.AGGREGATORS` or a built rule; default the mean) replaces the per-cluster mean of
the messages (see :func:`fedjax_clust.robust.aggregators.aggregate_segments`).
Initial cluster models: ``init_cluster_params`` (leaves [K, ...]; the paper's Fig. 1b uses -1.5 and 0, or a
function of a key returning them), or K draws params + ``init_scale`` * N(0, I) (the papers initialise
randomly). The draws come from the run's key (:func:`fedjax_clust.core.keys.init_key`, passed to ``init``), so
each seed of a run starts from its own K models; ``seed`` (an int) fixes them instead, whatever the run's seed.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Optional, Union

import jax
import jax.numpy as jnp

from fedjax_clust.algorithms.registry import FLOAT_BYTES, AlgorithmSpec, Traffic
from fedjax_clust.core.algorithm import FederatedAlgorithm
from fedjax_clust.core.batching import client_loss, local_sgd_steps, map_clients, sample_minibatch
from fedjax_clust.core.keys import attack_key, initialisation_key, privacy_key
from fedjax_clust.core.model_table import ModelTable
from fedjax_clust.core.optim import (
    DEFAULT_MOMENTUM,
    check_common_hparams,
    client_optimizer,
    optimizer_hparams,
    step_rows,
)
from fedjax_clust.core.option_groups import option_group, take_legacy
from fedjax_clust.core.participants import client_rows
from fedjax_clust.core.pytrees import segment_mean, take_rows
from fedjax_clust.core.state import ClientState, shared_params
from fedjax_clust.core.unseen import server_models
from fedjax_clust.core.validation import (
    check_clusters_fit,
    check_int,
    check_mask_size,
    check_optional_seed,
    check_real,
)
from fedjax_clust.core.weighting import ClientWeights, check_weighted_mean, resolve_weighting, weighting_hparams
from fedjax_clust.privacy.mechanism import PrivateMean
from fedjax_clust.robust.adversary import NO_ATTACKERS, Attackers, adversary, robust_hparams
from fedjax_clust.robust.aggregators import (
    aggregate_groups,
    aggregate_segments,
    aggregate_segments_with_state,
    aggregator_metrics,
    aggregator_state,
    resolve_aggregator,
    with_aggregator_state,
)

__all__ = ["ifca", "hypcluster", "ClusterInit", "initial_cluster_models"]


@option_group(eq=False)  # compared by identity: it may hold the models
class ClusterInit:
    """Where the K cluster models of IFCA, HypCluster and FedSoft start: their ``cluster_init`` option (an
    option group, :mod:`fedjax_clust.core.option_groups`: ``make_algorithm``, the command line and sweeps take its
    fields by name); see :func:`initial_cluster_models`.

    Args:
      init_cluster_params: the K starting models (a pytree whose leaves have a leading axis K), or a function of
        the run's key returning them; None (default): the shared start plus init_scale noise, or, given by
        ``make_algorithm`` on a task with a neural model, K draws of the task's initialiser (as the IFCA paper).
      init_scale: standard deviation of the K random initial cluster models (linear models; a neural
        model's are K draws of the task's initialiser).
      seed: fixes the K random initial models whatever the run's seed (default None: drawn from the run's
        key, so each seed starts from its own).
    """

    init_cluster_params: Any = None
    init_scale: float = 1.0
    seed: Optional[int] = None


def _keep_empty(new, old, counts):
    return jax.tree.map(lambda n, o: jnp.where((counts > 0).reshape((-1,) + (1,) * (n.ndim - 1)), n, o), new, old)


def _check(num_clusters, learning_rate, batch_size, init_scale, seed, optimizer="sgd"):
    check_common_hparams(learning_rate, 0.0, batch_size, optimizer=optimizer)
    check_int("num_clusters", num_clusters)
    check_real("init_scale", init_scale, low=0.0)
    check_optional_seed(seed)


def initial_cluster_models(params, num_clusters: int, init_cluster_params, init_scale: float, key):
    """The K starting cluster models [K, ...]: ``init_cluster_params`` (checked; a function is called with
    ``key``) or K draws params + ``init_scale`` * N(0, I) from ``key`` (see the module docstring)."""
    if callable(init_cluster_params):
        init_cluster_params = init_cluster_params(key)
    if init_cluster_params is not None:
        centers = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), init_cluster_params)
        if any(x.shape[:1] != (num_clusters,) for x in jax.tree.leaves(centers)):
            raise ValueError(f"init_cluster_params must have a leading axis of size num_clusters={num_clusters}")
        return centers
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(key, len(leaves))
    return jax.tree.unflatten(
        treedef, [x + init_scale * jax.random.normal(k, (num_clusters,) + jnp.shape(x)) for x, k in zip(leaves, keys)]
    )


def _init_fn(
    name, num_clusters, init_cluster_params, init_scale, seed, byzantine=None, server_optimizer=None, aggregate=None
):
    """``init`` of the K cluster models (and, with ``server_optimizer``, their K optimiser states; with a
    stateful ``aggregate``, its state: the server dict's ``"aggregator"``)."""

    def init(params, num_clients, key=None):
        params = shared_params(params, name)
        check_clusters_fit(num_clusters, num_clients)
        check_mask_size(byzantine, num_clients)
        centers = initial_cluster_models(
            params, num_clusters, init_cluster_params, init_scale, initialisation_key(seed, key)
        )
        labels = jnp.zeros((num_clients,), jnp.int32)
        server = {"centers": centers}
        if server_optimizer is not None:
            server["centers_opt"] = jax.vmap(server_optimizer.init)(centers)
        server = with_aggregator_state(server, None if aggregate is None else aggregator_state(aggregate))
        return ClientState(ModelTable(centers, labels), (), jnp.zeros((), jnp.int32), server, {"labels": labels})

    return init


def _round_fn(loss, batch_size, update, send, weights=None, aggregate=None):
    """Assign every client to its lowest-loss cluster model (by the losses the clients send), then
    ``update(server, labels, data, key, send, weights)`` -> the new server state (``{"centers": ...}`` and any
    optimiser state or aggregator state), with ``send`` and the client ``weights`` (None: uniform) restricted to
    the round's participants; the aggregator state's metrics (``aggregate``'s) join the round's."""

    def round_fn(state, data, key, participants=None):
        def sent(messages, key, axis=0):
            return send(messages, key, axis, participants)

        k_assign, k_update = jax.random.split(key)
        centers = state.extra["centers"]
        batch = sample_minibatch(data, batch_size, k_assign)
        losses = map_clients(lambda _, b: jax.vmap(loss, (0, None))(centers, b), None, batch).T  # [K, N]
        losses = sent(losses, attack_key(k_assign), axis=-1)
        labels = jnp.argmin(jnp.where(jnp.isnan(losses), jnp.inf, losses), axis=0).astype(jnp.int32)
        server = update(state.extra, labels, data, k_update, sent, client_rows(weights, participants))
        state = ClientState(ModelTable(server["centers"], labels), (), state.round + 1, server, {"labels": labels})
        return state, {"cluster_labels": labels, **aggregator_metrics(aggregate, server.get("aggregator"))}

    return round_fn


def ifca(
    example_loss,
    num_clusters: int,
    *,
    learning_rate: float,
    option: int = 1,
    batch_size: Optional[int] = None,
    local_steps: int = 5,
    cluster_init: ClusterInit = ClusterInit(),
    aggregator="mean",
    attackers: Attackers = NO_ATTACKERS,
    optimizer: str = "sgd",
    weighting: Union[str, ClientWeights] = "uniform",
    **legacy,
) -> FederatedAlgorithm:
    """IFCA with Option I (``option=1``, gradient averaging) or Option II (``option=2``, tau =
    ``local_steps`` local steps then model averaging); ``aggregator`` / ``attackers`` as in the module
    docstring.

    Args:
      local_steps: Option II's tau, local SGD steps before the models are averaged.
      cluster_init: where the K cluster models start, a :class:`ClusterInit` (init_cluster_params, init_scale,
        seed).
      optimizer: "sgd" (default) or "adam", the server's step of each cluster model on its mean gradient
        (Option I only; module docstring).
      weighting: the members' weights in each cluster's mean: "uniform" (default, the paper's) or
        ClientWeights (``make_algorithm``'s "examples": n_i); :mod:`fedjax_clust.core.weighting`.
      legacy: the deprecated keywords ``init_cluster_params``, ``init_scale``, ``seed``, ``attack`` and
        ``byzantine`` (fedjax-clust 0.3.0: ``cluster_init`` / ``attackers``).
    """
    cluster_init, attackers = take_legacy("ifca", legacy, cluster_init=cluster_init, attackers=attackers)
    init_cluster_params, init_scale, seed = cluster_init.init_cluster_params, cluster_init.init_scale, cluster_init.seed
    attack, byzantine = attackers.attack, attackers.byzantine
    _check(num_clusters, learning_rate, batch_size, init_scale, seed, optimizer)
    check_int("local_steps", local_steps, 0)
    if option not in (1, 2):
        raise ValueError(f"option must be 1 (gradient averaging) or 2 (model averaging), got {option!r}")
    if optimizer != "sgd" and option != 1:
        raise ValueError(f"optimizer={optimizer!r} applies to IFCA option 1 (gradient averaging), not option 2")
    server_optimizer = (
        client_optimizer(learning_rate, DEFAULT_MOMENTUM, optimizer=optimizer) if optimizer != "sgd" else None
    )
    name = f"ifca-{option}"
    aggregate = resolve_aggregator(aggregator)
    weighting_name, weights_j = resolve_weighting(weighting)
    check_weighted_mean(weights_j, aggregate)
    mask, send = adversary(attack, byzantine, name)
    private = isinstance(aggregate, PrivateMean)
    loss = client_loss(example_loss)
    grad_fn = jax.grad(loss)

    def update(server, labels, data, key, send, weights):
        centers = server["centers"]
        start = take_rows(centers, labels)
        if option == 1:
            batch = sample_minibatch(data, batch_size, key)
            grads, counts, held = aggregate_segments_with_state(
                aggregate,
                server.get("aggregator"),
                send(map_clients(grad_fn, start, batch), attack_key(key)),
                labels,
                num_clusters,
                weights,
                privacy_key(key),
            )
            new, opt = step_rows(server_optimizer, centers, server.get("centers_opt"), grads, learning_rate, counts > 0)
            out = {"centers": new} if server_optimizer is None else {"centers": new, "centers_opt": opt}
            return with_aggregator_state(out, held)
        else:
            local = local_sgd_steps(
                grad_fn, start, data, key, steps=local_steps, learning_rate=learning_rate, batch_size=batch_size
            )
            if private:  # the private mean clips and noises the local updates (module docstring)
                delta = send(jax.tree.map(jnp.subtract, local, start), attack_key(key))
                step, counts, held = aggregate_segments_with_state(
                    aggregate, server.get("aggregator"), delta, labels, num_clusters, weights, privacy_key(key)
                )
                return with_aggregator_state({"centers": jax.tree.map(jnp.add, centers, step)}, held)
            if mask is not None:  # the attack acts on the local update (module docstring)
                delta = send(jax.tree.map(jnp.subtract, local, start), attack_key(key))
                local = jax.tree.map(jnp.add, start, delta)
            new, counts = aggregate_segments(aggregate, local, labels, num_clusters, weights)
        return {"centers": _keep_empty(new, centers, counts)}

    hparams = dict(
        num_clusters=num_clusters,
        option=option,
        learning_rate=learning_rate,
        batch_size=batch_size,
        local_steps=local_steps,
        init_scale=init_scale,
        seed=seed,
        **robust_hparams(aggregate, attack),
        **optimizer_hparams(optimizer),
        **weighting_hparams(weighting_name),
    )
    return FederatedAlgorithm(
        name,
        _init_fn(name, num_clusters, init_cluster_params, init_scale, seed, mask, server_optimizer, aggregate),
        _round_fn(loss, batch_size, update, send, weights_j, aggregate),
        hparams,
        unseen=server_models("best-cluster-model", "centers"),
    )


def hypcluster(
    example_loss,
    num_clusters: int,
    *,
    learning_rate: float,
    batch_size: Optional[int] = None,
    cluster_steps: int = 5,
    cluster_init: ClusterInit = ClusterInit(),
    aggregator="mean",
    attackers: Attackers = NO_ATTACKERS,
    weighting: Union[str, ClientWeights] = "uniform",
    **legacy,
) -> FederatedAlgorithm:
    """HypCluster: loss-based assignment, then ``cluster_steps`` centralised SGD steps per cluster, each with
    the ``aggregator`` of the members' gradients (default their uniform mean; ``weighting``: module
    docstring).

    Args:
      cluster_steps: centralised SGD steps per cluster per round (``local_steps`` before 0.3.0).
      cluster_init: where the K cluster models start, a :class:`ClusterInit` (init_cluster_params, init_scale,
        seed).
      weighting: the members' weights in each step's mean: "uniform" (default) or ClientWeights
        (``make_algorithm``'s "examples": n_i, the pooled examples' gradient with full batches).
      legacy: the deprecated keywords ``init_cluster_params``, ``init_scale``, ``seed``, ``attack`` and
        ``byzantine`` (fedjax-clust 0.3.0: ``cluster_init`` / ``attackers``).
    """
    cluster_init, attackers = take_legacy("hypcluster", legacy, cluster_init=cluster_init, attackers=attackers)
    init_cluster_params, init_scale, seed = cluster_init.init_cluster_params, cluster_init.init_scale, cluster_init.seed
    attack, byzantine = attackers.attack, attackers.byzantine
    _check(num_clusters, learning_rate, batch_size, init_scale, seed)
    check_int("cluster_steps", cluster_steps, 0)
    aggregate = resolve_aggregator(aggregator)
    weighting_name, weights_j = resolve_weighting(weighting)
    check_weighted_mean(weights_j, aggregate)
    mask, send = adversary(attack, byzantine, "hypcluster")
    private = isinstance(aggregate, PrivateMean)
    if private and cluster_steps == 0:
        raise ValueError("private HypCluster with cluster_steps=0 trains nothing: give cluster_steps >= 1")
    loss = client_loss(example_loss)
    grad_fn = jax.grad(loss)

    def private_update(centers, held, labels, data, key, send, weights):
        """(the K cluster models, the aggregator's state) after ``cluster_steps`` server steps with the private
        mean of the members' gradients at the current models, every cluster every step (a cluster nobody picked
        moves by noise alone: whether it had members is not released; an adaptive clip bound moves after every
        step, each step's count a release of its own); the keys of :func:`local_sgd_steps`, so without clipping
        or noise this is the path below."""

        def one_step(e, carry):
            models, held = carry
            k = jax.random.fold_in(key, e)
            grads = map_clients(grad_fn, take_rows(models, labels), sample_minibatch(data, batch_size, k))
            ka = attack_key(k)
            per_group, _, held = aggregate_segments_with_state(
                aggregate, held, send(grads, ka), labels, num_clusters, weights, privacy_key(ka)
            )
            return jax.tree.map(lambda m, g: m - learning_rate * g, models, per_group), held

        return jax.lax.fori_loop(0, cluster_steps, one_step, (centers, held))

    def update(server, labels, data, key, send, weights):
        centers = server["centers"]
        if private:
            moved, held = private_update(centers, server.get("aggregator"), labels, data, key, send, weights)
            return with_aggregator_state({"centers": moved}, held)
        # Every member starts at its cluster model and takes the same cluster-aggregated steps, so the
        # members' rows stay equal to the cluster's centralised SGD iterate.
        moved = local_sgd_steps(
            grad_fn,
            take_rows(centers, labels),
            data,
            key,
            steps=cluster_steps,
            learning_rate=learning_rate,
            batch_size=batch_size,
            combine=lambda g, k: aggregate_groups(aggregate, send(g, k), labels, num_clusters, weights, privacy_key(k)),
        )
        new, counts = segment_mean(moved, labels, num_clusters)  # the rows of a cluster are equal
        return {"centers": _keep_empty(new, centers, counts)}

    hparams = dict(
        num_clusters=num_clusters,
        learning_rate=learning_rate,
        batch_size=batch_size,
        cluster_steps=cluster_steps,
        init_scale=init_scale,
        seed=seed,
        **robust_hparams(aggregate, attack),
        **weighting_hparams(weighting_name),
    )
    return FederatedAlgorithm(
        "hypcluster",
        _init_fn("hypcluster", num_clusters, init_cluster_params, init_scale, seed, mask, aggregate=aggregate),
        _round_fn(loss, batch_size, update, send, weights_j, aggregate),
        hparams,
        unseen=server_models("best-cluster-model", "centers"),
    )


def task_cluster_init(task, num_clusters: int, options: dict) -> dict:
    """``options`` (a builder's, option groups gathered) whose ``cluster_init`` holds K independent draws of the
    task's initialiser on a task with a neural model (``task.logits``), as the IFCA paper does, unless it
    holds starting models already: a function of the run's key (``init``'s), or drawn once from
    ``PRNGKey(seed)`` when it fixes a ``seed``. The default "shared start + N(0, init_scale^2) noise" suits the
    linear tasks' zero start only."""
    start = options.get("cluster_init", ClusterInit())
    if task.logits is None or start.init_cluster_params is not None:
        return options

    def draws(key):
        return jax.vmap(task.init_params)(jax.random.split(key, num_clusters))

    models = draws if start.seed is None else draws(jax.random.PRNGKey(start.seed))
    return {**options, "cluster_init": dataclasses.replace(start, init_cluster_params=models)}


def loss_choice_traffic(num_clients: int, num_params: int, num_clusters: int = 1, subgroups: int = 1) -> Traffic:
    """One client's IFCA / HypCluster round: the K cluster models down, one message of the model's size up; K
    loss evaluations (to choose its cluster) and one gradient."""
    del num_clients, subgroups
    size = FLOAT_BYTES * num_params
    return Traffic(size * num_clusters, size, num_clusters, 1, passes=num_clusters + 1)


def _ifca_spec(option: int) -> AlgorithmSpec:
    def build(task, num_clusters, **options):
        return ifca(task.example_loss, num_clusters, option=option, **task_cluster_init(task, num_clusters, options))

    return AlgorithmSpec(
        f"ifca-{option}",
        build,
        builder=ifca,
        hidden=("option",) if option == 1 else ("option", "optimizer"),  # Option II averages models: no server step
        needs_clusters=True,
        traffic=loss_choice_traffic,
        private_releases=lambda options: 1,
        summary=f"IFCA (Ghosh et al. 2020) option {'I: gradient' if option == 1 else 'II: model'} "
        "averaging in the lowest-loss cluster",
    )


SPECS = (
    _ifca_spec(1),
    _ifca_spec(2),
    AlgorithmSpec(
        "hypcluster",
        lambda task, num_clusters, **options: hypcluster(
            task.example_loss, num_clusters, **task_cluster_init(task, num_clusters, options)
        ),
        builder=hypcluster,
        needs_clusters=True,
        renamed={"local_steps": "cluster_steps"},
        traffic=loss_choice_traffic,
        # every one of the cluster_steps steps releases a noised sum of the same sampled clients
        private_releases=lambda options: options.get(
            "cluster_steps", inspect.signature(hypcluster).parameters["cluster_steps"].default
        ),
        summary="HypCluster (Mansour et al. 2020): K hypotheses, each client trains its best",
    ),
)
