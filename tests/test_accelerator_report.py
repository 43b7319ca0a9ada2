"""``fedjax-clust bench --suite accelerator``: the report's structure and units at --quick sizes (its speed says
nothing on this machine), what does not fit is skipped, and the command's bad inputs."""

import json
import math

import pytest

from fedjax_clust.bench import accelerator
from fedjax_clust.cli.commands import main

ROW_KEYS = {"name", "target", "limit", "comparison", "unit", "measured", "status"}


@pytest.mark.slow
def test_quick_report_has_every_target_with_units_and_status(tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["bench", "--suite", "accelerator", "--quick", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "not judged (quick sizes)" in printed and "pass" not in printed
    report = json.loads((out / "report.json").read_text())  # strict JSON: json.loads refuses NaN only if asked
    assert report["quick"] is True and report["command"].endswith("--quick") and report["complete"] is True
    device = report["device"]
    assert device["matmul_gflops_per_s_highest"] > 0 and device["copy_gbytes_per_s"] > 0
    assert device["memory_bytes"] > 0
    names = {row["name"] for row in report["rows"]}
    assert names == set(accelerator.TARGETS)  # every target has a row
    for row in report["rows"]:
        assert ROW_KEYS <= set(row), row
        assert row["unit"] == accelerator.TARGETS[row["name"]][3]
        assert row["status"] in ("not judged", "skipped")  # full-size targets say nothing at quick sizes
        if row["status"] != "skipped":
            assert math.isfinite(row["measured"]) and row["measured"] > 0
    for row in report["rows"]:  # a frontier size names its clients and the clients per subgroup, as its target
        if row["name"] in ("frontier-1m", "frontier-10m"):
            clients, group = accelerator.SIZES["quick"][row["name"].replace("-", "_")]
            assert (row["clients"], row["group_size"], row["subgroups"]) == (clients, group, clients // group)
    ratio = [r for r in report["rows"] if r["name"] == "fc-quantile-vs-radius"]
    assert all(r["measured"] == pytest.approx(r["seconds_quantile"] / r["seconds_radius"]) for r in ratio)
    costs = report["costs"]
    assert set(costs) == {"precision", "determinism", "fused", "sweep", "robust"}
    rates, seeds = accelerator.SIZES["quick"]["sweep_grid"]
    assert costs["sweep"]["runs"] == len(rates) * len(seeds) and costs["sweep"]["speedup"] > 0
    for label in ("deterministic", "xla-default"):
        assert costs["determinism"][label]["final_mean_sq_dist"] > 0
    assert "--xla_gpu_deterministic_ops=true" in costs["determinism"]["deterministic"]["xla_flags"]
    rules = {c["rule"] for c in report["scaling"]}
    assert rules == {"radius", "quantile"}
    markdown = (out / "report.md").read_text()
    assert "Quick run" in markdown and all(t[0] in markdown for t in accelerator.TARGETS.values())
    assert (out / "scaling.png").stat().st_size > 10_000
    # a folder never mixes two reports
    assert main(["bench", "--suite", "accelerator", "--quick", "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_a_size_that_does_not_fit_is_skipped_with_the_memory_it_needs():
    sizes = accelerator.SIZES["quick"]
    rows = accelerator.scale_row("frontier-10m", 10_000_000, 1000, sizes, memory=1 << 20, copy=10.0, curve=[])
    assert len(rows) == 1 and rows[0]["status"] == "skipped" and rows[0]["measured"] is None
    assert rows[0]["needs_bytes"] > 1 << 20 and "needs about" in rows[0]["reason"]
    assert rows[0]["clients"] == 10_000_000


def test_memory_estimate_grows_with_the_clients_and_the_budget():
    one = accelerator.synthetic_round_bytes(1_000_000)
    assert 0.3e9 < one < 2e9  # about 0.4 GB of data and 0.1 GB of state per million clients
    assert accelerator.synthetic_round_bytes(2_000_000) == 2 * one
    assert accelerator.synthetic_round_bytes(1000, 100, 1 << 20) > accelerator.synthetic_round_bytes(1000) + (1 << 20)


def test_rows_are_judged_against_their_limit():
    assert accelerator.target_row("fc-quantile-vs-radius", 1.2)["status"] == "pass"
    assert accelerator.target_row("fc-quantile-vs-radius", 1.6)["status"] == "fail"
    assert accelerator.target_row("mlp-kernel", 0.5)["status"] == "pass"
    assert accelerator.target_row("mlp-kernel", 0.2)["status"] == "fail"
    assert accelerator.target_row("cnn-round", float("nan"))["status"] == "fail"
    assert accelerator.unjudged(accelerator.target_row("mlp-kernel", 0.5))["status"] == "not judged"
    assert accelerator.unjudged(accelerator.skipped_row("mlp-kernel", "too big"))["status"] == "skipped"


@pytest.mark.parametrize(
    "argv, word",
    [
        (["bench", "--suite", "accelerator"], "--out"),
        (["bench", "--quick"], "--suite"),
        (["bench", "--suite", "accelerator", "--out", "x", "--clients", "300"], "--clients"),
        (["bench", "--suite", "gpu", "--out", "x"], "--suite"),
    ],
)
def test_bad_suite_arguments(argv, word, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and word in err[0]


def test_a_report_cut_off_keeps_what_it_measured(tmp_path, monkeypatch):
    """The report is rewritten after every step, so a run stopped by a time limit or a failure leaves its rows."""
    row = accelerator.target_row("fc-quantile-small", 1e-3, clients=64)
    monkeypatch.setattr(accelerator, "fc_rows", lambda *args: [row])
    monkeypatch.setattr(accelerator, "population_rows", lambda *args: [])
    monkeypatch.setattr(accelerator, "streaming_rows", lambda *args: [])

    def stopped(sizes):
        raise RuntimeError("the lease ended")

    monkeypatch.setattr(accelerator, "baseline_rows", stopped)
    with pytest.raises(RuntimeError, match="lease"):
        accelerator.run_accelerator_suite(str(tmp_path), quick=True, progress=lambda *_: None)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["complete"] is False and report["rows"] == [{**row, "status": "not judged"}] and report["costs"] == {}
    assert "Incomplete" in (tmp_path / "report.md").read_text()
