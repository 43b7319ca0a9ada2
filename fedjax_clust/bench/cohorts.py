"""A cohort's round whatever the population: N = 10^3 .. 10^6 clients indexing one pool (``bench --suite cohorts``).

FedAvg (``global``) and IFCA (``ifca-1``, K = 4, gradient averaging) with LEAF's FEMNIST CNN (``leaf-cnn``,
6.6 M parameters at 62 classes, 6.5 M at MNIST's 10) on the ``mnist-population`` task
(:mod:`fedjax_clust.data.pooled`: N clients indexing the offline MNIST images, LEAF-like log-normal sizes of
mean 32, at most 64, rotated by cluster), S = 10 and 100 clients per round, minibatches of B = 10, one local step
with momentum. The clients' rows (their assignment to the server's models) stay in host memory and each round
streams its cohort (:mod:`fedjax_clust.run.streaming`): the cohort's images are built on the device from their
indices and a copy of the pool kept there, the server's models stay on the device. Each (algorithm, N) runs in a
process of its own (the population built once, the cohort sizes in increasing order).

Per row: the median seconds per round over ``repeats`` stretches of ``rounds`` rounds after a warm-up stretch;
the bytes on the device after the last stretch (every live array, ``jax.live_arrays``: the server's models and
optimiser state, the blocks in flight) and on an accelerator its peak bytes in use (``memory_stats``, with the
round's temporaries; the process's peak, so a larger cohort's row also covers the smaller ones before it); the
host bytes of the population's index and of the rows. Per (algorithm, S), each population's seconds and device
bytes over those of the smallest N: the issue's targets are within 1.2x and 1.1x.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, Optional

from fedjax_clust.bench.processes import (
    device_peak_bytes,
    live_device_bytes,
    median_stretch_seconds,
    row_in_subprocess,
)

__all__ = ["run_cohorts_suite", "cohorts_report_markdown", "measure_cohort_rounds", "POPULATION"]

POPULATION = dict(mean_examples=32.0, size_sigma=0.5, max_client_examples=64, test_examples=8)
CLUSTERS = 4


def measure_cohort_rounds(
    algorithm: str,
    clients: int,
    cohorts,
    *,
    model: str,
    batch_size: int,
    rounds: int,
    repeats: int,
    seed: int = 0,
) -> list:
    """The rows of one (algorithm, N) in this process, one per cohort size, smallest first (module docstring):
    the population is built once; the accelerator's peak is the process's, so each row's peak is that of its
    own and the smaller cohorts'."""
    import jax
    import numpy as np

    from fedjax_clust.algorithms import make_algorithm
    from fedjax_clust.core.host_rows import host_bytes
    from fedjax_clust.core.keys import init_key
    from fedjax_clust.run.placement import host_start
    from fedjax_clust.run.streaming import streamed_step
    from fedjax_clust.tasks import make_task

    task = make_task("mnist-population", num_clients=clients, model=model, seed=seed, **POPULATION)
    extra: dict[str, Any] = {"num_clusters": CLUSTERS} if algorithm.startswith("ifca") else {}
    key = jax.random.PRNGKey(seed)
    rows: list[dict] = []
    for cohort in sorted(cohorts):
        algo = make_algorithm(algorithm, task, learning_rate=0.01, participation=cohort, batch_size=batch_size, **extra)
        params = task.init_params(jax.random.fold_in(key, 0))
        round_key = jax.random.fold_in(key, 1)
        shapes = jax.eval_shape(lambda p, k: algo.start(p, clients, k), params, init_key(key))
        step = streamed_step(algo, task.data, round_key)
        state = host_start(algo, params, clients, init_key(key), None)
        del params
        row: dict[str, Any] = {"algorithm": algorithm, "clients": clients, "cohort": cohort}
        row["num_params"] = int(task.config["num_params"])
        row["index_bytes"] = int(task.data["x"].index_bytes + task.data["y"].nbytes)
        row["images_bytes"] = int(task.data["x"].nbytes)
        row["row_bytes"] = host_bytes(shapes)
        last = {}

        def run(state, first, count):
            last["state"] = jax.block_until_ready(step(state, first, count)[0])
            return last["state"]

        row["seconds"] = median_stretch_seconds(run, state, rounds=rounds, repeats=repeats)
        row["device_bytes"] = live_device_bytes()
        row["device_peak_bytes"] = device_peak_bytes()
        row["device"] = jax.devices()[0].device_kind
        assert np.isfinite(np.asarray(jax.tree.leaves(last["state"].params.models)[0])).all()
        rows.append(row)
    return rows


def run_cohorts_suite(
    *,
    algorithms=("global", "ifca-1"),
    populations=(1000, 10_000, 100_000, 1_000_000),
    cohorts=(10, 100),
    model: str = "leaf-cnn",
    batch_size: int = 10,
    rounds: int = 3,
    repeats: int = 3,
    progress: Optional[Callable[[str], None]] = None,
) -> dict:
    """The rows of the module docstring, each configuration in its own process."""
    say = progress or (lambda label: None)
    rows: list[dict] = []
    for algorithm in algorithms:
        for clients in populations:
            sizes = [s for s in cohorts if s <= clients]
            say(f"{algorithm}, N = {clients:,}, S = {', '.join(map(str, sizes))}")
            config = dict(
                algorithm=algorithm,
                clients=clients,
                cohorts=sizes,
                model=model,
                batch_size=batch_size,
                rounds=rounds,
                repeats=repeats,
            )
            rows.extend(row_in_subprocess("fedjax_clust.bench.cohorts", config))
    rows.sort(key=lambda r: (algorithms.index(r["algorithm"]), r["cohort"], r["clients"]))
    smallest: dict = {}
    for row in rows:
        first = smallest.setdefault((row["algorithm"], row["cohort"]), row)
        row["seconds_over_smallest"] = row["seconds"] / first["seconds"]
        row["device_bytes_over_smallest"] = row["device_bytes"] / first["device_bytes"]
        if row["device_peak_bytes"] and first["device_peak_bytes"]:
            row["device_peak_over_smallest"] = row["device_peak_bytes"] / first["device_peak_bytes"]
    return {
        "cohort_images": "device",  # where a streamed cohort's images are built (reports before this field: host)
        "model": model,
        "population": dict(POPULATION),
        "batch_size": batch_size,
        "rounds": rounds,
        "repeats": repeats,
        "device": rows[0]["device"],
        "rows": rows,
    }


def cohorts_report_markdown(report: dict) -> str:
    population = report["population"]
    lines = [
        "# A cohort's round whatever the population",
        "",
        f"`{report['model']}` ({report['rows'][0]['num_params']:,} parameters) on `mnist-population` (clients "
        f"index the offline MNIST pool: log-normal sizes, mean {population['mean_examples']:g}, at most "
        f"{population['max_client_examples']}), B = {report['batch_size']}, rows on the host, each cohort's "
        f"images built on the {report.get('cohort_images', 'host')} from their indices; median seconds per round "
        f"of {report['repeats']} stretches of {report['rounds']} rounds after a warm-up, one process per row, on "
        f"{report['device']}. Device MB: live arrays after the rounds (peak: the accelerator's peak in use); "
        "x smallest: over the smallest N of the same algorithm and S.",
        "",
        "| algorithm | N | S | training index MB (host) | images GB (not built) | device MB | peak MB | s / round "
        "| s x smallest | device x smallest |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        peak = "" if not r["device_peak_bytes"] else f"{r['device_peak_bytes'] / 1e6:.1f}"
        lines.append(
            f"| {r['algorithm']} | {r['clients']:,} | {r['cohort']} | {r['index_bytes'] / 1e6:.1f} | "
            f"{r['images_bytes'] / 1e9:.1f} | {r['device_bytes'] / 1e6:.1f} | {peak} | {r['seconds']:.4f} | "
            f"{r['seconds_over_smallest']:.2f} | {r['device_bytes_over_smallest']:.3f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    options = json.loads(sys.argv[1])
    print(
        json.dumps(
            measure_cohort_rounds(
                options["algorithm"],
                options["clients"],
                options["cohorts"],
                model=options["model"],
                batch_size=options["batch_size"],
                rounds=options["rounds"],
                repeats=options["repeats"],
            )
        )
    )
