"""Reproducible runs on GPUs: XLA's deterministic-ops flag, which the library computes and never sets itself.

On a GPU, XLA implements scatter-adds (the segment sums behind every per-group mean: Global,
Ground-truth, IFCA, HypCluster, CFL; the backward pass of gathers) with atomic additions whose order
changes from run to run, and its autotuner may pick different kernels in different processes. Measured on
an H100: a resumed IFCA-2 or CFL run did not equal the uninterrupted one. ``--xla_gpu_deterministic_ops``
makes scatters deterministic and restricts autotuning to deterministic kernels; with it (and full float32
matmuls, see :mod:`fedjax_clust.core.algorithm`) the resumed runs equalled the uninterrupted ones there.
A CPU ignores the flag.

Who turns it on: the library never changes a process-wide setting (neither on import nor in any function);
:func:`deterministic_xla_flags` only computes the ``XLA_FLAGS`` value that requests the flag. The command line
(``fedjax-clust``, :mod:`fedjax_clust_program`) sets it before any JAX computation; in Python, the
program sets it, once, before its first JAX computation::

    os.environ["XLA_FLAGS"] = fedjax_clust.deterministic_xla_flags()

XLA reads ``XLA_FLAGS`` when JAX starts its GPU backend, so a later assignment has no effect until the process
restarts (JAX offers no public way to ask whether its backends have started). A run
(:func:`fedjax_clust.simulate`, :func:`fedjax_clust.sweep`) on a GPU whose ``XLA_FLAGS`` lacks the flag says so
once per process (:func:`warn_if_nondeterministic_gpu`); on a CPU it says nothing. Set
``FEDJAX_CLUST_GPU_DETERMINISM=0`` to keep XLA's default (faster scatters; results then differ between runs
at float-rounding level): the command line then leaves ``XLA_FLAGS`` alone and runs do not warn.
"""

from __future__ import annotations

import os
import warnings
from typing import Optional

__all__ = ["deterministic_xla_flags", "gpu_determinism_requested", "warn_if_nondeterministic_gpu", "ENV_SWITCH", "FLAG"]

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
    """Whether ``XLA_FLAGS`` asks for XLA's deterministic GPU ops."""
    return bool(_flag_setting(os.environ.get("XLA_FLAGS", "")))


def deterministic_xla_flags(flags: Optional[str] = None) -> str:
    """``flags`` (default: the current ``XLA_FLAGS``) with ``FLAG`` added: the value to give ``XLA_FLAGS``
    for XLA's deterministic GPU ops. A setting the user already gave is kept as it is (theirs wins), and with
    ``FEDJAX_CLUST_GPU_DETERMINISM=0`` the flags come back unchanged. Computes only: the caller (a program,
    the command line) decides to set it."""
    flags = os.environ.get("XLA_FLAGS", "") if flags is None else flags
    if _switched_off() or _flag_setting(flags) is not None:
        return flags
    return f"{flags} {FLAG}".strip()


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
    warnings.warn(
        "this run is on a GPU without XLA's deterministic ops, so its numbers may differ at float-rounding "
        "level between runs, and a resumed run from the uninterrupted one: set "
        "os.environ['XLA_FLAGS'] = fedjax_clust.deterministic_xla_flags() before the first JAX "
        f"computation (the fedjax-clust command does), or XLA_FLAGS={FLAG}; warned once per process",
        RuntimeWarning,
        stacklevel=3,
    )
    return True
