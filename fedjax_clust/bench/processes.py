"""Benchmarks whose rows each run in a process of their own (a process's peak memory is one configuration's),
and the stretch timing they share."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Optional

__all__ = ["row_in_subprocess", "median_stretch_seconds", "device_peak_bytes", "live_device_bytes"]


def row_in_subprocess(module: str, config: dict) -> Any:
    """``python -m module '<config as JSON>'`` in a fresh process: the JSON value (a row, or a list of rows) its
    last output line prints (RuntimeError with the end of its error output when it fails)."""
    done = subprocess.run([sys.executable, "-m", module, json.dumps(config)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{module} {config} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def median_stretch_seconds(run: Callable, state, *, rounds: int, repeats: int, warmup: int = 2) -> float:
    """Median seconds per round of ``repeats`` stretches ``run(state, first, rounds) -> state`` (which waits for
    its results) after a warm-up stretch of ``warmup`` rounds (compilation; two rounds exercise a pipeline's
    carry too)."""
    state = run(state, 1, warmup)
    times, first = [], 1 + warmup
    for _ in range(repeats):
        tic = time.perf_counter()
        state = run(state, first, rounds)
        times.append((time.perf_counter() - tic) / rounds)
        first += rounds
    return statistics.median(times)


def device_peak_bytes() -> Optional[int]:
    """The accelerator's peak bytes in use (None on a CPU, whose process peak counts the host rows too)."""
    import jax

    from fedjax_clust.parallel.memory import peak_memory_bytes

    return None if jax.devices()[0].platform == "cpu" else peak_memory_bytes()


def live_device_bytes() -> int:
    """Bytes of every live array on the first device (``jax.live_arrays``)."""
    import jax

    device = jax.devices()[0]
    return int(sum(x.nbytes for x in jax.live_arrays() if device in x.devices()))
