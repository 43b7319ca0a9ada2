"""Studies (issue 35): the statistics against float64 references and a coverage simulation, and fc.study /
``fedjax-clust study`` against the runs it wrote: its table and paired differences are the runs' final metrics
put through those statistics, every algorithm sees the same task on a seed, resume keeps finished sweeps."""

import csv
import dataclasses
import json
import math
import os
import shutil
import warnings

import numpy as np
import pytest
from scipy import stats

from fedjax_clust import synthetic_regression
from fedjax_clust.cli.commands import main
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.experiment_records import Candidate, TaskGrid
from fedjax_clust.run.statistics import (
    FewSeedsWarning,
    higher_is_better,
    paired_difference,
    t_interval,
    t_multiplier,
)
from fedjax_clust.run.study import arm_name, study


def test_t_interval_is_scipys_and_the_textbook_numbers():
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    got = t_interval(values)
    assert got.n == 5 and got.mean == 3.0 and got.std == pytest.approx(math.sqrt(2.5), rel=1e-15)
    # t_{0.975, 4} = 2.7764451051977987 (tables); half-width t s / sqrt(n)
    assert t_multiplier(5) == pytest.approx(2.7764451051977987, rel=1e-12)
    low, high = stats.t.interval(0.95, df=4, loc=3.0, scale=stats.sem(values))
    assert (got.low, got.high) == (pytest.approx(low, rel=1e-12), pytest.approx(high, rel=1e-12))
    assert got.half_width == pytest.approx(2.7764451051977987 * math.sqrt(2.5) / math.sqrt(5), rel=1e-12)
    assert t_multiplier(2) == pytest.approx(12.706204736174698, rel=1e-12)  # the 12.7


def test_the_95_percent_interval_covers_the_mean_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    trials = 4000
    covered = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # n = 4: no warning
        for _ in range(trials):
            sample = rng.normal(10.0, 3.0, size=4)
            i = t_interval(sample)
            covered += i.low <= 10.0 <= i.high
    # binomial standard error at 0.95 over 4,000 trials: 0.0034; 4 standard errors either side
    assert abs(covered / trials - 0.95) < 0.014


def test_nonfinite_and_missing_values_are_counted_and_left_out():
    got = t_interval([1.0, None, float("nan"), 3.0, float("inf"), 2.0])
    assert (got.n, got.nonfinite, got.mean) == (3, 3, 2.0)
    empty = t_interval([None, float("nan")], warn=False)
    assert empty.n == 0 and empty.mean is None and empty.low is None


def test_few_seeds_warn_and_one_seed_has_no_interval():
    with pytest.warns(FewSeedsWarning, match="12.7 standard errors"):
        two = t_interval([1.0, 2.0])
    assert two.high - two.mean == pytest.approx(12.706204736174698 * 0.5, rel=1e-12)  # t s / sqrt(2), s = 0.5 sqrt(2)
    with pytest.warns(FewSeedsWarning, match="no interval"):
        one = t_interval([4.0])
    assert (one.n, one.mean, one.low, one.high, one.std) == (1, 4.0, None, None, None)
    with pytest.raises(ValueError, match="confidence"):
        t_interval([1.0, 2.0, 3.0], confidence=1.0)


def test_paired_difference_is_the_t_interval_of_the_per_seed_differences():
    a = [0.90, 0.85, 0.88, 0.91, float("nan")]
    b = [0.80, 0.86, 0.80, 0.85, 0.70]
    got = paired_difference(a, b)
    diffs = np.asarray(a[:4]) - np.asarray(b[:4])
    low, high = stats.t.interval(0.95, df=3, loc=diffs.mean(), scale=stats.sem(diffs))
    assert got.difference.n == 4 and got.difference.nonfinite == 1
    assert got.difference.mean == pytest.approx(diffs.mean(), rel=1e-12)
    assert (got.difference.low, got.difference.high) == (pytest.approx(low, rel=1e-12), pytest.approx(high, rel=1e-12))
    assert (got.wins, got.ties, got.losses) == (3, 0, 1)
    lower_better = paired_difference(a, b, higher_better=False)
    assert (lower_better.wins, lower_better.losses) == (1, 3)
    with pytest.raises(ValueError, match="one value per seed"):
        paired_difference([1.0], [1.0, 2.0])


def test_an_ordering_claim_is_judged_by_the_paired_interval():
    """Hand-computed: differences (1, 2, 3) have mean 2, s = 1, half-width t_{0.975,2} / sqrt(3) = 2.48 > 2, so
    "a above b" is within the seeds' spread; (3, 4, 5) has the same half-width around 4: it holds; the mirror
    fails; a loss reads the other way; one seed has no verdict."""
    from fedjax_clust.run.statistics import ordering_verdict

    assert ordering_verdict(paired_difference([2, 3, 4], [1, 1, 1], warn=False)) == "within the seeds' spread"
    assert ordering_verdict(paired_difference([4, 5, 6], [1, 1, 1], warn=False)) == "holds"
    assert ordering_verdict(paired_difference([1, 1, 1], [4, 5, 6], warn=False)) == "fails"
    assert ordering_verdict(paired_difference([1, 1, 1], [4, 5, 6], warn=False), higher_better=False) == "holds"
    assert ordering_verdict(paired_difference([2], [1], warn=False)) == "one seed"
    assert ordering_verdict(paired_difference([None, None], [1, 2], warn=False)) == "no finite seed pair"
    assert stats.t.ppf(0.975, 2) / math.sqrt(3) == pytest.approx(2.4841, abs=1e-4)


def test_metric_direction():
    assert higher_is_better("test_accuracy") and not higher_is_better("mean_loss")
    assert not higher_is_better("mean_sq_dist_to_optimum") and not higher_is_better("misclustering_error")


def _task(seed):
    return synthetic_regression(num_clusters=2, clients_per_cluster=3, dim=4, samples_per_client=8, seed=seed)


STUDY = dict(
    rounds=6,
    evaluation=Evaluation(eval_every=3),
    seeds=[0, 1, 2],
    grid={"learning_rate": [0.01, 0.02], "aggregator": ["mean", "median"]},
    options={"momentum": 0.0},
)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    return study(["local", "global"], _task, **STUDY, output=Output(progress=False, out_dir=str(out))), out


def _final_on_disk(out, algorithm, values, seed, metric):
    from fedjax_clust.run.sweep import run_name

    folder = out / "algorithms" / algorithm / "runs" / run_name(values, seed)
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return rows[-1][metric], json.loads((folder / "run.json").read_text())["config"]


def test_the_study_table_is_the_runs_final_metrics_through_the_statistics(finished):
    result, out = finished
    metric = result.metric
    assert metric == "mean_sq_dist_to_optimum" and not result.higher_is_better
    # learning_rate is taken by both: a grid point; aggregator by global only: its arms
    assert result.point_names == ["learning_rate"]
    assert [a["name"] for a in result.arms] == ["local", "global[aggregator=mean]", "global[aggregator=median]"]
    assert arm_name("global", {"aggregator": "median"}) == "global[aggregator=median]"
    for row in result.table:
        arm = next(a for a in result.arms if a["name"] == row["arm"])
        finals = []
        for seed in result.seeds:
            final, config = _final_on_disk(out, arm["algorithm"], {**row["point"], **arm["values"]}, seed, metric)
            finals.append(final)
            assert config["seed"] == seed and config["task_config"] == _task(seed).config  # same task on a seed
        expected = t_interval(finals, warn=False)
        assert row["per_seed"] == finals
        assert (row["mean"], row["low"], row["high"], row["n"]) == (expected.mean, expected.low, expected.high, 3)
    for row in result.paired:
        ref = next(r for r in result.table if r["arm"] == "local" and r["point"] == row["point"])
        other = next(r for r in result.table if r["arm"] == row["arm"] and r["point"] == row["point"])
        expected = paired_difference(other["per_seed"], ref["per_seed"], higher_better=False, warn=False)
        assert row["reference"] == "local" and row["mean"] == pytest.approx(expected.difference.mean, rel=1e-12)
        assert (row["wins"], row["n"]) == (expected.wins, 3)
    assert len(result.table) == 2 * 3 and len(result.paired) == 2 * 2


def test_the_study_folder_holds_the_tables_and_figures(finished):
    result, out = finished
    for name in ("study.json", "study.md", "study.csv", "study.png", "curves.png"):
        assert (out / name).stat().st_size > 0, name
    saved = json.loads((out / "study.json").read_text())
    assert saved["status"] == "completed" and saved["table"] == json.loads(json.dumps(result.table))
    assert saved["config"]["seeds"] == [0, 1, 2] and saved["config"]["algorithms"] == ["local", "global"]
    rows = list(csv.DictReader((out / "study.csv").open()))
    finals = [r for r in rows if r["kind"] == "final"]
    assert len(finals) == len(result.table) and float(finals[0]["mean"]) == pytest.approx(result.table[0]["mean"])
    text = (out / "study.md").read_text()
    assert "| learning_rate=0.01 | global[aggregator=median] |" in text and "paired t interval" in text


def test_a_log_axis_says_which_intervals_it_cannot_draw_to_their_lower_bound(finished, tmp_path, monkeypatch):
    """A t interval of a positive metric can reach below 0, which a log axis cannot draw: the figures mark the
    cut bars and their title counts them, so the plot never reads narrower than study.csv without saying so."""
    from fedjax_clust.io import figures
    from fedjax_clust.run import study as study_module

    result, _ = finished
    made = []
    real = figures.figure_for_file
    monkeypatch.setattr(figures, "figure_for_file", lambda *a, **k: made.append(real(*a, **k)) or made[-1])
    study_module.plot_study(result, str(tmp_path / "a.png"))
    assert "reach 0 or below" not in made[-1][0]._suptitle.get_text()  # this study's intervals are all positive
    table = [dict(row) for row in result.table]
    table[0]["low"] = -abs(table[0]["mean"])
    history = [
        dict(r, history=[dict(h, **{result.metric: (-1) ** s * 10.0}) for h in r["history"]])
        for s, r in enumerate(result.runs)
    ]  # wild seeds: every round's interval reaches below 0
    cut = dataclasses.replace(result, table=table, runs=history)
    study_module.plot_study(cut, str(tmp_path / "b.png"))
    title = made[-1][0]._suptitle.get_text()
    assert "; 1 interval(s) (study.csv has their bounds) reach 0 or below" in title
    study_module.plot_curves(cut, str(tmp_path / "c.png"))
    rounds = sum(
        len({h["round"] for r in result.runs if r["arm"] == a["name"] and r["point"] == p for h in r["history"]})
        for p in result.points
        for a in result.arms
    )
    assert f"; {rounds} round interval(s) reach 0 or below" in made[-1][0]._suptitle.get_text()


def test_resume_keeps_the_finished_sweeps_and_gives_the_same_table(finished, tmp_path):
    result, out = finished
    copy = tmp_path / "again"
    shutil.copytree(out, copy)
    # as if killed while global's sweep ran its last program: its sweep.json and one run's files are missing
    os.remove(copy / "algorithms" / "global" / "sweep.json")
    global_runs = sorted((copy / "algorithms" / "global" / "runs").iterdir())
    shutil.rmtree(global_runs[-1])
    local_written = (copy / "algorithms" / "local" / "sweep.json").stat().st_mtime_ns
    assert "aggregator=median" in global_runs[-1].name  # the median program (6 runs) reruns
    kept_program = [p for p in global_runs if "aggregator=mean" in p.name]
    global_written = {p.name: (p / "metrics.jsonl").stat().st_mtime_ns for p in kept_program}
    resumed = study(["local", "global"], _task, **STUDY, output=Output(progress=False, out_dir=str(copy), resume=True))
    assert resumed.kept == ["local"]
    assert (copy / "algorithms" / "local" / "sweep.json").stat().st_mtime_ns == local_written  # read, not rerun
    # global's finished program (the mean's: the aggregator is static, one program per value) is kept
    assert {p.name: (p / "metrics.jsonl").stat().st_mtime_ns for p in kept_program} == global_written
    assert (global_runs[-1] / "run.json").exists()
    assert (copy / "algorithms" / "global" / "sweep.json").exists()
    assert resumed.table == result.table and resumed.paired == result.paired
    with pytest.raises(ValueError, match="another study's.*seeds"):
        study(
            ["local", "global"],
            _task,
            **{**STUDY, "seeds": [0, 1, 5]},
            output=Output(progress=False, out_dir=str(copy), resume=True),
        )

    def other_task(seed):  # the same function name, other data: the resume must see it
        return synthetic_regression(num_clusters=2, clients_per_cluster=4, dim=4, samples_per_client=8, seed=seed)

    other_task.__qualname__ = _task.__qualname__
    with pytest.raises(ValueError, match="another study's.*clients_per_cluster"):
        study(["local", "global"], other_task, **STUDY, output=Output(progress=False, out_dir=str(copy), resume=True))
    with pytest.raises(ValueError, match="already holds"):
        study(["local", "global"], _task, **STUDY, output=Output(progress=False, out_dir=str(copy)))


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(algorithms=[]), "non-empty list"),
        (dict(algorithms=["local", "local"]), "distinct"),
        (dict(algorithms=["nope"]), "algorithm must be one of"),
        (dict(seeds=[]), "seeds"),
        (dict(grid={"radius": [1.0, 2.0]}), "no algorithm of the study .* takes the grid option 'radius'"),
        (dict(options={"quantile": 0.2}), "takes the options option 'quantile'"),
        (dict(algorithms=["local", 3]), "a registered name or a Candidate"),
        (dict(grid={"learning_rate": []}), "non-empty list of values"),
        (dict(confidence=1.5), "confidence"),
        (
            dict(algorithms=["local", Candidate("global", grid={"aggregator": "median"})]),
            "'aggregator' needs a non-empty",
        ),
        (dict(algorithms=[Candidate("local", options={"radius": 1.0}), "global"]), "local: algorithm 'local' takes no"),
        (dict(algorithms=["local", Candidate("global", options={"aggregator": "nope"})]), "global: .*aggregator"),
        (dict(algorithms=["local", Candidate("global", options={"learning_rate": 0.1})]), "given both as a list"),
    ],
)
def test_bad_studies_are_refused_before_anything_runs_or_is_written(change, message, tmp_path):
    arguments = {"algorithms": ["local", "global"], **STUDY, **change}
    with pytest.raises(ValueError, match=message):
        study(
            arguments.pop("algorithms"), _task, **arguments, output=Output(progress=False, out_dir=str(tmp_path / "s"))
        )
    assert not (tmp_path / "s").exists()


def test_resume_needs_a_folder_and_a_metric_no_algorithm_logs_is_refused(tmp_path):
    with pytest.raises(ValueError, match="resume needs out_dir"):
        study(["local", "global"], _task, **STUDY, output=Output(resume=True))
    with (
        pytest.warns(FewSeedsWarning, match="1 seed"),
        pytest.raises(ValueError, match="algorithm 'local' does not log the metric 'misclustering'"),
    ):
        study(
            ["local", "global"],
            _task,
            **{**STUDY, "seeds": [0], "evaluation": Evaluation(eval_every=3, metric="misclustering")},
        )


def test_a_task_grid_is_a_grid_point_of_every_algorithm():
    from fedjax_clust.robust import mark_byzantine

    def task_of(seed, byzantine_fraction):  # at 0 an all-honest mask: the attack's baseline (as the CLI does)
        task = _task(seed)
        marked = mark_byzantine(task, fraction=byzantine_fraction, seed=seed)
        return (
            marked
            if marked.byzantine is not None
            else dataclasses.replace(task, byzantine=np.zeros(task.num_clients, bool))
        )

    result = study(
        ["global", "ground-truth"],
        TaskGrid(task_of, {"byzantine_fraction": [0.0, 0.34]}),
        rounds=2,
        seeds=[0, 1, 2],
        options={"attack": "sign-flip", "learning_rate": 0.01},
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False),
    )
    assert result.point_names == ["byzantine_fraction"] and [a["name"] for a in result.arms] == [
        "global",
        "ground-truth",
    ]
    assert [p["byzantine_fraction"] for p in result.points] == [0.0, 0.34]
    attacked = [r for r in result.runs if r["point"] == {"byzantine_fraction": 0.34}]
    assert len(attacked) == 2 * 3 and all(r["values"]["byzantine_fraction"] == 0.34 for r in attacked)


def test_the_study_command_writes_the_study_and_refuses_bad_input(tmp_path, capsys):
    out = tmp_path / "cli"
    base = [
        "study",
        "--algorithms",
        "local,global",
        "--clients-per-cluster",
        "3",
        "--rounds",
        "4",
        "--eval-every",
        "2",
        "--no-progress",
        "--out",
        str(out),
    ]
    assert main(base + ["--seeds", "0,1,2", "--lr", "0.01,0.02", "--momentum", "0"]) == 0
    printed = capsys.readouterr().out
    saved = json.loads((out / "study.json").read_text())
    assert saved["point_names"] == ["learning_rate"] and len(saved["runs"]) == 2 * 2 * 3
    assert "| learning_rate=0.02 | global |" in printed and (out / "config.toml").exists()
    assert saved["higher_is_better"] is False  # mean_sq_dist_to_optimum: from its name
    flipped = base[:-1] + [str(tmp_path / "flipped"), "--seeds", "0,1,2", "--momentum", "0", "--higher-better"]
    assert main(flipped) == 0
    capsys.readouterr()
    assert json.loads((tmp_path / "flipped" / "study.json").read_text())["higher_is_better"] is True
    fresh = base[:-1] + [str(tmp_path / "fresh")]
    assert main(fresh + ["--radius", "1.0"]) == 2
    assert "--radius does not apply" in capsys.readouterr().err
    assert main(fresh + ["--algorithms", "local,local"]) == 2
    assert "twice" in capsys.readouterr().err
    assert main(fresh + ["--seeds", "0", "--resume", "--overwrite"]) == 2
    assert "give one of them" in capsys.readouterr().err
    assert main(fresh + ["--metric", "accuracy_of_nothing"]) == 2
    assert "does not log the metric 'accuracy_of_nothing'" in capsys.readouterr().err
