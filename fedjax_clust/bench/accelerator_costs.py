"""The accelerator suite's costs (:mod:`fedjax_clust.bench.accelerator`): measurements without a target.

The round with and without XLA's deterministic GPU ops (each in its own process, :func:`probe_round`), at full and
at default matmul precision with the default experiment's final error under each, the fused round against a round
launched from Python, a learning-rate x seed sweep against the same runs one at a time, and the robust aggregators
against the mean.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import jax

from fedjax_clust.algorithms import make_algorithm
from fedjax_clust.bench.accelerator_targets import fc_algorithm, synthetic_task
from fedjax_clust.bench.rounds import time_fused_round, time_round
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.tasks import synthetic_regression

__all__ = ["probe_round"]

_PROBE = """
import json, sys
from fedjax_clust.bench.accelerator_costs import probe_round
print(json.dumps(probe_round(*map(int, sys.argv[1:5]))))
"""


def probe_round(num_clients: int, per_cluster: int, rounds: int, repeats: int) -> dict:
    """Seconds per FC round (quantile rule) at ``num_clients`` and the final mean squared distance to the optima
    after ``rounds`` rounds of the default experiment's setting (``per_cluster`` clients in each of its 4
    clusters, as :func:`precision_cost` runs it); run in a fresh process by the determinism cost
    (its XLA flags are fixed when the process starts)."""
    from fedjax_clust.run.simulate import simulate

    task = synthetic_task(num_clients)
    seconds = time_round(fc_algorithm(task, "quantile"), task, repeats)
    small = synthetic_regression(clients_per_cluster=per_cluster)
    error = simulate(fc_algorithm(small, "quantile"), small, rounds=rounds, output=Output(progress=False)).summary[
        "mean_sq_dist_to_optimum"
    ]
    return {"seconds_per_round": seconds, "final_mean_sq_dist": error}


def determinism_cost(sizes) -> dict:
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


def precision_cost(sizes) -> dict:
    """The FC round and the default experiment's final error at full ("highest") and at default matmul
    precision (TF32 on a GPU, bfloat16 passes on a TPU; a CPU computes both alike)."""
    from fedjax_clust.run.simulate import simulate

    task = synthetic_task(sizes["cost_clients"])
    per_cluster, rounds = sizes["experiment"]
    small = synthetic_regression(clients_per_cluster=per_cluster)
    out = {"clients": task.num_clients, "experiment_clients": small.num_clients, "experiment_rounds": rounds}
    for precision in ("highest", "default"):
        seconds = time_round(fc_algorithm(task, "quantile", matmul_precision=precision), task, sizes["repeats"])
        result = simulate(
            fc_algorithm(small, "quantile", matmul_precision=precision),
            small,
            rounds=rounds,
            output=Output(progress=False),
        )
        out[precision] = {"seconds_per_round": seconds, "final_mean_sq_dist": result.summary["mean_sq_dist_to_optimum"]}
    out["time_ratio_highest_vs_default"] = out["highest"]["seconds_per_round"] / out["default"]["seconds_per_round"]
    return out


def fused_cost(sizes) -> dict:
    task = synthetic_task(sizes["cost_clients"])
    algo = fc_algorithm(task, "quantile")
    launched = time_round(algo, task, sizes["repeats"])
    fused, per_call = time_fused_round(algo, task, max(2, sizes["repeats"] // 2), single_round_seconds=launched)
    return {
        "clients": task.num_clients,
        "seconds_per_round_launched": launched,
        "seconds_per_round_fused": fused,
        "fused_rounds_per_call": per_call,
        "overhead_per_launched_round_s": launched - fused,
    }


def sweep_cost(sizes) -> dict:
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
        evaluation=Evaluation(on_nonfinite="warn"),
        output=Output(progress=False),
    )  # compiles the sweep's program shapes once
    start = time.perf_counter()
    sweep(
        "federated-clustering",
        task_of,
        grid={"learning_rate": list(rates)},
        seeds=list(seeds),
        rounds=rounds,
        options=options,
        evaluation=Evaluation(on_nonfinite="warn"),
        output=Output(progress=False),
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
                evaluation=Evaluation(on_nonfinite="warn"),
                output=Output(progress=False),
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


def robust_cost(sizes) -> dict:
    from fedjax_clust.bench.rounds import run_robust_benchmarks

    messages, dim = sizes["robust"]
    rows = list(run_robust_benchmarks(messages, dim, repeats=sizes["repeats"], clients=max(8, messages)))
    return {"messages": messages, "dim": dim, "aggregators": rows}
