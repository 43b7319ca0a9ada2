"""Rounds fused into one compiled loop compute what the round-by-round loop computes."""

import jax
import numpy as np
import pytest

from fedjax_clust import make_algorithm, simulate, synthetic_regression
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.fused import RoundChunker, fuse_rounds
from fedjax_clust.run.placement import Placement


@pytest.fixture(scope="module")
def task():
    return synthetic_regression(num_clusters=2, clients_per_cluster=4, samples_per_client=9, dim=5, seed=3)


def step_by_step(algo, task, rounds, seed=0):
    key = jax.random.fold_in(jax.random.PRNGKey(seed), 1)
    state = algo.init(task.init_params(None), task.num_clients)
    step = jax.jit(algo.round)
    for t in range(1, rounds + 1):
        state, metrics = step(state, task.data, jax.random.fold_in(key, t))
    return state, metrics


@pytest.mark.parametrize(
    "name, options",
    [
        ("federated-clustering", dict(quantile=0.3, batch_size=4, momentum=0.9, track_clusters=True)),
        ("federated-clustering", dict(radius=2.0, subgroups=2, local_steps=1)),
        ("ifca-2", dict()),
        ("momentum-clustering", dict(quantile=0.5)),
    ],
)
def test_fused_rounds_equal_round_by_round(task, name, options):
    algo = make_algorithm(name, task, learning_rate=0.01, **options)
    want_state, want_metrics = step_by_step(algo, task, 7)
    run = fuse_rounds(algo.round)
    key = jax.random.fold_in(jax.random.PRNGKey(0), 1)
    state = algo.init(task.init_params(None), task.num_clients)
    state, _ = run(state, task.data, key, 1, 3)  # rounds 1-3
    state, metrics = run(state, task.data, key, 4, 4)  # rounds 4-7: the same compiled program
    assert run._cache_size() == 1
    for got, want in zip(jax.tree.leaves((state, metrics)), jax.tree.leaves((want_state, want_metrics))):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("name", ["federated-clustering", "ditto"])
def test_simulate_fused_equals_one_round_per_call(task, name):
    algo = make_algorithm(
        name,
        task,
        learning_rate=0.01,
        momentum=0.5,
        batch_size=3,
        **(dict(quantile=0.3) if name == "federated-clustering" else {}),
    )
    fused = simulate(algo, task, rounds=23, seed=2, evaluation=Evaluation(eval_every=10), output=Output(progress=False))
    single = simulate(
        algo,
        task,
        rounds=23,
        seed=2,
        evaluation=Evaluation(eval_every=10),
        output=Output(progress=False),
        placement=Placement(max_fused_rounds=1),
    )
    assert [r["round"] for r in fused.history] == [0, 10, 20, 23]
    strip = lambda h: [{k: v for k, v in r.items() if "seconds" not in k} for r in h]
    assert strip(fused.history) == strip(single.history)
    for a, b in zip(jax.tree.leaves(fused.state), jax.tree.leaves(single.state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_chunker_stops_at_evaluations_and_grows():
    chunker = RoundChunker(target_seconds=1.0)
    assert chunker.next(1, 10) == 1  # the compiling call runs one round
    chunker.record(1, 5.0)
    assert chunker.next(2, 10) == 2
    chunker.record(2, 0.002)  # 1 ms a round: grow (doubling) towards 1 s a call
    assert chunker.next(4, 100) == 4
    chunker.record(4, 0.004)
    assert chunker.next(8, 10) == 3  # never past the stop round
    slow = RoundChunker(target_seconds=1.0)
    slow.record(1, 1.0)
    slow.record(2, 4.0)  # 2 s a round: one round per call
    assert slow.next(3, 50) == 1
    capped = RoundChunker(max_rounds=1)
    capped.record(1, 1.0)
    capped.record(1, 1e-6)
    assert capped.next(3, 50) == 1


def test_progress_bar_moves_within_an_evaluation_interval(task, monkeypatch):
    """With one evaluation at the end of 40 rounds, the rounds still run in several calls (the first one
    compiles alone), so the bar moves before the end."""
    algo = make_algorithm("local", task, learning_rate=0.01)
    calls = []
    original = RoundChunker.record

    def spy(self, count, seconds):
        calls.append(count)
        return original(self, count, seconds)

    monkeypatch.setattr(RoundChunker, "record", spy)
    simulate(algo, task, rounds=40, evaluation=Evaluation(eval_every=40), output=Output(progress=False))
    assert sum(calls) == 40 and calls[0] == 1 and len(calls) > 2


def test_donatable_copies_shared_buffers_only():
    from fedjax_clust.run.fused import donatable

    a, b, data = jax.numpy.arange(3.0), jax.numpy.ones(2), jax.numpy.zeros(4)
    state = {"a": a, "again": a, "b": b, "data": data, "host": np.ones(2)}
    out = donatable(state, (data,))
    assert out["a"] is a and out["b"] is b and out["host"] is state["host"]  # distinct buffers: kept
    assert out["again"] is not a and out["data"] is not data  # a buffer seen twice, and one the call reads: copied
    pointers = [x.unsafe_buffer_pointer() for x in (out["a"], out["again"], out["b"], out["data"])]
    assert len(set(pointers)) == 4 and data.unsafe_buffer_pointer() not in pointers
    np.testing.assert_array_equal(np.asarray(out["again"]), np.asarray(a))


def test_a_consuming_step_consumes_its_state_and_equals_the_plain_loop(task):
    from fedjax_clust.run.fused import consuming_step

    algo = make_algorithm("ditto", task, learning_rate=0.01, participation=3)
    key = jax.random.fold_in(jax.random.PRNGKey(0), 1)
    params = task.init_params(None)
    want, _ = fuse_rounds(algo.round)(algo.init(params, task.num_clients), task.data, key, 1, 5)
    step = consuming_step(fuse_rounds(algo.round, donate=True), after=(task.data, key), keep=(params,))
    start = algo.init(params, task.num_clients)
    state, _ = step(start, 1, 2)
    consumed = jax.tree.leaves(start.params)[0]
    assert consumed.is_deleted()  # the stretch wrote into the start's buffers instead of copying them
    state, _ = step(state, 3, 3)
    for got, expected in zip(jax.tree.leaves(state), jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))
    assert not any(x.is_deleted() for x in jax.tree.leaves((params, task.data)))  # what the caller keeps


def test_simulate_twice_from_one_algorithm_and_task_with_a_callback_reading_the_state(task):
    """simulate donates each stretch's state: the task, the algorithm and a callback that copies loop.state at
    every evaluation are untouched, and a second run repeats the first."""
    from fedjax_clust.run.loop import Callback

    class KeepStates(Callback):
        def __init__(self):
            self.kept = []

        def after_evaluation(self, loop, t, rows, bad):
            self.kept.append(jax.device_get(loop.state))

    algo = make_algorithm("federated-clustering", task, learning_rate=0.01, quantile=0.3, batch_size=3)
    keep = KeepStates()
    first = simulate(
        algo, task, rounds=12, callbacks=[keep], evaluation=Evaluation(eval_every=4), output=Output(progress=False)
    )
    second = simulate(algo, task, rounds=12, evaluation=Evaluation(eval_every=4), output=Output(progress=False))
    assert len(keep.kept) == 4 and int(keep.kept[-1].round) == 12
    for a, b, c in zip(jax.tree.leaves(first.state), jax.tree.leaves(second.state), jax.tree.leaves(keep.kept[-1])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        np.testing.assert_array_equal(np.asarray(a), np.asarray(c))


def test_a_second_run_of_the_same_algorithm_reuses_its_compiled_loop(task):
    """fuse_rounds keeps one jitted loop per round function (and donation) on the function: simulate called
    again with the same algorithm traces and compiles no new loop and gives the same numbers; a loop works after
    its round function is dropped elsewhere, and the cache keeps no round function alive. (An algorithm built by
    hand, without make_algorithm's origin: one with it compiles its numbers as arguments, tests/test_numbered.py.)"""
    import gc
    import weakref

    algo = make_algorithm("ifca-1", task, learning_rate=0.05)._replace(origin=None)
    assert fuse_rounds(algo.round, donate=True) is fuse_rounds(algo.round, donate=True)
    assert fuse_rounds(algo.round) is not fuse_rounds(algo.round, donate=True)
    loop = fuse_rounds(algo.round, donate=True)
    first = simulate(algo, task, rounds=4, evaluation=Evaluation(eval_every=2), output=Output(progress=False))
    traced = loop._cache_size()
    again = simulate(algo, task, rounds=4, evaluation=Evaluation(eval_every=2), output=Output(progress=False))
    assert loop._cache_size() == traced == 1  # one trace for both runs
    assert again.history == first.history
    jax.tree.map(
        lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), again.state.params, first.state.params
    )

    def make_round():
        def round_fn(state, data, key):
            return state + 1.0, {"m": state}

        return round_fn

    loop = fuse_rounds(make_round())  # the loop outlives every other reference to its round (the benchmarks)
    gc.collect()
    state, metrics = loop(np.float32(0), None, jax.random.PRNGKey(0), 1, 3)
    assert float(state) == 3.0 and float(metrics["m"]) == 2.0
    round_fn = make_round()
    fuse_rounds(round_fn)
    alive = weakref.ref(round_fn)
    del round_fn
    gc.collect()
    assert alive() is None  # the cached loop does not keep its round function alive


def test_a_round_that_is_not_a_plain_function_gets_a_loop_of_its_own_each_time():
    """A bound method or a callable object has no __dict__ of its own to keep a loop on: each call builds a
    fresh jitted loop, which runs the same rounds."""

    class Rounds:
        def __call__(self, state, data, key):
            return state * 2.0, {"m": state}

    rounds = Rounds()
    loop = fuse_rounds(rounds, donate=True)
    assert loop is not fuse_rounds(rounds, donate=True) and not hasattr(rounds, "_fedjax_clust_fused_rounds")
    state, metrics = loop(np.float32(1), None, jax.random.PRNGKey(0), 0, 3)
    assert float(state) == 8.0 and float(metrics["m"]) == 4.0
