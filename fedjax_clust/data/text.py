"""Characters as integer ids for next-character prediction (Shakespeare), and the windows a model reads.

Vocabulary (ours): 0 ``PAD`` (no character: never a target), 1 ``OOV`` (a character outside the list), 2 ``BOS``
and 3 ``EOS`` (the start and end of a TFF snippet), then the 80 characters of LEAF's Shakespeare alphabet
(newline, space, ``!"&'(),-.``, digits, ``:;>?``, upper-case letters, ``[]``, lower-case letters, ``}``), ids 4 to
83: 84 classes. Both formats become examples ``x`` int32 [L] and ``y`` int32 [L] with ``y[t]`` the character
after ``x[t]`` (a target at every position; ``PAD`` targets count in no loss and no accuracy):

* LEAF (:func:`leaf_windows`): its 80-character string ``x`` and next character ``y`` are 81 consecutive
  characters; our ``y`` is ``x[1:] + y``, so LEAF's own label is the last position's target.
* TFF (:func:`snippet_windows`): a client's snippets (its lines), each wrapped in ``BOS`` ... ``EOS``, are
  concatenated and cut into non-overlapping windows of L + 1 ids (the last one padded with ``PAD``); ``x`` is
  a window's first L ids and ``y`` its last L (our choice of cutting).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = [
    "PAD",
    "OOV",
    "BOS",
    "EOS",
    "LEAF_ALPHABET",
    "VOCAB_SIZE",
    "encode",
    "leaf_windows",
    "snippet_windows",
]

PAD, OOV, BOS, EOS = 0, 1, 2, 3
LEAF_ALPHABET = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
VOCAB_SIZE = 4 + len(LEAF_ALPHABET)

_TABLE = np.full(256, OOV, np.int32)  # code point -> id (the alphabet is ASCII)
for _i, _c in enumerate(LEAF_ALPHABET):
    _TABLE[ord(_c)] = 4 + _i


def encode(text: str) -> np.ndarray:
    """int32 ids of ``text``'s characters (``OOV`` for any character outside the alphabet)."""
    codes = np.frombuffer(text.encode("utf-32-le"), np.uint32)
    ids = np.full(codes.shape, OOV, np.int32)
    ascii_ = codes < 256
    ids[ascii_] = _TABLE[codes[ascii_]]
    return ids


def leaf_windows(xs: Sequence[str], ys: Sequence[str]):
    """(x, y) int32 [n, L] from LEAF's strings ``xs`` (L characters each) and next characters ``ys``."""
    x = np.stack([encode(text) for text in xs]) if len(xs) else np.zeros((0, 0), np.int32)
    nxt = encode("".join(ys)).reshape(-1, 1)
    return x, np.concatenate([x[:, 1:], nxt], axis=1)


def snippet_windows(snippets: Sequence[str], length: int):
    """(x, y) int32 [n, length] from one client's snippets (module docstring); n >= 1 for any snippet."""
    stream = np.concatenate([np.concatenate([[BOS], encode(s), [EOS]]).astype(np.int32) for s in snippets])
    count = -(-(len(stream) - 1) // length)  # windows of length + 1 overlapping by one id
    padded = np.full(count * length + 1, PAD, np.int32)
    padded[: len(stream)] = stream
    starts = np.arange(count) * length
    window = padded[starts[:, None] + np.arange(length + 1)[None, :]]
    return window[:, :-1], window[:, 1:]
