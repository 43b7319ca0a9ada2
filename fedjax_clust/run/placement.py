"""Where a run keeps its clients' rows: one settings object, ``simulate(..., placement=Placement(...))``, and
what carries it out.

A population whose per-client state and data fit the device stays there; a larger one keeps its rows in host
memory (or memory-mapped files) and streams each round's cohort (:mod:`fedjax_clust.run.streaming`). Both
placements give the same numbers bit for bit; the placement decides only memory and speed. :class:`Placement`
holds the three choices that decide it, checked when it is made and reusable across runs, for
:func:`~fedjax_clust.run.simulate.simulate`, :func:`~fedjax_clust.run.simulate.check_placement` and
:func:`~fedjax_clust.run.compare.compare` (the command line's ``--client-rows``, ``--device-memory``,
``--host-rows-dir``).

Their ``device_memory`` / ``client_rows`` / ``host_rows_dir`` keywords are the deprecated front (fedjax-clust
0.3.0: they still work, with a DeprecationWarning, and go in the next version): :func:`placement_from` reads them.

What carries the choice out for a run: the plan of where its rows go (``rows_plan``, from
:func:`~fedjax_clust.run.streaming.plan_rows`), the check of ``host_rows_dir`` (:func:`check_host_rows_dir`), the
initial state with its rows in host memory (``host_start``) and its template for a resume (``host_like_state``), and
the row files an earlier run in the folder recorded (:data:`ROW_FILE`), removed once a run holds its own.
"""

from __future__ import annotations

import dataclasses
import os
import re
import warnings
from typing import Mapping, Optional, Sequence, Union

import jax
import numpy as np

from fedjax_clust.core.host_rows import row_leaves, to_host, with_row_leaves
from fedjax_clust.core.keys import init_key
from fedjax_clust.core.state import ClientState
from fedjax_clust.core.validation import check_choice, check_int
from fedjax_clust.io.jsonio import read_json
from fedjax_clust.io.run_folder import RUN_FILE
from fedjax_clust.parallel import multihost
from fedjax_clust.run.streaming import CLIENT_ROWS, parse_bytes, plan_rows

__all__ = ["PLACEMENT_KEYWORDS", "Placement", "placement_from", "check_host_rows_dir", "ROW_FILE"]

PLACEMENT_KEYWORDS = ("client_rows", "device_memory", "host_rows_dir")


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a run's client rows live (module docstring), and how many rounds a compiled call runs.

    Attributes:
      client_rows: "auto" (default: on the device when the state and data take at most a share of
        ``device_memory``, else streamed from the host, which needs partial participation), "device" or "host"
        (forced; the budget still sizes evaluation chunks).
      device_memory: the device-memory budget in bytes or a size string ("8GiB"; None: the device's total, the
        machine's memory on a CPU).
      host_rows_dir: a folder (it must exist when the run starts) for host rows in memory-mapped ``.npy`` files,
        for rows larger than RAM (None: host rows in RAM).
      max_fused_rounds: the most rounds one compiled call runs (:mod:`fedjax_clust.run.fused`; None: stretches
        sized to take about half a second each, 1: one round per call, as a plain Python loop would). Like where
        the rows live, it decides the speed, not the numbers.
    """

    client_rows: str = "auto"
    device_memory: Union[int, str, None] = None
    host_rows_dir: Optional[str] = None  # a path-like is kept as its str
    max_fused_rounds: Optional[int] = None

    def __post_init__(self):
        if self.max_fused_rounds is not None:
            object.__setattr__(self, "max_fused_rounds", check_int("max_fused_rounds", self.max_fused_rounds))
        if self.client_rows not in CLIENT_ROWS:
            raise ValueError(f"client_rows must be one of {CLIENT_ROWS}, got {self.client_rows!r}")
        if self.device_memory is not None:
            parse_bytes(self.device_memory)  # a one-line ValueError for a bad size
        if self.host_rows_dir is not None:
            if self.client_rows == "device":
                raise ValueError(
                    "host_rows_dir keeps host-resident rows; client_rows='device' keeps them on the device"
                )
            object.__setattr__(self, "host_rows_dir", os.fspath(self.host_rows_dir))

    def keywords(self) -> dict:
        """``{"client_rows", "device_memory", "host_rows_dir"}``: what a run records of it (run.json's
        ``client_rows``, with the row files)."""
        return {
            "device_memory": self.device_memory,
            "client_rows": self.client_rows,
            "host_rows_dir": self.host_rows_dir,
        }


def placement_from(
    placement: Optional[Placement],
    legacy: Mapping,
    *,
    function: str,
    keywords: tuple = PLACEMENT_KEYWORDS,
    stacklevel: int = 3,
) -> Placement:
    """The run's :class:`Placement`: ``placement`` (None: the default), or one made from the deprecated keywords
    (``keywords``, the ones ``function`` had) in ``legacy`` (with a DeprecationWarning; not both). A deprecated
    keyword at its old default is no choice and is dropped silently. Any other keyword in ``legacy`` is a
    TypeError, as Python raises for an unknown keyword of ``function``."""
    unknown = [k for k in legacy if k not in keywords]
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")
    legacy = {k: v for k, v in legacy.items() if not (v is None or (k == "client_rows" and v == "auto"))}
    if placement is not None and not isinstance(placement, Placement):
        raise ValueError(f"placement must be a fedjax_clust.run.placement.Placement, got {placement!r}")
    if not legacy:
        return placement if placement is not None else Placement()
    if placement is not None:
        raise ValueError(
            f"give where the rows live as placement=Placement(...) or as {next(iter(legacy))}=..., not both"
        )
    warnings.warn(
        f"{function}()'s {next(iter(legacy))}= keyword is deprecated since fedjax-clust 0.3.0 and goes in the next "
        "version: give placement=Placement(...) (fedjax_clust.run.placement)",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return Placement(**legacy)


def plan_on_host(plan) -> bool:
    """Whether ``plan`` keeps the rows in host memory (None, a multi-process run's: on the mesh)."""
    return plan is not None and plan.where == "host"


def check_host_rows_dir(
    host_rows_dir: Optional[str], client_rows: str, *, streams: bool, whose: str = "the state", stacklevel: int = 2
) -> None:
    """Refuse a ``host_rows_dir`` that cannot hold rows (``client_rows='device'``, or no such folder); warn
    when it goes unused because no rows stream (``streams`` False: ``whose`` rows fit the budget). Shared by
    :func:`~fedjax_clust.run.simulate.simulate` and :func:`~fedjax_clust.run.compare.run_comparison`;
    ``stacklevel`` points the warning at their caller."""
    if host_rows_dir is None:
        return
    if client_rows == "device":
        raise ValueError("host_rows_dir keeps host-resident rows; client_rows='device' keeps them on the device")
    if not os.path.isdir(host_rows_dir):
        raise ValueError(f"host-rows folder {host_rows_dir!r} does not exist")
    if not streams:
        warnings.warn(
            f"host_rows_dir={host_rows_dir!r} is unused: {whose} fits the device-memory budget and stays on the "
            "device (client_rows='host' streams it anyway)",
            stacklevel=stacklevel,
        )


def rows_plan(algorithm, task, params, key, device_memory, client_rows, host_rows_dir):
    """Where the run keeps its clients' rows (:func:`~fedjax_clust.run.streaming.plan_rows`); None in a
    multi-process run (the mesh holds the rows)."""
    check_choice("client_rows", client_rows, CLIENT_ROWS)
    if multihost.is_multiprocess():
        if client_rows == "host" or device_memory is not None:
            raise ValueError("client_rows / device_memory are not supported in multi-process runs")
        return None
    shapes = jax.eval_shape(lambda p, k: algorithm.start(p, task.num_clients, k), params, init_key(key))
    plan = plan_rows(algorithm, shapes, task.arrays(), budget=device_memory, client_rows=client_rows)
    check_host_rows_dir(host_rows_dir, client_rows, streams=plan.where == "host", stacklevel=4)
    if plan.where == "host":
        if plan.eval_chunk < task.num_clients and (task.unseen_data is not None or algorithm.evaluate is not None):
            raise ValueError(
                f"{algorithm.name} on {task.name}: evaluating host-resident rows in chunks of "
                f"{plan.eval_chunk:,} clients covers the task's own metrics, not unseen clients or an "
                "algorithm's own evaluation; give a larger device-memory budget"
            )
    return plan


def host_start(algorithm, params, num_clients, key, directory):
    """The initial state with its clients' rows in host memory: built on the CPU backend (an accelerator never
    holds the N rows) from the host copy of ``params``, the server's part then put on the default device."""
    cpu = jax.devices("cpu")[0]
    params = jax.device_get(params)
    with jax.default_device(cpu):
        state = algorithm.start(params, num_clients, jax.device_put(key, cpu))
    state = to_host(state, directory, consume=True)
    return jax.tree.map(lambda x: x if isinstance(x, np.ndarray) else jax.device_put(x, jax.devices()[0]), state)


def host_like_state(algorithm, params, num_clients, key) -> ClientState:
    """The shapes of :func:`host_start`'s state, as a checkpoint restores it: rows as host (NumPy) arrays, the
    server's part on the default device. Nothing is computed."""
    shapes = jax.eval_shape(lambda p, k: algorithm.start(p, num_clients, k), params, key)
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    placed = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=device), shapes)
    rows, treedef = row_leaves(shapes)
    return with_row_leaves(placed, [jax.ShapeDtypeStruct(r.shape, r.dtype) for r in rows], treedef)


ROW_FILE = re.compile(r"^rows\.[a-z0-9_]+(\.[0-9]+)?\.npy$")  # the names host_rows.to_host gives its files


def recorded_row_files(out_dir: Optional[str]) -> list:
    """The row files the run that wrote ``out_dir/run.json`` recorded (``client_rows.files``; [] if none)."""
    if out_dir is None or not os.path.exists(os.path.join(out_dir, RUN_FILE)):
        return []
    try:
        files = (read_json(os.path.join(out_dir, RUN_FILE)).get("client_rows") or {}).get("files") or []
    except (OSError, ValueError, AttributeError):
        return []
    return [path for path in files if isinstance(path, str)]


def remove_row_files(paths: Sequence[str], keep: Sequence[str]) -> None:
    """Delete an earlier run's row files (``paths``: a killed run this one resumes, or one it replaced; its
    checkpoint or this run supersedes them). Only names :func:`~fedjax_clust.core.host_rows.to_host` gives are
    touched, and never one of ``keep`` (this run's own)."""
    kept = {os.path.abspath(path) for path in keep}
    for path in paths:
        if ROW_FILE.match(os.path.basename(path)) and os.path.abspath(path) not in kept:
            try:
                os.remove(path)
            except OSError:
                pass  # gone already, or still mapped by another process (Windows)
