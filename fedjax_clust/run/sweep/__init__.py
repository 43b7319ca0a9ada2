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

**The package.** :func:`sweep` (here) drives the parts: :mod:`~fedjax_clust.run.sweep.grid` expands the grid
into its runs (:class:`~fedjax_clust.run.sweep.grid.ConcreteRun`) and checks them,
:mod:`~fedjax_clust.run.sweep.plan` groups them into programs, :mod:`~fedjax_clust.run.sweep.program` compiles
one program (:func:`sweep_program`, :func:`map_runs`), :mod:`~fedjax_clust.run.sweep.execute` runs it, and
:mod:`~fedjax_clust.run.sweep.output` holds the :class:`SweepResult`, its table and plot, and the folders it
writes and a resumed sweep reads back. Their public names are names of this package too.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Callable, Mapping, Optional, Sequence, Union

from fedjax_clust.algorithms import algorithm_names
from fedjax_clust.core.option_groups import take_legacy, warn_deprecated_keyword
from fedjax_clust.core.validation import check_choice
from fedjax_clust.io.run_folder import claim_outputs
from fedjax_clust.parallel.determinism import warn_if_nondeterministic_gpu
from fedjax_clust.run.driver_options import Batching, Evaluation, Output
from fedjax_clust.run.experiment_records import TaskGrid, experiment_legacy, split_per_run
from fedjax_clust.run.loop import INITS, ON_NONFINITE, Loop, LoopOptions, close_callbacks, run_loop  # noqa: F401 - public here too
from fedjax_clust.run.sweep.execute import run_program
from fedjax_clust.run.sweep.grid import (
    BYZANTINE_KEYS,  # noqa: F401 - public here too
    ConcreteRun,  # noqa: F401 - public here too
    GridPoint,  # noqa: F401 - public here too
    IdenticalRunsWarning,  # noqa: F401 - public here too
    check_runs,
    checked_grids,
    checked_runs,
    concrete_runs,
    expand_grid,
    identical_runs,
    is_number,
    run_name,
    static_hparams,
    traced_hparams,
)
from fedjax_clust.run.sweep.output import (
    OUTPUTS,
    PROGRAM_SECONDS,
    SweepResult,
    check_resume,
    default_metric,
    fill_identical,
    keep_program,
    plot_sweep,  # noqa: F401 - public here too
    print_table,  # noqa: F401 - public here too
    program_seconds,
    sweep_table,
    warn_ended_worse,
    what_was_written,
    write_runs,
    write_sweep,
)
from fedjax_clust.run.sweep.plan import attack_kinds, program_chunks
from fedjax_clust.run.sweep.program import (
    RUN_AXES,
    RUN_BATCHING,
    SweepProgram,
    map_runs,
    resolved_run_batching,
    run_slice,  # noqa: F401 - public here too
    sweep_program,
)
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


def sweep(
    algorithm: str,
    task: Union[Task, Callable[..., Task], TaskGrid],
    *,
    grid: Mapping[str, Sequence],
    seeds: Sequence[int] = (0,),
    rounds: int,
    options: Optional[Mapping] = None,
    init: str = "shared",
    evaluation: Evaluation = Evaluation(),
    output: Output = Output(),
    batching: Batching = Batching(),
    plot: bool = True,
    **legacy,
) -> SweepResult:
    """Run ``algorithm`` for every combination of ``grid`` values and every seed; see the module docstring.

    Args:
      algorithm: a registered algorithm's name (:func:`fedjax_clust.algorithms.algorithm_names`).
      task: one task for all runs, ``seed -> Task`` (the task built from each run's seed; its arrays are then
        vmapped too and must have the same shapes for every seed), or a
        :class:`~fedjax_clust.run.experiment_records.TaskGrid` ``(build, grid)``: ``build(seed, **task_values)``
        for every combination of the task's own ``grid`` (``{keyword of task: [values]}``, values that change the
        task rather than the algorithm, e.g. ``{"byzantine_fraction": [0, 0.1, 0.2]}``: which clients attack),
        swept with ``grid`` and the seeds like any other dimension, named in the run folders and the table. Each
        task value is a static dimension (its own program) except the attackers' share (:data:`BYZANTINE_KEYS`):
        which clients attack is an argument of the program (:meth:`~fedjax_clust.tasks.base.Task.masks`).
      grid: ``{keyword of make_algorithm: [values]}``, e.g. ``{"learning_rate": [0.001, 0.01]}``.
      seeds: run seeds (PRNG of the run, and of the task when ``task`` is a function).
      options: keywords of :func:`fedjax_clust.make_algorithm` shared by every run; a value may be a
        :class:`~fedjax_clust.run.experiment_records.PerRun` ``(seed, task) -> array``, an option that depends on
        the run's seed and task (e.g. IFCA's ``init_cluster_params``), traced per run.
      evaluation: the :class:`~fedjax_clust.run.driver_options.Evaluation` of every run, as in :func:`simulate`
        (its ``eval_clients``: each evaluation covers K clients drawn per run by its seed and the round, the
        sample :func:`simulate` draws, so each run equals that run; recorded in ``run.json``); its ``metric`` is
        the table's and the plot's (default: test_accuracy, else mean_sq_dist_to_optimum, else mean_loss) and the
        one the warning of runs that ended worse than they started reads.
      output: the :class:`~fedjax_clust.run.driver_options.Output`: ``out_dir`` (``runs/``, ``sweep.json``,
        ``sweep.png``), ``overwrite``, ``progress``; ``resume`` keeps the programs whose runs are all in
        ``out_dir/runs`` (written by this same sweep, checked run by run) and runs the others (see the module
        docstring; nothing on disk: every program runs); ``tracking`` (a
        :class:`fedjax_clust.io.tracking.Tracking`): every run is tracked as its own run named ``ALGORITHM/RUN``
        (its folder's name, e.g. ``federated-clustering/learning_rate=0.01,seed=0``), with its configuration and
        its swept values, logged at each evaluation as the program runs; W&B runs are grouped as one sweep
        (``sweep-ALGORITHM-TASK-OUTFOLDER`` unless the tracking names a group).
      batching: the :class:`~fedjax_clust.run.driver_options.Batching`: ``runs_per_program`` (the most runs one
        compiled program holds: an integer, None: all, or "auto"), ``run_batching`` ("vmap", "map" or "auto":
        :func:`resolved_run_batching`; recorded in ``programs``; the two agree to float32 rounding) and
        ``attack_switch`` (whether runs that differ in their attack share one program switching over the kinds,
        :mod:`fedjax_clust.robust.attack_switch`).
      plot: draw ``out_dir/sweep.png`` (a study leaves it out: its own figures draw every algorithm).
      rounds, init: as in :func:`simulate`.
      legacy: the keywords of 0.2, deprecated (0.3.0, with a DeprecationWarning): the records' fields as flat
        keywords (``eval_every``, ``metric``, ``out_dir``, ``resume``, ``runs_per_program``, ...), ``task_grid``
        (now a TaskGrid) and ``run_options`` (``(seed, task) -> {keyword: array}``, now PerRun values).
    """
    check_choice("algorithm", algorithm, algorithm_names())
    task, task_grid = experiment_legacy("sweep", task, legacy)
    run_options = legacy.pop("run_options", None)
    if run_options is not None:
        instead = "give each such option as options={keyword: fedjax_clust.PerRun(fn)}"
        warn_deprecated_keyword("sweep", "run_options", instead, stacklevel=2)
    evaluation, output, batching = take_legacy(
        "sweep", legacy, stacklevel=3, evaluation=evaluation, output=output, batching=batching
    )
    loop_options = LoopOptions.of(rounds, init, evaluation, output).checked()
    seeds, runs_per_program, run_batching = checked_runs(seeds, batching.runs_per_program, batching.run_batching)
    grid, task_grid, options = checked_grids(task, grid, task_grid, options)  # a PerRun option in the grid too: refused
    options, per_run = split_per_run(options, run_options)
    out_dir, resume, overwrite = loop_options.out_dir, output.resume, output.overwrite
    check_resume(resume, overwrite, out_dir)
    if out_dir is not None and not resume:
        claim_outputs(out_dir, OUTPUTS, overwrite)

    full_grid = {**task_grid, **grid}
    runs = expand_grid(full_grid, seeds)
    concrete = concrete_runs(algorithm, task, runs, task_grid, options, per_run)
    traced_names = [n for n in grid if n in traced_hparams(algorithm) and all(is_number(v) for v in grid[n])]
    kinds = attack_kinds(grid, run_batching, batching.attack_switch)
    same_as = identical_runs(concrete)  # run -> the run computed for it
    chunks = program_chunks(concrete, full_grid, traced_names, runs_per_program, run_batching, same_as, kinds)
    loop_options = _grouped(loop_options, algorithm, concrete[0].task.name)
    warn_if_nondeterministic_gpu()  # once per process, on a GPU without the deterministic-ops flag
    check_runs(concrete, evaluation.eval_clients)
    start = time.perf_counter()
    results: list = [None] * len(runs)
    built: Optional[dict] = (
        None if isinstance(task, Task) else {}
    )  # a task per seed: built whole per program (execute._program_inputs)
    programs: list = []
    for number, chunk in enumerate(chunks, start=1):
        if resume and out_dir is not None and keep_program(out_dir, concrete, chunk, loop_options, results):
            programs.append({"runs": len(chunk), **dict.fromkeys(PROGRAM_SECONDS), "kept": True, "batching": None})
            if loop_options.progress:
                print(f"{algorithm}: program {number} of {len(chunks)} kept from {out_dir}", file=sys.stderr)
            continue
        try:
            timing = run_program(
                algorithm,
                [concrete[i] for i in chunk],
                traced_names,
                list(task_grid),
                options,
                built,
                loop_options,
                out=results,
                slots=chunk,
                batching=run_batching,
                kinds=kinds,
            )
        except KeyboardInterrupt:
            finished = sum(p["runs"] for p in programs)
            raise KeyboardInterrupt(
                f"sweep interrupted in program {number} of {len(chunks)} ({finished} of "
                f"{len(runs)} runs had finished); {what_was_written(out_dir, finished)}"
            ) from None
        if out_dir is not None:
            write_runs(out_dir, [results[i] for i in chunk], [concrete[i] for i in chunk], loop_options)
        seconds = {key: timing[field] for key, field in PROGRAM_SECONDS.items()}
        programs.append({"runs": len(chunk), **seconds, "batching": run_batching})
    fill_identical(results, concrete, same_as, out_dir, loop_options)
    total = time.perf_counter() - start
    warn_ended_worse(algorithm, results, concrete, evaluation.metric, evaluation.higher_better)
    metric = evaluation.metric or default_metric(results[0].history[-1])
    sweep_result = SweepResult(
        algorithm, metric, results, sweep_table(full_grid, seeds, results, metric), programs, total
    )
    if out_dir is not None:
        write_sweep(
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
