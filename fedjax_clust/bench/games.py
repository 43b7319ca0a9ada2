"""``fedjax-clust bench --model pd-protocol``: Fig. 4.5's grid of the repeated price-discrimination game.

Fig. 4.5 of Werner's thesis (ch. 4) runs Algorithm 6 for 20 bias intervals x 3 sellers x ``seeds`` seeds, 20,000
rounds each. :func:`fedjax_clust.incentives.pd_repeated.protocol_program` makes the whole grid one compiled
program: the runs vmapped, the rounds one ``lax.scan``. The reference is a Python loop over rounds that calls
the same round function, jitted and vmapped over the same runs, once per round (what a per-round driver costs:
one dispatch and one host round trip of the state per round). Both are timed after a warm-up call (the
compilation is reported apart), as the median of ``repeats`` calls, in the same process; the loop over
``loop_rounds`` rounds, the compiled program over both ``loop_rounds`` (the like-for-like ratio) and the full
``rounds``. The loop's outputs are checked against the program's over the rounds both ran.

A round of one run is a few hundred scalar operations and ~30 random words, so the kernel is neither FLOP nor
bandwidth bound: XLA's own cost analysis of one vmapped round (``round_flops``, ``round_bytes``) is reported
beside the achieved run-rounds per second, and this machine's float32 matmul rate (``matmul_gflops``) for scale.
"""

from __future__ import annotations

import functools
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.bench.rounds import matmul_gflops
from fedjax_clust.incentives.pd_game import pd_game
from fedjax_clust.incentives.pd_repeated import (
    BIAS_INTERVALS,
    SELLERS,
    initial_state,
    protocol_arguments,
    protocol_program,
    round_step,
)

__all__ = ["grid_runs", "run_pd_protocol_benchmark"]


def grid_runs(seeds: int) -> list:
    """Fig. 4.5's runs: every (seller, seed, bias interval)."""
    return [(seller, seed, bias) for seller in SELLERS for bias in BIAS_INTERVALS for seed in range(seeds)]


def _median(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@functools.lru_cache(maxsize=8)
def _loop_program(game, rounds: int):
    """(start, one_round): the per-round Python-loop driver of the same round function."""
    step = jax.jit(jax.vmap(round_step(game, rounds), in_axes=(0, None, 0, 0, 0)))
    start = jax.jit(jax.vmap(initial_state))
    return start, step


def loop_protocol(game, runs, *, rounds: int):
    """Algorithm 6 driven by a Python loop over rounds (one jitted, vmapped round per call): the reference the
    benchmark times, with the same per-round outputs as :func:`~fedjax_clust.incentives.pd_repeated.run_protocol`
    (stacked [runs, rounds])."""
    keys, sellers, lows, highs = protocol_arguments(runs)
    start, step = _loop_program(game, rounds)
    state, outputs = start(keys), []
    for t in range(1, rounds + 1):
        state, out = step(state, jnp.float32(t), sellers, lows, highs)
        outputs.append(out)
    return tuple(jnp.stack(column, axis=1) for column in zip(*outputs))


def run_pd_protocol_benchmark(*, seeds: int = 10, rounds: int = 20_000, loop_rounds: int = 500, repeats: int = 3):
    """Rows (dicts) of the benchmark (module docstring): the loop, the compiled program at ``loop_rounds``, the
    compiled program at ``rounds`` (the full Fig. 4.5 grid when ``seeds`` = 10 and ``rounds`` = 20,000)."""
    game = pd_game()
    runs = grid_runs(seeds)
    args = protocol_arguments(runs)
    base = {
        "benchmark": "pd-protocol",
        "runs": len(runs),
        "sellers": len(SELLERS),
        "bias_intervals": len(BIAS_INTERVALS),
        "seeds": seeds,
        "buyers_per_round": game.n,
        "matmul_gflops": matmul_gflops(),
    }  # this machine's float32 matmul rate now, for scale
    # XLA's cost of one vmapped round, all runs
    start, step = _loop_program(game, loop_rounds)
    state = start(args[0])
    cost = step.lower(state, jnp.float32(1), *args[1:]).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    round_flops = float(cost.get("flops", 0.0)) if cost else None
    round_bytes = float(cost.get("bytes accessed", 0.0)) if cost else None

    loop_out = jax.block_until_ready(loop_protocol(game, runs, rounds=loop_rounds))  # warm-up: compiles the round
    loop_seconds = _median(lambda: loop_protocol(game, runs, rounds=loop_rounds), repeats)
    rows = [
        dict(
            base,
            driver="python-loop",
            rounds=loop_rounds,
            seconds=loop_seconds,
            run_rounds_per_s=len(runs) * loop_rounds / loop_seconds,
            round_flops=round_flops,
            round_bytes=round_bytes,
        )
    ]
    for horizon in dict.fromkeys((loop_rounds, rounds)):
        program = protocol_program(game, horizon)
        began = time.perf_counter()
        out = jax.block_until_ready(program(*args))
        compile_seconds = time.perf_counter() - began
        seconds = _median(lambda: program(*args), repeats)
        row = dict(
            base,
            driver="compiled-scan",
            rounds=horizon,
            seconds=seconds,
            first_call_seconds=compile_seconds,
            run_rounds_per_s=len(runs) * horizon / seconds,
        )
        if horizon == loop_rounds:
            row["speedup_vs_loop"] = round(loop_seconds / seconds, 1)
            row["max_abs_difference_vs_loop"] = max(
                float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                for a, b in zip(out, loop_out)
            )
        rows.append(row)
    return rows
