"""A result folder holds one run: resumes refuse a different run, new runs refuse a used folder, broken
checkpoints fall back to the newest readable one."""

import json
import os
import shutil

import numpy as np
import pytest

from fedjax_clust import make_algorithm, run_comparison, simulate, synthetic_regression
from fedjax_clust.cli.commands import main
from fedjax_clust.io.checkpoint import latest_checkpoint
from fedjax_clust.io.jsonio import read_json, read_json_lines
from fedjax_clust.run.driver_options import Checkpointing, Evaluation, Output


@pytest.fixture(scope="module")
def task():
    return synthetic_regression(clients_per_cluster=4, seed=3)


def fc(task, **kw):
    return make_algorithm(
        "federated-clustering", task, **{"learning_rate": 0.01, "quantile": 0.3, "batch_size": 4, **kw}
    )


def checkpointed(task, folder, rounds=8, **kw):
    return simulate(
        fc(task, **kw),
        task,
        rounds=rounds,
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False, out_dir=str(folder)),
        checkpointing=Checkpointing(checkpoint_every=4),
    )


@pytest.mark.parametrize(
    "change, field",
    [
        (dict(algo=dict(learning_rate=0.02)), "hparams.learning_rate: 0.01 -> 0.02"),
        (dict(run=dict(seed=1)), "seed: 0 -> 1"),
        (dict(run=dict(evaluation=Evaluation(eval_every=4))), "eval_every: 2 -> 4"),
        (dict(algo=dict(momentum=0.5)), "hparams.momentum: 0.9 -> 0.5"),
        (dict(algo=dict(matmul_precision="default")), "matmul_precision: 'highest' -> 'default'"),
    ],
)
def test_resume_refuses_a_different_run(tmp_path, task, change, field):
    checkpointed(task, tmp_path)
    run = {
        "rounds": 12,
        "evaluation": Evaluation(eval_every=2),
        "output": Output(progress=False, out_dir=str(tmp_path), resume=True),
        **change.get("run", {}),
    }
    with pytest.raises(ValueError, match="cannot resume") as info:
        simulate(fc(task, **change.get("algo", {})), task, **run)
    assert field in str(info.value) and "\n" not in str(info.value)


def test_resume_refuses_another_algorithm_and_fewer_rounds(tmp_path, task):
    checkpointed(task, tmp_path)
    with pytest.raises(ValueError, match="algorithm: 'federated-clustering' -> 'local'"):
        simulate(
            make_algorithm("local", task, learning_rate=0.01),
            task,
            rounds=12,
            evaluation=Evaluation(eval_every=2),
            output=Output(progress=False, out_dir=str(tmp_path), resume=True),
        )
    with pytest.raises(ValueError, match="rounds=6 is below the 8 rounds"):
        simulate(
            fc(task),
            task,
            rounds=6,
            evaluation=Evaluation(eval_every=2),
            output=Output(progress=False, out_dir=str(tmp_path), resume=True),
        )
    again = simulate(
        fc(task),
        task,
        rounds=8,
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False, out_dir=str(tmp_path), resume=True),
    )
    assert [r["round"] for r in again.history] == [0, 2, 4, 6, 8]  # a finished run: nothing appended
    longer = simulate(
        fc(task),
        task,
        rounds=10,
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False, out_dir=str(tmp_path), resume=True),
    )
    straight = simulate(fc(task), task, rounds=10, evaluation=Evaluation(eval_every=2), output=Output(progress=False))
    assert longer.history == straight.history


def test_a_new_run_refuses_a_used_folder_and_overwrite_clears_only_results(tmp_path, task):
    checkpointed(task, tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="already holds the results of a run.*--resume"):
        simulate(fc(task), task, rounds=4, output=Output(progress=False, out_dir=str(tmp_path)))
    other = simulate(
        fc(task, learning_rate=0.02),
        task,
        rounds=4,
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False, out_dir=str(tmp_path), overwrite=True),
    )
    assert sorted(os.listdir(tmp_path)) == ["metrics.jsonl", "notes.txt", "run.json", "summary.json"]
    assert read_json(str(tmp_path / "run.json"))["config"]["hparams"]["learning_rate"] == 0.02
    assert read_json_lines(str(tmp_path / "metrics.jsonl")) == other.history


def test_old_checkpoints_never_mix_with_a_new_run(tmp_path, task):
    """The bug: a new run pruned its own checkpoints as 'older' than another run's, and a resume restored
    the other run. Now the new run refuses the folder; with overwrite the old checkpoints are gone."""
    ckpt = tmp_path / "ckpt"
    simulate(
        fc(task, learning_rate=0.02),
        task,
        rounds=40,
        output=Output(progress=False),
        checkpointing=Checkpointing(checkpoint_every=20, checkpoint_dir=str(ckpt)),
    )
    with pytest.raises(ValueError, match="checkpoint_dir"):
        simulate(
            fc(task),
            task,
            rounds=8,
            output=Output(progress=False),
            checkpointing=Checkpointing(checkpoint_every=4, checkpoint_dir=str(ckpt)),
        )
    simulate(
        fc(task),
        task,
        rounds=8,
        output=Output(progress=False, overwrite=True),
        checkpointing=Checkpointing(checkpoint_every=4, checkpoint_dir=str(ckpt)),
    )
    assert sorted(os.listdir(ckpt)) == ["round_00000004", "round_00000008"]


def test_compare_into_a_reused_folder_keeps_no_other_run(tmp_path, task):
    run_comparison(
        task,
        ["local", "global"],
        rounds=2,
        output=Output(out_dir=str(tmp_path), progress=False),
        options={"learning_rate": 0.01},
    )
    with pytest.raises(ValueError, match="already holds") as refused:
        run_comparison(
            task,
            ["ground-truth"],
            rounds=2,
            output=Output(out_dir=str(tmp_path), progress=False),
            options={"learning_rate": 0.01},
        )
    assert "--overwrite" in str(refused.value) and "resume" not in str(refused.value)  # compare cannot resume
    run_comparison(
        task,
        ["ground-truth"],
        rounds=2,
        output=Output(out_dir=str(tmp_path), progress=False, overwrite=True),
        options={"learning_rate": 0.01},
    )
    assert sorted(os.listdir(tmp_path)) == ["convergence.png", "ground-truth", "results.json"]
    assert set(read_json(str(tmp_path / "results.json"))) == {"ground-truth"}


def test_a_corrupt_checkpoint_falls_back_to_the_newest_readable_one(tmp_path, task):
    straight = simulate(fc(task), task, rounds=12, evaluation=Evaluation(eval_every=2), output=Output(progress=False))
    for breakage in ("truncate progress", "remove state"):
        folder = tmp_path / breakage.replace(" ", "_")
        checkpointed(task, folder)
        newest = folder / "checkpoints" / "round_00000008"
        if breakage == "truncate progress":
            (newest / "progress.json").write_text('{"round": 8, "hist')
        else:
            shutil.rmtree(newest / "state")
            os.makedirs(newest / "state")
        with pytest.warns(RuntimeWarning, match="skipping unreadable checkpoint .*round_00000008"):
            resumed = simulate(
                fc(task),
                task,
                rounds=12,
                evaluation=Evaluation(eval_every=2),
                output=Output(progress=False, out_dir=str(folder), resume=True),
            )
        assert resumed.history == straight.history
        np.testing.assert_array_equal(np.asarray(resumed.state.params), np.asarray(straight.state.params))


def test_every_checkpoint_unreadable_is_one_clear_error(tmp_path, task):
    checkpointed(task, tmp_path)
    for name in os.listdir(tmp_path / "checkpoints"):
        (tmp_path / "checkpoints" / name / "progress.json").write_text("")
    with (
        pytest.warns(RuntimeWarning),
        pytest.raises(ValueError, match="no readable checkpoint .*progress.json is not valid JSON"),
    ):
        simulate(
            fc(task),
            task,
            rounds=12,
            evaluation=Evaluation(eval_every=2),
            output=Output(progress=False, out_dir=str(tmp_path), resume=True),
        )


def test_cli_overwrite_and_resume_flags(tmp_path, capsys):
    base = [
        "run",
        "--algorithm",
        "local",
        "--clients-per-cluster",
        "2",
        "--rounds",
        "4",
        "--eval-every",
        "2",
        "--no-progress",
        "--out",
        str(tmp_path),
    ]
    assert main(base) == 0
    assert main(base) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(base + ["--overwrite", "--lr", "0.02"]) == 0
    assert main(base + ["--resume"]) == 2  # the folder now holds the lr 0.02 run
    assert "learning_rate: 0.02 -> 0.01" in capsys.readouterr().err
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["hparams"]["learning_rate"] == 0.02 and summary["version"] and summary["status"] == "completed"
    assert latest_checkpoint(str(tmp_path / "checkpoints")) is None


def test_writing_figures_leaves_the_plotting_backend_alone(tmp_path):
    """The library saves figures without pyplot: a notebook's backend (and its inline plots) survive. In a
    fresh process whose backend is 'svg' (any non-Agg one), writing the convergence plot keeps it."""
    import subprocess
    import sys

    code = (
        "import matplotlib; matplotlib.use('svg')\n"
        "import fedjax_clust as fc\n"
        "from fedjax_clust.run.compare import plot_convergence\n"
        "task = fc.synthetic_regression(num_clusters=2, clients_per_cluster=2)\n"
        "algo = fc.make_algorithm('local', task, learning_rate=0.01)\n"
        "r = fc.simulate(algo, task, rounds=2, output=fc.Output(progress=False))\n"
        f"plot_convergence({{'local': r}}, 'mean_sq_dist_to_optimum', {str(tmp_path / 'c.png')!r})\n"
        "print(matplotlib.get_backend())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "svg" and (tmp_path / "c.png").stat().st_size > 0
