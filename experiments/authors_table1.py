"""Werner et al. Table 1 side by side with the paper authors' own MNIST scripts (issue 66): the same offline pool,
both codes, every method and seed, the final test accuracies next to each other.

    git clone https://github.com/liehe/PRFL && git -C PRFL checkout 6ec27b0368fa37900ba8a18a0572447bb417f48f
    python experiments/authors_table1.py --setup --code PRFL --out results/authors-table1

``--code`` (or ``$FEDJAX_CLUST_PRFL``) is the checkout; nothing of it is copied here. ``--setup`` builds its
virtual environment (``~/.cache/fedjax-clust-peers/prfl``: torch 2.13.0 for the CPU, NumPy < 2, SciPy,
scikit-learn, from the package index). The pool: fedjax-clust's offline ``mnist-5k`` shuffled (seed 0), 4,000
images written as torchvision's "train" IDX files and 1,000 as "t10k" (``experiments/authors/mnist_idx.py``);
their scripts run through ``experiments/authors/run_prfl.py`` (what it patches at import time and why: its
docstring). Each (task, method, seed) runs in three arms:

* ``authors``: their code as published. Its sampler gives every client a fresh share of the whole training
  split at every epoch (``sampler.DistributedSampler.set_epoch``), so over a run a client sees far more than
  its 200 images;
* ``authors-fixed``: their code with each client keeping its epoch-0 images (``--fixed-clients``: the one
  behaviour the runner changes), the federated setting ours simulates;
* ``ours``: fedjax-clust on the same pool in the same settings (``experiments/table1.py``'s paper profile and its
  momenta: each client 200 training and 50 test images of its own), from Flax's initial weights, our default;
* ``ours-torch-init``: ours with their initial weights' distribution (``weight_init="torch"``: PyTorch's
  defaults, :mod:`fedjax_clust.models.weight_init`), the one change between ``ours`` and ``authors-fixed``; the
  paper profile has started from these since this comparison.

The methods and their settings, both codes (their flags from ``mnist/run.sh`` with ``-n 300`` replaced by 20,
what 5,000 images hold at the paper's 200 training images per client; learning rate 0.1, momentum 0.9, the
paper's probability loss, MLP 784-200-10):

* ``local``, ``global``, ``ground-truth``, ``ifca`` (their ``ifca-grad``, our ``ifca-1``): batch 32, 30 epochs
  of 7 steps = 210 rounds, as run.sh's baselines;
* ``fc``: Federated-Clustering as run.sh's command for it (``--epochs 50 --batch-size 1000
  --algorithm fc-grad-3-quantile0.2-15``): 50 full-batch rounds (a batch of 1,000 holds a client's 200 images),
  3 thresholding steps, the 20th percentile, one group of all 20 clients (their 15 groups of 300 are groups of
  20). Ours: ``rounds=50, batch_size=200, clustering_steps=3, quantile=0.2, subgroups=1``;
* ``fc-profile``: Federated-Clustering in the settings our paper profile (``experiments/table1.py``) gave it
  before this comparison, reading run.sh's baseline line for every method: 210 rounds of batch 32, 10
  thresholding steps (their ``fc-grad-10-quantile0.2-1 --epochs 30 --batch-size 32``); the profile now runs
  run.sh's command for FC, and PyTorch's initial weights; private-label only (the claim's task) and without
  the re-drawing arm, to keep the run near an hour on two cores.

Settings the two codes still differ in (listed in the result file's ``differences``): their models start from
PyTorch's default initialisation (uniform, +-1/sqrt(fan_in)), ours from the task's (Flax's LeCun normal); their
``--seed`` sets the initialisation only (the sampler's draws depend on the epoch), ours the data split too; their
IFCA and Local steps follow their scripts (IFCA with momentum 0.9 on its cluster models, Local plain SGD), ours
are the builders' (IFCA plain SGD, Local with the profile's momentum 0).

Writes ``DIR/authors_table1.json`` (every run's final and per-evaluation test accuracy in %, its seconds; a
summary per task, method and arm: mean, min, max over seeds) and ``DIR/authors_table1.png`` (seed 0's test
accuracy against rounds, per task, for the Federated-Clustering rows).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "authors")]

from harness import add_reference_options, prepare_reference, summarise  # noqa: E402
from table1 import PAPER, PROFILES, TASKS, method_options  # noqa: E402

from fedjax_clust import NonFiniteError, make_algorithm, simulate  # noqa: E402
from fedjax_clust.cli.config_file import OptionParser, claim_experiment, experiment_args  # noqa: E402
from fedjax_clust.io.jsonio import write_json  # noqa: E402
from fedjax_clust.io.provenance import provenance  # noqa: E402
from fedjax_clust.run.compare import plot_accuracy_panels  # noqa: E402
from fedjax_clust.run.driver_options import Evaluation, Output  # noqa: E402
from fedjax_clust.tasks import make_task  # noqa: E402

COMMIT = "6ec27b0368fa37900ba8a18a0572447bb417f48f"
REQUIREMENTS = ["torch==2.13.0", "numpy<2", "scipy", "scikit-learn"]
MARK = "AUTHORS-RESULT "
ARMS = ("authors", "authors-fixed", "ours", "ours-torch-init")
CLIENTS, CLUSTERS, TRAIN_IMAGES, LR, MOMENTUM = 20, 4, 200, 0.1, 0.9
THEIR_DATA = {"rotation": "rotation", "private-label": "relabel"}
BASELINE = dict(epochs=30, batch=32)  # run.sh's baseline line: 7 steps an epoch, 210 rounds


class Method:
    """One row: their ``--algorithm`` and schedule, our builder and its options (module docstring)."""

    def __init__(self, theirs, ours, epochs, batch, options=None, paper=None, tasks=None, arms=ARMS):
        self.theirs, self.ours, self.epochs, self.batch = theirs, ours, epochs, batch
        self.options, self.paper, self.tasks, self.arms = options or {}, paper or ours, tasks, arms

    @property
    def steps_per_epoch(self) -> int:
        """Their trainer's steps an epoch: ceil(200 / batch) batches, at most run.sh's 30."""
        return min(math.ceil(TRAIN_IMAGES / self.batch), 30)

    @property
    def rounds(self) -> int:
        return self.epochs * self.steps_per_epoch


FC_COMMAND = dict(quantile=0.2, clustering_steps=3, subgroups=1)
METHODS = {
    "local": Method("local", "local", **BASELINE),
    "global": Method("global", "global", **BASELINE),
    "ground-truth": Method("groundtruth", "ground-truth", **BASELINE),
    "ifca": Method("ifca-grad", "ifca-1", **BASELINE),
    "fc": Method("fc-grad-3-quantile0.2-1", "federated-clustering", 50, 1000, FC_COMMAND, "federated-clustering"),
    "fc-profile": Method(
        "fc-grad-10-quantile0.2-1",
        "federated-clustering",
        **BASELINE,
        paper="federated-clustering",
        tasks=("private-label",),
        arms=ARMS[1:],
    ),
}
DIFFERENCES = [
    "data: the offline 5,000-image MNIST subset (4,000 training, 1,000 test images), not MNIST's 60,000 + 10,000; "
    "so 20 clients (5 per cluster) of 200 training and 50 test images, where the paper has 300 clients",
    "initialisation: theirs PyTorch's default (uniform +-1/sqrt(fan_in), biases too), ours Flax's (LeCun normal "
    "weights, zero biases); the ours-torch-init arm draws from PyTorch's distribution (not their generator's numbers)",
    "their --seed sets the initialisation only (their sampler's draws depend on the epoch, so every seed draws the "
    "same clients); our seed also draws the data split",
    "the authors arm re-draws every client's 200 training images from the whole training split each epoch, as "
    "their code does; authors-fixed and ours keep each client's images for the whole run",
    "IFCA: theirs passes every client's gradient through the client's own momentum-0.9 buffer and steps a cluster "
    "model on the sum of its members' buffers divided by all n clients, choosing each client's cluster by the "
    "loss on a separate batch of its training images (their validation loader); ours (ifca-1) steps with plain "
    "SGD on the members' mean gradient",
    "their test accuracy is each client's on its 50 test images, averaged over clients; ours the same mean",
]


def their_argv(method: Method, task_key: str, seed: int) -> list:
    """The flags of their launcher for one run (run.sh's, with -n 20)."""
    return [
        "--lr",
        str(LR),
        "-n",
        str(CLIENTS),
        "--K",
        str(CLUSTERS),
        "--epochs",
        str(method.epochs),
        "--batch-size",
        str(method.batch),
        "--max-batch-size-per-epoch",
        "30",
        "--noniid",
        "0",
        "--momentum",
        str(MOMENTUM),
        "--data",
        THEIR_DATA[task_key],
        "--algorithm",
        method.theirs,
        "--seed",
        str(seed),
        "--identifier",
        f"{task_key}-{method.theirs}-seed{seed}",
    ]


def run_theirs(python, code, data, method, task_key, seed, fixed, timeout, threads):
    """(curve [(round, accuracy %)], seconds) of one run of their launcher."""
    with tempfile.TemporaryDirectory() as out:
        command = [
            python,
            str(HERE / "authors" / "run_prfl.py"),
            str(code),
            str(data),
            out,
            "--threads",
            str(threads),
        ] + (["--fixed-clients"] if fixed else [])
        done = subprocess.run(
            command + ["--"] + their_argv(method, task_key, seed),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=code,
        )
    if done.returncode:
        raise SystemExit(f"their launcher failed ({method.theirs}, {task_key}, seed {seed}):\n{done.stderr[-3000:]}")
    line = next(x for x in reversed(done.stdout.splitlines()) if x.startswith(MARK))
    result = json.loads(line[len(MARK) :])
    curve = [(e["epoch"] * method.steps_per_epoch, float(e["top1"])) for e in result["epochs"]]
    return curve, result["seconds"]


def run_ours(method, task_key, seed, progress, weight_init="flax"):
    """(curve [(round, accuracy %)], seconds, whether it went non-finite) of fedjax-clust's run."""
    task = make_task(
        TASKS[task_key],
        dataset="mnist-5k",
        model="mlp",
        hidden=200,
        loss="probability",
        clients_per_cluster=CLIENTS // CLUSTERS,
        weight_init=weight_init,
        seed=seed,
    )
    options = method_options(method.ours, task_key, task.num_clients, PROFILES["paper"].momentum, 1)
    options.update(method.options)
    algo = make_algorithm(method.ours, task, learning_rate=LR, batch_size=min(method.batch, TRAIN_IMAGES), **options)
    tic = time.perf_counter()
    try:
        result = simulate(
            algo,
            task,
            rounds=method.rounds,
            seed=seed,
            evaluation=Evaluation(eval_every=method.steps_per_epoch),
            output=Output(progress=progress),
        )
    except NonFiniteError:
        return [], time.perf_counter() - tic, True
    curve = [(r["round"], 100.0 * r["test_accuracy"]) for r in result.history if r.get("test_accuracy") is not None]
    return curve, time.perf_counter() - tic, False


def plot(runs: list, path: str) -> None:
    panels = {}
    for r in runs:
        if r["seed"] == 0 and r["method"].startswith("fc"):
            title = f"MNIST {r['task']}: Federated-Clustering"
            panels.setdefault(title, {})[f"{r['arm']} ({r['method']})"] = [(x, y / 100) for x, y in r["curve"]]
    plot_accuracy_panels(panels, path)


def main(argv=None):
    parser = OptionParser(description=__doc__.splitlines()[0])
    add_reference_options(parser, "results/authors-table1", "liehe/PRFL", "FEDJAX_CLUST_PRFL", "authors_table1.json")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--arms", default=",".join(ARMS))
    args = experiment_args(parser, argv, "authors_table1.py")
    seeds = [int(s) for s in args.seeds.split(",")]
    tasks, methods, arms = (args.tasks.split(","), args.methods.split(","), args.arms.split(","))
    bad = (
        [t for t in tasks if t not in TASKS]
        + [m for m in methods if m not in METHODS]
        + [a for a in arms if a not in ARMS]
    )
    if bad:
        parser.error(f"unknown {bad}: tasks {list(TASKS)}, methods {list(METHODS)}, arms {list(ARMS)}")
    python = code = data = None
    if any(a.startswith("authors") for a in arms):
        python, data = prepare_reference(
            parser, args, "liehe/PRFL", "FEDJAX_CLUST_PRFL", "mnist/launcher.py", "prfl", REQUIREMENTS
        )
        code = pathlib.Path(args.code).resolve() / "mnist"
    try:
        claim_experiment(args, ("authors_table1.json", "authors_table1.png", "config.toml"))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    runs = []
    for task_key in tasks:
        for name in methods:
            method = METHODS[name]
            if method.tasks is not None and task_key not in method.tasks:
                continue
            for seed in seeds:
                for arm in [a for a in arms if a in method.arms]:
                    if arm.startswith("ours"):
                        curve, seconds, diverged = run_ours(
                            method,
                            task_key,
                            seed,
                            not args.no_progress,
                            "torch" if arm == "ours-torch-init" else "flax",
                        )
                    else:
                        curve, seconds = run_theirs(
                            python,
                            code,
                            data,
                            method,
                            task_key,
                            seed,
                            arm == "authors-fixed",
                            args.timeout,
                            args.threads,
                        )
                        diverged = False
                    final = curve[-1][1] if curve and not diverged else None
                    runs.append(
                        dict(
                            task=task_key,
                            method=name,
                            arm=arm,
                            seed=seed,
                            accuracy=final,
                            peak=max((y for _, y in curve), default=None),
                            curve=curve,
                            seconds=seconds,
                        )
                    )
                    print(f"{task_key} {name} seed {seed} {arm}: {final} % ({seconds:.0f} s)", flush=True)
                summary = summarise(runs)
                write_json(
                    os.path.join(args.out, "authors_table1.json"),
                    dict(
                        checkout_commit=COMMIT,
                        requirements=REQUIREMENTS,
                        clients=CLIENTS,
                        clusters=CLUSTERS,
                        learning_rate=LR,
                        momentum=MOMENTUM,
                        seeds=seeds,
                        methods={
                            k: dict(
                                theirs=m.theirs,
                                ours=m.ours,
                                epochs=m.epochs,
                                batch=m.batch,
                                rounds=m.rounds,
                                options=m.options,
                            )
                            for k, m in METHODS.items()
                            if k in methods
                        },
                        paper={t: {k: PAPER[t][METHODS[k].paper][0] for k in methods} for t in tasks},
                        differences=DIFFERENCES,
                        summary=summary,
                        runs=runs,
                        provenance=provenance(),
                    ),
                )
    plot(runs, os.path.join(args.out, "authors_table1.png"))
    for task_key, per_method in summarise(runs).items():
        for name, per_arm in per_method.items():
            cells = "  ".join(
                f"{arm} {c['mean']:.1f} [{c['min']:.1f}, {c['max']:.1f}]"
                for arm, c in per_arm.items()
                if c["mean"] is not None
            )
            print(f"{task_key:14s} {name:13s} {cells}  (paper {PAPER[task_key][METHODS[name].paper][0]})")
    print(f"wrote {os.path.join(args.out, 'authors_table1.json')} and authors_table1.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
