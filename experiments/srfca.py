"""SR-FCA's Tables 1, 2 and 4 (seeds/001) on the offline image tasks, with Federated-Clustering beside them.

    python experiments/srfca.py --out results/srfca                          # profile ours, offline, 5 seeds
    python experiments/srfca.py --out results/srfca-paper --profile paper    # the paper's settings, offline
    python experiments/srfca.py --out DIR --dataset tfds:mnist --clients-per-cluster 25 --seeds 0,1,2,3,4

Profiles (``--profile``; a flag given on the command line overrides its profile's value):

* ``ours`` (the default, sized for a CPU): 10 clients per cluster with the offline pool shared among them (80%
  of each client's images for training), an MLP-64, SGD at 0.05, batch 32, T = 40 ONE_SHOT rounds, 2 REFINE
  steps of 30 and 70 more rounds, lambda = 2.0.
* ``paper``: what the paper states (§6, "Simulated Datasets"): n = 600 training images per client (and 100
  test images, as issue 36 reads the paper's configuration), a 2-layer feed-forward network (2,048 hidden
  units, Adam at learning rate 2e-4, batch 50: the paper's configuration as issue 36 quotes it; its appendix
  is not in the seed text), 280 (inverted) and 250 (rotated) iterations with 2 REFINE steps, t = 2, five
  seeds. Our choices where it is silent: the iterations are every method's whole run, split for SR-FCA into
  ONE_SHOT's T and two REFINE steps of R (multiples of 10: 100 + 2 x 90 inverted, 90 + 2 x 80 rotated); lambda
  = 2.0 and beta = 0.1, untuned (the paper tunes both). The offline 5,000 images hold 7 clients of 700
  images: inverted runs 2 x 3 clients of 600 + 100 images, rotated 4 x 2 clients (t = 2 needs two per
  cluster) of 525 + 100; with ``--dataset tfds:mnist`` the profile runs the paper's m = 100 (50 per cluster
  inverted, 25 rotated), whose shares of MNIST's official splits are 600 training and 100 test images each.
  IFCA and ONE_SHOT-IFCA step each cluster model with the server's Adam on its members' mean gradient (Option
  I), CFL each cluster model with its own Adam on the pseudo-gradient -mean update / eta (one local step: the
  members' mean gradient), Local-KMeans its local models and then its cluster models with Adam (three-stage's
  ``step_optimizer``); FedSoft steps with SGD at ours' 0.05 (its builder has no Adam).
  ``settings.differences`` in srfca.json lists what still differs. Its methods are those of the paper's MNIST
  tables (SR-FCA, Local, Global, CFL, Local-KMeans, IFCA) and Federated-Clustering; ONE_SHOT-IFCA and FedSoft,
  which the paper reports on its real datasets only, run with ``--methods``.

Every method runs on inverted MNIST (2 clusters: the pixel values inverted for one) and rotated MNIST (4
clusters: 0, 90, 180, 270 degrees), with an MLP of ``--hidden`` units and batch ``--batch-size``, for the same
number of rounds: SR-FCA's whole schedule (T = ``--one-shot-steps`` ONE_SHOT rounds, then R = 2 REFINE steps of
``--refine-iterations`` TrimmedMeanGD rounds) plus ``--extra-rounds`` in which SR-FCA keeps training its final
clusters (each REFINE step restarts the cluster models at w0, so without extra rounds SR-FCA's final models have
trained for ``--refine-iterations`` rounds only, the others for the whole run). The methods:

* ``srfca``: cross-cluster loss distance (Def. 5.1), threshold lambda = ``--threshold`` (2.0: after 40 local
  rounds on the offline data, same-cluster distances stay below 1.4 and cross-cluster ones above 2.5), t = 2,
  beta = 0.1;
* ``local``, ``global`` (FedAvg), ``cfl``, ``ifca`` (IFCA Option I, the true K) and ``federated-clustering``
  (quantile radius q = ``--fc-quantile``, 10 clustering steps; its misclustering from the connected
  components of its balls, ``track_clusters``);
* ``one-shot-ifca``: the paper's ONE_SHOT-IFCA, IFCA Option I started from the K largest ONE_SHOT components'
  mean local models (:func:`fedjax_clust.algorithms.srfca.one_shot_models`, SR-FCA's T, lambda and distance);
  its T local rounds count towards the run's rounds;
* ``fedsoft``: FedSoft (Ruan & Joe-Wong 2022) with the true K, the authors' MNIST lambda = 0.1 and sigma = 1e-4,
  importance re-estimated every round and 5 proximal SGD steps per round (5x the gradients of IFCA Option I's
  one step), evaluated with each client's dominant cluster model; ``fedsoft-personal`` the same run evaluated
  with the personal models;
* ``local-kmeans``: the paper's Local-KMeans, "KMeans on the model weights of each client's local model" (the
  paper cites Ghosh et al. 2019 for it): our ``three-stage`` with Lloyd from random labels on the local models
  after T rounds, then sample-mean GD per cluster for the remaining rounds.

Writes ``DIR/srfca.json``: task -> method -> mean and std over seeds of the final test accuracy and the
misclustering (Tables 1 and 2), and SR-FCA's misclustering and cluster count after ONE_SHOT and each REFINE
step (Table 4); the paper's numbers beside ours; ``DIR/srfca.png`` (a bar chart of accuracies); prints the
tables. Every run's own folder is under ``DIR/runs``. ``--resume`` continues a stopped invocation (or adds tasks,
methods or seeds to a finished one: give the whole set again, since ``srfca.json`` is written from this
invocation's tasks, methods and seeds): each run in ``DIR/runs`` that finished with exactly this run's
configuration and rounds (its ``run.json``, :func:`fedjax_clust.io.run_folder.completed_history`) is read back,
the rest run, and a run folder made with other settings is replaced, with a line on stderr naming the fields
that differ.

CFL's split thresholds (eps1 = 0.05 on the norm of a cluster's mean update, eps2 = 0.1 on its largest client
update) bound update norms, which scale with the clients' step: they are scaled by lr / 0.05, ours' rate (our
choice; at the paper profile's 2e-4 the unscaled ones are never reached, and CFL never splits).
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
from typing import NamedTuple

import numpy as np

from fedjax_clust import make_algorithm, simulate
from fedjax_clust.algorithms.srfca import one_shot_models
from fedjax_clust.cli.config_file import OptionParser, claim_experiment, experiment_args, experiment_settings
from fedjax_clust.io.figures import figure_for_file
from fedjax_clust.io.jsonio import write_json
from fedjax_clust.io.provenance import provenance
from fedjax_clust.io.run_folder import completed_history, config_differences, saved_run_config
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.records import run_config, without_record
from fedjax_clust.tasks import TASKS as TASK_BUILDERS
from fedjax_clust.tasks import make_task

TASKS = {"inverted": "mnist-inverted", "rotated": "mnist-rotation"}
METHODS = (
    "srfca",
    "local",
    "global",
    "cfl",
    "local-kmeans",
    "ifca",
    "one-shot-ifca",
    "fedsoft",
    "fedsoft-personal",
    "federated-clustering",
)
OUTPUTS = ("srfca.json", "srfca.png", "runs", "config.toml")
# SR-FCA's Table 1 (test accuracy, %) and Table 2 (misclustering) on MNIST, m = 100 clients of n = 600 images
PAPER = {
    "accuracy": {
        "inverted": {
            "srfca": 92.03,
            "local": 76.52,
            "global": 88.61,
            "cfl": 88.30,
            "local-kmeans": 10.56,
            "ifca": 91.55,
        },
        "rotated": {
            "srfca": 91.66,
            "local": 85.55,
            "global": 80.88,
            "cfl": 80.47,
            "local-kmeans": 10.35,
            "ifca": 91.80,
        },
    },
    "misclustering": {
        "inverted": {"srfca": 0.0, "cfl": 0.08, "local-kmeans": 0.36, "ifca": 0.0},
        "rotated": {"srfca": 0.0, "cfl": 0.14, "local-kmeans": 0.28, "ifca": 0.0},
    },
}


class Profile(NamedTuple):
    """A profile's settings (module docstring); the per-task ones are {task: value}."""

    description: str
    clients_per_cluster: dict  # {task: (offline, with tfds:mnist)}
    images_per_client: dict  # {task: (training, test)}; None: the pool shared out, 20% of each for testing
    hidden: int
    lr: float
    optimizer: str
    batch_size: int
    schedule: dict  # {task: (T, R, extra rounds)}
    seeds: str
    methods: tuple


PROFILES = {
    "ours": Profile(
        "ours: sized for a CPU, SGD",
        {"inverted": (10, 10), "rotated": (10, 10)},
        None,
        64,
        0.05,
        "sgd",
        32,
        {"inverted": (40, 30, 70), "rotated": (40, 30, 70)},
        "0,1,2,3,4",
        METHODS,
    ),
    "paper": Profile(
        "the paper's settings (module docstring), offline at the largest scale the pool allows",
        {"inverted": (3, 50), "rotated": (2, 25)},
        {"inverted": (600, 100), "rotated": (525, 100)},
        2048,
        2e-4,
        "adam",
        50,
        {"inverted": (100, 90, 0), "rotated": (90, 80, 0)},
        "0,1,2,3,4",
        ("srfca", "local", "global", "cfl", "local-kmeans", "ifca", "federated-clustering"),
    ),
}
PAPER_SETTINGS = dict(
    clients={"inverted": 100, "rotated": 100},
    train_images=600,
    hidden=2048,
    lr=2e-4,
    optimizer="adam",
    batch_size=50,
    rounds={"inverted": 280, "rotated": 250},
    seeds=5,
)
# their builders take optimizer="adam" (IFCA: the server's Adam per cluster model, Option I)
ADAM_METHODS = ("srfca", "local", "global", "federated-clustering", "ifca", "one-shot-ifca", "cfl", "local-kmeans")
SGD_LABELS = {"fedsoft": "FedSoft", "fedsoft-personal": "FedSoft"}
# lambda enters SR-FCA's clustering only (ONE_SHOT's and MERGE's threshold graphs): a run whose every stage found
# the true clusters is what any lambda finding them would give
LAMBDA_MATCHES = (
    "lambda = {threshold:g} untuned (the paper tunes it); SR-FCA's clusters are the true ones after "
    "ONE_SHOT and each REFINE step on every seed, and lambda enters nothing but the clustering, so "
    "every lambda that finds the true clusters (the paper's Table 2: misclustering 0) gives these very "
    "runs"
)


def differences(task_key, task, args) -> list:
    """What still differs from the paper's experiment in this run of ``task_key`` (resolved settings)."""
    paper, out = PAPER_SETTINGS, []
    if args.dataset != "tfds:mnist":
        out.append(f"data: {args.dataset}, not MNIST (tfds:mnist)")
    if task.num_clients != paper["clients"][task_key]:
        out.append(f"{task.num_clients} clients, not the paper's m = 100")
    train = int(np.sum(np.asarray(task.data["mask"])[0])) if "mask" in task.data else None
    if train is not None and train != paper["train_images"]:
        out.append(f"{train} training images per client, not 600")
    for key, label in (
        ("hidden", "hidden units"),
        ("lr", "learning rate"),
        ("optimizer", "optimiser"),
        ("batch_size", "batch"),
    ):
        if getattr(args, key) != paper[key]:
            out.append(f"{label} {getattr(args, key)}, not {paper[key]}")
    rounds = args.one_shot_steps + 2 * args.refine_iterations + args.extra_rounds
    if rounds != paper["rounds"][task_key]:
        out.append(f"{rounds} rounds, not the paper's {paper['rounds'][task_key]} iterations")
    if len(args.seeds) != paper["seeds"]:
        out.append(f"{len(args.seeds)} seeds, not 5")
    k = args.clients_per_cluster
    if 0.1 * k < 1:  # floor(beta c) = 0 for every cluster of c <= k clients
        out.append(
            f"beta = 0.1 untuned (the paper tunes it); it trims nothing from clusters of at most {k} clients "
            f"(floor(0.1 x {k}) = 0), nor would any beta < 1/{k}"
        )
    else:
        out.append("beta = 0.1 untuned (the paper tunes it)")
    out.append(f"lambda = {args.threshold:g} untuned (the paper tunes it)")
    plain = list(dict.fromkeys(SGD_LABELS[m] for m in args.methods if m not in ADAM_METHODS))
    if args.optimizer != "sgd" and plain:
        names = plain[0] if len(plain) == 1 else ", ".join(plain[:-1]) + " and " + plain[-1]
        out.append(
            f"{names} step{'s' * (len(plain) == 1)} with SGD at {PROFILES['ours'].lr:g}: "
            f"{'its builder has' if len(plain) == 1 else 'their builders have'} no {args.optimizer}"
        )
    return out


def build(method, task, args, seed):
    """The algorithm of ``method`` on ``task`` (see the module docstring)."""
    own = dict(
        learning_rate=args.lr,
        batch_size=args.batch_size,
        **({} if args.optimizer == "sgd" else {"optimizer": args.optimizer}),
    )
    sgd = dict(learning_rate=args.lr if args.optimizer == "sgd" else PROFILES["ours"].lr, batch_size=args.batch_size)
    common = own if method in ADAM_METHODS else sgd
    if method == "srfca":
        return make_algorithm(
            "srfca",
            task,
            threshold=args.threshold,
            distance="cross-loss",
            min_size=2,
            beta=0.1,
            one_shot_rounds=args.one_shot_steps,
            refine_steps=2,
            refine_iterations=args.refine_iterations,
            **common,
        )
    if method == "local-kmeans":  # three-stage's "optimizer" is its Stage III rule: Adam is its step_optimizer
        rule = {"step_optimizer": common.pop("optimizer")} if "optimizer" in common else {}
        return make_algorithm(
            "three-stage",
            task,
            clustering="lloyd",
            aggregator="mean",
            erm_rounds=args.one_shot_steps,
            seed=seed,
            **common,
            **rule,
        )
    if method == "ifca":
        return make_algorithm("ifca-1", task, seed=seed, **common)
    if method == "one-shot-ifca":
        models, _ = one_shot_models(
            task,
            task.num_clusters,
            threshold=args.threshold,
            one_shot_rounds=args.one_shot_steps,
            distance="cross-loss",
            seed=seed,
            **own,
        )
        return make_algorithm("ifca-1", task, init_cluster_params=models, **common)
    if method in ("fedsoft", "fedsoft-personal"):
        return make_algorithm(
            "fedsoft",
            task,
            lam=0.1,
            smoother=1e-4,
            local_steps=5,
            seed=seed,
            predict="cluster" if method == "fedsoft" else "personal",
            **common,
        )
    if method == "federated-clustering":
        return make_algorithm(
            "federated-clustering",
            task,
            quantile=args.fc_quantile,
            clustering_steps=10,
            momentum=0.0,
            track_clusters=True,
            **common,
        )
    if method == "cfl":  # its split thresholds bound update norms, which scale with the step (module docstring)
        scale = common["learning_rate"] / PROFILES["ours"].lr
        return make_algorithm("cfl", task, eps1=0.05 * scale, eps2=0.1 * scale, **common)
    return make_algorithm(method, task, momentum=0.0, **common)


def outside_config(method, args):
    """What decides a run's numbers outside its algorithm's hparams, recorded in its run.json (so that --resume
    never reuses a run made with other values): ONE_SHOT-IFCA's ONE_SHOT, whose models enter IFCA as its start."""
    if method != "one-shot-ifca":
        return None
    return {
        "one_shot": dict(
            threshold=args.threshold,
            one_shot_rounds=args.one_shot_steps,
            distance="cross-loss",
            learning_rate=args.lr,
            optimizer=args.optimizer,
            batch_size=args.batch_size,
        )
    }


def run_one(method, task, args, seed, out_dir):
    """(final test accuracy, final misclustering or None, SR-FCA's stage rows) of one run."""
    rounds = args.one_shot_steps + 2 * args.refine_iterations + args.extra_rounds
    if method == "one-shot-ifca":  # its ONE_SHOT rounds ran inside build()
        rounds -= args.one_shot_steps
    algorithm = build(method, task, args, seed)
    extra = outside_config(method, args)
    history = None
    if args.resume:  # this very run, finished by an earlier invocation: its recorded rows
        config = run_config(algorithm, task, seed=seed, eval_every=args.eval_every, on_nonfinite="warn", extra=extra)
        history = completed_history(out_dir, config, rounds)
        saved = saved_run_config(out_dir)
        if history is None and saved is not None:  # another run's folder: say what is replaced, and why
            changed = config_differences(without_record(saved), without_record(config))  # hparams say it
            print(
                f"--resume: replacing {out_dir} ("
                + ("; ".join(changed[:3]) + ("; ..." if len(changed) > 3 else "") if changed else "not finished")
                + ")",
                file=sys.stderr,
            )
    if history is None:
        history = simulate(
            algorithm,
            task,
            rounds=rounds,
            seed=seed,
            config=extra,
            evaluation=Evaluation(eval_every=args.eval_every, on_nonfinite="warn"),
            output=Output(progress=False, out_dir=out_dir, overwrite=args.resume),
        ).history
    stages = {}
    if method == "srfca":
        marks = {
            args.one_shot_steps: "one_shot",
            args.one_shot_steps + args.refine_iterations: "refine_1",
            args.one_shot_steps + 2 * args.refine_iterations: "refine_2",
        }
        stages = {
            marks[row["round"]]: {
                "misclustering": row.get("misclustering"),
                "num_clusters": row.get("num_clusters"),
                "test_accuracy": row.get("test_accuracy"),
            }
            for row in history
            if row["round"] in marks
        }
    last = history[-1]
    return last.get("test_accuracy"), last.get("misclustering"), stages


def mean_std(values):
    finite = [v for v in values if v is not None and np.isfinite(v)]
    return {
        "mean": float(np.mean(finite)) if finite else None,
        "std": float(np.std(finite)) if finite else None,
        "seeds": values,
    }


def table_text(results):
    lines = ["test accuracy % (misclustering), mean over seeds; the paper's MNIST numbers in brackets"]
    for key, per_method in results.items():
        lines.append(f"  {key}:")
        for method, cell in per_method.items():
            acc, mis = cell["test_accuracy"]["mean"], cell["misclustering"]["mean"]
            paper_acc = PAPER["accuracy"][key].get(method)
            paper_mis = PAPER["misclustering"][key].get(method)
            text = "div." if acc is None else f"{100 * acc:5.1f} ± {100 * cell['test_accuracy']['std']:.1f}"
            text += "" if mis is None else f"  (mis {mis:.2f})"
            paper = (
                ""
                if paper_acc is None
                else f"  [paper {paper_acc:.2f}" + ("" if paper_mis is None else f", mis {paper_mis:.2f}") + "]"
            )
            lines.append(f"    {method:22s} {text}{paper}")
        stages = per_method.get("srfca", {}).get("stages")
        if stages:
            lines.append(
                "    SR-FCA by stage (misclustering, clusters): "
                + ", ".join(
                    f"{stage} {v['misclustering']['mean']:.2f} / {v['num_clusters']['mean']:.1f}"
                    for stage, v in stages.items()
                    if v["misclustering"]["mean"] is not None
                )
            )
    return "\n".join(lines)


def plot(results, path):
    fig, axes = figure_for_file(1, len(results), figsize=(5.5 * len(results), 3.6), squeeze=False)
    for ax, (key, per_method) in zip(axes[0], results.items()):
        methods = list(per_method)
        means = [
            np.nan if per_method[m]["test_accuracy"]["mean"] is None else 100 * per_method[m]["test_accuracy"]["mean"]
            for m in methods
        ]
        stds = [
            0.0 if per_method[m]["test_accuracy"]["std"] is None else 100 * per_method[m]["test_accuracy"]["std"]
            for m in methods
        ]
        ax.bar(np.arange(len(methods)), means, yerr=stds, capsize=3, color="tab:blue", label="ours")
        paper = [PAPER["accuracy"][key].get(m, np.nan) for m in methods]
        ax.scatter(
            np.arange(len(methods)),
            paper,
            color="tab:red",
            marker="_",
            s=300,
            zorder=3,
            label="SR-FCA paper (full MNIST)",
        )
        ax.set_xticks(np.arange(len(methods)), methods, rotation=30, ha="right")
        ax.set(ylabel="test accuracy (%)", title=f"MNIST ({key})", ylim=(0, 100))
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def resolve(args, task_key):
    """``args`` with every option left to the profile (None) set to the profile's value for ``task_key``, and the
    image task's options: (resolved args, make_task's split options)."""
    profile = PROFILES[args.profile]
    r = argparse.Namespace(**vars(args))
    one_shot, refine, extra = profile.schedule[task_key]
    full = args.dataset == "tfds:mnist"
    for name, value in (
        ("clients_per_cluster", profile.clients_per_cluster[task_key][full]),
        ("hidden", profile.hidden),
        ("lr", profile.lr),
        ("optimizer", profile.optimizer),
        ("batch_size", profile.batch_size),
        ("one_shot_steps", one_shot),
        ("refine_iterations", refine),
        ("extra_rounds", extra),
    ):
        if getattr(r, name) is None:
            setattr(r, name, value)
    split = {}
    images = (profile.images_per_client or {}).get(task_key)
    if images is not None and args.clients_per_cluster is None and not args.dataset.startswith("tfds:"):
        train, test = images  # the offline pool shared out: each client exactly train + test images
        clusters = inspect.signature(TASK_BUILDERS[TASKS[task_key]]).parameters["num_clusters"].default
        split = dict(
            test_fraction=test / (train + test), max_examples=clusters * r.clients_per_cluster * (train + test)
        )
    return r, split


def main(argv=None):
    parser = OptionParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument(
        "--profile",
        default="ours",
        choices=sorted(PROFILES),
        help="ours (default: sized for a CPU) or paper (the paper's settings); see the docstring",
    )
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated subset of {list(TASKS)}")
    parser.add_argument(
        "--methods",
        default=None,
        help=f"comma-separated subset of {list(METHODS)} (default: ours all of them; paper those of "
        "the paper's MNIST tables, and federated-clustering)",
    )
    parser.add_argument("--seeds", default=None, help="comma-separated seeds (default 0,...,4)")
    parser.add_argument("--dataset", default="mnist-5k", help="image source (default mnist-5k, offline)")
    parser.add_argument(
        "--clients-per-cluster", type=int, default=None, help="default: ours 10; paper 3 inverted, 2 rotated (offline)"
    )
    parser.add_argument(
        "--hidden", type=int, default=None, help="hidden units of the MLP (default: ours 64, paper 2048)"
    )
    parser.add_argument("--lr", type=float, default=None, help="learning rate (default: ours 0.05, paper 2e-4)")
    parser.add_argument(
        "--optimizer",
        default=None,
        choices=["sgd", "adam"],
        help="the clients' optimiser where the builder has it (default: ours sgd, paper adam)",
    )
    parser.add_argument("--batch-size", type=int, default=None, help="default: ours 32, paper 50")
    parser.add_argument(
        "--one-shot-steps",
        type=int,
        default=None,
        help="ONE_SHOT's T (default: ours 40; paper 100 inverted, 90 rotated)",
    )
    parser.add_argument(
        "--refine-iterations",
        type=int,
        default=None,
        help="rounds per REFINE step (default: ours 30; paper 90 inverted, 80 rotated)",
    )
    parser.add_argument(
        "--extra-rounds",
        type=int,
        default=None,
        help="rounds after SR-FCA's schedule, for every method (default: ours 70, paper 0)",
    )
    parser.add_argument("--threshold", type=float, default=2.0, help="SR-FCA's lambda (default 2.0)")
    parser.add_argument("--fc-quantile", type=float, default=0.2, help="FC's quantile q (default 0.2)")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run in --out")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the runs in --out/runs that an earlier invocation finished with exactly these "
        "settings (run.json's configuration and rounds) and run the rest; srfca.json is "
        "rewritten from all of them",
    )
    parser.add_argument("--no-progress", action="store_true")
    args = experiment_args(parser, argv, "srfca.py")

    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    methods = ",".join(PROFILES[args.profile].methods) if args.methods is None else args.methods
    args.methods = [m.strip() for m in methods.split(",") if m.strip()]
    bad = [t for t in args.tasks if t not in TASKS] + [m for m in args.methods if m not in METHODS]
    if bad or not args.tasks or not args.methods:
        parser.error(f"unknown or missing task/method {bad}; tasks: {list(TASKS)}, methods: {list(METHODS)}")
    try:
        seeds = PROFILES[args.profile].seeds if args.seeds is None else args.seeds
        args.seeds = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--seeds must be comma-separated integers, got {args.seeds!r}")
    per_task = {key: resolve(args, key) for key in args.tasks}
    for r, _ in per_task.values():
        if not r.seeds or r.one_shot_steps < 1 or r.refine_iterations < 1:
            parser.error("give at least one seed, and --one-shot-steps and --refine-iterations >= 1")
        if r.extra_rounds < 0:
            parser.error("--extra-rounds must be >= 0")
        for rounds in (r.one_shot_steps, r.refine_iterations, r.extra_rounds):
            if rounds % r.eval_every:
                parser.error(
                    "--eval-every must divide --one-shot-steps, --refine-iterations and --extra-rounds "
                    "(stage boundaries)"
                )
    if args.resume and args.overwrite:
        parser.error("--resume keeps the finished runs in --out and --overwrite removes them: give one of them")
    try:  # a folder never mixes two runs of the experiment (--resume: each run reused only if it is this one)
        if args.resume:
            claim_experiment(
                argparse.Namespace(**{**vars(args), "overwrite": True}), [name for name in OUTPUTS if name != "runs"]
            )
        else:
            claim_experiment(args, OUTPUTS)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    from tqdm.auto import tqdm

    settings = experiment_settings(args)
    resolved = {key: experiment_settings(r) for key, (r, _) in per_task.items()}
    first = next(iter(resolved.values()))
    # the options every task resolved alike at the top level (the docs table reads them there)
    settings.update({k: v for k, v in first.items() if all(t.get(k) == v for t in resolved.values())})
    settings["per_task"] = {key: {k: v for k, v in t.items() if settings.get(k) != v} for key, t in resolved.items()}
    settings["differences"] = {}
    output = {"provenance": provenance(), "settings": settings, "paper": PAPER, "results": {}}
    path = os.path.join(args.out, "srfca.json")
    total = len(args.tasks) * len(args.methods) * len(args.seeds)
    with tqdm(total=total, desc="srfca runs", disable=args.no_progress, dynamic_ncols=True) as bar:
        for key in args.tasks:
            r, split = per_task[key]
            per_method = {}
            for method in args.methods:
                accuracy, misclustering, stages = [], [], {}
                for seed in args.seeds:
                    task = make_task(
                        TASKS[key],
                        dataset=args.dataset,
                        model="mlp",
                        hidden=r.hidden,
                        clients_per_cluster=r.clients_per_cluster,
                        seed=seed,
                        **split,
                    )
                    if key not in settings["differences"]:  # the same for every method and seed
                        settings["differences"][key] = differences(key, task, r)
                    acc, mis, stage_rows = run_one(
                        method, task, r, seed, os.path.join(args.out, "runs", key, method, f"seed{seed}")
                    )
                    accuracy.append(acc)
                    misclustering.append(mis)
                    for stage, row in stage_rows.items():
                        for metric, value in row.items():
                            stages.setdefault(stage, {}).setdefault(metric, []).append(value)
                    bar.update()
                if (
                    method == "srfca"
                    and stages
                    and all(v == 0 for row in stages.values() for v in row.get("misclustering", [None]))
                ):
                    settings["differences"][key] = [
                        LAMBDA_MATCHES.format(threshold=args.threshold) if d.startswith("lambda = ") else d
                        for d in settings["differences"][key]
                    ]
                per_method[method] = {"test_accuracy": mean_std(accuracy), "misclustering": mean_std(misclustering)}
                if stages:
                    per_method[method]["stages"] = {
                        stage: {m: mean_std(v) for m, v in row.items()} for stage, row in stages.items()
                    }
                output["results"][key] = per_method
                write_json(path, output)  # a stopped run keeps what it did
            plot(output["results"], os.path.join(args.out, "srfca.png"))
    print(table_text(output["results"]))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
