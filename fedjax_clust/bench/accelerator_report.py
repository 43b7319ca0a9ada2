"""The accelerator suite's report (:mod:`fedjax_clust.bench.accelerator`): the device's reference rates,
``report.md`` from the report's dict, ``scaling.png`` and the commit the report names.
"""

from __future__ import annotations

import os
import subprocess

import jax

from fedjax_clust.bench.accelerator_targets import DIM, STEPS
from fedjax_clust.bench.rounds import copy_gbytes_per_s, fc_round_bytes, matmul_gflops
from fedjax_clust.parallel.memory import device_total_memory

__all__ = ["REPORT_FILES"]

REPORT_FILES = ("report.json", "report.md", "scaling.png")


def device_record(sizes) -> dict:
    device = jax.devices()[0]
    size = sizes["matmul"]
    return {
        "platform": device.platform,
        "kind": device.device_kind,
        "count": jax.device_count(),
        "memory_bytes": device_total_memory(device),
        "jax": jax.__version__,
        "matmul_size": size or ({"cpu": 1024}.get(device.platform, 8192)),
        "matmul_gflops_per_s_highest": matmul_gflops(size, precision="highest"),
        "matmul_gflops_per_s_default": matmul_gflops(size, precision="default"),
        "copy_gbytes_per_s": copy_gbytes_per_s(None if size is None else 1 << 24),
    }


def report_markdown(report: dict) -> str:
    d = report["device"]
    lines = [
        f"# Accelerator report: {d['kind']} ({d['platform']} x {d['count']})",
        "",
        f"`{report['command']}` at commit `{report['commit']}`, fedjax-clust {report['version']}, "
        f"{report['date']}; "
        + (f"{report['seconds']:.0f} s." if report.get("seconds") is not None else "several device calls (notes)."),
        "",
    ]
    if not report.get("complete", True):
        lines += ["**Incomplete: the run stopped after the rows and costs below.**", ""]
    if report["quick"]:
        lines += ["**Quick run: tiny sizes, so no row is judged against its full-size target.**", ""]
    lines += [
        f"Device: {d['memory_bytes'] or 0:.3g} bytes; float32 matmul ({d['matmul_size']}^3) "
        f"{d['matmul_gflops_per_s_highest']:.1f} GFLOP/s at full precision, "
        f"{d['matmul_gflops_per_s_default']:.1f} at the default; copy {d['copy_gbytes_per_s']:.1f} GB/s.",
        "",
        "| target | size | measured | unit | status |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in report["rows"]:
        size = ", ".join(
            f"{k} {row[k]}" for k in ("algorithm", "rule", "clients", "subgroups", "group_size") if k in row
        )
        value = "" if row["measured"] is None else f"{row['measured']:.4g}"
        status = row["status"] + (f" ({row['reason']})" if row.get("reason") else "")
        lines.append(f"| {row['target']} | {size} | {value} | {row['unit']} | {status} |")
    costs = report["costs"]
    lines += ["", "## Costs", ""]
    p = costs.get("precision", {})
    if "highest" in p:
        lines.append(
            f"- precision: FC round {p['highest']['seconds_per_round']:.3g} s (highest) vs "
            f"{p['default']['seconds_per_round']:.3g} s (default); final error "
            f"{p['highest']['final_mean_sq_dist']:.3g} vs {p['default']['final_mean_sq_dist']:.3g}"
        )
    det = costs.get("determinism", {})
    if "time_ratio_deterministic_vs_default" in det:
        lines.append(
            f"- deterministic GPU ops: time ratio {det['time_ratio_deterministic_vs_default']:.3g} "
            f"(applies on a GPU only: {det['applies']}); final error "
            f"{det['deterministic']['final_mean_sq_dist']:.3g} vs {det['xla-default']['final_mean_sq_dist']:.3g}"
        )
    f = costs.get("fused", {})
    if "seconds_per_round_fused" in f:
        lines.append(
            f"- fused rounds: {f['seconds_per_round_fused']:.3g} s vs {f['seconds_per_round_launched']:.3g} s "
            "launched from Python"
        )
    for key, cost in costs.items():
        if "error" in cost:
            lines.append(f"- {key}: failed ({cost['error']})")
    s = costs.get("sweep", {})
    if "speedup" in s:
        lines.append(
            f"- sweep of {s['runs']} runs: {s['sweep_seconds']:.3g} s vs {s['one_at_a_time_seconds']:.3g} s "
            f"one at a time ({s['speedup']:.3g}x)"
        )
    for r in costs.get("robust", {}).get("aggregators", []):
        if "ratio_to_mean" in r:
            what = r.get("aggregator") or f"order statistic ({r.get('select')})"
            lines.append(f"- {what}: {r['ratio_to_mean']:.3g}x the mean's time")
    if report.get("notes"):  # added by hand where a report was assembled from several device calls
        lines += ["", "## Notes", ""] + [f"- {note}" for note in report["notes"]]
    return "\n".join(lines) + "\n"


def plot_curve(curve, copy, path):
    from fedjax_clust.io.figures import figure_for_file

    fig, ax = figure_for_file(figsize=(6.4, 4.6))
    for rule, marker in (("radius", "o"), ("quantile", "s")):
        points = sorted((c["clients"], c["seconds_per_round"]) for c in curve if c["rule"] == rule)
        if points:
            ax.loglog(*zip(*points), marker=marker, label=f"FC, {rule} rule")
    sizes = sorted({c["clients"] for c in curve})
    if sizes:
        ax.loglog(
            sizes,
            [fc_round_bytes(n, DIM, STEPS) / (copy * 1e9) for n in sizes],
            "k--",
            label="memory roofline (fixed radius)",
        )
    ax.set_xlabel("clients N (full N^2 round)")
    ax.set_ylabel("seconds per round")
    ax.legend()
    fig.savefig(path, dpi=120, bbox_inches="tight")


def git_commit() -> str:
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return (
            subprocess.run(
                ["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or "unknown"
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
