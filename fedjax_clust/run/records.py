"""What a run writes, one function per record, shared by :func:`~fedjax_clust.run.simulate.simulate` and the
vmapped :func:`~fedjax_clust.run.sweep.sweep`: a run and the same run inside a sweep describe themselves with
the same keys and values (timings aside: a sweep's program runs several runs at once).

* :func:`run_config` — everything that decides a run's numbers (``run.json``, every checkpoint; what a resume
  must match);
* :func:`evaluation_row` — one row of ``metrics.jsonl``;
* :func:`client_counts` — who the run's clients are: all of them, the Byzantine ones (and the share of
  clients they actually are, after the per-cluster rounding of :func:`~fedjax_clust.robust.byzantine_mask`),
  the outliers, and those the metrics count;
* :func:`run_summary` — ``summary.json``.
"""

from __future__ import annotations

import time
from typing import Optional

import jax
import numpy as np

from fedjax_clust._version import __version__
from fedjax_clust.core.algorithm import FederatedAlgorithm
from fedjax_clust.io.jsonio import json_safe
from fedjax_clust.ops.metrics import misclustering_error
from fedjax_clust.parallel.memory import peak_memory_bytes
from fedjax_clust.tasks.base import Task

__all__ = [
    "run_config",
    "without_record",
    "counted_clients",
    "client_counts",
    "evaluation_row",
    "first_nonfinite_rounds",
    "run_summary",
    "run_timing",
    "stop_status",
    "to_python",
]


def run_config(
    algorithm: FederatedAlgorithm,
    task: Task,
    *,
    seed: int,
    eval_every: int,
    init: str = "shared",
    on_nonfinite: str = "stop",
    extra: Optional[dict] = None,
) -> dict:
    """Everything that decides a run's numbers and files (``rounds`` aside): what ``run.json`` and every
    checkpoint record and what a resume must match."""
    return json_safe(
        {
            "algorithm": algorithm.name,
            "hparams": algorithm.hparams,
            "hyperparameters": None if algorithm.hyperparameters is None else algorithm.hyperparameters.describe(),
            "matmul_precision": algorithm.matmul_precision,
            "task": task.name,
            "task_config": task.config,
            "num_clients": task.num_clients,
            "seed": seed,
            "eval_every": eval_every,
            "init": init,
            "on_nonfinite": on_nonfinite,
            "version": __version__,
            **(extra or {}),
        }
    )


def without_record(config: dict) -> dict:
    """A run configuration (:func:`run_config`) less its hyperparameter record (what the user chose, kept for
    provenance): what a resume compares, since a resumed run may be rebuilt from what its algorithm resolved
    (Federated-Clustering's "auto" chunk given as its number), which ``hparams`` records."""
    return {k: v for k, v in config.items() if k != "hyperparameters"}


def counted_clients(task: Task) -> int:
    """The clients the metrics count: all of them, or the honest ones of a task with Byzantine clients or
    outliers."""
    return task.num_clients if task.honest is None else int(np.sum(task.honest))


def client_counts(task: Task) -> dict:
    """``num_clients`` (all), ``byzantine_clients`` and ``byzantine_share`` (their share of all clients as
    marked, which per-cluster rounding can move away from the requested fraction), ``outlier_clients`` and
    ``counted_clients`` (those the metrics count, :func:`counted_clients`)."""
    byzantine = 0 if task.byzantine is None else int(np.sum(task.byzantine))
    return {
        "num_clients": task.num_clients,
        "byzantine_clients": byzantine,
        "byzantine_share": byzantine / task.num_clients,
        "outlier_clients": 0 if task.outliers is None else int(np.sum(task.outliers)),
        "counted_clients": counted_clients(task),
    }


def to_python(tree):
    return jax.tree.map(lambda x: x.item() if hasattr(x, "item") and np.ndim(x) == 0 else np.asarray(x).tolist(), tree)


def evaluation_row(
    t: int,
    metrics: dict,
    round_metrics: dict,
    finite: int,
    num_clients: int,
    true_clusters=None,
    honest=None,
    privacy=None,
):
    """(the strict-JSON row of ``metrics.jsonl`` for round t, number of non-finite client models).

    Host values in: the evaluation's metrics and the round's own (its ``cluster_labels`` become
    ``misclustering`` when the true clusters are known); ``nonfinite_clients`` is the fraction of clients
    whose models are non-finite, when there are any. ``num_clients`` is the number of clients counted
    (see :func:`counted_clients`); with an ``honest`` mask the misclustering is over the honest clients, and
    with a ``participants`` mask in the round's metrics (partial participation) over the round's participants.
    A private run's ``privacy`` ledger (:class:`~fedjax_clust.privacy.accounting.Ledger`) adds ``epsilon`` and
    ``delta``, the privacy spent after t rounds.
    """
    round_metrics = dict(round_metrics)
    labels = round_metrics.pop("cluster_labels", None)
    participants = round_metrics.pop("participants", None)  # partial participation: this round's clients
    if labels is not None and true_clusters is not None:
        counted = np.ones(np.shape(labels), bool)
        if honest is not None:
            counted &= np.asarray(honest, bool)
        if participants is not None:
            counted &= np.asarray(participants, bool)
        if counted.any():
            round_metrics["misclustering"] = misclustering_error(
                np.asarray(labels)[counted], np.asarray(true_clusters)[counted]
            )
    row = {"round": t, **to_python(metrics), **to_python(round_metrics)}
    if privacy is not None:
        row.update(privacy.spent(t))
    bad = num_clients - finite
    if bad:
        row["nonfinite_clients"] = bad / num_clients
    return json_safe(row), bad


def first_nonfinite_rounds(history: list) -> dict:
    """{metric: first round at which it was non-finite (null in the files)}."""
    first = {}
    for row in history:
        for key, value in row.items():
            if value is None and key not in first:
                first[key] = row["round"]
    return first


def run_timing(loop, *, started: float, clock=None, runs: int = 1) -> dict:
    """Where the seconds of a run (or of a sweep's program of ``runs`` runs) went, from its
    :class:`~fedjax_clust.run.loop.Loop` (see :mod:`fedjax_clust.run.timing` for how the parts overlap):

    * ``wall_seconds`` -- from ``started`` (the driver's ``time.perf_counter()`` at its start) to the end of the
      last evaluation (``loop.ended``; now, for a run that did not end): setup, rounds, evaluations;
    * ``round_seconds`` -- the rounds run, the first one's compilation included;
    * ``evaluation_seconds`` over ``evaluations`` evaluations, their compilation included;
    * ``setup_seconds`` -- the rest of the wall time: building the run (the task's device arrays, the row plan,
      the initial state or the checkpoint it resumes from), between the rounds and evaluations;
    * ``compile_seconds`` -- JAX's tracing, lowering and compiling anywhere in the run (part of the above), and
      ``compiled_programs`` -- the programs XLA compiled (or read from the persistent cache) in it: the
      :class:`~fedjax_clust.run.timing.CompileClock` ``clock`` that was open while it ran (None: 0 and 0);
    * ``seconds_per_round`` -- the mean over the rounds after the first, which compiles (per run of a program of
      ``runs`` runs), evaluation excluded; ``first_round_seconds``;
    * ``peak_bytes`` -- the process's peak memory.

    A resumed run counts what this process ran. A sweep's runs share their program's seconds (all but
    ``seconds_per_round``)."""
    times = loop.times
    timed = times[1:] or times
    ended = loop.ended if loop.ended is not None else time.perf_counter()
    wall, rounds, evaluations = ended - started, sum(times), sum(loop.evaluation_times)
    return {
        "wall_seconds": wall,
        "round_seconds": rounds,
        "evaluation_seconds": evaluations,
        "setup_seconds": max(wall - rounds - evaluations, 0.0),
        "evaluations": len(loop.evaluation_times),
        "compile_seconds": 0.0 if clock is None else clock.seconds,
        "compiled_programs": 0 if clock is None else clock.programs,
        "seconds_per_round": sum(timed) / len(timed) / runs if timed else None,
        "first_round_seconds": times[0] if times else None,
        "peak_bytes": peak_memory_bytes(),
    }


def stop_status(stopped) -> tuple:
    """(status, keys) of a run that stopped at ``stopped`` = (round, non-finite fraction), or completed (None):
    "stopped: non-finite metrics" when its models were finite (the metrics overflowed), else "stopped:
    non-finite client models" with the fraction."""
    if stopped is None:
        return "completed", {}
    if not stopped[1]:
        return "stopped: non-finite metrics", {"stopped_at_round": stopped[0]}
    return "stopped: non-finite client models", {"stopped_at_round": stopped[0], "nonfinite_clients": stopped[1]}


def run_summary(
    algorithm: FederatedAlgorithm,
    task: Task,
    history: list,
    *,
    rounds: int,
    seed: int,
    status: str,
    init: str,
    on_nonfinite: str,
    timing: dict,
    extra: Optional[dict] = None,
    **more,
) -> dict:
    """``summary.json`` of one run: what ran (algorithm, task, seed, hyperparameters, :func:`client_counts`),
    how it ended (``status`` and ``more``, e.g. the round it stopped at), ``timing`` (:func:`run_timing`; a sweep
    adds its program's runs), ``extra`` (a caller's own keys: ``config``, a sweep's
    ``sweep_values``), the last row's metrics and, when any went non-finite, ``nonfinite_metrics``."""
    summary = {
        "algorithm": algorithm.name,
        "task": task.name,
        "rounds": rounds,
        "seed": seed,
        "status": status,
        **more,
        **timing,
        **client_counts(task),
        "matmul_precision": algorithm.matmul_precision,
        "init": init,
        "on_nonfinite": on_nonfinite,
        "version": __version__,
        "hparams": {**algorithm.hparams, **algorithm.execution.report()},  # how it ran, too
        "task_config": task.config,
        **(extra or {}),
        **{k: v for k, v in history[-1].items() if k != "round"},
    }
    if task.unseen_data is not None:  # how clients never seen in training were evaluated
        summary["unseen_rule"] = algorithm.unseen_rule.name
    nonfinite = first_nonfinite_rounds(history)
    if nonfinite:
        summary["nonfinite_metrics"] = nonfinite
    return json_safe(summary)
