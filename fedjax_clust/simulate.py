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
             progress: bool = True, out_dir: Optional[str] = None, config: Optional[dict] = None) -> RunResult:
    """Run ``algorithm`` on ``task`` for ``rounds`` rounds.

    Evaluates ``task.evaluate`` at round 0, every ``eval_every`` rounds and at the last round, merging the
    metrics the round itself returns; an algorithm's ``cluster_labels`` become ``misclustering`` (the
    fraction of clients misclustered under the best label matching) when the task's clusters are known. ``seconds_per_round`` in the summary is the mean wall time of the
    rounds after the first (which includes compilation), evaluation excluded. With ``out_dir``, writes
    ``metrics.jsonl`` (one JSON object per evaluated round) and ``summary.json``.
    """
    _check_rounds(rounds, eval_every)
    key = jax.random.PRNGKey(seed)
    params = task.init_params(jax.random.fold_in(key, 0))
    state = algorithm.init(params, task.num_clients)
    round_key = jax.random.fold_in(key, 1)
    round_fn = jax.jit(algorithm.round)
    evaluate = jax.jit(algorithm.evaluate if algorithm.evaluate is not None else
                       (lambda st: task.evaluate(st.params)))

    history = []

    def record(t, round_metrics):
        round_metrics = dict(round_metrics)
        labels = round_metrics.pop("cluster_labels", None)
        if labels is not None and task.true_clusters is not None:
            round_metrics["misclustering"] = misclustering_error(labels, task.true_clusters)
        row = {"round": t, **_to_python(evaluate(state)), **_to_python(round_metrics)}
        history.append(row)
        return row

    record(0, {})
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=rounds, desc=algorithm.name, leave=False, dynamic_ncols=True)
    timed, compile_seconds = 0.0, 0.0
    for t in range(1, rounds + 1):
        start = time.perf_counter()
        state, metrics = round_fn(state, task.data, jax.random.fold_in(round_key, t))
        jax.block_until_ready(state.params)
        elapsed = time.perf_counter() - start
        if t == 1:
            compile_seconds = elapsed
        else:
            timed += elapsed
        if t % eval_every == 0 or t == rounds:
            row = record(t, metrics)
            if bar is not None:
                shown = {k: v for k, v in row.items() if k in ("mean_sq_dist_to_optimum", "mean_loss")}
                bar.set_postfix({k: f"{v:.3g}" for k, v in shown.items()})
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    seconds_per_round = timed / (rounds - 1) if rounds > 1 else compile_seconds
    final = {k: v for k, v in history[-1].items() if k != "round"}
    summary = {
        "algorithm": algorithm.name,
        "task": task.name,
        "rounds": rounds,
        "seed": seed,
        "seconds_per_round": seconds_per_round,
        "first_round_seconds": compile_seconds,
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
