"""Adaptive against fixed clipping at the same epsilon: does following the median norm save tuning the clip?

    python experiments/adaptive_clipping.py --out results/adaptive-clipping

Andrew et al. 2021 (Differentially Private Learning with Adaptive Clipping) report that DP-FedAvg whose clip
bound follows the median of the update norms does about as well as the best fixed bound, without a search over
bounds. This runs that comparison, with central DP (:mod:`fedjax_clust.algorithms.private`) at one target
``--epsilon`` (at ``--delta`` after ``--rounds`` rounds, Poisson rate ``--sampling``) for every run, so every
point spends the same privacy:

* every fixed bound of ``--clips`` as **one vmapped sweep** per algorithm (``dp_clip`` traced), the noise
  multiplier calibrated to the target;
* adaptive clipping (:mod:`fedjax_clust.privacy.adaptive`) from ``--initial-clip`` towards the unclipped share
  ``--clip-quantile`` (learning rate ``--clip-lr``, count noise the paper's q N / 20), calibrated to the same
  target: its update noise rises to leave room for the released count.

For each algorithm of ``--algorithms`` (Global, IFCA-1, ... any centrally private one), with and without
``--byzantine-fraction`` attackers (``--attack``). Writes ``adaptive.csv`` (one row per run, with the bound the
adaptive run ends at), ``adaptive.json`` (rows, the adaptive bounds over the rounds, settings, provenance),
``adaptive.png`` (the task's error against the fixed bound, the adaptive run as a level line; and the adaptive
bound over the rounds) and the runs' folders under ``runs/``.
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

OUTPUTS = ("adaptive.csv", "adaptive.json", "adaptive.png", "runs", "config.toml")
METRICS = {
    "synthetic": ("mean_sq_dist_to_optimum", "mean ||x_i - x*_i||^2", "log"),
    "mnist-rotation": ("test_accuracy", "test accuracy", "linear"),
}
COLUMNS = (
    "task",
    "algorithm",
    "byzantine_fraction",
    "clipping",
    "clip",
    "final_clip",
    "noise_multiplier",
    "epsilon",
    "delta",
    "rounds",
    "metric",
    "value",
    "status",
)


def _floats(text: str) -> list:
    return [float(v) for v in text.split(",") if v.strip()]


def _task(args, byzantine: float):
    import fedjax_clust as fc

    if args.task == "synthetic":
        task = fc.synthetic_regression(clients_per_cluster=args.clients_per_cluster, seed=args.seed)
    else:
        task = fc.make_task(
            "mnist-rotation",
            model="mlp",
            clients_per_cluster=args.clients_per_cluster,
            hidden=args.hidden,
            seed=args.seed,
        )
    if byzantine > 0:
        task = fc.mark_byzantine(task, fraction=byzantine, seed=args.seed)
        if task.byzantine is None or not task.byzantine.any():  # rounding per cluster left none: not a grid point
            raise ValueError(
                f"--byzantine-fraction {byzantine:g} gives no attacker with {args.clients_per_cluster} "
                "clients per cluster (round(beta n) per cluster); raise one of them"
            )
    return task


def _row(args, name, byzantine, clipping, clip, result, final_clip=None):
    metric = METRICS[args.task][0]
    last = result.history[-1]
    return {
        "task": args.task,
        "algorithm": name,
        "byzantine_fraction": byzantine,
        "clipping": clipping,
        "clip": clip,
        "final_clip": final_clip,
        "noise_multiplier": result.summary["hparams"]["privacy"]["noise_multiplier"],
        "epsilon": last.get("epsilon"),
        "delta": last.get("delta"),
        "rounds": args.rounds,
        "metric": metric,
        "value": last.get(metric),
        "status": result.summary["status"],
    }


def run(args) -> tuple:
    """(rows, {run label: [(round, bound), ...]} of the adaptive runs)."""
    from fedjax_clust.algorithms import make_algorithm
    from fedjax_clust.privacy import adaptive_clipping, central_privacy
    from fedjax_clust.run.simulate import simulate
    from fedjax_clust.run.sweep import sweep

    rows, bounds = [], {}
    clips = _floats(args.clips)
    privacy = dict(dp_epsilon=args.epsilon, dp_rounds=args.rounds, dp_delta=args.delta, dp_sampling=args.sampling)
    for byzantine in _floats(args.byzantine_fraction):
        task = _task(args, byzantine)
        attack = {"attack": args.attack} if byzantine > 0 else {}
        common = dict(learning_rate=args.lr, batch_size=args.batch_size, **attack, **privacy)
        for name in args.algorithms.split(","):
            folder = os.path.join(args.out, "runs", f"byz{byzantine:g}", name)
            result = sweep(
                name,
                task,
                grid={"dp_clip": clips},
                seeds=[args.seed],
                rounds=args.rounds,
                options=common,
                plot=False,
                evaluation=Evaluation(eval_every=args.rounds),
                output=Output(out_dir=os.path.join(folder, "fixed"), progress=False),
            )
            for clip, one in zip(clips, result.runs):
                rows.append(_row(args, name, byzantine, "fixed", clip, one))
            private = central_privacy(
                clip=args.initial_clip,
                adaptive=adaptive_clipping(args.clip_quantile, lr=args.clip_lr),
                target_epsilon=args.epsilon,
                rounds=args.rounds,
                delta=args.delta,
                sampling=args.sampling,
            )
            plain = {k: v for k, v in common.items() if not k.startswith("dp_")}
            algo = make_algorithm(name, task, privacy=private, **plain)
            every = max(1, args.rounds // 30)
            adaptive = simulate(
                algo,
                task,
                rounds=args.rounds,
                seed=args.seed,
                evaluation=Evaluation(eval_every=every),
                output=Output(progress=False, out_dir=os.path.join(folder, "adaptive")),
            )
            trace = [(0, args.initial_clip)] + [(r["round"], r["dp_clip"]) for r in adaptive.history if "dp_clip" in r]
            bounds[f"{name}, {byzantine:g} Byzantine"] = trace
            rows.append(_row(args, name, byzantine, "adaptive", args.initial_clip, adaptive, trace[-1][1]))
            mine = rows[-len(clips) - 1 :]
            print(
                f"byzantine {byzantine:g} {name}: "
                + ", ".join(f"{r['clipping']} C={r['clip']:g} {r['metric']}={r['value']}" for r in mine)
                + f"; adaptive ends at C={trace[-1][1]:.4g}",
                flush=True,
            )
    return rows, bounds


def plot(rows: list, bounds: dict, args, path: str) -> None:
    metric, label, scale = METRICS[args.task]
    shares = sorted({r["byzantine_fraction"] for r in rows})
    fig, axes = figure_for_file(1, len(shares) + 1, figsize=(5.2 * (len(shares) + 1), 4.2), squeeze=False)
    for ax, share in zip(axes[0], shares):
        mine = [r for r in rows if r["byzantine_fraction"] == share]
        for i, name in enumerate(dict.fromkeys(r["algorithm"] for r in mine)):
            fixed = sorted(
                (r["clip"], r["value"])
                for r in mine
                if r["algorithm"] == name
                and r["clipping"] == "fixed"
                and r["value"] is not None
                and math.isfinite(r["value"])
            )
            if fixed:
                ax.plot(*zip(*fixed), "o-", color=f"C{i}", label=f"{name}, fixed bound")
            for r in mine:
                if r["algorithm"] == name and r["clipping"] == "adaptive" and r["value"] is not None:
                    ax.axhline(
                        r["value"],
                        color=f"C{i}",
                        ls="--",
                        label=f"{name}, adaptive (ends at C = {r['final_clip']:.3g})",
                    )
        ax.set_xscale("log")
        ax.set_yscale(scale)
        ax.set_xlabel("fixed clip bound C")
        ax.set_ylabel(f"{label} after {args.rounds} rounds")
        ax.set_title(
            f"{args.task}, epsilon = {args.epsilon:g}, "
            + (f"{share:g} Byzantine ({args.attack})" if share else "no attackers")
        )
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    ax = axes[0][-1]
    for label, trace in bounds.items():
        ax.plot(*zip(*trace), label=label)
    ax.set_yscale("log")
    ax.set_xlabel("round")
    ax.set_ylabel("adaptive clip bound C_t")
    ax.set_title(f"the bound towards the {args.clip_quantile:g} quantile of the norms")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    parser = OptionParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/adaptive-clipping")
    parser.add_argument("--task", choices=tuple(METRICS), default="synthetic")
    parser.add_argument("--algorithms", default="global,ifca-1")
    parser.add_argument("--clips", default="1,10,100,1000,10000", help="fixed clip bounds (comma-separated)")
    parser.add_argument("--initial-clip", type=float, default=1.0, help="the adaptive bound's start C_0")
    parser.add_argument("--clip-quantile", type=float, default=0.5, help="the adaptive bound's target quantile")
    parser.add_argument("--clip-lr", type=float, default=0.2, help="the adaptive bound's geometric rate")
    parser.add_argument("--epsilon", type=float, default=8.0, help="the target epsilon of every run")
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--sampling", type=float, default=0.2, help="the Poisson rate q")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--byzantine-fraction", default="0,0.1", help="attackers' shares (comma-separated)")
    parser.add_argument("--attack", default="sign-flip")
    parser.add_argument("--clients-per-cluster", type=int, default=75)
    parser.add_argument("--hidden", type=int, default=32, help="mnist-rotation: the MLP's hidden width")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run in --out")
    args = experiment_args(parser, argv, "adaptive_clipping.py")
    try:
        if args.rounds < 1 or args.clients_per_cluster < 1:
            raise ValueError("--rounds and --clients-per-cluster must be >= 1")
        claim_experiment(args, OUTPUTS)
        rows, bounds = run(args)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    write_csv(os.path.join(args.out, "adaptive.csv"), rows, COLUMNS)
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "overwrite", "config", "write_config")}
    write_json(
        os.path.join(args.out, "adaptive.json"),
        {"settings": settings, "rows": rows, "bounds": bounds, "provenance": provenance()},
        indent=1,
    )
    plot(rows, bounds, args, os.path.join(args.out, "adaptive.png"))
    print(f"wrote {os.path.join(args.out, 'adaptive.csv')}, adaptive.json and adaptive.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
