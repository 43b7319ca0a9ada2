"""`fedjax-clust run`: one algorithm on one task, into a run folder (resumable from its checkpoints)."""

from __future__ import annotations

from fedjax_clust.cli.arguments import (
    ALL,
    add_algo_args,
    add_population_args,
    add_run_args,
    add_task_args,
    add_tracking_args,
)
from fedjax_clust.cli.command import COMMANDS, Command
from fedjax_clust.cli.resolve import (
    MAY_CHANGE_ON_RESUME,
    algo_options,
    check_run_args,
    loop_options,
    placement_of,
    recorded_options,
    resolved_options,
    task_from_args,
    tracking_of,
    write_run_config,
)


def add_parser(sub, scope):
    """Declare `fedjax-clust run` on the command line's subparsers (``scope``: the help's narrowing, see
    :func:`fedjax_clust.cli.arguments.help_scope`)."""
    run = sub.add_parser(
        "run",
        help="run one algorithm on one task",
        description="Run one algorithm on one task. `fedjax-clust run --algorithm NAME [--task "
        "TASK] --help` lists only the options that apply to NAME and TASK.",
    )
    run.add_argument("--algorithm", required=True, choices=ALL, help=", ".join(ALL))
    run.add_argument(
        "--config",
        metavar="FILE",
        help="a TOML file of options (its keys are the flags without "
        "dashes, tables allowed); options on the command line override it",
    )
    add_algo_args(run, add_task_args(run, scope), scope=scope)
    add_run_args(run)
    add_tracking_args(run)
    run.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        help="save the whole run state every k rounds to OUT/checkpoints (Orbax; default none: no checkpoints)",
    )
    run.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in OUT from its newest checkpoint (the options must match that run; "
        "with --out alone they are read from OUT/run.json)",
    )
    add_population_args(run)
    return run


def run_command(args):
    from fedjax_clust.algorithms import make_algorithm
    from fedjax_clust.algorithms.settings import grouped_settings
    from fedjax_clust.io.jsonio import dumps
    from fedjax_clust.run.driver_options import Checkpointing
    from fedjax_clust.run.simulate import NonFiniteError, RunInterrupted, simulate

    check_run_args(args, [args.algorithm])
    if args.checkpoint_every is not None:
        from fedjax_clust.core.validation import check_int

        check_int("--checkpoint-every", args.checkpoint_every)
    task = task_from_args(args)
    options = algo_options(args.algorithm, args)
    if args.resume:
        options.update(recorded_options(args, options))
    algo = make_algorithm(
        args.algorithm, task, **grouped_settings({**options, "matmul_precision": args.matmul_precision})
    )
    tracking = tracking_of(args)
    resolved = resolved_options(args)
    checked = {k: v for k, v in resolved.items() if k.replace("-", "_") not in MAY_CHANGE_ON_RESUME}
    try:
        result = simulate(
            algo,
            task,
            seed=args.seed,
            checkpointing=Checkpointing(checkpoint_every=args.checkpoint_every),
            config={"options": checked},
            placement=placement_of(args),
            **loop_options(args, tracking).records(resume=args.resume),
        )
    except (NonFiniteError, RunInterrupted):  # the run started: its folder gets its configuration too
        write_run_config(args.out, resolved, "run")
        raise
    write_run_config(args.out, resolved, "run")
    print(dumps({k: v for k, v in result.summary.items() if not isinstance(v, dict)}))
    return 0


COMMANDS.register(Command("run", add_parser, run_command))
