"""Strict JSON in and out: every file the package writes parses with any JSON reader.

Python's ``json`` writes ``NaN`` and ``Infinity`` by default, which are not JSON. Here a non-finite float
becomes ``null`` (callers record separately which metric went non-finite and when), NumPy and JAX scalars
and arrays become numbers and lists, and files are written atomically (a temporary file renamed into
place), so a killed process never leaves half a file behind. Reading names the file when it is truncated
or corrupt instead of ``Expecting value: line 1 column 1``.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np

__all__ = ["json_safe", "dumps", "write_json", "read_json", "read_json_lines"]


def json_safe(obj: Any) -> Any:
    """``obj`` with non-finite floats as None, NumPy/JAX scalars and arrays as Python numbers and lists,
    tuples as lists and dict keys as strings."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return None if not math.isfinite(float(obj)) else float(obj)
    if hasattr(obj, "shape") and hasattr(obj, "dtype"):  # NumPy or JAX array
        array = np.asarray(obj)
        return json_safe(array.item() if array.ndim == 0 else array.tolist())
    return obj


def dumps(obj: Any, **kwargs) -> str:
    """Strict JSON text of ``obj`` (see :func:`json_safe`); raises on anything JSON cannot hold."""
    return json.dumps(json_safe(obj), allow_nan=False, **kwargs)


def write_json(path: str, obj: Any, indent: int = 2) -> None:
    """Write ``obj`` as strict JSON to ``path`` atomically: on any failure ``path`` keeps its old content."""
    text = dumps(obj, indent=indent)
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, path)
    except BaseException:  # a full disk, a quota: the file it would replace is left as it was, no .tmp beside it
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def read_json(path: str) -> Any:
    """Parse ``path``; ValueError naming the file if it is truncated or not JSON."""
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON (truncated or corrupt?): {e}") from None


def read_json_lines(path: str) -> list:
    """One JSON object per non-empty line; ValueError naming the file and line if one does not parse."""
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{number} is not valid JSON (truncated or corrupt?): {e}") from None
    return rows
