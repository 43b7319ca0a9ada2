"""Reproducible runs on GPUs: XLA's deterministic-ops flag, turned on by an explicit call, never on import.

On a GPU, XLA implements scatter-adds (the segment sums behind every per-group mean: Global,
Ground-truth, IFCA, HypCluster, CFL; the backward pass of gathers) with atomic additions whose order
changes from run to run, and its autotuner may pick different kernels in different processes. Measured on
an H100: a resumed IFCA-2 or CFL run did not equal the uninterrupted one. ``--xla_gpu_deterministic_ops``
makes scatters deterministic and restricts autotuning to deterministic kernels; with it (and full float32
matmuls, see :mod:`fedjax_clust.core.algorithm`) the resumed runs equalled the uninterrupted ones there.
A CPU ignores the flag.

Who turns it on: importing ``fedjax_clust`` changes no process-wide setting. The command line
(``fedjax-clust``) calls :func:`enable_gpu_determinism` itself before any JAX computation; in Python, call
``fedjax_clust.enable_gpu_determinism()`` once, before the first JAX computation of the process. XLA reads
``XLA_FLAGS`` when JAX starts its GPU backend, so a later call has no effect until the process restarts;
JAX offers no public way to ask whether its backends have started, so the call cannot tell and does not
warn. A run (:func:`fedjax_clust.simulate`, :func:`fedjax_clust.sweep`) on a GPU whose ``XLA_FLAGS`` lacks
the flag says so once per process (:func:`warn_if_nondeterministic_gpu`); on a CPU it says nothing. Set
``FEDJAX_CLUST_GPU_DETERMINISM=0`` to keep XLA's default (faster scatters; results then differ between runs
at float-rounding level): the command line then leaves ``XLA_FLAGS`` alone and runs do not warn.
"""

from __future__ import annotations

import os
import warnings
from typing import Optional

__all__ = ["enable_gpu_determinism", "gpu_determinism_requested", "warn_if_nondeterministic_gpu", "ENV_SWITCH",
           "FLAG"]

ENV_SWITCH = "FEDJAX_CLUST_GPU_DETERMINISM"
FLAG_NAME = "xla_gpu_deterministic_ops"
FLAG = f"--{FLAG_NAME}=true"
_FALSE = ("0", "false", "no", "off")
_warned = []  # one entry once a run has warned: the warning is given once per process


def _switched_off() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip().lower() in _FALSE


def _flag_setting(flags: str) -> Optional[bool]:
    """The value ``flags`` (an ``XLA_FLAGS`` string) gives the deterministic-ops flag (the last one wins;
    a bare ``--xla_gpu_deterministic_ops`` is true), None when it does not mention it."""
    setting = None
    for token in flags.split():
        name, _, value = token.lstrip("-").partition("=")
        if name == FLAG_NAME:
            setting = value.strip().lower() not in _FALSE
    return setting


def gpu_determinism_requested() -> bool:
    """Whether ``XLA_FLAGS`` asks for XLA's deterministic GPU ops (set by :func:`enable_gpu_determinism` or by
    the user)."""
    return bool(_flag_setting(os.environ.get("XLA_FLAGS", "")))


def enable_gpu_determinism() -> bool:
    """Add ``FLAG`` to ``XLA_FLAGS``; returns whether deterministic GPU ops are requested.

    Call it before the first JAX computation of the process (XLA reads ``XLA_FLAGS`` when JAX starts its
    GPU backend; later, it takes effect only after a restart, and there is no public JAX call to detect
    that, so none is attempted). A setting the user already gave in ``XLA_FLAGS`` wins (it is not
    changed), and with ``FEDJAX_CLUST_GPU_DETERMINISM=0`` nothing is changed and it returns False. This
    edits the process's environment: the library never calls it; the command line does.
    """
    if _switched_off():
        return False
    flags = os.environ.get("XLA_FLAGS", "")
    setting = _flag_setting(flags)
    if setting is not None:  # the user's own setting wins
        return setting
    os.environ["XLA_FLAGS"] = f"{flags} {FLAG}".strip()
    return True


def warn_if_nondeterministic_gpu(backend: Optional[str] = None) -> bool:
    """On a GPU (``backend``, default JAX's default backend) without the deterministic-ops flag and without
    ``FEDJAX_CLUST_GPU_DETERMINISM=0``: warn (``RuntimeWarning``), once per process. Returns whether it
    warned now. Nothing on a CPU or TPU."""
    if _warned or _switched_off() or gpu_determinism_requested():
        return False
    if backend is None:
        import jax
        backend = jax.default_backend()
    if backend != "gpu":
        return False
    _warned.append(True)
    warnings.warn("this run is on a GPU without XLA's deterministic ops, so its numbers may differ at float-rounding "
                  "level between runs, and a resumed run from the uninterrupted one: call "
                  "fedjax_clust.enable_gpu_determinism() before the first JAX computation (the fedjax-clust "
                  f"command does), or set XLA_FLAGS={FLAG}; warned once per process", RuntimeWarning, stacklevel=3)
    return True
