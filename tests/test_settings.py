"""A run's settings objects (fedjax_clust.algorithms.settings, fedjax_clust.run.placement): ``Participation`` and
``Placement`` stand for the keywords they replace (the same record, the same run); those keywords still work with a
DeprecationWarning pointing at the caller; the library itself never uses them."""

import json
import warnings

import numpy as np
import pytest

import fedjax_clust as fc
from fedjax_clust.algorithms.settings import Participation, grouped_settings
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.placement import Placement


def _task():
    return fc.make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=5)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(fraction=0.5, count=3), "not both"),
        (dict(fraction=0.0), r"in \(0, 1\]"),
        (dict(fraction=1.5), r"in \(0, 1\]"),
        (dict(fraction=True), "a finite number"),
        (dict(count=0), "integer >= 1"),
        (dict(count=2.0), "integer >= 1"),
        (dict(), "needs a fraction, a count or an availability"),
    ],
)
def test_bad_participation_settings_get_one_line_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Participation(**kwargs)


def test_participation_settings_give_the_run_their_keywords_give_and_the_keywords_warn_at_the_caller():
    task = _task()
    trace = np.ones((4, task.num_clients), bool)
    trace[1, :4] = False
    by_object = fc.make_algorithm(
        "ifca-1", task, learning_rate=0.01, participation=Participation(count=3, availability=trace)
    )
    with pytest.warns(DeprecationWarning, match="availability= keyword is deprecated") as caught:
        by_keywords = fc.make_algorithm("ifca-1", task, learning_rate=0.01, participation=3, availability=trace)
    assert caught[0].filename == __file__  # it names the caller's line, not the library's
    assert by_object.hyperparameters == by_keywords.hyperparameters
    assert by_object.hyperparameters.participation == 3  # the record keeps its flat fields
    assert by_object.hparams["participation"] == by_keywords.hparams["participation"]
    run = dict(rounds=3, evaluation=Evaluation(eval_every=3), output=Output(progress=False))
    a, b = fc.simulate(by_object, task, **run), fc.simulate(by_keywords, task, **run)
    assert a.history == b.history
    shorthand = fc.make_algorithm("global", task, learning_rate=0.01, participation=0.5)  # not deprecated
    same = fc.make_algorithm("global", task, learning_rate=0.01, participation=Participation(fraction=0.5))
    assert shorthand.hyperparameters == same.hyperparameters
    with pytest.raises(ValueError, match="inside the Participation settings"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            fc.make_algorithm(
                "global", task, learning_rate=0.01, participation=Participation(fraction=0.5), availability=trace
            )


def test_privacy_keywords_warn_and_the_settings_object_does_not():
    task = _task()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        settings = fc.central_privacy(clip=1.0, noise_multiplier=1.0)
        by_object = fc.make_algorithm("global", task, learning_rate=0.01, privacy=settings)
        rebuilt = fc.make_algorithm("global", task, by_object.hyperparameters)  # a record holds dp_* fields: fine
    assert rebuilt.hyperparameters == by_object.hyperparameters
    with pytest.warns(DeprecationWarning, match="dp_clip= keyword") as caught:
        by_keywords = fc.make_algorithm("global", task, learning_rate=0.01, dp_clip=1.0, dp_noise=1.0)
    assert caught[0].filename == __file__
    assert by_keywords.hyperparameters == by_object.hyperparameters


def test_grouped_settings_turn_a_records_fields_into_the_objects_of_the_same_run():
    task = _task()
    trace = np.ones((4, task.num_clients), bool)
    flat = dict(learning_rate=0.01, participation=0.5, availability=trace, dp_clip=2.0, dp_noise=0.5, dp_delta=1e-6)
    grouped = grouped_settings(flat)
    assert grouped["privacy"] == fc.central_privacy(clip=2.0, noise_multiplier=0.5, delta=1e-6)
    assert grouped["participation"].fraction == 0.5 and grouped["participation"].availability is trace
    assert "dp_clip" not in grouped and "availability" not in grouped
    assert grouped_settings(dict(learning_rate=0.1, dp_clip=None)) == {"learning_rate": 0.1}  # not private
    counted = grouped_settings(dict(participation=3, availability=trace))["participation"]
    assert counted.count == 3 and counted.fraction is None
    record = fc.make_algorithm(
        "ifca-1", task, learning_rate=0.01, participation=Participation(count=3, availability=trace)
    ).hyperparameters
    again = fc.make_algorithm("ifca-1", task, **grouped_settings(record.options()))
    assert again.hyperparameters == record


def test_placement_settings_are_checked_when_made():
    for kwargs, message in [
        (dict(client_rows="disk"), "client_rows must be one of"),
        (dict(device_memory="12 parsecs"), "is not a size"),
        (dict(client_rows="device", host_rows_dir="rows"), "client_rows='device'"),
    ]:
        with pytest.raises(ValueError, match=message):
            Placement(**kwargs)
    assert Placement(device_memory="1GiB").keywords() == {
        "device_memory": "1GiB",
        "client_rows": "auto",
        "host_rows_dir": None,
    }


def test_placement_is_the_run_its_deprecated_keywords_give(tmp_path):
    task = _task()
    algo = fc.make_algorithm("ditto", task, learning_rate=0.01, participation=4)
    run = dict(rounds=2, evaluation=Evaluation(eval_every=2))
    quiet = Output(progress=False)
    by_object = fc.simulate(
        algo,
        task,
        placement=Placement(client_rows="host"),
        output=Output(out_dir=str(tmp_path / "a"), progress=False),
        **run,
    )
    with pytest.warns(DeprecationWarning, match=r"simulate\(\)'s client_rows= keyword") as caught:
        by_keywords = fc.simulate(
            algo,
            task,
            client_rows="host",
            output=Output(out_dir=str(tmp_path / "b"), progress=False),
            **run,
        )
    assert caught[0].filename == __file__
    assert by_object.history == by_keywords.history
    recorded = [json.loads((tmp_path / d / "run.json").read_text())["client_rows"] for d in "ab"]
    assert recorded[0] == recorded[1] and recorded[0]["client_rows"] == "host"
    with pytest.raises(ValueError, match="not both"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            fc.simulate(algo, task, placement=Placement(), client_rows="host", **run)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # a deprecated keyword at its old default: no choice
        fc.simulate(algo, task, placement=Placement(client_rows="host"), client_rows="auto", host_rows_dir=None, **run)
    with pytest.raises(TypeError, match="unexpected keyword argument 'client_row'"):
        fc.simulate(algo, task, client_row="host", **run)
    with pytest.raises(ValueError, match="must be a fedjax_clust.run.placement.Placement"):
        fc.simulate(algo, task, placement={"client_rows": "host"}, **run)
    with pytest.warns(DeprecationWarning, match=r"check_placement\(\)'s device_memory= keyword"):
        assert fc.run.simulate.check_placement(algo, task, device_memory="1GiB") == "device"
    with pytest.raises(TypeError, match="host_rows_dir"):  # never one of check_placement's keywords
        fc.run.simulate.check_placement(algo, task, host_rows_dir=str(tmp_path))
    with pytest.warns(DeprecationWarning, match=r"run_comparison\(\)'s client_rows= keyword"):
        fc.run_comparison(
            task,
            ["global"],
            rounds=1,
            output=quiet,
            client_rows="device",
            options={"learning_rate": 0.01},
        )


def test_the_library_builds_sweeps_and_runs_without_the_deprecated_keywords(tmp_path):
    """A sweep over dp_noise with a fixed availability trace, and the command line's private run with
    --availability: no DeprecationWarning from any library call (the suite's filter turns one into an error
    too; here every one is)."""
    task = _task()
    trace = np.ones((3, task.num_clients), bool)
    np.save(tmp_path / "trace.npy", trace)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        fc.sweep(
            "global",
            task,
            grid={"dp_noise": [0.5, 1.0]},
            seeds=[0],
            rounds=2,
            options=dict(learning_rate=0.01, dp_clip=1.0),
            plot=False,
            evaluation=Evaluation(eval_every=2),
            output=Output(progress=False),
        )
        fc.sweep(
            "ifca-1",
            task,
            grid={"learning_rate": [0.01, 0.02]},
            seeds=[0],
            rounds=2,
            options=dict(participation=3, availability=trace),
            plot=False,
            evaluation=Evaluation(eval_every=2),
            output=Output(progress=False),
        )
        from fedjax_clust.cli import main

        assert 0 == main(
            [
                "run",
                "--algorithm",
                "global",
                "--clusters",
                "2",
                "--clients-per-cluster",
                "5",
                "--rounds",
                "2",
                "--eval-every",
                "2",
                "--dp-clip",
                "1",
                "--dp-noise",
                "1",
                "--no-progress",
                "--out",
                str(tmp_path / "private"),
            ]
        )
        assert 0 == main(
            [
                "run",
                "--algorithm",
                "ifca-1",
                "--clusters",
                "2",
                "--clients-per-cluster",
                "5",
                "--rounds",
                "2",
                "--eval-every",
                "2",
                "--participation",
                "3",
                "--availability",
                str(tmp_path / "trace.npy"),
                "--client-rows",
                "device",
                "--no-progress",
                "--out",
                str(tmp_path / "available"),
            ]
        )
    recorded = json.loads((tmp_path / "available" / "run.json").read_text())
    assert recorded["config"]["hyperparameters"]["static"]["participation"] == 3
