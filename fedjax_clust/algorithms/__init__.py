"""Algorithms, each an ``(init, round)`` pair built from its hyperparameters, and their registry."""

import os

import jax
import numpy as np

from fedjax_clust.core.algorithm import FederatedAlgorithm
from fedjax_clust.core.state import ClientParams, ClientState
from fedjax_clust.core.validation import check_batch_fits
from fedjax_clust.algorithms.cfl import cfl
from fedjax_clust.algorithms.ditto import ditto
from fedjax_clust.algorithms.federated_clustering import federated_clustering
from fedjax_clust.algorithms.fedsoft import fedsoft
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
from fedjax_clust.algorithms.participation import (
    ParticipationRule,
    load_availability,
    participation_rule,
    with_participation,
)
from fedjax_clust.algorithms.srfca import srfca
from fedjax_clust.algorithms.three_stage import three_stage
from fedjax_clust.robust.attacks import make_attack
from fedjax_clust.algorithms.label_flipping import label_classes, with_label_flipping

__all__ = ["ALGORITHMS", "ClientParams", "ClientState", "FederatedAlgorithm", "make_algorithm", "federated_clustering",
           "fixed_clusters", "global_fedavg", "ground_truth", "local", "myopic_clustering", "momentum_clustering",
           "ifca", "hypcluster", "cfl", "ditto", "knn_per", "srfca", "three_stage", "fedsoft", "ATTACKABLE",
           "AGGREGATING"]

# Algorithms whose clients own their models: they accept per-client initial models (ClientParams).
OWN_MODELS = ("federated-clustering", "local", "global", "ground-truth", "myopic-clustering", "momentum-clustering",
              "knn-per")
ALGORITHMS = ("federated-clustering", "local", "global", "ground-truth", "myopic-clustering",
              "momentum-clustering", "ifca-1", "ifca-2", "hypcluster", "cfl", "ditto", "knn-per", "srfca",
              "three-stage", "fedsoft")
# Algorithms whose Byzantine clients can attack (all of them), and those that take a robust aggregator (the ones
# whose server averages messages; the clustering methods' own rule -- SR-FCA's TrMean_beta, FedSoft's weighting,
# FC's threshold clustering -- is their robustness).
ATTACKABLE = ALGORITHMS
AGGREGATING = ("global", "ground-truth", "ifca-1", "ifca-2", "hypcluster", "cfl", "ditto", "knn-per", "three-stage")
_NEEDS_K = ("myopic-clustering", "momentum-clustering", "ifca-1", "ifca-2", "hypcluster", "three-stage", "fedsoft")


def make_algorithm(name: str, task, *, learning_rate: float, momentum: float = 0.0, batch_size=None,
                   momentum_form: str = "heavy-ball", matmul_precision: str = "highest", attack=None,
                   aggregator=None, participation=None, availability=None, **options) -> FederatedAlgorithm:
    """Build algorithm ``name`` (a CLI name, see ``ALGORITHMS``) for ``task``.

    ``options`` are algorithm-specific keyword arguments of the builder (e.g. Federated-Clustering's
    clustering_steps, radius, quantile, local_steps, subgroups, chunk_size, mesh; ``num_clusters`` for the
    K-cluster methods, defaulting to the task's true K). ``momentum`` and ``momentum_form`` apply to the
    algorithms that step client models with SGD (Federated-Clustering, the fixed-partition baselines,
    Myopic-Clustering, kNN-Per's FedAvg model); the others step with plain SGD as in their papers.
    ``matmul_precision`` (default "highest": full float32 on every device) is the precision every matmul
    of the round and the evaluation is traced at (see :class:`FederatedAlgorithm`). On a task with a neural
    model (``task.logits``), IFCA's and HypCluster's K cluster models start from K independent draws of the
    task's initialiser unless ``init_cluster_params`` is given (FedSoft's likewise).

    ``attack``: the attack (a name of :data:`fedjax_clust.robust.ATTACKS` or a function from
    :func:`fedjax_clust.robust.make_attack`) run by the task's Byzantine clients (``task.byzantine``, see
    :func:`fedjax_clust.robust.mark_byzantine`); needed exactly when the task has them. Every algorithm
    takes one (``ATTACKABLE``); "ball-edge" only Federated-Clustering, and "label-flip" (a data attack, see
    :mod:`fedjax_clust.algorithms.label_flipping`) a classification task. ``aggregator``: the robust aggregator
    of the algorithms in ``AGGREGATING`` (a name of :data:`fedjax_clust.robust.AGGREGATORS` or a function from
    :func:`fedjax_clust.robust.make_aggregator`; default the mean; three-stage's default is its TrMean_beta).

    ``participation``: the clients taking part in each round (see
    :mod:`fedjax_clust.algorithms.participation`): a fraction in (0, 1] (a float), a count (an int), or a
    :class:`~fedjax_clust.algorithms.participation.ParticipationRule`; ``availability``: a bool [rounds, N]
    trace of the clients that may take part, or the path of a ``.npy`` file holding one (alone: as many per
    round as the scarcest round has). None (default): every client, every round.
    """
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; expected one of {list(ALGORITHMS)}")
    if attack is not None and task.byzantine is None:
        raise ValueError("an attack needs Byzantine clients: mark them with "
                         "fedjax_clust.robust.mark_byzantine(task, fraction=...) first")
    if attack is None and task.byzantine is not None:
        raise ValueError(f"task {task.name!r} has Byzantine clients: give the attack they run (attack=...)")
    flip_classes = None
    if attack is not None:
        if name not in ATTACKABLE:
            raise ValueError(f"attacks are not yet supported by {name!r}; supported: {list(ATTACKABLE)}")
        attack = make_attack(attack) if isinstance(attack, str) else attack
        if getattr(attack, "on_data", False):  # label flipping: honest messages computed on poisoned data
            flip_classes = label_classes(task, attack.num_classes)
        else:
            options.update(attack=attack, byzantine=np.asarray(task.byzantine, bool))
    if aggregator is not None:
        if name not in AGGREGATING:
            raise ValueError(f"{name!r} takes no aggregator; robust aggregators apply to {list(AGGREGATING)}")
        options["aggregator"] = aggregator
    check_batch_fits(batch_size, jax.tree.leaves(task.data)[0].shape[1])
    rule = None
    if participation is not None or availability is not None:
        rule = _participation_rule(task.num_clients, participation, availability)
    if name == "federated-clustering" and options.get("chunk_size", "auto") == "auto":
        # resolved now, for the clients a round sees (the participants), and recorded in hparams
        options.update(num_clients=task.num_clients if rule is None else rule.size, model_size=_model_size(task))
    algorithm = _build(name, task, learning_rate, momentum, batch_size, momentum_form, options)
    if flip_classes is not None:
        algorithm = with_label_flipping(algorithm, task.byzantine, flip_classes)
    if rule is not None:
        algorithm = with_participation(algorithm, rule)
    return algorithm.with_matmul_precision(matmul_precision)


def _participation_rule(num_clients, participation, availability) -> ParticipationRule:
    if isinstance(availability, (str, os.PathLike)):
        availability = load_availability(os.fspath(availability))
    if isinstance(participation, ParticipationRule):
        if availability is not None:
            raise ValueError("give availability inside the ParticipationRule (participation_rule(..., availability=))")
        return participation
    if isinstance(participation, bool) or not (participation is None or isinstance(participation, (int, float,
                                                                                                   np.integer,
                                                                                                   np.floating))):
        raise ValueError(f"participation must be a fraction in (0, 1], a client count or a ParticipationRule, "
                         f"got {participation!r}")
    if isinstance(participation, (int, np.integer)):
        return participation_rule(num_clients, count=int(participation), availability=availability)
    return participation_rule(num_clients, fraction=participation, availability=availability)


def _model_size(task) -> int:
    """Parameters of one client model of ``task`` (from shapes only, nothing computed)."""
    return sum(int(x.size) for x in jax.tree.leaves(jax.eval_shape(task.init_params, jax.random.PRNGKey(0))))


def _build(name, task, learning_rate, momentum, batch_size, momentum_form, options):
    common = dict(learning_rate=learning_rate, batch_size=batch_size)
    sgd = dict(momentum=momentum, momentum_form=momentum_form)
    if name in _NEEDS_K:
        k = options.pop("num_clusters", None)
        if k is None:
            k = task.num_clusters
        if k is None:
            raise ValueError(f"algorithm {name!r} needs num_clusters; task {task.name!r} has no known clusters")
        if name == "myopic-clustering":
            return myopic_clustering(task.example_loss, k, **sgd, **common, **options)
        if name == "momentum-clustering":
            return momentum_clustering(task.example_loss, k, **common, **options)
        if name == "three-stage":
            return three_stage(task.example_loss, k, **common, **options)
        if name in ("hypcluster", "ifca-1", "ifca-2", "fedsoft") and task.logits is not None \
                and "init_cluster_params" not in options:
            # neural models: K independent draws of the model's own initialiser (as the IFCA paper does);
            # the default "shared start + N(0, init_scale^2) noise" suits the linear tasks' zero start only
            keys = jax.random.split(jax.random.PRNGKey(options.get("seed", 0)), k)
            options["init_cluster_params"] = jax.vmap(task.init_params)(keys)
        if name == "fedsoft":
            return fedsoft(task.example_loss, k, **common, **options)
        if name == "hypcluster":
            return hypcluster(task.example_loss, k, **common, **options)
        return ifca(task.example_loss, k, option=int(name[-1]), **common, **options)
    if name == "federated-clustering":
        return federated_clustering(task.example_loss, **sgd, **common, **options)
    if name == "cfl":
        return cfl(task.example_loss, **common, **options)
    if name == "ditto":
        return ditto(task.example_loss, **common, **options)
    if name == "knn-per":
        return knn_per(task, **sgd, **common, **options)
    if name == "srfca":
        if "threshold" not in options:
            raise ValueError("srfca needs its distance threshold lambda (threshold=..., CLI --threshold)")
        return srfca(task.example_loss, **common, **options)
    robust = {key: options.pop(key) for key in ("attack", "byzantine", "aggregator") if key in options}
    if options:
        raise ValueError(f"algorithm {name!r} takes no options {sorted(options)}")
    common.update(robust)
    if name == "local":
        return local(task.example_loss, task.num_clients, **sgd, **common)
    if name == "global":
        return global_fedavg(task.example_loss, task.num_clients, **sgd, **common)
    if task.true_clusters is None:
        raise ValueError(f"algorithm 'ground-truth' needs a task with known clusters; {task.name!r} has none")
    return ground_truth(task.example_loss, task.true_clusters, **sgd, **common)
