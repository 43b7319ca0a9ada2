"""Rounds fused into one compiled loop compute what the round-by-round loop computes."""

import jax
import numpy as np
import pytest

from fedjax_clust import make_algorithm, simulate, synthetic_regression
from fedjax_clust.run.fused import RoundChunker, fuse_rounds


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


@pytest.mark.parametrize("name, options", [
    ("federated-clustering", dict(quantile=0.3, batch_size=4, momentum=0.9, track_clusters=True)),
    ("federated-clustering", dict(radius=2.0, subgroups=2, local_steps=1)),
    ("ifca-2", dict()),
    ("momentum-clustering", dict(quantile=0.5)),
])
def test_fused_rounds_equal_round_by_round(task, name, options):
    algo = make_algorithm(name, task, learning_rate=0.01, **options)
    want_state, want_metrics = step_by_step(algo, task, 7)
    run = fuse_rounds(algo.round)
    key = jax.random.fold_in(jax.random.PRNGKey(0), 1)
    state = algo.init(task.init_params(None), task.num_clients)
    state, _ = run(state, task.data, key, 1, 3)   # rounds 1-3
    state, metrics = run(state, task.data, key, 4, 4)  # rounds 4-7: the same compiled program
    assert run._cache_size() == 1
    for got, want in zip(jax.tree.leaves((state, metrics)), jax.tree.leaves((want_state, want_metrics))):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("name", ["federated-clustering", "ditto"])
def test_simulate_fused_equals_one_round_per_call(task, name):
    algo = make_algorithm(name, task, learning_rate=0.01, momentum=0.5, batch_size=3,
                          **(dict(quantile=0.3) if name == "federated-clustering" else {}))
    fused = simulate(algo, task, rounds=23, seed=2, eval_every=10, progress=False)
    single = simulate(algo, task, rounds=23, seed=2, eval_every=10, progress=False, max_fused_rounds=1)
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
    simulate(algo, task, rounds=40, eval_every=40, progress=False)
    assert sum(calls) == 40 and calls[0] == 1 and len(calls) > 2
