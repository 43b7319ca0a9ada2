"""The process-wide settings the ``fedjax-clust`` program makes before JAX starts. A program's job, kept out
of the ``fedjax_clust`` library (which never changes process-wide state and only computes what these set):

* :func:`enable_gpu_determinism`: ``XLA_FLAGS`` with XLA's deterministic GPU ops
  (:func:`fedjax_clust.parallel.determinism.deterministic_xla_flags`);
* :func:`set_cpu_devices`: one JAX CPU device per core (or a given number), so that Federated-Clustering
  splits its rows over the cores (:mod:`fedjax_clust.parallel.sharding`);
* :func:`enable_compile_cache` / :func:`use_compile_cache`: JAX's persistent compilation cache in a per-user
  folder, so that a second run of the same programs reads them instead of compiling them (the folder's key:
  :mod:`fedjax_clust.parallel.compile_cache`).

Only a program's own process calls them: ``fedjax-clust`` (``fedjax_clust.cli.commands.main`` with ``argv=None``)
and the experiment scripts run as programs (:func:`fedjax_clust.cli.config_file.experiment_args` with ``argv``
None). ``main([...])`` called from Python, a notebook or a test never imports this package and leaves the
caller's process as it was. A Python program may call them itself, before its first JAX computation.
"""

from __future__ import annotations

import os
from typing import Optional

from fedjax_clust.parallel.compile_cache import DEFAULT_ROOT
from fedjax_clust.parallel.determinism import deterministic_xla_flags, gpu_determinism_requested

__all__ = ["enable_compile_cache", "enable_gpu_determinism", "set_cpu_devices", "use_compile_cache"]


def enable_gpu_determinism() -> bool:
    """Set ``XLA_FLAGS`` to request XLA's deterministic GPU ops (before the first JAX computation); returns
    whether they are requested (a user's own setting, or ``FEDJAX_CLUST_GPU_DETERMINISM=0``, wins)."""
    flags = deterministic_xla_flags()
    if flags:
        os.environ["XLA_FLAGS"] = flags
    return gpu_determinism_requested()


def set_cpu_devices(count: Optional[int] = None) -> int:
    """Expose ``count`` JAX CPU devices (default: one per core), before JAX initialises its backends; returns
    the count requested, or 0 when the backends are already up (the setting then cannot change)."""
    import jax

    if count is None:
        count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:
        return 0
    return count


def enable_compile_cache(option: Optional[str] = None) -> Optional[str]:
    """Turn on JAX's persistent compilation cache for this process: in the folder of ``option``
    (``--compile-cache``), else of ``FEDJAX_CLUST_COMPILE_CACHE``, else the per-user default
    (:func:`fedjax_clust.parallel.compile_cache.cache_root`), keyed by the jax / jaxlib versions and
    ``XLA_FLAGS``. Returns the folder in use, or None when turned off. A cache the user configured for JAX
    already (``JAX_COMPILATION_CACHE_DIR``, ``jax.config``) is kept as it is. A folder that cannot be made
    (a read-only home) leaves the run without a cache, with a one-line warning."""
    import sys

    from fedjax_clust.parallel.compile_cache import active_cache_dir, cache_root

    existing = active_cache_dir()
    if existing:
        return existing
    root = cache_root(option)
    if root is None:
        return None
    try:
        return use_compile_cache(root)
    except OSError as e:
        print(f"warning: no compilation cache ({root}: {e.strerror or e}); every program compiles", file=sys.stderr)
        return None


def use_compile_cache(root: str = DEFAULT_ROOT, *, min_compile_seconds: float = 0.0) -> str:
    """Point JAX's persistent compilation cache at ``root``'s sub-folder for this jax / jaxlib / ``XLA_FLAGS``
    (:func:`fedjax_clust.parallel.compile_cache.keyed_cache_dir`, created) and cache every program that takes at
    least ``min_compile_seconds`` to compile (default 0: a run's many small programs are most of its compile
    time); returns the folder. The one call a Python user makes to keep compiled programs between runs.

    This changes JAX's process-wide configuration: call it once, at the start of your program or notebook,
    before the first compilation (a program compiled earlier is not cached)."""
    import jax

    from fedjax_clust.parallel.compile_cache import keyed_cache_dir

    folder = keyed_cache_dir(root)
    os.makedirs(folder, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_seconds))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return folder
