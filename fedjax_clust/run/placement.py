"""Where a run keeps its clients' rows, as one settings object: ``simulate(..., placement=Placement(...))``.

A population whose per-client state and data fit the device stays there; a larger one keeps its rows in host
memory (or memory-mapped files) and streams each round's cohort (:mod:`fedjax_clust.run.streaming`). Both
placements give the same numbers bit for bit; the placement decides only memory and speed. :class:`Placement`
holds the three choices that decide it, checked when it is made and reusable across runs, for
:func:`~fedjax_clust.run.simulate.simulate`, :func:`~fedjax_clust.run.simulate.check_placement` and
:func:`~fedjax_clust.run.compare.compare` (the command line's ``--client-rows``, ``--device-memory``,
``--host-rows-dir``).

Their ``device_memory`` / ``client_rows`` / ``host_rows_dir`` keywords are the deprecated front (fedjax-clust
0.3.0: they still work, with a DeprecationWarning, and go in the next version): :func:`placement_from` reads them.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Mapping, Optional, Union

from fedjax_clust.run.streaming import CLIENT_ROWS, parse_bytes

__all__ = ["PLACEMENT_KEYWORDS", "Placement", "placement_from"]

PLACEMENT_KEYWORDS = ("client_rows", "device_memory", "host_rows_dir")


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a run's client rows live (module docstring).

    Attributes:
      client_rows: "auto" (default: on the device when the state and data take at most a share of
        ``device_memory``, else streamed from the host, which needs partial participation), "device" or "host"
        (forced; the budget still sizes evaluation chunks).
      device_memory: the device-memory budget in bytes or a size string ("8GiB"; None: the device's total, the
        machine's memory on a CPU).
      host_rows_dir: a folder (it must exist when the run starts) for host rows in memory-mapped ``.npy`` files,
        for rows larger than RAM (None: host rows in RAM).
    """

    client_rows: str = "auto"
    device_memory: Union[int, str, None] = None
    host_rows_dir: Optional[str] = None  # a path-like is kept as its str

    def __post_init__(self):
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
