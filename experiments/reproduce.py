"""Every result file the docs use, made again by one command, paper by paper.

    python experiments/reproduce.py --list                     # what it runs, its cost, what needs a download
    python experiments/reproduce.py                            # everything CPU-sized, into experiments/results
    python experiments/reproduce.py --paper werner             # one paper's figures and tables
    python experiments/reproduce.py --only fig3,table1         # named result folders
    python experiments/reproduce.py --quick                    # every entry at tiny sizes, into results/quick

Each entry of :data:`REPRODUCTIONS` is one command of an experiment script (``experiments/*.py``) or of the
CLI (``fedjax-clust ...``) writing one folder (or, for a benchmark, one JSON-lines file) under ``--out``. The
full-size commands are the ones that made the committed ``experiments/results``; after a full run into that
folder the docs' generated tables are rewritten from the new files (``python docs/tables.py``). ``--quick``
runs every entry at a size the test suite can afford (it checks that the pipeline from command to docs table
works, not the paper's numbers) and writes into ``results/quick`` unless ``--out`` says otherwise.

Entries marked with a ``needs`` (a tensorflow-datasets download, a GPU-sized run, a run too long for the
default pass) are listed but run only with ``--all``, when named in ``--only``, or with ``--quick`` when they
have quick sizes. Every command runs as its own process, one after the other, exactly as the listed command
line (``--in-process`` calls each program's ``main`` in this process instead: no start-up per entry, compiled
programs shared; what differs is the devices, one CPU device where the command line makes one per core); a failing
entry is reported and the others still run (exit status 1 at the end; Ctrl-C stops them all). ``DIR/reproduce.json``
records, per entry, the command as it ran,
its exit status and its seconds (the docs quote these costs), merged with earlier runs into the same ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import os
import pathlib
import shlex
import subprocess
import sys
import time
import traceback

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "experiments" / "results"
QUICK_RESULTS = ROOT / "results" / "quick"


@dataclasses.dataclass(frozen=True)
class Reproduction:
    """One result folder (or file) and the command that makes it.

    ``program`` is an experiment script's file name (``fig1_counterexamples.py``) or ``fedjax-clust``;
    ``args`` its full-size arguments (``--out`` is added); ``quick`` the options ``--quick`` sets (replacing
    the same option's full-size value, else added); ``stdout``: the entry is a file that captures the command's standard
    output (the benchmarks print JSON lines) instead of a folder given as ``--out``.
    """

    name: str
    paper: str
    what: str
    program: str
    args: tuple = ()
    quick: tuple = ()
    stdout: bool = False
    needs: str | None = None
    complete_statuses: tuple = (0,)

    def completed(self, status) -> bool:
        """Whether a run that exited with ``status`` wrote the entry's files in full: 0, and for a study whose
        runs diverge by design (a Byzantine study measures where defences break) also 3, the CLI's "some runs
        went non-finite" after every file is written."""
        return status in self.complete_statuses

    def argv(self, out: pathlib.Path, quick: bool, overwrite: bool) -> list:
        argv = _merge(self.args, self.quick) if quick else list(self.args)
        if not self.stdout:
            argv += ["--out", str(out)]
            if overwrite:
                argv.append("--overwrite")
        return argv

    def quick_run(self) -> tuple:
        """What the quick run computes: the program and its options in any order (two entries whose full runs
        differ may share one quick run, e.g. two learning rates the quick sizes set alike)."""
        return (
            self.program,
            self.stdout,
            tuple(sorted((o, tuple(v)) for o, v in _options(_merge(self.args, self.quick)))),
        )

    def command(self, out: pathlib.Path, quick: bool, overwrite: bool) -> str:
        prefix = ["fedjax-clust"] if self.program == "fedjax-clust" else ["python", f"experiments/{self.program}"]
        line = shlex.join(prefix + self.argv(_shown(out), quick, overwrite))
        return line + (f" > {_shown(out)}" if self.stdout else "")


def _options(args) -> list:
    """``args`` as [(option, [values])] (a subcommand or a flag has no value)."""
    groups = []
    for token in args:
        if token.startswith("--") or not groups:
            groups.append((token, []))
        else:
            groups[-1][1].append(token)
    return groups


def _merge(args, changes) -> list:
    """``args`` with each option of ``changes`` set to its value there (in place), new options appended."""
    new = dict(_options(changes))
    merged = [(option, new.pop(option, values)) for option, values in _options(args)] + list(new.items())
    return [token for option, values in merged for token in (option, *values)]


def _shown(path: pathlib.Path) -> pathlib.Path:
    """``path`` relative to the repository when it lies inside (the commands the docs print)."""
    try:
        return path.resolve().relative_to(ROOT)
    except ValueError:
        return path


PAPERS = {
    "library": "the first command and the benchmark the README cites",
    "performance": "the Performance page's kernels: the MLP cross-gradients and the MNIST CNN round",
    "werner": "Werner et al., Provably Personalized and Robust Federated Learning (Figs. 1-3, Table 1, §4.3)",
    "thesis-byzantine": (
        "the thesis's Byzantine chapter (Fig. 2.6, every attack at beta = 0 ... 0.5; CIFAR Figs. 2.4-2.5)"
    ),
    "thesis-incentives": "the thesis's incentive chapters (Figs. 3.1-3.3, Figs. 4.1-4.5)",
    "srfca": "Vardhan et al., SR-FCA (Tables 1, 2 and 4)",
    "ghosh": "Ghosh et al., the robust 3-stage method (Figs. 2a, 2b)",
    "optimizers": "the federated optimisers (FedAvg, FedAdam, FedYogi, FedProx, SCAFFOLD) on a label-skewed MNIST",
    "privacy": "differential privacy: epsilon against error for central DP (Global, Ground-truth, IFCA) and local DP "
    "(Federated-Clustering), with and without attackers; adaptive against fixed clipping",
}

TINY_MLP = ("--dataset", "digits", "--hidden", "8", "--no-progress")

REPRODUCTIONS = (
    Reproduction(
        "default",
        "library",
        "the first command's table and convergence plot",
        "fedjax-clust",
        ("compare", "--no-progress"),
        ("--rounds", "20", "--eval-every", "10"),
    ),
    Reproduction(
        "classification",
        "library",
        "accuracy of six algorithms on the classification task",
        "fedjax-clust",
        (
            "compare",
            "--task",
            "classification",
            "--algorithms",
            "local,global,ditto,knn-per,ground-truth,federated-clustering",
            "--clients-per-cluster",
            "10",
            "--rounds",
            "200",
            "--no-progress",
        ),
        ("--clients-per-cluster", "2", "--rounds", "10", "--eval-every", "5"),
    ),
    Reproduction(
        "bench/linear.jsonl",
        "library",
        "every algorithm's round and the Python pair loop at N = 300",
        "fedjax-clust",
        ("bench", "--clients", "300"),
        ("--clients", "12", "--repeats", "2", "--others", "global"),
        stdout=True,
    ),
    Reproduction(
        "bench/mlp.jsonl",
        "performance",
        "FC's cross-gradient kernel on an MLP, N = 4096, G = 16, B = 32",
        "fedjax-clust",
        ("bench", "--model", "mlp", "--no-single-device"),
        ("--clients", "32", "--subgroups", "2", "--repeats", "1", "--hidden", "8"),
        stdout=True,
    ),
    Reproduction(
        "bench/mlp_b8.jsonl",
        "performance",
        "the same kernel at minibatch B = 8",
        "fedjax-clust",
        ("bench", "--model", "mlp", "--no-single-device", "--batch-size", "8"),
        ("--clients", "32", "--subgroups", "2", "--repeats", "1", "--hidden", "8"),
        stdout=True,
    ),
    Reproduction(
        "bench/cnn.jsonl",
        "performance",
        "one FC round on MNIST with the CNN, N = 300 (§4.2's setting)",
        "fedjax-clust",
        ("bench", "--model", "cnn", "--repeats", "3"),
        ("--clients", "8", "--subgroups", "2", "--repeats", "1", "--loop-clients", "4", "--conv-models", "4"),
        stdout=True,
    ),
    Reproduction(
        "bench/linear_scale.jsonl",
        "performance",
        "every algorithm's round at N = 300 and 1,000, one call and fused",
        "fedjax-clust",
        ("bench", "--clients", "300,1000", "--pair-loop-rounds", "0"),
        ("--clients", "12", "--repeats", "2", "--others", "global"),
        stdout=True,
    ),
    Reproduction(
        "bench/large_n_20k.jsonl",
        "performance",
        "Federated-Clustering's group-major round at N = 20,000 in 20 subgroups",
        "fedjax-clust",
        ("bench", "--clients", "20000", "--subgroups", "20", "--others", "none", "--repeats", "3"),
        ("--clients", "40", "--subgroups", "2", "--repeats", "1"),
        stdout=True,
    ),
    Reproduction(
        "bench/large_n_100k.jsonl",
        "performance",
        "the same round at N = 100,000 in 100 subgroups",
        "fedjax-clust",
        ("bench", "--clients", "100000", "--subgroups", "100", "--others", "none", "--repeats", "3"),
        ("--clients", "40", "--subgroups", "2", "--repeats", "1"),
        stdout=True,
    ),
    Reproduction(
        "profile",
        "performance",
        "time, memory, counted FLOPs and bytes, a calibrated projection against "
        "N = 64 ... 4096 on the synthetic task, and FC's subgroups",
        "fedjax-clust",
        ("profile",),
        (
            "--clients",
            "16,32,64",
            "--algorithms",
            "federated-clustering,global,ifca-1",
            "--loop-max-clients",
            "16",
            "--tradeoff-subgroups",
            "1,2",
            "--tradeoff-clients",
            "32",
            "--tradeoff-rounds",
            "5",
        ),
    ),
    Reproduction(
        "profile-cnn",
        "performance",
        "the same profile with the MNIST CNN on MNIST rotation, N = 8 ... 64, batch 16",
        "fedjax-clust",
        (
            "profile",
            "--task",
            "mnist-rotation",
            "--model",
            "cnn",
            "--batch-size",
            "16",
            "--clients",
            "8,16,32,64",
            "--tradeoff-subgroups",
            "none",
        ),
        (
            "--clients",
            "8,16,24",
            "--algorithms",
            "federated-clustering,global,ifca-1",
            "--model",
            "mlp",
            "--hidden",
            "16",
        ),
    ),
    Reproduction(
        "device-efficiency",
        "performance",
        "the committed accelerator reports' rounds counted here and "
        "fitted: the measured end of every device projection (also the package's measured_efficiency.json)",
        "device_efficiency.py",
        ("--package-file", "fedjax_clust/cost/measured_efficiency.json"),
        ("--reports", "experiments/results/accelerator/nvidia-h200/*/report.json", "--package-file", ""),
    ),
    Reproduction(
        "network",
        "performance",
        "the synthetic profile's rounds over phones' links (the mobile network, "
        "server on a projected H100), and the time to mean ||x_i - x*_i||^2 <= 1 of the default experiment's "
        "runs",
        "fedjax-clust",
        (
            "network",
            "experiments/results/profile",
            "--network",
            "mobile",
            "--server-device",
            "h100-sxm",
            "--runs",
            "experiments/results/default",
            "--target",
            "1",
        ),
        ("--rounds", "5"),
    ),
    Reproduction(
        "peers",
        "performance",
        "the same FedAvg round in fedjax-clust, FedJAX 0.0.17 and Flower 1.42 "
        "(each in its own venv from the package index): synthetic regression and an MNIST MLP, N = 100, "
        "1,000, 10,000 and cohorts of 10 and 100 of 1,000, round-1 models checked to agree",
        "peers.py",
        ("--setup", "--rounds", "3", "--timeout", "900"),
        needs="downloads FedJAX and Flower (with Ray) into their own virtual environments; about an hour",
    ),
    Reproduction(
        "peers-cold",
        "performance",
        "fedjax-clust and FedJAX 0.0.17 alone, as the peers entry, 5 rounds, "
        "no compilation cache: fedjax-clust's start-up split into imports, data, build, set-up and "
        "compile",
        "peers.py",
        ("--setup", "--peers", "fedjax-clust,fedjax"),
        needs="FedJAX downloaded into its own virtual environment (a few minutes)",
    ),
    Reproduction(
        "peers-warm",
        "performance",
        "the same with fedjax-clust's compilation cache warm (the one call a "
        "Python user makes, use_compile_cache; every case of ours run once first)",
        "peers.py",
        (
            "--setup",
            "--peers",
            "fedjax-clust,fedjax",
            "--compile-cache",
            "~/.cache/fedjax-clust/peers-jax",
            "--warm-up",
        ),
        needs="FedJAX downloaded into its own virtual environment (a few minutes)",
    ),
    Reproduction(
        "fedavg-study",
        "optimizers",
        "FedAvg (E = 1, 5), FedAdam, FedYogi, FedProx, SCAFFOLD and "
        "Federated-Clustering on MNIST with Dirichlet(0.3) label mixes and log-normal sizes (sigma 0.5), "
        "50 clients, 3 seeds: one study",
        "fedjax-clust",
        (
            "study",
            "--algorithms",
            "fedavg,fedadam,fedyogi,fedprox,scaffold,federated-clustering",
            "--task",
            "mnist-rotation",
            "--model",
            "mlp",
            "--clusters",
            "1",
            "--clients-per-cluster",
            "50",
            "--partition",
            "dirichlet:0.3",
            "--size-sigma",
            "0.5",
            "--local-epochs",
            "1,5",
            "--batch-size",
            "20",
            "--seeds",
            "0,1,2",
            "--rounds",
            "50",
            "--eval-every",
            "25",
            "--lr",
            "0.05",
            "--no-progress",
        ),
        (
            "--algorithms",
            "fedavg,scaffold",
            "--task",
            "mnist-rotation",
            "--model",
            "mlp",
            "--clusters",
            "1",
            "--clients-per-cluster",
            "4",
            "--partition",
            "dirichlet:0.3",
            "--size-sigma",
            "0.5",
            "--local-epochs",
            "1",
            "--seeds",
            "0",
            "--rounds",
            "2",
            "--eval-every",
            "2",
            "--hidden",
            "8",
        ),
        needs="a long run: 17 minutes on 2 CPU cores (33 runs of 50 rounds; 123 compiled programs, 65 s of "
        "it compiling: each seed's partition is its own shape)",
    ),
    Reproduction(
        "flower-server",
        "optimizers",
        "our server optimisers (FedAvg, FedAvgM, FedAdagrad, FedYogi, FedAdam) "
        "against Flower 1.42's strategies on the same client models, float64, 3 rounds",
        "flower_server_math.py",
        ("--setup",),
        needs="Flower downloaded into its own virtual environment (a few minutes)",
    ),
    Reproduction(
        "fedavg-peers",
        "performance",
        "FedAvg, FedAvgM and FedAdam (FedJAX's bias-corrected Adam) with local "
        "epochs side by side with FedJAX 0.0.17: the models after rounds 1 and 3 compared, N = 20 and 1,000 "
        "of an MNIST MLP, rounds timed",
        "fedavg_peers.py",
        ("--setup",),
        needs="FedJAX downloaded into its own virtual environment (a few minutes)",
    ),
    Reproduction(
        "privacy",
        "privacy",
        "epsilon against mean ||x_i - x*_i||^2 on the synthetic task (N = 300, 300 "
        "rounds): central DP for Global, Ground-truth, IFCA-1 (q = 0.2), local DP for Federated-Clustering, "
        "noise multipliers 0.5 ... 8 as one sweep each, 0 and 10% sign-flip attackers",
        "privacy_utility.py",
        (),
        ("--rounds", "4", "--clients-per-cluster", "10", "--noise", "1,4"),
    ),
    Reproduction(
        "privacy-mnist",
        "privacy",
        "the same curves on MNIST rotation (N = 300, a 32-unit MLP, 100 rounds, "
        "learning rate 0.1, clip 1, FC in 16 subgroups): test accuracy against epsilon",
        "privacy_utility.py",
        (
            "--task",
            "mnist-rotation",
            "--clients-per-cluster",
            "75",
            "--hidden",
            "32",
            "--rounds",
            "100",
            "--lr",
            "0.1",
            "--clip",
            "1",
            "--local-clip",
            "1",
            "--noise",
            "0.5,2,8",
            "--subgroups",
            "16",
        ),
        (
            "--clients-per-cluster",
            "10",
            "--hidden",
            "8",
            "--rounds",
            "2",
            "--noise",
            "1",
            "--subgroups",
            "2",
            "--byzantine-fraction",
            "0",
        ),
    ),  # attackers: the synthetic entry's quick run
    Reproduction(
        "adaptive-clipping",
        "privacy",
        "adaptive clipping (Andrew et al. 2021: the bound follows the median "
        "norm) against fixed bounds 1 ... 10^4, every run at epsilon = 8 (synthetic task, N = 300, 300 rounds, "
        "Global and IFCA-1, 0 and 10% sign-flip attackers)",
        "adaptive_clipping.py",
        (),
        ("--rounds", "4", "--clients-per-cluster", "10", "--clips", "10,1000"),
    ),
    Reproduction(
        "bench/fedavg.jsonl",
        "performance",
        "FedAvg's local training (tau = 1 and 5, one epoch, FedAdam) "
        "against the one-step Global round, and in chunks against all clients at once, MNIST MLP, "
        "N = 1,000",
        "fedjax-clust",
        ("bench", "--model", "fedavg"),
        ("--clients", "16", "--repeats", "1"),
        stdout=True,
    ),
    Reproduction(
        "bench/privacy.jsonl",
        "performance",
        "a private round against the same round without privacy, "
        "Poisson slots against a fixed cohort, a sweep of 4 noise multipliers against 4 runs (N = 1,000)",
        "fedjax-clust",
        ("bench", "--model", "privacy", "--clients", "1000"),
        ("--clients", "16", "--repeats", "1"),
        stdout=True,
    ),
    Reproduction(
        "bench/participation.jsonl",
        "performance",
        "FC, IFCA-1 and Global with a fraction f of N = 1,000 clients per round",
        "fedjax-clust",
        ("bench", "--model", "participation", "--clients", "1000", "--repeats", "7"),
        ("--clients", "40", "--repeats", "2"),
        stdout=True,
    ),
    Reproduction(
        "bench/track_clusters.jsonl",
        "performance",
        "Federated-Clustering's round with and without track_clusters (the misclustering's cost), N = 300 ... 4,800",
        "fedjax-clust",
        ("bench", "--model", "track-clusters", "--clients", "300,1200,2400,4800"),
        ("--clients", "40", "--repeats", "2"),
        stdout=True,
    ),
    Reproduction(
        "bench/study_overhead.jsonl",
        "performance",
        "a study of three algorithms against the same sweeps by hand: the host time the study adds",
        "fedjax-clust",
        ("bench", "--model", "study"),
        ("--rounds", "10", "--repeats", "1"),
        stdout=True,
    ),
    Reproduction(
        "bench/attack_switch.jsonl",
        "performance",
        "a sweep of 6 attacks x 5 attackers' shares as one "
        "program switching over the attack kinds against a program per kind (Global and "
        "Federated-Clustering, runs mapped and vmapped)",
        "fedjax-clust",
        ("--compile-cache", "off", "bench", "--model", "attack-switch"),
        ("--rounds", "2", "--repeats", "1", "--quick"),
        stdout=True,
    ),
    Reproduction(
        "bench/srfca.jsonl",
        "srfca",
        "SR-FCA's all-pairs distances at N = 1,000 against a Python pair loop",
        "fedjax-clust",
        ("bench", "--model", "srfca"),
        ("--clients", "40", "--loop-clients", "6"),
        stdout=True,
    ),
    Reproduction(
        "ragged",
        "performance",
        "ragged clients against padded and equal-sized ones: full passes and "
        "minibatch steps, 1,000 clients of lognormal:1.5",
        "fedjax-clust",
        ("bench", "--suite", "ragged"),
        ("--quick",),
    ),
    Reproduction(
        "char-lstm",
        "performance",
        "the Shakespeare char-LSTM's client-parallel gradient step at 4, 16 and 32 clients",
        "fedjax-clust",
        ("bench", "--suite", "char-lstm"),
        ("--quick",),
    ),
    Reproduction(
        "population",
        "performance",
        "a FedAvg round of 10 or 100 participants among 1,000 and 10,000 "
        "clients: the server-held model against per-client rows",
        "fedjax-clust",
        ("bench", "--suite", "population"),
        ("--quick",),
    ),
    Reproduction(
        "streaming",
        "performance",
        "Federated-Clustering and Ditto with 100,000 clients' rows in host "
        "memory under a 1 GiB budget against the same cohort resident",
        "fedjax-clust",
        ("bench", "--suite", "streaming"),
        ("--quick",),
    ),
    Reproduction(
        "cohorts",
        "performance",
        "FedAvg and IFCA with LEAF's FEMNIST CNN, cohorts of 10 and 100 among "
        "1,000 to 1,000,000 clients indexing the MNIST pool: seconds and device bytes against N",
        "fedjax-clust",
        ("bench", "--suite", "cohorts"),
        ("--quick",),
    ),
    Reproduction(
        "fig1",
        "werner",
        "Fig. 1: the three counterexamples",
        "fig1_counterexamples.py",
        (),
        ("--rounds", "100", "--cfl-seeds", "4"),
    ),
    Reproduction(
        "fig2",
        "werner",
        "Fig. 2: the assumption constants A² and Δ² along a ground-truth run",
        "fig2_assumptions.py",
        (),
        ("--clients-per-cluster", "5", "--rounds", "20"),
    ),
    Reproduction(
        "fig3",
        "werner",
        "Fig. 3: the synthetic task in three settings",
        "fig3_synthetic.py",
        (),
        ("--rounds", "40", "--seeds", "1", "--lrs", "0.01,0.1", "--eval-every", "20"),
    ),
    Reproduction(
        "clipping",
        "werner",
        "§4.3: Threshold-Clustering's error against its iterations",
        "clipping_iterations.py",
        (),
        ("--repeats", "2", "--iterations", "15"),
    ),
    Reproduction(
        "table1",
        "werner",
        "Table 1: MNIST rotation and private labels (offline MNIST subset), profile "
        "ours: learning rates tuned per method",
        "table1.py",
        ("--seeds", "5", "--no-progress"),
        (
            "--clients-per-cluster",
            "2",
            "--rounds",
            "2",
            "--eval-every",
            "1",
            "--lrs",
            "0.1",
            "--seeds",
            "1",
            "--methods",
            "global,federated-clustering,ground-truth",
        )
        + TINY_MLP,
    ),
    Reproduction(
        "table1-paper",
        "werner",
        "Table 1 in the paper's settings (untuned lr 0.1, 210 rounds, FC run.sh's "
        "50 full-batch rounds, 200 training images per client; offline MNIST subset: N = 20)",
        "table1.py",
        ("--profile", "paper", "--seeds", "5", "--no-progress"),
        (
            "--clients-per-cluster",
            "2",
            "--rounds",
            "2",
            "--eval-every",
            "1",
            "--seeds",
            "1",
            "--methods",
            "local,federated-clustering,ground-truth",
        )
        + TINY_MLP,
    ),
    Reproduction(
        "table1-paper-ce",
        "werner",
        "Table 1's private labels in the paper's settings but trained on the "
        "cross-entropy (why Federated-Clustering fails there; offline MNIST subset: N = 20)",
        "table1.py",
        (
            "--profile",
            "paper",
            "--loss",
            "cross-entropy",
            "--tasks",
            "private-label",
            "--methods",
            "local,federated-clustering,ground-truth",
            "--seeds",
            "5",
            "--no-progress",
        ),
        ("--clients-per-cluster", "2", "--rounds", "2", "--eval-every", "1", "--seeds", "1") + TINY_MLP,
    ),
    Reproduction(
        "authors-table1",
        "werner",
        "Table 1 side by side with the authors' own scripts (liehe/PRFL, as "
        "published and with fixed clients) on the same offline pool: Local, Global, Ground-truth, IFCA and "
        "Federated-Clustering, both tasks, 3 seeds",
        "authors_table1.py",
        ("--setup", "--no-progress"),
        needs="the liehe/PRFL checkout (--code or $FEDJAX_CLUST_PRFL) and PyTorch 2.13 in its own virtual "
        "environment; about 75 minutes on two cores",
    ),
    Reproduction(
        "table1-full",
        "werner",
        "Table 1 at the paper's size and settings (full MNIST, N = 300)",
        "table1.py",
        ("--dataset", "mnist", "--profile", "paper", "--seeds", "5", "--no-progress"),
        (),
        needs="tensorflow-datasets' MNIST download; hours on a CPU, a GPU advised",
    ),
    Reproduction(
        "byzantine",
        "thesis-byzantine",
        "Fig. 2.6 and every attack at beta = 0 ... 0.5 on the synthetic task",
        "byzantine.py",
        ("--parts", "fig2.6,synthetic", "--no-progress"),
        (
            "--betas",
            "0,0.25",
            "--synthetic-clients-per-cluster",
            "4",
            "--synthetic-rounds",
            "5",
            "--methods",
            "fc:q0.1,global",
            "--attacks",
            "large-gradient,ball-edge",
            "--honest-per-cluster",
            "2",
            "--rounds",
            "2",
            "--eval-every",
            "2",
            "--hidden",
            "8",
            "--dataset",
            "digits",
            "--fig-aggregators",
            "median",
        ),
    ),
    Reproduction(
        "byzantine-study",
        "thesis-byzantine",
        "every attack x beta x aggregator on the synthetic task, "
        "3 seeds: one study with intervals and paired differences",
        "fedjax-clust",
        (
            "study",
            "--algorithms",
            "federated-clustering,global,ground-truth,local",
            "--quantile",
            "0.1,0.2",
            "--clustering-steps",
            "10",
            "--aggregator",
            "mean,median,geometric-median,krum,centered-clipping",
            "--attack",
            "large-gradient,sign-flip,gaussian,alie,ipm,nan",
            "--byzantine-fraction",
            "0,0.1,0.2,0.3,0.4,0.5",
            "--seeds",
            "0,1,2",
            "--clients-per-cluster",
            "25",
            "--rounds",
            "150",
            "--eval-every",
            "150",
            "--lr",
            "0.01",
            "--momentum",
            "0.9",
            "--no-progress",
        ),
        (
            "--algorithms",
            "federated-clustering,ground-truth",
            "--aggregator",
            "mean,median",
            "--attack",
            "alie,nan",
            "--byzantine-fraction",
            "0,0.25",
            "--seeds",
            "0",
            "--clients-per-cluster",
            "4",
            "--rounds",
            "4",
            "--eval-every",
            "2",
        ),
        complete_statuses=(0, 3),
    ),  # exit 3: runs went non-finite (a broken defence), every file written
    Reproduction(
        "bench/robust.jsonl",
        "thesis-byzantine",
        "every robust aggregator against the mean, N = 300, d = 10^5",
        "fedjax-clust",
        ("bench", "--model", "robust", "--repeats", "5"),
        ("--repeats", "2", "--clients", "50", "--dim", "1000"),
        stdout=True,
    ),
    Reproduction(
        "byzantine-image",
        "thesis-byzantine",
        "every attack at beta = 0 ... 0.5 on MNIST private labels",
        "byzantine.py",
        ("--parts", "image", "--no-progress"),
        (
            "--betas",
            "0,0.25",
            "--attacks",
            "sign-flip,label-flip",
            "--image-methods",
            "fc:q0.1,global",
            "--image-clients-per-cluster",
            "4",
            "--image-rounds",
            "2",
            "--hidden",
            "8",
            "--dataset",
            "digits",
        ),
        needs="one image run per attack, method and beta, one after the other: too long for the default pass",
    ),
    Reproduction(
        "cifar-fig2.4",
        "thesis-byzantine",
        "Fig. 2.4: CIFAR-10, VGG-16, methods and FC's ablations",
        "cifar.py",
        ("--figure", "2.4", "--no-progress"),
        (),
        needs="tensorflow-datasets' CIFAR-10 download and a GPU",
    ),
    Reproduction(
        "cifar-fig2.5",
        "thesis-byzantine",
        "Fig. 2.5: CIFAR-100, VGG-8",
        "cifar.py",
        ("--figure", "2.5", "--no-progress"),
        (),
        needs="tensorflow-datasets' CIFAR-100 download and a GPU",
    ),
    Reproduction(
        "defection_free",
        "thesis-incentives",
        "Figs. 3.1-3.3 at learning rate 0.1, 300 rounds",
        "defection_free.py",
        ("--lr", "0.1", "--rounds", "300"),
        (
            "--rounds",
            "3",
            "--pretrain-epochs",
            "1",
            "--firm-size",
            "100",
            "--target-size",
            "100",
            "--seeds",
            "1",
            "--batch-size",
            "20",
            "--lr",
            "0.01",
        ),
    ),  # the quick run of the next entry
    Reproduction(
        "defection_free_thesis_lr",
        "thesis-incentives",
        "Figs. 3.1-3.3 at the thesis's learning rate",
        "defection_free.py",
        (),
        (
            "--rounds",
            "3",
            "--pretrain-epochs",
            "1",
            "--firm-size",
            "100",
            "--target-size",
            "100",
            "--seeds",
            "1",
            "--batch-size",
            "20",
            "--lr",
            "0.01",
        ),
    ),
    Reproduction(
        "price_discrimination",
        "thesis-incentives",
        "Figs. 4.1-4.5: the repeated price game",
        "price_discrimination.py",
        (),
        ("--rounds", "3000", "--bias-rounds", "10", "--seeds", "2"),
    ),
    Reproduction(
        "bench/pd_protocol.jsonl",
        "thesis-incentives",
        "Fig. 4.5's grid compiled vs a Python loop",
        "fedjax-clust",
        ("bench", "--model", "pd-protocol"),
        ("--seeds", "1", "--rounds", "30", "--loop-rounds", "10", "--repeats", "1"),
        stdout=True,
    ),
    Reproduction(
        "srfca",
        "srfca",
        "Tables 1, 2 and 4: inverted and rotated MNIST",
        "srfca.py",
        ("--no-progress",),
        (
            "--seeds",
            "0",
            "--clients-per-cluster",
            "2",
            "--one-shot-steps",
            "5",
            "--refine-iterations",
            "5",
            "--extra-rounds",
            "5",
            "--eval-every",
            "5",
            "--methods",
            "srfca,local,global,federated-clustering",
        )
        + TINY_MLP,
    ),
    Reproduction(
        "srfca-paper",
        "srfca",
        "Tables 1, 2 and 4 in the paper's settings (Adam 2e-4, batch 50, MLP-2048, "
        "600 + 100 images per client; offline MNIST subset: N = 6 inverted, 8 rotated)",
        "srfca.py",
        ("--profile", "paper", "--no-progress"),
        (
            "--seeds",
            "0",
            "--clients-per-cluster",
            "2",
            "--one-shot-steps",
            "5",
            "--refine-iterations",
            "5",
            "--eval-every",
            "5",
            "--methods",
            "srfca,ifca",
        )
        + TINY_MLP,
    ),
    Reproduction(
        "authors-srfca",
        "srfca",
        "the inverted-MNIST table side by side with the SR-FCA authors' own code "
        "(harshv834/sr-fca) on the same offline pool: SR-FCA, Local, Global and IFCA, 40 clients, 3 seeds",
        "authors_srfca.py",
        ("--setup", "--no-progress"),
        needs="the harshv834/sr-fca checkout (--code or $FEDJAX_CLUST_SRFCA) and PyTorch 2.13 in its own "
        "virtual environment; about 35 minutes on two cores",
    ),
    Reproduction(
        "ghosh",
        "ghosh",
        "Figs. 2a and 2b: Trimmed K-means and the three stages",
        "ghosh_synthetic.py",
        ("--no-progress",),
        (
            "--trials",
            "1",
            "--clusters",
            "3",
            "--clients",
            "24",
            "--dim",
            "6",
            "--samples",
            "30",
            "--erm-steps",
            "20",
            "--lloyd-iterations",
            "3",
            "--stage3-rounds",
            "5",
        ),
    ),
)
BY_NAME = {r.name: r for r in REPRODUCTIONS}


def run_one(
    entry: Reproduction, out_root: pathlib.Path, *, quick: bool, overwrite: bool, in_process: bool = False
) -> int:
    """Run ``entry`` into ``out_root / entry.name`` as its own process (the command as a user types it: its own
    JAX start-up, devices and warnings), or with ``in_process`` by calling the program's ``main(argv)`` here
    (:func:`_call_main`); its exit status (2: the folder holds an earlier run)."""
    out = out_root / entry.name
    argv = entry.argv(out, quick, overwrite)
    program = (
        [sys.executable, "-m", "fedjax_clust.cli"]
        if entry.program == "fedjax-clust"
        else [sys.executable, str(ROOT / "experiments" / entry.program)]
    )
    if not entry.stdout:
        return _call_main(entry.program, argv) if in_process else subprocess.run(program + argv, cwd=ROOT).returncode
    if out.exists() and not overwrite:
        print(f"error: {out} holds an earlier run: pass --overwrite to replace it", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    try:
        with open(partial, "w") as sink:
            if in_process:
                with contextlib.redirect_stdout(sink):
                    status = _call_main(entry.program, argv)
            else:
                status = subprocess.run(program + argv, cwd=ROOT, stdout=sink).returncode
        if status == 0:
            os.replace(partial, out)
    finally:
        if partial.exists():
            partial.unlink()
    return status


def _call_main(program: str, argv: list) -> int:
    """``program``'s ``main(argv)`` called in this process, from the repository root as a process would run:
    ``fedjax_clust.cli.main`` (which, given a list, changes no process-wide setting) or the experiment script's
    ``main``, loaded from its file. Its exit status: the returned one, a ``SystemExit``'s code (the parsers exit
    with 2), and 1 with the traceback printed for an exception (a process would die with it)."""
    cwd = os.getcwd()
    try:
        os.chdir(ROOT)
        if program == "fedjax-clust":
            from fedjax_clust.cli import main
        else:
            path = ROOT / "experiments" / program
            spec = importlib.util.spec_from_file_location(f"_reproduce_{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            main = module.main
        status = main(list(argv))
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except KeyboardInterrupt:
        raise
    except Exception:  # noqa: BLE001 - a crashed entry is a failed entry, the others still run
        traceback.print_exc()
        status = 1
    finally:
        os.chdir(cwd)
    return 0 if status is None else int(status)


def select(papers: str | None, only: str | None, all_entries: bool, quick: bool = False) -> list:
    """The entries to run (ValueError naming an unknown paper or name). An entry marked with a ``needs`` runs
    with ``all_entries``, when named in ``only``, or with ``quick`` when it has quick sizes (tiny sizes need
    no GPU; the entries that need a download have none)."""
    chosen = list(REPRODUCTIONS)
    if papers:
        wanted = [p.strip() for p in papers.split(",") if p.strip()]
        unknown = [p for p in wanted if p not in PAPERS]
        if unknown:
            raise ValueError(f"--paper: unknown {unknown}; choose from {list(PAPERS)}")
        chosen = [r for r in chosen if r.paper in wanted]
    if only:
        wanted = [n.strip() for n in only.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in BY_NAME]
        if unknown:
            raise ValueError(f"--only: unknown {unknown}; choose from {list(BY_NAME)}")
        return [r for r in chosen if r.name in wanted]  # named entries run even when they need a download
    return [r for r in chosen if all_entries or r.needs is None or (quick and r.quick)]


def listing(out_root: pathlib.Path, quick: bool) -> str:
    costs = {}
    ledger = RESULTS / "reproduce.json"
    if ledger.exists():
        costs = json.loads(ledger.read_text())["entries"]
    lines = []
    for paper, title in PAPERS.items():
        lines.append(f"{paper}: {title}")
        for r in REPRODUCTIONS:
            if r.paper != paper:
                continue
            last = costs.get(r.name, {})
            cost = last.get("seconds") if r.completed(last.get("status")) and not last.get("quick") else None
            note = f"needs {r.needs}" if r.needs else (f"{cost / 60:.1f} min last time" if cost else "")
            lines.append(f"  {r.name:26s} {r.what}" + (f"  [{note}]" if note else ""))
            lines.append(f"  {'':26s} $ {r.command(out_root / r.name, quick, False)}")
    return "\n".join(lines)


def record(out_root: pathlib.Path, name: str, entry: dict) -> None:
    """Merge ``entry`` into ``out_root/reproduce.json`` (strict JSON; earlier entries of other names stay). A
    failed run does not erase the same entry's last successful one (same ``quick``): that one stays, with the
    failure recorded beside it as ``last_failure``; a success replaces both."""
    from fedjax_clust.io.jsonio import write_json
    from fedjax_clust.io.provenance import provenance

    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        fcntl = None
    path = out_root / "reproduce.json"
    with open(out_root / ".reproduce.lock", "w") as lock:  # two reproduce runs into one folder: no lost entry
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        ledger = json.loads(path.read_text()) if path.exists() else {"entries": {}}
        entry = {**entry, "provenance": provenance()}
        earlier = ledger["entries"].get(name)
        done = BY_NAME[name].completed if name in BY_NAME else (lambda status: status == 0)
        same_kind = earlier and earlier.get("quick") == entry["quick"]
        if not done(entry["status"]) and same_kind and done(earlier.get("status")):
            entry = {**earlier, "last_failure": entry}  # the last good run's cost stays; the failure beside it
        ledger["entries"][name] = entry
        write_json(str(path), ledger)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--paper", help=f"comma-separated papers: {', '.join(PAPERS)} (default: all)")
    parser.add_argument("--only", help="comma-separated result names (see --list)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the pipeline, not the papers")
    parser.add_argument(
        "--out", default=None, help="results root (default experiments/results; with --quick results/quick)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace earlier results in --out")
    parser.add_argument(
        "--all",
        "--downloads",
        dest="all_entries",
        action="store_true",
        help="also run the entries marked with what they need (a dataset download, a GPU, or a "
        "long run); --downloads is its older name",
    )
    parser.add_argument("--list", action="store_true", help="print the entries and their commands, run nothing")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="call each entry's main() in this process instead of starting it as its own: one JAX "
        "start-up and compiled programs shared between entries (the test suite's quick "
        "checks); an entry that crashes is a failed entry, as in its own process",
    )
    args = parser.parse_args(argv)
    out_root = pathlib.Path(args.out) if args.out else (QUICK_RESULTS if args.quick else RESULTS)
    try:
        entries = select(args.paper, args.only, args.all_entries, args.quick)
    except ValueError as error:
        parser.error(str(error))
    if args.list:
        print(listing(out_root, args.quick))
        return 0
    if not entries:
        parser.error("nothing selected")
    out_root.mkdir(parents=True, exist_ok=True)
    failed = []
    for i, entry in enumerate(entries, 1):
        line = entry.command(out_root / entry.name, args.quick, args.overwrite)
        print(f"[{i}/{len(entries)}] {entry.paper} / {entry.name}: {entry.what}\n  $ {line}", flush=True)
        start = time.perf_counter()
        try:
            status = run_one(entry, out_root, quick=args.quick, overwrite=args.overwrite, in_process=args.in_process)
        except KeyboardInterrupt:
            status = 130
        seconds = time.perf_counter() - start
        record(
            out_root, entry.name, {"command": line, "status": status, "seconds": round(seconds, 1), "quick": args.quick}
        )
        done = entry.completed(status)
        print(f"  {'done' if done else f'FAILED (exit {status})'} in {seconds:.1f} s", flush=True)
        if not done:
            failed.append(entry.name)
        if status in (130, -2):  # interrupted (Ctrl-C reaches the child and this process)
            print("interrupted: the remaining entries did not run", file=sys.stderr)
            return 130
    if out_root.resolve() == RESULTS.resolve() and not failed:
        status = subprocess.run([sys.executable, str(ROOT / "docs" / "tables.py")], cwd=ROOT).returncode
        if status != 0:  # another result file the docs read is missing or broken
            print(
                "warning: docs tables not regenerated; run python docs/tables.py once every result file is there",
                file=sys.stderr,
            )
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"wrote {len(entries)} result(s) under {out_root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
