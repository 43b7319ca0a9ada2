"""Baselines that average gradients over a fixed partition of the clients.

With labels c_i, every client steps with the mean gradient of its group, v_i = mean_{j : c_j = c_i} g_j(x_j)
(Werner et al., §4.1, Fig. 3 baselines); a non-finite gradient is left out of its group's mean (see
:func:`fedjax_clust.core.pytrees.segment_mean`):

  * ``local``         c_i = i           (standalone training, no collaboration),
  * ``global``        c_i = 0           (FedSGD: one averaged gradient step per round; all clients start
                                         equal and so stay equal; the seed papers' baseline),
  * ``ground_truth``  c_i = true cluster (the oracle: distributed SGD inside each true cluster).

``global`` is not ``fedavg`` (:mod:`fedjax_clust.algorithms.fedavg`: local epochs, then the deltas' average and a
server step): its clients' optimiser state (momentum) lives across rounds, one buffer per group. With momentum 0,
``fedavg`` with one full-batch local step (``local_steps=1``) and server learning rate 1 computes the same rounds.

State: Local's clients own their models (rows [N, ...]). Global's and Ground-truth's clients own nothing: the
server keeps one model per group, ``state.params`` a :class:`~fedjax_clust.core.model_table.ModelTable` of G
models with client i on row c_i (and the optimiser state likewise), so the state does not grow with N and a
round of S participants costs S gradients and G updates. A run with per-client starts (``ClientParams``,
``init="oracle"`` / ``"random"``) keeps N rows, since its clients' models differ.
"""

from __future__ import annotations

from typing import Optional, Union

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.algorithms.registry import AlgorithmSpec, no_traffic
from fedjax_clust.core.algorithm import MASKED_WITH_ROWS, FederatedAlgorithm
from fedjax_clust.core.batching import client_loss, map_clients, sample_minibatch
from fedjax_clust.core.keys import attack_key, privacy_key
from fedjax_clust.core.model_table import ModelTable, is_table
from fedjax_clust.core.optim import (
    DEFAULT_MOMENTUM,
    ClientOptimizerName,
    MomentumForm,
    apply_client_updates,
    check_common_hparams,
    client_optimizer,
    optimizer_hparams,
)
from fedjax_clust.core.option_groups import take_legacy
from fedjax_clust.core.participants import Participants, client_rows, keep_non_participants
from fedjax_clust.core.pytrees import broadcast_to_clients, segment_mean, take_rows
from fedjax_clust.core.state import ClientParams, ClientState, init_client_state
from fedjax_clust.core.unseen import GLOBAL_ROW
from fedjax_clust.core.validation import check_int, check_mask_size
from fedjax_clust.core.weighting import ClientWeights, check_weighted_mean, resolve_weighting, weighting_hparams
from fedjax_clust.robust.adversary import NO_ATTACKERS, Attackers, adversary, robust_hparams
from fedjax_clust.robust.aggregators import (
    aggregate_segments_with_state,
    aggregator_metrics,
    aggregator_state,
    resolve_aggregator,
)

__all__ = ["fixed_clusters", "local", "global_fedavg", "ground_truth", "group_mean"]


def group_mean(tree, labels, num_groups: int):
    """Replace each row by the mean of the rows sharing its label (labels in [0, num_groups))."""
    means, _ = segment_mean(tree, labels, num_groups)
    return take_rows(means, labels)


def fixed_clusters(
    example_loss,
    labels,
    *,
    name: str,
    learning_rate: float,
    momentum: float = DEFAULT_MOMENTUM,
    momentum_form: MomentumForm = "heavy-ball",
    optimizer: ClientOptimizerName = "sgd",
    batch_size: Optional[int] = None,
    aggregator="mean",
    attackers: Attackers = NO_ATTACKERS,
    weighting: Union[str, ClientWeights] = "uniform",
    **legacy,
) -> FederatedAlgorithm:
    """Gradient averaging inside the fixed groups ``labels`` ([N] integers); ``momentum`` /
    ``momentum_form`` / ``optimizer`` ("sgd" or "adam", the group's averaged gradient as Adam's gradient) as in
    :func:`~fedjax_clust.core.optim.client_optimizer`.

    ``aggregator``: how a group's gradients become its direction, a name of
    :data:`fedjax_clust.robust.AGGREGATORS` or a function from :func:`fedjax_clust.robust.make_aggregator`
    (default "mean", the exact average of the finite gradients). ``attackers``
    (:class:`~fedjax_clust.robust.adversary.Attackers`): the Byzantine clients (bool [N]) send the attack instead of
    their gradient, inside the round (see :mod:`fedjax_clust.robust.attacks`); the attackers step with their group's
    aggregate like everyone.
    ``weighting``: the mean's client weights, "uniform" (default) or
    :class:`~fedjax_clust.core.weighting.ClientWeights` (``make_algorithm``'s ``weighting="examples"``: each
    client's example count, FedAvg's n_k / n); see :mod:`fedjax_clust.core.weighting`.
    """
    (attackers,) = take_legacy("fixed_clusters", legacy, attackers=attackers)
    attack, byzantine = attackers.attack, attackers.byzantine
    check_common_hparams(learning_rate, momentum, batch_size, momentum_form=momentum_form, optimizer=optimizer)
    aggregate = resolve_aggregator(aggregator)
    byzantine_j, send = adversary(attack, byzantine, name)
    weighting_name, weights_j = resolve_weighting(weighting, np.shape(labels)[0])
    check_weighted_mean(weights_j, aggregate)
    labels_np = np.asarray(labels)
    if (
        labels_np.ndim != 1
        or labels_np.size == 0
        or not np.issubdtype(labels_np.dtype, np.integer)
        or labels_np.min() < 0
    ):
        raise ValueError(f"labels must be a 1-D array of non-negative integers, got {labels!r}")
    _, labels_np = np.unique(labels_np, return_inverse=True)
    num_groups = int(labels_np.max()) + 1

    # the group labels on the device only where a round reads them (per-client rows): a server table's round
    # never does, so Global's state and program hold no [N] array (4 MB at 10^6 clients)
    def labels_j():  # a constant of the round that reads it (never cached: it would leak the trace's value)
        return jnp.asarray(labels_np, jnp.int32)

    step = client_optimizer(learning_rate, momentum, momentum_form, optimizer)
    loss = client_loss(example_loss)
    # Local: every client is its own group (nothing shared: participation gathers a block); Global /
    # Ground-truth: the server's group models (a ModelTable), whose clients take their group's step
    # (_group_models_round); with per-client starts (ClientParams) every client keeps its own row
    shared = num_groups < labels_np.shape[0]

    def init(params, num_clients):
        if num_clients != labels_np.shape[0]:
            raise ValueError(f"labels has {labels_np.shape[0]} entries but num_clients={num_clients}")
        check_mask_size(byzantine_j, num_clients)
        if shared and not isinstance(params, ClientParams):  # the server's group models, not N copies
            models = broadcast_to_clients(params, num_groups)
            opt_state = jax.vmap(step.init)(models)
            assignment = jnp.asarray(labels_np, jnp.int32)  # the state's own array, not the round's constant
            return ClientState(
                ModelTable(models, assignment), ModelTable(opt_state, assignment), jnp.zeros((), jnp.int32), server()
            )
        return init_client_state(step, params, num_clients, extra=server())

    def server():
        """The server state beyond the models: a stateful aggregator's (the adaptive clip bound), else ()."""
        held = aggregator_state(aggregate)
        return () if held is None else {"aggregator": held}

    def segments(state, grads, labels, weights, key):
        """(per-group aggregates, members, the state's new ``extra``, the round's metrics)."""
        held = state.extra["aggregator"] if state.extra else None
        per_group, members, held = aggregate_segments_with_state(
            aggregate, held, grads, labels, num_groups, weights, privacy_key(key)
        )
        extra = state.extra if held is None else {"aggregator": held}
        return per_group, members, extra, aggregator_metrics(aggregate, held)

    def round_fn(state, data, key, participants=None):
        if is_table(state.params):
            return _group_models_round(state, data, key, participants)
        if shared and participants is not None and not participants.gathered:
            return _participants_round(state, data, key, participants)
        batch = sample_minibatch(data, batch_size, key)
        grads = send(map_clients(jax.grad(loss), state.params, batch), attack_key(key), participants=participants)
        rows = client_rows(labels_j(), participants)
        per_group, _, extra, metrics = segments(state, grads, rows, client_rows(weights_j, participants), key)
        # jnp.take's default gather, as aggregate_groups did (the labels are in range)
        state = apply_client_updates(step, state, jax.tree.map(lambda x: jnp.take(x, rows, axis=0), per_group))
        return state._replace(round=state.round + 1, extra=extra), metrics

    def _participants_round(state, data, key, participants):
        """Partial participation of Global / Ground-truth on per-client rows (per-client starts): the S
        participants' gradients make their groups' steps, and every member of a group that had a participant
        takes its group's step; a group without participants stands still."""
        gathered = Participants(participants.index, gathered=True, active=participants.active)
        batch = sample_minibatch(take_rows(data, participants.index), batch_size, key)
        grads = send(
            map_clients(jax.grad(loss), take_rows(state.params, participants.index), batch),
            attack_key(key),
            participants=gathered,
        )
        labels = labels_j()  # one constant per round
        per_group, members, extra, metrics = segments(
            state, grads, client_rows(labels, gathered), client_rows(weights_j, gathered), key
        )
        stepped = apply_client_updates(step, state, take_rows(per_group, labels))
        heard = jnp.take(members > 0, labels)
        params, opt_state = keep_non_participants(
            (stepped.params, stepped.opt_state), (state.params, state.opt_state), heard
        )
        return state._replace(params=params, opt_state=opt_state, round=state.round + 1, extra=extra), metrics

    def _group_models_round(state, data, key, participants):
        """Global / Ground-truth on the server's group models (``state.params`` a ModelTable of G models,
        client i on row c_i): the clients of the round send their gradients at their group's model, each
        group's aggregate steps its model once. With participants gathered (the participation wrapper's block)
        or held among all N clients (``gathered=False``) only the S participants' data are read and only they
        compute, and a group without a participant stands still; every client of a group that had one holds
        the new model (it downloads the group model, as in FedAvg). The round's cost is the cohort's gradients
        plus G model updates, whatever N."""
        if participants is not None and not participants.gathered:
            gathered = Participants(participants.index, gathered=True, active=participants.active)
            data, clients = take_rows(data, participants.index), take_rows(state.params, participants.index)
        else:
            gathered, clients = participants, state.params
        batch = sample_minibatch(data, batch_size, key)
        grads = send(map_clients(jax.grad(loss), clients, batch), attack_key(key), participants=gathered)
        per_group, members, extra, metrics = segments(
            state, grads, clients.assignment, client_rows(weights_j, gathered), key
        )
        models, opt_state = state.params.models, state.opt_state.models
        stepped = apply_client_updates(step, ClientState(models, opt_state, state.round), per_group)  # G rows
        models, opt_state = keep_non_participants((stepped.params, stepped.opt_state), (models, opt_state), members > 0)
        return (
            state._replace(
                params=state.params._replace(models=models),
                opt_state=state.opt_state._replace(models=opt_state),
                round=state.round + 1,
                extra=extra,
            ),
            metrics,
        )

    hparams = dict(
        learning_rate=learning_rate,
        momentum=momentum,
        momentum_form=momentum_form,
        **optimizer_hparams(optimizer),
        batch_size=batch_size,
        **robust_hparams(aggregate, attack),
        **weighting_hparams(weighting_name),
    )
    # an unseen client of Global uses the global model; of Local / Ground-truth the best-fitting client model
    unseen = GLOBAL_ROW if num_groups == 1 else None
    masking = MASKED_WITH_ROWS if shared else False  # a server table is gathered; per-client starts all step
    return FederatedAlgorithm(name, init, round_fn, hparams, masked_participation=masking, unseen=unseen)


def _forwarded(name: str, hparams: dict) -> dict:
    """``hparams`` of the wrapper ``name`` for :func:`fixed_clusters`, its deprecated ``attack`` / ``byzantine``
    (0.3.0) made an ``attackers`` record here, so the DeprecationWarning names the wrapper and its caller."""
    legacy = {k: hparams.pop(k) for k in ("attack", "byzantine") if k in hparams}
    if legacy:
        (hparams["attackers"],) = take_legacy(
            name, legacy, stacklevel=4, attackers=hparams.pop("attackers", NO_ATTACKERS)
        )
    return hparams


def local(example_loss, num_clients: int, **hparams) -> FederatedAlgorithm:
    """Standalone training: each client descends its own minibatch gradient."""
    hparams = _forwarded("local", hparams)
    num_clients = check_int("num_clients", num_clients)
    if resolve_aggregator(hparams.get("aggregator", "mean")).aggregator_name != "mean":
        raise ValueError("local does not aggregate (every client is its own group): it takes no aggregator")
    if not isinstance(hparams.get("weighting", "uniform"), str) or hparams.get("weighting", "uniform") != "uniform":
        raise ValueError("local does not average (every client is its own group): it takes no weighting")
    return fixed_clusters(example_loss, np.arange(num_clients), name="local", **hparams)


def global_fedavg(example_loss, num_clients: int, **hparams) -> FederatedAlgorithm:
    """Global model (FedSGD, one averaged gradient step per round): every client steps with the mean gradient."""
    hparams = _forwarded("global_fedavg", hparams)
    num_clients = check_int("num_clients", num_clients)
    return fixed_clusters(example_loss, np.zeros(num_clients, np.int64), name="global", **hparams)


def ground_truth(example_loss, true_clusters, **hparams) -> FederatedAlgorithm:
    """Oracle: gradient averaging inside the true clusters."""
    hparams = _forwarded("ground_truth", hparams)
    return fixed_clusters(example_loss, true_clusters, name="ground-truth", **hparams)


def _ground_truth(task, **options):
    if task.true_clusters is None:
        raise ValueError(f"algorithm 'ground-truth' needs a task with known clusters; {task.name!r} has none")
    return ground_truth(task.example_loss, task.true_clusters, **options)


SPECS = (
    AlgorithmSpec(
        "local",
        lambda task, **options: local(task.example_loss, task.num_clients, **options),
        builder=fixed_clusters,
        hidden=("name", "aggregator", "weighting"),
        owns_models=True,
        traffic=no_traffic,
        summary="every client trains alone",
    ),
    AlgorithmSpec(
        "global",
        lambda task, **options: global_fedavg(task.example_loss, task.num_clients, **options),
        builder=fixed_clusters,
        hidden=("name",),
        owns_models=True,
        private_releases=lambda options: 1,
        summary="one model for all clients, one averaged gradient step per round (FedSGD; see fedavg)",
    ),
    AlgorithmSpec(
        "ground-truth",
        _ground_truth,
        builder=fixed_clusters,
        hidden=("name",),
        owns_models=True,
        private_releases=lambda options: 1,
        summary="gradient averaging inside the true clusters (an oracle)",
    ),
)
