"""``fedjax-clust bench --model cnn``: one Federated-Clustering round on the MNIST rotation task with a
Flax model, at the paper's size: N = 300 clients in 16 random subgroups, minibatch 32, 10 clustering steps
with the 20th-percentile radius (Werner et al. §4.2).

Data: the 5,000 real MNIST images that ship offline; each client draws 2 B of them (the pool is too small
to give 300 clients disjoint minibatches of 32, and the benchmark measures compute, not learning), and
cluster k sees them rotated by k * 90 degrees. Rows printed (JSON lines):

* ``matmul_f32``: this machine's float32 matmul rate, read before the configurations;
* ``images-cross-gradients``: the round with ``clustering_steps=0`` (the N * S cross-gradients and the
  distances to the client's own gradient);
* ``images-federated-clustering``: the full round;
* ``images-conv-forms`` (models with convolutions): the minibatch gradients of ``conv_models`` client models
  at once (vmapped over the models, each on its own B examples), with the convolutions as patch x kernel
  matmuls (the default, ``make_model(..., conv="patches")``) and as XLA's convolution (``conv="lax"``,
  which vmapped over the models becomes a grouped convolution): seconds, GFLOP/s (the patch form's
  counted FLOPs for both) and the largest difference of the two gradients.

FLOPs per round are counted as in :mod:`fedjax_clust.bench.mlp` (XLA's cost analysis of one pair gradient,
N * S pairs) and compared with the matmul rate read around each timing (``fraction_of_matmul``), with the
peak memory of the process (or device). Then the same round at ``loop_clients`` clients and one group,
vmapped and as a per-client Python loop of jitted pair gradients (:func:`fedjax_clust.bench.rounds.pair_loop_round`),
with the speedup.
"""

from __future__ import annotations

import statistics
import time

import jax
import numpy as np

from fedjax_clust.algorithms import make_algorithm
from fedjax_clust.bench.mlp import mlp_round_flops, pair_gradient_flops
from fedjax_clust.bench.rounds import matmul_gflops, pair_loop_round, time_round
from fedjax_clust.core.batching import client_loss, sample_minibatch
from fedjax_clust.core.pytrees import num_entries
from fedjax_clust.core.validation import check_int
from fedjax_clust.cost.roofline import median_seconds
from fedjax_clust.data import from_client_lists, load_source, rotate, standardize
from fedjax_clust.models.zoo import make_model
from fedjax_clust.parallel.memory import peak_memory_bytes
from fedjax_clust.tasks.images import federated_image_task

__all__ = ["benchmark_image_task", "run_image_benchmark", "conv_forms_row"]

NUM_CLUSTERS = 4


def benchmark_image_task(num_clients: int, batch_size: int, model="cnn", seed: int = 0):
    """The rotation task of the benchmark: ``num_clients`` (a multiple of 4) x 2 B real MNIST images
    (``model``: a built-in model's name or a :class:`~fedjax_clust.models.Model`)."""
    check_int("clients", num_clients, NUM_CLUSTERS)
    if num_clients % NUM_CLUSTERS:
        raise ValueError(f"clients must be a multiple of {NUM_CLUSTERS} (one cluster each), got {num_clients}")
    pool = load_source("mnist-5k")
    rng = np.random.default_rng(seed)
    train, test = [], []
    for i in range(num_clients):
        idx = rng.choice(len(pool.labels), 2 * batch_size + 1, replace=False)
        x = rotate(pool.images[idx], i * NUM_CLUSTERS // num_clients)
        train.append({"x": x[:-1], "y": pool.labels[idx[:-1]]})
        test.append({"x": x[-1:], "y": pool.labels[idx[-1:]]})
    clusters = np.arange(num_clients) * NUM_CLUSTERS // num_clients
    data = standardize(from_client_lists(train, test, clusters, pool.num_classes, layout="padded"))
    return federated_image_task(data, model, name="mnist-rotation-bench")


def conv_forms_row(
    model: str = "cnn",
    *,
    conv_models: int = 40,
    batch_size: int = 32,
    repeats: int = 3,
    matmul_precision: str = "highest",
) -> dict:
    """The ``images-conv-forms`` row (module docstring): ``conv_models`` (a multiple of 4) models' gradients
    with the convolutions as patch matmuls and as XLA's convolution, same parameters and minibatches."""
    check_int("conv_models", conv_models, NUM_CLUSTERS)
    pool = load_source("mnist-5k")
    shape, classes = pool.images.shape[1:], pool.num_classes  # [H, W, C]
    row = {
        "benchmark": "images-conv-forms",
        "model": model,
        "models": conv_models,
        "batch_size": batch_size,
        "matmul_precision": matmul_precision,
        "device": jax.devices()[0].platform,
    }
    grads = {}
    for form in ("patches", "lax"):
        task = benchmark_image_task(conv_models, batch_size, make_model(model, shape, classes, conv=form))
        params = jax.vmap(task.init_params)(jax.random.split(jax.random.PRNGKey(0), conv_models))
        batch = sample_minibatch(task.data, batch_size, jax.random.PRNGKey(1))
        gradient = jax.jit(jax.vmap(jax.grad(client_loss(task.example_loss))))
        with jax.default_matmul_precision(matmul_precision):
            seconds = median_seconds(gradient, params, batch, repeats=repeats)
            grads[form] = gradient(params, batch)
        if form == "patches":
            one = jax.tree.map(lambda x: x[0], (params, batch))
            row["flops"] = conv_models * pair_gradient_flops(task.example_loss, *one)
        row[f"seconds_{form}"] = seconds
        row[f"gflops_per_s_{form}"] = round(row["flops"] / seconds / 1e9, 2)
    row["speedup_patches_vs_lax"] = round(row["seconds_lax"] / row["seconds_patches"], 2)
    row["max_abs_gradient_difference"] = float(
        max(
            np.max(np.abs(np.asarray(a) - np.asarray(b)))
            for a, b in zip(jax.tree.leaves(grads["patches"]), jax.tree.leaves(grads["lax"]))
        )
    )
    return row


def run_image_benchmark(
    clients: int = 300,
    *,
    subgroups: int = 16,
    batch_size: int = 32,
    model: str = "cnn",
    repeats: int = 3,
    clustering_steps: int = 10,
    quantile: float = 0.2,
    loop_clients: int = 16,
    conv_models: int = 40,
    matmul_precision: str = "highest",
):
    """Yield one dict per configuration (see the module docstring); ``loop_clients=0`` skips the loop,
    ``conv_models=0`` the convolution forms (skipped for a model without convolutions)."""
    check_int("subgroups", subgroups, 1)
    check_int("batch_size", batch_size, 1)
    check_int("repeats", repeats, 1)
    check_int("clustering_steps", clustering_steps, 1)
    check_int("loop_clients", loop_clients, 0)
    check_int("conv_models", conv_models, 0)
    if conv_models % NUM_CLUSTERS:
        raise ValueError(f"conv_models must be a multiple of {NUM_CLUSTERS} (one cluster each), got {conv_models}")
    task = benchmark_image_task(clients, batch_size, model)
    if subgroups > task.num_clients:
        raise ValueError(f"subgroups={subgroups} must not exceed the number of clients ({task.num_clients})")
    params = task.init_params(jax.random.PRNGKey(0))
    num_params = num_entries(params)
    group_size = -(-task.num_clients // subgroups)
    one_client = jax.tree.map(lambda x: x[0, :batch_size], task.data)
    pair = pair_gradient_flops(task.example_loss, params, one_client)
    flops = mlp_round_flops(pair, num_params, task.num_clients, group_size, clustering_steps)
    yield {
        "benchmark": "matmul_f32",
        "gflops_per_s": round(matmul_gflops(precision=matmul_precision), 2),
        "device": jax.devices()[0].platform,
        "devices": jax.device_count(),
    }
    common = dict(
        learning_rate=0.1, momentum=0.9, batch_size=batch_size, quantile=quantile, matmul_precision=matmul_precision
    )
    for kernel, steps in [("cross-gradients", 0), ("federated-clustering", clustering_steps)]:
        algo = make_algorithm("federated-clustering", task, clustering_steps=steps, subgroups=subgroups, **common)
        before = matmul_gflops(precision=matmul_precision)
        seconds = time_round(algo, task, repeats, warmup=1)
        matmul = max(before, matmul_gflops(precision=matmul_precision))
        rate = flops[kernel] / seconds / 1e9
        yield {
            "benchmark": f"images-{kernel}",
            "model": model,
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
    if conv_models and model != "mlp":
        yield conv_forms_row(
            model, conv_models=conv_models, batch_size=batch_size, repeats=repeats, matmul_precision=matmul_precision
        )
    if loop_clients:
        small = benchmark_image_task(loop_clients, batch_size, model)
        algo = make_algorithm(
            "federated-clustering", small, clustering_steps=clustering_steps, subgroups=1, **{**common, "momentum": 0.0}
        )
        vmapped = time_round(algo, small, repeats, warmup=1)
        stacked = jax.vmap(small.init_params)(jax.random.split(jax.random.PRNGKey(0), loop_clients))
        batch = sample_minibatch(small.data, batch_size, jax.random.PRNGKey(1))
        with jax.default_matmul_precision(matmul_precision):
            pair_loop_round(
                small,
                jax.tree.map(lambda x: x[:2], stacked),
                jax.tree.map(lambda x: x[:2], batch),
                learning_rate=0.1,
                steps=clustering_steps,
                quantile=quantile,
            )  # compiles
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                pair_loop_round(small, stacked, batch, learning_rate=0.1, steps=clustering_steps, quantile=quantile)
                times.append(time.perf_counter() - start)
        loop = statistics.median(times)
        yield {
            "benchmark": "images-federated-clustering-loop",
            "model": model,
            "clients": loop_clients,
            "subgroups": 1,
            "batch_size": batch_size,
            "seconds_per_round_vmapped": vmapped,
            "seconds_per_round_python_loop": loop,
            "speedup_vmapped_vs_loop": round(loop / vmapped, 1),
        }
