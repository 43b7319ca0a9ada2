"""Tasks on natural federated partitions read from downloaded files: FEMNIST (by writer) and CIFAR-100 (by
Pachinko allocation).

* ``femnist`` — LEAF's FEMNIST (``data_file`` = LEAF's ``data/femnist/data`` folder with ``train/`` and
  ``test/``, or one of their .json files), TFF's EMNIST-62 (``emnist_all.sqlite`` / ``.sqlite.lzma``;
  ``only_digits`` reads its 10-class splits) or the Hugging Face ``flwrlabs/femnist`` Parquet files (a file or
  the folder; columns ``writer_id``, ``character``, ``image``; :mod:`fedjax_clust.data.parquet`, needs
  pyarrow; one split, so ``test_fraction`` of each writer is held out). Writers are the clients, 62 classes,
  28 x 28 images; model ``leaf-cnn`` (LEAF's CNN) by default.
* ``cifar100-pachinko`` — TFF's CIFAR-100 (``cifar100.sqlite`` / ``.sqlite.lzma``): 500 training clients of
  100 examples each; model ``resnet9`` by default.

Same-client test splits: both formats give each client training and test examples of its own (LEAF's
"sample" split, TFF's ``*_train`` / ``*_test``), matched by client id. A client with training examples and no
test example is left out (counted in the config's ``clients_without_test``); clients found only in the test
split are clients never seen in training (``unseen_test_clients``): the task's ``unseen_data`` splits each
one's examples into adaptation examples (the first ``unseen_adapt_fraction``) that choose its model by the
algorithm's rule and test examples that score it (:mod:`fedjax_clust.core.unseen`). A LEAF file given without a
test split holds out ``test_fraction`` of every client's examples.

``max_clients`` keeps a seeded random subset of the training clients (the others' examples are never decoded;
a LEAF folder's files are parsed once more to list the users); the full FEMNIST has about 3,500 writers and a
6.6M-parameter model per client row, more than most single devices hold. Clients are ragged on the device by
default (``layout="ragged"``, :class:`~fedjax_clust.core.ragged_batch.RaggedBatch`: memory proportional to the
real examples, minibatches drawn by index, full passes run by size bucket, at most ``bucket_ratio`` times the
real examples); ``layout="padded"`` stores every client padded to the largest, and the config records
``padding_factor`` (N n_max / sum n_i: that layout's memory and full-pass cost) and, ragged,
``bucket_factor`` (what a full pass counts over the real examples). Pixels are standardised with the training
pixels' mean and standard deviation. The config records the file's SHA-256 (``data_file_sha256``), so two runs
on different downloads never look alike.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Literal, Optional, Union

import jax.numpy as jnp
import numpy as np

from fedjax_clust.core.ragged_batch import DEFAULT_BUCKET_RATIO, LAYOUTS
from fedjax_clust.core.validation import check_choice, check_int, check_real, check_seed
from fedjax_clust.data.data_file import DataFileError, fingerprint, require_path
from fedjax_clust.data.federated import FederatedImages, standardize
from fedjax_clust.data.leaf import LEAF_IMAGE_DATASETS, leaf_split_files, leaf_user_ids, read_leaf_images
from fedjax_clust.data.parquet import (
    FEMNIST_PARQUET_COLUMNS,
    is_parquet,
    parquet_client_ids,
    parquet_split_files,
    read_parquet_images,
)
from fedjax_clust.data.partition import split_train_test
from fedjax_clust.data.ragged import RaggedClients
from fedjax_clust.data.tff_sqlite import TFF_IMAGE_DATASETS, read_tff_images, tff_client_ids
from fedjax_clust.models import Model
from fedjax_clust.models.names import ModelName
from fedjax_clust.tasks.base import Task
from fedjax_clust.tasks.images import federated_image_task

__all__ = [
    "natural_image_task",
    "femnist_task",
    "cifar100_pachinko_task",
    "read_natural_images",
    "read_partition",
    "unseen_task_data",
    "device_layout",
    "partition_config",
    "NATURAL_TASKS",
    "file_format",
]


def file_format(path: str) -> str:
    """ "tff-sqlite" for ``*.sqlite`` / ``*.sqlite.lzma`` / ``*.db``, "parquet" for a .parquet file or a folder
    of them (a Hugging Face dataset's files), else "leaf-json"."""
    name = os.path.basename(os.fspath(path).rstrip("/"))
    if name.endswith((".sqlite", ".sqlite.lzma", ".db")):
        return "tff-sqlite"
    return "parquet" if is_parquet(path) else "leaf-json"


def _holdout(clients: RaggedClients, test_fraction: float):
    """(train, test): the last round(test_fraction n_i) examples of each client (at least one, and one kept)
    are its test examples (:func:`fedjax_clust.data.partition.split_train_test`)."""
    sizes = clients.sizes
    n_train = np.array([split_train_test(int(n), test_fraction)[0] for n in sizes])
    position = np.arange(clients.num_examples) - np.repeat(clients.offsets[:-1], sizes)
    is_train = position < np.repeat(n_train, sizes)

    def part(rows, counts):
        arrays = {k: v[rows] for k, v in clients.arrays.items()}
        return RaggedClients(arrays, np.concatenate([[0], np.cumsum(counts)]), clients.client_ids)

    return part(is_train, n_train), part(~is_train, sizes - n_train)


def read_natural_images(
    data_file: str,
    dataset: str,
    *,
    max_clients: Optional[int] = None,
    only_digits: bool = False,
    test_fraction: float = 0.2,
    seed: int = 0,
):
    """(train, test, num_classes, info, unseen): ragged clients of a natural image partition (see the module
    docstring), the same clients in the same order in ``train`` and ``test``, ``info`` the counts the config
    records, and ``unseen`` the clients found only in the test split (None when there are none): all of them,
    or with ``max_clients`` at most that many, drawn with ``seed``."""
    path = require_path(data_file, f"{dataset} data file")
    fmt = file_format(path)
    if fmt == "tff-sqlite":
        name = {"femnist": "emnist-digits" if only_digits else "emnist"}.get(dataset, dataset)
        if name not in TFF_IMAGE_DATASETS:
            raise ValueError(f"{dataset} has no TFF SQLite reader; expected one of {sorted(TFF_IMAGE_DATASETS)}")
        schema = TFF_IMAGE_DATASETS[name]
        splits = {"train": schema.train_split, "test": schema.test_split}
        reader = lambda split, keep: read_tff_images(path, name, splits[split], clients=keep)  # noqa: E731
        ids = lambda split: tff_client_ids(path, splits[split])  # noqa: E731
        has_test, num_classes = True, schema.num_classes
    elif fmt == "parquet":
        if dataset != "femnist" or only_digits:
            raise ValueError("Parquet files are read for femnist (flwrlabs/femnist's columns), with its 62 classes")
        files = parquet_split_files(path)
        num_classes, columns = 62, FEMNIST_PARQUET_COLUMNS
        reader = lambda split, keep: read_parquet_images(  # noqa: E731
            files[split], columns, shape=(28, 28, 1), num_classes=num_classes, clients=keep
        )
        ids = lambda split: parquet_client_ids(files[split], columns.client)  # noqa: E731
        has_test = "test" in files
    else:
        if only_digits:
            raise ValueError(
                "only_digits applies to TFF's EMNIST file (emnist_all.sqlite); LEAF's FEMNIST has 62 classes"
            )
        if dataset not in LEAF_IMAGE_DATASETS:
            raise ValueError(f"{dataset} has no LEAF reader; expected one of {sorted(LEAF_IMAGE_DATASETS)}")
        files = leaf_split_files(path)
        reader = lambda split, keep: read_leaf_images(files[split], dataset, clients=keep)  # noqa: E731
        ids = lambda split: leaf_user_ids(files[split])  # noqa: E731
        has_test, num_classes = "test" in files, LEAF_IMAGE_DATASETS[dataset].num_classes
    train, test, info, unseen = read_partition(
        path, fmt, reader, ids, has_test, max_clients=max_clients, test_fraction=test_fraction, seed=seed
    )
    if dataset == "femnist" and num_classes == FEMNIST_CLASSES:
        num_classes = classes_in_data(train, test, unseen)
    return train, test, num_classes, info, unseen


FEMNIST_CLASSES, DIGITS = 62, 10


def classes_in_data(*parts) -> int:
    """FEMNIST's classes as the data hold them: its 10 digits when every label of every part (ragged clients
    with a ``y`` array; None parts skipped) is a digit -- a digits-only LEAF or Parquet file, what TFF's
    ``only_digits`` splits are --, else all 62. (Not the largest label plus one: a subset of writers that lacks
    a letter would change the model's shape.)"""
    labels = [np.asarray(p.arrays["y"]) for p in parts if p is not None]
    return DIGITS if all(y.size == 0 or y.max() < DIGITS for y in labels) else FEMNIST_CLASSES


def read_partition(path, fmt, reader, ids, has_test: bool, *, max_clients, test_fraction: float, seed: int):
    """(train, test, info, unseen) of a natural partition from its split reader ``reader(split, keep)`` (ragged
    clients of a split, only the ids ``keep`` when not None) and id lister ``ids(split)``: the same clients in
    the same order in ``train`` and ``test`` (or each client's last ``test_fraction`` held out when the data
    has no test split), ``max_clients`` training clients drawn with ``seed``, the clients found only in the
    test split as ``unseen`` (at most ``max_clients`` of them), ``info`` the counts a config records."""
    keep, unseen_ids = None, []
    rng = np.random.default_rng(seed)
    if max_clients is not None or has_test:
        everyone = ids("train")
        if max_clients is not None and max_clients < len(everyone):
            chosen = rng.choice(len(everyone), max_clients, replace=False)
            keep = {everyone[i] for i in chosen}
        if has_test:
            unseen_ids = sorted(set(ids("test")) - set(everyone))
            if max_clients is not None and max_clients < len(unseen_ids):
                unseen_ids = [unseen_ids[i] for i in np.sort(rng.choice(len(unseen_ids), max_clients, replace=False))]
    train = reader("train", keep)
    info = {"format": fmt, "clients_without_test": 0, "unseen_test_clients": len(unseen_ids)}
    unseen = None
    if has_test:
        test = reader("test", None if keep is None else keep | set(unseen_ids))
        position = {c: i for i, c in enumerate(test.client_ids)}
        unseen_ids = [c for c in unseen_ids if c in position]  # a listed client may have no (usable) example
        info["unseen_test_clients"] = len(unseen_ids)
        if unseen_ids:
            unseen = test.select([position[c] for c in unseen_ids])
        test_ids = set(test.client_ids)
        in_both = [i for i, c in enumerate(train.client_ids) if c in test_ids]
        info["clients_without_test"] = train.num_clients - len(in_both)
        if not in_both:
            raise DataFileError(f"{path}: no client has both training and test examples")
        train = train.select(in_both)
        test = test.select([position[c] for c in train.client_ids])
    else:
        train, test = _holdout(train, test_fraction)
    return train, test, info, unseen


def _pixel_stats(train: RaggedClients):
    """(mean, std) of the finite training pixels (std 1 when they do not vary)."""
    x = np.asarray(train.arrays["x"])
    finite = x[np.isfinite(x)]
    mean = float(finite.mean()) if finite.size else 0.0
    std = float(finite.std()) if finite.size else 1.0
    return mean, (std if std > 0 else 1.0)


def _standardized(clients: RaggedClients, mean: float, std: float) -> RaggedClients:
    """Pixels mapped to (x - mean) / std, as :func:`~fedjax_clust.data.federated.standardize` does for the
    padded layout (non-finite pixels stay so)."""

    def scale(arrays):
        return {**arrays, "x": ((np.asarray(arrays["x"]) - mean) / std).astype(np.float32)}

    return clients.map_arrays(scale)


def device_layout(layout: str, bucket_ratio: float):
    """``RaggedClients -> `` what rounds train on: the padded dict of device arrays (``"padded"``) or a
    :class:`~fedjax_clust.core.ragged_batch.RaggedBatch` with size buckets of ``bucket_ratio`` (``"ragged"``)."""
    if layout == "padded":
        return lambda clients: {k: jnp.asarray(v) for k, v in clients.to_padded().items()}
    return lambda clients: clients.to_batch(bucket_ratio)


def partition_config(data_file: str, train: RaggedClients, test: RaggedClients, layout: str, bucket_ratio, data):
    """What a natural task's config records of its file and clients: the file and its SHA-256, the clients and
    examples, the padding factor, and for the ragged layout the bucket ratio and ``bucket_factor`` (the example
    slots a full pass over ``data``, the training batch, computes over the real examples)."""
    record = dict(
        data_file=os.path.abspath(data_file),
        data_file_sha256=fingerprint(data_file),
        clients=train.num_clients,
        train_examples=train.num_examples,
        test_examples=test.num_examples,
        padding_factor=round(train.padding_factor(), 4),
    )
    if layout != "padded":
        factor = data.counted_examples() / max(train.num_examples, 1)
        record.update(layout=layout, bucket_ratio=bucket_ratio, bucket_factor=round(factor, 4))
    return record


def unseen_task_data(unseen: Optional[RaggedClients], adapt_fraction: float, on_device):
    """(``Task.unseen_data`` or None, the config's unseen_* entries) of the test-only clients ``unseen``, each
    split by :func:`_unseen_split` and put on the device by ``on_device`` (ragged or padded)."""
    if unseen is None:
        return None, {}
    adapt, held, dropped = _unseen_split(unseen, adapt_fraction)
    data = {"adapt": on_device(adapt), "test": on_device(held)} if adapt.num_clients else None
    info = dict(
        unseen_clients=adapt.num_clients, unseen_clients_too_small=dropped, unseen_adapt_fraction=adapt_fraction
    )
    return data, info


def _unseen_split(unseen: RaggedClients, adapt_fraction: float):
    """(adapt, test, dropped): each unseen client's last round((1 - adapt_fraction) n) examples (at least one,
    and one left) score it, the examples before them choose its model; clients with fewer than 2 examples are
    dropped."""
    enough = np.flatnonzero(unseen.sizes >= 2).tolist()
    if not len(enough):
        empty = unseen.select(enough)
        return empty, empty, unseen.num_clients
    adapt, test = _holdout(unseen.select(enough), 1.0 - adapt_fraction)
    return adapt, test, unseen.num_clients - len(enough)


def natural_image_task(
    *,
    dataset: str,
    data_file: str,
    model: Union[ModelName, Model] = "leaf-cnn",
    max_clients: Optional[int] = None,
    only_digits: bool = False,
    test_fraction: float = 0.2,
    hidden: int = 200,
    loss: str = "cross-entropy",
    seed: int = 0,
    layout: str = "ragged",
    bucket_ratio: float = DEFAULT_BUCKET_RATIO,
    unseen_adapt_fraction: float = 0.5,
) -> Task:
    """A task on a natural federated image partition (see the module docstring).

    Args:
      dataset: "femnist" or "cifar100" (the registry's ``femnist`` / ``cifar100-pachinko`` fix it).
      data_file: the downloaded data: LEAF's data folder (train/ and test/), one LEAF .json file, TFF's
        .sqlite / .sqlite.lzma file, or (femnist) Parquet files (docs/guides/real-data.md gives the downloads).
      model: a built-in model name or a :class:`~fedjax_clust.models.Model`.
      max_clients: keep this many training clients, a random subset drawn with ``seed`` (None: all).
      only_digits: TFF EMNIST only: its 10-class digits splits. A LEAF or Parquet FEMNIST file whose labels are
        all digits gets a 10-class model too (:func:`classes_in_data`); ``num_classes`` in the config says which.
      test_fraction: share of each client's examples held out when the data has no test split.
      hidden: hidden width of the ``mlp`` model.
      loss: "cross-entropy" or "probability" (see :mod:`fedjax_clust.tasks.images`).
      seed: the client subset (``max_clients``) and nothing else; the models' initial parameters come from the
        run's seed.
      layout: "ragged" (flat examples, size-bucketed full passes) or "padded" (every client padded to the
        largest).
      bucket_ratio: ragged layout: the largest over the smallest client size within a size bucket (>= 1).
      unseen_adapt_fraction: clients found only in the test split (never seen in training): the share of each
        one's examples that choose its model, the rest scoring it (:mod:`fedjax_clust.core.unseen`).
    """
    check_seed(seed)
    check_real("unseen_adapt_fraction", unseen_adapt_fraction, low=0.0, high=1.0, low_open=True, high_open=True)
    check_choice("layout", layout, LAYOUTS)
    check_real("bucket_ratio", bucket_ratio, low=1.0)
    if max_clients is not None:
        check_int("max_clients", max_clients, 1)
    check_real("test_fraction", test_fraction, low=0.0, high=1.0, low_open=True, high_open=True)
    train, test, classes, info, unseen = read_natural_images(
        data_file, dataset, max_clients=max_clients, only_digits=only_digits, test_fraction=test_fraction, seed=seed
    )
    clusters = np.full(train.num_clients, -1)
    mean, std = _pixel_stats(train)
    on_device = device_layout(layout, bucket_ratio)
    if layout == "padded":
        data = standardize(FederatedImages(train.to_padded(), test.to_padded(), clusters, classes), mean, std)
    else:
        train, test = _standardized(train, mean, std), _standardized(test, mean, std)
        data = FederatedImages(on_device(train), on_device(test), clusters, classes)
    unseen_data, unseen_info = unseen_task_data(
        None if unseen is None else _standardized(unseen, mean, std), unseen_adapt_fraction, on_device
    )
    config = dict(
        dataset=dataset,
        max_clients=max_clients,
        only_digits=only_digits,
        num_classes=classes,
        test_fraction=test_fraction,
        hidden=hidden,
        seed=seed,
        **partition_config(data_file, train, test, layout, bucket_ratio, data.train),
        **info,
        **unseen_info,
    )
    name = "femnist" if dataset == "femnist" else f"{dataset}-pachinko"
    task = federated_image_task(data, model, name=name, hidden=hidden, loss=loss, config=config)
    return task if unseen_data is None else dataclasses.replace(task, unseen_data=unseen_data)


def femnist_task(
    *,
    data_file: str,
    model: Union[ModelName, Model] = "leaf-cnn",
    max_clients: Optional[int] = None,
    only_digits: bool = False,
    test_fraction: float = 0.2,
    hidden: int = 200,
    loss: Literal["cross-entropy", "probability"] = "cross-entropy",
    seed: int = 0,
    layout: Literal["ragged", "padded"] = "ragged",
    bucket_ratio: float = DEFAULT_BUCKET_RATIO,
    unseen_adapt_fraction: float = 0.5,
) -> Task:
    """FEMNIST by writer from LEAF's JSON or TFF's EMNIST SQLite file (see the module docstring).

    Args:
      data_file: LEAF's femnist data folder (train/ and test/ of .json files), one LEAF .json file, TFF's
        emnist_all.sqlite(.lzma), or flwrlabs/femnist's Parquet file(s) (needs pyarrow);
        docs/guides/real-data.md gives the downloads.
      model: a built-in model name or a Model (default leaf-cnn, LEAF's FEMNIST CNN).
      max_clients: keep this many writers, a random subset drawn with the seed (None: all).
      only_digits: TFF's file only: its 10-class digits_only splits.
      test_fraction: share of each writer's examples held out when the data has no test split.
      hidden: hidden width of the mlp model.
      loss: "cross-entropy" or "probability".
      layout: "ragged" (default: no padding to the largest client, full passes by size bucket) or "padded".
      bucket_ratio: ragged layout: largest over smallest client size within a size bucket (default 1.25).
      unseen_adapt_fraction: writers only in the test split: the share of each one's examples that choose its
        model by the algorithm's rule, the rest scoring it (default 0.5).
    """
    return natural_image_task(
        dataset="femnist",
        unseen_adapt_fraction=unseen_adapt_fraction,
        data_file=data_file,
        model=model,
        max_clients=max_clients,
        only_digits=only_digits,
        test_fraction=test_fraction,
        hidden=hidden,
        loss=loss,
        seed=seed,
        layout=layout,
        bucket_ratio=bucket_ratio,
    )


def cifar100_pachinko_task(
    *,
    data_file: str,
    model: Union[ModelName, Model] = "resnet9",
    max_clients: Optional[int] = None,
    hidden: int = 200,
    loss: Literal["cross-entropy", "probability"] = "cross-entropy",
    seed: int = 0,
    layout: Literal["ragged", "padded"] = "ragged",
    bucket_ratio: float = DEFAULT_BUCKET_RATIO,
) -> Task:
    """CIFAR-100 by Pachinko allocation from TFF's cifar100.sqlite(.lzma) (see the module docstring).

    Args:
      data_file: TFF's cifar100.sqlite or cifar100.sqlite.lzma; docs/guides/real-data.md gives the download.
      model: a built-in model name or a Model (default resnet9).
      max_clients: keep this many training clients, a random subset drawn with the seed (None: all 500).
      hidden: hidden width of the mlp model.
      loss: "cross-entropy" or "probability".
      layout: "ragged" (default: no padding to the largest client, full passes by size bucket) or "padded".
      bucket_ratio: ragged layout: largest over smallest client size within a size bucket (default 1.25).
    """
    return natural_image_task(
        dataset="cifar100",
        data_file=data_file,
        model=model,
        max_clients=max_clients,
        hidden=hidden,
        loss=loss,
        seed=seed,
        layout=layout,
        bucket_ratio=bucket_ratio,
    )


NATURAL_TASKS = {"femnist": femnist_task, "cifar100-pachinko": cifar100_pachinko_task}
