"""Seconds from counted costs: a roofline with a launch floor, calibrated on the machine that measured.

A round's :class:`~fedjax_clust.cost.counting.Cost` (FLOPs, bytes of memory traffic, kernels) becomes a time by

    t = floor + max(flops / (eta_c x peak FLOP/s), bytes / (eta_m x peak bandwidth)),
    floor = launch + kernel x kernels,

the roofline of Williams et al. (2009) with the costs an XLA program pays whatever its size: one launch per call
and a small cost per kernel (a fused operation that reads or writes memory). The peaks are measured in the same
run (:func:`measure_machine`: a float32 matmul's FLOP/s, an in-place streaming pass's bytes/s, a jitted no-op's
seconds); four numbers are *fitted* (:func:`fit`) to the rounds the profile measured, by least squares on
log(measured / projected): the efficiencies ``eta_c`` and ``eta_m``, the seconds per kernel and the launch (a
round program's, 1 to 1,000 times the no-op's). Four numbers for every algorithm at every N of a task: the ratio
measured / projected says where the counted costs explain the time and where they do not (a data-dependent loop
counted once, a branch counted at its costliest). The ratios are judged on the rows the fit saw: a check of the
model's shape, not a held-out prediction. ``eta_m`` is the counted bytes' share of the bandwidth and may exceed 1
(the count charges every intermediate a kernel materialises; fusion and caches keep some on chip): the fit takes
the smallest share that explains the rows, the conservative one where memory never binds. Projections to named
devices (their datasheet peaks, a stated and a measured efficiency) are :mod:`fedjax_clust.cost.devices`.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Optional, Sequence

import numpy as np

from fedjax_clust.cost.counting import Cost

__all__ = [
    "Machine",
    "Calibration",
    "measure_machine",
    "matmul_gflops",
    "matmul_size",
    "median_seconds",
    "fit",
    "project",
    "floor_seconds",
    "roofline_seconds",
]


@dataclasses.dataclass(frozen=True)
class Machine:
    """What a device does at best, measured here: ``flops`` float32 matmul FLOP/s, ``bandwidth`` streaming copy
    bytes/s, ``launch`` seconds of a jitted call that does nothing."""

    flops: float
    bandwidth: float
    launch: float


@dataclasses.dataclass(frozen=True)
class Calibration:
    """A :class:`Machine` with the fitted ``compute_efficiency``, ``memory_efficiency`` (shares of its peaks a
    round reaches) and ``kernel`` (seconds per kernel): see the module docstring."""

    machine: Machine
    compute_efficiency: float = 1.0
    memory_efficiency: float = 1.0
    kernel: float = 0.0

    def report(self) -> dict:
        """The calibration as plain numbers (profile.json)."""
        return {
            "matmul_flops_per_s": self.machine.flops,
            "copy_bytes_per_s": self.machine.bandwidth,
            "launch_seconds": self.machine.launch,
            "kernel_seconds": self.kernel,
            "compute_efficiency": self.compute_efficiency,
            "memory_efficiency": self.memory_efficiency,
        }


def floor_seconds(cost: Cost, calibration: Calibration) -> float:
    """The launch floor of a program: one launch and ``kernel`` seconds per kernel."""
    return calibration.machine.launch + calibration.kernel * cost.kernels


def roofline_seconds(cost: Cost, calibration: Calibration) -> float:
    """The roofline part: the slower of compute and memory traffic at the calibrated efficiencies."""
    machine = calibration.machine
    compute = cost.flops / (calibration.compute_efficiency * machine.flops)
    memory = cost.bytes / (calibration.memory_efficiency * machine.bandwidth)
    return max(compute, memory)


def project(cost: Cost, calibration: Calibration) -> float:
    """Projected seconds of a program of cost ``cost`` (module docstring)."""
    return floor_seconds(cost, calibration) + roofline_seconds(cost, calibration)


MATMUL_SIZES = {"cpu": 1024}  # a reference matmul large enough to reach the device's rate; 8192 elsewhere


def median_seconds(fn, *args, repeats: int) -> float:
    """Median seconds of ``repeats`` calls ``fn(*args)`` (each waited for) after one call that compiles."""
    import jax

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - tic)
    return statistics.median(times)


def matmul_size() -> int:
    """The reference matmul's size on the default device (``MATMUL_SIZES``, 8192 on an accelerator)."""
    import jax

    return MATMUL_SIZES.get(jax.default_backend(), 8192)


def matmul_gflops(size: Optional[int] = None, repeats: int = 10, precision: str = "highest") -> float:
    """Median float32 GFLOP/s of a jitted [size, size] @ [size, size] matmul on the default device.

    ``size`` defaults to 1024 on a CPU and 8192 on an accelerator (a 1024^3 product reads 10-27 TFLOP/s
    on an H100, 8192^3 its 51.5 full-precision TFLOP/s); ``precision`` is that of the kernels it is a
    reference for ("highest": full float32; "default" lets a GPU use TF32).
    """
    import jax
    import jax.numpy as jnp

    size = size or matmul_size()
    a = jax.random.normal(jax.random.PRNGKey(0), (size, size), jnp.float32)
    f = jax.jit(lambda x: jnp.matmul(x, x, precision=precision))
    return 2 * size**3 / median_seconds(f, a, repeats=repeats) / 1e9


def _inplace_bandwidth(num_bytes: int, repeats: int) -> float:
    """Bytes/s of ``x * 1.5 + 0.5`` over a float32 array written into its own buffer (donated): every byte read
    once and written once, with no fresh allocation (a program reuses its buffers; a copy into new memory
    measures the operating system's page faults as well)."""
    import jax
    import jax.numpy as jnp

    step = jax.jit(lambda x: x * 1.5 + 0.5, donate_argnums=0)
    x = jax.block_until_ready(step(jnp.zeros((num_bytes // 4,), jnp.float32)))
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        x = jax.block_until_ready(step(x))
        times.append(time.perf_counter() - tic)
    return 2 * num_bytes / statistics.median(times)


def measure_machine(repeats: int = 10) -> Machine:
    """The default device's peaks, measured now (module docstring): the float32 matmul reference
    (:func:`matmul_gflops`), an in-place streaming pass over 256 MB (2 GB on an
    accelerator) and a jitted ``x + 1`` on a scalar for the launch."""
    import jax
    import jax.numpy as jnp

    launch = median_seconds(jax.jit(lambda x: x + 1), jnp.zeros(()), repeats=max(repeats, 50))
    size = 1 << 28 if jax.default_backend() == "cpu" else 1 << 31
    return Machine(matmul_gflops(repeats=repeats) * 1e9, _inplace_bandwidth(size, repeats), launch)


_EFFICIENCIES = np.logspace(-3, 0, 61)  # 0.001 .. 1, 20 a decade
_MEMORY_SHARES = np.logspace(-3, 1, 81)  # 0.001 .. 10: above 1 where the device moved fewer bytes than counted
_KERNEL_SECONDS = np.concatenate([[0.0], np.logspace(-8, -4, 33)])  # 10 ns .. 100 us a kernel
_LAUNCH_FACTORS = np.logspace(0, 3, 25)  # the call's floor: 1 .. 1,000 x the no-op's launch


def fit(costs: Sequence[Cost], seconds: Sequence[float], machine: Machine) -> Calibration:
    """The :class:`Calibration` whose projections of ``costs`` best match the measured ``seconds``, minimising
    the mean squared log ratio over a grid: the compute efficiency at 20 points a decade over [0.001, 1], the
    memory share over [0.001, 10] (the smallest of equally good ones: module docstring), the seconds
    per kernel over {0} and [1e-8, 1e-4], and a round's launch over 1 to 1,000 times the no-op's (a round
    program passes dozens of arguments and runs fused elementwise kernels the count leaves out). The fitted
    launch replaces the machine's. Needs at least three measurements."""
    if len(costs) != len(seconds) or len(costs) < 3:
        raise ValueError(f"fit needs at least three (cost, seconds) pairs, got {len(costs)} and {len(seconds)}")
    measured = np.log(np.asarray(seconds, float))
    compute = (np.array([c.flops for c in costs]) / machine.flops)[None, :] / _EFFICIENCIES[:, None]
    memory = (np.array([c.bytes for c in costs]) / machine.bandwidth)[None, :] / _MEMORY_SHARES[:, None]
    roof = np.maximum(compute[:, None, :], memory[None, :, :])  # [compute eff, memory eff, rows]
    kernels = np.array([c.kernels for c in costs])
    best = (np.inf, 1.0, 1.0, 0.0, machine.launch)
    for launch in machine.launch * _LAUNCH_FACTORS:
        for kernel in _KERNEL_SECONDS:
            loss = np.mean((np.log(launch + kernel * kernels + roof) - measured) ** 2, axis=-1)
            i, j = np.unravel_index(np.argmin(loss), loss.shape)
            if loss[i, j] < best[0]:
                best = (float(loss[i, j]), float(_EFFICIENCIES[i]), float(_MEMORY_SHARES[j]), float(kernel), launch)
    fitted = dataclasses.replace(machine, launch=float(best[4]))
    return Calibration(fitted, best[1], best[2], best[3])
