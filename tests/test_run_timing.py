"""A run's record says where its seconds went (wall, rounds, evaluations, compiling), the progress line agrees with
it, and a run says so when its evaluations cost more than its rounds or when it ended worse than it started."""

import json
import time
import warnings

import jax
import jax.numpy as jnp
import pytest

from fedjax_clust import make_algorithm, make_task, simulate
from fedjax_clust.cli.commands import main
from fedjax_clust.io.progress import RoundProgress
from fedjax_clust.run import advice
from fedjax_clust.run.advice import RunAdvice, ended_worse, scheduled_evaluations
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.fused import RoundChunker
from fedjax_clust.run.loop import Loop, run_loop
from fedjax_clust.run.records import run_timing
from fedjax_clust.run.timing import CompileClock

TIMING_KEYS = (
    "wall_seconds",
    "round_seconds",
    "evaluation_seconds",
    "setup_seconds",
    "evaluations",
    "compile_seconds",
    "compiled_programs",
    "seconds_per_round",
    "first_round_seconds",
    "peak_bytes",
)


def test_the_loop_times_rounds_and_evaluations_apart():
    """Rounds that sleep 10 ms each and evaluations that sleep 50 ms: every evaluation is timed at >= 50 ms, every
    round at >= 10 ms, and the record's parts add up to no more than the wall time."""

    def step(state, first, count):
        time.sleep(0.01 * count)
        return state + count, {}

    def evaluate(t, state, metrics):
        time.sleep(0.05)
        return [({"round": t, "x": float(state)}, 0)]

    started = time.perf_counter()
    loop = run_loop(Loop(jnp.zeros(())), step, evaluate, rounds=7, eval_every=3, chunker=RoundChunker())
    assert [row["round"] for row in loop.histories[0]] == [0, 3, 6, 7]
    assert len(loop.evaluation_times) == 4 and min(loop.evaluation_times) >= 0.05
    assert len(loop.times) == 7 and min(loop.times) >= 0.01
    timing = run_timing(loop, started=started)
    assert set(TIMING_KEYS) <= set(timing) and timing["evaluations"] == 4
    assert timing["evaluation_seconds"] == pytest.approx(sum(loop.evaluation_times))
    assert timing["round_seconds"] == pytest.approx(sum(loop.times))
    assert timing["round_seconds"] + timing["evaluation_seconds"] <= timing["wall_seconds"]
    assert timing["round_seconds"] + timing["evaluation_seconds"] + timing["setup_seconds"] == pytest.approx(
        timing["wall_seconds"]
    )
    assert timing["first_round_seconds"] == loop.times[0]


@pytest.mark.parametrize(
    "first,rounds,every",
    [(1, 7, 3), (1, 6, 3), (1, 1, 10), (4, 7, 3), (7, 7, 3), (1, 50, 10), (11, 50, 10), (12, 51, 10)],
)
def test_scheduled_evaluations_counts_what_the_loop_evaluates(first, rounds, every):
    """The count the cost note projects with is the number of rows the loop writes (round 0 only for a run that
    starts at round 1; a resumed run at round 7 of 7 evaluates round 7, a run resumed at round 12 does not
    evaluate round 10 again)."""
    loop = Loop(jnp.zeros(()), start=first, histories=[[{"round": 0}]])
    run_loop(loop, lambda s, f, c: (s, {}), lambda t, s, m: [({"round": t}, 0)], rounds=rounds, eval_every=every)
    assert scheduled_evaluations(first, rounds, every) == len(loop.evaluation_times)


def test_compile_clock_counts_compiling_only_while_open():
    def square_sum(x):
        return jnp.sum(x * x)

    x = jnp.arange(7.0)
    with CompileClock() as clock:
        jax.jit(square_sum)(x).block_until_ready()
    assert clock.seconds > 0 and clock.programs >= 1
    seconds, programs = clock.seconds, clock.programs
    jax.jit(lambda y: jnp.cos(y) + 1)(x).block_until_ready()  # compiled after the block closed: not counted
    assert (clock.seconds, clock.programs) == (seconds, programs)


def test_the_first_progress_line_gives_the_stretch_and_the_evaluation_apart(capsys):
    """The line the issue found said 127.5 s for a first round of 4.6 s after an evaluation of 122.9 s."""
    import sys

    bar = RoundProgress(50, "global", plain=True, stream=sys.stdout)
    bar.evaluated(0, 122.9)
    bar.update(1, 4.6)
    bar.evaluated(10, 99.0)  # later evaluations count in the rate, not on the first line
    bar.update(9, 0.9)
    bar.close()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "global: round 0/50 (compiling)"
    assert lines[1] == "global: round 1/50 (compiled and ran in 4.6 s; the evaluation of round 0 took 122.9 s)"
    assert lines[-1].startswith("global: round 10/50")


def test_a_run_records_its_seconds_and_the_progress_line_agrees(tmp_path, capsys):
    out = tmp_path / "run"
    argv = [
        "run",
        "--algorithm",
        "global",
        "--clusters",
        "2",
        "--clients-per-cluster",
        "4",
        "--rounds",
        "5",
        "--eval-every",
        "2",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in TIMING_KEYS:
        assert summary[key] is not None and summary[key] >= 0, key
    rows = (out / "metrics.jsonl").read_text().splitlines()
    assert summary["evaluations"] == len(rows) == scheduled_evaluations(1, 5, 2) == 4
    assert summary["round_seconds"] + summary["evaluation_seconds"] <= summary["wall_seconds"]
    assert summary["compile_seconds"] > 0  # this process compiled the round and the evaluation at least
    assert summary["compiled_programs"] >= 2
    first = next(line for line in capsys.readouterr().err.splitlines() if "round 1/5" in line)
    assert f"compiled and ran in {summary['first_round_seconds']:.1f} s" in first, first
    assert "the evaluation of round 0 took" in first


def test_a_sweep_and_a_study_record_each_programs_seconds(tmp_path):
    common = [
        "--algorithm",
        "global",
        "--clusters",
        "2",
        "--clients-per-cluster",
        "4",
        "--rounds",
        "4",
        "--eval-every",
        "2",
        "--no-progress",
    ]
    assert main(["sweep", *common, "--lr", "0.001,0.002", "--seeds", "0,1", "--out", str(tmp_path / "s")]) == 0
    record = json.loads((tmp_path / "s" / "sweep.json").read_text())
    parts = ("round_seconds", "evaluation_seconds", "compile_seconds", "compiled_programs")
    for key in parts:
        assert record[key] == pytest.approx(sum(p[key] for p in record["programs"])) and record[key] > 0
    for program in record["programs"]:
        assert program["round_seconds"] + program["evaluation_seconds"] <= program["seconds"]
    run = json.loads((tmp_path / "s" / "runs" / "learning_rate=0.001,seed=0" / "summary.json").read_text())
    assert run["wall_seconds"] == record["programs"][0]["seconds"] and run["runs_in_program"] == 4

    assert (
        main(
            [
                "study",
                "--algorithms",
                "global,local",
                "--clusters",
                "2",
                "--clients-per-cluster",
                "4",
                "--rounds",
                "4",
                "--eval-every",
                "2",
                "--seeds",
                "0,1",
                "--no-progress",
                "--out",
                str(tmp_path / "st"),
            ]
        )
        == 0
    )
    study = json.loads((tmp_path / "st" / "study.json").read_text())
    sweeps = [json.loads((tmp_path / "st" / "algorithms" / a / "sweep.json").read_text()) for a in ("global", "local")]
    for key in parts:
        assert study[key] == pytest.approx(sum(s[key] for s in sweeps)) and study[key] > 0
    # one program per algorithm (the learning rates traced, the seeds vmapped), each of a few XLA compilations
    assert study["programs"] == sum(len(s["programs"]) for s in sweeps) == 2


def test_a_large_population_evaluated_whole_is_told_its_cost_and_how_to_sample(monkeypatch):
    """The rule (above SAMPLE_ABOVE_CLIENTS clients, evaluated whole) at a threshold lowered to 100 for a task
    of 8 x 20 clients: one RunAdvice after the first evaluation with its seconds, the 3 evaluations of the run and
    a tenth of the clients to sample; a run that samples (eval_clients) or stays under the threshold is told
    nothing."""
    monkeypatch.setattr(advice, "SAMPLE_ABOVE_CLIENTS", 100)
    task = make_task("synthetic", num_clusters=8, clients_per_cluster=20, seed=0)
    algorithm = make_algorithm("global", task, learning_rate=0.001)
    with pytest.warns(
        RunAdvice,
        match=r"evaluating all 160 clients took [0-9.]+ s .*evaluates 3 time\(s\), about "
        r".*eval_clients=16 \(--eval-clients 16\)",
    ):
        simulate(algorithm, task, rounds=4, evaluation=Evaluation(eval_every=2), output=Output(progress=False))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunAdvice)
        simulate(
            algorithm,
            task,
            rounds=4,
            evaluation=Evaluation(eval_every=2, eval_clients=50),
            output=Output(progress=False),
        )
        monkeypatch.setattr(advice, "SAMPLE_ABOVE_CLIENTS", 160)
        simulate(algorithm, task, rounds=4, evaluation=Evaluation(eval_every=2), output=Output(progress=False))


def test_the_suggested_sample_is_a_tenth_in_whole_thousands():
    from fedjax_clust.run.advice import suggested_sample

    assert [suggested_sample(n) for n in (160, 10_001, 12_000, 100_000, 1_000_000)] == [16, 1000, 1000, 10_000, 100_000]


def test_ended_worse_reads_the_headline_metric_in_its_direction():
    assert ended_worse([{"round": 0, "test_accuracy": 0.5}, {"round": 9, "test_accuracy": 0.4}]).startswith(
        "test_accuracy ended at 0.4 at round 9 after 0.5"
    )
    assert (
        ended_worse(
            [{"round": 0, "test_accuracy": 0.5, "mean_loss": 1.0}, {"round": 9, "test_accuracy": 0.6, "mean_loss": 2.0}]
        )
        is None
    )  # accuracy decides
    assert "mean_sq_dist_to_optimum" in ended_worse(
        [{"round": 0, "mean_sq_dist_to_optimum": 1.0}, {"round": 5, "mean_sq_dist_to_optimum": 3.0}]
    )
    assert ended_worse([{"round": 0, "mean_loss": 2.0}, {"round": 5, "mean_loss": 1.0}]) is None
    assert ended_worse([{"round": 0, "mean_loss": 2.0}, {"round": 5, "mean_loss": None}]) is None  # non-finite
    assert ended_worse([{"round": 10, "mean_loss": 1.0}, {"round": 20, "mean_loss": 2.0}]) is None  # no round 0


def test_a_run_and_a_sweep_that_end_worse_than_they_started_say_so(tmp_path, capsys):
    """Global at learning rate 0.05 on the synthetic task diverges (distance to the optimum 5.75e4 -> 2.3e6 in 6
    rounds) without going non-finite: the run exits 0 and says so in one line; the sweep names its worse runs."""
    common = ["--algorithm", "global", "--rounds", "6", "--eval-every", "3", "--no-progress"]
    assert main(["run", *common, "--lr", "0.05", "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert "warning: global: mean_sq_dist_to_optimum ended at" in err and "worse than it started" in err
    assert main(["run", *common, "--lr", "0.001", "--out", str(tmp_path / "fine")]) == 0
    assert "worse than" not in capsys.readouterr().err
    assert main(["sweep", *common, "--lr", "0.001,0.05", "--out", str(tmp_path / "s")]) == 0
    err = capsys.readouterr().err
    assert "warning: global: 1 of 2 runs ended worse than they started (learning_rate=0.05,seed=0: " in err, err


def test_resuming_a_run_that_has_no_checkpoint_says_it_starts_over(tmp_path, capsys):
    """A finished run without --checkpoint-every, resumed: one warning line naming the missing checkpoint, then
    the run again from round 1 (the same rows)."""
    out = str(tmp_path / "r1")
    argv = [
        "run",
        "--algorithm",
        "local",
        "--clients-per-cluster",
        "3",
        "--rounds",
        "4",
        "--eval-every",
        "2",
        "--no-progress",
        "--out",
        out,
    ]
    assert main(argv) == 0
    rows = (tmp_path / "r1" / "metrics.jsonl").read_text()
    capsys.readouterr()
    assert main(["run", "--out", out, "--resume", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert f"warning: resume: no checkpoint in {out}/checkpoints: the run in {out} starts again from round 1" in err
    assert (tmp_path / "r1" / "metrics.jsonl").read_text() == rows
