"""Flower's runner (its own virtual environment: flwr[simulation] with Ray): a ``ClientApp`` whose ``train``
handler does the client's full-batch gradient step in NumPy, a ``ServerApp`` running the Message API's
``flwr.serverapp.strategy.FedAvg`` (example-weighted mean of the returned models; S of the N nodes a round,
``min_train_nodes`` = S; no federated evaluation), all of it through ``flwr.simulation.run_simulation`` with N
virtual SuperNodes on the
Ray backend, one CPU per ClientApp. The round times are the differences between the strategy's
``evaluate_fn`` calls, which it makes before the first round and after each one."""

import importlib.metadata as metadata
import os
import sys
import time

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from flwr.simulation import run_simulation
from peer_common import START, cached_case, load_case, report, save_round1

FOLDER, OUT = sys.argv[1], sys.argv[2]


def gradient(task, arrays, x, y):
    """The mean loss's gradient over the client's examples, by hand in NumPy (float32)."""
    x = np.asarray(x, np.float32)
    n = x.shape[0]
    if task == "synthetic":
        (w,) = arrays
        residual = x @ w - y
        return [x.T @ residual / n]
    w1, b1, w2, b2 = arrays
    pre = x @ w1 + b1
    h = np.maximum(pre, 0)
    logits = h @ w2 + b2
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(n), np.asarray(y)] -= 1
    d_logits = p / n
    d_h = (d_logits @ w2.T) * (pre > 0)
    return [x.T @ d_h, d_h.sum(0), h.T @ d_logits, d_logits.sum(0)]


client = ClientApp()


@client.train()
def train(msg: Message, context: Context) -> Message:
    case, x, y, _ = cached_case(FOLDER)
    i = int(context.node_config["partition-id"])
    arrays = msg.content["arrays"].to_numpy_ndarrays()
    grads = gradient(case["task"], arrays, x[i], y[i])
    new = [(a - case["lr"] * g).astype(np.float32) for a, g in zip(arrays, grads)]
    content = RecordDict({"arrays": ArrayRecord(new), "metrics": MetricRecord({"num-examples": int(x.shape[1])})})
    return Message(content=content, reply_to=msg)


server = ServerApp()
STAMPS = []


@server.main()
def main(grid: Grid, context: Context) -> None:
    case, _, _, params = load_case(FOLDER)

    def stamp(server_round, arrays):
        STAMPS.append(time.perf_counter())
        if server_round == 1:
            save_round1(OUT, arrays.to_numpy_ndarrays())
        return None

    # min_train_nodes = S: FedAvg sizes its sample from the nodes connected when a round starts, before it waits
    # for min_available_nodes; with fraction_train alone the first round of 1,000 SuperNodes trained 524 of them
    strategy = FedAvg(
        fraction_train=case["cohort"] / case["clients"],
        fraction_evaluate=0.0,
        min_train_nodes=case["cohort"],
        min_available_nodes=case["clients"],
    )
    strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord([np.asarray(p) for p in params]),
        num_rounds=case["rounds"],
        evaluate_fn=stamp,
    )


if __name__ == "__main__":
    case, _, _, _ = load_case(FOLDER)
    cpus = os.cpu_count() or 1
    run_simulation(
        server_app=server,
        client_app=client,
        num_supernodes=case["clients"],
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}},
    )
    seconds = np.diff(STAMPS).tolist()
    versions = {p: metadata.version(p) for p in ("flwr", "ray", "numpy")}
    report(
        "flower",
        case,
        seconds,
        interface="flwr.simulation.run_simulation (deprecated in favour of `flwr run`, same engine) with the "
        "Message API's ServerApp / ClientApp and flwr.serverapp.strategy.FedAvg",
        resources=f"Ray backend, one CPU per ClientApp, {cpus} CPUs",
        versions=versions,
        startup_seconds=STAMPS[0] - START if STAMPS else None,
    )
