"""The accelerator suite's targets (:mod:`fedjax_clust.bench.accelerator`): each target's text, limit and unit,
the sizes a full and a ``--quick`` run measure, and the functions that measure the rows.

A row passes when its ``measured`` value compares with the ``limit`` as :data:`TARGETS` says; a size whose
estimated memory (:func:`synthetic_round_bytes`) exceeds the device's is skipped with the bytes it needs.
"""

from __future__ import annotations

import resource
import time
from typing import Optional

import numpy as np

from fedjax_clust.algorithms import make_algorithm
from fedjax_clust.bench.rounds import fc_round_bytes, fc_round_flops, time_fused_round, time_round
from fedjax_clust.parallel.memory import peak_memory_bytes
from fedjax_clust.tasks import synthetic_regression

__all__ = ["TARGETS", "SIZES", "synthetic_round_bytes"]

# name -> (target text, limit, comparison, unit); a row passes when ``measured comparison limit`` holds
TARGETS = {
    "fc-quantile-vs-radius": ("FC quantile rule within 1.5x of the fixed radius at every N", 1.5, "<=", "ratio"),
    "fc-quantile-small": ("FC quantile round at N = 300 <= 1.5 ms", 1.5e-3, "<=", "s"),
    "fc-quantile-large": ("FC quantile round at N = 30,000 <= 0.55 s", 0.55, "<=", "s"),
    "baseline-round": ("Local / Global / Ground-truth round at N = 300 <= 50 us amortised (fused)", 50e-6, "<=", "s"),
    "fc-radius-bandwidth": (
        "fixed-radius FC at N >= 10,000 at >= 50% of copy bandwidth by the bytes it must move",
        0.5,
        ">=",
        "fraction",
    ),
    "fc-full-n2": ("N = 100,000 full N^2 <= 3 s per round (either rule)", 3.0, "<=", "s"),
    "frontier-1m": ("1,000,000 clients in subgroups of 4,000 <= 2 s per round", 2.0, "<=", "s"),
    "frontier-10m": ("10,000,000 clients in subgroups of 1,000 <= 5 s per round", 5.0, "<=", "s"),
    "mlp-kernel": (
        "MLP cross-gradient kernel (N = 16,384, G = 16, B = 32) >= 40% of the float32 peak",
        0.4,
        ">=",
        "fraction",
    ),
    "population-seconds": (
        "FedAvg cohort round (S = 10) independent of N: the largest N within 1.2x of N = 1,000",
        1.2,
        "<=",
        "ratio",
    ),
    "population-state": (
        "FedAvg state bytes independent of N: the largest N within 1.1x of N = 1,000",
        1.1,
        "<=",
        "ratio",
    ),
    "streaming-round": (
        "host-resident rows (1 GiB budget, 100 of 100,000 clients, ~10k parameters) within 1.3x of resident",
        1.3,
        "<=",
        "ratio",
    ),
    "cnn-round": ("CNN FC round on MNIST rotation (N = 300, G = 16, B = 32) <= 0.5 s", 0.5, "<=", "s"),
}

SIZES = {
    "full": dict(
        quantile_clients=(300, 3000, 30000),
        small=300,
        large=30000,
        baseline_clients=300,
        bandwidth_clients=10000,
        full_n2=100_000,
        frontier_1m=(1_000_000, 4000),  # (clients, clients per subgroup), as the targets' text says
        frontier_10m=(10_000_000, 1000),
        mlp=(16384, 16, 32),
        cnn=(300, 16, 32),
        conv_models=40,
        repeats=10,
        cost_clients=3000,
        experiment=(75, 300),
        sweep=(75, 100),
        sweep_grid=((0.001, 0.003, 0.01, 0.03), (0, 1)),  # learning rates x seeds
        robust=(300, 100_000),
        matmul=None,
        population=dict(
            populations=(1000, 10_000, 100_000), cohorts=(10,), layouts=("server",), examples=8, repeats=10
        ),
        streaming=dict(clients=100_000, cohort=100, budget="1GiB", samples=16, rounds=5, repeats=3),
    ),
    "quick": dict(
        # small N throughout: on a CPU, XLA's compile time of the full-N^2 round grows about as N^2 (2.4 s at
        # N = 64, 57 s at 512, 2 cores), and the quick run only checks the report
        quantile_clients=(32, 96),
        small=32,
        large=96,
        baseline_clients=32,
        bandwidth_clients=96,
        # the full N^2 and cost rows reuse the N of the rows above: the same shapes, so the same compiled programs
        full_n2=96,
        frontier_1m=(1024, 64),
        frontier_10m=(2048, 32),
        mlp=(32, 2, 8),
        cnn=(8, 2, 8),
        conv_models=0,  # the two convolution forms' rows are not read by the report's row; skipped at quick size
        repeats=2,
        cost_clients=32,
        experiment=(4, 20),
        sweep=(4, 10),
        sweep_grid=((0.001, 0.01), (0,)),
        robust=(32, 1000),
        matmul=256,
        population=dict(populations=(40, 400), cohorts=(4,), layouts=("server",), repeats=2),
        streaming=dict(algorithms=("ditto",), clients=400, cohort=10, budget="8MB", samples=4, rounds=2, repeats=2),
    ),
}
SAMPLES, DIM, STEPS = 9, 10, 10  # the synthetic task's n and d, Threshold-Clustering's M


def synthetic_round_bytes(num_clients: int, group_size: Optional[int] = None, memory_budget: int = 0) -> int:
    """Device bytes a Federated-Clustering round on the synthetic task needs (estimate): the task's data
    (N x n x (d + 1) float32), the model and momentum rows, one gathered copy of the minibatches and models
    for a subgroup round, the N x S distances of a row block when S is small, and the cross-gradient chunk
    (``memory_budget``)."""
    n = int(num_clients)
    data = n * SAMPLES * (DIM + 1) * 4
    state = 3 * n * DIM * 4
    gathered = data + n * DIM * 4 if group_size else 0
    return data + state + gathered + int(memory_budget)


def _status(name: str, measured) -> str:
    _, limit, comparison, _ = TARGETS[name]
    if measured is None or not np.isfinite(measured):
        return "fail"
    return "pass" if (measured <= limit if comparison == "<=" else measured >= limit) else "fail"


def target_row(name: str, measured, **details) -> dict:
    target, limit, comparison, unit = TARGETS[name]
    return {
        "name": name,
        "target": target,
        "limit": limit,
        "comparison": comparison,
        "unit": unit,
        "measured": None if measured is None else float(measured),
        "status": _status(name, measured),
        **details,
    }


def unjudged(row: dict) -> dict:
    """A row measured at ``--quick`` sizes: its targets are full-size ones, so it is "not judged" (a skipped row
    stays skipped)."""
    return row if row["status"] == "skipped" else {**row, "status": "not judged"}


def skipped_row(name: str, reason: str, **details) -> dict:
    target, limit, comparison, unit = TARGETS[name]
    return {
        "name": name,
        "target": target,
        "limit": limit,
        "comparison": comparison,
        "unit": unit,
        "measured": None,
        "status": "skipped",
        "reason": reason,
        **details,
    }


def synthetic_task(num_clients: int):
    per_cluster = max(1, num_clients // 4)
    return synthetic_regression(num_clusters=max(1, num_clients // per_cluster), clients_per_cluster=per_cluster)


def fc_algorithm(task, rule: str, **options):
    radius = dict(radius=50.0) if rule == "radius" else dict(quantile=0.2)
    return make_algorithm(
        "federated-clustering", task, learning_rate=0.01, momentum=0.9, clustering_steps=STEPS, **radius, **options
    )


def _host_rss() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def fc_rows(sizes, memory, copy, matmul, curve):
    """The quantile-vs-radius rows at every N, the small / large absolute rows and the bandwidth row."""
    rows = []
    measured = {}
    bandwidth_n = sizes["bandwidth_clients"]
    for n in sorted(set(sizes["quantile_clients"]) | {bandwidth_n}):
        need = synthetic_round_bytes(n)
        if need > memory:
            measured[n] = None
            rows.append(
                skipped_row(
                    "fc-quantile-vs-radius", f"needs {need} bytes, the device has {memory}", clients=n, needs_bytes=need
                )
            )
            continue
        task = synthetic_task(n)
        seconds = {
            rule: time_round(fc_algorithm(task, rule), task, sizes["repeats"]) for rule in ("quantile", "radius")
        }
        measured[n] = seconds
        flops = fc_round_flops(n, SAMPLES, DIM, STEPS)
        moved = fc_round_bytes(n, DIM, STEPS)
        for rule, s in seconds.items():
            curve.append({"clients": n, "rule": rule, "seconds_per_round": s})
        if n in sizes["quantile_clients"]:
            rows.append(
                target_row(
                    "fc-quantile-vs-radius",
                    seconds["quantile"] / seconds["radius"],
                    clients=n,
                    seconds_quantile=seconds["quantile"],
                    seconds_radius=seconds["radius"],
                    flops_per_round=flops,
                    fraction_of_matmul_quantile=flops / seconds["quantile"] / 1e9 / matmul,
                )
            )
        if n == bandwidth_n:
            rows.append(
                target_row(
                    "fc-radius-bandwidth",
                    moved / seconds["radius"] / 1e9 / copy,
                    clients=n,
                    bytes_per_round=moved,
                    seconds_per_round=seconds["radius"],
                    gbytes_per_s=moved / seconds["radius"] / 1e9,
                    copy_gbytes_per_s=copy,
                )
            )
    for name, n in (("fc-quantile-small", sizes["small"]), ("fc-quantile-large", sizes["large"])):
        if measured.get(n) is None:
            rows.append(skipped_row(name, "did not fit the device", clients=n))
        else:
            rows.append(
                target_row(
                    name,
                    measured[n]["quantile"],
                    clients=n,
                    fraction_of_matmul=fc_round_flops(n, SAMPLES, DIM, STEPS) / measured[n]["quantile"] / 1e9 / matmul,
                )
            )
    return rows


def baseline_rows(sizes):
    task = synthetic_task(sizes["baseline_clients"])
    rows = []
    for name in ("local", "global", "ground-truth"):
        algo = make_algorithm(name, task, learning_rate=0.01, momentum=0.9)
        single = time_round(algo, task, sizes["repeats"])
        fused, per_call = time_fused_round(algo, task, max(2, sizes["repeats"] // 2), single_round_seconds=single)
        rows.append(
            target_row(
                "baseline-round",
                fused,
                algorithm=name,
                clients=task.num_clients,
                seconds_per_round_launched=single,
                fused_rounds_per_call=per_call,
            )
        )
    return rows


def scale_row(name, n, group_size, sizes, memory, copy, curve):
    """One frontier round: ``n`` clients in random subgroups of ``group_size`` clients (``n``: the full N^2, one
    group), both rules when full."""
    subgroups = max(1, n // group_size)
    group = -(-n // subgroups)
    budget = min(memory // 4, 1 << 30)
    need = synthetic_round_bytes(n, group if subgroups > 1 else None, budget)
    if need > memory:
        return [
            skipped_row(
                name,
                f"needs about {need} bytes, the device has {memory}",
                clients=n,
                subgroups=subgroups,
                group_size=group,
                needs_bytes=need,
            )
        ]
    host_before = _host_rss()
    start = time.perf_counter()
    task = synthetic_task(n)
    build_seconds = time.perf_counter() - start
    host_build = _host_rss()
    rules = ("radius", "quantile") if subgroups == 1 else ("quantile",)
    rows = []
    for rule in rules:
        algo = fc_algorithm(task, rule, subgroups=subgroups)
        seconds = time_round(algo, task, max(1, sizes["repeats"] // 2), warmup=1)
        moved = fc_round_bytes(n, DIM, STEPS, group)
        if subgroups == 1:
            curve.append({"clients": n, "rule": rule, "seconds_per_round": seconds})
        rows.append(
            target_row(
                name,
                seconds,
                clients=n,
                subgroups=subgroups,
                group_size=group,
                rule=rule,
                flops_per_round=fc_round_flops(n, SAMPLES, DIM, STEPS, group),
                bytes_per_round=moved,
                fraction_of_copy=moved / seconds / 1e9 / copy,
                task_build_seconds=build_seconds,
                host_peak_bytes_while_building=host_build,
                host_bytes_added_by_build=host_build - host_before,
                device_peak_bytes=peak_memory_bytes(),
            )
        )
    del task
    return rows


def population_rows(sizes):
    """FedAvg's cohort round and state at growing N (:mod:`fedjax_clust.bench.population`, server layout):
    the largest N's seconds and bytes over the smallest's."""
    from fedjax_clust.bench.population import run_population_suite

    report = run_population_suite(**sizes["population"])
    cohort = min(sizes["population"]["cohorts"])
    rows = sorted((r for r in report["rows"] if r["cohort"] == cohort), key=lambda r: r["clients"])
    small, large = rows[0], rows[-1]
    details = dict(clients=large["clients"], cohort=large["cohort"], small_clients=small["clients"])
    return [
        target_row(
            "population-seconds",
            large["seconds"] / small["seconds"],
            **details,
            seconds={r["clients"]: r["seconds"] for r in rows},
        ),
        target_row(
            "population-state",
            large["state_bytes"] / small["state_bytes"],
            **details,
            state_bytes={r["clients"]: r["state_bytes"] for r in rows},
        ),
    ]


def streaming_rows(sizes):
    """Host-resident rows against resident ones, Federated-Clustering and Ditto, one process per placement
    (:mod:`fedjax_clust.bench.streaming`)."""
    from fedjax_clust.bench.streaming import run_streaming_suite

    report = run_streaming_suite(**sizes["streaming"])
    out = []
    for host in (r for r in report["rows"] if r["placement"] == "host"):
        device = next(r for r in report["rows"] if r["placement"] == "device" and r["algorithm"] == host["algorithm"])
        out.append(
            target_row(
                "streaming-round",
                host["host_over_device"],
                algorithm=host["algorithm"],
                clients=host["clients"],
                cohort=host["cohort"],
                budget=host["budget"],
                seconds=host["seconds"],
                resident_seconds=device["seconds"],
                serial_seconds=host["serial"],
                transfer_seconds=host["transfer"],
                wait_seconds=host["serial_wait"],
                hidden=host["hidden"],
                row_bytes=host["row_bytes"],
                device_peak_bytes=host["device_peak_bytes"],
                resident_peak_bytes=device["device_peak_bytes"],
            )
        )
    return out


def mlp_row(sizes):
    from fedjax_clust.bench.mlp import run_mlp_benchmark

    clients, subgroups, batch = sizes["mlp"]
    rows = list(
        run_mlp_benchmark(
            clients, subgroups=subgroups, batch_size=batch, repeats=max(1, sizes["repeats"] // 3), single_device=False
        )
    )
    kernel = next(r for r in rows if r.get("benchmark") == "mlp-cross-gradients")
    return target_row(
        "mlp-kernel",
        kernel["fraction_of_matmul"],
        clients=kernel["clients"],
        subgroups=subgroups,
        batch_size=batch,
        seconds_per_round=kernel["seconds_per_round"],
        flops_per_round=kernel["flops_per_round"],
        gflops_per_s=kernel["gflops_per_s"],
        matmul_gflops_per_s=kernel["matmul_gflops_per_s"],
    )


def cnn_row(sizes):
    from fedjax_clust.bench.image import run_image_benchmark

    clients, subgroups, batch = sizes["cnn"]
    rows = list(
        run_image_benchmark(
            clients,
            subgroups=subgroups,
            batch_size=batch,
            model="cnn",
            repeats=max(1, sizes["repeats"] // 3),
            loop_clients=0,
            conv_models=sizes["conv_models"],
        )
    )
    fc = next(r for r in rows if r.get("benchmark") == "images-federated-clustering")
    return target_row(
        "cnn-round",
        fc["seconds_per_round"],
        clients=fc["clients"],
        subgroups=subgroups,
        batch_size=batch,
        flops_per_round=fc["flops_per_round"],
        fraction_of_matmul=fc["fraction_of_matmul"],
    )
