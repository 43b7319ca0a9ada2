"""``fedjax-clust bench --model study``: the host time a study adds to the sweeps it runs.

A study (:func:`fedjax_clust.run.study.study`) runs one sweep per algorithm, then computes its intervals and
paired differences and writes its tables and two figures. This benchmark runs the same sweeps by hand (each
:func:`fedjax_clust.run.sweep.sweep` with the study's grid, seeds and options, writing its folder) and the study,
alternately (``repeats`` pairs, the order flipped every pair, each into a fresh folder), and reports the median
wall seconds of each and their ratio: what a user pays for the study's bookkeeping, tables and figures over
launching the sweep programs themselves. Both compile the same programs (every sweep traces its own), so the
ratio compares like with like.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import warnings
from typing import Sequence

from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.statistics import FewSeedsWarning
from fedjax_clust.run.study import study
from fedjax_clust.run.sweep import sweep
from fedjax_clust.tasks import synthetic_regression

__all__ = ["run_study_overhead_benchmark"]


def run_study_overhead_benchmark(
    *,
    algorithms: Sequence[str] = ("local", "global", "ground-truth"),
    clients_per_cluster: int = 25,
    rounds: int = 300,
    seeds: Sequence[int] = (0, 1, 2),
    learning_rates: Sequence[float] = (0.005, 0.01),
    repeats: int = 5,
):
    """Yield one row: the median seconds of the study and of the same sweeps by hand, and their ratio (see the
    module docstring). The synthetic task (4 clusters of ``clients_per_cluster`` clients, one per seed),
    ``rounds`` rounds evaluated every 10, the learning rates as the study's grid."""

    def task(seed):
        return synthetic_regression(num_clusters=4, clients_per_cluster=clients_per_cluster, seed=seed)

    every, seeds = Evaluation(eval_every=10), list(seeds)
    grid = {"learning_rate": list(learning_rates)}
    times: dict = {"study": [], "by_hand": []}
    inside = []
    with tempfile.TemporaryDirectory() as tmp:

        def by_hand(folder):
            for name in algorithms:
                quiet = Output(out_dir=os.path.join(folder, name), progress=False)
                sweep(name, task, grid=grid, rounds=rounds, seeds=seeds, evaluation=every, output=quiet)

        def whole(folder):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FewSeedsWarning)
                quiet = Output(out_dir=folder, progress=False)
                done = study(
                    list(algorithms), task, grid=grid, rounds=rounds, seeds=seeds, evaluation=every, output=quiet
                )
                inside.append(done.seconds)

        for r in range(repeats + 1):  # the first pair warms up (imports, matplotlib's fonts)
            for kind in ("study", "by_hand") if r % 2 == 0 else ("by_hand", "study"):
                folder = os.path.join(tmp, f"{kind}{r}")
                start = time.perf_counter()
                (whole if kind == "study" else by_hand)(folder)
                if r > 0:
                    times[kind].append(time.perf_counter() - start)
    study_s, hand_s = statistics.median(times["study"]), statistics.median(times["by_hand"])
    yield {
        "benchmark": "study-overhead",
        "algorithms": list(algorithms),
        "runs": len(algorithms) * len(learning_rates) * len(seeds),
        "rounds": rounds,
        "repeats": repeats,
        "study_seconds": study_s,
        "by_hand_seconds": hand_s,
        "study_over_by_hand": round(study_s / hand_s, 4),
        "study_seconds_in_sweep_programs": statistics.median(inside[1:]),
    }
