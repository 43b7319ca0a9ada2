"""A folder for JAX's persistent compilation cache that is safe to keep between runs.

JAX's persistent cache (``jax_compilation_cache_dir``) stores every compiled program under a key of the
program, the compile options, the XLA flags, the devices and the JAX / jaxlib versions, so a stale entry is
never *used*; but entries of earlier versions and flag sets pile up in one folder forever. Keeping one
sub-folder per (jax, jaxlib, ``XLA_FLAGS``) makes each set a folder of its own that can be deleted whole:

    ROOT/jax-0.10.2_jaxlib-0.10.2_xla-3f9c01a2b4de/

:func:`keyed_cache_dir` only computes that path (it imports no JAX, creates nothing and sets no configuration:
the library never changes process-wide state). Whoever owns the process points JAX at it before the first
compilation, as the test suite's conftest.py does with ``FEDJAX_CLUST_TEST_JAX_CACHE``::

    jax.config.update("jax_compilation_cache_dir", keyed_cache_dir("~/.cache/fedjax-clust/jax"))
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from typing import Optional

__all__ = ["cache_key", "keyed_cache_dir"]


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
