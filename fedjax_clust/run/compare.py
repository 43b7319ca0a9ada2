"""Run several algorithms on one task, print a results table, draw the convergence plot.

This is the default experiment (``fedjax-clust compare``): Federated-Clustering against Local, Global
(FedAvg) and Ground-truth clusters on the synthetic task of Werner et al. §4.1 (their Fig. 3 setting).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Iterable, Mapping, Optional, Union

from fedjax_clust.algorithms import algorithm_names, make_algorithm
from fedjax_clust.algorithms.factory import options_per_algorithm
from fedjax_clust.algorithms.settings import grouped_settings
from fedjax_clust.io.jsonio import write_json
from fedjax_clust.io.run_folder import refuse_or_clear
from fedjax_clust.run.driver_options import Evaluation, Output, driver_records
from fedjax_clust.run.experiment_records import Candidate, candidate_of
from fedjax_clust.run.loop import LoopOptions
from fedjax_clust.run.placement import PLACEMENT_KEYWORDS, Placement, check_host_rows_dir
from fedjax_clust.run.simulate import NonFiniteError, check_placement, simulate
from fedjax_clust.tasks.base import Task

__all__ = ["run_comparison", "format_table", "plot_convergence", "plot_accuracy_panels", "DEFAULT_ALGORITHMS"]

DEFAULT_ALGORITHMS = ("federated-clustering", "local", "global", "ground-truth")


def run_comparison(
    task: Task,
    algorithms: Iterable[Union[str, Candidate]] = DEFAULT_ALGORITHMS,
    *,
    rounds: int,
    seed: int = 0,
    init: str = "shared",
    options: Optional[Mapping] = None,
    evaluation: Evaluation = Evaluation(),
    output: Output = Output(),
    placement: Optional[Placement] = None,
    **legacy,
) -> dict:
    """Run each algorithm with the same seed; returns ``{name: RunResult}``.

    ``algorithms``: registered names or :class:`~fedjax_clust.run.experiment_records.Candidate` records (a name
    with options of its own, e.g. ``Candidate("federated-clustering", options={"radius": 1.0})``), each algorithm
    once. ``options``: keywords of :func:`~fedjax_clust.algorithms.make_algorithm` for every algorithm that
    takes them (``{"learning_rate": 0.05, "momentum": 0.9}``; an option none takes is a ValueError), a
    candidate's own options on top, as in a study. ``init``, ``evaluation``
    (:class:`~fedjax_clust.run.driver_options.Evaluation`) and ``placement`` are every run's, as in
    :func:`~fedjax_clust.run.simulate.simulate`; so is ``output``
    (:class:`~fedjax_clust.run.driver_options.Output`) but for its folder: with ``out_dir``, one sub-folder per
    algorithm with its run.json, metrics.jsonl and summary.json, plus ``results.json`` (all summaries) and
    ``convergence.png``; a folder holding earlier results is refused unless ``overwrite`` (which clears them
    first, so no other run's sub-folder stays next to the new results). A comparison does not resume.

    The evaluation's ``metric`` is the figure's (default mean_sq_dist_to_optimum where the task knows its optima,
    else test_accuracy where it has test data, else mean_loss).

    An algorithm whose models go non-finite (``on_nonfinite="stop"``) does not stop the comparison: its
    run ends there, its summary says ``"status": "stopped: ..."`` with the reason in ``"message"``, and
    the others run on.

    The output's ``tracking`` (:class:`fedjax_clust.io.tracking.Tracking`): every algorithm's run is tracked
    under its name, W&B runs grouped as one comparison (the task's name and the seed, unless the tracking names a
    group).

    A large population: the evaluation's ``eval_clients`` evaluates K clients drawn per evaluation (the same K
    clients for every algorithm, as they share the seed); ``placement``
    (:class:`~fedjax_clust.run.placement.Placement`) says where the clients' rows live, its ``host_rows_dir``
    keeping host rows in memory-mapped files in one sub-folder per algorithm. Every algorithm is built and its
    placement checked before the first one runs, so a comparison is refused at once rather than after its first
    runs.

    Deprecated (0.3.0, ``legacy``, each with a DeprecationWarning): the records' fields as flat keywords
    (``eval_every``, ``out_dir``, ``progress``, ..., ``device_memory`` / ``client_rows`` / ``host_rows_dir``);
    ``learning_rate`` / ``momentum`` / ``momentum_form`` / ``batch_size`` / ``matmul_precision`` (now in
    ``options``); ``learning_rates`` (``{algorithm: learning rate}``) and ``options`` as
    ``{algorithm: {keyword: value}}`` (now each a Candidate's options); any other keyword, which went to
    Federated-Clustering (now its Candidate's options).
    """
    candidates = [candidate_of(a) for a in algorithms]
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise ValueError(f"algorithms must be distinct, got {names}")
    own = {c.name: dict(c.options) for c in candidates if c.options}
    options = _comparison_options(legacy, options, own, names)
    placement, evaluation, output = driver_records(
        "run_comparison", legacy, placement, PLACEMENT_KEYWORDS, evaluation=evaluation, output=output
    )
    if output.resume:
        raise ValueError("run_comparison does not resume: rerun it (overwrite=True replaces its folder)")
    host_rows_dir = placement.host_rows_dir
    # every loop option checked before the first algorithm runs (simulate checks them again, per run)
    out_dir = LoopOptions.of(rounds, init, evaluation, output).checked().out_dir
    built = {
        name: make_algorithm(name, task, **grouped_settings(opts))
        for name, opts in options_per_algorithm(names, options, own, "comparison").items()
    }
    where = {
        name: check_placement(
            algo, task, seed=seed, init=init, placement=placement, eval_clients=evaluation.eval_clients
        )
        for name, algo in built.items()
    }
    streams = "host" in where.values()
    check_host_rows_dir(
        host_rows_dir, placement.client_rows, streams=streams, whose="every algorithm's state", stacklevel=3
    )
    if out_dir is not None:  # after every check: a refused comparison leaves the folder as it was
        refuse_or_clear(out_dir, output.overwrite, resumable=False)  # compare has no resume
    tracking = output.tracking
    results = {}
    for name, algo in built.items():
        sub = None if out_dir is None else os.path.join(out_dir, name)
        rows_dir = None  # a sub-folder per algorithm whose rows live on the host
        if host_rows_dir is not None and where[name] == "host":
            rows_dir = os.path.join(host_rows_dir, name)
            os.makedirs(rows_dir, exist_ok=True)
        run_output = dataclasses.replace(
            output,
            out_dir=sub,
            overwrite=False,
            tracking=None if tracking is None else tracking.with_group(f"compare-{task.name}-seed{seed}"),
        )
        try:
            results[name] = simulate(
                algo,
                task,
                rounds=rounds,
                seed=seed,
                init=init,
                evaluation=evaluation,
                output=run_output,
                placement=dataclasses.replace(placement, host_rows_dir=rows_dir),
            )
        except NonFiniteError as e:
            e.result.summary["message"] = str(e)
            results[name] = e.result
    if out_dir is not None:
        write_json(os.path.join(out_dir, "results.json"), {name: r.summary for name, r in results.items()})
        metric = evaluation.metric or (
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


# the options run_comparison took as its own keywords before 0.3.0, given to every algorithm
_SHARED_LEGACY = ("learning_rate", "momentum", "momentum_form", "batch_size", "matmul_precision")


def _comparison_options(legacy: dict, options, own: dict, algorithms: list) -> dict:
    """The shared options of a comparison with the deprecated keywords of ``legacy`` (taken out of it) put in,
    and into ``own`` (``{name: options}`` of the candidates, which win) the per-algorithm ones, in the precedence
    they had: ``learning_rates``, under ``options={algorithm: {...}}``, under Federated-Clustering's loose keywords;
    entries for an algorithm the comparison does not run are ignored, as they were. One DeprecationWarning for them
    (attributed to run_comparison's caller). What stays in ``legacy`` are the record and placement keywords."""
    records = {*PLACEMENT_KEYWORDS, *(f.name for r in (Evaluation, Output) for f in dataclasses.fields(r))}
    options, moved = dict(options or {}), []
    former: dict = {}

    def add(name, given):  # later deprecated keywords win over earlier ones, as they did
        if name in algorithms:
            former[name] = {**former.get(name, {}), **dict(given)}

    rates = legacy.pop("learning_rates", None)
    if rates is not None:
        moved.append("learning_rates= (now Candidate(algorithm, options={'learning_rate': ...}))")
        for name, rate in dict(rates).items():
            add(name, {"learning_rate": rate})
    registered = set(algorithm_names())
    if options and all(k in registered and isinstance(v, Mapping) for k, v in options.items()):
        moved.append("options={algorithm: {...}} (now Candidate(algorithm, options={...}))")
        for name, given in options.items():
            add(name, given)
        options = {}
    for key in [k for k in legacy if k in _SHARED_LEGACY]:
        moved.append(f"{key}= (now options={{{key!r}: ...}})")
        if key in options:
            raise ValueError(f"give {key} inside options=... or as {key}=..., not both")
        options[key] = legacy.pop(key)
    loose = [k for k in legacy if k not in records]
    if loose and "federated-clustering" not in algorithms:
        raise TypeError(f"run_comparison() got an unexpected keyword argument {loose[0]!r}")
    if loose:
        moved.append(f"{loose[0]}= (now Candidate('federated-clustering', options={{...}}))")
        add("federated-clustering", {k: legacy.pop(k) for k in loose})
    for name, given in former.items():
        own[name] = {**given, **own.get(name, {})}
    if moved:
        warnings.warn(
            f"run_comparison()'s {moved[0]} is deprecated since fedjax-clust 0.3.0 and goes in the next version",
            DeprecationWarning,
            stacklevel=3,
        )
    return options


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
