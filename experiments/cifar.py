"""Werner's thesis, chapter 2: Fig. 2.4 (CIFAR-10, private labels) and Fig. 2.5 (CIFAR-100, label groups).

    python experiments/cifar.py --out results/fig2.4 --figure 2.4     # GPU: VGG-16, 4 x 5 clients
    python experiments/cifar.py --out results/fig2.5 --figure 2.5     # GPU: VGG-8, 10 x 10 clients

Fig. 2.4: CIFAR-10 shuffled and split into 4 clusters x 5 clients, cluster k's labels mapped by
T_k(y) = (y + k) mod 10; VGG-16 (GroupNorm), batch 32, learning rate 0.1, momentum 0.9. Methods:
federated-clustering (20th-percentile radius, 10 clustering steps), ditto (lambda = 1), ifca-1 (true K),
global, local, ground-truth. Ablations of Federated-Clustering (the thesis does not list its values; our
grid): the radius percentile q in ``--quantiles`` (default 0.1, 0.2, 0.3, 0.5) and the number of local SGD
steps E before every clustered step in ``--local-steps`` (default 0, 1, 2, 4).
Fig. 2.5: CIFAR-100, 10 clusters x 10 clients, cluster k owning the 10 classes 10k..10k+9 (relabelled 0..9);
VGG-8; the same methods.

Both need tensorflow-datasets (``pip install "fedjax-clust[datasets]"``) and internet or a prepared
``--data-dir``; ``--dataset npz:PATH`` takes your own pooled images. ``--model``, ``--rounds``,
``--max-examples`` and ``--clients-per-cluster`` shrink a run to a CPU-sized smoke test.

Writes ``DIR/cifar.json`` (per method and per ablation value: final test accuracy and loss, and the
accuracy curve), ``DIR/methods.png`` and, for Fig. 2.4, ``DIR/ablations.png``; each run's folder under
``DIR/runs``.
"""

from __future__ import annotations

import os
import sys

from fedjax_clust import make_task, run_comparison
from fedjax_clust.cli.config_file import OptionParser, claim_experiment, experiment_args
from fedjax_clust.io.jsonio import write_json
from fedjax_clust.io.provenance import provenance
from fedjax_clust.run.compare import plot_accuracy_panels
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.experiment_records import Candidate

FIGURES = {
    "2.4": dict(task="cifar10-private-label", dataset="tfds:cifar10", model="vgg16", clients_per_cluster=5),
    "2.5": dict(task="cifar100-label-groups", dataset="tfds:cifar100", model="vgg8", clients_per_cluster=10),
}
METHODS = ("federated-clustering", "ditto", "ifca-1", "global", "local", "ground-truth")
OUTPUTS = ("cifar.json", "methods.png", "ablations.png", "runs", "config.toml")


def _floats(text, flag, parser):
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        parser.error(f"{flag} must be comma-separated numbers, got {text!r}")


def summarize(results):
    out = {}
    for name, result in results.items():
        rows = [r for r in result.history if r.get("test_accuracy") is not None]
        out[name] = {
            "status": result.summary["status"],
            "accuracy": result.summary.get("test_accuracy"),
            "loss": result.summary.get("test_loss"),
            "curve": [[r["round"], r["test_accuracy"]] for r in rows],
        }
    return out


def main(argv=None):
    parser = OptionParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--figure", choices=sorted(FIGURES), default="2.4")
    parser.add_argument("--dataset", default=None, help="image source (default tfds:cifar10 / tfds:cifar100)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default=None, help="default vgg16 (2.4) / vgg8 (2.5)")
    parser.add_argument("--clients-per-cluster", type=int, default=None)
    parser.add_argument("--max-examples", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--quantiles", default="0.1,0.2,0.3,0.5", help="FC radius percentiles (Fig. 2.4; '' skips)")
    parser.add_argument("--local-steps", default="0,1,2,4", help="FC local SGD steps (Fig. 2.4; '' skips)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--no-progress", action="store_true")
    args = experiment_args(parser, argv, "cifar.py")
    figure = FIGURES[args.figure]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        parser.error(f"--methods: unknown {unknown}; expected names from {list(METHODS)}")
    quantiles = _floats(args.quantiles, "--quantiles", parser) if args.figure == "2.4" else []
    local_steps = [int(v) for v in _floats(args.local_steps, "--local-steps", parser)] if args.figure == "2.4" else []

    try:  # a folder never mixes two runs of the experiment
        claim_experiment(args, OUTPUTS)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    task = make_task(
        figure["task"],
        dataset=args.dataset or figure["dataset"],
        model=args.model or figure["model"],
        clients_per_cluster=args.clients_per_cluster or figure["clients_per_cluster"],
        max_examples=args.max_examples,
        data_dir=args.data_dir,
        seed=args.seed,
    )
    print(
        f"{figure['task']}: {task.num_clients} clients, model {task.config['model']} "
        f"({task.config['num_params']:,} parameters)",
        flush=True,
    )
    fc_options = dict(quantile=0.2, clustering_steps=10)
    own = {"federated-clustering": fc_options, "ditto": dict(lam=1.0)}
    run = dict(
        rounds=args.rounds,
        seed=args.seed,
        options=dict(learning_rate=args.lr, momentum=args.momentum, batch_size=args.batch_size),
        evaluation=Evaluation(eval_every=args.eval_every, on_nonfinite="warn"),
    )

    def output(name):
        return Output(out_dir=os.path.join(args.out, "runs", name), overwrite=True, progress=not args.no_progress)

    report = {
        "provenance": provenance(),
        "task": figure["task"],
        "config": task.config,
        "lr": args.lr,
        "momentum": args.momentum,
        "batch_size": args.batch_size,
        "rounds": args.rounds,
    }
    results = run_comparison(
        task, [Candidate(m, options=own.get(m, {})) for m in methods], **run, output=output("methods")
    )
    report["methods"] = summarize(results)
    curves = lambda entries: {label: entry["curve"] for label, entry in entries.items()}
    plot_accuracy_panels(
        {f"{figure['task']}: methods": curves(report["methods"])}, os.path.join(args.out, "methods.png")
    )
    ablations = {}
    for q in quantiles:
        r = run_comparison(
            task,
            [Candidate("federated-clustering", options={"quantile": q, "clustering_steps": 10})],
            **run,
            output=output(f"quantile{q:g}"),
        )
        ablations.setdefault("quantile", {})[f"q={q:g}"] = summarize(r)["federated-clustering"]
    for e in local_steps:
        r = run_comparison(
            task,
            [Candidate("federated-clustering", options={**fc_options, "local_steps": e})],
            **run,
            output=output(f"local{e}"),
        )
        ablations.setdefault("local_steps", {})[f"E={e}"] = summarize(r)["federated-clustering"]
    report["ablations"] = ablations
    if ablations:
        plot_accuracy_panels(
            {
                "FC radius percentile": curves(ablations.get("quantile", {})),
                "FC local steps": curves(ablations.get("local_steps", {})),
            },
            os.path.join(args.out, "ablations.png"),
        )
    write_json(os.path.join(args.out, "cifar.json"), report)
    for name, entry in report["methods"].items():
        acc = entry["accuracy"]
        print(f"{name:22s} {'' if acc is None else f'{100 * acc:5.1f}%'}  {entry['status']}")
    for kind, values in ablations.items():
        print(kind, {k: None if v["accuracy"] is None else round(100 * v["accuracy"], 1) for k, v in values.items()})
    print(f"wrote {os.path.join(args.out, 'cifar.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
