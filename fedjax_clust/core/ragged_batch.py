"""Clients of different sizes on the device without padding every one to the largest: flat examples,
per-client starts and sizes, and size buckets for full passes.

A :class:`RaggedBatch` holds N clients' examples as one dict of flat arrays (leading axis T = sum_i n_i,
client i's examples rows ``starts[i] : starts[i] + sizes[i]``). Memory is proportional to T. Two ways to
read it, both explicit (:func:`fedjax_clust.core.batching.sample_minibatch`):

* **B examples drawn by index** (``batch_size=B``): each client draws B distinct indices among its own n_i
  examples with Floyd's algorithm (Bentley & Floyd, "A sample of brilliance", CACM 1987: for j = n-B..n-1 draw
  t uniform in [0, j]; keep t unless already drawn, else keep j), which gives every B-subset the same
  probability in B steps of O(B) work, so a step costs O(N B^2 + N B) whatever the largest client; the draw is
  gathered from the flat arrays into a padded [N, B] batch. A client with n_i <= B gets all of its examples
  (the rest of its B slots are masked out), as in the padded layout.
* **One pass over every client's examples** (``batch_size=None``): the batch stays ragged and
  :func:`fedjax_clust.core.batching.map_clients` runs the per-client function once per *size bucket*: clients
  sorted by size and cut into buckets whose largest size is at most ``bucket_ratio`` times their smallest,
  each bucket gathered padded to its own largest size [N_b, n_b] and vmapped. The example-gradients a pass
  counts, sum_b N_b n_b, are at most ``bucket_ratio`` times the real ones (1.25 by default), against
  N n_max / T (tens of times for a log-normal population with sigma = 1.5) in the padded layout. Each bucket is
  its own shape, so the program holds one copy of the per-client function per bucket: about
  log(n_max / n_min) / log(bucket_ratio) copies (compile time grows with it; ``bucket_ratio`` trades it off).

Choice (documented): storage is flat and the buckets are a static plan over it (an order of the clients and
bucket bounds), not bucket-padded copies, so memory stays exactly T and the minibatch draw reads the same
arrays. :meth:`RaggedBatch.select` (a cohort of clients, inside a jitted round) keeps the flat arrays and
gathers the starts and sizes; which bucket a traced cohort's clients fall in is not known when the round is
compiled, so a selected batch has a single bucket padded to the population's n_max (full passes over a
cohort cost M n_max; minibatch draws are unaffected).
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

PyTree = Any

__all__ = ["RaggedBatch", "size_buckets", "is_ragged", "DEFAULT_BUCKET_RATIO", "LAYOUTS"]

DEFAULT_BUCKET_RATIO = 1.25
LAYOUTS = ("ragged", "padded")  # how client data is stored: flat (this module) or padded to the largest client


def size_buckets(sizes, ratio: float = DEFAULT_BUCKET_RATIO):
    """(order, bounds): clients sorted by size (``order`` int [N], stable) and buckets ``(lo, hi, capacity)``
    of that order, each holding clients whose sizes lie in [s, ratio * s] for its smallest size s, padded to
    its largest size ``capacity``. Greedy from the smallest client: every bucket's slots (clients x capacity)
    are at most ``ratio`` times its real examples (its padding at most ratio - 1 times), for clients of at
    least one example, and the number of buckets is at most 1 + log(n_max / n_min) / log(ratio)."""
    sizes = np.asarray(sizes, np.int64)
    if not ratio >= 1.0:
        raise ValueError(f"bucket_ratio must be >= 1, got {ratio}")
    order = np.argsort(sizes, kind="stable")
    ordered = sizes[order]
    bounds = []
    lo = 0
    while lo < len(ordered):
        smallest = max(int(ordered[lo]), 1)
        hi = int(np.searchsorted(ordered, np.floor(smallest * ratio), side="right"))
        hi = max(hi, lo + 1)
        bounds.append((lo, hi, max(int(ordered[hi - 1]), 1)))
        lo = hi
    return order, tuple(bounds)


@jax.tree_util.register_pytree_node_class
class RaggedBatch:
    """N clients' examples flat with starts and sizes, plus a static size-bucket plan (module docstring).

    Attributes:
      examples: name -> array [T, ...] (every client's examples, one after the other).
      starts: int32 [N], client i's first row in ``examples``.
      sizes: int32 [N], client i's number of examples n_i.
      order: int32 [N], the clients sorted by bucket (None after :meth:`select`).
      buckets: static tuple of ``(lo, hi, capacity)`` over ``order`` (one bucket of capacity ``n_max`` after
        :meth:`select`).
      n_max: static int, the largest client's size (an upper bound after :meth:`select`).
    """

    def __init__(self, examples: dict, starts, sizes, order=None, buckets: Optional[tuple] = None, n_max: int = 0):
        self.examples = dict(examples)
        self.starts = starts
        self.sizes = sizes
        self.order = order
        self.buckets = buckets
        self.n_max = int(n_max)

    # -- construction --------------------------------------------------------------------------------------
    @classmethod
    def from_flat(cls, examples: dict, offsets, *, bucket_ratio: float = DEFAULT_BUCKET_RATIO) -> "RaggedBatch":
        """From host arrays: ``examples`` name -> [T, ...] and ``offsets`` [N + 1] (client i's rows
        ``offsets[i]:offsets[i + 1]``, as :class:`fedjax_clust.data.ragged.RaggedClients` stores them)."""
        offsets = np.asarray(offsets, np.int64)
        if offsets.ndim != 1 or len(offsets) < 2 or offsets[0] != 0 or np.any(np.diff(offsets) < 0):
            raise ValueError("offsets must be a non-decreasing integer vector [N + 1] starting at 0, N >= 1")
        if "mask" in examples:
            raise ValueError("ragged examples may not have their own 'mask' entry (batches add it)")
        total = int(offsets[-1])
        if total >= 2**31:
            raise ValueError(f"{total} examples exceed the int32 row index of a ragged batch")
        for name, values in examples.items():
            if np.ndim(values) < 1 or len(values) != total:
                rows = len(values) if np.ndim(values) else 0
                raise ValueError(f"examples[{name!r}] has {rows} rows, expected {total}")
        sizes = np.diff(offsets)
        order, buckets = size_buckets(sizes, bucket_ratio)
        return cls(
            {k: jnp.asarray(v) for k, v in examples.items()},
            jnp.asarray(offsets[:-1], jnp.int32),
            jnp.asarray(sizes, jnp.int32),
            jnp.asarray(order, jnp.int32),
            buckets,
            int(sizes.max()),
        )

    @classmethod
    def from_padded(cls, data: dict, *, bucket_ratio: float = DEFAULT_BUCKET_RATIO) -> "RaggedBatch":
        """From the padded layout (leaves [N, n, ...] and ``"mask"`` [N, n]): each client's real examples, in
        order (a client's masked-out rows are dropped wherever they are)."""
        if "mask" not in data:
            raise ValueError("padded data need a 'mask' entry [N, n] (True on real examples)")
        mask = np.asarray(data["mask"], bool)
        if mask.ndim != 2:
            raise ValueError(f"mask must be [N, n], got shape {mask.shape}")
        examples = {k: np.asarray(v)[mask] for k, v in data.items() if k != "mask"}
        offsets = np.concatenate([[0], np.cumsum(mask.sum(axis=1))])
        return cls.from_flat(examples, offsets, bucket_ratio=bucket_ratio)

    # -- pytree --------------------------------------------------------------------------------------------
    def tree_flatten(self):
        names = tuple(sorted(self.examples))
        children = (tuple(self.examples[k] for k in names), self.starts, self.sizes, self.order)
        return children, (names, self.buckets, self.n_max)

    @classmethod
    def tree_unflatten(cls, aux, children):
        names, buckets, n_max = aux
        arrays, starts, sizes, order = children
        return cls(dict(zip(names, arrays)), starts, sizes, order, buckets, n_max)

    # -- views ---------------------------------------------------------------------------------------------
    @property
    def num_clients(self) -> int:
        return int(jnp.shape(self.sizes)[0])

    @property
    def num_examples(self) -> int:
        """T, the rows of the flat arrays (every client's examples)."""
        return int(jnp.shape(next(iter(self.examples.values())))[0])

    def bucket_plan(self):
        """``(order, buckets)``: the static plan :func:`~fedjax_clust.core.batching.map_clients` follows."""
        if self.order is None:
            return jnp.arange(self.num_clients, dtype=jnp.int32), ((0, self.num_clients, max(self.n_max, 1)),)
        return self.order, self.buckets

    def counted_examples(self) -> int:
        """Example slots one full pass computes: sum over buckets of clients x capacity (static)."""
        _, buckets = self.bucket_plan()
        return int(sum((hi - lo) * cap for lo, hi, cap in buckets))

    def select(self, index) -> "RaggedBatch":
        """Clients ``index`` (an integer array, traced or not): the same flat arrays, their starts and sizes."""
        starts = jnp.take(self.starts, index, axis=0, mode="clip")
        sizes = jnp.take(self.sizes, index, axis=0, mode="clip")
        return RaggedBatch(self.examples, starts, sizes, None, None, self.n_max)

    def gather(self, clients, capacity: int) -> dict:
        """Clients ``clients`` padded to ``capacity`` examples: leaves [len(clients), capacity, ...] (zeros past
        each client's examples) and a ``"mask"`` (True on each client's first min(n_i, capacity) examples)."""
        starts = jnp.take(self.starts, clients, axis=0)
        sizes = jnp.take(self.sizes, clients, axis=0)
        slots = jnp.arange(capacity, dtype=jnp.int32)
        return self.take_examples(starts[:, None] + slots[None, :], slots[None, :] < sizes[:, None])

    def padded(self) -> dict:
        """Every client padded to n_max: the padded layout ([N, n_max, ...] + ``"mask"``)."""
        return self.gather(jnp.arange(self.num_clients), max(self.n_max, 1))

    def take_examples(self, rows, valid) -> dict:
        """Examples at flat ``rows`` (int [N, B]) with ``"mask"`` = ``valid``, zeros where not ``valid`` (as the
        padded layout's padding: a neighbour's non-finite example never enters a masked slot, whose gradient
        would be NaN * 0)."""
        out = {}
        for name, values in self.examples.items():
            taken = jnp.take(values, rows, axis=0, mode="clip")
            where = valid.reshape(valid.shape + (1,) * (taken.ndim - 2))
            out[name] = jnp.where(where, taken, jnp.zeros((), taken.dtype))
        out["mask"] = valid
        return out

    def with_examples(self, examples: dict) -> "RaggedBatch":
        """The same clients over other flat arrays of T rows (e.g. flipped labels)."""
        return RaggedBatch(examples, self.starts, self.sizes, self.order, self.buckets, self.n_max)

    def example_flags(self, flags: jax.Array) -> jax.Array:
        """bool [T]: True on the rows of the clients with ``flags`` (bool [N]). Rows no client of this batch
        holds (after :meth:`select`) are False. O(T + N): +1 at each flagged client's first row and -1 past
        its last, summed along the rows."""
        flags = jnp.asarray(flags, bool).astype(jnp.int32)
        edges = jnp.zeros(self.num_examples + 1, jnp.int32)
        edges = edges.at[self.starts].add(flags).at[self.starts + self.sizes].add(-flags)
        return jnp.cumsum(edges[:-1]) > 0

    def __repr__(self):
        shapes = {k: tuple(np.shape(v)) for k, v in self.examples.items()}
        buckets = None if self.buckets is None else len(self.buckets)
        return f"RaggedBatch(clients={self.num_clients}, examples={shapes}, n_max={self.n_max}, buckets={buckets})"


def is_ragged(tree) -> bool:
    return isinstance(tree, RaggedBatch)


def floyd_sample(key: jax.Array, sizes: jax.Array, batch_size: int):
    """(local indices int32 [N, B], valid bool [N, B]): B distinct indices per client, uniform over the
    B-subsets of range(n_i) (Floyd's algorithm, module docstring); clients with n_i <= B take 0..n_i-1."""
    sizes = sizes.astype(jnp.int32)
    num = sizes.shape[0]
    slots = jnp.arange(batch_size, dtype=jnp.int32)
    # j_k = n - B + k; t_k uniform in [0, j_k]
    upper = sizes[:, None] - batch_size + slots[None, :]
    draws = jax.random.randint(key, (num, batch_size), 0, jnp.maximum(upper, 0) + 1, dtype=jnp.int32)

    def step(k, chosen):
        t = draws[:, k]
        taken = jnp.any(chosen == t[:, None], axis=1)
        return chosen.at[:, k].set(jnp.where(taken, upper[:, k], t))

    chosen = jax.lax.fori_loop(0, batch_size, step, jnp.full((num, batch_size), -1, jnp.int32))
    small = sizes[:, None] <= batch_size
    local = jnp.where(small, slots[None, :], chosen)
    valid = jnp.where(small, slots[None, :] < sizes[:, None], True)
    return local, valid
