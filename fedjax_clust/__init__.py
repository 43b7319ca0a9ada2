"""fedjax-clust: clustered, personalized and Byzantine-robust federated learning on JAX.

All N clients live in one pytree with a leading client axis; a round is one jit-compiled pure function.

Public API (each cites the paper it implements in its docstring):
  threshold_clustering   Werner et al. Algorithm 3, update rule (4)
  cross_gradients        the N x N gradient exchange of Algorithm 2, chunked over models
  federated_clustering   Algorithm 2, an (init, round) algorithm object
  myopic_clustering, momentum_clustering                Algorithms 1 and 4
  local, global_fedavg, ground_truth, ifca, hypcluster, cfl, ditto   the baselines
  synthetic_regression   the §4.1 task; make_task / make_algorithm build by registry name
  simulate, run_comparison             the driving loop and the default experiment
"""

from fedjax_clust.algorithms import (
                                     ALGORITHMS,
                                     ClientState,
                                     FederatedAlgorithm,
                                     cfl,
                                     ditto,
                                     federated_clustering,
                                     fixed_clusters,
                                     global_fedavg,
                                     ground_truth,
                                     hypcluster,
                                     ifca,
                                     local,
                                     make_algorithm,
                                     momentum_clustering,
                                     myopic_clustering,
)
from fedjax_clust.clustering import kth_smallest_threshold, threshold_clustering
from fedjax_clust.compare import format_table, plot_convergence, run_comparison
from fedjax_clust.crossgrad import cross_gradients
from fedjax_clust.metrics import misclustering_error
from fedjax_clust.simulate import RunResult, simulate
from fedjax_clust.tasks import TASKS, Task, make_task, synthetic_regression

__version__ = "0.1.0"

__all__ = [
    "ALGORITHMS", "ClientState", "FederatedAlgorithm", "RunResult", "TASKS", "Task", "cfl", "cross_gradients", "ditto",
    "hypcluster", "ifca", "momentum_clustering", "myopic_clustering", "misclustering_error",
    "federated_clustering", "fixed_clusters", "format_table", "global_fedavg", "ground_truth",
    "kth_smallest_threshold", "local", "make_algorithm", "make_task", "plot_convergence", "run_comparison",
    "simulate", "synthetic_regression", "threshold_clustering",
]
