"""Which runs a sweep holds: its grid expanded into grid points (:class:`GridPoint`), each point and seed made a
:class:`ConcreteRun` (its task and algorithm built, so every value is checked before anything compiles), the
runs' folder names (:func:`run_name`), the checks of the grids and the runs, and the runs that are one run under
two labels (:func:`identical_runs`, :class:`IdenticalRunsWarning`)."""

from __future__ import annotations

import itertools
import warnings
from typing import Any, Mapping, NamedTuple, Optional, Sequence, Union

import numpy as np

from fedjax_clust.algorithms import make_algorithm, static_hyperparameters, traced_hyperparameters
from fedjax_clust.algorithms.settings import grouped_settings
from fedjax_clust.core.validation import check_int, check_seed
from fedjax_clust.io.jsonio import json_safe
from fedjax_clust.run.advice import warn_if_mostly_noise
from fedjax_clust.run.simulate import evaluation_sampler
from fedjax_clust.run.sweep.program import resolved_run_batching
from fedjax_clust.tasks.base import Task


def traced_hparams(algorithm: str) -> tuple:
    """The hyperparameters a sweep of ``algorithm`` may trace (where every value of the grid is a number):
    :func:`~fedjax_clust.algorithms.hyperparameter_record.traced_hyperparameters`. A grid name outside them (a
    plugin builder's positional parameter, say) is static."""
    return traced_hyperparameters(algorithm)


def static_hparams(algorithm: str) -> tuple:
    """The hyperparameters of ``algorithm`` a sweep never traces: its hyperparameter record's static fields
    (:func:`~fedjax_clust.algorithms.hyperparameter_record.static_hyperparameters`: read from the builders'
    type hints) and the seed."""
    return static_hyperparameters(algorithm)


# the task values that choose which clients attack only: arguments of a program, not static values
BYZANTINE_KEYS = ("byzantine_fraction", "byzantine_per_cluster")


class GridPoint(NamedTuple):
    """One run of a grid (:func:`expand_grid`): its ``values`` ``{name: value}`` (task and algorithm values
    alike) and its ``seed``."""

    values: dict
    seed: int


class ConcreteRun(NamedTuple):
    """One run of a sweep, built (:func:`concrete_runs`): its grid ``values`` and ``seed``, its ``run_options``
    (``run_options(seed, task)``'s keywords, traced per run; {} for none), its ``algorithm`` (a built
    :class:`~fedjax_clust.core.algorithm.FederatedAlgorithm`) and its ``task``."""

    values: dict
    seed: int
    run_options: dict
    algorithm: Any
    task: Any


class TaskKey(NamedTuple):
    """Which task a run takes (:func:`_task_key`): its task-grid ``point`` ((name, repr(value)) per task-grid
    name) and its ``seed``."""

    point: tuple
    seed: int


class CheckedRuns(NamedTuple):
    """A sweep's run settings, checked (:func:`checked_runs`)."""

    seeds: list
    runs_per_program: Union[int, str, None]
    batching: str


class CheckedGrids(NamedTuple):
    """A sweep's grids and shared options, checked (:func:`checked_grids`)."""

    grid: dict
    task_grid: dict
    options: dict


def expand_grid(grid: Mapping[str, Sequence], seeds: Sequence[int]) -> list:
    """[(values dict, seed)] for every combination, in the grid's order with seeds innermost (each a
    :class:`GridPoint`)."""
    names = list(grid)
    combos = itertools.product(*(list(grid[n]) for n in names)) if names else [()]
    return [GridPoint(dict(zip(names, combo)), seed) for combo in combos for seed in seeds]


def run_name(values: Mapping, seed: int) -> str:
    """A folder name for one run, e.g. ``learning_rate=0.01,seed=2``."""
    parts = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items()]
    return ",".join(parts + [f"seed={seed}"]).replace("/", "_")


def is_number(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def checked_runs(seeds, runs_per_program, run_batching) -> CheckedRuns:
    """(seeds, runs_per_program, the resolved run batching) of a sweep, ValueError on a bad one."""
    seeds = [check_seed(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be a non-empty list of distinct seeds, got {list(seeds)}")
    if runs_per_program not in (None, "auto"):
        runs_per_program = check_int("runs_per_program", runs_per_program)
    return CheckedRuns(seeds, runs_per_program, resolved_run_batching(run_batching))


def checked_grids(task, grid: Mapping, task_grid: Optional[Mapping], options: Optional[Mapping]) -> CheckedGrids:
    """(grid, task_grid, options) as lists and a dict, ValueError on an empty or repeated value, a name in two
    of them, or a task grid without a task function."""
    grid = {name: list(values) for name, values in grid.items()}
    task_grid = {name: list(values) for name, values in (task_grid or {}).items()}
    if task_grid and (isinstance(task, Task) or not callable(task)):
        raise ValueError("task_grid needs task as a function (seed, **task_values) -> Task")
    both = set(task_grid) & set(grid)
    if both:
        raise ValueError(f"{sorted(both)} given both in grid and in task_grid")
    for name, values in {**task_grid, **grid}.items():
        if not values:
            raise ValueError(f"grid[{name!r}] must list at least one value")
        if len({run_name({name: v}, 0) for v in values}) != len(values):
            raise ValueError(f"grid[{name!r}] lists a value twice: {values} (each run needs its own folder)")
    options = dict(options or {})
    overlap = set(options) & set(grid)
    if overlap:
        raise ValueError(f"{sorted(overlap)} given both in grid and in options")
    return CheckedGrids(grid, task_grid, options)


def check_runs(concrete: Sequence[ConcreteRun], eval_clients) -> None:
    """Every run's own checks before anything runs: its private noise (a sweep over dp_noise / dp_epsilon warns
    per noise, :func:`~fedjax_clust.run.advice.warn_if_mostly_noise`) and the sample ``eval_clients`` draws from
    its task (ValueError where :func:`~fedjax_clust.run.simulate.evaluation_sampler` refuses it)."""
    for run in concrete:
        warn_if_mostly_noise(run.algorithm, run.task)
        evaluation_sampler(run.algorithm, run.task, run.seed, eval_clients, None)


def concrete_runs(
    algorithm: str, task, runs: Sequence[GridPoint], task_grid: Mapping, options: Mapping, run_options
) -> list:
    """Every run as a :class:`ConcreteRun` (values, seed, its run_options, its algorithm, its task): each task
    built once per task point and seed (two task points that build the same task are refused), each algorithm
    built, so every value is validated before anything compiles.

    A task of leaves that build their rows (a pooled population, :mod:`fedjax_clust.data.pooled`) is built whole
    once when it is one task for every run; a task per seed stays an index here and is built whole for the
    program that runs it (:func:`~fedjax_clust.run.sweep.execute._program_inputs`), so a sweep over seeds holds
    the images of the runs in flight, not of every seed."""
    if isinstance(task, Task):
        task = task.resident()  # one copy, shared by every run
    task_of = task if callable(task) and not isinstance(task, Task) else (lambda seed, t=task: t)
    tasks = {}  # TaskKey -> Task
    for point in runs:
        key = _task_key(point.values, task_grid, point.seed)
        if key not in tasks:
            tasks[key] = task_of(point.seed, **{n: point.values[n] for n in task_grid})
    _refuse_identical_tasks(tasks, task_grid)
    concrete = []
    for point in runs:
        run_task = tasks[_task_key(point.values, task_grid, point.seed)]
        extra = dict(run_options(point.seed, run_task)) if run_options else {}
        grid_values = {n: v for n, v in point.values.items() if n not in task_grid}
        algo = make_algorithm(algorithm, run_task, **grouped_settings({**options, **grid_values, **extra}))
        concrete.append(ConcreteRun(point.values, point.seed, extra, algo, run_task))
    _warn_moot_attacks(concrete, task_grid)
    return concrete


def _task_key(values: Mapping, task_grid: Mapping, seed: int) -> TaskKey:
    return TaskKey(tuple((n, repr(values[n])) for n in task_grid), seed)


def _refuse_identical_tasks(tasks: Mapping[TaskKey, Task], task_grid: Mapping) -> None:
    """ValueError when two task-grid points build the same task for a seed: the attackers' share is rounded per
    cluster (``round(beta x cluster size)``), so two fractions can mark the same clients, and their rows would
    be one run under two labels. Tasks are the same when their points differ in the Byzantine share only and
    their Byzantine masks and configurations (the share aside) are equal."""
    seen: dict = {}
    for key, task in tasks.items():
        point, seed = key.point, key.seed
        mask = None if task.byzantine is None else np.asarray(task.byzantine, bool)
        config = repr(sorted((k, repr(v)) for k, v in task.config.items() if k not in BYZANTINE_KEYS))
        others = tuple((n, v) for n, v in point if n not in BYZANTINE_KEYS)  # a task value besides the share
        identity = (seed, b"" if mask is None or not mask.any() else mask.tobytes(), config, others)
        if identity in seen and seen[identity] != point:
            first, second = (", ".join(f"{n}={v}" for n, v in p) for p in (seen[identity], point))
            raise ValueError(
                f"task_grid points {first} and {second} give the same task for seed {seed}: "
                f"{_attackers(task)}; their runs would be identical (the share is rounded per "
                "cluster: round(beta x cluster size)); drop one value, or sweep byzantine_per_cluster"
            )
        seen.setdefault(identity, point)


def _attackers(task) -> str:
    if task.byzantine is None or not np.any(task.byzantine):
        return "both mark no Byzantine client"
    total = int(np.sum(task.byzantine))
    if task.true_clusters is None:
        return f"both mark {total} Byzantine clients of {task.num_clients}"
    clusters = np.asarray(task.true_clusters)
    per = {(int(np.sum(task.byzantine[clusters == k])), int(np.sum(clusters == k))) for k in np.unique(clusters)}
    each = ", ".join(f"{a} of {n}" for a, n in sorted(per))
    return f"both mark {total} Byzantine clients ({each} per cluster)"


class IdenticalRunsWarning(UserWarning):
    """Two grid points of a sweep are the same run (computed once, :func:`identical_runs`; information)."""


def _warn_moot_attacks(concrete: Sequence[ConcreteRun], task_grid: Mapping) -> None:
    """:class:`IdenticalRunsWarning` when the grid lists several attacks and a task point marks no attacker
    (``byzantine_fraction=0``, the attack-free baseline of an attack x beta grid): nobody sends an attack there,
    so the attacks' runs at that point are identical (computed once, :func:`identical_runs`; every grid point keeps
    its row and folder); the warning says so once per sweep."""
    attacks = list(dict.fromkeys(repr(run.values["attack"]) for run in concrete if "attack" in run.values))
    if len(attacks) < 2:
        return
    free = []
    for run in concrete:
        point = ", ".join(f"{n}={run.values[n]}" for n in task_grid) or "every grid point"
        if (run.task.byzantine is None or not np.any(run.task.byzantine)) and point not in free:
            free.append(point)
    if free:
        warnings.warn(
            f"no client attacks at {' and '.join(free)}: the {len(attacks)} attacks give identical runs there "
            "(computed once; each keeps its own row and folder, its summary naming the run it is: same_as)",
            IdenticalRunsWarning,
            stacklevel=4,
        )


def identical_runs(concrete: list) -> dict:
    """``{run: the earlier run it is identical to}`` among ``concrete`` (values, seed, extra, algorithm, task:
    :class:`ConcreteRun`): two runs are the same run when they have the same seed, the same task and the same
    hyperparameters as the algorithms record them (``hparams``: options that round to the same value are equal
    there), an attack counting for nothing where the task marks no attacker (the attack-free point of an attack x
    beta grid: nobody sends an attack). Such a run is computed once; every grid point keeps its own row and
    folder, its summary naming the run it is (``same_as``)."""
    first: dict = {}
    same_as = {}
    for i, run in enumerate(map(ConcreteRun._make, concrete)):  # a plain 5-tuple reads as its record
        algo, run_task = run.algorithm, run.task
        recorded = {**algo.hparams, **algo.execution.report(), "matmul_precision": algo.matmul_precision}
        moot = ("attack",) if run_task.byzantine is None or not np.any(run_task.byzantine) else ()
        # a grid value the record does not hold keeps its run apart (the task's values: the task itself)
        unrecorded = sorted((n, repr(v)) for n, v in run.values.items() if n not in recorded and n not in moot)
        recorded = {k: v for k, v in recorded.items() if k not in moot}
        identity = (
            run.seed,
            id(run_task),
            algo.name,
            repr(json_safe(recorded)),
            repr(json_safe(run.run_options)),
            repr(unrecorded),
        )
        if identity in first:
            same_as[i] = first[identity]
        else:
            first[identity] = i
    return same_as
