"""Device projections: datasheet registry, efficiencies, polynomial cost curves, the projection of a profile."""

import csv
import json
import math
import pathlib

import numpy as np
import pytest

from fedjax_clust.bench.device_projection import device_projections, write_projections
from fedjax_clust.cost.counting import Cost
from fedjax_clust.cost.curves import fit_curve, solve_for
from fedjax_clust.cost.devices import (
    DEVICES,
    STATED,
    DeviceSpec,
    Efficiency,
    device,
    measured_efficiency,
    project_on,
    register_device,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_fit_curve_recovers_a_non_negative_quadratic_and_says_how_well_it_fits():
    n = np.array([64, 128, 256, 512, 1024], float)
    curve = fit_curve(n, 3e4 + 2.0 * n + 0.5 * n**2)
    assert curve(2048.0) == pytest.approx(3e4 + 2 * 2048 + 0.5 * 2048**2, rel=1e-6)
    assert curve.residual < 1e-9
    flat = fit_curve(n, np.full(5, 7.0))
    assert flat.degrees == (0,) and flat(1e9) == pytest.approx(7.0)
    linear = fit_curve(n, 5.0 * n)  # no negative intercept or curvature invented
    assert all(c >= 0 for c in linear.coefficients) and linear(1e6) == pytest.approx(5e6, rel=1e-6)
    noisy = fit_curve(n, n**2 * np.array([1, 1.3, 0.8, 1.2, 1.0]))
    assert 0.1 < noisy.residual < 1
    with pytest.raises(ValueError, match="two"):
        fit_curve([8], [1.0])
    with pytest.raises(ValueError, match=">= 0"):
        fit_curve([8, 16], [1.0, -1.0])


def test_solve_for_finds_where_an_increasing_function_reaches_its_target():
    assert solve_for(lambda n: n**2, 1e6) == pytest.approx(1000, rel=2e-3)
    assert solve_for(lambda n: 5.0, 1.0) == 1.0  # already there at the smallest N
    assert solve_for(lambda n: 1e-3, 1.0) is None  # never


def test_the_registry_holds_the_issue_devices_and_refuses_bad_or_duplicate_entries():
    assert {"h100-sxm", "h100-pcie", "h200", "a100-80gb", "l4", "t4", "tpu-v5e"} <= set(DEVICES)
    assert device("tpu-v5e").flops == pytest.approx(197e12 / 6)  # float32 at "highest": six bf16 passes
    assert device("t4").memory == 16e9 and device("h100-sxm").flops == 67e12  # FP32, not tensor-core TF32
    with pytest.raises(ValueError, match="already registered"):
        register_device(DEVICES["t4"])
    with pytest.raises(ValueError, match="unknown device"):
        device("v100")
    with pytest.raises(ValueError, match="positive"):
        DeviceSpec("x", "x", 0.0, 1.0, 1.0, "", "")
    with pytest.raises(ValueError, match="compute"):
        Efficiency(1.5, 0.5)
    with pytest.raises(ValueError, match="memory share"):
        Efficiency(0.5, 20.0)


def test_a_device_projection_is_the_roofline_at_the_datasheet_peaks():
    spec = device("l4")
    e = Efficiency(0.5, 0.25, launch=1e-3, kernel=2e-6)
    cost = Cost(flops=3e12, bytes=2e10, kernels=100)
    expected = 1e-3 + 100 * 2e-6 + max(3e12 / (0.5 * 30.3e12), 2e10 / (0.25 * 300e9))
    assert project_on(cost, spec, e) == pytest.approx(expected, rel=1e-12)


def test_the_shipped_measured_efficiency_is_the_committed_fit():
    shipped = json.loads((ROOT / "fedjax_clust" / "cost" / "measured_efficiency.json").read_text())
    committed = json.loads((ROOT / "experiments/results/device-efficiency/measured_efficiency.json").read_text())
    assert shipped == committed
    h200 = measured_efficiency("h200")
    assert "H200" in h200.basis and 0 < h200.compute <= 1
    newest = max(shipped["fits"], key=lambda f: f["date"])
    assert measured_efficiency("t4").compute == newest["efficiency"]["compute"]  # no T4 report: the newest


@pytest.mark.slow
def test_the_committed_fit_is_what_the_committed_report_gives():
    from fedjax_clust.bench.device_efficiency import fit_report

    report = ROOT / "experiments/results/accelerator/nvidia-h200/2026-11-27/report.json"
    fitted = fit_report(str(report), log=lambda *_: None)
    committed = json.loads((ROOT / "experiments/results/device-efficiency/h200-2026-11-27.json").read_text())
    assert fitted["efficiency"] == pytest.approx(committed["efficiency"], rel=1e-9)
    assert [r["flops"] for r in fitted["rows"]] == pytest.approx([r["flops"] for r in committed["rows"]])
    assert fitted["rows_within_2x"] == len(fitted["rows"])  # every round within [0.5, 2] of the fit


def rows_array(projections, algorithm, device_name, column) -> np.ndarray:
    """One column of the rows of ``algorithm`` on ``device_name``, in N order."""
    return np.array(
        [r[column] for r in projections["rows"] if r["algorithm"] == algorithm and r["device"] == device_name],
        dtype=float,
    )


def _payload(memory=None):
    """A profile of one algorithm whose counts are exact polynomials: flops 1e3 N^2, bytes 40 N, 50 kernels,
    peak 8 N^2 bytes."""
    ns = [64, 128, 256, 512]
    rows = [
        dict(
            algorithm="fc",
            clients=n,
            flops=1e3 * n**2,
            bytes=40.0 * n,
            kernels=50.0,
            peak_bytes=8 * n**2,
            open_loops=0,
            branch_share=0.0,
        )
        for n in ns
    ]
    calibration = dict(
        matmul_flops_per_s=1e11,
        copy_bytes_per_s=1e10,
        launch_seconds=1e-4,
        kernel_seconds=1e-6,
        compute_efficiency=0.2,
        memory_efficiency=0.5,
    )
    return dict(rows=rows, calibration=calibration, device_memory_bytes=memory)


def test_device_projections_solve_the_roofline_for_one_second_and_for_full_memory(tmp_path):
    measured = tmp_path / "measured.json"
    fit = dict(
        device="h200",
        label="H200",
        report="r",
        date="2026-01-01",
        commit="x",
        efficiency=dict(compute=0.1, memory=2.0, launch=1e-3, kernel=1e-6),
    )
    measured.write_text(json.dumps({"fits": [fit]}))
    out = device_projections(
        _payload(memory=8e9), ["t4", "this-machine"], measured_path=str(measured), log=lambda *_: None
    )
    t4 = device("t4")
    floor = 1e-3 + 50e-6
    # compute-bound: 1 = floor + 1e3 N^2 / (eta F)  ->  N = sqrt((1 - floor) eta F / 1e3)
    n_slow = math.sqrt((1 - floor) * 0.1 * t4.flops / 1e3)
    n_fast = math.sqrt((1 - floor) * STATED.compute * t4.flops / 1e3)
    (row,) = [s for s in out["summary"] if s["device"] == "t4"]
    assert row["n_one_second_low"] == pytest.approx(n_slow, rel=3e-3)
    assert row["n_one_second_high"] == pytest.approx(n_fast, rel=3e-3)
    assert row["n_memory_limit"] == pytest.approx(math.sqrt(0.75 * t4.memory / 8), rel=3e-3)  # JAX gets 75%
    assert row["cost_residual"] < 1e-6 and row["caveat"] == ""
    seconds = rows_array(out, "fc", "t4", "seconds_measured")
    clients = rows_array(out, "fc", "t4", "clients")
    assert seconds == pytest.approx(floor + 1e3 * clients**2 / (0.1 * t4.flops), rel=1e-6)
    fits = rows_array(out, "fc", "t4", "fits_memory")
    assert np.all(fits[clients <= math.sqrt(0.75 * t4.memory / 8)] == 1) and np.all(fits[clients > 4e4] == 0)
    here = [s for s in out["summary"] if s["device"] == "this-machine"][0]
    assert here["n_memory_limit"] == pytest.approx(math.sqrt(8e9 / 8), rel=3e-3)  # the profile's recorded memory
    # this machine's measured end is the profile's own calibration
    n_here = math.sqrt((1 - 1e-4 - 50e-6) * 0.2 * 1e11 / 1e3)
    assert here["n_one_second_low"] == pytest.approx(n_here, rel=3e-3)
    write_projections(out, str(tmp_path / "p"))
    with open(tmp_path / "p" / "devices.csv") as f:
        written = list(csv.DictReader(f))
    assert len(written) == len(out["rows"]) and (tmp_path / "p" / "devices.png").stat().st_size > 10_000
    unknown = device_projections(_payload(memory=None), ["this-machine"], log=lambda *_: None)
    assert unknown["summary"][0]["n_memory_limit"] is None
    assert all(r["fits_memory"] is None for r in unknown["rows"])  # its memory was not recorded
    with pytest.raises(ValueError, match="no rows for"):
        device_projections(_payload(), ["t4"], algorithms=["ifca-1"], measured_path=str(measured))


def test_projections_say_when_memory_binds_first_when_a_fit_is_poor_and_whose_efficiency_they_borrow(tmp_path):
    """The issue's three contradictions: a one-second N beyond the memory limit, a memory fit 66% off shown only in
    devices.json, and a T4 range whose measured end was the H200's report without a word."""
    from fedjax_clust.bench.device_projection import RESIDUAL_FLAG, fit_flags, one_second_text

    cheap = dict(n_one_second_low=2.8e9, n_one_second_high=2.4e10, n_memory_limit=1.15e8)
    assert one_second_text(cheap) == "memory binds first at N = 115,000,000 (under 1 s a round up to there)"
    half = dict(n_one_second_low=3e4, n_one_second_high=2e5, n_memory_limit=1e5)
    assert one_second_text(half) == "1 s a round at N = 30,000 - beyond memory; memory full at N = 100,000"
    assert (
        one_second_text(dict(half, n_memory_limit=None))
        == "1 s a round at N = 30,000 - 200,000; memory full at N = never"
    )
    assert fit_flags(0.01, RESIDUAL_FLAG) == []
    assert fit_flags(0.01, 0.66) == ["the memory fit is off by up to 66% on the profiled N"]

    measured = tmp_path / "measured.json"
    fit = dict(
        device="h200",
        label="H200",
        report="r",
        date="2026-01-01",
        commit="x",
        efficiency=dict(compute=0.1, memory=2.0, launch=1e-3, kernel=1e-6),
    )
    measured.write_text(json.dumps({"fits": [fit]}))
    payload = _payload(memory=8e9)
    for r in payload["rows"]:  # a peak memory no polynomial of the fit's degrees follows
        r["peak_bytes"] = 8 * r["clients"] ** 2 * (1 + 0.9 * (r["clients"] == 256))
    lines = []
    out = device_projections(payload, ["t4", "h200"], measured_path=str(measured), log=lines.append)
    t4, h200 = ([s for s in out["summary"] if s["device"] == d][0] for d in ("t4", "h200"))
    assert t4["measured_basis"].startswith("borrowed from the H200 (no report measured here)")
    assert h200["measured_basis"].startswith("measured on this device")
    assert t4["fit_flags"] and t4["fit_flags"][0].startswith("the memory fit is off by up to")
    (t4_line,) = [line for line in lines if " on T4" in line]
    assert "the memory fit is off by up to" in t4_line and "measured end borrowed from the H200" in t4_line
    (h200_line,) = [line for line in lines if " on H200" in line]
    assert "borrowed" not in h200_line
    labels = [_legend(out["efficiencies"][d]) for d in ("t4", "h200")]
    assert labels[0].endswith("(measured end borrowed from H200)") and labels[1].endswith(
        "(measured end: its own report)"
    )


def _legend(efficiency):
    from fedjax_clust.bench.device_projection import _legend_label

    return _legend_label(efficiency)
