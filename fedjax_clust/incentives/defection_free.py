"""Collaboration between two competing firms (Werner's thesis, ch. 3, §3.3-3.4): the schemes and Algorithm 5.

Two firms, l (low quality) and h (high quality), hold models x_l, x_h and private losses f(x; l), f(x; h) in
[0, 1]; a model's quality is q(x) = 1 - (f(x; l) + f(x; h)) / 2 (eq. 3.1) and the firms' revenues are the
duopoly's (:mod:`fedjax_clust.incentives.duopoly`). A round of each scheme, with ``grad_f`` the gradient of the
joint objective f = (f(.; l) + f(.; h)) / 2 (what the two firms compute together by exchanging losses and
gradients, never data) and ``grad_own`` a firm's gradient of its own loss:

* ``complete`` (Complete Collaboration, FedAvg between the firms): both step on grad_f;
* ``high-shares`` (only the high-quality firm shares): l steps on grad_f, h on its own loss;
* ``low-shares`` (only the low-quality firm shares): h steps on grad_f, l on its own loss;
* ``defection-free`` (Algorithm 5): h steps on grad_f with alpha_h (<= 1/L); then, if q_l < q_l* and
  q_l / q_h <= rho* = q_l* / q_h*, l takes steps on grad_f while its quality stays at most
  q_hat = B(rho_{t-1}, q_h,t / q_h,t-1) q_h,t (step 8), the largest quality at which h's revenue does not fall.

Choices where Algorithm 5 is open (documented, recorded in the results): steps 9-11 ("while q_l <= q_hat: set
alpha_l, update") are a bounded ``lax.while_loop`` of at most ``max_inner`` trial steps: a trial step of size
alpha_l is kept when the new quality is at most q_hat, and otherwise alpha_l is halved and the step retried, so
q_l never crosses q_hat (the step that would cross it is not taken); alpha_l restarts at ``lr_low`` each round.
The Nash bargaining solution needs the best attainable quality q_max = max_x q(x) (Proposition 2): the caller
gives it (:func:`best_quality` finds it by gradient descent on f). The inner loop is bounded by q_hat only, as
written: when the high firm's step is large (alpha_h = 1/L on a quadratic reaches x* at once) the low firm may
pass q_l* within one round; Proposition 5's paced schedules (a smaller alpha_h) reach (q_l*, q_h*) (tested).
Revenues are each firm's in its actual role: should the low firm overtake (only the high firm sharing), eq.
(3.4) is applied with the roles swapped, where the thesis's Fig. 3.2a keeps the labels and plots a negative
revenue.

:func:`run_scheme` runs T rounds as one ``lax.scan`` and records per round both qualities, both revenues,
rho_t = q_l / q_h and the Nash bargaining objective N(q_l, q_h; q_l,0, q_h,0).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.core.option_groups import warn_deprecated_keyword
from fedjax_clust.incentives.duopoly import bound_formula, nash_bargaining, revenues

__all__ = ["SCHEMES", "SchemeResult", "SchemeSettings", "run_scheme", "best_quality"]

SCHEMES = ("complete", "high-shares", "low-shares", "defection-free")


class SchemeResult(NamedTuple):
    """Per round (leading axis T + 1: the start, then every round): qualities, revenues, rho and N; the final
    models; the Nash bargaining solution the run aimed at."""

    q_low: np.ndarray
    q_high: np.ndarray
    u_low: np.ndarray
    u_high: np.ndarray
    rho: np.ndarray
    nash: np.ndarray
    x_low: object
    x_high: object
    q_low_star: float
    q_high_star: float


def _utilities(q_l, q_h):
    """eq. (3.4) with each firm in its actual role (whichever is ahead is the high-quality one)."""
    lo, hi = jnp.minimum(q_l, q_h), jnp.maximum(q_l, q_h)
    u_lo, u_hi = revenues(lo, hi)
    return jnp.where(q_l <= q_h, u_lo, u_hi), jnp.where(q_l <= q_h, u_hi, u_lo)


def _settings_of(settings: Optional[SchemeSettings], legacy: dict) -> SchemeSettings:
    """``settings``, or the settings made from run_scheme's deprecated keywords in ``legacy`` (a DeprecationWarning
    pointed at run_scheme's caller); any other keyword is a TypeError, as Python raises."""
    unknown = [k for k in legacy if k not in _SETTINGS_FIELDS]
    if unknown:
        raise TypeError(f"run_scheme() got an unexpected keyword argument {unknown[0]!r}")
    if legacy and settings is not None:
        raise ValueError(f"give {next(iter(legacy))} inside settings=SchemeSettings(...) or as a keyword, not both")
    if settings is None:
        if not legacy:
            raise TypeError("run_scheme() needs settings=SchemeSettings(lr_high=..., lr_low=...)")
        instead = "give settings=fedjax_clust.incentives.defection_free.SchemeSettings(...)"
        warn_deprecated_keyword("run_scheme", next(iter(legacy)), instead, stacklevel=3)
        return SchemeSettings(**legacy)
    if not isinstance(settings, SchemeSettings):
        raise ValueError(f"settings must be a SchemeSettings, got {settings!r}")
    return settings


def best_quality(quality: Callable, x0, *, learning_rate: float, steps: int = 2000) -> float:
    """max_x q(x) estimated by ``steps`` of gradient ascent on ``quality`` from ``x0`` (the q_max a run of
    Algorithm 5 needs; exact in the limit on a convex task)."""
    grad = jax.grad(quality)

    def step(x, _):
        return jax.tree.map(lambda a, g: a + learning_rate * g, x, grad(x)), None

    x, _ = jax.lax.scan(step, x0, None, length=steps)
    return float(quality(x))


@dataclasses.dataclass(frozen=True)
class SchemeSettings:
    """The numbers of a scheme's run: the firms' step sizes ``lr_high`` / ``lr_low`` (> 0), ``q_max`` (the
    defection-free scheme's best attainable quality, from which the Nash bargaining solution is computed with
    the start; a float or, batched, one per run), ``max_inner`` (the most trial steps of the low firm per round,
    Algorithm 5 steps 7-11) and ``monotone`` (Algorithm 5 only: a step that would lower the stepping firm's
    quality is not taken, §3.4's assumption 4)."""

    lr_high: float
    lr_low: float
    q_max: Any = None
    max_inner: int = 50
    monotone: bool = True


_SETTINGS_FIELDS = ("lr_high", "lr_low", "q_max", "max_inner", "monotone")


def run_scheme(
    scheme: str,
    loss_low: Callable,
    loss_high: Callable,
    x_low,
    x_high,
    *,
    rounds: int,
    settings: Optional[SchemeSettings] = None,
    quality: Callable | None = None,
    data=None,
    key=None,
    batched: bool = False,
    **legacy,
) -> SchemeResult:
    """``rounds`` rounds of ``scheme`` (module docstring) from models ``x_low``, ``x_high`` (pytrees) with
    losses ``loss_low(x)`` = f(x; l) and ``loss_high(x)`` = f(x; h) in [0, 1], with the step sizes and the rest of
    :class:`SchemeSettings` (its ``q_max``, defection-free only: the best attainable quality; the Nash bargaining
    solution is computed from it and the start).
    ``quality(x)`` replaces q = 1 - (f(x; l) + f(x; h)) / 2 where the firms' training losses are not the
    quality the market sees (e.g. cross-entropies for training, accuracy on the target distribution as q);
    the firms still step on the gradient of (f(x; l) + f(x; h)) / 2. With ``data`` (any pytree, e.g. the
    firms' images) every function is called as ``fn(x, data)``: the data are then an argument of the compiled
    program, not constants folded into it. The settings' ``monotone`` (Algorithm 5 only): a step that would
    lower the stepping firm's quality is not taken (§3.4's assumption 4, "model qualities can only improve or stay
    the same", which Proposition 3 rests on: on a convex task a step never lowers it; with a neural network and an
    accuracy as quality one can).

    ``key`` (a PRNG key) makes the steps stochastic, as the thesis's PyTorch SGD: the two losses are then called
    as ``loss(x, data, k)`` and draw their minibatch with ``k``, a fresh key for every step (round t's key is
    fold_in(key, t); the high firm's step uses fold_in(., 0), the low firm's i-th trial step fold_in(., 1 + i);
    inside the joint gradient f(.; l) gets fold_in(., 0) and f(.; h) fold_in(., 1)). The quality never takes a
    key. ``batched``: ``x_low``, ``x_high`` (and ``key``, and ``q_max`` if an array) carry a leading axis of
    independent runs (seeds or starting points), all vmapped into one compiled program; every array of the
    result then has that leading axis, ``q_low_star`` / ``q_high_star`` too.

    Deprecated (0.3.0, ``legacy``): the settings' fields as keywords (``lr_high=``, ``lr_low=``, ``q_max=``,
    ``max_inner=``, ``monotone=``) still make the settings, with a DeprecationWarning."""
    from fedjax_clust.core.validation import check_int, check_real

    settings = _settings_of(settings, legacy)
    lr_high, lr_low, q_max = settings.lr_high, settings.lr_low, settings.q_max
    max_inner, monotone = settings.max_inner, settings.monotone

    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    rounds = check_int("rounds", rounds, 1)
    lr_high = check_real("lr_high", lr_high, low=0.0, low_open=True)
    lr_low = check_real("lr_low", lr_low, low=0.0, low_open=True)
    max_inner = check_int("max_inner", max_inner, 1)
    stochastic = key is not None

    def bind(d):
        """(quality, grad f, grad f(.; l), grad f(.; h)) with the data ``d`` bound (None: no data argument); with
        ``key`` every gradient takes the step's key as a second argument."""
        call = (lambda fn: fn) if data is None else (lambda fn: lambda x: fn(x, d))
        q = call(quality) if quality is not None else None
        if stochastic:

            def f_l(x, k):
                return loss_low(x, d, k)

            def f_h(x, k):
                return loss_high(x, d, k)

            def joint(x, k):
                return 0.5 * (f_l(x, jax.random.fold_in(k, 0)) + f_h(x, jax.random.fold_in(k, 1)))
        else:
            own_l, own_h = call(loss_low), call(loss_high)

            def f_l(x, k):
                return own_l(x)

            def f_h(x, k):
                return own_h(x)

            def joint(x, k):
                return 0.5 * (own_l(x) + own_h(x))

        if q is None:  # eq. (3.1): q = 1 - (f(x; l) + f(x; h)) / 2 (deterministic losses only)
            q = lambda x: 1.0 - joint(x, None)  # noqa: E731
        return q, jax.grad(joint), jax.grad(f_l), jax.grad(f_h)

    if quality is None and stochastic:
        raise ValueError("with a key (stochastic losses) give the quality function: q cannot be a minibatch loss")

    def step(x, g, lr):
        return jax.tree.map(lambda a, b: a - lr * b, x, g)

    def quality_at(x, d):
        return bind(d)[0](x)

    start_quality = jax.jit(jax.vmap(quality_at, in_axes=(0, None)) if batched else quality_at)
    q_l0 = np.atleast_1d(np.asarray(start_quality(x_low, data), np.float64))
    q_h0 = np.atleast_1d(np.asarray(start_quality(x_high, data), np.float64))
    for a, b in zip(q_l0, q_h0):
        if not (0 < a < b <= 1):
            raise ValueError(f"the starting qualities must satisfy 0 < q_l < q_h <= 1, got q_l={a:.6g}, q_h={b:.6g}")
    if scheme == "defection-free" and q_max is None:
        raise ValueError("the defection-free scheme needs q_max, the best attainable quality (best_quality)")
    q_maxes = np.broadcast_to(np.asarray(np.nan if q_max is None else q_max, np.float64), q_l0.shape)
    stars = np.asarray(
        [
            nash_bargaining(a, b, max(float(m), b)) if np.isfinite(m) else (np.nan, np.nan)
            for a, b, m in zip(q_l0, q_h0, q_maxes)
        ],
        np.float64,
    )

    def run(x_l, x_h, d, start, star, run_key):
        quality_of, grad_f, grad_l, grad_h = bind(d)
        q_l0, q_h0 = start[0], start[1]
        q_l_star, q_h_star = star[0], star[1]
        rho_star = q_l_star / q_h_star

        def low_updates(x_l, q_h_prev, q_h_now, q_l_prev, k):
            """Algorithm 5 steps 7-11."""
            q_l = quality_of(x_l)
            go = (q_l < q_l_star) & (q_l / q_h_now <= rho_star)
            q_hat = bound_formula(q_l_prev / q_h_prev, q_h_now / q_h_prev, jnp.sqrt) * q_h_now

            def cond(carry):
                _, lr, i, _ = carry
                return go & (i < max_inner) & (lr > 0)

            def body(carry):
                x, lr, i, q = carry
                trial = step(x, grad_f(x, jax.random.fold_in(k, 1 + i)), lr)
                q_trial = quality_of(trial)
                keep = (q_trial <= q_hat) & ((q_trial >= q) if monotone else True)
                x = jax.tree.map(lambda a, b: jnp.where(keep, a, b), trial, x)
                return x, jnp.where(keep, lr, lr / 2), i + 1, jnp.where(keep, q_trial, q)

            x_new, _, _, _ = jax.lax.while_loop(cond, body, (x_l, jnp.asarray(lr_low, jnp.float32), 0, q_l))
            return x_new

        def record(x_l, x_h):
            q_l, q_h = quality_of(x_l), quality_of(x_h)
            u_l, u_h = _utilities(q_l, q_h)
            u_l0, u_h0 = _utilities(q_l0, q_h0)
            return q_l, q_h, u_l, u_h, q_l / q_h, (u_l - u_l0) * (u_h - u_h0)

        def round_fn(carry, t):
            x_l, x_h = carry
            k = jax.random.fold_in(run_key, t)
            k_h, k_l = jax.random.fold_in(k, 0), jax.random.fold_in(k, 1)
            if scheme == "complete":
                x_l, x_h = step(x_l, grad_f(x_l, k_l), lr_low), step(x_h, grad_f(x_h, k_h), lr_high)
            elif scheme == "high-shares":
                x_l, x_h = step(x_l, grad_f(x_l, k_l), lr_low), step(x_h, grad_h(x_h, k_h), lr_high)
            elif scheme == "low-shares":
                x_l, x_h = step(x_l, grad_l(x_l, k_l), lr_low), step(x_h, grad_f(x_h, k_h), lr_high)
            else:
                q_l_prev, q_h_prev = quality_of(x_l), quality_of(x_h)
                stepped = step(x_h, grad_f(x_h, k_h), lr_high)
                if monotone:  # assumption 4: the high firm keeps its model when the step would lower its quality
                    better = quality_of(stepped) >= q_h_prev
                    stepped = jax.tree.map(lambda a, b: jnp.where(better, a, b), stepped, x_h)
                x_h = stepped
                x_l = low_updates(x_l, q_h_prev, quality_of(x_h), q_l_prev, k)
            return (x_l, x_h), record(x_l, x_h)

        (x_l_end, x_h_end), trace = jax.lax.scan(round_fn, (x_l, x_h), jnp.arange(1, rounds + 1))
        first = record(x_l, x_h)
        return x_l_end, x_h_end, tuple(jnp.concatenate([jnp.atleast_1d(a), t]) for a, t in zip(first, trace))

    run_key = jax.random.PRNGKey(0) if key is None else key  # unused by deterministic losses
    starts = jnp.asarray(np.stack([q_l0, q_h0], -1), jnp.float32)
    stars32 = jnp.asarray(stars, jnp.float32)
    if batched:
        keys = run_key if key is not None else jnp.stack([run_key] * q_l0.size)
        x_l, x_h, trace = jax.jit(jax.vmap(run, in_axes=(0, 0, None, 0, 0, 0)))(
            x_low, x_high, data, starts, stars32, keys
        )
        return SchemeResult(*(np.asarray(t) for t in trace), x_l, x_h, stars[:, 0], stars[:, 1])
    x_l, x_h, trace = jax.jit(run)(x_low, x_high, data, starts[0], stars32[0], run_key)
    return SchemeResult(*(np.asarray(t) for t in trace), x_l, x_h, float(stars[0, 0]), float(stars[0, 1]))
