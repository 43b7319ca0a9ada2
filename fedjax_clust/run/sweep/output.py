"""What a sweep gives back and writes: its :class:`SweepResult` (the runs, the table over seeds, the programs'
seconds), the text table (:func:`print_table`) and the plot (:func:`plot_sweep`), every run's folder
``OUT/runs/NAME/`` and ``OUT/sweep.json``, the identical runs' results filled from the run each one is, and
the runs a resumed sweep keeps from disk."""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from typing import Mapping, Optional, Sequence

import numpy as np

from fedjax_clust.io.jsonio import json_safe, write_json
from fedjax_clust.io.run_folder import RUN_FILE
from fedjax_clust.run.advice import RunAdvice, ended_worse
from fedjax_clust.run.callbacks import Trackers
from fedjax_clust.run.loop import LoopOptions
from fedjax_clust.run.records import run_config
from fedjax_clust.run.simulate import RunResult
from fedjax_clust.run.sweep.grid import ConcreteRun, is_number, run_name

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


def default_metric(row: dict) -> str:
    for name in ("test_accuracy", "mean_sq_dist_to_optimum", "mean_loss"):
        if name in row:
            return name
    return next(k for k in row if k != "round")


def sweep_table(grid, seeds, results, metric):
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


def warn_ended_worse(algorithm: str, results, concrete: Sequence[ConcreteRun], metric=None, higher_better=None) -> None:
    """One :class:`~fedjax_clust.run.advice.RunAdvice` naming the runs of this sweep (kept ones aside) whose
    headline metric (``metric``, see :func:`~fedjax_clust.run.advice.ended_worse`) ended worse than at round 0."""
    worse = [
        (run_name(run.values, run.seed), message)
        for result, run in zip(results, concrete)
        if result.state is not None and result.summary["status"] == "completed"
        for message in [ended_worse(result.history, metric, higher_better)]
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


def _run_folder_config(member: ConcreteRun, loop_options: LoopOptions) -> dict:
    """What a run's ``run.json`` records of its configuration (and a resumed sweep compares)."""
    return run_config(
        member.algorithm,
        member.task,
        seed=member.seed,
        eval_every=loop_options.eval_every,
        init=loop_options.init,
        on_nonfinite=loop_options.on_nonfinite,
        extra=sampled_record(loop_options) or None,
    )


def sampled_record(loop_options: LoopOptions) -> dict:
    """What a run's configuration records of a sampled evaluation: ``{"eval_clients": K}`` ({} for none), as
    :func:`~fedjax_clust.run.simulate.simulate` records it."""
    return {} if loop_options.eval_clients is None else {"eval_clients": loop_options.eval_clients}


def tracked_config(member: ConcreteRun, loop_options: LoopOptions, **extra) -> dict:
    """The configuration a run's trackers get: its run folder's (:func:`_run_folder_config`), its swept values
    (and ``extra``)."""
    return {**_run_folder_config(member, loop_options), "sweep_values": json_safe(dict(member.values)), **extra}


def write_runs(
    out_dir: str, runs: Sequence[RunResult], members: Sequence[ConcreteRun], loop_options: LoopOptions
) -> None:
    """Each run's folder ``out_dir/runs/NAME``: ``metrics.jsonl``, ``summary.json``, then ``run.json`` (written
    last: a folder with a ``run.json`` holds a finished run)."""
    from fedjax_clust.io.provenance import provenance
    from fedjax_clust.run.simulate import write_results

    made_by = provenance()  # the command, version, commit and machine, in every file as in a run's
    for run, member in zip(runs, members):
        folder = os.path.join(out_dir, "runs", run_name(member.values, member.seed))
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


def _check_folder_holds(out_dir: str, member: ConcreteRun, loop_options: LoopOptions) -> None:
    """ValueError when ``out_dir/runs/NAME`` holds a finished run of another configuration than ``member``'s."""
    from fedjax_clust.io.jsonio import read_json
    from fedjax_clust.io.run_folder import check_same_run

    folder = os.path.join(out_dir, "runs", run_name(member.values, member.seed))
    if os.path.exists(os.path.join(folder, RUN_FILE)):
        saved = read_json(os.path.join(folder, RUN_FILE))
        check_same_run(
            {"config": saved.get("config"), "rounds": saved.get("rounds")},
            {"config": _run_folder_config(member, loop_options), "rounds": loop_options.rounds},
            folder,
        )


def fill_identical(
    results: list, concrete: Sequence[ConcreteRun], same_as: Mapping, out_dir, loop_options: LoopOptions
) -> None:
    """Each identical run's result (:func:`~fedjax_clust.run.sweep.grid.identical_runs`): the run it is, under its
    own values and hyperparameters (``same_as`` names that run), written to its own folder."""
    for i, j in same_as.items():
        run, computed = concrete[i], results[j]
        summary = {
            **computed.summary,
            "sweep_values": json_safe(dict(run.values)),
            "hparams": json_safe({**run.algorithm.hparams, **run.algorithm.execution.report()}),
            "same_as": run_name(concrete[j].values, concrete[j].seed),
        }
        results[i] = RunResult(run.algorithm.name, run.task.name, computed.history, computed.state, summary)
    indices = list(same_as)
    if out_dir is not None and indices:
        for i in indices:  # a folder of another sweep's run of that name is refused, as for a computed run
            _check_folder_holds(out_dir, concrete[i], loop_options)
        write_runs(out_dir, [results[i] for i in indices], [concrete[i] for i in indices], loop_options)
    if loop_options.tracking is not None and indices:  # each one tracked as its own run, as computed ones are
        names = [f"{concrete[i].algorithm.name}/{run_name(concrete[i].values, concrete[i].seed)}" for i in indices]
        configs = [tracked_config(concrete[i], loop_options, same_as=results[i].summary["same_as"]) for i in indices]
        trackers = Trackers(loop_options.tracking, list(zip(names, configs)))
        try:
            for i, per_run in zip(indices, trackers.per_run):
                for row in results[i].history:
                    for tracker in per_run:
                        tracker.log(row["round"], row)
        finally:
            trackers.close()


def check_resume(resume: bool, overwrite: bool, out_dir) -> None:
    if resume and overwrite:
        raise ValueError("resume and overwrite contradict each other: resume keeps the sweep's finished programs")
    if resume and out_dir is None:
        raise ValueError("resume needs out_dir (the folder of the sweep to continue)")


def what_was_written(out_dir: Optional[str], finished: int) -> str:
    """What an interrupted sweep leaves on disk, for its one-line message."""
    if out_dir is None:
        return "no results"
    if finished:
        return f"their folders are in {os.path.join(out_dir, 'runs')}; resume (--resume) keeps them"
    return f"nothing was written to {out_dir}"


def keep_program(out_dir: str, concrete: list, chunk: list, loop_options: LoopOptions, results: list) -> bool:
    """Whether every run of the program ``chunk`` is on disk; if so its runs are read into ``results``."""
    kept = _kept_runs(out_dir, [concrete[i] for i in chunk], loop_options)
    if kept is None:
        return False
    for slot, run in zip(chunk, kept):
        results[slot] = run
    return True


def _kept_runs(out_dir: str, members: Sequence[ConcreteRun], loop_options: LoopOptions) -> Optional[list]:
    """The runs of one program read back from ``out_dir/runs`` when every one of them is there (None when one is
    missing); ValueError when a folder holds another configuration than this sweep's run of that name."""
    from fedjax_clust.io.jsonio import read_json, read_json_lines

    kept = []
    for member in members:
        folder = os.path.join(out_dir, "runs", run_name(member.values, member.seed))
        if not os.path.exists(os.path.join(folder, RUN_FILE)):
            return None
        _check_folder_holds(out_dir, member, loop_options)
        history = read_json_lines(os.path.join(folder, "metrics.jsonl"))
        summary = read_json(os.path.join(folder, "summary.json"))
        kept.append(RunResult(member.algorithm.name, member.task.name, history, None, summary))
    return kept


def write_sweep(
    result, out_dir, grid, seeds, concrete: Sequence[ConcreteRun], *, rounds, eval_every, task_names=(), plot=True
):
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
                        "name": run_name(run.values, run.seed),
                        "values": run.values,
                        "seed": run.seed,
                        "status": r.summary["status"],
                        "final": {k: x for k, x in r.history[-1].items() if k != "round"},
                        **({"same_as": r.summary["same_as"]} if r.summary.get("same_as") else {}),
                    }
                    for r, run in zip(result.runs, concrete)
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
        if all(is_number(v) and v > 0 for v in grid[x_name]):
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
