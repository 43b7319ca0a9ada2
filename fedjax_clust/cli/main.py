"""The ``fedjax-clust`` command line: ``run``, ``compare``, ``sweep``, ``bench`` and ``profile``.

Exit status: 0 done; 2 bad input (one line ``error: ...`` naming the argument); 3 a run's client models
went non-finite (``--on-nonfinite stop``, the default; results up to that round are written); 130
interrupted with Ctrl-C (one line; with ``--out`` the folder is left resumable with ``--resume``).

Every algorithm and task option is declared once in ``ALGORITHM_OPTIONS`` / ``TASK_OPTIONS`` with the
algorithms or tasks it applies to: an option given on the command line that none of the chosen algorithms
(or the chosen task) uses is an error, not silently ignored. Values are checked by the same functions as
the Python API (:mod:`fedjax_clust.core.validation`).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import NamedTuple, Optional

from fedjax_clust.algorithms import ALGORITHMS, algorithm_names, algorithm_spec
from fedjax_clust.algorithms.federated_clustering import LOCAL_STEPS_FORMS
from fedjax_clust.algorithms.fedsoft import PREDICTORS
from fedjax_clust.algorithms.three_stage import STAGE2_RULES, STAGE3_OPTIMIZERS
from fedjax_clust.core.optim import MOMENTUM_FORMS
from fedjax_clust.core.validation import MATMUL_PRECISIONS
from fedjax_clust.models import MODELS
from fedjax_clust.ops.clustering import QUANTILE_SELECTS
from fedjax_clust.robust import AGGREGATORS, ATTACKS
from fedjax_clust.run.simulate import INITS, ON_NONFINITE
from fedjax_clust.tasks import TASKS
from fedjax_clust.tasks.images import IMAGE_TASKS as IMAGE_TASK_BUILDERS
from fedjax_clust.tasks.images import SPLIT_IMAGE_TASKS

__all__ = ["main", "build_parser"]

DEFAULT_QUANTILE = 0.2  # the paper's 20th-percentile rule (§4.2), used when neither radius nor quantile is given
FC = "federated-clustering"
RADIUS_RULE = (FC, "momentum-clustering")  # the CLI's default rule: quantile 0.2 unless --radius is given
# every registered algorithm: the built-in ones and the plugins of installed packages (entry points of the group
# fedjax_clust.algorithms); the kinds below are read from their specs (fedjax_clust.algorithms.registry)
ALL = algorithm_names()
PLUGINS = tuple(name for name in ALL if name not in ALGORITHMS)
K_METHODS = tuple(name for name in ALL if algorithm_spec(name).needs_clusters)
SGD_MOMENTUM = tuple(name for name in ALL if algorithm_spec(name).sgd_momentum)
ATTACKABLE = tuple(name for name in ALL if algorithm_spec(name).attackable)
AGGREGATING = tuple(name for name in ALL if algorithm_spec(name).aggregates)
OWN_MODELS = tuple(name for name in ALL if algorithm_spec(name).owns_models)
PARTICIPATING = ALL
TASK_NAMES = tuple(TASKS)
SIZED_TASKS = ("synthetic", "classification")
MIXTURE = ("mixture-regression",)
IMAGE_TASKS = SPLIT_IMAGE_TASKS  # options of the clustered split apply to these
MODEL_TASKS = tuple(IMAGE_TASK_BUILDERS)  # options of the Flax model: every image task, npz included


class CliError(Exception):
    """A command-line error: printed as one ``error:`` line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print the whole usage block
        raise CliError(message)


class Option(NamedTuple):
    """A command-line option of an algorithm or a task: ``kwarg`` is the builder's argument, ``applies`` the
    algorithms or tasks that take it."""
    flag: str
    kwarg: str
    applies: tuple
    help: str
    type: object = float
    choices: Optional[tuple] = None
    flag_only: bool = False  # a store_true switch

    @property
    def dest(self):
        return self.flag[2:].replace("-", "_")


def _with_plugins(option: Option) -> Option:
    """``option`` also applying to every plugin algorithm whose builder takes its keyword."""
    takers = tuple(name for name in PLUGINS if name not in option.applies and algorithm_spec(name).takes(option.kwarg))
    return option._replace(applies=option.applies + takers) if takers else option


def _chunk_arg(text):
    if text in ("auto", "all"):
        return text  # "all" becomes chunk_size=None in _algo_options
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, 'all' or 'auto', got {text!r}") from None


def _participation_arg(text):
    """A fraction in (0, 1] ("0.5") or a client count ("50")."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1] or a client count, got {text!r}") from None


def _radius_arg(text):
    if text == "theory":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'theory', got {text!r}") from None


ALGORITHM_OPTIONS = tuple(_with_plugins(option) for option in (
    Option("--momentum", "momentum", SGD_MOMENTUM, "SGD momentum on the clients' steps (default 0.9)"),
    Option("--momentum-form", "momentum_form", SGD_MOMENTUM,
           "heavy-ball (default: m = v + beta m) or average (the paper authors' synthetic scripts: "
           "m = (1 - beta) v + beta m, m_1 = v_1)", str, MOMENTUM_FORMS),
    Option("--clustering-steps", "clustering_steps", RADIUS_RULE + ("three-stage",),
           "Threshold-Clustering steps M (default 10); three-stage: Stage II's Lloyd iterations S (default 10)", int),
    Option("--radius", "radius", RADIUS_RULE + ("three-stage",),
           "fixed clustering radius tau, or 'theory' for tau = sqrt(sigma_hat * Delta_hat); three-stage: the "
           "trimming ball of --clustering-rule trimmed-k-means (required there)", _radius_arg),
    Option("--quantile", "quantile", RADIUS_RULE,
           f"radius = this quantile of the distances at every step (default {DEFAULT_QUANTILE} when --radius "
           "is not given)"),
    Option("--quantile-select", "quantile_select", RADIUS_RULE,
           "how the quantile rule finds its k-th distance: auto (default: search on a CPU, radix on a GPU/TPU), "
           "search (bracketed, a data-dependent loop) or radix (a fixed number of passes); same result",
           str, QUANTILE_SELECTS),
    Option("--local-steps", "local_steps", (FC, "ifca-2", "hypcluster", "cfl", "srfca", "three-stage", "fedsoft"),
           "local SGD steps: FC's E (default 0), IFCA-2's / HypCluster's tau (default 5), CFL's (default 1), "
           "SR-FCA's ONE_SHOT T (default 20), three-stage's Stage I GD rounds (default 100), FedSoft's proximal "
           "steps per round (default 5)", int),
    Option("--local-steps-form", "local_steps_form", (FC,),
           "FC with --local-steps E: sgd (default: E local steps, then a clustered step) or pseudo-gradient "
           "(the paper authors' scripts: cluster the E-step pseudo-gradients)", str, LOCAL_STEPS_FORMS),
    Option("--subgroups", "subgroups", (FC,), "random client subgroups per round G (default 1)", int),
    Option("--chunk-size", "chunk_size", (FC,),
           "models per cross-gradient chunk: a number, 'all', or 'auto' (default: fit --memory-budget)", _chunk_arg),
    Option("--memory-budget", "memory_budget", (FC,),
           "bytes the cross-gradient chunk may use (default: a quarter of the device's total memory)"),
    Option("--track-clusters", "track_clusters", (FC,),
           "log misclustering of FC's ball components (N x N mask per round)", flag_only=True),
    Option("--num-clusters", "num_clusters", K_METHODS,
           "K for myopic-clustering, momentum-clustering, ifca-1/2, hypcluster, three-stage, fedsoft (default: the "
           "task's K)", int),
    Option("--alpha", "alpha", ("momentum-clustering",), "momentum-clustering's alpha in eq. (6) (default 0.1)"),
    Option("--ditto-lambda", "lam", ("ditto",), "Ditto's lambda (default 1, as in the paper)"),
    Option("--fedsoft-lambda", "lam", ("fedsoft",), "FedSoft's proximal weight lambda (default 0.1)"),
    Option("--smoother", "smoother", ("fedsoft",), "FedSoft's importance smoother sigma in (0, 1] (default 1e-4)"),
    Option("--estimation-interval", "estimation_interval", ("fedsoft",),
           "FedSoft re-estimates the importance weights every this many rounds, tau (default 1)", int),
    Option("--predict", "predict", ("fedsoft",),
           "the model FedSoft's clients are evaluated with: personal (default) or cluster (their dominant "
           "cluster's)", str, PREDICTORS),
    Option("--knn-lambda", "lam", ("knn-per",), "kNN-Per's interpolation weight lambda_knn (default 0.5)"),
    Option("--knn-k", "k", ("knn-per",), "kNN-Per's number of neighbours (default 5)", int),
    Option("--eps1", "eps1", ("cfl",), "CFL: split when the mean update norm is below (default 0.05)"),
    Option("--eps2", "eps2", ("cfl",), "CFL: ... and the largest client update is above (default 0.1)"),
    Option("--threshold", "threshold", ("srfca", "three-stage"),
           "SR-FCA's distance threshold lambda (required); three-stage: the edge-cutting rule's threshold"),
    Option("--min-size", "min_size", ("srfca",), "SR-FCA's size parameter t: smallest cluster kept (default 2)", int),
    Option("--trim-beta", "beta", ("srfca", "three-stage"),
           "TrMean_beta trimming of SR-FCA and of three-stage's Stage III (default 0.1)"),
    Option("--refine-steps", "refine_steps", ("srfca",), "SR-FCA's REFINE steps R (default 2)", int),
    Option("--refine-iterations", "refine_iterations", ("srfca",),
           "SR-FCA's TrimmedMeanGD rounds per REFINE step (default 20)", int),
    Option("--distance", "distance", ("srfca",), "SR-FCA's distance: l2 (default) or cross-loss (Def. 5.1)", str,
           ("l2", "cross-loss")),
    Option("--clustering-rule", "clustering", ("three-stage",),
           "three-stage's Stage II: k-geomedians (default), trimmed-k-means (needs --radius), lloyd or threshold "
           "(needs --threshold)", str, STAGE2_RULES),
    Option("--stage3", "optimizer", ("three-stage",),
           "three-stage's Stage III: gd (default; with --aggregator, default TrMean_beta) or fedavg (robust FedAvg: "
           "--fedavg-steps local GD steps, then the aggregate of the local models)", str, STAGE3_OPTIMIZERS),
    Option("--fedavg-steps", "fedavg_steps", ("three-stage",), "local GD steps of --stage3 fedavg (default 5)",
           int),
    Option("--participation", "participation", PARTICIPATING,
           "clients per round: a fraction in (0, 1] (0.5) or a count (50), drawn uniformly without replacement "
           "(default: every client)", _participation_arg),
    Option("--availability", "availability", PARTICIPATING,
           "a .npy bool [rounds, N] trace of the clients that may take part in each round; with --participation "
           "that many are drawn among them, else as many as the scarcest round has", str),
    Option("--attack", "attack", ATTACKABLE,
           "what the Byzantine clients (--byzantine-fraction / --byzantine-per-cluster) send: "
           + ", ".join(ATTACKS), str, ATTACKS),
    Option("--aggregator", "aggregator", AGGREGATING,
           "robust aggregation of what the server averages (a group's gradients, updates or models): "
           + ", ".join(AGGREGATORS) + " (default mean; three-stage: trimmed-mean with --trim-beta)", str,
           AGGREGATORS),
))
COMMON_DEFAULTS = dict(lr=0.01, momentum=0.9)

TASK_OPTIONS = (
    Option("--clusters", "num_clusters", SIZED_TASKS + MIXTURE + IMAGE_TASKS, "K, number of clusters (default 4; "
           "mnist-inverted 2, cifar100-label-groups 10, mixture-regression 5)", int),
    Option("--clients-per-cluster", "clients_per_cluster", SIZED_TASKS + IMAGE_TASKS, "clients per cluster "
           "(default 75; classification and mnist-* 10, cifar10-private-label 5)", int),
    Option("--dataset", "dataset", IMAGE_TASKS, "image source: mnist-5k (offline MNIST subset, default of "
           "mnist-*), digits (offline 8x8), tfds:NAME (e.g. tfds:mnist, tfds:cifar10; needs the datasets extra), "
           "npz:PATH (pooled images)", str),
    Option("--model", "model", MODEL_TASKS, f"Flax model: {', '.join(MODELS)} (default cnn; cifar10 vgg16, "
           "cifar100 vgg8)", str, MODELS),
    Option("--hidden", "hidden", MODEL_TASKS, "hidden units of --model mlp (default 200)", int),
    Option("--test-fraction", "test_fraction", MODEL_TASKS, "share of each client's examples held out for its "
           "test set (default 0.2)"),
    Option("--size-sigma", "size_sigma", IMAGE_TASKS, "spread of client sizes, log-normal sigma (default 0: "
           "equal clients; 1: about 10x between small and large)"),
    Option("--max-examples", "max_examples", IMAGE_TASKS, "use only the first N pooled images", int),
    Option("--data-dir", "data_dir", IMAGE_TASKS, "tensorflow-datasets data_dir", str),
    Option("--npz-path", "path", ("npz",), "partitioned .npz of your clients (see fedjax_clust.data.npz)", str),
    Option("--samples", "samples_per_client", SIZED_TASKS + MIXTURE,
           "samples per client n (default 9; classification 40, mixture-regression 200)", int),
    Option("--dim", "dim", SIZED_TASKS + MIXTURE, "model / input dimension d (default 10; mixture-regression 100)",
           int),
    Option("--clients", "num_clients", MIXTURE, "machines m, good and adversarial (default 100)", int),
    Option("--outlier-fraction", "outlier_fraction", MIXTURE,
           "alpha: share of adversarial machines, regression vectors 3 x Bernoulli(1/2) (default 0.3)"),
    Option("--noise", "noise", MIXTURE, "sigma of the regression noise (default 3)"),
    Option("--optimum", "optimum", ("synthetic",), "how x*_k is drawn: binary ({0,1}^d * scale, default) or gaussian",
           str, ("binary", "gaussian")),
    Option("--optimum-scale", "optimum_scale", ("synthetic",), "scale of x*_k (default 100)"),
    Option("--first-feature-mean", "first_feature_mean", ("synthetic",),
           "features of cluster k ~ N(k + this - 1, 1): 1 as in the paper (default), 0 as in the authors' scripts"),
    Option("--init-noise", "init_noise", ("synthetic",), "std of the noise of --init oracle (default 0.1)"),
)
SYNTHETIC_DEFAULTS = dict(num_clusters=4, clients_per_cluster=75)


def _add_options(group, options):
    for opt in options:
        if opt.flag_only:
            group.add_argument(opt.flag, dest=opt.dest, action="store_true", help=opt.help)
        else:
            group.add_argument(opt.flag, dest=opt.dest, type=opt.type, choices=opt.choices, default=None,
                               help=opt.help)


def _add_task_args(p):
    g = p.add_argument_group("task")
    g.add_argument("--task", default="synthetic", choices=TASK_NAMES,
                   help="synthetic (Werner et al. §4.1, default), classification (private labels, with a feature "
                        "model), counterexample-myopic, counterexample-ifca, counterexample-cfl, the image tasks "
                        "mnist-rotation, mnist-private-label (§4.2, Table 1), mnist-inverted, "
                        "cifar10-private-label, cifar100-label-groups (thesis Fig. 2.4, 2.5), "
                        "mixture-regression (Ghosh et al. §6.1, with outlier machines), or npz (your clients)")
    _add_options(g, TASK_OPTIONS)
    b = p.add_argument_group("Byzantine clients (with --attack)")
    b.add_argument("--byzantine-fraction", type=float, default=None,
                   help="fraction beta of the clients that attack (of every true cluster when the clusters are known)")
    b.add_argument("--byzantine-per-cluster", type=int, default=None,
                   help="attackers per true cluster (the thesis's Fig. 2.6: 50 beside 50 honest clients)")


def _add_algo_args(p):
    g = p.add_argument_group("optimisation")
    g.add_argument("--lr", type=float, default=None, help="learning rate eta (default 0.01)")
    g.add_argument("--batch-size", type=int, default=None, help="minibatch per client per round (default: all)")
    g.add_argument("--matmul-precision", choices=MATMUL_PRECISIONS, default="highest",
                   help="precision of every matmul of a round: highest (default: full float32 on every device), "
                        "high or default (on a GPU TF32, on a TPU bfloat16 passes: faster, less exact)")
    _add_options(p.add_argument_group("algorithm options (each applies to the algorithms named in its help)"),
                 ALGORITHM_OPTIONS)


def _list_of(kind, choices=None):
    """argparse type: a comma-separated list of ``kind`` values (each in ``choices`` when given)."""
    def parse(text):
        values = []
        for item in text.split(","):
            item = item.strip()
            if not item:
                raise argparse.ArgumentTypeError(f"an empty item in the list {text!r}")
            value = kind(item)
            if choices is not None and value not in choices:
                raise argparse.ArgumentTypeError(f"{item!r} is not one of {', '.join(map(str, choices))}")
            values.append(value)
        if not values:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
        return values
    return parse


def _add_sweep_algo_args(p):
    """The optimisation and algorithm options of ``run``, each taking a comma-separated list of values."""
    g = p.add_argument_group("optimisation (comma-separated lists: every combination runs)")
    g.add_argument("--lr", type=_list_of(float), default=None, help="learning rates (default 0.01)")
    g.add_argument("--batch-size", type=_list_of(int), default=None, help="minibatch sizes (default: all)")
    g.add_argument("--matmul-precision", choices=MATMUL_PRECISIONS, default="highest",
                   help="precision of every matmul (default highest)")
    a = p.add_argument_group("algorithm options (comma-separated lists; each applies to the algorithms in its help)")
    for opt in ALGORITHM_OPTIONS:
        if opt.flag_only:
            a.add_argument(opt.flag, dest=opt.dest, action="store_true", help=opt.help)
        else:
            a.add_argument(opt.flag, dest=opt.dest, type=_list_of(opt.type, opt.choices), default=None,
                           help=opt.help)


def _add_run_args(p, out_default=None, seed=True):
    p.add_argument("--rounds", type=int, default=300, help="communication rounds (default 300)")
    if seed:
        p.add_argument("--seed", type=int, default=0, help="seed of the data and the run, in [0, 2^32) (default 0)")
    p.add_argument("--eval-every", type=int, default=10, help="evaluate every k rounds (default 10)")
    p.add_argument("--out", default=out_default, required=out_default is None, help="output folder")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the results of an earlier run in --out (default: refuse to mix two runs)")
    p.add_argument("--on-nonfinite", choices=ON_NONFINITE, default="stop",
                   help="when client models become NaN/inf: stop with exit status 3 (default) or warn and "
                        "compute the metrics over the finite clients")
    p.add_argument("--init", choices=INITS, default="shared",
                   help="initial models: shared (every client at the task's init, default), oracle (x*_k + "
                        "noise) or random (one random start per cluster), as in the paper authors' scripts")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fedjax-clust", description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-devices", type=int, default=None,
                        help="JAX CPU devices to split clients over (default: one per core; 1: no splitting)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="run one algorithm on one task")
    run.add_argument("--algorithm", required=True, choices=ALL, help=", ".join(ALL))
    run.add_argument("--config", metavar="FILE", help="a TOML file of options (its keys are the flags without "
                     "dashes, tables allowed); options on the command line override it")
    _add_task_args(run)
    _add_algo_args(run)
    _add_run_args(run)
    run.add_argument("--checkpoint-every", type=int, default=None,
                     help="save the whole run state every k rounds to OUT/checkpoints (Orbax)")
    run.add_argument("--resume", action="store_true",
                     help="continue the run in OUT from its newest checkpoint (the options must match that run)")
    cmp_ = sub.add_parser("compare", help="run several algorithms, print a table, plot convergence")
    cmp_.add_argument("--algorithms", default="federated-clustering,local,global,ground-truth",
                      help="comma-separated algorithm names")
    _add_task_args(cmp_)
    _add_algo_args(cmp_)
    _add_run_args(cmp_, out_default="results")
    bench = sub.add_parser("bench", help="time one round of each configuration (JSON lines)")
    bench.add_argument("--model", choices=["linear", "mlp", "cnn", "lenet5", "robust", "srfca", "participation"],
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
                            "the full round (FC's S x S block: about f^2)")
    bench.add_argument("--clients", default=None,
                       help="comma-separated client counts N (default 300; --model mlp: one N, default 4096)")
    bench.add_argument("--repeats", type=int, default=None,
                       help="timed repetitions per configuration (default 20; --model mlp: 3)")
    bench.add_argument("--pair-loop-rounds", type=int, default=None,
                       help="--model linear: rounds of the Python pair-loop reference to time (default 1; 0: skip)")
    bench.add_argument("--quantile", type=float, default=DEFAULT_QUANTILE, help="quantile radius rule")
    bench.add_argument("--clustering-steps", type=int, default=10)
    bench.add_argument("--matmul-precision", choices=MATMUL_PRECISIONS, default="highest",
                       help="matmul precision of the timed rounds (default highest)")
    m = bench.add_argument_group("--model mlp / cnn / lenet5")
    m.add_argument("--subgroups", type=int, default=None,
                   help="random subgroups G per round (default 16; --model linear: 1, Federated-Clustering only)")
    bench.add_argument("--dim", type=int, default=None,
                       help="--model robust: coordinates per aggregated message (default 100,000)")
    bench.add_argument("--others", default=None,
                       help="--model linear: comma-separated algorithms timed beside Federated-Clustering "
                            "(default: all but knn-per; none: Federated-Clustering only)")
    m.add_argument("--batch-size", type=int, default=None,
                   help="minibatch per client (default 32, the paper's neural-network runs)")
    m.add_argument("--loop-clients", type=int, default=None,
                   help="--model cnn / lenet5: clients of the per-client Python loop reference (default 16; 0: skip)")
    m.add_argument("--input-dim", type=int, default=None, help="MLP inputs (default 100)")
    m.add_argument("--hidden", type=int, default=None, help="MLP hidden units (default 100)")
    m.add_argument("--classes", type=int, default=None, help="classes (default 10)")
    m.add_argument("--no-single-device", action="store_true",
                   help="skip the one-device repeats (default: also time the round on one device)")
    sw = sub.add_parser("sweep", help="many runs of one algorithm (hyperparameter lists x seeds) as one vmapped "
                                      "program; one result folder per run, a table and a plot")
    sw.add_argument("--algorithm", required=True, choices=ALL, help=", ".join(ALL))
    sw.add_argument("--config", metavar="FILE", help="a TOML file of options (lists: the sweep's values); options "
                    "on the command line override it")
    _add_task_args(sw)
    _add_sweep_algo_args(sw)
    _add_run_args(sw, seed=False)
    sw.add_argument("--seeds", default="0", help="comma-separated run seeds (default 0)")
    sw.add_argument("--runs-per-program", default="auto",
                    help="most runs in one compiled program: a number, 'all' or 'auto' (default: fit a quarter of "
                         "the device's total memory)")
    prof = sub.add_parser("profile", help="scaling sweep over N: time, memory, FLOPs, communication (CSV + plot)")
    prof.add_argument("--out", default="results/profile", help="output folder")
    prof.add_argument("--clients", default="64,128,256,512,1024,2048,4096", help="comma-separated N sweep")
    prof.add_argument("--algorithms", default=None, help="comma-separated algorithm names (default: all)")
    prof.add_argument("--repeats", type=int, default=3, help="timed rounds per configuration")
    prof.add_argument("--participation", type=float, default=None,
                      help="fraction of clients per round for every algorithm that takes it (default: all)")
    prof.add_argument("--loop-max-clients", type=int, default=256,
                      help="largest N at which the per-client Python loop is timed")
    prof.add_argument("--subgroups", default="1,2,4,8,16",
                      help="FC subgroup counts G for the error-vs-time trade-off (default 1,2,4,8,16; 'none': skip)")
    prof.add_argument("--subgroup-clients", type=int, default=512, help="N of the subgroup trade-off (default 512)")
    prof.add_argument("--subgroup-rounds", type=int, default=200,
                      help="training rounds per G in the subgroup trade-off (default 200)")
    parser.commands = sub.choices  # each command's own parser (--config reads the options of run / sweep)
    return parser


def _given(args, opt) -> bool:
    value = getattr(args, opt.dest, None)
    return value is not None and value is not False


def _check_applicable(args, options, names, kind):
    """An option given for none of ``names`` (algorithms, or the one task) is an error."""
    for opt in options:
        if _given(args, opt) and not set(names) & set(opt.applies):
            raise CliError(f"{opt.flag} does not apply to {kind} {', '.join(names)} (it applies to "
                           f"{', '.join(opt.applies)})")


def _task_from_args(args):
    from fedjax_clust.tasks import make_task
    _check_applicable(args, TASK_OPTIONS, [args.task], "task")
    if args.task not in SIZED_TASKS + MIXTURE + MODEL_TASKS:
        return _with_byzantine(make_task(args.task), args)  # the constructed examples take no size options
    if args.task == "npz" and args.npz_path is None:
        raise CliError("--task npz needs --npz-path")
    options = {opt.kwarg: getattr(args, opt.dest) for opt in TASK_OPTIONS if _given(args, opt)}
    defaults = SYNTHETIC_DEFAULTS if args.task == "synthetic" else {}
    return _with_byzantine(make_task(args.task, **{**defaults, **options}, seed=args.seed), args)


def _with_byzantine(task, args):
    """The task with its Byzantine clients marked (--byzantine-fraction / --byzantine-per-cluster, drawn
    from --seed); an attack without attackers, or attackers without an attack, is an error."""
    from fedjax_clust.robust import mark_byzantine
    fraction, per_cluster = args.byzantine_fraction, args.byzantine_per_cluster
    if fraction is not None and per_cluster is not None:
        raise CliError("give one of --byzantine-fraction and --byzantine-per-cluster")
    if (fraction is None and per_cluster is None) != (args.attack is None):
        raise CliError("--attack and --byzantine-fraction / --byzantine-per-cluster go together")
    if fraction is None and per_cluster is None:
        return task
    try:
        marked = mark_byzantine(task, fraction=fraction, per_cluster=per_cluster, seed=args.seed)
    except ValueError as e:
        raise CliError(str(e)) from None
    if marked.byzantine is None:
        raise CliError("--byzantine-fraction / --byzantine-per-cluster selects no client; drop --attack for an "
                       "attack-free run")
    return marked


def _algo_options(name, args):
    """The builder options of algorithm ``name``: the options given for it, plus the CLI's defaults."""
    options = {opt.kwarg: getattr(args, opt.dest) for opt in ALGORITHM_OPTIONS
               if _given(args, opt) and name in opt.applies and opt.kwarg not in ("momentum", "momentum_form")}
    if options.get("chunk_size") == "all":
        options["chunk_size"] = None
    if name in RADIUS_RULE and "radius" not in options and "quantile" not in options:
        options["quantile"] = DEFAULT_QUANTILE
    return options


def _common(args):
    momentum = args.momentum if args.momentum is not None else COMMON_DEFAULTS["momentum"]
    return dict(learning_rate=args.lr if args.lr is not None else COMMON_DEFAULTS["lr"], momentum=momentum,
                batch_size=args.batch_size, momentum_form=args.momentum_form or "heavy-ball",
                matmul_precision=args.matmul_precision)


def _check_run_args(args, names):
    from fedjax_clust.core.validation import check_int, check_seed
    check_int("--rounds", args.rounds)
    check_int("--eval-every", args.eval_every)
    check_seed(args.seed, "--seed")
    _check_applicable(args, ALGORITHM_OPTIONS, names, "algorithm")
    if args.init != "shared":
        shared_only = [n for n in names if n not in OWN_MODELS]
        if shared_only:
            raise CliError(f"--init {args.init} does not apply to {', '.join(shared_only)} (they start from shared "
                           f"cluster models; it applies to {', '.join(OWN_MODELS)})")
    _check_dependent(args)


def _values(value) -> list:
    """An option's value(s): a sweep's list, or one value."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


# An option that only means something together with another one: (dest, flag, whether the setting it needs
# holds, what it needs). Given without it, it would silently do nothing.
DEPENDENT = (
    ("local_steps_form", "--local-steps-form", lambda a: a.local_steps is not None and any(_values(a.local_steps)),
     "--local-steps E > 0"),
    ("init_noise", "--init-noise", lambda a: getattr(a, "init", None) == "oracle", "--init oracle"),
    ("hidden", "--hidden", lambda a: "mlp" in _values(getattr(a, "model", None)), "--model mlp"),
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


def _cmd_run(args):
    from fedjax_clust.algorithms import make_algorithm
    from fedjax_clust.io.jsonio import dumps
    from fedjax_clust.run.simulate import NonFiniteError, RunInterrupted, simulate
    _check_run_args(args, [args.algorithm])
    if args.checkpoint_every is not None:
        from fedjax_clust.core.validation import check_int
        check_int("--checkpoint-every", args.checkpoint_every)
    task = _task_from_args(args)
    options = _algo_options(args.algorithm, args)
    if args.resume:
        options.update(_recorded_chunk(args, options))
    algo = make_algorithm(args.algorithm, task, **_common(args), **options)
    resolved = _resolved(args)
    checked = {k: v for k, v in resolved.items() if k.replace("-", "_") not in MAY_CHANGE_ON_RESUME}
    try:
        result = simulate(algo, task, rounds=args.rounds, seed=args.seed, eval_every=args.eval_every,
                          progress=not args.no_progress, out_dir=args.out, checkpoint_every=args.checkpoint_every,
                          resume=args.resume, overwrite=args.overwrite, on_nonfinite=args.on_nonfinite,
                          init=args.init, config={"options": checked})
    except (NonFiniteError, RunInterrupted):  # the run started: its folder gets its configuration too
        _write_config(args.out, resolved, "run")
        raise
    _write_config(args.out, resolved, "run")
    print(dumps({k: v for k, v in result.summary.items() if not isinstance(v, dict)}))
    return 0


def _recorded_chunk(args, options) -> dict:
    """``{"chunk_size": c}`` when resuming a run whose ``run.json`` records the chunk c that its
    ``chunk_size="auto"`` resolved to and no ``--chunk-size`` is given: the resumed rounds use that chunk, so
    they compute what the uninterrupted run would have, also where "auto" now resolves otherwise (another
    device). Empty otherwise."""
    from fedjax_clust.io.run_folder import saved_run_config
    if args.out is None or "chunk_size" in options:
        return {}
    saved = saved_run_config(args.out)
    hparams = saved.get("hparams") if isinstance(saved, dict) and saved.get("algorithm") == args.algorithm else None
    if not isinstance(hparams, dict) or "chunk_size" not in hparams or hparams["chunk_size"] == "auto":
        return {}
    return {"chunk_size": hparams["chunk_size"]}


def _write_config(out, resolved, command):
    from fedjax_clust.cli.config_file import write_config
    write_config(out, resolved, f"The resolved options of this {command} (an option not listed takes its default): "
                                f"`fedjax-clust {command} --config`\nthis file repeats it (with --overwrite, or "
                                "another --out).")


def _cmd_compare(args):
    from fedjax_clust.run.compare import format_table, run_comparison
    names = [n.strip() for n in args.algorithms.split(",") if n.strip()]
    if not names:
        raise CliError(f"--algorithms must list at least one algorithm, got {args.algorithms!r}")
    unknown = [n for n in names if n not in ALL]
    if unknown:
        raise CliError(f"--algorithms: unknown algorithm {unknown[0]!r}; expected names from {', '.join(ALL)}")
    if len(set(names)) != len(names):
        raise CliError(f"--algorithms lists an algorithm twice: {args.algorithms!r}")
    _check_run_args(args, names)
    task = _task_from_args(args)
    common = _common(args)
    results = run_comparison(task, names, rounds=args.rounds, seed=args.seed, learning_rate=common["learning_rate"],
                             momentum=common["momentum"], momentum_form=common["momentum_form"],
                             batch_size=args.batch_size, matmul_precision=args.matmul_precision,
                             eval_every=args.eval_every, out_dir=args.out, progress=not args.no_progress,
                             overwrite=args.overwrite, on_nonfinite=args.on_nonfinite, init=args.init,
                             options={name: _algo_options(name, args) for name in names})
    print(format_table(results))
    print(f"\nwrote {os.path.join(args.out, 'results.json')} and {os.path.join(args.out, 'convergence.png')}")
    stopped = [r for r in results.values() if r.summary["status"] != "completed"]
    for r in stopped:
        print(f"error: {_one_line(r.summary['message'])}", file=sys.stderr)
    return 3 if stopped else 0


def _cmd_sweep(args):
    import copy

    from fedjax_clust.run.sweep import print_table, sweep
    seeds = _int_list(args.seeds, "--seeds")
    args.seed = seeds[0]
    _check_run_args(args, [args.algorithm])
    runs_per_program = args.runs_per_program
    if runs_per_program == "all":
        runs_per_program = None
    elif runs_per_program != "auto":
        runs_per_program = _int_list(runs_per_program, "--runs-per-program")[0]
    values = {"learning_rate": args.lr or [COMMON_DEFAULTS["lr"]],
              "momentum": args.momentum or [COMMON_DEFAULTS["momentum"]],
              "momentum_form": args.momentum_form or ["heavy-ball"], "batch_size": args.batch_size or [None]}
    for opt in ALGORITHM_OPTIONS:
        if _given(args, opt) and args.algorithm in opt.applies and opt.kwarg not in ("momentum", "momentum_form"):
            values[opt.kwarg] = [True] if opt.flag_only else getattr(args, opt.dest)
    if "chunk_size" in values:  # --chunk-size all: every row at once
        values["chunk_size"] = [None if v == "all" else v for v in values["chunk_size"]]
    if args.algorithm in RADIUS_RULE and "radius" not in values and "quantile" not in values:
        values["quantile"] = [DEFAULT_QUANTILE]
    grid = {k: v for k, v in values.items() if len(v) > 1}
    options = {k: v[0] for k, v in values.items() if len(v) == 1}
    options["matmul_precision"] = args.matmul_precision

    def task_of(seed):
        seeded = copy.copy(args)
        seeded.seed = seed
        return _task_from_args(seeded)

    result = sweep(args.algorithm, task_of, grid=grid, seeds=seeds, rounds=args.rounds, eval_every=args.eval_every,
                   options=options, init=args.init, on_nonfinite=args.on_nonfinite, out_dir=args.out,
                   overwrite=args.overwrite, progress=not args.no_progress, runs_per_program=runs_per_program)
    _write_config(args.out, {k: v for k, v in _resolved(args).items() if k != "seed"}, "sweep")  # --seeds is its
    print(print_table(result))
    print(f"\n{len(result.runs)} runs in {len(result.programs)} program(s), {result.seconds:.1f} s; wrote "
          f"{os.path.join(args.out, 'sweep.json')}, {os.path.join(args.out, 'sweep.png')} and "
          f"{os.path.join(args.out, 'runs')}/")
    stopped = [r for r in result.runs if r.summary["status"] != "completed"]
    if stopped:
        print(f"error: {len(stopped)} of {len(result.runs)} runs went non-finite (see their summary.json)",
              file=sys.stderr)
    return 3 if stopped else 0


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
    if args.dim is not None and args.model != "robust":
        raise CliError("--dim applies to --model robust only")
    if args.others is not None and args.model != "linear":
        raise CliError("--others applies to --model linear only")
    mlp_only = [flag for flag, value in [("--batch-size", args.batch_size),
                                          ("--input-dim", args.input_dim), ("--hidden", args.hidden),
                                          ("--classes", args.classes), ("--no-single-device", args.no_single_device)]
                if value not in (None, False)]
    if args.repeats is not None:
        check_int("--repeats", args.repeats)
    if args.loop_clients is not None and args.model not in ("cnn", "lenet5", "srfca"):
        raise CliError("--loop-clients applies to --model cnn / lenet5 / srfca only")
    if args.model in ("srfca", "robust", "participation"):  # none takes the MLP / image / linear-only flags
        given = mlp_only + [flag for flag, value in [("--pair-loop-rounds", args.pair_loop_rounds),
                                                       ("--subgroups", args.subgroups)] if value is not None]
        if given:
            raise CliError(f"{given[0]} does not apply to --model {args.model}")
    if args.model == "participation":
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
            raise CliError(f"--model srfca takes one client count >= 4 (and --loop-clients >= 4), got "
                           f"{args.clients!r}")
        rows = run_srfca_benchmarks(clients[0], repeats=args.repeats or 5, loop_clients=loop_clients)
    elif args.model == "robust":
        from fedjax_clust.bench.rounds import run_robust_benchmarks
        clients = _int_list(args.clients if args.clients is not None else "300", "--clients")
        if len(clients) != 1 or clients[0] < 4:
            raise CliError(f"--model robust takes one client count >= 4, got {args.clients!r}")
        dim = 100_000 if args.dim is None else args.dim
        check_int("--dim", dim)
        rows = run_robust_benchmarks(clients[0], dim, repeats=args.repeats or 10, clients=clients[0],
                                     quantile=args.quantile, clustering_steps=args.clustering_steps)
    elif args.model in ("cnn", "lenet5"):
        image_only = [f for f in mlp_only if f != "--batch-size"] + (
            ["--pair-loop-rounds"] if args.pair_loop_rounds is not None else [])
        if image_only:
            raise CliError(f"{image_only[0]} does not apply to --model {args.model}")
        from fedjax_clust.bench.image import run_image_benchmark
        clients = _int_list(args.clients if args.clients is not None else "300", "--clients")
        if len(clients) != 1:
            raise CliError(f"--model {args.model} takes one client count, got {args.clients!r}")
        rows = run_image_benchmark(clients[0], subgroups=args.subgroups or 16, batch_size=args.batch_size or 32,
                                   model=args.model, repeats=args.repeats or 3,
                                   clustering_steps=args.clustering_steps, quantile=args.quantile,
                                   loop_clients=16 if args.loop_clients is None else args.loop_clients,
                                   matmul_precision=args.matmul_precision)
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
        rows = run_mlp_benchmark(clients[0], subgroups=args.subgroups or 16, batch_size=sizes["--batch-size"],
                                 input_dim=sizes["--input-dim"], hidden=sizes["--hidden"],
                                 classes=sizes["--classes"], repeats=args.repeats or 3,
                                 clustering_steps=args.clustering_steps, quantile=args.quantile,
                                 single_device=not args.no_single_device, matmul_precision=args.matmul_precision)
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
                raise CliError(f"--others: {unknown[0]!r} is not one of "
                               f"{', '.join(a for a in ALGORITHMS if a not in ('federated-clustering', 'knn-per'))}"
                               " (or none)")
        rows = run_benchmarks(clients, repeats=args.repeats or 20, pair_loop_rounds=pair_loop,
                              quantile=args.quantile, clustering_steps=args.clustering_steps,
                              matmul_precision=args.matmul_precision, others=others, subgroups=subgroups)
    for row in rows:
        print(dumps(row), flush=True)
    return 0


def _cmd_profile(args):
    from fedjax_clust.bench.profile import profile
    from fedjax_clust.core.validation import check_int
    clients = _int_list(args.clients, "--clients")
    if min(clients) < 4:
        raise CliError(f"--clients must list client counts >= 4, got {args.clients!r}")
    check_int("--repeats", args.repeats)
    check_int("--loop-max-clients", args.loop_max_clients, 0)
    names = None if args.algorithms is None else [a.strip() for a in args.algorithms.split(",") if a.strip()]
    if names is not None and not names:
        raise CliError(f"--algorithms must list at least one algorithm, got {args.algorithms!r}")
    for name in names or []:
        if name not in ALL:
            raise CliError(f"--algorithms: unknown algorithm {name!r}; expected names from {', '.join(ALL)}")
    groups = None if args.subgroups == "none" else _int_list(args.subgroups, "--subgroups")
    if groups is not None:
        from fedjax_clust.bench.profile import check_subgroup_sweep
        check_subgroup_sweep(args.subgroup_clients, groups)
        check_int("--subgroup-rounds", args.subgroup_rounds)
    from fedjax_clust.io.run_folder import check_out_dir
    check_out_dir(args.out, "--out")
    participation = args.participation
    if participation is not None:
        from fedjax_clust.core.validation import check_real
        check_real("--participation", participation, low=0.0, high=1.0, low_open=True)
    profile(clients, names, repeats=args.repeats, loop_max_clients=args.loop_max_clients, out_dir=args.out,
            participation=participation)
    print(f"wrote {os.path.join(args.out, 'profile.csv')} and {os.path.join(args.out, 'profile.png')}")
    if groups is not None:
        from fedjax_clust.bench.profile import subgroup_tradeoff
        subgroup_tradeoff(args.subgroup_clients, groups, rounds=args.subgroup_rounds, out_dir=args.out)
        print(f"wrote {os.path.join(args.out, 'subgroups.csv')} and {os.path.join(args.out, 'subgroups.png')}")
    return 0


def _setup_devices(cpu_devices):
    """One JAX CPU device per core (or ``cpu_devices``), before JAX starts: Federated-Clustering splits its
    rows over the devices (see fedjax_clust.parallel.sharding)."""
    from fedjax_clust.cli.environment import set_cpu_devices
    if cpu_devices is not None:
        from fedjax_clust.core.validation import check_int
        check_int("--cpu-devices", cpu_devices)
    set_cpu_devices(cpu_devices)  # no effect once the backends are up (e.g. main() called twice in one process)


def _one_line(error) -> str:
    return " ".join(str(error).split()) or type(error).__name__


CONFIG_COMMANDS = ("run", "sweep")
# options a written config.toml leaves out (how this invocation runs, not what it computes) and those a resumed
# run may change (the rounds may grow; the folder and the checkpoint cadence are where and how often)
NOT_IN_CONFIG = ("command", "overwrite", "resume", "no_progress", "cpu_devices", "config_keys")
MAY_CHANGE_ON_RESUME = ("rounds", "out", "checkpoint_every")


def _parse(argv):
    """The parsed command line; ``run`` / ``sweep`` with ``--config FILE`` first take the file's options (see
    :mod:`fedjax_clust.cli.config_file`), then the command line's, which override them."""
    from fedjax_clust.cli.config_file import (
        ConfigError,
        config_tokens,
        load_config,
        split_config_argument,
    )
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        path, rest = split_config_argument(argv)
    except ConfigError as error:
        raise CliError(str(error)) from None
    if path is None:
        args = parser.parse_args(rest)
        if getattr(args, "command", None) in CONFIG_COMMANDS:
            args.config = None
        return args
    commands = [i for i, token in enumerate(rest) if token in CONFIG_COMMANDS + ("compare", "bench", "profile")]
    if not commands or rest[commands[0]] not in CONFIG_COMMANDS:
        raise CliError("--config applies to `fedjax-clust run` and `fedjax-clust sweep`")
    at = commands[0]
    subparser = parser.commands[rest[at]]
    try:
        tokens = config_tokens(subparser, load_config(path), path, lists=rest[at] == "sweep")
    except ConfigError as error:
        raise CliError(str(error)) from None
    args = parser.parse_args(rest[:at + 1] + tokens + rest[at + 1:])
    args.config = path
    given_here = {token[2:] for token in rest if token.startswith("--")}
    args.config_keys = [t[2:] for t in tokens if t.startswith("--") and t[2:] not in given_here]
    return args


def _name_flag(args, message: str) -> str:
    """``message`` with the builder argument it names (``lam must ...``, ``hidden=...``) replaced by the flag
    the user gave it with (``--ditto-lambda must ...``), so that every error names what the user typed."""
    import re
    if args is None:
        return message
    from_file = set(getattr(args, "config_keys", None) or ())  # named by file and key instead
    for opt in ALGORITHM_OPTIONS + TASK_OPTIONS:
        if _given(args, opt) and opt.flag[2:] not in from_file:
            named = re.sub(rf"^{re.escape(opt.kwarg)}(?=( must|=))", opt.flag, message, count=1)
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
    kwargs = {opt.dest: opt.kwarg for opt in ALGORITHM_OPTIONS + TASK_OPTIONS}
    for key in keys:
        dest = key.replace("-", "_")
        for name in dict.fromkeys(("--" + key, dest, kwargs.get(dest, dest))):
            if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", message):
                return f"{path}: key {key!r}: {message}"
    return message


def _resolved(args):
    from fedjax_clust.cli.config_file import resolved_config
    return resolved_config(args, exclude=NOT_IN_CONFIG)


def main(argv=None) -> int:
    """Run the command line; returns the exit status (see the module docstring)."""
    import warnings

    from fedjax_clust.cli.environment import enable_gpu_determinism
    from fedjax_clust.run.simulate import NonFiniteError
    enable_gpu_determinism()  # before any JAX computation: XLA reads XLA_FLAGS when its GPU backend starts
    warnings.showwarning = lambda message, *_, **__: print(f"warning: {_one_line(message)}", file=sys.stderr)
    args = None
    try:
        args = _parse(argv)
        _setup_devices(args.cpu_devices)
        command = {"run": _cmd_run, "compare": _cmd_compare, "bench": _cmd_bench, "profile": _cmd_profile,
                   "sweep": _cmd_sweep}
        return command[args.command](args)
    except (CliError, ValueError) as e:
        print(f"error: {_name_config_key(args, _name_flag(args, _one_line(e)))}", file=sys.stderr)
        return 2
    except NonFiniteError as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return 3
    except KeyboardInterrupt as e:
        print(f"interrupted: {_one_line(e)}" if str(e) else "interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
