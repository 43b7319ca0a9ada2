"""Federated-Clustering (Werner et al., *Provably Personalized and Robust Federated Learning*, Algorithm 2).

Every round t, for every client i:
  line 5: each client j computes its minibatch gradient g_j(x_{i,t-1}) at client i's model;
  line 6: v_{i,t} = Threshold-Clustering({g_j(x_{i,t-1})}_{j in [N]}; 1 cluster; seeded at g_i(x_{i,t-1}));
  line 7: x_{i,t} = x_{i,t-1} - eta * v_{i,t}.

The math of a row (its messages, the attack, Threshold-Clustering) is
:func:`fedjax_clust.algorithms.clustered_row.cluster_row`; how the N rows run (chunks of models so that the
N x N x D cross-gradients never exist at once, subgroups gathered group-major, the clients split over a
device mesh) is the execution plan, :mod:`fedjax_clust.parallel.row_plan`. This module builds a round from
the two: local steps, the round's minibatches, the rows' directions in the plan's layout, the step. The
layouts compute the same rows up to float rounding (tested).

Options beyond Algorithm 2, all documented choices:
  * ``momentum``: momentum applied to v_{i,t} before the step; 0 is Algorithm 2 exactly. The paper authors'
    MNIST scripts (read, not run) step with a heavy-ball buffer on the clustered estimate, momentum 0.9;
    their synthetic scripts (run side by side, see docs/guides/trustworthy-results.md) with the "average" buffer below.
  * ``batch_size``: B_i, a fresh minibatch per client per round drawn without replacement from the PRNG;
    the same minibatch of client j is used at every model x_i in that round. None is the full local data.
  * ``momentum_form``: "heavy-ball" (default, m_t = v_t + beta m_{t-1}) or "average" (the synthetic
    scripts' buffer m_1 = v_1, m_t = (1 - beta) v_t + beta m_{t-1}; see
    :func:`~fedjax_clust.core.optim.averaged_momentum`). At the same eta the heavy-ball steady-state step is
    1 / (1 - beta) times larger.
  * ``local_steps`` E with ``local_steps_form``:
      - "sgd" (default): E plain local SGD steps (own fresh minibatch, same optimiser) before each clustered
        step, so a round is E local steps followed by one Federated-Clustering step (thesis Fig. 2.4, right);
      - "pseudo-gradient" (the paper authors' scripts): the models do not move locally; the message of
        client j at model x_i is the E-step pseudo-gradient (x_i - y_E) / eta, where y_0 = x_i and
        y_{e+1} = y_e - eta g_j(y_e) on client j's e-th fresh minibatch of the round (plain steps, no
        momentum); Threshold-Clustering and the momentum step then act on these messages. E = 0 or 1 is
        the plain gradient.
  * ``subgroups``: G; each round the clients are split uniformly at random into G groups whose sizes differ
    by at most one, and Federated-Clustering runs inside each group (the paper's MNIST runs used 16):
    cross-gradient work drops from N^2 to about N^2 / G.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal, Mapping, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fedjax_clust.algorithms.clustered_row import (
    COLUMN_LAYOUT_MAX_PARAMS,
    RowRule,
    cluster_row,
    pseudo_gradient,
)
from fedjax_clust.algorithms.registry import FLOAT_BYTES, AlgorithmSpec, Traffic
from fedjax_clust.core.algorithm import FederatedAlgorithm
from fedjax_clust.core.batching import client_loss, padded_batch, sample_minibatch
from fedjax_clust.core.execution import Execution
from fedjax_clust.core.hyperparameter_kinds import Static
from fedjax_clust.core.optim import (
    DEFAULT_MOMENTUM,
    ClientOptimizerName,
    MomentumForm,
    apply_client_updates,
    check_common_hparams,
    client_optimizer,
    optimizer_hparams,
)
from fedjax_clust.core.option_groups import option_group, take_legacy
from fedjax_clust.core.participants import client_rows
from fedjax_clust.core.pytrees import leading_dim, num_entries, row_size
from fedjax_clust.core.state import init_client_state
from fedjax_clust.core.validation import check_choice, check_int, check_mask_size, check_memory_budget
from fedjax_clust.ops.clustering import DEFAULT_QUANTILE, QuantileSelect, Radius, check_radius_rule, resolve_select
from fedjax_clust.ops.metrics import ball_components
from fedjax_clust.parallel.memory import check_budget_holds_a_row
from fedjax_clust.parallel.row_plan import (
    ChunkSize,
    RowPlan,
    check_chunk_size,
    place_clients,
    random_subgroups,
    row_directions,
    run_round,
)
from fedjax_clust.parallel.sharding import resolve_mesh
from fedjax_clust.robust.adversary import NO_ATTACKERS, Attackers, check_adversary
from fedjax_clust.robust.registry import recorded_name

__all__ = [
    "federated_clustering",
    "FCClustering",
    "FCLocalSteps",
    "FCExecution",
    "random_subgroups",
    "COLUMN_LAYOUT_MAX_PARAMS",
    "TRACK_CLUSTERS_UP_TO",
]

LOCAL_STEPS_FORMS = ("sgd", "pseudo-gradient")
LocalStepsForm = Literal[LOCAL_STEPS_FORMS]


@option_group
class FCClustering:
    """Who a client clusters with, and how (Algorithm 2's Threshold-Clustering and random subgroups):
    ``federated_clustering``'s ``clustering`` option (an option group, :mod:`fedjax_clust.core.option_groups`:
    ``make_algorithm``, the command line and sweeps take its fields by name).

    Args:
      radius / quantile: the radius rule of Threshold-Clustering, at most one (see
        :func:`fedjax_clust.threshold_clustering`): a fixed radius (a scalar here, one cluster; "theory":
        sqrt(sigma_hat Delta_hat)) or the quantile of the distances at every step; neither: quantile 0.2,
        the paper's 20th percentile (§4.2).
      clustering_steps: M, the number of Threshold-Clustering steps per round (paper: 10).
      subgroups: G random groups per round, 1 <= G <= N.
    """

    radius: Radius = None
    quantile: Optional[float] = None
    clustering_steps: int = 10
    subgroups: int = 1


@option_group
class FCLocalSteps:
    """Local steps of Federated-Clustering's clients: ``federated_clustering``'s ``local`` option (an option group,
    :mod:`fedjax_clust.core.option_groups`).

    Args:
      local_steps: E, local SGD steps before each clustered step ("sgd") or inside each message
        ("pseudo-gradient"), see ``local_steps_form`` above.
      local_steps_form: with E > 0 local steps, "sgd" (E local SGD steps, then a clustered step) or
        "pseudo-gradient" (the paper authors' scripts: cluster the E-step pseudo-gradients).
    """

    local_steps: int = 0
    local_steps_form: LocalStepsForm = "sgd"


@option_group
class FCExecution:
    """How a Federated-Clustering round runs (memory, devices, the quantile's selection) and what it reports
    (``track_clusters`` adds a metric), never the models it computes beyond float rounding: ``federated_clustering``'s
    ``execution`` option (an option group, :mod:`fedjax_clust.core.option_groups`).

    Args:
      chunk_size: models whose cross-gradients are evaluated at once: None or "all" (every row), an integer, or "auto"
        (default): the largest chunk whose cross-gradients fit ``memory_budget`` bytes (default: a quarter
        of the device's total memory, see :mod:`fedjax_clust.parallel.memory`) less, with subgroups, the
        gathered copies of a group-major round, so a function of the config and the device kind only. Peak
        memory of the cross-gradients is about 16 bytes x chunk_size x (N / G) x (model size); each round's
        Threshold-Clustering runs inside the chunk, so the N x N x D block never
        exists. Chunked and unchunked rounds agree to float rounding only, so the chunk is part of what a
        run computes: with ``num_clients`` and ``model_size`` given (``make_algorithm`` gives the task's),
        "auto" is resolved here, by :func:`fedjax_clust.parallel.memory.resolve_chunk_size`, and
        ``hparams["chunk_size"]`` records the number (None: all rows at once), which lands in ``run.json``,
        ``summary.json`` and every checkpoint; a resume whose chunk differs is refused, naming the
        recorded one to pass. Without them "auto" is resolved by the same rule from the state's shapes when
        the round is traced (the same numbers), and the hyperparameters say "auto".
      memory_budget: bytes every buffer the execution plan sizes may use together (None: a quarter of the
        device's total memory): with subgroups the gathered copies of a group-major round take their share
        (:func:`fedjax_clust.parallel.memory.group_major_bytes`) and the cross-gradient chunk of
        ``chunk_size="auto"`` gets the rest (at least one row); on a mesh with subgroups the round runs
        group-major only when the copies and one row fit a device, else row-wise. Both depend on
        the device's total memory, never its free memory, so a machine always takes the same path; the
        paths differ by float rounding only.
      mesh: "auto" (default: split the clients over all devices when there are several), None (one
        device), or a ``jax.sharding.Mesh`` with a "clients" axis; see :mod:`fedjax_clust.parallel.sharding`. The
        round runs sharded when N is a multiple of the mesh size, else on one device.
        The result does not depend on it beyond float rounding.
      quantile_select: how the quantile rule finds its k-th distance: "search" (a bracketed search, a
        data-dependent loop), "radix" (a fixed number of counting passes, no loop) or "auto" (default:
        search on a CPU, radix on a GPU/TPU); see :func:`fedjax_clust.ops.clustering.resolve_select`. The
        result does not depend on it.
      track_clusters: return ``cluster_labels`` [N] in the round's metrics, logged as ``misclustering`` at every
        evaluation of a task that knows its true clusters; None (default): on for such a task whose round sees
        at most 4,096 clients (:data:`TRACK_CLUSTERS_UP_TO`) in one group (``subgroups=1``: random subgroups'
        balls never span two groups), off when this builder is called without a task.
        The labels are the connected components of the graph linking i and j when j is inside client i's ball
        at the last clustering step (or i in j's), see :func:`fedjax_clust.ops.metrics.ball_components`. It
        costs an N x N bool mask and a few O(N^2) label-propagation passes per round (no measurable time:
        ``fedjax-clust bench --model track-clusters``, see :data:`TRACK_CLUSTERS_UP_TO`).
      num_clients / model_size: the clients a round sees (N, or the participants per round under partial
        participation) and the parameters of one client model, to resolve ``chunk_size="auto"`` when the
        algorithm is built (see above); not needed otherwise.
    """

    chunk_size: ChunkSize = "auto"
    memory_budget: Static[Union[int, float, None]] = None
    mesh: Any = "auto"
    quantile_select: QuantileSelect = "auto"
    track_clusters: Optional[bool] = None
    num_clients: Optional[int] = None
    model_size: Optional[int] = None


def federated_clustering(
    example_loss,
    *,
    learning_rate: float,
    batch_size: Optional[int] = None,
    momentum: float = DEFAULT_MOMENTUM,
    momentum_form: MomentumForm = "heavy-ball",
    optimizer: ClientOptimizerName = "sgd",
    clustering: FCClustering = FCClustering(),
    local: FCLocalSteps = FCLocalSteps(),
    execution: FCExecution = FCExecution(),
    attackers: Attackers = NO_ATTACKERS,
    local_privacy=None,
    **legacy,
) -> FederatedAlgorithm:
    """Build Federated-Clustering (Algorithm 2) from its hyperparameters.

    Args:
      example_loss: ``(params, example) -> scalar``; a client's loss is its mean over the minibatch.
      learning_rate: eta > 0.
      batch_size: minibatch size B per client per round (None: full local data).
      momentum: SGD momentum on the clustered update, in [0, 1).
      momentum_form: "heavy-ball" (default) or "average" (the paper authors' buffer), see above.
      optimizer: "sgd" (default) or "adam": the step a client takes with its clustered update (Adam's
        first-moment decay is ``momentum``), see :func:`fedjax_clust.core.optim.client_optimizer`.
      clustering: the Threshold-Clustering rule and the subgroups, an :class:`FCClustering` (radius / quantile,
        clustering_steps, subgroups).
      local: local steps, an :class:`FCLocalSteps` (local_steps, local_steps_form).
      execution: how the round runs and what it reports, an :class:`FCExecution` (chunk_size, memory_budget,
        mesh, quantile_select, track_clusters, num_clients / model_size).
      attackers: a Byzantine attack (:func:`fedjax_clust.robust.make_attack`) and the bool [N] mask of the clients
        that run it (:func:`fedjax_clust.robust.mark_byzantine`), an
        :class:`~fedjax_clust.robust.adversary.Attackers`. An
        attacker answers every model's request with the attack: in row i, its cross-gradient g_j(x_i) is
        replaced before Threshold-Clustering, with the row's honest messages, centre (client i's own
        message) and radius visible to it (omniscient). The attackers' own models are trained as usual;
        metrics leave them out.
      local_privacy: a :class:`~fedjax_clust.privacy.local.LocalGaussian` (``make_algorithm``'s ``dp_mode="local"``
        builds it): every client clips and noises each message it sends, its own included (local DP,
        :mod:`fedjax_clust.privacy.local`); refuses local SGD steps in the "sgd" form.
      legacy: the deprecated keywords of the three groups' fields, ``attack`` and ``byzantine`` (fedjax-clust
        0.3.0: ``clustering`` / ``local`` / ``execution`` / ``attackers``).
    """
    clustering, local, execution, attackers = take_legacy(
        "federated_clustering", legacy, clustering=clustering, local=local, execution=execution, attackers=attackers
    )
    attack, byzantine = attackers.attack, attackers.byzantine
    radius, quantile = clustering.radius, clustering.quantile
    clustering_steps, subgroups = clustering.clustering_steps, clustering.subgroups
    local_steps, local_steps_form = local.local_steps, local.local_steps_form
    chunk_size, memory_budget, mesh = execution.chunk_size, execution.memory_budget, execution.mesh
    quantile_select, track_clusters = execution.quantile_select, execution.track_clusters
    num_clients, model_size = execution.num_clients, execution.model_size
    check_common_hparams(learning_rate, momentum, batch_size, local_steps, momentum_form, optimizer)
    if local_privacy is not None and local_steps and local_steps_form == "sgd":
        raise ValueError(
            "local privacy covers the messages: local SGD steps (local_steps_form='sgd') move the model every client "
            "receives with unnoised gradients; use local_steps_form='pseudo-gradient' or local_steps=0"
        )
    track_clusters = bool(track_clusters)  # None: off here; make_algorithm decides from the task
    check_choice("local_steps_form", local_steps_form, LOCAL_STEPS_FORMS)
    check_int("clustering_steps", clustering_steps, 0)
    plan = _row_plan(subgroups, chunk_size, memory_budget, num_clients, model_size)
    if radius is None and quantile is None:
        quantile = DEFAULT_QUANTILE
    check_radius_rule(radius, quantile, 1)
    resolve_select(quantile_select)
    plan = dataclasses.replace(plan, mesh=resolve_mesh(mesh))
    if radius is not None and np.ndim(radius) != 0:
        raise ValueError(
            f"radius must be a scalar for Federated-Clustering (one cluster), got shape {np.shape(radius)}"
        )
    byzantine_j, attack_needs_ball = check_adversary(attack, byzantine)
    if attack_needs_ball and isinstance(radius, str):
        raise ValueError(
            f"the {attack.attack_name} attack aims at a fixed radius or the quantile rule's, not radius={radius!r}"
        )
    step = client_optimizer(learning_rate, momentum, momentum_form, optimizer)
    grad_fn = jax.grad(client_loss(example_loss))
    pseudo = local_steps_form == "pseudo-gradient" and local_steps > 1
    rule = RowRule(
        message_fn=functools.partial(pseudo_gradient, grad_fn, learning_rate) if pseudo else grad_fn,
        clustering_steps=clustering_steps,
        radius=radius,
        quantile=quantile,
        select=quantile_select,
        attack=attack,
        attack_needs_ball=attack_needs_ball,
        track_clusters=track_clusters,
        local_privacy=local_privacy,
    )
    row = functools.partial(cluster_row, rule)

    def init(params, num_clients):
        _check_groups(plan, num_clients)
        check_mask_size(byzantine_j, num_clients)
        state = init_client_state(step, params, num_clients)
        row_params = row_size(state.params, num_clients)
        check_budget_holds_a_row(plan.memory_budget, -(-num_clients // plan.subgroups), row_params)
        return place_clients(plan, state)

    def rows_round(state, data, key, offset, byz, shard):
        """One round for the clients [offset, offset + n) whose state is given; ``data`` holds all N.

        Every device draws the minibatches of all N clients from the same key (no communication), so a
        sharded round computes exactly what the unsharded one does (see :func:`row_directions`)."""
        num_rows = leading_dim(state.params)
        k_local, k_batch, k_group = jax.random.split(key, 3)
        own = lambda tree: jax.tree.map(lambda x: lax.dynamic_slice_in_dim(x, offset, num_rows), tree)  # noqa: E731
        # every model meets every client's batch: a ragged full batch is padded to its largest client
        draw = lambda k: padded_batch(sample_minibatch(data, batch_size, k))  # noqa: E731

        def one_local_step(e, st):
            batch = own(draw(jax.random.fold_in(k_local, e)))
            grads = jax.vmap(grad_fn)(st.params, batch)
            return apply_client_updates(step, st, grads)

        if pseudo:  # E minibatches per client, leaves [N, E, B, ...]: the same at every model x_i
            batch = jax.vmap(lambda e: draw(jax.random.fold_in(k_local, e)))(jnp.arange(local_steps))
            batch = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), batch)
        else:
            if local_steps and local_steps_form == "sgd":
                state = lax.fori_loop(0, local_steps, one_local_step, state)
            batch = draw(k_batch)
        directions, ball_frac, balls = row_directions(plan, row, state.params, batch, k_group, offset, byz, shard)
        state = apply_client_updates(step, state, directions)
        return state._replace(round=state.round + 1), jnp.mean(ball_frac), balls

    def round_fn(state, data, key, participants=None):
        _check_groups(plan, leading_dim(state.params))
        # the attackers among the clients this round holds (an explicit argument of every kernel below)
        byz = None if byzantine_j is None else client_rows(byzantine_j, participants)
        state, ball_fraction, balls = run_round(plan, rows_round, state, data, key, byz, track_clusters)
        out = {"ball_fraction": ball_fraction}
        if balls is not None:
            out["cluster_labels"] = ball_components(balls)
        return state, out

    hparams = dict(
        learning_rate=learning_rate,
        batch_size=batch_size,
        momentum=momentum,
        momentum_form=momentum_form,
        **optimizer_hparams(optimizer),
        clustering_steps=clustering_steps,
        radius=radius,
        quantile=quantile,
        local_steps=local_steps,
        local_steps_form=local_steps_form,
        subgroups=subgroups,
        chunk_size=plan.chunk_size,
        memory_budget=plan.memory_budget,
        track_clusters=track_clusters,
        attack=None if attack is None else recorded_name(attack),
    )
    how_it_runs = Execution(
        devices=plan.devices,
        quantile_select=quantile_select,
        budgeted=True,
        min_clients=plan.subgroups,
        groups=plan.subgroups,
    )
    return FederatedAlgorithm("federated-clustering", init, round_fn, hparams, execution=how_it_runs)


def _row_plan(subgroups, chunk_size, memory_budget, num_clients, model_size) -> RowPlan:
    """The checked execution plan (its mesh set by the builder after the other checks); "auto" chunks
    resolved when the round's clients and the model size are given (see ``chunk_size`` in
    :func:`federated_clustering`)."""
    check_int("subgroups", subgroups, 1)
    if isinstance(chunk_size, str) and chunk_size == "all":
        chunk_size = None
    if not (isinstance(chunk_size, str) and chunk_size == "auto"):
        check_chunk_size(chunk_size)
    memory_budget = check_memory_budget(memory_budget)
    plan = RowPlan(subgroups=subgroups, chunk_size=chunk_size, memory_budget=memory_budget)
    if chunk_size == "auto" and (num_clients is not None or model_size is not None):
        if num_clients is None or model_size is None:
            raise ValueError("num_clients and model_size resolve chunk_size='auto' together: give both or neither")
        num_clients = check_int("num_clients", num_clients)
        model_size = check_int("model_size", model_size)
        check_budget_holds_a_row(memory_budget, -(-num_clients // subgroups), model_size)
        plan = plan.resolve(num_clients, model_size)
    return plan


def _check_groups(plan: RowPlan, num_clients: int) -> None:
    if plan.subgroups > num_clients:
        raise ValueError(f"subgroups={plan.subgroups} must not exceed the number of clients ({num_clients})")


def pairwise_traffic(num_clients: int, num_params: int, num_clusters: int = 1, subgroups: int = 1) -> Traffic:
    """One client's Federated-Clustering round in a subgroup of n = N / G clients: down, the n models of its
    group (the others' to evaluate its loss at, its own updated one); up, the n gradients of its loss at them,
    its own included (the server's Threshold-Clustering of model j's row reads every member's gradient at x_j).
    2 n messages and 8 D n bytes a client, 8 D N^2 / G in all; n gradient evaluations."""
    del num_clusters
    group = num_clients / subgroups
    size = FLOAT_BYTES * num_params
    return Traffic(size * group, size * group, group, group, passes=group)


# The most clients a round may see for track_clusters=None to log the misclustering. Measured with
# ``fedjax-clust bench --model track-clusters --clients 300,1200,2400,4800`` (2 CPU cores, d = 10,
# quantile 0.2, 10 clustering steps; experiments/results/bench/track_clusters.jsonl, tabled in
# docs/performance.md): a tracked round over an untracked one scatters around 1 within the shared machine's
# run-to-run noise (the mask is a by-product of the clustering, the components take a few O(N^2) passes against
# the round's O(N^2 d) cross-gradients). Time does not limit it; memory does: the N x N mask and the
# propagation's N x N int32 temporaries, about 80 MB at 4,096 clients, 20 GB at 65,536.
TRACK_CLUSTERS_UP_TO = 4096


def _from_task(task, *, clients_per_round: int, **options) -> FederatedAlgorithm:
    """Federated-Clustering for ``task`` (``options`` with their option groups gathered), its auto chunk resolved
    for the ``clients_per_round`` a round sees and the task's model size (from shapes only, nothing computed), so
    it is recorded in ``hparams``; and ``track_clusters=None`` resolved: on when the task knows its true clusters,
    a round sees at most :data:`TRACK_CLUSTERS_UP_TO` clients and runs as one group (with G > 1 random subgroups a
    client's ball holds only its group's members, so the components split every true cluster across the groups: no
    clustering to score)."""
    execution = options.get("execution") or FCExecution()
    clustering = options.get("clustering") or FCClustering()
    if execution.track_clusters is None:
        execution = dataclasses.replace(
            execution,
            track_clusters=task.true_clusters is not None
            and clients_per_round <= TRACK_CLUSTERS_UP_TO
            and clustering.subgroups == 1,
        )
    if execution.chunk_size == "auto":
        shapes = jax.eval_shape(task.init_params, jax.random.PRNGKey(0))
        execution = dataclasses.replace(execution, num_clients=clients_per_round, model_size=num_entries(shapes))
    return federated_clustering(task.example_loss, **{**options, "execution": execution})


def _resume_options(recorded: Mapping) -> dict:
    """``{"chunk_size": c}`` when the resumed run recorded the chunk c its "auto" resolved to (see
    ``chunk_size`` in :func:`federated_clustering`), so its rounds use that chunk also where "auto" now
    resolves otherwise (another device)."""
    chunk = recorded.get("chunk_size", "auto")
    return {} if chunk == "auto" else {"chunk_size": chunk}


SPECS = (
    AlgorithmSpec(
        "federated-clustering",
        _from_task,
        builder=federated_clustering,
        hidden=("num_clients", "model_size"),
        owns_models=True,
        traffic=pairwise_traffic,
        resume_options=_resume_options,
        example_options=dict(quantile=0.2),
        # each client sends one message to every client of its subgroup (its own included)
        local_privacy_messages=lambda options, clients: -(-clients // options.get("subgroups", 1)),
        summary="Federated-Clustering (Werner et al., Algorithm 2): every client's Threshold-Clustering of the N "
        "cross-gradients at its model",
    ),
)
