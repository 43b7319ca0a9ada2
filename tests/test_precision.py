"""Numbers that do not depend on the device: every matmul of a round is traced at full float32 precision
unless the user asks for a faster one, and float64 works end to end."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_clust import (
    Task,
    make_algorithm,
    make_task,
    simulate,
    synthetic_regression,
    threshold_clustering,
)
from fedjax_clust.run.driver_options import Output


@pytest.fixture(scope="module")
def tasks():
    return {
        "synthetic": synthetic_regression(num_clusters=2, clients_per_cluster=3, seed=0),
        "classification": make_task("classification", num_clusters=2, clients_per_cluster=3, seed=0),
    }


def dot_precisions(fn, *args):
    """The precision attribute of every dot_general in the lowered program (StableHLO text)."""
    text = jax.jit(fn).lower(*args).as_text()
    dots = [line for line in text.splitlines() if "dot_general" in line]
    assert dots, "no matmul in the program"
    return {m.group(1) for line in dots for m in [re.search(r"precision = \[(\w+), \w+\]", line)] if m} | (
        {"UNSET"} if any("precision" not in line for line in dots) else set()
    )


def test_simulate_records_and_evaluates_at_the_precision(tasks, monkeypatch):
    task = tasks["classification"]
    seen = []
    real = Task.evaluate

    def spy(self, params, mask, **data):
        seen.append(jax.config.jax_default_matmul_precision)  # the precision in force while it is traced
        return real(self, params, mask, **data)

    monkeypatch.setattr(Task, "evaluate", spy)
    for precision in ("highest", "high"):
        algo = make_algorithm("federated-clustering", task, learning_rate=0.1, quantile=0.5, matmul_precision=precision)
        result = simulate(algo, task, rounds=1, output=Output(progress=False))
        assert result.summary["matmul_precision"] == precision and seen[-1] == precision
    with pytest.raises(ValueError, match="matmul_precision"):
        algo.with_matmul_precision("tf32")


def test_threshold_clustering_in_float64_matches_numpy_exactly():
    """The quantile search on float64 keys (x64 on): equal to a float64 loop of eq. (4) to 1e-12."""
    rng = np.random.default_rng(0)
    points = rng.normal(size=(41, 5)) * np.exp(rng.normal(size=(41, 1)))
    points[7] = points[3]  # a tie
    centers = points[:3] + 0.01
    with jax.enable_x64(True):
        got = np.asarray(threshold_clustering(jnp.asarray(points), jnp.asarray(centers), steps=6, quantile=0.3))
        assert got.dtype == np.float64
    want = []
    for v in centers:
        for _ in range(6):
            dist = np.linalg.norm(points - v, axis=1)
            inside = dist <= np.quantile(dist, 0.3)
            v = v + (points[inside] - v).sum(0) / len(points)
        want.append(v)
    np.testing.assert_allclose(got, np.stack(want), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("rule", [dict(quantile=0.3), dict(radius="theory"), dict(radius=40.0)], ids=str)
def test_federated_clustering_runs_in_float64(rule):
    """Users check exactness in float64: the whole FC round, quantile search included, runs and agrees
    with the float32 round to float32 rounding."""
    task32 = synthetic_regression(num_clusters=2, clients_per_cluster=4, seed=1)
    with jax.enable_x64(True):
        task64 = task32.__class__(
            **{**task32.__dict__, "data": jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), task32.data)}
        )
        algo = make_algorithm("federated-clustering", task64, learning_rate=0.01, momentum=0.9, mesh=None, **rule)
        state = algo.init(jnp.zeros(10, jnp.float64), task64.num_clients)
        step = jax.jit(algo.round)
        for t in range(5):
            state, _ = step(state, task64.data, jax.random.PRNGKey(t))
        params64 = np.asarray(state.params)
        assert params64.dtype == np.float64
    algo = make_algorithm("federated-clustering", task32, learning_rate=0.01, momentum=0.9, mesh=None, **rule)
    state = algo.init(jnp.zeros(10), task32.num_clients)
    step = jax.jit(algo.round)
    for t in range(5):
        state, _ = step(state, task32.data, jax.random.PRNGKey(t))
    np.testing.assert_allclose(np.asarray(state.params), params64, rtol=1e-4, atol=1e-3)
