"""Shakespeare by speaking role: next-character prediction from LEAF's JSON or TFF's SQLite file.

``data_file``: LEAF's ``data/shakespeare/data`` folder (``train/`` and ``test/`` of .json files; each example
an 80-character string and the character after it) or TFF's ``shakespeare.sqlite`` / ``.sqlite.lzma`` (each
example one line, ``snippets``). Both become examples ``x``, ``y`` int32 [80] over our 84-id vocabulary with
``y[t]`` the character after ``x[t]`` (:mod:`fedjax_clust.data.text`). Clients are the roles, with the same-
client test split of either format (LEAF's ``-t sample``, TFF's ``test``), roles only in the test split as
clients never seen in training (:mod:`fedjax_clust.core.unseen`), and ``max_clients`` a seeded subset, as
for FEMNIST (:func:`fedjax_clust.tasks.natural.read_partition`). Model ``char-lstm``, LEAF's
(:mod:`fedjax_clust.models.sequence`).

The loss of one example is the mean cross-entropy over its scored positions, and its accuracy the share of
them predicted right (argmax): ``positions="all"`` scores every position with a target (``PAD`` targets
never count), ``"last"`` only the last one (for LEAF's files exactly LEAF's label, the character after the
80: LEAF's reference model scores only that one). The task has no ``logits`` for one label per example, so
kNN-Per (a classifier of single labels) does not apply.
"""

from __future__ import annotations

from typing import Literal, Optional

import jax
import jax.numpy as jnp

from fedjax_clust.core.ragged_batch import DEFAULT_BUCKET_RATIO
from fedjax_clust.core.validation import check_choice, check_int, check_real, check_seed
from fedjax_clust.data.data_file import require_path
from fedjax_clust.data.leaf import LEAF_TEXT_LENGTH, leaf_split_files, leaf_user_ids, read_leaf_text
from fedjax_clust.data.text import PAD, VOCAB_SIZE
from fedjax_clust.data.tff_sqlite import TFF_TEXT_SPLITS, read_tff_text, tff_client_ids
from fedjax_clust.models.names import SEQUENCE_MODELS
from fedjax_clust.tasks.base import Task
from fedjax_clust.tasks.natural import (
    LAYOUTS,
    device_layout,
    file_format,
    partition_config,
    read_partition,
    unseen_task_data,
)

__all__ = ["shakespeare_task", "POSITIONS", "scored_positions"]

POSITIONS = ("all", "last")


def scored_positions(y: jax.Array, positions: str) -> jax.Array:
    """bool [L]: the positions of a target sequence ``y`` [L] the loss and accuracy count (module docstring)."""
    valid = y != PAD
    if positions == "all":
        return valid
    last = y.shape[-1] - 1 - jnp.argmax(valid[::-1])
    return valid & (jnp.arange(y.shape[-1]) == last)


def _reader(path: str):
    fmt = file_format(path)
    if fmt == "tff-sqlite":
        reader = lambda split, keep: read_tff_text(path, TFF_TEXT_SPLITS[split], clients=keep)  # noqa: E731
        ids = lambda split: tff_client_ids(path, TFF_TEXT_SPLITS[split])  # noqa: E731
        return fmt, reader, ids, True
    files = leaf_split_files(path)
    reader = lambda split, keep: read_leaf_text(files[split], clients=keep, length=LEAF_TEXT_LENGTH)  # noqa: E731
    ids = lambda split: leaf_user_ids(files[split])  # noqa: E731
    return fmt, reader, ids, "test" in files


def shakespeare_task(
    *,
    data_file: str,
    model: Literal["char-lstm"] = "char-lstm",
    max_clients: Optional[int] = None,
    test_fraction: float = 0.2,
    positions: Literal["all", "last"] = "all",
    lstm_hidden: int = 256,
    seed: int = 0,
    layout: Literal["ragged", "padded"] = "ragged",
    bucket_ratio: float = DEFAULT_BUCKET_RATIO,
    unseen_adapt_fraction: float = 0.5,
) -> Task:
    """Shakespeare by role from LEAF's JSON or TFF's SQLite file (see the module docstring).

    Args:
      data_file: LEAF's shakespeare data folder (train/ and test/ of .json files), one LEAF .json file, or
        TFF's shakespeare.sqlite(.lzma); docs/guides/real-data.md gives the downloads.
      model: "char-lstm", LEAF's embedding + two-layer LSTM.
      max_clients: keep this many roles, a random subset drawn with the seed (None: all).
      test_fraction: share of each role's windows held out when the data has no test split.
      positions: "all" (every position's next character, default) or "last" (LEAF's label only).
      lstm_hidden: units of each LSTM layer (LEAF: 256).
      seed: the client subset (max_clients) and nothing else.
      layout: "ragged" (default: no padding to the largest role) or "padded".
      bucket_ratio: ragged layout: largest over smallest client size within a size bucket (default 1.25).
      unseen_adapt_fraction: roles only in the test split: the share of each one's windows that choose its
        model by the algorithm's rule, the rest scoring it (default 0.5).
    """
    check_seed(seed)
    check_choice("model", model, SEQUENCE_MODELS)
    check_choice("positions", positions, POSITIONS)
    check_choice("layout", layout, LAYOUTS)
    check_real("bucket_ratio", bucket_ratio, low=1.0)
    check_real("test_fraction", test_fraction, low=0.0, high=1.0, low_open=True, high_open=True)
    check_real("unseen_adapt_fraction", unseen_adapt_fraction, low=0.0, high=1.0, low_open=True, high_open=True)
    check_int("lstm_hidden", lstm_hidden, 1, 1 << 14)
    if max_clients is not None:
        check_int("max_clients", max_clients, 1)
    path = require_path(data_file, "shakespeare data file")
    fmt, reader, ids, has_test = _reader(path)
    train, test, info, unseen = read_partition(
        path, fmt, reader, ids, has_test, max_clients=max_clients, test_fraction=test_fraction, seed=seed
    )
    on_device = device_layout(layout, bucket_ratio)
    unseen_data, unseen_info = unseen_task_data(unseen, unseen_adapt_fraction, on_device)
    from fedjax_clust.models.sequence import make_sequence_model  # Flax, imported when a model is built

    net = make_sequence_model(model, VOCAB_SIZE, hidden=lstm_hidden)

    def per_position(params, example):
        logits = net.logits(params, example["x"][None])[0]  # [L, V]
        scored = scored_positions(example["y"], positions)
        return logits, scored, jnp.maximum(jnp.sum(scored), 1)

    def example_loss(params, example):
        logits, scored, count = per_position(params, example)
        nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), example["y"][:, None], axis=-1)[:, 0]
        return jnp.sum(jnp.where(scored, nll, 0.0)) / count

    def example_accuracy(params, example):
        logits, scored, count = per_position(params, example)
        return jnp.sum(scored & (jnp.argmax(logits, axis=-1) == example["y"])) / count

    data = on_device(train)
    config = dict(
        max_clients=max_clients,
        test_fraction=test_fraction,
        positions=positions,
        lstm_hidden=lstm_hidden,
        seed=seed,
        **partition_config(data_file, train, test, layout, bucket_ratio, data),
        model=net.name,
        num_params=net.num_params(),
        vocab_size=VOCAB_SIZE,
        **info,
        **unseen_info,
    )
    return Task(
        name="shakespeare",
        data=data,
        example_loss=example_loss,
        init_params=net.init,
        config=config,
        test_data=on_device(test),
        example_accuracy=example_accuracy,
        unseen_data=unseen_data,
        true_clusters=None,
        optima=None,
    )
