"""Runs one experiment of the Werner et al. authors' MNIST scripts (github.com/liehe/PRFL, folder ``mnist/``) in
their own virtual environment, offline, on the CPU, and prints its per-epoch test accuracies as one JSON line.

    python run_prfl.py CHECKOUT/mnist DATA OUT -- --lr 0.1 -n 20 --K 4 ... (their launcher's flags)

``DATA`` holds ``MNIST/raw`` in torchvision's IDX layout (written by ``experiments/authors_table1.py``). Nothing of
theirs is copied or edited; before their ``launcher.initialize_experiment()`` runs, this process (our code):

* puts ``shims/`` first on ``sys.path``: a minimal ``torchvision`` (IDX reader and the four transforms they use);
* stubs ``faiss`` (imported by their kNN-Per datastore, which Table 1's other methods never call);
* points ``launcher.DATA_DIR`` at ``DATA`` and the logs at ``OUT``;
* replaces ``implementations.fedavg.verify_assumption_hook`` by a no-op: as published it raises unless the run's
  identifier is "verify_assumption", so their Global stops after its first batch;
* with ``--fixed-clients``, makes ``sampler.DistributedSampler.set_epoch`` a no-op: each client keeps the images
  of epoch 0 instead of drawing a fresh share of the whole pool every epoch (the one change this harness tests).

Their ``stats`` log (one Python dict per line) is read back: every "Global Validation" entry (epoch, top1 %, loss).
"""

import argparse
import ast
import glob
import json
import os
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
MARK = "AUTHORS-RESULT "


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("code", help="the checkout's mnist/ folder")
    parser.add_argument("data", help="a folder holding MNIST/raw")
    parser.add_argument("out")
    parser.add_argument("--fixed-clients", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    ours, theirs = parser.parse_known_args()
    theirs = [a for a in theirs if a != "--"]
    sys.path[:0] = [os.path.join(HERE, "shims"), os.path.abspath(ours.code)]
    sys.modules.setdefault("faiss", types.ModuleType("faiss"))
    import torch

    torch.set_num_threads(ours.threads)
    import implementations.fedavg as their_fedavg
    import launcher
    import sampler

    their_fedavg.verify_assumption_hook = lambda *args, **kwargs: None
    if ours.fixed_clients:
        sampler.DistributedSampler.set_epoch = lambda self, epoch: None
    launcher.DATA_DIR = os.path.abspath(ours.data) + "/"
    launcher.LOG_DIR_PATTERN = os.path.abspath(ours.out) + "/{script}/{exp_id}/" + launcher.EXP_SPEC + "/"
    sys.argv = ["launcher.py"] + theirs
    tic = time.perf_counter()
    launcher.initialize_experiment()
    seconds = time.perf_counter() - tic
    stats = glob.glob(os.path.join(ours.out, "**", "stats"), recursive=True)
    if len(stats) != 1:
        raise SystemExit(f"expected one stats log under {ours.out}, found {stats}")
    epochs = []
    with open(stats[0]) as f:
        for line in f:
            entry = ast.literal_eval(line.strip())
            if entry.get("_meta", {}).get("type") == "Global Validation":
                epochs.append({"epoch": entry["E"], "top1": entry["top1"], "loss": entry["Loss"]})
    print(
        MARK
        + json.dumps(
            {
                "epochs": epochs,
                "seconds": seconds,
                "torch": torch.__version__,
                "fixed_clients": ours.fixed_clients,
                "argv": theirs,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
