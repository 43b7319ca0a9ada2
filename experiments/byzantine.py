"""Byzantine robustness: thesis Fig. 2.6 and a sweep of every attack over the fraction of attackers.

    python experiments/byzantine.py --out results/byzantine                 # offline, every part
    python experiments/byzantine.py --out DIR --parts fig2.6 --honest-per-cluster 50 --dataset mnist
                                                                            # the thesis's sizes (full MNIST)

Parts (``--parts``, default all three):

* ``fig2.6`` (Werner's thesis §2.4, "Defense against Byzantine attacks", Fig. 2.6): the MNIST private-label
  task with 4 clusters of ``--honest-per-cluster`` honest clients, each cluster joined by as many Byzantine
  clients (the thesis: 50 + 50, i.e. beta = 0.5), under the large-gradient and the bit-flip attack. The
  thesis compares Federated-Clustering with Global (FedAvg) only; beside them, as our extension, FedAvg with
  every robust aggregator (``--fig-aggregators``). Honest test accuracy against rounds.
* ``synthetic`` and ``image``: every attack at beta in ``--betas`` (default 0, 0.1, ..., 0.5, the fraction
  of each true cluster that attacks) for every method of ``--methods``, on the synthetic regression task
  (final honest mean ||x - x*||^2) and on the offline private-label image task (final honest test
  accuracy; ``--image-methods``, fewer by default: an FC run there evaluates N^2 cross-gradients of an MLP).
  ``ball-edge`` targets Threshold-Clustering and runs for Federated-Clustering only;
  ``label-flip`` needs labels and runs on the image task only.

Methods are ``algorithm[:aggregator]`` (e.g. ``global:median``; Federated-Clustering as ``fc:qQ``, the
quantile radius rule with q = Q, 10 clustering steps). Choices the thesis leaves open: the radius of FC
(default q = 0.1: below the honest share of a client's cluster at every beta <= 0.5 of a 4-cluster task,
(1 - beta) / 4 >= 0.125, which is what Theorem 1 needs of the ball; q = 0.2 is in the sweep for
comparison), the attack magnitudes (large gradient x100, bit flip x-1; see
:mod:`fedjax_clust.robust.attacks`), learning rates (``--lr`` image, ``--synthetic-lr``; heavy-ball
momentum 0.9 on every method, batch 32 on the image task) and the offline sizes (mnist-5k, an MLP with
``--hidden`` units).

Writes ``DIR/byzantine.json``: ``fig2.6`` (attack -> method -> final accuracy and the curve) and
``sweep`` (task -> {"metric", "results": attack -> beta -> method -> final honest metric, "nonfinite":
the same shape with the fraction of honest clients whose model went non-finite, "programs": method -> the
compiled programs its sweep ran}); a run whose every honest model went non-finite has metric null. Each
method's runs are one sweep (``DIR/runs/TASK/METHOD/``: its ``sweep.json`` and a folder per run): which clients
attack is an argument of the compiled program, so its betas share one program per attack, and at beta = 0 an
all-honest mask stands in (every attack's run there is the same run, computed once). ``DIR/fig2_6.png`` and
``DIR/sweep.png`` (final honest metric
against beta, a panel per task and attack), every run's own folder under ``DIR/runs``, and prints the
tables.
"""

from __future__ import annotations

import os
import sys
import warnings

import numpy as np

from fedjax_clust import make_algorithm, simulate
from fedjax_clust.cli.config_file import OptionParser, claim_experiment, experiment_args, experiment_settings
from fedjax_clust.io.figures import figure_for_file
from fedjax_clust.io.jsonio import write_json
from fedjax_clust.io.provenance import provenance
from fedjax_clust.robust import AGGREGATORS, ATTACKS, NEEDS_BALL, mark_byzantine
from fedjax_clust.run.compare import plot_accuracy_panels
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.experiment_records import TaskGrid
from fedjax_clust.run.sweep import IdenticalRunsWarning, expand_grid, sweep
from fedjax_clust.tasks import make_task

PARTS = ("fig2.6", "synthetic", "image")
FIG_ATTACKS = ("large-gradient", "bit-flip")
SWEEP_ATTACKS = tuple(a for a in ATTACKS if a not in ("bit-flip", "inf", "neg-inf"))  # bit-flip = sign-flip
METHODS = (
    "fc:q0.1",
    "fc:q0.2",
    "local",
    "global",
    "global:median",
    "global:geometric-median",
    "global:krum",
    "global:centered-clipping",
    "ground-truth",
    "ground-truth:median",
)
IMAGE_METHODS = ("fc:q0.1", "local", "global", "global:median", "global:krum", "ground-truth", "ground-truth:median")
METRICS = {"synthetic": "mean_sq_dist_to_optimum", "image": "test_accuracy"}
OUTPUTS = ("byzantine.json", "fig2_6.png", "sweep.png", "runs", "config.toml")


def parse_method(spec: str):
    """(algorithm name, options) of a method spec ``algorithm[:aggregator]`` or ``fc:qQ``."""
    name, _, rest = spec.partition(":")
    if name == "fc":
        try:
            quantile = float(rest[1:]) if rest.startswith("q") else float("nan")
        except ValueError:
            quantile = float("nan")
        if not 0.0 < quantile <= 1.0:
            raise ValueError(f"method {spec!r}: Federated-Clustering is written fc:qQ with a quantile 0 < Q <= 1")
        return "federated-clustering", dict(quantile=quantile, clustering_steps=10)
    if name not in ("local", "global", "ground-truth", "ifca-1", "ifca-2", "hypcluster", "cfl", "ditto"):
        raise ValueError(f"unknown method {spec!r}")
    if rest and rest not in AGGREGATORS:
        raise ValueError(f"method {spec!r}: unknown aggregator {rest!r}; expected one of {list(AGGREGATORS)}")
    return name, ({"aggregator": rest} if rest else {})


def applies(attack: str, algorithm: str, task_key: str) -> bool:
    """Whether ``attack`` can be run against ``algorithm`` on this task."""
    if attack in NEEDS_BALL and algorithm != "federated-clustering":
        return False
    return not (attack == "label-flip" and task_key == "synthetic")


def final_metrics(method, task, attack, *, lr, batch_size, rounds, eval_every, seed, out_dir, metric):
    """(final honest metric or None, non-finite fraction of the honest clients, curve [(round, metric)])."""
    name, options = parse_method(method)
    algo = make_algorithm(name, task, learning_rate=lr, momentum=0.9, batch_size=batch_size, attack=attack, **options)
    history = simulate(
        algo,
        task,
        rounds=rounds,
        seed=seed,
        evaluation=Evaluation(eval_every=eval_every, on_nonfinite="warn"),
        output=Output(progress=False, out_dir=out_dir, overwrite=True),
    ).history
    last = history[-1]
    bad = float(last.get("nonfinite_clients", 0.0))
    value = None if bad >= 1.0 else last.get(metric)
    curve = [(row["round"], row.get(metric)) for row in history]
    return (None if value is None or not np.isfinite(value) else float(value)), bad, curve


def image_task(args, clients_per_cluster, seed):
    return make_task(
        "mnist-private-label",
        dataset=args.dataset,
        model="mlp",
        hidden=args.hidden,
        clients_per_cluster=clients_per_cluster,
        seed=seed,
    )


def run_fig(args, out, bar):
    """Thesis Fig. 2.6: attack -> method -> {"final_test_accuracy", "nonfinite", "curve"}."""
    task = mark_byzantine(
        image_task(args, 2 * args.honest_per_cluster, args.seed), per_cluster=args.honest_per_cluster, seed=args.seed
    )
    methods = [f"fc:q{args.fig_quantile:g}", "global"] + [f"global:{a}" for a in args.fig_aggregators]
    result = {}
    for attack in FIG_ATTACKS:
        result[attack] = {}
        for method in methods:
            value, bad, curve = final_metrics(
                method,
                task,
                attack,
                lr=args.lr,
                batch_size=32,
                rounds=args.rounds,
                eval_every=args.eval_every,
                seed=args.seed,
                metric="test_accuracy",
                out_dir=os.path.join(out, "runs", "fig2.6", attack, method),
            )
            result[attack][method] = {"final_test_accuracy": value, "nonfinite": bad, "curve": curve}
            bar.update()
    return result


def run_sweep(args, task_key, out, bar):
    """{"metric", "results", "nonfinite", "programs"} of one task (see the module docstring): one sweep
    (:func:`fedjax_clust.run.sweep.sweep`) per method over its attacks x ``--betas``. Which clients attack is an
    argument of the compiled program, so a method's betas share one program per attack; at beta = 0 an
    all-honest mask stands in for the attackers and every attack's run there is the one attack-free run,
    computed once (the sweep's ``same_as``)."""
    metric = METRICS[task_key]
    if task_key == "synthetic":
        clean = make_task("synthetic", clients_per_cluster=args.synthetic_clients_per_cluster, seed=args.seed)
        lr, batch_size, rounds = args.synthetic_lr, None, args.synthetic_rounds
    else:
        clean = image_task(args, args.image_clients_per_cluster, args.seed)
        lr, batch_size, rounds = args.lr, 32, args.image_rounds

    def attacked(seed, byzantine_fraction):  # the attackers are drawn from --seed, as the task's data
        return mark_byzantine(clean, fraction=byzantine_fraction, seed=args.seed, all_honest_mask=True)

    results, nonfinite, programs = {}, {}, {}
    for method in methods_of(args, task_key):
        name, options = parse_method(method)
        attacks = [a for a in args.attacks if applies(a, name, task_key)]
        if not attacks:
            continue
        with warnings.catch_warnings():  # beta = 0's runs are one run under every attack: by design here
            warnings.simplefilter("ignore", IdenticalRunsWarning)
            done = sweep(
                name,
                TaskGrid(attacked, {"byzantine_fraction": args.betas}),
                grid={"attack": attacks},
                seeds=[args.seed],
                rounds=rounds,
                plot=False,
                options=dict(learning_rate=lr, momentum=0.9, batch_size=batch_size, **options),
                evaluation=Evaluation(eval_every=rounds, on_nonfinite="warn"),
                output=Output(out_dir=os.path.join(out, "runs", task_key, method), overwrite=True, progress=False),
            )
        for (values, _), run in zip(
            expand_grid({"byzantine_fraction": args.betas, "attack": attacks}, [args.seed]), done.runs
        ):
            last = run.history[-1]
            bad = float(last.get("nonfinite_clients", 0.0))
            value = None if bad >= 1.0 else last.get(metric)
            value = None if value is None or not np.isfinite(value) else float(value)
            beta = f"{values['byzantine_fraction']:g}"
            results.setdefault(values["attack"], {}).setdefault(beta, {})[method] = value
            nonfinite.setdefault(values["attack"], {}).setdefault(beta, {})[method] = bad
        programs[method] = len(done.programs)
        bar.update(len(attacks) * sum(b > 0 for b in args.betas) + (0 in args.betas))
    return {
        "metric": metric,
        "results": _in_order(results, args),
        "nonfinite": _in_order(nonfinite, args),
        "programs": programs,
    }


def _in_order(table, args):
    """attack -> beta -> method in --attacks and --betas order (the sweeps fill it method by method)."""
    return {a: {f"{b:g}": table[a][f"{b:g}"] for b in args.betas} for a in args.attacks if a in table}


def methods_of(args, task_key):
    return args.methods if task_key == "synthetic" else args.image_methods


def count_runs(args) -> int:
    runs = 0
    if "fig2.6" in args.parts:
        runs += len(FIG_ATTACKS) * (2 + len(args.fig_aggregators))  # FC, FedAvg, FedAvg with each aggregator
    for task_key in ("synthetic", "image"):
        if task_key in args.parts:
            methods = methods_of(args, task_key)
            attacked = sum(applies(a, parse_method(m)[0], task_key) for a in args.attacks for m in methods)
            runs += attacked * sum(b > 0 for b in args.betas) + len(methods) * (0 in args.betas)
    return runs


def sweep_text(task_key, sweep) -> str:
    metric = sweep["metric"]
    lines = [f"{task_key}: final honest {metric} (div. = every honest model non-finite)"]
    for attack, per_beta in sweep["results"].items():
        methods = list(dict.fromkeys(m for row in per_beta.values() for m in row))
        lines.append(f"  {attack:16s}" + "".join(f"{m:>22s}" for m in methods))
        for beta, row in per_beta.items():
            cells = ["div." if row[m] is None else f"{row[m]:.4g}" for m in methods]
            lines.append(f"    beta={beta:<9s}" + "".join(f"{c:>22s}" for c in cells))
    return "\n".join(lines)


def plot_sweep(sweeps, path, columns=4):
    """Final honest metric against beta: one panel per task and attack, ``columns`` panels a row."""

    panels = [
        (task_key, attack, per_beta)
        for task_key, sweep in sweeps.items()
        for attack, per_beta in sweep["results"].items()
    ]
    columns = min(columns, len(panels))  # no empty columns when there are fewer panels than columns
    rows = -(-len(panels) // columns)
    fig, axes = figure_for_file(rows, columns, figsize=(4.0 * columns, 3.2 * rows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.axis("off")
    for ax, (task_key, attack, per_beta) in zip(axes.flat, panels):
        methods = list(dict.fromkeys(m for row in per_beta.values() for m in row))
        betas = [float(b) for b in per_beta]
        for method in methods:
            ys = [per_beta[b].get(method) for b in per_beta]
            ys = [np.nan if y is None else (100 * y if task_key == "image" else y) for y in ys]
            ax.plot(betas, ys, marker="o", markersize=3, linewidth=1.2, label=method)
        if task_key == "synthetic":
            ax.set_yscale("log")
        ax.set(
            title=f"{task_key}: {attack}",
            xlabel="beta (fraction of clients that attack)",
            ylabel="test accuracy (%)" if task_key == "image" else "||x - x*||^2",
        )
        ax.grid(alpha=0.3)
    handles, labels = max((ax.get_legend_handles_labels() for ax in axes.flat), key=lambda hl: len(hl[1]))
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=9)
    fig.tight_layout(rect=(0, 0.06 + 0.02 * (len(labels) > 5), 1, 1))
    fig.savefig(path, dpi=110)


def main(argv=None):
    parser = OptionParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {list(PARTS)}")
    parser.add_argument("--dataset", default="mnist-5k", help="image source (default mnist-5k, offline)")
    parser.add_argument("--hidden", type=int, default=64, help="hidden units of the MLP (default 64)")
    parser.add_argument("--lr", type=float, default=0.03, help="learning rate on the image task (default 0.03)")
    parser.add_argument(
        "--honest-per-cluster",
        type=int,
        default=10,
        help="fig2.6: honest clients per cluster, each joined by as many attackers (thesis: 50)",
    )
    parser.add_argument("--fig-quantile", type=float, default=0.1, help="fig2.6: FC's quantile q (default 0.1)")
    parser.add_argument(
        "--fig-aggregators",
        default=",".join(a for a in AGGREGATORS if a != "mean"),
        help="fig2.6: the robust aggregators FedAvg runs with beside FC and plain FedAvg "
        "(comma-separated; default every one; 'none' for none)",
    )
    parser.add_argument("--rounds", type=int, default=150, help="fig2.6 rounds (default 150)")
    parser.add_argument("--eval-every", type=int, default=10, help="fig2.6 evaluation period (default 10)")
    parser.add_argument("--betas", default="0,0.1,0.2,0.3,0.4,0.5", help="attacker fractions of the sweep")
    parser.add_argument("--attacks", default=",".join(SWEEP_ATTACKS), help="attacks of the sweep")
    parser.add_argument(
        "--methods", default=",".join(METHODS), help="methods of the synthetic sweep (algorithm[:aggregator] or fc:qQ)"
    )
    parser.add_argument(
        "--image-methods",
        default=",".join(IMAGE_METHODS),
        help="methods of the image sweep (default: fewer than the synthetic one, as image runs cost more)",
    )
    parser.add_argument("--synthetic-clients-per-cluster", type=int, default=25)
    parser.add_argument("--synthetic-rounds", type=int, default=150)
    parser.add_argument("--synthetic-lr", type=float, default=0.01)
    parser.add_argument("--image-clients-per-cluster", type=int, default=10)
    parser.add_argument("--image-rounds", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run in --out")
    parser.add_argument("--no-progress", action="store_true")
    args = experiment_args(parser, argv, "byzantine.py")

    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    args.attacks = [a.strip() for a in args.attacks.split(",") if a.strip()]
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    args.image_methods = [m.strip() for m in args.image_methods.split(",") if m.strip()]
    args.fig_aggregators = (
        []
        if args.fig_aggregators.strip() == "none"
        else [a.strip() for a in args.fig_aggregators.split(",") if a.strip()]
    )
    bad = (
        [p for p in args.parts if p not in PARTS]
        + [a for a in args.attacks if a not in ATTACKS]
        + [a for a in args.fig_aggregators if a not in AGGREGATORS or a == "mean"]
    )
    if bad or not args.parts:
        parser.error(
            f"unknown or missing part/attack/aggregator {bad}; parts: {list(PARTS)}, attacks: "
            f"{list(ATTACKS)}, --fig-aggregators: {[a for a in AGGREGATORS if a != 'mean']}"
        )
    try:
        for method in args.methods + args.image_methods:
            parse_method(method)
        args.betas = sorted({float(b) for b in args.betas.split(",")})
    except ValueError as error:
        parser.error(str(error))
    if not args.methods or not args.image_methods or not args.attacks or not all(0.0 <= b < 1.0 for b in args.betas):
        parser.error("give at least one method and attack, and fractions beta in [0, 1)")
    if args.honest_per_cluster < 1:
        parser.error("--honest-per-cluster must be >= 1")
    try:  # a folder never mixes two runs of the experiment
        claim_experiment(args, OUTPUTS)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    from tqdm.auto import tqdm

    settings = experiment_settings(args)
    output = {"provenance": provenance(), "settings": settings}
    with tqdm(total=count_runs(args), desc="byzantine runs", disable=args.no_progress, dynamic_ncols=True) as bar:
        if "fig2.6" in args.parts:
            output["fig2.6"] = run_fig(args, args.out, bar)
            write_json(os.path.join(args.out, "byzantine.json"), output)
            panels = {
                f"{attack} (beta = 0.5)": {
                    m: [(r, a) for r, a in v["curve"] if a is not None] for m, v in per_method.items()
                }
                for attack, per_method in output["fig2.6"].items()
            }
            plot_accuracy_panels(panels, os.path.join(args.out, "fig2_6.png"))
            for attack, per_method in output["fig2.6"].items():
                cells = ", ".join(
                    f"{m} " + ("div." if v["final_test_accuracy"] is None else f"{100 * v['final_test_accuracy']:.1f}%")
                    for m, v in per_method.items()
                )
                print(f"fig2.6 {attack}: {cells}", flush=True)
        sweeps = {}
        for task_key in ("synthetic", "image"):
            if task_key in args.parts:  # results and figure after each part: a stopped run keeps what it did
                sweeps[task_key] = run_sweep(args, task_key, args.out, bar)
                output["sweep"] = sweeps
                write_json(os.path.join(args.out, "byzantine.json"), output)
                plot_sweep(sweeps, os.path.join(args.out, "sweep.png"))
                print(sweep_text(task_key, sweeps[task_key]), flush=True)
    print(f"wrote {os.path.join(args.out, 'byzantine.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
