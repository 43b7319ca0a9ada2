"""SR-FCA, the Successive Refine Federated Clustering Algorithm (seeds/001, Algorithms 1-4), as rounds.

SR-FCA never gets the number of clusters. It runs in stages, which here are rounds of one jit-compiled
function (so ``simulate`` drives, evaluates and checkpoints it like every other algorithm):

* rounds 1 .. T (``one_shot_rounds``), ONE_SHOT: every client trains its own model from the shared start w0,
  w_i <- w_i - eta grad f_i(w_i). At round T the clients are the nodes of a graph with an edge wherever
  dist(w_i, w_j) <= lambda (``threshold``); its connected components with at least t (``min_size``) clients
  are the clusters C_0, the other clients are unassigned.
* then R (``refine_steps``) REFINE steps of ``refine_iterations`` rounds each:
    - TrimmedMeanGD (Alg. 3): the first round of a step restarts every cluster model at w0; each round
      omega_c <- omega_c - eta TrMean_beta{grad f_i(omega_c) : C(i) = c}, the coordinate-wise beta-trimmed
      mean of Def. 3.2 (``beta``);
    - at the step's last round, RECLUSTER (Alg. 2): every client, assigned or not, moves to the cluster c
      minimising dist(w_i, omega_c); then MERGE (Alg. 4): clusters are the nodes of a graph with an edge
      wherever dist(omega_c, omega_c') <= lambda, each connected component becomes one cluster whose model
      is the plain average of its clusters' models.
* rounds after T + R * ``refine_iterations`` keep training the final clusters with TrimmedMeanGD (no restart,
  no reclustering).

``distance``: "l2", ||w_i - w_j||, or "cross-loss", Def. 5.1, dist(i, j) = (f_i(w_j) + f_j(w_i)) / 2 with the
clients' full local losses; for a cluster c the model is omega_c and the loss is the empirical cluster loss
f_c, taken here as the mean of its members' losses (the same thing for clients of equal size). The N x N
losses f_j(w_i) go through the chunked row machinery of the cross-gradients (``chunk_size`` models at a time)
and are computed once, at ONE_SHOT, since the local models w_i do not change afterwards.

Choices the paper leaves open (documented here and in docs/papers/srfca.md):

* MERGE keeps components of at least t *clients* (counting the clusters would drop every cluster that
  needs no merge when t = 2); the clients of a dropped component go to the kept cluster of their nearest
  pre-merge cluster model. Without any kept cluster every client stays unassigned.
* An unassigned client is evaluated with its local model; ``cluster_labels`` gives it a label of its own.
* TrimmedMeanGD uses the minibatch gradients of ``batch_size`` (None: full local gradients, the paper's GD)
  and no projection (W = R^d). The clients' per-client parameters (what the metrics evaluate) are the local
  models up to round T and their cluster's model afterwards.
* ``optimizer``: "sgd" (default, the steps above) or "adam" (the paper's MNIST configuration trains with
  Adam): ONE_SHOT's local steps are each client's Adam on its own gradients, and TrimmedMeanGD's steps a
  cluster's Adam on its trimmed mean (:func:`fedjax_clust.core.optim.client_optimizer`, beta_1 = 0.9). A
  cluster's Adam state starts afresh wherever its model does (each REFINE step's restart at w0) and after
  MERGE (a merged model is an average of models whose moment estimates do not combine).

Byzantine clients (``attackers``, the setting of SR-FCA's §5 where TrMean_beta is the defence)
replace everything they send:

* at ONE_SHOT their local model, sent as w0 + attack(w_i - w0) (the attack acts on the update from the
  shared start, as for IFCA Option II; with "l2" this is what every distance to them is computed from, and
  it stays their own model);
* with "cross-loss", every loss they report: their column f_j(.) of the client-client, client-cluster and
  cluster-cluster losses (the models they are evaluated at are the ones they sent);
* in TrimmedMeanGD, their gradients at the cluster model.

A NaN distance is no edge of a threshold graph and no RECLUSTER candidate; a non-finite gradient is left out
of the trimmed mean (:func:`fedjax_clust.robust.aggregators.aggregate_segments`).

Partial participation (:mod:`fedjax_clust.algorithms.participation`, by a mask over all clients): in a
ONE_SHOT training round only the participants take their local step; in a TrimmedMeanGD round each cluster
model moves by the trimmed mean of its participating members' gradients (a cluster without one keeps its
model). ONE_SHOT's graph, RECLUSTER and MERGE are clustering steps that hear from every client (the latest
local model each has sent), as the paper's algorithm states them.
"""

from __future__ import annotations

from typing import Literal, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fedjax_clust.algorithms.registry import AlgorithmSpec
from fedjax_clust.core.algorithm import FederatedAlgorithm
from fedjax_clust.core.batching import client_loss, map_clients, padded_batch, sample_minibatch
from fedjax_clust.core.hyperparameter_kinds import Static
from fedjax_clust.core.keys import attack_key
from fedjax_clust.core.optim import (
    DEFAULT_MOMENTUM,
    ClientOptimizerName,
    check_common_hparams,
    client_optimizer,
    optimizer_hparams,
    step_rows,
)
from fedjax_clust.core.option_groups import option_group, take_legacy
from fedjax_clust.core.participants import participant_mask
from fedjax_clust.core.pytrees import broadcast_to_clients, leading_dim, ravel_rows, take_rows
from fedjax_clust.core.state import ClientState, shared_params
from fedjax_clust.core.validation import (
    check_choice,
    check_int,
    check_mask_size,
    check_real,
)
from fedjax_clust.ops.crossgrad import check_chunk_size, map_rows, messages_at
from fedjax_clust.ops.graph import component_sizes, connected_components
from fedjax_clust.robust.adversary import NO_ATTACKERS, Attackers, adversary
from fedjax_clust.robust.aggregators import aggregate_segments, make_aggregator
from fedjax_clust.robust.registry import recorded_name

__all__ = ["srfca", "SRFCARefine", "DISTANCES", "pairwise_l2", "cross_losses", "one_shot_models"]

DISTANCES = ("l2", "cross-loss")
_CLIENT_ROWS = ("local", "local_opt", "labels", "local_losses")  # the state's per-client entries (state.rows)
Distance = Literal[DISTANCES]


def pairwise_l2(a, b, chunk_size: Optional[int] = None) -> jax.Array:
    """[n_a, n_b] Euclidean distances between the rows of two stacked pytrees (over all leaves), from the
    differences themselves (no |a|^2 + |b|^2 - 2ab cancellation), ``chunk_size`` rows of ``a`` at a time."""
    flat_b, _ = ravel_rows(b)
    flat_a, _ = ravel_rows(a)
    return map_rows(lambda x: jnp.sqrt(jnp.sum(jnp.square(flat_b - x[None, :]), axis=1)), flat_a, chunk_size)


def cross_losses(loss, models, data, chunk_size: Optional[int] = None) -> jax.Array:
    """[n_models, n_clients]: entry (i, j) is client j's loss ``loss(models_i, data_j)`` (all pairs,
    ``chunk_size`` models at a time; ragged data padded to its largest client)."""
    data = padded_batch(data)
    return map_rows(lambda p: messages_at(loss, p, data), models, chunk_size)


def _mean_over_members(values, labels, num_slots):
    """[rows, num_slots]: for every row the mean of ``values[row, j]`` over the clients j of each slot
    (labels [n] in [0, num_slots) or -1 for none); 0 for a slot without members."""
    onehot = jax.nn.one_hot(labels, num_slots, dtype=values.dtype)  # -1 -> all zeros
    counts = jnp.sum(onehot, axis=0)
    return (values @ onehot) / jnp.maximum(counts, 1.0)[None, :]


@option_group
class SRFCARefine:
    """SR-FCA's REFINE stages (Alg. 1-4, module docstring): ``srfca``'s ``refine`` option (an option group,
    :mod:`fedjax_clust.core.option_groups`: ``make_algorithm``, the command line and sweeps take its fields by
    name).

    Args:
      refine_steps: R, REFINE steps.
      refine_iterations: TrimmedMeanGD rounds per REFINE step.
      beta: the trimming fraction of TrMean_beta in TrimmedMeanGD.
    """

    refine_steps: int = 2
    refine_iterations: int = 20
    beta: Static[float] = 0.1


def srfca(
    example_loss,
    *,
    learning_rate: float,
    threshold: float,
    min_size: int = 2,
    one_shot_rounds: int = 20,
    refine: SRFCARefine = SRFCARefine(),
    distance: Distance = "l2",
    batch_size: Optional[int] = None,
    optimizer: ClientOptimizerName = "sgd",
    chunk_size: Optional[int] = None,
    attackers: Attackers = NO_ATTACKERS,
    **legacy,
) -> FederatedAlgorithm:
    """SR-FCA with threshold lambda = ``threshold``, size parameter t = ``min_size``, ONE_SHOT's T =
    ``one_shot_rounds``, ``refine``'s R REFINE steps of ``refine_iterations`` TrimmedMeanGD rounds with
    TrMean_beta trimming ``beta``, and ``distance`` "l2" or "cross-loss" (see the module docstring). A run of
    ``one_shot_rounds + refine_steps * refine_iterations`` rounds (``hparams["schedule_rounds"]``) is the
    paper's algorithm. ``attackers``: the Byzantine clients and what they send (module docstring).

    Args:
      threshold: lambda, the distance below which two clients are linked (required).
      min_size: t, the smallest cluster kept; smaller clusters' clients are reassigned.
      one_shot_rounds: ONE_SHOT's T, rounds of local GD before the first clustering (``local_steps``
        before 0.3.0).
      refine: the REFINE stages, a :class:`SRFCARefine` (refine_steps, refine_iterations, beta).
      distance: "l2" (||w_i - w_j||) or "cross-loss" (Def. 5.1).
      optimizer: "sgd" (default) or "adam" for ONE_SHOT's and TrimmedMeanGD's steps (module docstring).
      chunk_size: rows of the all-pairs distance evaluated at once (None: all).
      attackers: the Byzantine clients and their attack (:class:`~fedjax_clust.robust.adversary.Attackers`).
      legacy: the deprecated keywords ``refine_steps``, ``refine_iterations``, ``beta``, ``attack`` and
        ``byzantine`` (fedjax-clust 0.3.0: ``refine`` / ``attackers``).
    """
    refine, attackers = take_legacy("srfca", legacy, refine=refine, attackers=attackers)
    refine_steps, refine_iterations, beta = refine.refine_steps, refine.refine_iterations, refine.beta
    attack, byzantine = attackers.attack, attackers.byzantine
    check_common_hparams(learning_rate, 0.0, batch_size, optimizer=optimizer)
    check_real("threshold", threshold, low=0.0)
    check_int("min_size", min_size, 1)
    check_real("beta", beta, low=0.0, high=0.5, high_open=True)
    check_int("one_shot_rounds", one_shot_rounds, 1)
    check_int("refine_steps", refine_steps, 0)
    check_int("refine_iterations", refine_iterations, 1)
    check_choice("distance", distance, DISTANCES)
    check_chunk_size(chunk_size)
    mask, send = adversary(attack, byzantine, "srfca")
    loss = client_loss(example_loss)
    grad_fn = jax.grad(loss)
    trimmed = make_aggregator("trimmed-mean", beta=beta)
    schedule_rounds = one_shot_rounds + refine_steps * refine_iterations
    adam = optimizer == "adam"
    step_rule = client_optimizer(learning_rate, DEFAULT_MOMENTUM, optimizer=optimizer) if adam else None

    def fresh_opt(models):
        return jax.vmap(step_rule.init)(models)

    def init(params, num_clients):
        params = shared_params(params, "srfca")
        check_mask_size(mask, num_clients)
        stacked = broadcast_to_clients(params, num_clients)
        extra = {"w0": params, "local": stacked, "models": stacked, "labels": jnp.full((num_clients,), -1, jnp.int32)}
        if adam:  # the clients' Adam state for ONE_SHOT, the cluster slots' for TrimmedMeanGD
            extra.update(local_opt=fresh_opt(stacked), models_opt=fresh_opt(stacked))
        if distance == "cross-loss":
            extra["local_losses"] = jnp.zeros((num_clients, num_clients), jnp.float32)
        return _split(jnp.zeros((), jnp.int32), stacked, extra)

    def _split(round_, params, merged):
        """The state of the stages' one dict: the clients' rows (local models, labels, their reported losses)
        and the server's (w0, the cluster models)."""
        rows = {k: v for k, v in merged.items() if k in _CLIENT_ROWS}
        return ClientState(params, (), round_, {k: v for k, v in merged.items() if k not in _CLIENT_ROWS}, rows)

    def reported_losses(models, data, key):
        """[rows, m] losses f_j(models_r) as client j reports them (an attacker replaces its column)."""
        return send(cross_losses(loss, models, data, chunk_size), key, axis=-1)

    def client_client(extra, data, key):
        if distance == "l2":
            return pairwise_l2(extra["local"], extra["local"], chunk_size), extra
        losses = reported_losses(extra["local"], data, key)  # [i, j] = f_j(w_i)
        return 0.5 * (losses + losses.T), {**extra, "local_losses": losses}

    def client_cluster(extra, data, labels, num, key):
        """[m, num] dist(w_i, omega_c) under the membership ``labels`` (for the cluster losses f_c)."""
        if distance == "l2":
            return pairwise_l2(extra["local"], extra["models"], chunk_size)
        at_clusters = reported_losses(extra["models"], data, key)  # [c, i] = f_i(omega_c)
        return 0.5 * (at_clusters.T + _mean_over_members(extra["local_losses"], labels, num))

    def cluster_cluster(extra, data, labels, num, key):
        if distance == "l2":
            return pairwise_l2(extra["models"], extra["models"], chunk_size)
        at_clusters = reported_losses(extra["models"], data, key)  # [c', j] = f_j(omega_c')
        between = _mean_over_members(at_clusters, labels, num)  # [c', c] = f_c(omega_c')
        return 0.5 * (between + between.T)

    def one_shot(extra, data, key):
        if mask is not None:  # attackers send w0 + attack(w_i - w0) as their local model (module docstring)
            m = extra["labels"].shape[0]
            w0 = broadcast_to_clients(extra["w0"], m)
            update = send(jax.tree.map(jnp.subtract, extra["local"], w0), jax.random.fold_in(key, 0))
            extra = {**extra, "local": jax.tree.map(jnp.add, w0, update)}
        dist, extra = client_client(extra, data, jax.random.fold_in(key, 1))
        m = dist.shape[0]
        components = connected_components(dist <= threshold)
        labels = jnp.where(component_sizes(components) >= min_size, components, -1)
        models = broadcast_to_clients(extra["w0"], m)
        return {**extra, "labels": labels, "models": models, **({"models_opt": fresh_opt(models)} if adam else {})}

    def members(labels, m):
        return jax.ops.segment_sum(
            (labels >= 0).astype(jnp.int32), jnp.where(labels >= 0, labels, m), num_segments=m + 1
        )[:m]

    def recluster_merge(extra, data, key):
        labels = extra["labels"]
        m = labels.shape[0]
        # RECLUSTER (Alg. 2): every client to its nearest cluster model (a NaN distance is no candidate)
        had_members = members(labels, m) > 0
        to_cluster = client_cluster(extra, data, labels, m, jax.random.fold_in(key, 0))
        to_cluster = jnp.where(had_members[None, :] & ~jnp.isnan(to_cluster), to_cluster, jnp.inf)
        relabelled = jnp.where(jnp.any(had_members), jnp.argmin(to_cluster, axis=1), -1).astype(jnp.int32)
        # MERGE (Alg. 4): connected components of the clusters' threshold graph
        sizes = members(relabelled, m)
        present = sizes > 0
        merged = connected_components(
            cluster_cluster(extra, data, relabelled, m, jax.random.fold_in(key, 1)) <= threshold, present
        )
        kept = present & (component_sizes(merged, sizes) >= min_size)
        weight = present.astype(jnp.float32)
        models = jax.tree.map(
            lambda x: (
                jax.ops.segment_sum(
                    jnp.where(present.reshape((-1,) + (1,) * (x.ndim - 1)), x, 0), merged, num_segments=m
                )
                / jnp.maximum(jax.ops.segment_sum(weight, merged, num_segments=m), 1.0)
                .reshape((-1,) + (1,) * (x.ndim - 1))
                .astype(x.dtype)
            ),
            extra["models"],
        )
        nearest_kept = jnp.argmin(jnp.where(kept[None, :], to_cluster, jnp.inf), axis=1)
        own = jnp.take(kept, jnp.maximum(relabelled, 0)) & (relabelled >= 0)
        slot = jnp.where(own, relabelled, nearest_kept)
        final = jnp.where(jnp.any(kept), jnp.take(merged, slot), -1).astype(jnp.int32)
        return {**extra, "labels": final, "models": models, **({"models_opt": fresh_opt(models)} if adam else {})}

    def trimmed_step(models, opt, labels, batch, key, took_part):
        """(models, their Adam state or None) after one TrimmedMeanGD step of every cluster with members."""
        m = labels.shape[0]
        grads = send(map_clients(grad_fn, take_rows(models, jnp.maximum(labels, 0)), batch), key)
        if took_part is not None:  # partial participation: the participating members' gradients only
            labels = jnp.where(took_part, labels, -1)
        directions, _ = aggregate_segments(trimmed, grads, jnp.where(labels >= 0, labels, m), m + 1)
        has = members(labels, m) > 0
        return step_rows(step_rule, models, opt, jax.tree.map(lambda d: d[:m], directions), learning_rate, has)

    def round_fn(state, data, key, participants=None):
        t = state.round + 1  # this round, 1-based
        took_part = participant_mask(participants, leading_dim(data))  # None: every client
        batch = sample_minibatch(data, batch_size, key)
        k_attack = attack_key(key)

        def local_phase(extra):
            grads = map_clients(grad_fn, extra["local"], batch)
            local, opt = step_rows(step_rule, extra["local"], extra.get("local_opt"), grads, learning_rate, took_part)
            extra = {**extra, "local": local, **({"local_opt": opt} if adam else {})}
            return lax.cond(t == one_shot_rounds, lambda e: one_shot(e, data, k_attack), lambda e: e, extra)

        def refine_phase(extra):
            step = (t - one_shot_rounds - 1) % refine_iterations
            scheduled = t <= schedule_rounds
            restart = scheduled & (step == 0)  # Alg. 3 starts every cluster model at w0
            m = extra["labels"].shape[0]
            models = jax.tree.map(
                lambda x, w0: jnp.where(restart, jnp.broadcast_to(w0, x.shape), x),
                extra["models"],
                broadcast_to_clients(extra["w0"], m),
            )
            opt = None
            if adam:  # Alg. 3's restart restarts the clusters' Adam too
                opt = jax.tree.map(
                    lambda fresh, x: jnp.where(restart, fresh, x), fresh_opt(models), extra["models_opt"]
                )
            models, opt = trimmed_step(models, opt, extra["labels"], batch, k_attack, took_part)
            extra = {**extra, "models": models, **({"models_opt": opt} if adam else {})}
            return lax.cond(
                scheduled & (step == refine_iterations - 1),
                lambda e: recluster_merge(e, data, jax.random.fold_in(k_attack, 2)),
                lambda e: e,
                extra,
            )

        extra = lax.cond(t <= one_shot_rounds, local_phase, refine_phase, {**state.extra, **state.rows})
        labels = extra["labels"]
        m = labels.shape[0]
        assigned = (labels >= 0) & (t > one_shot_rounds)
        clustered = take_rows(extra["models"], jnp.maximum(labels, 0))
        params = jax.tree.map(
            lambda c, w: jnp.where(assigned.reshape((-1,) + (1,) * (c.ndim - 1)), c, w), clustered, extra["local"]
        )
        shown = jnp.where(labels >= 0, labels, m + jnp.arange(m, dtype=jnp.int32))
        num_clusters = jnp.sum(members(labels, m) > 0)
        return _split(state.round + 1, params, extra), {"cluster_labels": shown, "num_clusters": num_clusters}

    hparams = dict(
        learning_rate=learning_rate,
        threshold=threshold,
        min_size=min_size,
        beta=beta,
        one_shot_rounds=one_shot_rounds,
        refine_steps=refine_steps,
        refine_iterations=refine_iterations,
        distance=distance,
        batch_size=batch_size,
        **optimizer_hparams(optimizer),
        schedule_rounds=schedule_rounds,
        **({} if attack is None else dict(attack=recorded_name(attack))),
    )
    return FederatedAlgorithm("srfca", init, round_fn, hparams, masked_participation=True)


def one_shot_models(
    task,
    num_clusters: int,
    *,
    learning_rate: float,
    threshold: float,
    one_shot_rounds: int = 20,
    min_size: int = 2,
    distance: Distance = "l2",
    batch_size: Optional[int] = None,
    optimizer: ClientOptimizerName = "sgd",
    seed: int = 0,
):
    """ONE_SHOT-IFCA's initial cluster models (SR-FCA's baseline, seeds/001 §6): run SR-FCA's ONE_SHOT on
    ``task`` (``one_shot_rounds`` local rounds from the task's initial model drawn with ``seed``, then the threshold
    graph's components of at least ``min_size`` clients) and return (cluster models, leaves [K, ...]; the
    components [N], -1 for unassigned clients).

    Model k is the mean of the local models of the k-th largest component (ties: the smaller label). With fewer
    than K = ``num_clusters`` components (a choice the paper leaves open) the missing models are local models of
    single clients picked farthest-first: each is the client whose local model is farthest in l2 from every model
    chosen so far.
    """
    check_int("num_clusters", num_clusters)
    algo = srfca(
        task.example_loss,
        learning_rate=learning_rate,
        threshold=threshold,
        min_size=min_size,
        one_shot_rounds=one_shot_rounds,
        refine=SRFCARefine(refine_steps=0),
        distance=distance,
        batch_size=batch_size,
        optimizer=optimizer,
    )
    key = jax.random.PRNGKey(seed)
    task = task.resident()
    state = algo.init(task.init_params(key), task.num_clients)
    step = jax.jit(algo.round)
    for t in range(one_shot_rounds):
        state, _ = step(state, task.data, jax.random.fold_in(key, t))
    labels = np.asarray(state.rows["labels"])
    local, unravel = ravel_rows(state.rows["local"])
    local = np.asarray(local, np.float64)
    if num_clusters > local.shape[0]:
        raise ValueError(f"num_clusters={num_clusters} exceeds the {local.shape[0]} clients")
    sizes = np.bincount(labels[labels >= 0], minlength=local.shape[0])
    order = [c for c in np.argsort(-sizes, kind="stable") if sizes[c] > 0][:num_clusters]
    chosen = [local[labels == c].mean(axis=0) for c in order]
    while len(chosen) < num_clusters:
        if chosen:
            gaps = np.min(np.linalg.norm(local[:, None, :] - np.stack(chosen)[None], axis=-1), axis=1)
        else:
            gaps = np.linalg.norm(local - local.mean(axis=0), axis=1)
        chosen.append(local[int(np.argmax(gaps))])
    return unravel(jnp.asarray(np.stack(chosen), jnp.float32)), labels


SPECS = (
    AlgorithmSpec(
        "srfca",
        lambda task, **options: srfca(task.example_loss, **options),
        builder=srfca,
        renamed={"local_steps": "one_shot_rounds"},
        example_options=dict(threshold=50.0),
        flags={"beta": "trim-beta"},
        summary="SR-FCA (Vardhan et al. 2024): ONE_SHOT threshold clustering, then REFINE",
    ),
)
