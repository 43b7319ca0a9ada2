"""``fedjax-clust bench --model mlp``: the FLOP rate of Federated-Clustering's cross-gradient kernel on an MLP.

The scale setting of the paper's neural-network runs: N clients in G random subgroups of S = N / G, every
client's minibatch gradient evaluated at every model of its group (N * S gradients per round), then
Threshold-Clustering of every model's row. The model is the one-hidden-layer tanh MLP of
:mod:`fedjax_clust.tasks.classification` (default 100 inputs, 100 hidden units, 10 classes: 11,110
parameters) on generated data: Gaussian classes shown under cluster-specific label permutations (four
clusters), ``2 B`` samples per client.

For each configuration it prints one JSON line with the median seconds per round after warm-up and the
FLOPs counted per round:

* ``cross-gradients``: the round with ``clustering_steps=0``, i.e. the N * S cross-gradients plus one pass
  over each row for the distances to the client's own gradient (what every clustering step needs first).
  FLOPs: N * S * (F_pair + 3 D), where F_pair is XLA's cost analysis of one client's minibatch gradient at
  one model and D the number of parameters.
* ``federated-clustering``: the full round (``clustering_steps`` M steps with the quantile rule), adding
  N * S * M * 4 D for the two matrix-vector products of every step (the quantile search's counting
  passes are integer work and not counted).

``gflops_per_s`` is the counted FLOPs over the time and ``fraction_of_matmul`` its ratio to a float32
[1024, 1024] matmul (:func:`fedjax_clust.bench.rounds.matmul_gflops`) measured in the same run just before and
just after the configuration's timing, the better of the two (``matmul_gflops_per_s``; the first line is a
reading before any configuration): on a shared machine the matmul rate itself drifts by tens of percent
over a long run, and the higher reading keeps the fraction conservative. Both run with
the clients split over all devices and, when there are several, on one device too (unless
``single_device=False``).
"""

from __future__ import annotations

import jax

from fedjax_clust.algorithms import make_algorithm
from fedjax_clust.bench.rounds import matmul_gflops, time_round
from fedjax_clust.core.batching import client_loss
from fedjax_clust.core.pytrees import num_entries
from fedjax_clust.core.validation import check_int
from fedjax_clust.parallel.memory import peak_memory_bytes
from fedjax_clust.tasks import clustered_classification

__all__ = ["run_mlp_benchmark", "pair_gradient_flops", "mlp_round_flops", "mlp_task"]

NUM_CLUSTERS = 4


def mlp_task(
    num_clients: int, batch_size: int, input_dim: int = 100, hidden: int = 100, classes: int = 10, seed: int = 0
):
    """The generated classification task of the benchmark (``num_clients`` a multiple of 4)."""
    check_int("clients", num_clients, NUM_CLUSTERS)
    if num_clients % NUM_CLUSTERS:
        raise ValueError(f"clients must be a multiple of {NUM_CLUSTERS} (one cluster each), got {num_clients}")
    return clustered_classification(
        num_clusters=NUM_CLUSTERS,
        clients_per_cluster=num_clients // NUM_CLUSTERS,
        samples_per_client=2 * batch_size,
        test_samples_per_client=1,
        num_classes=classes,
        dim=input_dim,
        hidden=hidden,
        seed=seed,
    )


def pair_gradient_flops(example_loss, params, client_batch) -> float:
    """XLA's FLOP count of one client's minibatch gradient at one model (``client_batch`` leaves [B, ...]).

    Counted by XLA:CPU's cost analysis whatever the default device: a GPU's cost analysis counts the
    library calls (cuBLAS) differently, and the count must not depend on the machine.
    """
    cpu = jax.devices("cpu")[0]
    params, client_batch = jax.device_put((params, client_batch), cpu)
    compiled = jax.jit(jax.grad(client_loss(example_loss))).lower(params, client_batch).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float(cost["flops"])


def mlp_round_flops(pair_flops: float, num_params: int, num_clients: int, group_size: int, steps: int) -> dict:
    """Counted FLOPs of one round (module docstring): cross-gradients + distances, and the clustering steps."""
    pairs = num_clients * group_size
    cross = pairs * (pair_flops + 3 * num_params)
    return {"cross-gradients": cross, "federated-clustering": cross + pairs * steps * 4 * num_params}


def run_mlp_benchmark(
    clients: int = 4096,
    *,
    subgroups: int = 16,
    batch_size: int = 32,
    input_dim: int = 100,
    hidden: int = 100,
    classes: int = 10,
    repeats: int = 3,
    clustering_steps: int = 10,
    quantile: float = 0.2,
    single_device: bool = True,
    matmul_precision: str = "highest",
):
    """Yield one dict per configuration (see the module docstring); ``single_device=False`` skips the
    one-device repeats."""
    check_int("subgroups", subgroups, 1)
    check_int("batch_size", batch_size, 1)
    check_int("repeats", repeats, 1)
    check_int("clustering_steps", clustering_steps, 1)
    task = mlp_task(clients, batch_size, input_dim, hidden, classes)
    if subgroups > task.num_clients:
        raise ValueError(f"subgroups={subgroups} must not exceed the number of clients ({task.num_clients})")
    params = task.init_params(None)
    num_params = num_entries(params)
    group_size = -(-task.num_clients // subgroups)
    one_client = jax.tree.map(lambda x: x[0, :batch_size], task.data)
    pair = pair_gradient_flops(task.example_loss, params, one_client)
    flops = mlp_round_flops(pair, num_params, task.num_clients, group_size, clustering_steps)
    matmul = matmul_gflops(precision=matmul_precision)
    yield {
        "benchmark": "matmul_f32",
        "gflops_per_s": round(matmul, 2),
        "device": jax.devices()[0].platform,
        "devices": jax.device_count(),
    }
    meshes = ["auto", None] if single_device and jax.device_count() > 1 else ["auto"]
    for kernel, steps in [("cross-gradients", 0), ("federated-clustering", clustering_steps)]:
        for mesh in meshes:
            algo = make_algorithm(
                "federated-clustering",
                task,
                learning_rate=0.1,
                momentum=0.9,
                batch_size=batch_size,
                quantile=quantile,
                clustering_steps=steps,
                subgroups=subgroups,
                mesh=mesh,
                matmul_precision=matmul_precision,
            )
            before = matmul_gflops(precision=matmul_precision)
            seconds = time_round(algo, task, repeats, warmup=1)
            matmul = max(
                before, matmul_gflops(precision=matmul_precision)
            )  # the better of the readings around the timing
            rate = flops[kernel] / seconds / 1e9
            yield {
                "benchmark": f"mlp-{kernel}",
                "clients": task.num_clients,
                "subgroups": subgroups,
                "group_size": group_size,
                "batch_size": batch_size,
                "params": num_params,
                "clustering_steps": steps,
                "devices": algo.execution.devices,
                "seconds_per_round": seconds,
                "matmul_precision": matmul_precision,
                "pair_gradient_flops": pair,
                "flops_per_round": flops[kernel],
                "gflops_per_s": round(rate, 2),
                "matmul_gflops_per_s": round(matmul, 2),
                "fraction_of_matmul": round(rate / matmul, 4),
                "peak_bytes": peak_memory_bytes(),
            }
