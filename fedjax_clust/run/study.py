"""Studies: several algorithms x a grid of options x seeds, with t intervals and paired comparisons.

A study runs every algorithm as one :func:`~fedjax_clust.run.sweep.sweep` (its grid points and seeds vmapped
into as few compiled programs as fit memory) on the **same seeds**, then states, for every algorithm and grid
point, the mean final metric with its Student-t interval over the seeds, and the paired difference of every
algorithm against the first one on the same seeds (see :mod:`fedjax_clust.run.statistics` for why the pairing
is valid: a seed redraws the data, the attackers, the initial models and every round's keys, the same for
every algorithm).

**Grid points and arms.** A *grid point* is a value of every *shared* dimension: the task grid (e.g. the attackers'
share, which changes the task for everyone) and every option of ``grid`` that every algorithm of the study takes
with the same list of values (e.g. the learning rate). An option whose list is not the same for every algorithm
(one only some of them take: ``aggregator`` does not apply to Federated-Clustering, ``radius`` only to it; or one that a
:class:`~fedjax_clust.run.experiment_records.Candidate`'s own ``grid`` gives) is that algorithm's own dimension:
each of its values is an *arm* (``global[aggregator=median]``), compared with the other arms at every grid point
and recorded with its values. So "FedAvg with the median against Federated-Clustering under ALIE at 0, 10 and 20 %"
is three grid points and two arms.

**Output folder** (``out_dir``): ``study.json`` (the study's configuration, every run's final metrics, the
table of intervals and the paired comparisons), ``study.md`` and ``study.csv`` (the same table), ``study.png``
(the final metric against the first point dimension, one line per arm with its interval as error bars) and
``curves.png`` (the metric over rounds at every grid point with interval bands), and ``algorithms/NAME/``,
each algorithm's sweep folder (``sweep.json``, ``runs/RUN/`` with every run's ``run.json``,
``metrics.jsonl``, ``summary.json``; no ``sweep.png``: the study's figures draw every algorithm). The tables,
``study.json`` and the figures are written by :mod:`fedjax_clust.run.study_report`.

**Resume.** ``study.json``'s configuration is written before the first sweep; with ``resume=True`` a study into
the same folder with the same configuration keeps every algorithm whose sweep folder is complete (its
``sweep.json`` written) and resumes the others' sweeps (``sweep(..., resume=True)``: every sweep program whose
runs are on disk is kept), so a killed study recomputes at most the one sweep program that was running.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys
import warnings
from typing import Callable, Mapping, Optional, Sequence, Union

import numpy as np

from fedjax_clust.algorithms import algorithm_names, algorithm_takes
from fedjax_clust.algorithms.factory import options_per_algorithm
from fedjax_clust.core.option_groups import take_legacy, warn_deprecated_keyword
from fedjax_clust.core.validation import check_choice, check_real, check_seed
from fedjax_clust.io.jsonio import json_safe, read_json, read_json_lines, write_json
from fedjax_clust.io.run_folder import claim_outputs, config_differences
from fedjax_clust.run.driver_options import Batching, Evaluation, Output
from fedjax_clust.run.experiment_records import Candidate, TaskGrid, candidate_of, experiment_legacy
from fedjax_clust.run.statistics import (
    FEW_SEEDS,
    FewSeedsWarning,
    higher_is_better,
    paired_difference,
    t_interval,
    t_multiplier,
)
from fedjax_clust.run.study_report import (
    LEGEND_COLUMNS,  # noqa: F401 - the outputs' names are this module's too
    MARKERS,  # noqa: F401
    STYLES,  # noqa: F401
    cell_text,
    plot_curves,
    plot_study,
    point_text,
    study_table_markdown,
    write_study,
)
from fedjax_clust.run.sweep import IdenticalRunsWarning, program_seconds, resolved_run_batching, sweep
from fedjax_clust.tasks.base import Task

# the outputs (study_report.py) keep their names here too
__all__ = [
    "study",
    "StudyResult",
    "arm_name",
    "study_table_markdown",
    "STUDY_OUTPUTS",
    "write_study",
    "plot_study",
    "plot_curves",
]

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
    return f"{algorithm}[{','.join(f'{k}={cell_text(v)}' for k, v in values.items())}]"


def study(
    algorithms: Sequence[Union[str, Candidate]],
    task: Union[Task, Callable[..., Task], TaskGrid],
    *,
    rounds: int,
    seeds: Sequence[int] = (0, 1, 2),
    grid: Optional[Mapping[str, Sequence]] = None,
    options: Optional[Mapping] = None,
    confidence: float = 0.95,
    init: str = "shared",
    evaluation: Evaluation = Evaluation(),
    output: Output = Output(),
    batching: Batching = Batching(),
    **legacy,
) -> StudyResult:
    """Run every algorithm of ``algorithms`` over the grid and ``seeds`` and compare them (module docstring).

    Args:
      algorithms: registered algorithm names or :class:`~fedjax_clust.run.experiment_records.Candidate` records
        (a name with its own ``options``, ``{keyword: value}``, and ``grid``, ``{keyword: [values]}``: that
        algorithm's fixed options and dimensions), at least one, each algorithm once; the first is the reference
        of the paired comparisons.
      task: as in :func:`~fedjax_clust.run.sweep.sweep`: one task, ``seed -> Task``, or a
        :class:`~fedjax_clust.run.experiment_records.TaskGrid` (its grid shared by every algorithm, e.g.
        ``byzantine_fraction``). A task built from the seed gives every algorithm the same data and attackers on a
        seed, which the pairing needs for its data to vary with the seed.
      grid: ``{keyword of make_algorithm: [values]}`` for every algorithm that takes the keyword (a keyword no
        algorithm takes is an error).
      options: keywords of make_algorithm fixed for every algorithm that takes them (each must be taken by one).
      confidence: of the t intervals, in (0, 1).
      evaluation: every run's :class:`~fedjax_clust.run.driver_options.Evaluation`, as in
        :func:`~fedjax_clust.run.simulate.simulate`; its ``metric`` is the compared one (default: test_accuracy,
        else mean_sq_dist_to_optimum, else mean_loss; every algorithm must log it, a ValueError names the metrics
        it logs) and ``higher_better`` whether a larger one is better (default: read from its name, see
        :func:`~fedjax_clust.run.statistics.higher_is_better`), which decides the wins of the paired comparisons.
      output: the :class:`~fedjax_clust.run.driver_options.Output`: ``out_dir`` (module docstring), ``overwrite``,
        ``progress``, ``tracking`` (every algorithm's sweep tracks its runs) and ``resume`` (keep the algorithms
        whose sweep folders in ``out_dir`` are complete and every finished sweep program of the others, same
        configuration).
      batching: how every algorithm's sweep makes its programs (:class:`~fedjax_clust.run.driver_options.Batching`).
      rounds, init: as in :func:`~fedjax_clust.run.sweep.sweep`, for every algorithm's sweep.
      legacy: the keywords of 0.2, deprecated (0.3.0, with a DeprecationWarning): the records' fields as flat
        keywords (``eval_every``, ``metric``, ``higher_better``, ``out_dir``, ``resume``, ``runs_per_program``,
        ...), ``task_grid`` (now a TaskGrid), ``algorithm_grids`` / ``algorithm_options`` (now Candidate records).
    """
    task, task_grid = experiment_legacy("study", task, legacy)
    algorithms, algorithm_grids, algorithm_options = _candidates(algorithms, legacy)
    evaluation, output, batching = take_legacy(
        "study", legacy, stacklevel=3, evaluation=evaluation, output=output, batching=batching
    )
    metric, higher_better, out_dir = evaluation.metric, evaluation.higher_better, output.out_dir
    resume, overwrite, progress = output.resume, output.overwrite, output.progress
    resolved_run_batching(batching.run_batching)  # refused before the study claims its folder
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
        eval_every=evaluation.eval_every,
        init=init,
        on_nonfinite=evaluation.on_nonfinite,
        **({} if evaluation.eval_clients is None else {"eval_clients": evaluation.eval_clients}),
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
    runs_of = dict(rounds=rounds, init=init, evaluation=evaluation, output=output, batching=batching)
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
                swept = _sweep_of(name, task, plan, folder, metric, runs_of)
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


def _sweep_of(name, task, plan, folder, metric, runs_of: dict):
    """One algorithm's sweep of the study (its grid, the shared task grid and seeds) into ``folder``; ``runs_of``:
    the study's rounds, init and records, which every algorithm's sweep takes (its output's folder this one)."""
    output = runs_of["output"]
    return sweep(
        name,
        TaskGrid(task, plan["task_grid"]) if plan["task_grid"] else task,
        grid=plan["grids"][name],
        seeds=plan["seeds"],
        options=plan["options"][name],
        rounds=runs_of["rounds"],
        init=runs_of["init"],
        evaluation=dataclasses.replace(runs_of["evaluation"], metric=metric),
        # the study claimed the folder: a fresh study replaces what is there, a resumed one keeps every finished
        # program of the sweep
        output=dataclasses.replace(output, out_dir=folder, overwrite=folder is not None and not output.resume),
        batching=runs_of["batching"],
        plot=False,  # study.png and curves.png draw every algorithm
    )


def _candidates(algorithms, legacy: dict) -> tuple:
    """(names, {name: own grid}, {name: own options}) of a study's ``algorithms`` (names or Candidate records),
    with the deprecated ``algorithm_grids`` / ``algorithm_options`` of ``legacy`` (taken out of it, a
    DeprecationWarning each) put in."""
    if isinstance(algorithms, (str, Candidate)):
        algorithms = [algorithms]
    candidates = [candidate_of(a) for a in algorithms]
    names = [c.name for c in candidates]
    grids = {c.name: dict(c.grid) for c in candidates if c.grid}
    own = {c.name: dict(c.options) for c in candidates if c.options}
    for keyword, into in (("algorithm_grids", grids), ("algorithm_options", own)):
        given = legacy.pop(keyword, None)
        if given is None:
            continue
        instead = "give the algorithm as fedjax_clust.Candidate(name, options={...}, grid={...})"
        warn_deprecated_keyword("study", keyword, instead, stacklevel=3)
        for name, values in dict(given).items():
            into[name] = {**dict(values), **into.get(name, {})}
    return names, grids, own


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
    strangers = [name for name in algorithm_grids if name not in algorithms]
    if strangers:
        raise ValueError(f"algorithm_grids names {strangers[0]!r}, which is not an algorithm of the study {algorithms}")
    for key in grid:
        if not any(algorithm_takes(name, key) for name in algorithms):
            raise ValueError(f"no algorithm of the study ({', '.join(algorithms)}) takes the grid option {key!r}")
    fixed = options_per_algorithm(algorithms, options, algorithm_options, "study")
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
            f"left out), e.g. {thin[0]['arm']} at {point_text(thin[0]['point'])}: n = {thin[0]['n']}",
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
