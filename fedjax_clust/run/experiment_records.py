"""What a sweep, a study or a comparison runs, beyond one algorithm on one task: a task swept over its own
keywords (:class:`TaskGrid`), an algorithm with options of its own (:class:`Candidate`), an option whose value each run
derives from its seed and task (:class:`PerRun`).

A sweep's or a study's ``task`` is one task, ``seed -> Task``, or a :class:`TaskGrid`; a comparison's or a
study's ``algorithms`` are registered names or :class:`Candidate` records; a sweep's ``options`` values may be
:class:`PerRun`. Each replaces keywords of 0.2 (``task_grid``, ``algorithm_grids`` / ``algorithm_options``,
``run_options``), still taken for one version with a DeprecationWarning.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Optional, Sequence, Union

from fedjax_clust.core.option_groups import warn_deprecated_keyword

__all__ = ["TaskGrid", "Candidate", "PerRun", "candidate_of", "candidate_names", "experiment_legacy", "split_per_run"]


@dataclasses.dataclass(frozen=True)
class TaskGrid:
    """A task swept over its own keywords: ``build(seed, **values) -> Task`` for every combination of ``grid``'s
    values (``{keyword of the task: [values]}``, e.g. ``{"byzantine_fraction": [0, 0.1, 0.2]}``: which clients
    attack), swept with the algorithm's grid and the seeds like any other dimension, named in the run folders and
    the table."""

    build: Callable
    grid: Mapping[str, Sequence]

    def __post_init__(self):
        if not callable(self.build):
            raise ValueError(f"TaskGrid.build must be a function (seed, **values) -> Task, got {self.build!r}")
        if not isinstance(self.grid, Mapping):
            raise ValueError(f"TaskGrid.grid must be a mapping {{keyword: [values]}}, got {self.grid!r}")
        object.__setattr__(self, "grid", dict(self.grid))


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One candidate algorithm of a comparison or a study, with options of its own: ``name`` (a registered algorithm),
    ``options`` (``{keyword of make_algorithm: value}``, on top of the options shared by every algorithm) and, in
    a study, ``grid`` (``{keyword: [values]}``, dimensions of this algorithm only)."""

    name: str
    options: Mapping = dataclasses.field(default_factory=dict)
    grid: Mapping[str, Sequence] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise ValueError(f"Candidate.name must be a registered algorithm's name, got {self.name!r}")
        for what in ("options", "grid"):
            if not isinstance(getattr(self, what), Mapping):
                raise ValueError(f"Candidate.{what} must be a mapping, got {getattr(self, what)!r}")
            object.__setattr__(self, what, dict(getattr(self, what)))


@dataclasses.dataclass(frozen=True)
class PerRun:
    """An option whose value each run of a sweep derives: ``function(seed, task)`` (the run's seed and its task),
    an array traced per run (e.g. IFCA's ``init_cluster_params`` drawn from the seed)."""

    function: Callable

    def __post_init__(self):
        if not callable(self.function):
            raise ValueError(f"PerRun needs a function (seed, task) -> value, got {self.function!r}")


def candidate_of(algorithm: Union[str, Candidate]) -> Candidate:
    """``algorithm`` as a :class:`Candidate` (a name: no options of its own)."""
    if isinstance(algorithm, Candidate):
        return algorithm
    if isinstance(algorithm, str):
        return Candidate(algorithm)
    raise ValueError(f"an algorithm is a registered name or a Candidate, got {algorithm!r}")


def candidate_names(algorithms: Sequence[Union[str, Candidate]]) -> list:
    """The algorithms' names, in order."""
    return [candidate_of(a).name for a in algorithms]


def experiment_legacy(function: str, task, legacy: dict) -> tuple:
    """(task, task grid) of a sweep or a study (``function``) given ``task`` and its ``**legacy`` (from which the
    deprecated ``task_grid`` is taken out, with a DeprecationWarning): a :class:`TaskGrid` is unpacked into its
    builder and grid."""
    task_grid = legacy.pop("task_grid", None)
    if task_grid is not None:
        instead = "give task=fedjax_clust.TaskGrid(build, {keyword: [values]})"
        warn_deprecated_keyword(function, "task_grid", instead, stacklevel=3)
        if isinstance(task, TaskGrid):
            raise ValueError("give the task's grid in its TaskGrid or as task_grid=..., not both")
    if isinstance(task, TaskGrid):
        return task.build, task.grid
    return task, task_grid


def split_per_run(options: Optional[Mapping], run_options: Optional[Callable] = None) -> tuple:
    """(the fixed options, ``(seed, task) -> {keyword: value}`` of the :class:`PerRun` ones and of the deprecated
    ``run_options``, or None when there are none) of a sweep's ``options``."""
    options = dict(options or {})
    per_run = {k: v for k, v in options.items() if isinstance(v, PerRun)}
    fixed = {k: v for k, v in options.items() if k not in per_run}
    if not per_run and run_options is None:
        return fixed, None

    def derived(seed, task) -> dict:
        out = dict(run_options(seed, task)) if run_options is not None else {}
        out.update({k: v.function(seed, task) for k, v in per_run.items()})
        return out

    return fixed, derived
