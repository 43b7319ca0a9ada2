"""Order statistics per coordinate without a sort: bisection on integer keys that order like the floats.

The coordinate-wise median and trimmed mean need, for every coordinate, one or two order statistics of c
values. A full sort is what XLA does slowest on a CPU (3.9 s for 10^5 coordinates of 300 float32 values,
~40x the mean). Here the floats become integers of the same width that sort in the same order
(:func:`order_keys`: the bit pattern for x >= 0, the bit pattern with its 31 value bits flipped for x < 0),
and the k-th smallest key of every coordinate is bisected: with c(t) = #{key <= t} and a bracket
c(lo) < k <= c(hi), the midpoint replaces lo or hi, and a coordinate stops once c(hi) = k (its answer is then
the largest key <= hi) or hi = lo + 1. At most 32 counting passes for float32 (64 for float64), each one
comparison and a row sum over the c values of every coordinate, laid out contiguously ([coordinates, c]).
The result is exact: the same value a sort puts at position k.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["order_keys", "from_order_keys", "kth_smallest_keys"]


def _key_dtype(dtype):
    return jnp.int64 if jnp.dtype(dtype).itemsize == 8 else jnp.int32


def _flip(dtype):
    return np.array(np.iinfo(dtype).max, dtype)  # the value bits: 0x7FFFFFFF for int32


def order_keys(x):
    """Signed integers of the float's width with key(a) < key(b) iff a < b (for non-NaN floats; -0.0 sits
    just below +0.0)."""
    key_dtype = _key_dtype(x.dtype)
    bits = lax.bitcast_convert_type(x, key_dtype)
    return jnp.where(bits >= 0, bits, bits ^ _flip(key_dtype))


def from_order_keys(keys, dtype):
    """The floats of ``keys`` (the inverse of :func:`order_keys`)."""
    bits = jnp.where(keys >= 0, keys, keys ^ _flip(keys.dtype))
    return lax.bitcast_convert_type(bits, dtype)


def _count_at_most(keys, t):
    return jnp.sum(keys <= t[..., None], axis=-1, dtype=jnp.int32)


def kth_smallest_keys(keys, k):
    """The k-th smallest (1-based) key of every row of ``keys`` [..., c]; ``k`` an int or a traced int32
    (broadcast over the rows), 1 <= k <= c. Rows may hold the largest key as padding (non-members) as long
    as k counts real entries only."""
    k = jnp.broadcast_to(jnp.asarray(k, jnp.int32), keys.shape[:-1])
    lo = jnp.min(keys, axis=-1) - 1  # c(lo) = 0 < k (the smallest key is never the minimum integer)
    hi = jnp.max(keys, axis=-1)
    c_hi = jnp.full(keys.shape[:-1], keys.shape[-1], jnp.int32)

    def active(lo, hi, c_hi):
        return (c_hi != k) & (lo + 1 < hi)  # lo + 1 <= hi never overflows; hi - lo could

    def body(carry):
        lo, hi, c_hi = carry
        mid = (lo & hi) + ((lo ^ hi) >> 1)  # floor((lo + hi) / 2) without overflow
        c_mid = _count_at_most(keys, mid)
        act = active(lo, hi, c_hi)
        down = act & (c_mid >= k)
        return jnp.where(act & ~down, mid, lo), jnp.where(down, mid, hi), jnp.where(down, c_mid, c_hi)

    lo, hi, c_hi = lax.while_loop(lambda c: jnp.any(active(*c)), body, (lo, hi, c_hi))
    floor = np.array(np.iinfo(keys.dtype).min, keys.dtype)
    return jnp.max(jnp.where(keys <= hi[..., None], keys, floor), axis=-1)  # the largest key <= hi
