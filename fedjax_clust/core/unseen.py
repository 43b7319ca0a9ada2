"""Evaluating clients never seen in training: each algorithm's rule for the model such a client uses.

TFF's and LEAF's held-out test clients are other users than the training clients, and a personalised
algorithm has no model of theirs. An algorithm declares its rule (``FederatedAlgorithm.unseen``, an
:class:`UnseenRule`): a set of *candidate* models taken from its trained state, ``candidates(state)`` with
leaves [M, ...]. An unseen client u splits its examples into *adaptation* examples A_u (the first
``adapt_fraction`` of them, at least one) and *test* examples T_u (the rest, at least one), and uses

    c(u) = argmin_{c < M} f(theta_c; A_u)        (the candidate with the lowest mean loss on A_u)

and is scored on T_u: ``unseen_test_loss`` and, for classifiers, ``unseen_test_accuracy`` are means over the
unseen clients of f(theta_{c(u)}; T_u) and of its accuracy (with ``_std`` spreads). The adaptation examples are
the client's only input: no training step and no gradient, the cheapest "choose a model" protocol (as IFCA's
and HypCluster's own clients choose their cluster by loss). With one candidate (a global model) the choice is
trivial and the score is that model's on T_u, so every algorithm is scored on the same examples.

The rules (our choices, stated per algorithm in :data:`RULES`):

* ``global-model``: the one global model (Global, kNN-Per's FedAvg model, Ditto's global model w: the
  personal models v_i belong to their clients).
* ``best-cluster-model``: the K cluster models (IFCA, HypCluster, FedSoft): the cluster the client's own
  examples choose, as a training client of these algorithms does.
* ``best-client-model``: every trained client's model (Local, Federated-, Myopic-, Momentum-Clustering, CFL,
  SR-FCA, the 3-stage algorithm, Ground-truth, and the default of any algorithm that declares none): the
  trained model that fits the client's adaptation examples best, i.e. "join the nearest client's cluster"
  measured by loss. Its cost is M = N candidates x the unseen clients' examples per evaluation.

The candidates are evaluated one at a time (``lax.map``), so memory holds one candidate's [U, n] losses, never U
gathered models.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from fedjax_clust.core.batching import client_loss, map_clients
from fedjax_clust.core.model_table import client_model, client_models

PyTree = Any

__all__ = ["UnseenRule", "GLOBAL_ROW", "CLIENT_MODELS", "server_models", "unseen_metrics", "RULES"]


class UnseenRule(NamedTuple):
    """``name`` (recorded in a run's summary), ``candidates(state) -> models [M, ...]``, and ``per_client``:
    whether the candidates are the N clients' rows (then Byzantine and outlier clients' models are never
    chosen, as the metrics never count them)."""

    name: str
    candidates: Callable
    per_client: bool = False


def _first_row(state):
    return jax.tree.map(lambda x: x[None], client_model(state.params, 0))


# every row of params holds the global model (Global started from one shared model; with per-client starts,
# init="oracle" / "random", the rows differ and the first client's row stands for it)
GLOBAL_ROW = UnseenRule("global-model", _first_row)
CLIENT_MODELS = UnseenRule("best-client-model", lambda state: client_models(state.params), per_client=True)


def server_models(name: str, key: str, single: bool = False) -> UnseenRule:
    """A rule whose candidates are the server's ``state.extra[key]`` (leaves [M, ...], or one model when
    ``single``)."""
    if single:
        return UnseenRule(name, lambda state: jax.tree.map(lambda x: x[None], state.extra[key]))
    return UnseenRule(name, lambda state: state.extra[key])


RULES = {
    "global-model": "the global model (one candidate)",
    "best-cluster-model": "the cluster model with the lowest loss on the client's adaptation examples",
    "best-client-model": "the trained client model with the lowest loss on the client's adaptation examples",
}


def unseen_metrics(
    example_loss,
    accuracy: Optional[Callable],
    rule: UnseenRule,
    state,
    adapt: PyTree,
    test: PyTree,
    candidate_mask=None,
) -> dict:
    """The ``unseen_*`` metrics of the module docstring; jit-compatible. ``accuracy``: ``(params, batch) ->``
    one client's accuracy (a task's ``client_accuracy``), or None; ``adapt`` / ``test``: the unseen clients'
    adaptation and test examples (padded or ragged, U clients each); ``candidate_mask`` (bool [M], None: all)
    the candidates that may be chosen."""
    loss = client_loss(example_loss)
    candidates = rule.candidates(state)

    def client_scores(model, batch):
        out = {"loss": loss(model, batch)}
        if accuracy is not None:
            out["accuracy"] = accuracy(model, batch)
        return out

    def one_candidate(model):
        fit = map_clients(lambda _, b: loss(model, b), None, adapt)  # [U]
        return jnp.where(jnp.isnan(fit), jnp.inf, fit), map_clients(lambda _, b: client_scores(model, b), None, test)

    fits, scores = jax.lax.map(one_candidate, candidates)  # [M, U], {name: [M, U]}
    if candidate_mask is not None:
        fits = jnp.where(jnp.asarray(candidate_mask)[:, None], fits, jnp.inf)
    choice = jnp.argmin(fits, axis=0)  # [U]
    chosen = jax.tree.map(lambda s: jnp.take_along_axis(s, choice[None, :], axis=0)[0], scores)
    metrics = {"unseen_test_loss": jnp.mean(chosen["loss"]), "unseen_test_loss_std": jnp.std(chosen["loss"])}
    if "accuracy" in chosen:
        metrics["unseen_test_accuracy"] = jnp.mean(chosen["accuracy"])
        metrics["unseen_test_accuracy_std"] = jnp.std(chosen["accuracy"])
    return metrics
