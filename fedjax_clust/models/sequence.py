"""Character models for next-character prediction (Shakespeare), each a :class:`~fedjax_clust.models.adapter.Model`.

Inputs are batches of id sequences x [B, L] (int, :mod:`fedjax_clust.data.text`); ``logits`` are [B, L, V], the
prediction of the character after every position; ``features`` [B, L, H] the last layer's states.

* ``char-lstm``: LEAF's Shakespeare model (Caldas et al. 2018; the layers of its reference implementation,
  read in its ``models/shakespeare/stacked_lstm.py``: an 8-wide embedding, two TensorFlow ``BasicLSTMCell``
  layers, a dense output): Embed(V, 8) -> LSTM(256) -> LSTM(256) -> Dense(V); 0.82M parameters for the 84-id
  vocabulary. Our LSTM cell (Hochreiter & Schmidhuber 1997 with a forget gate, Gers et al. 2000): one Dense
  over [x_t, h_{t-1}] gives the input, forget, cell and output gates; c_t = sigma(f + b_f) c_{t-1} + sigma(i)
  tanh(g), h_t = sigma(o) tanh(c_t) with the constant forget bias b_f = 1 (``BasicLSTMCell``'s default), zero
  initial state, run with ``lax.scan`` over the L positions. LEAF's dense layer reads the last position only;
  ours predicts at every position (the task's ``positions`` chooses which count).

Choice (documented): the LSTM, not a Transformer, because it is the model LEAF's Shakespeare baseline trains
(with ``positions="last"`` on LEAF's files the objective is LEAF's). Its cost is a per-client vmapped scan of
80 dependent steps of small matmuls:
``fedjax-clust bench --suite char-lstm`` measures the gradient step's time and achieved FLOP rate
(:mod:`fedjax_clust.bench.sequence`). A small Transformer is not built.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jax import lax

from fedjax_clust.core.validation import check_int
from fedjax_clust.models.adapter import Model, from_nnx
from fedjax_clust.models.names import SEQUENCE_MODELS

__all__ = ["SEQUENCE_MODELS", "make_sequence_model", "CharLSTM"]


class LSTMLayer(nnx.Module):
    """One LSTM layer over [B, L, D] -> [B, L, H] (module docstring)."""

    def __init__(self, inputs: int, hidden: int, rngs, forget_bias: float = 1.0):
        self.hidden = hidden
        self.forget_bias = forget_bias
        self.gates = nnx.Linear(inputs + hidden, 4 * hidden, rngs=rngs)

    def __call__(self, x):
        kernel, bias = self.gates.kernel[...], self.gates.bias[...]
        batch = x.shape[:-2]
        zeros = jnp.zeros(batch + (self.hidden,), x.dtype)

        def step(carry, x_t):
            h, c = carry
            z = jnp.concatenate([x_t, h], axis=-1) @ kernel + bias
            i, f, g, o = jnp.split(z, 4, axis=-1)
            c = jax.nn.sigmoid(f + self.forget_bias) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h

        _, states = lax.scan(step, (zeros, zeros), jnp.moveaxis(x, -2, 0))
        return jnp.moveaxis(states, 0, -2)


class CharLSTM(nnx.Module):
    def __init__(self, vocab: int, embed: int, hidden: int, layers: int, rngs):
        self.embed = nnx.Embed(vocab, embed, rngs=rngs)
        self.layers = nnx.List([LSTMLayer(embed if k == 0 else hidden, hidden, rngs=rngs) for k in range(layers)])
        self.out = nnx.Linear(hidden, vocab, rngs=rngs)

    def features(self, x):
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return h

    def __call__(self, x):
        return self.out(self.features(x))


def make_sequence_model(name: str, vocab: int, *, hidden: int = 256, embed: int = 8, layers: int = 2) -> Model:
    """The built-in sequence model ``name`` (one of ``SEQUENCE_MODELS``) over ``vocab`` ids."""
    if name not in SEQUENCE_MODELS:
        raise ValueError(f"unknown sequence model {name!r}; expected one of {list(SEQUENCE_MODELS)}")
    check_int("vocab", vocab, 2)
    check_int("hidden", hidden, 1, 1 << 16)
    check_int("embed", embed, 1, 1 << 16)
    check_int("layers", layers, 1, 16)
    return from_nnx(lambda rngs: CharLSTM(vocab, embed, hidden, layers, rngs=rngs), name)
