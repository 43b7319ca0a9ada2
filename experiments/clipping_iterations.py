"""Werner et al. §4.3 (Fig. 4; Fig. 7 of the arXiv version): how many Threshold-Clustering iterations l are needed.

    python experiments/clipping_iterations.py --out results/clipping

Data: scikit-learn ``make_blobs``, 90 ten-dimensional points in 10 clusters, the same true centres for every
sigma in {0.5, 1, 2, 4} (drawn once from ``center_box=(-10, 10)`` with seed 0), 10 repeats (fresh points per
repeat). For each cluster k, Threshold-Clustering (one centre) starts at a point of cluster k drawn at random
(the analogue of Federated-Clustering seeding at a client's own gradient; the paper does not give its
initialisation) and runs with the radius set at every step to the 10th percentile of the distances from the
current centre. f(l) = mean over clusters and repeats of ||v_{k,l} - mu_k||.

Elbow. The paper's ratio as printed, (f(l-1) - f(l)) / (f(l-1) - min_l f(l)), equals (1 - r) / (1 - r^(L-l+1))
for a geometric decay f(l) = m + c r^l observed up to L: it grows with l and never drops below 1 - r, so no
threshold marks an elbow on the curves we measure (r ~ 0.9 here: eq. (4) moves the centre by the ball's
share k/N = 10% of the way per step). We keep the paper's numerator and normalise by the total
improvement instead, and mark the first l with (f(l-1) - f(l)) / (f(0) - min_l f(l)) < 0.05; the paper's
ratio is stored too (``paper_ratio``). Writes ``clipping.json`` and ``clipping.png``.
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.datasets import make_blobs

from fedjax_clust import threshold_clustering
from fedjax_clust.cli.config_file import OptionParser, claim_experiment, experiment_args
from fedjax_clust.io.figures import figure_for_file
from fedjax_clust.io.jsonio import write_json
from fedjax_clust.io.provenance import provenance

SIGMAS = (0.5, 1.0, 2.0, 4.0)
ELBOW_THRESHOLD = 0.05
OUTPUTS = ("clipping.json", "clipping.png", "config.toml")


def elbow(curve, threshold=ELBOW_THRESHOLD):
    """First l >= 1 with (f(l-1) - f(l)) / (f(0) - min f) < threshold (the last l if none)."""
    curve = np.asarray(curve, np.float64)
    total = curve[0] - curve.min()
    for step in range(1, len(curve)):
        if total <= 0 or (curve[step - 1] - curve[step]) / total < threshold:
            return step
    return len(curve) - 1


def paper_ratio(curve):
    """(f(l-1) - f(l)) / (f(l-1) - min f) for l = 1..L (the paper's expression)."""
    curve = np.asarray(curve, np.float64)
    low = curve.min()
    return [float((curve[step - 1] - curve[step]) / max(curve[step - 1] - low, 1e-30)) for step in range(1, len(curve))]


@jax.jit
def _step(points, centers):
    # One step per call; the quantile rule only looks at the current centre, so l calls = l steps.
    return jax.vmap(lambda c: threshold_clustering(points, c[None], steps=1, quantile=0.1)[0])(centers)


def distance_curve(sigma, repeats, iterations, true_centers, seed_offset=0):
    curves = []
    for r in range(repeats):
        points, labels = make_blobs(
            n_samples=90,
            n_features=10,
            centers=true_centers,
            cluster_std=sigma,
            random_state=1000 * seed_offset + r + 1,
        )
        rng = np.random.default_rng(r)
        start = np.stack([points[rng.choice(np.flatnonzero(labels == k))] for k in range(len(true_centers))])
        points, v = jnp.asarray(points, jnp.float32), jnp.asarray(start, jnp.float32)
        curve = [np.linalg.norm(np.asarray(v) - true_centers, axis=1).mean()]
        for _ in range(iterations):
            v = _step(points, v)
            curve.append(np.linalg.norm(np.asarray(v) - true_centers, axis=1).mean())
        curves.append(curve)
    return np.mean(curves, axis=0)


def main(argv=None):
    parser = OptionParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/clipping")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run in --out")
    args = experiment_args(parser, argv, "clipping_iterations.py")
    if args.repeats < 1 or args.iterations < 2:
        print("error: --repeats must be >= 1 and --iterations >= 2", file=sys.stderr)
        return 2
    try:  # a folder never mixes two runs of the experiment
        claim_experiment(args, OUTPUTS)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    true_centers = np.random.default_rng(0).uniform(-10, 10, size=(10, 10))
    results = {}
    for sigma in SIGMAS:
        curve = distance_curve(sigma, args.repeats, args.iterations, true_centers)
        results[str(sigma)] = {"curve": curve.tolist(), "elbow": elbow(curve), "paper_ratio": paper_ratio(curve)}
        print(
            f"sigma={sigma}: f(0)={curve[0]:.3f}  f(10)={curve[min(10, len(curve) - 1)]:.3f}  "
            f"min={curve.min():.3f}  elbow l={results[str(sigma)]['elbow']}"
        )
    fig, ax = figure_for_file(figsize=(6, 4))
    for i, (sigma, r) in enumerate(results.items()):
        ax.plot(r["curve"], color=f"C{i}", label=f"sigma = {sigma}")
        ax.plot(r["elbow"], r["curve"][r["elbow"]], "o", color=f"C{i}")
    ax.set_xlabel("Threshold-Clustering iterations l")
    ax.set_ylabel("mean distance to the true centres")
    ax.set_title("10th-percentile radius; dots: elbows")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "clipping.png"), dpi=110)
    write_json(
        os.path.join(args.out, "clipping.json"),
        {"elbow_threshold": ELBOW_THRESHOLD, "sigmas": results, "provenance": provenance()},
        indent=1,
    )
    print(f"wrote {os.path.join(args.out, 'clipping.json')} and {os.path.join(args.out, 'clipping.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
