"""A population as an index into a shared pool of images: N clients cost their example indices, not copies.

TFF's ``ClientData`` and FedJAX's ``FederatedData`` are an index of clients: a round asks for its cohort's
examples, and nothing about the population's size reaches the round's memory. Here client i's examples are
``codes[i, :n_i]``, indices into one pool of images shared by every client, and the client's view of an image
is its cluster's transform (:mod:`fedjax_clust.data.transforms`: cluster k's images rotated by k x 90 degrees,
or inverted; a private-label cluster's labels are shifted when the population is built). The images of a set
of clients are built when they are asked for (:class:`PooledImages`): ``take`` builds them on the host,
``rows_on_device`` on a device from a copy of the pool kept there, equal bit for bit. A streamed run
(:mod:`fedjax_clust.run.streaming`) builds its cohort's S clients on the device each round (it copies their
codes, a few bytes an example, instead of their images), so a population of 10^6 clients of 64 examples holds
10^6 x 64 codes, labels and masks (0.58 GB, 0.65 GB with 8 test examples each) where its images would take
200 GB; a run whose population fits
on the device builds them all once.

How the population is drawn (:func:`pooled_clients`; documented choices):

* the pool is shuffled and split into a training pool and a test pool (``test_pool_fraction``), so a client's
  test images are never any client's training images; a client's view of an image is taken on its pixels in
  [0, 1] and then standardised with the training pool's mean and standard deviation (the image tasks
  standardise with their clients' training pixels after the view: the same for rotations and private labels);
* sizes are LEAF-like log-normal: n_i = round(m exp(sigma z_i - sigma^2 / 2)), z_i ~ N(0, 1), so the mean
  before clipping is m (``mean_examples``), clipped to [1, ``max_examples``]; clients are stored padded to
  ``max_examples`` with a mask;
* client i reads a window of n_i consecutive entries of one shuffled order of the training pool, starting at a
  uniform offset and wrapping around: its examples are distinct, clients overlap as they would drawing from a
  pool, and the draw costs O(N n) (``max_examples`` must not exceed the pool);
* clusters are contiguous blocks of clients, cluster(i) = floor(i K / N), as in
  :func:`~fedjax_clust.data.federated.clustered_split`; each client has ``test_examples`` test images drawn the
  same way from the test pool.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.core.host_rows import builds_rows
from fedjax_clust.core.validation import check_int, check_real, check_seed
from fedjax_clust.data.federated import FederatedImages
from fedjax_clust.data.image_set import ImageSet
from fedjax_clust.data.transforms import apply_structure, check_structure
from fedjax_clust.parallel.memory import check_task_size

__all__ = ["PooledImages", "pooled_clients", "materialise", "POOLED_STRUCTURES"]

POOLED_STRUCTURES = ("rotation", "private-label", "inverted")  # label-groups routes examples: not a pool view


class PooledImages:
    """Client images [N, n, H, W, C] float32 built on request: entry (i, j) is client i's cluster's view of
    ``pool[codes[i, j]]`` (:func:`~fedjax_clust.data.transforms.apply_structure`, on pixels in [0, 1]),
    standardised as (x - mean) / std (``standardise``), and 0 where ``mask`` is False.

    It stands where a padded ``x`` array stands in a task's host data: ``shape``, ``dtype``, ``nbytes`` (of the
    built array, what a resident run holds) and ``take(index, axis=0)`` (what ``np.take`` calls: the rows of
    clients ``index``, built). ``np.asarray`` builds every client (refused beyond the host's free memory);
    ``index_bytes`` is what the population costs; ``device_pools`` (device -> array) holds the pool's copies on
    devices, shared by the training and test images of one population."""

    def __init__(
        self,
        pool: np.ndarray,
        codes: np.ndarray,
        mask: np.ndarray,
        clusters: np.ndarray,
        structure: str,
        num_classes: int,
        num_clusters: int,
        standardise: tuple = (0.0, 1.0),
        device_pools: Optional[dict] = None,
    ):
        if structure not in POOLED_STRUCTURES:
            raise ValueError(f"structure must be one of {list(POOLED_STRUCTURES)}, got {structure!r}")
        self.pool = np.asarray(pool, np.float32)
        self.mean, self.std = (float(v) for v in standardise)
        if not (np.isfinite(self.mean) and np.isfinite(self.std) and self.std > 0):
            raise ValueError(f"standardise must be a finite mean and a positive std, got {standardise!r}")
        self.device_pools = {} if device_pools is None else device_pools  # device -> the pool's copy there
        self.codes = np.asarray(codes, np.int32)
        self.mask = np.asarray(mask, bool)
        self.clusters = np.asarray(clusters, np.int32)
        if self.codes.shape != self.mask.shape or self.codes.ndim != 2 or self.clusters.shape != self.codes.shape[:1]:
            raise ValueError(
                f"codes and mask must be [N, n] and clusters [N], got {self.codes.shape}, {self.mask.shape}, "
                f"{self.clusters.shape}"
            )
        if self.codes.size and (self.codes.min() < 0 or self.codes.max() >= len(self.pool)):
            raise ValueError(f"codes must index the pool of {len(self.pool)} images")
        self.structure, self.num_classes, self.num_clusters = structure, int(num_classes), int(num_clusters)

    shape = property(lambda self: self.codes.shape + self.pool.shape[1:])
    dtype = property(lambda self: self.pool.dtype)
    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape)))
    nbytes = property(lambda self: self.size * self.pool.dtype.itemsize)
    index_bytes = property(lambda self: self.codes.nbytes + self.mask.nbytes + self.clusters.nbytes)
    # what :meth:`rows_on_device` keeps on a device (the pool's copy), shared by the parts of one population
    device_source = property(lambda self: self.pool)

    def __len__(self) -> int:
        return self.codes.shape[0]

    def __repr__(self) -> str:
        return f"PooledImages(clients={len(self)}, shape={self.shape}, pool={len(self.pool)}, {self.structure})"

    def take(self, index, axis: int = 0, out=None, mode: str = "raise") -> np.ndarray:
        """Clients ``index``'s images, built: [len(index), n, H, W, C] (``axis`` must be 0)."""
        if axis != 0 or out is not None or mode != "raise":
            raise ValueError("PooledImages.take builds rows of clients: axis=0 only")
        index = self._checked(index)
        scalar = index.ndim == 0
        index = np.atleast_1d(index)
        check_task_size(index.size * (self.nbytes // max(len(self), 1)), f"building {index.size:,} clients' images")
        images = self.pool[self.codes[index]]  # [S, n, H, W, C]
        clusters = self.clusters[index]
        for k in np.unique(clusters):
            rows = clusters == k
            flat = images[rows].reshape((-1,) + self.pool.shape[1:])
            viewed, _ = apply_structure(
                self.structure, flat, np.zeros(len(flat), np.int32), int(k), self.num_classes, self.num_clusters
            )
            images[rows] = viewed.reshape(images[rows].shape)
        real = self.mask[index].reshape(self.mask[index].shape + (1,) * (self.pool.ndim - 1))
        images = np.where(real, (images - np.float32(self.mean)) * self._scale, np.float32(0.0))
        return images[0] if scalar else images

    def _checked(self, index) -> np.ndarray:
        """``index`` as integer client indices in [-N, N) (IndexError / ValueError otherwise)."""
        index = np.asarray(index)
        if index.size == 0:
            return index.astype(np.int64)
        if not np.issubdtype(index.dtype, np.integer):
            raise ValueError(f"client indices must be integers, got {index.dtype}")
        if index.min() < -len(self) or index.max() >= len(self):
            raise IndexError(f"client index out of range for {len(self)} clients")
        return index

    @property
    def _scale(self) -> np.float32:
        return np.float32(1.0) / np.float32(self.std)  # one float32 reciprocal: the host and the device multiply

    def rows_on_device(self, index, device) -> jax.Array:
        """Clients ``index``'s images built on ``device``: their codes, masks and clusters are copied there (a few
        bytes an example) and gathered from a copy of the pool kept on the device, viewed and standardised by one
        compiled program; equal bit for bit to :meth:`take` (the same float32 operations, one rounding each)."""
        index = self._checked(index)
        pools = self.device_pools
        if device not in pools:
            pools[device] = jax.device_put(self.pool, device)
        parts = [self.codes[index], self.mask[index], self.clusters[index]]
        codes, mask, clusters = (jax.device_put(x, device) for x in parts)
        constants = (np.float32(self.mean), self._scale)
        return _build_on_device(
            pools[device], codes, mask, clusters, *constants, structure=self.structure, num_clusters=self.num_clusters
        )

    def __getitem__(self, key):
        """Rows by a leading-axis key (int, slice, integer array), then the rest of ``key`` on the built rows."""
        first, rest = (key[0], tuple(key[1:])) if isinstance(key, tuple) else (key, ())
        rows = np.arange(len(self))[first]
        built = self.take(rows)
        return built[rest if np.ndim(rows) == 0 else (slice(None),) + rest]

    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError("a pooled population's images are built: converting them always copies")
        check_task_size(self.nbytes, f"building every client's images ({self!r}); stream it instead")
        built = self.take(np.arange(len(self)))
        return built if dtype is None else built.astype(dtype)


@functools.partial(jax.jit, static_argnames=("structure", "num_clusters"))
def _build_on_device(pool, codes, mask, clusters, mean, scale, structure, num_clusters):
    """:meth:`PooledImages.take` in JAX: gather, the cluster's view (every view computed, one selected per
    client), standardisation, padding zeroed."""
    images = jnp.take(pool, codes, axis=0)  # [S, n, H, W, C]
    per_client = clusters.reshape((-1,) + (1,) * (images.ndim - 1))
    if structure == "rotation":  # np.rot90(x, k, axes=(1, 2)) of each image: axes (2, 3) of the block
        views = [jnp.rot90(images, k, axes=(2, 3)) for k in range(4)]
        images = views[0]
        for k in range(1, 4):
            images = jnp.where(per_client % 4 == k, views[k], images)
    elif structure == "inverted":
        images = jnp.where(per_client % 2 == 1, jnp.float32(1.0) - images, images)
    real = mask.reshape(mask.shape + (1,) * (images.ndim - 2))
    return jnp.where(real, (images - mean) * scale, jnp.float32(0.0))


def materialise(tree: Any) -> Any:
    """``tree`` with every leaf that builds its rows (:func:`~fedjax_clust.core.host_rows.builds_rows`, a
    :class:`PooledImages`) built into a NumPy array; the tree itself when it has none."""
    if not any(builds_rows(x) for x in jax.tree.leaves(tree)):
        return tree
    return jax.tree.map(lambda x: np.asarray(x) if builds_rows(x) else x, tree)


def _lognormal_sizes(num_clients, mean, sigma, largest, rng):
    z = rng.standard_normal(num_clients)
    sizes = np.rint(mean * np.exp(sigma * z - sigma * sigma / 2.0))
    return np.clip(sizes, 1, largest).astype(np.int64)


def _windows(order: np.ndarray, sizes: np.ndarray, width: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """(codes [N, width], mask [N, width]): client i's first sizes[i] slots read ``order`` from a uniform
    offset, wrapping around (padding: code order[0], masked out)."""
    offsets = rng.integers(0, len(order), size=len(sizes))
    slots = np.arange(width)
    codes = order[(offsets[:, None] + slots[None, :]) % len(order)]
    mask = slots[None, :] < sizes[:, None]
    return np.where(mask, codes, order[0]).astype(np.int32), mask


def pooled_clients(
    images: ImageSet,
    *,
    num_clients: int,
    structure: str = "rotation",
    num_clusters: int = 4,
    mean_examples: float = 32.0,
    size_sigma: float = 0.5,
    max_examples: int = 64,
    test_examples: int = 8,
    test_pool_fraction: float = 0.2,
    seed: int = 0,
) -> FederatedImages:
    """N clients indexing ``images`` (module docstring): ``train`` / ``test`` dicts whose ``x`` is a
    :class:`PooledImages` [N, n, H, W, C], with ``y`` int32 and ``mask`` bool [N, n] arrays; ``clusters`` [N]."""
    num_clients = check_int("num_clients", num_clients)
    num_clusters = check_int("num_clusters", num_clusters, 1, num_clients)
    mean_examples = check_real("mean_examples", mean_examples, low=1.0)
    size_sigma = check_real("size_sigma", size_sigma, low=0.0)
    max_examples = check_int("max_examples", max_examples)
    test_examples = check_int("test_examples", test_examples)
    test_pool_fraction = check_real(
        "test_pool_fraction", test_pool_fraction, low=0.0, high=1.0, low_open=True, high_open=True
    )
    check_seed(seed)
    if structure not in POOLED_STRUCTURES:
        raise ValueError(f"a pooled population's structure must be one of {list(POOLED_STRUCTURES)}, got {structure!r}")
    check_structure(structure, num_clusters, images.num_classes, images.images.shape[1:])
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(images.images))
    n_test = int(round(test_pool_fraction * len(order)))
    test_order, train_order = np.sort(order[:n_test]), np.sort(order[n_test:])
    if max_examples > len(train_order) or test_examples > len(test_order):
        raise ValueError(
            f"max_examples={max_examples} / test_examples={test_examples} exceed the training / test pools "
            f"({len(train_order)} / {len(test_order)} images of {images.name}): a client's examples are distinct"
        )
    check_task_size(num_clients * (max_examples + test_examples) * 9, f"a pooled population of {num_clients:,} clients")
    train_pool = images.images[train_order]
    real = train_pool[np.isfinite(train_pool)]
    standardise = (float(real.mean()), float(real.std()) or 1.0)
    pool = np.asarray(images.images, np.float32)  # one pool; the two parts index disjoint images
    clusters = (np.arange(num_clients, dtype=np.int64) * num_clusters // num_clients).astype(np.int32)
    sizes = _lognormal_sizes(num_clients, mean_examples, size_sigma, max_examples, rng)
    parts: dict = {}
    device_pools: dict = {}  # the training and test images share the pool and its copies on devices
    for name, part_order, width, part_sizes in (
        ("train", rng.permutation(train_order), max_examples, sizes),
        ("test", rng.permutation(test_order), test_examples, np.full(num_clients, test_examples)),
    ):
        codes, mask = _windows(part_order, part_sizes, width, rng)
        labels = np.where(mask, images.labels[codes], 0).astype(np.int32)
        if structure == "private-label":
            labels = np.where(mask, (labels + clusters[:, None]) % images.num_classes, 0).astype(np.int32)
        x = PooledImages(
            pool, codes, mask, clusters, structure, images.num_classes, num_clusters, standardise, device_pools
        )
        parts[name] = {"x": x, "y": labels, "mask": mask}
    return FederatedImages(parts["train"], parts["test"], clusters, images.num_classes)
