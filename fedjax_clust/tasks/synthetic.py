"""The synthetic clustered linear-regression task of Werner et al. §4.1.

K clusters of ``clients_per_cluster`` clients. Every client i of cluster k in {1, ..., K} holds a sample
matrix A_i in R^{d x n} with entries ~ N(k, 1) and targets y_i = A_i^T x*_k (no noise), so the clients of a
cluster share the minimiser x*_k. With n = 9 < d = 10 a client's own system is underdetermined and local
training cannot find x*_k: it must borrow from the clients of its cluster.

Choices and the paper authors' variants (their synthetic scripts, run side by side; see
docs/guides/trustworthy-results.md):

* Feature means: the paper's text numbers the clusters k = 1..K (``first_feature_mean=1``, default); the
  authors' scripts draw cluster k's features around k = 0..K-1 (``first_feature_mean=0``).
* x*_k: the paper does not say how it is drawn; the authors' scripts draw it from {0, 1}^d scaled by 100
  (``optimum="binary"``, the default). ``optimum="gaussian"`` draws N(0, I_d) scaled by ``optimum_scale``.
* Initial models: by default every client starts from x = 0 (``simulate(init="shared")``); the authors
  never start at 0 but at "oracle" centres, x*_k + N(0, ``init_noise``^2 I) drawn once per cluster
  (``init="oracle"``, noise 0.1 in their scripts), or at "random" centres, one per cluster uniform in
  [-1, 2)^d (``init="random"``); every client of cluster k starts at cluster k's centre.

Loss per example (a row a of A_i^T with target y): 0.5 * (a . x - y)^2; a client's loss is its mean.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.core.validation import check_choice, check_int, check_real, check_seed
from fedjax_clust.parallel.memory import check_task_size
from fedjax_clust.tasks.base import Task

__all__ = ["synthetic_regression"]

OPTIMUM_KINDS = ("binary", "gaussian")
OptimumKind = Literal[OPTIMUM_KINDS]


def squared_error(params, example):
    """0.5 (a . x - y)^2 for one example {"x": a [d], "y": y []}."""
    return 0.5 * jnp.square(jnp.dot(example["x"], params) - example["y"])


def synthetic_regression(
    *,
    num_clusters: int = 4,
    clients_per_cluster: int = 75,
    samples_per_client: int = 9,
    dim: int = 10,
    optimum: OptimumKind = "binary",
    optimum_scale: float = 100.0,
    first_feature_mean: float = 1.0,
    init_noise: float = 0.1,
    seed: int = 0,
) -> Task:
    """Build the §4.1 task (defaults: the paper's K = 4, 75 clients per cluster, n = 9, d = 10).

    Args:
      num_clusters: K, the clusters.
      clients_per_cluster: clients per cluster (N = K x this).
      samples_per_client: n, examples per client.
      dim: d, the model and feature dimension.
      optimum: how the cluster optima x*_k are drawn: "binary" ({0,1}^d x optimum_scale, the paper
        authors' scripts) or "gaussian".
      optimum_scale: the scale of x*_k.
      first_feature_mean: features of cluster k ~ N(k + first_feature_mean - 1, 1): 1 as in the paper,
        0 as in the authors' scripts.
      init_noise: std of the noise around x*_k of the "oracle" initial models.
    """
    check_int("num_clusters", num_clusters)
    check_int("clients_per_cluster", clients_per_cluster)
    check_int("samples_per_client", samples_per_client)
    check_int("dim", dim)
    check_choice("optimum", optimum, OPTIMUM_KINDS)
    check_real("optimum_scale", optimum_scale, low=0.0, low_open=True)
    check_real("first_feature_mean", first_feature_mean)
    check_real("init_noise", init_noise, low=0.0)
    check_seed(seed)
    # generation peaks at ~16 bytes per feature entry (float64 draw, float32 copy, device copy)
    check_task_size(16 * num_clusters * clients_per_cluster * samples_per_client * (dim + 1), "the synthetic task")
    rng = np.random.default_rng(seed)
    if optimum == "binary":
        centers = rng.integers(0, 2, size=(num_clusters, dim)).astype(np.float32) * optimum_scale
    else:
        centers = rng.standard_normal((num_clusters, dim)).astype(np.float32) * optimum_scale
    labels = np.repeat(np.arange(num_clusters), clients_per_cluster)
    n_clients = labels.shape[0]
    # Row m of x[i] is column m of A_i: entries ~ N(k, 1) with k = cluster index + first_feature_mean.
    means = (labels + float(first_feature_mean)).astype(np.float32)
    x = rng.standard_normal((n_clients, samples_per_client, dim)).astype(np.float32) + means[:, None, None]
    optima = centers[labels]
    y = np.einsum("ind,id->in", x, optima).astype(np.float32)
    config = dict(
        num_clusters=num_clusters,
        clients_per_cluster=clients_per_cluster,
        samples_per_client=samples_per_client,
        dim=dim,
        optimum=optimum,
        optimum_scale=float(optimum_scale),
        first_feature_mean=float(first_feature_mean),
        init_noise=float(init_noise),
        seed=seed,
    )

    def initial_models(kind, key):
        """Per-client starts: cluster k's centre, "oracle" x*_k + N(0, init_noise^2 I), "random" U[-1, 2)^d."""
        if kind == "oracle":
            starts = centers + init_noise * jax.random.normal(key, centers.shape)
        elif kind == "random":
            starts = jax.random.uniform(key, centers.shape, minval=-1.0, maxval=2.0)
        else:
            raise ValueError(f"init must be 'oracle' or 'random' for per-client starts, got {kind!r}")
        return jnp.asarray(starts, jnp.float32)[labels]

    return Task(
        name="synthetic",
        data={"x": jnp.asarray(x), "y": jnp.asarray(y)},
        example_loss=squared_error,
        init_params=lambda key: jnp.zeros((dim,), jnp.float32),
        true_clusters=labels,
        optima=jnp.asarray(optima),
        config=config,
        initial_models=initial_models,
    )
