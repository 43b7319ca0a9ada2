"""``fedjax-clust bench --model attack-switch``: one program switching over attack kinds against a program per kind.

A sweep over attacks x attackers' shares compiles a program per attack kind unless it switches over the kinds
(:mod:`fedjax_clust.robust.attack_switch`). This benchmark runs the same sweep both ways (``attack_switch=False``
and ``True``), for each algorithm and each way of computing a program's runs (``run_batching`` "map", a CPU's
default, and "vmap", an accelerator's), alternately (``repeats`` pairs after one warm-up pair, the order
flipped every pair), and reports the median wall seconds of each, its compile seconds (JAX's compile
events) and the rest, the programs the sweep recorded, their ratio, and how far the switched runs' final
metric is from the per-kind runs' (float32 rounding: the switch's branch is fused apart from its neighbours).

Compilation is what it measures, so run it without JAX's persistent compilation cache (the ``fedjax-clust``
program keeps one by default: ``fedjax-clust --compile-cache off bench --model attack-switch``); every row
records the cache it ran with (``compile_cache``, None for none).
"""

from __future__ import annotations

import statistics
import time
import warnings
from typing import Sequence

import numpy as np

from fedjax_clust.parallel.compile_cache import active_cache_dir
from fedjax_clust.robust.byzantine import mark_byzantine
from fedjax_clust.run.advice import RunAdvice
from fedjax_clust.run.driver_options import Batching, Evaluation, Output
from fedjax_clust.run.experiment_records import TaskGrid
from fedjax_clust.run.sweep import IdenticalRunsWarning, sweep
from fedjax_clust.tasks import synthetic_regression

__all__ = ["run_attack_switch_benchmark", "ATTACKS", "QUICK_ATTACK_SWITCH"]

ATTACKS = ("large-gradient", "sign-flip", "gaussian", "alie", "ipm", "nan")
# ``bench --model attack-switch --quick``: the smallest sweep that still has two kinds to switch over (it checks
# the rows, not the switch: tests/test_sweep.py compares switched runs with the per-kind programs' runs)
QUICK_ATTACK_SWITCH = dict(algorithms=("global",), batchings=("map",), attacks=ATTACKS[:2], fractions=(0.2,))
_OPTIONS = {
    "global": dict(learning_rate=0.01, momentum=0.9),
    "federated-clustering": dict(learning_rate=0.01, momentum=0.9, quantile=0.1, clustering_steps=10),
}


def run_attack_switch_benchmark(
    *,
    algorithms: Sequence[str] = ("global", "federated-clustering"),
    batchings: Sequence[str] = ("map", "vmap"),
    attacks: Sequence[str] = ATTACKS,
    fractions: Sequence[float] = (0.1, 0.2, 0.3, 0.4, 0.5),
    clients_per_cluster: int = 25,
    rounds: int = 50,
    repeats: int = 2,
):
    """Yield one row per algorithm and batching (see the module docstring): the synthetic task of 4 clusters of
    ``clients_per_cluster`` clients, every attack of ``attacks`` at every attackers' share of ``fractions``
    (seed 0), ``rounds`` rounds evaluated at the end."""
    cache = active_cache_dir()  # recorded: with a warm cache the per-kind programs would be read, not compiled
    clean = synthetic_regression(num_clusters=4, clients_per_cluster=clients_per_cluster, seed=0)

    def task(seed, byzantine_fraction):
        return mark_byzantine(clean, fraction=byzantine_fraction, seed=seed)

    for algorithm in algorithms:
        options = _OPTIONS.get(algorithm, dict(learning_rate=0.01))
        for batching in batchings:

            def one(switch: bool):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RunAdvice)
                    warnings.simplefilter("ignore", IdenticalRunsWarning)
                    start = time.perf_counter()
                    result = sweep(
                        algorithm,
                        TaskGrid(task, {"byzantine_fraction": list(fractions)}),
                        grid={"attack": list(attacks)},
                        seeds=[0],
                        rounds=rounds,
                        options=options,
                        evaluation=Evaluation(eval_every=rounds),
                        output=Output(progress=False),
                        batching=Batching(run_batching=batching, attack_switch=switch),
                    )
                    seconds = time.perf_counter() - start
                finals = np.array([r.history[-1][result.metric] for r in result.runs], np.float64)
                compile_seconds = sum(p["compile_seconds"] for p in result.programs)
                return seconds, compile_seconds, len(result.programs), finals

            times: dict = {False: [], True: []}
            for r in range(repeats + 1):  # the first pair warms up (imports, the task's first use)
                order = (False, True) if r % 2 == 0 else (True, False)
                for switch in order:
                    measured = one(switch)
                    if r > 0:
                        times[switch].append(measured)
            per_kind, switched = times[False], times[True]
            apart, together = per_kind[-1][3], switched[-1][3]
            finite = np.isfinite(apart) & np.isfinite(together)
            scale = np.maximum(np.abs(apart[finite]), 1e-30)
            yield {
                "benchmark": "attack-switch",
                "algorithm": algorithm,
                "batching": batching,
                "attacks": list(attacks),
                "fractions": list(fractions),
                "clients": clean.num_clients,
                "rounds": rounds,
                "repeats": repeats,
                "compile_cache": cache,
                "per_kind": _summary(per_kind),
                "switched": _summary(switched),
                "ratio": statistics.median(s[0] for s in switched) / statistics.median(s[0] for s in per_kind),
                "same_nonfinite": bool(np.array_equal(np.isfinite(apart), np.isfinite(together))),
                "max_relative_difference": float(np.max(np.abs(together[finite] - apart[finite]) / scale))
                if finite.any()
                else 0.0,
            }


def _summary(measured: list) -> dict:
    """The medians of a way's measurements; ``run_seconds`` is the wall time less the compile time."""
    return {
        "seconds": statistics.median(m[0] for m in measured),
        "compile_seconds": statistics.median(m[1] for m in measured),
        "run_seconds": statistics.median(m[0] - m[1] for m in measured),
        "programs": measured[-1][2],
    }
