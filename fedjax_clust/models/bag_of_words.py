"""Bag-of-words logistic regression for StackOverflow tag prediction (Reddi et al. 2021, §5: one-versus-rest
logistic regression over the 10,000 most frequent words' bag, 500 tags), a
:class:`~fedjax_clust.models.adapter.Model`.

The input is a sparse bag (:mod:`fedjax_clust.data.stackoverflow`): ``x = (ids, weights)``, ids int [B, K]
and weights float [B, K]; the bag's dense vector is b_v = sum_k weights_k [ids_k = v]. The logits are

    z = b W + c = sum_k weights_k W[ids_k] + c         (W [V, T], c [T])

computed as the weighted sum of the K gathered rows of W, so a step costs K T, not V T, multiply-adds per
example (padding slots carry weight 0 and add exactly nothing). Parameters: a Glorot-uniform W and a zero c
(our choice; Keras's Dense defaults), V T + T of them (5,000,500 for 10,000 words and 500 tags). ``features``
is the dense bag b itself (the representation before the only layer).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from fedjax_clust.core.validation import check_int
from fedjax_clust.models.adapter import Model, from_nnx
from fedjax_clust.models.names import BAG_OF_WORDS_MODELS

__all__ = ["BagOfWordsLogistic", "make_bag_of_words_model", "BAG_OF_WORDS_MODELS"]


class BagOfWordsLogistic(nnx.Module):
    """z = sum_k weights_k W[ids_k] + c over a sparse bag (module docstring)."""

    def __init__(self, vocab: int, tags: int, rngs):
        self.vocab = vocab
        self.kernel = nnx.Param(nnx.initializers.glorot_uniform()(rngs.params(), (vocab, tags)))
        self.bias = nnx.Param(jnp.zeros((tags,)))

    def features(self, x):
        ids, weights = x
        return jnp.sum(jax.nn.one_hot(ids, self.vocab, dtype=weights.dtype) * weights[..., None], axis=-2)

    def __call__(self, x):
        ids, weights = x
        rows = jnp.take(self.kernel[...], ids, axis=0, mode="clip")  # [..., K, T]; ids must be in 0..V-1
        return jnp.einsum("...k,...kt->...t", weights, rows) + self.bias[...]


def make_bag_of_words_model(name: str, vocab: int, tags: int) -> Model:
    """The built-in bag-of-words model ``name`` (one of ``BAG_OF_WORDS_MODELS``) over ``vocab`` words and
    ``tags`` outputs."""
    if name not in BAG_OF_WORDS_MODELS:
        raise ValueError(f"unknown bag-of-words model {name!r}; expected one of {list(BAG_OF_WORDS_MODELS)}")
    check_int("vocab", vocab, 1)
    check_int("tags", tags, 1)
    return from_nnx(lambda rngs: BagOfWordsLogistic(vocab, tags, rngs=rngs), name)
