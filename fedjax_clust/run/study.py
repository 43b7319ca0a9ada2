"""Studies: several algorithms x a grid of options x seeds, with t intervals and paired comparisons.

A study runs every algorithm as one :func:`~fedjax_clust.run.sweep.sweep` (its grid points and seeds vmapped
into as few compiled programs as fit memory) on the **same seeds**, then states, for every algorithm and grid
point, the mean final metric with its Student-t interval over the seeds, and the paired difference of every
algorithm against the first one on the same seeds (see :mod:`fedjax_clust.run.statistics` for why the pairing
is valid: a seed redraws the data, the attackers, the initial models and every round's keys, the same for
every algorithm).

**Grid points and arms.** A *grid point* is a value of every *shared* dimension: the task grid (e.g. the
attackers' share, which changes the task for everyone) and every option of ``grid`` that every algorithm of the
study takes with the same list of values (e.g. the learning rate). An option whose list is not the same for
every algorithm (one only some of them take: ``aggregator`` does not apply to Federated-Clustering, ``radius``
only to it; or one ``algorithm_grids`` gives each its own values) is that algorithm's own dimension: each of
its values is an *arm* (``global[aggregator=median]``), compared with the other arms at every grid point and
recorded with its values. So "FedAvg with the median against Federated-Clustering under ALIE at 0, 10 and
20 %" is three grid points and two arms.

**Output folder** (``out_dir``): ``study.json`` (the study's configuration, every run's final metrics, the
table of intervals and the paired comparisons), ``study.md`` and ``study.csv`` (the same table), ``study.png``
(the final metric against the first point dimension, one line per arm with its interval as error bars) and
``curves.png`` (the metric over rounds at every grid point with interval bands), and ``algorithms/NAME/``,
each algorithm's sweep folder (``sweep.json``, ``runs/RUN/`` with every run's ``run.json``,
``metrics.jsonl``, ``summary.json``; no ``sweep.png``: the study's figures draw every algorithm).

**Resume.** ``study.json``'s configuration is written before the first sweep; with ``resume=True`` a study into
the same folder with the same configuration keeps every algorithm whose sweep folder is complete (its
``sweep.json`` written) and resumes the others' sweeps (``sweep(..., resume=True)``: every sweep program whose
runs are on disk is kept), so a killed study recomputes at most the one sweep program that was running.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import os
import sys
import warnings
from typing import Callable, Mapping, Optional, Sequence, Union

import numpy as np

from fedjax_clust.algorithms import algorithm_names, algorithm_takes
from fedjax_clust.core.validation import check_choice, check_real, check_seed
from fedjax_clust.io.jsonio import json_safe, read_json, read_json_lines, write_json
from fedjax_clust.io.run_folder import claim_outputs, config_differences
from fedjax_clust.run.statistics import (
    FEW_SEEDS,
    FewSeedsWarning,
    higher_is_better,
    paired_difference,
    t_interval,
    t_multiplier,
)
from fedjax_clust.run.sweep import IdenticalRunsWarning, program_seconds, resolved_run_batching, sweep
from fedjax_clust.tasks.base import Task

__all__ = ["study", "StudyResult", "arm_name", "study_table_markdown", "STUDY_OUTPUTS"]

STUDY_OUTPUTS = ("study.json", "study.md", "study.csv", "study.png", "curves.png", "algorithms", "config.toml")
SWEEP_FOLDER = "algorithms"


@dataclasses.dataclass
class StudyResult:
    """What a study found. ``arms``: [{"name", "algorithm", "values"}] (the first is the reference of the paired
    comparisons); ``point_names``: the shared dimensions; ``points``: their values at every grid point;
    ``runs``: per run {"arm", "point", "seed", "status", "final", "history"}; ``table``: per point and arm the
    :class:`~fedjax_clust.run.statistics.Interval` of the final metric (as a dict); ``paired``: per point and
    arm other than the reference the paired difference arm - reference; ``metric`` and whether higher is
    better; ``seconds`` of the sweeps run now (0 for those kept from disk), ``timing`` the number of their
    programs run now and their round, evaluation and compile seconds and XLA compilations
    (:func:`~fedjax_clust.run.sweep.program_seconds`)."""

    metric: str
    higher_is_better: bool
    confidence: float
    seeds: list
    arms: list
    point_names: list
    points: list
    runs: list
    table: list
    paired: list
    seconds: float
    kept: list = dataclasses.field(default_factory=list)
    timing: dict = dataclasses.field(default_factory=dict)


def arm_name(algorithm: str, values: Mapping) -> str:
    """``global[aggregator=median]``, or the algorithm's name when it has no own dimension."""
    if not values:
        return algorithm
    return f"{algorithm}[{','.join(f'{k}={_text(v)}' for k, v in values.items())}]"


def _text(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def study(
    algorithms: Sequence[str],
    task: Union[Task, Callable[..., Task]],
    *,
    rounds: int,
    seeds: Sequence[int] = (0, 1, 2),
    grid: Optional[Mapping[str, Sequence]] = None,
    task_grid: Optional[Mapping[str, Sequence]] = None,
    algorithm_grids: Optional[Mapping[str, Mapping[str, Sequence]]] = None,
    options: Optional[Mapping] = None,
    algorithm_options: Optional[Mapping[str, Mapping]] = None,
    eval_every: int = 10,
    metric: Optional[str] = None,
    higher_better: Optional[bool] = None,
    confidence: float = 0.95,
    init: str = "shared",
    on_nonfinite: str = "stop",
    out_dir: Optional[str] = None,
    overwrite: bool = False,
    resume: bool = False,
    progress: bool = True,
    runs_per_program: Union[int, str, None] = "auto",
    run_batching: str = "auto",
    eval_clients: Optional[int] = None,
) -> StudyResult:
    """Run every algorithm of ``algorithms`` over the grid and ``seeds`` and compare them (module docstring).

    Args:
      algorithms: registered algorithm names, at least one, each once; the first is the reference of the paired
        comparisons.
      task: as in :func:`~fedjax_clust.run.sweep.sweep`: one task, ``seed -> Task``, or with ``task_grid``
        ``(seed, **task_values) -> Task``. A task built from the seed gives every algorithm the same data and
        attackers on a seed, which the pairing needs for its data to vary with the seed.
      grid: ``{keyword of make_algorithm: [values]}`` for every algorithm that takes the keyword (a keyword no
        algorithm takes is an error).
      task_grid: ``{keyword of the task: [values]}``, shared by every algorithm (e.g. ``byzantine_fraction``).
      algorithm_grids: ``{algorithm: {keyword: [values]}}``, dimensions of one algorithm only.
      options: keywords of make_algorithm fixed for every algorithm that takes them (each must be taken by one).
      algorithm_options: ``{algorithm: {keyword: value}}``, fixed options of one algorithm.
      metric: the compared metric (default: test_accuracy, else mean_sq_dist_to_optimum, else mean_loss);
        every algorithm must log it (a ValueError names the metrics it logs).
      higher_better: whether a larger metric is better (default: read from its name, see
        :func:`~fedjax_clust.run.statistics.higher_is_better`); decides the wins of the paired comparisons.
      confidence: of the t intervals, in (0, 1).
      resume: keep the algorithms whose sweep folders in ``out_dir`` are complete and every finished sweep program
        of the others (same configuration).
      rounds, eval_every, init, on_nonfinite, out_dir, overwrite, progress, runs_per_program, run_batching,
        eval_clients: as in :func:`~fedjax_clust.run.sweep.sweep`, for every algorithm's sweep.
    """
    resolved_run_batching(run_batching)  # refused before the study claims its folder
    plan = _plan(algorithms, seeds, grid, task_grid, algorithm_grids, options, algorithm_options)
    check_real("confidence", confidence, low=0.0, high=1.0, low_open=True, high_open=True)
    if resume and overwrite:
        raise ValueError("resume and overwrite contradict each other: resume keeps the study's finished sweeps")
    if resume and out_dir is None:
        raise ValueError("resume needs out_dir (the folder of the study to continue)")
    first = _first_task(task, plan)
    _check_buildable(plan, first)
    config = _study_config(
        plan,
        task,
        first,
        rounds=rounds,
        eval_every=eval_every,
        init=init,
        on_nonfinite=on_nonfinite,
        **({} if eval_clients is None else {"eval_clients": eval_clients}),
    )
    config["metric"], config["confidence"] = metric, confidence
    if out_dir is not None:
        _claim(out_dir, config, overwrite=overwrite, resume=resume)
    if len(plan["seeds"]) < FEW_SEEDS:
        wide = (
            "no interval"
            if len(plan["seeds"]) == 1
            else f"a {confidence:.0%} t interval {t_multiplier(len(plan['seeds']), confidence):.1f} standard errors "
            "wide on each side"
        )
        warnings.warn(f"{len(plan['seeds'])} seed(s): {wide}; run at least {FEW_SEEDS}", FewSeedsWarning, stacklevel=2)
    records, kept, seconds, ran_a_sweep, programs = [], [], 0.0, False, []
    shared = dict(
        rounds=rounds,
        eval_every=eval_every,
        init=init,
        on_nonfinite=on_nonfinite,
        progress=progress,
        runs_per_program=runs_per_program,
        run_batching=run_batching,
        eval_clients=eval_clients,
    )
    for number, name in enumerate(plan["algorithms"], start=1):
        folder = None if out_dir is None else os.path.join(out_dir, SWEEP_FOLDER, name)
        finished = folder is not None and resume and os.path.exists(os.path.join(folder, "sweep.json"))
        if progress:
            doing = f"kept from {folder}" if finished else "running"
            print(f"study: algorithm {number} of {len(plan['algorithms'])}, {name}: {doing}", file=sys.stderr)
        if finished and folder is not None:
            runs, found_metric = _runs_on_disk(folder)
            kept.append(name)
        else:
            with warnings.catch_warnings():
                if ran_a_sweep:  # the task grid and the attacks are every algorithm's: the first sweep said it
                    warnings.simplefilter("ignore", IdenticalRunsWarning)
                swept = _sweep_of(name, task, plan, folder, resume, metric, shared)
            ran_a_sweep = True
            runs, found_metric, seconds = _runs_in_memory(swept), swept.metric, seconds + swept.seconds
            programs += swept.programs
        metric = metric or str(found_metric)
        _check_logged(name, runs, metric)
        records += [dict(run, algorithm=name) for run in runs]
    metric = str(metric)
    better = higher_is_better(metric) if higher_better is None else bool(higher_better)
    result = _compare(plan, records, metric, better, confidence, seconds, kept)
    ran = [p for p in programs if not p.get("kept")]
    result.timing = {"programs": len(ran), **program_seconds(ran)}  # the sweeps' programs run now
    if out_dir is not None:
        write_study(result, config, out_dir)
    return result


def _sweep_of(name, task, plan, folder, resume, metric, shared: dict):
    """One algorithm's sweep of the study (its grid, the shared task grid and seeds) into ``folder``; ``shared``:
    the keywords of :func:`~fedjax_clust.run.sweep.sweep` every algorithm's sweep takes."""
    return sweep(
        name,
        task,
        grid=plan["grids"][name],
        task_grid=plan["task_grid"],
        seeds=plan["seeds"],
        options=plan["options"][name],
        out_dir=folder,
        # the study claimed the folder: a fresh study replaces what is there, a resumed one keeps every finished
        # program of the sweep
        overwrite=folder is not None and not resume,
        resume=resume,
        plot=False,  # study.png and curves.png draw every algorithm
        metric=metric,
        **shared,
    )


def _plan(algorithms, seeds, grid, task_grid, algorithm_grids, options, algorithm_options) -> dict:
    """The study's checked inputs: every algorithm's sweep grid and options, the point and own dimensions."""
    algorithms = list(algorithms) if not isinstance(algorithms, str) else [algorithms]
    if not algorithms or len(set(algorithms)) != len(algorithms):
        raise ValueError(f"algorithms must be a non-empty list of distinct names, got {algorithms}")
    for name in algorithms:
        check_choice("algorithm", name, algorithm_names())
    seeds = [check_seed(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be a non-empty list of distinct seeds, got {list(seeds)}")
    grid, task_grid, options = dict(grid or {}), dict(task_grid or {}), dict(options or {})
    algorithm_grids, algorithm_options = dict(algorithm_grids or {}), dict(algorithm_options or {})
    for what, given in (("algorithm_grids", algorithm_grids), ("algorithm_options", algorithm_options)):
        strangers = [name for name in given if name not in algorithms]
        if strangers:
            raise ValueError(f"{what} names {strangers[0]!r}, which is not an algorithm of the study {algorithms}")
    for what, given in (("grid", grid), ("options", options)):
        for key in given:
            if not any(algorithm_takes(name, key) for name in algorithms):
                raise ValueError(f"no algorithm of the study ({', '.join(algorithms)}) takes the {what} option {key!r}")
    lists = {**grid, **task_grid, **{k: v for g in algorithm_grids.values() for k, v in dict(g).items()}}
    for key, values in lists.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or len(values) == 0:
            raise ValueError(f"grid option {key!r} needs a non-empty list of values, got {values!r}")
    grids = {
        name: {
            **{k: list(v) for k, v in grid.items() if algorithm_takes(name, k)},
            **{k: list(v) for k, v in algorithm_grids.get(name, {}).items()},
        }
        for name in algorithms
    }
    fixed = {
        name: {
            **{k: v for k, v in options.items() if algorithm_takes(name, k)},
            **dict(algorithm_options.get(name, {})),
        }
        for name in algorithms
    }
    for name in algorithms:
        both = sorted(set(grids[name]) & set(fixed[name]))
        if both:
            raise ValueError(f"{name}: option {both[0]!r} is given both as a list of values and as a fixed option")
    shared = [k for k in grids[algorithms[0]] if all(grids[a].get(k) == grids[algorithms[0]][k] for a in algorithms)]
    own = {name: [k for k in grids[name] if k not in shared] for name in algorithms}
    return {
        "algorithms": algorithms,
        "seeds": seeds,
        "task_grid": {k: list(v) for k, v in task_grid.items()},
        "grids": grids,
        "options": fixed,
        "point_names": list(task_grid) + shared,
        "own": own,
    }


def _first_task(task, plan: dict) -> Task:
    """The task of the study's first seed and first task-grid values."""
    if isinstance(task, Task):
        return task
    first = {k: v[0] for k, v in plan["task_grid"].items()}
    return task(plan["seeds"][0], **first)


def _check_buildable(plan: dict, first: Task) -> None:
    """Build every algorithm with its fixed options and its grid's first values on the first task: a
    ValueError for an option it does not take or a bad value, before anything runs or is written (the later
    grid values are checked as their sweep starts)."""
    from fedjax_clust.algorithms import make_algorithm
    from fedjax_clust.algorithms.settings import grouped_settings

    for name in plan["algorithms"]:
        first_values = {k: v[0] for k, v in plan["grids"][name].items()}
        try:
            make_algorithm(name, first, **grouped_settings({**plan["options"][name], **first_values}))
        except ValueError as error:
            raise ValueError(f"{name}: {error}") from None


def _study_config(plan: dict, task, first: Task, **loop) -> dict:
    from fedjax_clust._version import __version__

    # a task built per seed is named by what it builds (its Python name, e.g. the command line's task_of, says nothing)
    task_text = task.name if isinstance(task, Task) else f"{first.name} (built per seed)"
    return json_safe(
        {
            "algorithms": plan["algorithms"],
            "seeds": plan["seeds"],
            "task": task_text,
            # a task function is known by the task it builds for the first seed (its name alone would let a
            # resume pair kept runs with runs on other data)
            "task_config": {"name": first.name, **first.config},
            "task_grid": plan["task_grid"],
            "grids": plan["grids"],
            "options": {
                name: {k: repr(v) if callable(v) else v for k, v in o.items()} for name, o in plan["options"].items()
            },
            **loop,
            "version": __version__,
        }
    )


def _claim(out_dir: str, config: dict, *, overwrite: bool, resume: bool) -> None:
    path = os.path.join(out_dir, "study.json")
    if resume and os.path.exists(path):
        saved = read_json(path).get("config")
        differences = config_differences(saved or {}, config)
        if differences:
            raise ValueError(
                f"cannot resume: {path} is another study's ({'; '.join(differences[:4])}); use the same options, "
                "or a new folder"
            )
        return
    # a fresh study, or a resume of a folder with no study in it: a folder holding another's results is refused
    claim_outputs(out_dir, STUDY_OUTPUTS, overwrite)
    os.makedirs(out_dir, exist_ok=True)
    write_json(path, {"config": config, "status": "running"})


def _runs_in_memory(result) -> list:
    return [
        {
            "values": dict(run.summary["sweep_values"]),
            "seed": run.summary["seed"],
            "status": run.summary["status"],
            "history": run.history,
            "same_as": run.summary.get("same_as"),
        }
        for run in result.runs
    ]


def _runs_on_disk(folder: str) -> tuple:
    """A finished sweep folder's runs as :func:`_runs_in_memory` gives them, and its metric."""
    saved = read_json(os.path.join(folder, "sweep.json"))
    runs = [
        {
            "values": run["values"],
            "seed": run["seed"],
            "status": run["status"],
            "history": read_json_lines(os.path.join(folder, "runs", run["name"], "metrics.jsonl")),
            "same_as": run.get("same_as"),
        }
        for run in saved["runs"]
    ]
    return runs, saved["metric"]


def _check_logged(name: str, runs: list, metric: str) -> None:
    """ValueError when ``metric`` is in no evaluation of ``name``'s runs (a typo, or a metric the algorithm
    does not log, e.g. misclustering for an algorithm that assigns no clusters)."""
    rows = [row for run in runs for row in run["history"]]
    if rows and not any(metric in row for row in rows):
        logged = sorted({key for row in rows for key in row if key != "round"})
        raise ValueError(f"algorithm {name!r} does not log the metric {metric!r}; it logs {logged}")


def _final(history: list, metric: str, status: str) -> Optional[float]:
    value = history[-1].get(metric) if history and status == "completed" else None
    return None if value is None or not np.isfinite(value) else float(value)


def _compare(plan, records, metric, better, confidence, seconds, kept) -> StudyResult:
    """The table of intervals and the paired comparisons from every run's record."""
    point_names, seeds = plan["point_names"], plan["seeds"]
    arms: list = []
    by_arm_point: dict = {}  # (arm name, point values) -> {seed: final metric}
    for record in records:
        values = record["values"]
        own = {k: values[k] for k in plan["own"][record["algorithm"]]}
        at = tuple(values[k] for k in point_names)
        name = arm_name(record["algorithm"], own)
        if name not in [a["name"] for a in arms]:
            arms.append({"name": name, "algorithm": record["algorithm"], "values": own})
        record.update(arm=name, point=dict(zip(point_names, at)))
        record["final"] = _final(record["history"], metric, record["status"])
        by_arm_point.setdefault((name, at), {})[record["seed"]] = record["final"]
    points = [
        dict(zip(point_names, combo)) for combo in itertools.product(*(_point_values(plan, k) for k in point_names))
    ]
    reference = arms[0]["name"]
    table, paired = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FewSeedsWarning)  # said once, by study()
        for point in points:
            key = tuple(point.values())
            for arm in arms:
                finals = [by_arm_point[(arm["name"], key)].get(s) for s in seeds]
                table.append(
                    {"point": point, "arm": arm["name"], "per_seed": finals, **t_interval(finals, confidence).to_dict()}
                )
            ref = [by_arm_point[(reference, key)].get(s) for s in seeds]
            for arm in arms[1:]:
                other = [by_arm_point[(arm["name"], key)].get(s) for s in seeds]
                diff = paired_difference(other, ref, confidence, higher_better=better)
                paired.append({"point": point, "arm": arm["name"], "reference": reference, **diff.to_dict()})
    thin = [row for row in table if 0 < row["n"] < FEW_SEEDS and row["n"] < len(seeds)]
    if thin:
        warnings.warn(
            f"{len(thin)} row(s) rest on fewer than {FEW_SEEDS} finished seeds (runs that went non-finite are "
            f"left out), e.g. {thin[0]['arm']} at {_point_text(thin[0]['point'])}: n = {thin[0]['n']}",
            FewSeedsWarning,
            stacklevel=3,
        )
    return StudyResult(
        metric, better, confidence, seeds, arms, point_names, points, records, table, paired, seconds, kept
    )


def _point_values(plan: dict, name: str) -> list:
    if name in plan["task_grid"]:
        return plan["task_grid"][name]
    return plan["grids"][plan["algorithms"][0]][name]


# ---------------------------------------------------------------------------------------------------- outputs


def _number(x, digits: int = 4) -> str:
    return "–" if x is None else f"{x:.{digits}g}"


def _point_text(point: Mapping) -> str:
    return ", ".join(f"{k}={_text(v)}" for k, v in point.items()) or "all"


def _interval_text(row: Mapping) -> str:
    return "–" if row["low"] is None else f"[{_number(row['low'])}, {_number(row['high'])}]"


def study_table_markdown(result: StudyResult) -> str:
    """The study's two tables as Markdown: the final metric per grid point and arm (mean, its t interval,
    standard deviation, n of the seeds), and each arm minus the reference on the same seeds."""
    level = f"{result.confidence:.0%}"
    lines = [
        f"Final {result.metric} ({'higher' if result.higher_is_better else 'lower'} is better), mean over "
        f"{len(result.seeds)} seeds with its {level} t interval:",
        "",
        f"| grid point | arm | mean | {level} interval | std | n | non-finite |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in result.table:
        lines.append(
            f"| {_point_text(row['point'])} | {row['arm']} | {_number(row['mean'])} | {_interval_text(row)} | "
            f"{_number(row['std'], 3)} | {row['n']} | {row['nonfinite']} |"
        )
    if result.paired:
        sign = "positive" if result.higher_is_better else "negative"
        lines += [
            "",
            "Paired on the seeds (on a seed every algorithm gets the same data and attackers): arm minus "
            f"{result.arms[0]['name']} with its {level} paired t interval ({sign} is better), and the seeds on "
            "which the arm is better, equal or worse:",
            "",
            f"| grid point | arm | mean difference | {level} interval | better / equal / worse | n |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for row in result.paired:
            lines.append(
                f"| {_point_text(row['point'])} | {row['arm']} | {_number(row['mean'])} | {_interval_text(row)} | "
                f"{row['wins']} / {row['ties']} / {row['losses']} | {row['n']} |"
            )
    return "\n".join(lines)


def write_study(result: StudyResult, config: dict, out_dir: str) -> None:
    """``study.json``, ``study.md``, ``study.csv``, ``study.png`` and ``curves.png`` into ``out_dir``."""
    from fedjax_clust.io.provenance import provenance

    write_json(
        os.path.join(out_dir, "study.json"),
        json_safe(
            {
                "config": config,
                "status": "completed",
                "metric": result.metric,
                "higher_is_better": result.higher_is_better,
                "confidence": result.confidence,
                "seeds": result.seeds,
                "arms": result.arms,
                "point_names": result.point_names,
                "points": result.points,
                "table": result.table,
                "paired": result.paired,
                "runs": [
                    {
                        **{k: run[k] for k in ("arm", "algorithm", "point", "seed", "status", "final", "values")},
                        **({"same_as": run["same_as"]} if run.get("same_as") else {}),
                    }
                    for run in result.runs
                ],
                "seconds": result.seconds,
                **result.timing,
                "kept_from_disk": result.kept,
                "provenance": provenance(),
            }
        ),
    )
    with open(os.path.join(out_dir, "study.md"), "w") as f:
        f.write(study_table_markdown(result) + "\n")
    _write_csv(result, os.path.join(out_dir, "study.csv"))
    plot_study(result, os.path.join(out_dir, "study.png"))
    plot_curves(result, os.path.join(out_dir, "curves.png"))


def _write_csv(result: StudyResult, path: str) -> None:
    columns = result.point_names + ["arm", "kind", "mean", "low", "high", "std", "n", "nonfinite", "wins", "ties"]
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for kind, rows in (("final", result.table), (f"minus {result.arms[0]['name']}", result.paired)):
            for row in rows:
                writer.writerow(
                    [row["point"][k] for k in result.point_names]
                    + [row["arm"], kind]
                    + [
                        "" if row.get(k) is None else row.get(k)
                        for k in ("mean", "low", "high", "std", "n", "nonfinite")
                    ]
                    + [row.get("wins", ""), row.get("ties", "")]
                )


STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _style(index: int) -> dict:
    """One colour, line style and marker per arm, so overlapping lines stay apart in print and in grey."""
    return {
        "color": f"C{index % 10}",
        "linestyle": STYLES[index % len(STYLES)],
        "marker": MARKERS[index % len(MARKERS)],
    }


def _log_metric(metric: str) -> bool:
    return metric in ("mean_sq_dist_to_optimum", "mean_loss", "mean_dist_to_optimum")


def _band(mean: np.ndarray, rows: Sequence[Mapping], positive: bool) -> tuple:
    """(low, high, cut) of the intervals in ``rows`` (the mean where there is none). A log axis (``positive``)
    cannot draw a lower bound at or below 0: such a bound is drawn at a hundredth of the mean and marked in
    ``cut`` (a bool per row), so the figure can say that its bar is shorter than the table's interval."""
    low = np.asarray([m if r["low"] is None else r["low"] for m, r in zip(mean, rows)], float)
    high = np.asarray([m if r["high"] is None else r["high"] for m, r in zip(mean, rows)], float)
    cut = np.zeros(len(low), bool)
    if positive:
        cut = ~(low > 0) & np.isfinite(mean)
        low = np.where(cut, mean / 100, low)
    return low, high, cut


def _cut_note(cut: int, where: str) -> str:
    """The figure's note on ``cut`` intervals whose lower bound a log axis cannot draw (empty when none)."""
    if not cut:
        return ""
    return f"; {cut} {where} reach 0 or below: cut at a hundredth of the mean (\u25bd)"


def plot_study(result: StudyResult, path: str, max_panels: int = 6) -> None:
    """The final metric against the first point dimension (one panel per combination of the others, the first
    ``max_panels``), one line per arm with its t interval as error bars; without point dimensions, one error
    bar per arm. Numbers on the x axis are positions (a log axis when they are positive and span a factor of
    10 or more), anything else categories; the arms sit side by side at each x so their bars do not overlap."""
    from fedjax_clust.io.figures import figure_for_file

    names = result.point_names
    x_name, others = (names[0], names[1:]) if names else (None, [])
    panels = sorted({tuple(p[k] for k in others) for p in result.points}, key=str)[:max_panels]
    cols = min(len(panels), 3)
    rows_n = -(-len(panels) // cols)
    legend_height = _legend_height(len(result.arms))
    fig, axes = figure_for_file(rows_n, cols, figsize=(5.2 * cols, 3.8 * rows_n + legend_height), squeeze=False)
    xs_all = [p[x_name] for p in result.points] if x_name is not None else []
    numeric = bool(xs_all) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs_all)
    distinct = (sorted(set(xs_all)) if numeric else sorted(set(xs_all), key=str)) if x_name is not None else [None]
    log_x = numeric and min(xs_all) > 0 and max(xs_all) >= 10 * min(xs_all)
    numeric = numeric and len(distinct) > 1  # a single value: a category
    offset = (np.arange(len(result.arms)) - (len(result.arms) - 1) / 2) / max(len(result.arms), 1)
    cut_total = 0
    for ax, panel in zip(axes.flat, panels):
        for index, arm in enumerate(result.arms):
            rows = [
                r for r in result.table if r["arm"] == arm["name"] and tuple(r["point"][k] for k in others) == panel
            ]
            if not numeric:  # categories at 0, 1, ...; the arms within +-0.25 of each
                xs = np.asarray([distinct.index(r["point"][x_name]) if x_name else 0 for r in rows], float)
                xs = xs + 0.5 * offset[index]
            elif log_x:  # a twentieth of the smallest decade apart, multiplicatively
                xs = np.asarray([r["point"][x_name] for r in rows], float) * 10 ** (0.05 * offset[index])
            else:
                step = float(np.min(np.diff(np.asarray(distinct, float))))
                xs = np.asarray([r["point"][x_name] for r in rows], float) + 0.1 * step * offset[index]
            mean = np.asarray([np.nan if r["mean"] is None else r["mean"] for r in rows])
            low, high, cut = _band(mean, rows, positive=_log_metric(result.metric))
            ax.errorbar(xs, mean, yerr=[mean - low, high - mean], capsize=3, label=arm["name"], **_style(index))
            if cut.any():  # the bar's true lower end is off the log axis: an open triangle says so
                ax.plot(xs[cut], low[cut], linestyle="none", marker="v", mfc="none", color=_style(index)["color"])
                cut_total += int(cut.sum())
        if x_name is not None:
            ax.set_xlabel(x_name)
        if log_x and numeric:
            ax.set_xscale("log")
        if not numeric:
            ax.set_xticks(range(len(distinct)), [_text(x) for x in distinct] if x_name else [""])
        if _log_metric(result.metric):
            ax.set_yscale("log")
        ax.set_ylabel(f"final {result.metric}")
        ax.set_title(", ".join(f"{k}={_text(v)}" for k, v in zip(others, panel)), fontsize=9)
        ax.grid(alpha=0.3, which="both")
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(
        f"mean over {len(result.seeds)} seeds, {result.confidence:.0%} t intervals"
        + _cut_note(cut_total, "interval(s) (study.csv has their bounds)"),
        fontsize=9,
    )
    _legend_below(fig, axes.flat[0], legend_height)
    fig.savefig(path, dpi=110)


LEGEND_COLUMNS = 4


def _legend_height(entries: int) -> float:
    """Inches below the panels for a legend of ``entries`` lines in :data:`LEGEND_COLUMNS` columns."""
    return 0.16 * -(-entries // LEGEND_COLUMNS) + 0.12


def _legend_below(fig, ax, height: float) -> None:
    """One legend for every panel, below them (``height`` inches kept free for it): with many arms a legend
    inside a panel hides the lines."""
    handles, labels = ax.get_legend_handles_labels()
    fig.tight_layout(rect=(0, height / fig.get_figheight(), 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), LEGEND_COLUMNS), fontsize=7, frameon=False)


def plot_curves(result: StudyResult, path: str, max_panels: int = 12) -> None:
    """The metric over rounds at every grid point (the first ``max_panels``), one line per arm: the mean over
    the seeds with its t interval as a band (rounds where a seed's run had stopped use the others)."""
    from fedjax_clust.io.figures import figure_for_file

    points = result.points[:max_panels]
    cols = min(len(points), 3)
    rows_n = -(-len(points) // cols)
    legend_height = _legend_height(len(result.arms))
    fig, axes = figure_for_file(rows_n, cols, figsize=(4.6 * cols, 3.4 * rows_n + legend_height), squeeze=False)
    cut_rounds = 0
    for ax, point in zip(axes.flat, points):
        for index, arm in enumerate(result.arms):
            runs = [r for r in result.runs if r["arm"] == arm["name"] and r["point"] == point]
            by_round: dict = {}
            for run in runs:
                for row in run["history"]:
                    by_round.setdefault(row["round"], []).append(row.get(result.metric))
            rounds = sorted(by_round)
            intervals = [t_interval(by_round[t], result.confidence, warn=False) for t in rounds]
            mean = np.asarray([np.nan if i.mean is None else i.mean for i in intervals])
            low, high, cut = _band(mean, [i.to_dict() for i in intervals], positive=_log_metric(result.metric))
            style = _style(index)
            ax.plot(rounds, mean, label=arm["name"], color=style["color"], linestyle=style["linestyle"])
            ax.fill_between(rounds, low, high, color=style["color"], alpha=0.15)
            if cut.any():
                ax.plot(
                    np.asarray(rounds)[cut],
                    low[cut],
                    linestyle="none",
                    marker="v",
                    mfc="none",
                    ms=4,
                    color=style["color"],
                )
                cut_rounds += int(cut.sum())
        if _log_metric(result.metric):
            ax.set_yscale("log")
        ax.set_title(_point_text(point), fontsize=9)
        ax.set_xlabel("round")
        ax.set_ylabel(result.metric)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(points) :]:
        ax.set_visible(False)
    fig.suptitle(
        f"mean over {len(result.seeds)} seeds, {result.confidence:.0%} t bands"
        + _cut_note(cut_rounds, "round interval(s)"),
        fontsize=9,
    )
    _legend_below(fig, axes.flat[0], legend_height)
    fig.savefig(path, dpi=110)
