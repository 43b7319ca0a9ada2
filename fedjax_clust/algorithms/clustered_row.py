"""One row of Federated-Clustering: the messages at one model and their Threshold-Clustering.

Werner et al., *Provably Personalized and Robust Federated Learning*, Algorithm 2, for one client i:
  line 5: every client j of the row sends its message g_j(x_{i,t-1}) (its minibatch gradient, or the E-step
          pseudo-gradient, :func:`pseudo_gradient`) at client i's model;
  line 6: v_{i,t} = Threshold-Clustering({g_j(x_{i,t-1})}_j; 1 cluster; seeded at g_i(x_{i,t-1})).

This module is the math of a row and nothing else: :func:`cluster_row` maps (model i, the row's minibatches)
to (v_i, the fraction of the row inside the final ball, the ball). Which rows run together, in what chunks,
grouped how and on which device is the execution plan's business
(:mod:`fedjax_clust.parallel.row_plan`), as FedJAX keeps its ``for_each_client`` backends apart from its
algorithms; :mod:`fedjax_clust.algorithms.federated_clustering` joins the two.

A row's gradients stay one block per parameter leaf in the layout the vmapped gradient produces ([S, ...],
or [..., S] for models below :data:`COLUMN_LAYOUT_MAX_PARAMS`), and the clustering works on the blocks as
they are (:func:`fedjax_clust.ops.clustering.threshold_cluster_blocks`): no concatenated or transposed copy.

With local differential privacy (``RowRule.local_privacy``, :mod:`fedjax_clust.privacy.local`) every message of
the row, client i's own included, is clipped and noised by its sender before anything else sees it, keyed by
:func:`row_privacy_key`.

Under attack (Algorithm 2 line 5 with Byzantine clients), every attacker answers every model's request: in
row i its message is replaced before Threshold-Clustering, with the row's honest messages, centre (client
i's own message) and radius visible to it (omniscient, :func:`attacked_messages`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
from jax import lax

from fedjax_clust.core.pytrees import num_entries
from fedjax_clust.ops.clustering import quantile_rank, threshold_cluster_blocks
from fedjax_clust.ops.crossgrad import messages_at
from fedjax_clust.ops.order_stats import kth_smallest

__all__ = [
    "RowRule",
    "cluster_row",
    "pseudo_gradient",
    "client_axis_for",
    "attacked_messages",
    "row_attack_key",
    "row_privacy_key",
]

# Below this many parameters a row's gradients are laid out client-axis-last ([D, S]): XLA's CPU GEMVs over
# a tiny D are ~2x faster that way; above it the vmapped gradient's natural [S, D] layout avoids a
# transposed copy of the block (measured on the MLP of the scale benchmark, see docs/performance.md).
COLUMN_LAYOUT_MAX_PARAMS = 256


@dataclasses.dataclass(frozen=True, eq=False)
class RowRule:
    """What one row computes (the math; nothing about how rows are executed).

    ``message_fn(params, client_data) -> pytree``: a client's message at a model (its gradient, or
    :func:`pseudo_gradient`); ``clustering_steps``: M, Threshold-Clustering's steps; ``radius`` / ``quantile``:
    its radius rule, exactly one (a scalar radius: one cluster); ``select``: how the quantile rule finds its
    k-th distance ("search", "radix" or "auto": the same set, see
    :func:`fedjax_clust.ops.clustering.resolve_select`); ``attack``: the Byzantine attack or None, with
    ``attack_needs_ball`` when it aims at the victim's ball; ``track_clusters``: return the final ball.
    ``radius`` and ``quantile`` may be traced values (a sweep's), checked before tracing. ``local_privacy``: a
    :class:`~fedjax_clust.privacy.local.LocalGaussian` every sender applies to its message (None: none).
    """

    message_fn: Callable
    clustering_steps: int
    radius: Any = None
    quantile: Any = None
    select: str = "auto"
    attack: Optional[Callable] = None
    attack_needs_ball: bool = False
    track_clusters: bool = False
    local_privacy: Optional[Any] = None


def pseudo_gradient(grad_fn: Callable, learning_rate, params, batches):
    """(x - y_E) / eta after E plain SGD steps y_{e+1} = y_e - eta g(y_e) from y_0 = x on the client's E
    minibatches (``batches`` leaves [E, B, ...]): the paper authors' scripts' message with local steps."""

    def step(y, batch):
        return jax.tree.map(lambda p, g: p - learning_rate * g, y, grad_fn(y, batch)), None

    y, _ = lax.scan(step, params, batches)
    return jax.tree.map(lambda p, q: (p - q) / learning_rate, params, y)


def client_axis_for(params_i) -> int:
    """Layout of a row's message block: client axis last for small models, first for large ones."""
    size = num_entries(params_i)
    return -1 if size < COLUMN_LAYOUT_MAX_PARAMS else 0


def row_attack_key(key, client):
    """The attack's key for client ``client``'s row: fold_in(fold_in(key, 1), client), ``key`` being the
    round's grouping key (Federated-Clustering's own stream since attacks were added; the other algorithms
    draw from :func:`fedjax_clust.core.keys.attack_key`)."""
    return jax.random.fold_in(jax.random.fold_in(key, 1), client)


def row_privacy_key(key, client):
    """The local-privacy noise's key for client ``client``'s row: fold_in(fold_in(key, 2), client), from the
    round's grouping key as :func:`row_attack_key`; its senders' noise is fold_in(that, their position)."""
    return jax.random.fold_in(jax.random.fold_in(key, 2), client)


def _attack_radius(rule: RowRule, messages, center, byz, axis):
    """The victim's ball radius an omniscient attacker aims at: the fixed radius, or the quantile of the
    honest messages' distances from the centre."""
    if rule.quantile is None:
        return jnp.asarray(rule.radius, jnp.float32)

    def sq_dist(x, c):  # per client: summed over every axis but the client axis
        other = tuple(a for a in range(x.ndim) if a != axis % x.ndim)
        return jnp.sum(jnp.square(x - jnp.expand_dims(c, axis)), axis=other)

    sq = sum(sq_dist(x, c) for x, c in zip(jax.tree.leaves(messages), jax.tree.leaves(center)))
    honest = ~byz
    k = jnp.maximum(quantile_rank(jnp.sum(honest), rule.quantile), 1)  # the sorted row's entry k - 1, no sort
    return jnp.sqrt(kth_smallest(jnp.where(honest, sq, jnp.inf), k, select=rule.select))


def attacked_messages(rule: RowRule, messages, own, axis: int, byz, key):
    """The row's messages with the Byzantine clients' (``byz``, bool over the row) replaced by the attack's
    answers; the centre is client ``own``'s message and the radius the victim's (when the attack aims at it)."""
    if rule.attack is None:
        raise ValueError("attacked_messages needs a rule with an attack")
    center = ball_radius = None
    if rule.attack_needs_ball:
        center = jax.tree.map(lambda x: lax.dynamic_index_in_dim(x, own, axis=axis, keepdims=False), messages)
        ball_radius = _attack_radius(rule, messages, center, byz, axis)
    return rule.attack(messages, byz, key, axis=axis, center=center, radius=ball_radius)


def cluster_row(rule: RowRule, params_i, own, batch, valid=None, unbatched=False, byz=None, key=None, client=None):
    """v_i, the fraction of the row inside the final ball, and the ball (None unless ``rule.track_clusters``).

    ``params_i``: client i's model; ``batch``: the row's S minibatches (leaves [S, ...]); ``own``: client i's
    position among them (the seed of Threshold-Clustering); ``valid``: bool [S] (padding slots of a subgroup
    are False) or None; ``unbatched``: the row runs alone (a chunk of one: no vmapped batch axis). With
    attackers (``byz``, bool [S]) their messages are the attack's, keyed by :func:`row_attack_key` (``key``,
    ``client``: client i's index among all clients, so the same row draws the same attack in every layout).
    """
    axis = client_axis_for(params_i)
    messages = messages_at(rule.message_fn, params_i, batch, client_axis=axis)
    if rule.local_privacy is not None:  # every sender clips and noises before sending (attackers replace theirs)
        messages = rule.local_privacy.privatize(messages, axis, row_privacy_key(key, client))
    if byz is not None:
        messages = attacked_messages(rule, messages, own, axis, byz, row_attack_key(key, client))
    leaves, treedef = jax.tree.flatten(messages)
    blocks = [x.reshape((x.shape[0], -1)) if axis == 0 else x.reshape((-1, x.shape[-1])) for x in leaves]
    own_point = [lax.dynamic_index_in_dim(b, own, axis=axis, keepdims=False) for b in blocks]
    center, ball = threshold_cluster_blocks(
        blocks,
        own_point,
        client_axis=axis % 2,
        steps=rule.clustering_steps,
        radius=rule.radius,
        quantile=rule.quantile,
        valid=valid,
        unbatched=unbatched,
        select=rule.select,
    )
    members = ball.shape[0] if valid is None else jnp.maximum(jnp.sum(valid), 1)
    direction = jax.tree.unflatten(treedef, [c.reshape(p.shape) for c, p in zip(center, jax.tree.leaves(params_i))])
    return direction, jnp.sum(ball) / members, (ball if rule.track_clusters else None)
