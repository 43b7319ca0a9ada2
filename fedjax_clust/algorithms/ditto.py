"""Ditto (Li, Hu, Beirami, Smith 2021), a baseline of Werner et al. §4.2 (lambda_ditto = 1 there).

A global model w is trained with FedAvg (one local step per round, i.e. FedSGD: w <- w - eta mean_i g_i(w),
the mean uniform over the clients or weighted by ``weighting``), and every client keeps a personal model v_i
that minimises its own loss plus a proximal term towards w,

    h_i(v) = f_i(v) + (lambda / 2) ||v - w||^2,

with ``personal_steps`` SGD steps per round on h_i (fresh minibatches), taken at the round's global model
before it is updated. The global step averages the finite gradients only (see
:func:`fedjax_clust.core.pytrees.segment_mean`). The personal models are the clients' parameters (what is
evaluated); lambda = 0 is Local training and lambda -> infinity pins every client to the global model.

Byzantine clients (``attackers``: ``attack`` / ``byzantine``) replace the gradient they send for the global model;
``aggregator`` replaces its mean (default "mean"). An attacker's own personal model is never evaluated.

Central differential privacy (``make_algorithm``'s ``dp_*`` options, :mod:`fedjax_clust.algorithms.private`)
covers the global model: its mean gradient becomes the private mean
(:class:`~fedjax_clust.privacy.mechanism.PrivateMean`: every sent gradient clipped, summed, noised, over a fixed
denominator), so the sequence of global models the server releases is as private as DP-FedAvg's. The personal
models are not releases: each is a function of its client's own data and the released global models, kept by
the client (the simulator evaluates them, a diagnostic as every per-client metric). With Poisson sampling the
personal steps run on the sampled clients only, as every per-client state does under partial participation.
"""

from __future__ import annotations

from typing import Optional, Union

import jax
import jax.numpy as jnp
import optax

from fedjax_clust.algorithms.registry import AlgorithmSpec
from fedjax_clust.core.algorithm import FederatedAlgorithm
from fedjax_clust.core.batching import client_loss, map_clients, sample_minibatch
from fedjax_clust.core.keys import attack_key, privacy_key
from fedjax_clust.core.local_training import StepDirection, local_training
from fedjax_clust.core.optim import check_common_hparams
from fedjax_clust.core.option_groups import take_legacy
from fedjax_clust.core.participants import client_rows
from fedjax_clust.core.pytrees import broadcast_to_clients, finite_mean
from fedjax_clust.core.state import ClientState, shared_params
from fedjax_clust.core.unseen import server_models
from fedjax_clust.core.validation import check_int, check_mask_size, check_real
from fedjax_clust.core.weighting import ClientWeights, check_weighted_mean, resolve_weighting, weighting_hparams
from fedjax_clust.privacy.mechanism import PrivateMean
from fedjax_clust.robust.adversary import NO_ATTACKERS, Attackers, adversary, robust_hparams
from fedjax_clust.robust.aggregators import (
    aggregate_segments_with_state,
    aggregator_metrics,
    aggregator_state,
    resolve_aggregator,
    with_aggregator_state,
)

__all__ = ["ditto"]


def ditto(
    example_loss,
    *,
    learning_rate: float,
    lam: float = 1.0,
    batch_size: Optional[int] = None,
    personal_steps: int = 1,
    aggregator="mean",
    attackers: Attackers = NO_ATTACKERS,
    weighting: Union[str, ClientWeights] = "uniform",
    **legacy,
) -> FederatedAlgorithm:
    """Ditto with regularisation ``lam`` (lambda_ditto) and ``personal_steps`` personal steps per round;
    ``aggregator`` / ``attackers`` as in the module docstring.

    Args:
      lam: lambda_ditto, the weight of the personal models' pull towards the FedAvg model.
      personal_steps: personal SGD steps per round.
      weighting: the clients' weights in the global model's mean gradient: "uniform" (default) or
        ClientWeights (``make_algorithm``'s "examples": n_i, FedAvg's); :mod:`fedjax_clust.core.weighting`.
    """
    (attackers,) = take_legacy("ditto", legacy, attackers=attackers)
    attack, byzantine = attackers.attack, attackers.byzantine
    check_common_hparams(learning_rate, 0.0, batch_size)
    check_real("lam", lam, low=0.0)
    check_int("personal_steps", personal_steps, 1)
    aggregate = resolve_aggregator(aggregator)
    weighting_name, weights_j = resolve_weighting(weighting)
    check_weighted_mean(weights_j, aggregate)
    mask, send = adversary(attack, byzantine, "ditto")
    grad_fn = jax.grad(client_loss(example_loss))
    private = isinstance(aggregate, PrivateMean)

    def init(params, num_clients):
        params = shared_params(params, "ditto")
        check_mask_size(mask, num_clients)
        server = with_aggregator_state({"global": params}, aggregator_state(aggregate))
        return ClientState(broadcast_to_clients(params, num_clients), (), jnp.zeros((), jnp.int32), server)

    def round_fn(state, data, key, participants=None):
        k_global, k_personal = jax.random.split(key)
        w = state.extra["global"]
        n = jax.tree.leaves(state.params)[0].shape[0]
        stacked_w = broadcast_to_clients(w, n)

        # h_i's SGD steps: the local-training engine's proximal steps towards the round's global model
        personal = local_training(
            grad_fn,
            state.params,
            data,
            k_personal,
            optimizer=optax.sgd(learning_rate),
            steps=personal_steps,
            batch_size=batch_size,
            direction=StepDirection(prox=lam, reference=stacked_w),
        ).params
        batch = sample_minibatch(data, batch_size, k_global)
        g = send(map_clients(grad_fn, stacked_w, batch), attack_key(k_global), participants=participants)
        held = None
        if private:  # the private mean as one group (module docstring)
            one, _, held = aggregate_segments_with_state(
                aggregate, state.extra.get("aggregator"), g, jnp.zeros((n,), jnp.int32), 1, None, privacy_key(k_global)
            )
            direction = jax.tree.map(lambda x: x[0], one)
        elif aggregate.aggregator_name == "mean":
            direction = finite_mean(g, client_rows(weights_j, participants))
        else:
            direction = aggregate(g)
        w = jax.tree.map(lambda p, d: p - learning_rate * d, w, direction)
        server = with_aggregator_state({"global": w}, held)
        return ClientState(personal, (), state.round + 1, server), aggregator_metrics(aggregate, held)

    hparams = dict(
        learning_rate=learning_rate,
        lam=lam,
        batch_size=batch_size,
        personal_steps=personal_steps,
        **robust_hparams(aggregate, attack),
        **weighting_hparams(weighting_name),
    )
    unseen = server_models("global-model", "global", single=True)  # the personal models are their clients'
    return FederatedAlgorithm("ditto", init, round_fn, hparams, unseen=unseen)


SPECS = (
    AlgorithmSpec(
        "ditto",
        lambda task, **options: ditto(task.example_loss, **options),
        builder=ditto,
        flags={"lam": "ditto-lambda"},
        private_releases=lambda options: 1,  # the global model's private mean
        summary="Ditto (Li et al. 2021): personal models regularised towards a FedAvg model",
    ),
)
