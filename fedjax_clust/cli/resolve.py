"""From parsed flags to the Python API's arguments: which options apply (an option given for no chosen algorithm or
task is an error, not silently ignored), the task with its attackers, each algorithm's keywords, the loop's
options, the rows' placement, tracking; and the resolved configuration a command writes to its folder."""

from __future__ import annotations

import os

from fedjax_clust.algorithms import algorithm_spec
from fedjax_clust.cli.arguments import ALGORITHM_OPTIONS, MODEL_TASKS, OWN_MODELS, TASK_OPTIONS, CliError, int_list
from fedjax_clust.cli.options import CLI_DEFAULTS
from fedjax_clust.run.loop import LoopOptions
from fedjax_clust.tasks import TASKS


def given(args, opt) -> bool:
    """Whether option ``opt`` was given (set, and not a switch left off)."""
    value = getattr(args, opt.dest, None)
    return value is not None and value is not False


def check_applicable(args, options, names, kind):
    """An option given for none of ``names`` (algorithms, or the one task) is an error."""
    for opt in options:
        if given(args, opt) and not set(names) & set(opt.applies):
            renamed = [
                f"{name}'s is --{new.replace('_', '-')} since 0.3.0"
                for name in (names if kind == "algorithm" else ())
                for old, new in algorithm_spec(name).renamed.items()
                if opt.flag == "--" + old.replace("_", "-")
            ]
            hint = f"; {'; '.join(renamed)}" if renamed else ""
            raise CliError(
                f"{opt.flag} does not apply to {kind} {', '.join(names)} (it applies to {', '.join(opt.applies)}){hint}"
            )


def check_required(args, options, name, kind):
    """A keyword that ``name``'s builder requires (no default) must be given."""
    for opt in options:
        if name in opt.owners and name not in opt.defaults and not given(args, opt):
            raise CliError(f"{kind} {name} needs {opt.flag}")


def task_from_args(args, allow_no_attacker=False):
    """The task ``--task`` names, built from the task options given (and ``--seed`` where its builder takes one),
    with its Byzantine clients marked (:func:`with_byzantine`)."""
    import inspect

    from fedjax_clust.tasks import make_task

    check_applicable(args, TASK_OPTIONS, [args.task], "task")
    check_required(args, TASK_OPTIONS, args.task, "--task")
    options = {opt.kwarg(args.task): getattr(args, opt.dest) for opt in TASK_OPTIONS if given(args, opt)}
    if "seed" in inspect.signature(TASKS[args.task]).parameters:
        options["seed"] = args.seed
    return with_byzantine(make_task(args.task, **options), args, allow_no_attacker)


def with_byzantine(task, args, allow_none=False):
    """The task with its Byzantine clients marked (--byzantine-fraction / --byzantine-per-cluster, drawn
    from --seed); an attack without attackers, or attackers without an attack, is an error. ``allow_none``
    (a sweep's value 0 beside others): no attacker gives an all-honest mask, so the attack's runs have their
    attack-free baseline in the same sweep (an attack on no client changes no message)."""
    from fedjax_clust.robust import mark_byzantine

    fraction, per_cluster = args.byzantine_fraction, args.byzantine_per_cluster
    if fraction is not None and per_cluster is not None:
        raise CliError("give one of --byzantine-fraction and --byzantine-per-cluster")
    if (fraction is None and per_cluster is None) != (args.attack is None):
        raise CliError("--attack and --byzantine-fraction / --byzantine-per-cluster go together")
    if fraction is None and per_cluster is None:
        return task
    baseline = allow_none and not fraction and not per_cluster  # exactly 0: the attack-free baseline
    try:
        marked = mark_byzantine(
            task, fraction=fraction, per_cluster=per_cluster, seed=args.seed, all_honest_mask=baseline
        )
    except ValueError as e:
        raise CliError(str(e)) from None
    if marked.byzantine is None:
        raise CliError(_no_attacker_message(task, fraction, per_cluster))
    return marked


def _no_attacker_message(task, fraction, per_cluster) -> str:
    """Why --byzantine-fraction / --byzantine-per-cluster marks no client, and the smallest group that would
    hold an attacker at that fraction (by the rounding the mask itself uses)."""
    import numpy as np

    from fedjax_clust.robust.byzantine import attackers_in, smallest_group_with_an_attacker

    if fraction is None:
        return f"--byzantine-per-cluster {per_cluster} selects no client; drop --attack for an attack-free run"
    flag = " (--clients-per-cluster {})" if "clients_per_cluster" in task.config else ""  # a task that takes it
    if task.true_clusters is not None:
        size = int(np.min(np.unique(np.asarray(task.true_clusters), return_counts=True)[1]))
        where, needed = f"in its smallest cluster, of {size} clients", "a cluster needs at least {} clients" + flag
    else:
        size = task.num_clients
        where, needed = f"of the {size} clients", "the task needs at least {} clients"
    smallest = smallest_group_with_an_attacker(fraction)
    need = "" if smallest is None else "; at this fraction " + needed.format(smallest, smallest) + " for one attacker"
    return (
        f"--byzantine-fraction {fraction:g} selects no client: round({fraction:g} x {size}) = "
        f"{attackers_in(size, fraction)} {where}{need}; drop --attack for an attack-free run"
    )


def algo_options(name, args, lists=False) -> dict:
    """The keyword arguments of ``make_algorithm`` for algorithm ``name``: the options given that it takes,
    and the CLI's own default learning rate; ``lists``: a sweep's lists of values."""
    options = {}
    for opt in ALGORITHM_OPTIONS:
        if given(args, opt) and name in opt.owners:
            value = getattr(args, opt.dest)
            options[opt.kwarg(name)] = [value] if lists and opt.switch else value
    for key, value in CLI_DEFAULTS.items():
        options.setdefault(key, [value] if lists else value)
    if options.get("dp_epsilon") is not None and options.get("dp_rounds") is None and hasattr(args, "rounds"):
        options["dp_rounds"] = [args.rounds] if lists else args.rounds  # a target epsilon lasts the run's rounds
    return options


def check_run_args(args, names):
    """A run's options checked before anything is built: the counts and the seed, every option given applies to one
    of ``names`` (the algorithms), each one's required options are there, ``--init`` fits them, no option is moot."""
    from fedjax_clust.core.validation import check_int, check_seed

    check_int("--rounds", args.rounds)
    check_int("--eval-every", args.eval_every)
    check_seed(args.seed, "--seed")
    check_applicable(args, ALGORITHM_OPTIONS, names, "algorithm")
    for name in names:
        check_required(args, ALGORITHM_OPTIONS, name, "--algorithm")
    if args.init != "shared":
        shared_only = [n for n in names if n not in OWN_MODELS]
        if shared_only:
            raise CliError(
                f"--init {args.init} does not apply to {', '.join(shared_only)} (they start from shared "
                f"cluster models; it applies to {', '.join(OWN_MODELS)})"
            )
    check_dependent(args)


def _values(value) -> list:
    """An option's value(s): a sweep's list, or one value."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


# An option that only means something together with another one: (dest, flag, whether the setting it needs
# holds, what it needs). Given without it, it would silently do nothing.
DEPENDENT = (
    (
        "local_steps_form",
        "--local-steps-form",
        lambda a: a.local_steps is not None and any(_values(a.local_steps)),
        "--local-steps E > 0",
    ),
    ("init_noise", "--init-noise", lambda a: getattr(a, "init", None) == "oracle", "--init oracle"),
    (
        "hidden",
        "--hidden",
        lambda a: a.task not in MODEL_TASKS or "mlp" in _values(getattr(a, "model", None)),
        "--model mlp",
    ),
    ("fedavg_steps", "--fedavg-steps", lambda a: "fedavg" in _values(getattr(a, "stage3", None)), "--stage3 fedavg"),
)


def check_dependent(args):
    """One-line errors for options that would do nothing (``DEPENDENT``) and for contradictory switches."""
    for dest, flag, holds, needs in DEPENDENT:
        value = getattr(args, dest, None)
        if value is not None and value is not False and not holds(args):
            raise CliError(f"{flag} applies only with {needs}")
    if getattr(args, "resume", False) and getattr(args, "overwrite", False):
        raise CliError("--resume continues the run in --out and --overwrite replaces it: give one of them")


def placement_of(args):
    """The run's :class:`~fedjax_clust.run.placement.Placement` from ``--client-rows``, ``--device-memory`` and
    ``--host-rows-dir``."""
    from fedjax_clust.run.placement import Placement

    return Placement(client_rows=args.client_rows, device_memory=args.device_memory, host_rows_dir=args.host_rows_dir)


def tracking_of(args):
    """The run's Tracking, checked (None without --tensorboard / --wandb)."""
    if not (args.tensorboard or args.wandb):
        return None
    from fedjax_clust.io.tracking import Tracking

    return Tracking(tensorboard=args.tensorboard, wandb=args.wandb).check()


def loop_options(args, tracking) -> LoopOptions:
    """The loop options of run, compare and sweep from their flags (declared once:
    :class:`~fedjax_clust.run.loop.LoopOptions`)."""
    return LoopOptions(
        rounds=args.rounds,
        eval_every=args.eval_every,
        init=args.init,
        on_nonfinite=args.on_nonfinite,
        out_dir=args.out,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        tracking=tracking,
        eval_clients=args.eval_clients,
    )


def seeded_task(args) -> tuple:
    """(task grid, ``(seed, **task_values) -> Task``) of a sweep or a study: a list of attackers' shares is a
    task dimension (one program per value); every run's task is built from its seed."""
    import copy

    task_grid = {}
    for name in ("byzantine_fraction", "byzantine_per_cluster"):
        values = getattr(args, name)
        if values is not None and len(values) > 1:
            task_grid[name] = values
        setattr(args, name, None if values is None else values[0])

    def task_of(seed, **task_values):
        seeded = copy.copy(args)
        seeded.seed = seed
        for name, value in task_values.items():
            setattr(seeded, name, value)
        return task_from_args(seeded, allow_no_attacker=bool(task_grid))

    return task_grid, task_of


def runs_per_program_of(text: str):
    """``--runs-per-program``: None for 'all', 'auto', or the number."""
    if text == "all":
        return None
    return text if text == "auto" else int_list(text, "--runs-per-program")[0]


def grid_and_options(name: str, args) -> tuple:
    """Algorithm ``name``'s options of a sweep or study: (grid: those given with several values, fixed: those
    given once, with the run's matmul precision); ``--chunk-size all`` is None (every row at once)."""
    values = algo_options(name, args, lists=True)
    if "chunk_size" in values:
        values["chunk_size"] = [None if v == "all" else v for v in values["chunk_size"]]
    grid = {k: v for k, v in values.items() if len(v) > 1}
    fixed = {k: v[0] for k, v in values.items() if len(v) == 1}
    fixed["matmul_precision"] = args.matmul_precision
    return grid, fixed


def recorded_options(args, options) -> dict:
    """The options a resumed run takes from its ``run.json`` (the spec's ``resume_options``, e.g.
    Federated-Clustering's resolved auto chunk), those given on the command line left as given. Empty
    when the folder holds no run of this algorithm."""
    from fedjax_clust.io.run_folder import saved_run_config

    if args.out is None:
        return {}
    saved = saved_run_config(args.out)
    hparams = saved.get("hparams") if isinstance(saved, dict) and saved.get("algorithm") == args.algorithm else None
    if not isinstance(hparams, dict):
        return {}
    recorded = algorithm_spec(args.algorithm).resume_options(hparams)
    return {k: v for k, v in recorded.items() if k not in options}


CONFIG_COMMANDS = ("run", "sweep", "study")


# options a written config.toml leaves out (how this invocation runs, not what it computes) and those a resumed
# run may change (the rounds may grow; the folder and the checkpoint cadence are where and how often)
NOT_IN_CONFIG = ("command", "overwrite", "resume", "no_progress", "cpu_devices", "compile_cache", "config_keys")


# tracking and where the rows live change no number
MAY_CHANGE_ON_RESUME = (
    "rounds",
    "out",
    "checkpoint_every",
    "tensorboard",
    "wandb",
    "device_memory",
    "client_rows",
    "host_rows_dir",
)


def resolved_options(args):
    """The command's resolved options as its folder's config.toml records them (without how it ran: NOT_IN_CONFIG)."""
    from fedjax_clust.cli.config_file import resolved_config

    return resolved_config(args, exclude=NOT_IN_CONFIG)


def write_run_config(out, resolved, command):
    """Write ``resolved`` as OUT/config.toml, headed by the command that repeats it."""
    from fedjax_clust.cli.config_file import write_config

    write_config(
        out,
        resolved,
        f"The resolved options of this {command} (an option not listed takes its default): "
        f"`fedjax-clust {command} --config`\nthis file repeats it (with --overwrite, or "
        "another --out).",
    )


def wrote(folder: str, names) -> str:
    """The "wrote ..." line of a command's ``names`` in ``folder``: those that exist (the command claimed the folder
    first, so every one there is this command's; :func:`~fedjax_clust.io.run_folder.wrote_files`)."""
    from fedjax_clust.io.run_folder import wrote_files

    return wrote_files([os.path.join(folder, name) for name in names])


def one_line(error) -> str:
    """An error's message on one line (its type's name when it has none)."""
    return " ".join(str(error).split()) or type(error).__name__
