"""The synthetic clustered linear-regression task of Werner et al. §4.1.

K clusters of ``clients_per_cluster`` clients. Every client i of cluster k in {1, ..., K} holds a sample
matrix A_i in R^{d x n} with entries ~ N(k, 1) and targets y_i = A_i^T x*_k (no noise), so the clients of a
cluster share the minimiser x*_k. With n = 9 < d = 10 a client's own system is underdetermined and local
training cannot find x*_k: it must borrow from the clients of its cluster.

The paper does not say how x*_k is drawn; the paper authors' scripts draw it from {0, 1}^d scaled by 100
(``optimum="binary"``, the default). ``optimum="gaussian"`` draws N(0, I_d) scaled by ``optimum_scale``.
Loss per example (a row a of A_i^T with target y): 0.5 * (a . x - y)^2; a client's loss is its mean. Every
client starts from x = 0.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from fedjax_clust.tasks.base import Task
from fedjax_clust.validation import check_int

__all__ = ["synthetic_regression"]

OPTIMUM_KINDS = ("binary", "gaussian")



def squared_error(params, example):
    """0.5 (a . x - y)^2 for one example {"x": a [d], "y": y []}."""
    return 0.5 * jnp.square(jnp.dot(example["x"], params) - example["y"])


def synthetic_regression(*, num_clusters: int = 4, clients_per_cluster: int = 75, samples_per_client: int = 9,
                         dim: int = 10, optimum: str = "binary", optimum_scale: float = 100.0,
                         seed: int = 0) -> Task:
    """Build the §4.1 task (defaults: the paper's K = 4, 75 clients per cluster, n = 9, d = 10)."""
    check_int("num_clusters", num_clusters)
    check_int("clients_per_cluster", clients_per_cluster)
    check_int("samples_per_client", samples_per_client)
    check_int("dim", dim)
    if optimum not in OPTIMUM_KINDS:
        raise ValueError(f"optimum must be one of {OPTIMUM_KINDS}, got {optimum!r}")
    if not np.isfinite(optimum_scale) or optimum_scale <= 0:
        raise ValueError(f"optimum_scale must be a positive number, got {optimum_scale!r}")
    rng = np.random.default_rng(seed)
    if optimum == "binary":
        centers = rng.integers(0, 2, size=(num_clusters, dim)).astype(np.float32) * optimum_scale
    else:
        centers = rng.standard_normal((num_clusters, dim)).astype(np.float32) * optimum_scale
    labels = np.repeat(np.arange(num_clusters), clients_per_cluster)
    n_clients = labels.shape[0]
    # Row m of x[i] is column m of A_i: entries ~ N(k, 1) with k = cluster index + 1.
    x = rng.standard_normal((n_clients, samples_per_client, dim)).astype(np.float32) + (labels + 1.0)[:, None, None]
    optima = centers[labels]
    y = np.einsum("ind,id->in", x, optima).astype(np.float32)
    config = dict(num_clusters=num_clusters, clients_per_cluster=clients_per_cluster,
                  samples_per_client=samples_per_client, dim=dim, optimum=optimum,
                  optimum_scale=float(optimum_scale), seed=seed)
    return Task(
        name="synthetic",
        data={"x": jnp.asarray(x), "y": jnp.asarray(y)},
        example_loss=squared_error,
        init_params=lambda key: jnp.zeros((dim,), jnp.float32),
        true_clusters=labels,
        optima=jnp.asarray(optima),
        config=config,
    )
