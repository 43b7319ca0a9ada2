"""Parquet files with a client-id column (Hugging Face ``datasets`` exports, e.g. ``flwrlabs/femnist``), read
as ragged clients (the columns named by :class:`ParquetColumns`). Optional: needs ``pyarrow``
(``pip install "fedjax-clust[parquet]"``).

A Hugging Face dataset on the Hub is Parquet files, one or more per split, named ``<split>-NNNNN-of-NNNNN.parquet``
(``data/train-00000-of-00001.parquet``); ``path`` is one such file or a folder of them
(:func:`parquet_split_files`: files whose name starts with ``test`` form the test split, all others the
training split). One row is one example; the columns this reader takes:

* ``client`` — the client id (string or integer; ``writer_id`` in ``flwrlabs/femnist``);
* ``label`` — an integer label in 0..num_classes-1 (a ``datasets`` ``ClassLabel`` is stored as one);
* ``image`` — a ``datasets`` ``Image`` (a struct ``{bytes, path}`` holding an encoded PNG / JPEG), raw
  encoded image bytes, or a list of numbers (the pixels, row-major). Encoded images are decoded with Pillow
  (already installed with matplotlib), converted to grayscale (``L``) for one channel or ``RGB`` for three,
  checked against ``shape`` from their header before their pixels are decoded, and scaled by ``scale``
  (1/255 for 8-bit images). An image stored only by ``path`` (not embedded) is refused: the reader opens no
  other file a data file names.

Rows are read in record batches of the needed columns only; a client's examples keep the files' row order,
clients come in sorted id order. The number of rows (from the files' footers) is checked against the host's
memory before anything is decoded; a missing column, a wrong type, an empty split, a label out of range, a
non-finite pixel or an image of another size is one :class:`~fedjax_clust.data.data_file.DataFileError` line.
"""

from __future__ import annotations

import io
import os
from typing import NamedTuple, Optional

import numpy as np

from fedjax_clust.data.data_file import DataFileError, require_path
from fedjax_clust.data.ragged import RaggedClients
from fedjax_clust.parallel.memory import check_task_size

__all__ = [
    "FEMNIST_PARQUET_COLUMNS",
    "ParquetColumns",
    "parquet_split_files",
    "parquet_client_ids",
    "read_parquet_images",
    "is_parquet",
]


class ParquetColumns(NamedTuple):
    """The names of the columns an image reader takes (module docstring)."""

    client: str
    label: str
    image: str


FEMNIST_PARQUET_COLUMNS = ParquetColumns(client="writer_id", label="character", image="image")
"""The columns of ``flwrlabs/femnist`` (Hugging Face): the writer, the class (62: digits, upper, lower case),
the 28 x 28 grayscale PNG."""


def _pyarrow():
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataFileError(
            "reading Parquet files needs pyarrow: pip install 'fedjax-clust[parquet]' (or pip install pyarrow)"
        ) from None
    return pq


def is_parquet(path: str) -> bool:
    """Whether ``path`` is a .parquet file or a folder holding .parquet files (at any depth)."""
    path = os.fspath(path)
    if os.path.isfile(path):
        return path.endswith(".parquet")
    return os.path.isdir(path) and any(f.endswith(".parquet") for _, _, files in os.walk(path) for f in files)


def parquet_split_files(path: str) -> dict:
    """``{"train": [files], "test": [files]}`` (``"test"`` only when there are such files) of a .parquet file
    or a folder of them: a file whose name starts with ``test`` belongs to the test split, any other to the
    training split; files in sorted path order."""
    path = require_path(path, "Parquet file or folder")
    if os.path.isfile(path):
        files = [path]
    else:
        files = sorted(
            os.path.join(root, f) for root, _, names in os.walk(path) for f in names if f.endswith(".parquet")
        )
    if not files:
        raise DataFileError(f"{path}: no .parquet file")
    splits: dict = {}
    for file in files:
        splits.setdefault("test" if os.path.basename(file).startswith("test") else "train", []).append(file)
    if "train" not in splits:
        raise DataFileError(f"{path}: only test files (names starting with 'test'); no training split")
    return splits


def _open(pq, file: str, columns: list):
    try:
        handle = pq.ParquetFile(file)
    except Exception as error:  # pyarrow raises ArrowInvalid / OSError for a file that is not Parquet
        raise DataFileError(f"{file}: not a Parquet file ({type(error).__name__}: {error})") from None
    names = handle.schema_arrow.names
    missing = [c for c in columns if c not in names]
    if missing:
        raise DataFileError(f"{file}: no column {', '.join(map(repr, missing))} (it has {names})")
    return handle


def _batches(files: list, columns: list):
    """(file, {column: Python list}) record batches of ``columns`` over ``files``."""
    pq = _pyarrow()
    for file in files:
        handle = _open(pq, file, columns)
        try:
            for batch in handle.iter_batches(batch_size=4096, columns=columns):
                yield file, batch.to_pydict()
        except DataFileError:
            raise
        except Exception as error:
            raise DataFileError(f"{file}: unreadable Parquet data ({type(error).__name__}: {error})") from None


def parquet_client_ids(files: list, client_column: str) -> list:
    """The sorted distinct client ids of ``files`` (only the id column is read)."""
    ids: set = set()
    for _, batch in _batches(files, [client_column]):
        ids.update(str(c) for c in batch[client_column] if c is not None)
    return sorted(ids)


def _num_rows(files: list) -> int:
    pq = _pyarrow()
    total = 0
    for file in files:
        try:
            total += pq.ParquetFile(file).metadata.num_rows
        except Exception as error:
            raise DataFileError(f"{file}: not a Parquet file ({type(error).__name__}: {error})") from None
    return total


def _decode_image(value, shape: tuple, where: str) -> np.ndarray:
    """uint8 / float pixels [H, W, C] of one image cell (module docstring)."""
    if isinstance(value, dict):
        if value.get("bytes") is None:
            raise DataFileError(f"{where}: an image stored by path only ({value.get('path')!r}); embed its bytes")
        value = value["bytes"]
    if isinstance(value, (bytes, bytearray)):
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(io.BytesIO(value)) as image:
                if image.size != (shape[1], shape[0]):
                    raise DataFileError(
                        f"{where}: an image of {image.size[0]}x{image.size[1]}, expected {shape[1]}x{shape[0]}"
                    )
                pixels = np.asarray(image.convert("L" if shape[2] == 1 else "RGB"))
        except (UnidentifiedImageError, OSError, ValueError) as error:
            if isinstance(error, DataFileError):
                raise
            raise DataFileError(f"{where}: an image Pillow cannot decode ({error})") from None
        return pixels.reshape(shape)
    if isinstance(value, list):
        pixels = np.asarray(value, dtype=np.float64)
        if pixels.size != int(np.prod(shape)):
            raise DataFileError(f"{where}: an image of {pixels.size} values, expected {int(np.prod(shape))} {shape}")
        return pixels.reshape(shape)
    raise DataFileError(f"{where}: an image cell of type {type(value).__name__} (expected an Image, bytes or a list)")


def read_parquet_images(
    files: list,
    columns: ParquetColumns,
    *,
    shape: tuple,
    num_classes: int,
    scale: float = 1 / 255,
    clients: Optional[set] = None,
) -> RaggedClients:
    """Ragged clients with ``x`` float32 [n, *shape] (pixels x ``scale``) and ``y`` int32 [n] from Parquet
    ``files`` (module docstring), ``columns`` naming the client, label and image columns; ``clients`` keeps
    only those ids."""
    client_column, label_column, image_column = columns
    rows = _num_rows(files)
    check_task_size(rows * (int(np.prod(shape)) * 4 + 8), f"{len(files)} Parquet file(s) ({rows:,} rows)")
    per_client: dict = {}
    for file, batch in _batches(files, [client_column, label_column, image_column]):
        for client, label, image in zip(batch[client_column], batch[label_column], batch[image_column]):
            if client is None:
                raise DataFileError(f"{file}: a row without a {client_column!r}")
            client = str(client)
            if clients is not None and client not in clients:
                continue
            where = f"{file}: client {client!r}"
            if not isinstance(label, int) or isinstance(label, bool) or not 0 <= label < num_classes:
                raise DataFileError(f"{where}: label {label!r} outside 0..{num_classes - 1}")
            pixels = _decode_image(image, shape, where).astype(np.float32) * np.float32(scale)
            if not np.all(np.isfinite(pixels)):
                raise DataFileError(f"{where}: a non-finite pixel")
            kept = per_client.setdefault(client, ([], []))
            kept[0].append(pixels)
            kept[1].append(label)
    if not per_client:
        raise DataFileError(f"{files[0]}: no rows" + (" of the chosen clients" if clients is not None else ""))
    ids = sorted(per_client)
    x = np.stack([p for c in ids for p in per_client[c][0]]).astype(np.float32)
    y = np.asarray([label for c in ids for label in per_client[c][1]], np.int32)
    offsets = np.concatenate([[0], np.cumsum([len(per_client[c][1]) for c in ids])])
    return RaggedClients({"x": x, "y": y}, offsets, tuple(ids))
