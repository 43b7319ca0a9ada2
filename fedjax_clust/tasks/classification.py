"""A small clustered classification task with a feature model (generated, offline).

Gaussian classes: class c in {0..C-1} has mean mu_c ~ N(0, class_sep^2 I_d) and inputs x ~ N(mu_c, I_d),
shared by everyone. Clients come in K clusters that disagree on the labels, like the paper's *private label*
task (§4.2): cluster k shows class c under the label pi_k(c) for a fixed random permutation pi_k (pi_0 is the
identity), so no single model can serve every cluster. Each client holds ``samples_per_client`` training and
``test_samples_per_client`` test examples with uniformly drawn classes.

Model: a one-hidden-layer tanh MLP; its hidden layer is the *feature* map phi(x) (used by kNN-Per), its output
the class logits. Loss: softmax cross-entropy. ``evaluate`` adds ``test_accuracy`` and ``test_loss`` of every
client's own model on its own test data.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.core.validation import check_int, check_real, check_seed
from fedjax_clust.parallel.memory import check_task_size
from fedjax_clust.tasks.base import Task

__all__ = ["clustered_classification", "mlp_features", "mlp_logits"]


def mlp_features(params, x):
    """phi(x) = tanh(x W1 + b1), the hidden representation."""
    return jnp.tanh(x @ params["w1"] + params["b1"])


def mlp_logits(params, x):
    return mlp_features(params, x) @ params["w2"] + params["b2"]


def cross_entropy(params, example):
    logits = mlp_logits(params, example["x"])
    return -jax.nn.log_softmax(logits)[example["y"]]


def clustered_classification(
    *,
    num_clusters: int = 4,
    clients_per_cluster: int = 10,
    samples_per_client: int = 40,
    test_samples_per_client: int = 40,
    num_classes: int = 5,
    dim: int = 10,
    hidden: int = 16,
    class_sep: float = 2.0,
    seed: int = 0,
) -> Task:
    """Build the task (see the module docstring).

    Args:
      num_clusters: K, the clusters (each a private labelling).
      clients_per_cluster: clients per cluster.
      samples_per_client: training examples per client.
      test_samples_per_client: test examples per client.
      num_classes: classes of every client's labels.
      dim: input features.
      hidden: hidden width of the feature model.
      class_sep: separation of the class means.
    """
    for name, value in [
        ("num_clusters", num_clusters),
        ("clients_per_cluster", clients_per_cluster),
        ("samples_per_client", samples_per_client),
        ("test_samples_per_client", test_samples_per_client),
        ("dim", dim),
        ("hidden", hidden),
    ]:
        check_int(name, value)
    check_int("num_classes", num_classes, 2)
    check_real("class_sep", class_sep, low=0.0)
    check_seed(seed)
    samples = samples_per_client + test_samples_per_client
    check_task_size(16 * num_clusters * clients_per_cluster * samples * (dim + 1), "the classification task")
    rng = np.random.default_rng(seed)
    means = rng.normal(scale=class_sep, size=(num_classes, dim))
    perms = np.stack([np.arange(num_classes)] + [rng.permutation(num_classes) for _ in range(num_clusters - 1)])
    labels = np.repeat(np.arange(num_clusters), clients_per_cluster)

    def draw(count):
        classes = rng.integers(0, num_classes, size=(labels.size, count))
        x = means[classes] + rng.normal(size=classes.shape + (dim,))
        y = perms[labels[:, None], classes]
        return {"x": jnp.asarray(x, jnp.float32), "y": jnp.asarray(y, jnp.int32)}

    train, test = draw(samples_per_client), draw(test_samples_per_client)

    def init_params(key):
        k1, k2 = jax.random.split(jax.random.PRNGKey(seed) if key is None else key)
        return {
            "w1": jax.random.normal(k1, (dim, hidden)) / np.sqrt(dim),
            "b1": jnp.zeros(hidden),
            "w2": jax.random.normal(k2, (hidden, num_classes)) / np.sqrt(hidden),
            "b2": jnp.zeros(num_classes),
        }

    config = dict(
        num_clusters=num_clusters,
        clients_per_cluster=clients_per_cluster,
        samples_per_client=samples_per_client,
        test_samples_per_client=test_samples_per_client,
        num_classes=num_classes,
        dim=dim,
        hidden=hidden,
        class_sep=class_sep,
        seed=seed,
    )
    return Task(
        name="classification",
        data=train,
        example_loss=cross_entropy,
        init_params=init_params,
        true_clusters=labels,
        config=config,
        test_data=test,
        features=mlp_features,
        logits=mlp_logits,
    )
