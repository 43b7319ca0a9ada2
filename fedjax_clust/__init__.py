"""fedjax-clust: clustered, personalized and Byzantine-robust federated learning on JAX.

All N clients live in one pytree with a leading client axis; a round is one jit-compiled pure function.

Public API (each cites the paper it implements in its docstring):
  threshold_clustering   Werner et al. Algorithm 3, update rule (4)
  cross_gradients        the N x N gradient exchange of Algorithm 2, chunked over models
  federated_clustering   Algorithm 2, an (init, round) algorithm object
  myopic_clustering, momentum_clustering                Algorithms 1 and 4
  local, global_fedavg, ground_truth, ifca, hypcluster, cfl, ditto   the baselines
  synthetic_regression   the §4.1 task; make_task / make_algorithm build by registry name
  AlgorithmSpec, register_algorithm   add your own algorithm (Python, or the fedjax_clust.algorithms entry points)
  simulate, run_comparison             the driving loop and the default experiment
  Tracking               TensorBoard / Weights & Biases logging of a run (optional extras)
  sweep                  many runs (hyperparameter grid x seeds) as one vmapped program
  mark_byzantine, make_attack, make_aggregator   Byzantine clients, their attacks, robust aggregators
  NonFiniteError, RunInterrupted       what a run raises when its models diverge or it is interrupted
  deterministic_xla_flags  the XLA_FLAGS value for deterministic GPU ops (set it yourself: runs that give
                         the same numbers every time)

The package is laid out by role; a module imports only from the rows below its own (and its own row's
modules that do not import it back), so the library never reaches up into a tool and there is no import cycle:

  cli/          the command line                                    (tool: nothing imports it)
  bench/        benchmarks and the profiler                         (tool: only cli/ imports it)
  run/          simulate loop, fused rounds, vmapped sweeps, the default comparison
  algorithms/   one module per algorithm with its AlgorithmSpec, the registry, the wrappers that need nothing
                from what they wrap (participation, label flipping)
  tasks/        a task = data + loss + init (+ truth)
  robust/       aggregators, attacks, the adversary an algorithm sends through, Byzantine masks, robust Lloyd
  data/ models/ image sources, partitions, .npz and LETOR files (never importing tasks); Flax models
  ops/          pure kernels: cross-gradients, Threshold-Clustering, order statistics, graphs, metrics
  incentives/   the thesis's incentives: the duopoly of defection-free CL, the price-discrimination game
  core/ parallel/ io/   the shared vocabulary (client state, the algorithm type, batches and masks, the client
                optimiser, PRNG streams, argument checks, pytrees); devices, hosts and memory; files on disk

Neither importing the package nor any of its library functions changes a process-wide setting (no
``XLA_FLAGS``, no ``jax.config``, no matplotlib backend; only the command line, ``cli/``, does, and
``parallel.multihost.initialize``, the explicit multi-process setup call). On a GPU, set
``os.environ["XLA_FLAGS"] = fedjax_clust.deterministic_xla_flags()`` before the first JAX computation so that a
run gives the same numbers every time and a resumed run equals the uninterrupted one (the ``fedjax-clust``
command does this itself; a run on a GPU without it warns once); see :mod:`fedjax_clust.parallel.determinism`.
"""

from fedjax_clust._version import __version__
from fedjax_clust.algorithms import (
                                     ALGORITHMS,
                                     AlgorithmSpec,
                                     ClientParams,
                                     ClientState,
                                     FederatedAlgorithm,
                                     algorithm_names,
                                     algorithm_spec,
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
                                     register_algorithm,
)
from fedjax_clust.algorithms.fedsoft import fedsoft
from fedjax_clust.algorithms.participation import participation_rule, with_participation
from fedjax_clust.models import Model, from_linen, from_nnx, make_model
from fedjax_clust.ops.clustering import kth_smallest_threshold, threshold_clustering
from fedjax_clust.ops.crossgrad import cross_gradients
from fedjax_clust.ops.metrics import misclustering_error
from fedjax_clust.parallel.determinism import deterministic_xla_flags
from fedjax_clust.robust import (
                                     AGGREGATORS,
                                     ATTACKS,
                                     make_aggregator,
                                     make_attack,
                                     mark_byzantine,
)
from fedjax_clust.io.tracking import Tracking
from fedjax_clust.run.compare import format_table, plot_convergence, run_comparison
from fedjax_clust.run.simulate import (
                                     NonFiniteError,
                                     RunInterrupted,
                                     RunResult,
                                     simulate,
)
from fedjax_clust.run.sweep import SweepResult, sweep
from fedjax_clust.tasks import (
                                     TASKS,
                                     Task,
                                     federated_image_task,
                                     image_task,
                                     make_task,
                                     synthetic_regression,
)

__all__ = [
    "__version__", "ALGORITHMS", "cfl", "ClientParams", "ClientState", "cross_gradients", "ditto",
    "federated_clustering", "FederatedAlgorithm", "fixed_clusters", "format_table", "global_fedavg",
    "ground_truth", "hypcluster", "ifca", "kth_smallest_threshold", "local", "make_algorithm", "make_task",
    "misclustering_error", "momentum_clustering", "myopic_clustering", "NonFiniteError", "plot_convergence",
    "run_comparison", "RunInterrupted", "RunResult", "simulate", "synthetic_regression", "Task", "TASKS",
    "threshold_clustering", "Model", "from_linen", "from_nnx", "make_model", "image_task", "federated_image_task",
    "sweep", "SweepResult", "AGGREGATORS", "ATTACKS", "make_aggregator", "make_attack", "mark_byzantine",
    "fedsoft", "participation_rule", "with_participation", "AlgorithmSpec", "register_algorithm", "algorithm_names",
    "algorithm_spec", "deterministic_xla_flags", "Tracking",
]
