"""Central differential privacy at a trusted server: the clipped, noised mean of what the clients send.

Trust model: the server is trusted with every message (it sees each client's update in the clear, as in
McMahan et al. 2018, "Learning Differentially Private Recurrent Language Models", DP-FedAvg); what is
protected is everything the server releases -- the models of every round -- against anyone who sees them,
other clients included. Secure aggregation is out of scope: it would hide the messages from the server too,
and rule out the robust aggregators.

:class:`PrivateMean` replaces an algorithm's per-group mean (``aggregator=`` of Global, Ground-truth, IFCA and
HypCluster; :func:`fedjax_clust.robust.aggregators.aggregate_segments` hands it the round's privacy key). For
the messages m_i of a round's clients (after any Byzantine replacement: attackers are clipped like everyone)
and their groups c_i, group k's aggregate is

    (sum_{i : c_i = k} clip_C(m_i) + N(0, z^2 C^2 I)) / d_k,    clip_C(m) = m min(1, C / ||m||),

with ||m|| the Euclidean norm over every leaf of the message (McMahan et al. 2018, Alg. 1, the fixed-
denominator estimator; flat clipping). A client contributes to one group's sum only, so the vector of all G
sums has L2 sensitivity C under adding or removing one client, and independent noise z C on every group's sum
is one Gaussian mechanism of multiplier z whatever the assignment: the loss-based assignment of IFCA and
HypCluster, made by each client from its own data and the released models, is covered. The denominator d_k:

* ``"expected"`` (default): the round's expected number of clients, q N, over the G groups: d_k = q N / G for
  every group (exact for one group, DP-FedAvg's; with several groups it assumes groups of equal size, so a
  larger group steps further and a smaller one less -- a documented bias, no extra release);
* ``"noisy-count"``: d_k = max(1, n_k + N(0, (r z)^2)) with n_k group k's number of usable messages and r =
  ``count_noise_ratio``: the counts are released too (sensitivity 1), and sums and counts together are one
  Gaussian mechanism of multiplier (z^-2 + (r z)^-2)^(-1/2)
  (:func:`~fedjax_clust.privacy.accounting.combined_noise_multiplier`), which the accountant uses.

With adaptive clipping (``adaptive``, :mod:`fedjax_clust.privacy.adaptive`) C is the server's state C_t,
moved after every aggregate towards a quantile of the norms by a noised count the accountant adds to the round.

Every group moves every round, by noise alone when it had no member: whether a group had members is not
released (a mean over members would reveal it). A message whose squared norm is not a finite float (a diverged
client, a slot of a
truncated Poisson sample that drew no one -- :mod:`fedjax_clust.algorithms.participation` --, or an attacker's
entries beyond about 1.8e19, whose squares overflow float32) contributes nothing: what a client contributes is
then 0 or a vector of norm at most C, so the sensitivity stays C.
The noise is float noise from JAX's PRNG (simulated DP: no secure sampling, no floating-point attack defence).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Optional

import jax
import jax.numpy as jnp

from fedjax_clust.core.pytrees import leading_dim, row_sq_norms
from fedjax_clust.core.validation import check_choice, check_real
from fedjax_clust.privacy.accounting import combined_noise_multiplier
from fedjax_clust.privacy.adaptive import ADAPTIVE_STREAM, AdaptiveClip

__all__ = ["PrivateMean", "DENOMINATORS", "clip_rows", "row_norms"]

PyTree = Any
DENOMINATORS = ("expected", "noisy-count")


def row_norms(tree: PyTree) -> tuple:
    """(float [N] each row's Euclidean norm over every leaf, 0 for an unusable row; bool [N] the usable rows): a
    row whose squared norm is not a finite float -- a NaN or infinite entry, or entries so large that the
    squares overflow (beyond about 1.8e19 in float32) -- is unusable."""
    squared = row_sq_norms(tree)
    usable = jnp.isfinite(squared)
    return jnp.sqrt(jnp.where(usable, squared, 0.0)), usable


def clip_rows(tree: PyTree, bound, norms=None) -> tuple:
    """(each row scaled by min(1, bound / ||row||), norm over every leaf; bool [N] the usable rows): an unusable
    row (:func:`row_norms`) becomes 0. One pass computes the norms (and with them which rows are usable), one
    more the scaled rows (fused into what reads them); ``norms`` ((norms, usable) of :func:`row_norms`) skips
    the first."""
    norms, usable = row_norms(tree) if norms is None else norms
    scale = jnp.where(usable, jnp.minimum(1.0, bound / jnp.maximum(norms, 1e-30)), 0.0)
    clipped = jax.tree.map(lambda x: jnp.where(_rows(usable, x), x * scale.reshape(_shape(x)).astype(x.dtype), 0), tree)
    return clipped, usable


def _shape(x):
    return (-1,) + (1,) * (x.ndim - 1)


def _rows(mask, x):
    return mask.reshape(_shape(x))


@dataclasses.dataclass(frozen=True, eq=False)
class PrivateMean:
    """The clipped, noised per-group mean of the module docstring: clip bound ``clip`` (C > 0), noise multiplier
    ``noise_multiplier`` (z > 0), ``expected_clients`` (q N, the clients a round expects: the fixed
    denominator's numerator), ``denominator`` ("expected" or "noisy-count") and ``count_noise_ratio`` (r > 0,
    the count noise's std over z). With ``adaptive`` (:class:`~fedjax_clust.privacy.adaptive.AdaptiveClip`)
    ``clip`` is the initial bound C_0 and the bound is server state: :meth:`init_state` and
    :meth:`stateful_segments` (which :func:`fedjax_clust.robust.aggregators.aggregate_segments_with_state`
    calls). Equal only to itself, as a built aggregator."""

    clip: float
    noise_multiplier: float
    expected_clients: float
    denominator: str = "expected"
    count_noise_ratio: float = 10.0
    adaptive: Optional[AdaptiveClip] = None

    aggregator_name: ClassVar[str] = "private-mean"

    def __post_init__(self):
        check_real("dp_clip", self.clip, low=0.0, low_open=True)
        check_real("dp_noise", self.noise_multiplier, low=0.0, low_open=True)
        check_real("expected_clients", self.expected_clients, low=0.0, low_open=True)
        check_choice("dp_denominator", self.denominator, DENOMINATORS)
        check_real("dp_count_noise_ratio", self.count_noise_ratio, low=0.0, low_open=True)

    @property
    def effective_noise_multiplier(self) -> float:
        """The multiplier of the one Gaussian mechanism an aggregate's release is: z, or with noisy counts and
        adaptive clipping's count (z^-2 + [(r z)^-2] + [(2 sigma_b)^-2])^(-1/2)."""
        z = self.noise_multiplier
        parts = [z]
        if self.denominator == "noisy-count":
            parts.append(self.count_noise_ratio * z)
        if self.adaptive is not None:
            parts.append(self.adaptive.count_multiplier)
        return combined_noise_multiplier(*parts) if len(parts) > 1 else z

    def init_state(self):
        """The server state the aggregator keeps between rounds: the clip bound C_0 (float32 scalar) when it
        adapts, None otherwise."""
        return None if self.adaptive is None else jnp.asarray(self.clip, jnp.float32)

    def stateful_segments(self, state, messages: PyTree, labels, num_groups: int, key, weights=None):
        """(group aggregates, float [G] of ones, the next state) with the clip bound ``state`` (from
        :meth:`init_state`); the sums' noise draws from ``key`` as :meth:`segments`, the adaptive count's from
        ``key`` folded with its own stream, so with ``dp_clip_lr=0`` a run matches the fixed bound's."""
        if self.adaptive is None:
            return (*self.segments(messages, labels, num_groups, key, weights), state)
        norms, usable = row_norms(messages)
        per_group, moved = self.segments(messages, labels, num_groups, key, weights, clip=state, norms=(norms, usable))
        after = self.adaptive.next_clip(norms, usable, state, jax.random.fold_in(key, ADAPTIVE_STREAM))
        return per_group, moved, after

    def state_metrics(self, state) -> dict:
        """The round's metrics of the state: ``dp_clip``, the bound the next round clips at (adaptive only)."""
        return {} if self.adaptive is None else {"dp_clip": state}

    def segments(self, messages: PyTree, labels, num_groups: int, key, weights=None, *, clip=None, norms=None):
        """(group aggregates, leaves [G, ...]; float [G] of ones: every group moves) of the messages (leading
        axis N) in groups ``labels`` ([N] in [0, G)), noise from ``key``; ``clip`` overrides the bound (the
        adaptive state), ``norms`` are the messages' :func:`row_norms` when already computed."""
        if key is None:
            raise ValueError("the private mean needs the round's privacy key (aggregate_segments(..., key=))")
        if weights is not None:
            raise ValueError(
                "client weights do not apply to the private mean (a weight would scale a client's sensitivity)"
            )
        clip = self.clip if clip is None else clip
        clipped, usable = clip_rows(messages, clip, norms)
        leaves, treedef = jax.tree.flatten(clipped)
        k_count, *k_leaves = jax.random.split(key, len(leaves) + 1)
        std = self.noise_multiplier * clip
        sums = [jax.ops.segment_sum(x, labels, num_segments=num_groups) for x in leaves]
        noisy = [s + (std * jax.random.normal(k, s.shape, jnp.float32)).astype(s.dtype) for s, k in zip(sums, k_leaves)]
        if self.denominator == "expected":
            denominator = jnp.full((num_groups,), self.expected_clients / num_groups, jnp.float32)
        else:
            counts = jax.ops.segment_sum(usable.astype(jnp.float32), labels, num_segments=num_groups)
            noise = self.count_noise_ratio * self.noise_multiplier * jax.random.normal(k_count, (num_groups,))
            denominator = jnp.maximum(counts + noise, 1.0)
        means = [s / denominator.reshape(_shape(s)).astype(s.dtype) for s in noisy]
        return jax.tree.unflatten(treedef, means), jnp.ones((num_groups,), jnp.float32)

    def __call__(self, messages: PyTree, members=None, *, key=None) -> PyTree:
        """The private mean of the ``members`` (bool [N], None: all) as one group."""
        n = leading_dim(messages)
        labels = jnp.zeros((n,), jnp.int32)
        if members is not None:
            messages = jax.tree.map(lambda x: jnp.where(_rows(jnp.asarray(members, bool), x), x, jnp.nan), messages)
        per_group, _ = self.segments(messages, labels, 1, key)
        return jax.tree.map(lambda x: x[0], per_group)

    def describe(self) -> dict:
        """What a run records of the mechanism."""
        out = dict(
            clip=self.clip,
            noise_multiplier=self.noise_multiplier,
            denominator=self.denominator,
            expected_clients=self.expected_clients,
        )
        if self.denominator == "noisy-count":
            out["count_noise_ratio"] = self.count_noise_ratio
        if self.adaptive is not None:
            out.update(self.adaptive.describe())
        return out
