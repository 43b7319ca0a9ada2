"""The command line: run/compare write the documented files; bad input is one line and exit status 2."""

import json
import subprocess
import sys

import pytest

from fedjax_clust.cli.commands import main

SMALL = ["--clusters", "2", "--clients-per-cluster", "5", "--rounds", "6", "--eval-every", "3", "--no-progress"]


@pytest.mark.parametrize(
    "algorithm",
    [
        "federated-clustering",
        "local",
        "global",
        "ground-truth",
        "myopic-clustering",
        "momentum-clustering",
        "ifca-1",
        "ifca-2",
        "hypcluster",
        "cfl",
        "ditto",
    ],
)
def test_run_writes_metrics_and_summary(tmp_path, algorithm, capsys):
    out = tmp_path / algorithm
    assert main(["run", "--task", "synthetic", "--algorithm", algorithm, "--seed", "0", "--out", str(out)] + SMALL) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [0, 3, 6]
    summary = json.loads((out / "summary.json").read_text())
    for key in [
        "algorithm",
        "task",
        "rounds",
        "seed",
        "seconds_per_round",
        "mean_sq_dist_to_optimum",
        "mean_dist_to_optimum",
        "mean_loss",
    ]:
        assert key in summary
    assert summary["algorithm"] == algorithm and summary["rounds"] == 6 and summary["seconds_per_round"] > 0
    assert summary["mean_sq_dist_to_optimum"] == rows[-1]["mean_sq_dist_to_optimum"]
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["algorithm"] == algorithm
    if algorithm not in ("federated-clustering", "local", "global", "ground-truth", "ditto"):
        assert 0.0 <= rows[-1]["misclustering"] <= 1.0


def test_run_counterexample_task(tmp_path):
    out = tmp_path / "myopic"
    assert (
        main(
            [
                "run",
                "--task",
                "counterexample-myopic",
                "--algorithm",
                "myopic-clustering",
                "--lr",
                "0.1",
                "--momentum",
                "0",
                "--rounds",
                "100",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mean_dist_to_optimum"] == pytest.approx(1.0 / 3, abs=1e-4)  # client 2 stuck at x = 1


def test_run_is_deterministic(tmp_path):
    for name in ("a", "b"):
        main(["run", "--algorithm", "federated-clustering", "--batch-size", "4", "--out", str(tmp_path / name)] + SMALL)
    a = (tmp_path / "a" / "metrics.jsonl").read_text()
    assert a == (tmp_path / "b" / "metrics.jsonl").read_text()


def test_compare_writes_table_and_plot(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", "--out", str(out), "--algorithms", "federated-clustering,local"] + SMALL) == 0
    printed = capsys.readouterr().out
    assert "federated-clustering" in printed and "local" in printed and "mean_sq_dist_to_optimum" in printed
    assert (out / "convergence.png").stat().st_size > 1000
    assert set(json.loads((out / "results.json").read_text())) == {"federated-clustering", "local"}


def test_entry_point_exit_status(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fedjax_clust.cli", "run", "--algorithm", "nope", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: argument --algorithm"), lines


def test_run_knn_per_on_the_classification_task(tmp_path, capsys):
    out = tmp_path / "knn"
    assert (
        main(
            [
                "run",
                "--task",
                "classification",
                "--algorithm",
                "knn-per",
                "--clusters",
                "2",
                "--clients-per-cluster",
                "3",
                "--rounds",
                "4",
                "--eval-every",
                "2",
                "--knn-lambda",
                "0.9",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["algorithm"] == "knn-per" and 0.0 <= summary["test_accuracy"] <= 1.0
    assert summary["hparams"]["lam"] == 0.9
    assert main(["run", "--algorithm", "knn-per", "--no-progress", "--out", str(tmp_path / "bad")] + SMALL[:4]) == 2
    assert "feature model" in capsys.readouterr().err


def test_help_narrows_to_the_named_algorithm_and_task(capsys):
    """``run --algorithm NAME --task TASK --help`` lists only the options that apply to them; plain ``run --help``
    lists every one."""
    import pytest

    from fedjax_clust.cli.commands import main

    def help_text(argv):
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 0
        return capsys.readouterr().out

    full = help_text(["run", "--help"])
    narrow = help_text(["run", "--algorithm", "local", "--task", "synthetic", "--help"])
    assert "--ditto-lambda" in full and "--data-dir" in full and "--algorithm NAME [--task" in full
    assert "--ditto-lambda" not in narrow and "--data-dir" not in narrow and "--clustering-steps" not in narrow
    assert "--lr" in narrow and "--clients-per-cluster" in narrow and "--attack" in narrow
    assert len(narrow.splitlines()) < 0.5 * len(full.splitlines())
    assert "--ditto-lambda" in help_text(["compare", "--algorithms", "local,ditto", "--help"])


def test_the_package_level_main_can_be_called_again(tmp_path, capsys):
    """``import fedjax_clust.cli as cli; cli.main([...])`` twice, as a notebook does: the module holding the
    commands must not rebind ``fedjax_clust.cli.main`` (it did while it was named ``main.py``)."""
    import fedjax_clust.cli as cli

    argv = ["run", "--task", "synthetic", "--algorithm", "local", "--no-progress"] + SMALL[:4] + ["--rounds", "2"]
    assert cli.main(argv + ["--out", str(tmp_path / "first")]) == 0
    assert callable(cli.main) and cli.main(argv + ["--out", str(tmp_path / "second")]) == 0
    assert (tmp_path / "second" / "summary.json").exists()
