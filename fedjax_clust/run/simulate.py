"""The thin driving loop: rounds, evaluation cadence, progress bar, timing, result files, checkpoints.

A run is reproducible from its seed and config alone: the model initialisation uses
``fold_in(PRNGKey(seed), 0)`` and round t uses ``fold_in(fold_in(PRNGKey(seed), 1), t)``.

What a user can trust (see docs/guides/trustworthy-results.md):

* a result folder holds one run (:mod:`fedjax_clust.io.run_folder`): ``run.json`` records the full
  configuration, a new run refuses a folder with results unless ``overwrite=True``, and a resume refuses a
  checkpoint of another run, naming the fields that differ;
* every file is strict JSON: a non-finite metric is written as ``null`` and ``summary.json`` lists in
  ``nonfinite_metrics`` the round each metric first went non-finite;
* a diverging run says so: at every evaluation the client models are checked, and with non-finite ones
  the run stops (``on_nonfinite="stop"``, default) with :class:`NonFiniteError` naming the algorithm,
  the round and the fraction of clients affected, after writing the results up to that round; with
  ``on_nonfinite="warn"`` it goes on, logs the fraction (``nonfinite_clients`` in each row) and computes
  every metric over the finite clients;
* Ctrl-C (KeyboardInterrupt) saves a checkpoint of the last completed round when the run has a folder,
  so ``resume=True`` continues it, and raises :class:`RunInterrupted`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.core.algorithm import FederatedAlgorithm, at_matmul_precision
from fedjax_clust.core.pytrees import finite_rows
from fedjax_clust.core.state import ClientParams, ClientState
from fedjax_clust.core.validation import (
    check_batch_fits,
    check_choice,
    check_int,
    check_seed,
)
from fedjax_clust.io.checkpoint import checkpoint_path, latest_checkpoint, restore_latest, save_checkpoint
from fedjax_clust.io.jsonio import dumps, write_json
from fedjax_clust.io.progress import RoundProgress
from fedjax_clust.io.provenance import provenance
from fedjax_clust.io.tracking import Tracking, close_all
from fedjax_clust.io.run_folder import (
    RUN_FILE,
    check_out_dir,
    check_same_run,
    clear_results,
    refuse_or_clear,
    saved_run_config,
)
from fedjax_clust.parallel import multihost
from fedjax_clust.parallel.determinism import warn_if_nondeterministic_gpu
from fedjax_clust.parallel.memory import peak_memory_bytes
from fedjax_clust.run.fused import RoundChunker, fuse_rounds
from fedjax_clust.run.records import counted_clients, evaluation_row, run_config, run_summary
from fedjax_clust.tasks.base import Task

__all__ = ["RunResult", "simulate", "write_results", "run_config", "NonFiniteError", "RunInterrupted",
           "ON_NONFINITE", "INITS"]

ON_NONFINITE = ("stop", "warn")
INITS = ("shared", "oracle", "random")


@dataclasses.dataclass
class RunResult:
    """What a run produced: per-evaluation metrics, the final state and the summary written to disk."""
    algorithm: str
    task: str
    history: list
    state: ClientState
    summary: dict


class NonFiniteError(RuntimeError):
    """The client models went non-finite (``on_nonfinite="stop"``); ``result`` holds the run up to then."""

    def __init__(self, message: str, result: RunResult, round_index: int, fraction: float):
        super().__init__(message)
        self.result, self.round, self.fraction = result, round_index, fraction


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run; ``round`` is the last completed round, ``checkpoint`` where it was saved."""

    def __init__(self, message: str, round_index: int, checkpoint: Optional[str]):
        super().__init__(message)
        self.round, self.checkpoint = round_index, checkpoint


def initial_params(task: Task, init: str, key):
    """The model every client starts from ("shared", Algorithms 1, 2, 4), or per-client starts from the
    task ("oracle": x*_k plus noise, "random": a random start per cluster; the paper authors' scripts)."""
    if init == "shared":
        return task.init_params(key)
    if task.initial_models is None:
        raise ValueError(f"init={init!r} needs a task that offers per-client initial models; task {task.name!r} "
                         "has none (use init='shared')")
    return ClientParams(task.initial_models(init, key))


def evaluate_state(algorithm: FederatedAlgorithm, task: Task, state: ClientState):
    """(metrics, number of clients with finite models) of ``state``; a pure, traceable function.

    The metrics are the algorithm's own ``evaluate`` or ``task.evaluate`` at the algorithm's matmul
    precision, over the clients whose models are finite. Pass a task whose arrays are arguments
    (``task.with_arrays``), not constants of the compiled program.
    """
    finite = finite_rows(state.params)
    if task.honest is not None:  # metrics and the finite count are over the honest clients only
        finite = finite & jnp.asarray(task.honest)
    if algorithm.evaluate is not None:
        metrics = algorithm.evaluate(state, finite, task.data, task.test_data)
    else:
        metrics = at_matmul_precision(lambda st, mask: task.evaluate(st.params, mask),
                                      algorithm.matmul_precision)(state, finite)
    return metrics, jnp.sum(finite)


def simulate(algorithm: FederatedAlgorithm, task: Task, *, rounds: int, seed: int = 0, eval_every: int = 10,
             progress: bool = True, out_dir: Optional[str] = None, config: Optional[dict] = None,
             checkpoint_every: Optional[int] = None, checkpoint_dir: Optional[str] = None,
             resume: bool = False, overwrite: bool = False, on_nonfinite: str = "stop",
             init: str = "shared", max_fused_rounds: Optional[int] = None,
             tracking: Optional[Tracking] = None) -> RunResult:
    """Run ``algorithm`` on ``task`` for ``rounds`` rounds.

    Evaluates ``task.evaluate`` at round 0, every ``eval_every`` rounds and at the last round, merging the
    metrics the round itself returns; an algorithm's ``cluster_labels`` become ``misclustering`` (the
    fraction of clients misclustered under the best label matching) when the task's clusters are known.
    ``seconds_per_round`` in the summary is the mean wall time of the rounds after the first (which includes
    compilation), evaluation excluded.

    The rounds between two evaluations (or checkpoints) run fused, as one compiled loop
    (:mod:`fedjax_clust.run.fused`), in stretches sized so that each takes about half a second (the progress
    bar moves between them); ``max_fused_rounds`` caps a stretch (1: one round per call, as a plain
    Python loop would). The numbers do not depend on it.

    With ``out_dir``: ``run.json`` (the configuration, written first),
    ``metrics.jsonl`` (one JSON object per evaluated round, appended as the run goes) and ``summary.json``;
    a folder that already holds results is refused unless ``overwrite`` (which clears them) or ``resume``.

    Checkpoints (see :mod:`fedjax_clust.io.checkpoint`): every ``checkpoint_every`` rounds the whole state, the
    metrics so far and the configuration go to ``checkpoint_dir`` (default ``out_dir/checkpoints``). With
    ``resume``, the run continues from the newest readable checkpoint there, whose configuration must equal
    this one (``rounds`` may be larger, not smaller than the rounds done), and its result equals that of an
    uninterrupted run (the round keys depend on the seed and the round only). Every resolved hyperparameter
    is part of that configuration, e.g. the cross-gradient chunk of Federated-Clustering's
    ``chunk_size="auto"``: a resume where it resolves to another chunk is refused with the recorded one to pass.
    On a GPU the numbers repeat only with XLA's deterministic ops: call
    :func:`fedjax_clust.deterministic_xla_flags` in ``XLA_FLAGS`` before the first JAX computation (a run without it warns
    once per process).

    ``on_nonfinite``: "stop" (default) raises :class:`NonFiniteError` at the first evaluation with
    non-finite client models; "warn" goes on and computes the metrics over the finite clients. ``init``:
    "shared" (default, every client starts at ``task.init_params``), or "oracle" / "random" per-client
    starts offered by the task (see :func:`initial_params`).

    ``tracking`` (:class:`fedjax_clust.io.tracking.Tracking`): TensorBoard event files and / or a Weights &
    Biases run get the configuration and every evaluated round's metrics (the run's files do not change).
    """
    rounds = check_int("rounds", rounds)
    eval_every = check_int("eval_every", eval_every)
    seed = check_seed(seed)
    if checkpoint_every is not None:
        checkpoint_every = check_int("checkpoint_every", checkpoint_every)
    check_choice("on_nonfinite", on_nonfinite, ON_NONFINITE)
    check_choice("init", init, INITS)
    if max_fused_rounds is not None:
        max_fused_rounds = check_int("max_fused_rounds", max_fused_rounds)
    check_batch_fits(algorithm.hparams.get("batch_size"), jax.tree.leaves(task.data)[0].shape[1])
    trace_rounds = algorithm.hparams.get("participation", {}).get("availability_rounds")
    if trace_rounds is not None and rounds > trace_rounds:
        raise ValueError(f"rounds={rounds} outlasts the availability trace ({trace_rounds} rounds)")
    if multihost.is_multiprocess():
        if checkpoint_every is not None or resume:
            raise ValueError("checkpoint_every / resume are not supported in multi-process runs yet")
        if not multihost.is_writer():  # only process 0 writes results, draws the bar and tracks
            out_dir, progress, tracking = None, False, None
    if out_dir is not None:
        out_dir = check_out_dir(out_dir)
        checkpoint_dir = checkpoint_dir if checkpoint_dir is not None else os.path.join(out_dir, "checkpoints")
    if (checkpoint_every is not None or resume) and checkpoint_dir is None:
        raise ValueError("checkpoint_every / resume need checkpoint_dir (or out_dir)")
    if checkpoint_dir is not None and os.path.exists(checkpoint_dir) and not os.path.isdir(checkpoint_dir):
        raise ValueError(f"checkpoint_dir {checkpoint_dir!r} is an existing file, not a folder")
    config_ = run_config(algorithm, task, seed=seed, eval_every=eval_every, init=init, on_nonfinite=on_nonfinite,
                         extra=config)
    warn_if_nondeterministic_gpu()  # once per process, on a GPU without the deterministic-ops flag
    key = jax.random.PRNGKey(seed)
    state = algorithm.init(initial_params(task, init, jax.random.fold_in(key, 0)), task.num_clients)
    state = multihost.to_global(state, task.num_clients)  # multi-process: on the mesh of every process
    round_key = jax.random.fold_in(key, 1)
    run_rounds = fuse_rounds(algorithm.round)  # the rounds between two evaluations: one compiled loop
    chunker = RoundChunker(max_rounds=max_fused_rounds)
    # the data are arguments, not constants captured by the closure: XLA would constant-fold the model
    # over the whole dataset at compile time
    evaluate = jax.jit(lambda st, arrays: evaluate_state(algorithm, task.with_arrays(arrays), st))
    num_clients = counted_clients(task)

    def check_config(saved, where):
        check_same_run(saved, config_, where)

    history, start_round = [], 1
    restored = restore_latest(checkpoint_dir, state, check_config) if resume else None
    previous = saved_run_config(out_dir)
    if restored is not None:
        done, state, saved = restored
        if previous is not None:
            check_config(previous, os.path.join(out_dir, RUN_FILE))
        if rounds < done:
            raise ValueError(f"rounds={rounds} is below the {done} rounds this run has already done (checkpoint in "
                             f"{checkpoint_dir}); rounds may only grow when resuming")
        # rows of the regular schedule only: a killed run's extra "final" row would not exist uninterrupted
        history = [row for row in saved["history"] if row["round"] % eval_every == 0]
        start_round = done + 1
    else:
        if resume and previous is not None:  # the same run without a checkpoint: start it over
            check_config(previous, os.path.join(out_dir, RUN_FILE))
            clear_results(out_dir)
        refuse_or_clear(out_dir, overwrite)
        default_dir = None if out_dir is None else os.path.abspath(os.path.join(out_dir, "checkpoints"))
        if checkpoint_dir is not None and os.path.abspath(checkpoint_dir) != default_dir:  # else cleared above
            refuse_or_clear(checkpoint_dir, overwrite, "checkpoint_dir")

    def write_run_file(status, **more):
        if out_dir is not None:
            write_json(os.path.join(out_dir, RUN_FILE), {
                "config": config_, "rounds": rounds, "checkpoint_every": checkpoint_every,
                "tracking": None if tracking is None else {"tensorboard": tracking.tensorboard,
                                                           "wandb": tracking.wandb},
                "status": status, "provenance": made_by, **more})

    made_by = provenance() if out_dir is not None else None  # the command, version, commit and machine
    write_run_file("running")
    metrics_file = None
    if out_dir is not None:
        metrics_file = open(os.path.join(out_dir, "metrics.jsonl"), "w")
        for row in history:
            metrics_file.write(dumps(row) + "\n")
        metrics_file.flush()
    warned = [0]

    def record(t, state, round_metrics):
        """Evaluate ``state`` after round t; returns the number of clients with non-finite models."""
        metrics, finite = multihost.fetch(evaluate(state, task.arrays()))
        row, bad = evaluation_row(t, metrics, multihost.fetch(round_metrics), int(finite), num_clients,
                                  task.true_clusters, task.honest)
        if bad and on_nonfinite == "warn" and bad != warned[0]:
            print(f"warning: {algorithm.name}: {bad}/{num_clients} client models are non-finite at round {t}; "
                  "metrics are over the finite clients (on_nonfinite='warn')", file=sys.stderr, flush=True)
            warned[0] = bad
        history.append(row)
        for tracker in trackers:
            tracker.log(t, row)
        if metrics_file is not None:
            metrics_file.write(dumps(row) + "\n")
            metrics_file.flush()
        if bar.enabled:
            shown = {k: v for k, v in row.items() if k in ("mean_sq_dist_to_optimum", "mean_loss", "test_accuracy")}
            bar.set_postfix({k: ("nan" if v is None else f"{v:.3g}") for k, v in shown.items()})
        return bad

    def summarize(status, **more):
        timed_rounds = max(len(times) - 1, 0)
        timing = {"seconds_per_round": (sum(times[1:]) / timed_rounds) if timed_rounds else (times[0] if times else None),
                  "first_round_seconds": times[0] if times else None, "peak_bytes": peak_memory_bytes()}
        summary = run_summary(algorithm, task, history, rounds=rounds, seed=seed, status=status, init=init,
                              on_nonfinite=on_nonfinite, timing=timing, extra=config, **more)
        result = RunResult(algorithm.name, task.name, history, state, summary)
        if out_dir is not None:
            write_results(result, out_dir)
            write_run_file(status)
        return result

    bar = RoundProgress(rounds, algorithm.name, initial=start_round - 1, enabled=progress)
    trackers = []  # opened in the try below, closed in its finally
    times = []
    current = (start_round - 1, state, {})  # (last completed round, its state, its metrics): one assignment,
    # so Ctrl-C never sees a round's state without its number
    try:
        if tracking is not None:
            trackers.extend(tracking.open(algorithm.name, config_))
        if start_round == 1:
            bad = record(0, state, {})
            if (bad or overflowed_metrics(history)) and on_nonfinite == "stop":
                _stop(algorithm, 0, bad, num_clients, summarize, out_dir, history)
        for first, count in chunker.stretches(start_round, rounds, eval_every, checkpoint_every):
            start = time.perf_counter()
            new_state, metrics = run_rounds(current[1], task.data, round_key, first, count)
            jax.block_until_ready(new_state.params)
            seconds = time.perf_counter() - start
            chunker.record(count, seconds)
            times.extend([seconds / count] * count)
            t = first + count - 1  # the last round this call ran
            current = (t, new_state, metrics)
            if t % eval_every == 0 or t == rounds:
                bad = record(t, new_state, metrics)
                if (bad or overflowed_metrics(history)) and on_nonfinite == "stop":
                    state = new_state
                    _stop(algorithm, t, bad, num_clients, summarize, out_dir, history)
            if checkpoint_every is not None and t % checkpoint_every == 0:
                save_checkpoint(checkpoint_dir, t, new_state, history, config_)
            bar.update(count)
        if history[-1]["round"] != rounds:  # resumed from a checkpoint of the last round itself
            record(rounds, current[1], {})
    except KeyboardInterrupt:
        done, state, metrics = current
        if done >= start_round and done % eval_every == 0 and history[-1]["round"] != done:
            record(done, state, metrics)  # interrupted while evaluating: the checkpoint needs that row
        saved = None
        if checkpoint_dir is not None and latest_checkpoint(checkpoint_dir) == done:
            saved = checkpoint_path(checkpoint_dir, done)  # interrupted while saving it: the save completed first
        elif checkpoint_dir is not None and done >= start_round:
            saved = save_checkpoint(checkpoint_dir, done, state, history, config_)
        elif checkpoint_dir is not None and resume and start_round > 1:
            saved = checkpoint_dir  # nothing new since the checkpoint it resumed from
        if history:
            summarize("interrupted", completed_rounds=done)
        where = f"; resume with resume=True (--resume), checkpoint in {saved}" if saved else ""
        raise RunInterrupted(f"interrupted after round {done} of {rounds}{where}", done, saved) from None
    finally:
        bar.close()
        close_all(trackers)
        if metrics_file is not None:
            metrics_file.close()
    done, state, _ = current
    return summarize("completed")


def _finite_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) \
        and math.isfinite(float(value))


def overflowed_metrics(history: list) -> list:
    """The metrics that were finite at the first evaluation and are non-finite (NaN, inf, None) at the last
    one: with finite client models, they grew so large that the losses overflow (e.g. a huge learning rate)."""
    if len(history) < 2:
        return []
    first, last = history[0], history[-1]
    return [k for k, v in first.items() if k not in ("round", "nonfinite_clients") and _finite_number(v)
            and not _finite_number(last.get(k))]


def _stop(algorithm, t, bad, num_clients, summarize, out_dir, history):
    where = f"; results up to round {t} are in {out_dir}" if out_dir is not None else ""
    if not bad:
        result = summarize("stopped: non-finite metrics", stopped_at_round=t)
        raise NonFiniteError(f"{algorithm.name}: {', '.join(overflowed_metrics(history))} became non-finite by round "
                             f"{t} although the client models are finite (they grew so large that the losses "
                             f"overflow){where}; lower the "
                             "learning rate, or pass on_nonfinite='warn' (--on-nonfinite warn) to go on", result, t,
                             0.0)
    result = summarize("stopped: non-finite client models", stopped_at_round=t,
                       nonfinite_clients=bad / num_clients)
    raise NonFiniteError(f"{algorithm.name}: {bad} of {num_clients} client models ({bad / num_clients:.1%}) became "
                         f"non-finite by round {t}{where}; lower the learning rate, or pass on_nonfinite='warn' "
                         "(--on-nonfinite warn) to continue over the finite clients", result, t, bad / num_clients)


def write_results(result: RunResult, out_dir: str) -> None:
    """``out_dir/metrics.jsonl`` and ``out_dir/summary.json``, strict JSON (non-finite values as null)."""
    os.makedirs(out_dir, exist_ok=True)
    tmp = os.path.join(out_dir, "metrics.jsonl.tmp")
    with open(tmp, "w") as f:
        for row in result.history:
            f.write(dumps(row) + "\n")
    os.replace(tmp, os.path.join(out_dir, "metrics.jsonl"))
    write_json(os.path.join(out_dir, "summary.json"), result.summary)
