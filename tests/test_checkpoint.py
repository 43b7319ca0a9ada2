"""A killed run resumes from its last checkpoint with exactly the uninterrupted result."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from fedjax_clust import make_algorithm, simulate, synthetic_regression
from fedjax_clust.io.checkpoint import latest_checkpoint
from fedjax_clust.run.driver_options import Checkpointing, Evaluation, Output


@pytest.mark.parametrize(
    "name, kw",
    [
        ("federated-clustering", dict(quantile=0.3, batch_size=4)),
        ("ifca-2", dict(batch_size=4)),
        ("cfl", dict(min_rounds=2)),
        ("global", dict(dp_clip=1.0, dp_noise=1.0, dp_sampling=0.5, dp_clip_quantile=0.5)),
        ("cfl", dict(min_rounds=2, dp_clip=1.0, dp_noise=0.5, dp_clip_quantile=0.5, dp_denominator="noisy-count")),
    ],
)
def test_resume_equals_uninterrupted(tmp_path, name, kw):
    task = synthetic_regression(clients_per_cluster=5, seed=3)
    algo = make_algorithm(name, task, learning_rate=0.01, **kw)
    full = simulate(algo, task, rounds=13, evaluation=Evaluation(eval_every=3), output=Output(progress=False))
    simulate(
        algo,
        task,
        rounds=9,
        evaluation=Evaluation(eval_every=3),
        output=Output(progress=False),
        checkpointing=Checkpointing(checkpoint_every=4, checkpoint_dir=str(tmp_path)),
    )
    assert latest_checkpoint(str(tmp_path)) == 8
    resumed = simulate(
        algo,
        task,
        rounds=13,
        evaluation=Evaluation(eval_every=3),
        output=Output(progress=False, resume=True),
        checkpointing=Checkpointing(checkpoint_dir=str(tmp_path)),
    )
    assert resumed.history == full.history
    np.testing.assert_array_equal(np.asarray(resumed.state.client_params), np.asarray(full.state.client_params))
    assert sorted(os.listdir(tmp_path)) == ["round_00000004", "round_00000008"]  # the two newest are kept


def test_resume_without_checkpoint_starts_fresh(tmp_path):
    task = synthetic_regression(clients_per_cluster=3)
    algo = make_algorithm("local", task, learning_rate=0.01)
    a = simulate(
        algo,
        task,
        rounds=4,
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False, resume=True),
        checkpointing=Checkpointing(checkpoint_dir=str(tmp_path)),
    )
    b = simulate(algo, task, rounds=4, evaluation=Evaluation(eval_every=2), output=Output(progress=False))
    assert a.history == b.history
    with pytest.raises(ValueError, match="checkpoint"):
        simulate(algo, task, rounds=4, output=Output(progress=False), checkpointing=Checkpointing(checkpoint_every=2))


BASE = [
    sys.executable,
    "-m",
    "fedjax_clust.cli",
    "--cpu-devices",
    "1",
    "run",
    "--algorithm",
    "federated-clustering",
    "--clients-per-cluster",
    "10",
    "--batch-size",
    "5",
    "--eval-every",
    "5",
    "--no-progress",
]


LONG_RUN = 100_000_000  # hours at any speed: the signal always reaches a running process (each test kills its
# run if the signal did not end it)


def _default_sigint():
    """In the child: SIGINT raises KeyboardInterrupt, even when the test runs where SIGINT is ignored (a
    background job of a non-interactive shell inherits SIG_IGN, and Python then installs no handler)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def start_long_run(folder, *extra):
    """A run far longer than the test in a subprocess (stderr to a file, so a failure to start is visible)."""
    err = open(folder.parent / f"{folder.name}.err", "w")
    proc = subprocess.Popen(
        BASE + ["--rounds", str(LONG_RUN), "--out", str(folder), *extra],
        stdout=subprocess.DEVNULL,
        stderr=err,
        preexec_fn=_default_sigint,
    )
    return proc, err


def wait_until(proc, condition, what, timeout=180):
    deadline = time.time() + timeout
    while not condition():
        assert proc.poll() is None, f"the run ended early (exit {proc.returncode}) before {what}"
        assert time.time() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.2)


def finish_and_compare(killed, full, last, *, short=False):
    """Resume ``killed`` to ``last + 15`` rounds; it must equal a straight run of as many rounds. ``short``:
    resume with ``run --out DIR --resume --rounds R`` alone (the options from the folder's run.json)."""
    rounds = str(last + 15)
    command = BASE[: BASE.index("run") + 1] + ["--no-progress"] if short else BASE
    resumed = subprocess.run(
        command + ["--rounds", rounds, "--resume", "--out", str(killed)], capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    straight = subprocess.run(BASE + ["--rounds", rounds, "--out", str(full)], capture_output=True, text=True)
    assert straight.returncode == 0, straight.stderr
    rows = lambda d: [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    assert rows(killed) == rows(full)
    assert rows(full)[-1]["round"] == last + 15


@pytest.mark.slow  # the slow tier (-m 'not slow' leaves it out): a process / benchmark / script run
def test_cli_kill_and_resume(tmp_path):
    killed, full = tmp_path / "killed", tmp_path / "full"
    proc, err = start_long_run(killed, "--checkpoint-every", "10")
    try:
        wait_until(proc, lambda: (latest_checkpoint(str(killed / "checkpoints")) or 0) >= 20, "second checkpoint")
    finally:
        proc.send_signal(signal.SIGKILL)  # killed mid-run, some time after its second checkpoint
    proc.wait()
    err.close()
    last = latest_checkpoint(str(killed / "checkpoints"))
    assert last is not None and last >= 20, (tmp_path / "killed.err").read_text()
    assert not (killed / "config.toml").exists()  # killed: only run.json, written first, knows the options
    finish_and_compare(killed, full, last, short=True)


@pytest.mark.slow  # the slow tier (-m 'not slow' leaves it out): a process / benchmark / script run
def test_cli_ctrl_c_prints_one_line_and_leaves_the_folder_resumable(tmp_path):
    """Ctrl-C (SIGINT) without --checkpoint-every: one line, exit 130, a checkpoint of the last round."""
    stopped, full = tmp_path / "stopped", tmp_path / "full"
    proc, err = start_long_run(stopped)
    metrics = stopped / "metrics.jsonl"
    try:
        wait_until(proc, lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 3, "three evaluations")
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:  # never leave a run of 10^8 rounds behind
            proc.kill()
            proc.wait()
    assert code == 130
    err.close()
    lines = (tmp_path / "stopped.err").read_text().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interrupted after round") and "--resume" in lines[0]
    last = latest_checkpoint(str(stopped / "checkpoints"))
    assert last is not None and f"round {last} of {LONG_RUN}" in lines[0]
    assert json.loads((stopped / "run.json").read_text())["status"] == "interrupted"
    finish_and_compare(stopped, full, last)


@pytest.mark.slow  # the slow tier (-m 'not slow' leaves it out): a process / benchmark / script run
def test_ctrl_c_during_checkpoint_saves_ends_in_one_line_and_a_readable_checkpoint(tmp_path):
    """SIGINT while Orbax writes a checkpoint (every round here, so the signal lands in a save): the save
    completes first, then one line and exit 130 (it printed "RuntimeError: cannot schedule new futures after
    shutdown" and tensorstore errors), and the folder resumes to the uninterrupted run's metrics."""
    command = [
        sys.executable,
        "-m",
        "fedjax_clust.cli",
        "--cpu-devices",
        "1",
        "run",
        "--algorithm",
        "ifca-2",
        "--participation",
        "0.5",
        "--clients-per-cluster",
        "5",
        "--eval-every",
        "5",
        "--no-progress",
        "--checkpoint-every",
        "1",
    ]
    stopped, full = tmp_path / "stopped", tmp_path / "full"
    with open(tmp_path / "stopped.err", "w") as err:
        proc = subprocess.Popen(
            command + ["--rounds", str(LONG_RUN), "--out", str(stopped)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            preexec_fn=_default_sigint,
        )
        try:
            wait_until(proc, lambda: (latest_checkpoint(str(stopped / "checkpoints")) or 0) >= 12, "checkpoints")
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    lines = (tmp_path / "stopped.err").read_text().strip().splitlines()
    assert code == 130 and len(lines) == 1, lines
    assert lines[0].startswith("interrupted after round") and "--resume" in lines[0]
    last = latest_checkpoint(str(stopped / "checkpoints"))
    assert f"round {last} of {LONG_RUN}" in lines[0]
    rounds = str(last + 4)
    resumed = subprocess.run(
        command + ["--rounds", rounds, "--resume", "--out", str(stopped)], capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    straight = subprocess.run(command + ["--rounds", rounds, "--out", str(full)], capture_output=True, text=True)
    assert straight.returncode == 0, straight.stderr
    rows = lambda d: [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    assert rows(stopped) == rows(full)


def test_a_sigint_during_a_save_completes_the_checkpoint_then_interrupts(tmp_path, monkeypatch):
    """Ctrl-C arriving while Orbax writes the state: the checkpoint is completed (readable, progress.json
    written) before KeyboardInterrupt is raised, so the interrupt path never finds a half-written one."""
    import threading

    from fedjax_clust.io import checkpoint

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals are delivered to the main thread only")
    real = checkpoint._checkpointer

    class SignalledDuringSave:
        def __init__(self):
            self.inner = real()

        def save(self, path, state):
            os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C mid-save
            time.sleep(0.05)
            self.inner.save(path, state)

        def wait_until_finished(self):
            self.inner.wait_until_finished()

    monkeypatch.setattr(checkpoint, "_checkpointer", SignalledDuringSave)
    state = {"w": np.arange(6.0, dtype=np.float32)}
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            checkpoint.save_checkpoint(str(tmp_path), 3, state, [{"round": 3}], {"seed": 0})
    finally:
        signal.signal(signal.SIGINT, previous)
    monkeypatch.setattr(checkpoint, "_checkpointer", real)
    assert latest_checkpoint(str(tmp_path)) == 3
    restored, progress = checkpoint.restore_checkpoint(str(tmp_path), 3, state)
    np.testing.assert_array_equal(np.asarray(restored["w"]), state["w"])
    assert progress["history"] == [{"round": 3}]


def test_a_sigint_inside_a_deferred_block_is_raised_after_it():
    """interrupts_deferred holds a SIGINT until its block has finished, then raises KeyboardInterrupt and
    leaves the handler as it found it; outside such a block SIGINT interrupts at once."""
    import threading

    from fedjax_clust.io.interrupts import interrupts_deferred

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals are delivered to the main thread only")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        finished = []
        with pytest.raises(KeyboardInterrupt):
            with interrupts_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                finished.append(True)
        assert finished == [True] and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with interrupts_deferred():
            pass  # no signal: nothing raised
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            finished.append(False)
        assert finished == [True]
        with pytest.raises(KeyboardInterrupt):  # Ctrl-C twice: the second interrupts the block at once
            with interrupts_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                finished.append("after the second")
        assert finished == [True] and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_resume_without_the_options_reads_them_from_the_folder(tmp_path, capsys):
    """`run --out DIR --resume` alone continues the run recorded in DIR/run.json with its options (command-line
    options override them and must still match); a folder without a CLI run is a one-line error."""
    from fedjax_clust.cli.commands import main

    out, straight = str(tmp_path / "run"), str(tmp_path / "straight")
    options = [
        "--algorithm",
        "local",
        "--clients-per-cluster",
        "3",
        "--lr",
        "0.05",
        "--eval-every",
        "2",
        "--no-progress",
    ]
    assert main(["run", *options, "--rounds", "4", "--checkpoint-every", "2", "--out", out]) == 0
    assert main(["run", "--out", out, "--resume", "--rounds", "8", "--no-progress"]) == 0
    assert main(["run", *options, "--rounds", "8", "--out", straight]) == 0
    rows = lambda d: (tmp_path / d / "metrics.jsonl").read_text()
    assert rows("run") == rows("straight") and json.loads(rows("run").splitlines()[-1])["round"] == 8
    saved = json.loads((tmp_path / "run" / "run.json").read_text())
    assert saved["checkpoint_every"] == 2 and saved["config"]["options"]["lr"] == 0.05
    capsys.readouterr()
    assert main(["run", "--out", out, "--resume", "--rounds", "10", "--lr", "0.1", "--no-progress"]) == 2
    assert "different run" in capsys.readouterr().err  # an override that changes the run is refused
    assert main(["run", "--out", str(tmp_path / "none"), "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "none/run.json" in err and "--config" in err
    task = synthetic_regression(clients_per_cluster=2)
    simulate(
        make_algorithm("local", task, learning_rate=0.01),
        task,
        rounds=2,
        output=Output(progress=False, out_dir=str(tmp_path / "python")),
    )
    assert main(["run", "--out", str(tmp_path / "python"), "--resume"]) == 2
    assert "records no command-line options" in capsys.readouterr().err


def test_auto_chunk_follows_the_memory_budget():
    from fedjax_clust.parallel.memory import BYTES_PER_ENTRY, auto_chunk_size

    assert auto_chunk_size(100, 50, 10, budget=10**12, platform="gpu") is None  # everything fits: one vmap
    assert auto_chunk_size(100, 50, 10, budget=BYTES_PER_ENTRY * 50 * 10 * 7, platform="gpu") == 7
    assert auto_chunk_size(100, 50, 10, budget=1, platform="gpu") == 1
    assert auto_chunk_size(4096, 4096, 10, budget=10**12, platform="cpu") == (4 << 20) // (4 * 4096 * 10)
    assert auto_chunk_size(300, 300, 10, budget=10**12, platform="cpu") is None  # the bench size: one vmap
    assert auto_chunk_size(4096, 256, 11110, budget=10**12, platform="cpu") == 1  # an 11 MB row: one at a time
    task = synthetic_regression(clients_per_cluster=6, seed=1)
    kw = dict(learning_rate=0.01, momentum=0.9, quantile=0.3, batch_size=4, mesh=None)
    tight = make_algorithm("federated-clustering", task, memory_budget=BYTES_PER_ENTRY * 24 * 10 * 5, **kw)
    full = make_algorithm("federated-clustering", task, chunk_size=None, **kw)
    a = simulate(tight, task, rounds=5, output=Output(progress=False))
    b = simulate(full, task, rounds=5, output=Output(progress=False))
    np.testing.assert_allclose(np.asarray(a.state.params), np.asarray(b.state.params), rtol=1e-5, atol=1e-4)
    assert a.summary["peak_bytes"] > 0


@pytest.mark.slow  # benchmark rows / script smoke: run with -m slow
def test_profile_sweep(tmp_path):
    import csv

    from fedjax_clust.bench.profile import COLUMNS, comm_cost, fit_exponent
    from fedjax_clust.cli.commands import main

    assert comm_cost("federated-clustering", 10, 3) == (4 * 3 * 200, 200)  # 10 models down, 10 gradients up each
    assert comm_cost("ifca-1", 10, 3, num_clusters=2) == (4 * 3 * 30, 30)
    assert comm_cost("momentum-clustering", 10, 3) == (4 * 3 * 20, 20)
    assert comm_cost("local", 10, 3) == (0, 0)
    assert fit_exponent([10, 20, 40, 80], [1, 4, 16, 64]) == pytest.approx(2.0)
    assert (
        main(
            [
                "profile",
                "--clients",
                "8,16",
                "--algorithms",
                "federated-clustering,momentum-clustering",
                "--repeats",
                "1",
                "--loop-max-clients",
                "8",
                "--tradeoff-subgroups",
                "1,2",
                "--tradeoff-clients",
                "8",
                "--tradeoff-rounds",
                "5",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    with open(tmp_path / "profile.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == COLUMNS and len(rows) == 4
    fc = [r for r in rows if r["algorithm"] == "federated-clustering"]
    assert [int(r["clients"]) for r in fc] == [8, 16]
    assert int(fc[1]["comm_bytes"]) == 4 * int(fc[0]["comm_bytes"])  # N^2 messages
    assert all(float(r["seconds_per_round"]) > 0 and int(r["peak_bytes"]) > 0 for r in rows)
    assert all(float(r["projected_seconds"]) > 0 and float(r["flops"]) > 0 and float(r["bytes"]) > 0 for r in rows)
    assert float(fc[1]["flops"]) > 3 * float(fc[0]["flops"])  # the N^2 cross-gradients, counted
    assert all(r["xla_flops"] == "" for r in fc)  # loops in the round: XLA's figure is not shown
    out = json.loads((tmp_path / "profile.json").read_text())
    assert out["loop_speedups"][0]["clients"] == 8 and out["loop_speedups"][0]["speedup"] > 1
    assert out["calibration"]["matmul_flops_per_s"] > 0 and 0 < out["calibration"]["compute_efficiency"] <= 1
    assert out["exponents"]["momentum-clustering"]["time"] is None  # two sizes at the floor: "flat", no exponent
    assert (tmp_path / "profile.png").stat().st_size > 10_000
    with open(tmp_path / "subgroups.csv") as f:
        groups = list(csv.DictReader(f))
    assert [int(r["subgroups"]) for r in groups] == [1, 2]
    assert int(groups[0]["comm_bytes"]) == 2 * int(groups[1]["comm_bytes"])  # N^2 / G
    assert (tmp_path / "subgroups.png").stat().st_size > 5_000
    with open(tmp_path / "devices.csv") as f:  # the projections onto the registered devices
        projected = list(csv.DictReader(f))
    t4 = [r for r in projected if r["algorithm"] == "federated-clustering" and r["device"] == "t4"]
    assert [int(r["clients"]) for r in t4][:2] == [8, 16] and max(int(r["clients"]) for r in t4) == 10_000_000
    assert all(float(r["seconds_low"]) <= float(r["seconds_high"]) for r in t4)
    here = json.loads((tmp_path / "devices.json").read_text())["efficiencies"]["this-machine"]
    assert here["measured"]["compute"] == pytest.approx(out["calibration"]["compute_efficiency"])
    assert main(["project", str(tmp_path), "--devices", "l4", "--algorithms", "global"]) == 2  # not profiled
    assert main(["project", str(tmp_path), "--devices", "l4,nope"]) == 2
    assert main(["project", str(tmp_path), "--devices", "l4", "--stated-efficiency", "0.5"]) == 2
    assert main(["project", str(tmp_path / "nowhere")]) == 2
    assert main(["project", str(tmp_path), "--devices", "l4", "--stated-efficiency", "0.5,0.5"]) == 0
    with open(tmp_path / "devices.csv") as f:
        assert {r["device"] for r in csv.DictReader(f)} == {"l4"}  # the profile's own folder: replaced
    one = [
        "profile",
        "--clients",
        "8",
        "--algorithms",
        "global,local,ground-truth",
        "--tradeoff-subgroups",
        "none",
        "--out",
        str(tmp_path / "one"),
    ]
    assert main(one) == 0 and not (tmp_path / "one" / "devices.csv").exists()  # one size: nothing to extrapolate
    assert main(["profile", "--clients", "2", "--out", str(tmp_path)]) == 2
    assert main(["profile", "--clients", "8", "--tradeoff-subgroups", "0", "--out", str(tmp_path)]) == 2
    assert main(["profile", "--clients", "8", "--tradeoff-clients", "6", "--out", str(tmp_path)]) == 2
    assert main(["profile", "--clients", "8", "--task", "femnist", "--out", str(tmp_path / "f")]) == 2
    assert main(["profile", "--clients", "8", "--hidden", "4", "--out", str(tmp_path / "h")]) == 2  # not synthetic's
    again = [
        "profile",
        "--clients",
        "8",
        "--algorithms",
        "global",
        "--tradeoff-subgroups",
        "none",
        "--out",
        str(tmp_path),
    ]
    assert main(again) == 2  # a folder never mixes two profiles
    assert main(again + ["--overwrite"]) == 0
