"""Data poisoning: Byzantine clients that train honestly on corrupted data.

``label-flip`` (Tolpegin et al. 2020; Fang et al. 2020): every training label y of a Byzantine client
becomes C - 1 - y (C classes), and the client then computes and sends its messages like an honest one.
Inside the round the labels are flipped with a ``where`` over the client mask (no Python branch per
client, no second copy of the data outside the compiled program); metrics use the true data and count
honest clients only.
"""

from __future__ import annotations

from typing import Optional

import jax.numpy as jnp
import numpy as np

from fedjax_clust.core.algorithm import FederatedAlgorithm
from fedjax_clust.core.participants import client_rows, with_participants
from fedjax_clust.core.ragged_batch import RaggedBatch
from fedjax_clust.core.validation import check_mask_size, is_traced

__all__ = ["flip_labels", "with_label_flipping", "label_classes"]


def flip_labels(data, byzantine, num_classes: int):
    """``data`` (a dict with integer labels ``"y"`` [N, n], or a ragged batch with ``"y"`` [T]) with
    y -> num_classes - 1 - y for the Byzantine clients (bool [N])."""
    if isinstance(data, RaggedBatch):
        flipped = data.example_flags(byzantine)
        y = data.examples["y"]
        return data.with_examples({**data.examples, "y": jnp.where(flipped, (num_classes - 1) - y, y)})
    y = data["y"]
    mask = jnp.asarray(byzantine).reshape((-1,) + (1,) * (y.ndim - 1))
    return {**data, "y": jnp.where(mask, (num_classes - 1) - y, y)}


def label_classes(task, num_classes: Optional[int] = None) -> int:
    """The number of classes C of ``task`` for label flipping: ``num_classes`` when given, the task's
    ``config["num_classes"]`` when recorded, else 1 + the largest label in its training and test data.
    ValueError for a task without integer labels (regression)."""
    data = task.data.examples if isinstance(task.data, RaggedBatch) else task.data
    test_data = task.test_data.examples if isinstance(task.test_data, RaggedBatch) else task.test_data
    if not isinstance(data, dict) or "y" not in data or not np.issubdtype(np.dtype(data["y"].dtype), np.integer):
        raise ValueError(
            f"label flipping needs a classification task with integer labels 'y'; task {task.name!r} has none"
        )
    if num_classes is None:
        num_classes = task.config.get("num_classes")
    if num_classes is None and is_traced(data["y"]):  # a sweep's per-seed data: the labels are not known here
        raise ValueError(
            f"label flipping on task {task.name!r}, whose labels are a compiled program's argument, needs the number "
            "of classes: record num_classes in the task's config or give the attack num_classes=..."
        )
    if num_classes is None:
        labels = [np.max(np.asarray(data["y"]))]
        if isinstance(test_data, dict) and "y" in test_data:
            labels.append(np.max(np.asarray(test_data["y"])))
        num_classes = int(max(labels)) + 1
    if int(num_classes) < 2:
        raise ValueError(f"label flipping needs at least 2 classes, got {num_classes}")
    return int(num_classes)


def with_label_flipping(algorithm: FederatedAlgorithm, byzantine, num_classes: int) -> FederatedAlgorithm:
    """``algorithm`` whose Byzantine clients (bool [N]) see their training labels flipped in every round."""
    mask = jnp.asarray(byzantine if is_traced(byzantine) else np.asarray(byzantine, bool))
    inner_round = with_participants(algorithm.apply)

    def init(params, num_clients, key=None):
        check_mask_size(mask, num_clients)
        return algorithm.start(params, num_clients, key)

    def round_fn(state, data, key, participants=None):
        return inner_round(state, flip_labels(data, client_rows(mask, participants), num_classes), key, participants)

    hparams = {**algorithm.hparams, "attack": "label-flip"}
    return algorithm._replace(init=init, apply=round_fn, hparams=hparams)
