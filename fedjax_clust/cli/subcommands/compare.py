"""`fedjax-clust compare`: several algorithms on one task, a table and a convergence plot."""

from __future__ import annotations

import sys

from fedjax_clust.cli.arguments import (
    add_algo_args,
    add_population_args,
    add_run_args,
    add_task_args,
    add_tracking_args,
    algorithm_list,
)
from fedjax_clust.cli.command import COMMANDS, Command
from fedjax_clust.cli.resolve import (
    algo_options,
    check_run_args,
    loop_options,
    one_line,
    placement_of,
    task_from_args,
    tracking_of,
    wrote,
)


def add_parser(sub, scope):
    """Declare `fedjax-clust compare` on the command line's subparsers (``scope``: the help's narrowing, see
    :func:`fedjax_clust.cli.arguments.help_scope`)."""
    cmp_ = sub.add_parser("compare", help="run several algorithms, print a table, plot convergence")
    cmp_.add_argument(
        "--algorithms",
        default="federated-clustering,local,global,ground-truth",
        help="comma-separated algorithm names (default %(default)s)",
    )
    add_algo_args(cmp_, add_task_args(cmp_, scope), scope=scope)
    add_run_args(cmp_, out_default="results")
    add_tracking_args(cmp_)
    add_population_args(cmp_)
    return cmp_


def compare_command(args):
    from fedjax_clust.run.compare import format_table, run_comparison
    from fedjax_clust.run.experiment_records import Candidate

    names = algorithm_list(args.algorithms)
    check_run_args(args, names)
    task = task_from_args(args)
    results = run_comparison(
        task,
        [Candidate(name, options=algo_options(name, args)) for name in names],
        seed=args.seed,
        options={"matmul_precision": args.matmul_precision},
        placement=placement_of(args),
        **loop_options(args, tracking_of(args)).records(),
    )
    print(format_table(results))
    print("\n" + wrote(args.out, ("results.json", "convergence.png", *results)))
    stopped = [r for r in results.values() if r.summary["status"] != "completed"]
    for r in stopped:
        print(f"error: {one_line(r.summary['message'])}", file=sys.stderr)
    return 3 if stopped else 0


COMMANDS.register(Command("compare", add_parser, compare_command))
