"""The constructed one-dimensional examples of Werner et al. Fig. 1 (§2), with exact gradients.

Each client holds a few "examples", each an index into a list of scalar loss functions; a client's loss is
the mean over its minibatch, so its gradient is exact with the full batch and stochastic with a smaller one.

* ``counterexample-myopic`` (Fig. 1a), N = 3, K = 2, learning rate eta (default 0.1):
      f1(x) = x^2 / (6 eta)
      f2(x) = 4(x-1)^3 + 3(x-1)^4 + 1 for x < 1,   (x-1)^2 / (2 eta) + 1 for x >= 1
      f3(x) = (x-2)^2 / (2 eta)
  clusters {1, 2} (minimiser 0) and {3} (minimiser 2); every client starts at x0 = 1.5.
* ``counterexample-ifca`` (Fig. 1b), N = 2, K = 2: f1(x) = (x + 0.5)^2, f2(x) = (x - 0.5)^2, two clusters;
  clients start at 0, and the paper initialises IFCA's cluster models at -1.5 and 0
  (``IFCA_INIT``).
* ``counterexample-cfl`` (Fig. 1c), N = 3, K = 2: g1(x) = x, g2(x) = x - 1/2, and g3(x) = x or x - 1 with
  probability 1/2 each (client 3 holds the two losses x^2/2 and (x-1)^2/2 and a minibatch of one draws one);
  clusters {1} and {2, 3} (minimisers 0 and 1/2 in expectation); clients start at 0. Use ``batch_size=1``.
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax.numpy as jnp
import numpy as np
from jax import lax

from fedjax_clust.tasks.base import Task

__all__ = ["counterexample_myopic", "counterexample_ifca", "counterexample_cfl", "IFCA_INIT"]

IFCA_INIT = (-1.5, 0.0)  # the paper's initialisation of IFCA's two cluster models on Fig. 1b


def _indexed_loss(branches: Sequence[Callable]) -> Callable:
    def example_loss(params, example):
        return lax.switch(example["kind"], list(branches), params)

    return example_loss


def _task(name, kinds, branches, x0, clusters, optima, config):
    kinds = np.asarray(kinds, np.int32)
    return Task(
        name=name,
        data={"kind": jnp.asarray(kinds)},
        example_loss=_indexed_loss(branches),
        init_params=lambda key: jnp.asarray(x0, jnp.float32),
        true_clusters=np.asarray(clusters),
        optima=jnp.asarray(optima, jnp.float32),
        config=config,
    )


def counterexample_myopic(*, eta: float = 0.1, x0: float = 1.5) -> Task:
    """Fig. 1a: Myopic-Clustering leaves client 2 at the saddle x = 1.

    Args:
      eta: the step size the counterexample is built for.
      x0: the initial model.
    """
    if not eta > 0:
        raise ValueError(f"eta must be positive, got {eta!r}")
    branches = [
        lambda x: jnp.square(x) / (6.0 * eta),
        lambda x: jnp.where(
            x < 1.0, 4.0 * (x - 1.0) ** 3 + 3.0 * (x - 1.0) ** 4 + 1.0, jnp.square(x - 1.0) / (2.0 * eta) + 1.0
        ),
        lambda x: jnp.square(x - 2.0) / (2.0 * eta),
    ]
    return _task(
        "counterexample-myopic", [[0], [1], [2]], branches, x0, [0, 0, 1], [0.0, 0.0, 2.0], dict(eta=eta, x0=x0)
    )


def counterexample_ifca(*, x0: float = 0.0) -> Task:
    """Fig. 1b: loss-based cluster assignment is sensitive to the initial cluster models.

    Args:
      x0: the initial model.
    """
    branches = [lambda x: jnp.square(x + 0.5), lambda x: jnp.square(x - 0.5)]
    return _task("counterexample-ifca", [[0], [1]], branches, x0, [0, 1], [-0.5, 0.5], dict(x0=x0))


def counterexample_cfl(*, x0: float = 0.0) -> Task:
    """Fig. 1c: a stochastic client makes CFL's one-shot bi-partition wrong with probability 1/2.

    Args:
      x0: the initial model.
    """
    branches = [lambda x: 0.5 * jnp.square(x), lambda x: 0.5 * jnp.square(x - 0.5), lambda x: 0.5 * jnp.square(x - 1.0)]
    return _task("counterexample-cfl", [[0, 0], [1, 1], [0, 2]], branches, x0, [0, 1, 1], [0.0, 0.5, 0.5], dict(x0=x0))
