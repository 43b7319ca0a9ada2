"""kNN-Per (Marfoq, Neglia, Vidal, Kameni, Kameni 2022), a baseline of Werner et al. §4.2.

A global model w is trained with FedAvg (one local step per round); personalisation happens at prediction
time: client i predicts

    p_i(x) = lambda * p_kNN,i(x) + (1 - lambda) * softmax(logits_w(x)),

where p_kNN,i(x) is the label histogram of the ``k`` nearest neighbours of phi_w(x) among client i's own
training points in the global model's feature space phi_w (uniform weights). The paper used lambda = 0.5
(rotation) and 0.9 (private labels). It needs a task with a feature model (``task.features``,
``task.logits``) and test data; other tasks are refused with a ValueError.
"""

from __future__ import annotations

from typing import Optional, Union

import jax
import jax.numpy as jnp
from jax import lax

from fedjax_clust.algorithms.fixed_clusters import global_fedavg
from fedjax_clust.algorithms.registry import AlgorithmSpec
from fedjax_clust.core.algorithm import FederatedAlgorithm
from fedjax_clust.core.batching import example_mask, largest_client, masked_example_mean, padded_batch
from fedjax_clust.core.model_table import client_model
from fedjax_clust.core.optim import DEFAULT_MOMENTUM, MomentumForm
from fedjax_clust.core.option_groups import take_legacy
from fedjax_clust.core.validation import check_int, check_real
from fedjax_clust.core.weighting import ClientWeights
from fedjax_clust.ops.metrics import masked_mean, masked_std
from fedjax_clust.robust.adversary import NO_ATTACKERS, Attackers

__all__ = ["knn_per", "knn_interpolated_probs"]


def knn_interpolated_probs(features, logits, params, train, test_x, *, k: int, lam: float):
    """p_i(x) for every client's test inputs: [N, m, C] (see the module docstring).

    Padding of uneven clients (``train["mask"]``) never becomes a neighbour: a client with fewer than ``k``
    real training points votes with all of them (the histogram is normalised by the real neighbours).
    """
    mask = example_mask(train)
    if mask is None:
        mask = jnp.ones(train["y"].shape, bool)

    def one_client(train_x, train_y, real, query_x):
        keys = features(params, train_x)  # [n, H]
        queries = features(params, query_x)  # [m, H]
        # ||q - k||^2 = ||q||^2 - 2 q.k + ||k||^2: an [m, n] matmul, never an [m, n, H] difference tensor
        sq = jnp.sum(jnp.square(queries), -1)[:, None] - 2.0 * queries @ keys.T + jnp.sum(jnp.square(keys), -1)[None, :]
        sq = jnp.where(real[None, :], sq, jnp.inf)
        _, nearest = lax.top_k(-sq, k)  # [m, k]
        model_probs = jax.nn.softmax(logits(params, query_x), axis=-1)
        weight = real[nearest].astype(model_probs.dtype)[..., None]  # [m, k, 1]
        hist = jnp.sum(weight * jax.nn.one_hot(train_y[nearest], model_probs.shape[-1]), axis=-2)
        votes = hist / jnp.maximum(jnp.sum(weight, axis=-2), 1.0)
        return lam * votes + (1.0 - lam) * model_probs

    return jax.vmap(one_client)(train["x"], train["y"], mask, test_x)


def knn_per(
    task,
    *,
    learning_rate: float,
    momentum: float = DEFAULT_MOMENTUM,
    momentum_form: MomentumForm = "heavy-ball",
    batch_size: Optional[int] = None,
    lam: float = 0.5,
    k: int = 5,
    aggregator="mean",
    attackers: Attackers = NO_ATTACKERS,
    weighting: Union[str, ClientWeights] = "uniform",
    **legacy,
) -> FederatedAlgorithm:
    """kNN-Per on ``task`` (which must have ``features``, ``logits`` and ``test_data``).

    Args:
      lam: lambda_knn, the weight of the kNN prediction in the interpolation with the FedAvg model's.
      k: the number of neighbours of the local kNN.
      weighting: the clients' weights in the FedAvg model's mean gradient ("uniform", default, or
        ClientWeights; see :func:`~fedjax_clust.algorithms.fixed_clusters.fixed_clusters`).
    """
    (attackers,) = take_legacy("knn_per", legacy, attackers=attackers)
    missing = [name for name in ("features", "logits", "test_data") if getattr(task, name) is None]
    if missing:
        raise ValueError(
            f"kNN-Per needs a task with a feature model and test data; task {task.name!r} has no {', '.join(missing)}"
        )
    check_real("lam", lam, low=0.0, high=1.0)
    n_train = largest_client(task.data)
    k = check_int("k", k, 1, n_train)  # at most the samples per client
    base = global_fedavg(
        task.example_loss,
        task.num_clients,
        learning_rate=learning_rate,
        momentum=momentum,
        momentum_form=momentum_form,
        batch_size=batch_size,
        aggregator=aggregator,
        attackers=attackers,
        weighting=weighting,
    )

    def evaluate(state, client_mask, data, test_data):
        # every client's neighbours among its own training points: ragged data are padded to the largest client
        data, test_data = padded_batch(data), padded_batch(test_data)
        metrics = task.evaluate(state.params, client_mask, data=data, test_data=test_data)  # the global model
        w = client_model(state.params, 0)  # FedAvg's one model
        probs = knn_interpolated_probs(task.features, task.logits, w, data, test_data["x"], k=k, lam=lam)
        y = test_data["y"]
        picked = jnp.take_along_axis(probs, y[..., None], axis=-1)[..., 0]
        test_mask = example_mask(test_data)
        accuracy = masked_example_mean(jnp.argmax(probs, axis=-1) == y, test_mask)
        loss = masked_example_mean(-jnp.log(jnp.maximum(picked, 1e-12)), test_mask)
        return {
            **metrics,
            "global_test_accuracy": metrics["test_accuracy"],
            "test_accuracy": masked_mean(accuracy, client_mask),
            "test_loss": masked_mean(loss, client_mask),
            "test_accuracy_std": masked_std(accuracy, client_mask),
            "test_loss_std": masked_std(loss, client_mask),
        }

    hparams = {**base.hparams, "lam": lam, "k": k}
    return base._replace(name="knn-per", hparams=hparams, evaluate_fn=evaluate)


SPECS = (
    AlgorithmSpec(
        "knn-per",
        knn_per,
        owns_models=True,
        flags={"lam": "knn-lambda", "k": "knn-k"},
        summary="kNN-Per (Marfoq et al. 2022): a FedAvg model interpolated with a local kNN",
    ),
)
