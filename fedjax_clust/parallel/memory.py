"""Memory budgets: how many rows of the cross-gradient block to evaluate at once, and peak memory.

A chunk of c models needs the gradients of all S clients (of its group) at each of its models, c x S x D
floats, plus about as much again for the client-axis-last copy and the clustering temporaries. With
``chunk_size="auto"`` the chunk is the largest c whose estimate ``BYTES_PER_ENTRY * c * S * D`` fits the
budget (at least 1); on CPU it is also kept near cache size (``CPU_BLOCK_BYTES``).

Same config, same numbers: chunked and unchunked rounds agree only to float rounding (rtol ~1e-5), so the
chunk must not depend on the moment a run starts. The default budget is therefore a fixed fraction
(``BUDGET_FRACTION``, a quarter) of the device's *total* memory, never of its free memory:

* GPU/TPU: the allocator's capacity, ``device.memory_stats()["bytes_limit"]``, which JAX fixes when the backend
  starts (a fraction of the device's total memory, 75% unless ``XLA_PYTHON_CLIENT_MEM_FRACTION`` /
  ``XLA_CLIENT_MEM_FRACTION`` say otherwise), independent of what is allocated; an accelerator without memory
  statistics gets ``FALLBACK_BUDGET``;
* CPU: the host's total memory (``psutil.virtual_memory().total``). On CPU the cache cap binds for any
  host with more than 64 MiB of memory, so the CPU chunk is in practice ``CPU_BLOCK_BYTES / (4 S D)``.

So "auto" is a function of the config (N, G, the model's size) and the device kind alone, and
:func:`resolve_chunk_size` turns it into a number when the algorithm is built: the number goes into the
algorithm's hyperparameters, hence into ``run.json``, ``summary.json`` and every checkpoint, and a resume
compares it (see :func:`fedjax_clust.io.run_folder.check_same_run`).
"""

from __future__ import annotations

import resource
from typing import Optional

import jax

__all__ = [
    "default_memory_budget",
    "device_total_memory",
    "auto_chunk_size",
    "resolve_chunk_size",
    "check_budget_holds_a_row",
    "check_task_size",
    "group_major_fits",
    "group_major_bytes",
    "peak_memory_bytes",
    "BYTES_PER_ENTRY",
]

BYTES_PER_ENTRY = 16  # 4-byte float x (gradient block + its transposed copy + two temporaries)
GATHERED_BYTES_PER_ENTRY = 12  # group-major: three N x D float32 buffers (see group_major_bytes)
BUDGET_FRACTION = 0.25
CPU_BLOCK_BYTES = 4 << 20  # on CPU a chunk's float32 gradient block is also kept near cache size
FALLBACK_BUDGET = 2 << 30  # an accelerator that reports no memory statistics
MIN_BUDGET = 1 << 20


def device_total_memory(device=None) -> Optional[int]:
    """Total bytes of ``device`` (default: the first device), None for an accelerator that does not say.

    GPU/TPU: the allocator's capacity (``memory_stats()["bytes_limit"]``, fixed when the backend starts);
    CPU: the host's total memory. Never the free memory, which changes while other processes run.
    """
    device = device or jax.devices()[0]
    if device.platform == "cpu":
        import psutil

        return int(psutil.virtual_memory().total)
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - a backend may not implement memory_stats
        stats = None
    return int(stats["bytes_limit"]) if stats and "bytes_limit" in stats else None


def default_memory_budget(device=None) -> int:
    """Bytes a cross-gradient chunk (or a sweep's program) may use on ``device`` (default: the first device):
    ``BUDGET_FRACTION`` of :func:`device_total_memory` (``FALLBACK_BUDGET`` when unknown), at least 1 MiB.
    It depends on the device kind and the process's allocator settings only, not on what is in use."""
    total = device_total_memory(device)
    return FALLBACK_BUDGET if total is None else max(int(total * BUDGET_FRACTION), MIN_BUDGET)


def auto_chunk_size(
    num_rows: int, group_size: int, row_params: int, budget: Optional[int] = None, platform: Optional[str] = None
) -> Optional[int]:
    """Largest chunk (models evaluated at once) within ``budget`` bytes; None when all rows fit.

    On CPU the chunk's gradient block (4 bytes x chunk x S x D) is further capped at ``CPU_BLOCK_BYTES``
    (at least one row): the clustering steps re-read the block ~20 times, and a block that spills out of
    the last-level cache made the N = 1024 synthetic round 3x slower (238 ms unchunked vs 77 ms in chunks
    of 64 on two cores); for the 11,110-parameter MLP (S = 256, 11 MB per row) one row at a time was 1.7x
    faster than two and 2.2x faster than four. GPUs get the memory bound only.
    """
    budget = default_memory_budget() if budget is None else budget
    platform = platform or jax.devices()[0].platform
    per_row = BYTES_PER_ENTRY * group_size * row_params
    chunk = max(1, budget // max(per_row, 1))
    if platform == "cpu":
        chunk = min(chunk, max(1, CPU_BLOCK_BYTES // max(4 * group_size * row_params, 1)))
    return None if chunk >= num_rows else int(chunk)


def resolve_chunk_size(
    chunk_size,
    *,
    num_clients: int,
    model_size: int,
    subgroups: int = 1,
    memory_budget: Optional[int] = None,
    platform: Optional[str] = None,
    group_major: bool = False,
) -> Optional[int]:
    """The chunk Federated-Clustering uses for ``chunk_size`` ("auto", None or an integer, returned as is).

    "auto": :func:`auto_chunk_size` over the rows one device evaluates at most (N, or G x S with G random
    groups of S = ceil(N / G) clients, the group-major layout), S clients per row and ``model_size``
    parameters per model, within ``memory_budget`` (default :func:`default_memory_budget`, which depends
    on the device kind only) less, when the round runs ``group_major``, the gathered copies
    (:func:`group_major_bytes`): one budget for every buffer the plan sizes, so the chunk and the copies
    together stay within it. None when every row fits at once. A sharded round evaluates fewer rows per
    device; a chunk at least that large is one ``vmap`` there, as None would be.
    """
    if chunk_size != "auto":
        return chunk_size
    group_size = -(-num_clients // subgroups)
    rows = num_clients if subgroups == 1 else subgroups * group_size
    budget = default_memory_budget() if memory_budget is None else memory_budget
    if group_major:
        budget -= group_major_bytes(num_clients, model_size)
    return auto_chunk_size(rows, group_size, model_size, budget, platform)


def group_major_bytes(num_clients: int, model_size: int) -> int:
    """Bytes of a group-major round's gathered copies, three N x D float32 buffers: the models' [G, S] group
    copy, the directions in slot order, and (sharded) the gathered models or (one device) the directions
    back in client order; an upper bound where a sharded device holds only its own groups' slots. The
    gathered minibatches are not counted: the data's size is not known when the chunk is resolved."""
    return GATHERED_BYTES_PER_ENTRY * num_clients * model_size


def group_major_fits(num_clients: int, model_size: int, budget: Optional[int] = None, group_size: int = 1) -> bool:
    """Whether a round may run group-major: its gathered copies (:func:`group_major_bytes`) and one row of
    cross-gradients (``BYTES_PER_ENTRY`` x S x D, S = ``group_size``) within ``budget`` (default
    :func:`default_memory_budget`). Decided from shapes, so the same config takes the same path."""
    budget = default_memory_budget() if budget is None else budget
    return group_major_bytes(num_clients, model_size) + BYTES_PER_ENTRY * group_size * model_size <= budget


def check_budget_holds_a_row(budget: Optional[int], group_size: int, row_params: int) -> None:
    """ValueError when an explicit ``budget`` cannot hold one model's row of cross-gradients
    (``BYTES_PER_ENTRY`` x S x D bytes): the round could not honour it with any chunk."""
    need = BYTES_PER_ENTRY * group_size * row_params
    if budget is not None and budget < need:
        raise ValueError(
            f"memory_budget={budget} bytes is below the {need} bytes ({need / 2**20:.2f} MiB) that one "
            f"model's row of cross-gradients needs ({group_size} clients x {row_params} parameters x "
            f"{BYTES_PER_ENTRY} bytes); give at least that, or omit it for a quarter of the device's "
            "memory"
        )


def check_task_size(nbytes: int, what: str) -> None:
    """ValueError, before allocating, when building ``what`` needs more than the available host memory."""
    import psutil

    available = psutil.virtual_memory().available
    if nbytes > available:
        raise ValueError(
            f"{what} needs about {nbytes / 2**30:.1f} GiB of memory but {available / 2**30:.1f} GiB "
            "is available; use fewer clients or samples"
        )


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
