"""The modular 3-stage algorithm of Ghosh, Hong, Yin and Ramchandran (seeds/003, Alg. 1), as rounds.

Like SR-FCA, its stages are rounds of one jit-compiled function, so ``simulate`` drives, evaluates and checkpoints
it like every other algorithm:

* rounds 1 .. T (``erm_rounds``), Stage I: every client computes its local ERM w_hat_i = argmin_w F_i(w) by
  gradient descent from the shared start w0, w_i <- w_i - eta grad F_i(w_i) (vmapped);
* at the end of round T, Stage II: the server clusters the ERMs it receives (a Byzantine client's ERM is replaced
  by the run's attack) with ``clustering`` = "lloyd" (K-means), "k-geomedians" or "trimmed-k-means" (Alg. 2, ball
  of ``radius`` around each bucket's geometric median; k-geomedians is the default as it needs no radius),
  ``clustering_steps`` S iterations from the initial
  labels z^(0) (``initial_labels``, default uniformly random: the paper's "fully random initialization" of its
  real-data run, drawn from the round's key so each run seed has its own; ``seed`` fixes them), see
  :func:`fedjax_clust.robust.lloyd.robust_lloyd`; or "threshold",
  the edge-cutting rule (connected components of ||w_hat_i - w_hat_j|| <= ``threshold``, any number of clusters);
* rounds after T, Stage III: per cluster C_k, a distributed optimisation started at the cluster's Stage II
  centre (the last Lloyd centre; for the threshold rule the mean of the component's ERMs; w0 for a centre that is
  not finite). The paper leaves w^0 open (Theorem 7's bound holds from any start); a warm start is our choice:
    - ``optimizer="gd"``: w_k <- w_k - eta Agg{grad F_i(w_k) : i in C_k}, with ``aggregator`` Agg the
      coordinate-wise trimmed mean TrMean_beta of Yin et al. (the paper's TM, default), the plain mean (SM) or
      any rule of :data:`fedjax_clust.robust.AGGREGATORS`;
    - ``optimizer="fedavg"``: the paper's robust Federated Averaging (FA): each member runs ``fedavg_steps``
      (5 in the paper) local GD steps from w_k, and w_k becomes Agg of the local models (computed as w_k + Agg of
      the updates, the same thing for the coordinate-wise rules, which commute with a shift).
  The Byzantine clients' gradients (GD) or updates (FedAvg) are replaced by the attack.

``step_optimizer="adam"`` (command line ``--optimizer adam``; Stage III "gd" only): Stage I's clients step their
ERMs with their own Adam on their gradients, and in Stage III each cluster model steps with its own Adam on
Agg{grad F_i(w_k)} instead of w_k - eta Agg (Kingma & Ba, beta_1 = 0.9, beta_2 = 0.999, epsilon = 1e-8;
:func:`~fedjax_clust.core.optim.client_optimizer`): what SR-FCA's MNIST configuration, Adam for every method,
asks of its Local-KMeans baseline. Our choices: Stage III's Adam starts fresh at Stage II (as the cluster models
start at their centres), and a cluster with no participating member keeps its model and its Adam state.

Partial participation (:mod:`fedjax_clust.algorithms.participation`, by a mask over all clients): in a
Stage I round only the participants take their GD step; in a Stage III round each cluster aggregates its
participating members' messages (a cluster without one keeps its model). Stage II clusters the latest ERM of
every client.

Round metrics: ``cluster_labels`` (every client alone during Stage I, then Stage II's labels, so the run's
``misclustering`` is Stage II's) and ``num_clusters``. ``state.extra["stage2_labels"]`` [S + 1, N] keeps
Stage II's label history z^(0) .. z^(S) (the paper's Fig. 2a); ``state.extra["centres"]`` the clusters' models.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fedjax_clust.algorithms.registry import AlgorithmSpec
from fedjax_clust.core.algorithm import FederatedAlgorithm
from fedjax_clust.core.batching import client_loss, local_sgd_steps, map_clients, sample_minibatch
from fedjax_clust.core.hyperparameter_kinds import Static
from fedjax_clust.core.keys import attack_key, initialisation_key
from fedjax_clust.core.optim import (
    DEFAULT_MOMENTUM,
    check_common_hparams,
    client_optimizer,
    optimizer_hparams,
    step_rows,
)
from fedjax_clust.core.option_groups import option_group, take_legacy
from fedjax_clust.core.participants import keep_non_participants, participant_mask
from fedjax_clust.core.pytrees import (
    broadcast_to_clients,
    leading_dim,
    ravel_rows,
    segment_mean,
    take_rows,
)
from fedjax_clust.core.state import ClientState, shared_params
from fedjax_clust.core.validation import (
    check_choice,
    check_int,
    check_mask_size,
    check_optional_seed,
    check_real,
)
from fedjax_clust.robust.adversary import NO_ATTACKERS, Attackers, adversary
from fedjax_clust.robust.aggregators import (
    aggregate_segments,
    make_aggregator,
    resolve_aggregator,
)
from fedjax_clust.robust.lloyd import ROBUST_LLOYD, robust_lloyd, threshold_components
from fedjax_clust.robust.registry import recorded_name

__all__ = ["three_stage", "STAGE2_RULES", "STAGE3_OPTIMIZERS", "ThreeStageClustering", "ThreeStageOptimization"]

STAGE2_RULES = ROBUST_LLOYD + ("threshold",)
# fold_in constant of Stage II's random initial labels under the round's key: never a step's or a client's index
INITIAL_LABELS_STREAM = 0x1AB315
STAGE3_OPTIMIZERS = ("gd", "fedavg")
Stage2Rule = Literal[STAGE2_RULES]
Stage3Optimizer = Literal[STAGE3_OPTIMIZERS]


@option_group(eq=False)  # compared by identity: it may hold the initial labels
class ThreeStageClustering:
    """Stage II of the 3-stage algorithm (module docstring): ``three_stage``'s ``stage2`` option (an option
    group, :mod:`fedjax_clust.core.option_groups`: ``make_algorithm``, the command line and sweeps take its
    fields by name).

    Args:
      clustering: Stage II's rule: "k-geomedians" (default), "trimmed-k-means" (needs ``radius``),
        "lloyd" or "threshold" (edge cutting; needs ``threshold``).
      radius: the trimming ball of "trimmed-k-means".
      threshold: the edge-cutting distance of "threshold".
      clustering_steps: Stage II's Lloyd iterations S.
      weiszfeld_steps: Weiszfeld iterations of each geometric median of "k-geomedians".
      initial_labels: the initial labels z^(0), int [N] in [0, K) (default None: uniformly random).
      seed: fixes Stage II's random initial labels whatever the run's seed (default None: drawn from the
        run's keys).
    """

    clustering: Stage2Rule = "k-geomedians"
    radius: Optional[float] = None
    threshold: Optional[float] = None
    clustering_steps: int = 10
    weiszfeld_steps: int = 20
    initial_labels: Any = None
    seed: Optional[int] = None


@option_group
class ThreeStageOptimization:
    """Stage III of the 3-stage algorithm (module docstring): ``three_stage``'s ``stage3`` option (an option
    group, :mod:`fedjax_clust.core.option_groups`).

    Args:
      optimizer: Stage III: "gd" (robust full-batch GD per cluster) or "fedavg" (robust FedAvg:
        ``fedavg_steps`` local GD steps, then the aggregate of the local models).
      fedavg_steps: local GD steps per round of Stage III's "fedavg".
      beta: the trimming fraction of Stage III's default aggregator TrMean_beta.
    """

    optimizer: Stage3Optimizer = "gd"
    fedavg_steps: int = 5
    beta: Static[float] = 0.1


def three_stage(
    example_loss,
    num_clusters: int,
    *,
    learning_rate: float,
    erm_rounds: int = 100,
    stage2: ThreeStageClustering = ThreeStageClustering(),
    stage3: ThreeStageOptimization = ThreeStageOptimization(),
    aggregator=None,
    batch_size: Optional[int] = None,
    step_optimizer: str = "sgd",
    attackers: Attackers = NO_ATTACKERS,
    **legacy,
) -> FederatedAlgorithm:
    """Alg. 1 with K = ``num_clusters`` (Stage II's buckets; the threshold rule ignores it), Stage I's
    T = ``erm_rounds`` GD rounds, Stage II's rule (``stage2``) and Stage III's optimiser (``stage3``) with
    ``aggregator`` (default: TrMean_beta, ``stage3.beta``; a name or a function from
    :func:`fedjax_clust.robust.make_aggregator`). See the module docstring.

    Args:
      erm_rounds: Stage I's T, full-batch GD rounds of every machine's local ERM (``local_steps`` before
        0.3.0).
      stage2: Stage II, a :class:`ThreeStageClustering` (clustering, radius, threshold, clustering_steps,
        weiszfeld_steps, initial_labels, seed).
      stage3: Stage III, a :class:`ThreeStageOptimization` (optimizer, fedavg_steps, beta).
      step_optimizer: "sgd" (default: the paper's gradient steps) or "adam" for Stage I's and Stage III's
        steps (Stage III "gd" only; module docstring).
      attackers: the Byzantine clients and their attack (:class:`~fedjax_clust.robust.adversary.Attackers`).
      legacy: the deprecated keywords of the two stages' fields, ``attack`` and ``byzantine`` (fedjax-clust
        0.3.0: ``stage2`` / ``stage3`` / ``attackers``).
    """
    stage2, stage3, attackers = take_legacy("three_stage", legacy, stage2=stage2, stage3=stage3, attackers=attackers)
    attack, byzantine = attackers.attack, attackers.byzantine
    clustering, radius, threshold = stage2.clustering, stage2.radius, stage2.threshold
    clustering_steps, weiszfeld_steps = stage2.clustering_steps, stage2.weiszfeld_steps
    initial_labels, seed = stage2.initial_labels, stage2.seed
    optimizer, fedavg_steps, beta = stage3.optimizer, stage3.fedavg_steps, stage3.beta
    check_common_hparams(learning_rate, 0.0, batch_size, optimizer=step_optimizer)
    if step_optimizer != "sgd" and optimizer != "gd":
        raise ValueError(
            f"step_optimizer={step_optimizer!r} applies to Stage III 'gd' (a step on the aggregated gradient), "
            f"not {optimizer!r}"
        )
    adam = step_optimizer != "sgd"
    step_rule = client_optimizer(learning_rate, DEFAULT_MOMENTUM, optimizer=step_optimizer) if adam else None
    check_int("num_clusters", num_clusters)
    check_choice("clustering", clustering, STAGE2_RULES)
    check_choice("optimizer", optimizer, STAGE3_OPTIMIZERS)
    check_int("clustering_steps", clustering_steps, 0)
    check_int("erm_rounds", erm_rounds, 1)
    check_int("fedavg_steps", fedavg_steps, 1)
    check_int("weiszfeld_steps", weiszfeld_steps)
    check_real("beta", beta, low=0.0, high=0.5, high_open=True)
    check_optional_seed(seed)
    if clustering == "threshold":
        if threshold is None:
            raise ValueError("the threshold (edge-cutting) rule needs its distance threshold (threshold=...)")
        check_real("threshold", threshold, low=0.0)
    if clustering == "trimmed-k-means":
        if radius is None:
            raise ValueError(
                "trimmed-k-means needs the radius of its trimming ball (radius=..., the paper's C sigma sqrt(d))"
            )
        check_real("radius", radius, low=0.0, low_open=True)
    if initial_labels is not None:
        labels = np.asarray(initial_labels)  # checked in NumPy: a build inside a compiled program stages no op
        if labels.ndim != 1:
            raise ValueError(f"initial_labels must be [N], got shape {labels.shape}")
        if labels.min() < 0 or labels.max() >= num_clusters:
            raise ValueError(f"initial_labels must lie in [0, {num_clusters})")
        initial_labels = jnp.asarray(labels, jnp.int32)
    if aggregator is None or aggregator == "trimmed-mean":
        aggregator = make_aggregator("trimmed-mean", beta=beta)
    aggregate = resolve_aggregator(aggregator)
    mask, send = adversary(attack, byzantine, "three-stage")
    loss = client_loss(example_loss)
    grad_fn = jax.grad(loss)

    def init(params, num_clients):
        params = shared_params(params, "three-stage")
        check_mask_size(mask, num_clients)
        if initial_labels is not None and initial_labels.shape[0] != num_clients:
            raise ValueError(
                f"initial_labels has {initial_labels.shape[0]} entries but there are {num_clients} clients"
            )
        slots = num_clients if clustering == "threshold" else num_clusters
        stacked = broadcast_to_clients(params, num_clients)
        extra = {
            "w0": params,
            "local": stacked,
            "centres": broadcast_to_clients(params, slots),
            "labels": jnp.zeros((num_clients,), jnp.int32),  # set at Stage II
            "stage2_labels": jnp.zeros((clustering_steps + 1, num_clients), jnp.int32),
        }
        if adam:  # the clients' Adam state for Stage I, the clusters' for Stage III
            extra.update(local_opt=fresh_opt(stacked), centres_opt=fresh_opt(extra["centres"]))
        return _split(jnp.zeros((), jnp.int32), stacked, extra)

    def fresh_opt(models):
        return jax.vmap(step_rule.init)(models)

    def _split(round_, params, merged):
        """The state of the stages' one dict: the clients' rows (local models, their optimiser state, labels)
        and the server's."""
        rows = {k: v for k, v in merged.items() if k in ("local", "local_opt", "labels")}
        return ClientState(params, (), round_, {k: v for k, v in merged.items() if k not in rows}, rows)

    def run_stage2(extra, key):
        """Cluster the received ERMs; Stage III starts every cluster at its Stage II centre."""
        points, unravel = ravel_rows(send(extra["local"], attack_key(key)))
        m = points.shape[0]
        if clustering == "threshold":
            labels = threshold_components(points, threshold)
            history = jnp.broadcast_to(labels, (clustering_steps + 1, m))
            centres, _ = segment_mean(points, labels, m)
        else:
            labels0 = initial_labels
            if labels0 is None:
                start = initialisation_key(seed, jax.random.fold_in(key, INITIAL_LABELS_STREAM))
                labels0 = jax.random.randint(start, (m,), 0, num_clusters, jnp.int32)
            history, centres = robust_lloyd(
                points,
                labels0,
                num_clusters,
                rule=clustering,
                iterations=clustering_steps,
                radius=radius,
                weiszfeld_steps=weiszfeld_steps,
            )
            labels = history[-1]
        w0, _ = ravel_rows(broadcast_to_clients(extra["w0"], 1))
        centres = jnp.where(jnp.all(jnp.isfinite(centres), axis=1, keepdims=True), centres, w0)
        centres = unravel(centres)
        return {
            **extra,
            "labels": labels.astype(jnp.int32),
            "stage2_labels": history.astype(jnp.int32),
            "centres": centres,
            **({"centres_opt": fresh_opt(centres)} if adam else {}),
        }

    def run_stage3(extra, data, key, took_part):
        labels, centres = extra["labels"], extra["centres"]
        slots = jax.tree.leaves(centres)[0].shape[0]
        start = take_rows(centres, labels)
        # partial participation: non-participants' messages go to an extra slot that is dropped
        groups = labels if took_part is None else jnp.where(took_part, labels, slots)
        opt = extra.get("centres_opt")
        if optimizer == "gd":
            grads = map_clients(grad_fn, start, sample_minibatch(data, batch_size, key))
            direction, counts = aggregate_segments(aggregate, send(grads, attack_key(key)), groups, slots + 1)
            direction = jax.tree.map(lambda d: d[:slots], direction)
            centres, opt = step_rows(step_rule, centres, opt, direction, learning_rate, counts[:slots] > 0)
        else:
            local = local_sgd_steps(
                grad_fn, start, data, key, steps=fedavg_steps, learning_rate=learning_rate, batch_size=batch_size
            )
            delta = send(jax.tree.map(jnp.subtract, local, start), attack_key(key))
            step, counts = aggregate_segments(aggregate, delta, groups, slots + 1)
            moved = jax.tree.map(lambda c, d: c + d[:slots], centres, step)
            centres = keep_non_participants(moved, centres, counts[:slots] > 0)
        return {**extra, "centres": centres, **({"centres_opt": opt} if adam else {})}

    def round_fn(state, data, key, participants=None):
        t = state.round + 1  # this round, 1-based
        took_part = participant_mask(participants, leading_dim(data))  # None: every client

        def stage1(extra):
            grads = map_clients(grad_fn, extra["local"], sample_minibatch(data, batch_size, key))
            local, opt = step_rows(step_rule, extra["local"], extra.get("local_opt"), grads, learning_rate, took_part)
            extra = {**extra, "local": local, **({"local_opt": opt} if adam else {})}
            return lax.cond(t == erm_rounds, lambda e: run_stage2(e, key), lambda e: e, extra)

        extra = lax.cond(
            t <= erm_rounds, stage1, lambda e: run_stage3(e, data, key, took_part), {**state.extra, **state.rows}
        )
        clustered = t >= erm_rounds
        labels = extra["labels"]
        m = labels.shape[0]
        own = take_rows(extra["centres"], labels)
        params = jax.tree.map(lambda c, w: jnp.where(clustered, c, w), own, extra["local"])
        shown = jnp.where(clustered, labels, jnp.arange(m, dtype=jnp.int32))
        present = jax.ops.segment_sum(jnp.ones((m,), jnp.int32), shown, num_segments=m) > 0
        return _split(state.round + 1, params, extra), {"cluster_labels": shown, "num_clusters": jnp.sum(present)}

    hparams = dict(
        num_clusters=num_clusters,
        learning_rate=learning_rate,
        clustering=clustering,
        radius=radius,
        threshold=threshold,
        clustering_steps=clustering_steps,
        initial_labels="given" if initial_labels is not None else "random",
        seed=seed,
        erm_rounds=erm_rounds,
        optimizer=optimizer,
        fedavg_steps=fedavg_steps,
        beta=beta,
        batch_size=batch_size,
        aggregator=recorded_name(aggregate),
        attack=None if attack is None else recorded_name(attack),
        **{f"step_{k}": v for k, v in optimizer_hparams(step_optimizer).items()},
    )
    return FederatedAlgorithm("three-stage", init, round_fn, hparams, masked_participation=True)


SPECS = (
    AlgorithmSpec(
        "three-stage",
        lambda task, num_clusters, **options: three_stage(task.example_loss, num_clusters, **options),
        builder=three_stage,
        needs_clusters=True,
        renamed={"local_steps": "erm_rounds"},
        flags={
            "beta": "trim-beta",
            "clustering": "clustering-rule",
            "optimizer": "stage3",
            "step_optimizer": "optimizer",
        },
        summary="Ghosh et al.'s robust 3-stage algorithm: local ERMs, robust clustering, robust per-cluster "
        "optimisation",
    ),
)
