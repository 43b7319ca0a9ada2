"""Run several algorithms on one task, print a results table, draw the convergence plot.

This is the default experiment (``fedjax-clust compare``): Federated-Clustering against Local, Global
(FedAvg) and Ground-truth clusters on the synthetic task of Werner et al. §4.1 (their Fig. 3 setting).
"""

from __future__ import annotations

import json
import os
from typing import Iterable, Optional

from fedjax_clust.algorithms import make_algorithm
from fedjax_clust.simulate import simulate
from fedjax_clust.tasks.base import Task

__all__ = ["run_comparison", "format_table", "plot_convergence", "DEFAULT_ALGORITHMS"]

DEFAULT_ALGORITHMS = ("federated-clustering", "local", "global", "ground-truth")


def run_comparison(task: Task, algorithms: Iterable[str] = DEFAULT_ALGORITHMS, *, rounds: int, seed: int = 0,
                   learning_rate: float, momentum: float = 0.0, batch_size: Optional[int] = None,
                   eval_every: int = 10, out_dir: Optional[str] = None, progress: bool = True,
                   learning_rates: Optional[dict] = None, options: Optional[dict] = None,
                   **fc_options) -> dict:
    """Run each algorithm with the same seed; returns ``{name: RunResult}``.

    ``learning_rates`` overrides ``learning_rate`` per algorithm name; ``options`` maps algorithm names to
    their builder options; ``fc_options`` (keyword arguments) go to Federated-Clustering. With ``out_dir``: one sub-folder per algorithm with its metrics.jsonl and
    summary.json, plus ``results.json`` (all summaries) and ``convergence.png``.
    """
    results = {}
    for name in algorithms:
        lr = (learning_rates or {}).get(name, learning_rate)
        opts = dict((options or {}).get(name, {}))
        if name == "federated-clustering":
            opts.update(fc_options)
        algo = make_algorithm(name, task, learning_rate=lr, momentum=momentum, batch_size=batch_size, **opts)
        sub = None if out_dir is None else os.path.join(out_dir, name)
        results[name] = simulate(algo, task, rounds=rounds, seed=seed, eval_every=eval_every, progress=progress,
                                 out_dir=sub)
    if out_dir is not None:
        with open(os.path.join(out_dir, "results.json"), "w") as f:
            json.dump({name: r.summary for name, r in results.items()}, f, indent=2, default=float)
        metric = "mean_sq_dist_to_optimum" if task.optima is not None else "mean_loss"
        plot_convergence(results, metric, os.path.join(out_dir, "convergence.png"),
                         title=f"{task.name}: N={task.num_clients}, seed={seed}")
    return results


def format_table(results: dict) -> str:
    """A plain-text table: one row per algorithm with its final metrics and seconds per round."""
    columns = ["mean_sq_dist_to_optimum", "mean_dist_to_optimum", "mean_loss", "misclustering",
               "seconds_per_round"]
    present = [c for c in columns if any(c in r.summary for r in results.values())]
    header = ["algorithm"] + present
    rows = [[name] + [f"{r.summary[c]:.4g}" if c in r.summary else "-" for c in present]
            for name, r in results.items()]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def plot_convergence(results: dict, metric: str, path: str, title: str = "") -> None:
    """Log-scale curves of ``metric`` against rounds, one per algorithm, saved as PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, r in results.items():
        rounds = [row["round"] for row in r.history if metric in row]
        values = [max(row[metric], 1e-12) for row in r.history if metric in row]
        ax.plot(rounds, values, label=name, linewidth=1.8)
    ax.set_yscale("log")
    ax.set_xlabel("round")
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
