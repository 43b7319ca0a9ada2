"""Clustered Federated Learning (Sattler, Müller, Samek 2019), as discussed in Werner et al. §2.1, Fig. 1c.

Clients start in one cluster. Every round each cluster c runs FedAvg: its members take ``local_steps``
SGD steps from the cluster model theta_c, send their updates Delta_i, and theta_c <- theta_c + mean Delta_i.
A cluster with at least two members is split in two when it is near a stationary point of its FedAvg
objective while some client is not (Sattler et al.'s two norm criteria):

    || mean_{i in c} Delta_i || < eps1      and      max_{i in c} || Delta_i || > eps2,

after at least ``min_rounds`` rounds of training. The split is the optimal bi-partition of the members by
the cosine similarity of their updates, the one minimising the largest cross-partition similarity, i.e.
cutting the weakest edge of the maximum spanning tree of the similarity graph (single linkage to two
clusters). Sub-clusters start from the parent's model and train separately from then on; clusters are
never merged, which is why an early mistake is never corrected. Choices: at most one split per round (the
qualifying cluster with the largest client update); cosine similarity 0 for a zero update; a client whose
update is non-finite is left out of the cluster mean and counts as a zero update in the split criteria.

State: the clients own no model. ``params`` is a :class:`~fedjax_clust.core.model_table.ModelTable` of one model
slot per cluster a split may create (``max_clusters``, N without a bound) and the clients' labels (also in
``rows["labels"]``); ``extra["clusters"]`` counts the clusters that exist, and a split's new cluster takes slot
``extra["clusters"]``. (Deriving it from the largest label among the round's clients, as one could with every
client present, would reuse an existing cluster's slot under partial participation.)

Byzantine clients (``attackers``: ``attack`` / ``byzantine``) replace their update Delta_i by the attack's; the attacked
updates enter the cluster aggregate and the split criteria and similarities (that is what the server
sees). ``aggregator`` replaces the cluster mean of the updates (default "mean"); a robust rule runs once
per existing cluster (at most ``max_clusters`` slots when given, else N, empty ones skipped).

``optimizer="adam"``: each cluster model steps with its own Adam (Kingma & Ba, beta_1 = 0.9, beta_2 = 0.999,
epsilon = 1e-8; :func:`~fedjax_clust.core.optim.client_optimizer`) on the pseudo-gradient g_c = -(aggregated
Delta_i) / eta, instead of theta_c <- theta_c + mean Delta_i; with one local step g_c is the members' mean
gradient (what SR-FCA's MNIST configuration, Adam for every method, asks of CFL). Our choices: a cluster with
no member this round keeps its model and its Adam state (no step, no moment decay), and a new sub-cluster
starts with a copy of its parent's Adam state as it starts from its parent's model. The clients' local steps
and the split criteria stay those of SGD (they read the updates Delta_i, not the server's step).

**Private CFL** (central DP, ``make_algorithm``'s ``dp_*`` options; our variant, not Sattler et al.'s): the
exact bi-partition reads every pair of members' cosine similarity, and one client's update can move any number
of others to the other side -- no bound on what the cluster sums then change by. Here every statistic the server
uses is a release, and every client places itself:

* the cluster means are the private mean (:class:`~fedjax_clust.privacy.mechanism.PrivateMean`) over noised
  member counts (``dp_denominator="noisy-count"``, required: the clusters' sizes are unknown and most of the N
  slots have no member);
* the split test reads the noised mean update's norm (post-processing) and, instead of the largest update norm,
  a noised count of members whose update norm exceeds eps2 (std r z, ``dp_count_noise_ratio`` r; a client adds
  1 to one cluster's count): a cluster qualifies when that count reaches T = max(2, 3 r z), three times its
  noise (the one with the largest count splits), and while a slot is free (``max_clusters``, at most N);
* the split direction v is the top principal direction of the qualifying cluster's updates centred on its
  released mean m and clipped (clip_C(Delta_i - m)), by ``split_power_steps`` iterations of the noisy power
  method (:mod:`fedjax_clust.privacy.principal`), and each member of the cluster that took part moves to the new
  cluster when <Delta_i - m, v> < 0: a function of its own update and released values, as an IFCA client picks
  its cluster, so what it adds to any sum stays bounded by C. Two groups whose updates point apart (what the
  test looks for) lie on either side of their mean along v: a spectral bi-partition, where Sattler et al. cut
  the maximum spanning tree of the cosine similarities. The two sides' member counts are released too (noise r z
  each; a member adds 1 to one side) and the split is cancelled unless both reach T, so no split leaves an
  empty cluster behind.

A round releases the sums (z) with their counts (r z), the split test's count and the sides' counts (r z
each) and the power iterations (z each), charged every round whether a split happens or not
(:class:`~fedjax_clust.privacy.central.SideReleases`; also before ``min_rounds``, an overcharge: an accountant
that charged only the rounds that split would need a privacy filter). The noised mean's norm carries the
noise's, about z C sqrt(D) / n_c for a cluster of n_c members: a split can only happen when eps1 is above it.
Under Poisson sampling only the members sampled in the split round take a side; the others stay in the parent
cluster (CFL never reassigns), so a split moves about a share q of the group that should move.
"""

from __future__ import annotations

from typing import Optional, Union

import jax
import jax.numpy as jnp
from jax import lax

from fedjax_clust.algorithms.registry import AlgorithmSpec
from fedjax_clust.core.algorithm import FederatedAlgorithm
from fedjax_clust.core.batching import client_loss, local_sgd_steps
from fedjax_clust.core.control import skip_cond
from fedjax_clust.core.keys import attack_key, privacy_key
from fedjax_clust.core.model_table import ModelTable, table_rows
from fedjax_clust.core.optim import (
    DEFAULT_MOMENTUM,
    check_common_hparams,
    client_optimizer,
    optimizer_hparams,
    step_rows,
)
from fedjax_clust.core.option_groups import option_group, take_legacy
from fedjax_clust.core.participants import client_rows
from fedjax_clust.core.pytrees import (
    broadcast_to_clients,
    finite_rows,
    ravel_rows,
    segment_mean,
    take_rows,
)
from fedjax_clust.core.state import ClientState, shared_params
from fedjax_clust.core.validation import check_int, check_mask_size, check_real
from fedjax_clust.core.weighting import ClientWeights, check_weighted_mean, resolve_weighting, weighting_hparams
from fedjax_clust.privacy.central import SideReleases
from fedjax_clust.privacy.mechanism import PrivateMean, row_norms
from fedjax_clust.privacy.principal import private_top_direction
from fedjax_clust.robust.adversary import NO_ATTACKERS, Attackers, adversary, robust_hparams
from fedjax_clust.robust.aggregators import (
    aggregate_segments,
    aggregate_segments_with_state,
    aggregator_metrics,
    aggregator_state,
    resolve_aggregator,
    with_aggregator_state,
)

__all__ = ["cfl", "CFLSplit", "max_spanning_tree_split"]


def max_spanning_tree_split(similarity, members):
    """Bi-partition ``members`` (bool [N]) minimising the largest cross similarity.

    Prim's algorithm builds the maximum spanning tree of the members' similarity graph; removing its
    lightest edge leaves two components. Returns bool [N]: the members of the component cut off (the
    subtree below that edge); False outside ``members``.
    """
    n = similarity.shape[0]
    neg = jnp.asarray(-jnp.inf, similarity.dtype)
    root = jnp.argmax(members)
    in_tree = jnp.zeros(n, bool).at[root].set(True)
    best = jnp.where(members, similarity[root], neg)
    parent = jnp.full(n, root)
    weight = jnp.full(n, jnp.inf, similarity.dtype)

    def add(_, carry):
        in_tree, best, parent, weight = carry
        candidates = jnp.where(members & ~in_tree, best, neg)
        v = jnp.argmax(candidates)
        ok = candidates[v] > neg
        in_tree = in_tree.at[v].set(in_tree[v] | ok)
        weight = weight.at[v].set(jnp.where(ok, best[v], weight[v]))
        better = members & ~in_tree & (similarity[v] > best) & ok
        return in_tree, jnp.where(better, similarity[v], best), jnp.where(better, v, parent), weight

    in_tree, _, parent, weight = lax.fori_loop(0, n - 1, add, (in_tree, best, parent, weight))
    parent = jnp.where(members, parent, jnp.arange(n)).at[root].set(root)
    cut = jnp.argmin(jnp.where(members & (jnp.arange(n) != root), weight, jnp.inf))
    below = jnp.arange(n) == cut
    ancestor = parent
    for _ in range(max(1, int(n).bit_length())):  # pointer doubling: is ``cut`` an ancestor?
        below = below | below[ancestor]
        ancestor = ancestor[ancestor]
    return below & members


def _cosine(rows):
    norms = jnp.linalg.norm(rows, axis=1)
    unit = rows / jnp.where(norms > 0, norms, 1.0)[:, None]
    return unit @ unit.T


@option_group
class CFLSplit:
    """When CFL splits a cluster (Sattler et al.'s criteria, module docstring): ``cfl``'s ``split`` option (an
    option group, :mod:`fedjax_clust.core.option_groups`: ``make_algorithm``, the command line and sweeps take its
    fields by name).

    Args:
      eps1: a cluster splits when the norm of its mean update is below eps1 ...
      eps2: ... and its largest client update norm is above eps2.
      min_rounds: rounds before the first split may happen.
      max_clusters: no split once this many clusters exist (None: no limit).
      split_power_steps: private CFL only: noisy power iterations of the split direction (module docstring).
    """

    eps1: float = 0.05
    eps2: float = 0.1
    min_rounds: int = 20
    max_clusters: Optional[int] = None
    split_power_steps: int = 3


def cfl(
    example_loss,
    *,
    learning_rate: float,
    batch_size: Optional[int] = None,
    local_steps: int = 1,
    split: CFLSplit = CFLSplit(),
    aggregator="mean",
    optimizer: str = "sgd",
    attackers: Attackers = NO_ATTACKERS,
    weighting: Union[str, ClientWeights] = "uniform",
    **legacy,
) -> FederatedAlgorithm:
    """CFL with FedAvg inside clusters (``local_steps`` SGD steps per round) and recursive bi-partitioning when
    ``split``'s criteria hold; ``aggregator`` / ``attackers`` as in the module docstring.

    Args:
      local_steps: local SGD steps of FedAvg inside a cluster per round.
      split: the split rule, a :class:`CFLSplit` (eps1, eps2, min_rounds, max_clusters, split_power_steps).
      optimizer: "sgd" (default: theta_c plus the members' mean update) or "adam", each cluster model's own
        Adam on the pseudo-gradient -mean update / eta (module docstring).
      attackers: the Byzantine clients and their attack (:class:`~fedjax_clust.robust.adversary.Attackers`).
      weighting: the members' weights in a cluster's mean update: "uniform" (default) or ClientWeights
        (``make_algorithm``'s "examples": |D_i| / |D_c|); the split test reads the
        same mean. See :mod:`fedjax_clust.core.weighting`.
      legacy: the deprecated keywords ``eps1``, ``eps2``, ``min_rounds``, ``max_clusters``,
        ``split_power_steps``, ``attack`` and ``byzantine`` (fedjax-clust 0.3.0: ``split`` / ``attackers``).
    """
    split, attackers = take_legacy("cfl", legacy, split=split, attackers=attackers)
    attack, byzantine = attackers.attack, attackers.byzantine
    eps1, eps2, min_rounds = split.eps1, split.eps2, split.min_rounds
    max_clusters, split_power_steps = split.max_clusters, split.split_power_steps
    check_common_hparams(learning_rate, 0.0, batch_size, optimizer=optimizer)
    check_int("local_steps", local_steps, 1)
    check_real("eps1", eps1, low=0.0, low_open=True)
    check_real("eps2", eps2, low=0.0, low_open=True)
    check_int("min_rounds", min_rounds, 0)
    if max_clusters is not None:
        check_int("max_clusters", max_clusters, 1)
    aggregate = resolve_aggregator(aggregator)
    weighting_name, weights_j = resolve_weighting(weighting)
    check_weighted_mean(weights_j, aggregate)
    mask, send = adversary(attack, byzantine, "cfl")
    private = isinstance(aggregate, PrivateMean)
    check_int("split_power_steps", split_power_steps, 1)
    if not private and split_power_steps != 3:
        raise ValueError("split_power_steps applies to private CFL (dp_clip), whose split is the noisy power method")
    if isinstance(aggregate, PrivateMean) and aggregate.denominator != "noisy-count":
        raise ValueError(
            "private CFL divides each cluster's sum by its noised member count (clusters of unknown sizes, slots "
            "without members): give dp_denominator='noisy-count'"
        )
    grad_fn = jax.grad(client_loss(example_loss))
    server_optimizer = (
        client_optimizer(learning_rate, DEFAULT_MOMENTUM, optimizer=optimizer) if optimizer != "sgd" else None
    )

    def init(params, num_clients):
        params = shared_params(params, "cfl")
        check_mask_size(mask, num_clients)
        slots = num_clients if max_clusters is None else min(num_clients, max_clusters)
        models = broadcast_to_clients(params, slots)  # one slot per possible cluster label
        labels = jnp.zeros((num_clients,), jnp.int32)
        server = {"clusters": jnp.ones((), jnp.int32)}  # the clusters that exist: the next split's slot
        if server_optimizer is not None:  # one optimiser state per slot, over the slot's flat model
            server["models_opt"] = jax.vmap(server_optimizer.init)(ravel_rows(models)[0])
        if private:  # and any adaptive clip bound
            server = with_aggregator_state(server, aggregator_state(aggregate))
        return ClientState(ModelTable(models, labels), (), jnp.zeros((), jnp.int32), server, {"labels": labels})

    def server_step(flat_models, mean_update, counts, opt):
        """(flat models, their optimiser state) after the server's step of every slot with members."""
        if server_optimizer is None:
            return flat_models + mean_update, opt
        return step_rows(server_optimizer, flat_models, opt, -mean_update / learning_rate, learning_rate, counts > 0)

    def private_round(state, updates, labels, key):
        """(mean update [n, D], whether a cluster splits, which, the side of each client, the server's privacy
        state) of private CFL (module docstring)."""
        n = table_rows(state.params)
        live = state.extra["clusters"]
        held = state.extra.get("aggregator")
        clip = aggregate.clip if held is None else held  # this round's bound (before the adaptive step)
        k_sums, k_count, k_split, k_sides = jax.random.split(privacy_key(key), 4)
        mean_update, _, held = aggregate_segments_with_state(aggregate, held, updates, labels, n, None, k_sums)
        count_std = aggregate.count_noise_ratio * aggregate.noise_multiplier
        smallest = jnp.maximum(2.0, 3.0 * count_std)  # a noised count this large is not noise (3 std)
        norms, usable = row_norms(updates)
        big = jax.ops.segment_sum((usable & (norms > eps2)).astype(jnp.float32), labels, num_segments=n)
        big = big + count_std * jax.random.normal(k_count, (n,))
        qualifies = (
            (jnp.arange(n) < live)
            & (big >= smallest)
            & (jnp.linalg.norm(mean_update, axis=1) < eps1)
            & (state.round >= min_rounds)
            & (live < n)  # a free slot for the new cluster
        )
        target = jnp.argmax(jnp.where(qualifies, big, -jnp.inf))
        members = (labels == target) & usable
        centred = jnp.where(usable[:, None], updates, 0.0) - mean_update[target]  # the released mean: public
        v = private_top_direction(centred, members, clip, aggregate.noise_multiplier, split_power_steps, k_split)
        side = usable & (centred @ v < 0)
        moving = jnp.sum(members & side)
        sides = jnp.stack([moving, jnp.sum(members) - moving]).astype(jnp.float32)
        sides = sides + count_std * jax.random.normal(k_sides, (2,))  # a member adds 1 to one side
        splits = jnp.any(qualifies) & (jnp.min(sides) >= smallest)
        return mean_update, splits, target, side, held

    def round_fn(state, data, key, participants=None):
        models, labels = state.params.models, state.rows["labels"]
        n = table_rows(state.params)  # one slot per possible cluster label (not this round's clients)
        start = take_rows(models, labels)
        local = local_sgd_steps(
            grad_fn, start, data, key, steps=local_steps, learning_rate=learning_rate, batch_size=batch_size
        )
        updates, unravel = ravel_rows(jax.tree.map(lambda a, b: a - b, local, start))
        updates = send(updates, attack_key(key), participants=participants)
        if private:
            mean_update, splits, target, side, held = private_round(state, updates, labels, key)
            server = with_aggregator_state({}, held)
            ones = jnp.ones((n,), jnp.float32)  # every slot moves (the private mean's rule)
            return finish(
                state,
                labels,
                mean_update,
                ones,
                splits,
                target,
                lambda labels: (labels == target) & side,
                server,
                aggregator_metrics(aggregate, held),
            )
        if aggregate.aggregator_name == "mean":
            mean_update, counts = segment_mean(updates, labels, n, client_rows(weights_j, participants))
        else:  # one robust aggregate per cluster slot (empty slots are skipped)
            mean_update, counts = aggregate_segments(aggregate, updates, labels, n)
        clean = jnp.where(finite_rows(updates)[:, None], updates, 0.0)  # a non-finite update splits nothing
        norms = jnp.linalg.norm(clean, axis=1)
        max_norm = jax.ops.segment_max(norms, labels, num_segments=n)
        qualifies = (
            (counts >= 2)
            & (jnp.linalg.norm(mean_update, axis=1) < eps1)
            & (max_norm > eps2)
            & (state.round >= min_rounds)
            & (state.extra["clusters"] < n)  # a free slot for the new cluster
        )
        target = jnp.argmax(jnp.where(qualifies, max_norm, -1.0))

        def moving(labels):  # the maximum spanning tree's cut (computed only when a split happens)
            return max_spanning_tree_split(_cosine(clean), labels == target)

        return finish(state, labels, mean_update, counts, jnp.any(qualifies), target, moving, {}, {})

    def finish(state, labels, mean_update, counts, splits, target, moving, server, metrics):
        """The server's step of every slot with members, then, when ``splits``, the clients ``moving(labels)``
        of cluster ``target`` take the next free slot, ``extra["clusters"]`` (a count the server keeps: with
        participation the largest label among the round's clients need not be the largest there is), which
        starts from a copy of the parent's model and optimiser state, and the count grows by one; the next
        state (with ``server``'s extra entries) and the round's metrics."""
        new_label = state.extra["clusters"]
        flat_models, unravel_models = ravel_rows(state.params.models)
        flat_models, opt = server_step(flat_models, mean_update, counts, state.extra.get("models_opt"))

        def split(args):
            labels, flat_models, opt = args
            opt = jax.tree.map(lambda o: o.at[new_label].set(o[target]), opt)  # the parent's Adam state too
            labels = jnp.where(moving(labels), new_label, labels)
            return labels, flat_models.at[new_label].set(flat_models[target]), opt

        labels, flat_models, opt = skip_cond(splits, split, lambda a: a, (labels, flat_models, opt))
        models = unravel_models(flat_models)
        clusters = new_label + splits.astype(jnp.int32)
        server = (
            {**server, "clusters": clusters} if opt is None else {**server, "clusters": clusters, "models_opt": opt}
        )
        state = ClientState(ModelTable(models, labels), (), state.round + 1, server, {"labels": labels})
        return state, {"cluster_labels": labels, **metrics}

    hparams = dict(
        learning_rate=learning_rate,
        batch_size=batch_size,
        local_steps=local_steps,
        eps1=eps1,
        eps2=eps2,
        min_rounds=min_rounds,
        max_clusters=max_clusters,
        **optimizer_hparams(optimizer),
        **robust_hparams(aggregate, attack),
        **weighting_hparams(weighting_name),
    )
    if private:
        hparams["split_power_steps"] = split_power_steps
    return FederatedAlgorithm("cfl", init, round_fn, hparams)


SPECS = (
    AlgorithmSpec(
        "cfl",
        lambda task, **options: cfl(task.example_loss, **options),
        builder=cfl,
        private_releases=lambda options: 1,  # the cluster sums; the split test's releases are side releases
        private_side_releases=lambda options: SideReleases(
            gaussians=options.get("split_power_steps", CFLSplit.split_power_steps),
            counts=2,  # the split test's count, the sides' counts
        ),
        summary="Clustered FL (Sattler et al. 2020): recursive bi-partitioning by update similarity",
    ),
)
