"""Byzantine attacks: what a malicious client sends instead of its honest message, inside the jitted round.

An attack is a pure function ``attack(messages, byzantine, key, *, axis=0, center=None, radius=None)``:
``messages`` is a pytree whose leaves carry the client axis at ``axis`` (0, or -1 for the client-axis-last
layout of Federated-Clustering's small-model rows), holding the honest message every client would send
(its gradient, its cross-gradient at another client's model, its momentum, ...); ``byzantine`` is a bool
mask over that axis. The result has the same structure with the Byzantine clients' entries replaced (a
``where`` over the mask: no Python branch per client). Attackers are omniscient, as the threat model of
Werner et al. (§3.1.1) allows: they see every honest message of the round, and ``center`` / ``radius``
(the victim's Threshold-Clustering centre and ball radius) when the algorithm has them.

Attacks (``ATTACKS``, the built-in names of the registry, built with :func:`make_attack`; magnitudes the papers
leave open are our choice). Each registers itself where it is defined (``@register_attack(name)``,
:mod:`fedjax_clust.robust.registry`, whose spec also says whether it needs the victim's ball, ``needs_ball``,
or attacks the data, ``on_data``), so a new attack is one decorated function, here or in a package of your
own (an entry point of the group ``fedjax_clust.attacks`` puts it on the command line); its options are its
keyword-only parameters after ``axis``, ``center`` and ``radius``:

* ``large-gradient``: the attacker's own honest message times ``scale`` (default 100). The thesis (§2.4,
  "Defense against Byzantine attacks", Fig. 2.6) says "very large gradients" without a magnitude.
* ``sign-flip`` (alias ``bit-flip``): its own message times ``-scale`` (default scale 1: the sign bit
  flipped, the thesis's "gradients with opposite signs").
* ``gaussian``: i.i.d. N(0, ``sigma``^2) coordinates (default sigma 100).
* ``alie`` ("a little is enough", Baruch et al. 2019): per coordinate mu - z s, with mu and s the mean and
  standard deviation of the honest messages and z = Phi^-1((n - s_) / n), s_ = floor(n / 2 + 1) - f for n
  clients of which f are Byzantine (``z`` overrides it).
* ``ipm`` (inner-product manipulation, Xie et al. 2020): -``epsilon`` times the honest mean (default 0.1).
* ``nan`` / ``inf`` / ``neg-inf``: every coordinate NaN, +inf or -inf.
* ``ball-edge``: the omniscient attack on Threshold-Clustering (§3.1.1): every attacker sits just inside the
  victim's ball, at ``(1 - margin) radius`` (margin default 0.01) from its centre, in the direction
  opposite to the centre itself (so the pull adds up round after round against the victim's own gradient:
  a bounded sign flip). It needs the algorithm's centre and radius; with the quantile rule the radius is
  the quantile of the honest messages' distances from the centre (the attackers then shift the ranking
  by their own count, a documented approximation).
* ``label-flip``: a data attack (``DATA_ATTACKS``, ``on_data``), not a message: the attackers train honestly on flipped
  labels y -> C - 1 - y (see :mod:`fedjax_clust.algorithms.label_flipping`). ``make_algorithm`` applies it; calling
  it on messages is an error.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import jax
import jax.numpy as jnp
from jax.scipy.stats import norm

from fedjax_clust.core.validation import check_real, is_traced
from fedjax_clust.robust.registry import (
    ATTACK_NAME,
    ATTACK_REGISTRY,
    Attack,
    AttackSpec,
    attack_names,
    attack_spec,
    register_attack,
    rule_and_options,
)

__all__ = ["ATTACKS", "DATA_ATTACKS", "NEEDS_BALL", "Attack", "make_attack", "needs_ball", "replace_byzantine"]

PyTree = Any


def _mask_like(mask, x, axis):
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    return mask.reshape(shape)


def replace_byzantine(messages: PyTree, byzantine, attacked: PyTree, axis: int = 0) -> PyTree:
    """``attacked`` where ``byzantine`` (bool over the client ``axis``), ``messages`` elsewhere;
    ``attacked`` leaves broadcast against the messages' (e.g. one message for every attacker)."""
    return jax.tree.map(
        lambda x, a: jnp.where(_mask_like(byzantine, x, axis), jnp.broadcast_to(a, x.shape), x), messages, attacked
    )


def _honest_moments(x, honest, axis):
    """Mean and standard deviation (ddof 0) over the honest entries along ``axis``, keeping the axis."""
    m = _mask_like(honest, x, axis).astype(x.dtype)
    count = jnp.maximum(jnp.sum(honest), 1).astype(x.dtype)
    mean = jnp.sum(jnp.where(m > 0, x, 0), axis=axis, keepdims=True) / count
    var = jnp.sum(jnp.where(m > 0, jnp.square(x - mean), 0), axis=axis, keepdims=True) / count
    return mean, jnp.sqrt(var)


def _real(value):
    """A Python float of a concrete option; a traced one (a sweep's argument, :meth:`Attack.with_numbers`) as it is."""
    return value if is_traced(value) else float(value)


def _scaled(messages, byzantine, scale, axis):
    # scale: a float, or a traced scalar (a sweep's program over several scales); the messages keep their dtype
    return replace_byzantine(messages, byzantine, jax.tree.map(lambda x: (scale * x).astype(x.dtype), messages), axis)


def _check_real(name, key, **bounds):
    """A spec's ``check``: option ``key`` of attack ``name`` must be a real number within ``bounds``."""

    def check(**options):
        if options.get(key) is not None:
            check_real(f"{name} {key}", options[key], **bounds)

    return check


@register_attack("large-gradient", check=_check_real("large-gradient", "scale"))
def _large_gradient(messages, byzantine, key, *, axis=0, center=None, radius=None, scale: float = 100.0):
    """The attacker's own honest message times ``scale`` (the thesis's "very large gradients", §2.4).

    Args:
      scale: the factor (any real number; 1 leaves the messages as they are).
    """
    return _scaled(messages, byzantine, _real(scale), axis)


@register_attack("sign-flip", check=_check_real("sign-flip", "scale"))
def _sign_flip(messages, byzantine, key, *, axis=0, center=None, radius=None, scale: float = 1.0):
    """The attacker's own honest message times -``scale`` (the sign bit flipped: "gradients with opposite
    signs").

    Args:
      scale: the factor of the flipped message (-1 leaves the messages as they are).
    """
    return _scaled(messages, byzantine, -_real(scale), axis)


register_attack(
    AttackSpec(
        "bit-flip",
        _sign_flip,
        check=_check_real("bit-flip", "scale"),
        summary="The attacker's own honest message times -scale (an alias of sign-flip).",
    )
)


@register_attack("gaussian", check=_check_real("gaussian", "sigma", low=0.0, low_open=True))
def _gaussian(messages, byzantine, key, *, axis=0, center=None, radius=None, sigma: float = 100.0):
    """I.i.d. N(0, ``sigma``^2) coordinates instead of the attacker's message.

    Args:
      sigma: the standard deviation, > 0.
    """
    leaves, treedef = jax.tree.flatten(messages)
    keys = jax.random.split(key, len(leaves))
    noise = [(sigma * jax.random.normal(k, x.shape, x.dtype)).astype(x.dtype) for k, x in zip(keys, leaves)]
    return replace_byzantine(messages, byzantine, jax.tree.unflatten(treedef, noise), axis)


@register_attack("alie", check=_check_real("alie", "z"), reads_others=True)
def _alie(messages, byzantine, key, *, axis=0, center=None, radius=None, z: Optional[float] = None):
    """A little is enough (Baruch et al. 2019): per coordinate, the honest mean minus z times the honest
    standard deviation.

    Args:
      z: the number of standard deviations (None: Phi^-1((n - s) / n), s = floor(n / 2 + 1) - f).
    """
    honest = ~byzantine
    if z is None:
        n = jnp.asarray(byzantine.shape[0], jnp.float32)
        f = jnp.sum(byzantine).astype(jnp.float32)
        s = jnp.floor(n / 2.0 + 1.0) - f
        z = norm.ppf(jnp.clip((n - s) / n, 0.5, 1.0 - 1e-6))

    def leaf(x):
        mean, std = _honest_moments(x, honest, axis)
        return (mean - z * std).astype(mean.dtype)  # z may be traced (a sweep over z): the message keeps its dtype

    return replace_byzantine(messages, byzantine, jax.tree.map(leaf, messages), axis)


@register_attack("ipm", check=_check_real("ipm", "epsilon", low=0.0, low_open=True), reads_others=True)
def _ipm(messages, byzantine, key, *, axis=0, center=None, radius=None, epsilon: float = 0.1):
    """Inner-product manipulation (Xie et al. 2020): -``epsilon`` times the honest mean.

    Args:
      epsilon: the factor of the negated honest mean, > 0.
    """
    return replace_byzantine(
        messages,
        byzantine,
        jax.tree.map(lambda x: (-epsilon * _honest_moments(x, ~byzantine, axis)[0]).astype(x.dtype), messages),
        axis,
    )


def _constant(value):
    def attack(messages, byzantine, key, *, axis=0, center=None, radius=None):
        return replace_byzantine(
            messages, byzantine, jax.tree.map(lambda x: jnp.full((), value, x.dtype), messages), axis
        )

    return attack


register_attack(AttackSpec("nan", _constant(jnp.nan), summary="Every coordinate NaN."))
register_attack(AttackSpec("inf", _constant(jnp.inf), summary="Every coordinate +inf."))
register_attack(AttackSpec("neg-inf", _constant(-jnp.inf), summary="Every coordinate -inf."))


@register_attack(
    "ball-edge", needs_ball=True, check=_check_real("ball-edge", "margin", low=0.0, high=1.0, high_open=True)
)
def _ball_edge(messages, byzantine, key, *, axis=0, center=None, radius=None, margin: float = 0.01):
    """Just inside the victim's Threshold-Clustering ball, (1 - ``margin``) radius from its centre, opposite
    to the centre itself (Werner et al. §3.1.1's omniscient attack; Federated-Clustering only).

    Args:
      margin: how far inside the ball, as a share of its radius, in [0, 1).
    """
    if center is None or radius is None:
        raise ValueError(
            "the ball-edge attack needs the victim's Threshold-Clustering centre and radius: use it "
            "with federated-clustering"
        )
    centre_norm = jnp.sqrt(sum(jnp.sum(jnp.square(c)) for c in jax.tree.leaves(center)))
    unit = jax.tree.map(lambda c: -c / jnp.maximum(centre_norm, 1e-30), center)
    reach = (1.0 - margin) * radius

    def leaf(x, c, u):
        point = c + reach * u  # one point, broadcast over the client axis
        return jnp.expand_dims(point, axis if axis >= 0 else x.ndim + axis)

    return replace_byzantine(messages, byzantine, jax.tree.map(leaf, messages, center, unit), axis)


def _check_classes(num_classes=None):
    if num_classes is not None and (
        isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2
    ):
        raise ValueError(f"label-flip num_classes must be an integer >= 2, got {num_classes!r}")


@register_attack("label-flip", on_data=True, check=_check_classes)
def _label_flip(messages, byzantine, key, *, axis=0, center=None, radius=None, num_classes: Optional[int] = None):
    """The attackers train honestly on flipped labels y -> C - 1 - y (a data attack: ``make_algorithm``
    applies it, see :mod:`fedjax_clust.algorithms.label_flipping`).

    Args:
      num_classes: C (None: read from the task).
    """
    raise ValueError(
        "label-flip attacks the training data, not the messages: build the algorithm with "
        "fedjax_clust.algorithms.make_algorithm(..., attack=...), which applies it"
    )


# the built-in attacks, in the order the tools list them (plugins: attack_names()), and their kinds
ATTACKS = ATTACK_REGISTRY.registered()
NEEDS_BALL = tuple(n for n in ATTACKS if attack_spec(n).needs_ball)  # need a Threshold-Clustering centre, radius
DATA_ATTACKS = tuple(n for n in ATTACKS if attack_spec(n).on_data)  # attack the training data, not the messages
# a registered attack's name (the command line reads its choices from the registry, plugins included)
AttackName = Annotated[str, ATTACK_NAME]


def make_attack(name: str, **options) -> Attack:
    """The attack ``name`` (a registered name: ``ATTACKS`` and the plugins, see
    :func:`~fedjax_clust.robust.registry.attack_names`) with its options bound, as an
    :class:`~fedjax_clust.robust.registry.Attack` (a jit-compatible callable carrying its name and its
    spec's kinds); ValueError on a bad name or option. An option given as None takes its default. ``name`` may
    carry its options as a run records them (``make_attack("ipm(epsilon=5.0)")``,
    :func:`~fedjax_clust.robust.registry.parse_rule`: what ``--attack`` reads)."""
    name, options = rule_and_options(name, options, "attack")
    return Attack(attack_spec(name), options)


def needs_ball(attack) -> bool:
    """Whether ``attack`` (from :func:`make_attack`, or a function carrying an ``attack_name``) aims at
    Threshold-Clustering's ball and needs the victim's centre and radius: its spec says so."""
    if isinstance(attack, Attack):
        return attack.needs_ball
    name = getattr(attack, "attack_name", None)
    return name in attack_names() and attack_spec(name).needs_ball
