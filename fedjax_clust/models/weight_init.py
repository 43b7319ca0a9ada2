"""Initial-weight schemes of the built-in models: which distribution a model's first parameters are drawn from.

* ``"flax"`` (the default): the layers' own initialisers, Flax's: LeCun-normal kernels (std 1/sqrt(fan_in),
  truncated) and zero biases.
* ``"torch"``: PyTorch's defaults for ``nn.Linear`` and ``nn.Conv2d`` (``reset_parameters``: Kaiming-uniform
  with a = sqrt(5)), which papers' PyTorch code trains from unless it says otherwise: every kernel
  W ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) and its layer's bias b ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), with
  fan_in = the product of the kernel's shape but its last axis (inputs x kernel height x width). The weights'
  standard deviation is 1/sqrt(3 fan_in), sqrt(3) smaller than LeCun's. Normalisation layers (a ``scale`` and
  a ``bias`` without a kernel) keep their ones and zeros, as PyTorch's.

A scheme is a pure function ``(params, key) -> params`` over the model's parameter pytree: a layer is a mapping
holding a ``kernel`` (and optionally a ``bias``). :data:`WEIGHT_INITS` is the registry; tasks take its names
(``weight_init=``).
"""

from __future__ import annotations

import math
from typing import Callable, Mapping, Optional

import jax
import jax.numpy as jnp

from fedjax_clust.core.registry import Registry

__all__ = ["WEIGHT_INITS", "apply_weight_init", "torch_default_init"]


def _layers(tree, path=()):
    """(path, layer) of every mapping in ``tree`` that holds a "kernel", in a fixed (sorted) order."""
    if isinstance(tree, Mapping):
        if "kernel" in tree:
            yield path, tree
            return
        for name in sorted(tree):
            yield from _layers(tree[name], path + (name,))


def _replace(tree, path, layer):
    if not path:
        return layer
    head, rest = path[0], path[1:]
    return {**tree, head: _replace(tree[head], rest, layer)}


def torch_default_init(params, key):
    """``params`` with every kernel and its bias redrawn from U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (module
    docstring); the other leaves unchanged. Each layer gets its own key (folded in by its position)."""
    out = params
    for index, (path, layer) in enumerate(_layers(params)):
        kernel = layer["kernel"]
        bound = 1.0 / math.sqrt(math.prod(kernel.shape[:-1]))
        k_kernel, k_bias = jax.random.split(jax.random.fold_in(key, index))
        new = dict(layer)
        new["kernel"] = jax.random.uniform(k_kernel, kernel.shape, kernel.dtype, -bound, bound)
        if "bias" in layer:
            bias = layer["bias"]
            new["bias"] = jax.random.uniform(k_bias, jnp.shape(bias), bias.dtype, -bound, bound)
        out = _replace(out, path, new)
    return out


# name -> params -> key -> params, or None for the model's own initialiser ("flax")
WEIGHT_INITS: Registry[Optional[Callable]] = Registry("weight init", name_of=None)
WEIGHT_INITS.register(None, name="flax")
WEIGHT_INITS.register(torch_default_init, name="torch")


def apply_weight_init(init_params: Callable, scheme: str) -> Callable:
    """``key -> params``: ``init_params`` for "flax", else the scheme applied to its draw (with a key of its own
    split from ``key``). ValueError naming the known schemes for another name."""
    if scheme not in WEIGHT_INITS:
        raise ValueError(f"weight_init must be one of {sorted(WEIGHT_INITS)}, got {scheme!r}")
    scheme_fn = WEIGHT_INITS[scheme]
    if scheme_fn is None:
        return init_params

    def init(key):
        model_key, scheme_key = jax.random.split(key)
        return scheme_fn(init_params(model_key), scheme_key)

    return init
