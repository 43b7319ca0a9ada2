"""Run several algorithms on one task, print a results table, draw the convergence plot.

This is the default experiment (``fedjax-clust compare``): Federated-Clustering against Local, Global
(FedAvg) and Ground-truth clusters on the synthetic task of Werner et al. §4.1 (their Fig. 3 setting).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Iterable, Optional

from fedjax_clust.algorithms import make_algorithm
from fedjax_clust.algorithms.settings import grouped_settings
from fedjax_clust.core.optim import DEFAULT_MOMENTUM
from fedjax_clust.io.jsonio import write_json
from fedjax_clust.io.run_folder import refuse_or_clear
from fedjax_clust.run.loop import LoopOptions
from fedjax_clust.run.placement import PLACEMENT_KEYWORDS, Placement, check_host_rows_dir, placement_from
from fedjax_clust.run.simulate import NonFiniteError, check_placement, simulate
from fedjax_clust.tasks.base import Task

__all__ = ["run_comparison", "format_table", "plot_convergence", "plot_accuracy_panels", "DEFAULT_ALGORITHMS"]

DEFAULT_ALGORITHMS = ("federated-clustering", "local", "global", "ground-truth")


def run_comparison(
    task: Task,
    algorithms: Iterable[str] = DEFAULT_ALGORITHMS,
    *,
    rounds: int,
    seed: int = 0,
    learning_rate: float,
    momentum: float = DEFAULT_MOMENTUM,
    momentum_form: str = "heavy-ball",
    batch_size: Optional[int] = None,
    matmul_precision: str = "highest",
    eval_every: int = 10,
    out_dir: Optional[str] = None,
    progress: bool = True,
    overwrite: bool = False,
    on_nonfinite: str = "stop",
    init: str = "shared",
    learning_rates: Optional[dict] = None,
    options: Optional[dict] = None,
    tracking=None,
    eval_clients: Optional[int] = None,
    placement: Optional[Placement] = None,
    **fc_options,
) -> dict:
    """Run each algorithm with the same seed; returns ``{name: RunResult}``.

    ``learning_rates`` overrides ``learning_rate`` per algorithm name; ``options`` maps algorithm names to
    their builder options; ``fc_options`` (keyword arguments) go to Federated-Clustering. With ``out_dir``:
    one sub-folder per algorithm with its run.json, metrics.jsonl and summary.json, plus ``results.json``
    (all summaries) and ``convergence.png``; a folder holding earlier results is refused unless
    ``overwrite`` (which clears them first, so no other run's sub-folder stays next to the new results).

    An algorithm whose models go non-finite (``on_nonfinite="stop"``) does not stop the comparison: its
    run ends there, its summary says ``"status": "stopped: ..."`` with the reason in ``"message"``, and
    the others run on.

    ``tracking`` (:class:`fedjax_clust.io.tracking.Tracking`): every algorithm's run is tracked under its name,
    W&B runs grouped as one comparison (the task's name and the seed, unless the tracking names a group).

    A large population (:func:`~fedjax_clust.run.simulate.simulate`'s options, for every algorithm):
    ``eval_clients`` evaluates K clients drawn per evaluation (the same K clients for every algorithm, as they
    share the seed); ``placement`` (:class:`~fedjax_clust.run.placement.Placement`) says where the clients' rows
    live, its ``host_rows_dir`` keeping host rows in memory-mapped files in one sub-folder per algorithm (the
    keywords ``device_memory`` / ``client_rows`` / ``host_rows_dir`` are deprecated, 0.3.0). Every algorithm is
    built and its placement checked before the first one runs, so a comparison is refused at once rather than
    after its first runs.
    """
    legacy = {k: fc_options.pop(k) for k in PLACEMENT_KEYWORDS if k in fc_options}
    placement = placement_from(placement, legacy, function="run_comparison")
    host_rows_dir = placement.host_rows_dir
    algorithms = list(algorithms)
    # every loop option checked before the first algorithm runs (simulate checks them again, per run)
    loop_options = LoopOptions(rounds, eval_every, init, on_nonfinite, out_dir, overwrite, progress, tracking)
    out_dir = loop_options.checked().out_dir
    optimiser = dict(momentum=momentum, momentum_form=momentum_form, batch_size=batch_size)
    built = _built_algorithms(
        task, algorithms, learning_rate, learning_rates, options, fc_options, optimiser, matmul_precision
    )
    where = {
        name: check_placement(algo, task, seed=seed, init=init, placement=placement, eval_clients=eval_clients)
        for name, algo in built.items()
    }
    streams = "host" in where.values()
    check_host_rows_dir(
        host_rows_dir, placement.client_rows, streams=streams, whose="every algorithm's state", stacklevel=3
    )
    if out_dir is not None:  # after every check: a refused comparison leaves the folder as it was
        refuse_or_clear(out_dir, overwrite, resumable=False)  # compare has no resume
    results = {}
    for name, algo in built.items():
        sub = None if out_dir is None else os.path.join(out_dir, name)
        rows_dir = None  # a sub-folder per algorithm whose rows live on the host
        if host_rows_dir is not None and where[name] == "host":
            rows_dir = os.path.join(host_rows_dir, name)
            os.makedirs(rows_dir, exist_ok=True)
        try:
            results[name] = simulate(
                algo,
                task,
                rounds=rounds,
                seed=seed,
                eval_every=eval_every,
                progress=progress,
                out_dir=sub,
                on_nonfinite=on_nonfinite,
                init=init,
                tracking=None if tracking is None else tracking.with_group(f"compare-{task.name}-seed{seed}"),
                placement=dataclasses.replace(placement, host_rows_dir=rows_dir),
                eval_clients=eval_clients,
            )
        except NonFiniteError as e:
            e.result.summary["message"] = str(e)
            results[name] = e.result
    if out_dir is not None:
        write_json(os.path.join(out_dir, "results.json"), {name: r.summary for name, r in results.items()})
        metric = (
            "mean_sq_dist_to_optimum"
            if task.optima is not None
            else "test_accuracy"
            if task.logits is not None and task.test_data is not None
            else "mean_loss"
        )
        plot_convergence(
            results,
            metric,
            os.path.join(out_dir, "convergence.png"),
            title=f"{task.name}: N={task.num_clients}, seed={seed}",
        )
    return results


def _built_algorithms(task, algorithms, learning_rate, learning_rates, options, fc_options, optimiser, precision):
    """``{name: algorithm}`` of a comparison, each built (so validated) before any runs."""
    built = {}
    for name in algorithms:
        opts = dict((options or {}).get(name, {}))
        if name == "federated-clustering":
            opts.update(fc_options)
        lr = (learning_rates or {}).get(name, learning_rate)
        flat = {"learning_rate": lr, "matmul_precision": precision, **optimiser, **opts}
        built[name] = make_algorithm(name, task, **grouped_settings(flat))
    return built


def format_table(results: dict) -> str:
    """A plain-text table: one row per algorithm with its final metrics and seconds per round (a non-finite
    value shows as "non-finite"; a run stopped early gets a status column)."""
    columns = [
        "mean_sq_dist_to_optimum",
        "mean_dist_to_optimum",
        "mean_loss",
        "test_accuracy",
        "misclustering",
        "seconds_per_round",
    ]
    present = [c for c in columns if any(c in r.summary for r in results.values())]
    stopped = any(r.summary.get("status", "completed") != "completed" for r in results.values())

    def cell(summary, column):
        if column not in summary:
            return "-"
        return "non-finite" if summary[column] is None else f"{summary[column]:.4g}"

    header = ["algorithm"] + present + (["status"] if stopped else [])
    rows = []
    for name, r in results.items():
        row = [name] + [cell(r.summary, c) for c in present]
        if stopped:
            s = r.summary
            row.append(
                "completed"
                if s.get("status", "completed") == "completed"
                else f"stopped at round {s.get('stopped_at_round')} ({s.get('nonfinite_clients', 0):.0%} non-finite)"
            )
        rows.append(row)
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


# line k's style: widths shrink and dash patterns interleave, so curves that coincide (Federated-Clustering on
# Ground-truth's) stay visible on top of each other
_STYLES = ("-", (0, (6, 3)), (3, (2, 4)), (0, (1, 2)), (0, (6, 2, 1, 2)), "-", (0, (3, 3)))
_WIDTHS = (2.8, 2.2, 1.8, 1.5, 1.3, 1.1, 1.0)


def line_style(k: int) -> dict:
    """Keyword arguments of ``ax.plot`` for the k-th curve of a figure (colour C{k}, a dash pattern, a width)."""
    return {"color": f"C{k % 10}", "linestyle": _STYLES[k % len(_STYLES)], "linewidth": _WIDTHS[k % len(_WIDTHS)]}


def plot_convergence(results: dict, metric: str, path: str, title: str = "") -> None:
    """Curves of ``metric`` against rounds, one per algorithm, saved as PNG (log scale, except accuracies:
    linear, in percent)."""
    if "accuracy" in metric:
        curves = {
            name: [(row["round"], row[metric]) for row in r.history if row.get(metric) is not None]
            for name, r in results.items()
        }
        plot_accuracy_panels({title: curves}, path)
        return
    from fedjax_clust.io.figures import figure_for_file

    fig, ax = figure_for_file(figsize=(6.4, 4.2))
    for k, (name, r) in enumerate(results.items()):
        rows = [row for row in r.history if row.get(metric) is not None]  # null: non-finite
        rounds = [row["round"] for row in rows]
        values = [max(row[metric], 1e-12) for row in rows]
        ax.plot(rounds, values, label=name, **line_style(k))
    ax.set_yscale("log")
    ax.set_xlabel("round")
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def plot_accuracy_panels(panels: dict, path: str) -> None:
    """Side-by-side panels ``{title: {label: [(round, accuracy fraction), ...]}}`` of test accuracy (%)
    against rounds, saved as PNG."""
    from fedjax_clust.io.figures import figure_for_file

    fig, axes = figure_for_file(1, max(len(panels), 1), figsize=(6 * max(len(panels), 1), 4), squeeze=False)
    for ax, (title, curves) in zip(axes[0], panels.items()):
        for k, (label, points) in enumerate(curves.items()):
            if points:
                rounds, accuracy = zip(*points)
                ax.plot(rounds, [100 * a for a in accuracy], label=label, **line_style(k))
        ax.set(title=title, xlabel="round", ylabel="test accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
