"""Where a result file came from: the command, the package version, the commit and the machine.

Every run's ``run.json`` and the experiment scripts' result JSON carry ``provenance()``, so a number in the
docs can be traced to what made it: ``command`` (the program and its arguments as typed), ``version``,
``commit`` (the git commit of the package's checkout and whether it had uncommitted changes; null for an
installed wheel), ``machine`` (platform, processor, CPU count, JAX's backend and device kind), ``python``,
``jax``, ``compile_cache`` (the folder of JAX's persistent compilation cache in use, or null) and the UTC
``time``.
"""

from __future__ import annotations

import datetime
import functools
import os
import pathlib
import platform
import shlex
import subprocess
import sys

__all__ = ["provenance", "git_commit"]


@functools.lru_cache(maxsize=1)
def git_commit() -> dict | None:
    """{"sha": HEAD, "dirty": uncommitted changes} of the checkout holding this package, or None (an installed
    package, or no git)."""
    root = pathlib.Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if sha.returncode != 0:
        return None
    return {"sha": sha.stdout.strip(), "dirty": bool(status.stdout.strip())}


def provenance() -> dict:
    """The module docstring's record for a result file written now."""
    import jax

    from fedjax_clust import __version__
    from fedjax_clust.parallel.compile_cache import active_cache_dir

    device = jax.devices()[0]
    return {
        "command": shlex.join([os.path.basename(sys.argv[0])] + sys.argv[1:]) if sys.argv and sys.argv[0] else None,
        "version": __version__,
        "commit": git_commit(),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "backend": jax.default_backend(),
            "device": device.device_kind,
            "devices": jax.device_count(),
        },
        "python": platform.python_version(),
        "jax": jax.__version__,
        "compile_cache": active_cache_dir(),
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
