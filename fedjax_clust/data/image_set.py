"""Pooled labelled images, the common form every image source returns."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["ImageSet", "image_set", "pixels", "class_labels", "check_finite_pixels", "MAX_CLASSES"]

MAX_CLASSES = 1 << 16  # a label beyond this is a data error (it would build a model with that many outputs)


class ImageSet(NamedTuple):
    """Pooled labelled images: ``images`` float32 [n, H, W, C] in [0, 1], ``labels`` int32 [n]."""

    images: np.ndarray
    labels: np.ndarray
    num_classes: int
    name: str


def pixels(images, name: str) -> np.ndarray:
    """float32 images [n, H, W, C] in [0, 1] from uint8 (0..255, scaled by 1/255) or float pixels in [0, 1]
    ([n, H, W] gets a channel axis); ValueError naming ``name`` for another shape or range. Non-finite pixels
    pass (a faulty client's data: :func:`~fedjax_clust.data.federated.standardize` leaves them out of its
    statistics, so they reach that client's model only)."""
    images = np.asarray(images)
    if images.dtype == np.uint8:
        images = images.astype(np.float32) / 255.0
    elif np.issubdtype(images.dtype, np.integer) or np.issubdtype(images.dtype, np.floating):
        images = images.astype(np.float32)
    else:
        raise ValueError(f"{name}: images must be uint8 (0..255) or floats in [0, 1], got dtype {images.dtype}")
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4:
        raise ValueError(f"{name}: expected images [n, H, W] or [n, H, W, C], got shape {images.shape}")
    finite = images[np.isfinite(images)]
    if finite.size and (finite.min() < 0.0 or finite.max() > 1.0):
        raise ValueError(
            f"{name}: float pixels must lie in [0, 1] (uint8 images are scaled from 0..255), got "
            f"values in [{finite.min():g}, {finite.max():g}]"
        )
    return images


def check_finite_pixels(images: np.ndarray, name: str, owners=None, hint: str = "") -> None:
    """ValueError naming ``name``, the first example with a NaN or infinite pixel and, with ``owners`` [n]
    (each example's client), its client, then ``hint`` (what the user can do); nothing for finite images.

    Readers of data files call it (a non-finite pixel in a file is a data error, refused before any training),
    while :func:`pixels` lets non-finite pixels through for tasks built in Python, which the NaN-isolation
    studies need; a reader's ``allow_nonfinite=True`` skips it for a file made for such a study."""
    images = np.asarray(images)
    bad = ~np.isfinite(images.reshape(images.shape[0], -1)).all(axis=1) if images.size else np.zeros(0, bool)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        where = f"example {first}" + ("" if owners is None else f" (client {int(np.asarray(owners)[first])})")
        value = images[first][~np.isfinite(images[first])].flat[0]
        raise ValueError(
            f"{name}: {int(bad.sum())} example(s) hold non-finite pixels, the first is {where} "
            f"with {value}" + (f"; {hint}" if hint else "")
        )


def class_labels(labels, count: int, name: str) -> np.ndarray:
    """int32 class labels [count] in [0, MAX_CLASSES); integer-valued floats are accepted, anything else
    (fractions, non-finite values, another shape) is a ValueError naming ``name``."""
    labels = np.asarray(labels)
    if labels.shape != (count,):
        raise ValueError(f"{name}: expected labels [{count}] (one per image), got shape {labels.shape}")
    if not (np.issubdtype(labels.dtype, np.integer) or np.issubdtype(labels.dtype, np.floating)):
        raise ValueError(f"{name}: labels must be integers, got dtype {labels.dtype}")
    if (
        np.issubdtype(labels.dtype, np.floating)
        and labels.size
        and not (np.isfinite(labels).all() and (labels == np.round(labels)).all())
    ):
        raise ValueError(
            f"{name}: labels must be whole numbers (class indices), got floats such as "
            f"{labels[~(np.isfinite(labels) & (labels == np.round(labels)))][0]!r}"
        )
    if labels.size and (labels.min() < 0 or labels.max() >= MAX_CLASSES):
        raise ValueError(
            f"{name}: labels must be class indices in [0, {MAX_CLASSES}), got values in "
            f"[{labels.min():g}, {labels.max():g}]"
        )
    return labels.astype(np.int32)


def image_set(images, labels, name, num_classes=None) -> ImageSet:
    """An :class:`ImageSet` from images [n, H, W(, C)] (:func:`pixels`) and class labels [n]
    (:func:`class_labels`), ValueError naming ``name`` otherwise; ``num_classes`` defaults to 1 + the
    largest label."""
    images = pixels(images, name)
    labels = class_labels(labels, images.shape[0], name)
    classes = int(labels.max()) + 1 if num_classes is None else int(num_classes)
    return ImageSet(images, labels, classes, name)
