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

Rows are read in record batches of the needed columns only, in two passes: the client ids first (which rows to keep and
where each goes), then the labels and images, decoded straight into one preallocated array; a client's examples keep the
files' row order, clients come in sorted id order. The number of rows (from the files' footers) and then of chosen rows
is checked against the host's memory before anything is allocated; a missing column, a wrong type, an empty split, a
label out of range, a non-finite pixel or an image of another size is one
:class:`~fedjax_clust.data.data_file.DataFileError` line."""

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


def _split_of(file: str, root: str) -> str:
    """ "test", "validation" or "train": from the file name's start, else from the names of its folders below
    ``root`` (Hugging Face's ``data/test-00000-of-00001.parquet`` and the converter's
    ``default/test/0000.parquet``); folders above ``root`` never count."""
    inside = os.path.relpath(file, root) if os.path.isdir(root) else os.path.basename(file)
    for name in reversed(inside.split(os.sep)):
        for split, prefixes in (("test", ("test",)), ("validation", ("validation", "valid")), ("train", ("train",))):
            if name.startswith(prefixes):
                return split
    return "train"


def parquet_split_files(path: str) -> dict:
    """``{"train": [files], "test": [files], "validation": [files]}`` (only the splits present) of a .parquet
    file or a folder of them: a file whose name, or else the name of a folder it is in below ``path``, starts
    with ``test`` belongs to the test split, ``validation`` / ``valid`` to the validation split (which the tasks
    do not read), any other to the training split; files in sorted path order."""
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
        splits.setdefault(_split_of(file, path), []).append(file)
    if "train" not in splits:
        raise DataFileError(f"{path}: no training files (only {sorted(splits)} files)")
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
        except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as error:
            if isinstance(error, DataFileError):
                raise
            raise DataFileError(f"{where}: an image Pillow cannot decode ({type(error).__name__}: {error})") from None
        return pixels.reshape(shape)
    if isinstance(value, list):
        try:
            pixels = np.asarray(value, dtype=np.float64)
        except (ValueError, TypeError):
            raise DataFileError(f"{where}: an image list that is not {shape} numbers") from None
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
    row_clients = [c for _, batch in _batches(files, [client_column]) for c in batch[client_column]]
    if any(c is None for c in row_clients):
        raise DataFileError(f"{files[0]}: a row without a {client_column!r}")
    row_clients = [str(c) for c in row_clients]
    chosen = [i for i, c in enumerate(row_clients) if clients is None or c in clients]
    if not chosen:
        raise DataFileError(f"{files[0]}: no rows" + (" of the chosen clients" if clients is not None else ""))
    check_task_size(len(chosen) * (int(np.prod(shape)) * 4 + 8), f"{len(files)} Parquet file(s) ({len(chosen):,} rows)")
    ids = sorted({row_clients[i] for i in chosen})
    rank = {c: k for k, c in enumerate(ids)}
    # each chosen row's slot: clients in sorted id order, a client's rows in file order (a stable sort)
    order = sorted(chosen, key=lambda i: rank[row_clients[i]])
    slot = {row: k for k, row in enumerate(order)}
    x = np.empty((len(order),) + tuple(shape), np.float32)
    y = np.empty(len(order), np.int32)
    row = 0
    for file, batch in _batches(files, [label_column, image_column]):
        for label, image in zip(batch[label_column], batch[image_column]):
            k = slot.get(row)
            row += 1
            if k is None:
                continue
            where = f"{file}: client {row_clients[row - 1]!r}"
            if not isinstance(label, int) or isinstance(label, bool):
                raise DataFileError(f"{where}: label {label!r} is not an integer")
            if not 0 <= label < num_classes:
                raise DataFileError(f"{where}: label {label} outside 0..{num_classes - 1}")
            x[k] = _decode_image(image, shape, where)
            x[k] *= np.float32(scale)
            if not np.all(np.isfinite(x[k])):
                raise DataFileError(f"{where}: a non-finite pixel")
            y[k] = label
    counts = np.bincount([rank[row_clients[i]] for i in order], minlength=len(ids))
    offsets = np.concatenate([[0], np.cumsum(counts)])
    return RaggedClients({"x": x, "y": y}, offsets, tuple(ids))
