"""Algorithms, each an ``(init, round)`` pair built from its hyperparameters, and their registry."""

from fedjax_clust.algorithms.base import ClientState, FederatedAlgorithm
from fedjax_clust.algorithms.cfl import cfl
from fedjax_clust.algorithms.ditto import ditto
from fedjax_clust.algorithms.federated_clustering import federated_clustering
from fedjax_clust.algorithms.fixed_clusters import (
    fixed_clusters,
    global_fedavg,
    ground_truth,
    local,
)
from fedjax_clust.algorithms.gradient_clustering import (
    momentum_clustering,
    myopic_clustering,
)
from fedjax_clust.algorithms.knn_per import knn_per
from fedjax_clust.algorithms.loss_clustering import hypcluster, ifca

__all__ = ["ALGORITHMS", "ClientState", "FederatedAlgorithm", "make_algorithm", "federated_clustering",
           "fixed_clusters", "global_fedavg", "ground_truth", "local", "myopic_clustering", "momentum_clustering",
           "ifca", "hypcluster", "cfl", "ditto", "knn_per"]

ALGORITHMS = ("federated-clustering", "local", "global", "ground-truth", "myopic-clustering",
              "momentum-clustering", "ifca-1", "ifca-2", "hypcluster", "cfl", "ditto", "knn-per")
_NEEDS_K = ("myopic-clustering", "momentum-clustering", "ifca-1", "ifca-2", "hypcluster")


def make_algorithm(name: str, task, *, learning_rate: float, momentum: float = 0.0, batch_size=None,
                   **options) -> FederatedAlgorithm:
    """Build algorithm ``name`` (a CLI name, see ``ALGORITHMS``) for ``task``.

    ``options`` are algorithm-specific keyword arguments of the builder (e.g. Federated-Clustering's
    clustering_steps, radius, quantile, local_steps, subgroups, chunk_size, mesh; ``num_clusters`` for the
    K-cluster methods, defaulting to the task's true K). ``momentum`` applies to the algorithms that step
    with SGD on client models (Federated-Clustering, the fixed-partition baselines, Myopic-Clustering).
    """
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; expected one of {list(ALGORITHMS)}")
    common = dict(learning_rate=learning_rate, batch_size=batch_size)
    if name in _NEEDS_K:
        k = options.pop("num_clusters", None) or task.num_clusters
        if k is None:
            raise ValueError(f"algorithm {name!r} needs num_clusters; task {task.name!r} has no known clusters")
        if name == "myopic-clustering":
            return myopic_clustering(task.example_loss, k, momentum=momentum, **common, **options)
        if name == "momentum-clustering":
            return momentum_clustering(task.example_loss, k, **common, **options)
        if name == "hypcluster":
            return hypcluster(task.example_loss, k, **common, **options)
        return ifca(task.example_loss, k, option=int(name[-1]), **common, **options)
    if name == "federated-clustering":
        return federated_clustering(task.example_loss, momentum=momentum, **common, **options)
    if name == "cfl":
        return cfl(task.example_loss, **common, **options)
    if name == "ditto":
        return ditto(task.example_loss, **common, **options)
    if name == "knn-per":
        return knn_per(task, momentum=momentum, **common, **options)
    if options:
        raise ValueError(f"algorithm {name!r} takes no options {sorted(options)}")
    common["momentum"] = momentum
    if name == "local":
        return local(task.example_loss, task.num_clients, **common)
    if name == "global":
        return global_fedavg(task.example_loss, task.num_clients, **common)
    if task.true_clusters is None:
        raise ValueError(f"algorithm 'ground-truth' needs a task with known clusters; {task.name!r} has none")
    return ground_truth(task.example_loss, task.true_clusters, **common)
