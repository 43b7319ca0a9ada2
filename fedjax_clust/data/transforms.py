"""Cluster structures: how cluster k of a clustered image task differs from cluster 0.

Each structure is a pure NumPy function ``(images, labels, k, num_classes) -> (images, labels)`` applied to
the examples of cluster k, plus a check of how many clusters it can tell apart:

* ``rotation`` (Werner et al. §4.2 after Ghosh et al. 2020): the images of cluster k are rotated by
  k * 90 degrees (counter-clockwise, ``np.rot90``); at most 4 clusters.
* ``private-label`` (Werner et al. §4.2): labels are permuted, T_k(y) = (y + k) mod C, so the same image has
  different labels in different clusters; at most C clusters.
* ``inverted`` (SR-FCA, Vardhan et al. 2024): cluster 1 sees inverted pixels 1 - x; at most 2 clusters.
* ``label-groups`` (Werner's thesis, Fig. 2.5 on CIFAR-100): cluster k owns the classes
  [k L, (k + 1) L) with L = C // K, relabelled to 0..L-1; the examples are routed to the cluster that owns
  their class (:func:`route_by_label_group`), so clusters differ in their inputs, not their labels.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "STRUCTURES",
    "apply_structure",
    "check_structure",
    "route_by_label_group",
    "rotate",
    "shift_labels",
    "invert",
    "max_clusters",
]

STRUCTURES = ("rotation", "private-label", "inverted", "label-groups")


def rotate(images: np.ndarray, k: int) -> np.ndarray:
    """Images [n, H, W, C] rotated by k * 90 degrees (square images keep their shape)."""
    return np.ascontiguousarray(np.rot90(images, k % 4, axes=(1, 2)))


def shift_labels(labels: np.ndarray, k: int, num_classes: int) -> np.ndarray:
    """T_k(y) = (y + k) mod C."""
    return ((labels + k) % num_classes).astype(labels.dtype)


def invert(images: np.ndarray) -> np.ndarray:
    """1 - x for pixels in [0, 1]."""
    return (1.0 - images).astype(images.dtype)


def max_clusters(structure: str, num_classes: int) -> int:
    return {"rotation": 4, "private-label": num_classes, "inverted": 2, "label-groups": num_classes}[structure]


def check_structure(structure: str, num_clusters: int, num_classes: int, image_shape) -> None:
    """ValueError when ``structure`` cannot make ``num_clusters`` distinct clusters of this data."""
    if structure not in STRUCTURES:
        raise ValueError(f"unknown structure {structure!r}; expected one of {list(STRUCTURES)}")
    limit = max_clusters(structure, num_classes)
    if num_clusters > limit:
        raise ValueError(
            f"structure {structure!r} makes at most {limit} distinct clusters of this data, got "
            f"num_clusters={num_clusters}"
        )
    if structure == "rotation" and image_shape[0] != image_shape[1]:
        raise ValueError(f"structure 'rotation' needs square images, got {image_shape[0]}x{image_shape[1]}")


def apply_structure(
    structure: str, images: np.ndarray, labels: np.ndarray, k: int, num_classes: int, num_clusters: int
):
    """The examples of cluster k under ``structure`` (see the module docstring)."""
    if structure == "rotation":
        return rotate(images, k), labels
    if structure == "private-label":
        return images, shift_labels(labels, k, num_classes)
    if structure == "inverted":
        return (invert(images) if k % 2 else images), labels
    if structure == "label-groups":
        return images, (labels - k * (num_classes // num_clusters)).astype(labels.dtype)
    raise ValueError(f"unknown structure {structure!r}; expected one of {list(STRUCTURES)}")


def route_by_label_group(labels: np.ndarray, num_clusters: int, num_classes: int) -> np.ndarray:
    """Cluster owning each example under ``label-groups`` (labels // L), -1 for the C mod K left-over classes."""
    per = num_classes // num_clusters
    cluster = labels // per
    return np.where(cluster < num_clusters, cluster, -1)
