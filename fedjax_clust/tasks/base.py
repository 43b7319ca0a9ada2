"""A task is data + per-example loss + model init (+ true clusters and optima when known).

Algorithms never look inside a task: they receive ``task.example_loss`` and ``task.data``; evaluation,
which may use the known optima, belongs to the task.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.core.batching import client_loss, example_mask, map_clients, masked_example_mean
from fedjax_clust.core.model_table import client_models
from fedjax_clust.core.pytrees import leading_dim
from fedjax_clust.core.validation import is_traced
from fedjax_clust.data.pooled import materialise
from fedjax_clust.ops.metrics import masked_mean, masked_std

PyTree = Any

__all__ = ["Task"]


@dataclasses.dataclass(frozen=True, eq=False)
class Task:
    """One federated task with N clients.

    Attributes:
      name: registry name.
      data: client data, leaves [N, n_samples, ...]. Clients with fewer examples are padded to n_samples
        and a dict dataset carries a bool ``"mask"`` [N, n_samples] marking the real ones (see
        :mod:`fedjax_clust.data`); losses, minibatches and metrics ignore the padding. Or a
        :class:`~fedjax_clust.core.ragged_batch.RaggedBatch` (flat examples, never padded; the natural tasks').
      example_loss: ``(params, example) -> scalar`` for one model and one example.
      init_params: ``key -> params`` of one model; every client starts from the same draw.
      true_clusters: [N] integer cluster of each client, when known.
      optima: per-client optimum x*_{cluster(i)}, a params pytree with leaves [N, ...], when known.
      config: the arguments the task was built from (recorded in results).
      test_data: optional per-client test examples (leaves [N, m, ...]) with inputs "x" and integer labels "y".
      features: optional ``(params, x) -> phi(x)``, the model's feature map (needed by kNN-Per).
      logits: optional ``(params, x) -> class logits``; with ``test_data`` gives ``test_accuracy``.
      example_accuracy: optional ``(params, example) -> score in [0, 1]``, the accuracy of one example where
        it is not one argmax over ``logits`` (a sequence's share of correctly predicted positions); it
        replaces the logits' accuracy in ``test_accuracy``.
      initial_models: optional ``(kind, key) -> params`` with leaves [N, ...]: per-client starting models
        for ``simulate(init=kind)``, kind "oracle" or "random" (see the task's docstring).
      byzantine: optional bool [N], the clients that attack (see :func:`fedjax_clust.robust.mark_byzantine`):
        the algorithms replace what they send by the run's attack, and every metric counts honest
        clients only.
      unseen_data: optional ``{"adapt": ..., "test": ...}``, the examples of U clients never seen in training
        (padded or ragged, U clients each): each unseen client chooses its model by its adaptation examples
        and is scored on its test examples, by the algorithm's rule (:mod:`fedjax_clust.core.unseen`).
      outliers: optional bool [N], clients whose *data* is adversarial (Ghosh et al.'s Byzantine machines, see
        :mod:`fedjax_clust.tasks.mixture_regression`): they follow the protocol on that data, and every metric
        leaves them out, as it leaves out the Byzantine clients.
    """

    name: str
    data: PyTree
    example_loss: Callable
    init_params: Callable
    true_clusters: Optional[np.ndarray] = None
    optima: Optional[PyTree] = None
    config: dict = dataclasses.field(default_factory=dict)
    test_data: Optional[PyTree] = None
    features: Optional[Callable] = None
    logits: Optional[Callable] = None
    initial_models: Optional[Callable] = None
    byzantine: Optional[np.ndarray] = None
    outliers: Optional[np.ndarray] = None
    unseen_data: Optional[dict] = None
    example_accuracy: Optional[Callable] = None

    @property
    def num_clients(self) -> int:
        return leading_dim(self.data, "data")

    @property
    def num_clusters(self) -> Optional[int]:
        return None if self.true_clusters is None else int(np.max(self.true_clusters)) + 1

    @property
    def honest(self) -> Optional[Any]:
        """bool [N]: the clients that are neither Byzantine nor outliers, which the metrics count (None when
        every client counts); a traced array when a mask is one (a sweep's per-run :meth:`masks`), else NumPy."""
        masks = [m for m in (self.byzantine, self.outliers) if m is not None]
        if not masks:
            return None
        if any(is_traced(m) for m in masks):
            traced = jnp.zeros(self.num_clients, bool)
            for mask in masks:
                traced = traced | jnp.asarray(mask, bool)
            return ~traced
        excluded = np.zeros(self.num_clients, bool)
        for mask in masks:
            excluded |= np.asarray(mask, bool)
        return ~excluded

    @property
    def client_accuracy(self) -> Optional[Callable]:
        """``(params, batch) -> accuracy`` of one client's examples (padding excluded): the mean of
        ``example_accuracy`` when the task has one, else of argmax(logits) == y; None without either."""
        if self.example_accuracy is not None:
            per_example = jax.vmap(self.example_accuracy, in_axes=(None, 0))
            return lambda p, batch: masked_example_mean(per_example(p, batch), example_mask(batch))
        if self.logits is None:
            return None
        logits = self.logits

        def accuracy(p, batch):
            correct = jnp.argmax(logits(p, batch["x"]), axis=-1) == batch["y"]
            return masked_example_mean(correct, example_mask(batch))

        return accuracy

    def arrays(self) -> dict:
        """The per-client arrays (``data``, ``test_data``, ``optima``, and ``unseen_data`` when the task has
        it): what a jitted function takes as arguments, vmaps over (a sweep with a task per seed) or shards over
        processes."""
        arrays = {"data": self.data, "test_data": self.test_data, "optima": self.optima}
        if self.unseen_data is not None:
            arrays["unseen_data"] = self.unseen_data
        return arrays

    def masks(self) -> dict:
        """The client masks that decide no shape: ``{"byzantine": bool [N], "outliers": bool [N]}`` (those the
        task has). A compiled program that takes them as arguments (:meth:`with_arrays` reads them back) serves
        every run whose tasks differ only in which clients attack or are outliers (a sweep over seeds and
        attackers' shares, :mod:`fedjax_clust.run.sweep`)."""
        return {
            k: np.asarray(m, bool)
            for k, m in (("byzantine", self.byzantine), ("outliers", self.outliers))
            if m is not None
        }

    def resident(self) -> "Task":
        """The task with every per-client array built (a pooled population's images,
        :mod:`fedjax_clust.data.pooled`) and on the device, what a jitted round over the whole population takes;
        the task itself when it holds arrays only."""
        arrays = self.arrays()
        built = materialise(arrays)
        return self if built is arrays else self.with_arrays(jax.tree.map(jnp.asarray, built))

    def with_arrays(self, arrays: dict) -> "Task":
        """The same task over other per-client arrays of the same structure (e.g. traced ones); ``arrays`` may
        also carry :meth:`masks` (then they replace the task's)."""
        return dataclasses.replace(
            self,
            data=arrays["data"],
            test_data=arrays["test_data"],
            optima=arrays["optima"],
            unseen_data=arrays.get("unseen_data", self.unseen_data),
            byzantine=arrays.get("byzantine", self.byzantine),
            outliers=arrays.get("outliers", self.outliers),
        )

    def evaluate(
        self, params: PyTree, client_mask=None, *, data: PyTree = None, test_data: PyTree = None, optima: PyTree = None
    ) -> dict:
        """Metrics of the clients' own models ``params`` (leaves [N, ...]); jit-compatible.

        ``mean_loss``: mean over clients of the loss on all their local data; with test data ``test_loss``
        and, for classifiers, ``test_accuracy`` (means over clients of each client's own test metric, padding
        excluded), each with its spread over clients (``test_loss_std``, ``test_accuracy_std``). With known
        optima also the paper's metric ``mean_sq_dist_to_optimum`` = mean_i ||x_i - x*_{cluster(i)}||_2^2 and
        ``mean_dist_to_optimum`` = mean_i ||x_i - x*_{cluster(i)}||_2. ``client_mask`` (bool [N]) restricts
        every mean to those clients (``simulate`` passes the clients whose models are finite when a run
        continues past non-finite models). ``data`` / ``test_data`` / ``optima`` replace the task's own arrays
        (same shapes): pass them as arguments of a jitted evaluation so they are not compiled in as constants
        (and, in a multi-process run, because a jitted function cannot close over a global array).
        """
        data = self.data if data is None else data
        test_data = self.test_data if test_data is None else test_data
        optima = self.optima if optima is None else optima
        loss = client_loss(self.example_loss)
        metrics = {"mean_loss": masked_mean(map_clients(loss, params, data), client_mask)}
        if test_data is not None:
            accuracy_of = self.client_accuracy

            def client_test(p, batch):
                out = {"loss": loss(p, batch)}
                if accuracy_of is not None:
                    out["accuracy"] = accuracy_of(p, batch)
                return out

            per_client = map_clients(client_test, params, test_data)
            test_loss = per_client["loss"]
            metrics["test_loss"] = masked_mean(test_loss, client_mask)
            metrics["test_loss_std"] = masked_std(test_loss, client_mask)
            if accuracy_of is not None:
                accuracy = per_client["accuracy"]
                metrics["test_accuracy"] = masked_mean(accuracy, client_mask)
                metrics["test_accuracy_std"] = masked_std(accuracy, client_mask)
        if optima is not None:
            sq = sum(
                jnp.sum(jnp.reshape(jnp.square(p - o), (p.shape[0], -1)), axis=1)
                for p, o in zip(jax.tree.leaves(client_models(params)), jax.tree.leaves(optima))
            )
            metrics["mean_sq_dist_to_optimum"] = masked_mean(sq, client_mask)
            metrics["mean_dist_to_optimum"] = masked_mean(jnp.sqrt(sq), client_mask)
        return metrics
