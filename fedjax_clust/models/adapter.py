"""Flax modules as the pure functions the batched simulator stacks.

The simulator needs a model as pure functions of a parameter pytree, so that ``jax.vmap`` over a stacked
pytree gives N models at once:

    model.init(key)                -> params      (nested dict of arrays, string keys; key None: PRNGKey(0))
    model.logits(params, x)        -> [B, C]      (x: a batch of inputs [B, ...])
    model.features(params, x)      -> [B, H]      (the representation before the last layer; kNN-Per)

:func:`from_nnx` builds these from a ``flax.nnx`` module constructor, :func:`from_linen` from a
``flax.linen`` module. The built-in models (:mod:`fedjax_clust.models.zoo`) are written in ``flax.nnx``,
Flax's current API (``flax.linen`` is maintained but no longer where Flax adds features); linen modules
are equally welcome through :func:`from_linen`.

Only ``nnx.Param`` variables are trained and federated. Other state a module holds (e.g. an ``nnx.Rngs``)
is kept fixed; batch statistics are refused: BatchNorm's running statistics are not parameters a client
can average or cluster, and its per-batch statistics couple the examples of a minibatch — use GroupNorm,
LayerNorm or no normalisation.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax

from fedjax_clust.core.pytrees import num_entries

PyTree = Any

__all__ = ["Model", "from_nnx", "from_linen"]


class Model(NamedTuple):
    """A classifier as pure functions (see the module docstring)."""

    name: str
    init: Callable[[jax.Array], PyTree]
    logits: Callable[[PyTree, jax.Array], jax.Array]
    features: Callable[[PyTree, jax.Array], jax.Array]

    def num_params(self) -> int:
        shapes = jax.eval_shape(self.init, jax.random.PRNGKey(0))
        return num_entries(shapes)


def _string_keys(tree):
    """Nested dict with every key a string (checkpoints and JSON need them; nnx lists use integers)."""
    if isinstance(tree, dict):
        return {str(k): _string_keys(v) for k, v in tree.items()}
    return tree


def _like(template, tree):
    """``tree`` (string keys) with the keys of ``template`` (the module's own, possibly integers)."""
    if isinstance(template, dict):
        return {k: _like(v, tree[str(k)]) for k, v in template.items()}
    return tree


def from_nnx(factory: Callable, name: Optional[str] = None, features_method: str = "features") -> Model:
    """A :class:`Model` from ``factory(rngs) -> nnx.Module``.

    The module's ``__call__(x)`` returns logits for a batch ``x``; its method ``features_method``
    (default ``"features"``), when it has one, returns the representation before the classifier (needed
    by kNN-Per; without it ``features`` is the logits themselves).
    """
    from flax import nnx

    abstract = nnx.eval_shape(lambda: factory(nnx.Rngs(0)))
    graphdef, param_state, rest = nnx.split(abstract, nnx.Param, ...)
    batch_stats = [
        v for v in jax.tree.leaves(rest, is_leaf=lambda v: isinstance(v, nnx.Variable)) if isinstance(v, nnx.BatchStat)
    ]
    if batch_stats:
        raise ValueError(
            "the module keeps batch statistics (BatchNorm): they do not federate; use GroupNorm, "
            "LayerNorm or no normalisation"
        )
    if jax.tree.leaves(rest):  # non-parameter state (e.g. an Rngs) must be concrete: build the module once
        _, _, rest = nnx.split(factory(nnx.Rngs(0)), nnx.Param, ...)
    template = nnx.to_pure_dict(param_state)

    def init(key):
        module = factory(nnx.Rngs(params=jax.random.PRNGKey(0) if key is None else key))
        return _string_keys(nnx.to_pure_dict(nnx.state(module, nnx.Param)))

    def bound(params):
        return nnx.merge(graphdef, _like(template, params), rest)

    def logits(params, x):
        return bound(params)(x)

    def features(params, x):
        module = bound(params)
        method = getattr(module, features_method, None)
        return method(x) if method is not None else module(x)

    return Model(name or type(abstract).__name__, init, logits, features)


def from_linen(module, example_input, name: Optional[str] = None, features_method: Optional[str] = None) -> Model:
    """A :class:`Model` from a ``flax.linen`` module whose ``__call__(x)`` returns logits.

    ``example_input`` is one batch of inputs (shape [B, ...]) used to initialise the parameters;
    ``features_method`` names a method returning the features (default: the logits).
    """
    variables = jax.eval_shape(module.init, jax.random.PRNGKey(0), example_input)
    if set(variables) - {"params"}:
        raise ValueError(
            f"the linen module has collections {sorted(set(variables) - {'params'})}; only "
            "'params' federate (no BatchNorm batch_stats)"
        )

    def init(key):
        key = jax.random.PRNGKey(0) if key is None else key
        return _string_keys(dict(module.init(key, example_input)["params"]))

    def logits(params, x):
        return module.apply({"params": params}, x)

    def features(params, x):
        if features_method is None:
            return logits(params, x)
        return module.apply({"params": params}, x, method=features_method)

    return Model(name or type(module).__name__, init, logits, features)
