"""Server-side clustering of the clients' gradients or momentums: O(N) messages per round.

* Myopic-Clustering (Werner et al., Algorithm 1): each round the server clusters the N current minibatch
  gradients g_i(x_{i,t-1}) into K groups and client i steps with its group's centre,
  x_{i,t} = x_{i,t-1} - eta v_{k_i,t}. The paper does not say how the server clusters; we use k-means
  (k-means++ seeding, ``kmeans_steps`` Lloyd iterations, fresh seeding every round, inside jit).
* Momentum-Clustering (Algorithm 4, eq. (6)): clients send m_{i,t} = alpha g_i(x_{i,t-1}) + (1-alpha) m_{i,t-1};
  the server runs Threshold-Clustering with K clusters seeded at last round's centres and client i steps
  with the centre of its cluster. Choices the paper leaves open: m_{i,0} = g_i(x_{i,0}) (so m_{i,1} is the first
  gradient and the momentums start at the gradients' scale instead of growing from 0, which made centres seeded in
  round 1 lose their clusters in our runs); the first round's centres are seeded by k-means++ on m_{i,1}; client i's
  cluster k_i is its nearest centre after clustering.

Byzantine clients (``attackers``: ``attack`` / ``byzantine``) replace the message the server clusters: their gradient
(Myopic) or their momentum (Momentum-Clustering; the honest momentum they would keep is what the state
carries, the attack is applied to what is sent each round). A non-finite message never moves a centre
(see :func:`fedjax_clust.ops.clustering.kmeans` and :func:`fedjax_clust.ops.clustering.threshold_clustering`).
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
from jax import lax

from fedjax_clust.algorithms.registry import AlgorithmSpec
from fedjax_clust.core.algorithm import FederatedAlgorithm
from fedjax_clust.core.batching import client_loss, map_clients, sample_minibatch
from fedjax_clust.core.execution import Execution
from fedjax_clust.core.keys import attack_key
from fedjax_clust.core.optim import (
    DEFAULT_MOMENTUM,
    MomentumForm,
    apply_client_updates,
    check_common_hparams,
    client_optimizer,
)
from fedjax_clust.core.option_groups import take_legacy
from fedjax_clust.core.pytrees import ravel_rows
from fedjax_clust.core.state import init_client_state
from fedjax_clust.core.validation import (
    check_clusters_fit,
    check_fraction,
    check_int,
    check_mask_size,
)
from fedjax_clust.ops.clustering import (
    DEFAULT_QUANTILE,
    QuantileSelect,
    Radius,
    check_radius_rule,
    kmeans,
    kmeans_plus_plus,
    nearest_center,
    resolve_select,
    threshold_clustering_unchecked,
)
from fedjax_clust.robust.adversary import NO_ATTACKERS, Attackers, adversary
from fedjax_clust.robust.registry import recorded_name

__all__ = ["myopic_clustering", "momentum_clustering"]


def myopic_clustering(
    example_loss,
    num_clusters: int,
    *,
    learning_rate: float,
    momentum: float = DEFAULT_MOMENTUM,
    momentum_form: MomentumForm = "heavy-ball",
    batch_size: Optional[int] = None,
    kmeans_steps: int = 10,
    attackers: Attackers = NO_ATTACKERS,
    **legacy,
) -> FederatedAlgorithm:
    """Myopic-Clustering (Algorithm 1) with k-means on the server.

    Args:
      kmeans_steps: Lloyd iterations of the server's k-means of the gradients each round (after k-means++
        seeding in the first round).
    """
    (attackers,) = take_legacy("myopic_clustering", legacy, attackers=attackers)
    attack, byzantine = attackers.attack, attackers.byzantine
    check_common_hparams(learning_rate, momentum, batch_size, momentum_form=momentum_form)
    check_int("num_clusters", num_clusters)
    check_int("kmeans_steps", kmeans_steps, 0)
    mask, send = adversary(attack, byzantine, "myopic-clustering")
    optimizer = client_optimizer(learning_rate, momentum, momentum_form)
    grad_fn = jax.grad(client_loss(example_loss))

    def init(params, num_clients):
        check_clusters_fit(num_clusters, num_clients)
        check_mask_size(mask, num_clients)
        return init_client_state(optimizer, params, num_clients)

    def round_fn(state, data, key, participants=None):
        k_batch, k_means = jax.random.split(key)
        batch = sample_minibatch(data, batch_size, k_batch)
        grads, unravel = ravel_rows(map_clients(grad_fn, state.params, batch))
        grads = send(grads, attack_key(k_batch), participants=participants)
        centers, labels = kmeans(grads, num_clusters, k_means, steps=kmeans_steps)
        state = apply_client_updates(optimizer, state, unravel(centers[labels]))
        return state._replace(round=state.round + 1), {"cluster_labels": labels}

    hparams = dict(
        num_clusters=num_clusters,
        learning_rate=learning_rate,
        momentum=momentum,
        momentum_form=momentum_form,
        batch_size=batch_size,
        kmeans_steps=kmeans_steps,
        **({} if attack is None else {"attack": recorded_name(attack)}),
    )
    return FederatedAlgorithm("myopic-clustering", init, round_fn, hparams)


def momentum_clustering(
    example_loss,
    num_clusters: int,
    *,
    learning_rate: float,
    alpha: float = 0.1,
    batch_size: Optional[int] = None,
    clustering_steps: int = 10,
    radius: Radius = None,
    quantile: Optional[float] = None,
    quantile_select: QuantileSelect = "auto",
    attackers: Attackers = NO_ATTACKERS,
    **legacy,
) -> FederatedAlgorithm:
    """Momentum-Clustering (Algorithm 4): Threshold-Clustering of the clients' momentums (eq. 6).

    ``quantile_select``: how the quantile rule finds its k-th distance ("auto", "search", "radix"; see
    :func:`fedjax_clust.ops.clustering.resolve_select`); the result does not depend on it. A client's momentum
    starts at its first gradient, m_{i,0} = g_i(x_{i,0}), in the first round it takes part in (round 0
    unless partial participation leaves it out): ``state.rows["started"]`` marks the clients that have one.

    Args:
      alpha: the momentum weight in eq. (6), m_i <- alpha g_i + (1 - alpha) m_i, in (0, 1] (paper: 0.1).
      clustering_steps: M, Threshold-Clustering steps per round (paper: 10).
      radius / quantile: the radius rule of Threshold-Clustering, at most one: a fixed radius (a scalar or
        one per cluster; "theory": sqrt(sigma_hat Delta_hat)) or the quantile of the distances at every
        step; neither: quantile 0.2, the paper's 20th percentile (§4.2).
      quantile_select: how the quantile rule finds its k-th distance: "auto" (default: search on a CPU,
        radix on a GPU/TPU), "search" or "radix"; the result does not depend on it.
    """
    (attackers,) = take_legacy("momentum_clustering", legacy, attackers=attackers)
    attack, byzantine = attackers.attack, attackers.byzantine
    check_common_hparams(learning_rate, 0.0, batch_size)
    check_int("num_clusters", num_clusters)
    check_int("clustering_steps", clustering_steps, 0)
    check_fraction("alpha", alpha)
    if radius is None and quantile is None:
        quantile = DEFAULT_QUANTILE
    check_radius_rule(radius, quantile, num_clusters)
    resolve_select(quantile_select)
    mask, send = adversary(attack, byzantine, "momentum-clustering")
    optimizer = client_optimizer(learning_rate, 0.0)
    grad_fn = jax.grad(client_loss(example_loss))

    def init(params, num_clients):
        check_clusters_fit(num_clusters, num_clients)
        check_mask_size(mask, num_clients)
        state = init_client_state(optimizer, params, num_clients)
        flat, _ = ravel_rows(state.params)
        return state._replace(
            extra={"centers": jnp.zeros((num_clusters, flat.shape[1]), flat.dtype)},
            rows={"momentum": jnp.zeros_like(flat), "started": jnp.zeros((num_clients,), bool)},
        )

    def round_fn(state, data, key, participants=None):
        k_batch, k_seed = jax.random.split(key)
        batch = sample_minibatch(data, batch_size, k_batch)
        grads, unravel = ravel_rows(map_clients(grad_fn, state.params, batch))
        started = state.rows["started"]
        previous = jnp.where(started[:, None], state.rows["momentum"], grads)  # m_{i,0} = g_i(x_{i,0})
        m = alpha * grads + (1.0 - alpha) * previous
        sent = send(m, attack_key(k_batch), participants=participants)
        # k-means++ seeds round 1 only (a cond: it runs once, not every round)
        seeds = lax.cond(
            state.round == 0, lambda: kmeans_plus_plus(sent, num_clusters, k_seed), lambda: state.extra["centers"]
        )
        centers = threshold_clustering_unchecked(
            sent, seeds, clustering_steps, radius, quantile, resolve_select(quantile_select)
        )
        labels = nearest_center(sent, centers)
        state = apply_client_updates(optimizer, state, unravel(centers[labels]))
        state = state._replace(
            round=state.round + 1, extra={"centers": centers}, rows={"momentum": m, "started": jnp.ones_like(started)}
        )
        return state, {"cluster_labels": labels}

    hparams = dict(
        num_clusters=num_clusters,
        learning_rate=learning_rate,
        alpha=alpha,
        batch_size=batch_size,
        clustering_steps=clustering_steps,
        radius=radius,
        quantile=quantile,
        **({} if attack is None else {"attack": recorded_name(attack)}),
    )
    execution = Execution(quantile_select=quantile_select)
    return FederatedAlgorithm("momentum-clustering", init, round_fn, hparams, execution=execution)


SPECS = (
    AlgorithmSpec(
        "myopic-clustering",
        lambda task, num_clusters, **options: myopic_clustering(task.example_loss, num_clusters, **options),
        builder=myopic_clustering,
        needs_clusters=True,
        owns_models=True,
        summary="Myopic-Clustering (Werner et al., Algorithm 1): k-means on the gradients",
    ),
    AlgorithmSpec(
        "momentum-clustering",
        lambda task, num_clusters, **options: momentum_clustering(task.example_loss, num_clusters, **options),
        builder=momentum_clustering,
        needs_clusters=True,
        owns_models=True,
        example_options=dict(quantile=0.2),
        summary="Momentum-Clustering (Werner et al., Algorithm 4): Threshold-Clustering of momenta",
    ),
)
