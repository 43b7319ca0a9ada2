"""Memory budgets: how many rows of the cross-gradient block to evaluate at once, and peak memory.

A chunk of c models needs the gradients of all S clients (of its group) at each of its models, c x S x D
floats, plus about as much again for the client-axis-last copy and the clustering temporaries. With
``chunk_size="auto"`` the chunk is the largest c whose estimate ``BYTES_PER_ENTRY * c * S * D`` fits the
budget (at least 1): by default a quarter of the device's free memory (CPU: available system memory;
GPU/TPU: the allocator's limit minus what is in use).
"""

from __future__ import annotations

import resource
from typing import Optional

import jax

__all__ = ["default_memory_budget", "auto_chunk_size", "peak_memory_bytes", "BYTES_PER_ENTRY"]

BYTES_PER_ENTRY = 16  # 4-byte float x (gradient block + its transposed copy + two temporaries)
BUDGET_FRACTION = 0.25


def default_memory_budget(device=None) -> int:
    """Bytes a cross-gradient chunk may use on ``device`` (default: the first device)."""
    device = device or jax.devices()[0]
    stats = None
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - CPU devices may not implement memory_stats
        stats = None
    if stats and "bytes_limit" in stats:
        free = stats["bytes_limit"] - stats.get("bytes_in_use", 0)
        return max(int(free * BUDGET_FRACTION), 1 << 20)
    import psutil
    return max(int(psutil.virtual_memory().available * BUDGET_FRACTION), 1 << 20)


def auto_chunk_size(num_rows: int, group_size: int, row_params: int, budget: Optional[int] = None) -> Optional[int]:
    """Largest chunk (models evaluated at once) within ``budget`` bytes; None when all rows fit."""
    budget = default_memory_budget() if budget is None else budget
    per_row = BYTES_PER_ENTRY * group_size * row_params
    chunk = max(1, budget // max(per_row, 1))
    return None if chunk >= num_rows else int(chunk)


def peak_memory_bytes() -> int:
    """Peak memory of this run so far: the accelerator's peak allocation, else the process's peak RSS."""
    device = jax.devices()[0]
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001
        stats = None
    if stats and "peak_bytes_in_use" in stats:
        return int(stats["peak_bytes_in_use"])
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB
