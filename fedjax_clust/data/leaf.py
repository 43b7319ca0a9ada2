"""LEAF's JSON federated datasets (Caldas et al. 2018, "LEAF: A Benchmark for Federated Settings").

LEAF's preprocessing (``./preprocess.sh`` in its ``data/<dataset>`` folders) writes ``data/train/*.json``
and ``data/test/*.json``. Each file is one JSON object::

    {"users": ["f0000_14", ...],            # the clients of this file
     "num_samples": [139, ...],             # examples of each user, in the same order
     "user_data": {"f0000_14": {"x": [...], "y": [...]}, ...},
     "hierarchies": [...]}                  # optional (e.g. the writer's group), not used

FEMNIST: ``x`` holds 784 floats per example (a 28 x 28 image, row-major, values in [0, 1]) and ``y`` the class
in 0..61 (digits, then upper- and lower-case letters). Shakespeare (by speaking role): ``x`` holds strings of
80 characters and ``y`` the character that follows each. With LEAF's default ``--sf``/``-t sample`` split the
same users appear in train and test, each with its own examples.

Files are parsed one at a time and each user's lists converted at once to compact arrays (float32 images,
int32 labels), so the Python objects of only one file are alive at a time (a whole FEMNIST as Python floats
would take over 10 GB). Checks, each a one-line :class:`~fedjax_clust.data.data_file.DataFileError` naming
the file and the user: the three keys present and of the right types, ``users`` and ``num_samples`` of equal
length, every user with data whose ``x`` and ``y`` have ``num_samples`` entries, no user with zero examples,
no user twice, every ``x`` of the right size and finite, every label an integer in range (Shakespeare: every
``x`` a string of 80 characters and every ``y`` one character). The total size
is checked against the host's memory from ``num_samples`` before a file's arrays are built.
"""

from __future__ import annotations

import glob
import json
import os
from typing import NamedTuple, Optional

import numpy as np

from fedjax_clust.data.data_file import DataFileError, require_path
from fedjax_clust.data.ragged import RaggedClients
from fedjax_clust.data.text import leaf_windows
from fedjax_clust.parallel.memory import check_task_size

__all__ = [
    "LEAF_IMAGE_DATASETS",
    "LEAF_TEXT_LENGTH",
    "LeafImageSchema",
    "leaf_split_files",
    "leaf_user_ids",
    "read_leaf_images",
    "read_leaf_text",
    "read_leaf_users",
]

LEAF_TEXT_LENGTH = 80  # LEAF's Shakespeare: 80-character windows, the next character as the label


class LeafImageSchema(NamedTuple):
    """How one LEAF image dataset stores an example."""

    shape: tuple  # (H, W, C)
    num_classes: int


LEAF_IMAGE_DATASETS = {"femnist": LeafImageSchema((28, 28, 1), 62)}


def leaf_split_files(path: str) -> dict:
    """``{"train": [files], "test": [files]}`` of a LEAF dataset: ``path`` is LEAF's ``data`` folder (with
    ``train/`` and ``test/`` holding .json files), or one split's folder of .json files, or one .json file
    (those two give ``{"train": [...]}`` only)."""
    path = require_path(path, "LEAF data folder")
    if os.path.isfile(path):
        return {"train": [path]}
    found = {}
    for split in ("train", "test"):
        files = sorted(glob.glob(os.path.join(path, split, "*.json")))
        if files:
            found[split] = files
    if found:
        if "train" not in found:
            raise DataFileError(f"{path}: a test/ folder of .json files but no train/ folder")
        return found
    files = sorted(glob.glob(os.path.join(path, "*.json")))
    if not files:
        raise DataFileError(f"{path}: no .json files (expected LEAF's data folder with train/ and test/)")
    return {"train": files}


def _load(path: str):
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DataFileError(f"{path}: not valid JSON ({error})") from None
    except RecursionError:  # a hostile or corrupt file: brackets nested deeper than the parser's recursion
        raise DataFileError(f"{path}: not a LEAF file (JSON nested too deeply to read)") from None
    if not isinstance(document, dict):
        raise DataFileError(f"{path}: the top level must be a JSON object with users, num_samples, user_data")
    for key, kind in (("users", list), ("num_samples", list), ("user_data", dict)):
        if key not in document:
            raise DataFileError(f"{path}: no {key!r} key (a LEAF file has users, num_samples, user_data)")
        if not isinstance(document[key], kind):
            raise DataFileError(f"{path}: {key!r} must be a JSON {kind.__name__}")
    users, counts = document["users"], document["num_samples"]
    if len(users) != len(counts):
        raise DataFileError(f"{path}: {len(users)} users but {len(counts)} num_samples")
    for user, count in zip(users, counts):
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise DataFileError(f"{path}: user {user!r}: num_samples must be a non-negative integer, got {count!r}")
    return document


def leaf_user_ids(files) -> list:
    """The sorted user ids of LEAF JSON ``files`` (each file parsed, its schema checked; no array is built).
    Choosing a subset of users this way parses the files once more than reading them does."""
    return sorted(str(user) for path in files for user in _load(path)["users"])


def _user_arrays(path, user, data, count, schema: LeafImageSchema):
    where = f"{path}: user {user!r}"
    xs, ys = _checked_lists(where, data, count)
    size = int(np.prod(schema.shape))
    try:
        x = np.asarray(xs, np.float32)
    except (ValueError, TypeError):
        raise DataFileError(f"{where}: every x must be a list of {size} numbers") from None
    if x.shape != (count, size):
        raise DataFileError(f"{where}: x has shape {x.shape}, expected ({count}, {size}) (images {schema.shape})")
    if not np.all(np.isfinite(x)):
        raise DataFileError(f"{where}: a non-finite pixel")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in ys):
        raise DataFileError(f"{where}: every label y must be an integer")
    y = np.asarray(ys, np.int64)
    bad = (y < 0) | (y >= schema.num_classes)
    if bad.any():
        raise DataFileError(f"{where}: label {int(y[bad][0])} outside 0..{schema.num_classes - 1}")
    return x.reshape((count,) + schema.shape), y.astype(np.int32)


def read_leaf_users(files, convert, *, clients: Optional[set] = None, example_bytes: int) -> RaggedClients:
    """The users of LEAF JSON ``files`` (one split) as ragged clients, users in sorted id order; ``clients``
    (ids) keeps only those. ``convert(path, user, user_data, num_samples) -> dict of arrays`` builds (and checks)
    one user's arrays; ``example_bytes`` sizes the memory check (:func:`check_task_size`) before a file's
    arrays are built."""
    per_user: dict = {}
    where_from: dict = {}
    total = 0
    for path in files:
        document = _load(path)
        counts = dict(zip(document["users"], document["num_samples"]))
        wanted = [u for u in document["users"] if clients is None or str(u) in clients]
        total += sum(counts[u] for u in wanted)
        check_task_size(total * example_bytes * 2, f"the LEAF data of {len(per_user) + len(wanted)} users")
        for user in wanted:
            key = str(user)
            if key in per_user:
                raise DataFileError(f"{path}: user {key!r} appears again (first in {where_from[key]})")
            if user not in document["user_data"]:
                raise DataFileError(f"{path}: user {key!r} is listed in users but has no user_data")
            if counts[user] == 0:
                raise DataFileError(f"{path}: user {key!r}: an empty client (num_samples 0)")
            per_user[key] = convert(path, key, document["user_data"][user], counts[user])
            where_from[key] = path
        del document
    if not per_user:
        raise DataFileError(
            f"{files[0] if files else 'LEAF data'}: no users" + (" among the chosen clients" if clients else "")
        )
    ids = sorted(per_user)
    return RaggedClients.from_clients([per_user[i] for i in ids], ids)


def _checked_lists(where: str, data, count: int):
    if not isinstance(data, dict) or "x" not in data or "y" not in data:
        raise DataFileError(f"{where}: user_data entry needs 'x' and 'y'")
    xs, ys = data["x"], data["y"]
    if not isinstance(xs, list) or not isinstance(ys, list) or len(xs) != count or len(ys) != count:
        raise DataFileError(
            f"{where}: num_samples says {count}, but x has {len(xs) if isinstance(xs, list) else '?'} and y "
            f"{len(ys) if isinstance(ys, list) else '?'} entries"
        )
    return xs, ys


def read_leaf_images(files, dataset: str = "femnist", *, clients: Optional[set] = None) -> RaggedClients:
    """The users of LEAF JSON ``files`` (one split) as ragged clients with ``x`` float32 [n, H, W, C] and
    ``y`` int32, users in sorted id order; ``clients`` (ids) keeps only those."""
    if dataset not in LEAF_IMAGE_DATASETS:
        raise ValueError(f"unknown LEAF image dataset {dataset!r}; expected one of {sorted(LEAF_IMAGE_DATASETS)}")
    schema = LEAF_IMAGE_DATASETS[dataset]

    def convert(path, user, data, count):
        x, y = _user_arrays(path, user, data, count, schema)
        return {"x": x, "y": y}

    return read_leaf_users(files, convert, clients=clients, example_bytes=int(np.prod(schema.shape)) * 4 + 4)


def read_leaf_text(files, *, clients: Optional[set] = None, length: int = LEAF_TEXT_LENGTH) -> RaggedClients:
    """LEAF's Shakespeare (``x``: strings of ``length`` characters, ``y``: the next character) as ragged clients
    with ``x`` and ``y`` int32 [n, length]: ``y`` is ``x`` shifted by one with the next character last, the
    target at every position (:func:`fedjax_clust.data.text.leaf_windows`); users in sorted id order."""

    def convert(path, user, data, count):
        where = f"{path}: user {user!r}"
        xs, ys = _checked_lists(where, data, count)
        for i, (text, nxt) in enumerate(zip(xs, ys)):
            if not isinstance(text, str) or len(text) != length:
                raise DataFileError(f"{where}: x[{i}] must be a string of {length} characters")
            if not isinstance(nxt, str) or len(nxt) != 1:
                raise DataFileError(f"{where}: y[{i}] must be one character")
        x, y = leaf_windows(xs, ys)
        return {"x": x, "y": y}

    return read_leaf_users(files, convert, clients=clients, example_bytes=8 * length)
