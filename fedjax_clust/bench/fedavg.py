"""``fedjax-clust bench --model fedavg``: what local training costs, against the one-step round.

On the MNIST benchmark task (:func:`~fedjax_clust.bench.image.benchmark_image_task`: N clients of 2 B real
images, here with the MLP model), each row times the fused rounds ``simulate`` runs
(:func:`~fedjax_clust.bench.rounds.time_fused_round`, median of ``repeats`` calls of about a second each, after
a warm-up):

* ``global``: the seeds' Global, one minibatch gradient per client and one averaged step (the baseline);
* ``fedavg`` with tau = 1 and tau = ``local_steps`` minibatch steps per client, and one epoch
  (``local_epochs=1``: 2 steps of B over the 2 B images);
* ``fedadam`` with tau = ``local_steps`` (the server's Adam step on top);
* ``fedavg-all-at-once``: the tau-step round with ``client_chunk=None``, every client's local training at once,
  against the chunks "auto" picks on a CPU (:mod:`fedjax_clust.core.local_training`, "Chunks"; the one-epoch
  round's two steps are not chunked); ``chunk_speedup`` is the all-at-once row's seconds over the chunked
  one's.

``per_step_ratio`` is a row's seconds over tau times the Global round's: the issue's target is tau = 5 local
steps within 1.2x of 5 Global rounds (the local loop adds nothing beyond its work). All rows run in one process,
one after the other, so the ratios are same-run ratios.
"""

from __future__ import annotations

from typing import Any

from fedjax_clust.algorithms import make_algorithm
from fedjax_clust.bench.image import benchmark_image_task
from fedjax_clust.bench.rounds import matmul_gflops, time_fused_round, time_round
from fedjax_clust.core.validation import check_int

__all__ = ["run_fedavg_benchmark"]


def run_fedavg_benchmark(clients: int = 1000, *, local_steps: int = 5, batch_size: int = 32, repeats: int = 5):
    """Yield one dict per configuration (module docstring)."""
    check_int("local_steps", local_steps, 1)
    check_int("batch_size", batch_size, 1)
    check_int("repeats", repeats, 1)
    task = benchmark_image_task(clients, batch_size, model="mlp")
    common: dict[str, Any] = dict(learning_rate=0.05, batch_size=batch_size)
    configurations = [
        ("global", 1, make_algorithm("global", task, momentum=0.0, **common)),
        ("fedavg", 1, make_algorithm("fedavg", task, local_steps=1, **common)),
        ("fedavg", local_steps, make_algorithm("fedavg", task, local_steps=local_steps, **common)),
        ("fedavg-epoch", 2, make_algorithm("fedavg", task, local_epochs=1, **common)),
        ("fedadam", local_steps, make_algorithm("fedadam", task, local_steps=local_steps, **common)),
        (
            "fedavg-all-at-once",
            local_steps,
            make_algorithm("fedavg", task, local_steps=local_steps, client_chunk=None, **common),
        ),
    ]
    yield {"benchmark": "matmul_f32", "gflops_per_s": round(matmul_gflops(), 2)}
    baseline = None
    chunked: dict[tuple, float] = {}
    for name, steps, algo in configurations:
        single = time_round(algo, task, 1, warmup=1)  # sizes each timed call to about a second of rounds
        seconds, rounds = time_fused_round(algo, task, repeats, call_seconds=1.0, single_round_seconds=single)
        baseline = seconds if baseline is None else baseline
        chunked.setdefault((name.removesuffix("-all-at-once"), steps), seconds)
        reference = chunked[(name.removesuffix("-all-at-once"), steps)]
        yield {
            "benchmark": "fedavg-round",
            "algorithm": name,
            "clients": task.num_clients,
            "batch_size": batch_size,
            "local_steps": steps,
            "seconds_per_round": seconds,
            "rounds_per_call": rounds,
            "per_step_ratio": round(seconds / (steps * baseline), 3),
            **({"chunk_speedup": round(seconds / reference, 3)} if name.endswith("-all-at-once") else {}),
        }
