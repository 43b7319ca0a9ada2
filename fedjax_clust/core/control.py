"""Control flow that keeps skipping work under ``jax.vmap``.

``lax.cond(pred, f, g, *x)`` runs one branch. Under ``jax.vmap`` with a batched predicate (one predicate
per batch member: per run of a sweep, see :mod:`fedjax_clust.run.sweep`) JAX turns it into
``select(pred, f(x), g(x))``: both branches run for every member, every time. :func:`skip_cond` computes the
same values, but its batched form is

    cond(any(pred), lambda: select(pred, f(x), g(x)), lambda: g(x))

so the expensive branch runs only when at least one member takes it (the members that do not take it get
g's values, exactly as with ``select``). A group of a robust aggregate that no run fills, or a CFL split that
no run makes this round, then costs nothing, as in a single run. The batched form is itself a
:func:`skip_cond`, so nested ``vmap`` levels each keep the skip.

The branches may close over arrays and tracers: :func:`skip_cond` traces each branch to a jaxpr once and
passes what it closes over as explicit operands of a :class:`jax.custom_batching.custom_vmap` function,
whose batching rule is the form above. Like ``custom_vmap``, it supports forward-mode differentiation only
(the rounds that use it differentiate nothing through it).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.extend
import jax.numpy as jnp
from jax import lax
from jax.custom_batching import custom_vmap

__all__ = ["skip_cond"]


def _evaluate(closed, consts, operands):
    """The jaxpr ``closed`` (traced on ``operands``' structure) evaluated with its closed-over values
    replaced by ``consts``."""
    return jax.extend.core.jaxpr_as_fun(jax.extend.core.ClosedJaxpr(closed.jaxpr, list(consts)))(
        *jax.tree.leaves(operands)
    )


def _select(pred, on_true, on_false):
    """Per batch member (leading axis of ``pred``, [B]): ``on_true``'s row where pred, ``on_false``'s else."""

    def pick(a, b):
        return lax.select(jnp.broadcast_to(pred.reshape(pred.shape + (1,) * (a.ndim - 1)), a.shape), a, b)

    return jax.tree.map(pick, on_true, on_false)


def skip_cond(pred, true_fun: Callable, false_fun: Callable, *operands):
    """``lax.cond(pred, true_fun, false_fun, *operands)``, whose ``vmap`` over a batched ``pred`` runs
    ``true_fun`` only when some member's ``pred`` holds (see the module docstring). Same values as
    ``lax.cond`` under every transformation; ``pred`` a boolean scalar (per member)."""
    pred = jnp.asarray(pred)
    if pred.shape != () or pred.dtype != jnp.bool_:
        raise ValueError(f"pred must be a boolean scalar, got shape {pred.shape} dtype {pred.dtype}")
    closed_true, true_shape = jax.make_jaxpr(true_fun, return_shape=True)(*operands)
    closed_false, false_shape = jax.make_jaxpr(false_fun, return_shape=True)(*operands)
    out_tree = jax.tree.structure(true_shape)
    types = [[(s.shape, s.dtype) for s in jax.tree.leaves(shape)] for shape in (true_shape, false_shape)]
    if out_tree != jax.tree.structure(false_shape) or types[0] != types[1]:
        raise ValueError(
            f"true_fun and false_fun must return the same structure, shapes and dtypes, got "
            f"{true_shape} and {false_shape}"
        )

    @custom_vmap
    def branch(pred, true_consts, false_consts, operands):
        return lax.cond(
            pred,
            lambda: _evaluate(closed_true, true_consts, operands),
            lambda: _evaluate(closed_false, false_consts, operands),
        )

    @branch.def_vmap
    def batched(axis_size, in_batched, pred, true_consts, false_consts, operands):
        pred_batched, true_batched, false_batched, operands_batched = in_batched

        def vmapped(closed, consts_batched):
            axes = jax.tree.map(lambda b: 0 if b else None, (consts_batched, operands_batched))
            return lambda consts, operands: jax.vmap(
                lambda c, o: _evaluate(closed, c, o), in_axes=axes, axis_size=axis_size
            )(consts, operands)

        run_true = vmapped(closed_true, true_batched)
        run_false = vmapped(closed_false, false_batched)
        if pred_batched:
            out = skip_cond(
                jnp.any(pred),
                lambda p, tc, fc, o: _select(p, run_true(tc, o), run_false(fc, o)),
                lambda p, tc, fc, o: run_false(fc, o),
                pred,
                true_consts,
                false_consts,
                operands,
            )
        else:
            out = skip_cond(
                pred,
                lambda tc, fc, o: run_true(tc, o),
                lambda tc, fc, o: run_false(fc, o),
                true_consts,
                false_consts,
                operands,
            )
        return out, jax.tree.map(lambda _: True, out)

    flat = branch(pred, closed_true.consts, closed_false.consts, operands)
    return jax.tree.unflatten(out_tree, flat)
