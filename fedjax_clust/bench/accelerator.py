"""``fedjax-clust bench --suite accelerator --out DIR``: every accelerator promise measured in one run, one report.

Whoever holds a GPU (or a TPU, or only a CPU) runs this one command and gets ``DIR/report.json`` (strict JSON),
``DIR/report.md`` and ``DIR/scaling.png``:

* ``device``: platform, kind, device count, total memory, the float32 matmul rate at full precision and at the
  default precision (TF32 on a GPU) and the streaming copy bandwidth, all measured in this run;
* ``rows``: one per target of :data:`TARGETS` (the accelerator-first work's targets on one H100), each with its
  ``name``, ``target`` (text), ``limit`` and ``comparison``, ``measured``, ``unit``, ``status`` ("pass", "fail",
  "not judged" at ``--quick`` sizes, or "skipped", with the ``reason`` and, for a size that does not fit, the bytes
  it ``needs``) and where the time goes (FLOPs and bytes the work must do, the achieved fraction of the matmul rate
  / copy bandwidth);
* ``costs``: measurements without a target: the round with and without XLA's deterministic GPU ops (separate
  processes), at full and at default matmul precision with the final error of the default experiment under
  each, the fused round against a round launched from Python, a learning-rate x seed sweep against the same
  runs one at a time, the robust aggregators against the mean;
* ``scaling.png``: seconds per round against N for both radius rules, with the memory-roofline line (the bytes
  a fixed-radius round must move at the measured copy bandwidth).

``quick=True`` (``--quick``) runs every row at tiny sizes (a few minutes on 2 CPU cores): the test suite uses it
to check the report's structure and units; its rows are "not judged" (their targets are full-size). At full size
the rows are the targets' sizes (N up to 10,000,000 clients in subgroups); a size whose estimated memory
(:func:`synthetic_round_bytes`) exceeds the device's total memory is skipped, never crashes the report.

This module runs the suite (:func:`run_accelerator_suite`). The targets, their sizes and the rows that measure
them live in :mod:`fedjax_clust.bench.accelerator_targets`, the costs in :mod:`fedjax_clust.bench.accelerator_costs`
and the report's device references, Markdown and figure in :mod:`fedjax_clust.bench.accelerator_report`.
"""

from __future__ import annotations

import os
import time
from typing import Optional

from fedjax_clust.bench.accelerator_costs import (
    determinism_cost,
    fused_cost,
    precision_cost,
    probe_round,  # noqa: F401 - a name of this module too
    robust_cost,
    sweep_cost,
)
from fedjax_clust.bench.accelerator_report import REPORT_FILES, device_record, git_commit, plot_curve, report_markdown
from fedjax_clust.bench.accelerator_targets import (  # run_accelerator_suite looks the rows up here
    DIM,  # noqa: F401 - names of this module too
    SAMPLES,  # noqa: F401
    SIZES,
    STEPS,  # noqa: F401
    TARGETS,
    baseline_rows,
    cnn_row,
    fc_algorithm,  # noqa: F401 - used by fedjax_clust.bench.device_efficiency
    fc_rows,
    mlp_row,
    population_rows,
    scale_row,
    skipped_row,  # noqa: F401 - used by the tests
    streaming_rows,
    synthetic_round_bytes,
    synthetic_task,  # noqa: F401 - used by fedjax_clust.bench.device_efficiency
    target_row,  # noqa: F401 - used by the tests
    unjudged,
)

__all__ = ["run_accelerator_suite", "TARGETS", "SIZES", "synthetic_round_bytes", "REPORT_FILES"]


def run_accelerator_suite(
    out_dir: str, *, quick: bool = False, overwrite: bool = False, progress=print, memory_limit: Optional[int] = None
) -> dict:
    """Measure every target and cost (module docstring) and write the report into ``out_dir``; returns it.
    ``memory_limit`` (bytes) stands in for the device's memory when deciding what fits (tests)."""
    from fedjax_clust import __version__
    from fedjax_clust.io.jsonio import write_json
    from fedjax_clust.io.run_folder import check_out_dir, claim_outputs

    out_dir = check_out_dir(out_dir, "--out")
    claim_outputs(out_dir, REPORT_FILES, overwrite)
    sizes = SIZES["quick" if quick else "full"]
    started = time.perf_counter()
    progress("device references")
    device = device_record(sizes)
    memory = memory_limit or device["memory_bytes"] or 1 << 40
    copy, matmul = device["copy_gbytes_per_s"], device["matmul_gflops_per_s_highest"]
    curve: list = []
    rows: list = []
    steps = [  # the newest targets first: a device call cut short still measures them
        ("population", lambda: population_rows(sizes)),
        ("streaming", lambda: streaming_rows(sizes)),
        ("FC quantile vs radius", lambda: fc_rows(sizes, memory, copy, matmul, curve)),
        ("Local / Global / Ground-truth", lambda: baseline_rows(sizes)),
        ("full N^2", lambda: scale_row("fc-full-n2", sizes["full_n2"], sizes["full_n2"], sizes, memory, copy, curve)),
        ("frontier 1M", lambda: scale_row("frontier-1m", *sizes["frontier_1m"], sizes, memory, copy, curve)),
        ("frontier 10M", lambda: scale_row("frontier-10m", *sizes["frontier_10m"], sizes, memory, copy, curve)),
        ("MLP kernel", lambda: [mlp_row(sizes)]),
        ("CNN round", lambda: [cnn_row(sizes)]),
    ]
    costs: dict = {}
    report = {
        "command": "fedjax-clust bench --suite accelerator" + (" --quick" if quick else ""),
        "commit": git_commit(),
        "version": __version__,
        "date": time.strftime("%Y-%m-%d"),
        "quick": quick,
        "complete": False,
        "device": device,
        "rows": rows,
        "costs": costs,
        "scaling": curve,
        "seconds": 0.0,
    }

    def write(done: bool) -> None:
        # rewritten after every step: a run cut off (a lease's time limit, a crash) keeps what it measured
        report["complete"] = done
        report["seconds"] = time.perf_counter() - started
        write_json(os.path.join(out_dir, "report.json"), report)
        with open(os.path.join(out_dir, "report.md"), "w") as f:
            f.write(report_markdown(report))

    for label, step in steps:
        progress(f"{label} ({time.perf_counter() - started:.0f} s)")
        rows += [unjudged(row) for row in step()] if quick else step()
        write(False)
    for label, key, cost in (
        ("precision", "precision", precision_cost),
        ("determinism", "determinism", determinism_cost),
        ("fused rounds", "fused", fused_cost),
        ("sweep", "sweep", sweep_cost),
        ("robust aggregators", "robust", robust_cost),
    ):
        progress(f"{label} ({time.perf_counter() - started:.0f} s)")
        costs[key] = cost(sizes)
        write(False)
    write(True)
    plot_curve(curve, copy, os.path.join(out_dir, "scaling.png"))
    return report
