"""Algorithms, each an ``(init, round)`` pair built from its hyperparameters, and their registry."""

from fedjax_clust.algorithms.base import ClientState, FederatedAlgorithm
from fedjax_clust.algorithms.federated_clustering import federated_clustering
from fedjax_clust.algorithms.fixed_clusters import fixed_clusters, global_fedavg, ground_truth, local

__all__ = ["ALGORITHMS", "ClientState", "FederatedAlgorithm", "make_algorithm", "federated_clustering",
           "fixed_clusters", "global_fedavg", "ground_truth", "local"]

ALGORITHMS = ("federated-clustering", "local", "global", "ground-truth")


def make_algorithm(name: str, task, *, learning_rate: float, momentum: float = 0.0, batch_size=None,
                   **options) -> FederatedAlgorithm:
    """Build algorithm ``name`` (a CLI name, see ``ALGORITHMS``) for ``task``.

    ``options`` are algorithm-specific (Federated-Clustering: clustering_steps, radius, quantile,
    local_steps, subgroups, chunk_size); giving one to an algorithm that has no such option is an error.
    """
    common = dict(learning_rate=learning_rate, momentum=momentum, batch_size=batch_size)
    if name == "federated-clustering":
        return federated_clustering(task.example_loss, **common, **options)
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; expected one of {list(ALGORITHMS)}")
    if options:
        raise ValueError(f"algorithm {name!r} takes no options {sorted(options)}")
    if name == "local":
        return local(task.example_loss, task.num_clients, **common)
    if name == "global":
        return global_fedavg(task.example_loss, task.num_clients, **common)
    if task.true_clusters is None:
        raise ValueError(f"algorithm 'ground-truth' needs a task with known clusters; {task.name!r} has none")
    return ground_truth(task.example_loss, task.true_clusters, **common)
