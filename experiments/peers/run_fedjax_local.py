"""FedJAX's FedAvg with local epochs (its own virtual environment): ``fed_avg.federated_averaging`` with client SGD
at the case's learning rate over ``--epochs`` epochs in batches of ``--batch`` (``skip_shuffle``: each client's
examples in stored order), the example-weighted mean delta, and a server SGD at ``--server-lr`` with
``--server-momentum`` (0: FedAvg; > 0: FedAvgM), or with ``--server-optimizer adam`` FedJAX's Adam (optax's:
bias-corrected) at ``--server-lr`` with beta_1 ``--server-momentum``, ``--server-beta2`` and ``--server-eps``. Every
client takes part in every round, in client order. Saves the
model after each round of ``--save`` and prints the rounds' seconds."""

import argparse
import importlib.metadata as metadata
import time

import fedjax
import jax
import numpy as np
from fedjax.algorithms import fed_avg
from peer_common import START, load_case, report
from run_fedjax import model_of


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("case")
    parser.add_argument("out")
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--server-lr", type=float, default=1.0)
    parser.add_argument("--server-momentum", type=float, default=0.0)
    parser.add_argument("--server-optimizer", choices=("sgd", "adam"), default="sgd")
    parser.add_argument("--server-beta2", type=float, default=0.999)
    parser.add_argument("--server-eps", type=float, default=1e-8)
    parser.add_argument("--save", default="1,3")
    args = parser.parse_args()
    case, x, y, arrays = load_case(args.case)
    ids = [f"{i:07d}".encode() for i in range(case["clients"])]
    data = fedjax.InMemoryFederatedData({c: {"x": np.asarray(x[i]), "y": np.asarray(y[i])} for i, c in enumerate(ids)})
    model, params, to_arrays = model_of(case, arrays)
    momentum = args.server_momentum or None
    if args.server_optimizer == "adam":
        server = fedjax.optimizers.adam(
            args.server_lr, b1=args.server_momentum, b2=args.server_beta2, eps=args.server_eps
        )
    else:
        server = fedjax.optimizers.sgd(args.server_lr, momentum=momentum)
    algorithm = fed_avg.federated_averaging(
        grad_fn=fedjax.model_grad(model),
        client_optimizer=fedjax.optimizers.sgd(case["lr"]),
        server_optimizer=server,
        client_batch_hparams=fedjax.ShuffleRepeatBatchHParams(
            batch_size=args.batch, num_epochs=args.epochs, drop_remainder=False, skip_shuffle=True
        ),
    )
    state = algorithm.init(params)
    saves = {int(r) for r in args.save.split(",")}
    ready = time.perf_counter()
    seconds = []
    for r in range(1, case["rounds"] + 1):
        tic = time.perf_counter()
        clients = [(c, data.get_client(c), jax.random.PRNGKey(0)) for c in ids]
        state, _ = algorithm.apply(state, clients)
        jax.block_until_ready(state.params)
        seconds.append(time.perf_counter() - tic)
        if r in saves:
            np.savez(f"{args.out}/round{r}.npz", *[np.asarray(a) for a in to_arrays(state.params)])
    versions = {p: metadata.version(p) for p in ("fedjax", "jax", "jaxlib", "dm-haiku", "optax", "numpy")}
    report(
        "fedjax",
        case,
        seconds,
        interface="fed_avg.federated_averaging, local epochs, skip_shuffle",
        resources=f"one process, JAX on {jax.devices()[0].platform}",
        versions=versions,
        startup_seconds=ready - START,
    )


if __name__ == "__main__":
    main()
