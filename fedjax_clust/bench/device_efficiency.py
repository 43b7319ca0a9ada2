"""The efficiency an accelerator report's rounds reached: their programs counted here, fitted to their seconds there.

A committed accelerator report (``fedjax-clust bench --suite accelerator``, ``report.json``) holds the seconds a
GPU took for rounds whose configuration it records: Federated-Clustering on the synthetic task at N = 300 ...
100,000 with both radius rules (``scaling``), one launched round of Local / Global / Ground-truth at N = 300
(``baseline-round``), the MLP cross-gradient kernel at N = 16,384 (``mlp-kernel``) and the CNN round on MNIST
rotation at N = 300 (``cnn-round``). Counting a program needs only its shapes, so this machine rebuilds each
round as the report ran it (the accelerator's quantile select "radix", a memory budget of a quarter of the
report's device memory) and counts its FLOPs, bytes and kernels (:mod:`fedjax_clust.cost.counting`). The
roofline of :func:`fedjax_clust.cost.roofline.fit` is then fitted to the measured seconds against the device's
*datasheet* peaks (:mod:`fedjax_clust.cost.devices`), giving the shares of those peaks the rounds reached and
the runtime's launch and per-kernel costs -- the "measured" end of every device projection. Each row's
measured / projected ratio is recorded, so how well one fit explains rounds of very different arithmetic
intensity is on file. Rows the report could not run (``skipped``) and those whose configuration it does not
record (the 1M / 10M client frontier, population and streaming rows) are not used.

    python experiments/device_efficiency.py --out experiments/results/device-efficiency

writes one ``<device>-<date>.json`` per report and ``measured_efficiency.json`` (what the package ships as
``fedjax_clust/cost/measured_efficiency.json``; ``--package-file`` writes it there too).
"""

from __future__ import annotations

import os
from typing import Optional

from fedjax_clust.io.jsonio import read_json, write_json

__all__ = ["device_of_report", "report_rounds", "fit_report", "fit_reports", "LAUNCH_BASE"]

LAUNCH_BASE = 5e-6  # seconds: the fit's launch grid runs from 1 to 1,000 times this (a GPU kernel launch)

_KINDS = (  # (every word the report's device kind must contain, the registered device)
    (("H200",), "h200"),
    (("H100", "PCIe"), "h100-pcie"),
    (("H100",), "h100-sxm"),
    (("A100",), "a100-80gb"),
    (("L4",), "l4"),
    (("T4",), "t4"),
)


def device_of_report(kind: str) -> str:
    """The registered device a report's ``device.kind`` ("NVIDIA H100 80GB HBM3") names (ValueError if none)."""
    for words, name in _KINDS:
        if all(w.lower() in kind.lower() for w in words):
            return name
    raise ValueError(f"no registered device matches the report's device {kind!r}")


def _fc_options(report: dict, rule: str) -> dict:
    budget = int(report["device"]["memory_bytes"]) // 4  # the default budget on that device
    select = {"quantile_select": "radix"} if rule == "quantile" else {}
    return dict(memory_budget=budget, **select)


def report_rounds(report: dict):
    """Yield (row description, algorithm, task, measured seconds) for every round of ``report`` whose
    configuration it records (module docstring), rebuilt on this machine."""
    from fedjax_clust.algorithms import make_algorithm
    from fedjax_clust.bench import accelerator as acc
    from fedjax_clust.bench.image import benchmark_image_task
    from fedjax_clust.bench.mlp import mlp_task

    for r in report.get("scaling", []):
        task = acc.synthetic_task(r["clients"])
        yield (
            {"name": "fc-synthetic", "rule": r["rule"], "clients": r["clients"]},
            acc.fc_algorithm(task, r["rule"], **_fc_options(report, r["rule"])),
            task,
            r["seconds_per_round"],
        )
    for r in report.get("rows", []):
        if r.get("status") == "skipped" or r.get("measured") is None:
            continue
        if r["name"] == "baseline-round":
            task = acc.synthetic_task(r["clients"])
            algo = make_algorithm(r["algorithm"], task, learning_rate=0.01, momentum=0.9)
            yield (
                {"name": "baseline", "algorithm": r["algorithm"], "clients": r["clients"]},
                algo,
                task,
                r["seconds_per_round_launched"],
            )
        elif r["name"] in ("mlp-kernel", "cnn-round"):
            mlp = r["name"] == "mlp-kernel"
            task = (
                mlp_task(r["clients"], r["batch_size"]) if mlp else benchmark_image_task(r["clients"], r["batch_size"])
            )
            algo = make_algorithm(
                "federated-clustering",
                task,
                learning_rate=0.1,
                momentum=0.9,
                batch_size=r["batch_size"],
                quantile=0.2,
                clustering_steps=0 if mlp else 10,
                subgroups=r["subgroups"],
                **_fc_options(report, "quantile"),
            )
            seconds = r["seconds_per_round"] if mlp else r["measured"]
            yield {"name": r["name"], "clients": r["clients"], "subgroups": r["subgroups"]}, algo, task, seconds


def fit_report(report_path: str, log=print) -> dict:
    """The fit of one report (module docstring): device, efficiency, and every row's counted cost, measured and
    projected seconds and their ratio."""
    import jax

    from fedjax_clust.cost.devices import device
    from fedjax_clust.cost.roofline import Machine, fit, project
    from fedjax_clust.cost.rounds import round_cost

    report = read_json(report_path)
    spec = device(device_of_report(report["device"]["kind"]))
    rows, costs = [], []
    for described, algo, task, seconds in report_rounds(report):
        state = jax.eval_shape(lambda p, a=algo, n=task.num_clients: a.init(p, n), task.init_params(None))
        cost, _ = round_cost(algo, state, task.data, 3)
        costs.append(cost)
        rows.append(
            {**described, "seconds": seconds, "flops": cost.flops, "bytes": cost.bytes, "kernels": cost.kernels}
        )
        log(f"{spec.label}: {described} counted, {cost.flops:.3g} FLOP, {cost.bytes:.3g} bytes, {seconds:.4g} s")
    calibration = fit(costs, [r["seconds"] for r in rows], Machine(spec.flops, spec.bandwidth, LAUNCH_BASE))
    for row, cost in zip(rows, costs):
        row["projected"] = project(cost, calibration)
        row["ratio"] = row["seconds"] / row["projected"]
    within = sum(0.5 <= r["ratio"] <= 2 for r in rows)
    log(
        f"{spec.label}: {calibration.compute_efficiency:.3f} of the FP32 peak, {calibration.memory_efficiency:.3f} "
        f"of the bandwidth, launch {calibration.machine.launch * 1e6:.0f} us + {calibration.kernel * 1e9:.0f} ns a "
        f"kernel; {within} of {len(rows)} rounds within [0.5, 2]"
    )
    return {
        "device": spec.name,
        "label": spec.label,
        "report": os.path.relpath(report_path),
        "date": report["date"],
        "commit": report["commit"],
        "efficiency": {
            "compute": calibration.compute_efficiency,
            "memory": calibration.memory_efficiency,
            "launch": calibration.machine.launch,
            "kernel": calibration.kernel,
        },
        "rows_within_2x": within,
        "rows": rows,
    }


def _file_of(report: dict) -> str:
    """The fit's file name: the device and the report's date (two reports of one device keep both)."""
    return f"{device_of_report(report['device']['kind'])}-{report['date']}.json"


def fit_reports(
    paths: list, out: str, *, package_file: Optional[str] = None, overwrite: bool = False, log=print
) -> list:
    """Fit every complete full-size report of ``paths`` (:func:`fit_report`), writing ``<device>-<date>.json``
    and ``measured_efficiency.json`` into ``out`` (and ``package_file`` when given); ValueError naming what is
    wrong (no report, files of an earlier fit without ``overwrite``). Returns the fits."""
    from fedjax_clust.io.run_folder import claim_outputs

    if not paths:
        raise ValueError("no accelerator report to fit")
    claim_outputs(out, [*(_file_of(read_json(p)) for p in paths), "measured_efficiency.json"], overwrite)
    fits = []
    for path in paths:
        report = read_json(path)
        if report.get("quick") or not report.get("complete", True):
            log(f"{path}: a --quick or incomplete report, not fitted")
            continue
        fitted = fit_report(path, log)
        name = _file_of(report)
        write_json(os.path.join(out, name), fitted, indent=1)
        fits.append({**{k: v for k, v in fitted.items() if k != "rows"}, "file": name})
    if not fits:
        raise ValueError("no complete full-size report among " + ", ".join(paths))
    combined = {"generated_by": "python experiments/device_efficiency.py", "fits": fits}
    for target in filter(None, (os.path.join(out, "measured_efficiency.json"), package_file)):
        write_json(target, combined, indent=1)
    return fits
