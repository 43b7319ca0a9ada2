"""TensorFlow Federated's SQLite federated datasets, read without TensorFlow.

TFF ships its simulation datasets as one LZMA-compressed SQLite file each
(``https://storage.googleapis.com/tff-datasets-public/<name>.sqlite.lzma``: ``emnist_all``,
``cifar100``, ``shakespeare``, ``stackoverflow``). The layout (TFF's ``SqlClientData``):

* table ``examples(split_name TEXT, client_id TEXT, serialized_example_proto BLOB)``: one row per example,
  the example a serialized ``tf.train.Example`` (decoded by :mod:`fedjax_clust.data.example_proto`);
* table ``client_metadata(client_id, split_name, num_examples)``: one row per client and split.

The image datasets this module reads (:data:`TFF_IMAGE_DATASETS`): ``emnist`` (EMNIST-62 by writer: 3,400
clients, splits ``all_train`` / ``all_test``, features ``pixels`` float [28, 28] in [0, 1] with 1.0 the
background and ``label`` int64 in 0..61), ``emnist-digits`` (the same file's ``digits_only_train`` /
``digits_only_test``, 3,383 clients, labels 0..9) and ``cifar100`` (splits ``train`` / ``test``, 500 and 100
clients by Pachinko allocation; ``image`` int64 [32, 32, 3] in 0..255, ``label`` 0..99, ``coarse_label``
0..19), and ``shakespeare`` (715 speaking roles, splits ``train`` / ``test``, one bytes feature ``snippets``
per example: a line; :func:`read_tff_text`). Each image split becomes
:class:`~fedjax_clust.data.ragged.RaggedClients` with ``x`` float32 [n, H, W, C] in [0, 1] and ``y`` int32 [n],
clients in sorted id order, each client's examples in row order.

A ``.sqlite.lzma`` path is decompressed once, streamed, to the same path without ``.lzma`` (the EMNIST file
grows from 0.17 to 4.7 GB), or to ``$TMPDIR`` when that folder is read-only; the database is opened
read-only. Sizes are checked before anything is allocated (the chosen clients' example count from one
``COUNT`` query, against the host's available memory); every example is checked as it is decoded (its features
present, of the documented size, finite, its label in range), and the first faulty one ends the read with
one :class:`~fedjax_clust.data.data_file.DataFileError` line naming the file, the client and the problem.
"""

from __future__ import annotations

import lzma
import os
import shutil
import sqlite3
import tempfile
from typing import NamedTuple, Optional

import numpy as np

from fedjax_clust.data.data_file import DataFileError, require_path
from fedjax_clust.data.example_proto import ExampleDecodeError, decode_example
from fedjax_clust.data.ragged import RaggedClients
from fedjax_clust.data.text import snippet_windows
from fedjax_clust.parallel.memory import check_task_size

__all__ = [
    "TFF_IMAGE_DATASETS",
    "TFF_TEXT_SPLITS",
    "TffImageSchema",
    "read_tff_text",
    "open_tff_database",
    "tff_splits",
    "tff_client_ids",
    "read_tff_images",
    "client_rows",
    "has_client_index",
    "metadata_examples",
]

SQLITE_MAGIC = b"SQLite format 3\x00"


class TffImageSchema(NamedTuple):
    """How one TFF image dataset stores an example."""

    image_key: str
    shape: tuple  # (H, W, C) of the model's input
    scale: float  # pixel value -> [0, 1]
    label_key: str
    num_classes: int
    train_split: str
    test_split: str


TFF_IMAGE_DATASETS = {
    "emnist": TffImageSchema("pixels", (28, 28, 1), 1.0, "label", 62, "all_train", "all_test"),
    "emnist-digits": TffImageSchema("pixels", (28, 28, 1), 1.0, "label", 10, "digits_only_train", "digits_only_test"),
    "cifar100": TffImageSchema("image", (32, 32, 3), 1 / 255, "label", 100, "train", "test"),
}


def _decompressed(path: str) -> str:
    target = path[: -len(".lzma")]
    if os.path.exists(target) and os.path.getmtime(target) >= os.path.getmtime(path):
        return target
    folder = os.path.dirname(os.path.abspath(target))
    if not os.access(folder, os.W_OK):
        folder = tempfile.gettempdir()
        target = os.path.join(folder, os.path.basename(target))
        if os.path.exists(target) and os.path.getmtime(target) >= os.path.getmtime(path):
            return target
    handle, partial = tempfile.mkstemp(dir=folder, suffix=".partial")
    try:
        with os.fdopen(handle, "wb") as out, lzma.open(path, "rb") as source:
            shutil.copyfileobj(source, out, 1 << 22)
        os.replace(partial, target)
    except (lzma.LZMAError, EOFError) as error:
        raise DataFileError(f"{path}: not a complete LZMA file ({error}); download it again") from None
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return target


def open_tff_database(path: str) -> sqlite3.Connection:
    """A read-only connection to a TFF federated SQLite file (``.sqlite`` or ``.sqlite.lzma``), its layout
    checked (the two tables and the examples table's three columns)."""
    path = require_path(path, "TFF SQLite file")
    if os.path.isdir(path):
        raise DataFileError(f"{path}: a folder, expected a TFF .sqlite or .sqlite.lzma file")
    database = _decompressed(path) if path.endswith(".lzma") else path
    with open(database, "rb") as handle:
        if handle.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
            raise DataFileError(f"{path}: not an SQLite database (TFF's federated files are SQLite)")
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        missing = {"examples", "client_metadata"} - tables
        if missing:
            raise DataFileError(
                f"{path}: no table {', '.join(sorted(missing))} (a TFF federated file has examples and client_metadata)"
            )
        for table, needed in (
            ("examples", {"split_name", "client_id", "serialized_example_proto"}),
            ("client_metadata", {"client_id", "split_name", "num_examples"}),
        ):
            columns = {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}
            missing = needed - columns
            if missing:
                raise DataFileError(f"{path}: table {table} lacks column(s) {', '.join(sorted(missing))}")
    except sqlite3.DatabaseError as error:
        connection.close()
        raise DataFileError(f"{path}: unreadable SQLite database ({error})") from None
    except DataFileError:
        connection.close()
        raise
    return connection


def tff_splits(connection: sqlite3.Connection) -> list:
    """The split names of the file, from its small ``client_metadata`` table (the examples table of
    StackOverflow has 169 M rows: listing its splits there would read them all)."""
    return sorted(str(row[0]) for row in connection.execute("SELECT DISTINCT split_name FROM client_metadata"))


def has_client_index(connection: sqlite3.Connection) -> bool:
    """Whether the examples table has an index that finds a client's rows (its first column ``client_id``, or
    ``split_name`` then ``client_id``): with one, reading a few clients reads only their rows."""
    for row in connection.execute("PRAGMA index_list(examples)"):
        name = '"' + str(row[1]).replace('"', '""') + '"'
        columns = [info[2] for info in connection.execute(f"PRAGMA index_info({name})")]
        if columns[:1] == ["client_id"] or columns[:2] == ["split_name", "client_id"]:
            return True
    return False


def client_rows(connection: sqlite3.Connection, split: str, clients: Optional[set] = None):
    """(client id, serialized example) of the examples of ``split`` (only ``clients`` when given), each
    client's rows in rowid order. With ``clients`` and an index on ``client_id`` (:func:`has_client_index`) the
    chosen clients' rows are looked up 500 ids at a time, client after client; otherwise the split is read in
    one pass in the order SQLite scans it (clients may interleave), never sorted (a sort of StackOverflow's
    table would spill its blobs to a temporary file)."""
    if clients is not None and has_client_index(connection):
        ids = sorted(clients)
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            query = (
                "SELECT client_id, serialized_example_proto FROM examples WHERE split_name = ? AND client_id IN "
                f"({', '.join('?' * len(chunk))}) ORDER BY client_id, rowid"
            )
            for client_id, blob in connection.execute(query, (split, *chunk)):
                yield str(client_id), blob
        return
    query = "SELECT client_id, serialized_example_proto FROM examples WHERE split_name = ?"
    for client_id, blob in connection.execute(query, (split,)):
        client_id = str(client_id)
        if clients is None or client_id in clients:
            yield client_id, blob


def metadata_examples(
    connection: sqlite3.Connection, split: str, clients: Optional[set] = None, cap: Optional[int] = None
) -> int:
    """The examples of ``split`` (of ``clients`` when given; at most ``cap`` per client when given) that
    ``client_metadata`` declares: a size known before a single example is read. DataFileError for a count
    that is not a non-negative integer."""
    rows = connection.execute("SELECT client_id, num_examples FROM client_metadata WHERE split_name = ?", (split,))
    total = 0
    for client_id, n in rows:
        if clients is not None and str(client_id) not in clients:
            continue
        if not isinstance(n, int) or n < 0:
            raise DataFileError(f"client_metadata: client {str(client_id)!r} has num_examples {n!r}")
        total += n if cap is None else min(n, cap)
    return total


def tff_client_ids(path: str, split: str) -> list:
    """The sorted client ids of one split, from the ``client_metadata`` table (no example is read)."""
    connection = open_tff_database(path)
    try:
        rows = connection.execute("SELECT DISTINCT client_id FROM client_metadata WHERE split_name = ?", (split,))
        return sorted(str(r[0]) for r in rows)
    finally:
        connection.close()


def read_tff_images(path: str, dataset: str, split: str, *, clients: Optional[set] = None) -> RaggedClients:
    """One split of a TFF image dataset (``dataset`` a key of :data:`TFF_IMAGE_DATASETS`) as ragged clients;
    ``clients`` (ids) keeps only those. See the module docstring for the checks."""
    if dataset not in TFF_IMAGE_DATASETS:
        raise ValueError(f"unknown TFF image dataset {dataset!r}; expected one of {sorted(TFF_IMAGE_DATASETS)}")
    schema = TFF_IMAGE_DATASETS[dataset]
    connection = open_tff_database(path)
    try:
        return _read(connection, path, schema, split, clients)
    except sqlite3.DatabaseError as error:
        raise DataFileError(f"{path}: unreadable SQLite database ({error})") from None
    finally:
        connection.close()


def _client_examples(connection, path, split, clients):
    """(client id, decoded features) of every example of ``split`` (only ``clients`` when given), clients in
    sorted id order and each client's examples in row order; a malformed example is a DataFileError."""
    present = tff_splits(connection)
    if split not in present:
        raise DataFileError(f"{path}: no split {split!r}; the file has {present}")
    query = "SELECT client_id, serialized_example_proto FROM examples WHERE split_name = ? ORDER BY client_id, rowid"
    for client_id, blob in connection.execute(query, (split,)):
        client_id = str(client_id)
        if clients is not None and client_id not in clients:
            continue
        try:
            features = decode_example(blob)
        except ExampleDecodeError as error:
            raise DataFileError(
                f"{path}: split {split!r}, client {client_id!r}: malformed tf.train.Example ({error})"
            ) from None
        yield client_id, features


def _split_size(connection, split, clients, what: str = "COUNT(*)") -> int:
    """``what`` summed over the chosen clients' examples of ``split`` (one query)."""
    per_client = connection.execute(
        f"SELECT client_id, {what} FROM examples WHERE split_name = ? GROUP BY client_id", (split,)
    )
    return sum(int(n or 0) for client_id, n in per_client if clients is None or str(client_id) in clients)


def _read(connection, path, schema: TffImageSchema, split, clients):
    if split not in tff_splits(connection):
        raise DataFileError(f"{path}: no split {split!r}; the file has {tff_splits(connection)}")
    count = _split_size(connection, split, clients)
    size = int(np.prod(schema.shape))
    check_task_size(count * (size * 4 + 8), f"split {split!r} of {path} ({count:,} examples)")
    x = np.empty((count, size), np.float32)
    y = np.empty(count, np.int32)
    ids: list = []
    sizes: list = []
    row = 0
    for client_id, features in _client_examples(connection, path, split, clients):
        where = f"{path}: split {split!r}, client {client_id!r}"
        for key in (schema.image_key, schema.label_key):
            if key not in features:
                raise DataFileError(f"{where}: an example without feature {key!r} (it has {sorted(features)})")
        image, label = features[schema.image_key], features[schema.label_key]
        if not isinstance(image, np.ndarray) or image.size != size:
            got = f"{image.size} values" if isinstance(image, np.ndarray) else "bytes"
            raise DataFileError(f"{where}: feature {schema.image_key!r} has {got}, expected {size} {schema.shape}")
        if not isinstance(label, np.ndarray) or label.size != 1 or label.dtype != np.int64:
            raise DataFileError(f"{where}: feature {schema.label_key!r} must be one int64")
        if not np.all(np.isfinite(image)):
            raise DataFileError(f"{where}: a non-finite pixel")
        if not 0 <= int(label[0]) < schema.num_classes:
            raise DataFileError(f"{where}: label {int(label[0])} outside 0..{schema.num_classes - 1}")
        if not ids or ids[-1] != client_id:
            ids.append(client_id)
            sizes.append(0)
        x[row] = image * schema.scale
        y[row] = label[0]
        sizes[-1] += 1
        row += 1
    if not ids:
        raise DataFileError(f"{path}: split {split!r} has no examples" + (" of the chosen clients" if clients else ""))
    x, y = x[:row], y[:row]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return RaggedClients({"x": x.reshape((row,) + schema.shape), "y": y}, offsets, tuple(ids))


TFF_TEXT_SPLITS = {"train": "train", "test": "test"}  # shakespeare.sqlite's split names
SNIPPETS_KEY = "snippets"


def read_tff_text(path: str, split: str, *, clients: Optional[set] = None, length: int = 80) -> RaggedClients:
    """One split of TFF's Shakespeare (``shakespeare.sqlite``: each example one ``snippets`` bytes feature, a
    line of the client's role) as ragged clients with ``x`` and ``y`` int32 [n, length], the client's snippets
    cut into next-character windows (:func:`fedjax_clust.data.text.snippet_windows`)."""
    connection = open_tff_database(path)
    try:
        if split not in tff_splits(connection):
            raise DataFileError(f"{path}: no split {split!r}; the file has {tff_splits(connection)}")
        check_task_size(
            8 * _split_size(connection, split, clients, "SUM(LENGTH(serialized_example_proto))"),
            f"split {split!r} of {path}",
        )
        per_client: dict = {}
        for client_id, features in _client_examples(connection, path, split, clients):
            snippet = features.get(SNIPPETS_KEY)
            if not isinstance(snippet, list) or len(snippet) != 1:
                raise DataFileError(
                    f"{path}: split {split!r}, client {client_id!r}: an example needs one bytes feature "
                    f"{SNIPPETS_KEY!r} (it has {sorted(features)})"
                )
            try:
                text = snippet[0].decode("utf-8")
            except UnicodeDecodeError:
                raise DataFileError(f"{path}: split {split!r}, client {client_id!r}: a snippet is not UTF-8") from None
            per_client.setdefault(client_id, []).append(text)
    except sqlite3.DatabaseError as error:
        raise DataFileError(f"{path}: unreadable SQLite database ({error})") from None
    finally:
        connection.close()
    if not per_client:
        raise DataFileError(f"{path}: split {split!r} has no examples" + (" of the chosen clients" if clients else ""))
    ids = sorted(per_client)
    windows = [snippet_windows(per_client[i], length) for i in ids]
    return RaggedClients.from_clients([{"x": x, "y": y} for x, y in windows], ids)
