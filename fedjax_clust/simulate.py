"""The thin driving loop: rounds, evaluation cadence, progress bar, timing and result files.

A run is reproducible from its seed and config alone: the model initialisation uses
``fold_in(PRNGKey(seed), 0)`` and round t uses ``fold_in(fold_in(PRNGKey(seed), 1), t)``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Optional

import jax
import numpy as np

from fedjax_clust.algorithms.base import ClientState, FederatedAlgorithm
from fedjax_clust.checkpoint import (
    latest_checkpoint,
    restore_checkpoint,
    save_checkpoint,
)
from fedjax_clust.memory import peak_memory_bytes
from fedjax_clust.metrics import misclustering_error
from fedjax_clust.tasks.base import Task

__all__ = ["RunResult", "simulate", "write_results"]


@dataclasses.dataclass
class RunResult:
    """What a run produced: per-evaluation metrics, the final state and the summary written to disk."""
    algorithm: str
    task: str
    history: list
    state: ClientState
    summary: dict


def _to_python(tree):
    return jax.tree.map(lambda x: x.item() if hasattr(x, "item") and np.ndim(x) == 0 else np.asarray(x).tolist(), tree)


def _check_rounds(rounds, eval_every):
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 1:
        raise ValueError(f"rounds must be a positive integer, got {rounds!r}")
    if isinstance(eval_every, bool) or not isinstance(eval_every, (int, np.integer)) or eval_every < 1:
        raise ValueError(f"eval_every must be a positive integer, got {eval_every!r}")


def simulate(algorithm: FederatedAlgorithm, task: Task, *, rounds: int, seed: int = 0, eval_every: int = 10,
             progress: bool = True, out_dir: Optional[str] = None, config: Optional[dict] = None,
             checkpoint_every: Optional[int] = None, checkpoint_dir: Optional[str] = None,
             resume: bool = False) -> RunResult:
    """Run ``algorithm`` on ``task`` for ``rounds`` rounds.

    Evaluates ``task.evaluate`` at round 0, every ``eval_every`` rounds and at the last round, merging the
    metrics the round itself returns; an algorithm's ``cluster_labels`` become ``misclustering`` (the
    fraction of clients misclustered under the best label matching) when the task's clusters are known. ``seconds_per_round`` in the summary is the mean wall time of the
    rounds after the first (which includes compilation), evaluation excluded. With ``out_dir``, writes
    ``metrics.jsonl`` (one JSON object per evaluated round, appended as the run goes) and ``summary.json``.

    Checkpoints (see :mod:`fedjax_clust.checkpoint`): every ``checkpoint_every`` rounds the whole state and
    the metrics so far go to ``checkpoint_dir`` (default ``out_dir/checkpoints``). With ``resume``, the run
    continues from the newest checkpoint there, and its result equals that of an uninterrupted run with the
    same seed and config (the round keys depend on the seed and the round only).
    """
    _check_rounds(rounds, eval_every)
    if checkpoint_every is not None and (isinstance(checkpoint_every, bool) or checkpoint_every < 1):
        raise ValueError(f"checkpoint_every must be a positive integer, got {checkpoint_every!r}")
    if checkpoint_dir is None and out_dir is not None:
        checkpoint_dir = os.path.join(out_dir, "checkpoints")
    if (checkpoint_every is not None or resume) and checkpoint_dir is None:
        raise ValueError("checkpoint_every / resume need checkpoint_dir (or out_dir)")
    key = jax.random.PRNGKey(seed)
    params = task.init_params(jax.random.fold_in(key, 0))
    state = algorithm.init(params, task.num_clients)
    round_key = jax.random.fold_in(key, 1)
    round_fn = jax.jit(algorithm.round)
    evaluate = jax.jit(algorithm.evaluate if algorithm.evaluate is not None else
                       (lambda st: task.evaluate(st.params)))

    history = []
    metrics_file = None
    start_round = 1
    if resume:
        latest = latest_checkpoint(checkpoint_dir)
        if latest is not None:
            state, saved = restore_checkpoint(checkpoint_dir, latest, state)
            # rows of the regular schedule only: a killed run's extra "final" row would not exist uninterrupted
            history = [row for row in saved["history"] if row["round"] % eval_every == 0]
            start_round = latest + 1
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        metrics_file = open(os.path.join(out_dir, "metrics.jsonl"), "w")
        for row in history:
            metrics_file.write(json.dumps(row) + "\n")
        metrics_file.flush()

    def record(t, round_metrics):
        round_metrics = dict(round_metrics)
        labels = round_metrics.pop("cluster_labels", None)
        if labels is not None and task.true_clusters is not None:
            round_metrics["misclustering"] = misclustering_error(labels, task.true_clusters)
        row = {"round": t, **_to_python(evaluate(state)), **_to_python(round_metrics)}
        history.append(row)
        if metrics_file is not None:
            metrics_file.write(json.dumps(row) + "\n")
            metrics_file.flush()
        return row

    if start_round == 1:
        record(0, {})
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=rounds, initial=start_round - 1, desc=algorithm.name, leave=False, dynamic_ncols=True)
    timed, compile_seconds, timed_rounds = 0.0, 0.0, 0
    for t in range(start_round, rounds + 1):
        start = time.perf_counter()
        state, metrics = round_fn(state, task.data, jax.random.fold_in(round_key, t))
        jax.block_until_ready(state.params)
        elapsed = time.perf_counter() - start
        if t == start_round:
            compile_seconds = elapsed
        else:
            timed += elapsed
            timed_rounds += 1
        if t % eval_every == 0 or t == rounds:
            row = record(t, metrics)
            if bar is not None:
                shown = {k: v for k, v in row.items() if k in ("mean_sq_dist_to_optimum", "mean_loss")}
                bar.set_postfix({k: f"{v:.3g}" for k, v in shown.items()})
        if checkpoint_every is not None and t % checkpoint_every == 0:
            save_checkpoint(checkpoint_dir, t, state, history, {"seed": seed, "rounds": rounds})
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    if history[-1]["round"] != rounds:  # resumed from a checkpoint of the last round itself
        record(rounds, {})
    if metrics_file is not None:
        metrics_file.close()
    seconds_per_round = timed / timed_rounds if timed_rounds else compile_seconds
    final = {k: v for k, v in history[-1].items() if k != "round"}
    summary = {
        "algorithm": algorithm.name,
        "task": task.name,
        "rounds": rounds,
        "seed": seed,
        "seconds_per_round": seconds_per_round,
        "first_round_seconds": compile_seconds,
        "peak_bytes": peak_memory_bytes(),
        "num_clients": task.num_clients,
        "hparams": algorithm.hparams,
        "task_config": task.config,
        **(config or {}),
        **final,
    }
    result = RunResult(algorithm.name, task.name, history, state, summary)
    if out_dir is not None:
        write_results(result, out_dir)
    return result


def write_results(result: RunResult, out_dir: str) -> None:
    """``out_dir/metrics.jsonl`` and ``out_dir/summary.json``."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "metrics.jsonl"), "w") as f:
        for row in result.history:
            f.write(json.dumps(row) + "\n")
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(result.summary, f, indent=2, default=float)
