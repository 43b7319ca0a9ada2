"""Deprecated aliases of names that moved to another module: a module lists them, ``{old name: "new.module:name"}``,
and :func:`moved_names` gives it the module ``__getattr__`` that hands each one over from its new home with a
``DeprecationWarning`` naming that home. An alias lives for one version (issue 67: docs/changes.md lists them)."""

from __future__ import annotations

import importlib
import warnings
from typing import Callable, Mapping

__all__ = ["moved_names"]


def moved_names(module: str, moved: Mapping[str, str], since: str) -> Callable[[str], object]:
    """The ``__getattr__`` of ``module`` for its names in ``moved`` (old name -> ``"new.module:new_name"``), which
    moved in version ``since``: each access warns and returns the object from its new home; any other name is an
    AttributeError as usual."""

    def __getattr__(name: str):
        if name not in moved:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        home, _, new_name = moved[name].partition(":")
        warnings.warn(
            f"{module}.{name} is deprecated since fedjax-clust {since} and goes in the next version: it moved "
            f"to {home}.{new_name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), new_name)

    return __getattr__
