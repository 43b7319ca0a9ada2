"""Flax models for the image tasks, and adapters that turn any Flax module into pure functions."""

from fedjax_clust.models.adapter import Model, from_linen, from_nnx
from fedjax_clust.models.zoo import MODELS, make_model

__all__ = ["MODELS", "Model", "from_linen", "from_nnx", "make_model"]
