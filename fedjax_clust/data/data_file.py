"""What every reader of a downloaded data file shares: its one-line error and its fingerprint."""

from __future__ import annotations

import hashlib
import os

__all__ = ["DataFileError", "require_path", "fingerprint"]


class DataFileError(ValueError):
    """A data file that is missing or does not follow its format: one line naming the file and what is wrong
    (the command line prints it as ``error: ...`` and exits with status 2, no traceback)."""


def require_path(path: str, what: str) -> str:
    """``path`` as a string, or DataFileError when nothing is there."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise DataFileError(
            f"{path}: no such file or directory (the {what}; see docs/guides/real-data.md for the downloads)"
        )
    return path


def _file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def fingerprint(path: str) -> str:
    """SHA-256 of a file, or of a folder's sorted (relative path, SHA-256) list of its files: what a run
    records (``data_file_sha256`` in run.json), so two runs on different downloads never look alike."""
    path = os.fspath(path)
    if os.path.isfile(path):
        return _file_digest(path)
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            digest.update(f"{os.path.relpath(full, path)}\0{_file_digest(full)}\n".encode())
    return digest.hexdigest()
