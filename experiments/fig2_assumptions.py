"""Werner et al. Fig. 2: the constants of Assumptions 4 and 5 estimated along a ground-truth run.

    python experiments/fig2_assumptions.py --out results/fig2

On the §4.1 synthetic task, Ground-truth training is run and at every evaluated round, at each client's
model x_i (full local data, so exact gradients):
  * eq. (7), intra-cluster variance ratio:  ||grad f_i(x_i) - grad fbar_i(x_i)||^2 / ||grad fbar_i(x_i)||^2,
    fbar_i the mean loss of i's cluster; its upper bound over clients and rounds estimates A^2;
  * eq. (8) with D = 0, inter-cluster separation:  min_{j not in cluster(i)} ||grad f_i(x_i) - grad f_j(x_i)||^2;
    its lower bound estimates Delta^2.
Writes ``fig2.json`` (per round: max / median of (7) over clients, min / median of (8)) and ``fig2.png``
(per-client values with the empirical bounds drawn).
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust import make_algorithm, synthetic_regression
from fedjax_clust.cli.config_file import OptionParser, claim_experiment, experiment_args
from fedjax_clust.core.batching import client_loss
from fedjax_clust.io.figures import figure_for_file
from fedjax_clust.io.jsonio import write_json
from fedjax_clust.io.provenance import provenance

OUTPUTS = ("fig2.json", "fig2.png", "config.toml")


def assumption_statistics(task, params):
    """Per client: ratio (7) and separation (8), at each client's own model."""
    loss = client_loss(task.example_loss)
    labels = jnp.asarray(task.true_clusters)
    k = int(task.num_clusters)
    # g[i, j] = grad f_j(x_i): every client's full-data gradient at every client's model
    g = jax.vmap(lambda p: jax.vmap(jax.grad(loss), (None, 0))(p, task.data))(params)
    onehot = jax.nn.one_hot(labels, k)
    cluster_mean = jnp.einsum("ijd,jk->ikd", g, onehot) / onehot.sum(0)[None, :, None]  # [i, k, d]
    own = g[jnp.arange(g.shape[0]), jnp.arange(g.shape[0])]
    own_cluster_mean = cluster_mean[jnp.arange(g.shape[0]), labels]
    ratio = jnp.sum((own - own_cluster_mean) ** 2, -1) / jnp.maximum(jnp.sum(own_cluster_mean**2, -1), 1e-30)
    sq = jnp.sum((own[:, None, :] - g) ** 2, -1)  # ||grad f_i(x_i) - grad f_j(x_i)||^2
    other = labels[None, :] != labels[:, None]
    separation = jnp.min(jnp.where(other, sq, jnp.inf), axis=1)
    return ratio, separation


def main(argv=None):
    parser = OptionParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/fig2")
    parser.add_argument("--clients-per-cluster", type=int, default=75)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run in --out")
    args = experiment_args(parser, argv, "fig2_assumptions.py")
    if args.rounds < 1 or args.eval_every < 1 or args.clients_per_cluster < 2 or not args.lr > 0:
        print("error: --rounds, --eval-every >= 1, --clients-per-cluster >= 2, --lr > 0", file=sys.stderr)
        return 2
    try:  # a folder never mixes two runs of the experiment
        claim_experiment(args, OUTPUTS)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    task = synthetic_regression(clients_per_cluster=args.clients_per_cluster, seed=args.seed)
    algo = make_algorithm("ground-truth", task, learning_rate=args.lr, momentum=0.9)
    state = algo.init(task.init_params(None), task.num_clients)
    step = jax.jit(algo.round)
    stats = jax.jit(lambda p: assumption_statistics(task, p))
    rows, per_client = [], []
    for t in range(args.rounds + 1):
        if t % args.eval_every == 0 or t == args.rounds:
            ratio, sep = (np.asarray(x, np.float64) for x in stats(state.client_params))
            rows.append(
                {
                    "round": t,
                    "ratio_max": ratio.max(),
                    "ratio_median": float(np.median(ratio)),
                    "separation_min": sep.min(),
                    "separation_median": float(np.median(sep)),
                }
            )
            per_client.append((t, ratio, sep))
        if t < args.rounds:
            state, _ = step(state, task.data, jax.random.fold_in(jax.random.PRNGKey(args.seed), t))
    a_sq = max(r["ratio_max"] for r in rows)
    delta_sq = min(r["separation_min"] for r in rows)
    summary = {
        "A_squared_upper_bound": a_sq,
        "Delta_squared_lower_bound": delta_sq,
        "rounds": rows,
        "task_config": task.config,
        "learning_rate": args.lr,
    }
    write_json(os.path.join(args.out, "fig2.json"), {**summary, "provenance": provenance()}, indent=1)
    fig, (left, right) = figure_for_file(1, 2, figsize=(11, 4))
    for t, ratio, sep in per_client:
        left.scatter(np.full_like(ratio, t), ratio, s=3, color="C0", alpha=0.3)
        right.scatter(np.full_like(sep, t), sep, s=3, color="C1", alpha=0.3)
    left.axhline(a_sq, color="k", linestyle="--", label=f"empirical A^2 = {a_sq:.3g}")
    right.axhline(delta_sq, color="k", linestyle="--", label=f"empirical Delta^2 = {delta_sq:.3g}")
    left.set_title("eq. (7): intra-cluster variance ratio")
    right.set_title("eq. (8), D = 0: inter-cluster separation")
    right.set_yscale("log")
    for ax in (left, right):
        ax.set_xlabel("round (ground-truth training)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "fig2.png"), dpi=110)
    print(f"A^2 <= {a_sq:.4g} (max of eq. 7), Delta^2 >= {delta_sq:.4g} (min of eq. 8)")
    print(f"wrote {os.path.join(args.out, 'fig2.json')} and {os.path.join(args.out, 'fig2.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
