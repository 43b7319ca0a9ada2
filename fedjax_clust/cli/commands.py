"""The ``fedjax-clust`` command line: run, compare, sweep, study, bench, profile, project and network.

Exit status: 0 done; 2 bad input (one line ``error: ...`` naming the argument); 3 a run's client models
went non-finite (``--on-nonfinite stop``, the default; results up to that round are written); 74 the output
could not be written (:mod:`fedjax_clust.io.unwritable`); 130 interrupted with Ctrl-C (one line; a run's,
sweep's or study's folder is left resumable with ``--resume``, a comparison runs again with ``--overwrite``).

The algorithm and task options are not declared here: :mod:`fedjax_clust.cli.options` derives them from the
builders' signatures, type hints and docstrings (a plugin's options included), with their defaults. An option
given on the command line that none of the chosen algorithms (or the chosen task) takes is an error, not
silently ignored, and the builders check the values, as they do for the Python API.
"""

from __future__ import annotations

import argparse
import os
import sys

from fedjax_clust.algorithms import ALGORITHMS, algorithm_names, algorithm_spec
from fedjax_clust.cli import interrupted
from fedjax_clust.cli.config_file import OptionParser
from fedjax_clust.cli.options import CLI_DEFAULTS, algorithm_options, task_options
from fedjax_clust.core.validation import MATMUL_PRECISIONS
from fedjax_clust.cost.devices import DEVICES
from fedjax_clust.cost.network import NETWORKS
from fedjax_clust.ops.clustering import DEFAULT_QUANTILE
from fedjax_clust.run.loop import LoopOptions
from fedjax_clust.run.simulate import INITS, ON_NONFINITE
from fedjax_clust.tasks import TASKS

__all__ = ["main", "build_parser"]

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


class _Parser(OptionParser):
    """argparse with one-line errors and its long options recorded (for the config files)."""

    def error(self, message):  # argparse would print the whole usage block
        raise CliError(message)


def _typed(convert):
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


def _list_of(convert, choices=None):
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


def _add_options(group, options, lists=False):
    for opt in options:
        if opt.switch:
            group.add_argument(opt.flag, dest=opt.dest, action="store_true", help=opt.help)
        elif lists:
            group.add_argument(
                opt.flag,
                dest=opt.dest,
                type=_list_of(opt.convert, opt.choices),
                default=None,
                help=opt.help + " (a comma-separated list)",
            )
        else:
            group.add_argument(
                opt.flag, dest=opt.dest, type=_typed(opt.convert), choices=opt.choices, default=None, help=opt.help
            )


def _in_scope(option, names) -> bool:
    """Whether ``option`` applies to any of ``names`` (None: show every option)."""
    return names is None or bool(set(option.owners) & set(names))


def _add_task_args(p, scope=None, lists=False, exclude=()):
    """The task options and the Byzantine group (returned: ``--attack`` joins it in :func:`_add_algo_args`);
    ``scope`` (help only, see :func:`_help_scope`) keeps the options of the task it names; ``lists`` (a
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
    _add_options(g, [o for o in TASK_OPTIONS if _in_scope(o, tasks) and o.flag not in exclude])
    b = p.add_argument_group("Byzantine clients (with --attack)")
    listed = " (a comma-separated list: every value runs; 0 runs the attack-free baseline)" if lists else ""
    b.add_argument(
        "--byzantine-fraction",
        type=_list_of(float) if lists else float,
        default=None,
        help="fraction beta of the clients that attack (of every true cluster when the clusters are known; "
        "default none: no attacker)" + listed,
    )
    b.add_argument(
        "--byzantine-per-cluster",
        type=_list_of(int) if lists else int,
        default=None,
        help="attackers per true cluster (the thesis's Fig. 2.6: 50 beside 50 honest clients; default none)" + listed,
    )
    return b


def _add_algo_args(p, byzantine, lists=False, scope=None):
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
    _add_options(byzantine, [o for o in ALGORITHM_OPTIONS if o.flag == "--attack"], lists=lists)
    _add_options(
        p.add_argument_group(title + ("; comma-separated lists: every combination runs)" if lists else ")")),
        [o for o in ALGORITHM_OPTIONS if o.flag != "--attack" and _in_scope(o, names)],
        lists=lists,
    )


def _add_run_args(p, out_default=None, seed=True):
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


def _add_grid_args(p, scope, what: str):
    """The options of a command that runs lists of values (``sweep``, ``study``): a config file, every
    algorithm and task option as a comma-separated list, the run options, and the runs per compiled program."""
    p.add_argument(
        "--config",
        metavar="FILE",
        help=f"a TOML file of options (lists: the {what}'s values); options on the command line override it",
    )
    _add_algo_args(p, _add_task_args(p, scope, lists=True), lists=True, scope=scope)
    _add_run_args(p, seed=False)
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


def _add_eval_clients(p):
    """A sampled evaluation (``run``, ``compare``, ``sweep``, ``study``)."""
    p.add_argument(
        "--eval-clients",
        type=int,
        default=None,
        metavar="K",
        help="evaluate K clients drawn anew at each evaluation (by the seed and the round) instead of all of "
        "them, for populations too large to evaluate whole; recorded in run.json (default: every client)",
    )


def _add_population_args(p):
    """A large population's options (``run`` and ``compare``): a sampled evaluation and where the rows live."""
    _add_eval_clients(p)
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


def _add_tracking_args(p):
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


def _tracking(args):
    """The run's Tracking, checked (None without --tensorboard / --wandb)."""
    if not (args.tensorboard or args.wandb):
        return None
    from fedjax_clust.io.tracking import Tracking

    return Tracking(tensorboard=args.tensorboard, wandb=args.wandb).check()


def _help_scope(argv) -> dict | None:
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


def build_parser(scope: dict | None = None) -> argparse.ArgumentParser:
    """The command line; ``scope`` (from :func:`_help_scope`) narrows the help to the named algorithms and task."""
    parser = _Parser(prog="fedjax-clust", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cpu-devices",
        type=int,
        default=None,
        help="JAX CPU devices to split clients over (default: one per core; 1: no splitting)",
    )
    parser.add_argument(
        "--compile-cache",
        metavar="DIR|off",
        default=None,
        help="JAX's persistent compilation cache: a second run of the same programs reads them instead of "
        "compiling (default: FEDJAX_CLUST_COMPILE_CACHE, else ~/.cache/fedjax-clust/jax; off: none)",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
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
    _add_algo_args(run, _add_task_args(run, scope), scope=scope)
    _add_run_args(run)
    _add_tracking_args(run)
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
    _add_population_args(run)
    cmp_ = sub.add_parser("compare", help="run several algorithms, print a table, plot convergence")
    cmp_.add_argument(
        "--algorithms",
        default="federated-clustering,local,global,ground-truth",
        help="comma-separated algorithm names (default %(default)s)",
    )
    _add_algo_args(cmp_, _add_task_args(cmp_, scope), scope=scope)
    _add_run_args(cmp_, out_default="results")
    _add_tracking_args(cmp_)
    _add_population_args(cmp_)
    bench = sub.add_parser("bench", help="time one round of each configuration (JSON lines)")
    bench.add_argument(
        "--model",
        choices=[
            "linear",
            "mlp",
            "cnn",
            "lenet5",
            "robust",
            "srfca",
            "participation",
            "privacy",
            "pd-protocol",
            "track-clusters",
            "study",
            "attack-switch",
            "fedavg",
        ],
        default="linear",
        help="linear: every algorithm on the synthetic task (default); mlp: the FLOP rate of "
        "Federated-Clustering's cross-gradient kernel on an 11,110-parameter MLP; cnn / lenet5: "
        "one FC round on MNIST rotation with that Flax model at the paper's size (N 300, "
        "16 subgroups, batch 32) and a per-client Python loop at --loop-clients; robust: "
        "every robust aggregator on N messages of --dim floats against the mean, and the FC "
        "round with and without 20%% large-gradient attackers; srfca: SR-FCA's all-pairs l2 and "
        "cross-loss distances at N = --clients (default 1,000) and a Python pair loop at "
        "--loop-clients (default 30); participation: FC, IFCA-1 and Global with a fraction "
        "1, 0.5, 0.25, 0.1 of --clients (default 1,000) per round, time and memory against "
        "the full round (FC's S x S block: about f^2); privacy: Global, IFCA-1 and HypCluster with central "
        "DP against the same round without (N = --clients, default 1,000, d = --dim, default 100), Poisson "
        "slots against a fixed cohort, and a sweep of 4 noise multipliers against 4 runs; pd-protocol: Fig. "
        "4.5's grid of the "
        "thesis's repeated price-discrimination game (20 bias intervals x 3 sellers x --seeds, "
        "--rounds rounds) as one compiled program, against a Python loop over --loop-rounds "
        "rounds of the same round function; track-clusters: Federated-Clustering's round with and "
        "without track_clusters (the misclustering's cost) at --clients (default 300,1200,4800); study: "
        "a study of local, global and ground-truth (2 learning rates x 3 seeds, --rounds, default 300) against "
        "the same sweeps by hand, the host time the study adds; attack-switch: a sweep of 6 attacks x 5 attackers' "
        "shares as one program switching over the attack kinds against a program per kind (Global and "
        "Federated-Clustering, runs mapped and vmapped; --rounds, default 50; run with --compile-cache off); fedavg: "
        "FedAvg's local training on the MNIST MLP at --clients (default 1,000), tau = 1 and 5 local steps, one "
        "epoch and FedAdam, against the one-step Global round (--batch-size, default 32)",
    )
    bench.add_argument(
        "--suite",
        choices=["accelerator", *REPORT_SUITES],
        default=None,
        help="accelerator: every accelerator target and cost in one run, written to --out as "
        "report.json, report.md and scaling.png (see fedjax_clust.bench.accelerator); "
        "ragged: full passes and minibatch steps of a log-normal (sigma 1.5) population of 1,000 "
        "clients, ragged against padded and against equal-sized clients, written to --out as "
        "report.json and report.md (see fedjax_clust.bench.ragged); char-lstm: the Shakespeare "
        "char-LSTM's client-parallel gradient step at 4, 16 and 32 clients, time and achieved GFLOP/s "
        "(fedjax_clust.bench.sequence); population: a FedAvg round of 10 or 100 participants against all "
        "clients of 1,000 and 10,000, server-held model against per-client rows "
        "(fedjax_clust.bench.population); streaming: Federated-Clustering and Ditto with 100,000 clients' "
        "rows in host memory against the resident state (fedjax_clust.bench.streaming); cohorts: FedAvg and "
        "IFCA with LEAF's FEMNIST CNN, cohorts of 10 and 100 in populations of 1,000 to 1,000,000 clients "
        "indexing the MNIST pool, seconds and device bytes against N (fedjax_clust.bench.cohorts); --quick "
        "runs any of them at tiny sizes",
    )
    bench.add_argument("--out", default=None, help="--suite: the report's folder")
    bench.add_argument(
        "--quick",
        action="store_true",
        help="--suite and --model attack-switch: tiny sizes (checks the report, not the device)",
    )
    bench.add_argument("--overwrite", action="store_true", help="--suite: replace an earlier report in --out")
    bench.add_argument(
        "--clients",
        default=None,
        help="comma-separated client counts N (default 300; --model mlp: one N, default 4096)",
    )
    bench.add_argument(
        "--repeats", type=int, default=None, help="timed repetitions per configuration (default 20; --model mlp: 3)"
    )
    bench.add_argument(
        "--pair-loop-rounds",
        type=int,
        default=None,
        help="--model linear: rounds of the Python pair-loop reference to time (default 1; 0: skip)",
    )
    bench.add_argument(
        "--quantile", type=float, default=DEFAULT_QUANTILE, help=f"quantile radius rule (default {DEFAULT_QUANTILE})"
    )
    bench.add_argument("--clustering-steps", type=int, default=10)
    bench.add_argument(
        "--matmul-precision",
        choices=MATMUL_PRECISIONS,
        default="highest",
        help="matmul precision of the timed rounds (default highest)",
    )
    m = bench.add_argument_group("--model mlp / cnn / lenet5")
    m.add_argument(
        "--subgroups",
        type=int,
        default=None,
        help="random subgroups G per round (default 16; --model linear: 1, Federated-Clustering only)",
    )
    bench.add_argument(
        "--dim",
        type=int,
        default=None,
        help="--model robust: coordinates per aggregated message (default 100,000); --model privacy: the synthetic "
        "task's d (default 100)",
    )
    bench.add_argument(
        "--others",
        default=None,
        help="--model linear: comma-separated algorithms timed beside Federated-Clustering "
        "(default: all but knn-per; none: Federated-Clustering only)",
    )
    m.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="minibatch per client (default 32, the paper's neural-network runs)",
    )
    m.add_argument(
        "--loop-clients",
        type=int,
        default=None,
        help="--model cnn / lenet5: clients of the per-client Python loop reference (default 16; 0: skip)",
    )
    m.add_argument(
        "--conv-models",
        type=int,
        default=None,
        help="--model cnn / lenet5: client models whose gradients are timed with the convolutions as "
        "patch matmuls and as XLA's convolution (default 40, a multiple of 4; 0: skip)",
    )
    m.add_argument("--input-dim", type=int, default=None, help="MLP inputs (default 100)")
    m.add_argument("--hidden", type=int, default=None, help="MLP hidden units (default 100)")
    m.add_argument("--classes", type=int, default=None, help="classes (default 10)")
    m.add_argument(
        "--no-single-device",
        action="store_true",
        help="skip the one-device repeats (default: also time the round on one device)",
    )
    g = bench.add_argument_group("--model pd-protocol (and study: --rounds)")
    g.add_argument("--seeds", type=int, default=None, help="seeds per (seller, bias interval) (default 10)")
    g.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="pd-protocol: rounds of the compiled grid (default 20,000); study: rounds of every run (default 300)",
    )
    g.add_argument(
        "--loop-rounds",
        type=int,
        default=None,
        help="rounds of the Python-loop reference, also timed compiled (default 500)",
    )
    sw = sub.add_parser(
        "sweep",
        help="many runs of one algorithm (hyperparameter lists x seeds) as one compiled "
        "program; one result folder per run, a table and a plot",
    )
    sw.add_argument("--algorithm", required=True, choices=ALL, help=", ".join(ALL))
    _add_grid_args(sw, scope, "sweep")
    sw.add_argument("--seeds", default="0", help="comma-separated run seeds (default 0)")
    sw.add_argument(
        "--resume",
        action="store_true",
        help="continue the sweep in --out: keep every program whose runs are in OUT/runs, run the others",
    )
    _add_tracking_args(sw)
    _add_eval_clients(sw)
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
    _add_grid_args(st, scope, "study")
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
    _add_eval_clients(st)
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
    _add_algo_args(prof, _add_task_args(prof, scope, exclude=("--clients",)), scope=scope)
    proj = sub.add_parser(
        "project",
        help="project a profile onto named devices (H100, A100, L4, T4, TPU v5e, ...): seconds per round against "
        "N, the N at one second and at full memory (projections, CSV + plot)",
        description="Project the rounds a profile counted onto devices from their datasheets, as a range between a "
        "stated efficiency and the one the committed accelerator reports measured (fedjax_clust.cost.devices). "
        "`profile` writes the same files for every device; this reprojects without measuring again.",
    )
    proj.add_argument("profile", help="a profile's folder (or its profile.json)")
    proj.add_argument("--out", default=None, help="output folder (default: the profile's folder)")
    proj.add_argument("--overwrite", action="store_true", help="replace earlier projections in --out")
    proj.add_argument(
        "--devices",
        default=None,
        help="comma-separated device names (default: every registered one and this-machine): "
        + ", ".join([*DEVICES, "this-machine"]),
    )
    proj.add_argument("--algorithms", default=None, help="comma-separated algorithms of the profile (default: all)")
    proj.add_argument(
        "--stated-efficiency",
        default=None,
        help="COMPUTE,MEMORY: the stated end's shares of the peaks (default 0.75,0.75)",
    )
    proj.add_argument("--plot", default=None, help="comma-separated algorithms to plot (default federated-clustering)")
    net = sub.add_parser(
        "network",
        help="a profile's rounds over a deployment's network: round wall time per algorithm and N, time to a "
        "target error from real runs (projections, CSV + plot)",
        description="Project every round of a profile over a network (fedjax_clust.cost.network): each client's "
        "traffic (its algorithm's per-client bytes up and down), links and compute, the server's link and its "
        "program; a synchronous round waits for its slowest participant, a --deadline drops stragglers. With "
        "--runs and --target: the rounds a real run needed to reach the target x the projected round time.",
    )
    net.add_argument("profile", help="a profile's folder (or its profile.json)")
    net.add_argument(
        "--network",
        required=True,
        help="a registered network (" + ", ".join(NETWORKS) + ") or a trace file (CSV / JSON with the columns "
        "up_bytes_per_s, down_bytes_per_s, latency_s and optionally flops_per_s, one row per client)",
    )
    net.add_argument("--out", default=None, help="output folder (default: the profile's folder)")
    net.add_argument("--overwrite", action="store_true", help="replace earlier network projections in --out")
    net.add_argument(
        "--server-bandwidth", type=float, default=None, help="server bytes/s each way (default: unlimited)"
    )
    net.add_argument("--deadline", type=float, default=None, help="seconds after which a round drops its stragglers")
    net.add_argument("--examples", type=int, default=32, help="examples a client's minibatch evaluation reads (32)")
    net.add_argument(
        "--server-device",
        default=None,
        help="project the server's program onto this registered device (" + ", ".join(DEVICES) + ") instead of "
        "the time measured by the profile; also extends N to the projection's grid",
    )
    net.add_argument("--algorithms", default=None, help="comma-separated algorithms of the profile (default: all)")
    net.add_argument("--runs", default=None, help="a run folder, or a compare's folder of runs: rounds to --target")
    net.add_argument("--metric", default="mean_sq_dist_to_optimum", help="the metric --target applies to")
    net.add_argument("--target", type=float, default=None, help="the metric's target value (with --runs)")
    net.add_argument("--rounds", type=int, default=50, help="rounds drawn per configuration with partial participation")
    net.add_argument("--seed", type=int, default=0, help="seed of the drawn links and participants (default 0)")
    parser.commands = sub.choices  # each command's own parser (--config reads the options of run / sweep)
    return parser


def _given(args, opt) -> bool:
    value = getattr(args, opt.dest, None)
    return value is not None and value is not False


def _check_applicable(args, options, names, kind):
    """An option given for none of ``names`` (algorithms, or the one task) is an error."""
    for opt in options:
        if _given(args, opt) and not set(names) & set(opt.applies):
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


def _check_required(args, options, name, kind):
    """A keyword that ``name``'s builder requires (no default) must be given."""
    for opt in options:
        if name in opt.owners and name not in opt.defaults and not _given(args, opt):
            raise CliError(f"{kind} {name} needs {opt.flag}")


def _task_from_args(args, allow_no_attacker=False):
    import inspect

    from fedjax_clust.tasks import make_task

    _check_applicable(args, TASK_OPTIONS, [args.task], "task")
    _check_required(args, TASK_OPTIONS, args.task, "--task")
    options = {opt.kwarg(args.task): getattr(args, opt.dest) for opt in TASK_OPTIONS if _given(args, opt)}
    if "seed" in inspect.signature(TASKS[args.task]).parameters:
        options["seed"] = args.seed
    return _with_byzantine(make_task(args.task, **options), args, allow_no_attacker)


def _with_byzantine(task, args, allow_none=False):
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


def _algo_options(name, args, lists=False) -> dict:
    """The keyword arguments of ``make_algorithm`` for algorithm ``name``: the options given that it takes,
    and the CLI's own default learning rate; ``lists``: a sweep's lists of values."""
    options = {}
    for opt in ALGORITHM_OPTIONS:
        if _given(args, opt) and name in opt.owners:
            value = getattr(args, opt.dest)
            options[opt.kwarg(name)] = [value] if lists and opt.switch else value
    for key, value in CLI_DEFAULTS.items():
        options.setdefault(key, [value] if lists else value)
    if options.get("dp_epsilon") is not None and options.get("dp_rounds") is None and hasattr(args, "rounds"):
        options["dp_rounds"] = [args.rounds] if lists else args.rounds  # a target epsilon lasts the run's rounds
    return options


def _check_run_args(args, names):
    from fedjax_clust.core.validation import check_int, check_seed

    check_int("--rounds", args.rounds)
    check_int("--eval-every", args.eval_every)
    check_seed(args.seed, "--seed")
    _check_applicable(args, ALGORITHM_OPTIONS, names, "algorithm")
    for name in names:
        _check_required(args, ALGORITHM_OPTIONS, name, "--algorithm")
    if args.init != "shared":
        shared_only = [n for n in names if n not in OWN_MODELS]
        if shared_only:
            raise CliError(
                f"--init {args.init} does not apply to {', '.join(shared_only)} (they start from shared "
                f"cluster models; it applies to {', '.join(OWN_MODELS)})"
            )
    _check_dependent(args)


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


def _check_dependent(args):
    """One-line errors for options that would do nothing (``DEPENDENT``) and for contradictory switches."""
    for dest, flag, holds, needs in DEPENDENT:
        value = getattr(args, dest, None)
        if value is not None and value is not False and not holds(args):
            raise CliError(f"{flag} applies only with {needs}")
    if getattr(args, "resume", False) and getattr(args, "overwrite", False):
        raise CliError("--resume continues the run in --out and --overwrite replaces it: give one of them")


def _placement(args):
    """The run's :class:`~fedjax_clust.run.placement.Placement` from ``--client-rows``, ``--device-memory`` and
    ``--host-rows-dir``."""
    from fedjax_clust.run.placement import Placement

    return Placement(client_rows=args.client_rows, device_memory=args.device_memory, host_rows_dir=args.host_rows_dir)


def _cmd_run(args):
    from fedjax_clust.algorithms import make_algorithm
    from fedjax_clust.algorithms.settings import grouped_settings
    from fedjax_clust.io.jsonio import dumps
    from fedjax_clust.run.simulate import NonFiniteError, RunInterrupted, simulate

    _check_run_args(args, [args.algorithm])
    if args.checkpoint_every is not None:
        from fedjax_clust.core.validation import check_int

        check_int("--checkpoint-every", args.checkpoint_every)
    task = _task_from_args(args)
    options = _algo_options(args.algorithm, args)
    if args.resume:
        options.update(_recorded_options(args, options))
    algo = make_algorithm(
        args.algorithm, task, **grouped_settings({**options, "matmul_precision": args.matmul_precision})
    )
    tracking = _tracking(args)
    resolved = _resolved(args)
    checked = {k: v for k, v in resolved.items() if k.replace("-", "_") not in MAY_CHANGE_ON_RESUME}
    try:
        result = simulate(
            algo,
            task,
            seed=args.seed,
            checkpoint_every=args.checkpoint_every,
            resume=args.resume,
            config={"options": checked},
            placement=_placement(args),
            **_loop_options(args, tracking).kwargs(),
        )
    except (NonFiniteError, RunInterrupted):  # the run started: its folder gets its configuration too
        _write_config(args.out, resolved, "run")
        raise
    _write_config(args.out, resolved, "run")
    print(dumps({k: v for k, v in result.summary.items() if not isinstance(v, dict)}))
    return 0


def _recorded_options(args, options) -> dict:
    """The options a resumed run takes from its ``run.json`` (the spec's ``resume_options``, e.g.
    Federated-Clustering's resolved auto chunk), those given on the command line left as given. Empty
    when the folder holds no run of this algorithm."""
    from fedjax_clust.algorithms import algorithm_spec
    from fedjax_clust.io.run_folder import saved_run_config

    if args.out is None:
        return {}
    saved = saved_run_config(args.out)
    hparams = saved.get("hparams") if isinstance(saved, dict) and saved.get("algorithm") == args.algorithm else None
    if not isinstance(hparams, dict):
        return {}
    recorded = algorithm_spec(args.algorithm).resume_options(hparams)
    return {k: v for k, v in recorded.items() if k not in options}


def _write_config(out, resolved, command):
    from fedjax_clust.cli.config_file import write_config

    write_config(
        out,
        resolved,
        f"The resolved options of this {command} (an option not listed takes its default): "
        f"`fedjax-clust {command} --config`\nthis file repeats it (with --overwrite, or "
        "another --out).",
    )


def _algorithm_list(text: str) -> list:
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


def _cmd_compare(args):
    from fedjax_clust.run.compare import format_table, run_comparison

    names = _algorithm_list(args.algorithms)
    _check_run_args(args, names)
    task = _task_from_args(args)
    options = {name: _algo_options(name, args) for name in names}
    shared = {}  # the optimiser options run_comparison takes once for all algorithms
    for key in ("learning_rate", "momentum", "momentum_form", "batch_size"):
        for opts in options.values():
            if key in opts:
                shared[key] = opts.pop(key)
    results = run_comparison(
        task,
        names,
        seed=args.seed,
        **shared,
        matmul_precision=args.matmul_precision,
        options=options,
        placement=_placement(args),
        **_loop_options(args, _tracking(args)).kwargs(),
    )
    print(format_table(results))
    print("\n" + _wrote(args.out, ("results.json", "convergence.png", *results)))
    stopped = [r for r in results.values() if r.summary["status"] != "completed"]
    for r in stopped:
        print(f"error: {_one_line(r.summary['message'])}", file=sys.stderr)
    return 3 if stopped else 0


def _seeded_task(args) -> tuple:
    """(task grid, ``(seed, **task_values) -> Task``) of a sweep or a study: a list of attackers' shares is a
    task dimension (one program per value); every run's task is built from its seed."""
    import copy

    task_grid = {}
    for name in ("byzantine_fraction", "byzantine_per_cluster"):
        given = getattr(args, name)
        if given is not None and len(given) > 1:
            task_grid[name] = given
        setattr(args, name, None if given is None else given[0])

    def task_of(seed, **task_values):
        seeded = copy.copy(args)
        seeded.seed = seed
        for name, value in task_values.items():
            setattr(seeded, name, value)
        return _task_from_args(seeded, allow_no_attacker=bool(task_grid))

    return task_grid, task_of


def _runs_per_program(text: str):
    if text == "all":
        return None
    return text if text == "auto" else _int_list(text, "--runs-per-program")[0]


def _grid_and_options(name: str, args) -> tuple:
    """Algorithm ``name``'s options of a sweep or study: (grid: those given with several values, fixed: those
    given once, with the run's matmul precision); ``--chunk-size all`` is None (every row at once)."""
    values = _algo_options(name, args, lists=True)
    if "chunk_size" in values:
        values["chunk_size"] = [None if v == "all" else v for v in values["chunk_size"]]
    grid = {k: v for k, v in values.items() if len(v) > 1}
    fixed = {k: v[0] for k, v in values.items() if len(v) == 1}
    fixed["matmul_precision"] = args.matmul_precision
    return grid, fixed


def _cmd_sweep(args):
    from fedjax_clust.run.sweep import OUTPUTS, print_table, sweep

    seeds = _int_list(args.seeds, "--seeds")
    args.seed = seeds[0]
    _check_run_args(args, [args.algorithm])
    tracking = _tracking(args)
    runs_per_program = _runs_per_program(args.runs_per_program)
    grid, options = _grid_and_options(args.algorithm, args)

    task_grid, task_of = _seeded_task(args)
    result = sweep(
        args.algorithm,
        task_of,
        grid=grid,
        task_grid=task_grid,
        seeds=seeds,
        options=options,
        runs_per_program=runs_per_program,
        run_batching=args.run_batching,
        resume=args.resume,
        **_loop_options(args, tracking).kwargs(),
    )
    for name, values in task_grid.items():  # the config file repeats the whole list
        setattr(args, name, values)
    _write_config(args.out, {k: v for k, v in _resolved(args).items() if k != "seed"}, "sweep")  # --seeds is its
    print(print_table(result))
    kept = sum(bool(p.get("kept")) for p in result.programs)
    print(
        f"\n{len(result.runs)} runs in {len(result.programs)} program(s)"
        + (f" ({kept} kept from disk)" if kept else "")
        + f", {result.seconds:.1f} s; "
        + _wrote(args.out, OUTPUTS)
    )
    stopped = [r for r in result.runs if r.summary["status"] != "completed"]
    if stopped:
        print(
            f"error: {len(stopped)} of {len(result.runs)} runs went non-finite (see their summary.json)",
            file=sys.stderr,
        )
    return 3 if stopped else 0


def _cmd_study(args):
    from fedjax_clust.run.study import STUDY_OUTPUTS, study, study_table_markdown

    names = _algorithm_list(args.algorithms)
    seeds = _int_list(args.seeds, "--seeds")
    args.seed = seeds[0]
    _check_run_args(args, names)
    algorithm_grids, algorithm_options = {}, {}
    for name in names:
        algorithm_grids[name], algorithm_options[name] = _grid_and_options(name, args)
    task_grid, task_of = _seeded_task(args)
    loop = _loop_options(args, None)
    result = study(
        names,
        task_of,
        rounds=loop.rounds,
        seeds=seeds,
        task_grid=task_grid,
        algorithm_grids=algorithm_grids,
        algorithm_options=algorithm_options,
        eval_every=loop.eval_every,
        metric=args.metric,
        higher_better=args.higher_better,
        confidence=args.confidence,
        init=loop.init,
        on_nonfinite=loop.on_nonfinite,
        out_dir=loop.out_dir,
        overwrite=loop.overwrite,
        resume=args.resume,
        progress=loop.progress,
        runs_per_program=_runs_per_program(args.runs_per_program),
        run_batching=args.run_batching,
        eval_clients=loop.eval_clients,
    )
    for name, values in task_grid.items():  # the config file repeats the whole list
        setattr(args, name, values)
    _write_config(args.out, {k: v for k, v in _resolved(args).items() if k != "seed"}, "study")
    print(study_table_markdown(result))
    kept = f" ({', '.join(result.kept)} kept from {args.out})" if result.kept else ""
    print(f"\n{len(result.runs)} runs of {len(names)} algorithm(s){kept}; " + _wrote(args.out, STUDY_OUTPUTS))
    stopped = [r for r in result.runs if r["status"] != "completed"]
    if stopped:
        print(
            f"error: {len(stopped)} of {len(result.runs)} runs went non-finite (see their summary.json)",
            file=sys.stderr,
        )
    return 3 if stopped else 0


def _loop_options(args, tracking) -> LoopOptions:
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


def _int_list(text, flag):
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise CliError(f"{flag} must be comma-separated integers, got {text!r}") from None
    if not values:
        raise CliError(f"{flag} must list at least one integer, got {text!r}")
    return values


def _cmd_bench(args):
    from fedjax_clust.core.validation import check_int
    from fedjax_clust.io.jsonio import dumps

    quick_model = args.quick and args.suite is None and args.model == "attack-switch"
    if args.suite is not None or args.out is not None or (args.quick and not quick_model) or args.overwrite:
        return _bench_suite(args)
    if args.dim is not None and args.model not in ("robust", "privacy"):
        raise CliError("--dim applies to --model robust / privacy only")
    if args.others is not None and args.model != "linear":
        raise CliError("--others applies to --model linear only")
    mlp_only = [
        flag
        for flag, value in [
            ("--batch-size", args.batch_size),
            ("--input-dim", args.input_dim),
            ("--hidden", args.hidden),
            ("--classes", args.classes),
            ("--no-single-device", args.no_single_device),
        ]
        if value not in (None, False)
    ]
    if args.repeats is not None:
        check_int("--repeats", args.repeats)
    if args.conv_models is not None and args.model not in ("cnn", "lenet5"):
        raise CliError(f"--conv-models applies to --model cnn / lenet5, not {args.model}")
    if args.loop_clients is not None and args.model not in ("cnn", "lenet5", "srfca"):
        raise CliError("--loop-clients applies to --model cnn / lenet5 / srfca only")
    # none of these takes the MLP / image / linear-only flags
    if args.model in ("srfca", "robust", "participation", "privacy", "track-clusters", "study", "attack-switch"):
        given = mlp_only + [
            flag
            for flag, value in [("--pair-loop-rounds", args.pair_loop_rounds), ("--subgroups", args.subgroups)]
            if value is not None
        ]
        if given:
            raise CliError(f"{given[0]} does not apply to --model {args.model}")
    game_flags = [
        flag
        for flag, value in [("--seeds", args.seeds), ("--rounds", args.rounds), ("--loop-rounds", args.loop_rounds)]
        if value is not None
    ]
    if game_flags and args.model not in ("pd-protocol", "study", "attack-switch"):
        raise CliError(
            f"{game_flags[0]} applies to --model pd-protocol{' and study' if game_flags[0] == '--rounds' else ''} only"
        )
    if args.model in ("study", "attack-switch"):
        given = [f for f in game_flags if f != "--rounds"] + (["--clients"] if args.clients is not None else [])
        if given:
            raise CliError(f"{given[0]} does not apply to --model {args.model}")
    if args.model == "fedavg":
        given = [f for f in mlp_only if f != "--batch-size"] + [
            flag
            for flag, value in [("--pair-loop-rounds", args.pair_loop_rounds), ("--subgroups", args.subgroups)]
            if value is not None
        ]
        if given or game_flags:
            raise CliError(f"{(given + game_flags)[0]} does not apply to --model fedavg")
        from fedjax_clust.bench.fedavg import run_fedavg_benchmark

        clients = _int_list(args.clients if args.clients is not None else "1000", "--clients")
        if len(clients) != 1 or clients[0] % 4:
            raise CliError(f"--model fedavg takes one client count, a multiple of 4, got {args.clients!r}")
        batch = 32 if args.batch_size is None else check_int("--batch-size", args.batch_size)
        rows = run_fedavg_benchmark(clients[0], batch_size=batch, repeats=args.repeats or 5)
    elif args.model == "attack-switch":
        from fedjax_clust.bench.attack_switch import QUICK_ATTACK_SWITCH, run_attack_switch_benchmark

        rounds = 50 if args.rounds is None else check_int("--rounds", args.rounds)
        sizes = QUICK_ATTACK_SWITCH if args.quick else {}
        rows = run_attack_switch_benchmark(rounds=rounds, repeats=args.repeats or 2, **sizes)
    elif args.model == "study":
        from fedjax_clust.bench.study_overhead import run_study_overhead_benchmark

        rounds = 300 if args.rounds is None else check_int("--rounds", args.rounds)
        rows = run_study_overhead_benchmark(rounds=rounds, repeats=args.repeats or 5)
    elif args.model == "pd-protocol":
        given = mlp_only + [
            flag
            for flag, value in [
                ("--pair-loop-rounds", args.pair_loop_rounds),
                ("--subgroups", args.subgroups),
                ("--clients", args.clients),
            ]
            if value is not None
        ]
        if given:
            raise CliError(f"{given[0]} does not apply to --model pd-protocol")
        from fedjax_clust.bench.games import run_pd_protocol_benchmark

        sizes = {
            flag: check_int(flag, value)
            for flag, value in (("--seeds", args.seeds), ("--rounds", args.rounds), ("--loop-rounds", args.loop_rounds))
            if value is not None
        }
        sizes = {"--seeds": 10, "--rounds": 20_000, "--loop-rounds": 500, **sizes}
        rows = run_pd_protocol_benchmark(
            seeds=sizes["--seeds"],
            rounds=sizes["--rounds"],
            loop_rounds=sizes["--loop-rounds"],
            repeats=args.repeats or 3,
        )
    elif args.model == "track-clusters":
        from fedjax_clust.bench.rounds import run_track_clusters_benchmarks

        clients = _int_list(args.clients if args.clients is not None else "300,1200,4800", "--clients")
        if min(clients) < 4:
            raise CliError(f"--model track-clusters takes client counts >= 4, got {args.clients!r}")
        rows = run_track_clusters_benchmarks(clients, repeats=args.repeats or 5)
    elif args.model == "privacy":
        from fedjax_clust.bench.privacy import run_privacy_benchmarks

        clients = _int_list(args.clients if args.clients is not None else "1000", "--clients")
        if len(clients) != 1 or clients[0] < 8:
            raise CliError(f"--model privacy takes one client count >= 8, got {args.clients!r}")
        dim = 100 if args.dim is None else check_int("--dim", args.dim)
        rows = run_privacy_benchmarks(clients[0], dim=dim, repeats=args.repeats or 7)
    elif args.model == "participation":
        from fedjax_clust.bench.rounds import run_participation_benchmarks

        clients = _int_list(args.clients if args.clients is not None else "1000", "--clients")
        if len(clients) != 1 or clients[0] < 40:
            raise CliError(f"--model participation takes one client count >= 40, got {args.clients!r}")
        rows = run_participation_benchmarks(clients[0], repeats=args.repeats or 5)
    elif args.model == "srfca":
        from fedjax_clust.bench.rounds import run_srfca_benchmarks

        clients = _int_list(args.clients if args.clients is not None else "1000", "--clients")
        loop_clients = 30 if args.loop_clients is None else args.loop_clients
        if len(clients) != 1 or clients[0] < 4 or loop_clients < 4:
            raise CliError(f"--model srfca takes one client count >= 4 (and --loop-clients >= 4), got {args.clients!r}")
        rows = run_srfca_benchmarks(clients[0], repeats=args.repeats or 5, loop_clients=loop_clients)
    elif args.model == "robust":
        from fedjax_clust.bench.rounds import run_robust_benchmarks

        clients = _int_list(args.clients if args.clients is not None else "300", "--clients")
        if len(clients) != 1 or clients[0] < 4:
            raise CliError(f"--model robust takes one client count >= 4, got {args.clients!r}")
        dim = 100_000 if args.dim is None else args.dim
        check_int("--dim", dim)
        rows = run_robust_benchmarks(
            clients[0],
            dim,
            repeats=args.repeats or 10,
            clients=clients[0],
            quantile=args.quantile,
            clustering_steps=args.clustering_steps,
        )
    elif args.model in ("cnn", "lenet5"):
        image_only = [f for f in mlp_only if f != "--batch-size"] + (
            ["--pair-loop-rounds"] if args.pair_loop_rounds is not None else []
        )
        if image_only:
            raise CliError(f"{image_only[0]} does not apply to --model {args.model}")
        from fedjax_clust.bench.image import run_image_benchmark

        clients = _int_list(args.clients if args.clients is not None else "300", "--clients")
        if len(clients) != 1:
            raise CliError(f"--model {args.model} takes one client count, got {args.clients!r}")
        conv_models = 40 if args.conv_models is None else args.conv_models
        check_int("--conv-models", conv_models, 0)
        if conv_models % 4:
            raise CliError(f"--conv-models must be a multiple of 4 (the task's clusters), got {conv_models}")
        rows = run_image_benchmark(
            clients[0],
            subgroups=args.subgroups or 16,
            batch_size=args.batch_size or 32,
            model=args.model,
            repeats=args.repeats or 3,
            clustering_steps=args.clustering_steps,
            quantile=args.quantile,
            loop_clients=16 if args.loop_clients is None else args.loop_clients,
            conv_models=conv_models,
            matmul_precision=args.matmul_precision,
        )
    elif args.model == "mlp":
        if args.pair_loop_rounds is not None:
            raise CliError("--pair-loop-rounds applies to --model linear only")
        from fedjax_clust.bench.mlp import run_mlp_benchmark

        clients = _int_list(args.clients if args.clients is not None else "4096", "--clients")
        if len(clients) != 1:
            raise CliError(f"--model mlp takes one client count, got {args.clients!r}")
        sizes = {"--batch-size": 32, "--input-dim": 100, "--hidden": 100, "--classes": 10}
        for flag in sizes:
            value = getattr(args, flag[2:].replace("-", "_"))
            sizes[flag] = sizes[flag] if value is None else check_int(flag, value, 2 if flag == "--classes" else 1)
        rows = run_mlp_benchmark(
            clients[0],
            subgroups=args.subgroups or 16,
            batch_size=sizes["--batch-size"],
            input_dim=sizes["--input-dim"],
            hidden=sizes["--hidden"],
            classes=sizes["--classes"],
            repeats=args.repeats or 3,
            clustering_steps=args.clustering_steps,
            quantile=args.quantile,
            single_device=not args.no_single_device,
            matmul_precision=args.matmul_precision,
        )
    else:
        if mlp_only:
            raise CliError(f"{mlp_only[0]} applies to --model mlp only")
        from fedjax_clust.bench.rounds import run_benchmarks

        clients = _int_list(args.clients if args.clients is not None else "300", "--clients")
        for n in clients:
            check_int("--clients", n, 4)
        pair_loop = args.pair_loop_rounds if args.pair_loop_rounds is not None else 1
        check_int("--pair-loop-rounds", pair_loop, 0)
        subgroups = 1 if args.subgroups is None else args.subgroups
        check_int("--subgroups", subgroups)
        if subgroups > min(clients):
            raise CliError(f"--subgroups {subgroups} exceeds the smallest --clients value {min(clients)}")
        others = None
        if args.others is not None:
            others = () if args.others == "none" else tuple(x.strip() for x in args.others.split(","))
            unknown = [x for x in others if x not in ALGORITHMS or x in ("federated-clustering", "knn-per")]
            if unknown:
                raise CliError(
                    f"--others: {unknown[0]!r} is not one of "
                    f"{', '.join(a for a in ALGORITHMS if a not in ('federated-clustering', 'knn-per'))}"
                    " (or none)"
                )
        rows = run_benchmarks(
            clients,
            repeats=args.repeats or 20,
            pair_loop_rounds=pair_loop,
            quantile=args.quantile,
            clustering_steps=args.clustering_steps,
            matmul_precision=args.matmul_precision,
            others=others,
            subgroups=subgroups,
        )
    for row in rows:
        print(dumps(row), flush=True)
    return 0


def _bench_suite(args):
    """``bench --suite accelerator|ragged --out DIR [--quick] [--overwrite]``: a report folder."""
    if args.suite is None:
        raise CliError("--out, --quick and --overwrite go with --suite accelerator or --suite ragged")
    if args.out is None:
        raise CliError(f"--suite {args.suite} needs --out DIR")
    defaults = build_parser().commands["bench"].parse_args([])
    given = [
        flag
        for flag, action in build_parser().commands["bench"].long_options.items()
        if flag not in ("suite", "out", "quick", "overwrite", "help")
        and getattr(args, action.dest) != getattr(defaults, action.dest)
    ]
    if given:
        raise CliError(f"--{given[0]} does not apply to --suite {args.suite}")
    if args.suite in REPORT_SUITES:
        return _report_suite(args)
    from fedjax_clust.bench.accelerator import run_accelerator_suite

    report = run_accelerator_suite(
        args.out,
        quick=args.quick,
        overwrite=args.overwrite,
        progress=lambda label: print(f"measuring: {label}", file=sys.stderr, flush=True),
    )
    counts = {s: sum(r["status"] == s for r in report["rows"]) for s in ("pass", "fail", "skipped", "not judged")}
    judged = (
        f"{counts['not judged']} not judged (quick sizes)"
        if report["quick"]
        else f"{counts['pass']} pass, {counts['fail']} fail"
    )
    print(
        f"{judged}, {counts['skipped']} skipped on {report['device']['kind']}; wrote "
        f"{os.path.join(args.out, 'report.json')}, report.md and scaling.png"
    )
    return 0


def _ragged_summary(report: dict) -> str:
    rows = {(r["kernel"], r["layout"]): r for r in report["rows"]}
    full = rows[("full pass", "ragged")]
    return (
        f"full pass: ragged {full['counted_over_real']:.2f}x the real examples "
        f"(padded {rows[('full pass', 'padded')]['counted_over_real']:.1f}x), {full['over_equal']:.2f}x the "
        "equal-sized population's time"
    )


def _population_summary(report: dict) -> str:
    rows = [r for r in report["rows"] if r["layout"] == "server"]
    return ", ".join(f"N {r['clients']:,} S {r['cohort']:,}: {r['seconds'] * 1e3:.2f} ms" for r in rows)


def _char_lstm_summary(report: dict) -> str:
    return ", ".join(f"{r['clients']} clients {r['achieved_gflops']:.1f} GFLOP/s" for r in report["rows"])


def _streaming_summary(report: dict) -> str:
    return ", ".join(
        f"{r['algorithm']} host/device {r['host_over_device']:.2f}x" for r in report["rows"] if "host_over_device" in r
    )


def _cohorts_summary(report: dict) -> str:
    largest = {}
    for r in report["rows"]:
        largest[(r["algorithm"], r["cohort"])] = r
    return ", ".join(
        f"{a} S {s} N {r['clients']:,}: {r['seconds_over_smallest']:.2f}x time, "
        f"{r['device_bytes_over_smallest']:.3f}x device bytes"
        for (a, s), r in largest.items()
    )


# suite -> (module, run function, markdown function, --quick sizes, one-line summary)
REPORT_SUITES = {
    "ragged": (
        "fedjax_clust.bench.ragged",
        "run_ragged_suite",
        "ragged_report_markdown",
        dict(num_clients=60, total=2400, sigmas=(0.5, 1.5), repeats=2),
        _ragged_summary,
    ),
    "char-lstm": (
        "fedjax_clust.bench.sequence",
        "run_char_lstm_suite",
        "char_lstm_report_markdown",
        dict(clients=(2,), hidden=16, repeats=2),
        _char_lstm_summary,
    ),
    "population": (
        "fedjax_clust.bench.population",
        "run_population_suite",
        "population_report_markdown",
        dict(populations=(40,), cohorts=(4,), repeats=2),
        _population_summary,
    ),
    "cohorts": (
        "fedjax_clust.bench.cohorts",
        "run_cohorts_suite",
        "cohorts_report_markdown",
        dict(algorithms=("global",), populations=(100, 1000), cohorts=(4,), model="mlp", rounds=2, repeats=2),
        _cohorts_summary,
    ),
    "streaming": (
        "fedjax_clust.bench.streaming",
        "run_streaming_suite",
        "streaming_report_markdown",
        dict(algorithms=("ditto",), clients=400, cohort=10, budget="8MB", samples=4, rounds=2, repeats=2),
        _streaming_summary,
    ),
}


def _report_suite(args):
    """A suite that writes report.json and report.md to --out (REPORT_SUITES)."""
    import importlib

    from fedjax_clust.io.jsonio import write_json

    module, run_name, markdown_name, quick, summary = REPORT_SUITES[args.suite]
    bench = importlib.import_module(module)
    report_path = os.path.join(args.out, "report.json")
    if os.path.exists(report_path) and not args.overwrite:
        raise CliError(f"{report_path} exists; pass --overwrite to replace it")
    report = getattr(bench, run_name)(
        **(quick if args.quick else {}),
        progress=lambda label: print(f"measuring: {label}", file=sys.stderr, flush=True),
    )
    report["quick"] = bool(args.quick)
    os.makedirs(args.out, exist_ok=True)
    write_json(report_path, report)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(getattr(bench, markdown_name)(report))
    print(f"{summary(report)}; wrote {report_path} and report.md")
    return 0


def _cmd_profile(args):
    import inspect

    from fedjax_clust.bench.device_projection import PROJECTION_FILES
    from fedjax_clust.bench.profile import check_profile, profile, task_with_clients
    from fedjax_clust.core.validation import check_int, check_seed

    clients = _int_list(args.clients, "--clients")
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
    _check_applicable(args, ALGORITHM_OPTIONS, profiled, "algorithm")
    own_task_options = [o for o in TASK_OPTIONS if o.flag != "--clients"]  # --clients is the sweep over N here
    _check_applicable(args, own_task_options, [args.task], "task")
    groups = None if args.tradeoff_subgroups == "none" else _int_list(args.tradeoff_subgroups, "--tradeoff-subgroups")
    if groups is not None:
        from fedjax_clust.bench.profile import check_subgroup_sweep

        check_subgroup_sweep(args.tradeoff_clients, groups, names=("--tradeoff-clients", "--tradeoff-subgroups"))
        check_int("--tradeoff-rounds", args.tradeoff_rounds)
    from fedjax_clust.bench.rounds import bench_options
    from fedjax_clust.io.run_folder import check_out_dir, claim_outputs, wrote_files

    check_out_dir(args.out, "--out")
    task_options = {opt.kwarg(args.task): getattr(args, opt.dest) for opt in own_task_options if _given(args, opt)}
    if "seed" in inspect.signature(TASKS[args.task]).parameters:
        task_options["seed"] = args.seed

    def make_task_at(n):
        return _with_byzantine(task_with_clients(args.task, n, task_options), args)

    def algorithm_options(name):  # the profile's defaults (momentum 0.9, the benchmark stage) under the flags given
        given = {"matmul_precision": args.matmul_precision, **_algo_options(name, args)}
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
        task=args.task,
        make_task_at=make_task_at,
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
        print(_wrote(args.out, ("subgroups.csv", "subgroups.png")))
    return 0


def _names(text, flag):
    names = [a.strip() for a in text.split(",") if a.strip()]
    if not names:
        raise CliError(f"{flag} must list at least one name, got {text!r}")
    return names


def _cmd_project(args):
    import dataclasses

    from fedjax_clust.bench.device_projection import (
        PROJECTION_FILES,
        THIS_MACHINE,
        device_projections,
        load_profile,
        no_calibration,
        rows_by_algorithm,
        write_projections,
    )
    from fedjax_clust.cost.devices import STATED, device
    from fedjax_clust.io.run_folder import check_out_dir, claim_outputs, wrote_files

    devices = None if args.devices is None else _names(args.devices, "--devices")
    for name in devices or []:
        if name != "this-machine":
            device(name)
    stated = STATED
    if args.stated_efficiency is not None:
        try:
            compute, memory = (float(v) for v in args.stated_efficiency.split(","))
        except ValueError:
            raise CliError(f"--stated-efficiency must be COMPUTE,MEMORY, got {args.stated_efficiency!r}") from None
        try:
            stated = dataclasses.replace(STATED, compute=compute, memory=memory, basis="stated on the command line")
        except ValueError as error:
            raise CliError(f"--stated-efficiency: {error}") from None
    payload = load_profile(args.profile)
    out = args.out or (args.profile if os.path.isdir(args.profile) else os.path.dirname(args.profile) or ".")
    algorithms = None if args.algorithms is None else _names(args.algorithms, "--algorithms")
    plot = None if args.plot is None else _names(args.plot, "--plot")
    _, projected = rows_by_algorithm(payload, algorithms)  # ValueError naming one the profile did not run
    if THIS_MACHINE in (devices or []) and not payload.get("calibration"):
        raise no_calibration()
    for name in plot or []:
        if name not in projected:
            raise CliError(f"--plot: {name!r} is not among the projected algorithms")
    check_out_dir(out, "--out")  # the folder is claimed before anything is projected and printed
    claim_outputs(out, PROJECTION_FILES, args.overwrite or out == args.profile or args.out is None)
    projections = device_projections(payload, devices, stated=stated, algorithms=algorithms)
    print(wrote_files(write_projections(projections, out, plot)) + " (projections, not measurements)")
    return 0


def _cmd_network(args):
    from fedjax_clust.bench.device_projection import load_profile
    from fedjax_clust.bench.network_projection import NETWORK_FILES, network_projection, write_network
    from fedjax_clust.core.validation import check_int, check_seed
    from fedjax_clust.cost.devices import device
    from fedjax_clust.io.run_folder import check_out_dir, claim_outputs

    check_int("--examples", args.examples)
    check_int("--rounds", args.rounds)
    check_seed(args.seed, "--seed")
    if args.server_device is not None:
        device(args.server_device)
    payload = load_profile(args.profile)
    algorithms = None if args.algorithms is None else _names(args.algorithms, "--algorithms")
    result = network_projection(
        payload,
        args.network,
        server_bandwidth=args.server_bandwidth,
        deadline=args.deadline,
        examples=args.examples,
        server_device=args.server_device,
        algorithms=algorithms,
        runs=args.runs,
        metric=args.metric,
        target=args.target,
        rounds=args.rounds,
        seed=args.seed,
    )
    out = args.out or (args.profile if os.path.isdir(args.profile) else os.path.dirname(args.profile) or ".")
    check_out_dir(out, "--out")
    claim_outputs(out, NETWORK_FILES, args.overwrite)
    write_network(result, out)
    print(_wrote(out, NETWORK_FILES) + " (projections, not measurements)")
    return 0


def _setup_devices(cpu_devices, own_process: bool):
    """One JAX CPU device per core (or ``cpu_devices``), before JAX starts: Federated-Clustering splits its
    rows over the devices (see fedjax_clust.parallel.sharding). Only in the command's own process: called from
    Python, the caller's process keeps its settings and an explicit ``--cpu-devices`` says how to set them."""
    if cpu_devices is not None:
        from fedjax_clust.core.validation import check_int

        check_int("--cpu-devices", cpu_devices)
    if own_process:
        from fedjax_clust_program import set_cpu_devices  # the program's setup, outside the library

        set_cpu_devices(cpu_devices)  # no effect once the backends are up
    elif cpu_devices is not None:
        print(
            "warning: --cpu-devices sets up the fedjax-clust process; called from Python it changes nothing "
            "(call fedjax_clust_program.set_cpu_devices(K) before JAX starts)",
            file=sys.stderr,
        )


def _setup_compile_cache(option, own_process: bool):
    """JAX's persistent compilation cache, on by default in the command's own process
    (:func:`fedjax_clust_program.enable_compile_cache`); called from Python the caller's process keeps its
    settings (``fedjax_clust_program.use_compile_cache`` is the one call that turns it on)."""
    if own_process:
        from fedjax_clust_program import enable_compile_cache  # the program's setup, outside the library

        enable_compile_cache(option)
    elif option is not None:
        print(
            "warning: --compile-cache sets up the fedjax-clust process; called from Python it changes nothing "
            "(call fedjax_clust_program.use_compile_cache(DIR) before the first compilation)",
            file=sys.stderr,
        )


def _wrote(folder: str, names) -> str:
    """The "wrote ..." line of a command's ``names`` in ``folder``: those that exist (the command claimed the folder
    first, so every one there is this command's; :func:`~fedjax_clust.io.run_folder.wrote_files`)."""
    from fedjax_clust.io.run_folder import wrote_files

    return wrote_files([os.path.join(folder, name) for name in names])


def _output_failed(error) -> int:
    """One ``error:`` line for an output that could not be written (:mod:`fedjax_clust.io.unwritable`), exit 74."""
    from fedjax_clust.io.unwritable import EXIT_STATUS, OutputError, reason

    what = (
        str(error)
        if isinstance(error, OutputError)
        else f"cannot write {getattr(error, 'filename', None) or 'the output'} ({reason(error)})"
    )
    print(
        f"error: {_one_line(what)}; the files written before are intact: free space (or fix the permissions) and "
        "run the command again (--resume continues a run from its newest checkpoint, a sweep or study from its "
        "finished programs)",
        file=sys.stderr,
    )
    return EXIT_STATUS


def _one_line(error) -> str:
    return " ".join(str(error).split()) or type(error).__name__


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


def _parse(argv):
    """The parsed command line; ``run`` / ``sweep`` with ``--config FILE`` first take the file's options (see
    :mod:`fedjax_clust.cli.config_file`), then the command line's, which override them."""
    from fedjax_clust.cli.config_file import (
        ConfigError,
        config_tokens,
        load_config,
        split_config_argument,
    )

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_help_scope(argv))
    try:
        path, rest = split_config_argument(argv)
    except ConfigError as error:
        raise CliError(str(error)) from None
    if path is None:
        at = next((i for i, token in enumerate(rest) if token in parser.commands), None)
        recorded = None if at is None or rest[at] != "run" else _recorded_run_tokens(rest[at + 1 :], parser)
        args = parser.parse_args(rest if recorded is None else rest[: at + 1] + recorded + rest[at + 1 :])
        if getattr(args, "command", None) in CONFIG_COMMANDS:
            args.config = None
        return args
    commands = [i for i, token in enumerate(rest) if token in CONFIG_COMMANDS + ("compare", "bench", "profile")]
    if not commands or rest[commands[0]] not in CONFIG_COMMANDS:
        raise CliError("--config applies to `fedjax-clust run`, `fedjax-clust sweep` and `fedjax-clust study`")
    at = commands[0]
    subparser = parser.commands[rest[at]]
    try:
        tokens = config_tokens(subparser, load_config(path), path, lists=rest[at] in ("sweep", "study"))
    except ConfigError as error:
        raise CliError(str(error)) from None
    args = parser.parse_args(rest[: at + 1] + tokens + rest[at + 1 :])
    args.config = path
    given_here = {token[2:] for token in rest if token.startswith("--")}
    args.config_keys = [t[2:] for t in tokens if t.startswith("--") and t[2:] not in given_here]
    return args


def _recorded_run_tokens(rest, parser):
    """``run --out DIR --resume`` without ``--algorithm`` (``rest``: the tokens after ``run``): the
    command-line tokens of the options the run in DIR was started with (its ``run.json``: the resolved
    options, ``rounds``, ``checkpoint_every``, the tracking destinations and where the rows live), to go before
    the ones given, which override them; None for any other command line."""
    from fedjax_clust.cli.config_file import ConfigError, config_tokens
    from fedjax_clust.io.jsonio import read_json
    from fedjax_clust.io.run_folder import RUN_FILE

    if "--resume" not in rest or any(
        t == "--algorithm" or t.startswith("--algorithm=") or t in ("-h", "--help") for t in rest
    ):
        return None
    outs = [
        rest[i + 1] if t == "--out" else t.split("=", 1)[1]
        for i, t in enumerate(rest)
        if (t == "--out" and i + 1 < len(rest)) or t.startswith("--out=")
    ]
    out = outs[-1] if outs else None  # argparse keeps the last one
    if out is None:
        return None  # argparse names the missing --algorithm and --out
    path = os.path.join(out, RUN_FILE)
    if not os.path.exists(path):
        raise CliError(
            f"--resume without --algorithm continues the run recorded in {path}, and there is none: "
            "give the run's options (or --config FILE)"
        )
    try:
        saved = read_json(path)
        options = dict(saved["config"]["options"])
    except (ValueError, KeyError, TypeError):
        raise CliError(
            f"{path} records no command-line options (a run started from Python, or one run of a "
            "sweep?): give the run's options (or --config FILE) with --resume"
        ) from None
    options["rounds"] = saved.get("rounds")
    if saved.get("checkpoint_every") is not None:
        options["checkpoint-every"] = saved["checkpoint_every"]
    for destination in ("tensorboard", "wandb"):  # tracking goes on where it went (unless given anew)
        if (saved.get("tracking") or {}).get(destination):
            options[destination] = saved["tracking"][destination]
    placement = saved.get("client_rows") or {}  # the rows stay where they were (unless given anew)
    for flag, key in (
        ("device-memory", "device_memory"),
        ("client-rows", "client_rows"),
        ("host-rows-dir", "host_rows_dir"),
    ):
        if placement.get(key) is not None:
            options[flag] = placement[key]
    try:
        return config_tokens(parser.commands["run"], {k: v for k, v in options.items() if v is not None}, path)
    except ConfigError as error:
        raise CliError(str(error)) from None


# the commands that take the algorithms' and the tasks' options (a bench or profile flag of the same name, e.g.
# profile's --clients, is its own option: its errors are not renamed after the task's)
OPTION_COMMANDS = ("run", "compare", "sweep", "study")


def _name_flag(args, message: str) -> str:
    """``message`` with the builder argument it names (``lam must ...``, ``hidden=...``) replaced by the flag
    the user gave it with (``--ditto-lambda must ...``), so that every error names what the user typed."""
    import re

    if args is None or args.command not in OPTION_COMMANDS:  # bench / profile: their own flags, named as given
        return message
    from_file = set(getattr(args, "config_keys", None) or ())  # named by file and key instead
    for opt in ALGORITHM_OPTIONS + TASK_OPTIONS:
        if _given(args, opt) and opt.flag[2:] not in from_file and opt.flag not in KEYWORD_NAMED:
            for kwarg in opt.kwargs:
                named = re.sub(rf"^{re.escape(kwarg)}(?=( must|=))", opt.flag, message, count=1)
                if named != message:
                    return named
    return message


def _name_config_key(args, message: str) -> str:
    """``message`` prefixed with the file and key it comes from, when it names an option the run took from
    its ``--config`` file (range checks happen after parsing, with the option's flag or argument name)."""
    import re

    path, keys = getattr(args, "config", None), getattr(args, "config_keys", None)
    if not path or not keys or path in message:
        return message
    kwargs = {opt.dest: opt.kwargs for opt in ALGORITHM_OPTIONS + TASK_OPTIONS}
    for key in keys:
        dest = key.replace("-", "_")
        for name in dict.fromkeys(("--" + key, dest) + kwargs.get(dest, ())):
            if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", message):
                return f"{path}: key {key!r}: {message}"
    return message


def _resolved(args):
    from fedjax_clust.cli.config_file import resolved_config

    return resolved_config(args, exclude=NOT_IN_CONFIG)


def main(argv=None) -> int:
    """Run the command line; returns the exit status (see the module docstring).

    ``argv=None`` is the ``fedjax-clust`` program itself (the console script, ``python -m fedjax_clust.cli``):
    it reads ``sys.argv`` and sets up its process before JAX starts (XLA's deterministic GPU ops, one CPU device
    per core; :mod:`fedjax_clust_program`). Called from Python with a list, it changes no process-wide
    setting (environment, JAX config); its one-line warnings hold only while it runs."""
    import warnings

    from fedjax_clust.io.unwritable import is_output_failure
    from fedjax_clust.run.simulate import NonFiniteError

    own_process = argv is None
    if own_process:  # the program's setup lives outside the library (fedjax_clust_program)
        from fedjax_clust_program import enable_gpu_determinism

        enable_gpu_determinism()  # before any JAX computation: XLA reads XLA_FLAGS when its GPU backend starts
    args = None
    with warnings.catch_warnings():  # restores the warning hook on the way out
        warnings.showwarning = lambda message, *_, **__: print(f"warning: {_one_line(message)}", file=sys.stderr)
        try:
            args = _parse(argv)
            _setup_devices(args.cpu_devices, own_process)
            _setup_compile_cache(args.compile_cache, own_process)
            command = {
                "run": _cmd_run,
                "compare": _cmd_compare,
                "bench": _cmd_bench,
                "profile": _cmd_profile,
                "project": _cmd_project,
                "network": _cmd_network,
                "sweep": _cmd_sweep,
                "study": _cmd_study,
            }
            return command[args.command](args)
        except (CliError, ValueError) as e:
            if is_output_failure(e):
                return _output_failed(e)
            print(f"error: {_name_config_key(args, _name_flag(args, _one_line(e)))}", file=sys.stderr)
            return 2
        except OSError as e:
            if not is_output_failure(e):
                raise
            return _output_failed(e)
        except NonFiniteError as e:
            print(f"error: {_one_line(e)}", file=sys.stderr)
            return 3
        except KeyboardInterrupt as e:
            return interrupted(e)


if __name__ == "__main__":
    sys.exit(main())
