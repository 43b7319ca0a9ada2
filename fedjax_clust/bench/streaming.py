"""Host-resident client rows against the resident state (``bench --suite streaming``).

Federated-Clustering and Ditto, whose clients own a model row (and a momentum / optimiser row), on the
classification task with a one-hidden-layer MLP of about 10,000 parameters (dim 64, hidden 128, 10 classes:
9,610), N clients, S per round. Each configuration runs in a process of its own (a CPU process's memory is the
"device's"), in two placements:

* ``device``: the whole state and data on the device, the rounds fused as ``simulate`` runs them (the state
  donated to each stretch);
* ``host``: the rows in host memory under a device-memory budget (:mod:`fedjax_clust.run.streaming`), each
  cohort copied in and out, pipelined (``prefetch``) and, for comparison, one step after the other
  (``serial``).

Per configuration: the median seconds per round over ``repeats`` stretches of ``rounds`` rounds after a
warm-up stretch (compilation excluded); for ``host`` the seconds per round the host spent gathering and
copying rows in and writing them back (``transfer``; waiting for the round that made the rows is timed apart,
``serial_wait`` / ``prefetch_wait``), and how much of it the pipeline hides,
``(serial - prefetch) / transfer``; the bytes of the rows, and on an accelerator the device's peak bytes in use
(``memory_stats``). ``host_over_device`` is the pipelined host round's time over the resident round's.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, Optional

from fedjax_clust.bench.processes import device_peak_bytes, median_stretch_seconds, row_in_subprocess

__all__ = ["run_streaming_suite", "streaming_report_markdown", "measure_streaming"]

MODEL = dict(dim=64, hidden=128, num_classes=10)


def _task(clients: int, samples: int, seed: int = 0):
    import fedjax_clust as fc

    clusters = 4
    return fc.make_task(
        "classification",
        num_clusters=clusters,
        clients_per_cluster=clients // clusters,
        samples_per_client=samples,
        test_samples_per_client=2,
        seed=seed,
        **MODEL,
    )


def measure_streaming(
    algorithm: str, clients: int, cohort: int, placement: str, *, budget, samples: int, rounds: int, repeats: int
) -> dict:
    """One configuration in this process (module docstring)."""
    import jax
    import numpy as np

    from fedjax_clust.algorithms import make_algorithm
    from fedjax_clust.core.host_rows import host_bytes
    from fedjax_clust.core.keys import init_key
    from fedjax_clust.run.fused import donatable, fuse_rounds
    from fedjax_clust.run.placement import host_start
    from fedjax_clust.run.streaming import plan_rows, streamed_step

    cpu = jax.devices("cpu")[0]
    if placement == "host":  # the task's arrays stay on the host: an accelerator holds cohorts only
        with jax.default_device(cpu):
            task = _task(clients, samples)
    else:
        task = _task(clients, samples)
    algo = make_algorithm(algorithm, task, learning_rate=0.01, participation=cohort)  # momentum: the default
    key = jax.random.PRNGKey(0)
    params = task.init_params(jax.random.fold_in(key, 0))
    round_key = jax.random.fold_in(key, 1)
    shapes = jax.eval_shape(lambda p, k: algo.start(p, clients, k), params, init_key(key))
    row: dict[str, Any] = {"algorithm": algorithm, "clients": clients, "cohort": cohort, "placement": placement}
    row["num_params"] = int(sum(np.size(x) for x in jax.tree.leaves(params)))
    row["row_bytes"] = host_bytes(shapes)

    def stretches(run, state):
        return median_stretch_seconds(run, state, rounds=rounds, repeats=repeats)

    if placement == "device":
        state = donatable(algo.start(params, clients, init_key(key)), task.data)
        assert algo.round is not None  # derived when the algorithm is built
        fused = fuse_rounds(algo.round, donate=True)  # as simulate runs it: each stretch consumes its state

        def run(state, first, count):
            out, _ = fused(state, task.data, round_key, first, count)
            return jax.block_until_ready(out)

        row["seconds"] = stretches(run, state)
    else:
        plan = plan_rows(algo, shapes, task.arrays(), budget=budget, client_rows="host")
        row["budget"], row["cohort_bytes"] = plan.budget, plan.cohort_bytes
        data = jax.tree.map(np.asarray, task.data)
        for mode in ("prefetch", "serial"):
            timings: dict = {}
            step = streamed_step(algo, data, round_key, prefetch=mode == "prefetch", timings=timings)
            state = host_start(algo, params, clients, init_key(key), None)
            row[mode] = stretches(lambda s, first, count: step(s, first, count)[0], state)
            done = 2 + repeats * rounds
            row[f"{mode}_transfer"] = (timings["gather"] + timings["scatter"]) / done
            row[f"{mode}_wait"] = timings["wait"] / done
            del state
        row["seconds"] = row["prefetch"]
        row["transfer"] = row["serial_transfer"]
        row["hidden"] = (row["serial"] - row["prefetch"]) / max(row["transfer"], 1e-12)
    row["device_peak_bytes"] = device_peak_bytes()
    row["device"] = jax.devices()[0].device_kind
    return row


def run_streaming_suite(
    *,
    algorithms=("federated-clustering", "ditto"),
    clients: int = 100_000,
    cohort: int = 100,
    budget: str = "1GiB",
    samples: int = 16,
    rounds: int = 5,
    repeats: int = 3,
    progress: Optional[Callable[[str], None]] = None,
) -> dict:
    """The rows of the module docstring, each configuration in its own process."""
    say = progress or (lambda label: None)
    rows = []
    for algorithm in algorithms:
        for placement in ("device", "host"):
            say(f"{algorithm}, N = {clients:,}, S = {cohort}, {placement}")
            config = dict(
                algorithm=algorithm,
                clients=clients,
                cohort=cohort,
                placement=placement,
                budget=budget,
                samples=samples,
                rounds=rounds,
                repeats=repeats,
            )
            rows.append(row_in_subprocess("fedjax_clust.bench.streaming", config))
        device, host = rows[-2], rows[-1]
        host["host_over_device"] = host["seconds"] / device["seconds"]
    return {
        "model": dict(MODEL),
        "samples": samples,
        "rounds": rounds,
        "repeats": repeats,
        "budget": budget,
        "device": rows[0]["device"],
        "rows": rows,
    }


def streaming_report_markdown(report: dict) -> str:
    model = report["model"]
    timed_apart = all("serial_wait" in r for r in report["rows"] if r["placement"] == "host")
    waited = (  # reports before the wait was timed apart counted it in the copy out
        "rows and the cohort's data in and out in the serial run, not counting the wait for the round that made "
        "the rows; above 100%: the pipeline saved more than the copies, as it also overlaps the host's other "
        "work with the device's"
        if timed_apart
        else "rows in and out in the serial run (the copy out waits for the round that made the rows)"
    )
    lines = [
        "# Host-resident client rows against the resident state",
        "",
        f"Classification MLP (dim {model['dim']}, hidden {model['hidden']}, {model['num_classes']} classes: "
        f"{report['rows'][0]['num_params']:,} parameters), {report['samples']} examples per client; median "
        f"seconds per round of {report['repeats']} stretches of {report['rounds']} rounds after a warm-up, one "
        f"process per row, on {report['device']}. `host`: rows in host memory under a {report['budget']} "
        "budget, pipelined; `serial`: the same without the pipeline; hidden: the share of the transfer the "
        "pipeline hides, (serial - pipelined) / transfer (negative: the pipeline costs more than it hides); "
        f"transfer: the host's seconds per round copying {waited}.",
        "",
        "| algorithm | N | S | placement | rows GB | s / round | serial | transfer | hidden | host / device |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        host = r["placement"] == "host"
        lines.append(
            f"| {r['algorithm']} | {r['clients']:,} | {r['cohort']} | {r['placement']} | "
            f"{r['row_bytes'] / 1e9:.2f} | {r['seconds']:.4f} | "
            + (
                f"{r['serial']:.4f} | {r['transfer']:.4f} | {r['hidden']:.0%} | {r['host_over_device']:.2f} |"
                if host
                else "| | | |"
            )
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    options = json.loads(sys.argv[1])
    result = measure_streaming(
        options["algorithm"],
        options["clients"],
        options["cohort"],
        options["placement"],
        budget=options["budget"],
        samples=options["samples"],
        rounds=options["rounds"],
        repeats=options["repeats"],
    )
    print(json.dumps(result))
