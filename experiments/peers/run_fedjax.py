"""FedJAX's runner (its own virtual environment: fedjax 0.0.17 on the older JAX it needs): the model built with
Haiku through ``fedjax.create_model_from_haiku``, the clients an ``InMemoryFederatedData``, FedAvg
``fedjax.algorithms.fed_avg.federated_averaging`` with client SGD at the case's learning rate, one full-batch
step (batch size n, one epoch), server SGD at 1 (the server subtracts the example-weighted mean delta), cohorts
drawn by ``UniformGetClientSampler``."""

import importlib.metadata as metadata
import sys
import time

import fedjax
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
from fedjax.algorithms import fed_avg
from peer_common import START, load_case, report, save_round1


def model_of(case, arrays):
    """(fedjax Model, its initial params as Haiku lays them out, a function params -> the case's arrays)."""
    if case["task"] == "synthetic":

        def forward(batch):
            return hk.Linear(1, with_bias=False, name="linear")(batch["x"])[..., 0]

        def loss(batch, preds):
            return 0.5 * jnp.square(preds - batch["y"])

        params = {"linear": {"w": jnp.asarray(arrays[0])[:, None]}}
        to_arrays = lambda p: [np.asarray(p["linear"]["w"])[:, 0]]  # noqa: E731
        sample = {"x": np.zeros((1, arrays[0].shape[0]), np.float32), "y": np.zeros((1,), np.float32)}
    else:

        def forward(batch):
            h = jax.nn.relu(hk.Linear(arrays[0].shape[1], name="hidden")(batch["x"]))
            return hk.Linear(arrays[2].shape[1], name="out")(h)

        def loss(batch, preds):
            return jax.nn.logsumexp(preds, axis=-1) - jnp.take_along_axis(preds, batch["y"][..., None], -1)[..., 0]

        params = {
            "hidden": {"w": jnp.asarray(arrays[0]), "b": jnp.asarray(arrays[1])},
            "out": {"w": jnp.asarray(arrays[2]), "b": jnp.asarray(arrays[3])},
        }
        to_arrays = lambda p: [
            np.asarray(p["hidden"]["w"]),
            np.asarray(p["hidden"]["b"]),  # noqa: E731
            np.asarray(p["out"]["w"]),
            np.asarray(p["out"]["b"]),
        ]
        sample = {"x": np.zeros((1, arrays[0].shape[0]), np.float32), "y": np.zeros((1,), np.int32)}
    transformed = hk.transform(forward)
    model = fedjax.create_model_from_haiku(transformed_forward_pass=transformed, sample_batch=sample, train_loss=loss)
    return model, params, to_arrays


def main(folder, out):
    case, x, y, arrays = load_case(folder)
    n = x.shape[1]
    clients = {f"{i:07d}".encode(): {"x": np.asarray(x[i]), "y": np.asarray(y[i])} for i in range(case["clients"])}
    data = fedjax.InMemoryFederatedData(clients)
    model, params, to_arrays = model_of(case, arrays)
    algorithm = fed_avg.federated_averaging(
        grad_fn=fedjax.model_grad(model),
        client_optimizer=fedjax.optimizers.sgd(case["lr"]),
        server_optimizer=fedjax.optimizers.sgd(1.0),
        client_batch_hparams=fedjax.ShuffleRepeatBatchHParams(batch_size=n, num_epochs=1, drop_remainder=False),
    )
    state = algorithm.init(params)
    sampler = fedjax.client_samplers.UniformGetClientSampler(data, case["cohort"], seed=0)
    ready = time.perf_counter()
    seconds = []
    for r in range(case["rounds"]):
        tic = time.perf_counter()
        chosen = sampler.sample()
        state, _ = algorithm.apply(state, chosen)
        jax.block_until_ready(state.params)
        seconds.append(time.perf_counter() - tic)
        if r == 0:
            save_round1(out, to_arrays(state.params))
    versions = {p: metadata.version(p) for p in ("fedjax", "jax", "jaxlib", "dm-haiku", "optax", "numpy")}
    report(
        "fedjax",
        case,
        seconds,
        interface="fedjax.algorithms.fed_avg.federated_averaging over InMemoryFederatedData, "
        "UniformGetClientSampler, the default for_each_client backend",
        resources=f"one process, JAX on {jax.devices()[0].platform} ({jax.device_count()} device(s))",
        versions=versions,
        startup_seconds=ready - START,
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
