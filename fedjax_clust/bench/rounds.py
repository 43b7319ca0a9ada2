"""``fedjax-clust bench``: seconds per round of every algorithm on the synthetic task, against references.

The first line is the device's references, measured in the same run: the float32 matmul rate (a matmul
large enough to reach it, at the kernels' precision) and the streaming copy bandwidth. Then for each N one
JSON line per configuration: the jit-compiled vmapped round (median of ``repeats`` timed rounds after
warm-up, each launched from Python) and the same round fused into a compiled loop of rounds as ``simulate``
runs it (``fused_seconds_per_round``: a call of ~0.2 s worth of rounds divided by its rounds) for
Federated-Clustering with the quantile rule (both selections of the k-th distance, the
bracketed search and the fixed-pass radix select) and with a fixed radius, on all devices and on one,
and for every other algorithm; then, in the same run, the same Federated-Clustering round computed
the way a per-client implementation does it (a Python loop over the N^2 client pairs calling a jitted
per-pair gradient, then a per-client Threshold-Clustering in NumPy), with the speedup. Each line also carries
the FLOPs of the round counted from the algorithm (see ``fc_round_flops``) and the achieved rate against this
machine's float32 matmul rate, and the fixed-radius lines the bytes the round must move (``fc_round_bytes``)
and the achieved bandwidth against the copy's.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.algorithms import ALGORITHMS, algorithm_spec, make_algorithm
from fedjax_clust.algorithms.settings import grouped_settings
from fedjax_clust.core.batching import client_loss, sample_minibatch
from fedjax_clust.cost.roofline import matmul_gflops, matmul_size, median_seconds
from fedjax_clust.ops.clustering import quantile_rank
from fedjax_clust.ops.order_stats import kth_smallest_keys, order_keys
from fedjax_clust.parallel.memory import peak_memory_bytes
from fedjax_clust.run.fused import donatable, rounds_program
from fedjax_clust.tasks import synthetic_regression

# SR-FCA measured where every round after the first is a REFINE step's last round (TrimmedMeanGD, RECLUSTER and
# MERGE): its costliest round
MEASURED_STAGE = {"srfca": dict(one_shot_rounds=1, refine_steps=1 << 30, refine_iterations=1)}


def bench_options(name: str) -> dict:
    """The options an algorithm is benchmarked with: its spec's example options (a required threshold, a
    rule) and the stage the benchmark measures."""
    return {**algorithm_spec(name).example_options, **MEASURED_STAGE.get(name, {})}


__all__ = [
    "run_benchmarks",
    "bench_options",
    "run_participation_benchmarks",
    "run_srfca_benchmarks",
    "srfca_sweep_row",
    "compiled_peak_bytes",
    "matmul_gflops",
    "copy_gbytes_per_s",
    "fc_round_flops",
    "fc_round_bytes",
    "time_round",
    "time_fused_round",
    "pair_loop_round",
]


COPY_BYTES = {"cpu": 1 << 28}  # 256 MB (past the caches); 2 GB on an accelerator


def copy_gbytes_per_s(num_bytes: Optional[int] = None, repeats: int = 10) -> float:
    """Median GB/s of a device-to-device streaming copy (y = x + 1 over a float32 array: every byte read
    once and written once, counted twice); ``num_bytes`` defaults to 256 MB on a CPU, 2 GB elsewhere."""
    num_bytes = num_bytes or COPY_BYTES.get(jax.default_backend(), 1 << 31)
    x = jnp.zeros((num_bytes // 4,), jnp.float32)
    f = jax.jit(lambda v: v + 1.0)
    return 2 * num_bytes / median_seconds(f, x, repeats=repeats) / 1e9


def fc_round_flops(num_clients: int, batch: int, dim: int, steps: int, group_size: Optional[int] = None) -> int:
    """FLOPs of one Federated-Clustering round on the linear-regression task, counted per client pair
    (N x S pairs: S = N, or the subgroup size ``group_size``).

    Cross-gradient of pair (i, j): residual a.x - y and gradient sum_b r_b a_b: 4 B d.
    Threshold-Clustering of row i: z' = z - v_0 and ||z'||^2 once (3 d per pair), then per step z'.u and
    the masked sum m @ z' (4 d per pair) plus the distance/compare/count (~4 per pair).
    The quantile selection's counting passes are integer work and not counted.
    """
    pairs = num_clients * (group_size or num_clients)
    return pairs * (4 * batch * dim + 3 * dim + steps * (4 * dim + 4))


def fc_round_bytes(num_clients: int, dim: int, steps: int, group_size: Optional[int] = None) -> int:
    """Bytes one fixed-radius Federated-Clustering round must move through memory, per client pair
    (float32): the cross-gradient written once (4 d) and, every step, read by the two matrix-vector
    products (8 d) and its squared distance written and read back for the ball (8). Everything else (the
    data, one [B, d] block per client; the models) is O(N), not O(N^2). A kernel that kept a row's
    gradients in cache across the steps would move less; this is the count of the algorithm as written.
    With subgroups there are N x S pairs (``group_size`` S).
    """
    return num_clients * (group_size or num_clients) * (4 * dim + steps * (8 * dim + 8))


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


def time_fused_round(algo, task, repeats: int, call_seconds: float = 0.2, single_round_seconds=None):
    """(median seconds per round, rounds per call) when the rounds run fused in one compiled loop
    (:func:`fedjax_clust.run.fused.rounds_program`, the program ``simulate`` runs, its numbers arguments): each
    timed call runs about ``call_seconds`` worth of rounds (from ``single_round_seconds``, at most 1000), after a
    warm-up call."""
    rounds = 100 if single_round_seconds is None else int(call_seconds / max(single_round_seconds, 1e-6))
    rounds = max(1, min(rounds, 1000))
    run, before = rounds_program(algo)
    state = donatable(algo.init(task.init_params(None), task.num_clients), task.data, before)
    key = jax.random.PRNGKey(0)
    state, _ = jax.block_until_ready(run(*before, state, task.data, key, 1, rounds))
    times = []
    for r in range(repeats):
        start = time.perf_counter()
        state, metrics = run(*before, state, task.data, key, 1 + (r + 1) * rounds, rounds)
        jax.block_until_ready((state, metrics))
        times.append((time.perf_counter() - start) / rounds)
    return statistics.median(times), rounds


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


def run_benchmarks(
    clients=(300,),
    *,
    repeats: int = 20,
    pair_loop_rounds: int = 1,
    quantile: float = 0.2,
    clustering_steps: int = 10,
    learning_rate: float = 0.01,
    matmul_precision: str = "highest",
    others: Optional[tuple] = None,
    subgroups: int = 1,
):
    """Yield one dict per configuration (see the module docstring); every round's matmuls run at
    ``matmul_precision`` (recorded in each row), as does the reference matmul. ``others``: the algorithms
    timed beside Federated-Clustering (default: all but kNN-Per, which needs a task with a feature model;
    ``()``: none). ``subgroups``: G random groups per round for Federated-Clustering (the scale
    frontier: N x N / G cross-gradients; the pair-loop reference is then skipped)."""
    if any(subgroups > n for n in clients):
        raise ValueError(f"subgroups={subgroups} must not exceed any client count, got clients={list(clients)}")
    matmul = matmul_gflops(precision=matmul_precision)
    copy = copy_gbytes_per_s()
    device = jax.devices()[0]
    yield {
        "benchmark": "reference",
        "device": device.platform,
        "device_kind": device.device_kind,
        "matmul_size": matmul_size(),
        "matmul_precision": matmul_precision,
        "matmul_gflops_per_s": round(matmul, 2),
        "copy_gbytes_per_s": round(copy, 2),
    }
    for n in clients:
        per_cluster = max(1, n // 4)
        task = synthetic_regression(num_clusters=n // per_cluster, clients_per_cluster=per_cluster)
        n = task.num_clients
        n_samples, dim = task.data["x"].shape[1:]
        group_size = -(-n // subgroups)
        flops = fc_round_flops(n, n_samples, dim, clustering_steps, group_size)
        moved = fc_round_bytes(n, dim, clustering_steps, group_size)
        fc = dict(clustering_steps=clustering_steps, subgroups=subgroups)
        rules = [
            (dict(quantile=quantile, quantile_select=select), f"quantile={quantile}", select)
            for select in ("search", "radix")
        ] + [(dict(radius=50.0), "radius=50", None)]
        meshes = [{}] + ([dict(mesh=None)] if jax.device_count() > 1 else [])
        configs = [
            ("federated-clustering", {**rule, **mesh, **fc}, (name, select))
            for mesh in meshes
            for rule, name, select in rules
        ]
        if others is None:
            others = tuple(name for name in ALGORITHMS if name not in ("federated-clustering", "knn-per"))
        configs += [(name, bench_options(name), None) for name in others]
        fc_seconds = None
        for name, options, rule in configs:
            algo = make_algorithm(
                name, task, learning_rate=learning_rate, momentum=0.9, matmul_precision=matmul_precision, **options
            )
            seconds = time_round(algo, task, repeats)
            fused, per_call = time_fused_round(algo, task, max(3, repeats // 4), single_round_seconds=seconds)
            row = {
                "algorithm": name,
                "clients": n,
                "seconds_per_round": seconds,
                "implementation": "vmapped-jit",
                "fused_seconds_per_round": fused,
                "fused_rounds_per_call": per_call,
                "matmul_precision": matmul_precision,
            }
            if rule is not None:
                row["devices"] = algo.execution.devices
                row.update(
                    radius_rule=rule[0],
                    clustering_steps=clustering_steps,
                    subgroups=subgroups,
                    group_size=group_size,
                    flops_per_round=flops,
                    gflops_per_s=round(flops / seconds / 1e9, 3),
                    fraction_of_matmul=round(flops / seconds / 1e9 / matmul, 4),
                )
                if rule[1] is not None:
                    row["quantile_select"] = rule[1]
                else:
                    row.update(
                        bytes_per_round=moved,
                        gbytes_per_s=round(moved / seconds / 1e9, 3),
                        fraction_of_copy=round(moved / seconds / 1e9 / copy, 4),
                    )
                if fc_seconds is None:
                    fc_seconds = seconds
                row["peak_bytes_so_far"] = peak_memory_bytes()
            yield row
        if pair_loop_rounds > 0 and subgroups == 1:
            params = jnp.zeros((n, dim)) + jax.random.normal(jax.random.PRNGKey(1), (n, dim))
            batch = sample_minibatch(task.data, None, jax.random.PRNGKey(2))
            pair_loop_round(
                task,
                params[:2],
                jax.tree.map(lambda x: x[:2], batch),
                learning_rate=learning_rate,
                steps=clustering_steps,
                quantile=quantile,
            )  # warm-up (compiles the pair gradient)
            times = []
            for _ in range(pair_loop_rounds):
                start = time.perf_counter()
                pair_loop_round(
                    task, params, batch, learning_rate=learning_rate, steps=clustering_steps, quantile=quantile
                )
                times.append(time.perf_counter() - start)
            loop = statistics.median(times)
            yield {
                "algorithm": "federated-clustering",
                "clients": n,
                "implementation": "python-pair-loop",
                "radius_rule": f"quantile={quantile}",
                "seconds_per_round": loop,
                "speedup_vmapped_vs_loop": round(loop / fc_seconds, 1),
            }


def run_robust_benchmarks(
    num_messages: int = 300,
    dim: int = 100_000,
    *,
    repeats: int = 10,
    clients: int = 300,
    attack: str = "large-gradient",
    fraction: float = 0.2,
    quantile: float = 0.2,
    clustering_steps: int = 10,
):
    """``fedjax-clust bench --model robust``: one row per robust aggregator, the median seconds to aggregate
    ``num_messages`` messages of ``dim`` float32 coordinates (jitted, after warm-up) and the ratio to the
    mean's time in the same run, and the median computed by a full sort (the selection's speed-up); the
    order-statistic engine's two paths (:mod:`fedjax_clust.ops.order_stats`: the search and the loop-free
    radix select) on the median's rank of every coordinate, which "auto" chooses between; then the
    Federated-Clustering round on the synthetic task at N = ``clients``
    with and without ``fraction`` attackers running ``attack``, and the ratio."""
    from fedjax_clust.robust import AGGREGATORS, make_aggregator, mark_byzantine

    per_cluster = max(1, clients // 4)  # checked before any row: the attacked round needs an attacker
    task = synthetic_regression(num_clusters=clients // per_cluster, clients_per_cluster=per_cluster)
    attacked = mark_byzantine(task, fraction=fraction)
    if attacked.byzantine is None:
        raise ValueError(
            f"fraction={fraction} of {per_cluster} clients per cluster selects no attacker for the attacked "
            f"Federated-Clustering round (4 clusters of --clients / 4); use more clients"
        )
    messages = jax.random.normal(jax.random.PRNGKey(0), (num_messages, dim), jnp.float32)
    times = {}
    for name in AGGREGATORS:
        times[name] = median_seconds(jax.jit(make_aggregator(name)), messages, repeats=repeats)
        yield {
            "benchmark": "aggregator",
            "aggregator": name,
            "messages": num_messages,
            "dim": dim,
            "seconds": times[name],
            "ratio_to_mean": round(times[name] / times["mean"], 2),
            "gbytes_per_s_read": round(4 * num_messages * dim / times[name] / 1e9, 3),
        }

    # the same median by a full sort per coordinate (how it was computed before the selection), for the ratio
    def sorted_median(x):
        s = jnp.sort(x, axis=0)
        return 0.5 * (s[(num_messages - 1) // 2] + s[num_messages // 2])

    by_sort = median_seconds(jax.jit(sorted_median), messages, repeats=repeats)
    yield {
        "benchmark": "aggregator",
        "aggregator": "median-by-sort",
        "messages": num_messages,
        "dim": dim,
        "seconds": by_sort,
        "ratio_to_mean": round(by_sort / times["mean"], 2),
        "selection_speedup": round(by_sort / times["median"], 2),
    }
    # the engine's two paths on the median's rank of every coordinate ([dim, N] keys, as the median lays them out)
    keys = jax.jit(lambda x: order_keys(x.T))(messages)
    for select in ("search", "radix"):
        pick = jax.jit(lambda k, select=select: kth_smallest_keys(k, (num_messages + 1) // 2, select=select))
        seconds = median_seconds(pick, keys, repeats=repeats)
        yield {
            "benchmark": "order-statistic",
            "select": select,
            "messages": num_messages,
            "dim": dim,
            "seconds": seconds,
            "ratio_to_mean": round(seconds / times["mean"], 2),
        }
    clean_seconds = None
    for t, name in ((task, None), (attacked, attack)):
        algo = make_algorithm(
            "federated-clustering",
            t,
            learning_rate=0.01,
            momentum=0.9,
            quantile=quantile,
            clustering_steps=clustering_steps,
            attack=name,
        )
        seconds = time_round(algo, t, repeats)
        clean_seconds = clean_seconds or seconds
        yield {
            "benchmark": "attacked-round",
            "algorithm": "federated-clustering",
            "clients": t.num_clients,
            "attack": name,
            "byzantine_fraction": fraction if name else 0.0,
            "seconds_per_round": seconds,
            "ratio_to_clean": round(seconds / clean_seconds, 2),
        }


def compiled_peak_bytes(algo, task) -> Optional[int]:
    """Arguments + outputs + temporaries of the compiled round (XLA's memory analysis; None where absent)."""
    state = algo.init(task.init_params(None), task.num_clients)
    compiled = jax.jit(algo.round).lower(state, task.data, jax.random.PRNGKey(0)).compile()
    memory = compiled.memory_analysis()
    if memory is None:
        return None
    return int(memory.argument_size_in_bytes + memory.output_size_in_bytes + memory.temp_size_in_bytes)


def run_participation_benchmarks(
    clients: int = 1000,
    fractions=(1.0, 0.5, 0.25, 0.1),
    *,
    repeats: int = 5,
    algorithms=("federated-clustering", "ifca-1", "global"),
):
    """``fedjax-clust bench --model participation``: the round of each algorithm on the synthetic task with a
    fraction f of the ``clients`` taking part (S = f N participants gathered into one block): median seconds
    after warm-up and the compiled round's peak bytes, each with its ratio to the full round (f = 1) measured
    in the same run. Federated-Clustering's S x S cross-gradients should cost about f^2 of the N x N round
    (``f_squared`` beside the ratio); the linear algorithms about f."""
    task = synthetic_regression(num_clusters=4, clients_per_cluster=max(1, clients // 4))
    n = task.num_clients
    for name in algorithms:
        full_seconds = full_bytes = None
        for f in sorted(set(fractions) | {1.0}, reverse=True):
            options = dict(quantile=0.2) if name == "federated-clustering" else {}
            algo = make_algorithm(name, task, learning_rate=0.01, momentum=0.9, participation=float(f), **options)
            seconds = time_round(algo, task, repeats)
            peak = compiled_peak_bytes(algo, task)
            if f == 1.0:
                full_seconds, full_bytes = seconds, peak
            row = {
                "benchmark": "participation",
                "algorithm": name,
                "clients": n,
                "fraction": f,
                "participants": algo.execution.clients_per_round,
                "seconds_per_round": seconds,
                "time_ratio_to_full": round(seconds / full_seconds, 4),
                "f_squared": round(f * f, 4),
                "peak_bytes": peak,
            }
            if peak is not None and full_bytes:
                row["bytes_ratio_to_full"] = round(peak / full_bytes, 4)
            if f in fractions:
                yield row


def run_srfca_benchmarks(
    clients: int = 1000, *, repeats: int = 5, loop_clients: int = 30, chunk_size: Optional[int] = None
):
    """``fedjax-clust bench --model srfca``: SR-FCA's all-pairs client distances on the synthetic task (d = 10,
    9 samples per client), the l2 distances ||w_i - w_j|| and the cross-cluster loss distances of Def. 5.1,
    (f_i(w_j) + f_j(w_i)) / 2, each one jitted call through the chunked row machinery (``chunk_size`` rows at
    a time; None: all at once): median seconds after warm-up and the compiled program's peak bytes, at
    ``loop_clients`` and at ``clients``. At ``loop_clients`` the same matrix is also computed by a Python loop
    over the pairs (one jitted pair function per call), and the row reports the speed-up. The last row, at
    ``clients``, is :func:`srfca_sweep_row`: a 4-run sweep's seconds per round against 4 single runs'."""
    from fedjax_clust.algorithms.srfca import cross_losses, pairwise_l2

    for size in dict.fromkeys((loop_clients, clients)):
        # 4 clusters of size // 4 clients: the row reports the N actually built (30 -> 28)
        task = synthetic_regression(num_clusters=4, clients_per_cluster=max(1, size // 4))
        n = task.num_clients
        models = 50.0 * jax.random.normal(jax.random.PRNGKey(0), (n, task.data["x"].shape[-1]), jnp.float32)
        loss = client_loss(task.example_loss)

        def l2(w, data):
            return pairwise_l2(w, w, chunk_size)

        def cross(w, data):
            losses = cross_losses(loss, w, data, chunk_size)
            return 0.5 * (losses + losses.T)

        def l2_pair(wi, wj, di, dj):
            return jnp.sqrt(jnp.sum(jnp.square(wi - wj)))

        def cross_pair(wi, wj, di, dj):
            return 0.5 * (loss(wj, di) + loss(wi, dj))

        for name, fn, pair in (("l2", l2, l2_pair), ("cross-loss", cross, cross_pair)):
            jitted = jax.jit(fn)
            seconds = median_seconds(jitted, models, task.data, repeats=repeats)
            memory = jitted.lower(models, task.data).compile().memory_analysis()
            peak = (
                None
                if memory is None
                else int(memory.argument_size_in_bytes + memory.output_size_in_bytes + memory.temp_size_in_bytes)
            )
            row: dict[str, Any] = {
                "benchmark": "srfca-distances",
                "distance": name,
                "clients": n,
                "pairs": n * n,
                "chunk_size": chunk_size,
                "seconds": seconds,
                "peak_bytes": peak,
            }
            if size == loop_clients:
                pair_fn = jax.jit(pair)
                rows = [jax.tree.map(lambda x, i=i: x[i], task.data) for i in range(n)]

                def loop():
                    return [[pair_fn(models[i], models[j], rows[i], rows[j]) for j in range(n)] for i in range(n)]

                jax.block_until_ready(loop())
                start = time.perf_counter()
                looped = np.asarray(jax.block_until_ready(loop()))
                row["loop_seconds"] = time.perf_counter() - start
                row["speedup_vs_loop"] = round(row["loop_seconds"] / seconds, 1)
                batched = np.asarray(jitted(models, task.data), np.float64)
                row["max_relative_difference"] = float(np.max(np.abs(looped - batched)) / np.max(np.abs(batched)))
            yield row
    yield srfca_sweep_row(clients, repeats=repeats)


# the sweep row's SR-FCA: ONE_SHOT at round 4, RECLUSTER / MERGE at rounds 7 and 10, then TrimmedMeanGD
SWEEP_SRFCA = dict(threshold=50.0, one_shot_rounds=4, refine_steps=2, refine_iterations=3)
SWEEP_LEARNING_RATES = (0.01, 0.02, 0.03, 0.04)


def sweep_against_single_runs(
    name: str, task, options: dict, swept: str, values, *, repeats: int, rounds: int, batchings=("vmap", "map")
) -> tuple:
    """({batching: seconds per round of the runs as one sweep program}, seconds per round of the same runs one
    after another): ``name`` with ``options`` and ``swept`` (a traced keyword of ``make_algorithm``) at each of
    ``values``, one seed each. The sweep is :func:`fedjax_clust.run.sweep.sweep_program` with each of
    ``batchings`` ("vmap": the runs batched together, "map": one after another inside the program); each single
    run a jitted fused loop (as ``simulate`` runs it); ``rounds`` rounds from the start, median of ``repeats``
    timed calls of each after a warm-up call, all interleaved. Every call consumes (donates) its states, as
    ``simulate`` and ``sweep`` run them: every timed call starts from a copy of the round-0 states made before the
    clock starts."""
    from fedjax_clust.run.sweep import sweep_program

    n = task.num_clients
    params = task.init_params(jax.random.PRNGKey(0))
    keys = [jax.random.fold_in(jax.random.PRNGKey(r), 1) for r in range(len(values))]
    singles = []
    for value, key in zip(values, keys):
        algo = make_algorithm(name, task, **grouped_settings({**options, swept: value}))
        run, before = rounds_program(algo)  # what simulate runs
        singles.append((run, before, algo.init(params, n), key))  # only copies run
    hp = {swept: jnp.asarray(values, jnp.float32)}
    stacked = jax.tree.map(lambda x: jnp.stack([x] * len(values)), params)
    round_keys = jnp.stack(keys)

    def one_after_another(states):
        for (run, before, _, key), state in zip(singles, states):
            jax.block_until_ready(run(*before, state, task.data, key, 1, rounds))

    def together(program):
        return lambda state: jax.block_until_ready(program.rounds(hp, task.arrays(), {}, state, round_keys, 1, rounds))

    calls, starts = {"single": one_after_another}, {"single": [state for _, _, state, _ in singles]}
    for batching in batchings:
        program = sweep_program(name, task, options, {}, batching=batching)
        calls[batching] = together(program)
        starts[batching] = program.init(hp, task.arrays(), {}, stacked, round_keys)

    def fresh(name):
        return jax.block_until_ready(jax.tree.map(jnp.copy, starts[name]))

    for name, fn in calls.items():
        fn(fresh(name))  # compile and warm up
    seconds: dict = {name: [] for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            states = fresh(name)
            tic = time.perf_counter()
            fn(states)
            seconds[name].append((time.perf_counter() - tic) / rounds)
    single = statistics.median(seconds.pop("single"))
    return {batching: statistics.median(times) for batching, times in seconds.items()}, single


def sweep_row_fields(swept: dict, single: float) -> dict:
    """A sweep row's timings: the seconds per round of the sweep as ``sweep`` runs it on this backend
    (``run_batching``, :func:`~fedjax_clust.run.sweep.resolved_run_batching`), of each batching, and their
    ratios to the runs one after another."""
    from fedjax_clust.run.sweep import resolved_run_batching

    batching = resolved_run_batching("auto")
    row = {
        "run_batching": batching,
        "sweep_seconds_per_round": swept[batching],
        "single_runs_seconds_per_round": single,
        "sweep_vs_single_runs": swept[batching] / single,
    }
    for name, seconds in swept.items():
        row[f"{name}_seconds_per_round"] = seconds
        row[f"{name}_vs_single_runs"] = seconds / single
    return row


def srfca_sweep_row(clients: int, *, repeats: int = 5, rounds: int = 12) -> dict:
    """A 4-run SR-FCA sweep (the learning rates ``SWEEP_LEARNING_RATES`` traced, one program) against the same 4
    runs one after another (:func:`sweep_against_single_runs`), over ``rounds`` rounds from the start
    (``SWEEP_SRFCA``'s schedule: every stage). The sweep shares the round counter, so its stages stay conds (run
    once, not every round); ``sweep_vs_single_runs`` <= 1 when one program of 4 runs costs no more than the 4 runs
    apart."""
    task = synthetic_regression(num_clusters=4, clients_per_cluster=max(1, clients // 4))
    swept, single = sweep_against_single_runs(
        "srfca", task, SWEEP_SRFCA, "learning_rate", SWEEP_LEARNING_RATES, repeats=repeats, rounds=rounds
    )
    return {
        "benchmark": "srfca-sweep",
        "clients": task.num_clients,
        "runs": len(SWEEP_LEARNING_RATES),
        "rounds": rounds,
        **SWEEP_SRFCA,
        **sweep_row_fields(swept, single),
    }


def _round_of(algo):
    """``algo.round``, which every algorithm this module times has."""
    if algo.round is None:
        raise ValueError(f"{algo.name} has no round function")
    return algo.round


def run_track_clusters_benchmarks(clients=(300, 1200, 4800), *, repeats: int = 5, quantile: float = 0.2):
    """Yield one row per N: what logging the misclustering costs Federated-Clustering.

    Each N times the synthetic task's round (quantile rule, 10 clustering steps, one device) with and without
    ``track_clusters`` (the round then returns the N x N ball mask's connected components,
    :func:`fedjax_clust.ops.metrics.ball_components`), the two jitted rounds called alternately after warm-up
    (``repeats`` pairs; the ratio of the medians is a same-run ratio on a shared machine), and the host's share
    of an evaluation (:func:`fedjax_clust.ops.metrics.misclustering_error` of the labels)."""
    from fedjax_clust.ops.metrics import misclustering_error

    for n in clients:
        per_cluster = max(1, n // 4)
        task = synthetic_regression(num_clusters=n // per_cluster, clients_per_cluster=per_cluster)
        n = task.num_clients
        made = {
            track: make_algorithm(
                "federated-clustering", task, learning_rate=0.01, quantile=quantile, track_clusters=track, mesh=None
            )
            for track in (False, True)
        }
        steps = {track: jax.jit(_round_of(algo)) for track, algo in made.items()}
        state = made[False].init(task.init_params(None), n)
        key = jax.random.PRNGKey(0)
        for t in range(3):  # warm-up: compile both, move off the shared start
            state, _ = jax.block_until_ready(steps[False](state, task.data, jax.random.fold_in(key, t)))
            jax.block_until_ready(steps[True](state, task.data, key))
        times: dict = {False: [], True: []}
        for r in range(repeats):
            for track in (False, True) if r % 2 == 0 else (True, False):
                start = time.perf_counter()
                jax.block_until_ready(steps[track](state, task.data, jax.random.fold_in(key, 100 + r)))
                times[track].append(time.perf_counter() - start)
        plain, tracked = statistics.median(times[False]), statistics.median(times[True])
        _, metrics = steps[True](state, task.data, key)
        labels = np.asarray(metrics["cluster_labels"])
        start = time.perf_counter()
        error = misclustering_error(labels, task.true_clusters)
        host = time.perf_counter() - start
        yield {
            "benchmark": "track-clusters",
            "algorithm": "federated-clustering",
            "clients": n,
            "seconds_per_round": plain,
            "tracked_seconds_per_round": tracked,
            "tracked_over_plain": round(tracked / plain, 4),
            "ball_mask_bytes": n * n,
            "misclustering_host_seconds": host,
            "misclustering": error,
            "peak_bytes_so_far": peak_memory_bytes(),
        }
