"""Reproducible runs on GPUs: XLA's deterministic-ops flag, set when the package is imported.

On a GPU, XLA implements scatter-adds (the segment sums behind every per-group mean: Global,
Ground-truth, IFCA, HypCluster, CFL; the backward pass of gathers) with atomic additions whose order
changes from run to run, and its autotuner may pick different kernels in different processes. Measured on
an H100: a resumed IFCA-2 or CFL run did not equal the uninterrupted one. ``--xla_gpu_deterministic_ops``
makes scatters deterministic and restricts autotuning to deterministic kernels; with it (and full float32
matmuls, see :mod:`fedjax_clust.core.algorithm`) the resumed runs equalled the uninterrupted ones there.
A CPU ignores the flag.

XLA reads ``XLA_FLAGS`` when JAX creates its GPU backend, so the flag takes effect when ``fedjax_clust``
is imported before the first JAX computation (importing JAX alone is fine). Set
``FEDJAX_CLUST_GPU_DETERMINISM=0`` to keep XLA's default (faster scatters; results then differ between runs
at float-rounding level).
"""

from __future__ import annotations

import os
import warnings

__all__ = ["enable_gpu_determinism", "ENV_SWITCH", "FLAG"]

ENV_SWITCH = "FEDJAX_CLUST_GPU_DETERMINISM"
FLAG = "--xla_gpu_deterministic_ops=true"


def enable_gpu_determinism() -> bool:
    """Add ``FLAG`` to ``XLA_FLAGS`` unless the user set the flag or turned this off; returns whether
    deterministic GPU ops are requested. Warns when a GPU backend already exists (too late to apply)."""
    if os.environ.get(ENV_SWITCH, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_gpu_deterministic_ops" in flags:  # the user's own setting wins
        return "xla_gpu_deterministic_ops=false" not in flags.replace(" ", "")
    os.environ["XLA_FLAGS"] = f"{flags} {FLAG}".strip()
    try:
        from jax._src import xla_bridge
        late = xla_bridge.backends_are_initialized()
    except Exception:  # noqa: BLE001 - a private API; without it we cannot tell, and stay silent
        late = False
    if late:
        import jax
        if jax.default_backend() == "gpu":
            warnings.warn("fedjax_clust was imported after JAX started its GPU backend, so XLA's deterministic ops "
                          "are off for this process: import fedjax_clust before any JAX computation, or set "
                          f"XLA_FLAGS={FLAG} yourself", RuntimeWarning, stacklevel=3)
    return True
