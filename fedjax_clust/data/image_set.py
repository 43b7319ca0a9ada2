"""Pooled labelled images, the common form every image source returns."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["ImageSet", "image_set"]


class ImageSet(NamedTuple):
    """Pooled labelled images: ``images`` float32 [n, H, W, C] in [0, 1], ``labels`` int32 [n]."""
    images: np.ndarray
    labels: np.ndarray
    num_classes: int
    name: str


def image_set(images, labels, name, num_classes=None) -> ImageSet:
    """An :class:`ImageSet` from images [n, H, W(, C)] and integer labels [n] (ValueError naming ``name``
    otherwise); ``num_classes`` defaults to 1 + the largest label."""
    images = np.asarray(images, np.float32)
    if images.ndim == 3:
        images = images[..., None]
    labels = np.asarray(labels).astype(np.int32)
    if images.ndim != 4 or labels.shape != images.shape[:1]:
        raise ValueError(f"{name}: expected images [n, H, W(, C)] and labels [n], got {images.shape} and "
                         f"{labels.shape}")
    if labels.size and labels.min() < 0:
        raise ValueError(f"{name}: labels must be non-negative integers, got {labels.min()}")
    classes = int(labels.max()) + 1 if num_classes is None else int(num_classes)
    return ImageSet(images, labels, classes, name)
