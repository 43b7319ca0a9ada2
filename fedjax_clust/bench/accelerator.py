"""``fedjax-clust bench --suite accelerator --out DIR``: every accelerator promise measured in one run, one report.

Whoever holds a GPU (or a TPU, or only a CPU) runs this one command and gets ``DIR/report.json`` (strict JSON),
``DIR/report.md`` and ``DIR/scaling.png``:

* ``device``: platform, kind, device count, total memory, the float32 matmul rate at full precision and at the
  default precision (TF32 on a GPU) and the streaming copy bandwidth, all measured in this run;
* ``rows``: one per target of :data:`TARGETS` (the accelerator-first work's targets on one H100), each with its
  ``name``, ``target`` (text), ``limit`` and ``comparison``, ``measured``, ``unit``, ``status`` ("pass", "fail",
  "not judged" at ``--quick`` sizes, or "skipped", with the ``reason`` and, for a size that does not fit, the bytes
  it ``needs``) and where the time goes (FLOPs and bytes the work must do, the achieved fraction of the matmul rate
  / copy bandwidth);
* ``costs``: measurements without a target: the round with and without XLA's deterministic GPU ops (separate
  processes), at full and at default matmul precision with the final error of the default experiment under
  each, the fused round against a round launched from Python, a learning-rate x seed sweep against the same
  runs one at a time, the robust aggregators against the mean;
* ``scaling.png``: seconds per round against N for both radius rules, with the memory-roofline line (the bytes
  a fixed-radius round must move at the measured copy bandwidth).

``quick=True`` (``--quick``) runs every row at tiny sizes (a few minutes on 2 CPU cores): the test suite uses it
to check the report's structure and units; its rows are "not judged" (their targets are full-size). At full size
the rows are the targets' sizes (N up to 10,000,000 clients in subgroups); a size whose estimated memory
(:func:`synthetic_round_bytes`) exceeds the device's total memory is skipped, never crashes the report.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from typing import Optional

import jax
import numpy as np

from fedjax_clust.algorithms import make_algorithm
from fedjax_clust.bench.rounds import (
    copy_gbytes_per_s,
    fc_round_bytes,
    fc_round_flops,
    matmul_gflops,
    time_fused_round,
    time_round,
)
from fedjax_clust.parallel.memory import device_total_memory, peak_memory_bytes
from fedjax_clust.tasks import synthetic_regression

__all__ = ["run_accelerator_suite", "TARGETS", "SIZES", "synthetic_round_bytes", "REPORT_FILES"]

REPORT_FILES = ("report.json", "report.md", "scaling.png")

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


def _row(name: str, measured, **details) -> dict:
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


def _unjudged(row: dict) -> dict:
    """A row measured at ``--quick`` sizes: its targets are full-size ones, so it is "not judged" (a skipped row
    stays skipped)."""
    return row if row["status"] == "skipped" else {**row, "status": "not judged"}


def _skipped(name: str, reason: str, **details) -> dict:
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


def _task(num_clients: int):
    per_cluster = max(1, num_clients // 4)
    return synthetic_regression(num_clusters=max(1, num_clients // per_cluster), clients_per_cluster=per_cluster)


def _fc(task, rule: str, **options):
    radius = dict(radius=50.0) if rule == "radius" else dict(quantile=0.2)
    return make_algorithm(
        "federated-clustering", task, learning_rate=0.01, momentum=0.9, clustering_steps=STEPS, **radius, **options
    )


def _host_rss() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _fc_rows(sizes, memory, copy, matmul, curve):
    """The quantile-vs-radius rows at every N, the small / large absolute rows and the bandwidth row."""
    rows = []
    measured = {}
    bandwidth_n = sizes["bandwidth_clients"]
    for n in sorted(set(sizes["quantile_clients"]) | {bandwidth_n}):
        need = synthetic_round_bytes(n)
        if need > memory:
            measured[n] = None
            rows.append(
                _skipped(
                    "fc-quantile-vs-radius", f"needs {need} bytes, the device has {memory}", clients=n, needs_bytes=need
                )
            )
            continue
        task = _task(n)
        seconds = {rule: time_round(_fc(task, rule), task, sizes["repeats"]) for rule in ("quantile", "radius")}
        measured[n] = seconds
        flops = fc_round_flops(n, SAMPLES, DIM, STEPS)
        moved = fc_round_bytes(n, DIM, STEPS)
        for rule, s in seconds.items():
            curve.append({"clients": n, "rule": rule, "seconds_per_round": s})
        if n in sizes["quantile_clients"]:
            rows.append(
                _row(
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
                _row(
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
            rows.append(_skipped(name, "did not fit the device", clients=n))
        else:
            rows.append(
                _row(
                    name,
                    measured[n]["quantile"],
                    clients=n,
                    fraction_of_matmul=fc_round_flops(n, SAMPLES, DIM, STEPS) / measured[n]["quantile"] / 1e9 / matmul,
                )
            )
    return rows


def _baseline_rows(sizes):
    task = _task(sizes["baseline_clients"])
    rows = []
    for name in ("local", "global", "ground-truth"):
        algo = make_algorithm(name, task, learning_rate=0.01, momentum=0.9)
        single = time_round(algo, task, sizes["repeats"])
        fused, per_call = time_fused_round(algo, task, max(2, sizes["repeats"] // 2), single_round_seconds=single)
        rows.append(
            _row(
                "baseline-round",
                fused,
                algorithm=name,
                clients=task.num_clients,
                seconds_per_round_launched=single,
                fused_rounds_per_call=per_call,
            )
        )
    return rows


def _scale_row(name, n, group_size, sizes, memory, copy, curve):
    """One frontier round: ``n`` clients in random subgroups of ``group_size`` clients (``n``: the full N^2, one
    group), both rules when full."""
    subgroups = max(1, n // group_size)
    group = -(-n // subgroups)
    budget = min(memory // 4, 1 << 30)
    need = synthetic_round_bytes(n, group if subgroups > 1 else None, budget)
    if need > memory:
        return [
            _skipped(
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
    task = _task(n)
    build_seconds = time.perf_counter() - start
    host_build = _host_rss()
    rules = ("radius", "quantile") if subgroups == 1 else ("quantile",)
    rows = []
    for rule in rules:
        algo = _fc(task, rule, subgroups=subgroups)
        seconds = time_round(algo, task, max(1, sizes["repeats"] // 2), warmup=1)
        moved = fc_round_bytes(n, DIM, STEPS, group)
        if subgroups == 1:
            curve.append({"clients": n, "rule": rule, "seconds_per_round": seconds})
        rows.append(
            _row(
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


def _population_rows(sizes):
    """FedAvg's cohort round and state at growing N (:mod:`fedjax_clust.bench.population`, server layout):
    the largest N's seconds and bytes over the smallest's."""
    from fedjax_clust.bench.population import run_population_suite

    report = run_population_suite(**sizes["population"])
    cohort = min(sizes["population"]["cohorts"])
    rows = sorted((r for r in report["rows"] if r["cohort"] == cohort), key=lambda r: r["clients"])
    small, large = rows[0], rows[-1]
    details = dict(clients=large["clients"], cohort=large["cohort"], small_clients=small["clients"])
    return [
        _row(
            "population-seconds",
            large["seconds"] / small["seconds"],
            **details,
            seconds={r["clients"]: r["seconds"] for r in rows},
        ),
        _row(
            "population-state",
            large["state_bytes"] / small["state_bytes"],
            **details,
            state_bytes={r["clients"]: r["state_bytes"] for r in rows},
        ),
    ]


def _streaming_rows(sizes):
    """Host-resident rows against resident ones, Federated-Clustering and Ditto, one process per placement
    (:mod:`fedjax_clust.bench.streaming`)."""
    from fedjax_clust.bench.streaming import run_streaming_suite

    report = run_streaming_suite(**sizes["streaming"])
    out = []
    for host in (r for r in report["rows"] if r["placement"] == "host"):
        device = next(r for r in report["rows"] if r["placement"] == "device" and r["algorithm"] == host["algorithm"])
        out.append(
            _row(
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


def _mlp_row(sizes):
    from fedjax_clust.bench.mlp import run_mlp_benchmark

    clients, subgroups, batch = sizes["mlp"]
    rows = list(
        run_mlp_benchmark(
            clients, subgroups=subgroups, batch_size=batch, repeats=max(1, sizes["repeats"] // 3), single_device=False
        )
    )
    kernel = next(r for r in rows if r.get("benchmark") == "mlp-cross-gradients")
    return _row(
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


def _cnn_row(sizes):
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
    return _row(
        "cnn-round",
        fc["seconds_per_round"],
        clients=fc["clients"],
        subgroups=subgroups,
        batch_size=batch,
        flops_per_round=fc["flops_per_round"],
        fraction_of_matmul=fc["fraction_of_matmul"],
    )


# ------------------------------------------------------------------------------------------------ the costs
_PROBE = """
import json, sys
from fedjax_clust.bench.accelerator import probe_round
print(json.dumps(probe_round(*map(int, sys.argv[1:5]))))
"""


def probe_round(num_clients: int, per_cluster: int, rounds: int, repeats: int) -> dict:
    """Seconds per FC round (quantile rule) at ``num_clients`` and the final mean squared distance to the optima
    after ``rounds`` rounds of the default experiment's setting (``per_cluster`` clients in each of its 4
    clusters, as :func:`_precision_cost` runs it); run in a fresh process by the determinism cost
    (its XLA flags are fixed when the process starts)."""
    from fedjax_clust.run.simulate import simulate

    task = _task(num_clients)
    seconds = time_round(_fc(task, "quantile"), task, repeats)
    small = synthetic_regression(clients_per_cluster=per_cluster)
    error = simulate(_fc(small, "quantile"), small, rounds=rounds, progress=False).summary["mean_sq_dist_to_optimum"]
    return {"seconds_per_round": seconds, "final_mean_sq_dist": error}


def _determinism_cost(sizes) -> dict:
    """The FC round and the default experiment's final error with XLA's deterministic GPU ops (the command line's
    default) and without them (``FEDJAX_CLUST_GPU_DETERMINISM=0``), each in its own process."""
    from fedjax_clust.parallel.determinism import ENV_SWITCH, deterministic_xla_flags

    per_cluster, rounds = sizes["experiment"]
    out = {}
    for label, switch in (("deterministic", "1"), ("xla-default", "0")):
        env = {**os.environ, ENV_SWITCH: switch}
        env.pop("XLA_FLAGS", None)
        if switch == "1":
            flags = deterministic_xla_flags("")
            if flags:
                env["XLA_FLAGS"] = flags
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                _PROBE,
                str(sizes["cost_clients"]),
                str(per_cluster),
                str(rounds),
                str(sizes["repeats"]),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if done.returncode != 0:
            out[label] = {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
        else:
            out[label] = json.loads(done.stdout.strip().splitlines()[-1])
        out[label]["xla_flags"] = env.get("XLA_FLAGS", "")
    if all("seconds_per_round" in v for v in out.values()):
        out["time_ratio_deterministic_vs_default"] = (
            out["deterministic"]["seconds_per_round"] / out["xla-default"]["seconds_per_round"]
        )
    out["clients"] = sizes["cost_clients"]
    out["applies"] = jax.default_backend() == "gpu"
    return out


def _precision_cost(sizes) -> dict:
    """The FC round and the default experiment's final error at full ("highest") and at default matmul
    precision (TF32 on a GPU, bfloat16 passes on a TPU; a CPU computes both alike)."""
    from fedjax_clust.run.simulate import simulate

    task = _task(sizes["cost_clients"])
    per_cluster, rounds = sizes["experiment"]
    small = synthetic_regression(clients_per_cluster=per_cluster)
    out = {"clients": task.num_clients, "experiment_clients": small.num_clients, "experiment_rounds": rounds}
    for precision in ("highest", "default"):
        seconds = time_round(_fc(task, "quantile", matmul_precision=precision), task, sizes["repeats"])
        result = simulate(_fc(small, "quantile", matmul_precision=precision), small, rounds=rounds, progress=False)
        out[precision] = {"seconds_per_round": seconds, "final_mean_sq_dist": result.summary["mean_sq_dist_to_optimum"]}
    out["time_ratio_highest_vs_default"] = out["highest"]["seconds_per_round"] / out["default"]["seconds_per_round"]
    return out


def _fused_cost(sizes) -> dict:
    task = _task(sizes["cost_clients"])
    algo = _fc(task, "quantile")
    launched = time_round(algo, task, sizes["repeats"])
    fused, per_call = time_fused_round(algo, task, max(2, sizes["repeats"] // 2), single_round_seconds=launched)
    return {
        "clients": task.num_clients,
        "seconds_per_round_launched": launched,
        "seconds_per_round_fused": fused,
        "fused_rounds_per_call": per_call,
        "overhead_per_launched_round_s": launched - fused,
    }


def _sweep_cost(sizes) -> dict:
    """Fig. 3's kind of grid (at full size 4 learning rates x 2 seeds of FC on the synthetic task; --quick 2 x 1)
    as one sweep (its default batching: vmapped on an accelerator) against the same runs one after another, in
    this process."""
    from fedjax_clust.run.simulate import simulate
    from fedjax_clust.run.sweep import sweep

    per_cluster, rounds = sizes["sweep"]
    rates, seeds = sizes["sweep_grid"]

    def task_of(seed):
        return synthetic_regression(clients_per_cluster=per_cluster, seed=seed)

    # the grid's largest rate diverges at the full size (N = 300; a GPU run stopped there): both sides go on
    # through non-finite values, so they time the same work
    options = dict(momentum=0.9, quantile=0.2)
    sweep(
        "federated-clustering",
        task_of,
        grid={"learning_rate": list(rates)},
        seeds=list(seeds),
        rounds=2,
        options=options,
        progress=False,
        on_nonfinite="warn",
    )  # compiles the sweep's program shapes once
    start = time.perf_counter()
    sweep(
        "federated-clustering",
        task_of,
        grid={"learning_rate": list(rates)},
        seeds=list(seeds),
        rounds=rounds,
        options=options,
        progress=False,
        on_nonfinite="warn",
    )
    swept = time.perf_counter() - start
    start = time.perf_counter()
    for lr in rates:
        for seed in seeds:
            task = task_of(seed)
            simulate(
                make_algorithm("federated-clustering", task, learning_rate=lr, **options),
                task,
                rounds=rounds,
                seed=seed,
                progress=False,
                on_nonfinite="warn",
            )
    single = time.perf_counter() - start
    return {
        "runs": len(rates) * len(seeds),
        "rounds": rounds,
        "clients": 4 * per_cluster,
        "sweep_seconds": swept,
        "one_at_a_time_seconds": single,
        "speedup": single / swept,
    }


def _robust_cost(sizes) -> dict:
    from fedjax_clust.bench.rounds import run_robust_benchmarks

    messages, dim = sizes["robust"]
    rows = list(run_robust_benchmarks(messages, dim, repeats=sizes["repeats"], clients=max(8, messages)))
    return {"messages": messages, "dim": dim, "aggregators": rows}


# ------------------------------------------------------------------------------------------------ the report
def _device(sizes) -> dict:
    device = jax.devices()[0]
    size = sizes["matmul"]
    return {
        "platform": device.platform,
        "kind": device.device_kind,
        "count": jax.device_count(),
        "memory_bytes": device_total_memory(device),
        "jax": jax.__version__,
        "matmul_size": size or ({"cpu": 1024}.get(device.platform, 8192)),
        "matmul_gflops_per_s_highest": matmul_gflops(size, precision="highest"),
        "matmul_gflops_per_s_default": matmul_gflops(size, precision="default"),
        "copy_gbytes_per_s": copy_gbytes_per_s(None if size is None else 1 << 24),
    }


def _markdown(report: dict) -> str:
    d = report["device"]
    lines = [
        f"# Accelerator report: {d['kind']} ({d['platform']} x {d['count']})",
        "",
        f"`{report['command']}` at commit `{report['commit']}`, fedjax-clust {report['version']}, "
        f"{report['date']}; "
        + (f"{report['seconds']:.0f} s." if report.get("seconds") is not None else "several device calls (notes)."),
        "",
    ]
    if not report.get("complete", True):
        lines += ["**Incomplete: the run stopped after the rows and costs below.**", ""]
    if report["quick"]:
        lines += ["**Quick run: tiny sizes, so no row is judged against its full-size target.**", ""]
    lines += [
        f"Device: {d['memory_bytes'] or 0:.3g} bytes; float32 matmul ({d['matmul_size']}^3) "
        f"{d['matmul_gflops_per_s_highest']:.1f} GFLOP/s at full precision, "
        f"{d['matmul_gflops_per_s_default']:.1f} at the default; copy {d['copy_gbytes_per_s']:.1f} GB/s.",
        "",
        "| target | size | measured | unit | status |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in report["rows"]:
        size = ", ".join(
            f"{k} {row[k]}" for k in ("algorithm", "rule", "clients", "subgroups", "group_size") if k in row
        )
        value = "" if row["measured"] is None else f"{row['measured']:.4g}"
        status = row["status"] + (f" ({row['reason']})" if row.get("reason") else "")
        lines.append(f"| {row['target']} | {size} | {value} | {row['unit']} | {status} |")
    costs = report["costs"]
    lines += ["", "## Costs", ""]
    p = costs.get("precision", {})
    if "highest" in p:
        lines.append(
            f"- precision: FC round {p['highest']['seconds_per_round']:.3g} s (highest) vs "
            f"{p['default']['seconds_per_round']:.3g} s (default); final error "
            f"{p['highest']['final_mean_sq_dist']:.3g} vs {p['default']['final_mean_sq_dist']:.3g}"
        )
    det = costs.get("determinism", {})
    if "time_ratio_deterministic_vs_default" in det:
        lines.append(
            f"- deterministic GPU ops: time ratio {det['time_ratio_deterministic_vs_default']:.3g} "
            f"(applies on a GPU only: {det['applies']}); final error "
            f"{det['deterministic']['final_mean_sq_dist']:.3g} vs {det['xla-default']['final_mean_sq_dist']:.3g}"
        )
    f = costs.get("fused", {})
    if "seconds_per_round_fused" in f:
        lines.append(
            f"- fused rounds: {f['seconds_per_round_fused']:.3g} s vs {f['seconds_per_round_launched']:.3g} s "
            "launched from Python"
        )
    for key, cost in costs.items():
        if "error" in cost:
            lines.append(f"- {key}: failed ({cost['error']})")
    s = costs.get("sweep", {})
    if "speedup" in s:
        lines.append(
            f"- sweep of {s['runs']} runs: {s['sweep_seconds']:.3g} s vs {s['one_at_a_time_seconds']:.3g} s "
            f"one at a time ({s['speedup']:.3g}x)"
        )
    for r in costs.get("robust", {}).get("aggregators", []):
        if "ratio_to_mean" in r:
            what = r.get("aggregator") or f"order statistic ({r.get('select')})"
            lines.append(f"- {what}: {r['ratio_to_mean']:.3g}x the mean's time")
    if report.get("notes"):  # added by hand where a report was assembled from several device calls
        lines += ["", "## Notes", ""] + [f"- {note}" for note in report["notes"]]
    return "\n".join(lines) + "\n"


def _plot(curve, copy, path):
    from fedjax_clust.io.figures import figure_for_file

    fig, ax = figure_for_file(figsize=(6.4, 4.6))
    for rule, marker in (("radius", "o"), ("quantile", "s")):
        points = sorted((c["clients"], c["seconds_per_round"]) for c in curve if c["rule"] == rule)
        if points:
            ax.loglog(*zip(*points), marker=marker, label=f"FC, {rule} rule")
    sizes = sorted({c["clients"] for c in curve})
    if sizes:
        ax.loglog(
            sizes,
            [fc_round_bytes(n, DIM, STEPS) / (copy * 1e9) for n in sizes],
            "k--",
            label="memory roofline (fixed radius)",
        )
    ax.set_xlabel("clients N (full N^2 round)")
    ax.set_ylabel("seconds per round")
    ax.legend()
    fig.savefig(path, dpi=120, bbox_inches="tight")


def _commit() -> str:
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return (
            subprocess.run(
                ["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or "unknown"
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run_accelerator_suite(
    out_dir: str, *, quick: bool = False, overwrite: bool = False, progress=print, memory_limit: Optional[int] = None
) -> dict:
    """Measure every target and cost (module docstring) and write the report into ``out_dir``; returns it.
    ``memory_limit`` (bytes) stands in for the device's memory when deciding what fits (tests)."""
    from fedjax_clust import __version__
    from fedjax_clust.io.jsonio import write_json
    from fedjax_clust.io.run_folder import check_out_dir, claim_outputs

    out_dir = check_out_dir(out_dir, "--out")
    claim_outputs(out_dir, REPORT_FILES, overwrite)
    sizes = SIZES["quick" if quick else "full"]
    started = time.perf_counter()
    progress("device references")
    device = _device(sizes)
    memory = memory_limit or device["memory_bytes"] or 1 << 40
    copy, matmul = device["copy_gbytes_per_s"], device["matmul_gflops_per_s_highest"]
    curve: list = []
    rows: list = []
    steps = [  # the newest targets first: a device call cut short still measures them
        ("population", lambda: _population_rows(sizes)),
        ("streaming", lambda: _streaming_rows(sizes)),
        ("FC quantile vs radius", lambda: _fc_rows(sizes, memory, copy, matmul, curve)),
        ("Local / Global / Ground-truth", lambda: _baseline_rows(sizes)),
        ("full N^2", lambda: _scale_row("fc-full-n2", sizes["full_n2"], sizes["full_n2"], sizes, memory, copy, curve)),
        ("frontier 1M", lambda: _scale_row("frontier-1m", *sizes["frontier_1m"], sizes, memory, copy, curve)),
        ("frontier 10M", lambda: _scale_row("frontier-10m", *sizes["frontier_10m"], sizes, memory, copy, curve)),
        ("MLP kernel", lambda: [_mlp_row(sizes)]),
        ("CNN round", lambda: [_cnn_row(sizes)]),
    ]
    costs: dict = {}
    report = {
        "command": "fedjax-clust bench --suite accelerator" + (" --quick" if quick else ""),
        "commit": _commit(),
        "version": __version__,
        "date": time.strftime("%Y-%m-%d"),
        "quick": quick,
        "complete": False,
        "device": device,
        "rows": rows,
        "costs": costs,
        "scaling": curve,
        "seconds": 0.0,
    }

    def write(done: bool) -> None:
        # rewritten after every step: a run cut off (a lease's time limit, a crash) keeps what it measured
        report["complete"] = done
        report["seconds"] = time.perf_counter() - started
        write_json(os.path.join(out_dir, "report.json"), report)
        with open(os.path.join(out_dir, "report.md"), "w") as f:
            f.write(_markdown(report))

    for label, step in steps:
        progress(f"{label} ({time.perf_counter() - started:.0f} s)")
        rows += [_unjudged(row) for row in step()] if quick else step()
        write(False)
    for label, key, cost in (
        ("precision", "precision", _precision_cost),
        ("determinism", "determinism", _determinism_cost),
        ("fused rounds", "fused", _fused_cost),
        ("sweep", "sweep", _sweep_cost),
        ("robust aggregators", "robust", _robust_cost),
    ):
        progress(f"{label} ({time.perf_counter() - started:.0f} s)")
        costs[key] = cost(sizes)
        write(False)
    write(True)
    _plot(curve, copy, os.path.join(out_dir, "scaling.png"))
    return report
