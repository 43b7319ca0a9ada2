"""A folder for JAX's persistent compilation cache that is safe to keep between runs.

JAX's persistent cache (``jax_compilation_cache_dir``) stores every compiled program under a key of the
program, the compile options, the XLA flags, the devices and the JAX / jaxlib versions, so a stale entry is
never *used*; but entries of earlier versions and flag sets pile up in one folder forever. Keeping one
sub-folder per (jax, jaxlib, ``XLA_FLAGS``) makes each set a folder of its own that can be deleted whole:

    ROOT/jax-0.10.2_jaxlib-0.10.2_xla-3f9c01a2b4de/

:func:`keyed_cache_dir` only computes that path (it imports no JAX, creates nothing and sets no configuration:
the library never changes process-wide state unless asked). Whoever owns the process points JAX at it before
the first compilation:

* the ``fedjax-clust`` program does by default (:func:`fedjax_clust_program.enable_compile_cache`): the folder
  :data:`DEFAULT_ROOT`, moved or turned off with ``--compile-cache DIR|off`` or the environment variable
  ``FEDJAX_CLUST_COMPILE_CACHE`` (a folder, or ``off``); a cache the user configured for JAX already wins;
* a Python user asks for it with one call, :func:`fedjax_clust_program.use_compile_cache` (a process-wide JAX
  setting, so it lives with the program's other process set-up, outside the library);
* the test suite's conftest.py with ``FEDJAX_CLUST_TEST_JAX_CACHE``.

A cached executable is what the same program compiles to: no number depends on the cache (tested). What the
cache saves is XLA's compilation; tracing and lowering still run (the cache key is the lowered program).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from typing import Mapping, Optional

__all__ = [
    "CACHE_VAR",
    "DEFAULT_ROOT",
    "OFF",
    "active_cache_dir",
    "cache_key",
    "cache_root",
    "keyed_cache_dir",
]

CACHE_VAR = "FEDJAX_CLUST_COMPILE_CACHE"  # a folder, or one of OFF
OFF = ("off", "none", "0", "false", "no")
# the program's default root: the user's cache folder (XDG_CACHE_HOME, else ~/.cache)
DEFAULT_ROOT = os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "fedjax-clust", "jax")


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def cache_key(xla_flags: Optional[str] = None) -> str:
    """``jax-V_jaxlib-W_xla-H``: the installed jax and jaxlib versions and the first 12 hex digits of the SHA-256
    of ``xla_flags`` (default: the ``XLA_FLAGS`` environment variable), its flags in order with repeated
    blanks removed (the same flags in another order are another key: XLA's last setting of a flag wins)."""
    flags = os.environ.get("XLA_FLAGS", "") if xla_flags is None else xla_flags
    digest = hashlib.sha256(" ".join(flags.split()).encode()).hexdigest()[:12]
    return f"jax-{_version('jax')}_jaxlib-{_version('jaxlib')}_xla-{digest}"


def keyed_cache_dir(root: str, xla_flags: Optional[str] = None) -> str:
    """``root`` (``~`` expanded, made absolute) joined with :func:`cache_key` of ``xla_flags``. Raises
    ValueError for an empty ``root``."""
    if not root or not str(root).strip():
        raise ValueError("root: expected a folder for the compilation cache, got an empty path")
    return os.path.join(os.path.abspath(os.path.expanduser(root)), cache_key(xla_flags))


def cache_root(option: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The cache root the program uses: ``option`` (``--compile-cache``) when given, else the
    :data:`CACHE_VAR` environment variable, else :data:`DEFAULT_ROOT`; None when that value is one of
    :data:`OFF` (case-insensitive) or empty."""
    source: Mapping[str, str] = os.environ if environ is None else environ
    value = option if option is not None else source.get(CACHE_VAR, DEFAULT_ROOT)
    if not str(value).strip() or str(value).strip().lower() in OFF:
        return None
    return str(value)


def active_cache_dir() -> Optional[str]:
    """The folder JAX's persistent compilation cache uses in this process (None: no cache), for a run's
    provenance."""
    import jax

    return jax.config.jax_compilation_cache_dir or None  # type: ignore[attr-defined]
