"""Privacy against utility: epsilon spent against the final error, per algorithm, with and without attackers.

    python experiments/privacy_utility.py --out results/privacy
    python experiments/privacy_utility.py --task mnist-rotation --out results/privacy-mnist

For each attackers' share (``--byzantine-fraction``, attackers running ``--attack``) and each algorithm:

* Global (FedAvg with one local step), Ground-truth (the clustered oracle) and IFCA-1 with **central** DP
  (:mod:`fedjax_clust.algorithms.private`): clip ``--clip``, Poisson sampling ``--sampling``, and every noise
  multiplier of ``--noise`` as **one vmapped sweep** (``dp_noise`` traced: one compiled program per algorithm);
* Federated-Clustering with **local** DP (:mod:`fedjax_clust.privacy.local`, clip ``--local-clip``), the same
  noise multipliers swept the same way;
* Local without privacy: it shares nothing (epsilon 0), the reference every private method must beat to be
  worth its privacy cost.

Each private run's epsilon is at ``--delta`` after ``--rounds`` rounds by the default "rdp" accountant (its own
run folder logs it every evaluation). The error is the task's: mean ||x_i - x*_i||^2 on the synthetic task of
Werner et al. §4.1, test accuracy on MNIST rotation. Writes ``privacy.csv`` (one row per run), ``privacy.json``
(the rows, the settings, provenance), ``privacy.png`` (one panel per attackers' share: error against epsilon)
and each sweep's run folders under ``runs/``.
"""

from __future__ import annotations

import math
import os
import sys

from fedjax_clust.cli.config_file import OptionParser, claim_experiment, experiment_args
from fedjax_clust.io.csvio import write_csv
from fedjax_clust.io.figures import figure_for_file
from fedjax_clust.io.jsonio import write_json
from fedjax_clust.io.provenance import provenance
from fedjax_clust.run.driver_options import Evaluation, Output

OUTPUTS = ("privacy.csv", "privacy.json", "privacy.png", "runs", "config.toml")
CENTRAL = ("global", "ground-truth", "ifca-1")
LOCAL_DP = ("federated-clustering",)
METRICS = {
    "synthetic": ("mean_sq_dist_to_optimum", "mean ||x_i - x*_i||^2", "log"),
    "mnist-rotation": ("test_accuracy", "test accuracy", "linear"),
}
COLUMNS = (
    "task",
    "algorithm",
    "mode",
    "byzantine_fraction",
    "noise_multiplier",
    "clip",
    "sampling",
    "epsilon",
    "delta",
    "rounds",
    "metric",
    "value",
    "misclustering",
    "status",
)


def _floats(text: str) -> list:
    return [float(v) for v in text.split(",") if v.strip()]


def _task(args, seed: int, byzantine: float):
    import fedjax_clust as fc

    if args.task == "synthetic":
        task = fc.synthetic_regression(clients_per_cluster=args.clients_per_cluster, seed=seed)
    else:
        task = fc.make_task(
            "mnist-rotation", model="mlp", clients_per_cluster=args.clients_per_cluster, hidden=args.hidden, seed=seed
        )
    if byzantine > 0:
        task = fc.mark_byzantine(task, fraction=byzantine, seed=seed)
        if task.byzantine is None or not task.byzantine.any():  # rounding per cluster left none: not a grid point
            raise ValueError(
                f"--byzantine-fraction {byzantine:g} gives no attacker with {args.clients_per_cluster} clients per "
                "cluster (round(beta n) per cluster); raise one of them"
            )
    return task


def _row(args, name, mode, byzantine, noise, history_row, status, clip=None):
    metric = METRICS[args.task][0]
    return {
        "task": args.task,
        "algorithm": name,
        "mode": mode,
        "byzantine_fraction": byzantine,
        "noise_multiplier": noise,
        "clip": clip,
        "sampling": args.sampling if mode == "central" else None,
        "epsilon": history_row.get("epsilon", 0.0),
        "delta": history_row.get("delta"),
        "rounds": args.rounds,
        "metric": metric,
        "value": history_row.get(metric),
        "misclustering": history_row.get("misclustering"),
        "status": status,
    }


def run(args) -> list:
    from fedjax_clust.algorithms import make_algorithm
    from fedjax_clust.run.simulate import simulate
    from fedjax_clust.run.sweep import sweep

    rows = []
    noise = _floats(args.noise)
    for byzantine in _floats(args.byzantine_fraction):
        task = _task(args, args.seed, byzantine)
        attack = {"attack": args.attack} if byzantine > 0 else {}
        common = dict(learning_rate=args.lr, batch_size=args.batch_size, **attack)
        for name in args.algorithms.split(","):
            folder = os.path.join(args.out, "runs", f"byz{byzantine:g}", name)
            if name == "local":
                algo = make_algorithm("local", task, **common)
                result = simulate(
                    algo,
                    task,
                    rounds=args.rounds,
                    seed=args.seed,
                    evaluation=Evaluation(eval_every=args.rounds),
                    output=Output(progress=False, out_dir=folder),
                )
                rows.append(_row(args, name, "none", byzantine, None, result.history[-1], result.summary["status"]))
                continue
            if name in CENTRAL:
                options = dict(common, dp_clip=args.clip, dp_sampling=args.sampling, dp_delta=args.delta)
                mode, clip = "central", args.clip
            elif name in LOCAL_DP:
                options = dict(
                    common,
                    dp_mode="local",
                    dp_clip=args.local_clip,
                    dp_delta=args.delta,
                    quantile=args.quantile,
                    subgroups=args.subgroups,
                )
                mode, clip = "local", args.local_clip
            else:
                raise ValueError(f"--algorithms: {name!r} is neither private here nor local")
            result = sweep(
                name,
                task,
                grid={"dp_noise": noise},
                seeds=[args.seed],
                rounds=args.rounds,
                options=options,
                plot=False,
                evaluation=Evaluation(eval_every=args.rounds),
                output=Output(out_dir=folder, progress=False),
            )
            for z, one in zip(noise, result.runs):
                rows.append(_row(args, name, mode, byzantine, z, one.history[-1], one.summary["status"], clip))
            print(
                f"byzantine {byzantine:g} {name}: "
                + ", ".join(
                    f"z={r['noise_multiplier']:g} eps={r['epsilon']:.3g} {r['metric']}={r['value']}"
                    for r in rows[-len(noise) :]
                ),
                flush=True,
            )
    return rows


def plot(rows: list, args, path: str) -> None:
    metric, label, scale = METRICS[args.task]
    shares = sorted({r["byzantine_fraction"] for r in rows})
    fig, axes = figure_for_file(1, len(shares), figsize=(5.5 * len(shares), 4.2), squeeze=False)
    for ax, share in zip(axes[0], shares):
        mine = [r for r in rows if r["byzantine_fraction"] == share]
        for i, name in enumerate(dict.fromkeys(r["algorithm"] for r in mine)):
            points = [(r["epsilon"], r["value"]) for r in mine if r["algorithm"] == name and r["value"] is not None]
            if name == "local":
                for _, value in points:
                    ax.axhline(value, color="k", ls="--", lw=1, label="local (no sharing, eps = 0)")
                continue
            points = sorted(p for p in points if math.isfinite(p[0]) and math.isfinite(p[1]))
            mode = next(r["mode"] for r in mine if r["algorithm"] == name)
            if points:
                ax.plot(*zip(*points), "o-", color=f"C{i}", label=f"{name} ({mode} DP)")
        ax.set_xscale("log")
        ax.set_yscale(scale)
        ax.set_xlabel(f"epsilon at delta = {args.delta:g} after {args.rounds} rounds")
        ax.set_ylabel(label)
        ax.set_title(f"{args.task}, {share:g} Byzantine ({args.attack})" if share else f"{args.task}, no attackers")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    parser = OptionParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/privacy")
    parser.add_argument("--task", choices=tuple(METRICS), default="synthetic")
    parser.add_argument("--algorithms", default="global,ground-truth,ifca-1,federated-clustering,local")
    parser.add_argument("--noise", default="0.5,1,2,4,8", help="noise multipliers z (comma-separated)")
    parser.add_argument("--clip", type=float, default=100.0, help="central DP's clip bound C")
    parser.add_argument("--local-clip", type=float, default=100.0, help="local DP's per-message clip bound")
    parser.add_argument("--sampling", type=float, default=0.2, help="central DP's Poisson rate q")
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--quantile", type=float, default=0.2, help="Federated-Clustering's radius quantile")
    parser.add_argument("--subgroups", type=int, default=1, help="Federated-Clustering's random subgroups G")
    parser.add_argument("--byzantine-fraction", default="0,0.1", help="attackers' shares (comma-separated)")
    parser.add_argument(
        "--attack",
        default="sign-flip",
        help="what the attackers send (large-gradient is a no-op once clipped: honest gradients above the clip bound "
        "clip to the same vector)",
    )
    parser.add_argument("--clients-per-cluster", type=int, default=75)
    parser.add_argument("--hidden", type=int, default=32, help="mnist-rotation: the MLP's hidden width")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run in --out")
    args = experiment_args(parser, argv, "privacy_utility.py")
    try:
        if args.rounds < 1 or args.clients_per_cluster < 1:
            raise ValueError("--rounds and --clients-per-cluster must be >= 1")
        claim_experiment(args, OUTPUTS)
        rows = run(args)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    write_csv(os.path.join(args.out, "privacy.csv"), rows, COLUMNS)
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "overwrite", "config", "write_config")}
    write_json(
        os.path.join(args.out, "privacy.json"),
        {"settings": settings, "rows": rows, "provenance": provenance()},
        indent=1,
    )
    plot(rows, args, os.path.join(args.out, "privacy.png"))
    print(f"wrote {os.path.join(args.out, 'privacy.csv')}, privacy.json and privacy.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
