"""``fedjax-clust profile``: how each algorithm's round scales with the number of clients N.

For every algorithm and every N of a geometric sweep on the synthetic task it measures, after warm-up:

* ``seconds_per_round``: median of the timed rounds (jit, vmapped, all devices);
* ``peak_bytes``: the compiled round's memory (XLA's memory analysis: arguments + outputs + temporaries);
* ``flops``: XLA's cost analysis of the compiled round (loops with a data-dependent trip count, such as
  the quantile search, are counted once), and ``flops_counted`` from the algorithm where we have a formula;
* ``comm_bytes`` / ``messages``: the explicit cost model below, float32 parameters of size D:

  ============================  ==============================  =====================
  algorithm                     bytes per round                 messages per round
  ============================  ==============================  =====================
  federated-clustering (G=1)    4 D (N^2 + N^2)                 2 N (N - 1)
                                (N^2 models out, N^2 grads back; with G groups, N^2 / G each)
  myopic-, momentum-clustering  4 D (N + N)                     2 N
  ifca-1, ifca-2, hypcluster    4 D (N K + N)                   N K + N
  cfl, global, ground-truth,    4 D (N + N)                     2 N
  ditto
  local                         0                               0
  ============================  ==============================  =====================

With partial participation (``--participation f``) only the S = f N participants send, so N becomes S in
the table (Federated-Clustering: 4 D (S^2 + S^2)); every row records its ``participants``.

Subgroups (``subgroup_tradeoff``): Federated-Clustering with the clients split into G random groups per
round does N^2 / G cross-gradient work; for each G of a sweep it trains on the synthetic task and records
seconds per round against the final error (mean squared distance to the clients' true optima), written to
``subgroups.csv`` and drawn in ``subgroups.png``.

It fits the scaling exponent of time and bytes in N (least squares on log-log over the upper half of the
sweep), writes ``profile.csv`` and ``profile.png`` (log-log), and in the same run times the Federated-
Clustering round as a per-client Python loop over jitted per-pair gradients (the structure of the paper
authors' code) where that finishes in reasonable time, printing the speedup; and the achieved FLOP rate of
the round against the machine's float32 matmul rate measured in the same run.
"""

from __future__ import annotations

import csv
import os
import statistics
import time
from typing import Iterable, Optional

import jax
import numpy as np

from fedjax_clust.algorithms import ALGORITHMS, algorithm_spec, make_algorithm
from fedjax_clust.bench.rounds import (
    bench_options,
    fc_round_flops,
    matmul_gflops,
    pair_loop_round,
)
from fedjax_clust.core.batching import sample_minibatch
from fedjax_clust.io.jsonio import dumps, write_json
from fedjax_clust.tasks import synthetic_regression

__all__ = ["comm_cost", "profile", "fit_exponent", "subgroup_tradeoff", "COLUMNS", "SUBGROUP_COLUMNS"]

COLUMNS = [
    "algorithm",
    "clients",
    "participants",
    "seconds_per_round",
    "peak_bytes",
    "flops",
    "flops_counted",
    "comm_bytes",
    "messages",
]
SUBGROUP_COLUMNS = [
    "subgroups",
    "clients",
    "group_size",
    "rounds",
    "seconds_per_round",
    "mean_sq_dist_to_optimum",
    "comm_bytes",
]


def comm_cost(
    algorithm: str,
    num_clients: int,
    num_params: int,
    num_clusters: int = 1,
    subgroups: int = 1,
    participants: Optional[int] = None,
):
    """(bytes, messages) one round of ``algorithm`` sends under the cost model of the module docstring (its
    spec's ``comm_cost``); with partial participation only the ``participants`` S take part, so N becomes S
    (FC: S^2 pairs)."""
    n = num_clients if participants is None else participants
    return algorithm_spec(algorithm).comm_cost(n, num_params, num_clusters, subgroups)


def fit_exponent(clients: Iterable[int], values: Iterable[float]) -> float:
    """Slope of log(value) against log(N) over the upper half of the sweep (NaN with < 2 usable points)."""
    pairs = [(c, v) for c, v in zip(clients, values) if v and v > 0]
    pairs = pairs[len(pairs) // 2 :] if len(pairs) >= 4 else pairs
    if len(pairs) < 2:
        return float("nan")
    x = np.log([c for c, _ in pairs])
    y = np.log([v for _, v in pairs])
    return float(np.polyfit(x, y, 1)[0])


def _measure(algo, task, repeats):
    state = algo.init(task.init_params(None), task.num_clients)
    step = jax.jit(algo.round)
    compiled = step.lower(state, task.data, jax.random.PRNGKey(0)).compile()
    memory = compiled.memory_analysis()
    peak = (
        None
        if memory is None
        else int(memory.argument_size_in_bytes + memory.output_size_in_bytes + memory.temp_size_in_bytes)
    )
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    flops = None if not cost or "flops" not in cost else float(cost["flops"])
    key = jax.random.PRNGKey(1)
    for t in range(2):
        state, _ = step(state, task.data, jax.random.fold_in(key, t))
    jax.block_until_ready(state)
    times = []
    for t in range(repeats):
        start = time.perf_counter()
        state, metrics = step(state, task.data, jax.random.fold_in(key, 100 + t))
        jax.block_until_ready((state, metrics))
        times.append(time.perf_counter() - start)
    return statistics.median(times), peak, flops


def profile(
    clients=(64, 128, 256, 512, 1024, 2048, 4096),
    algorithms: Optional[Iterable[str]] = None,
    *,
    repeats: int = 3,
    loop_max_clients: int = 256,
    out_dir: Optional[str] = None,
    log=print,
    participation: Optional[float] = None,
):
    """Run the sweep; returns (rows, exponents, extras) and writes profile.csv / profile.png to ``out_dir``.
    ``participation``: a fraction of clients per round for every algorithm that takes it (the rows record the
    participants S, and the cost model counts them only)."""
    algorithms = [a for a in (algorithms or ALGORITHMS) if a != "knn-per"]  # kNN-Per needs a feature model
    rows = []
    for n in clients:
        per_cluster = max(1, n // 4)
        task = synthetic_regression(num_clusters=max(1, n // per_cluster), clients_per_cluster=per_cluster)
        d = int(task.data["x"].shape[-1])
        for name in algorithms:
            options = bench_options(name)
            algo = make_algorithm(name, task, learning_rate=0.01, momentum=0.9, participation=participation, **options)
            seconds, peak, flops = _measure(algo, task, repeats)
            s = algo.execution.clients_per_round or task.num_clients
            comm, messages = comm_cost(name, task.num_clients, d, task.num_clusters or 1, participants=s)
            counted = fc_round_flops(s, task.data["x"].shape[1], d, 10) if name == "federated-clustering" else None
            row = dict(
                algorithm=name,
                clients=task.num_clients,
                participants=s,
                seconds_per_round=seconds,
                peak_bytes=peak,
                flops=flops,
                flops_counted=counted,
                comm_bytes=comm,
                messages=messages,
            )
            rows.append(row)
            log(dumps(row))
    exponents = {}
    for name in algorithms:
        mine = [r for r in rows if r["algorithm"] == name]
        exponents[name] = {
            "time": fit_exponent([r["clients"] for r in mine], [r["seconds_per_round"] for r in mine]),
            "bytes": fit_exponent([r["clients"] for r in mine], [r["comm_bytes"] for r in mine]),
        }
        log(f"{name:22s} time ~ N^{exponents[name]['time']:.2f}   bytes ~ N^{exponents[name]['bytes']:.2f}")
    extras = {"matmul_gflops": matmul_gflops()}
    fc_rows = [r for r in rows if r["algorithm"] == "federated-clustering"]
    if fc_rows:
        top = fc_rows[-1]
        extras["fc_gflops_per_s"] = top["flops_counted"] / top["seconds_per_round"] / 1e9
        extras["fc_fraction_of_matmul"] = extras["fc_gflops_per_s"] / extras["matmul_gflops"]
        log(
            f"FC at N={top['clients']}: {extras['fc_gflops_per_s']:.2f} GFLOP/s counted = "
            f"{100 * extras['fc_fraction_of_matmul']:.1f}% of the {extras['matmul_gflops']:.0f} GFLOP/s matmul"
        )
        speedups = []
        for r in fc_rows:
            if r["clients"] > loop_max_clients:
                continue
            task = synthetic_regression(num_clusters=4, clients_per_cluster=r["clients"] // 4)
            params = jax.random.normal(jax.random.PRNGKey(1), (task.num_clients, task.data["x"].shape[-1]))
            batch = sample_minibatch(task.data, None, jax.random.PRNGKey(2))
            pair_loop_round(
                task, params[:2], jax.tree.map(lambda x: x[:2], batch), learning_rate=0.01, steps=10, quantile=0.2
            )
            start = time.perf_counter()
            pair_loop_round(task, params, batch, learning_rate=0.01, steps=10, quantile=0.2)
            loop = time.perf_counter() - start
            speedups.append(
                {
                    "clients": r["clients"],
                    "loop_seconds": loop,
                    "vmapped_seconds": r["seconds_per_round"],
                    "speedup": loop / r["seconds_per_round"],
                }
            )
            log(
                f"FC N={r['clients']}: per-client loop {loop:.2f} s vs vmapped {r['seconds_per_round'] * 1e3:.1f} ms "
                f"-> {loop / r['seconds_per_round']:.0f}x"
            )
        extras["loop_speedups"] = speedups
    if out_dir is not None:
        _write(rows, exponents, extras, out_dir)
    return rows, exponents, extras


def check_subgroup_sweep(num_clients, groups, names=("num_clients", "subgroups")):
    """ValueError unless N is a positive multiple of 4 and every G an integer in [1, N], naming the two arguments
    by ``names`` (the command line passes its flags); returns list(groups)."""
    groups = list(groups)
    if (
        isinstance(num_clients, bool)
        or not isinstance(num_clients, (int, np.integer))
        or num_clients < 4
        or num_clients % 4
    ):
        raise ValueError(f"{names[0]} must be a positive multiple of 4 (four clusters), got {num_clients!r}")
    if not groups or any(
        isinstance(g, bool) or not isinstance(g, (int, np.integer)) or not 1 <= g <= num_clients for g in groups
    ):
        raise ValueError(f"{names[1]} must be integers in [1, {num_clients}], got {groups!r}")
    return groups


def subgroup_tradeoff(
    num_clients: int = 512,
    groups: Iterable[int] = (1, 2, 4, 8, 16),
    *,
    rounds: int = 200,
    quantile: float = 0.2,
    learning_rate: float = 0.01,
    seed: int = 0,
    out_dir: Optional[str] = None,
    log=print,
):
    """Error against time of Federated-Clustering with G random subgroups, on the §4.1 synthetic task.

    For every G: ``rounds`` rounds (momentum 0.9, full local batch) on K = 4 clusters of ``num_clients / 4``
    clients; a row holds the mean seconds per round after the first, the final mean squared distance to the
    clients' optima and the cost-model bytes (N^2 / G cross-gradient exchange). Writes ``subgroups.csv`` and
    ``subgroups.png`` to ``out_dir`` when given. Returns the rows.
    """
    from fedjax_clust.run.simulate import simulate

    groups = check_subgroup_sweep(num_clients, groups)
    task = synthetic_regression(num_clusters=4, clients_per_cluster=num_clients // 4, seed=seed)
    d = int(task.data["x"].shape[-1])
    rows = []
    for g in groups:
        algo = make_algorithm(
            "federated-clustering", task, learning_rate=learning_rate, momentum=0.9, quantile=quantile, subgroups=int(g)
        )
        result = simulate(algo, task, rounds=rounds, seed=seed, eval_every=rounds, progress=False)
        row = dict(
            subgroups=int(g),
            clients=num_clients,
            group_size=-(-num_clients // int(g)),
            rounds=rounds,
            seconds_per_round=result.summary["seconds_per_round"],
            mean_sq_dist_to_optimum=result.summary["mean_sq_dist_to_optimum"],
            comm_bytes=comm_cost("federated-clustering", num_clients, d, subgroups=int(g))[0],
        )
        rows.append(row)
        log(dumps(row))
    if out_dir is not None:
        _write_subgroups(rows, out_dir)
    return rows


def _write_subgroups(rows, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "subgroups.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=SUBGROUP_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    from fedjax_clust.io.figures import figure_for_file

    fig, ax = figure_for_file(figsize=(5.5, 4))
    x = [r["seconds_per_round"] for r in rows]
    y = [r["mean_sq_dist_to_optimum"] for r in rows]
    ax.loglog(x, y, "o-")
    for r, xi, yi in zip(rows, x, y):
        ax.annotate(f"G={r['subgroups']}", (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("seconds per round")
    ax.set_ylabel(f"mean ||x_i - x*_i||^2 after {rows[0]['rounds']} rounds")
    ax.set_title(f"Federated-Clustering with G subgroups, N = {rows[0]['clients']}", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "subgroups.png"), dpi=110)


def _write(rows, exponents, extras, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "profile.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row[k] is None else row[k]) for k in COLUMNS})
    from fedjax_clust.io.provenance import provenance

    write_json(
        os.path.join(out_dir, "profile.json"),
        {"rows": rows, "exponents": exponents, **extras, "provenance": provenance()},
        indent=1,
    )
    from fedjax_clust.io.figures import figure_for_file

    fig, axes = figure_for_file(1, 2, figsize=(11, 4))
    for i, name in enumerate(exponents):
        mine = [r for r in rows if r["algorithm"] == name]
        n = [r["clients"] for r in mine]
        axes[0].loglog(
            n,
            [r["seconds_per_round"] for r in mine],
            "o-",
            color=f"C{i % 10}",
            label=f"{name} (N^{exponents[name]['time']:.2f})",
        )
        if any(r["comm_bytes"] for r in mine):
            axes[1].loglog(
                n,
                [max(r["comm_bytes"], 1) for r in mine],
                "o-",
                color=f"C{i % 10}",
                label=f"{name} (N^{exponents[name]['bytes']:.2f})",
            )
    axes[0].set_ylabel("seconds per round")
    axes[1].set_ylabel("bytes communicated per round (cost model)")
    for ax in axes:
        ax.set_xlabel("clients N")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "profile.png"), dpi=110)
