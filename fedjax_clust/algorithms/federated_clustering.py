"""Federated-Clustering (Werner et al., *Provably Personalized and Robust Federated Learning*, Algorithm 2).

Every round t, for every client i:
  line 5: each client j computes its minibatch gradient g_j(x_{i,t-1}) at client i's model;
  line 6: v_{i,t} = Threshold-Clustering({g_j(x_{i,t-1})}_{j in [N]}; 1 cluster; seeded at g_i(x_{i,t-1}));
  line 7: x_{i,t} = x_{i,t-1} - eta * v_{i,t}.

All N rows are computed together: a ``lax.map`` over chunks of models, each chunk a ``vmap`` that evaluates
the N cross-gradients of its models and runs Threshold-Clustering on each model's row right away, so the
N x N x D tensor of cross-gradients never exists at once (see ``chunk_size``). A row's gradients stay one
block per parameter leaf in the layout the vmapped gradient produces ([S, ...], or [..., S] for models
below ``COLUMN_LAYOUT_MAX_PARAMS``), and the clustering works on the blocks as they are
(:func:`fedjax_clust.ops.clustering.threshold_cluster_blocks`): no concatenated or transposed copy of the
row. With subgroups on one device the round is group-major: the models and minibatches are gathered once
into [G, S, ...] blocks and each group runs the full kernel on its S clients (N x S pairs of work, N
gathered minibatches). With a device mesh the clients are split over the devices (``jax.shard_map``).
With subgroups, when the device count divides G and every device can hold the gathered models
(:func:`fedjax_clust.parallel.memory.group_major_fits`), the round stays group-major: each device gathers
all N models and runs G / devices groups. Otherwise (and without subgroups) every device runs its own
clients' rows, each row gathering its own group's minibatches (N x S gathered minibatches), so a device
needs only its own clients' models. The layouts compute the same rows up to float rounding (tested).

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

from typing import Literal, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from fedjax_clust.algorithms.registry import FLOAT_BYTES, AlgorithmSpec
from fedjax_clust.core.algorithm import FederatedAlgorithm
from fedjax_clust.core.batching import client_loss, sample_minibatch
from fedjax_clust.core.optim import (
    DEFAULT_MOMENTUM,
    MomentumForm,
    apply_client_updates,
    check_common_hparams,
    client_optimizer,
)
from fedjax_clust.core.participants import client_rows
from fedjax_clust.core.pytrees import leading_dim, take_rows
from fedjax_clust.core.state import ClientState, init_client_state
from fedjax_clust.core.validation import (
    check_choice,
    check_int,
    check_mask_size,
    check_memory_budget,
)
from fedjax_clust.ops.clustering import (
    DEFAULT_QUANTILE,
    QuantileSelect,
    Radius,
    check_radius_rule,
    quantile_rank,
    resolve_select,
    threshold_cluster_blocks,
)
from fedjax_clust.ops.crossgrad import check_chunk_size, map_rows, messages_at
from fedjax_clust.ops.metrics import ball_components
from fedjax_clust.ops.order_stats import kth_smallest
from fedjax_clust.parallel.memory import (
    auto_chunk_size,
    check_budget_holds_a_row,
    group_major_fits,
    resolve_chunk_size,
)
from fedjax_clust.parallel.sharding import CLIENT_AXIS, resolve_mesh
from fedjax_clust.robust.adversary import check_adversary

__all__ = ["federated_clustering", "random_subgroups"]

# Below this many parameters a row's gradients are laid out client-axis-last ([D, S]): XLA's CPU GEMVs over
# a tiny D are ~2x faster that way; above it the vmapped gradient's natural [S, D] layout avoids a
# transposed copy of the block (measured on the MLP of the scale benchmark, see docs/performance.md).
COLUMN_LAYOUT_MAX_PARAMS = 256
LOCAL_STEPS_FORMS = ("sgd", "pseudo-gradient")
LocalStepsForm = Literal[LOCAL_STEPS_FORMS]
# models per cross-gradient chunk: a count, "auto" (fit the memory budget), "all" or None (every row at once)
ChunkSize = Union[int, Literal["auto", "all"], None]


def random_subgroups(key, num_clients: int, num_groups: int):
    """Uniformly random partition into ``num_groups`` groups of sizes ceil/floor(N / G).

    Returns ``index`` [G, S] (S = ceil(N / G); padding slots hold ``num_clients``) and ``valid`` [G, S].
    """
    size = -(-num_clients // num_groups)
    perm = jax.random.permutation(key, num_clients)
    padded = jnp.concatenate([perm, jnp.full((num_groups * size - num_clients,), num_clients, perm.dtype)])
    index = padded.reshape(size, num_groups).T  # round-robin: group sizes differ by at most one
    return index, index < num_clients


def federated_clustering(
    example_loss,
    *,
    learning_rate: float,
    batch_size: Optional[int] = None,
    momentum: float = DEFAULT_MOMENTUM,
    momentum_form: MomentumForm = "heavy-ball",
    clustering_steps: int = 10,
    radius: Radius = None,
    quantile: Optional[float] = None,
    local_steps: int = 0,
    local_steps_form: LocalStepsForm = "sgd",
    subgroups: int = 1,
    chunk_size: ChunkSize = "auto",
    memory_budget: Union[int, float, None] = None,
    mesh="auto",
    track_clusters: bool = False,
    quantile_select: QuantileSelect = "auto",
    attack=None,
    byzantine=None,
    num_clients: Optional[int] = None,
    model_size: Optional[int] = None,
) -> FederatedAlgorithm:
    """Build Federated-Clustering (Algorithm 2) from its hyperparameters.

    Args:
      example_loss: ``(params, example) -> scalar``; a client's loss is its mean over the minibatch.
      learning_rate: eta > 0.
      batch_size: minibatch size B per client per round (None: full local data).
      momentum: SGD momentum on the clustered update, in [0, 1).
      momentum_form: "heavy-ball" (default) or "average" (the paper authors' buffer), see above.
      clustering_steps: M, the number of Threshold-Clustering steps per round (paper: 10).
      radius / quantile: the radius rule of Threshold-Clustering, at most one (see
        :func:`fedjax_clust.threshold_clustering`): a fixed radius (a scalar here, one cluster; "theory":
        sqrt(sigma_hat Delta_hat)) or the quantile of the distances at every step; neither: quantile 0.2,
        the paper's 20th percentile (§4.2).
      local_steps: E, local SGD steps before each clustered step ("sgd") or inside each message
        ("pseudo-gradient"), see ``local_steps_form`` above.
      local_steps_form: with E > 0 local steps, "sgd" (E local SGD steps, then a clustered step) or
        "pseudo-gradient" (the paper authors' scripts: cluster the E-step pseudo-gradients).
      subgroups: G random groups per round, 1 <= G <= N.
      chunk_size: models whose cross-gradients are evaluated at once: None or "all" (every row), an integer, or "auto"
        (default): the largest chunk whose cross-gradients fit ``memory_budget`` bytes (default: a quarter
        of the device's total memory, see :mod:`fedjax_clust.parallel.memory`), so a function of the config
        and the device kind only. Peak memory of the cross-gradients is about 16 bytes x chunk_size x (N / G)
        x (model size); each round's Threshold-Clustering runs inside the chunk, so the N x N x D block never
        exists. Chunked and unchunked rounds agree to float rounding only, so the chunk is part of what a
        run computes: with ``num_clients`` and ``model_size`` given (``make_algorithm`` gives the task's),
        "auto" is resolved here, by :func:`fedjax_clust.parallel.memory.resolve_chunk_size`, and
        ``hparams["chunk_size"]`` records the number (None: all rows at once), which lands in ``run.json``,
        ``summary.json`` and every checkpoint; a resume whose chunk differs is refused, naming the
        recorded one to pass. Without them "auto" is resolved by the same rule from the state's shapes when
        the round is traced (the same numbers), and the hyperparameters say "auto".
      memory_budget: bytes the cross-gradient chunk of ``chunk_size="auto"`` may use (None: a quarter of
        the device's total memory); on a mesh with subgroups it also decides whether the round runs
        group-major (:func:`fedjax_clust.parallel.memory.group_major_fits`). Both depend on the device's
        total memory, never its free memory, so a machine always takes the same path; the paths differ by
        float rounding only.
      num_clients / model_size: the clients a round sees (N, or the participants per round under partial
        participation) and the parameters of one client model, to resolve ``chunk_size="auto"`` when the
        algorithm is built (see above); not needed otherwise.
      mesh: "auto" (default: split the clients over all devices when there are several), None (one
        device), or a ``jax.sharding.Mesh`` with a "clients" axis; see :mod:`fedjax_clust.parallel.sharding`. The
        round runs sharded when N is a multiple of the mesh size, else on one device.
        The result does not depend on it beyond float rounding.
      track_clusters: also return ``cluster_labels`` [N] in the round's metrics: the connected components
        of the graph linking i and j when j is inside client i's ball at the last clustering step (or i in
        j's), see :func:`fedjax_clust.ops.metrics.ball_components`. Costs an N x N mask per round.
      quantile_select: how the quantile rule finds its k-th distance: "search" (a bracketed search, a
        data-dependent loop), "radix" (a fixed number of counting passes, no loop) or "auto" (default:
        search on a CPU, radix on a GPU/TPU); see :func:`fedjax_clust.ops.clustering.resolve_select`. The
        result does not depend on it.
      attack / byzantine: a Byzantine attack (:func:`fedjax_clust.robust.make_attack`) and the bool [N]
        mask of the clients that run it (:func:`fedjax_clust.robust.mark_byzantine`), both or neither. An
        attacker answers every model's request with the attack: in row i, its cross-gradient g_j(x_i) is
        replaced before Threshold-Clustering, with the row's honest messages, centre (client i's own
        message) and radius visible to it (omniscient). The attackers' own models are trained as usual;
        metrics leave them out.
    """
    check_common_hparams(learning_rate, momentum, batch_size, local_steps, momentum_form)
    check_choice("local_steps_form", local_steps_form, LOCAL_STEPS_FORMS)
    check_int("clustering_steps", clustering_steps, 0)
    check_int("subgroups", subgroups, 1)
    if isinstance(chunk_size, str) and chunk_size == "all":
        chunk_size = None
    if not (isinstance(chunk_size, str) and chunk_size == "auto"):
        check_chunk_size(chunk_size)
    memory_budget = check_memory_budget(memory_budget)
    if chunk_size == "auto" and (num_clients is not None or model_size is not None):
        if num_clients is None or model_size is None:
            raise ValueError("num_clients and model_size resolve chunk_size='auto' together: give both or neither")
        num_clients = check_int("num_clients", num_clients)
        model_size = check_int("model_size", model_size)
        check_budget_holds_a_row(memory_budget, -(-num_clients // subgroups), model_size)
        chunk_size = resolve_chunk_size(
            "auto", num_clients=num_clients, model_size=model_size, subgroups=subgroups, memory_budget=memory_budget
        )
    if radius is None and quantile is None:
        quantile = DEFAULT_QUANTILE
    check_radius_rule(radius, quantile, 1)
    resolve_select(quantile_select)
    mesh = resolve_mesh(mesh)
    if radius is not None and np.ndim(radius) != 0:
        raise ValueError(
            f"radius must be a scalar for Federated-Clustering (one cluster), got shape {np.shape(radius)}"
        )
    byzantine_j, attack_needs_ball = check_adversary(attack, byzantine)
    if attack_needs_ball and isinstance(radius, str):
        raise ValueError(
            f"the {attack.attack_name} attack aims at a fixed radius or the quantile rule's, not radius={radius!r}"
        )
    optimizer = client_optimizer(learning_rate, momentum, momentum_form)
    loss = client_loss(example_loss)
    grad_fn = jax.grad(loss)

    def row_key(key, i):
        """The attack's key for model i's row (None without attackers)."""
        return None if byzantine_j is None else jax.random.fold_in(jax.random.fold_in(key, 1), i)

    pseudo = local_steps_form == "pseudo-gradient" and local_steps > 1

    def pseudo_gradient(params, batches):
        """(x - y_E) / eta after E plain SGD steps from x on the client's E minibatches ([E, B, ...])."""

        def step(y, batch):
            return jax.tree.map(lambda p, g: p - learning_rate * g, y, grad_fn(y, batch)), None

        y, _ = lax.scan(step, params, batches)
        return jax.tree.map(lambda p, q: (p - q) / learning_rate, params, y)

    message_fn = pseudo_gradient if pseudo else grad_fn

    def init(params, num_clients):
        if subgroups > num_clients:
            raise ValueError(f"subgroups={subgroups} must not exceed the number of clients ({num_clients})")
        check_mask_size(byzantine_j, num_clients)
        state = init_client_state(optimizer, params, num_clients)
        row_params = sum(int(x.size) for x in jax.tree.leaves(state.params)) // num_clients
        check_budget_holds_a_row(memory_budget, -(-num_clients // subgroups), row_params)
        if mesh is not None and num_clients % mesh.size == 0:
            clients, replicated = NamedSharding(mesh, P(CLIENT_AXIS)), NamedSharding(mesh, P())
            state = jax.device_put(state, jax.tree.map(lambda x: clients if x.ndim else replicated, state))
        return state

    def client_axis_for(params_i):
        """Layout of a row's gradient block: client axis last for small models, first for large ones."""
        size = sum(int(x.size) for x in jax.tree.leaves(params_i))
        return -1 if size < COLUMN_LAYOUT_MAX_PARAMS else 0

    def attack_radius(grads, center, byz, axis):
        """The victim's ball radius an omniscient attacker aims at: the fixed radius, or the quantile of
        the honest messages' distances from the centre."""
        if quantile is None:
            return jnp.asarray(radius, jnp.float32)

        def sq_dist(x, c):  # per client: summed over every axis but the client axis
            other = tuple(a for a in range(x.ndim) if a != axis % x.ndim)
            return jnp.sum(jnp.square(x - jnp.expand_dims(c, axis)), axis=other)

        sq = sum(sq_dist(x, c) for x, c in zip(jax.tree.leaves(grads), jax.tree.leaves(center)))
        honest = ~byz
        k = jnp.maximum(quantile_rank(jnp.sum(honest), quantile), 1)  # the sorted row's entry k - 1, no sort
        return jnp.sqrt(kth_smallest(jnp.where(honest, sq, jnp.inf), k, select=quantile_select))

    def attacked(grads, own, axis, byz, key):
        """The row's messages with the Byzantine clients' answers replaced by the attack (every attacker
        answers every model's request, Algorithm 2 line 5 under attack)."""
        center = ball_radius = None
        if attack_needs_ball:
            center = jax.tree.map(lambda x: lax.dynamic_index_in_dim(x, own, axis=axis, keepdims=False), grads)
            ball_radius = attack_radius(grads, center, byz, axis)
        return attack(grads, byz, key, axis=axis, center=center, radius=ball_radius)

    def cluster_row(params_i, own, batch, valid, unbatched, byz=None, key=None):
        """v_i: Threshold-Clustering of all group members' gradients at model i, seeded at its own; with
        attackers (``byz``, bool over the row's clients) their messages are the attack's."""
        axis = client_axis_for(params_i)
        grads = messages_at(message_fn, params_i, batch, client_axis=axis)
        if byz is not None:
            grads = attacked(grads, own, axis, byz, key)
        leaves, treedef = jax.tree.flatten(grads)
        blocks = [x.reshape((x.shape[0], -1)) if axis == 0 else x.reshape((-1, x.shape[-1])) for x in leaves]
        own_point = [lax.dynamic_index_in_dim(b, own, axis=axis, keepdims=False) for b in blocks]
        center, ball = threshold_cluster_blocks(
            blocks,
            own_point,
            client_axis=axis % 2,
            steps=clustering_steps,
            radius=radius,
            quantile=quantile,
            valid=valid,
            unbatched=unbatched,
            select=quantile_select,
        )
        members = ball.shape[0] if valid is None else jnp.maximum(jnp.sum(valid), 1)
        direction = jax.tree.unflatten(treedef, [c.reshape(p.shape) for c, p in zip(center, jax.tree.leaves(params_i))])
        return direction, jnp.sum(ball) / members, (ball if track_clusters else None)

    def chunk_for(num_rows, group_size, params):
        """Rows per chunk when ``num_rows`` rows (of ``group_size`` clients each) are evaluated: the resolved
        ``chunk_size``, or (an unresolved "auto") the same rule applied to the traced shapes."""
        if chunk_size != "auto":
            return chunk_size
        row_params = sum(int(x.size) for x in jax.tree.leaves(params)) // leading_dim(params)
        return auto_chunk_size(num_rows, group_size, row_params, memory_budget)

    def subgroup_slots(key, num_clients):
        """This round's groups (``random_subgroups``: index [G, S], valid [G, S]), S, and each client's flat
        slot g S + position; the same key gives the same groups on every device."""
        index, valid = random_subgroups(key, num_clients, subgroups)
        size = index.shape[1]
        slot = (
            jnp.zeros((num_clients,), jnp.int32)
            .at[index.reshape(-1)]
            .set(jnp.arange(subgroups * size, dtype=jnp.int32), mode="drop")
        )
        return index, valid, size, slot

    def members_byzantine(members, valid, byz):
        """The Byzantine mask over a group's S slots (padding slots are not attackers) from ``byz`` (bool over
        the round's clients); None without attack."""
        return None if byz is None else jnp.take(byz, members, mode="clip") & valid

    def clustered_directions(params, batch, key, offset, byz):
        """Directions v_i for the rows ``params`` (clients offset, offset+1, ...); ``batch`` holds all N.

        With subgroups every row gathers its own group's minibatches (S clients) inside the chunk, so the
        rows can be split over devices like the G = 1 rows and no [G, S, ...] copy of all data exists.
        """
        num_rows, num_clients = leading_dim(params), leading_dim(batch)
        rows = (params, offset + jnp.arange(num_rows))
        if subgroups == 1:
            chunk = chunk_for(num_rows, num_clients, params)
            return map_rows(
                lambda r: cluster_row(r[0], r[1], batch, None, chunk == 1, byz, row_key(key, r[1])), rows, chunk
            )
        index, valid, size, slot = subgroup_slots(key, num_clients)
        chunk = chunk_for(num_rows, size, params)

        def group_row(r):
            params_i, i = r
            group, position = slot[i] // size, slot[i] % size
            members = index[group]
            direction, frac, ball = cluster_row(
                params_i,
                position,
                take_rows(batch, members),
                valid[group],
                chunk == 1,
                members_byzantine(members, valid[group], byz),
                row_key(key, i),
            )
            if ball is not None:  # ball over the S group slots -> over all N clients
                ball = jnp.zeros((num_clients,), bool).at[members].set(ball, mode="drop")
            return direction, frac, ball

        return map_rows(group_row, rows, chunk)

    def grouped_directions(params, batch, key, byz, shard=None):
        """Directions v_i, group-major: the clients' models and minibatches are gathered into [G, S, ...]
        blocks, and each group runs the full-N^2 kernel on its S clients (groups vmapped together when whole
        groups fit the chunk), then the directions are gathered back to client order.

        ``shard`` None: one device holds every client (``params`` [N, ...]) and runs all G groups. ``shard``
        (device, devices, offset) inside ``shard_map``: ``params`` are the device's own clients
        [offset, offset + N / devices); every device gathers all N models (``all_gather``), runs its
        G / devices groups, and the groups' directions are gathered again so that each device takes its
        own clients' rows. The groups, the row keys and the chunk are those of the one-device round, so
        both compute the same rows up to float rounding (a device maps G / devices groups, not G). The row-wise path
        of ``clustered_directions`` gathers a group's S minibatches once per row instead (N x S copies of a minibatch,
        against N here); it stays for the sharded rounds whose gathered models would not fit (see
        :func:`group_major_fits`).
        """
        num_clients = leading_dim(batch)
        index, valid, size, slot = subgroup_slots(key, num_clients)  # padding slots clip to client N - 1
        chunk = chunk_for(subgroups * size, size, params)  # rows per chunk, over all G x S group slots
        groups_at_once = None if chunk is None else max(1, chunk // size)
        inner = None if chunk is None or chunk >= size else chunk
        own_slot, own_rows, mine = slot, num_clients, index
        if shard is not None:
            device, devices, offset = shard
            own_rows = leading_dim(params)
            params = jax.tree.map(lambda x: lax.all_gather(x, CLIENT_AXIS, tiled=True), params)
            per_device = subgroups // devices
            mine = lax.dynamic_slice_in_dim(index, device * per_device, per_device)
            valid_mine = lax.dynamic_slice_in_dim(valid, device * per_device, per_device)
            own_slot = lax.dynamic_slice_in_dim(slot, offset, own_rows)
        else:
            valid_mine = valid

        def one_group(group):
            group_params, group_batch, group_valid, members = group
            group_byz = members_byzantine(members, group_valid, byz)
            rows = (group_params, jnp.arange(size), members)
            return map_rows(
                lambda r: cluster_row(r[0], r[1], group_batch, group_valid, inner == 1, group_byz, row_key(key, r[2])),
                rows,
                inner,
            )

        groups = (take_rows(params, mine), take_rows(batch, mine), valid_mine, mine)
        directions, fractions, balls = map_rows(one_group, groups, groups_at_once)
        if shard is not None:  # every group's rows on every device, then each takes its own clients'
            directions, fractions, balls = jax.tree.map(
                lambda x: lax.all_gather(x, CLIENT_AXIS, tiled=True), (directions, fractions, balls)
            )
        back = lambda x: jnp.take(x.reshape((subgroups * size,) + x.shape[2:]), own_slot, axis=0)
        directions, fractions = jax.tree.map(back, directions), back(fractions)
        if balls is not None:  # ball over the S group slots -> over all N clients
            members = jnp.take(index, own_slot // size, axis=0)  # [rows, S]
            balls = (
                jnp.zeros((own_rows, num_clients), bool)
                .at[jnp.arange(own_rows)[:, None], members]
                .set(back(balls), mode="drop")
            )
        return directions, fractions, balls

    def rows_round(state, data, key, offset, byz, shard=None):
        """One round for the clients [offset, offset + n) whose state is given; ``data`` holds all N.

        Every device draws the minibatches of all N clients from the same key (no communication), so a
        sharded round computes exactly what the unsharded one does. ``shard`` (device, devices): run the
        subgroups group-major across the devices (see ``grouped_directions``).
        """
        num_rows = leading_dim(state.params)
        k_local, k_batch, k_group = jax.random.split(key, 3)
        own = lambda tree: jax.tree.map(lambda x: lax.dynamic_slice_in_dim(x, offset, num_rows), tree)

        def one_local_step(e, st):
            batch = own(sample_minibatch(data, batch_size, jax.random.fold_in(k_local, e)))
            grads = jax.vmap(grad_fn)(st.params, batch)
            return apply_client_updates(optimizer, st, grads)

        if pseudo:  # E minibatches per client, leaves [N, E, B, ...]: the same at every model x_i
            batch = jax.vmap(lambda e: sample_minibatch(data, batch_size, jax.random.fold_in(k_local, e)))(
                jnp.arange(local_steps)
            )
            batch = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), batch)
        else:
            if local_steps and local_steps_form == "sgd":
                state = lax.fori_loop(0, local_steps, one_local_step, state)
            batch = sample_minibatch(data, batch_size, k_batch)
        if subgroups > 1 and num_rows == leading_dim(data):  # one device holds every client: group-major
            directions, ball_frac, balls = grouped_directions(state.params, batch, k_group, byz)
        elif shard is not None:  # the groups split over the devices, group-major
            directions, ball_frac, balls = grouped_directions(
                state.params, batch, k_group, byz, shard=shard + (offset,)
            )
        else:
            directions, ball_frac, balls = clustered_directions(state.params, batch, k_group, offset, byz)
        state = apply_client_updates(optimizer, state, directions)
        return state._replace(round=state.round + 1), jnp.mean(ball_frac), balls

    def metrics(ball_fraction, balls):
        out = {"ball_fraction": ball_fraction}
        if balls is not None:
            out["cluster_labels"] = ball_components(balls)
        return out

    def round_fn(state, data, key, participants=None):
        num_clients = leading_dim(state.params)
        if subgroups > num_clients:
            raise ValueError(f"subgroups={subgroups} must not exceed the number of clients ({num_clients})")
        # the attackers among the clients this round holds (an explicit argument of every kernel below)
        byz = None if byzantine_j is None else client_rows(byzantine_j, participants)
        if mesh is None or num_clients % mesh.size:
            state, ball_fraction, balls = rows_round(state, data, key, 0, byz)
            return state, metrics(ball_fraction, balls)

        shard = None
        if (
            subgroups > 1
            and subgroups % mesh.size == 0
            and group_major_fits(
                num_clients, sum(int(x.size) for x in jax.tree.leaves(state.params)) // num_clients, memory_budget
            )
        ):
            shard = mesh.size

        def local(st, d, k, b):
            device = lax.axis_index(CLIENT_AXIS)
            offset = device * leading_dim(st.params)
            st, frac, balls = rows_round(st, d, k, offset, b, None if shard is None else (device, shard))
            return st, lax.pmean(frac, CLIENT_AXIS), balls

        spec = ClientState(P(CLIENT_AXIS), P(CLIENT_AXIS), P(), P(), P(CLIENT_AXIS))
        out_specs = (spec, P(), P(CLIENT_AXIS) if track_clusters else None)
        state, ball_fraction, balls = jax.shard_map(
            local, mesh=mesh, in_specs=(spec, P(), P(), P()), out_specs=out_specs, check_vma=False
        )(state, data, key, byz)
        return state, metrics(ball_fraction, balls)

    hparams = dict(
        learning_rate=learning_rate,
        batch_size=batch_size,
        momentum=momentum,
        momentum_form=momentum_form,
        clustering_steps=clustering_steps,
        radius=radius,
        quantile=quantile,
        local_steps=local_steps,
        local_steps_form=local_steps_form,
        subgroups=subgroups,
        chunk_size=chunk_size,
        memory_budget=memory_budget,
        devices=1 if mesh is None else mesh.size,
        track_clusters=track_clusters,
        quantile_select=quantile_select,
        attack=None if attack is None else attack.attack_name,
    )
    return FederatedAlgorithm("federated-clustering", init, round_fn, hparams)


def pairwise_cost(num_clients: int, num_params: int, num_clusters: int = 1, subgroups: int = 1):
    """(bytes, messages) of one Federated-Clustering round: every pair of a subgroup exchanges a model and a
    gradient, N^2 / G pairs in all (a client's own pair is local, so 2 (N^2 / G - N) messages)."""
    del num_clusters
    pairs = num_clients * num_clients / subgroups
    return int(FLOAT_BYTES * num_params * 2 * pairs), int(2 * (pairs - num_clients))


def _from_task(task, *, clients_per_round: int, **options) -> FederatedAlgorithm:
    """Federated-Clustering for ``task``, its auto chunk resolved for the ``clients_per_round`` a round sees
    and the task's model size (from shapes only, nothing computed), so it is recorded in ``hparams``."""
    if options.get("chunk_size", "auto") == "auto":
        shapes = jax.eval_shape(task.init_params, jax.random.PRNGKey(0))
        options.update(num_clients=clients_per_round, model_size=sum(int(x.size) for x in jax.tree.leaves(shapes)))
    return federated_clustering(task.example_loss, **options)


SPECS = (
    AlgorithmSpec(
        "federated-clustering",
        _from_task,
        builder=federated_clustering,
        hidden=("num_clients", "model_size"),
        owns_models=True,
        comm_cost=pairwise_cost,
        example_options=dict(quantile=0.2),
        static_hparams=(
            "clustering_steps",
            "subgroups",
            "local_steps_form",
            "chunk_size",
            "memory_budget",
            "mesh",
            "track_clusters",
            "quantile_select",
        ),
        summary="Federated-Clustering (Werner et al., Algorithm 2): every client's Threshold-Clustering of the N "
        "cross-gradients at its model",
    ),
)
