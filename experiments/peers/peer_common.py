"""What every peer runner shares (NumPy only: it runs in each peer's own virtual environment).

A benchmark case is a folder written by ``experiments/peers.py``: ``x.npy`` [N, n, ...] and ``y.npy`` [N, n]
(every client's examples), ``params.npz`` (the initial model, arrays named ``p0``, ``p1``, ... in the order of
:data:`LAYOUTS`), ``case.json`` (task, N, cohort S, rounds, learning rate). Every runner does FedAvg with one
full-batch gradient step per client and round (FedSGD): the model after a round is

    w <- w - lr x sum_i n_i g_i(w) / sum_i n_i   over the round's participants (equal n_i: their mean),

and prints one JSON line (:func:`report`): its timings and, in ``OUT/round1.npz``, the model after round 1.
"""

import json
import os
import sys
import time

import numpy as np

START = time.perf_counter()  # as early as a runner can stamp: imports of its framework come after

LAYOUTS = {  # the model's arrays, in the order of params.npz
    "synthetic": ("w",),  # linear regression without bias: 0.5 (x . w - y)^2
    "mnist": ("w1", "b1", "w2", "b2"),  # 784 -> hidden (ReLU) -> 10 logits, softmax cross-entropy
}


_CASES = {}


def cached_case(folder):
    """:func:`load_case`, read once per process (a Ray actor serves many clients: this module stays imported)."""
    if folder not in _CASES:
        _CASES[folder] = load_case(folder)
    return _CASES[folder]


def load_case(folder):
    with open(os.path.join(folder, "case.json")) as f:
        case = json.load(f)
    x = np.load(os.path.join(folder, "x.npy"), mmap_mode="r")
    y = np.load(os.path.join(folder, "y.npy"), mmap_mode="r")
    stored = np.load(os.path.join(folder, "params.npz"))
    params = [stored[f"p{i}"] for i in range(len(LAYOUTS[case["task"]]))]
    return case, x, y, params


def save_round1(out, arrays):
    os.makedirs(out, exist_ok=True)
    np.savez(os.path.join(out, "round1.npz"), **{f"p{i}": np.asarray(a) for i, a in enumerate(arrays)})


def report(peer, case, round_seconds, interface, resources, versions, **extra):
    """Print the runner's one JSON line: the seconds of every round (the first includes compilation / start of
    workers), the seconds from the process's start to its first round (imports, data, building), and what it
    ran with."""
    line = {
        "peer": peer,
        "task": case["task"],
        "clients": case["clients"],
        "cohort": case["cohort"],
        "rounds": len(round_seconds),
        "round_seconds": [float(s) for s in round_seconds],
        "interface": interface,
        "resources": resources,
        "versions": versions,
        **extra,
    }
    print("PEER-RESULT " + json.dumps(line), flush=True)
    sys.stdout.flush()
