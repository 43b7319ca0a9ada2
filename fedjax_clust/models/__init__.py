"""Flax models for the image tasks, and adapters that turn any Flax module into pure functions.

``make_model`` (:mod:`fedjax_clust.models.zoo`) is loaded on first use: the models are Flax modules, and
importing Flax is a third of a second of every start-up that needs no neural model."""

from fedjax_clust.models.adapter import Model, from_linen, from_nnx
from fedjax_clust.models.names import MODELS

__all__ = ["MODELS", "Model", "from_linen", "from_nnx", "make_model"]


def __getattr__(name: str):
    if name == "make_model":
        from fedjax_clust.models.zoo import make_model

        return make_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
