"""StackOverflow tag prediction from TFF's ``stackoverflow.sqlite`` and its word and tag count files.

The files (docs/guides/real-data.md gives the downloads; the library never downloads):

* ``stackoverflow.sqlite.lzma`` — TFF's federated SQLite layout (:mod:`fedjax_clust.data.tff_sqlite`), splits
  ``train`` (342,477 users, 135,818,730 examples), ``heldout`` and ``test``; each example a serialized
  ``tf.train.Example`` with the bytes features ``tokens`` (a sentence of a question or answer, lower-cased,
  tokens separated by spaces), ``title`` (its question's title), ``tags`` (its question's tags separated by
  ``|``), ``type`` and ``creation_date``, and the int64 ``score``;
* ``stackoverflow.word_count`` (also read inside its ``.tar.bz2``) — one ``word count`` line per word, most
  frequent first: the first ``vocab_size`` lines are the word vocabulary;
* ``stackoverflow.tag_count`` (or its ``.tar.bz2``) — a JSON object ``{tag: count}``: the ``num_tags`` tags
  with the largest counts (ties in the file's order) are the tag vocabulary.

One example becomes (Reddi et al. 2021, "Adaptive Federated Optimization", §5 and App. C: 10,000 words, 500
tags, one-versus-rest logistic regression):

* its bag of words: the words of ``tokens + " " + title`` split on ASCII whitespace (what C's ``isspace``
  calls whitespace), and the share of them that is each vocabulary word, w_v = count_v / (number of words);
  out-of-vocabulary words count in the denominator and nowhere else. Stored sparse: ``words`` int32 [K] (vocabulary ids,
  ascending) and ``weights`` float32 [K] (w_v), padded with id 0 and weight 0 to K, the most distinct vocabulary words
  of one example of the split (one long sentence sets K, and so the memory and the K T multiply-adds of every example:
  the config records K as ``word_slots``). An example without any word has an all-zero bag (a mean over no words would
  be NaN);
* its tags: the in-vocabulary tags of ``tags`` split on ``|``, each once, as ``tags`` int32 [M] padded with
  ``num_tags`` (an index past the last tag), M the most tags of one example of the split. (TFF's preprocessing
  sums one-hot tags, so a tag repeated in one string would be a target of 2; here a target is 0 or 1.)

Reading is streamed: examples are decoded one at a time into flat typed arrays (a whole split as dense bags would be 40
kB per example), padded once at the end. ``clients`` keeps only those ids (with an index on ``client_id`` only their
rows are read, see :func:`~fedjax_clust.data.tff_sqlite.client_rows`; without one the split is read in one pass),
``max_client_examples`` keeps each client's first examples (TFF's ``max_elements``). :func:`with_tags` drops the
examples without an in-vocabulary tag (an evaluation split's: they have nothing to recall). Malformed input is one
:class:`~fedjax_clust.data.data_file.DataFileError` line."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import tarfile
from array import array
from collections import Counter
from typing import NamedTuple, Optional

import numpy as np

from fedjax_clust.data.data_file import DataFileError, require_path
from fedjax_clust.data.example_proto import ExampleDecodeError, decode_example
from fedjax_clust.data.ragged import RaggedClients
from fedjax_clust.data.tff_sqlite import client_rows, metadata_examples, open_tff_database, tff_splits
from fedjax_clust.parallel.memory import check_task_size

__all__ = [
    "StackOverflowVocabulary",
    "WORD_COUNT_FILE",
    "TAG_COUNT_FILE",
    "STACKOVERFLOW_SPLITS",
    "load_vocabulary",
    "read_word_counts",
    "read_tag_counts",
    "bag_of_words",
    "tag_ids",
    "read_tff_stackoverflow",
    "with_tags",
    "default_count_file",
]

WORD_COUNT_FILE = "stackoverflow.word_count"
TAG_COUNT_FILE = "stackoverflow.tag_count"
STACKOVERFLOW_SPLITS = {"train": "train", "test": "test"}  # the file's third split, "heldout", is not read
_MAX_COUNT_FILE_BYTES = 1 << 31  # a count file inside an archive larger than this is refused
# one decoded example while a split is read (compact rows: 8 bytes a distinct word, 4 a tag): an estimate for 40
# distinct words; the exact size of the packed arrays is checked again before they are built
_DECODED_BYTES_PER_EXAMPLE = 400


class StackOverflowVocabulary(NamedTuple):
    """The word and tag vocabularies: ``words`` maps a word (bytes) to its id 0..V-1, ``tags`` a tag to its
    id 0..T-1; ids in the count files' order."""

    words: dict
    tags: dict

    @property
    def num_words(self) -> int:
        return len(self.words)

    @property
    def num_tags(self) -> int:
        return len(self.tags)


@contextlib.contextmanager
def _count_stream(path: str, name: str):
    """A binary file object of the count file ``name``: ``path`` itself, or the member called ``name`` of the
    ``.tar.bz2`` archive TFF ships (decompressed as it is read, never extracted to disk)."""
    path = require_path(path, f"{name} file")
    if os.path.isdir(path):
        raise DataFileError(f"{path}: a folder, expected the file {name} or {name}.tar.bz2")
    if not tarfile.is_tarfile(path):
        if path.endswith((".tar", ".tar.bz2", ".tbz2", ".tar.gz", ".tgz")):
            raise DataFileError(f"{path}: not a complete tar archive; download it again")
        with open(path, "rb") as plain:
            yield plain
        return
    try:
        archive = tarfile.open(path, "r:*")
    except (tarfile.TarError, EOFError, OSError) as error:
        raise DataFileError(f"{path}: unreadable archive ({error})") from None
    with archive:
        try:
            member = next((m for m in archive if os.path.basename(m.name) == name and m.isfile()), None)
        except (tarfile.TarError, EOFError, OSError) as error:
            raise DataFileError(f"{path}: unreadable archive ({error})") from None
        if member is None:
            raise DataFileError(f"{path}: the archive has no file {name}")
        if member.size > _MAX_COUNT_FILE_BYTES:
            raise DataFileError(f"{path}: {member.name} is {member.size:,} bytes, more than a count file holds")
        handle = archive.extractfile(member)
        if handle is None:
            raise DataFileError(f"{path}: {member.name} is not a regular file")
        with handle:
            yield handle


def read_word_counts(path: str, vocab_size: int) -> dict:
    """``{word (bytes): id}`` of the first ``vocab_size`` lines of ``stackoverflow.word_count`` (``word count``
    per line, most frequent first), or DataFileError for a malformed line, a repeated word or a file with fewer
    words."""
    words: dict = {}
    with _count_stream(path, WORD_COUNT_FILE) as handle:
        try:
            for number, line in enumerate(handle, 1):
                parts = line.split()
                if len(parts) != 2 or not parts[1].isdigit():
                    raise DataFileError(f"{path}: line {number} is not 'word count' ({line[:60]!r})")
                if parts[0] in words:
                    word = parts[0].decode(errors="replace")
                    raise DataFileError(f"{path}: line {number} repeats the word {word!r}")
                words[parts[0]] = len(words)
                if len(words) == vocab_size:
                    return words
        except (OSError, EOFError) as error:  # a truncated .tar.bz2
            raise DataFileError(f"{path}: unreadable ({error})") from None
    raise DataFileError(f"{path}: {len(words):,} words, fewer than vocab_size {vocab_size:,}")


def read_tag_counts(path: str, num_tags: int) -> dict:
    """``{tag (bytes): id}`` of the ``num_tags`` most frequent tags of ``stackoverflow.tag_count`` (a JSON
    object ``{tag: count}``; equal counts keep the file's order), or DataFileError."""
    with _count_stream(path, TAG_COUNT_FILE) as handle:
        try:
            counts = json.load(handle)
        except (ValueError, UnicodeDecodeError, RecursionError) as error:
            raise DataFileError(f"{path}: not a JSON file ({type(error).__name__}: {error})") from None
        except (OSError, EOFError) as error:  # a truncated .tar.bz2
            raise DataFileError(f"{path}: unreadable ({error})") from None
    if not isinstance(counts, dict):
        raise DataFileError(f"{path}: expected a JSON object {{tag: count}}, got {type(counts).__name__}")
    for tag, count in counts.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise DataFileError(f"{path}: tag {tag!r} has count {count!r}, expected a non-negative integer")
    if len(counts) < num_tags:
        raise DataFileError(f"{path}: {len(counts):,} tags, fewer than num_tags {num_tags:,}")
    ranked = sorted(counts.items(), key=lambda item: item[1], reverse=True)  # stable: ties keep the file order
    try:
        return {tag.encode("utf-8"): i for i, (tag, _) in enumerate(ranked[:num_tags])}
    except UnicodeEncodeError:
        raise DataFileError(f"{path}: a tag that is not valid Unicode") from None


def default_count_file(data_file: str, name: str) -> str:
    """Where a count file is looked for when not given: beside ``data_file``, as ``name`` or ``name.tar.bz2``
    (the first that exists; the plain name when neither does, so the error names it)."""
    folder = os.path.dirname(os.path.abspath(os.fspath(data_file)))
    for candidate in (name, name + ".tar.bz2"):
        if os.path.exists(os.path.join(folder, candidate)):
            return os.path.join(folder, candidate)
    return os.path.join(folder, name)


def load_vocabulary(word_counts: str, tag_counts: str, vocab_size: int, num_tags: int) -> StackOverflowVocabulary:
    """The word and tag vocabularies from the two count files (plain or ``.tar.bz2``)."""
    return StackOverflowVocabulary(read_word_counts(word_counts, vocab_size), read_tag_counts(tag_counts, num_tags))


def bag_of_words(tokens: bytes, title: bytes, words: dict):
    """(ids int32 [k], weights float32 [k]): the vocabulary words of ``tokens + b" " + title`` in ascending id
    order and each one's share of all its words (module docstring)."""
    split = (tokens + b" " + title).split()  # bytes.split(): ASCII whitespace, as C's isspace
    if not split:
        return np.zeros(0, np.int32), np.zeros(0, np.float32)
    known = sorted((words[w], c) for w, c in Counter(split).items() if w in words)
    if not known:
        return np.zeros(0, np.int32), np.zeros(0, np.float32)
    ids, counts = zip(*known)
    return np.asarray(ids, np.int32), (np.asarray(counts, np.float64) / len(split)).astype(np.float32)


def tag_ids(tags: bytes, vocabulary: dict) -> np.ndarray:
    """int32 [m]: the distinct in-vocabulary tags of a ``|``-separated tag string, ascending."""
    return np.asarray(sorted({vocabulary[t] for t in tags.split(b"|") if t in vocabulary}), np.int32)


def _bytes_feature(features: dict, key: str, where: str) -> bytes:
    value = features.get(key)
    if not isinstance(value, list) or len(value) != 1:
        raise DataFileError(f"{where}: an example needs one bytes feature {key!r} (it has {sorted(features)})")
    return value[0]


def _pack(flat: np.ndarray, counts: np.ndarray, width: int, fill) -> np.ndarray:
    """[n, width] rows from the concatenated ``flat`` values of n rows of ``counts`` values each, padded
    with ``fill``."""
    out = np.full((len(counts), width), fill, flat.dtype)
    row = np.repeat(np.arange(len(counts)), counts)
    column = np.arange(len(flat)) - np.repeat(np.cumsum(counts) - counts, counts)
    out[row, column] = flat
    return out


class _CompactRows:
    """One client's decoded examples while a split is read: flat typed arrays (4 bytes a value) and the
    values per example, no Python object per example."""

    __slots__ = ("words", "weights", "word_counts", "tags", "tag_counts")

    def __init__(self):
        self.words, self.weights, self.word_counts = array("i"), array("f"), array("i")
        self.tags, self.tag_counts = array("i"), array("i")

    def add(self, words: np.ndarray, weights: np.ndarray, tags: np.ndarray):
        self.words.frombytes(words.astype(np.int32).tobytes())
        self.weights.frombytes(weights.astype(np.float32).tobytes())
        self.word_counts.append(len(words))
        self.tags.frombytes(tags.astype(np.int32).tobytes())
        self.tag_counts.append(len(tags))


def read_tff_stackoverflow(
    path: str,
    split: str,
    vocabulary: StackOverflowVocabulary,
    *,
    clients: Optional[set] = None,
    max_client_examples: Optional[int] = None,
) -> RaggedClients:
    """One split of TFF's StackOverflow as ragged clients with ``words``, ``weights`` [n, K] and ``tags``
    [n, M] (module docstring), clients in sorted id order, each client's examples in file order."""
    connection = open_tff_database(path)
    per_client: dict = {}
    try:
        present = tff_splits(connection)
        if split not in present:
            raise DataFileError(f"{path}: no split {split!r}; the file has {present}")
        declared = metadata_examples(connection, split, clients, cap=max_client_examples)
        check_task_size(declared * _DECODED_BYTES_PER_EXAMPLE, f"split {split!r} of {path} ({declared:,} examples)")
        for client_id, blob in client_rows(connection, split, clients):
            kept = per_client.get(client_id)
            if kept is None:
                kept = per_client[client_id] = _CompactRows()
            if max_client_examples is not None and len(kept.word_counts) >= max_client_examples:
                continue
            where = f"{path}: split {split!r}, client {client_id!r}"
            try:
                features = decode_example(blob)
            except ExampleDecodeError as error:
                raise DataFileError(f"{where}: malformed tf.train.Example ({error})") from None
            example_tags = tag_ids(_bytes_feature(features, "tags", where), vocabulary.tags)
            word_ids, word_weights = bag_of_words(
                _bytes_feature(features, "tokens", where), _bytes_feature(features, "title", where), vocabulary.words
            )
            kept.add(word_ids, word_weights, example_tags)
    except sqlite3.DatabaseError as error:
        raise DataFileError(f"{path}: unreadable SQLite database ({error})") from None
    finally:
        connection.close()
    client_ids = sorted(c for c, kept in per_client.items() if len(kept.word_counts))
    if not client_ids:
        raise DataFileError(f"{path}: split {split!r} has no examples" + (" of the chosen clients" if clients else ""))
    rows = [per_client[c] for c in client_ids]
    word_counts = np.concatenate([np.frombuffer(r.word_counts, np.int32) for r in rows])
    tag_counts = np.concatenate([np.frombuffer(r.tag_counts, np.int32) for r in rows])
    width, tag_width = max(int(word_counts.max()), 1), max(int(tag_counts.max()), 1)
    check_task_size(len(word_counts) * (8 * width + 4 * tag_width), f"split {split!r} of {path}")
    arrays = {
        "words": _pack(np.concatenate([np.frombuffer(r.words, np.int32) for r in rows]), word_counts, width, 0),
        "weights": _pack(np.concatenate([np.frombuffer(r.weights, np.float32) for r in rows]), word_counts, width, 0),
        "tags": _pack(
            np.concatenate([np.frombuffer(r.tags, np.int32) for r in rows]), tag_counts, tag_width, vocabulary.num_tags
        ),
    }
    offsets = np.concatenate([[0], np.cumsum([len(r.word_counts) for r in rows])])
    return RaggedClients(arrays, offsets, tuple(client_ids))


def with_tags(clients: RaggedClients, num_tags: int):
    """(clients, dropped): only the examples with at least one in-vocabulary tag (a ``tags`` entry below
    ``num_tags``), clients left without examples left out, and how many examples were dropped."""
    keep = np.any(clients.arrays["tags"] < num_tags, axis=1)
    running = np.concatenate([[0], np.cumsum(keep)])
    counts = running[clients.offsets[1:]] - running[clients.offsets[:-1]]
    present = np.flatnonzero(counts > 0)
    arrays = {k: v[keep] for k, v in clients.arrays.items()}
    offsets = np.concatenate([[0], np.cumsum(counts)])
    kept = RaggedClients(arrays, offsets, clients.client_ids).select(present.tolist())
    return kept, int(clients.num_examples - keep.sum())
