"""A result folder holds one run, and says which.

Every run writes ``run.json`` (its full configuration: task, algorithm, every hyperparameter, seed,
evaluation cadence, matmul precision, package version) next to its results, and every checkpoint carries
the same configuration. From that:

* a new run refuses a folder that already holds results or checkpoints (``overwrite=True`` /
  ``--overwrite`` clears them first; only the files this package writes are removed, never anything else);
* a resume refuses a checkpoint written by a different run, with one line naming the fields that differ
  (``rounds`` may grow, to continue a finished run, but not fall below the rounds already done). The
  configuration holds every resolved hyperparameter, e.g. the cross-gradient chunk that
  Federated-Clustering's ``chunk_size="auto"`` resolved to from the device's memory
  (:mod:`fedjax_clust.parallel.memory`): a resume on a device where "auto" resolves to another chunk is
  refused with the recorded chunk to pass (the command line's ``run --resume`` adopts it by itself), so a
  resumed run computes what the uninterrupted one did.
"""

from __future__ import annotations

import os
import shutil
from typing import Callable, Optional

from fedjax_clust.io.jsonio import json_safe, read_json, read_json_lines

__all__ = [
    "RUN_FILE",
    "completed_history",
    "check_out_dir",
    "holds_results",
    "clear_results",
    "config_differences",
    "check_same_run",
    "refuse_or_clear",
    "wrote_files",
]

RUN_FILE = "run.json"
RESULT_FILES = (
    RUN_FILE,
    "metrics.jsonl",
    "summary.json",
    "results.json",
    "convergence.png",
    "checkpoints",
    "config.toml",
)


def check_out_dir(path: str, name: str = "out_dir") -> str:
    """Create ``path`` if needed; ValueError when it is a file or cannot be created or written."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ValueError(f"{name} must be a folder path, got {path!r}")
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"{name} {path!r} is an existing file, not a folder")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{name} {path!r} cannot be created: {e.strerror or e}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{name} {path!r} is not writable")
    return path


def _entries(directory: str) -> list:
    """The entries of ``directory`` that this package writes: result files, checkpoint folders, and the
    sub-folders of a comparison (each holding a run.json)."""
    if not os.path.isdir(directory):
        return []
    found = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name in RESULT_FILES or name.startswith("round_"):
            found.append(name)
        elif os.path.isdir(path) and os.path.exists(os.path.join(path, RUN_FILE)):
            found.append(name)
    return found


def holds_results(directory: Optional[str]) -> list:
    """Names of the results / checkpoints already in ``directory`` (empty when none)."""
    return [] if directory is None else _entries(directory)


def clear_results(directory: str) -> None:
    """Remove the entries :func:`holds_results` lists; anything else in the folder stays."""
    for name in _entries(directory):
        path = os.path.join(directory, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def refuse_or_clear(
    directory: Optional[str], overwrite: bool, name: str = "out_dir", *, resumable: bool = True
) -> None:
    """A new run needs ``directory`` free of other results: clear them with ``overwrite``, else refuse (naming
    ``--resume`` only where the caller can resume: ``resumable``)."""
    found = holds_results(directory)
    if not found:
        return
    if not overwrite:
        shown = ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")
        resume = " or --resume (resume=True) to continue that run" if resumable else ""
        raise ValueError(
            f"{name} {directory!r} already holds the results of a run ({shown}); pass --overwrite "
            f"(overwrite=True) to replace them{resume}"
        )
    clear_results(directory)


def _flatten(config, prefix=""):
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def config_differences(old: dict, new: dict) -> list:
    """``["field: old -> new", ...]`` between two run configurations (compared as strict JSON)."""
    a, b = _flatten(json_safe(old)), _flatten(json_safe(new))
    return [
        f"{key}: {a.get(key, '<absent>')!r} -> {b.get(key, '<absent>')!r}"
        for key in sorted(set(a) | set(b))
        if a.get(key, "<absent>") != b.get(key, "<absent>")
    ]


def check_same_run(
    saved: dict, current: dict, where: str, hint: Optional[Callable[[dict], Optional[str]]] = None
) -> None:
    """ValueError naming the differing fields when ``saved`` (from a checkpoint) is another run's config;
    ``hint(saved)``, where given, says how to resume it (e.g. the options the run resolved when it started)."""
    differences = config_differences(saved, current)
    if differences:
        shown = "; ".join(differences[:5]) + (f"; and {len(differences) - 5} more" if len(differences) > 5 else "")
        advice = (hint(saved) if hint is not None else None) or "use the same options, or a new folder"
        raise ValueError(f"cannot resume: {where} was written by a different run ({shown}); {advice}")


def saved_run_config(directory: Optional[str]) -> Optional[dict]:
    """The configuration in ``directory/run.json``, if there is one."""
    if directory is None or not os.path.exists(os.path.join(directory, RUN_FILE)):
        return None
    return read_json(os.path.join(directory, RUN_FILE)).get("config")


def claim_outputs(directory: str, outputs, overwrite: bool) -> None:
    """An experiment folder holds one experiment: ValueError if any of ``outputs`` (its file and folder names)
    is already in ``directory``, unless ``overwrite``, which removes them first; then the folder exists."""
    found = [name for name in outputs if os.path.exists(os.path.join(directory, name))]
    if found and not overwrite:
        raise ValueError(
            f"{directory} already holds {', '.join(found)} of an earlier run; pass --overwrite to replace them"
        )
    for name in found:
        path = os.path.join(directory, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    os.makedirs(directory, exist_ok=True)


def completed_history(directory: str, config: dict, rounds: int) -> Optional[list]:
    """The evaluated rows (``metrics.jsonl``) of the run in ``directory`` when it is this run finished: its
    ``run.json`` says "completed" after ``rounds`` rounds and records ``config`` (a
    :func:`~fedjax_clust.run.records.run_config`, compared as strict JSON: :func:`config_differences` finds
    nothing); else None, so an experiment script can reuse what an earlier, stopped invocation finished and run
    only the rest. Provenance (command, commit, machine, time) is not compared: it says who ran it, not what."""
    path = os.path.join(directory, RUN_FILE)
    metrics = os.path.join(directory, "metrics.jsonl")
    if not (os.path.exists(path) and os.path.exists(metrics)):
        return None
    run = read_json(path)
    if run.get("status") != "completed" or run.get("rounds") != rounds:
        return None
    if config_differences(run.get("config") or {}, config):
        return None
    history = read_json_lines(metrics)
    return history if history and history[-1].get("round") == rounds else None


def wrote_files(paths) -> str:
    """The line that says what was written: ``wrote DIR/: a.csv, b.json and c.png`` (``wrote a, b`` when the
    files are in several folders), naming only the ``paths`` that exist: a writer returns the files it wrote, and
    this line never claims one that is not there."""
    paths = [p for p in paths if os.path.exists(p)]
    if not paths:
        return "wrote nothing"
    folders = {os.path.dirname(p) for p in paths}
    names = [os.path.basename(p) for p in paths] if len(folders) == 1 else list(paths)
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"wrote {os.path.join(folders.pop(), '')}: {listed}" if len(folders) == 1 else f"wrote {listed}"
