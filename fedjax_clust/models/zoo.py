"""Built-in image classifiers (``flax.nnx``), each a :class:`~fedjax_clust.models.adapter.Model`.

Inputs are batches [B, H, W, C]; ``features`` is the representation before the last linear layer.

* ``mlp``: flatten -> Dense(hidden) -> ReLU -> Dense(C). The paper authors' MNIST scripts use one hidden
  layer of 2048 units; the default here is 200 (``hidden``) for speed.
* ``cnn``: Conv3x3(16) -> ReLU -> MaxPool2 -> Conv3x3(32) -> ReLU -> MaxPool2 -> Dense(128) -> ReLU -> Dense(C);
  about 0.2M parameters on 28 x 28 inputs.
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
and XLA's CPU backend lowers a convolution whose kernel is vmapped to a grouped convolution that ran at
4.9 GFLOP/s on the CNN's per-client gradients (40 models x 32 examples, 2-core CPU), against 18.6 GFLOP/s
for the patch form, whose vmapped matmuls become batched GEMMs (``fedjax-clust bench --model cnn``
measures it).
"""

from __future__ import annotations

import math
from functools import partial

from typing import Literal
import jax.numpy as jnp
from flax import nnx

from fedjax_clust.models.adapter import Model, from_nnx
from fedjax_clust.core.validation import check_int

__all__ = ["MODELS", "make_model"]

MODELS = ("mlp", "cnn", "lenet5", "vgg8", "vgg16", "resnet9")
ModelName = Literal[MODELS]
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
    return jnp.concatenate([x[..., i:i + h, j:j + w, :] for i in range(size) for j in range(size)], axis=-1)


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


class MLP(nnx.Module):
    def __init__(self, input_shape, num_classes, hidden, rngs):
        self.hidden = nnx.Linear(math.prod(input_shape), hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, num_classes, rngs=rngs)

    def features(self, x):
        return nnx.relu(self.hidden(_flatten(x)))

    def __call__(self, x):
        return self.out(self.features(x))


class CNN(nnx.Module):
    def __init__(self, input_shape, num_classes, rngs):
        h, w, c = input_shape
        self.conv1 = PatchConv(c, 16, 3, rngs)
        self.conv2 = PatchConv(16, 32, 3, rngs)
        self.dense = nnx.Linear((h // 4) * (w // 4) * 32, 128, rngs=rngs)
        self.out = nnx.Linear(128, num_classes, rngs=rngs)

    def features(self, x):
        x = _pool(nnx.relu(self.conv1(x)))
        x = _pool(nnx.relu(self.conv2(x)))
        return nnx.relu(self.dense(_flatten(x)))

    def __call__(self, x):
        return self.out(self.features(x))


class LeNet5(nnx.Module):
    def __init__(self, input_shape, num_classes, rngs):
        h, w, c = input_shape
        if min(h, w) < 12:
            raise ValueError(f"lenet5 needs inputs of at least 12 x 12, got {h} x {w}; use 'cnn' or 'mlp'")
        self.conv1 = PatchConv(c, 6, 5, rngs)
        self.conv2 = PatchConv(6, 16, 5, rngs, padding="VALID")
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

    def __init__(self, cin, cout, rngs):
        self.conv = PatchConv(cin, cout, 3, rngs)
        self.norm = nnx.GroupNorm(cout, num_groups=min(32, cout), rngs=rngs)

    def __call__(self, x):
        return nnx.relu(self.norm(self.conv(x)))


class VGG(nnx.Module):
    def __init__(self, input_shape, num_classes, config, rngs):
        h, w, c = input_shape
        pools = config.count("M")
        if min(h, w) < 2 ** pools:
            raise ValueError(f"this VGG pools {pools} times and needs inputs of at least {2 ** pools} x "
                             f"{2 ** pools}, got {h} x {w}")
        self.config = config
        cin = c
        for i, width in enumerate(v for v in config if v != "M"):
            setattr(self, f"block{i}", ConvGroupNorm(cin, width, rngs))
            cin = width
        flat = (h // 2 ** pools) * (w // 2 ** pools) * cin
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
    def __init__(self, input_shape, num_classes, rngs):
        h, w, c = input_shape
        if min(h, w) < 8:
            raise ValueError(f"resnet9 pools 3 times and needs inputs of at least 8 x 8, got {h} x {w}")
        self.prep = ConvGroupNorm(c, 64, rngs)
        self.layer1 = ConvGroupNorm(64, 128, rngs)
        self.res1a, self.res1b = ConvGroupNorm(128, 128, rngs), ConvGroupNorm(128, 128, rngs)
        self.layer2 = ConvGroupNorm(128, 256, rngs)
        self.layer3 = ConvGroupNorm(256, 512, rngs)
        self.res3a, self.res3b = ConvGroupNorm(512, 512, rngs), ConvGroupNorm(512, 512, rngs)
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


def make_model(name: str, input_shape, num_classes: int, *, hidden: int = 200) -> Model:
    """The built-in model ``name`` (one of ``MODELS``) for inputs [H, W, C] and ``num_classes`` classes."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; expected one of {list(MODELS)} (or pass a "
                         "fedjax_clust.models.Model, e.g. from_nnx(...))")
    input_shape = tuple(int(v) for v in input_shape)
    if len(input_shape) != 3:
        raise ValueError(f"input_shape must be (H, W, C), got {input_shape}")
    check_int("hidden", hidden, 1, MAX_HIDDEN)
    check_int("num_classes", num_classes, 1)
    factories = {
        "mlp": partial(MLP, input_shape, num_classes, hidden),
        "cnn": partial(CNN, input_shape, num_classes),
        "lenet5": partial(LeNet5, input_shape, num_classes),
        "vgg8": partial(VGG, input_shape, num_classes, VGG_CONFIGS["vgg8"]),
        "vgg16": partial(VGG, input_shape, num_classes, VGG_CONFIGS["vgg16"]),
        "resnet9": partial(ResNet9, input_shape, num_classes),
    }
    return from_nnx(lambda rngs: factories[name](rngs=rngs), name)
