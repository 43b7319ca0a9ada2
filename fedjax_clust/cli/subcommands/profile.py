"""`fedjax-clust profile`: a scaling sweep over N (time, memory, counted FLOPs and bytes, projections)."""

from __future__ import annotations

from fedjax_clust.cli.arguments import (
    ALGORITHM_OPTIONS,
    ALL,
    TASK_OPTIONS,
    CliError,
    add_algo_args,
    add_task_args,
    int_list,
)
from fedjax_clust.cli.command import COMMANDS, Command
from fedjax_clust.cli.resolve import algo_options, check_applicable, given, with_byzantine, wrote
from fedjax_clust.tasks import TASKS


def add_parser(sub, scope):
    """Declare `fedjax-clust profile` on the command line's subparsers (``scope``: the help's narrowing, see
    :func:`fedjax_clust.cli.arguments.help_scope`)."""
    prof = sub.add_parser(
        "profile",
        help="scaling sweep over N of any task and model: time, memory, counted FLOPs and bytes, a calibrated "
        "projection, communication (CSV + plot)",
        description="Time every algorithm's round at each N of --clients on --task (built with N clients), count "
        "its FLOPs and memory traffic, project them through a roofline calibrated on this machine, and plot. "
        "Every run option applies (--model, --batch-size, --participation, --subgroups, --attack, ...).",
    )
    prof.add_argument("--out", default="results/profile", help="output folder")
    prof.add_argument("--overwrite", action="store_true", help="replace an earlier profile in --out")
    prof.add_argument(
        "--clients",
        default="64,128,256,512,1024,2048,4096",
        help="comma-separated N sweep (default 64,128,256,512,1024,2048,4096): the task's clients_per_cluster is "
        "N / K (or its num_clients N)",
    )
    prof.add_argument("--algorithms", default=None, help="comma-separated algorithm names (default: all)")
    prof.add_argument("--repeats", type=int, default=3, help="timed rounds per configuration (default 3)")
    prof.add_argument("--seed", type=int, default=0, help="seed of the data, in [0, 2^32) (default 0)")
    prof.add_argument(
        "--loop-max-clients",
        type=int,
        default=256,
        help="largest N at which the per-client Python loop is timed (synthetic task; default 256)",
    )
    prof.add_argument(
        "--tradeoff-subgroups",
        default="1,2,4,8,16",
        help="FC subgroup counts G for the error-vs-time trade-off on the synthetic task (default 1,2,4,8,16; "
        "'none': skip)",
    )
    prof.add_argument("--tradeoff-clients", type=int, default=512, help="N of the subgroup trade-off (default 512)")
    prof.add_argument(
        "--tradeoff-rounds", type=int, default=200, help="training rounds per G in the subgroup trade-off (default 200)"
    )
    add_algo_args(prof, add_task_args(prof, scope, exclude=("--clients",)), scope=scope)
    return prof


def profile_command(args):
    import inspect

    from fedjax_clust.bench.device_projection import PROJECTION_FILES
    from fedjax_clust.bench.profile import check_profile, profile, task_with_clients
    from fedjax_clust.core.validation import check_int, check_seed

    clients = int_list(args.clients, "--clients")
    if min(clients) < 4:
        raise CliError(f"--clients must list client counts >= 4, got {args.clients!r}")
    check_int("--repeats", args.repeats)
    check_int("--loop-max-clients", args.loop_max_clients, 0)
    check_seed(args.seed, "--seed")
    names = None if args.algorithms is None else [a.strip() for a in args.algorithms.split(",") if a.strip()]
    if names is not None and not names:
        raise CliError(f"--algorithms must list at least one algorithm, got {args.algorithms!r}")
    for name in names or []:
        if name not in ALL:
            raise CliError(f"--algorithms: unknown algorithm {name!r}; expected names from {', '.join(ALL)}")
    profiled = [a for a in (names or ALL) if a != "knn-per"]
    check_applicable(args, ALGORITHM_OPTIONS, profiled, "algorithm")
    own_task_options = [o for o in TASK_OPTIONS if o.flag != "--clients"]  # --clients is the sweep over N here
    check_applicable(args, own_task_options, [args.task], "task")
    groups = None if args.tradeoff_subgroups == "none" else int_list(args.tradeoff_subgroups, "--tradeoff-subgroups")
    if groups is not None:
        from fedjax_clust.bench.profile import check_subgroup_sweep

        check_subgroup_sweep(args.tradeoff_clients, groups, names=("--tradeoff-clients", "--tradeoff-subgroups"))
        check_int("--tradeoff-rounds", args.tradeoff_rounds)
    from fedjax_clust.bench.rounds import bench_options
    from fedjax_clust.io.run_folder import check_out_dir, claim_outputs, wrote_files

    check_out_dir(args.out, "--out")
    task_options = {opt.kwarg(args.task): getattr(args, opt.dest) for opt in own_task_options if given(args, opt)}
    if "seed" in inspect.signature(TASKS[args.task]).parameters:
        task_options["seed"] = args.seed

    def make_task_at(n):
        return with_byzantine(task_with_clients(args.task, n, task_options), args)

    def algorithm_options(name):  # the profile's defaults (momentum 0.9, the benchmark stage) under the flags given
        given = {"matmul_precision": args.matmul_precision, **algo_options(name, args)}
        return {"momentum": 0.9, **bench_options(name), **given}

    # the tasks, the attackers and every algorithm's options checked at the smallest and the largest N before the
    # folder is claimed
    check_profile(clients, profiled, make_task_at, algorithm_options)
    # a folder never mixes two profiles (ValueError: exit 2 naming --overwrite); claimed once every option is valid
    claim_outputs(
        args.out,
        ("profile.csv", "profile.json", "profile.png", "subgroups.csv", "subgroups.png", *PROJECTION_FILES),
        args.overwrite,
    )
    _, _, extras = profile(
        clients,
        names,
        task=make_task_at,
        algorithm_options=algorithm_options,
        repeats=args.repeats,
        loop_max_clients=args.loop_max_clients,
        out_dir=args.out,
        check=False,  # checked above, before the folder was claimed
    )
    print(wrote_files(extras["files"]))
    if groups is not None:
        from fedjax_clust.bench.profile import subgroup_tradeoff

        subgroup_tradeoff(args.tradeoff_clients, groups, rounds=args.tradeoff_rounds, out_dir=args.out)
        print(wrote(args.out, ("subgroups.csv", "subgroups.png")))
    return 0


COMMANDS.register(Command("profile", add_parser, profile_command))
