"""Checkpoints of a whole run with Orbax, so that a killed run resumes with exactly the same result.

A checkpoint ``DIR/round_00000040/`` holds the client state (parameters, optimiser state, round counter,
algorithm extras; saved with ``orbax.checkpoint.StandardCheckpointer``, shardings included) and
``progress.json`` (the round, the metrics recorded so far and the run's full configuration, every resolved
hyperparameter included, e.g. the cross-gradient chunk Federated-Clustering's ``chunk_size="auto"`` resolved
to), written last as the commit marker. The PRNG key is not stored: round t always uses
``fold_in(fold_in(PRNGKey(seed), 1), t)``, so the seed and the round fix it. The two newest checkpoints are kept.

A checkpoint that cannot be read (a truncated ``progress.json``, missing or corrupt state files) is
skipped with a warning naming it, and the newest readable one is used instead. One that cannot be written (a full
disk, a quota) is refused before Orbax starts when the disk has less room than the state
(:func:`~fedjax_clust.io.unwritable.check_room`), and removed when the write fails half-way: either way an
:class:`~fedjax_clust.io.unwritable.OutputError` says so and the checkpoints before it stay the ones to resume from.
"""

from __future__ import annotations

import os
import re
import shutil
import warnings
from typing import Callable, Optional

import jax

from fedjax_clust.io.interrupts import interrupts_deferred
from fedjax_clust.io.jsonio import read_json, write_json
from fedjax_clust.io.unwritable import OutputError, check_room, is_output_failure, reason

__all__ = ["save_checkpoint", "latest_checkpoint", "restore_checkpoint", "restore_latest", "checkpoint_path"]

_PATTERN = re.compile(r"^round_(\d{8})$")
KEEP = 2


def _checkpointer():
    import orbax.checkpoint as ocp

    return ocp.StandardCheckpointer()


def checkpoint_path(directory: str, round_index: int) -> str:
    return os.path.join(os.path.abspath(directory), f"round_{round_index:08d}")


def save_checkpoint(directory: str, round_index: int, state, history: list, config: dict) -> str:
    """Write the checkpoint of ``round_index`` and prune all but the newest ``KEEP``. A Ctrl-C during the
    write is held until it is complete (:func:`~fedjax_clust.io.interrupts.interrupts_deferred`), then raised.
    :class:`~fedjax_clust.io.unwritable.OutputError` when it cannot be written (module docstring)."""
    directory = os.path.abspath(directory)
    path = checkpoint_path(directory, round_index)
    what = f"the checkpoint of round {round_index}"
    with interrupts_deferred():
        if os.path.exists(path):
            shutil.rmtree(path)
        os.makedirs(directory, exist_ok=True)
        check_room(directory, int(1.1 * state_bytes(state)) + ROOM_BEYOND_STATE, what)
        try:
            checkpointer = _checkpointer()
            checkpointer.save(os.path.join(path, "state"), state)
            checkpointer.wait_until_finished()
            write_json(
                os.path.join(path, "progress.json"),
                {"round": round_index, "history": history, "config": config},
                indent=None,
            )
        except Exception as error:
            if not is_output_failure(error):
                raise
            shutil.rmtree(path, ignore_errors=True)  # half a checkpoint: its room back, never read as one
            kept = _complete_checkpoints(directory)
            intact = f"round {kept[-1]}'s is the newest intact one" if kept else "no earlier one was written"
            raise OutputError(
                error.errno if isinstance(error, OSError) else 28,
                f"cannot write {what} in {directory} ({reason(error)}); {intact}",
            ) from None
        for old in _complete_checkpoints(directory)[:-KEEP]:
            shutil.rmtree(checkpoint_path(directory, old), ignore_errors=True)
    return path


ROOM_BEYOND_STATE = 1 << 16  # the metrics, the configuration and Orbax's metadata beside the state (+10%)


def state_bytes(state) -> int:
    """The bytes of a state's arrays (device or host), what its checkpoint writes at least."""
    return int(sum(getattr(x, "nbytes", 0) for x in jax.tree.leaves(state)))


def _complete_checkpoints(directory: str) -> list:
    if not os.path.isdir(directory):
        return []
    rounds = []
    for name in os.listdir(directory):
        match = _PATTERN.match(name)
        if match and os.path.exists(os.path.join(directory, name, "progress.json")):
            rounds.append(int(match.group(1)))
    return sorted(rounds)


def latest_checkpoint(directory: str) -> Optional[int]:
    """The newest complete checkpoint's round, or None."""
    rounds = _complete_checkpoints(os.path.abspath(directory))
    return rounds[-1] if rounds else None


def _read_progress(directory: str, round_index: int) -> dict:
    path = os.path.join(checkpoint_path(directory, round_index), "progress.json")
    progress = read_json(path)
    if not isinstance(progress, dict) or progress.get("round") != round_index or "history" not in progress:
        raise ValueError(f"{path} does not describe round {round_index}")
    return progress


def _read_state(directory: str, round_index: int, like_state):
    import orbax.checkpoint as ocp

    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like_state)
    return _checkpointer().restore(os.path.join(checkpoint_path(directory, round_index), "state"), abstract)


def restore_checkpoint(directory: str, round_index: int, like_state):
    """(state, progress) of checkpoint ``round_index``; ``like_state`` gives structure, dtypes, shardings."""
    progress = _read_progress(directory, round_index)
    return _read_state(directory, round_index, like_state), progress


def restore_latest(directory: str, like_state, check_config: Optional[Callable[[dict, str], None]] = None):
    """(round, state, progress) of the newest readable checkpoint in ``directory``, or None if there is none.

    ``check_config(config, path)`` is called on each checkpoint's saved configuration before its state is
    read and may raise (a checkpoint of a different run is refused, not skipped). Unreadable checkpoints
    are skipped with a warning naming them; ValueError if every one is unreadable.
    """
    rounds = _complete_checkpoints(os.path.abspath(directory))
    failures = []
    for round_index in reversed(rounds):
        path = checkpoint_path(directory, round_index)
        try:
            progress = _read_progress(directory, round_index)
        except (OSError, ValueError) as e:
            failures.append(f"{path} ({str(e)[:200]})")
            warnings.warn(f"skipping unreadable checkpoint {failures[-1]}", RuntimeWarning, stacklevel=2)
            continue
        if check_config is not None:
            check_config(progress.get("config", {}), path)
        try:
            state = _read_state(directory, round_index, like_state)
        except Exception as e:  # noqa: BLE001 - any failure to read the state means: try the previous one
            reason = (str(e).splitlines() or [type(e).__name__])[0]
            failures.append(f"{path} ({reason[:200]})")
            warnings.warn(f"skipping unreadable checkpoint {failures[-1]}", RuntimeWarning, stacklevel=2)
            continue
        return round_index, state, progress
    if failures:
        raise ValueError(f"no readable checkpoint in {directory}: {'; '.join(failures)}")
    return None
