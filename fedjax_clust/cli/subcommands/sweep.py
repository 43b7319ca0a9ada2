"""`fedjax-clust sweep`: many runs of one algorithm (option lists x seeds) as compiled programs."""

from __future__ import annotations

import sys

from fedjax_clust.cli.arguments import ALL, add_eval_clients, add_grid_args, add_tracking_args, int_list
from fedjax_clust.cli.command import COMMANDS, Command
from fedjax_clust.cli.resolve import (
    check_run_args,
    grid_and_options,
    loop_options,
    resolved_options,
    runs_per_program_of,
    seeded_task,
    tracking_of,
    write_run_config,
    wrote,
)


def add_parser(sub, scope):
    """Declare `fedjax-clust sweep` on the command line's subparsers (``scope``: the help's narrowing, see
    :func:`fedjax_clust.cli.arguments.help_scope`)."""
    sw = sub.add_parser(
        "sweep",
        help="many runs of one algorithm (hyperparameter lists x seeds) as one compiled "
        "program; one result folder per run, a table and a plot",
    )
    sw.add_argument("--algorithm", required=True, choices=ALL, help=", ".join(ALL))
    add_grid_args(sw, scope, "sweep")
    sw.add_argument("--seeds", default="0", help="comma-separated run seeds (default 0)")
    sw.add_argument(
        "--resume",
        action="store_true",
        help="continue the sweep in --out: keep every program whose runs are in OUT/runs, run the others",
    )
    add_tracking_args(sw)
    add_eval_clients(sw)
    return sw


def sweep_command(args):
    from fedjax_clust.run.driver_options import Batching
    from fedjax_clust.run.experiment_records import TaskGrid
    from fedjax_clust.run.sweep import OUTPUTS, print_table, sweep

    seeds = int_list(args.seeds, "--seeds")
    args.seed = seeds[0]
    check_run_args(args, [args.algorithm])
    tracking = tracking_of(args)
    runs_per_program = runs_per_program_of(args.runs_per_program)
    grid, options = grid_and_options(args.algorithm, args)

    task_grid, task_of = seeded_task(args)
    result = sweep(
        args.algorithm,
        TaskGrid(task_of, task_grid) if task_grid else task_of,
        grid=grid,
        seeds=seeds,
        options=options,
        batching=Batching(runs_per_program=runs_per_program, run_batching=args.run_batching),
        **loop_options(args, tracking).records(resume=args.resume),
    )
    for name, values in task_grid.items():  # the config file repeats the whole list
        setattr(args, name, values)
    # the runs' seeds are --seeds (recorded as such), not --seed
    write_run_config(args.out, {k: v for k, v in resolved_options(args).items() if k != "seed"}, "sweep")
    print(print_table(result))
    kept = sum(bool(p.get("kept")) for p in result.programs)
    print(
        f"\n{len(result.runs)} runs in {len(result.programs)} program(s)"
        + (f" ({kept} kept from disk)" if kept else "")
        + f", {result.seconds:.1f} s; "
        + wrote(args.out, OUTPUTS)
    )
    stopped = [r for r in result.runs if r.summary["status"] != "completed"]
    if stopped:
        print(
            f"error: {len(stopped)} of {len(result.runs)} runs went non-finite (see their summary.json)",
            file=sys.stderr,
        )
    return 3 if stopped else 0


COMMANDS.register(Command("sweep", add_parser, sweep_command))
