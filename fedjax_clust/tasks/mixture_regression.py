"""The mixture-of-linear-regressions task of Ghosh, Hong, Yin and Ramchandran, §6.1 (seeds/003).

K clusters with regression vectors w*_k in {0, 1}^d (entries Bernoulli(1/2)). Of m machines, floor((1 - alpha) m)
good ones are split over the K clusters and ceil(alpha m) are adversarial. Every machine j holds n examples
(chi_l, x_l) with chi_l ~ N(0, I_d) and x_l = chi_l^T w + tau_l, tau_l ~ N(0, sigma^2), where w = w*_k for a good
machine of cluster k and, for an adversarial machine, its own vector 3 x Bernoulli(1/2)^d (the paper's outliers).
The adversarial machines follow the protocol on that data: they are ``task.outliers`` (excluded from every metric),
not ``task.byzantine`` (whose messages an attack replaces).

Choices the paper leaves open (documented here and in docs/papers/ghosh.md):

* "uniformly assigned to the K clusters": a random balanced split (cluster sizes differ by at most one), so no
  cluster is empty at small m;
* each adversarial machine draws its own vector;
* ``true_clusters`` of an adversarial machine is j mod K (the ground-truth baseline is then an oracle of the good
  machines' clusters that cannot tell the outliers apart); its ``optima`` row is its own vector. Neither enters a
  metric.

Loss per example: 0.5 (chi . w - x)^2; a machine's loss is its mean (so its local ERM is least squares).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from fedjax_clust.core.validation import check_int, check_real, check_seed
from fedjax_clust.parallel.memory import check_task_size
from fedjax_clust.tasks.base import Task
from fedjax_clust.tasks.synthetic import squared_error

__all__ = ["mixture_regression"]


def mixture_regression(
    *,
    num_clusters: int = 5,
    num_clients: int = 100,
    outlier_fraction: float = 0.3,
    samples_per_client: int = 200,
    dim: int = 100,
    noise: float = 3.0,
    outlier_scale: float = 3.0,
    seed: int = 0,
) -> Task:
    """Build the §6.1 task: K = ``num_clusters``, m = ``num_clients``, alpha = ``outlier_fraction``,
    n = ``samples_per_client``, d = ``dim``, sigma = ``noise``; outliers' vectors are ``outlier_scale`` x
    Bernoulli(1/2). Defaults: the paper's Fig. 2a (K = 5, m = 100, d = 100, sigma = 3) with our alpha = 0.3 (the
    alpha of its real-data run; §6.1 states none) and n = 200 (not stated; n > d makes every local ERM unique).

    Args:
      num_clusters: K, the regression vectors of the good machines.
      num_clients: m, the machines, good and adversarial.
      outlier_fraction: alpha, the share of adversarial machines.
      samples_per_client: n, examples per machine.
      dim: d, the dimension.
      noise: sigma, the regression noise.
      outlier_scale: the adversarial machines' vectors are this x Bernoulli(1/2).
    """
    check_int("num_clusters", num_clusters)
    check_int("num_clients", num_clients)
    check_real("outlier_fraction", outlier_fraction, low=0.0, high=1.0, high_open=True)
    check_int("samples_per_client", samples_per_client)
    check_int("dim", dim)
    check_real("noise", noise, low=0.0)
    check_real("outlier_scale", outlier_scale, low=0.0, low_open=True)
    check_seed(seed)
    num_outliers = int(np.ceil(outlier_fraction * num_clients - 1e-9))
    num_good = num_clients - num_outliers
    if num_good < num_clusters:
        raise ValueError(
            f"{num_good} good machines cannot fill {num_clusters} clusters: lower outlier_fraction or num_clusters"
        )
    check_task_size(16 * num_clients * samples_per_client * (dim + 1), "the mixture-regression task")
    rng = np.random.default_rng(seed)
    centres = rng.integers(0, 2, size=(num_clusters, dim)).astype(np.float32)
    good_clusters = rng.permutation(np.arange(num_good) % num_clusters)
    outlier_vectors = outlier_scale * rng.integers(0, 2, size=(num_outliers, dim)).astype(np.float32)
    vectors = np.concatenate([centres[good_clusters], outlier_vectors])
    chi = rng.standard_normal((num_clients, samples_per_client, dim)).astype(np.float32)
    targets = (
        np.einsum("ind,id->in", chi, vectors) + noise * rng.standard_normal((num_clients, samples_per_client))
    ).astype(np.float32)
    true_clusters = np.concatenate([good_clusters, np.arange(num_outliers) % num_clusters])
    outliers = np.arange(num_clients) >= num_good
    config = dict(
        num_clusters=num_clusters,
        num_clients=num_clients,
        outlier_fraction=float(outlier_fraction),
        samples_per_client=samples_per_client,
        dim=dim,
        noise=float(noise),
        outlier_scale=float(outlier_scale),
        seed=seed,
    )
    return Task(
        name="mixture-regression",
        data={"x": jnp.asarray(chi), "y": jnp.asarray(targets)},
        example_loss=squared_error,
        init_params=lambda key: jnp.zeros((dim,), jnp.float32),
        true_clusters=true_clusters,
        optima=jnp.asarray(vectors),
        config=config,
        outliers=outliers if outliers.any() else None,
    )
