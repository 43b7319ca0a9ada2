"""Rows of dicts as a CSV file: one function, so every table the package writes formats cells alike."""

from __future__ import annotations

import csv
from typing import Iterable, Sequence

__all__ = ["write_csv"]


def write_csv(path: str, rows: Iterable[dict], columns: Sequence[str]) -> None:
    """Write ``rows`` to ``path`` with the header ``columns`` (each row's values for them, None as an empty
    cell)."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row[k] is None else row[k]) for k in columns})
