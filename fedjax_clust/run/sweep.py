"""Many runs in one compiled program: a sweep over seeds and hyperparameters, batched over the runs.

A sweep is the product of a grid of hyperparameter values and a list of seeds. Hyperparameters that enter
the computation as numbers (learning rate, momentum, the radius or quantile of the radius rule, alpha,
lambda, ...) are *traced*: the algorithm is built inside the program with them as traced scalars, so all
runs that differ only in them (and in the seed, hence in their keys, initial models and, with a task per
seed, their data) run as one program: one compilation, one launch per stretch of rounds for all of them.
Values that decide shapes or loop structure (clustering steps, batch size, subgroups, local steps, K,
strings) are *static*: each combination of them is its own program. Which is which is read from the builders'
type hints (:mod:`fedjax_clust.core.hyperparameter_kinds`, the algorithm's hyperparameter record
:mod:`fedjax_clust.algorithms.hyperparameter_record`): floats are traced unless marked ``Static``, the rest
(integers included) static. Which clients attack is an argument of the program (the task's masks), and so is
the kind of attack they send where the program maps its runs (:mod:`fedjax_clust.robust.attack_switch`: one
program switches over the swept message attacks), and so are an attack's numbers: attacks made with
``make_attack`` that differ only in their scale, ALIE's z, IPM's epsilon, ... are one program per kind
(:meth:`~fedjax_clust.robust.registry.Attack.kind`), their numbers float32 arguments. Runs are split into programs of at
most ``runs_per_program`` (default: as many as fit a quarter of the device's total memory, estimated from
the compiled single-run round, so the split depends on the config and the device kind only), the rest of the
memory story of :mod:`fedjax_clust.parallel.memory`.

The runs of a program share one round counter (``state.round`` is not vmapped, :data:`RUN_AXES`): they all
start at round 0 and advance together, so a stage keyed on the round (SR-FCA's ONE_SHOT and RECLUSTER /
MERGE, Three-stage's Stage II, FedSoft's re-estimation, Momentum-Clustering's k-means++ seeding) stays a
``lax.cond`` that runs once in the program, where a batched counter would make it a ``select`` that runs both
branches in every round of every run. Conds keyed on the data (an aggregate group no run fills, a CFL split
no run makes) skip through :func:`fedjax_clust.core.control.skip_cond`. Tested: the vmapped round has the
conds of one run's round (a mapped round is one run's round).

How a program computes its runs (``run_batching``): "vmap" batches them (``jax.vmap``: one kernel over every
run's block), "map" runs them one after another inside the program (:func:`map_runs`, ``lax.map``: each run's
kernels are the single run's; still one compilation and one launch per stretch). "auto" picks "map" on a CPU:
XLA:CPU runs the batched matmul of a vmapped per-client gradient (the runs' axis beside each client's block)
as a library call per client, so a vmapped sweep of 4 runs of Global took over twice the 4 runs apart and the
mapped one about as long (``bench --model privacy``, ``bench --model srfca``: the ``sweep`` rows, whose measured
ratios the privacy guide's generated table gives), and "vmap" on
an accelerator. A mapped program keeps every lax.cond of the single run, those keyed on the data included.

Every run computes what :func:`fedjax_clust.run.simulate` computes for its configuration (same keys, same
initial models, same evaluation schedule; tested), writes the same three files in its own folder
``OUT/runs/NAME/`` (``run.json``, ``metrics.jsonl``, ``summary.json``), and stops the same way when its
models go non-finite (``on_nonfinite="stop"``: its history ends at that evaluation and its status says
so; the other runs of the program go on). The sweep writes ``OUT/sweep.json`` (one row per run: its
values, seed, status and final metrics, and a table of the mean and spread over seeds of each
configuration) and ``OUT/sweep.png`` (the final metric against the first swept hyperparameter, mean and
min/max over seeds).

**Resume.** Each program's runs are written to ``OUT/runs/`` as soon as the program finishes; ``sweep.json``
and the plot at the end. With ``resume=True`` a sweep into the same folder keeps every program whose runs are
all on disk (each run's ``run.json`` must hold this sweep's configuration of that run, else ValueError: the
folder is another sweep's) and runs the others, so a killed sweep recomputes at most the program that was
running. A kept run's :class:`~fedjax_clust.run.simulate.RunResult` is read from its folder: its history and
summary as written (non-finite values are null there) and ``state=None`` (the final models are not stored).

Two documented differences from a run-by-run loop: a traced momentum keeps a momentum buffer even at
beta = 0 (the steps are the same numbers), and the quantile rule's rank k = floor((N - 1) q) + 1 is
computed in float32 from a traced q (float64 from a Python q), which can differ only when (N - 1) q lies
within 1e-4 below an integer.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import sys
import time
import warnings
from typing import Callable, Mapping, NamedTuple, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.algorithms import (
    algorithm_names,
    make_algorithm,
    static_hyperparameters,
    traced_hyperparameters,
)
from fedjax_clust.algorithms.settings import grouped_settings
from fedjax_clust.core.host_rows import row_leaves, with_row_leaves
from fedjax_clust.core.keys import init_key
from fedjax_clust.core.state import ClientParams, ClientState
from fedjax_clust.core.validation import check_choice, check_int, check_seed
from fedjax_clust.io.jsonio import json_safe, write_json
from fedjax_clust.io.run_folder import RUN_FILE, claim_outputs
from fedjax_clust.parallel.determinism import warn_if_nondeterministic_gpu
from fedjax_clust.parallel.memory import default_memory_budget
from fedjax_clust.robust.attack_switch import AttackSwitch, switchable_attacks
from fedjax_clust.robust.attacks import make_attack
from fedjax_clust.robust.registry import Attack
from fedjax_clust.run.advice import EvaluationCost, RunAdvice, ended_worse, scheduled_evaluations, warn_if_mostly_noise
from fedjax_clust.run.callbacks import NonFiniteGuard, ProgressBar, Trackers
from fedjax_clust.run.fused import consuming_step, fuse_rounds
from fedjax_clust.run.loop import INITS, ON_NONFINITE, Loop, LoopOptions, close_callbacks, run_loop  # noqa: F401 - public here too
from fedjax_clust.run.records import counted_clients, evaluation_row, run_config, run_summary, run_timing, stop_status
from fedjax_clust.run.simulate import RunResult, evaluate_state, evaluation_sampler, initial_params
from fedjax_clust.run.streaming import evaluation_sample
from fedjax_clust.run.timing import CompileClock
from fedjax_clust.tasks.base import Task

__all__ = [
    "sweep",
    "SweepResult",
    "static_hparams",
    "traced_hparams",
    "expand_grid",
    "run_name",
    "sweep_program",
    "SweepProgram",
    "map_runs",
    "identical_runs",
    "resolved_run_batching",
    "RUN_BATCHING",
    "RUN_AXES",
    "PROGRAM_SECONDS",
    "program_seconds",
]


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


OUTPUTS = ("sweep.json", "sweep.png", "runs", "config.toml")


@dataclasses.dataclass
class SweepResult:
    """``runs``: one :class:`~fedjax_clust.run.simulate.RunResult` per run (in grid order, seeds innermost; a run
    a resumed sweep kept from disk has ``state=None``); ``table``: per configuration the mean / min / max over
    seeds of ``metric`` at the last round; ``programs``: per compiled program its runs, its seconds
    (:data:`PROGRAM_SECONDS`: wall, rounds, evaluations, compiling; see :mod:`fedjax_clust.run.timing`) and
    ``batching`` (seconds and batching None and ``"kept": True`` for one a resumed sweep read from disk);
    ``seconds``: the wall seconds of the whole sweep run now."""

    algorithm: str
    metric: str
    runs: list
    table: list
    programs: list
    seconds: float


# what sweep.json records of each program, and in total (program_seconds), from its runs' shared timing
PROGRAM_SECONDS = {
    "seconds": "wall_seconds",
    "round_seconds": "round_seconds",
    "evaluation_seconds": "evaluation_seconds",
    "compile_seconds": "compile_seconds",
    "compiled_programs": "compiled_programs",
}


def program_seconds(programs: Sequence[Mapping]) -> dict:
    """The sums of :data:`PROGRAM_SECONDS` over ``programs`` (a sweep's, or several sweeps' of a study) that ran
    in this process (kept ones have None): ``{"round_seconds": ..., "evaluation_seconds": ...,
    "compile_seconds": ..., "compiled_programs": ...}`` (the last counts XLA's compilations, a program's
    init, rounds and evaluation each one or more)."""
    keys = [k for k in PROGRAM_SECONDS if k != "seconds"]
    return {k: sum(p[k] for p in programs if p.get(k) is not None) for k in keys}


def expand_grid(grid: Mapping[str, Sequence], seeds: Sequence[int]) -> list:
    """[(values dict, seed)] for every combination, in the grid's order with seeds innermost."""
    names = list(grid)
    combos = itertools.product(*(list(grid[n]) for n in names)) if names else [()]
    return [(dict(zip(names, combo)), seed) for combo in combos for seed in seeds]


def run_name(values: Mapping, seed: int) -> str:
    """A folder name for one run, e.g. ``learning_rate=0.01,seed=2``."""
    parts = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items()]
    return ",".join(parts + [f"seed={seed}"]).replace("/", "_")


def _is_number(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _stack(trees):
    return jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *trees)


def _default_metric(row: dict) -> str:
    for name in ("test_accuracy", "mean_sq_dist_to_optimum", "mean_loss"):
        if name in row:
            return name
    return next(k for k in row if k != "round")


def sweep(
    algorithm: str,
    task: Union[Task, Callable[..., Task]],
    *,
    grid: Mapping[str, Sequence],
    task_grid: Optional[Mapping[str, Sequence]] = None,
    seeds: Sequence[int] = (0,),
    rounds: int,
    eval_every: int = 10,
    options: Optional[Mapping] = None,
    run_options: Optional[Callable[[int, Task], Mapping]] = None,
    init: str = "shared",
    on_nonfinite: str = "stop",
    out_dir: Optional[str] = None,
    overwrite: bool = False,
    progress: bool = True,
    runs_per_program: Union[int, str, None] = "auto",
    metric: Optional[str] = None,
    tracking=None,
    resume: bool = False,
    plot: bool = True,
    run_batching: str = "auto",
    eval_clients: Optional[int] = None,
    attack_switch: Union[bool, str] = "auto",
) -> SweepResult:
    """Run ``algorithm`` for every combination of ``grid`` values and every seed; see the module docstring.

    Args:
      algorithm: a registered algorithm's name (:func:`fedjax_clust.algorithms.algorithm_names`).
      task: one task for all runs, or ``seed -> Task`` (the task built from each run's seed; its arrays
        are then vmapped too and must have the same shapes for every seed); with ``task_grid``
        ``(seed, **task_values) -> Task``.
      grid: ``{keyword of make_algorithm: [values]}``, e.g. ``{"learning_rate": [0.001, 0.01]}``.
      task_grid: ``{keyword of task: [values]}``, values that change the task rather than the algorithm,
        e.g. ``{"byzantine_fraction": [0, 0.1, 0.2]}`` (which clients attack), swept with ``grid`` and the
        seeds like any other dimension, named in the run folders and the table. Each value is a static
        dimension (its own program) except the attackers' share (:data:`BYZANTINE_KEYS`): which clients attack
        is an argument of the program (:meth:`~fedjax_clust.tasks.base.Task.masks`).
      seeds: run seeds (PRNG of the run, and of the task when ``task`` is a function).
      options: keywords of :func:`fedjax_clust.make_algorithm` shared by every run.
      run_options: ``(seed, task) -> {keyword: array}``, options that depend on the run's seed and task
        (e.g. IFCA's ``init_cluster_params``); they are traced per run.
      runs_per_program: the most runs one compiled program holds: an integer, None (all), or "auto".
      metric: the metric of the table and the plot (default: test_accuracy, else
        mean_sq_dist_to_optimum, else mean_loss).
      tracking: a :class:`fedjax_clust.io.tracking.Tracking`: every run is tracked as its own run named
        ``ALGORITHM/RUN`` (its folder's name, e.g. ``federated-clustering/learning_rate=0.01,seed=0``), with
        its configuration and its swept values, logged at each evaluation as the program runs; W&B runs are
        grouped as one sweep (``sweep-ALGORITHM-TASK-OUTFOLDER`` unless the tracking names a group).
      resume: keep the programs whose runs are all in ``out_dir/runs`` (written by this same sweep, checked run
        by run) and run the others (see the module docstring); nothing on disk: every program runs.
      plot: draw ``out_dir/sweep.png`` (a study leaves it out: its own figures draw every algorithm).
      run_batching: how a program computes its runs: "vmap" batched together, "map" one after another inside
        the program, "auto" (default) "map" on a CPU and "vmap" on an accelerator
        (:func:`resolved_run_batching`); recorded in ``programs``. The two agree to float32 rounding.
      eval_clients: K, each evaluation covers K clients drawn per run by its seed and the round, the sample
        :func:`simulate` with ``eval_clients=K`` draws (so each run equals that run); recorded in ``run.json``.
      attack_switch: whether runs that differ in their attack (``grid["attack"]``: registered message attacks)
        share one program switching over the kinds (:mod:`fedjax_clust.robust.attack_switch`): "auto" (default)
        where the program maps its runs (a CPU's default: the switch runs one kind), True also where it vmaps
        them (then every kind's messages are computed in every round), False never (a program per kind).
      rounds, eval_every, init, on_nonfinite, out_dir, overwrite, progress: as in :func:`simulate`.
    """
    check_choice("algorithm", algorithm, algorithm_names())
    loop_options = LoopOptions(
        rounds, eval_every, init, on_nonfinite, out_dir, overwrite, progress, tracking, eval_clients
    ).checked()
    seeds, runs_per_program, batching = _checked_runs(seeds, runs_per_program, run_batching)
    grid, task_grid, options = _checked_grids(task, grid, task_grid, options)
    out_dir = loop_options.out_dir
    _check_resume(resume, overwrite, out_dir)
    if out_dir is not None and not resume:
        claim_outputs(out_dir, OUTPUTS, overwrite)

    full_grid = {**task_grid, **grid}
    runs = expand_grid(full_grid, seeds)
    concrete = _concrete_runs(algorithm, task, runs, task_grid, options, run_options)
    traced_names = [n for n in grid if n in traced_hparams(algorithm) and all(_is_number(v) for v in grid[n])]
    kinds = _attack_kinds(grid, batching, attack_switch)
    same_as = identical_runs(concrete)  # run -> the run computed for it
    chunks = _program_chunks(concrete, full_grid, traced_names, runs_per_program, batching, same_as, kinds)
    loop_options = _grouped(loop_options, algorithm, concrete[0][4].name)
    warn_if_nondeterministic_gpu()  # once per process, on a GPU without the deterministic-ops flag
    _check_runs(concrete, eval_clients)
    start = time.perf_counter()
    results: list = [None] * len(runs)
    built: Optional[dict] = (
        None if isinstance(task, Task) else {}
    )  # a task per seed: built whole per program (_program_inputs)
    programs: list = []
    for number, chunk in enumerate(chunks, start=1):
        if resume and out_dir is not None and _keep_program(out_dir, concrete, chunk, loop_options, results):
            programs.append({"runs": len(chunk), **dict.fromkeys(PROGRAM_SECONDS), "kept": True, "batching": None})
            if loop_options.progress:
                print(f"{algorithm}: program {number} of {len(chunks)} kept from {out_dir}", file=sys.stderr)
            continue
        try:
            timing = _run_program(
                algorithm,
                [concrete[i] for i in chunk],
                traced_names,
                list(task_grid),
                options,
                built,
                loop_options,
                out=results,
                slots=chunk,
                batching=batching,
                kinds=kinds,
            )
        except KeyboardInterrupt:
            finished = sum(p["runs"] for p in programs)
            raise KeyboardInterrupt(
                f"sweep interrupted in program {number} of {len(chunks)} ({finished} of "
                f"{len(runs)} runs had finished); {_what_was_written(out_dir, finished)}"
            ) from None
        if out_dir is not None:
            _write_runs(out_dir, [results[i] for i in chunk], [concrete[i] for i in chunk], loop_options)
        seconds = {key: timing[field] for key, field in PROGRAM_SECONDS.items()}
        programs.append({"runs": len(chunk), **seconds, "batching": batching})
    _fill_identical(results, concrete, same_as, out_dir, loop_options)
    total = time.perf_counter() - start
    _warn_ended_worse(algorithm, results, concrete)
    metric = metric or _default_metric(results[0].history[-1])
    sweep_result = SweepResult(algorithm, metric, results, _table(full_grid, seeds, results, metric), programs, total)
    if out_dir is not None:
        _write(
            sweep_result,
            out_dir,
            full_grid,
            seeds,
            concrete,
            rounds=loop_options.rounds,
            eval_every=loop_options.eval_every,
            task_names=list(task_grid),
            plot=plot,
        )
    return sweep_result


def _grouped(loop_options: LoopOptions, algorithm: str, task_name: str) -> LoopOptions:
    """``loop_options`` with its tracking grouped as W&B's group of this sweep's runs: the algorithm, the task and
    the output folder (two sweeps into two folders are two groups)."""
    if loop_options.tracking is None:
        return loop_options
    out_dir = loop_options.out_dir
    group = "-".join(
        ["sweep", algorithm, task_name] + ([os.path.basename(os.path.normpath(out_dir))] if out_dir else [])
    )
    return dataclasses.replace(loop_options, tracking=loop_options.tracking.with_group(group))


def _check_runs(concrete, eval_clients) -> None:
    """Every run's own checks before anything runs: its private noise (a sweep over dp_noise / dp_epsilon warns
    per noise, :func:`~fedjax_clust.run.advice.warn_if_mostly_noise`) and the sample ``eval_clients`` draws from
    its task (ValueError where :func:`~fedjax_clust.run.simulate.evaluation_sampler` refuses it)."""
    for _, seed, _, run_algorithm, run_task in concrete:
        warn_if_mostly_noise(run_algorithm, run_task)
        evaluation_sampler(run_algorithm, run_task, seed, eval_clients, None)


def _warn_ended_worse(algorithm: str, results, concrete) -> None:
    """One :class:`~fedjax_clust.run.advice.RunAdvice` naming the runs of this sweep (kept ones aside) whose
    headline metric ended worse than at round 0 (:func:`~fedjax_clust.run.advice.ended_worse`)."""
    worse = [
        (run_name(values, seed), message)
        for result, (values, seed, _, _, _) in zip(results, concrete)
        if result.state is not None and result.summary["status"] == "completed"
        for message in [ended_worse(result.history)]
        if message
    ]
    if worse:
        shown = "; ".join(f"{name}: {message}" for name, message in worse[:3])
        more = f"; and {len(worse) - 3} more" if len(worse) > 3 else ""
        warnings.warn(
            f"{algorithm}: {len(worse)} of {len(results)} runs ended worse than they started ({shown}{more})",
            RunAdvice,
            stacklevel=3,
        )


def _checked_runs(seeds, runs_per_program, run_batching) -> tuple:
    """(seeds, runs_per_program, the resolved run batching) of a sweep, ValueError on a bad one."""
    seeds = [check_seed(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be a non-empty list of distinct seeds, got {list(seeds)}")
    if runs_per_program not in (None, "auto"):
        runs_per_program = check_int("runs_per_program", runs_per_program)
    return seeds, runs_per_program, resolved_run_batching(run_batching)


def _check_resume(resume: bool, overwrite: bool, out_dir) -> None:
    if resume and overwrite:
        raise ValueError("resume and overwrite contradict each other: resume keeps the sweep's finished programs")
    if resume and out_dir is None:
        raise ValueError("resume needs out_dir (the folder of the sweep to continue)")


def _checked_grids(task, grid: Mapping, task_grid: Optional[Mapping], options: Optional[Mapping]) -> tuple:
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
    return grid, task_grid, options


def _concrete_runs(algorithm: str, task, runs: list, task_grid: Mapping, options: Mapping, run_options) -> list:
    """Every run as (values, seed, its run_options, its algorithm, its task): each task built once per task
    point and seed (two task points that build the same task are refused), each algorithm built, so every value
    is validated before anything compiles.

    A task of leaves that build their rows (a pooled population, :mod:`fedjax_clust.data.pooled`) is built whole
    once when it is one task for every run; a task per seed stays an index here and is built whole for the
    program that runs it (:func:`_program_inputs`), so a sweep over seeds holds the images of the runs in flight,
    not of every seed."""
    if isinstance(task, Task):
        task = task.resident()  # one copy, shared by every run
    task_of = task if callable(task) and not isinstance(task, Task) else (lambda seed, t=task: t)
    tasks = {}  # (task values, seed) -> Task
    for values, seed in runs:
        key = _task_key(values, task_grid, seed)
        if key not in tasks:
            tasks[key] = task_of(seed, **{n: values[n] for n in task_grid})
    _refuse_identical_tasks(tasks, task_grid)
    concrete = []
    for values, seed in runs:
        run_task = tasks[_task_key(values, task_grid, seed)]
        extra = dict(run_options(seed, run_task)) if run_options else {}
        grid_values = {n: v for n, v in values.items() if n not in task_grid}
        algo = make_algorithm(algorithm, run_task, **grouped_settings({**options, **grid_values, **extra}))
        concrete.append((values, seed, extra, algo, run_task))
    _warn_moot_attacks(concrete, task_grid)
    return concrete


def _attack_kinds(grid: Mapping, batching: str, attack_switch: Union[bool, str]) -> tuple:
    """The attack kinds of ``grid["attack"]`` whose runs share a switching program (() for none)."""
    if not isinstance(attack_switch, bool) and attack_switch != "auto":
        raise ValueError(f"attack_switch must be True, False or 'auto', got {attack_switch!r}")
    if attack_switch is False or "attack" not in grid:
        return ()
    return switchable_attacks(grid["attack"], "map" if attack_switch is True else batching)


def _program_chunks(
    concrete: list, full_grid: Mapping, traced_names: list, runs_per_program, batching: str, skip=None, kinds=()
) -> list:
    """The runs of each compiled program (indices into ``concrete``). A program is built from its first run's
    task: runs whose static values differ, or whose tasks differ in what is not a vmapped array (which clients
    attack or are outliers at all, the true clusters, the arrays' shapes), are separate programs, each
    split into chunks of at most ``runs_per_program`` runs. Which clients attack or are outliers is a
    per-run argument (:meth:`~fedjax_clust.tasks.base.Task.masks`), and the task values that choose them only
    (:data:`BYZANTINE_KEYS`) are no static values: a sweep over the attackers' share and seeds is one program
    per static combination. So is the attack's kind among ``kinds`` (:func:`_attack_kinds`): those runs share
    one switching program. Runs in ``skip`` (identical to another run) are left out."""
    groups: dict = {}
    for i, (values, _, _, _, run_task) in enumerate(concrete):
        if skip and i in skip:  # a run identical to another (identical_runs): computed once, as that one
            continue
        static_key = tuple(
            (n, _static_label(n, values[n], kinds))
            for n in full_grid
            if n not in traced_names and n not in BYZANTINE_KEYS
        ) + _task_masks(run_task)
        groups.setdefault(static_key, []).append(i)
    chunks: list = []
    for indices in groups.values():
        first_algo, first_task = concrete[indices[0]][3], concrete[indices[0]][4]
        size = _runs_per_program(runs_per_program, first_algo, first_task, len(indices), batching)
        chunks.extend(indices[lo : lo + size] for lo in range(0, len(indices), size))
    return chunks


BYZANTINE_KEYS = ("byzantine_fraction", "byzantine_per_cluster")


def _static_label(name: str, value, kinds: tuple) -> str:
    """What of a swept ``value`` decides its program: an attack among the switched ``kinds`` none (one switching
    program), an attack with numbers its kind (:meth:`~fedjax_clust.robust.registry.Attack.kind`: the numbers are
    arguments), anything else itself."""
    if name == "attack" and value in kinds:
        return "switch"
    numbered = _numbered_attack(value) if name == "attack" else None
    if numbered is not None:
        return repr(numbered.kind())
    return repr(value)


def _numbered_attack(value) -> Optional[Attack]:
    """``value`` as an attack when it has numbers (scale, z, epsilon, ...) a program takes as arguments: an attack
    from ``make_attack``, or a name written with its options (``"ipm(epsilon=5.0)"``, the command line's)."""
    if isinstance(value, str) and "(" in value:
        value = make_attack(value)
    return value if isinstance(value, Attack) and value.numbers() else None


def _attack_numbers(value) -> dict:
    """The numbers of an attack of a numbered kind (:func:`_numbered_attack`)."""
    attack = _numbered_attack(value)
    return {} if attack is None else attack.numbers()


def _refuse_identical_tasks(tasks: Mapping, task_grid: Mapping) -> None:
    """ValueError when two task-grid points build the same task for a seed: the attackers' share is rounded per
    cluster (``round(beta x cluster size)``), so two fractions can mark the same clients, and their rows would
    be one run under two labels. Tasks are the same when their points differ in the Byzantine share only and
    their Byzantine masks and configurations (the share aside) are equal."""
    seen: dict = {}
    for key, task in tasks.items():
        *point, seed = key
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


class IdenticalRunsWarning(UserWarning):
    """Two grid points of a sweep are the same run (computed once, :func:`identical_runs`; information)."""


def _warn_moot_attacks(concrete: list, task_grid: Mapping) -> None:
    """:class:`IdenticalRunsWarning` when the grid lists several attacks and a task point marks no attacker
    (``byzantine_fraction=0``, the attack-free baseline of an attack x beta grid): nobody sends an attack there,
    so the attacks' runs at that point are identical (computed once, :func:`identical_runs`; every grid point keeps
    its row and folder); the warning says so once per sweep."""
    attacks = list(dict.fromkeys(repr(values["attack"]) for values, *_ in concrete if "attack" in values))
    if len(attacks) < 2:
        return
    free = []
    for values, _, _, _, run_task in concrete:
        point = ", ".join(f"{n}={values[n]}" for n in task_grid) or "every grid point"
        if (run_task.byzantine is None or not np.any(run_task.byzantine)) and point not in free:
            free.append(point)
    if free:
        warnings.warn(
            f"no client attacks at {' and '.join(free)}: the {len(attacks)} attacks give identical runs there "
            "(computed once; each keeps its own row and folder, its summary naming the run it is: same_as)",
            IdenticalRunsWarning,
            stacklevel=4,
        )


def identical_runs(concrete: list) -> dict:
    """``{run: the earlier run it is identical to}`` among ``concrete`` (values, seed, extra, algorithm, task):
    two runs are the same run when they have the same seed, the same task and the same hyperparameters as the
    algorithms record them (``hparams``: options that round to the same value are equal there), an attack
    counting for nothing where the task marks no attacker (the attack-free point of an attack x beta grid:
    nobody sends an attack). Such a run is computed once; every grid point keeps its own row and folder, its
    summary naming the run it is (``same_as``)."""
    first: dict = {}
    same_as = {}
    for i, (values, seed, extra, algo, run_task) in enumerate(concrete):
        recorded = {**algo.hparams, **algo.execution.report(), "matmul_precision": algo.matmul_precision}
        moot = ("attack",) if run_task.byzantine is None or not np.any(run_task.byzantine) else ()
        # a grid value the record does not hold keeps its run apart (the task's values: the task itself)
        unrecorded = sorted((n, repr(v)) for n, v in values.items() if n not in recorded and n not in moot)
        recorded = {k: v for k, v in recorded.items() if k not in moot}
        identity = (seed, id(run_task), algo.name, repr(json_safe(recorded)), repr(json_safe(extra)), repr(unrecorded))
        if identity in first:
            same_as[i] = first[identity]
        else:
            first[identity] = i
    return same_as


def _fill_identical(results: list, concrete: list, same_as: Mapping, out_dir, loop_options: LoopOptions) -> None:
    """Each identical run's result (:func:`identical_runs`): the run it is, under its own values and hyperparameters
    (``same_as`` names that run), written to its own folder."""
    for i, j in same_as.items():
        values, seed, _, algo, run_task = concrete[i]
        computed = results[j]
        summary = {
            **computed.summary,
            "sweep_values": json_safe(dict(values)),
            "hparams": json_safe({**algo.hparams, **algo.execution.report()}),
            "same_as": run_name(concrete[j][0], concrete[j][1]),
        }
        results[i] = RunResult(algo.name, run_task.name, computed.history, computed.state, summary)
    indices = list(same_as)
    if out_dir is not None and indices:
        for i in indices:  # a folder of another sweep's run of that name is refused, as for a computed run
            _check_folder_holds(out_dir, concrete[i], loop_options)
        _write_runs(out_dir, [results[i] for i in indices], [concrete[i] for i in indices], loop_options)
    if loop_options.tracking is not None and indices:  # each one tracked as its own run, as computed ones are
        names = [f"{concrete[i][3].name}/{run_name(concrete[i][0], concrete[i][1])}" for i in indices]
        configs = [_tracked_config(concrete[i], loop_options, same_as=results[i].summary["same_as"]) for i in indices]
        trackers = Trackers(loop_options.tracking, list(zip(names, configs)))
        try:
            for i, per_run in zip(indices, trackers.per_run):
                for row in results[i].history:
                    for tracker in per_run:
                        tracker.log(row["round"], row)
        finally:
            trackers.close()


def _tracked_config(member, loop_options: LoopOptions, **extra) -> dict:
    """The configuration a run's trackers get: its run folder's (:func:`_run_folder_config`), its swept values
    (and ``extra``)."""
    return {**_run_folder_config(member, loop_options), "sweep_values": json_safe(dict(member[0])), **extra}


def _check_folder_holds(out_dir: str, member, loop_options: LoopOptions) -> None:
    """ValueError when ``out_dir/runs/NAME`` holds a finished run of another configuration than ``member``'s."""
    from fedjax_clust.io.jsonio import read_json
    from fedjax_clust.io.run_folder import check_same_run

    folder = os.path.join(out_dir, "runs", run_name(member[0], member[1]))
    if os.path.exists(os.path.join(folder, RUN_FILE)):
        saved = read_json(os.path.join(folder, RUN_FILE))
        check_same_run(
            {"config": saved.get("config"), "rounds": saved.get("rounds")},
            {"config": _run_folder_config(member, loop_options), "rounds": loop_options.rounds},
            folder,
        )


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


def _task_key(values: Mapping, task_grid: Mapping, seed: int) -> tuple:
    return tuple((n, repr(values[n])) for n in task_grid) + (seed,)


def _task_masks(task: Task) -> tuple:
    """What a program fixes of its task beyond its arguments, for a grouping key: whether it has Byzantine and
    outlier masks (the masks themselves are arguments, :meth:`~fedjax_clust.tasks.base.Task.masks`, so runs that
    differ only in which clients attack share a program) and the true clusters (as bytes: Ground-truth's groups
    and the cluster tracking are built from them)."""
    true_clusters = None if task.true_clusters is None else np.asarray(task.true_clusters).tobytes()
    return (task.byzantine is None, task.outliers is None, true_clusters, _array_shapes(task))


def _array_shapes(task: Task) -> tuple:
    """The structure, shapes and dtypes of a task's arrays (:meth:`~fedjax_clust.tasks.base.Task.arrays`): seeds
    whose tasks differ in them (a partition whose largest client depends on the seed, a ragged batch's buckets)
    cannot share a program, which takes its runs' arrays stacked."""
    leaves, structure = jax.tree_util.tree_flatten(task.arrays())
    return (str(structure), tuple((tuple(np.shape(x)), str(getattr(x, "dtype", type(x).__name__))) for x in leaves))


# How a program's state is vmapped over its runs: every leaf has a leading run axis except the round counter,
# which all runs share (they start at round 0 and advance together). An unbatched round keeps every
# ``lax.cond`` keyed on it a ``cond`` under vmap: a batched predicate would turn it into a ``select`` that
# runs both branches every round (SR-FCA's ONE_SHOT and RECLUSTER/MERGE, Three-stage's Stage II, FedSoft's
# importance re-estimation).
RUN_AXES = ClientState(**{field: None if field == "round" else 0 for field in ClientState._fields})


def run_slice(state: ClientState, r: int) -> ClientState:
    """Run ``r``'s state out of a program's state (leaves [runs, ...], the round counter shared)."""
    return jax.tree.map(lambda x: x[r], state._replace(round=None))._replace(round=state.round)


def _runs_per_program(setting, algo, task, num_runs, batching: str = "vmap"):
    """The runs one program may hold: the setting, or with "auto" the budget over one run's compiled bytes (a
    mapped program holds one run's temporaries at a time, and every run's state twice: in and out)."""
    if setting is None:
        return num_runs
    if setting != "auto":
        return setting
    budget = default_memory_budget()
    arrays = [x for x in jax.tree.leaves((task.data, task.test_data)) if hasattr(x, "nbytes")]
    state = jax.eval_shape(lambda: algo.init(task.init_params(jax.random.PRNGKey(0)), task.num_clients))
    rough = sum(x.nbytes for x in arrays) + sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
    if num_runs * 16 * rough <= budget and not algo.execution.budgeted:
        # far below the budget (16x the run's arrays and state) and no temporaries sized by a budget of the
        # algorithm's own (Federated-Clustering's cross-gradient chunks): no need to compile to know
        return num_runs
    try:  # compiled from shapes: nothing allocated, and a pooled population's images need not be built
        data = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), task.data)
        compiled = jax.jit(algo.round).lower(state, data, jax.random.PRNGKey(0)).compile()
        stats = compiled.memory_analysis()
        if stats is None:
            return num_runs
        temporaries = stats.temp_size_in_bytes
        per_run = temporaries + stats.argument_size_in_bytes + stats.output_size_in_bytes
    except Exception:  # no memory analysis on this backend: one program
        return num_runs
    if batching == "map":  # one run's temporaries at a time
        per_run -= temporaries
        budget -= temporaries
    return max(1, min(num_runs, int(budget // max(per_run, 1))))


class SweepProgram(NamedTuple):
    """The jitted, vmapped functions of one program, each over runs (hyperparameters ``hp`` {name: [runs]},
    task ``arrays``, per-run ``extra`` options, states with :data:`RUN_AXES`):

    * ``init(hp, arrays, extra, params, keys) -> state`` (initial ``params`` [runs, ...], each run's
      :func:`~fedjax_clust.core.keys.init_key`);
    * ``rounds(hp, arrays, extra, state, round_keys, first, count) -> (state, metrics)``: rounds ``first`` ..
      ``first + count - 1`` of every run, fused (:func:`fedjax_clust.run.fused.fuse_rounds`), consuming the
      ``state`` passed (donated: :func:`fedjax_clust.run.fused.consuming_step`);
    * ``evaluate(hp, arrays, extra, state) -> (metrics, finite)``;
    * ``evaluate_clients(hp, arrays, extra, state, clients, honest) -> (metrics, finite)``: the same over each
      run's sample of clients (int [runs, K]) with their honest mask (bool [runs, K]), a sampled evaluation
      (``eval_clients``) as :func:`~fedjax_clust.run.streaming.evaluate_in_chunks` computes one run's.
    """

    init: Callable
    rounds: Callable
    evaluate: Callable
    evaluate_clients: Optional[Callable] = None


RUN_BATCHING = ("auto", "vmap", "map")


def _leaf_axes(axes, tree) -> list:
    """The mapped axis (0, or None: shared) of every leaf of ``tree``, from ``axes``, a prefix of it as
    ``jax.vmap``'s ``in_axes`` / ``out_axes`` are."""
    shared = -1  # None itself is an empty subtree: a stand-in while the axes are spread over the leaves
    spread = jax.tree.map(
        lambda ax, sub: jax.tree.map(lambda _: shared if ax is None else ax, sub),
        axes,
        tree,
        is_leaf=lambda x: x is None,
    )
    leaves = [None if ax == shared else ax for ax in jax.tree.leaves(spread)]
    if any(ax not in (0, None) for ax in leaves):
        raise ValueError(f"map_runs maps axis 0 or shares (None), got axes {axes!r}")
    return leaves


def map_runs(fn: Callable, in_axes, out_axes) -> Callable:
    """``jax.vmap(fn, in_axes, out_axes)`` (axes 0 or None only) computed one run after another inside one
    program (``lax.map`` over the leading axis): every run's computation is the single run's, with the same
    kernels; an output whose axis is None must be the same for every run (the shared round counter) and is
    taken from the first."""

    def mapped(*args):
        flat, treedef = jax.tree.flatten(args)
        at = [i for i, ax in enumerate(_leaf_axes(in_axes, args)) if ax == 0]

        def one(slices):
            whole = list(flat)
            for i, x in zip(at, slices):
                whole[i] = x
            return fn(*jax.tree.unflatten(treedef, whole))

        outs = jax.lax.map(one, [flat[i] for i in at])
        leaves, out_def = jax.tree.flatten(outs)
        axes = _leaf_axes(out_axes, outs)
        return jax.tree.unflatten(out_def, [x if ax == 0 else x[0] for x, ax in zip(leaves, axes)])

    return mapped


def resolved_run_batching(batching: str) -> str:
    """``batching`` with "auto" resolved: "map" on a CPU backend, where XLA runs a batched matmul of small
    per-client blocks (the runs' axis of a vmapped per-client gradient) as one library call per client and a
    vmapped sweep of Global took about 2.3x the time of its runs one after another (``bench --model privacy``'s
    sweep row); "vmap" on an accelerator."""
    check_choice("run_batching", batching, RUN_BATCHING)
    if batching != "auto":
        return batching
    return "map" if jax.default_backend() == "cpu" else "vmap"


def sweep_program(
    algorithm: str,
    base_task: Task,
    options: Mapping,
    static_values: Mapping,
    arrays_axis: Optional[int] = None,
    batching: str = "vmap",
    attack_kinds: tuple = (),
    attack_template: Optional[Attack] = None,
) -> SweepProgram:
    """The vmapped program of ``algorithm`` on ``base_task``'s shapes: ``options`` and ``static_values`` are
    shared keywords of :func:`fedjax_clust.make_algorithm`, the traced ``hp`` and ``extra`` per run;
    ``arrays_axis`` 0 when every run has its own task arrays (a task per seed), None when they share them.
    ``batching`` "vmap" batches the runs' computations together (``jax.vmap``), "map" runs them one after
    another in the same program (:func:`map_runs`; "auto": :func:`resolved_run_batching`). With
    ``attack_kinds`` (registered attack names) ``hp["attack"]`` is each run's index into them: its attackers send
    that kind's messages (:class:`~fedjax_clust.robust.attack_switch.AttackSwitch`). With ``attack_template`` (an
    attack with numbers) ``hp["attack_numbers"]`` are each run's numbers of that attack's kind
    (:meth:`~fedjax_clust.robust.registry.Attack.with_numbers`)."""
    batch = jax.vmap if resolved_run_batching(batching) == "vmap" else map_runs
    kinds = tuple(make_attack(name) for name in attack_kinds)

    def build(hp, arrays, extra):
        task_r = base_task.with_arrays(arrays)
        if kinds:
            hp = {**hp, "attack": AttackSwitch(kinds, hp["attack"])}
        if attack_template is not None:
            hp = dict(hp)
            hp["attack"] = attack_template.with_numbers(hp.pop("attack_numbers"))
        algo = make_algorithm(algorithm, task_r, **grouped_settings({**options, **static_values, **hp, **extra}))
        return algo, task_r

    def init_one(hp, arrays, extra, params, key):
        algo, _ = build(hp, arrays, extra)
        return algo.start(params, base_task.num_clients, key)

    def rounds_one(hp, arrays, extra, state, round_key, first, count):
        algo, task_r = build(hp, arrays, extra)
        return fuse_rounds(algo.round, jit=False)(state, task_r.data, round_key, first, count)

    def evaluate_one(hp, arrays, extra, state):
        return evaluate_state(*build(hp, arrays, extra), state)

    def evaluate_clients_one(hp, arrays, extra, state, clients, honest):
        algo, _ = build(hp, arrays, extra)
        leaves, treedef = row_leaves(state)
        block = with_row_leaves(state, [jnp.take(x, clients, axis=0) for x in leaves], treedef)
        sample = jax.tree.map(lambda x: jnp.take(x, clients, axis=0), arrays)
        return evaluate_state(algo, base_task.with_arrays(sample), block, honest)

    axes = (0, arrays_axis, 0)
    return SweepProgram(
        jax.jit(batch(init_one, in_axes=axes + (0, 0), out_axes=RUN_AXES)),
        jax.jit(batch(rounds_one, in_axes=axes + (RUN_AXES, 0, None, None), out_axes=(RUN_AXES, 0)), donate_argnums=3),
        jax.jit(batch(evaluate_one, in_axes=axes + (RUN_AXES,), out_axes=0)),
        jax.jit(batch(evaluate_clients_one, in_axes=axes + (RUN_AXES, 0, 0), out_axes=0)),
    )


def _run_program(
    algorithm,
    members,
    traced_names,
    task_names,
    options,
    built,
    loop_options: LoopOptions,
    *,
    out,
    slots,
    batching,
    kinds=(),
):
    """Run ``members`` (concrete (values, seed, extra, algo, task)) as one program, batched by ``batching`` (their
    tasks share every static value); fill ``out[slots]``; with ``loop_options.tracking`` log every run's
    evaluations to its own trackers; with their attack among ``kinds`` one program switches over those kinds.
    Returns the program's timing (:func:`~fedjax_clust.run.records.run_timing`)."""
    rounds, eval_every, init, on_nonfinite = (
        loop_options.rounds,
        loop_options.eval_every,
        loop_options.init,
        loop_options.on_nonfinite,
    )
    first_values, _, _, _, base_task = members[0]
    num_runs = len(members)
    counted_each = [counted_clients(m[4]) for m in members]  # each run's honest clients: its own attackers
    switched = kinds if first_values.get("attack") in kinds else ()
    template = None if switched else _numbered_attack(first_values.get("attack"))
    fixed = [*traced_names, *task_names, *(["attack"] if switched or template is not None else [])]
    static_values = {n: v for n, v in first_values.items() if n not in fixed}
    traced, extra, arrays, arrays_axis, round_keys, starts = _program_inputs(members, traced_names, built, init)
    if switched:  # each run's index into the kinds, an int32 argument
        traced["attack"] = jnp.asarray([switched.index(m[0]["attack"]) for m in members], jnp.int32)
    if template is not None:  # each run's attack numbers (its scale, z, epsilon, ...), float32 arguments
        traced["attack_numbers"] = {
            k: jnp.asarray([_attack_numbers(m[0]["attack"])[k] for m in members], jnp.float32)
            for k in template.numbers()
        }
    program = sweep_program(algorithm, base_task, options, static_values, arrays_axis, batching, switched, template)
    init_all, rounds_all = program.init, program.rounds
    sample_size = loop_options.eval_clients

    def evaluate_rows(t, state, round_metrics):
        if sample_size is None:
            metrics, finite = jax.device_get(program.evaluate(traced, arrays, extra, state))
            counted = counted_each
        else:  # each run's own sample, drawn as simulate draws it (by the run's seed and the round)
            samples = [evaluation_sample(seed, t, base_task.num_clients, sample_size) for _, seed, *_ in members]
            honest = [
                np.ones(sample_size, bool) if m[4].honest is None else np.asarray(m[4].honest, bool)[c]
                for m, c in zip(members, samples)
            ]
            metrics, finite = jax.device_get(
                program.evaluate_clients(
                    traced, arrays, extra, state, jnp.asarray(np.stack(samples)), jnp.asarray(np.stack(honest))
                )
            )
            counted = [int(h.sum()) for h in honest]
        round_metrics = jax.device_get(round_metrics)
        return [
            evaluation_row(
                t,
                {k: v[r] for k, v in metrics.items()},
                {k: v[r] for k, v in round_metrics.items()},
                int(finite[r]),
                counted[r],
                run_task.true_clusters,
                run_task.honest,
                run_algorithm.execution.privacy,
            )
            for r, (_, _, _, run_algorithm, run_task) in enumerate(members)
        ]

    names = [f"{algorithm}/{run_name(values, seed)}" for values, seed, _, _, _ in members]
    configs = [_tracked_config(member, loop_options) for member in members]
    trackers = Trackers(loop_options.tracking, list(zip(names, configs)))  # every run tracked as its own run
    callbacks = [
        ProgressBar(rounds, _program_description(algorithm, members), enabled=loop_options.progress),
        trackers,
        NonFiniteGuard(on_nonfinite, [sample_size or n for n in counted_each], names),
        EvaluationCost(base_task.num_clients, scheduled_evaluations(1, rounds, eval_every), sample_size is not None),
    ]
    start = time.perf_counter()  # after the trackers opened: a W&B start is not the program's time
    with CompileClock() as clock:
        try:
            loop = Loop(init_all(traced, arrays, extra, *starts), num_runs=num_runs)
        except BaseException:
            close_callbacks(callbacks)
            raise
        step = consuming_step(rounds_all, before=(traced, arrays, extra), after=(round_keys,), keep=starts)
        run_loop(
            loop,
            step,
            evaluate_rows,
            rounds=rounds,
            eval_every=eval_every,
            callbacks=callbacks,
            evaluate_on_interrupt=False,
        )
    timing = run_timing(loop, started=start, clock=clock, runs=num_runs)
    _program_results(loop, members, loop_options, timing, out, slots, batching)
    return timing


def _program_description(algorithm: str, members) -> str:
    """The progress line's name of a program: its algorithm, runs and which (the first and last run's values and
    seeds), e.g. ``global x4 runs (learning_rate=0.01,seed=0 .. learning_rate=0.02,seed=1)``."""
    names = [run_name(values, seed) for values, seed, _, _, _ in members]
    which = names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"
    return f"{algorithm} x{len(names)} run{'s' if len(names) > 1 else ''} ({which})"


def _program_inputs(members, traced_names, built: Optional[dict], init: str) -> tuple:
    """A program's vmapped inputs: its traced hyperparameters [runs], the runs' own options, the task arrays
    (stacked per run when each seed has its task, with their vmap axis), every run's round key and its
    (start, init_key). ``built`` (None: one task shared by every run) maps a task's ``id`` to the task built
    whole (:meth:`~fedjax_clust.tasks.base.Task.resident`): the members' tasks are added, the others dropped."""
    traced = {n: jnp.asarray([m[0][n] for m in members], jnp.float32) for n in traced_names}
    extra = _stack([m[2] for m in members]) if members[0][2] else {}
    if built is not None:  # each run's task built whole here, kept while the programs that follow share it
        held = {id(m[4]) for m in members}
        for gone in [k for k in built if k not in held]:
            del built[gone]  # an earlier program's tasks, released
        for m in members:
            if id(m[4]) not in built:
                built[id(m[4])] = m[4].resident()
        arrays, arrays_axis = _stack([{**built[id(m[4])].arrays(), **m[4].masks()} for m in members]), 0
    else:
        arrays, arrays_axis = {**members[0][4].arrays(), **members[0][4].masks()}, None
    keys = [jax.random.PRNGKey(m[1]) for m in members]
    round_keys = jnp.stack([jax.random.fold_in(k, 1) for k in keys])
    init_keys = jnp.stack([init_key(k) for k in keys])
    each = [initial_params(m[4], init, jax.random.fold_in(k, 0)) for m, k in zip(members, keys)]
    if isinstance(each[0], ClientParams):
        starts = ClientParams(_stack([s.stacked for s in each]))
    else:
        starts = _stack(each)
    return traced, extra, arrays, arrays_axis, round_keys, (starts, init_keys)


def _program_results(loop: Loop, members, loop_options: LoopOptions, timing: dict, out, slots, batching: str) -> None:
    """Every run's :class:`RunResult` (its rows, its slice of the state, its summary) into ``out[slots]``."""
    num_runs = len(members)
    for r, (values, seed, _, algo, run_task) in enumerate(members):
        status, more = stop_status(loop.stopped[r])
        timing = {**timing, "runs_in_program": num_runs, "run_batching": batching}
        summary = run_summary(
            algo,
            run_task,
            loop.histories[r],
            rounds=loop_options.rounds,
            seed=seed,
            status=status,
            init=loop_options.init,
            on_nonfinite=loop_options.on_nonfinite,
            timing=timing,
            extra={"sweep_values": values, **_sampled(loop_options)},
            **more,
        )
        out[slots[r]] = RunResult(algo.name, run_task.name, loop.histories[r], run_slice(loop.state, r), summary)


def _table(grid, seeds, results, metric):
    rows, per_config = [], len(seeds)
    for i in range(0, len(results), per_config):
        group = results[i : i + per_config]
        finals = [r.history[-1].get(metric) if r.summary["status"] == "completed" else None for r in group]
        values = [v for v in finals if v is not None and math.isfinite(v)]
        rows.append(
            {
                **group[0].summary["sweep_values"],
                "seeds": list(seeds),
                metric + "_per_seed": finals,
                "mean": float(np.mean(values)) if len(values) == len(finals) else None,
                "min": min(values) if values else None,
                "max": max(values) if values else None,
                "completed": sum(r.summary["status"] == "completed" for r in group),
            }
        )
    return rows


def _run_folder_config(member, loop_options: LoopOptions) -> dict:
    """What a run's ``run.json`` records of its configuration (and a resumed sweep compares)."""
    values, seed, _, algo, run_task = member
    return run_config(
        algo,
        run_task,
        seed=seed,
        eval_every=loop_options.eval_every,
        init=loop_options.init,
        on_nonfinite=loop_options.on_nonfinite,
        extra=_sampled(loop_options) or None,
    )


def _sampled(loop_options: LoopOptions) -> dict:
    """What a run's configuration records of a sampled evaluation: ``{"eval_clients": K}`` ({} for none), as
    :func:`~fedjax_clust.run.simulate.simulate` records it."""
    return {} if loop_options.eval_clients is None else {"eval_clients": loop_options.eval_clients}


def _write_runs(out_dir: str, runs: Sequence[RunResult], members, loop_options: LoopOptions) -> None:
    """Each run's folder ``out_dir/runs/NAME``: ``metrics.jsonl``, ``summary.json``, then ``run.json`` (written
    last: a folder with a ``run.json`` holds a finished run)."""
    from fedjax_clust.io.provenance import provenance
    from fedjax_clust.run.simulate import write_results

    made_by = provenance()  # the command, version, commit and machine, in every file as in a run's
    for run, member in zip(runs, members):
        folder = os.path.join(out_dir, "runs", run_name(member[0], member[1]))
        if os.path.exists(os.path.join(folder, RUN_FILE)):
            os.remove(os.path.join(folder, RUN_FILE))
        write_results(run, folder)
        write_json(
            os.path.join(folder, RUN_FILE),
            {
                "config": _run_folder_config(member, loop_options),
                "rounds": loop_options.rounds,
                "status": run.summary["status"],
                **({"same_as": run.summary["same_as"]} if run.summary.get("same_as") else {}),
                "provenance": made_by,
            },
        )


def _what_was_written(out_dir: Optional[str], finished: int) -> str:
    """What an interrupted sweep leaves on disk, for its one-line message."""
    if out_dir is None:
        return "no results"
    if finished:
        return f"their folders are in {os.path.join(out_dir, 'runs')}; resume (--resume) keeps them"
    return f"nothing was written to {out_dir}"


def _keep_program(out_dir: str, concrete: list, chunk: list, loop_options: LoopOptions, results: list) -> bool:
    """Whether every run of the program ``chunk`` is on disk; if so its runs are read into ``results``."""
    kept = _kept_runs(out_dir, [concrete[i] for i in chunk], loop_options)
    if kept is None:
        return False
    for slot, run in zip(chunk, kept):
        results[slot] = run
    return True


def _kept_runs(out_dir: str, members, loop_options: LoopOptions) -> Optional[list]:
    """The runs of one program read back from ``out_dir/runs`` when every one of them is there (None when one is
    missing); ValueError when a folder holds another configuration than this sweep's run of that name."""
    from fedjax_clust.io.jsonio import read_json, read_json_lines

    kept = []
    for member in members:
        values, seed, _, algo, run_task = member
        folder = os.path.join(out_dir, "runs", run_name(values, seed))
        if not os.path.exists(os.path.join(folder, RUN_FILE)):
            return None
        _check_folder_holds(out_dir, member, loop_options)
        history = read_json_lines(os.path.join(folder, "metrics.jsonl"))
        kept.append(RunResult(algo.name, run_task.name, history, None, read_json(os.path.join(folder, "summary.json"))))
    return kept


def _write(result, out_dir, grid, seeds, concrete, *, rounds, eval_every, task_names=(), plot=True):
    from fedjax_clust.io.provenance import provenance

    made_by = provenance()  # the command, version, commit and machine, as in every run's folder
    write_json(
        os.path.join(out_dir, "sweep.json"),
        json_safe(
            {
                "algorithm": result.algorithm,
                "metric": result.metric,
                "grid": {n: v for n, v in grid.items() if n not in task_names},
                "task_grid": {n: v for n, v in grid.items() if n in task_names},
                "seeds": list(seeds),
                "rounds": rounds,
                "eval_every": eval_every,
                "seconds": result.seconds,
                **program_seconds(result.programs),
                "programs": result.programs,
                "table": result.table,
                "runs": [
                    {
                        "name": run_name(v, s),
                        "values": v,
                        "seed": s,
                        "status": r.summary["status"],
                        "final": {k: x for k, x in r.history[-1].items() if k != "round"},
                        **({"same_as": r.summary["same_as"]} if r.summary.get("same_as") else {}),
                    }
                    for r, (v, s, _, _, _) in zip(result.runs, concrete)
                ],
                "provenance": made_by,
            }
        ),
    )
    if plot:
        plot_sweep(result, grid, os.path.join(out_dir, "sweep.png"))


def plot_sweep(result: SweepResult, grid: Mapping[str, Sequence], path: str) -> None:
    """The final metric against the first swept dimension (a task dimension such as the Byzantine fraction
    comes first, then the hyperparameters; mean over seeds, min-max band), one line per combination of the
    others; log x axis for positive values."""
    from fedjax_clust.io.figures import figure_for_file

    names = list(grid)
    fig, ax = figure_for_file(figsize=(6, 4))
    if not names:
        ax.bar(["seeds"], [result.table[0]["mean"] or np.nan])
    else:
        x_name, others = names[0], names[1:]
        lines = {}
        for row in result.table:
            lines.setdefault(tuple(row[n] for n in others), []).append(row)
        for key, rows in lines.items():
            xs = [r[x_name] for r in rows]
            mean = [np.nan if r["mean"] is None else r["mean"] for r in rows]
            lo = [np.nan if r["min"] is None else r["min"] for r in rows]
            hi = [np.nan if r["max"] is None else r["max"] for r in rows]
            label = ", ".join(f"{n}={v}" for n, v in zip(others, key)) or result.algorithm
            ax.plot(xs, mean, marker="o", label=label)
            ax.fill_between(xs, lo, hi, alpha=0.2)
        if all(_is_number(v) and v > 0 for v in grid[x_name]):
            ax.set_xscale("log")
        ax.set_xlabel(x_name)
        ax.legend(fontsize=7)
    if result.metric in ("mean_sq_dist_to_optimum", "mean_loss", "mean_dist_to_optimum"):
        ax.set_yscale("log")
    ax.set_ylabel(f"final {result.metric}")
    ax.set_title(f"{result.algorithm}: {len(result.runs)} runs, {len(result.programs)} program(s)")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def print_table(result: SweepResult) -> str:
    """The sweep's table as text, one line per configuration."""
    lines = []
    for row in result.table:
        values = ", ".join(
            f"{k}={v}"
            for k, v in row.items()
            if k not in ("seeds", "mean", "min", "max", "completed") and not k.endswith("_per_seed")
        )
        mean = "diverged" if row["mean"] is None else f"{row['mean']:.4g}"
        lines.append(
            f"{values or result.algorithm}: {result.metric} {mean} (min {row['min']}, max {row['max']}, "
            f"{row['completed']}/{len(row['seeds'])} completed)"
        )
    return "\n".join(lines)
