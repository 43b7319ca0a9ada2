"""Robust aggregators: pure, jit-compatible rules that reduce a stacked batch of messages to one.

Every aggregator has the signature ``aggregate(messages, members=None) -> message``: ``messages`` is a
pytree whose leaves carry a leading client axis [N, ...], ``members`` an optional bool [N] selecting the
messages that take part (a cluster's members; None: all). Several leaves form one message (the
coordinates of every leaf together; distances are Euclidean over all of them). A message with a NaN or
infinite coordinate is dropped before any rule runs, as in every average of the package
(:func:`fedjax_clust.core.pytrees.segment_mean`): it cannot be a gradient. With no usable message the result
is NaN, so a group that lost everyone stays visible to the divergence check.

Rules (``AGGREGATORS``, the built-in names of the registry; build one with :func:`make_aggregator`). Each
registers itself where it is defined (``@register_aggregator(name)``, :mod:`fedjax_clust.robust.registry`),
so a new rule is one decorated function, here or in a package of your own (then an entry point of the group
``fedjax_clust.aggregators`` puts it on the command line); its options are its keyword-only parameters:

* ``mean``: the average of the usable messages (FedAvg's rule).
* ``median``: coordinate-wise median (Yin et al. 2018): per coordinate, the middle of the c sorted
  values (the mean of the two middle ones for even c).
* ``trimmed-mean``: coordinate-wise beta-trimmed mean (Yin et al. 2018; SR-FCA Def. 3.2): per
  coordinate, drop the floor(beta c) largest and floor(beta c) smallest values and average the rest;
  ``beta`` in [0, 0.5) (default 0.1).
* ``geometric-median``: argmin_z sum_i ||z - x_i|| by the smoothed Weiszfeld iteration of RFA (Pillutla,
  Kakade and Harchaoui, "Robust Aggregation for Federated Learning", IEEE TSP 2022):
  z <- sum_i w_i x_i / sum_i w_i with w_i = 1 / max(nu, ||z - x_i||), nu = ``smoothing`` (default 1e-6),
  from the mean, until a step moves z by at most ``tolerance`` (default 1e-6) times (the weighted mean
  distance + ||z||), at most ``iterations`` steps (default 100); see :func:`geometric_median` for why.
* ``krum`` / ``multi-krum`` (Blanchard et al. 2017): with f = floor(``fraction`` c) assumed Byzantine
  (default fraction 0.25), each message's score is the sum of its squared distances to its c - f - 2
  nearest other messages (at least 1); Krum returns the message of lowest score, multi-Krum the mean of
  the m = c - f lowest.
* ``centered-clipping`` (Karimireddy et al. 2021, "Learning from history"): v <- v + mean_i
  clip_tau(x_i - v), ``iterations`` times (default 3), with clip_tau(y) = y min(1, tau / ||y||). The paper
  starts from the previous round's aggregate (its momentum); these rules are stateless, so the start is
  the coordinate-wise median (a documented choice), and ``tau`` defaults to the median distance of the
  messages from that start (a scale-free default; pass ``tau`` to fix it).

Costs for N messages of D coordinates: mean O(N D); median / trimmed mean one or two order statistics per
coordinate from the package's order-statistic engine (:mod:`fedjax_clust.ops.order_stats`: on a CPU a search
of at most 64 counting passes for float32, typically far fewer; on an accelerator the loop-free radix select's
9 passes of up to 15 counts; O(passes N D), no sort; the trimmed mean of few messages or few trimmed values
takes a cheaper path, see :func:`trimmed_mean`); geometric median O(steps N D) (steps until the tolerance
is met, at most ``iterations``); Krum an N x N Gram matrix, O(N^2 D); centered clipping
O((iterations + passes) N D) (its start and default tau are medians).

Hyperparameters (``tau``, ``smoothing``, ``tolerance``) enter the arithmetic in the messages' dtype: with
``jax_enable_x64`` and float64 messages an explicit ``tau`` is used in float64, not rounded to float32.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Callable, Optional

import jax
import jax.numpy as jnp

from fedjax_clust.core.control import skip_cond
from fedjax_clust.core.pytrees import finite_rows, leading_dim, row_sq_norms, segment_mean
from fedjax_clust.core.validation import check_int
from fedjax_clust.ops.order_stats import from_order_keys, kth_smallest_keys, max_key, order_keys
from fedjax_clust.privacy.mechanism import PrivateMean
from fedjax_clust.robust.registry import (
    AGGREGATOR_NAME,
    AGGREGATOR_REGISTRY,
    Aggregator,
    AggregatorSpec,
    aggregator_names,
    aggregator_spec,
    register_aggregator,
    rule_and_options,
)

__all__ = [
    "AGGREGATORS",
    "Aggregator",
    "make_aggregator",
    "mean",
    "coordinate_median",
    "trimmed_mean",
    "geometric_median",
    "krum",
    "centered_clipping",
    "aggregate_groups",
    "aggregate_segments",
    "aggregate_segments_with_state",
    "aggregator_metrics",
    "aggregator_state",
    "with_aggregator_state",
    "resolve_aggregator",
]

PyTree = Any


def _usable(messages: PyTree, members) -> jax.Array:
    finite = finite_rows(messages)
    return finite if members is None else finite & jnp.asarray(members, bool)


def _expand(mask, x):
    return mask.reshape((-1,) + (1,) * (x.ndim - 1))


def _nan_if_empty(result: PyTree, count) -> PyTree:
    return jax.tree.map(lambda r: jnp.where(count > 0, r, jnp.nan), result)


def _weighted_sum(x, weights):
    """sum_i w_i x_i over the leading axis as one matrix-vector product (XLA:CPU's column reduction over
    axis 0 was 4x slower for 300 x 10^5); rows with weight 0 are zeroed first (never 0 * NaN)."""
    clean = jnp.where(_expand(weights > 0, x), x, 0)
    return jnp.tensordot(weights.astype(x.dtype), clean, axes=1, precision="highest")


def _weighted_mean(messages: PyTree, weights) -> PyTree:
    """sum_i w_i x_i / sum_i w_i; rows with weight 0 are selected out with ``where`` (never 0 * NaN)."""
    total = jnp.sum(weights)
    return jax.tree.map(lambda x: _weighted_sum(x, weights) / jnp.maximum(total, 1e-30).astype(x.dtype), messages)


@register_aggregator("mean")
def mean(messages: PyTree, members=None) -> PyTree:
    """Average of the usable messages (FedAvg's rule)."""
    usable = _usable(messages, members)
    return _nan_if_empty(_weighted_mean(messages, usable.astype(jnp.float32)), jnp.sum(usable))


def _member_keys(x, usable):
    """[coordinates, N] order keys of the messages (see :mod:`fedjax_clust.ops.order_stats`), one row per
    coordinate; non-members get the largest key, above every finite float's."""
    keys = order_keys(x.reshape(x.shape[0], -1).T)
    return jnp.where(usable[None, :], keys, max_key(keys.dtype))


@register_aggregator("median")
def coordinate_median(messages: PyTree, members=None) -> PyTree:
    """Coordinate-wise median of the usable messages (a selection, not a sort: see
    :mod:`fedjax_clust.ops.order_stats`)."""
    usable = _usable(messages, members)
    count = jnp.sum(usable.astype(jnp.int32))
    lower, upper = jnp.maximum(count - 1, 0) // 2 + 1, count // 2 + 1  # 1-based ranks of the middle values

    def leaf(x):
        keys = _member_keys(x, usable)
        a = kth_smallest_keys(keys, lower)
        # the next order statistic is a again when a repeats, else the smallest key above a
        above = jnp.min(jnp.where(keys > a[:, None], keys, max_key(keys.dtype)), axis=-1)
        b = jnp.where(jnp.sum(keys <= a[:, None], axis=-1, dtype=jnp.int32) >= upper, a, above)
        median = 0.5 * (from_order_keys(a, x.dtype) + from_order_keys(b, x.dtype))
        return median.reshape(x.shape[1:])

    return _nan_if_empty(jax.tree.map(leaf, messages), count)


def _check_beta(beta=None):
    if beta is not None and not 0.0 <= float(beta) < 0.5:
        raise ValueError(f"trimmed-mean beta must be in [0, 0.5), got {beta!r}")


def _check_positive(**options):
    for key in ("smoothing", "tau", "tolerance"):
        if options.get(key) is not None and not float(options[key]) > 0:
            raise ValueError(f"{key} must be > 0, got {options[key]!r}")
    if "iterations" in options:
        check_int("iterations", options["iterations"])


def _check_fraction(fraction=None):
    if fraction is not None and not 0.0 <= float(fraction) < 0.5:
        raise ValueError(f"krum fraction must be in [0, 0.5), got {fraction!r}")


# trimmed_mean's paths (its docstring): values removed one at a time while at most EXTRACT_UP_TO go from each end,
# else one sort per coordinate up to SORT_MESSAGES_UP_TO messages, else two selections
EXTRACT_UP_TO = 3
SORT_MESSAGES_UP_TO = 32


def _most_trimmed(beta, messages: int) -> int:
    """At least floor(beta c) for c messages, the most values trimmed at each end (the slack covers the float32
    count the trimming computes); (c - 1) // 2 when beta is traced (a sweep's per-run value)."""
    try:
        return min(math.floor(float(beta) * messages + 1e-3), (messages - 1) // 2)
    except (TypeError, jax.errors.ConcretizationTypeError):
        return (messages - 1) // 2


def _trims_nothing(num_messages: int, *, beta=0.1) -> bool:
    """The trimmed mean of at most ``num_messages`` messages trims nothing: floor(beta c) = 0 for every count c."""
    return _most_trimmed(beta, num_messages) == 0


@register_aggregator("trimmed-mean", check=_check_beta, mean_for=_trims_nothing)
def trimmed_mean(messages: PyTree, members=None, *, beta: float = 0.1) -> PyTree:
    """Coordinate-wise beta-trimmed mean (SR-FCA Def. 3.2): drop t = min(floor(beta c), (c - 1) // 2) values at
    each end (the cap only bites for a beta within float rounding of 1/2, or a traced beta outside [0, 1/2), a
    negative one trimming nothing).

    When no count of the c rows can trim anything (floor(beta c) = 0: SR-FCA's fewer than 10 clients at
    beta = 0.1) the rule is the members' mean and runs as :func:`mean` (one matrix-vector product: the removal
    path below took 0.16 s where a matrix-vector product takes 0.002 s on 8 messages of 1.25M values, 2 shared
    CPU cores), and :func:`aggregate_segments` takes ``segment_mean``'s one pass for every group at once (the
    spec's ``mean_for``). Otherwise three paths keep the same values (summed in another order), chosen by the static
    sizes: while at most ``EXTRACT_UP_TO`` (3) values go from each end (floor(beta c) for c messages), the
    smallest and the largest remaining value of each coordinate are removed t times (one copy each time) and the
    rest summed, t + 1 passes and no sort; else,
    up to ``SORT_MESSAGES_UP_TO`` (32) messages, each coordinate's values are sorted (non-members last) and the
    positions t .. c - t - 1 summed; with more, a and b, the (t+1)-th and (c-t)-th smallest values, come from
    two selections, and the kept sum is sum_{a < x < b} x plus a and b times the number of their copies inside
    the kept positions. Nothing is subtracted from a total, so an attacker's huge value cannot cancel the
    others' digits. Measured on a 2-core CPU (another job beside it; 10M values, beta = 0.1, seconds for removal /
    sort / selections): 0.25 / 0.81 / 0.84 at c = 6, 0.23 / 1.30 / 2.18 at 20, 0.48 / 1.15 / 2.20 at 30; and
    selections against a sort on 2M values: 1.38 vs 0.17 at c = 6, 0.35 vs 0.19 at 16, 0.16 vs 0.29 at 64. A few
    messages of a large model (SR-FCA's clusters of a 2,048-unit MLP) are the case the first two paths serve.

    Args:
      beta: the trimmed fraction at each end, in [0, 0.5).
    """
    if _trims_nothing(leading_dim(messages), beta=beta):  # the members' mean: one matrix-vector product
        return mean(messages, members)
    usable = _usable(messages, members)
    count = jnp.sum(usable.astype(jnp.int32))
    # at most (c - 1) // 2 from each end: a beta within float rounding of 1/2 (or a traced one a sweep did not
    # check) keeps two values of an even c, as every path below does
    trim = jnp.floor(beta * count.astype(jnp.float32) + 1e-6).astype(jnp.int32)
    trim = jnp.clip(trim, 0, jnp.maximum(count - 1, 0) // 2)  # a traced beta < 0 trims nothing
    kept = jnp.maximum(count - 2 * trim, 1)

    def leaf(x):
        most = _most_trimmed(beta, x.shape[0])
        if most <= EXTRACT_UP_TO:
            values = x.reshape(x.shape[0], -1).T
            removed = jnp.broadcast_to(~usable[None, :], values.shape)  # a non-member counts as removed
            column = jnp.arange(x.shape[0])
            for j in range(most):
                active = j < trim
                low = jnp.argmin(jnp.where(removed, jnp.inf, values), axis=-1)
                removed = removed | (active & (column == low[:, None]))
                high = jnp.argmax(jnp.where(removed, -jnp.inf, values), axis=-1)
                removed = removed | (active & (column == high[:, None]))
            total = jnp.sum(jnp.where(removed, 0, values), axis=-1)
            return (total / kept.astype(x.dtype)).reshape(x.shape[1:])
        if x.shape[0] <= SORT_MESSAGES_UP_TO:
            ordered = jnp.sort(jnp.where(usable[None, :], x.reshape(x.shape[0], -1).T, jnp.inf), axis=-1)
            position = jnp.arange(x.shape[0])
            keep = (position >= trim) & (position < count - trim)
            total = jnp.sum(jnp.where(keep[None, :], ordered, 0), axis=-1)
            return (total / kept.astype(x.dtype)).reshape(x.shape[1:])
        keys = _member_keys(x, usable)
        values = jnp.where(usable[None, :], x.reshape(x.shape[0], -1).T, 0)
        ka, kb = kth_smallest_keys(keys, trim + 1), kth_smallest_keys(keys, jnp.maximum(count - trim, 1))
        a, b = from_order_keys(ka, x.dtype), from_order_keys(kb, x.dtype)
        inside = jnp.sum(jnp.where((keys > ka[:, None]) & (keys < kb[:, None]), values, 0), axis=-1)
        copies_a = jnp.sum(keys <= ka[:, None], axis=-1, dtype=jnp.int32) - trim
        copies_b = (count - trim) - jnp.sum(keys < kb[:, None], axis=-1, dtype=jnp.int32)
        total = jnp.where(
            ka == kb,
            a * (count - 2 * trim).astype(x.dtype),
            inside + a * copies_a.astype(x.dtype) + b * copies_b.astype(x.dtype),
        )
        return (total / kept.astype(x.dtype)).reshape(x.shape[1:])

    return _nan_if_empty(jax.tree.map(leaf, messages), count)


@register_aggregator("geometric-median", check=_check_positive)
def geometric_median(
    messages: PyTree, members=None, *, iterations: int = 100, smoothing: float = 1e-6, tolerance: float = 1e-6
) -> PyTree:
    """Geometric median argmin_z sum_i ||z - x_i|| of the usable messages by smoothed Weiszfeld steps.

    The step is RFA's smoothed Weiszfeld step (Pillutla, Kakade and Harchaoui 2022; Weiszfeld 1937):
    z <- sum_i w_i x_i / sum_i w_i, w_i = 1 / max(nu, ||z - x_i||), nu = ``smoothing``, from the mean of
    the usable messages as in RFA. The stop is our choice: a fixed few steps do not converge when one
    message is far away (one of 15 rows scaled by 1e9: 8 steps from the mean, the rule before, ended 9-19%
    (relative) from the converged median, since the outlier drags the mean and each step only divides its
    pull), so the steps run until one moves z by at most ``tolerance`` times (d_w + ||z||), where
    d_w = c / sum_i w_i is the Weiszfeld-weighted mean distance (the harmonic mean of the c distances: a
    scale of the messages near z that far outliers hardly change) and ||z|| bounds the float rounding of z
    itself; at most ``iterations`` steps (a ``lax.while_loop``). Away from the data points Weiszfeld's
    iteration converges linearly (Kuhn 1973), so the stop lies within a small multiple of ``tolerance`` of
    the fixed point (1e-6 relative on the 1e9 case, after 18-23 steps; 3 steps on 300 Gaussian messages).

    Starting from the coordinate-wise median instead (breakdown point 1/2, not dragged by the outlier) was
    measured too: it saves ~8 steps in the 1e9 case, but the median itself costs about 15 Weiszfeld steps
    on a CPU, and it made the aggregator 2.3x slower on ``fedjax-clust bench --model robust``'s 300
    Gaussian messages of 10^5 coordinates, so the start stays the mean.

    Args:
      iterations: the most Weiszfeld steps (an integer >= 1).
      smoothing: nu > 0, the smallest distance a weight 1 / distance is taken at.
      tolerance: the stop, > 0: a step moving z by at most this times (d_w + ||z||).
    """
    usable = _usable(messages, members)
    count = jnp.sum(usable)
    clean = jax.tree.map(lambda x: jnp.where(_expand(usable, x), x, 0), messages)
    start = _weighted_mean(clean, usable.astype(jnp.float32))

    def norm(tree):
        return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in jax.tree.leaves(tree)))

    def step(carry):
        i, z, _ = carry
        dist = jnp.sqrt(row_sq_norms(jax.tree.map(lambda x, zz: x - zz[None], clean, z)))
        weights = jnp.where(usable, 1.0 / jnp.maximum(dist, smoothing), 0.0)
        new = _weighted_mean(clean, weights)
        total = jnp.sum(weights)
        scale = jnp.where(total > 0, count / jnp.where(total > 0, total, 1), 0) + norm(new)
        return i + 1, new, norm(jax.tree.map(jnp.subtract, new, z)) <= tolerance * scale

    def running(carry):
        i, _, done = carry
        return (i < iterations) & ~done

    _, z, _ = jax.lax.while_loop(running, step, (jnp.int32(0), start, count == 0))
    return _nan_if_empty(z, count)


def _pairwise_sq_dists(clean: PyTree) -> jax.Array:
    """[N, N] squared distances between rows (Gram form, clipped at 0), at full float32 precision."""
    sq = row_sq_norms(clean)
    gram = sum(
        jnp.dot(x.reshape(x.shape[0], -1), x.reshape(x.shape[0], -1).T, precision="highest")
        for x in jax.tree.leaves(clean)
    )
    return jnp.maximum(sq[:, None] + sq[None, :] - 2.0 * gram, 0.0)


@register_aggregator(
    "krum",
    fixed={"multi": False},
    check=_check_fraction,
    summary="Krum over the usable messages: the message of lowest score, the sum of its squared "
    "distances to its c - f - 2 nearest others, f = floor(fraction c) (Blanchard et al. "
    "2017).",
)
def krum(messages: PyTree, members=None, *, fraction: float = 0.25, multi: bool = False) -> PyTree:
    """Krum (``multi=False``) or multi-Krum over the usable messages, f = floor(fraction c) (Blanchard et al.
    2017).

    Args:
      fraction: the share of the c messages assumed Byzantine, f = floor(fraction c), in [0, 0.5).
      multi: False: the message of lowest score (Krum); True: the mean of the c - f lowest (multi-Krum).
    """
    usable = _usable(messages, members)
    n = leading_dim(messages)
    count = jnp.sum(usable.astype(jnp.int32))
    f = jnp.floor(fraction * count.astype(jnp.float32) + 1e-6).astype(jnp.int32)
    neighbours = jnp.clip(count - f - 2, 1, jnp.maximum(count - 1, 1))
    clean = jax.tree.map(lambda x: jnp.where(_expand(usable, x), x, 0), messages)
    d = _pairwise_sq_dists(clean)
    pair_ok = usable[:, None] & usable[None, :] & ~jnp.eye(n, dtype=bool)
    ranked = jnp.sort(jnp.where(pair_ok, d, jnp.inf), axis=1)
    cumulative = jnp.cumsum(jnp.where(jnp.isfinite(ranked), ranked, 0.0), axis=1)
    scores = jnp.take(cumulative, neighbours - 1, axis=1)
    scores = jnp.where(usable, scores, jnp.inf)
    if multi:
        chosen_count = jnp.maximum(count - f, 1)
        order = jnp.argsort(scores)
        rank = jnp.zeros((n,), jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32))
        chosen = usable & (rank < chosen_count)
    else:
        chosen = usable & (jnp.arange(n) == jnp.argmin(scores))
    return _nan_if_empty(_weighted_mean(clean, chosen.astype(jnp.float32)), count)


register_aggregator(
    AggregatorSpec(
        "multi-krum",
        krum,
        fixed={"multi": True},
        check=_check_fraction,
        summary="Multi-Krum over the usable messages: the mean of the c - f of lowest Krum score, f = floor(fraction "
        "c) (Blanchard et al. 2017).",
    )
)


@register_aggregator("centered-clipping", check=_check_positive)
def centered_clipping(messages: PyTree, members=None, *, tau: Optional[float] = None, iterations: int = 3) -> PyTree:
    """Centered clipping from the coordinate-wise median, ``iterations`` steps of radius ``tau`` (Karimireddy
    et al. 2021).

    Args:
      tau: the clipping radius > 0 (None: the median distance of the messages from the start).
      iterations: the clipping steps (an integer >= 1).
    """
    usable = _usable(messages, members)
    count = jnp.sum(usable)
    clean = jax.tree.map(lambda x: jnp.where(_expand(usable, x), x, 0), messages)
    start = jax.tree.map(lambda m: jnp.where(jnp.isfinite(m), m, 0), coordinate_median(messages, usable))

    def distances(v):
        return jnp.sqrt(row_sq_norms(jax.tree.map(lambda x, vv: x - vv[None], clean, v)))

    if tau is None:
        d0 = distances(start)
        radius = coordinate_median(d0[:, None], usable)[0]
    else:  # in the messages' dtype (float64 under jax_enable_x64), never rounded to float32
        radius = jnp.asarray(tau, jnp.result_type(*jax.tree.leaves(messages)))

    def step(_, v):
        dist = distances(v)
        scale = jnp.where(usable, jnp.minimum(1.0, radius / jnp.maximum(dist, 1e-30)), 0.0)
        # sum_i s_i (x_i - v) = sum_i s_i x_i - (sum_i s_i) v, as one matrix-vector product
        shift = jax.tree.map(
            lambda x, vv: (_weighted_sum(x, scale) - jnp.sum(scale) * vv) / jnp.maximum(count, 1).astype(x.dtype),
            clean,
            v,
        )
        return jax.tree.map(jnp.add, v, shift)

    return _nan_if_empty(jax.lax.fori_loop(0, iterations, step, start), count)


# the built-in rules, in the order the tools list them (plugins: aggregator_names())
AGGREGATORS = AGGREGATOR_REGISTRY.registered()
# a registered aggregator's name (the command line reads its choices from the registry, plugins included)
AggregatorName = Annotated[str, AGGREGATOR_NAME]


def make_aggregator(name: str, **options) -> Aggregator:
    """The aggregator ``name`` (a registered name: ``AGGREGATORS`` and the plugins, see
    :func:`~fedjax_clust.robust.registry.aggregator_names`) with its options bound, as an
    :class:`~fedjax_clust.robust.registry.Aggregator` (a jit-compatible callable carrying its name);
    ValueError on a bad name or option value. An option given as None takes its default. Options:
    trimmed-mean ``beta``; geometric-median ``iterations`` (the cap), ``smoothing``, ``tolerance``; krum /
    multi-krum ``fraction``; centered-clipping ``tau``, ``iterations`` (and a plugin's, its keyword-only
    parameters). ``name`` may carry its options as a run records them (``make_aggregator("trimmed-mean(beta=0.2)")``,
    :func:`~fedjax_clust.robust.registry.parse_rule`: what ``--aggregator`` reads)."""
    name, options = rule_and_options(name, options, "aggregator")
    return Aggregator(aggregator_spec(name), options)


def resolve_aggregator(aggregator) -> Callable:
    """A registered aggregator name (its default options) or a rule from :func:`make_aggregator` (or any
    callable carrying an ``aggregator_name``), as a function; ValueError otherwise."""
    rule = make_aggregator(aggregator) if isinstance(aggregator, str) else aggregator
    if not callable(rule) or not hasattr(rule, "aggregator_name"):
        raise ValueError(
            f"aggregator must be a name in {list(aggregator_names())} or built by make_aggregator, got {aggregator!r}"
        )
    return rule


def aggregate_segments(aggregate: Callable, messages: PyTree, labels, num_groups: int, weights=None, key=None):
    """(the aggregate of each group, members per group): labels [N] in [0, num_groups), result leaves
    [num_groups, ...]. The mean goes through :func:`fedjax_clust.core.pytrees.segment_mean` (one pass); any other
    rule runs once per group on the group's member mask, one group after another (``lax.map``, so memory
    stays one group's), and a group without members is skipped (:func:`fedjax_clust.core.control.skip_cond`,
    also under a sweep's vmap) and gets 0. A group whose members' messages are all unusable gets NaN, as in
    ``segment_mean``. ``weights`` (float [N], None: uniform) weight the mean (:mod:`fedjax_clust.core.weighting`);
    a robust rule takes none (ValueError). A :class:`~fedjax_clust.privacy.mechanism.PrivateMean` (central
    differential privacy) computes every group's clipped, noised mean itself from ``key``, the round's privacy
    key (:func:`fedjax_clust.core.keys.privacy_key`), and says every group moved (its counts are all 1: whether a
    group had members is not released); other rules ignore ``key``."""
    if isinstance(aggregate, PrivateMean):
        if aggregate.adaptive is not None:
            raise ValueError(
                "an adaptive private mean keeps its clip bound as state: call aggregate_segments_with_state with "
                "the state aggregator_state(aggregate) started (this algorithm does not carry it)"
            )
        return aggregate.segments(messages, labels, num_groups, key, weights)
    if weights is not None and getattr(aggregate, "aggregator_name", None) != "mean":
        name = getattr(aggregate, "aggregator_name", aggregate)
        raise ValueError(f"client weights apply to the mean; aggregator {name!r} takes none")
    equals_mean = getattr(aggregate, "equals_mean", None)
    if aggregate.aggregator_name == "mean" or (equals_mean is not None and equals_mean(leading_dim(messages))):
        return segment_mean(messages, labels, num_groups, weights)
    members = jax.ops.segment_sum(jnp.ones(labels.shape, jnp.float32), labels, num_segments=num_groups)
    zero = jax.tree.map(lambda x: jnp.zeros(x.shape[1:], x.dtype), messages)
    # the groups with members first (in group order): step j aggregates the j-th of them, so under a sweep's
    # vmap step j runs while some run has more than j groups, each run its own j-th group
    order = jnp.argsort(members == 0, stable=True)
    filled = jnp.sum(members > 0)

    def one(j):
        mask = labels == order[j]
        return skip_cond(j < filled, lambda m: aggregate(messages, m), lambda m: zero, mask)

    per_step = jax.lax.map(one, jnp.arange(num_groups))
    return jax.tree.map(lambda x: x[jnp.argsort(order)], per_step), members


def aggregator_state(aggregate: Callable):
    """The server state a stateful aggregator starts from (its ``init_state()``: the adaptive clip bound of a
    :class:`~fedjax_clust.privacy.mechanism.PrivateMean`), None for a stateless one. An algorithm that takes
    stateful aggregators keeps it with its server state and passes it to :func:`aggregate_segments_with_state`
    every round."""
    init = getattr(aggregate, "init_state", None)
    return None if init is None else init()


def with_aggregator_state(server: dict, held) -> dict:
    """An algorithm's server dict with the aggregator's state ``held`` under ``"aggregator"`` (unchanged when
    ``held`` is None: a stateless aggregator keeps nothing)."""
    return server if held is None else {**server, "aggregator": held}


def aggregate_segments_with_state(
    aggregate: Callable, state, messages: PyTree, labels, num_groups: int, weights=None, key=None
):
    """(per-group aggregates, members per group, the aggregator's next state): :func:`aggregate_segments` for a
    stateless aggregator (``state`` None, returned as is), the aggregator's ``stateful_segments`` otherwise."""
    if state is None:
        if aggregator_state(aggregate) is not None:
            raise ValueError(f"aggregator {aggregate!r} keeps state, but none was given (the algorithm lost it)")
        return (*aggregate_segments(aggregate, messages, labels, num_groups, weights, key), None)
    step = getattr(aggregate, "stateful_segments", None)
    if step is None:
        raise TypeError(f"aggregator {aggregate!r} was given a state but has no stateful_segments")
    return step(state, messages, labels, num_groups, key, weights)


def aggregator_metrics(aggregate: Callable, state) -> dict:
    """What the aggregator's state adds to a round's metrics (``{"dp_clip": C}`` for an adaptive clip)."""
    report = getattr(aggregate, "state_metrics", None)
    return {} if state is None or report is None else report(state)


def aggregate_groups(aggregate: Callable, messages: PyTree, labels, num_groups: int, weights=None, key=None) -> PyTree:
    """Each row replaced by the aggregate of the rows sharing its label (see :func:`aggregate_segments`)."""
    per_group, _ = aggregate_segments(aggregate, messages, labels, num_groups, weights, key)
    return jax.tree.map(lambda x: jnp.take(x, labels, axis=0), per_group)
