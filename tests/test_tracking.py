"""Experiment tracking (fedjax_clust.io.tracking): TensorBoard event files hold every evaluated round's metrics
and the configuration; a Weights & Biases run gets the same (checked on a recording stand-in for the wandb
module, and for real with WANDB_MODE=offline); without tracking nothing changes."""

import glob
import json
import struct
import sys
import types

import numpy as np
import pytest

import fedjax_clust as fc
from fedjax_clust.io.tracking import Tracking
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.experiment_records import TaskGrid


def read_events(folder):
    """{tag: [(step, value), ...]} and the text summaries of the TensorBoard event files in ``folder`` (the
    TFRecord framing: u64 length, u32 crc, the Event protobuf, u32 crc)."""
    from tensorboardX.proto.event_pb2 import Event

    scalars, texts = {}, {}
    for path in sorted(glob.glob(f"{folder}/**/events.out.tfevents.*", recursive=True)):
        data = open(path, "rb").read()
        at = 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at : at + 8])
            event = Event.FromString(data[at + 12 : at + 12 + length])
            at += 12 + length + 4
            for value in event.summary.value:
                if value.HasField("tensor") and value.tensor.string_val:
                    texts[value.tag] = value.tensor.string_val[0].decode()
                elif value.HasField("simple_value"):
                    scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars, texts


@pytest.fixture(scope="module")
def task():
    return fc.synthetic_regression(num_clusters=2, clients_per_cluster=5)


def test_tensorboard_gets_every_evaluated_round_and_the_config(task, tmp_path):
    pytest.importorskip("tensorboardX")
    algo = fc.make_algorithm("federated-clustering", task, learning_rate=0.01, quantile=0.3)
    result = fc.simulate(
        algo,
        task,
        rounds=20,
        evaluation=Evaluation(eval_every=5),
        output=Output(progress=False, tracking=Tracking(tensorboard=str(tmp_path / "tb"))),
    )
    scalars, texts = read_events(tmp_path / "tb" / "federated-clustering")
    logged = dict(scalars["mean_sq_dist_to_optimum"])
    assert sorted(logged) == [row["round"] for row in result.history] == [0, 5, 10, 15, 20]
    for row in result.history:
        assert logged[row["round"]] == pytest.approx(row["mean_sq_dist_to_optimum"], rel=1e-6)
    config = json.loads(texts["config/text_summary"].strip("`\n"))
    assert config["algorithm"] == "federated-clustering" and config["hparams"]["quantile"] == 0.3
    assert config["seed"] == 0


def test_without_tracking_the_results_are_the_same(task, tmp_path):
    pytest.importorskip("tensorboardX")
    algo = fc.make_algorithm("local", task, learning_rate=0.01)
    plain = fc.simulate(algo, task, rounds=10, output=Output(progress=False))
    tracked = fc.simulate(
        algo, task, rounds=10, output=Output(progress=False, tracking=Tracking(tensorboard=str(tmp_path)))
    )
    assert plain.history == tracked.history
    np.testing.assert_array_equal(plain.state.params, tracked.state.params)


class RecordingWandb:
    """A stand-in for the wandb module that records what the tracker sends."""

    def __init__(self):
        self.runs = []

    def init(self, **kwargs):
        run = types.SimpleNamespace(kwargs=kwargs, logged=[], finished=False)
        run.log = lambda metrics, step: run.logged.append((step, metrics))
        run.finish = lambda: setattr(run, "finished", True)
        self.runs.append(run)
        return run


def test_wandb_runs_of_a_comparison_are_named_grouped_and_logged(task, tmp_path, monkeypatch):
    fake = RecordingWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    results = fc.run_comparison(
        task,
        ["federated-clustering", "global"],
        rounds=10,
        evaluation=Evaluation(eval_every=5),
        output=Output(progress=False, tracking=Tracking(wandb="my-project")),
        options={"learning_rate": 0.01},
    )
    assert [r.kwargs["name"] for r in fake.runs] == ["federated-clustering", "global"]
    assert all(
        r.kwargs["project"] == "my-project" and r.kwargs["group"] == "compare-synthetic-seed0" and r.finished
        for r in fake.runs
    )
    for run, result in zip(fake.runs, results.values()):
        # the run's configuration as it starts (the summary adds what the round resolves when traced)
        assert run.kwargs["config"]["hparams"].items() <= result.summary["hparams"].items()
        assert [step for step, _ in run.logged] == [0, 5, 10]
        assert run.logged[-1][1]["mean_sq_dist_to_optimum"] == pytest.approx(
            result.history[-1]["mean_sq_dist_to_optimum"]
        )
        assert "round" not in run.logged[0][1]


def test_wandb_offline_for_real_and_the_cli_flags(task, tmp_path, monkeypatch, capsys):
    pytest.importorskip("wandb")
    pytest.importorskip("tensorboardX")
    from fedjax_clust.cli.commands import main

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    assert (
        main(
            [
                "run",
                "--algorithm",
                "local",
                "--clients-per-cluster",
                "3",
                "--rounds",
                "4",
                "--eval-every",
                "2",
                "--out",
                "out",
                "--no-progress",
                "--tensorboard",
                "tb",
                "--wandb",
                "offline-test",
            ]
        )
        == 0
    )
    assert len(glob.glob("wandb/offline-run-*/run-*.wandb")) == 1
    scalars, _ = read_events(tmp_path / "tb" / "local")
    assert [step for step, _ in scalars["mean_loss"]] == [0, 2, 4]


def test_a_missing_package_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    from fedjax_clust.cli.commands import main

    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # import fails
    assert (
        main(
            [
                "run",
                "--algorithm",
                "local",
                "--rounds",
                "2",
                "--out",
                str(tmp_path / "o"),
                "--no-progress",
                "--tensorboard",
                str(tmp_path / "tb"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and 'pip install ".[tensorboard]"' in err
    assert not (tmp_path / "o").exists()


def test_a_sweep_tracks_every_run_as_it_goes(task, tmp_path, monkeypatch):
    pytest.importorskip("tensorboardX")
    fake = RecordingWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)

    def task_of(seed):
        return fc.synthetic_regression(num_clusters=2, clients_per_cluster=5, seed=seed)

    result = fc.sweep(
        "federated-clustering",
        task_of,
        grid={"learning_rate": [0.01, 0.02]},
        seeds=[0, 1],
        rounds=10,
        evaluation=Evaluation(eval_every=5),
        output=Output(progress=False, tracking=Tracking(tensorboard=str(tmp_path / "tb"), wandb="sweeps")),
    )
    names = [
        "learning_rate=0.01,seed=0",
        "learning_rate=0.01,seed=1",
        "learning_rate=0.02,seed=0",
        "learning_rate=0.02,seed=1",
    ]
    assert [r.kwargs["name"] for r in fake.runs] == [f"federated-clustering/{n}" for n in names]
    assert all(r.kwargs["group"] == "sweep-federated-clustering-synthetic" and r.finished for r in fake.runs)
    for name, run, wandb_run in zip(names, result.runs, fake.runs):
        scalars, texts = read_events(tmp_path / "tb" / "federated-clustering" / name)
        logged = dict(scalars["mean_sq_dist_to_optimum"])
        assert sorted(logged) == [row["round"] for row in run.history] == [0, 5, 10]
        for row in run.history:  # each run's own numbers, not another run's of the same program
            assert logged[row["round"]] == pytest.approx(row["mean_sq_dist_to_optimum"], rel=1e-6)
        assert [step for step, _ in wandb_run.logged] == [0, 5, 10]
        config = json.loads(texts["config/text_summary"].strip("`\n"))
        assert config["sweep_values"] == run.summary["sweep_values"] == wandb_run.kwargs["config"]["sweep_values"]
        assert config["seed"] == run.summary["seed"]
    finals = [run.history[-1]["mean_sq_dist_to_optimum"] for run in result.runs]
    assert len(set(finals)) == 4  # the runs differ, so the per-run check above is not vacuous


def test_a_run_a_sweep_computes_once_is_tracked_under_each_name(tmp_path, monkeypatch):
    """An attack x beta grid's attack-free point is one run under two names (run.sweep.identical_runs): both are
    tracked, the copy with its own name and values, the run's evaluations and the run it is (same_as)."""
    import dataclasses

    fake = RecordingWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)

    def task(seed, byzantine_fraction):
        clean = fc.synthetic_regression(num_clusters=2, clients_per_cluster=3, dim=4, samples_per_client=8, seed=seed)
        if byzantine_fraction == 0:
            return dataclasses.replace(clean, byzantine=np.zeros(clean.num_clients, bool))
        return fc.mark_byzantine(clean, fraction=byzantine_fraction, seed=seed)

    with pytest.warns(UserWarning, match="computed once"):
        result = fc.sweep(
            "global",
            TaskGrid(task, {"byzantine_fraction": [0.0]}),
            grid={"attack": ["alie", "nan"]},
            seeds=[0],
            rounds=4,
            options={"learning_rate": 0.01},
            evaluation=Evaluation(eval_every=2),
            output=Output(progress=False, tracking=Tracking(wandb="sweeps")),
        )
    by_name = {r.kwargs["name"]: r for r in fake.runs}
    copy = by_name["global/byzantine_fraction=0,attack=nan,seed=0"]
    assert set(by_name) == {"global/byzantine_fraction=0,attack=alie,seed=0", copy.kwargs["name"]}
    assert copy.kwargs["config"]["same_as"] == "byzantine_fraction=0,attack=alie,seed=0" and copy.finished
    assert copy.kwargs["config"]["sweep_values"] == {"byzantine_fraction": 0.0, "attack": "nan"}
    assert [step for step, _ in copy.logged] == [row["round"] for row in result.runs[1].history] == [0, 2, 4]


def test_sweep_cli_tracking_flag(tmp_path, monkeypatch):
    pytest.importorskip("tensorboardX")
    from fedjax_clust.cli.commands import main

    monkeypatch.chdir(tmp_path)
    assert (
        main(
            [
                "sweep",
                "--algorithm",
                "local",
                "--clients-per-cluster",
                "3",
                "--rounds",
                "4",
                "--eval-every",
                "2",
                "--lr",
                "0.01,0.02",
                "--out",
                "out",
                "--no-progress",
                "--tensorboard",
                "tb",
            ]
        )
        == 0
    )
    for lr in ("0.01", "0.02"):
        scalars, _ = read_events(tmp_path / "tb" / "local" / f"learning_rate={lr},seed=0")
        assert [step for step, _ in scalars["mean_loss"]] == [0, 2, 4]


def test_a_resumed_run_keeps_tracking_and_tracking_may_change_on_resume(tmp_path, monkeypatch):
    pytest.importorskip("tensorboardX")
    from fedjax_clust.cli.commands import main

    monkeypatch.chdir(tmp_path)
    options = ["--algorithm", "local", "--clients-per-cluster", "3", "--eval-every", "2", "--no-progress"]
    assert (
        main(["run", *options, "--rounds", "4", "--checkpoint-every", "2", "--out", "out", "--tensorboard", "tb"]) == 0
    )
    assert json.loads((tmp_path / "out" / "run.json").read_text())["tracking"] == {"tensorboard": "tb", "wandb": None}
    assert main(["run", "--out", "out", "--resume", "--rounds", "6", "--no-progress"]) == 0  # the recorded tracking
    scalars, _ = read_events(tmp_path / "tb" / "local")
    assert sorted(step for step, _ in scalars["mean_loss"]) == [0, 2, 4, 6]
    # the full form without --tensorboard resumes too: tracking changes no number, so it is no other run
    assert main(["run", *options, "--rounds", "8", "--out", "out", "--resume"]) == 0
    scalars, _ = read_events(tmp_path / "tb" / "local")
    assert sorted(step for step, _ in scalars["mean_loss"]) == [0, 2, 4, 6]


def test_a_tracker_that_fails_to_close_warns_and_the_others_close():
    from fedjax_clust.io.tracking import close_all

    closed = []

    class Broken:
        def close(self):
            raise OSError("disk full")

    class Fine:
        def close(self):
            closed.append(True)

    with pytest.warns(UserWarning, match="disk full"):
        close_all([Broken(), Fine()])
    assert closed == [True]
