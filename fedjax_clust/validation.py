"""Argument checks shared by every builder: a ValueError that names the argument and the expected range."""

from __future__ import annotations

import numpy as np

__all__ = ["check_int"]


def check_int(name: str, value, low: int = 1) -> None:
    """``value`` must be an integer (not a bool) >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
