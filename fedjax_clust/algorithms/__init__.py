"""Algorithms, each an ``(init, round)`` pair built from its hyperparameters, and their registry.

Adding an algorithm: write its module (the builder, and ``SPECS``, its
:class:`~fedjax_clust.algorithms.registry.AlgorithmSpec`) and add the module to ``_MODULES`` below (the listing
order is the modules' and their ``SPECS``'); everything else (``make_algorithm`` in
:mod:`fedjax_clust.algorithms.factory`, the command line, sweeps, the profiler, the benchmarks, the contract tests)
reads the spec. A third-party algorithm needs no edit of the package: see :mod:`fedjax_clust.algorithms.registry`.
"""

from fedjax_clust.algorithms import cfl as _cfl
from fedjax_clust.algorithms import ditto as _ditto
from fedjax_clust.algorithms import fedavg as _fedavg
from fedjax_clust.algorithms import federated_clustering as _fc
from fedjax_clust.algorithms import fedsoft as _fedsoft
from fedjax_clust.algorithms import fixed_clusters as _fixed
from fedjax_clust.algorithms import gradient_clustering as _gradient
from fedjax_clust.algorithms import knn_per as _knn
from fedjax_clust.algorithms import loss_clustering as _loss
from fedjax_clust.algorithms import srfca as _srfca
from fedjax_clust.algorithms import three_stage as _three
from fedjax_clust.algorithms.cfl import cfl
from fedjax_clust.algorithms.ditto import ditto
from fedjax_clust.algorithms.factory import SHARED_KEYWORDS, algorithm_takes, make_algorithm
from fedjax_clust.algorithms.federated_clustering import federated_clustering
from fedjax_clust.algorithms.fedsoft import fedsoft
from fedjax_clust.algorithms.fixed_clusters import fixed_clusters, global_fedavg, ground_truth, local
from fedjax_clust.algorithms.gradient_clustering import momentum_clustering, myopic_clustering
from fedjax_clust.algorithms.hyperparameter_record import (
    Hyperparameters,
    hyperparameters,
    hyperparameters_class,
    static_hyperparameters,
    traced_hyperparameters,
)
from fedjax_clust.algorithms.knn_per import knn_per
from fedjax_clust.algorithms.loss_clustering import hypcluster, ifca
from fedjax_clust.algorithms.registry import AlgorithmSpec, algorithm_names, algorithm_spec, register_algorithm
from fedjax_clust.algorithms.srfca import srfca
from fedjax_clust.algorithms.three_stage import three_stage
from fedjax_clust.core.algorithm import FederatedAlgorithm
from fedjax_clust.core.state import ClientParams, ClientState

__all__ = [
    "ALGORITHMS",
    "ClientParams",
    "ClientState",
    "FederatedAlgorithm",
    "make_algorithm",
    "federated_clustering",
    "fixed_clusters",
    "global_fedavg",
    "ground_truth",
    "local",
    "myopic_clustering",
    "momentum_clustering",
    "ifca",
    "hypcluster",
    "cfl",
    "ditto",
    "knn_per",
    "srfca",
    "three_stage",
    "fedsoft",
    "ATTACKABLE",
    "AGGREGATING",
    "OWN_MODELS",
    "AlgorithmSpec",
    "register_algorithm",
    "algorithm_spec",
    "algorithm_names",
    "algorithm_takes",
    "SHARED_KEYWORDS",
    "Hyperparameters",
    "hyperparameters",
    "hyperparameters_class",
    "static_hyperparameters",
    "traced_hyperparameters",
]

# the built-in algorithms, in the order the tools list them
_MODULES = (_fc, _fixed, _gradient, _loss, _cfl, _ditto, _knn, _srfca, _three, _fedsoft, _fedavg)
for _spec in (spec for module in _MODULES for spec in module.SPECS):
    register_algorithm(_spec)
del _spec

# The built-in algorithms' names and their kinds, derived from their specs (plugins: algorithm_names()).
ALGORITHMS = tuple(spec.name for module in _MODULES for spec in module.SPECS)
ATTACKABLE = tuple(n for n in ALGORITHMS if algorithm_spec(n).attackable)
AGGREGATING = tuple(n for n in ALGORITHMS if algorithm_spec(n).aggregates)
OWN_MODELS = tuple(n for n in ALGORITHMS if algorithm_spec(n).owns_models)
