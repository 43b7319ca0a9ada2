"""Ragged clients: every client's examples stored flat, one after the other, with offsets.

A population of N clients holding n_0, ..., n_{N-1} examples is one dict of arrays whose leading axis runs
over all sum_i n_i examples, client i's being the rows ``offsets[i]:offsets[i + 1]`` (``offsets`` [N + 1],
``offsets[0] = 0``, non-decreasing), and a tuple of client ids. Memory is proportional to the real examples,
whatever the spread of client sizes: a natural partition (LEAF's FEMNIST writers, Shakespeare's speakers) has
heavy-tailed sizes, and stored padded to its largest client it would take n_max / mean(n) times the memory
(33 to 53 for 1,000 clients of the log-normal partition with sigma = 1.5, seeds 0-2).

The readers (:mod:`fedjax_clust.data.leaf`, :mod:`fedjax_clust.data.tff_sqlite`) and the partitioners
(:mod:`fedjax_clust.data.partitioners`) produce this layout; :meth:`RaggedClients.to_batch` puts it on the
device as rounds train on it (:class:`~fedjax_clust.core.ragged_batch.RaggedBatch`), :meth:`RaggedClients.to_padded`
gives the padded [N, n_max, ...] + ``"mask"`` layout, and :meth:`RaggedClients.padding_factor` says what that
costs.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np

from fedjax_clust.core.ragged_batch import DEFAULT_BUCKET_RATIO, RaggedBatch

__all__ = ["RaggedClients"]


@dataclasses.dataclass(frozen=True, eq=False)
class RaggedClients:
    """N clients' examples, flat with offsets (see the module docstring).

    Attributes:
      arrays: name -> array with a leading example axis of ``offsets[-1]`` rows (e.g. ``"x"``, ``"y"``).
      offsets: int64 [N + 1], client i's examples are rows ``offsets[i]:offsets[i + 1]``.
      client_ids: N strings (a file's user / writer / speaker ids; ``"0"``, ``"1"``, ... when it has none).
    """

    arrays: dict
    offsets: np.ndarray
    client_ids: tuple

    def __post_init__(self):
        offsets = np.asarray(self.offsets)
        if offsets.ndim != 1 or len(offsets) < 1 or not np.issubdtype(offsets.dtype, np.integer):
            raise ValueError(f"offsets must be an integer vector [N + 1], got {offsets.dtype} {offsets.shape}")
        if offsets[0] != 0 or np.any(np.diff(offsets) < 0):
            raise ValueError("offsets must start at 0 and never decrease")
        if not self.arrays:
            raise ValueError("ragged clients need at least one array")
        for name, values in self.arrays.items():
            if name == "mask":
                raise ValueError("client data may not have its own 'mask' entry (the padding mask is added later)")
            if np.ndim(values) < 1 or len(values) != offsets[-1]:
                raise ValueError(
                    f"array {name!r} has {len(values) if np.ndim(values) else 0} rows, expected {int(offsets[-1])} "
                    "(the last offset)"
                )
        if len(self.client_ids) != len(offsets) - 1:
            raise ValueError(f"{len(self.client_ids)} client ids for {len(offsets) - 1} clients")
        object.__setattr__(self, "offsets", offsets.astype(np.int64))
        object.__setattr__(self, "client_ids", tuple(str(c) for c in self.client_ids))

    @classmethod
    def from_clients(cls, clients: Sequence[dict], client_ids: Optional[Sequence] = None) -> "RaggedClients":
        """Concatenate per-client dicts of arrays (same keys, any number of examples each)."""
        if not clients:
            raise ValueError("no clients")
        keys = sorted(clients[0])
        sizes = []
        for i, client in enumerate(clients):
            if sorted(client) != keys:
                raise ValueError(f"client {i} has arrays {sorted(client)}, expected {keys}")
            lengths = {len(client[k]) for k in keys}
            if len(lengths) != 1:
                raise ValueError(f"client {i}: its arrays have different lengths {sorted(lengths)}")
            sizes.append(lengths.pop())
        arrays = {k: np.concatenate([np.asarray(c[k]) for c in clients]) for k in keys}
        ids = tuple(str(i) for i in range(len(clients))) if client_ids is None else tuple(client_ids)
        return cls(arrays, np.concatenate([[0], np.cumsum(sizes)]), ids)

    @classmethod
    def from_indices(cls, arrays: dict, indices: Sequence[np.ndarray], client_ids=None) -> "RaggedClients":
        """Clients made of rows of pooled ``arrays``: client i holds rows ``indices[i]`` (a partitioner's
        output, :mod:`fedjax_clust.data.partitioners`)."""
        order = np.concatenate([np.asarray(i, np.int64) for i in indices]) if len(indices) else np.zeros(0, int)
        sizes = [len(i) for i in indices]
        ids = tuple(str(i) for i in range(len(indices))) if client_ids is None else tuple(client_ids)
        return cls({k: np.asarray(v)[order] for k, v in arrays.items()}, np.concatenate([[0], np.cumsum(sizes)]), ids)

    @property
    def num_clients(self) -> int:
        return len(self.offsets) - 1

    @property
    def num_examples(self) -> int:
        return int(self.offsets[-1])

    @property
    def sizes(self) -> np.ndarray:
        """Examples per client, int64 [N]."""
        return np.diff(self.offsets)

    @property
    def client_of_example(self) -> np.ndarray:
        """int64 [sum n_i]: the client each flat row belongs to."""
        return np.repeat(np.arange(self.num_clients), self.sizes)

    def client(self, i: int) -> dict:
        """Client i's examples (views, not copies)."""
        lo, hi = self.offsets[i], self.offsets[i + 1]
        return {k: v[lo:hi] for k, v in self.arrays.items()}

    def select(self, clients: Sequence[int]) -> "RaggedClients":
        """The clients ``clients`` (indices, in that order)."""
        chosen = np.asarray(clients, np.int64)
        if chosen.size and (chosen.min() < 0 or chosen.max() >= self.num_clients):
            raise ValueError(f"client indices must lie in [0, {self.num_clients}), got {chosen.min()}..{chosen.max()}")
        sizes = self.sizes[chosen]
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        rows = np.arange(offsets[-1]) + np.repeat(self.offsets[chosen] - offsets[:-1], sizes)
        arrays = {k: np.asarray(v)[rows] for k, v in self.arrays.items()}
        return RaggedClients(arrays, offsets, tuple(self.client_ids[i] for i in chosen))

    def map_arrays(self, fn) -> "RaggedClients":
        """The same clients with ``arrays`` replaced by ``fn(arrays)`` (same number of rows)."""
        return RaggedClients(fn(dict(self.arrays)), self.offsets, self.client_ids)

    def to_batch(self, bucket_ratio: float = DEFAULT_BUCKET_RATIO) -> RaggedBatch:
        """The device layout rounds train on without padding
        (:class:`~fedjax_clust.core.ragged_batch.RaggedBatch`: the flat arrays, starts, sizes and a size-bucket
        plan whose full passes count at most ``bucket_ratio`` times the real examples)."""
        return RaggedBatch.from_flat(self.arrays, self.offsets, bucket_ratio=bucket_ratio)

    def padding_factor(self) -> float:
        """N * n_max / sum_i n_i: how many times the real examples the padded layout stores (and a full pass
        over padded clients computes)."""
        total = self.num_examples
        return float(self.num_clients * self.sizes.max() / total) if total else 1.0

    def to_padded(self, n_max: Optional[int] = None) -> dict:
        """The padded layout: leaves [N, n_max, ...] (zeros past each client's examples) and ``"mask"``
        [N, n_max] bool, as :func:`fedjax_clust.data.partition.pad_clients` builds, in one scatter per array.
        ``n_max`` (default: the largest client) below a client's size is refused."""
        sizes = self.sizes
        largest = int(sizes.max()) if sizes.size else 0
        n_max = largest if n_max is None else int(n_max)
        if n_max < largest:
            raise ValueError(f"n_max={n_max} is below the largest client ({largest} examples)")
        position = np.arange(self.num_examples) - np.repeat(self.offsets[:-1], sizes)
        client = self.client_of_example
        out = {}
        for name, values in self.arrays.items():
            values = np.asarray(values)
            padded = np.zeros((self.num_clients, n_max) + values.shape[1:], values.dtype)
            padded[client, position] = values
            out[name] = padded
        out["mask"] = np.arange(n_max)[None, :] < sizes[:, None]
        return out
