"""Runs one experiment of the SR-FCA authors' code (github.com/harshv834/sr-fca, ``run.py``) in its own virtual
environment, offline, on the CPU, and prints its accuracies as one JSON line.

    python run_srfca.py CHECKOUT DATA OUT [--clients 20] [--seed 0] [--threads 1] [--set KEY=VALUE ...] \
        -- --dataset inv_mnist --clustering sr_fca        (their run.py's flags; --seed is ours, passed on)

``DATA`` holds ``MNIST/raw`` in torchvision's IDX layout (``mnist_idx.write_pool``). Nothing of theirs is copied or
edited. Their code reads ``configs/...`` and writes ``experiments/<dataset>/seed_<s>/...`` relative to the working
directory, so this process works in ``OUT/work`` with ``configs`` linked to the checkout's. Before their
``FLDataset`` is built, this process (our code):

* puts ``shims/`` (the minimal torchvision of ``run_prfl.py``) first on ``sys.path`` and adds, in memory, the
  torchvision names their modules import but inverted MNIST never calls: ``torchvision.models`` (``resnet18``,
  ``efficientnet_b7``, ``EfficientNet_B7_Weights``), ``torchvision.transforms.functional`` and
  ``datasets.CIFAR10``, each of which raises if used;
* registers an empty ``src.clustering.feddrift``: the published ``src/clustering/__init__.py`` imports it, but
  the file was deleted in their last commit, so ``import src.clustering`` fails as published;
* makes ``src.trainers.get_device`` return "cpu" (theirs raises without a GPU) and ``torch.nn.Module.cuda`` return
  the module unchanged (their ``compute_metric`` calls ``model.cuda()`` whenever a device is set);
* wraps ``read_data_config``: after theirs, ``num_clients`` becomes ``--clients`` (their yaml says 100; the
  5,000-image pool would leave 40 training images per client), the data path becomes ``DATA`` and the
  results path is made absolute (under ``OUT/work``; their ``--from_init`` builds a path assuming it is);
* wraps ``read_algo_config``: after theirs (their ``best_hp.yaml``), applies each ``--set a.b=value`` (yaml value);
* wraps ``SRFCA.refine`` to record, per REFINE step, the cluster map it trained on, each cluster model's metric
  history and the map after RECLUSTER + MERGE (theirs keeps only the last step's trainers).

Read back from their objects (nothing of theirs is re-implemented): ``final`` / ``test_acc``, the metrics their
``cluster()`` returns (what their run.py prints: "acc" is correct/total on each client's own test split, averaged
over clients by their ``avg_metrics``: weighted by cluster size for sr_fca, ifca and cfl, one weight per cluster for
oneshot_kmeans; sr_fca leaves out clients outside every kept cluster); ``per_cluster``, the cluster models behind
that number (for sr_fca: the last REFINE step's models, trained on the map before its final RECLUSTER + MERGE);
``cluster_map``, their final map (true cluster of client i: i % 2 for inv_mnist); test-accuracy histories
(``history_test_acc`` per round for fedavg / ifca, ``refine_steps`` for sr_fca); ``local_init`` (sr_fca's INIT
local models) or ``local`` (oneshot_kmeans' local models), the Local baseline; ``config``, their merged config.
"""

import argparse
import json
import os
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
MARK = "AUTHORS-RESULT "


def _unused(name):
    def fail(*args, **kwargs):
        raise RuntimeError(f"{name} is a stand-in of run_srfca.py: not available offline")

    return fail


def _stub_torchvision():
    import torchvision
    import torchvision.datasets
    import torchvision.transforms

    models = types.ModuleType("torchvision.models")
    for name in ("resnet18", "efficientnet_b7", "EfficientNet_B7_Weights"):
        setattr(models, name, _unused("torchvision.models." + name))
    functional = types.ModuleType("torchvision.transforms.functional")
    functional.rotate = _unused("torchvision.transforms.functional.rotate")
    torchvision.models = sys.modules["torchvision.models"] = models
    torchvision.transforms.functional = sys.modules["torchvision.transforms.functional"] = functional
    torchvision.datasets.CIFAR10 = _unused("torchvision.datasets.CIFAR10")


def _set(config, dotted, value):
    import yaml

    keys = dotted.split(".")
    for key in keys[:-1]:
        config = config.setdefault(key, {})
    config[keys[-1]] = yaml.safe_load(value)


def _last(history):
    return history[max(history)] if history else None


def _acc(history):
    """{evaluation: test accuracy} of one of their metric histories ({key: {"train": .., "test": ..}})."""
    return {k: v["test"]["acc"] for k, v in history.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("code", help="the sr-fca checkout (holds run.py, src/, configs/)")
    parser.add_argument("data", help="a folder holding MNIST/raw")
    parser.add_argument("out")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ours, theirs = parser.parse_known_args()
    theirs = [a for a in theirs if a != "--"]
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(ours.threads)
    code, data, out = (os.path.abspath(p) for p in (ours.code, ours.data, ours.out))
    work = os.path.join(out, "work")
    os.makedirs(work, exist_ok=True)
    if not os.path.lexists(os.path.join(work, "configs")):
        os.symlink(os.path.join(code, "configs"), os.path.join(work, "configs"))
    os.chdir(work)
    sys.path[:0] = [os.path.join(HERE, "shims"), code]

    import torch

    torch.set_num_threads(ours.threads)
    torch.nn.Module.cuda = lambda self, device=None: self
    _stub_torchvision()
    feddrift = types.ModuleType("src.clustering.feddrift")
    feddrift.FedDrift = _unused("FedDrift")
    sys.modules["src.clustering.feddrift"] = feddrift

    import src.clustering.base as their_base
    import src.datasets.base as their_datasets
    import src.trainers as their_trainers
    from src.clustering import CLUSTERING_DICT
    from src.clustering.sr_fca import SRFCA
    from src.utils import args_getter

    their_trainers.get_device = lambda config, i, cluster=False: "cpu"
    read_data, read_algo = their_datasets.read_data_config, their_base.read_algo_config

    def read_data_config(args_dict):
        config = read_data(args_dict)
        config["num_clients"] = ours.clients
        config["path"]["data"] = data
        config["path"]["results"] = os.path.abspath(config["path"]["results"])
        return config

    def read_algo_config(data_config, tune=False):
        config = read_algo(data_config, tune)
        for item in ours.set:
            key, value = item.split("=", 1)
            _set(config, key, value)
        return config

    their_datasets.read_data_config = read_data_config
    their_base.read_algo_config = read_algo_config

    steps, refine = [], SRFCA.refine

    def recorded_refine(self, experiment, refine_step):
        trained_on = {k: list(map(int, v)) for k, v in self.cluster_map.items()}
        refine(self, experiment, refine_step)
        steps.append(
            {
                "step": refine_step,
                "trained_on": trained_on,
                "clusters": {
                    k: {"clients": list(map(int, t.client_idx)), "test_acc": _acc(t.metrics)}
                    for k, t in self.cluster_trainers.items()
                },
                "metrics": self.refine_metrics[refine_step],
                "after_merge": {k: list(map(int, v)) for k, v in self.cluster_map.items()},
            }
        )

    SRFCA.refine = recorded_refine

    sys.argv = ["run.py"] + theirs + ["--seed", str(ours.seed)]
    tic = time.perf_counter()
    args = args_getter()
    args["time"] = {"t0": time.time()}
    fldataset = their_datasets.FLDataset(args)
    clustering = CLUSTERING_DICT[args["clustering"]](fldataset.config, tune=False)
    metrics = clustering.cluster(fldataset)
    seconds = time.perf_counter() - tic

    config = clustering.config
    result = {
        "clustering": config["clustering"],
        "seed": ours.seed,
        "num_clients": config["num_clients"],
        "train_sizes": sorted({c.train_size for c in fldataset.client_dict.values()}),
        "test_sizes": sorted({c.test_size for c in fldataset.client_dict.values()}),
        "final": metrics,
        "test_acc": metrics["test"]["acc"],
    }
    cluster_map = getattr(clustering, "cluster_map", None)
    if cluster_map:
        result["cluster_map"] = {int(k): sorted(map(int, v)) for k, v in cluster_map.items()}
    trainers = getattr(clustering, "cluster_trainers", {})
    per_cluster = {}
    for k, t in trainers.items():
        last = _last(getattr(t, "metrics", {}))
        if last is None:  # oneshot_kmeans evaluates its KMeans centres without keeping per-cluster metrics
            last = t.compute_metrics(fldataset.client_dict)
        per_cluster[int(k)] = {"clients": sorted(map(int, t.client_idx)), "test_acc": last["test"]["acc"]}
    if per_cluster:
        result["per_cluster"] = per_cluster
    if isinstance(clustering, SRFCA):
        result["local_init"] = clustering.init_metrics
        result["refine_steps"] = steps
        result["clients_in_final_metric"] = sum(len(v) for v in steps[-1]["trained_on"].values())
    elif args["clustering"] == "fedavg":
        result["history_test_acc"] = _acc(clustering.fedavg_trainer.metrics)
    elif hasattr(clustering, "round_metrics"):
        result["history_test_acc"] = _acc(clustering.round_metrics)
    if hasattr(clustering, "local_metrics"):
        result["local"] = clustering.local_metrics
    result["config"] = {k: v for k, v in config.items() if k != "time"}
    result.update(
        seconds=seconds,
        torch=torch.__version__,
        argv=sys.argv[1:],
        overrides=ours.set,
        clients_override=ours.clients,
        threads=ours.threads,
        results_dir=config["path"]["results"],
    )
    print(MARK + json.dumps(result, default=float), flush=True)


if __name__ == "__main__":
    main()
