"""Bring-your-own data as ``.npz`` files (``numpy.savez``). Three layouts, told apart by their keys:

1. **Pooled** — ``images`` [n, H, W] or [n, H, W, C] and ``labels`` [n] (integers from 0). The task splits
   it into clusters and clients and applies its cluster structure, like a built-in source
   (``--dataset npz:PATH`` with the ``mnist-*`` / ``cifar*`` tasks).
2. **One array + a client index** — ``images``, ``labels`` and ``client`` [n] (integers 0..N-1): example e
   belongs to client ``client[e]``. Optional ``test`` [n] bool marks held-out examples (otherwise each
   client's last ``test_fraction`` of examples are held out) and ``cluster`` [N] the true cluster of each
   client (enables ground-truth and misclustering).
3. **Per-client arrays** — ``images_0``, ``labels_0``, ``images_1``, ``labels_1``, ... (clients numbered from
   0 without gaps), optionally ``test_images_<i>`` / ``test_labels_<i>`` and ``cluster``.

Images are float in [0, 1] or uint8 in 0..255 (scaled to [0, 1]); a NaN or infinite pixel is refused, naming
the file, the array and the client (``allow_nonfinite=True`` keeps it, for a file made to simulate faulty
clients: :func:`~fedjax_clust.data.federated.standardize` leaves such pixels out of its statistics, so they
reach their own client's model only). Layouts 2 and 3 are *partitioned*: used
as given by the ``npz`` task; clients may hold different numbers of examples (stored padded with a mask).
:func:`save_clients_npz` writes layout 3.
"""

from __future__ import annotations

import os
import re
import zipfile
from typing import Optional, Sequence

import numpy as np

from fedjax_clust.data.federated import FederatedImages, from_client_lists
from fedjax_clust.data.image_set import ImageSet, check_finite_pixels, class_labels, image_set, pixels
from fedjax_clust.data.partition import split_train_test

__all__ = ["load_pooled_npz", "load_clients_npz", "save_clients_npz", "npz_layout"]


def _examples(
    path: str,
    images_key: str,
    images,
    labels_key: str,
    labels,
    *,
    allow_nonfinite: bool = False,
    owners=None,
    client=None,
):
    """(float32 images [n, H, W, C] in [0, 1], int32 labels [n]) of one array pair, ValueError naming the
    file and the keys (and the client: ``client`` for a per-client array, ``owners`` [n] for one indexed
    array) otherwise; non-finite pixels are refused unless ``allow_nonfinite``."""
    x = pixels(images, f"{path}: {images_key}")
    if not allow_nonfinite:
        hint = (
            (
                "fix the file (a pooled file's images are split among clients by the task; to simulate faulty "
                "clients, write partitioned clients and load them with allow_nonfinite=True)"
            )
            if images_key == "images" and owners is None
            else "fix the file, or pass allow_nonfinite=True (--allow-nonfinite) to simulate faulty clients"
        )
        check_finite_pixels(
            x, f"{path}: {images_key}" + ("" if client is None else f" (client {client})"), owners, hint
        )
    return x, class_labels(labels, x.shape[0], f"{path}: {labels_key}")


def _open(path: str):
    if os.path.isdir(path):
        raise ValueError(f"{path} is a folder, not an .npz file")
    if not os.path.exists(path):
        raise ValueError(f"no such .npz file: {path}")
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as error:
        raise ValueError(f"{path} is not a readable .npz file ({error or type(error).__name__})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):  # a .npy file: one array, no names
        raise ValueError(f"{path} holds a single array, not named arrays (write it with numpy.savez)")
    with archive:
        try:
            return dict(archive)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as error:
            raise ValueError(f"{path} is not a readable .npz file ({error or type(error).__name__})") from None


def npz_layout(arrays: dict, path: str = "the .npz file") -> str:
    """ "pooled", "indexed" or "per-client" (see the module docstring); ValueError naming ``path`` otherwise."""
    if "images_0" in arrays:
        return "per-client"
    if "images" in arrays and "labels" in arrays:
        return "indexed" if "client" in arrays else "pooled"
    raise ValueError(
        f"{path}: unrecognised .npz layout with keys {sorted(arrays)[:8]}: expected 'images' and "
        "'labels' (+ 'client'), or 'images_0', 'labels_0', ... (see fedjax_clust.data.npz)"
    )


def load_pooled_npz(path: str) -> ImageSet:
    """Layout 1 as an :class:`~fedjax_clust.data.image_set.ImageSet`; a non-finite pixel is refused (pooled
    images are split among clients by the task, so it would reach an arbitrary client: to simulate faulty
    clients, write partitioned clients and load them with ``allow_nonfinite=True``)."""
    arrays = _open(path)
    if npz_layout(arrays, path) != "pooled":
        raise ValueError(f"{path} holds partitioned clients; use it with the 'npz' task, not as a source")
    return image_set(*_examples(path, "images", arrays["images"], "labels", arrays["labels"]), f"npz:{path}")


def load_clients_npz(
    path: str, *, test_fraction: float = 0.2, allow_nonfinite: bool = False, layout: str = "padded"
) -> FederatedImages:
    """Layout 2 or 3 as :class:`~fedjax_clust.data.federated.FederatedImages`, padded (default) or ``layout="ragged"``
    (:func:`~fedjax_clust.data.federated.from_client_lists`); a NaN or infinite pixel is a ValueError naming the
    file, the array and the client unless ``allow_nonfinite``."""
    arrays = _open(path)
    kind = npz_layout(arrays, path)
    if kind == "pooled":
        raise ValueError(f"{path} is pooled (no 'client' array): use it as a source, --dataset npz:{path}")
    train, test = [], []
    if kind == "indexed":
        client = np.asarray(arrays["client"])
        if client.shape != np.shape(arrays["labels"]) or client.ndim != 1:
            raise ValueError(
                f"{path}: client must hold one index per image (labels of shape {np.shape(arrays['labels'])}), got "
                f"shape {client.shape}"
            )
        if client.size == 0 or not np.issubdtype(client.dtype, np.integer) or client.min() < 0:
            raise ValueError(f"{path}: client indices must be integers >= 0")
        images, labels = _examples(
            path, "images", arrays["images"], "labels", arrays["labels"], allow_nonfinite=allow_nonfinite, owners=client
        )
        held_out = np.asarray(arrays["test"], bool) if "test" in arrays else None
        for i in range(int(client.max()) + 1):
            idx = np.flatnonzero(client == i)
            if held_out is None:
                n_train, _ = split_train_test(len(idx), test_fraction) if len(idx) > 1 else (len(idx), 0)
                tr, te = idx[:n_train], idx[n_train:]
            else:
                tr, te = idx[~held_out[idx]], idx[held_out[idx]]
            if len(tr) == 0:
                raise ValueError(f"{path}: client {i} has no training examples")
            train.append({"x": images[tr], "y": labels[tr]})
            test.append({"x": images[te], "y": labels[te]})
    else:
        count = len([k for k in arrays if re.fullmatch(r"images_\d+", k)])
        for i in range(count):
            if f"images_{i}" not in arrays or f"labels_{i}" not in arrays:
                raise ValueError(
                    f"{path}: clients must be numbered 0..{count - 1} without gaps; images_{i}/labels_{i} missing"
                )
            x, y = _examples(
                path,
                f"images_{i}",
                arrays[f"images_{i}"],
                f"labels_{i}",
                arrays[f"labels_{i}"],
                allow_nonfinite=allow_nonfinite,
                client=i,
            )
            if f"test_images_{i}" in arrays:
                if f"test_labels_{i}" not in arrays:
                    raise ValueError(f"{path}: test_images_{i} has no test_labels_{i}")
                tx, ty = _examples(
                    path,
                    f"test_images_{i}",
                    arrays[f"test_images_{i}"],
                    f"test_labels_{i}",
                    arrays[f"test_labels_{i}"],
                    allow_nonfinite=allow_nonfinite,
                    client=i,
                )
            else:
                n_train, _ = split_train_test(len(y), test_fraction) if len(y) > 1 else (len(y), 0)
                x, tx, y, ty = x[:n_train], x[n_train:], y[:n_train], y[n_train:]
            train.append({"x": x, "y": y})
            test.append({"x": tx, "y": ty})
    for part in (train, test):
        for client in part:
            if client["x"].ndim == 3:
                client["x"] = client["x"][..., None]
            client["y"] = client["y"].astype(np.int32)
    if any(len(c["y"]) == 0 for c in test):
        raise ValueError(
            f"{path}: every client needs at least one test example (give 'test' / test_images_<i> "
            "or at least two examples per client)"
        )
    labels = np.concatenate([c["y"] for c in train + test])
    if labels.min() < 0:
        raise ValueError(f"{path}: labels must be integers >= 0")
    clusters = arrays.get("cluster")
    return from_client_lists(train, test, clusters, int(labels.max()) + 1, layout=layout)


def save_clients_npz(
    path: str, train: Sequence[dict], test: Optional[Sequence[dict]] = None, clusters: Optional[np.ndarray] = None
) -> None:
    """Write per-client ``{"x": images, "y": labels}`` dicts (and their test dicts) in layout 3."""
    arrays = {}
    for i, client in enumerate(train):
        arrays[f"images_{i}"], arrays[f"labels_{i}"] = client["x"], client["y"]
        if test is not None:
            arrays[f"test_images_{i}"], arrays[f"test_labels_{i}"] = test[i]["x"], test[i]["y"]
    if clusters is not None:
        arrays["cluster"] = np.asarray(clusters)
    np.savez(path, **arrays)
