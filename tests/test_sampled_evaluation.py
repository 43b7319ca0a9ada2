"""A sampled evaluation (eval_clients=K) in a sweep and a study: each run evaluates the K clients simulate draws for
its seed and round, so every run's rows are simulate's; the sample is part of the run's configuration."""

import json

import pytest

from fedjax_clust import make_algorithm, make_task, simulate, sweep
from fedjax_clust.cli.commands import main
from fedjax_clust.run.driver_options import Batching, Evaluation, Output


def _task(seed):
    return make_task("synthetic", num_clusters=2, clients_per_cluster=20, seed=seed)


@pytest.mark.parametrize("batching", ["map", "vmap"])
def test_each_sampled_run_of_a_sweep_is_the_sampled_simulate(batching):
    swept = sweep(
        "global",
        _task,
        grid={"learning_rate": [0.001, 0.002]},
        seeds=[0, 3],
        rounds=4,
        evaluation=Evaluation(eval_every=2, eval_clients=7),
        output=Output(progress=False),
        batching=Batching(run_batching=batching),
    )
    for result in swept.runs:
        values, seed = result.summary["sweep_values"], result.summary["seed"]
        task = _task(seed)
        alone = simulate(
            make_algorithm("global", task, **values),
            task,
            rounds=4,
            seed=seed,
            evaluation=Evaluation(eval_every=2, eval_clients=7),
            output=Output(progress=False),
        )
        assert [r["round"] for r in result.history] == [0, 2, 4]
        assert result.summary["eval_clients"] == alone.summary["eval_clients"] == 7
        for mine, theirs in zip(result.history, alone.history):
            for key, value in theirs.items():
                if batching == "map":
                    assert mine[key] == value, key  # the same kernels, one run after another: bit for bit
                else:
                    assert mine[key] == pytest.approx(value, rel=1e-5), key
    full = sweep(
        "global",
        _task,
        grid={"learning_rate": [0.001]},
        seeds=[0],
        rounds=4,
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False),
        batching=Batching(run_batching=batching),
    )
    assert full.runs[0].history[-1] != swept.runs[0].history[-1]  # 7 of 40 clients: another mean


def test_the_command_line_records_the_sample_and_refuses_a_bad_one(tmp_path, capsys):
    common = ["--clusters", "2", "--clients-per-cluster", "5", "--rounds", "2", "--no-progress", "--eval-clients", "4"]
    assert main(["sweep", "--algorithm", "global", "--lr", "0.001,0.002", *common, "--out", str(tmp_path / "s")]) == 0
    run = json.loads((tmp_path / "s" / "runs" / "learning_rate=0.001,seed=0" / "run.json").read_text())
    assert run["config"]["eval_clients"] == 4
    assert main(["study", "--algorithms", "global,local", "--seeds", "0", *common, "--out", str(tmp_path / "st")]) == 0
    study = json.loads((tmp_path / "st" / "study.json").read_text())
    assert study["config"]["eval_clients"] == 4
    assert study["config"]["task"] == "synthetic (built per seed)"  # not the command line's task_of function
    run = json.loads((tmp_path / "st" / "algorithms" / "local" / "runs" / "seed=0" / "run.json").read_text())
    assert run["config"]["eval_clients"] == 4
    capsys.readouterr()
    assert (
        main(
            [
                "sweep",
                "--algorithm",
                "global",
                "--lr",
                "0.001",
                "--clusters",
                "2",
                "--clients-per-cluster",
                "5",
                "--rounds",
                "2",
                "--no-progress",
                "--eval-clients",
                "11",
                "--out",
                str(tmp_path / "bad"),
            ]
        )
        == 2
    )
    assert "eval_clients" in capsys.readouterr().err
