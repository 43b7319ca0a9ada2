"""fedjax-clust: clustered, personalized and Byzantine-robust federated learning on JAX.

All N clients live in one pytree with a leading client axis; a round is one jit-compiled pure function.

Public API (each cites the paper it implements in its docstring):
  threshold_clustering   Werner et al. Algorithm 3, update rule (4)
  cross_gradients        the N x N gradient exchange of Algorithm 2, chunked over models
  federated_clustering   Algorithm 2, an (init, round) algorithm object
  myopic_clustering, momentum_clustering                Algorithms 1 and 4
  local, global_fedavg, ground_truth, ifca, hypcluster, cfl, ditto   the baselines
  synthetic_regression   the §4.1 task; make_task / make_algorithm build by registry name
  hyperparameters        an algorithm's typed hyperparameter record (static and traced fields), for make_algorithm
  AlgorithmSpec, register_algorithm   add your own algorithm (Python, or the fedjax_clust.algorithms entry points)
  simulate, run_comparison             the driving loop and the default experiment
  Evaluation, Output, Checkpointing, Batching   a driver's records: simulate(..., evaluation=Evaluation(
                         eval_every=5), output=Output(out_dir=...), checkpointing=Checkpointing(checkpoint_every=10))
  TaskGrid, Candidate, PerRun   a sweep's or a study's task grid, an algorithm with its own options (and grid),
                         an option each run derives from its seed and task
  central_privacy, local_privacy, Participation, Placement   a run's settings objects: make_algorithm(...,
                         privacy=..., participation=...), simulate(..., placement=...); adaptive_clipping
                         for central_privacy(..., adaptive=...)
  FCClustering, FCLocalSteps, FCExecution, Attackers, ...   option groups: a builder's related options as one
                         record (federated_clustering(..., clustering=FCClustering(quantile=0.2)));
                         make_algorithm, the command line and sweeps take their fields by name
  Callback               a hook of the run loop: simulate(..., callbacks=[...])
  Tracking               TensorBoard / Weights & Biases logging of a run (optional extras)
  sweep                  many runs (hyperparameter grid x seeds) as one compiled program
  study                  several algorithms x a grid x the same seeds: t intervals, paired differences
  mark_byzantine, make_attack, make_aggregator   Byzantine clients, their attacks, robust aggregators
  AggregatorSpec, AttackSpec, register_aggregator, register_attack   add your own rule (Python, or the
                         fedjax_clust.aggregators / fedjax_clust.attacks entry points)
  NonFiniteError, RunInterrupted       what a run raises when its models diverge or it is interrupted
  deterministic_xla_flags  the XLA_FLAGS value for deterministic GPU ops (set it yourself: runs that give
                         the same numbers every time)

The package is laid out by role; a module imports only from the rows below its own (and its own row's
modules that do not import it back), so the library never reaches up into a tool and there is no import cycle:

  cli/          the command line, one module per command            (tool: nothing imports it)
  bench/        benchmarks and the profiler                         (tool: only cli/ imports it)
  cost/         what a round costs: FLOPs and bytes counted from its program, a calibrated roofline
  run/          the run loop and its callbacks, the records a run writes, fused rounds, batched sweeps, compare,
                studies and their statistics
  algorithms/   one module per algorithm with its AlgorithmSpec, the registry, the wrappers that need nothing
                from what they wrap (participation, label flipping)
  tasks/        a task = data + loss + init (+ truth)
  robust/       aggregators, attacks, the adversary an algorithm sends through, Byzantine masks, robust Lloyd
  data/ models/ image sources, partitions, .npz and LETOR files (never importing tasks); Flax models
  ops/          pure kernels: cross-gradients, Threshold-Clustering, order statistics, graphs, metrics
  incentives/   the thesis's incentives: the duopoly of defection-free CL, the price-discrimination game
  core/ parallel/ io/   the shared vocabulary (client state, the algorithm type, batches and masks, the client
                optimiser, PRNG streams, argument checks, pytrees, the one registry type); devices, hosts and memory;
                files on disk

Importing the package loads none of them: each public name is imported from its module on first use (PEP
562), so ``import fedjax_clust`` and the command line's ``--help`` start without JAX.

Neither importing the package nor any of its library functions changes a process-wide setting (no
``XLA_FLAGS``, no ``jax.config``, no matplotlib backend; only the command line, ``cli/``, does, and
``parallel.multihost.initialize``, the explicit multi-process setup call). On a GPU, set
``os.environ["XLA_FLAGS"] = fedjax_clust.deterministic_xla_flags()`` before the first JAX computation so that a
run gives the same numbers every time and a resumed run equals the uninterrupted one (the ``fedjax-clust``
command does this itself; a run on a GPU without it warns once); see :mod:`fedjax_clust.parallel.determinism`.
"""

from typing import TYPE_CHECKING

from fedjax_clust._version import __version__

if TYPE_CHECKING:  # what static tools (type checkers, IDEs, docs) see: the same names, imported eagerly
    from fedjax_clust.algorithms import (  # noqa: F401
        ALGORITHMS,
        AlgorithmSpec,
        ClientParams,
        ClientState,
        FederatedAlgorithm,
        Hyperparameters,
        algorithm_names,
        algorithm_spec,
        cfl,
        ditto,
        federated_clustering,
        fixed_clusters,
        global_fedavg,
        ground_truth,
        hypcluster,
        hyperparameters,
        ifca,
        local,
        make_algorithm,
        momentum_clustering,
        myopic_clustering,
        register_algorithm,
    )
    from fedjax_clust.algorithms.cfl import CFLSplit  # noqa: F401
    from fedjax_clust.algorithms.fedavg import FedAvgClients, FedAvgServer  # noqa: F401
    from fedjax_clust.algorithms.federated_clustering import FCClustering, FCExecution, FCLocalSteps  # noqa: F401
    from fedjax_clust.algorithms.fedsoft import fedsoft  # noqa: F401
    from fedjax_clust.algorithms.loss_clustering import ClusterInit  # noqa: F401
    from fedjax_clust.algorithms.participation import participation_rule, with_participation  # noqa: F401
    from fedjax_clust.algorithms.settings import Participation  # noqa: F401
    from fedjax_clust.algorithms.srfca import SRFCARefine  # noqa: F401
    from fedjax_clust.algorithms.three_stage import ThreeStageClustering, ThreeStageOptimization  # noqa: F401
    from fedjax_clust.core.model_table import ModelTable  # noqa: F401
    from fedjax_clust.io.tracking import Tracking  # noqa: F401
    from fedjax_clust.models import Model, from_linen, from_nnx, make_model  # noqa: F401
    from fedjax_clust.ops.clustering import kth_smallest_threshold, threshold_clustering  # noqa: F401
    from fedjax_clust.ops.crossgrad import cross_gradients  # noqa: F401
    from fedjax_clust.ops.metrics import misclustering_error  # noqa: F401
    from fedjax_clust.parallel.determinism import deterministic_xla_flags  # noqa: F401
    from fedjax_clust.privacy import (  # noqa: F401
        adaptive_clipping,
        calibrate_noise,
        central_privacy,
        local_privacy,
        privacy_epsilon,
    )
    from fedjax_clust.robust import (  # noqa: F401
        AGGREGATORS,
        ATTACKS,
        AggregatorSpec,
        AttackSpec,
        aggregator_names,
        attack_names,
        make_aggregator,
        make_attack,
        mark_byzantine,
        register_aggregator,
        register_attack,
    )
    from fedjax_clust.robust.adversary import Attackers  # noqa: F401
    from fedjax_clust.run.compare import format_table, plot_convergence, run_comparison  # noqa: F401
    from fedjax_clust.run.driver_options import Batching, Checkpointing, Evaluation, Output  # noqa: F401
    from fedjax_clust.run.experiment_records import Candidate, PerRun, TaskGrid  # noqa: F401
    from fedjax_clust.run.loop import Callback  # noqa: F401
    from fedjax_clust.run.placement import Placement  # noqa: F401
    from fedjax_clust.run.simulate import NonFiniteError, RunInterrupted, RunResult, simulate  # noqa: F401
    from fedjax_clust.run.study import StudyResult, study  # noqa: F401
    from fedjax_clust.run.sweep import SweepResult, sweep  # noqa: F401
    from fedjax_clust.tasks import (  # noqa: F401  # noqa: F401
        TASKS,
        ClientSizes,
        ClientSplit,
        ModelOptions,
        SourceReading,
        Task,
        federated_image_task,
        image_task,
        make_task,
        synthetic_regression,
    )

# public name -> the module that defines it (imported on first access)
_PUBLIC = {
    "ALGORITHMS": "fedjax_clust.algorithms",
    "Callback": "fedjax_clust.run.loop",
    "cfl": "fedjax_clust.algorithms",
    "ClientParams": "fedjax_clust.algorithms",
    "ClientState": "fedjax_clust.algorithms",
    "ModelTable": "fedjax_clust.core.model_table",
    "cross_gradients": "fedjax_clust.ops.crossgrad",
    "ditto": "fedjax_clust.algorithms",
    "federated_clustering": "fedjax_clust.algorithms",
    "FederatedAlgorithm": "fedjax_clust.algorithms",
    "fixed_clusters": "fedjax_clust.algorithms",
    "format_table": "fedjax_clust.run.compare",
    "global_fedavg": "fedjax_clust.algorithms",
    "ground_truth": "fedjax_clust.algorithms",
    "hypcluster": "fedjax_clust.algorithms",
    "hyperparameters": "fedjax_clust.algorithms",
    "Hyperparameters": "fedjax_clust.algorithms",
    "ifca": "fedjax_clust.algorithms",
    "kth_smallest_threshold": "fedjax_clust.ops.clustering",
    "local": "fedjax_clust.algorithms",
    "make_algorithm": "fedjax_clust.algorithms",
    "make_task": "fedjax_clust.tasks",
    "misclustering_error": "fedjax_clust.ops.metrics",
    "momentum_clustering": "fedjax_clust.algorithms",
    "myopic_clustering": "fedjax_clust.algorithms",
    "NonFiniteError": "fedjax_clust.run.simulate",
    "plot_convergence": "fedjax_clust.run.compare",
    "run_comparison": "fedjax_clust.run.compare",
    "RunInterrupted": "fedjax_clust.run.simulate",
    "RunResult": "fedjax_clust.run.simulate",
    "simulate": "fedjax_clust.run.simulate",
    "synthetic_regression": "fedjax_clust.tasks",
    "Task": "fedjax_clust.tasks",
    "TASKS": "fedjax_clust.tasks",
    "threshold_clustering": "fedjax_clust.ops.clustering",
    "Model": "fedjax_clust.models",
    "from_linen": "fedjax_clust.models",
    "from_nnx": "fedjax_clust.models",
    "make_model": "fedjax_clust.models",
    "image_task": "fedjax_clust.tasks",
    "federated_image_task": "fedjax_clust.tasks",
    "sweep": "fedjax_clust.run.sweep",
    "study": "fedjax_clust.run.study",
    "StudyResult": "fedjax_clust.run.study",
    "SweepResult": "fedjax_clust.run.sweep",
    "AGGREGATORS": "fedjax_clust.robust",
    "ATTACKS": "fedjax_clust.robust",
    "make_aggregator": "fedjax_clust.robust",
    "make_attack": "fedjax_clust.robust",
    "mark_byzantine": "fedjax_clust.robust",
    "AggregatorSpec": "fedjax_clust.robust",
    "AttackSpec": "fedjax_clust.robust",
    "register_aggregator": "fedjax_clust.robust",
    "register_attack": "fedjax_clust.robust",
    "aggregator_names": "fedjax_clust.robust",
    "attack_names": "fedjax_clust.robust",
    "fedsoft": "fedjax_clust.algorithms.fedsoft",
    "participation_rule": "fedjax_clust.algorithms.participation",
    "with_participation": "fedjax_clust.algorithms.participation",
    "AlgorithmSpec": "fedjax_clust.algorithms",
    "register_algorithm": "fedjax_clust.algorithms",
    "algorithm_names": "fedjax_clust.algorithms",
    "algorithm_spec": "fedjax_clust.algorithms",
    "deterministic_xla_flags": "fedjax_clust.parallel.determinism",
    "calibrate_noise": "fedjax_clust.privacy",
    "adaptive_clipping": "fedjax_clust.privacy",
    "central_privacy": "fedjax_clust.privacy",
    "local_privacy": "fedjax_clust.privacy",
    "Participation": "fedjax_clust.algorithms.settings",
    "Placement": "fedjax_clust.run.placement",
    "privacy_epsilon": "fedjax_clust.privacy",
    "Tracking": "fedjax_clust.io.tracking",
    "Attackers": "fedjax_clust.robust.adversary",
    "CFLSplit": "fedjax_clust.algorithms.cfl",
    "ClusterInit": "fedjax_clust.algorithms.loss_clustering",
    "FCClustering": "fedjax_clust.algorithms.federated_clustering",
    "FCExecution": "fedjax_clust.algorithms.federated_clustering",
    "FCLocalSteps": "fedjax_clust.algorithms.federated_clustering",
    "FedAvgClients": "fedjax_clust.algorithms.fedavg",
    "FedAvgServer": "fedjax_clust.algorithms.fedavg",
    "SRFCARefine": "fedjax_clust.algorithms.srfca",
    "ThreeStageClustering": "fedjax_clust.algorithms.three_stage",
    "ThreeStageOptimization": "fedjax_clust.algorithms.three_stage",
    "ClientSizes": "fedjax_clust.tasks",
    "ClientSplit": "fedjax_clust.tasks",
    "ModelOptions": "fedjax_clust.tasks",
    "SourceReading": "fedjax_clust.tasks",
    "Evaluation": "fedjax_clust.run.driver_options",
    "Output": "fedjax_clust.run.driver_options",
    "Checkpointing": "fedjax_clust.run.driver_options",
    "Batching": "fedjax_clust.run.driver_options",
    "TaskGrid": "fedjax_clust.run.experiment_records",
    "Candidate": "fedjax_clust.run.experiment_records",
    "PerRun": "fedjax_clust.run.experiment_records",
}

__all__ = ["__version__", *_PUBLIC]


# the subpackages, reachable as attributes too (fc.data.save_clients_npz) as when the package imported them
_SUBPACKAGES = (
    "algorithms",
    "bench",
    "cli",
    "core",
    "data",
    "incentives",
    "io",
    "models",
    "ops",
    "parallel",
    "robust",
    "run",
    "tasks",
)


def __getattr__(name: str):
    import importlib

    if name in _SUBPACKAGES:
        return importlib.import_module(f"fedjax_clust.{name}")
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'fedjax_clust' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later accesses skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC) | set(_SUBPACKAGES))
