"""Ctrl-C at a safe point: a write that must not be cut in half holds a SIGINT until it is done.

A checkpoint is written by Orbax's background threads; a KeyboardInterrupt raised in the middle of a save left
them writing into a folder the interrupt handler then replaced ("cannot schedule new futures after shutdown",
tensorstore NOT_FOUND errors) and could leave a half-written checkpoint. :func:`interrupts_deferred` runs its
block with SIGINT recorded instead of raised, restores the previous handler on the way out and then raises the
KeyboardInterrupt it held, so the caller's interrupt path (save the last round, write the summary, one line,
exit status 130) sees a completed write. A second Ctrl-C during the block interrupts at once (a write that hangs,
e.g. on a network file system, can still be stopped).

Scope: it swaps the handler only for the duration of the block, only in the main thread (Python delivers
signals there) and only while the handler is Python's default one (:func:`signal.default_int_handler`); a
program or notebook kernel with its own SIGINT handler keeps it untouched. Nothing outlives the block.
"""

from __future__ import annotations

import contextlib
import signal
import threading

__all__ = ["interrupts_deferred"]


@contextlib.contextmanager
def interrupts_deferred():
    """Run the block with Ctrl-C held: a SIGINT during it raises KeyboardInterrupt once the block is done, a
    second one at once."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    received = []

    def hold(signum, frame):
        if received:  # Ctrl-C a second time: the user means it (a save that hangs can still be stopped)
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        received.append(signum)

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt
