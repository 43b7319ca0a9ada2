"""``fedjax-clust bench --model privacy``: what central differential privacy costs a round, and a sweep over noise
multipliers against separate runs.

Rows (JSON lines, one per configuration):

* ``privacy-round``: each private algorithm's round (Global, IFCA-1, HypCluster) on the synthetic task with N =
  ``clients`` and d = ``dim``, every client each round, private (clip, per-group sums, noise) against the same round
  without privacy: seconds per round of ``rounds`` rounds fused in one compiled loop (as ``simulate`` runs them),
  median of ``repeats`` calls after a warm-up, the three interleaved in the same run; ``time_ratio`` is private /
  plain (target <= 1.2), ``adaptive_ratio`` the same round with adaptive clipping (``dp_clip_quantile=0.5``: the
  clipped count, one more reduction over the norms) over plain. The private round adds per-client norms and a scale
  (O(N D)) and G D normal draws to a round that computes N minibatch gradients (O(N n D)); ``clip_bytes`` is what
  the clipping pass must read (the N x D messages once, float32) and ``clip_floor_seconds`` that at the copy
  bandwidth measured in the same run (``copy_gbytes_per_s``): the least an unfused clipping pass costs;
* ``privacy-poisson``: Global with Poisson sampling at rate 0.25 in its fixed slots against the same expected
  cohort drawn as a fixed-size uniform sample (plain participation): the slots' price;
* ``privacy-sweep``: 4 noise multipliers as one program (dp_noise traced; the runs vmapped, and mapped one after
  another inside the program) against the 4 runs one after another
  (:func:`~fedjax_clust.bench.rounds.sweep_against_single_runs`).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

import jax

from fedjax_clust.algorithms import make_algorithm
from fedjax_clust.bench.rounds import sweep_against_single_runs, sweep_row_fields
from fedjax_clust.privacy import central_privacy
from fedjax_clust.run.fused import fuse_rounds
from fedjax_clust.tasks import synthetic_regression

__all__ = ["run_privacy_benchmarks", "SWEEP_NOISE"]

SWEEP_NOISE = (0.5, 1.0, 2.0, 4.0)
PRIVATE = central_privacy(clip=10.0, noise_multiplier=1.0)


def _interleaved(calls: dict, repeats: int) -> dict:
    """Median seconds of each of ``calls`` (name -> function), timed in turn ``repeats`` times after a warm-up."""
    for fn in calls.values():
        fn()
    seconds: dict = {name: [] for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            tic = time.perf_counter()
            fn()
            seconds[name].append(time.perf_counter() - tic)
    return {name: statistics.median(values) for name, values in seconds.items()}


def _fused(algo):
    """``algo``'s round fused into one compiled loop of rounds (:func:`~fedjax_clust.run.fused.fuse_rounds`)."""
    assert algo.round is not None  # derived when the algorithm is built
    return fuse_rounds(algo.round)


def _rounds_call(algo, task, rounds: int):
    """A function running ``rounds`` rounds of ``algo`` fused in one compiled loop, as ``simulate`` runs them
    (the state carried between calls)."""
    run = _fused(algo)
    box = [algo.init(task.init_params(None), task.num_clients), 1]
    key = jax.random.PRNGKey(0)

    def call():
        box[0], metrics = run(box[0], task.data, key, box[1], rounds)
        box[1] += rounds
        jax.block_until_ready((box[0], metrics))

    return call


def _rounds_rows(task, repeats: int, rounds: int, algorithms):
    from fedjax_clust.bench.rounds import copy_gbytes_per_s

    n, dim = task.num_clients, task.data["x"].shape[-1]
    bandwidth = copy_gbytes_per_s()
    for name in algorithms:
        plain = make_algorithm(name, task, learning_rate=0.001)
        private = make_algorithm(name, task, learning_rate=0.001, privacy=PRIVATE)
        adaptive = make_algorithm(
            name, task, learning_rate=0.001, privacy=dataclasses.replace(PRIVATE, clip_quantile=0.5)
        )
        calls = {
            "plain": _rounds_call(plain, task, rounds),
            "private": _rounds_call(private, task, rounds),
            "adaptive": _rounds_call(adaptive, task, rounds),
        }
        seconds = {k: v / rounds for k, v in _interleaved(calls, repeats).items()}
        yield {
            "benchmark": "privacy-round",
            "algorithm": name,
            "clients": n,
            "dim": dim,
            "plain_seconds": seconds["plain"],
            "private_seconds": seconds["private"],
            "time_ratio": seconds["private"] / seconds["plain"],
            "adaptive_seconds": seconds["adaptive"],
            "adaptive_ratio": seconds["adaptive"] / seconds["plain"],
            "clip_bytes": n * dim * 4,
            "copy_gbytes_per_s": bandwidth,
            "clip_floor_seconds": n * dim * 4 / (bandwidth * 1e9),
        }


def _poisson_row(task, repeats: int, rounds: int):
    rate = 0.25
    private = make_algorithm("global", task, learning_rate=0.001, privacy=dataclasses.replace(PRIVATE, sampling=rate))
    plain = make_algorithm("global", task, learning_rate=0.001, participation=rate)
    calls = {"private": _rounds_call(private, task, rounds), "plain": _rounds_call(plain, task, rounds)}
    seconds = {k: v / rounds for k, v in _interleaved(calls, repeats).items()}
    return {
        "benchmark": "privacy-poisson",
        "algorithm": "global",
        "clients": task.num_clients,
        "rate": rate,
        "slots": private.execution.clients_per_round,
        "fixed_cohort": plain.execution.clients_per_round,
        "private_seconds": seconds["private"],
        "fixed_cohort_seconds": seconds["plain"],
        "time_ratio": seconds["private"] / seconds["plain"],
    }


def _sweep_row(task, repeats: int, rounds: int):
    options: dict[str, Any] = dict(learning_rate=0.001, dp_clip=PRIVATE.clip)
    swept, single = sweep_against_single_runs(
        "global", task, options, "dp_noise", SWEEP_NOISE, repeats=repeats, rounds=rounds
    )
    return {
        "benchmark": "privacy-sweep",
        "algorithm": "global",
        "clients": task.num_clients,
        "runs": len(SWEEP_NOISE),
        "rounds": rounds,
        **sweep_row_fields(swept, single),
    }


def run_privacy_benchmarks(
    clients: int = 1000,
    *,
    dim: int = 100,
    repeats: int = 7,
    rounds: int = 50,
    algorithms=("global", "ifca-1", "hypcluster"),
):
    """The rows of the module docstring, on the synthetic task of about ``clients`` clients (4 clusters),
    ``dim`` features."""
    task = synthetic_regression(num_clusters=4, clients_per_cluster=max(1, clients // 4), dim=dim)
    yield from _rounds_rows(task, repeats, rounds, algorithms)
    yield _poisson_row(task, repeats, rounds)
    yield _sweep_row(task, repeats, rounds)
