"""Built-in image classifiers (``flax.nnx``), each a :class:`~fedjax_clust.models.adapter.Model`.

Inputs are batches [B, H, W, C]; ``features`` is the representation before the last linear layer.

* ``mlp``: flatten -> Dense(hidden) -> ReLU -> Dense(C), ``hidden`` 200 by default: the width the paper
  authors' MNIST runs use (their scripts' ``--model-size`` default, 200; their model class's own default,
  2048, is overridden by it).
* ``cnn``: Conv3x3(16) -> ReLU -> MaxPool2 -> Conv3x3(32) -> ReLU -> MaxPool2 -> Dense(128) -> ReLU -> Dense(C);
  about 0.2M parameters on 28 x 28 inputs.
* ``leaf-cnn``: LEAF's FEMNIST model (Caldas et al. 2018, its reference implementation's layers):
  Conv5x5(32, SAME) -> ReLU -> MaxPool2 -> Conv5x5(64, SAME) -> ReLU -> MaxPool2 -> Dense(2048) -> ReLU ->
  Dense(C); about 6.6M parameters on 28 x 28 inputs with 62 classes.
* ``lenet5``: LeCun et al. (1998) with ReLU and max pooling: Conv5x5(6, SAME) -> pool -> Conv5x5(16, VALID)
  -> pool -> Dense(120) -> Dense(84) -> Dense(C); needs inputs of at least 12 x 12.
* ``vgg8`` / ``vgg16``: VGG (Simonyan & Zisserman 2015) for 32 x 32 inputs with GroupNorm after every
  convolution and a 512-512-C classifier (the CIFAR variant of the thesis' scripts, without dropout so a
  round stays a deterministic function of its key). VGG-16 has the 13 convolutions of configuration D;
  VGG-8 is our choice of 5 convolutions (64, 128, 256, 512, 512, each followed by a 2x2 max pool) + 3
  dense layers. ~15.3M / ~4.5M parameters.
* ``resnet9``: the DAWNBench ResNet-9 (Page 2018): prep Conv(64), layer Conv(128)+pool+residual(128),
  Conv(256)+pool, Conv(512)+pool+residual(512), global max pool, Dense(C); GroupNorm instead of BatchNorm.
  ~6.6M parameters.

GroupNorm uses min(32, channels) groups; batch statistics do not federate (see the adapter).

Convolutions are computed as patches x kernel matmuls (:class:`PatchConv`, same parameters and result
as ``nnx.Conv``) and max pooling as a reshape + max: the simulator vmaps every layer over N client models,
the vmapped matmuls become batched GEMMs, while XLA lowers a convolution whose kernel is vmapped to a
grouped convolution, which XLA's CPU backend runs several times slower. ``make_model(..., conv="lax")``
builds the same model on XLA's convolution (:class:`LaxConv`); ``fedjax-clust bench --model cnn`` times
both forms on the CNN's per-client gradients on the device at hand (the ``images-conv-forms`` row).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Literal

import jax.numpy as jnp
from flax import nnx
from jax import lax

from fedjax_clust.core.validation import check_int
from fedjax_clust.models.adapter import Model, from_nnx
from fedjax_clust.models.names import MODELS, ModelName  # noqa: F401 - ModelName public here too

__all__ = ["MODELS", "make_model"]

VGG_CONFIGS = {
    "vgg8": (64, "M", 128, "M", 256, "M", 512, "M", 512, "M"),
    "vgg16": (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"),
}


def _flatten(x):
    return x.reshape(x.shape[:-3] + (-1,))


def _pool(x):
    """2 x 2 max pooling, stride 2 (odd trailing rows/columns dropped, like VALID pooling)."""
    *batch, h, w, c = x.shape
    x = x[..., : h // 2 * 2, : w // 2 * 2, :]
    return jnp.max(x.reshape(tuple(batch) + (h // 2, 2, w // 2, 2, c)), axis=(-4, -2))


def patches(x, size: int, padding: str):
    """The size x size neighbourhoods of every pixel, stacked on the channel axis: [..., H', W', size^2 C]
    (row-major over the window, then channels: the flattening of an HWIO kernel)."""
    if padding == "SAME":
        lo = (size - 1) // 2
        pad = [(0, 0)] * (x.ndim - 3) + [(lo, size - 1 - lo), (lo, size - 1 - lo), (0, 0)]
        x = jnp.pad(x, pad)
    h, w = x.shape[-3] - size + 1, x.shape[-2] - size + 1
    return jnp.concatenate([x[..., i : i + h, j : j + w, :] for i in range(size) for j in range(size)], axis=-1)


class PatchConv(nnx.Module):
    """Stride-1 convolution y = patches(x) @ W + b with an HWIO kernel W (LeCun-normal init, zero bias),
    the same function and parameters as ``nnx.Conv``; see the module docstring for why."""

    def __init__(self, cin: int, cout: int, size: int, rngs, padding: str = "SAME"):
        init = nnx.initializers.lecun_normal()
        self.kernel = nnx.Param(init(rngs.params(), (size, size, cin, cout)))
        self.bias = nnx.Param(jnp.zeros((cout,)))
        self.size, self.padding = size, padding

    def __call__(self, x):
        kernel = self.kernel[...]
        return patches(x, self.size, self.padding) @ kernel.reshape(-1, kernel.shape[-1]) + self.bias[...]


class LaxConv(PatchConv):
    """The same stride-1 convolution as :class:`PatchConv` (its parameters and initialisation, the same
    function) computed by XLA's convolution (``lax.conv_general_dilated``): ``make_model(..., conv="lax")``;
    vmapped over client models it becomes a grouped convolution (see the module docstring)."""

    def __call__(self, x):
        batch = x.shape[:-3]
        flat = x.reshape((-1,) + x.shape[-3:])
        y = lax.conv_general_dilated(
            flat, self.kernel[...], (1, 1), self.padding, dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        return y.reshape(batch + y.shape[1:]) + self.bias[...]


CONVS = {"patches": PatchConv, "lax": LaxConv}


class MLP(nnx.Module):
    def __init__(self, input_shape, num_classes, hidden, rngs):
        self.hidden = nnx.Linear(math.prod(input_shape), hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, num_classes, rngs=rngs)

    def features(self, x):
        return nnx.relu(self.hidden(_flatten(x)))

    def __call__(self, x):
        return self.out(self.features(x))


class CNN(nnx.Module):
    """Two convolutions (``channels``, ``kernel`` x ``kernel``, SAME) each + ReLU + 2x2 max pool, then
    Dense(``hidden``) + ReLU and Dense(C): ``cnn`` with (16, 32), 3, 128 and ``leaf-cnn`` with (32, 64), 5,
    2048."""

    def __init__(self, input_shape, num_classes, rngs, conv=PatchConv, channels=(16, 32), kernel=3, hidden=128):
        h, w, c = input_shape
        first, second = channels
        self.conv1 = conv(c, first, kernel, rngs)
        self.conv2 = conv(first, second, kernel, rngs)
        self.dense = nnx.Linear((h // 4) * (w // 4) * second, hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, num_classes, rngs=rngs)

    def features(self, x):
        x = _pool(nnx.relu(self.conv1(x)))
        x = _pool(nnx.relu(self.conv2(x)))
        return nnx.relu(self.dense(_flatten(x)))

    def __call__(self, x):
        return self.out(self.features(x))


class LeNet5(nnx.Module):
    def __init__(self, input_shape, num_classes, rngs, conv=PatchConv):
        h, w, c = input_shape
        if min(h, w) < 12:
            raise ValueError(f"lenet5 needs inputs of at least 12 x 12, got {h} x {w}; use 'cnn' or 'mlp'")
        self.conv1 = conv(c, 6, 5, rngs)
        self.conv2 = conv(6, 16, 5, rngs, padding="VALID")
        self.fc1 = nnx.Linear(((h // 2 - 4) // 2) * ((w // 2 - 4) // 2) * 16, 120, rngs=rngs)
        self.fc2 = nnx.Linear(120, 84, rngs=rngs)
        self.out = nnx.Linear(84, num_classes, rngs=rngs)

    def features(self, x):
        x = _pool(nnx.relu(self.conv1(x)))
        x = _pool(nnx.relu(self.conv2(x)))
        return nnx.relu(self.fc2(nnx.relu(self.fc1(_flatten(x)))))

    def __call__(self, x):
        return self.out(self.features(x))


class ConvGroupNorm(nnx.Module):
    """Conv3x3 -> GroupNorm -> ReLU."""

    def __init__(self, cin, cout, rngs, conv=PatchConv):
        self.conv = conv(cin, cout, 3, rngs)
        self.norm = nnx.GroupNorm(cout, num_groups=min(32, cout), rngs=rngs)

    def __call__(self, x):
        return nnx.relu(self.norm(self.conv(x)))


class VGG(nnx.Module):
    def __init__(self, input_shape, num_classes, config, rngs, conv=PatchConv):
        h, w, c = input_shape
        pools = config.count("M")
        if min(h, w) < 2**pools:
            raise ValueError(
                f"this VGG pools {pools} times and needs inputs of at least {2**pools} x {2**pools}, got {h} x {w}"
            )
        self.config = config
        cin = c
        for i, width in enumerate(v for v in config if v != "M"):
            setattr(self, f"block{i}", ConvGroupNorm(cin, width, rngs, conv))
            cin = width
        flat = (h // 2**pools) * (w // 2**pools) * cin
        self.fc1 = nnx.Linear(flat, 512, rngs=rngs)
        self.fc2 = nnx.Linear(512, 512, rngs=rngs)
        self.out = nnx.Linear(512, num_classes, rngs=rngs)

    def features(self, x):
        i = 0
        for v in self.config:
            if v == "M":
                x = _pool(x)
            else:
                x = getattr(self, f"block{i}")(x)
                i += 1
        return nnx.relu(self.fc2(nnx.relu(self.fc1(_flatten(x)))))

    def __call__(self, x):
        return self.out(self.features(x))


class ResNet9(nnx.Module):
    def __init__(self, input_shape, num_classes, rngs, conv=PatchConv):
        h, w, c = input_shape
        if min(h, w) < 8:
            raise ValueError(f"resnet9 pools 3 times and needs inputs of at least 8 x 8, got {h} x {w}")
        block = partial(ConvGroupNorm, rngs=rngs, conv=conv)
        self.prep = block(c, 64)
        self.layer1 = block(64, 128)
        self.res1a, self.res1b = block(128, 128), block(128, 128)
        self.layer2 = block(128, 256)
        self.layer3 = block(256, 512)
        self.res3a, self.res3b = block(512, 512), block(512, 512)
        self.out = nnx.Linear(512, num_classes, rngs=rngs)

    def features(self, x):
        x = self.prep(x)
        x = _pool(self.layer1(x))
        x = x + self.res1b(self.res1a(x))
        x = _pool(self.layer2(x))
        x = _pool(self.layer3(x))
        x = x + self.res3b(self.res3a(x))
        return jnp.max(x, axis=(-3, -2))

    def __call__(self, x):
        return self.out(self.features(x))


MAX_HIDDEN = 1 << 16  # hidden units of the MLP: a wider layer is a typo (784 x 65,536 weights per client already)


def make_model(
    name: str, input_shape, num_classes: int, *, hidden: int = 200, conv: Literal["patches", "lax"] = "patches"
) -> Model:
    """The built-in model ``name`` (one of ``MODELS``) for inputs [H, W, C] and ``num_classes`` classes.

    ``conv``: how its convolutions are computed, "patches" (default: patch x kernel matmuls) or "lax"
    (XLA's convolution; the model's name then ends in "-lax", so a task's config says which ran); the
    parameters and the function are the same (see the module docstring)."""
    if name not in MODELS:
        raise ValueError(
            f"unknown model {name!r}; expected one of {list(MODELS)} (or pass a "
            "fedjax_clust.models.Model, e.g. from_nnx(...))"
        )
    input_shape = tuple(int(v) for v in input_shape)
    if len(input_shape) != 3:
        raise ValueError(f"input_shape must be (H, W, C), got {input_shape}")
    check_int("hidden", hidden, 1, MAX_HIDDEN)
    check_int("num_classes", num_classes, 1)
    if conv not in CONVS:
        raise ValueError(f"conv must be one of {list(CONVS)}, got {conv!r}")
    layer = CONVS[conv]
    factories = {
        "mlp": partial(MLP, input_shape, num_classes, hidden),
        "cnn": partial(CNN, input_shape, num_classes, conv=layer),
        "leaf-cnn": partial(CNN, input_shape, num_classes, conv=layer, channels=(32, 64), kernel=5, hidden=2048),
        "lenet5": partial(LeNet5, input_shape, num_classes, conv=layer),
        "vgg8": partial(VGG, input_shape, num_classes, VGG_CONFIGS["vgg8"], conv=layer),
        "vgg16": partial(VGG, input_shape, num_classes, VGG_CONFIGS["vgg16"], conv=layer),
        "resnet9": partial(ResNet9, input_shape, num_classes, conv=layer),
    }
    return from_nnx(lambda rngs: factories[name](rngs=rngs), name if conv == "patches" else f"{name}-{conv}")
