"""How a run's loop begins: fresh, or resumed from the newest checkpoint of the same run.

:func:`~fedjax_clust.run.simulate.simulate` starts its loop here (``start_loop``): on the device or with its rows in
host memory (:mod:`fedjax_clust.run.placement`), from a fresh initial state in a folder that holds no other run's
results (refused unless ``overwrite``), or with ``resume`` from the newest readable checkpoint whose configuration
equals the run's (``_resumed_or_fresh``; :mod:`fedjax_clust.io.checkpoint`). A configuration that differs only in an
option the algorithm resolved when it started (an "auto" chunk) is refused with the keywords that give it back
(:func:`resume_hint`)."""

from __future__ import annotations

import os
import warnings
from typing import Callable, Mapping, Optional

from fedjax_clust.core.host_rows import buffer_files, to_host
from fedjax_clust.io.checkpoint import restore_latest
from fedjax_clust.io.run_folder import RUN_FILE, check_same_run, clear_results, refuse_or_clear, saved_run_config
from fedjax_clust.parallel import multihost
from fedjax_clust.run.advice import RunAdvice
from fedjax_clust.run.loop import Loop, LoopOptions
from fedjax_clust.run.placement import host_like_state, host_start, plan_on_host, recorded_row_files, remove_row_files
from fedjax_clust.run.records import without_record

__all__ = ["resume_hint"]


def start_loop(algorithm, task, params, key, plan, host_rows_dir, config, options, checkpoint_dir, resume) -> Loop:
    """The run's loop at its initial state (on the device, or with its rows on the host), or resumed from its
    newest checkpoint (:func:`_resumed_or_fresh`).

    Host rows are made only once the folder checks have passed (a refused run leaves no row files behind), and
    a resume restores into a template of shapes, not into a fresh start: the rows are read into RAM once and
    then packed into their buffers (``host_rows_dir``'s files, or RAM: twice the rows at the peak there). The
    row files an earlier run in the folder recorded in its ``run.json`` are removed once this run holds its own."""
    earlier = recorded_row_files(options.out_dir)  # read before the folder is cleared
    if not plan_on_host(plan):
        state = multihost.to_global(algorithm.start(params, task.num_clients, key), task.num_clients)
        loop = _resumed_or_fresh(state, lambda: state, config, options, checkpoint_dir, resume)
        remove_row_files(earlier, keep=())
        return loop
    like = host_like_state(algorithm, params, task.num_clients, key)
    loop = _resumed_or_fresh(
        like,
        lambda: host_start(algorithm, params, task.num_clients, key, host_rows_dir),
        config,
        options,
        checkpoint_dir,
        resume,
    )
    if loop.done > 0:  # resumed: the restored rows, read into RAM, packed into host buffers
        loop.advance(loop.done, to_host(loop.state, host_rows_dir, consume=True), loop.metrics)
    remove_row_files(earlier, keep=buffer_files(loop.state))
    return loop


def resume_hint(saved: Mapping, current: Mapping) -> Optional[str]:
    """How to resume a run whose recorded configuration ``saved`` differs from ``current`` in options its
    algorithm resolved when it started (its spec's ``resume_options``, e.g. Federated-Clustering's auto
    chunk): the keywords and flags that give the recorded values back; None when no such option differs."""
    from fedjax_clust.algorithms import algorithm_names, algorithm_spec

    name, old, new = saved.get("algorithm"), saved.get("hparams"), current.get("hparams")
    if not isinstance(name, str) or name != current.get("algorithm") or name not in algorithm_names():
        return None
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return None
    spec = algorithm_spec(name)
    wanted = {k: v for k, v in spec.resume_options(old).items() if new.get(k) != v}
    if not wanted:
        return None
    keywords = ", ".join(f"{k}={v!r}" for k, v in wanted.items())
    flags = " ".join(f"--{spec.flags.get(k, k.replace('_', '-'))} {v}" for k, v in wanted.items() if v is not None)
    return (
        f"the run used {keywords}: pass {keywords}{f' ({flags})' if flags else ''} to resume it with the same "
        "numbers (make_algorithm's keywords; a builder called directly takes them in its option group), and the "
        "same other options"
    )


def _resumed_or_fresh(like, fresh: Callable, config: dict, options: LoopOptions, checkpoint_dir, resume: bool) -> Loop:
    """The loop of a run: from the newest checkpoint of the same run (``resume``; ``like`` gives the state's
    structure, dtypes and placement), or fresh (``fresh()``, called once every check has passed) in a folder that
    holds no other run's results (refused unless ``overwrite``)."""
    out_dir = options.out_dir

    def check_config(saved, where):
        # the record is the user's choice; a resume may replay what the algorithm resolved from it (an "auto"
        # chunk as its number, resume_hint): the resolved hparams decide the numbers and are compared
        saved, current = (without_record(c) for c in (saved, config))
        check_same_run(saved, current, where, hint=lambda saved: resume_hint(saved, current))

    restored = restore_latest(checkpoint_dir, like, check_config) if resume else None
    previous = saved_run_config(out_dir)
    if restored is not None:
        done, state, saved = restored
        if previous is not None:
            check_config(previous, os.path.join(out_dir, RUN_FILE))
        if options.rounds < done:
            raise ValueError(
                f"rounds={options.rounds} is below the {done} rounds this run has already done "
                f"(checkpoint in {checkpoint_dir}); rounds may only grow when resuming"
            )
        # rows of the regular schedule only: a killed run's extra "final" row would not exist uninterrupted
        history = [row for row in saved["history"] if row["round"] % options.eval_every == 0]
        return Loop(state, start=done + 1, histories=[history])
    if resume and previous is not None:  # the same run without a checkpoint: start it over
        check_config(previous, os.path.join(out_dir, RUN_FILE))
        warnings.warn(
            f"resume: no checkpoint in {checkpoint_dir}: the run in {out_dir} starts again from round 1 "
            "(checkpoint_every=k / --checkpoint-every k saves one every k rounds)",
            RunAdvice,
            stacklevel=4,
        )
        clear_results(out_dir)
    refuse_or_clear(out_dir, options.overwrite)
    default_dir = None if out_dir is None else os.path.abspath(os.path.join(out_dir, "checkpoints"))
    if checkpoint_dir is not None and os.path.abspath(checkpoint_dir) != default_dir:  # else cleared above
        refuse_or_clear(checkpoint_dir, options.overwrite, "checkpoint_dir")
    return Loop(fresh())
