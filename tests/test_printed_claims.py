"""What a command says it wrote is what it wrote; a legend says what its data show; a device asked for by name is
projected or refused, never dropped (issue 63, item 2)."""

import json

from fedjax_clust.bench.device_projection import device_projections
from fedjax_clust.bench.profile import _label
from fedjax_clust.cli.commands import main
from fedjax_clust.io.run_folder import wrote_files


def test_wrote_files_names_exactly_the_files_that_exist(tmp_path):
    for name in ("a.csv", "b.json"):
        (tmp_path / name).write_text("x")
    paths = [str(tmp_path / n) for n in ("a.csv", "b.json", "c.png")]
    assert wrote_files(paths) == f"wrote {tmp_path}/: a.csv and b.json"
    assert wrote_files(paths[:1]) == f"wrote {tmp_path}/: a.csv"
    assert wrote_files(paths[2:]) == "wrote nothing"
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.csv").write_text("x")
    assert wrote_files([paths[0], str(tmp_path / "sub" / "d.csv")]) == f"wrote {paths[0]} and {tmp_path}/sub/d.csv"


def test_a_profile_without_projections_does_not_claim_them(tmp_path, capsys):
    """One size: no device projections (nothing to extrapolate), and the line says so by not naming them."""
    argv = [
        "profile",
        "--clients",
        "8",
        "--algorithms",
        "global",
        "--repeats",
        "1",
        "--tradeoff-subgroups",
        "none",
        "--out",
        str(tmp_path / "one"),
    ]
    assert main(argv) == 0
    wrote = [line for line in capsys.readouterr().out.splitlines() if line.startswith("wrote")]
    assert wrote == [f"wrote {tmp_path}/one/: profile.csv, profile.json and profile.png"]
    assert not (tmp_path / "one" / "devices.csv").exists()


def test_the_legend_says_flat_only_where_the_calibration_put_the_rows_at_the_floor():
    rising = [{"clients": n, "seconds_per_round": 1e-3 * n * n, "above_floor": None} for n in (8, 16, 32, 64, 128)]
    assert _label("fc", None, rising) == "fc (N^2.00 end to end, no floor fitted)"  # no calibration: the data's slope
    floor = [dict(r, above_floor=False, seconds_per_round=1e-3) for r in rising]
    assert _label("fc", None, floor) == "fc (flat)"
    assert _label("fc", 1.5, floor) == "fc (N^1.50)"
    assert _label("fc", None, rising[:1]) == "fc (one size)"


def test_this_machine_asked_for_by_name_is_refused_without_a_calibration(tmp_path, capsys):
    """Two rows cannot calibrate the cost model (three needed): `project --devices this-machine` is refused in one
    line (it dropped the device without a word), the default device list leaves it out."""
    argv = [
        "profile",
        "--clients",
        "8,16",
        "--algorithms",
        "global",
        "--repeats",
        "1",
        "--tradeoff-subgroups",
        "none",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["project", str(tmp_path), "--devices", "t4,this-machine"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "this-machine: the profile has no calibration" in err, err
    assert main(["project", str(tmp_path), "--devices", "t4"]) == 0
    payload = json.loads((tmp_path / "profile.json").read_text())
    default = device_projections(payload, None, log=lambda *_: None)
    assert "this-machine" not in {r["device"] for r in default["rows"]} and "t4" in {
        r["device"] for r in default["rows"]
    }


def test_sweep_and_compare_name_what_they_wrote(tmp_path, capsys):
    common = ["--clusters", "2", "--clients-per-cluster", "3", "--rounds", "2", "--no-progress"]
    assert main(["sweep", "--algorithm", "global", *common, "--lr", "0.001,0.002", "--out", str(tmp_path / "s")]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.endswith(f"; wrote {tmp_path}/s/: sweep.json, sweep.png, runs and config.toml"), line
    assert main(["compare", "--algorithms", "global,local", *common, "--out", str(tmp_path / "c")]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("wrote")][-1]
    assert line == f"wrote {tmp_path}/c/: results.json, convergence.png, global and local", line


def test_an_exponent_left_out_says_why():
    from fedjax_clust.bench.profile import _no_exponent

    rows = [
        {"clients": n, "seconds_per_round": s, "above_floor": a}
        for n, s, a in ((64, 1e-3, False), (128, 1.7e-3, True), (256, 6.5e-3, True))
    ]
    assert _no_exponent(rows, True) == "no exponent (2 of 3 rows above the launch floor; three needed)"
    assert _no_exponent([dict(r, above_floor=False) for r in rows], True) == "flat (at the launch floor)"
    assert _no_exponent(rows, False) == "no exponent (no calibration)"
    assert _label("fc", None, rows).endswith("end to end, 2 of 3 rows above the floor)")


def test_a_fit_with_as_many_terms_as_sizes_is_flagged_unchecked():
    from fedjax_clust.bench.device_projection import unchecked_fits
    from fedjax_clust.cost.curves import Curve

    quadratic = Curve((0, 1, 2), (1.0, 1.0, 1.0), 0.0)
    assert unchecked_fits({"flops": None, "peak_bytes": quadratic}, [64, 128, 256]) == [
        "the memory fit has as many terms as profiled sizes (3): nothing checks its extrapolation"
    ]
    assert unchecked_fits({"flops": None, "peak_bytes": quadratic}, [64, 128, 256, 512]) == []


def test_project_refuses_before_it_touches_the_folder(tmp_path, capsys):
    argv = [
        "profile",
        "--clients",
        "8,16",
        "--algorithms",
        "global",
        "--repeats",
        "1",
        "--tradeoff-subgroups",
        "none",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    (tmp_path / "devices.csv").write_text("kept")  # stands for an earlier projection in the profile's folder
    assert main(["project", str(tmp_path), "--algorithms", "ifca-1"]) == 2
    assert main(["project", str(tmp_path), "--devices", "this-machine"]) == 2
    assert (tmp_path / "devices.csv").read_text() == "kept"
    capsys.readouterr()
    assert main(["project", str(tmp_path), "--devices", "t4", "--out", str(tmp_path / "other")]) == 0
    out = capsys.readouterr().out
    assert "projected global on T4" in out and "wrote" in out


def test_a_ctrl_c_line_says_interrupted_once(capsys):
    from fedjax_clust.cli import interrupted

    assert interrupted(KeyboardInterrupt("interrupted after round 3 of 9; resume with --resume")) == 130
    assert capsys.readouterr().err.strip() == "interrupted after round 3 of 9; resume with --resume"
    assert interrupted(KeyboardInterrupt("sweep interrupted in program 1 of 2")) == 130
    assert capsys.readouterr().err.strip() == "interrupted: sweep interrupted in program 1 of 2"


def test_the_progress_line_names_the_round_its_metrics_are_of():
    import io

    from fedjax_clust.io.progress import RoundProgress

    log = io.StringIO()
    bar = RoundProgress(20, "fc", plain=True, stream=log)
    bar.set_postfix({"test_accuracy": "0.08"}, label="round 0")
    bar.update(1, 0.5)
    bar.close()
    assert log.getvalue().splitlines()[1] == "fc: round 1/20 (compiled and ran in 0.5 s), round 0: test_accuracy=0.08"
