"""Werner et al. Fig. 1: the constructed examples on which Myopic-Clustering, IFCA, HypCluster and CFL fail,
and Federated-Clustering on each.

    python experiments/fig1_counterexamples.py --out results/fig1

writes ``fig1.json`` (per example and method: the final parameter of each client, plus the cluster labels
and for CFL the fraction of seeds on which clients 2 and 3 end in different clusters) and ``fig1.png``
(parameter trajectories). Hyperparameters (the paper gives none for Federated-Clustering here):
  * Fig. 1a: eta = 0.1 for both methods, x0 = 1.5; Myopic-Clustering with K = 2 (k-means); FC with a fixed
    radius tau = 1 / (2 eta) (any tau in [1/(3 eta), 2/(3 eta)) works; a quantile radius does not with N = 3).
  * Fig. 1b: cluster models initialised at -1.5 and 0 (the paper's), learning rate 0.1, IFCA Option II and
    HypCluster with 5 local steps; FC from x = 0 with radius 1 (the two gradients at 0 are +1 and -1).
  * Fig. 1c: minibatch of one (client 3 is stochastic), learning rate 0.1, CFL with one local step,
    eps1 = 0.02, eps2 = 0.025, splitting allowed after 20 rounds and up to K = 2 clusters (the example's K);
    FC with radius 0.3.
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust import make_algorithm, make_task
from fedjax_clust.cli.config_file import OptionParser, claim_experiment, experiment_args
from fedjax_clust.io.figures import figure_for_file
from fedjax_clust.io.jsonio import write_json
from fedjax_clust.io.provenance import provenance
from fedjax_clust.tasks import IFCA_INIT

OUTPUTS = ("fig1.json", "fig1.png", "config.toml")


def trajectory(algo, task, rounds, seed=0):
    """Per-round client parameters [rounds + 1, N] and the final state."""
    state = algo.init(task.init_params(None), task.num_clients)
    step = jax.jit(algo.round)
    key = jax.random.PRNGKey(seed)
    path = [np.asarray(state.client_params, np.float64)]
    for t in range(rounds):
        state, _ = step(state, task.data, jax.random.fold_in(key, t))
        path.append(np.asarray(state.client_params, np.float64))
    return np.stack(path), state


def run_myopic(rounds):
    task = make_task("counterexample-myopic", eta=0.1, x0=1.5)
    out = {}
    # plain gradient steps (momentum 0), as the paper's Fig. 1a analysis
    for name, kw in [
        ("myopic-clustering", dict(num_clusters=2, momentum=0.0)),
        ("federated-clustering", dict(radius=5.0, momentum=0.0)),
    ]:
        if name == "federated-clustering":
            kw["mesh"] = None
        algo = make_algorithm(name, task, learning_rate=0.1, **kw)
        path, state = trajectory(algo, task, rounds)
        entry = {"final": path[-1].tolist(), "path": path.tolist()}
        if name == "myopic-clustering":
            grads = jax.vmap(jax.grad(lambda x, ex: task.example_loss(x, {"kind": ex[0]})))(
                jnp.asarray(path[-1], jnp.float32), task.data["kind"]
            )
            entry["final_gradients"] = np.asarray(grads).tolist()
            _, metrics = jax.jit(algo.round)(state, task.data, jax.random.PRNGKey(rounds))
            entry["final_labels"] = np.asarray(metrics["cluster_labels"]).tolist()
        out[name] = entry
    return out


def run_ifca(rounds):
    task = make_task("counterexample-ifca")
    init = jnp.asarray(IFCA_INIT, jnp.float32)
    out = {}
    for name in ["ifca-1", "ifca-2", "hypcluster", "federated-clustering"]:
        kw = (
            dict(radius=1.0, mesh=None, momentum=0.0)
            if name == "federated-clustering"
            else dict(init_cluster_params=init)
        )
        algo = make_algorithm(name, task, learning_rate=0.1, **kw)
        path, state = trajectory(algo, task, rounds)
        entry = {"final": path[-1].tolist(), "path": path.tolist()}
        if name != "federated-clustering":
            entry["final_labels"] = np.asarray(state.rows["labels"]).tolist()
            entry["final_cluster_models"] = np.asarray(state.extra["centers"]).tolist()
        out[name] = entry
    return out


def run_cfl(rounds, seeds):
    task = make_task("counterexample-cfl")
    out = {}
    cfl = make_algorithm(
        "cfl", task, learning_rate=0.1, batch_size=1, eps1=0.02, eps2=0.025, min_rounds=20, max_clusters=2
    )
    separated, finals, labels, paths = 0, [], [], []
    for seed in range(seeds):
        path, state = trajectory(cfl, task, rounds, seed)
        lab = np.asarray(state.rows["labels"])
        separated += int(lab[1] != lab[2])
        finals.append(path[-1].tolist())
        labels.append(lab.tolist())
        if seed < 4:
            paths.append(path.tolist())
    out["cfl"] = {
        "final": finals[0],
        "final_per_seed": finals,
        "labels_per_seed": labels,
        "fraction_2_3_separated": separated / seeds,
        "seeds": seeds,
        "path": paths[0],
        "paths": paths,
    }
    fc = make_algorithm(
        "federated-clustering", task, learning_rate=0.1, batch_size=1, radius=0.3, mesh=None, momentum=0.0
    )
    path, _ = trajectory(fc, task, rounds)
    out["federated-clustering"] = {"final": path[-1].tolist(), "path": path.tolist()}
    return out


def plot(results, path):
    """One panel per example: each client's parameter x_i against the round, a colour per client and a line style
    per method (methods whose paths coincide, e.g. IFCA-1 / IFCA-2 / HypCluster in Fig. 1b, stay visible as
    interleaved dashes, and the legend says which coincide)."""
    from matplotlib.lines import Line2D

    titles = {"myopic": "Fig. 1a (Myopic)", "ifca": "Fig. 1b (IFCA / HypCluster)", "cfl": "Fig. 1c (CFL)"}
    styles = ["-", (0, (6, 3)), (3, (2, 4)), (0, (1, 2)), (0, (6, 2, 1, 2))]
    widths = [2.6, 2.0, 1.6, 1.3, 1.1]
    fig, axes = figure_for_file(1, 3, figsize=(15, 4.2))
    for ax, (example, methods) in zip(axes, results.items()):
        names = list(methods)
        paths = {m: np.asarray(methods[m]["path"]) for m in names}
        handles = []
        for k, method in enumerate(names):
            p = paths[method]
            for i in range(p.shape[1]):
                ax.plot(p[:, i], linestyle=styles[k % len(styles)], color=f"C{i}", linewidth=widths[k % len(widths)])
            same = [o for o in names if o != method and paths[o].shape == p.shape and np.allclose(paths[o], p)]
            label = method + (f" (= {', '.join(same)})" if same else "")
            handles.append(
                Line2D(
                    [],
                    [],
                    color="black",
                    linestyle=styles[k % len(styles)],
                    linewidth=widths[k % len(widths)],
                    label=label,
                )
            )
        clients = paths[names[0]].shape[1]
        handles += [Line2D([], [], color=f"C{i}", linewidth=2, label=f"client {i + 1}") for i in range(clients)]
        ax.set_title(titles[example])
        ax.set_xlabel("round")
        ax.set_ylabel("client parameter x_i")
        ax.grid(alpha=0.3)
        ax.legend(handles=handles, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    parser = OptionParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/fig1")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--cfl-seeds", type=int, default=40, help="seeds for the CFL separation frequency")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run in --out")
    args = experiment_args(parser, argv, "fig1_counterexamples.py")
    if args.rounds < 30 or args.cfl_seeds < 1:
        print("error: --rounds must be >= 30 (CFL splits after 20) and --cfl-seeds >= 1", file=sys.stderr)
        return 2
    try:  # a folder never mixes two runs of the experiment
        claim_experiment(args, OUTPUTS)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    results = {
        "myopic": run_myopic(args.rounds),
        "ifca": run_ifca(args.rounds),
        "cfl": run_cfl(args.rounds, args.cfl_seeds),
    }
    plot(results, os.path.join(args.out, "fig1.png"))
    slim = {
        ex: {m: {k: v for k, v in e.items() if k not in ("path", "paths")} for m, e in ms.items()}
        for ex, ms in results.items()
    }
    write_json(os.path.join(args.out, "fig1.json"), {**slim, "provenance": provenance()})
    for ex, ms in slim.items():
        for m, e in ms.items():
            extra = f"  separated(2,3)={e['fraction_2_3_separated']:.2f}" if "fraction_2_3_separated" in e else ""
            print(f"{ex:7s} {m:22s} final={np.round(e['final'], 3).tolist()}{extra}")
    print(f"wrote {os.path.join(args.out, 'fig1.json')} and {os.path.join(args.out, 'fig1.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
