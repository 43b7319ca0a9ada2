"""The callbacks of the run loop (:mod:`fedjax_clust.run.loop`), each a small object with one job:

* :class:`ProgressBar` — the round counter (:class:`~fedjax_clust.io.progress.RoundProgress`), with a single
  run's headline metrics after it;
* :class:`MetricsFile` — ``metrics.jsonl``, one row appended per evaluation as the run goes;
* :class:`Trackers` — every run's TensorBoard / W&B trackers, one log per evaluated row;
* :class:`NonFiniteGuard` — the divergence check at every evaluation: ``on_nonfinite="stop"`` stops a run whose
  client models went non-finite (or whose metrics overflowed with finite models), ``"warn"`` says so once per
  change of the count and goes on;
* :class:`Checkpoints` — the state, rows and configuration every ``every`` rounds, and on Ctrl-C the last
  completed round (its folder in ``saved``).
"""

from __future__ import annotations

import math
import sys
from typing import Optional, Sequence

import numpy as np

from fedjax_clust.io.checkpoint import checkpoint_path, latest_checkpoint, save_checkpoint
from fedjax_clust.io.jsonio import dumps
from fedjax_clust.io.progress import RoundProgress
from fedjax_clust.io.tracking import close_all
from fedjax_clust.run.loop import Callback, Loop

__all__ = [
    "ProgressBar",
    "MetricsFile",
    "Trackers",
    "NonFiniteGuard",
    "Checkpoints",
    "overflowed_metrics",
    "HEADLINE_METRICS",
]

HEADLINE_METRICS = ("mean_sq_dist_to_optimum", "mean_loss", "test_accuracy")  # shown after a run's bar


class ProgressBar(Callback):
    """The progress bar of ``rounds`` rounds (``initial`` already done); a single run's headline metrics
    follow it."""

    def __init__(self, rounds: int, desc: str, *, initial: int = 0, enabled: bool = True):
        self.bar = RoundProgress(rounds, desc, initial=initial, enabled=enabled)

    def after_evaluation(self, loop: Loop, t: int, rows: list, bad: list) -> None:
        self.bar.evaluated(t, loop.evaluation_times[-1])
        if self.bar.enabled and len(rows) == 1 and rows[0] is not None:
            shown = {k: v for k, v in rows[0].items() if k in HEADLINE_METRICS}
            values = {k: ("nan" if v is None else f"{v:.3g}") for k, v in shown.items()}
            self.bar.set_postfix(values, label=f"round {t}")  # the metrics' round, behind the bar's count

    def after_rounds(self, loop: Loop, t: int, count: int) -> None:
        self.bar.update(count, sum(loop.times[-count:]))

    def close(self) -> None:
        self.bar.close()


class MetricsFile(Callback):
    """``path`` (a run's ``metrics.jsonl``) holding ``rows`` (a resumed run's), then one row per evaluation of
    the first run, flushed as written."""

    def __init__(self, path: str, rows: Sequence[dict] = ()):
        self.file = open(path, "w")
        for row in rows:
            self.file.write(dumps(row) + "\n")
        self.file.flush()

    def after_evaluation(self, loop: Loop, t: int, rows: list, bad: list) -> None:
        if rows[0] is not None:
            self.file.write(dumps(rows[0]) + "\n")
            self.file.flush()

    def close(self) -> None:
        self.file.close()


class Trackers(Callback):
    """Every run's trackers (:meth:`fedjax_clust.io.tracking.Tracking.open`), opened from ``(name, config)``
    per run; those opened are closed if a later one fails to open."""

    def __init__(self, tracking, runs: Sequence[tuple]):
        self.per_run: list = [[] for _ in runs]
        if tracking is None:
            return
        try:
            for r, (name, config) in enumerate(runs):
                self.per_run[r] = tracking.open(name, config)
        except BaseException:
            self.close()
            raise

    def after_evaluation(self, loop: Loop, t: int, rows: list, bad: list) -> None:
        for row, trackers in zip(rows, self.per_run):
            if row is not None:
                for tracker in trackers:
                    tracker.log(t, row)

    def close(self) -> None:
        close_all(one for trackers in self.per_run for one in trackers)


def _finite_number(value) -> bool:
    return (
        isinstance(value, (int, float, np.integer, np.floating))
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def overflowed_metrics(history: list) -> list:
    """The metrics that were finite at the first evaluation and are non-finite (NaN, inf, None) at the last
    one: with finite client models, they grew so large that the losses overflow (e.g. a huge learning rate)."""
    if len(history) < 2:
        return []
    first, last = history[0], history[-1]
    return [
        k
        for k, v in first.items()
        if k not in ("round", "nonfinite_clients") and _finite_number(v) and not _finite_number(last.get(k))
    ]


class NonFiniteGuard(Callback):
    """At every evaluation, run r's ``bad`` non-finite client models of ``num_clients[r]`` counted: with
    ``on_nonfinite="stop"`` a run with any (or whose metrics overflowed, :func:`overflowed_metrics`) stops,
    ``loop.stopped[r] = (round, fraction)``; with ``"warn"`` a warning naming ``labels[r]`` whenever the count
    changes, and the run goes on (its metrics are over the finite clients)."""

    def __init__(self, on_nonfinite: str, num_clients: Sequence[int], labels: Sequence[str]):
        self.on_nonfinite, self.num_clients, self.labels = on_nonfinite, list(num_clients), list(labels)
        self.warned = [0] * len(self.labels)

    def after_evaluation(self, loop: Loop, t: int, rows: list, bad: list) -> None:
        for r, row in enumerate(rows):
            if row is None:
                continue
            if bad[r] and self.on_nonfinite == "warn" and bad[r] != self.warned[r]:
                print(
                    f"warning: {self.labels[r]}: {bad[r]}/{self.num_clients[r]} client models are non-finite at "
                    f"round {t}; metrics are over the finite clients (on_nonfinite='warn')",
                    file=sys.stderr,
                    flush=True,
                )
                self.warned[r] = bad[r]
            if (bad[r] or overflowed_metrics(loop.histories[r])) and self.on_nonfinite == "stop":
                # the row's own share when it has one: a sampled evaluation counts the sample's honest clients
                share = row.get("nonfinite_clients") if isinstance(row, dict) else None
                loop.stopped[r] = (t, bad[r] / self.num_clients[r] if share is None else float(share))


class Checkpoints(Callback):
    """Checkpoints of the first run in ``directory``: every ``every`` rounds (None: never on a schedule), and on
    Ctrl-C of the last completed round unless it has one already; ``saved`` is then the checkpoint's folder
    (None without a completed round)."""

    def __init__(self, directory: str, every: Optional[int], config: dict):
        self.directory, self.every, self.config = directory, every, config
        self.saved: Optional[str] = None

    def after_rounds(self, loop: Loop, t: int, count: int) -> None:
        if self.every is not None and t % self.every == 0:
            save_checkpoint(self.directory, t, loop.state, loop.histories[0], self.config)

    def on_interrupt(self, loop: Loop) -> None:
        done, state, _ = loop.position
        if done >= loop.start:
            try:
                self.saved = save_checkpoint(self.directory, done, state, loop.histories[0], self.config)
            except KeyboardInterrupt:  # Ctrl-C again: a save completes before it is raised (io/interrupts.py)
                complete = latest_checkpoint(self.directory) == done
                self.saved = checkpoint_path(self.directory, done) if complete else None
        elif loop.start > 1:  # resumed, nothing new since: the checkpoint it resumed from
            self.saved = self.directory
