"""Checkpoints of a whole run with Orbax, so that a killed run resumes with exactly the same result.

A checkpoint ``DIR/round_00000040/`` holds the client state (parameters, optimiser state, round counter,
algorithm extras; saved with ``orbax.checkpoint.StandardCheckpointer``, shardings included) and
``progress.json`` (the round and the metrics recorded so far), written last as the commit marker. The PRNG
key is not stored: round t always uses ``fold_in(fold_in(PRNGKey(seed), 1), t)``, so the seed and the
round fix it. The two newest checkpoints are kept.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Optional

import jax

__all__ = ["save_checkpoint", "latest_checkpoint", "restore_checkpoint"]

_PATTERN = re.compile(r"^round_(\d{8})$")
KEEP = 2


def _checkpointer():
    import orbax.checkpoint as ocp
    return ocp.StandardCheckpointer()


def save_checkpoint(directory: str, round_index: int, state, history: list, config: dict) -> str:
    """Write the checkpoint of ``round_index`` and prune all but the newest ``KEEP``."""
    directory = os.path.abspath(directory)
    path = os.path.join(directory, f"round_{round_index:08d}")
    if os.path.exists(path):
        shutil.rmtree(path)
    os.makedirs(directory, exist_ok=True)
    checkpointer = _checkpointer()
    checkpointer.save(os.path.join(path, "state"), state)
    checkpointer.wait_until_finished()
    with open(os.path.join(path, "progress.json.tmp"), "w") as f:
        json.dump({"round": round_index, "history": history, "config": config}, f, default=float)
    os.replace(os.path.join(path, "progress.json.tmp"), os.path.join(path, "progress.json"))
    for old in _complete_checkpoints(directory)[:-KEEP]:
        shutil.rmtree(os.path.join(directory, f"round_{old:08d}"), ignore_errors=True)
    return path


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


def restore_checkpoint(directory: str, round_index: int, like_state):
    """(state, progress) of checkpoint ``round_index``; ``like_state`` gives structure, dtypes, shardings."""
    import orbax.checkpoint as ocp
    path = os.path.join(os.path.abspath(directory), f"round_{round_index:08d}")
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like_state)
    state = _checkpointer().restore(os.path.join(path, "state"), abstract)
    with open(os.path.join(path, "progress.json")) as f:
        progress = json.load(f)
    return state, progress
