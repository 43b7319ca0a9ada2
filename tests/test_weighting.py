"""Client weights of the server's means: uniform (the papers') or by example count (FedAvg's n_k / n), for
every algorithm that averages, on both layouts, with participation, and refused where they mean nothing."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_rounds

import fedjax_clust as fc
from fedjax_clust.algorithms.registry import algorithm_names, algorithm_spec
from fedjax_clust.core.pytrees import segment_mean
from fedjax_clust.core.ragged_batch import RaggedBatch
from fedjax_clust.core.weighting import ClientWeights, by_examples, example_counts, resolve_weighting
from fedjax_clust.tasks.base import Task

WEIGHTED = ("global", "ground-truth", "ifca-1", "ifca-2", "hypcluster", "cfl", "ditto", "knn-per")


def two_clients(ragged=False):
    """Client 0 holds one example y = 0, client 1 three with y = 1 (x = 1, loss (a x - y)^2 / 2, a = 0): one
    full-batch step of learning rate 1 gives a = 0.5 with the uniform mean, 0.75 weighted by examples (the
    pooled examples' mean of y)."""
    data = {
        "x": jnp.ones((2, 3, 1)),
        "y": jnp.array([[0.0, 0, 0], [1, 1, 1]]),
        "mask": jnp.array([[True, False, False], [True, True, True]]),
    }
    task = Task(
        name="two",
        data=data,
        example_loss=lambda p, e: 0.5 * (p["a"] * e["x"][0] - e["y"]) ** 2,
        init_params=lambda key: {"a": jnp.zeros(())},
        true_clusters=np.zeros(2, int),
    )
    return dataclasses.replace(task, data=RaggedBatch.from_padded(data)) if ragged else task


def test_every_algorithm_that_averages_takes_the_weighting_and_the_others_refuse_it():
    takes = {name for name in algorithm_names() if algorithm_spec(name).takes("weighting")}
    assert set(WEIGHTED) <= takes
    task = two_clients()
    for name in ("local", "federated-clustering", "srfca"):
        with pytest.raises(ValueError, match="takes no weighting"):
            fc.make_algorithm(
                name, task, learning_rate=1.0, weighting="examples", **({"threshold": 1.0} if name == "srfca" else {})
            )
    with pytest.raises(ValueError, match="weighting must be one of"):
        fc.make_algorithm("global", task, learning_rate=1.0, weighting="pooled")
    with pytest.raises(ValueError, match="takes no client weights"):
        fc.make_algorithm("global", task, learning_rate=1.0, weighting="examples", aggregator="median")


@pytest.mark.parametrize("ragged", [False, True])
@pytest.mark.parametrize("name", ["global", "ground-truth", "ifca-1", "ifca-2", "hypcluster"])
def test_one_step_gives_the_uniform_or_the_pooled_mean(name, ragged):
    task = two_clients(ragged)
    options = {
        "global": dict(momentum=0.0),
        "ground-truth": dict(momentum=0.0),
        "ifca-1": dict(num_clusters=1),
        "ifca-2": dict(num_clusters=1, local_steps=1),
        "hypcluster": dict(num_clusters=1, cluster_steps=1),
    }
    for weighting, expected in (("uniform", 0.5), ("examples", 0.75)):
        algo = fc.make_algorithm(name, task, learning_rate=1.0, weighting=weighting, **options[name])
        state = algo.start(task.init_params(None), 2, jax.random.PRNGKey(0))
        if "centers" in state.extra:  # the one cluster model starts at 0 too
            state = state._replace(extra={**state.extra, "centers": {"a": jnp.zeros((1,))}})
        state, _ = jax.jit(algo.round)(state, task.data, jax.random.PRNGKey(1))
        a = state.extra["centers"]["a"][0] if "centers" in state.extra else state.client_params["a"][0]
        assert float(a) == pytest.approx(expected, abs=1e-6), weighting
        assert algo.hparams.get("weighting", "uniform") == weighting


def test_ditto_and_cfl_weight_their_global_and_cluster_means():
    task = two_clients()
    ditto = fc.make_algorithm("ditto", task, learning_rate=1.0, weighting="examples")
    state, _ = jax.jit(ditto.round)(ditto.start(task.init_params(None), 2), task.data, jax.random.PRNGKey(0))
    assert float(state.extra["global"]["a"]) == pytest.approx(0.75)
    cfl = fc.make_algorithm("cfl", task, learning_rate=1.0, weighting="examples", min_rounds=5)
    state, _ = jax.jit(cfl.round)(cfl.start(task.init_params(None), 2), task.data, jax.random.PRNGKey(0))
    assert np.asarray(state.client_params["a"]).tolist() == pytest.approx([0.75, 0.75])


def test_weighted_segment_mean_against_float64():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((9, 4))
    x[3, 1] = np.nan  # a non-finite message is left out, weight and all
    labels = np.array([0, 1, 0, 0, 2, 1, 2, 2, 0])
    w = rng.integers(1, 50, 9).astype(np.float64)
    means, members = segment_mean(jnp.asarray(x, jnp.float32), jnp.asarray(labels), 4, jnp.asarray(w))
    for k in range(3):
        rows = (labels == k) & np.isfinite(x).all(axis=1)
        expected = (w[rows, None] * x[rows]).sum(0) / w[rows].sum()
        np.testing.assert_allclose(np.asarray(means[k]), expected, rtol=1e-5)
    assert np.asarray(members).tolist() == [4, 2, 3, 0] and np.all(np.asarray(means[3]) == 0)


def test_participation_weights_the_participants_only():
    """With 3 of 6 clients a round's weighted mean runs over the participants' counts: the weights are a
    per-client constant restricted like the Byzantine mask."""
    task = fc.make_task("classification", num_clusters=2, clients_per_cluster=3, seed=0)
    keep = np.array([4, 40, 10, 25, 7, 33])
    task = dataclasses.replace(task, data={**task.data, "mask": jnp.asarray(np.arange(40)[None] < keep[:, None])})
    assert example_counts(task.data).tolist() == keep.tolist()
    algo = fc.make_algorithm("ifca-1", task, learning_rate=0.1, weighting="examples", participation=3)
    state, _ = run_rounds(algo, task, 2)
    assert all(np.isfinite(np.asarray(leaf)).all() for leaf in jax.tree.leaves(state.client_params))


def test_weights_are_checked():
    assert resolve_weighting("uniform") == ("uniform", None)
    name, values = resolve_weighting(by_examples({"x": np.zeros((3, 5)), "mask": np.ones((3, 5), bool)}), 3)
    assert name == "examples" and np.asarray(values).tolist() == [5, 5, 5]
    for bad in ([1.0, -1.0], [0.0, 1.0], [np.nan, 1.0]):
        with pytest.raises(ValueError, match="positive"):
            resolve_weighting(ClientWeights("custom", np.array(bad)))
    with pytest.raises(ValueError, match="3 clients"):
        resolve_weighting(ClientWeights("custom", np.ones(2)), 3)
    with pytest.raises(ValueError, match="needs the clients"):
        resolve_weighting("examples")


def test_a_sweep_weights_by_examples_inside_its_program(tmp_path):
    from fedjax_clust.cli import main

    out = tmp_path / "sweep"
    assert (
        main(
            [
                "sweep",
                "--algorithm",
                "ifca-1",
                "--task",
                "classification",
                "--clients-per-cluster",
                "3",
                "--weighting",
                "examples",
                "--lr",
                "0.05,0.1",
                "--rounds",
                "2",
                "--eval-every",
                "2",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    import json

    runs = sorted((out / "runs").iterdir())
    assert len(runs) == 2
    assert all(json.loads((r / "summary.json").read_text())["hparams"]["weighting"] == "examples" for r in runs)
