"""Clustered federated image data: the per-client arrays an image task trains and tests on, padded to the largest
client or ragged (flat, :class:`~fedjax_clust.core.ragged_batch.RaggedBatch`)."""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from fedjax_clust.core.ragged_batch import DEFAULT_BUCKET_RATIO, LAYOUTS, RaggedBatch
from fedjax_clust.core.validation import check_choice, check_int, check_real, check_seed
from fedjax_clust.data.image_set import ImageSet
from fedjax_clust.data.partition import (
    MIN_EXAMPLES,
    pad_clients,
    split_sizes,
    split_train_test,
)
from fedjax_clust.data.partitioners import LABEL_SKEW, allocate_like, parse_partition, partition_indices
from fedjax_clust.data.transforms import (
    apply_structure,
    check_structure,
    route_by_label_group,
)
from fedjax_clust.parallel.memory import check_task_size

__all__ = ["FederatedImages", "clustered_split", "from_client_lists", "standardize"]


class FederatedImages(NamedTuple):
    """Per-client data, padded: ``train``/``test`` dicts with ``x`` [N, n, H, W, C] float32, ``y`` [N, n]
    int32 and ``mask`` [N, n] bool; or ragged: :class:`~fedjax_clust.core.ragged_batch.RaggedBatch` with ``x``
    [T, H, W, C] and ``y`` [T]; ``clusters`` [N] int (the true cluster, -1 if unknown)."""

    train: dict
    test: dict
    clusters: np.ndarray
    num_classes: int

    @property
    def num_clients(self) -> int:
        return int(self.clusters.shape[0])

    @property
    def image_shape(self) -> tuple:
        if isinstance(self.train, RaggedBatch):
            return tuple(self.train.examples["x"].shape[1:])
        return tuple(self.train["x"].shape[2:])

    @property
    def client_sizes(self) -> np.ndarray:
        """Training examples per client [N]."""
        if isinstance(self.train, RaggedBatch):
            return np.asarray(self.train.sizes)
        return self.train["mask"].sum(axis=1)


def standardize(data: FederatedImages, mean: Optional[float] = None, std: Optional[float] = None):
    """Pixels mapped to (x - mean) / std, by default the mean and std of all real, finite training pixels
    (the authors' MNIST scripts normalise with MNIST's (0.1307, 0.3081)); padding stays 0. A non-finite pixel
    (a faulty client's data) stays non-finite and is left out of the statistics, so it reaches only its own
    client's model. Padded and ragged data alike (a ragged layout holds real examples only)."""
    train = data.train
    real = np.asarray(train.examples["x"]) if isinstance(train, RaggedBatch) else train["x"][train["mask"]]
    real = real[np.isfinite(real)]
    mean = float(real.mean()) if mean is None else float(mean)
    std = float(real.std()) if std is None else float(std)
    std = std if std > 0 else 1.0

    def scale(part):
        if isinstance(part, RaggedBatch):
            x = (np.asarray(part.examples["x"]) - mean) / std
            return part.with_examples({**part.examples, "x": x.astype(np.float32)})
        x = np.where(part["mask"].reshape(part["mask"].shape + (1,) * 3), (part["x"] - mean) / std, 0.0)
        return {**part, "x": x.astype(np.float32)}

    return data._replace(train=scale(data.train), test=scale(data.test))


def _client_examples(images, labels, sizes, test_fraction, start=0):
    clients_train, clients_test = [], []
    for size in sizes:
        n_train, _ = split_train_test(int(size), test_fraction)
        idx = np.arange(start, start + size)
        clients_train.append({"x": images[idx[:n_train]], "y": labels[idx[:n_train]]})
        clients_test.append({"x": images[idx[n_train:]], "y": labels[idx[n_train:]]})
        start += size
    return clients_train, clients_test


def _cluster_groups(labels, structure, num_clusters, num_classes):
    """The indices of each cluster's examples: K equal consecutive parts, or under "label-groups" the examples
    of the classes cluster k owns."""
    if structure == "label-groups":
        owner = route_by_label_group(labels, num_clusters, num_classes)
        return [np.flatnonzero(owner == k) for k in range(num_clusters)]
    per = len(labels) // num_clusters
    return [np.arange(k * per, (k + 1) * per) for k in range(num_clusters)]


def clustered_split(
    images: ImageSet,
    *,
    structure: str,
    num_clusters: int,
    clients_per_cluster: int,
    test_fraction: float = 0.2,
    size_sigma: float = 0.0,
    seed: int = 0,
    test_images: Optional[ImageSet] = None,
    partition: str = "iid",
) -> FederatedImages:
    """K clusters x ``clients_per_cluster`` clients of ``images`` under ``structure`` (see
    :mod:`fedjax_clust.data.partition` and :mod:`fedjax_clust.data.transforms`).

    Cluster k's examples are transformed by the structure; the split is a pure function of ``seed``. Without
    ``test_images`` each client's examples are divided into training and test examples (``test_fraction``);
    with them (a source's official test split, as the papers evaluate) every example of ``images`` a client
    gets is a training example, and its test examples are its equal share of its cluster's part of
    ``test_images``, shuffled and transformed the same way (``test_fraction`` unused; ``size_sigma`` shapes the
    training sizes only).
    """
    check_int("num_clusters", num_clusters)
    check_int("clients_per_cluster", clients_per_cluster)
    check_real("test_fraction", test_fraction, low=0.0, high=1.0, low_open=True, high_open=True)
    check_real("size_sigma", size_sigma, low=0.0)
    check_seed(seed)
    part = parse_partition(partition)
    if size_sigma > 0 and part.name not in ("iid", "dirichlet"):
        raise ValueError(
            f"size_sigma={size_sigma} and partition={partition!r} both shape the clients' sizes; use one of them "
            "(size_sigma combines with 'iid' and 'dirichlet:ALPHA' only)"
        )
    check_structure(structure, num_clusters, images.num_classes, images.images.shape[1:3])
    if test_images is not None and (
        test_images.images.shape[1:] != images.images.shape[1:] or test_images.num_classes != images.num_classes
    ):
        raise ValueError(
            f"test_images ({test_images.name}: {test_images.images.shape[1:]}, {test_images.num_classes} classes) "
            f"do not match images ({images.images.shape[1:]}, {images.num_classes} classes)"
        )
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(images.labels))
    pooled_x, pooled_y = images.images[order], images.labels[order]
    groups = _cluster_groups(pooled_y, structure, num_clusters, images.num_classes)
    if test_images is not None:
        test_order = rng.permutation(len(test_images.labels))
        test_x, test_y = test_images.images[test_order], test_images.labels[test_order]
        test_groups = _cluster_groups(test_y, structure, num_clusters, images.num_classes)
    num_classes = images.num_classes // num_clusters if structure == "label-groups" else images.num_classes
    n_total = num_clusters * clients_per_cluster
    examples = sum(len(g) for g in groups) + (0 if test_images is None else sum(len(g) for g in test_groups))
    check_task_size(4 * examples * int(np.prod(images.images.shape[1:])) * 2, "the image task")
    train, test = [], []
    for k, group in enumerate(groups):
        if len(group) < clients_per_cluster * MIN_EXAMPLES:
            raise ValueError(
                f"cluster {k} has {len(group)} examples of {images.name}, too few for "
                f"{clients_per_cluster} clients with {MIN_EXAMPLES} examples each; use fewer "
                "clients or a larger source"
            )
        x, y = apply_structure(structure, pooled_x[group], pooled_y[group], k, images.num_classes, num_clusters)
        if part.name == "iid":  # the papers' split (and size_sigma's), unchanged
            sizes = split_sizes(len(group), clients_per_cluster, size_sigma, rng)
            parts = np.split(np.arange(len(y)), np.cumsum(sizes)[:-1])
        elif size_sigma > 0:  # Dirichlet label mixes with log-normal sizes
            sizes = split_sizes(len(group), clients_per_cluster, size_sigma, rng)
            parts = partition_indices(part, y, clients_per_cluster, rng, sizes=sizes)
        else:
            parts = partition_indices(part, y, clients_per_cluster, rng)
        if test_images is None:
            if part.name != "iid":  # the clients' examples one after the other (iid's already are)
                order = np.concatenate(parts)
                x, y = x[order], y[order]
            tr, te = _client_examples(x, y, [len(p) for p in parts], test_fraction)
        else:
            tr = [{"x": x[idx], "y": y[idx]} for idx in parts]
            group = test_groups[k]
            if len(group) < clients_per_cluster:
                raise ValueError(
                    f"cluster {k} has {len(group)} test examples of {test_images.name}, fewer than its "
                    f"{clients_per_cluster} clients"
                )
            tx, ty = apply_structure(structure, test_x[group], test_y[group], k, images.num_classes, num_clusters)
            if part.name in LABEL_SKEW:
                shares = allocate_like(ty, [y[idx] for idx in parts])
            else:
                shares = np.array_split(np.arange(len(ty)), clients_per_cluster)
            te = [{"x": tx[idx], "y": ty[idx]} for idx in shares]
        train += tr
        test += te
    clusters = np.repeat(np.arange(num_clusters), clients_per_cluster)
    assert len(train) == n_total
    return FederatedImages(pad_clients(train), pad_clients(test), clusters, num_classes)


def from_client_lists(
    train: list,
    test: list,
    clusters: Optional[np.ndarray],
    num_classes: int,
    *,
    layout: str = "ragged",
    bucket_ratio: float = DEFAULT_BUCKET_RATIO,
) -> FederatedImages:
    """Per-client example dicts ``{"x": [n_i, H, W, C], "y": [n_i]}`` as a task's data: ``layout`` "ragged"
    (default: every client's examples flat, one after the other, with size buckets of ``bucket_ratio``, the layout
    the natural-data readers give, :class:`~fedjax_clust.core.ragged_batch.RaggedBatch`) or "padded" (every client
    zero-padded to the largest, with a mask, :func:`~fedjax_clust.data.partition.pad_clients`). Full passes read
    the same examples in both (the same models to float32 rounding); minibatches are drawn from the same examples
    by another sampler. A client of 3,000 examples beside 199 of 10 holds 4,990 examples ragged, 600,000 padded."""
    check_choice("layout", layout, LAYOUTS)
    clusters = np.full(len(train), -1) if clusters is None else np.asarray(clusters, np.int64)
    if clusters.shape != (len(train),):
        raise ValueError(f"clusters must have one entry per client ({len(train)}), got shape {clusters.shape}")
    if len(test) != len(train):
        raise ValueError(f"test must hold one dict per client ({len(train)}), got {len(test)}")
    if layout == "padded":
        return FederatedImages(pad_clients(train), pad_clients(test), clusters, int(num_classes))
    from fedjax_clust.data.ragged import RaggedClients

    def flat(clients):
        return RaggedClients.from_clients(clients).to_batch(bucket_ratio)

    return FederatedImages(flat(train), flat(test), clusters, int(num_classes))
