"""`fedjax-clust study`: several algorithms x option lists x seeds, with intervals and paired differences."""

from __future__ import annotations

import argparse
import sys

from fedjax_clust.cli.arguments import add_eval_clients, add_grid_args, algorithm_list, int_list
from fedjax_clust.cli.command import COMMANDS, Command
from fedjax_clust.cli.resolve import (
    check_run_args,
    grid_and_options,
    loop_options,
    resolved_options,
    runs_per_program_of,
    seeded_task,
    write_run_config,
    wrote,
)


def add_parser(sub, scope):
    """Declare `fedjax-clust study` on the command line's subparsers (``scope``: the help's narrowing, see
    :func:`fedjax_clust.cli.arguments.help_scope`)."""
    st = sub.add_parser(
        "study",
        help="several algorithms x option lists x seeds (one sweep per algorithm): the mean final metric with "
        "its t interval, paired differences on the same seeds, Markdown / CSV tables and figures",
    )
    st.add_argument(
        "--algorithms",
        required=True,
        help="comma-separated algorithm names; the first is the reference of the paired differences",
    )
    add_grid_args(st, scope, "study")
    st.add_argument(
        "--seeds",
        default="0,1,2",
        help="comma-separated run seeds, the same for every algorithm (default 0,1,2; fewer than 3 gets a warning)",
    )
    st.add_argument("--confidence", type=float, default=0.95, help="of the t intervals (default 0.95)")
    st.add_argument(
        "--metric",
        default=None,
        help="the compared metric (default: test_accuracy, else mean_sq_dist_to_optimum, else mean_loss)",
    )
    st.add_argument(
        "--higher-better",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="whether a higher --metric is better, for the wins and the best arm (default: from the metric's "
        "name: lower for losses, distances, errors and misclustering, higher otherwise)",
    )
    st.add_argument(
        "--resume",
        action="store_true",
        help="continue the study in --out: keep every algorithm whose sweep finished and every finished sweep "
        "program of the others, run the rest",
    )
    add_eval_clients(st)
    return st


def study_command(args):
    import dataclasses

    from fedjax_clust.run.driver_options import Batching
    from fedjax_clust.run.experiment_records import Candidate, TaskGrid
    from fedjax_clust.run.study import STUDY_OUTPUTS, study, study_table_markdown

    names = algorithm_list(args.algorithms)
    seeds = int_list(args.seeds, "--seeds")
    args.seed = seeds[0]
    check_run_args(args, names)
    candidates = []
    for name in names:
        grid, options = grid_and_options(name, args)
        candidates.append(Candidate(name, options=options, grid=grid))
    task_grid, task_of = seeded_task(args)
    records = loop_options(args, None).records(resume=args.resume)
    result = study(
        candidates,
        TaskGrid(task_of, task_grid) if task_grid else task_of,
        seeds=seeds,
        confidence=args.confidence,
        batching=Batching(runs_per_program=runs_per_program_of(args.runs_per_program), run_batching=args.run_batching),
        **{
            **records,
            "evaluation": dataclasses.replace(
                records["evaluation"], metric=args.metric, higher_better=args.higher_better
            ),
        },
    )
    for name, values in task_grid.items():  # the config file repeats the whole list
        setattr(args, name, values)
    write_run_config(args.out, {k: v for k, v in resolved_options(args).items() if k != "seed"}, "study")
    print(study_table_markdown(result))
    kept = f" ({', '.join(result.kept)} kept from {args.out})" if result.kept else ""
    print(f"\n{len(result.runs)} runs of {len(names)} algorithm(s){kept}; " + wrote(args.out, STUDY_OUTPUTS))
    stopped = [r for r in result.runs if r["status"] != "completed"]
    if stopped:
        print(
            f"error: {len(stopped)} of {len(result.runs)} runs went non-finite (see their summary.json)",
            file=sys.stderr,
        )
    return 3 if stopped else 0


COMMANDS.register(Command("study", add_parser, study_command))
