"""When a run's output cannot be written: a full disk, a quota, a folder made read-only, an I/O error mid-run.

Every writer keeps what it wrote before valid (JSON files are replaced atomically, :func:`~fedjax_clust.io.jsonio.
write_json`; a checkpoint that fails half-way is removed, so the newest complete one stays the one a resume
reads), and the failure reaches the user as one :class:`OutputError` naming what could not be written and what is
intact; the command line prints it in one ``error:`` line and exits with status 74 (``EX_IOERR``).

A checkpoint is the one large write: :func:`check_room` refuses it before Orbax starts when the disk has less
free space than the state it would write (Orbax's own failure comes from a background thread, with a logged
traceback), and :func:`is_output_failure` recognises what Orbax / TensorStore raise when the disk fills anyway.
"""

from __future__ import annotations

import errno
import shutil

__all__ = ["OutputError", "OUTPUT_ERRNOS", "EXIT_STATUS", "is_output_failure", "reason", "check_room"]

EXIT_STATUS = 74  # sysexits.h EX_IOERR: an error while writing the output

# the errors that say "this output cannot be written here", as opposed to a wrong path given as input
OUTPUT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EFBIG}

# what TensorStore (under Orbax) puts in the ValueError it raises for a failed write
_STORE_MARKERS = (
    "RESOURCE_EXHAUSTED",
    "No space left on device",
    "Disk quota exceeded",
    "Read-only file system",
    "Permission denied",
)


class OutputError(OSError):
    """An output that could not be written (module docstring); ``str()`` is the whole one-line message."""

    def __str__(self) -> str:
        return str(self.strerror)


def is_output_failure(error: BaseException) -> bool:
    """True for an OSError of :data:`OUTPUT_ERRNOS` (or an :class:`OutputError`) and for Orbax / TensorStore's
    errors of a failed write (:data:`_STORE_MARKERS` in the message)."""
    if isinstance(error, OutputError):
        return True
    if isinstance(error, OSError):
        return error.errno in OUTPUT_ERRNOS
    return isinstance(error, (ValueError, RuntimeError)) and any(m in str(error) for m in _STORE_MARKERS)


def reason(error: BaseException) -> str:
    """The short cause of an output failure: the OSError's text, else the store's marker found in the message."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower() if not isinstance(error, OutputError) else str(error)
    found = [m for m in _STORE_MARKERS if m in str(error) and m != "RESOURCE_EXHAUSTED"]
    return found[0].lower() if found else "the storage refused the write"


def check_room(directory: str, nbytes: int, what: str) -> None:
    """Raise :class:`OutputError` (ENOSPC) when ``directory``'s file system has less than ``nbytes`` free for
    ``what`` (e.g. "the checkpoint of round 40")."""
    free = shutil.disk_usage(directory).free
    if free < nbytes:
        raise OutputError(
            errno.ENOSPC,
            f"cannot write {what} in {directory}: it needs about {_size(nbytes)} and the disk has {_size(free)} free",
        )


def _size(nbytes: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if nbytes < 1000 or unit == "GB":
            return f"{nbytes:.0f} {unit}" if unit == "bytes" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    return f"{nbytes:.1f} TB"
