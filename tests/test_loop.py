"""The run loop (fedjax_clust.run.loop): one loop for simulate and every sweep program, everything else a
callback; its cadence, its stop rule and its interrupt path, on toy programs (no JAX model)."""

import ast
import pathlib

import numpy as np
import pytest

from fedjax_clust.run.callbacks import NonFiniteGuard
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.fused import RoundChunker
from fedjax_clust.run.loop import Callback, Loop, LoopOptions, run_loop

ROOT = pathlib.Path(__file__).resolve().parent.parent


class Recorder(Callback):
    def __init__(self):
        self.events = []

    def after_evaluation(self, loop, t, rows, bad):
        self.events.append(("evaluation", t, [None if r is None else r.get("value") for r in rows]))

    def after_rounds(self, loop, t, count):
        self.events.append(("rounds", t, count))

    def on_interrupt(self, loop):
        self.events.append(("interrupt", loop.done))

    def close(self):
        self.events.append(("close",))


def counting_program(num_runs=1, blow_up=None):
    """state: each run's round count; run r's value goes NaN from round ``blow_up[r]`` on."""

    def step(state, first, count):
        return state + count, {"last": first + count - 1}

    def evaluate(t, state, metrics):
        rows = []
        for r in range(num_runs):
            broken = blow_up is not None and blow_up[r] is not None and t >= blow_up[r]
            rows.append(({"round": t, "value": float("nan") if broken else float(state[r])}, 3 if broken else 0))
        return rows

    return step, evaluate


def test_the_loop_evaluates_at_zero_every_eval_every_and_the_last_round():
    step, evaluate = counting_program()
    loop, recorder = Loop(np.zeros(1)), Recorder()
    run_loop(loop, step, evaluate, rounds=23, eval_every=10, callbacks=[recorder], chunker=RoundChunker(max_rounds=4))
    evaluations = [e[1] for e in recorder.events if e[0] == "evaluation"]
    assert evaluations == [0, 10, 20, 23] and [row["round"] for row in loop.histories[0]] == evaluations
    assert loop.done == 23 and float(loop.state[0]) == 23 and len(loop.times) == 23
    assert sum(e[2] for e in recorder.events if e[0] == "rounds") == 23  # every round reported once
    assert all(e[2] <= 4 for e in recorder.events if e[0] == "rounds") and recorder.events[-1] == ("close",)
    # the rows are the states after those rounds
    assert [row["value"] for row in loop.histories[0]] == [0.0, 10.0, 20.0, 23.0]


def test_a_resumed_loop_starts_after_its_checkpoint_and_keeps_its_rows():
    step, evaluate = counting_program()
    loop = Loop(np.full(1, 10.0), start=11, histories=[[{"round": 0, "value": 0.0}, {"round": 10, "value": 10.0}]])
    run_loop(loop, step, evaluate, rounds=20, eval_every=10)
    assert [row["round"] for row in loop.histories[0]] == [0, 10, 20] and float(loop.state[0]) == 20


def test_the_guard_stops_each_run_of_a_program_and_the_loop_ends_when_all_stopped():
    """Run 0 breaks at round 10, run 1 at 20: each keeps the row where it stopped, then gets no row; the loop
    ends after the evaluation that stops the last one (no rounds reported after it)."""
    step, evaluate = counting_program(2, blow_up=[10, 20])
    loop, recorder = Loop(np.zeros(2), num_runs=2), Recorder()
    run_loop(
        loop,
        step,
        evaluate,
        rounds=100,
        eval_every=5,
        callbacks=[recorder, NonFiniteGuard("stop", [10, 10], ["a", "b"])],
        chunker=RoundChunker(max_rounds=5),
    )
    assert loop.stopped == [(10, 0.3), (20, 0.3)] and loop.finished
    assert [row["round"] for row in loop.histories[0]] == [0, 5, 10]
    assert [row["round"] for row in loop.histories[1]] == [0, 5, 10, 15, 20]
    assert ("evaluation", 15, [None, 15.0]) in recorder.events and loop.done == 20
    assert [e for e in recorder.events if e[0] == "rounds"][-1] == ("rounds", 15, 5)


def test_a_run_that_stops_early_leaves_the_others_one_row_per_round():
    """Run 0 of a program stops at round 10, run 1 goes to the last round: run 1 gets exactly one row for it (the
    final evaluation of a run resumed at its last round must not fire for a sweep)."""
    step, evaluate = counting_program(2, blow_up=[10, None])
    loop = Loop(np.zeros(2), num_runs=2)
    run_loop(loop, step, evaluate, rounds=20, eval_every=10, callbacks=[NonFiniteGuard("stop", [10, 10], ["a", "b"])])
    assert [row["round"] for row in loop.histories[1]] == [0, 10, 20] and loop.stopped[1] is None
    assert loop.ended is not None


def test_warn_goes_on_and_says_so_once_per_change(capsys):
    step, evaluate = counting_program(1, blow_up=[10])
    loop = Loop(np.zeros(1))
    run_loop(loop, step, evaluate, rounds=30, eval_every=10, callbacks=[NonFiniteGuard("warn", [10], ["toy"])])
    assert loop.stopped == [None] and loop.done == 30
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "warning: toy: 3/10 client models are non-finite at round 10; metrics are over the finite clients "
        "(on_nonfinite='warn')"
    ]


def test_ctrl_c_calls_on_interrupt_with_the_last_completed_round_then_closes_and_reraises():
    def step(state, first, count):
        if first > 12:
            raise KeyboardInterrupt
        return state + count, {}

    _, evaluate = counting_program()
    loop, recorder = Loop(np.zeros(1)), Recorder()
    with pytest.raises(KeyboardInterrupt):
        run_loop(
            loop, step, evaluate, rounds=50, eval_every=5, callbacks=[recorder], chunker=RoundChunker(max_rounds=1)
        )
    assert loop.done == 12 and recorder.events[-2:] == [("interrupt", 12), ("close",)]


def test_loop_options_are_checked_in_one_place():
    for kwargs, word in [
        (dict(rounds=0), "rounds"),
        (dict(rounds=3, eval_every=0), "eval_every"),
        (dict(rounds=3, init="zeros"), "init"),
        (dict(rounds=3, on_nonfinite="ignore"), "on_nonfinite"),
    ]:
        with pytest.raises(ValueError, match=word):
            LoopOptions(**kwargs).checked()
    assert LoopOptions(rounds=np.int64(3)).checked().rounds == 3


def _function_lengths(folder):
    """{file:function: lines of code}, the docstring left out (ruff format's layout, one argument a line where a
    signature does not fit, counts)."""
    for path in sorted((ROOT / "fedjax_clust" / folder).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                first = node.body[0]
                if (
                    isinstance(first, ast.Expr)
                    and isinstance(getattr(first, "value", None), ast.Constant)
                    and isinstance(first.value.value, str)
                ):
                    lines -= first.end_lineno - first.lineno + 1
                yield f"{path.name}:{node.name}", lines


def test_the_loop_stays_short_and_no_run_function_is_long():
    """The structure the loop's refactoring bought (issue 34): run_loop under 60 lines, no function of run/
    over 100 lines of code, so a new feature lands as a callback, not in a long function."""
    lengths = dict(_function_lengths("run"))
    assert lengths["loop.py:run_loop"] < 60
    assert not {name: n for name, n in lengths.items() if n > 100}


def test_simulate_calls_a_users_callbacks_with_the_rows_it_writes():
    """simulate(..., callbacks=[...]): a user's callback sees every evaluated row as the history records it and
    every round once, and is closed at the end, also when the run stops on non-finite models."""
    import fedjax_clust as fc

    task = fc.synthetic_regression(num_clusters=2, clients_per_cluster=3)
    recorder = Recorder()
    rows = []

    class Rows(fc.Callback):
        def after_evaluation(self, loop, t, evaluated, bad):
            rows.append(evaluated[0])

    result = fc.simulate(
        fc.make_algorithm("local", task, learning_rate=0.01),
        task,
        rounds=12,
        callbacks=[recorder, Rows()],
        evaluation=Evaluation(eval_every=5),
        output=Output(progress=False),
    )
    assert rows == result.history and [row["round"] for row in rows] == [0, 5, 10, 12]
    assert sum(e[2] for e in recorder.events if e[0] == "rounds") == 12 and recorder.events[-1] == ("close",)
    diverging = Recorder()
    with pytest.raises(fc.NonFiniteError):
        fc.simulate(
            fc.make_algorithm("local", task, learning_rate=1e6),
            task,
            rounds=40,
            callbacks=[diverging],
            evaluation=Evaluation(eval_every=5),
            output=Output(progress=False),
        )
    assert diverging.events[-1] == ("close",)
