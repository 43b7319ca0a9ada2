"""The command line's shared parser pieces: the parser type and its one-line errors, list-valued option types, and
the groups of options several commands declare alike (the task's, the algorithms', a run's, a grid's, tracking,
where a population's rows live). The algorithm and task options are derived from the builders' signatures
(:mod:`fedjax_clust.cli.options`), never listed here."""

from __future__ import annotations

import argparse

from fedjax_clust.algorithms import algorithm_names, algorithm_spec
from fedjax_clust.cli.config_file import OptionParser
from fedjax_clust.cli.options import algorithm_options, task_options
from fedjax_clust.core.validation import MATMUL_PRECISIONS
from fedjax_clust.run.simulate import INITS, ON_NONFINITE
from fedjax_clust.tasks import TASKS

# every registered algorithm: the built-in ones and the plugins of installed packages (entry points of the group
# fedjax_clust.algorithms), and their options (fedjax_clust.cli.options)
ALL = algorithm_names()
OWN_MODELS = tuple(name for name in ALL if algorithm_spec(name).owns_models)
ALGORITHM_OPTIONS = algorithm_options(ALL)
TASK_OPTIONS = task_options()
# options whose errors name the keyword (learning_rate, batch_size: the names the docs and the Python API use)
KEYWORD_NAMED = ("--lr", "--batch-size")
MODEL_TASKS = next(opt.applies for opt in TASK_OPTIONS if opt.flag == "--model")  # tasks with a Flax model


class CliError(Exception):
    """A command-line error: printed as one ``error:`` line, exit status 2."""


class Parser(OptionParser):
    """argparse with one-line errors and its long options recorded (for the config files); the top-level parser's
    ``commands`` maps each command to its own parser."""

    commands: dict

    def error(self, message):  # argparse would print the whole usage block
        raise CliError(message)


def typed(convert):
    """An argparse ``type`` of an option's ``convert``: its ValueError becomes argparse's message."""

    def parse(text):
        try:
            return convert(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parse.__name__ = "value"
    return parse


def split_list(text: str) -> list:
    """The items of a comma-separated list; a comma inside parentheses belongs to its item
    (``ipm(epsilon=0.1),krum(fraction=0.2, multi=True)`` is two items)."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    return items + [text[start:]]


def list_of(convert, choices=None):
    """argparse type: a comma-separated list of values (each in ``choices`` when given)."""

    def parse(text):
        values = []
        for item in split_list(text):
            item = item.strip()
            if not item:
                raise argparse.ArgumentTypeError(f"an empty item in the list {text!r}")
            try:
                value = convert(item)
            except ValueError as error:
                raise argparse.ArgumentTypeError(str(error)) from None
            if choices is not None and value not in choices:
                raise argparse.ArgumentTypeError(f"{item!r} is not one of {', '.join(map(str, choices))}")
            values.append(value)
        return values

    return parse


def int_list(text, flag):
    """The integers of a comma-separated ``text`` (at least one), or a CliError naming ``flag``."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise CliError(f"{flag} must be comma-separated integers, got {text!r}") from None
    if not values:
        raise CliError(f"{flag} must list at least one integer, got {text!r}")
    return values


def name_list(text, flag):
    """The names of a comma-separated ``text`` (at least one), or a CliError naming ``flag``."""
    names = [a.strip() for a in text.split(",") if a.strip()]
    if not names:
        raise CliError(f"{flag} must list at least one name, got {text!r}")
    return names


def algorithm_list(text: str) -> list:
    """``--algorithms a,b,c`` as a list: at least one, each registered, none twice."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise CliError(f"--algorithms must list at least one algorithm, got {text!r}")
    unknown = [n for n in names if n not in ALL]
    if unknown:
        raise CliError(f"--algorithms: unknown algorithm {unknown[0]!r}; expected names from {', '.join(ALL)}")
    if len(set(names)) != len(names):
        raise CliError(f"--algorithms lists an algorithm twice: {text!r}")
    return names


def add_options(group, options, lists=False):
    """Declare ``options`` (derived :mod:`fedjax_clust.cli.options` entries) on ``group``; ``lists``: each takes a
    comma-separated list of values (a sweep's), a switch stays a switch."""
    for opt in options:
        if opt.switch:
            group.add_argument(opt.flag, dest=opt.dest, action="store_true", help=opt.help)
        elif lists:
            group.add_argument(
                opt.flag,
                dest=opt.dest,
                type=list_of(opt.convert, opt.choices),
                default=None,
                help=opt.help + " (a comma-separated list)",
            )
        else:
            group.add_argument(
                opt.flag, dest=opt.dest, type=typed(opt.convert), choices=opt.choices, default=None, help=opt.help
            )


def in_scope(option, names) -> bool:
    """Whether ``option`` applies to any of ``names`` (None: show every option)."""
    return names is None or bool(set(option.owners) & set(names))


def add_task_args(p, scope=None, lists=False, exclude=()):
    """The task options and the Byzantine group (returned: ``--attack`` joins it in :func:`add_algo_args`);
    ``scope`` (help only, see :func:`help_scope`) keeps the options of the task it names; ``lists`` (a
    sweep): the attackers' share takes a comma-separated list, one program per value; ``exclude``: flags the
    command sets itself (``profile``'s ``--clients``, its sweep over N)."""
    tasks = None if not scope or not scope.get("task") else [scope["task"]]
    g = p.add_argument_group(
        "task (each option applies to the tasks named in its help"
        + (f"; shown: --task {tasks[0]}'s)" if tasks else ")")
    )
    g.add_argument(
        "--task",
        default="synthetic",
        choices=tuple(TASKS),
        help="synthetic (Werner et al. §4.1, default), classification (private labels, with a feature "
        "model), counterexample-myopic, counterexample-ifca, counterexample-cfl, the image tasks "
        "mnist-rotation, mnist-private-label (§4.2, Table 1), mnist-inverted, "
        "cifar10-private-label, cifar100-label-groups (thesis Fig. 2.4, 2.5), "
        "mixture-regression (Ghosh et al. §6.1, with outlier machines), npz (your clients), or the natural "
        "partitions femnist (LEAF JSON, TFF SQLite or Hugging Face Parquet, by writer), cifar100-pachinko "
        "(TFF SQLite), shakespeare (LEAF JSON or TFF SQLite, by role) and stackoverflow (TFF SQLite, tag "
        "prediction by user) from --data-file",
    )
    add_options(g, [o for o in TASK_OPTIONS if in_scope(o, tasks) and o.flag not in exclude])
    b = p.add_argument_group("Byzantine clients (with --attack)")
    listed = " (a comma-separated list: every value runs; 0 runs the attack-free baseline)" if lists else ""
    b.add_argument(
        "--byzantine-fraction",
        type=list_of(float) if lists else float,
        default=None,
        help="fraction beta of the clients that attack (of every true cluster when the clusters are known; "
        "default none: no attacker)" + listed,
    )
    b.add_argument(
        "--byzantine-per-cluster",
        type=list_of(int) if lists else int,
        default=None,
        help="attackers per true cluster (the thesis's Fig. 2.6: 50 beside 50 honest clients; default none)" + listed,
    )
    return b


def add_algo_args(p, byzantine, lists=False, scope=None):
    """The algorithm options; ``lists``: each takes a comma-separated list of values (a sweep); ``--attack``
    goes to the ``byzantine`` group, beside the options that choose the attackers; ``scope`` (help only) keeps
    the options of the algorithms it names."""
    names = None if not scope or not scope.get("algorithms") else scope["algorithms"]
    p.add_argument(
        "--matmul-precision",
        choices=MATMUL_PRECISIONS,
        default="highest",
        help="precision of every matmul of a round: highest (default: full float32 on every device), "
        "high or default (on a GPU TF32, on a TPU bfloat16 passes: faster, less exact)",
    )
    title = "algorithm options (each applies to the algorithms named in its help"
    if names:
        title += f"; shown: {', '.join(names)}'s"
    add_options(byzantine, [o for o in ALGORITHM_OPTIONS if o.flag == "--attack"], lists=lists)
    add_options(
        p.add_argument_group(title + ("; comma-separated lists: every combination runs)" if lists else ")")),
        [o for o in ALGORITHM_OPTIONS if o.flag != "--attack" and in_scope(o, names)],
        lists=lists,
    )


def add_run_args(p, out_default=None, seed=True):
    """A run's options: rounds, seed (unless ``seed=False``: a sweep's ``--seeds``), evaluation cadence, output
    folder (required unless ``out_default``), what to do on non-finite models, initial models, progress."""
    p.add_argument("--rounds", type=int, default=300, help="communication rounds (default 300)")
    if seed:
        p.add_argument("--seed", type=int, default=0, help="seed of the data and the run, in [0, 2^32) (default 0)")
    p.add_argument("--eval-every", type=int, default=10, help="evaluate every k rounds (default 10)")
    p.add_argument(
        "--out",
        default=out_default,
        required=out_default is None,
        help="output folder" + (f" (default {out_default})" if out_default else ""),
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the results of an earlier run in --out (default: refuse to mix two runs)",
    )
    p.add_argument(
        "--on-nonfinite",
        choices=ON_NONFINITE,
        default="stop",
        help="when client models become NaN/inf: stop with exit status 3 (default) or warn and "
        "compute the metrics over the finite clients",
    )
    p.add_argument(
        "--init",
        choices=INITS,
        default="shared",
        help="initial models: shared (every client at the task's init, default), oracle (x*_k + "
        "noise) or random (one random start per cluster), as in the paper authors' scripts",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def add_grid_args(p, scope, what: str):
    """The options of a command that runs lists of values (``sweep``, ``study``): a config file, every
    algorithm and task option as a comma-separated list, the run options, and the runs per compiled program."""
    p.add_argument(
        "--config",
        metavar="FILE",
        help=f"a TOML file of options (lists: the {what}'s values); options on the command line override it",
    )
    add_algo_args(p, add_task_args(p, scope, lists=True), lists=True, scope=scope)
    add_run_args(p, seed=False)
    p.add_argument(
        "--runs-per-program",
        default="auto",
        help="most runs in one compiled program: a number, 'all' or 'auto' (default: fit a quarter of "
        "the device's total memory)",
    )
    p.add_argument(
        "--run-batching",
        choices=["auto", "vmap", "map"],
        default="auto",
        help="how a program computes its runs: vmap (batched together), map (one after another in the program) "
        "or auto (default: map on a CPU, where XLA's batched per-client matmuls are slow; vmap on an accelerator)",
    )


def add_eval_clients(p):
    """A sampled evaluation (``run``, ``compare``, ``sweep``, ``study``)."""
    p.add_argument(
        "--eval-clients",
        type=int,
        default=None,
        metavar="K",
        help="evaluate K clients drawn anew at each evaluation (by the seed and the round) instead of all of "
        "them, for populations too large to evaluate whole; recorded in run.json (default: every client)",
    )


def add_population_args(p):
    """A large population's options (``run`` and ``compare``): a sampled evaluation and where the rows live."""
    add_eval_clients(p)
    rows = p.add_argument_group("where the clients' rows live (the numbers do not depend on it)")
    rows.add_argument(
        "--device-memory",
        metavar="SIZE",
        default=None,
        help="the device-memory budget, e.g. 1GiB or 512MB (default: the device's total; on a CPU the machine's "
        "memory): a population whose state and data exceed half of it keeps its per-client rows in host memory "
        "and streams each round's cohort (needs --participation)",
    )
    rows.add_argument(
        "--client-rows",
        choices=["auto", "device", "host"],
        default="auto",
        help="auto (default: by --device-memory), device (the whole state on the device) or host (per-client "
        "rows in host memory, each round's cohort copied in and out)",
    )
    rows.add_argument(
        "--host-rows-dir",
        metavar="DIR",
        default=None,
        help="keep host-resident rows in memory-mapped .npy files in DIR (for rows larger than RAM)",
    )


def add_tracking_args(p):
    """The optional TensorBoard / Weights & Biases destinations."""
    t = p.add_argument_group("tracking (optional; nothing changes without them)")
    t.add_argument(
        "--tensorboard",
        metavar="DIR",
        default=None,
        help="write TensorBoard event files of every run to DIR/<algorithm> (a sweep's runs: "
        "DIR/<algorithm>/<run>; extra: tensorboard; default none)",
    )
    t.add_argument(
        "--wandb",
        metavar="PROJECT",
        default=None,
        help="log every run to this Weights & Biases project (extra: wandb; WANDB_MODE=offline keeps "
        "it local; default none)",
    )


def help_scope(argv) -> dict | None:
    """With ``--help`` on the line: the algorithms (``--algorithm`` / ``--algorithms``) and the task
    (``--task``) it names, so that the help lists only their options; None otherwise."""
    if not any(token in ("-h", "--help") for token in argv):
        return None

    def value(flag):
        for i, token in enumerate(argv):
            if token == flag and i + 1 < len(argv):
                return argv[i + 1]
            if token.startswith(flag + "="):
                return token.split("=", 1)[1]
        return None

    algorithms = value("--algorithm") or value("--algorithms")
    names = None if algorithms is None else [a.strip() for a in algorithms.split(",") if a.strip() in ALL]
    task = value("--task")
    return {"algorithms": names or None, "task": task if task in TASKS else None}
