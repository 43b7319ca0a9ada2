"""Byzantine attacks: what a malicious client sends instead of its honest message, inside the jitted round.

An attack is a pure function ``attack(messages, byzantine, key, *, axis=0, center=None, radius=None)``:
``messages`` is a pytree whose leaves carry the client axis at ``axis`` (0, or -1 for the client-axis-last
layout of Federated-Clustering's small-model rows), holding the honest message every client would send
(its gradient, its cross-gradient at another client's model, its momentum, ...); ``byzantine`` is a bool
mask over that axis. The result has the same structure with the Byzantine clients' entries replaced (a
``where`` over the mask: no Python branch per client). Attackers are omniscient, as the threat model of
Werner et al. (§3.1.1) allows: they see every honest message of the round, and ``center`` / ``radius``
(the victim's Threshold-Clustering centre and ball radius) when the algorithm has them.

Attacks (``ATTACKS``, built with :func:`make_attack`; magnitudes the papers leave open are our choice):

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
* ``label-flip``: a data attack (``DATA_ATTACKS``), not a message: the attackers train honestly on flipped
  labels y -> C - 1 - y (see :mod:`fedjax_clust.algorithms.label_flipping`). ``make_algorithm`` applies it; calling
  it on messages is an error.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Literal

import jax
import jax.numpy as jnp
from jax.scipy.stats import norm

from fedjax_clust.core.validation import check_real

__all__ = ["ATTACKS", "DATA_ATTACKS", "NEEDS_BALL", "make_attack", "replace_byzantine"]

PyTree = Any

ATTACKS = ("large-gradient", "sign-flip", "bit-flip", "gaussian", "alie", "ipm", "nan", "inf", "neg-inf",
           "ball-edge", "label-flip")
AttackName = Literal[ATTACKS]
NEEDS_BALL = ("ball-edge",)  # attacks that need a Threshold-Clustering centre and radius
DATA_ATTACKS = ("label-flip",)  # attacks on the attackers' training data instead of their messages


def _mask_like(mask, x, axis):
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    return mask.reshape(shape)


def replace_byzantine(messages: PyTree, byzantine, attacked: PyTree, axis: int = 0) -> PyTree:
    """``attacked`` where ``byzantine`` (bool over the client ``axis``), ``messages`` elsewhere;
    ``attacked`` leaves broadcast against the messages' (e.g. one message for every attacker)."""
    return jax.tree.map(lambda x, a: jnp.where(_mask_like(byzantine, x, axis), jnp.broadcast_to(a, x.shape), x),
                        messages, attacked)


def _honest_moments(x, honest, axis):
    """Mean and standard deviation (ddof 0) over the honest entries along ``axis``, keeping the axis."""
    m = _mask_like(honest, x, axis).astype(x.dtype)
    count = jnp.maximum(jnp.sum(honest), 1).astype(x.dtype)
    mean = jnp.sum(jnp.where(m > 0, x, 0), axis=axis, keepdims=True) / count
    var = jnp.sum(jnp.where(m > 0, jnp.square(x - mean), 0), axis=axis, keepdims=True) / count
    return mean, jnp.sqrt(var)


def _scaled(messages, byzantine, key, *, axis=0, center=None, radius=None, scale=100.0):
    return replace_byzantine(messages, byzantine, jax.tree.map(lambda x: scale * x, messages), axis)


def _gaussian(messages, byzantine, key, *, axis=0, center=None, radius=None, sigma=100.0):
    leaves, treedef = jax.tree.flatten(messages)
    keys = jax.random.split(key, len(leaves))
    noise = [sigma * jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves)]
    return replace_byzantine(messages, byzantine, jax.tree.unflatten(treedef, noise), axis)


def _alie(messages, byzantine, key, *, axis=0, center=None, radius=None, z=None):
    honest = ~byzantine
    if z is None:
        n = jnp.asarray(byzantine.shape[0], jnp.float32)
        f = jnp.sum(byzantine).astype(jnp.float32)
        s = jnp.floor(n / 2.0 + 1.0) - f
        z = norm.ppf(jnp.clip((n - s) / n, 0.5, 1.0 - 1e-6))

    def leaf(x):
        mean, std = _honest_moments(x, honest, axis)
        return mean - z * std
    return replace_byzantine(messages, byzantine, jax.tree.map(leaf, messages), axis)


def _ipm(messages, byzantine, key, *, axis=0, center=None, radius=None, epsilon=0.1):
    return replace_byzantine(messages, byzantine,
                             jax.tree.map(lambda x: -epsilon * _honest_moments(x, ~byzantine, axis)[0], messages),
                             axis)


def _constant(value):
    def attack(messages, byzantine, key, *, axis=0, center=None, radius=None):
        return replace_byzantine(messages, byzantine, jax.tree.map(lambda x: jnp.full((), value, x.dtype), messages),
                                 axis)
    return attack


def _ball_edge(messages, byzantine, key, *, axis=0, center=None, radius=None, margin=0.01):
    if center is None or radius is None:
        raise ValueError("the ball-edge attack needs the victim's Threshold-Clustering centre and radius: use it "
                         "with federated-clustering")
    centre_norm = jnp.sqrt(sum(jnp.sum(jnp.square(c)) for c in jax.tree.leaves(center)))
    unit = jax.tree.map(lambda c: -c / jnp.maximum(centre_norm, 1e-30), center)
    reach = (1.0 - margin) * radius

    def leaf(x, c, u):
        point = c + reach * u  # one point, broadcast over the client axis
        return jnp.expand_dims(point, axis if axis >= 0 else x.ndim + axis)
    return replace_byzantine(messages, byzantine, jax.tree.map(leaf, messages, center, unit), axis)


def _data_attack(name, num_classes):
    def attack(messages, byzantine, key, *, axis=0, center=None, radius=None):
        raise ValueError(f"{name} attacks the training data, not the messages: build the algorithm with "
                         "fedjax_clust.algorithms.make_algorithm(..., attack=...), which applies it")
    attack.on_data, attack.num_classes = True, num_classes
    return attack


_OPTIONS = {"large-gradient": ("scale",), "sign-flip": ("scale",), "bit-flip": ("scale",), "gaussian": ("sigma",),
            "alie": ("z",), "ipm": ("epsilon",), "nan": (), "inf": (), "neg-inf": (), "ball-edge": ("margin",),
            "label-flip": ("num_classes",)}


def make_attack(name: str, **options) -> Callable:
    """The attack ``name`` (see ``ATTACKS``) with its options bound; ValueError on a bad name or option."""
    if name not in ATTACKS:
        raise ValueError(f"unknown attack {name!r}; expected one of {list(ATTACKS)}")
    unknown = sorted(set(options) - set(_OPTIONS[name]))
    if unknown:
        raise ValueError(f"attack {name!r} takes no option {unknown[0]!r}; "
                         f"its options: {list(_OPTIONS[name]) or 'none'}")
    for key, value in options.items():
        if value is None:
            continue
        if key in ("sigma", "epsilon"):
            check_real(f"{name} {key}", value, low=0.0, low_open=True)
        if key in ("scale", "z"):
            check_real(f"{name} {key}", value)
        if key == "margin":
            check_real("ball-edge margin", value, low=0.0, high=1.0, high_open=True)
        if key == "num_classes" and (isinstance(value, bool) or not isinstance(value, int) or value < 2):
            raise ValueError(f"label-flip num_classes must be an integer >= 2, got {value!r}")
    if name in ("sign-flip", "bit-flip"):
        rule = functools.partial(_scaled, scale=-float(options.get("scale", 1.0)))
    elif name in DATA_ATTACKS:
        rule = _data_attack(name, options.get("num_classes"))
    elif name == "large-gradient":
        rule = functools.partial(_scaled, scale=float(options.get("scale", 100.0)))
    else:
        rule = {"gaussian": _gaussian, "alie": _alie, "ipm": _ipm, "nan": _constant(jnp.nan), "inf": _constant(jnp.inf),
                "neg-inf": _constant(-jnp.inf), "ball-edge": _ball_edge}[name]
        rule = functools.partial(rule, **{k: v for k, v in options.items() if v is not None})
    rule.attack_name = name  # type: ignore[attr-defined]
    return rule
