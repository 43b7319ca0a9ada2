"""SR-FCA's inverted-MNIST table side by side with the SR-FCA authors' own code (issue 66): the same offline
pool, both codes, SR-FCA, Local, Global and IFCA, every seed, the final test accuracies next to each other.

    git clone https://github.com/harshv834/sr-fca && git -C sr-fca checkout a1b418ffeacccf2346b9f34e253521143da2d277
    python experiments/authors_srfca.py --setup --code sr-fca --out results/authors-srfca

``--code`` (or ``$FEDJAX_CLUST_SRFCA``) is the checkout; nothing of it is copied here. ``--setup`` builds its
virtual environment (``~/.cache/fedjax-clust-peers/srfca``: torch 2.13.0 for the CPU, NumPy < 2, PyYAML, tqdm,
scikit-learn, from the package index). The pool is ``experiments/authors/mnist_idx.py``'s (the offline 5,000
images, 4,000 as torchvision's "train" files, 1,000 as "t10k"); their ``run.py`` runs through
``experiments/authors/run_srfca.py`` (what it replaces at import time and why: its docstring).

The setting both codes run: inverted MNIST, ``--clients`` clients (default 40: 20 per cluster; their
configuration's 100 would leave 40 training images each), each with 100 training and 25 test images, an MLP
784-200-10 (their ``inv_mnist.yaml``), Adam at 2e-4, batch 50. Theirs runs its tuned configuration
(``configs/clustering/*/inv_mnist/best_hp.yaml``) unchanged but for the client count: SR-FCA's INIT of 280 local
iterations, 2 REFINE steps of 56 rounds x 5 local iterations on 10 sampled clients, distance threshold 0.77 on
their cross-entropy distance, beta 0.15; their Local is SR-FCA's INIT models (reported by the same run). Ours
runs ``experiments/srfca.py --profile paper`` at the same clients, images and width (``--clients-per-cluster
20 --hidden 200``): 280 rounds (SR-FCA: T = 100 ONE_SHOT rounds, 2 REFINE steps of 90 TrimmedMeanGD rounds),
lambda = 2 on the cross-cluster loss, beta = 0.1, every client every round. What differs is listed in the
result file (``differences``).

Writes ``DIR/authors_srfca.json`` (every run's final test accuracy in %, misclustering where known, seconds; a
summary per method and arm: mean, min, max over seeds) and ours' own ``DIR/ours/`` (srfca.py's files).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "authors")]

from harness import add_reference_options, prepare_reference, summarise  # noqa: E402

from fedjax_clust.cli.config_file import OptionParser, claim_experiment, experiment_args  # noqa: E402
from fedjax_clust.io.jsonio import read_json, write_json  # noqa: E402
from fedjax_clust.io.provenance import provenance  # noqa: E402

COMMIT = "a1b418ffeacccf2346b9f34e253521143da2d277"
REQUIREMENTS = ["torch==2.13.0", "numpy<2", "pyyaml", "tqdm", "scikit-learn"]
MARK = "AUTHORS-RESULT "
THEIRS = {"srfca": "sr_fca", "global": "fedavg", "ifca": "ifca"}  # our method -> their --clustering
METHODS = ("srfca", "local", "global", "ifca")  # Local comes with their SR-FCA run (its INIT models)
PAPER = {"srfca": 92.03, "local": 76.52, "global": 88.61, "ifca": 91.55}  # SR-FCA Table 1, inverted MNIST
DIFFERENCES = [
    "data: the offline 5,000-image MNIST subset, 40 clients of 100 training and 25 test images, where the paper has "
    "100 clients of about 600 and 100",
    "pixels: theirs feeds the inverted task's raw 0-255 values to the MLP (inverted = 255 - x); ours standardises "
    "the pool's pixels (mean 0, std 1)",
    "SR-FCA's REFINE: theirs trains each cluster model for 56 rounds of 5 local Adam iterations on 10 sampled "
    "clients (a fresh Adam each round) from a new random model; ours 90 rounds of TrimmedMeanGD (one Adam step on "
    "the trimmed mean of every member's gradient) restarted at w0",
    "SR-FCA's threshold: theirs 0.77 on their cross-entropy distance (tuned), ours lambda = 2 on Def. 5.1's "
    "cross-cluster loss (untuned); beta 0.15 against 0.1",
    "SR-FCA's reported models: theirs the last REFINE step's cluster models, trained on the map before its final "
    "RECLUSTER + MERGE; ours the models after the whole schedule",
    "Global and IFCA: theirs 50 rounds of 5 local Adam iterations on 10 sampled clients (their tuned "
    "configurations); ours 280 rounds of one Adam step on the mean of every client's gradient (IFCA: Option I, "
    "per cluster model)",
    "their --seed sets their whole run (split, initialisation, sampling); ours too, through srfca.py's seeds",
]


def run_theirs(python, code, data, method, seed, clients, timeout, threads):
    """{"accuracy": %, "local": % (SR-FCA's INIT models), "misclustering", "seconds"} of one run of theirs."""
    with tempfile.TemporaryDirectory() as out:
        command = [
            python,
            str(HERE / "authors" / "run_srfca.py"),
            str(code),
            str(data),
            out,
            "--clients",
            str(clients),
            "--seed",
            str(seed),
            "--threads",
            str(threads),
            "--",
            "--dataset",
            "inv_mnist",
            "--clustering",
            THEIRS[method],
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise SystemExit(f"their run.py failed ({method}, seed {seed}):\n{done.stderr[-3000:]}")
    result = json.loads(next(x for x in reversed(done.stdout.splitlines()) if x.startswith(MARK))[len(MARK) :])
    out = {"accuracy": 100 * result["test_acc"], "seconds": result["seconds"]}
    if "cluster_map" in result:  # true cluster of client i: i % 2 (their inversion of the odd clients)
        found = {i: k for k, members in result["cluster_map"].items() for i in members}
        truth = [i % 2 for i in range(clients)]
        out["misclustering"] = misclustering([found.get(i, -1) for i in range(clients)], truth)
    if "local_init" in result:
        out["local"] = 100 * result["local_init"]["test"]["acc"]
    return out


def misclustering(found, truth) -> float:
    """The share of clients outside the majority true cluster of their found cluster (0: the true partition up to
    names); an unassigned client (-1) counts as misclustered."""
    wrong = 0
    for k in set(found):
        members = [t for f, t in zip(found, truth) if f == k]
        wrong += len(members) if k == -1 else len(members) - max(members.count(t) for t in set(members))
    return wrong / len(found)


def run_ours(out: str, seeds: list, clients: int, progress: bool) -> dict:
    """{method: [(accuracy %, misclustering or None) per seed]} from srfca.py's paper profile at these sizes."""
    from srfca import main as srfca_main

    argv = [
        "--out",
        out,
        "--profile",
        "paper",
        "--tasks",
        "inverted",
        "--clients-per-cluster",
        str(clients // 2),
        "--hidden",
        "200",
        "--methods",
        ",".join(METHODS),
        "--seeds",
        ",".join(map(str, seeds)),
        "--overwrite",
    ]
    if srfca_main(argv + ([] if progress else ["--no-progress"])):
        raise SystemExit("srfca.py failed")
    results = read_json(os.path.join(out, "srfca.json"))["results"]["inverted"]
    return {
        m: [
            (100 * a, None if "misclustering" not in results[m] else results[m]["misclustering"]["seeds"][i])
            for i, a in enumerate(results[m]["test_accuracy"]["seeds"])
        ]
        for m in METHODS
    }


def main(argv=None):
    parser = OptionParser(description=__doc__.splitlines()[0])
    add_reference_options(
        parser, "results/authors-srfca", "harshv834/sr-fca", "FEDJAX_CLUST_SRFCA", "authors_srfca.json"
    )
    parser.add_argument("--clients", type=int, default=40, help="clients, half of them inverted (default 40)")
    args = experiment_args(parser, argv, "authors_srfca.py")
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.clients < 4 or args.clients % 2 or 4000 // args.clients < 50:
        parser.error(
            f"--clients must be even, at least 4 and leave each client a batch of 50 of the 4,000 "
            f"training images (at most 80), got {args.clients}"
        )
    python, data = prepare_reference(
        parser, args, "harshv834/sr-fca", "FEDJAX_CLUST_SRFCA", "run.py", "srfca", REQUIREMENTS
    )
    try:
        claim_experiment(args, ("authors_srfca.json", "ours", "config.toml"))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    runs = []
    for method in THEIRS:
        for seed in seeds:
            r = run_theirs(
                python, pathlib.Path(args.code).resolve(), data, method, seed, args.clients, args.timeout, args.threads
            )
            runs.append(
                dict(
                    method=method,
                    arm="authors",
                    seed=seed,
                    accuracy=r["accuracy"],
                    misclustering=r.get("misclustering"),
                    seconds=r["seconds"],
                )
            )
            if "local" in r:
                runs.append(dict(method="local", arm="authors", seed=seed, accuracy=r["local"], seconds=None))
            print(f"{method} seed {seed} authors: {r['accuracy']:.1f} % ({r['seconds']:.0f} s)", flush=True)
    for method, per_seed in run_ours(os.path.join(args.out, "ours"), seeds, args.clients, not args.no_progress).items():
        for seed, (accuracy, mis) in zip(seeds, per_seed):
            runs.append(dict(method=method, arm="ours", seed=seed, accuracy=accuracy, misclustering=mis))
    for r in runs:
        r["task"] = "inverted"
    summary = summarise(runs)["inverted"]
    write_json(
        os.path.join(args.out, "authors_srfca.json"),
        dict(
            checkout_commit=COMMIT,
            requirements=REQUIREMENTS,
            clients=args.clients,
            seeds=seeds,
            paper=PAPER,
            differences=DIFFERENCES,
            summary=summary,
            runs=runs,
            provenance=provenance(),
        ),
    )
    for method, per_arm in summary.items():
        cells = "  ".join(f"{arm} {c['mean']:.1f} [{c['min']:.1f}, {c['max']:.1f}]" for arm, c in per_arm.items())
        print(f"{method:8s} {cells}  (paper {PAPER[method]})")
    print(f"wrote {os.path.join(args.out, 'authors_srfca.json')} and {os.path.join(args.out, 'ours')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
