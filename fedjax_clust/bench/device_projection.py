"""Projections of a profile to named devices: seconds per round against N, the N at one second, the N at full memory.

From a profile (``profile.json``: every algorithm's counted FLOPs, bytes, kernels and peak memory at each N of
its grid) this fits each quantity as a polynomial in N (:mod:`fedjax_clust.cost.curves`) and projects the round
onto every device of :data:`fedjax_clust.cost.devices.DEVICES` and onto the machine that profiled, as a range
between two efficiencies (:mod:`fedjax_clust.cost.devices`):

* ``stated``: :data:`~fedjax_clust.cost.devices.STATED` shares of the datasheet peaks (of the measured peaks on
  the profiling machine), with the measured floor;
* ``measured``: the shares the committed accelerator reports' rounds reached on a GPU (on the profiling
  machine: the profile's own calibration).

``seconds_low`` / ``seconds_high`` are the smaller and the larger of the two. Per device and algorithm it
reports the N at which a round takes one second at either end (``n_one_second_low`` with the slower end,
``n_one_second_high`` with the faster one, whichever efficiency that is) and the N at which the round's peak
memory (XLA's memory analysis on the profiling machine, extrapolated) exceeds what a JAX process gets of the
device's memory (:attr:`~fedjax_clust.cost.devices.DeviceSpec.usable_memory`). Everything here is a
*projection*: counted work through a roofline whose efficiency was measured on another device or stated; the
rows a profile measured are the only timings.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Iterable, Optional

from fedjax_clust.cost.counting import Cost
from fedjax_clust.cost.curves import fit_curve, solve_for
from fedjax_clust.cost.devices import DEVICES, STATED, DeviceSpec, Efficiency, device, measured_efficiency, project_on

__all__ = ["device_projections", "write_projections", "THIS_MACHINE", "COLUMNS", "SUMMARY_COLUMNS", "PROJECTED_N"]

THIS_MACHINE = "this-machine"
PROJECTED_N = (10_000, 30_000, 100_000, 300_000, 1_000_000, 3_000_000, 10_000_000)  # beyond the profile's grid
COLUMNS = [
    "algorithm",
    "device",
    "clients",
    "seconds_low",
    "seconds_high",
    "seconds_stated",
    "seconds_measured",
    "peak_bytes",
    "fits_memory",
    "measured_here",
]
SUMMARY_COLUMNS = [
    "algorithm",
    "device",
    "label",
    "n_one_second_low",
    "n_one_second_high",
    "n_memory_limit",
    "cost_residual",
    "memory_residual",
    "caveat",
]


def _this_machine(payload: dict, stated: Efficiency):
    """(spec, stated, measured) of the machine that profiled, from the profile's calibration (None without one)."""
    calibration = payload.get("calibration")
    if not calibration:
        return None
    memory = payload.get("device_memory_bytes") or 1e30  # unknown: never the limit
    spec = DeviceSpec(
        THIS_MACHINE,
        "this machine (profiled)",
        calibration["matmul_flops_per_s"],
        calibration["copy_bytes_per_s"],
        memory,
        "float32 matmul measured",
        "the profile's own run",
    )
    floor = dict(launch=calibration["launch_seconds"], kernel=calibration["kernel_seconds"])
    measured = Efficiency(
        min(calibration["compute_efficiency"], 1.0),
        calibration["memory_efficiency"],
        **floor,
        basis="measured: this profile's calibration",
    )
    return spec, dataclasses.replace(stated, **floor), measured


def no_calibration() -> ValueError:
    """The refusal of ``this-machine`` asked for by name of a profile without a calibration."""
    return ValueError(
        f"{THIS_MACHINE}: the profile has no calibration of this machine (fewer than three rows to fit it); "
        "profile more sizes, or leave it out of the devices"
    )


def _targets(payload, devices, stated, measured_path):
    """[(spec, stated, measured)] for the devices asked for (default: every registered one and this machine)."""
    names = list(devices) if devices is not None else [*DEVICES, THIS_MACHINE]
    out = []
    for name in names:
        if name == THIS_MACHINE:
            here = _this_machine(payload, stated)
            if here is not None:
                out.append(here)
            elif devices is not None:  # asked for by name: refused, not dropped
                raise no_calibration()
            continue
        spec = device(name)
        measured = measured_efficiency(name, measured_path)
        out.append((spec, dataclasses.replace(stated, launch=measured.launch, kernel=measured.kernel), measured))
    return out


def _curves(rows):
    ns = [r["clients"] for r in rows]
    curves = {q: fit_curve(ns, [float(r[q]) for r in rows]) for q in ("flops", "bytes", "kernels")}
    peaks = [r.get("peak_bytes") for r in rows]
    curves["peak_bytes"] = None if any(p is None for p in peaks) else fit_curve(ns, peaks)
    return curves


def _cost(curves, n) -> Cost:
    return Cost(flops=float(curves["flops"](n)), bytes=float(curves["bytes"](n)), kernels=float(curves["kernels"](n)))


def _caveat(rows, branch_share: float) -> str:
    notes = []
    if any(r.get("open_loops") for r in rows):
        notes.append("data-dependent loops counted once")
    if any((r.get("branch_share") or 0) > branch_share for r in rows):
        notes.append("data-dependent branches counted at their costliest")
    return "; ".join(notes)


def device_projections(
    payload: dict,
    devices: Optional[Iterable[str]] = None,
    *,
    stated: Efficiency = STATED,
    algorithms: Optional[Iterable[str]] = None,
    measured_path: Optional[str] = None,
    log=print,
) -> dict:
    """The projections of the profile ``payload`` (module docstring): {"rows", "summary", "curves",
    "efficiencies"}. ``devices``: registered names and/or ``"this-machine"`` (default: all);
    ``measured_path``: a ``measured_efficiency.json`` other than the shipped one."""
    from fedjax_clust.bench.profile import BRANCH_SHARE

    targets = _targets(payload, devices, stated, measured_path)
    by_algorithm, wanted = rows_by_algorithm(payload, algorithms)
    rows, summary, curves_out = [], [], {}
    for name in wanted:
        mine = sorted(by_algorithm[name], key=lambda r: r["clients"])
        curves = _curves(mine)
        curves_out[name] = {q: None if c is None else dataclasses.asdict(c) for q, c in curves.items()}
        measured_ns = [r["clients"] for r in mine]
        grid = sorted(set(measured_ns) | {n for n in PROJECTED_N if n > max(measured_ns)})
        residual = max(curves[q].residual for q in ("flops", "bytes"))
        memory_residual = None if curves["peak_bytes"] is None else curves["peak_bytes"].residual
        for spec, low_eff, high_eff in targets:
            ends = [lambda n, e=e: project_on(_cost(curves, n), spec, e) for e in (low_eff, high_eff)]
            memory_n = None
            known = curves["peak_bytes"] is not None and spec.memory < 1e30  # 1e30: this machine's memory unknown
            if known:
                memory_n = solve_for(lambda n: float(curves["peak_bytes"](n)), spec.usable_memory)
            last = int(memory_n / 1.002) if memory_n is not None and max(measured_ns) < memory_n < grid[-1] else None
            for n in sorted(set(grid) | ({last} if last else set())):  # the last N that fits, where it is on the grid
                stated_s, measured_s = (end(n) for end in ends)
                peak = None if curves["peak_bytes"] is None else float(curves["peak_bytes"](n))
                rows.append(
                    {
                        "algorithm": name,
                        "device": spec.name,
                        "clients": n,
                        "seconds_low": min(stated_s, measured_s),
                        "seconds_high": max(stated_s, measured_s),
                        "seconds_stated": stated_s,
                        "seconds_measured": measured_s,
                        "peak_bytes": peak,
                        "fits_memory": None if peak is None or not known else peak <= spec.usable_memory,
                        "measured_here": n in measured_ns,
                    }
                )
            fast = lambda n: min(f(n) for f in ends)  # noqa: E731
            slow = lambda n: max(f(n) for f in ends)  # noqa: E731
            summary.append(
                {
                    "algorithm": name,
                    "device": spec.name,
                    "label": spec.label,
                    "n_one_second_low": solve_for(slow, 1.0),
                    "n_one_second_high": solve_for(fast, 1.0),
                    "n_memory_limit": memory_n,
                    "cost_residual": residual,
                    "memory_residual": memory_residual,
                    "fit_flags": fit_flags(residual, memory_residual) + unchecked_fits(curves, measured_ns),
                    "measured_basis": high_eff.basis,
                    "caveat": _caveat(mine, BRANCH_SHARE),
                }
            )
    efficiencies = {
        spec.name: {
            "label": spec.label,
            "flops": spec.flops,
            "bandwidth": spec.bandwidth,
            "memory": spec.memory,
            "usable_memory": spec.usable_memory,
            "precision": spec.precision,
            "source": spec.source,
            "stated": dataclasses.asdict(s),
            "measured": dataclasses.asdict(m),
        }
        for spec, s, m in targets
    }
    for s in summary:
        log(_summary_line(s))
    return {"rows": rows, "summary": summary, "curves": curves_out, "efficiencies": efficiencies}


RESIDUAL_FLAG = 0.25  # a fit off by more than this share somewhere on the profile's grid is flagged


def fit_flags(cost_residual: Optional[float], memory_residual: Optional[float]) -> list:
    """The notes a projection carries when its fits do not describe the profile: a cost (FLOPs / bytes) or memory
    curve whose largest relative error on the measured grid exceeds :data:`RESIDUAL_FLAG`."""
    flags = []
    for what, residual in (("cost", cost_residual), ("memory", memory_residual)):
        if residual is not None and residual > RESIDUAL_FLAG:
            flags.append(f"the {what} fit is off by up to {residual:.0%} on the profiled N")
    return flags


def unchecked_fits(curves: dict, sizes) -> list:
    """The notes of fits that pass through every profiled N by construction (as many terms as distinct sizes: a
    residual of zero that checks nothing), e.g. a quadratic memory curve through three sizes."""
    distinct = len(set(sizes))
    return [
        f"the {what} fit has as many terms as profiled sizes ({distinct}): nothing checks its extrapolation"
        for what, key in (("cost", "flops"), ("memory", "peak_bytes"))
        if curves.get(key) is not None and distinct <= len(curves[key].degrees)
    ]


def _n_text(n) -> str:
    return "never" if n is None else f"{n:,.0f}"


def one_second_text(s: dict) -> str:
    """The N range at which a round takes one second, read against the memory limit: an end beyond the N at which
    the memory is full reads "beyond memory", and when both are, "memory binds first at N = M" (the round takes
    under a second at every N that fits)."""
    memory = s["n_memory_limit"]
    ends = [s["n_one_second_low"], s["n_one_second_high"]]
    beyond = [memory is not None and (n is None or n > memory) for n in ends]
    if all(beyond):
        return f"memory binds first at N = {_n_text(memory)} (under 1 s a round up to there)"
    shown = ["beyond memory" if b else _n_text(n) for n, b in zip(ends, beyond)]
    return f"1 s a round at N = {shown[0]} - {shown[1]}; memory full at N = {_n_text(memory)}"


def _summary_line(s: dict) -> str:
    notes = [s["caveat"]] if s["caveat"] else []
    notes += s.get("fit_flags") or []
    basis = s.get("measured_basis") or ""
    if basis.startswith("borrowed"):
        notes.append("measured end " + basis.split(":")[0])
    tail = f" ({'; '.join(notes)})" if notes else ""
    return f"projected {s['algorithm']} on {s['label']}: {one_second_text(s)}{tail}"


PROJECTION_FILES = ("devices.csv", "devices.json", "devices.png")


def write_projections(projections: dict, out_dir: str, plot_algorithms: Optional[Iterable[str]] = None) -> list:
    """``devices.csv`` (every row), ``devices.json`` (all of it, with provenance) and ``devices.png`` (seconds
    against N, one band per device, for ``plot_algorithms``: default Federated-Clustering if profiled, else the
    first algorithm) in ``out_dir``; returns their paths."""
    from fedjax_clust.io.csvio import write_csv
    from fedjax_clust.io.jsonio import write_json
    from fedjax_clust.io.provenance import provenance

    os.makedirs(out_dir, exist_ok=True)
    write_csv(os.path.join(out_dir, "devices.csv"), projections["rows"], COLUMNS)
    write_json(os.path.join(out_dir, "devices.json"), {**projections, "provenance": provenance()}, indent=1)
    names = list(dict.fromkeys(r["algorithm"] for r in projections["rows"]))
    chosen = (
        list(plot_algorithms)
        if plot_algorithms
        else (["federated-clustering"] if "federated-clustering" in names else names[:1])
    )
    _plot(projections, chosen, os.path.join(out_dir, "devices.png"))
    return [os.path.join(out_dir, name) for name in PROJECTION_FILES]


def _plot(projections, algorithms, path):
    from matplotlib.ticker import NullFormatter

    from fedjax_clust.bench.profile import algorithm_styles
    from fedjax_clust.io.figures import figure_for_file

    devices = list(projections["efficiencies"])
    styles = algorithm_styles(devices)
    fig, axes = figure_for_file(1, len(algorithms), figsize=(6.5 * len(algorithms), 4.6), squeeze=False)
    for ax, name in zip(axes[0], algorithms):
        for spec_name in devices:
            mine = [r for r in projections["rows"] if r["algorithm"] == name and r["device"] == spec_name]
            fits = [r for r in mine if r["fits_memory"] is not False]
            if not fits:
                continue
            colour, marker = styles[spec_name]
            n = [r["clients"] for r in fits]
            ax.fill_between(
                n,
                [r["seconds_low"] for r in fits],
                [r["seconds_high"] for r in fits],
                color=colour,
                alpha=0.25,
                linewidth=0,
            )
            ax.loglog(
                n,
                [r["seconds_high"] for r in fits],
                "-",
                color=colour,
                marker=marker,
                markersize=4,
                label=_legend_label(projections["efficiencies"][spec_name]),
            )
            if len(fits) < len(mine):  # the state stops fitting after the last point drawn
                ax.plot(n[-1], fits[-1]["seconds_high"], "x", color="black", markersize=9)
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
        flags = sorted({f for x in projections["summary"] if x["algorithm"] == name for f in x.get("fit_flags", [])})
        title = f"{name}: projected seconds per round (range: stated .. measured efficiency)"
        ax.set_title(title + "".join(f"\n* {f}" for f in flags), fontsize=9)
        ax.set_xlabel("clients N (x: the next N does not fit the device's memory)")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(alpha=0.3, which="both")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, title="projection")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")


def _legend_label(efficiency: dict) -> str:
    """A device's legend entry: its name and where its measured end's efficiency comes from."""
    basis = efficiency["measured"].get("basis", "")
    if basis.startswith("borrowed from the "):
        return f"{efficiency['label']} (measured end borrowed from {basis[len('borrowed from the ') :].split(' (')[0]})"
    if basis.startswith("measured on this device"):
        return f"{efficiency['label']} (measured end: its own report)"
    return f"{efficiency['label']} ({basis.split(':')[0] or 'stated'})"


def rows_by_algorithm(payload: dict, algorithms: Optional[Iterable[str]] = None) -> tuple:
    """({algorithm: its rows of the profile ``payload``}, the algorithms asked for, default all of them, in
    order); ValueError naming an algorithm the profile did not run."""
    by_algorithm: dict = {}
    for r in payload["rows"]:
        by_algorithm.setdefault(r["algorithm"], []).append(r)
    wanted = list(algorithms) if algorithms is not None else list(by_algorithm)
    unknown = [a for a in wanted if a not in by_algorithm]
    if unknown:
        raise ValueError(f"the profile has no rows for {unknown}; it profiled {sorted(by_algorithm)}")
    return by_algorithm, wanted


def load_profile(path: str) -> dict:
    """A profile's ``profile.json`` (``path`` the file or its folder)."""
    from fedjax_clust.io.jsonio import read_json

    if os.path.isdir(path):
        path = os.path.join(path, "profile.json")
    if not os.path.isfile(path):
        raise ValueError(f"no profile at {path}: run `fedjax-clust profile --out DIR` first")
    payload = read_json(path)
    if not isinstance(payload, dict) or "rows" not in payload:
        raise ValueError(f"{path} is not a profile.json (no rows)")
    return payload
