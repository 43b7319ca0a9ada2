"""The one run loop of :func:`~fedjax_clust.run.simulate.simulate` and the vmapped
:func:`~fedjax_clust.run.sweep.sweep`: rounds in fused stretches, evaluations at their cadence, and small
callbacks for everything else (pfl-research's training-process callbacks are the model to read).

The loop drives one *program*: one run (simulate) or several runs vmapped together (a sweep's program). It
knows two functions, ``step(state, first, count) -> (state, metrics)`` (rounds ``first .. first + count - 1``,
:func:`~fedjax_clust.run.fused.fuse_rounds`) and ``evaluate(t, state, metrics) -> [(row, bad), ...]`` (one
metrics row and non-finite count per run), and keeps :class:`Loop`: the last completed round with its state
and metrics (set together, so Ctrl-C never sees a state without its round), every run's rows, the runs that
stopped and the seconds per round. Everything else is a :class:`Callback` (:mod:`fedjax_clust.run.callbacks`):
the metrics file, the progress bar, TensorBoard / W&B, the non-finite guard, checkpoints. Each has hooks
``after_evaluation``, ``after_rounds``, ``on_interrupt`` and ``close``; none needs to know the others.

:class:`LoopOptions` declares the options every driver shares once (``simulate``, ``sweep``,
``run_comparison`` and the command line), with their checks; the drivers' keyword arguments stay the
friendly front.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Optional, Sequence

import jax

from fedjax_clust.core.validation import check_choice, check_int
from fedjax_clust.io.interrupts import interrupts_deferred
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.fused import RoundChunker

__all__ = ["LoopOptions", "Loop", "Callback", "run_loop", "close_callbacks", "ON_NONFINITE", "INITS"]

ON_NONFINITE = ("stop", "warn")
INITS = ("shared", "oracle", "random")


@dataclasses.dataclass(frozen=True)
class LoopOptions:
    """What every driver of the loop takes: ``rounds``; evaluate every ``eval_every`` rounds (and at 0 and the
    last); ``init`` the clients' start ("shared", or the task's "oracle" / "random"); ``on_nonfinite`` "stop"
    or "warn"; ``out_dir`` the result folder (``overwrite`` replaces one); ``progress`` the bar;
    ``tracking`` TensorBoard / W&B (:class:`~fedjax_clust.io.tracking.Tracking`); ``eval_clients`` K clients
    drawn per evaluation instead of all (None), checked by each driver against its task."""

    rounds: int
    eval_every: int = 10
    init: str = "shared"
    on_nonfinite: str = "stop"
    out_dir: Optional[str] = None
    overwrite: bool = False
    progress: bool = True
    tracking: Any = None
    eval_clients: Optional[int] = None

    def records(self, resume: bool = False) -> dict:
        """The options as keyword arguments of ``simulate``, ``run_comparison``, ``sweep`` and ``study``: ``rounds``,
        ``init`` and the
        :class:`~fedjax_clust.run.driver_options.Evaluation` and :class:`~fedjax_clust.run.driver_options.Output`
        records (``resume`` into the latter)."""
        evaluation = Evaluation(
            eval_every=self.eval_every, eval_clients=self.eval_clients, on_nonfinite=self.on_nonfinite
        )
        output = Output(
            out_dir=self.out_dir,
            overwrite=self.overwrite,
            resume=resume,
            progress=self.progress,
            tracking=self.tracking,
        )
        return {"rounds": self.rounds, "init": self.init, "evaluation": evaluation, "output": output}

    @classmethod
    def of(cls, rounds: int, init: str, evaluation, output) -> "LoopOptions":
        """The loop options of a driver given ``rounds``, ``init`` and its ``Evaluation`` / ``Output`` records
        (the output's ``resume`` is the driver's own)."""
        return cls(
            rounds=rounds,
            eval_every=evaluation.eval_every,
            init=init,
            on_nonfinite=evaluation.on_nonfinite,
            out_dir=output.out_dir,
            overwrite=output.overwrite,
            progress=output.progress,
            tracking=output.tracking,
            eval_clients=evaluation.eval_clients,
        )

    def checked(self) -> "LoopOptions":
        """The options with their values checked (ValueError naming the option) and normalised."""
        from fedjax_clust.io.run_folder import check_out_dir

        check_choice("init", self.init, INITS)
        check_choice("on_nonfinite", self.on_nonfinite, ON_NONFINITE)
        return dataclasses.replace(
            self,
            rounds=check_int("rounds", self.rounds),
            eval_every=check_int("eval_every", self.eval_every),
            out_dir=None if self.out_dir is None else check_out_dir(self.out_dir),
            tracking=None if self.tracking is None else self.tracking.check(),
        )


class Loop:
    """Where a program is: ``done`` the last round run (dispatched: reading its ``state`` waits for it), ``state`` /
    ``metrics`` its state and round metrics -- consumed by the next stretch of rounds (donated to the compiled loop,
    :func:`~fedjax_clust.run.fused.consuming_step`): a callback that keeps a state beyond its hook copies it
    (``jax.device_get``) --, ``histories`` every run's rows, ``stopped`` every run's (round, non-finite fraction)
    once it stopped, ``times`` the seconds of every round run, ``evaluation_times`` the seconds of every
    evaluation (its metrics computed and fetched, the callbacks after it not counted), ``start`` the first round
    this loop runs, ``ended`` the ``time.perf_counter()`` at which the rounds and evaluations were done (before
    the callbacks closed)."""

    def __init__(self, state, *, start: int = 1, histories: Optional[Sequence[list]] = None, num_runs: int = 1):
        self.position: tuple = (start - 1, state, {})  # (done, state, metrics): one assignment, see advance()
        self.start = start
        self.histories = [list(h) for h in histories] if histories is not None else [[] for _ in range(num_runs)]
        self.stopped: list = [None] * len(self.histories)
        self.times: list = []
        self.evaluation_times: list = []
        self.ended: Optional[float] = None  # time.perf_counter() when the rounds were done

    def advance(self, done: int, state, metrics) -> None:
        """The program ran through round ``done``: one assignment, so Ctrl-C sees the old position or the new."""
        self.position = (done, state, metrics)

    @property
    def done(self) -> int:
        return self.position[0]

    @property
    def state(self):
        return self.position[1]

    @property
    def metrics(self):
        return self.position[2]

    @property
    def finished(self) -> bool:
        """Every run stopped: nothing left to run."""
        return all(s is not None for s in self.stopped)


class Callback:
    """A hook of :func:`run_loop`; every method is optional. ``after_evaluation`` gets one row per run (None
    for a run that had already stopped) and their non-finite counts."""

    def after_evaluation(self, loop: Loop, t: int, rows: list, bad: list) -> None:
        pass

    def after_rounds(self, loop: Loop, t: int, count: int) -> None:
        pass

    def on_interrupt(self, loop: Loop) -> None:
        pass

    def close(self) -> None:
        pass


def close_callbacks(callbacks: Sequence[Callback]) -> None:
    """Close every callback (the loop's way out, and a driver's when setting up its program failed)."""
    for callback in callbacks:
        callback.close()


def run_loop(
    loop: Loop,
    step: Callable,
    evaluate: Callable,
    *,
    rounds: int,
    eval_every: int,
    checkpoint_every: Optional[int] = None,
    callbacks: Sequence[Callback] = (),
    chunker: Optional[RoundChunker] = None,
    evaluate_on_interrupt: bool = True,
) -> Loop:
    """Run ``loop`` from round ``loop.start`` to ``rounds`` (see the module docstring); Ctrl-C completes the
    evaluation of a finished evaluation round (``evaluate_on_interrupt``), calls every ``on_interrupt`` and
    re-raises; every callback is closed on the way out. A Ctrl-C while a stretch is dispatched is held until the
    loop holds its (future) state, so the interrupt path saves the stretch's result once it is computed; a second
    Ctrl-C in that instant interrupts at once, and when it leaves the loop with a consumed state the hooks are
    skipped (nothing can be saved of it)."""
    chunker = chunker or RoundChunker()

    def evaluation(t, state, metrics):
        rows, bad = [], []
        tic = time.perf_counter()
        evaluated = evaluate(t, state, metrics)  # host rows: the metrics were computed and fetched
        loop.evaluation_times.append(time.perf_counter() - tic)
        for r, (row, count) in enumerate(evaluated):
            active = loop.stopped[r] is None
            rows.append(row if active else None)
            bad.append(count if active else 0)
            if active:
                loop.histories[r].append(row)
        for callback in callbacks:
            callback.after_evaluation(loop, t, rows, bad)

    try:
        if loop.start == 1:
            evaluation(0, loop.state, {})
        for first, count in chunker.stretches(loop.start, rounds, eval_every, checkpoint_every):
            if loop.finished:
                break
            t, state, metrics = _stretch(loop, step, chunker, first, count)
            if t % eval_every == 0 or t == rounds:
                evaluation(t, state, metrics)
            if not loop.finished:
                for callback in callbacks:
                    callback.after_rounds(loop, t, count)
        if loop.start > rounds and loop.histories[0][-1]["round"] != rounds:  # resumed at the last round itself
            evaluation(rounds, loop.state, {})
        loop.ended = time.perf_counter()  # before the callbacks close (a W&B upload is not the program's time)
    except KeyboardInterrupt:
        _refuse_consumed(loop)
        pending = loop.done >= loop.start and loop.done % eval_every == 0
        if evaluate_on_interrupt and pending and loop.histories[0][-1]["round"] != loop.done:
            evaluation(loop.done, loop.state, loop.metrics)  # interrupted while evaluating: a checkpoint needs it
        for callback in callbacks:
            callback.on_interrupt(loop)
        raise
    finally:
        close_callbacks(callbacks)
    return loop


def _stretch(loop: Loop, step: Callable, chunker: RoundChunker, first: int, count: int) -> tuple:
    """Run rounds ``first .. first + count - 1``: (the last round, its state and metrics), the loop advanced to
    them with Ctrl-C held (a step may consume ``loop.state``: the loop holds its successor first; a checkpoint
    of it waits for the stretch to end), the stretch timed."""
    tic = time.perf_counter()
    t = first + count - 1
    with interrupts_deferred():
        state, metrics = step(loop.state, first, count)
        loop.advance(t, state, metrics)
    jax.block_until_ready(state)
    seconds = time.perf_counter() - tic
    chunker.record(count, seconds)
    loop.times.extend([seconds / count] * count)
    return t, state, metrics


def _refuse_consumed(loop: Loop) -> None:
    """A KeyboardInterrupt without the interrupt hooks when the loop's state was consumed (a second Ctrl-C landed
    between a stretch's dispatch and the loop taking its state): nothing of it can be saved."""
    if any(isinstance(x, jax.Array) and x.is_deleted() for x in jax.tree.leaves(loop.state)):
        raise KeyboardInterrupt("interrupted twice while a stretch of rounds held the state: nothing saved")
