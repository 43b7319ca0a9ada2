"""``fedjax-clust bench``: seconds per round of every algorithm on the synthetic task, against references.

For each N it prints one JSON line per configuration: the jit-compiled vmapped round (median of
``repeats`` timed rounds after warm-up) for Federated-Clustering with the quantile and with a fixed radius,
and for Local, Global and Ground-truth; then, in the same run, the same Federated-Clustering round computed
the way a per-client implementation does it (a Python loop over the N^2 client pairs calling a jitted
per-pair gradient, then a per-client Threshold-Clustering in NumPy), with the speedup. Each line also carries
the FLOPs of the round counted from the algorithm (see ``fc_round_flops``) and the achieved rate against this
machine's float32 matmul rate, measured in the same run.
"""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.algorithms import ALGORITHMS, make_algorithm
from fedjax_clust.algorithms.base import client_loss, sample_minibatch
from fedjax_clust.clustering import quantile_rank
from fedjax_clust.tasks import synthetic_regression

OTHER_OPTIONS = {"momentum-clustering": dict(quantile=0.2)}

__all__ = ["run_benchmarks", "matmul_gflops", "fc_round_flops", "time_round", "pair_loop_round"]


def matmul_gflops(size: int = 1024, repeats: int = 10) -> float:
    """Median float32 GFLOP/s of a jitted [size, size] @ [size, size] matmul on the default device."""
    a = jax.random.normal(jax.random.PRNGKey(0), (size, size), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    jax.block_until_ready(f(a))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(f(a))
        times.append(time.perf_counter() - t)
    return 2 * size ** 3 / statistics.median(times) / 1e9


def fc_round_flops(num_clients: int, batch: int, dim: int, steps: int) -> int:
    """FLOPs of one Federated-Clustering round on the linear-regression task, counted per client pair.

    Cross-gradient of pair (i, j): residual a.x - y and gradient sum_b r_b a_b: 4 B d.
    Threshold-Clustering of row i: z' = z - v_0 and ||z'||^2 once (3 d per pair), then per step z'.u and
    the masked sum m @ z' (4 d per pair) plus the distance/compare/count (~4 per pair).
    The quantile selection's counting passes are integer work and not counted.
    """
    pairs = num_clients * num_clients
    return pairs * (4 * batch * dim + 3 * dim + steps * (4 * dim + 4))


def time_round(algo, task, repeats: int, warmup: int = 3) -> float:
    """Median seconds of ``algo.round`` (jitted) after ``warmup`` rounds."""
    state = algo.init(task.init_params(None), task.num_clients)
    step = jax.jit(algo.round)
    key = jax.random.PRNGKey(0)
    for t in range(warmup):
        state, _ = step(state, task.data, jax.random.fold_in(key, t))
    jax.block_until_ready(state)
    times = []
    for t in range(repeats):
        start = time.perf_counter()
        state, metrics = step(state, task.data, jax.random.fold_in(key, warmup + t))
        jax.block_until_ready((state, metrics))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def pair_loop_round(task, params, batch, *, learning_rate, steps, quantile):
    """One Federated-Clustering round (no momentum) with a Python loop over client pairs: the reference.

    ``params`` is any pytree with a leading client axis; every pair calls one jitted per-pair gradient and
    every row's Threshold-Clustering runs in NumPy on the flattened gradients. Returns the new params.
    """
    from jax.flatten_util import ravel_pytree
    grad = jax.jit(jax.grad(client_loss(task.example_loss)))
    n = jax.tree.leaves(params)[0].shape[0]
    rows = [jax.tree.map(lambda x: x[j], batch) for j in range(n)]
    new = []
    for i in range(n):
        params_i = jax.tree.map(lambda x: x[i], params)
        flat_i, unravel = ravel_pytree(params_i)
        z = np.stack([np.asarray(ravel_pytree(grad(params_i, rows[j]))[0]) for j in range(n)])
        v = z[i].copy()
        k = quantile_rank(n, quantile)
        for _ in range(steps):
            dist = np.linalg.norm(z - v, axis=1)
            tau = np.partition(dist, k - 1)[k - 1]
            inside = dist <= tau
            v = v + (z[inside] - v).sum(0) / n
        new.append(unravel(np.asarray(flat_i) - learning_rate * v))
    return jax.tree.map(lambda *xs: np.stack(xs), *new)


def run_benchmarks(clients=(300,), *, repeats: int = 20, pair_loop_rounds: int = 1, quantile: float = 0.2,
                   clustering_steps: int = 10, learning_rate: float = 0.01, matmul_precision: str = "highest"):
    """Yield one dict per configuration (see the module docstring); every round's matmuls run at
    ``matmul_precision`` (recorded in each row)."""
    matmul = matmul_gflops()
    yield {"benchmark": "matmul_f32_1024", "gflops_per_s": round(matmul, 2), "device": jax.devices()[0].platform}
    for n in clients:
        per_cluster = max(1, n // 4)
        task = synthetic_regression(num_clusters=n // per_cluster, clients_per_cluster=per_cluster)
        n = task.num_clients
        n_samples, dim = task.data["x"].shape[1:]
        flops = fc_round_flops(n, n_samples, dim, clustering_steps)
        fc = dict(clustering_steps=clustering_steps)
        configs = [
            ("federated-clustering", dict(quantile=quantile, **fc), f"quantile={quantile}"),
            ("federated-clustering", dict(radius=50.0, **fc), "radius=50"),
            ("federated-clustering", dict(quantile=quantile, mesh=None, **fc), f"quantile={quantile}"),
            ("federated-clustering", dict(radius=50.0, mesh=None, **fc), "radius=50"),
        ] + [(name, OTHER_OPTIONS.get(name, {}), None) for name in ALGORITHMS
             if name not in ("federated-clustering", "knn-per")]  # kNN-Per needs a task with a feature model
        fc_seconds = None
        for name, options, rule in configs:
            algo = make_algorithm(name, task, learning_rate=learning_rate, momentum=0.9,
                                  matmul_precision=matmul_precision, **options)
            seconds = time_round(algo, task, repeats)
            row = {"algorithm": name, "clients": n, "seconds_per_round": seconds, "implementation": "vmapped-jit",
                   "matmul_precision": matmul_precision}
            if rule is not None:
                row["devices"] = algo.hparams["devices"]
                row.update(radius_rule=rule, clustering_steps=clustering_steps, flops_per_round=flops,
                           gflops_per_s=round(flops / seconds / 1e9, 3),
                           fraction_of_matmul=round(flops / seconds / 1e9 / matmul, 4))
                if fc_seconds is None:
                    fc_seconds = seconds
            yield row
        if pair_loop_rounds > 0:
            params = jnp.zeros((n, dim)) + jax.random.normal(jax.random.PRNGKey(1), (n, dim))
            batch = sample_minibatch(task.data, None, jax.random.PRNGKey(2))
            pair_loop_round(task, params[:2], jax.tree.map(lambda x: x[:2], batch), learning_rate=learning_rate,
                            steps=clustering_steps, quantile=quantile)  # warm-up (compiles the pair gradient)
            times = []
            for _ in range(pair_loop_rounds):
                start = time.perf_counter()
                pair_loop_round(task, params, batch, learning_rate=learning_rate, steps=clustering_steps,
                                quantile=quantile)
                times.append(time.perf_counter() - start)
            loop = statistics.median(times)
            yield {"algorithm": "federated-clustering", "clients": n, "implementation": "python-pair-loop",
                   "radius_rule": f"quantile={quantile}", "seconds_per_round": loop,
                   "speedup_vmapped_vs_loop": round(loop / fc_seconds, 1)}
