"""FedSoft (Ruan & Joe-Wong, AAAI 2022), a soft-clustering baseline of SR-FCA (seeds/001, §6).

Every client's data is a mixture of K source distributions. The server keeps K cluster models c_1..c_K,
every client k a personal model w_k, and the importance weights u_ks estimate the share of client k's data
that comes from distribution s. A round t:

1. every ``estimation_interval`` (tau) rounds, starting at round 0, each client estimates its importance
   weights from the current cluster models by counting the local examples each model fits best,

       n_ks = #{xi in D_k : s = argmin_s' l(c_s'; xi)},    u_ks = n_ks / n_k,   u_ks = sigma if n_ks = 0,

   with the smoother sigma (``smoother``) keeping every cluster's weight positive; in between, the last
   estimate is reused;
2. every client takes ``local_steps`` SGD steps from its personal model on the proximal objective

       h_k(w) = f_k(w) + (lambda / 2) sum_s u_ks ||w - c_s||^2          (``lam`` = lambda),

   whose gradient is grad f_k(w) + lambda (U_k w - a_k) with U_k = sum_s u_ks and a_k = sum_s u_ks c_s,
   so one step costs one client gradient whatever K is;
3. the server averages the personal models into every cluster model with the aggregation weights

       v_sk = u_ks n_k / sum_k' u_k's n_k',     c_s <- sum_k v_sk w_k.

FedSoft trains both kinds of model, and the paper evaluates both. ``predict="personal"`` (default) makes the
personal models w_k the clients' parameters (what the metrics evaluate); ``predict="cluster"`` makes them the
cluster model of the client's dominant distribution, c_{s_k} with s_k = argmax_s u_ks (the personal models
then live in ``state.rows["personal"]``). ``cluster_labels`` is s_k (ties to the lowest index).

Choices beyond the paper (documented in docs/papers/fedsoft.md):

* every client takes part in every round, so step 3 is the full-participation average; FedSoft's
  per-cluster client selection (K clients drawn with probability v_sk, averaged uniformly) is partial
  participation;
* the clients step with plain SGD on minibatches of ``batch_size`` (the authors' scripts use Adam for 5-10
  local epochs), as every other baseline of the package does;
* personal models start at the shared model; cluster models at ``init_cluster_params`` or K draws as for
  IFCA (on neural tasks :func:`fedjax_clust.algorithms.make_algorithm` passes K independent draws of the
  task's initialiser, as the authors' scripts create K fresh models);
* a client with no real example gets u_ks = sigma for every s and weight 0 in step 3.

Byzantine clients (``attackers``: ``attack`` / ``byzantine``) replace the model they send with w_k^old +
attack(Delta_k), Delta_k = w_k^new - w_k^old (the attack acts on the update, as for IFCA Option II); their importance
weights are honest. A message with a NaN or infinite entry gets weight 0 in step 3 (the weights of the other clients are
renormalised), as every server average of the package does (:func:`fedjax_clust.core.pytrees.segment_mean`).
"""

from __future__ import annotations

from typing import Literal, Optional

import jax
import jax.numpy as jnp
import optax
from jax import lax

from fedjax_clust.algorithms.loss_clustering import (
    ClusterInit,
    initial_cluster_models,
    task_cluster_init,
)
from fedjax_clust.algorithms.registry import AlgorithmSpec
from fedjax_clust.core.algorithm import FederatedAlgorithm
from fedjax_clust.core.batching import client_loss, example_mask, padded_batch
from fedjax_clust.core.keys import attack_key, initialisation_key
from fedjax_clust.core.local_training import StepDirection, local_training
from fedjax_clust.core.optim import check_common_hparams
from fedjax_clust.core.option_groups import take_legacy
from fedjax_clust.core.pytrees import broadcast_to_clients, finite_rows, take_rows
from fedjax_clust.core.state import ClientState, shared_params
from fedjax_clust.core.unseen import server_models
from fedjax_clust.core.validation import (
    check_choice,
    check_clusters_fit,
    check_int,
    check_mask_size,
    check_optional_seed,
    check_real,
)
from fedjax_clust.core.weighting import example_counts
from fedjax_clust.robust.adversary import NO_ATTACKERS, Attackers, adversary, robust_hparams
from fedjax_clust.robust.aggregators import resolve_aggregator

__all__ = ["fedsoft", "importance_weights", "soft_cluster_average", "PREDICTORS"]

PREDICTORS = ("personal", "cluster")
Predictor = Literal[PREDICTORS]


def _example_counts(data) -> jax.Array:
    """[N] float32 real examples per client (:func:`fedjax_clust.core.weighting.example_counts`)."""
    return jnp.asarray(example_counts(data), jnp.float32)


def importance_weights(example_loss, centers, data, smoother: float) -> jax.Array:
    """[N, K] FedSoft's importance weights u_ks = n_ks / n_k (step 1 of the module docstring), sigma where
    n_ks = 0. Every example of every client is scored at each of the K models (one model at a time, so the
    memory is one model's [N, n] losses); a NaN loss counts as +inf; padding is not counted. Ragged data are
    scored padded to the largest client (:func:`~fedjax_clust.core.batching.padded_batch`)."""
    data = padded_batch(data)
    per_example = jax.vmap(jax.vmap(example_loss, in_axes=(None, 0)), in_axes=(None, 0))  # [N, n]
    losses = lax.map(lambda c: per_example(c, data), centers)  # [K, N, n]
    num_clusters = losses.shape[0]
    best = jnp.argmin(jnp.where(jnp.isnan(losses), jnp.inf, losses), axis=0)  # [N, n]
    hits = jax.nn.one_hot(best, num_clusters, dtype=jnp.float32)  # [N, n, K]
    mask = example_mask(data)
    if mask is not None:
        hits = hits * mask[..., None]
    counts = jnp.sum(hits, axis=1)  # [N, K]
    shares = counts / jnp.maximum(_example_counts(data), 1.0)[:, None]
    return jnp.where(counts > 0, shares, smoother)


def soft_cluster_average(models, importance, sizes):
    """[K, ...] cluster models c_s = sum_k v_sk w_k with v_sk = u_ks n_k / sum_k' u_k's n_k' (step 3),
    over the rows of ``models`` [N, ...] that are finite (the others get weight 0); a cluster whose weight
    is zero on every finite row gets NaN."""
    finite = finite_rows(models)
    weights = jnp.where(finite[:, None], importance * sizes[:, None], 0.0)  # [N, K]
    totals = jnp.sum(weights, axis=0)  # [K]
    v = weights / jnp.maximum(totals, 1e-30)

    def average(x):
        clean = jnp.where(finite.reshape((-1,) + (1,) * (x.ndim - 1)), x, 0)
        out = jnp.tensordot(v.T.astype(x.dtype), clean, axes=1)
        return jnp.where((totals > 0).reshape((-1,) + (1,) * (x.ndim - 1)), out, jnp.nan)

    return jax.tree.map(average, models)


def fedsoft(
    example_loss,
    num_clusters: int,
    *,
    learning_rate: float,
    lam: float = 0.1,
    smoother: float = 1e-4,
    estimation_interval: int = 1,
    local_steps: int = 5,
    batch_size: Optional[int] = None,
    cluster_init: ClusterInit = ClusterInit(),
    predict: Predictor = "personal",
    attackers: Attackers = NO_ATTACKERS,
    **legacy,
) -> FederatedAlgorithm:
    """FedSoft with K = ``num_clusters`` cluster models, proximal weight ``lam`` (lambda; the authors' MNIST
    scripts use 0.1, CIFAR-10 0.01), smoother ``smoother`` (sigma, their 1e-4), importance re-estimated
    every ``estimation_interval`` rounds (tau) and ``local_steps`` proximal SGD steps per round; see the
    module docstring; ``predict`` chooses the clients' parameters: their "personal" models or their dominant
    "cluster" model.

    Args:
      lam: the proximal weight lambda (the authors' MNIST scripts 0.1, CIFAR-10 0.01).
      smoother: the importance smoother sigma in (0, 1] (theirs 1e-4).
      estimation_interval: tau, rounds between re-estimations of the importance weights.
      local_steps: proximal SGD steps per round.
      cluster_init: where the K cluster models start, a
        :class:`~fedjax_clust.algorithms.loss_clustering.ClusterInit` (init_cluster_params, init_scale, seed).
      predict: the model a client is evaluated with: "personal" or its dominant "cluster" model.
      legacy: the deprecated keywords ``init_cluster_params``, ``init_scale``, ``seed``, ``attack`` and
        ``byzantine`` (fedjax-clust 0.3.0: ``cluster_init`` / ``attackers``).
    """
    cluster_init, attackers = take_legacy("fedsoft", legacy, cluster_init=cluster_init, attackers=attackers)
    init_cluster_params, init_scale, seed = cluster_init.init_cluster_params, cluster_init.init_scale, cluster_init.seed
    attack, byzantine = attackers.attack, attackers.byzantine
    check_common_hparams(learning_rate, 0.0, batch_size, local_steps)
    check_int("num_clusters", num_clusters)
    check_int("local_steps", local_steps, 1)
    check_int("estimation_interval", estimation_interval, 1)
    check_real("lam", lam, low=0.0)
    check_real("smoother", smoother, low=0.0, high=1.0, low_open=True)
    check_real("init_scale", init_scale, low=0.0)
    check_optional_seed(seed)
    check_choice("predict", predict, PREDICTORS)
    mask, send = adversary(attack, byzantine, "fedsoft")
    grad_fn = jax.grad(client_loss(example_loss))

    def init(params, num_clients, key=None):
        params = shared_params(params, "fedsoft")
        check_clusters_fit(num_clusters, num_clients)
        check_mask_size(mask, num_clients)
        centers = initial_cluster_models(
            params, num_clusters, init_cluster_params, init_scale, initialisation_key(seed, key)
        )
        importance = jnp.full((num_clients, num_clusters), 1.0 / num_clusters, jnp.float32)
        personal = broadcast_to_clients(params, num_clients)
        return _state(personal, centers, importance, jnp.zeros((), jnp.int32))

    def _state(personal, centers, importance, round_):
        if predict == "personal":
            return ClientState(personal, (), round_, {"centers": centers}, {"importance": importance})
        used = take_rows(centers, jnp.argmax(importance, axis=1))
        return ClientState(used, (), round_, {"centers": centers}, {"importance": importance, "personal": personal})

    def round_fn(state, data, key, participants=None):
        centers = state.extra["centers"]
        importance = lax.cond(
            state.round % estimation_interval == 0,
            lambda: importance_weights(example_loss, centers, data, smoother),
            lambda: state.rows["importance"],
        )
        mass = jnp.sum(importance, axis=1)  # U_k
        anchor = jax.tree.map(lambda c: jnp.tensordot(importance.astype(c.dtype), c, axes=1), centers)  # a_k

        def pull(w):  # the gradient of (lambda / 2) sum_s u_ks ||w - c_s||^2: lambda (U_k w - a_k)
            return jax.tree.map(lambda p, a: lam * (mass.reshape((-1,) + (1,) * (p.ndim - 1)) * p - a), w, anchor)

        old = state.params if predict == "personal" else state.rows["personal"]
        personal = local_training(
            grad_fn,
            old,
            data,
            key,
            optimizer=optax.sgd(learning_rate),
            steps=local_steps,
            batch_size=batch_size,
            direction=StepDirection(penalty=pull),
        ).params
        sent = personal
        if mask is not None:  # the attack acts on the update (module docstring)
            delta = send(jax.tree.map(jnp.subtract, personal, old), attack_key(key), participants=participants)
            sent = jax.tree.map(jnp.add, old, delta)
        centers = soft_cluster_average(sent, importance, _example_counts(data))
        labels = jnp.argmax(importance, axis=1).astype(jnp.int32)
        return _state(personal, centers, importance, state.round + 1), {"cluster_labels": labels}

    hparams = dict(
        num_clusters=num_clusters,
        learning_rate=learning_rate,
        lam=lam,
        smoother=smoother,
        estimation_interval=estimation_interval,
        local_steps=local_steps,
        batch_size=batch_size,
        init_scale=init_scale,
        seed=seed,
        predict=predict,
        **robust_hparams(resolve_aggregator("mean"), attack),
    )
    return FederatedAlgorithm("fedsoft", init, round_fn, hparams, unseen=server_models("best-cluster-model", "centers"))


SPECS = (
    AlgorithmSpec(
        "fedsoft",
        lambda task, num_clusters, **options: fedsoft(
            task.example_loss, num_clusters, **task_cluster_init(task, num_clusters, options)
        ),
        builder=fedsoft,
        needs_clusters=True,
        flags={"lam": "fedsoft-lambda"},
        summary="FedSoft (Ruan & Joe-Wong 2022): soft clustering with proximal personal models",
    ),
)
