"""Ragged clients on the device: size buckets, Floyd's minibatch draw, the per-client map, and every
registered algorithm giving the padded layout's numbers on ragged data."""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import distinct, run_rounds, tiered

import fedjax_clust as fc
from fedjax_clust.algorithms import ALGORITHMS
from fedjax_clust.core.batching import client_loss, map_clients, padded_batch, sample_minibatch
from fedjax_clust.core.pytrees import leading_dim, take_rows
from fedjax_clust.core.ragged_batch import RaggedBatch, floyd_sample, size_buckets
from fedjax_clust.data.partitioners import parse_partition, partition_indices
from fedjax_clust.data.ragged import RaggedClients
from fedjax_clust.run.driver_options import Evaluation, Output


def lognormal_sizes(n, sigma, seed, scale=20.0):
    rng = np.random.default_rng(seed)
    return np.maximum(2, np.round(scale * np.exp(sigma * rng.standard_normal(n)))).astype(np.int64)


@pytest.mark.parametrize("ratio", [1.0, 1.25, 2.0])
def test_size_buckets_bound_the_padding_of_every_bucket(ratio):
    sizes = lognormal_sizes(400, 1.5, seed=1)
    order, buckets = size_buckets(sizes, ratio)
    assert sorted(order.tolist()) == list(range(400))
    assert buckets[0][0] == 0 and buckets[-1][1] == 400
    for (lo, hi, cap), nxt in itertools.zip_longest(buckets, buckets[1:]):
        members = sizes[order[lo:hi]]
        assert cap == members.max() and members.max() <= ratio * members.min()
        if nxt is not None:
            assert nxt[0] == hi
    counted = sum((hi - lo) * cap for lo, hi, cap in buckets)
    assert sizes.sum() <= counted <= ratio * sizes.sum()
    assert len(buckets) <= 1 + np.log(sizes.max() / sizes.min()) / np.log(ratio) + 1e-9 if ratio > 1 else True


def test_floyd_draws_distinct_own_examples_uniformly_over_subsets():
    sizes = jnp.array([4, 2, 7, 1])
    seen = np.zeros(6)
    subsets = {s: i for i, s in enumerate(itertools.combinations(range(4), 2))}
    draws = 3000
    sample = jax.jit(lambda k: floyd_sample(k, sizes, 2))
    for s in range(draws):
        local, valid = map(np.asarray, sample(jax.random.PRNGKey(s)))
        for c, n in enumerate([4, 2, 7, 1]):
            chosen = local[c][valid[c]]
            assert len(set(chosen.tolist())) == len(chosen) == min(n, 2) and (chosen < n).all()
        seen[subsets[tuple(sorted(local[0].tolist()))]] += 1
    # every 2-subset of 4 examples has probability 1/6: 3000 draws, 6 sigma of a binomial is about 122
    assert np.abs(seen - draws / 6).max() < 6 * np.sqrt(draws * (1 / 6) * (5 / 6))


def _population(sizes, seed=0, dim=3):
    rng = np.random.default_rng(seed)
    total = int(np.sum(sizes))
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return rng.standard_normal((total, dim)), rng.standard_normal(total), offsets


def test_map_clients_is_each_clients_own_gradient_against_float64():
    sizes = lognormal_sizes(60, 1.5, seed=3)
    x, y, offsets = _population(sizes)
    batch = RaggedBatch.from_flat({"x": x.astype(np.float32), "y": y.astype(np.float32)}, offsets)
    assert len(batch.buckets) > 3 and batch.counted_examples() <= 1.25 * sizes.sum()
    params = np.random.default_rng(4).standard_normal((60, 3))
    loss = client_loss(lambda p, e: 0.5 * (e["x"] @ p - e["y"]) ** 2)
    grads = jax.jit(lambda p, b: map_clients(jax.grad(loss), p, b))(jnp.asarray(params, jnp.float32), batch)
    expected = np.stack(
        [(x[a:b] @ params[i] - y[a:b]) @ x[a:b] / (b - a) for i, (a, b) in enumerate(zip(offsets, offsets[1:]))]
    )
    np.testing.assert_allclose(np.asarray(grads), expected, rtol=2e-5, atol=2e-5)
    padded = jax.vmap(jax.grad(loss))(jnp.asarray(params, jnp.float32), padded_batch(batch))
    np.testing.assert_allclose(np.asarray(grads), np.asarray(padded), rtol=2e-5, atol=2e-6)


def test_minibatches_come_from_each_clients_own_rows_and_selection_keeps_them():
    sizes = np.array([3, 50, 8, 1, 20])
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    owner = np.repeat(np.arange(5), sizes)
    batch = RaggedBatch.from_flat({"owner": owner, "row": np.arange(offsets[-1])}, offsets)
    drawn = jax.jit(lambda k: sample_minibatch(batch, 4, k))(jax.random.PRNGKey(0))
    mask = np.asarray(drawn["mask"])
    assert mask.sum(axis=1).tolist() == [3, 4, 4, 1, 4]
    assert (np.asarray(drawn["owner"])[mask] == np.repeat(np.arange(5), [3, 4, 4, 1, 4])).all()
    assert sample_minibatch(batch, None, jax.random.PRNGKey(0)) is batch  # a full pass stays ragged
    cohort = jax.jit(lambda b, i: take_rows(b, i))(batch, jnp.array([4, 1]))
    assert leading_dim(cohort) == 2 and cohort.order is None
    padded = cohort.padded()
    assert np.asarray(padded["mask"]).sum(axis=1).tolist() == [20, 50]
    assert (np.asarray(padded["owner"])[np.asarray(padded["mask"])] == np.repeat([4, 1], [20, 50])).all()


def test_ragged_clients_to_batch_and_back_round_trips():
    arrays = {"x": np.arange(20, dtype=np.float32).reshape(10, 2), "y": np.arange(10)}
    clients = RaggedClients(arrays, np.array([0, 3, 3 + 1, 10]), ("a", "b", "c"))
    batch = clients.to_batch()
    again = RaggedBatch.from_padded(clients.to_padded())
    for got in (batch.padded(), again.padded()):
        np.testing.assert_array_equal(np.asarray(got["x"]), clients.to_padded()["x"])
        np.testing.assert_array_equal(np.asarray(got["mask"]), clients.to_padded()["mask"])
    with pytest.raises(ValueError, match="mask"):
        RaggedBatch.from_flat({"mask": np.ones(3, bool)}, [0, 3])
    with pytest.raises(ValueError, match="offsets"):
        RaggedBatch.from_flat({"x": np.ones(3)}, [1, 3])
    with pytest.raises(ValueError, match="rows"):
        RaggedBatch.from_flat({"x": np.ones(3)}, [0, 4])


# --------------------------------------------------------------------- every algorithm, ragged == padded
@pytest.fixture(scope="module")
def uneven_task():
    """The contract's classification task with clients of 4 to 40 examples (a random prefix of each kept)."""
    task = fc.make_task("classification", num_clusters=2, clients_per_cluster=3, samples_per_client=40, seed=0)
    keep = np.random.default_rng(0).integers(4, 41, task.num_clients)
    mask = np.arange(40)[None, :] < keep[:, None]
    data = {**task.data, "mask": jnp.asarray(mask)}
    return dataclasses.replace(task, data=data)


def ragged_version(task):
    return dataclasses.replace(task, data=RaggedBatch.from_padded(task.data))


SMALL = {
    "srfca": dict(one_shot_rounds=2, refine_iterations=2),
    "three-stage": dict(erm_rounds=2, clustering="lloyd"),
    "cfl": dict(min_rounds=0),
    "fedsoft": dict(local_steps=2),
    "ifca-2": dict(local_steps=2),
    "hypcluster": dict(cluster_steps=2),
}


@pytest.mark.parametrize("name", tiered(distinct(ALGORITHMS)))
def test_every_algorithm_gives_the_padded_layouts_numbers_on_ragged_data(name, uneven_task):
    options = {**fc.algorithm_spec(name).example_options, **SMALL.get(name, {})}
    if "batch_size" in fc.algorithm_spec(name).options:
        options["batch_size"] = None  # full passes: the two layouts see the same examples
    build = lambda task: fc.make_algorithm(name, task, learning_rate=0.01, **options)  # noqa: E731
    padded, _ = run_rounds(build(uneven_task), uneven_task, 2)
    ragged_task = ragged_version(uneven_task)
    ragged, _ = run_rounds(build(ragged_task), ragged_task, 2)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5),
        padded.params,
        ragged.params,
    )
    assert uneven_task.evaluate(padded.params)["mean_loss"] == pytest.approx(
        float(ragged_task.evaluate(ragged.params)["mean_loss"]), rel=1e-4
    )


@pytest.mark.parametrize("name", ["global", "ifca-1", "federated-clustering", "ditto"])
def test_minibatch_rounds_and_participation_run_on_ragged_data(name, uneven_task):
    task = ragged_version(uneven_task)
    options = {**fc.algorithm_spec(name).example_options, "batch_size": 4, "participation": 3}
    algo = fc.make_algorithm(name, task, learning_rate=0.05, **options)
    state, _ = run_rounds(algo, task, 3)
    assert all(np.isfinite(np.asarray(leaf)).all() for leaf in jax.tree.leaves(state.params))


def test_a_partitioned_pool_runs_ragged_end_to_end():
    labels = np.random.default_rng(5).integers(0, 5, 2000)
    parts = partition_indices(parse_partition("lognormal:1.5"), labels, 40, np.random.default_rng(6))
    clients = RaggedClients.from_indices({"y": labels, "x": np.eye(5, dtype=np.float32)[labels]}, parts)
    batch = clients.to_batch()
    assert batch.counted_examples() <= 1.25 * clients.num_examples < clients.padding_factor() * clients.num_examples


def test_label_flipping_flips_the_byzantine_clients_rows_of_a_population_and_of_a_cohort():
    from fedjax_clust.algorithms.label_flipping import flip_labels

    sizes = np.array([2, 5, 3, 4])
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    batch = RaggedBatch.from_flat({"y": np.zeros(14, np.int32)}, offsets)
    byz = np.array([False, True, False, True])
    flipped = np.asarray(flip_labels(batch, byz, 3).examples["y"])
    assert flipped.tolist() == np.repeat([0, 2, 0, 2], sizes).tolist()
    cohort = batch.select(jnp.array([3, 0]))
    flipped = flip_labels(cohort, jnp.array([True, False]), 3)
    assert np.asarray(flipped.padded()["y"]).tolist() == [[2, 2, 2, 2, 0], [0, 0, 0, 0, 0]]


@pytest.mark.slow  # the slow tier (-m 'not slow' leaves it out): a process / benchmark / script run
def test_the_ragged_bench_counts_what_each_layout_computes(tmp_path, capsys):
    import json

    from fedjax_clust.cli import main

    assert main(["bench", "--suite", "ragged", "--quick", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    rows = {(r["kernel"], r["layout"]): r for r in report["rows"]}
    population = report["population"]
    assert rows[("full pass", "padded")]["counted_over_real"] == pytest.approx(population["padding_factor"])
    assert rows[("full pass", "equal")]["counted_over_real"] == pytest.approx(1.0, abs=0.01)
    assert 1.0 <= rows[("full pass", "ragged")]["counted_over_real"] <= report["bucket_ratio"]
    assert rows[("full pass", "ragged")]["data_bytes"] * population["padding_factor"] == pytest.approx(
        rows[("full pass", "padded")]["data_bytes"]
    )
    assert all(r["seconds"] > 0 for r in report["rows"]) and len(report["n_max_sweep"]) == 2
    assert "| full pass | ragged |" in (tmp_path / "report.md").read_text()
    assert main(["bench", "--suite", "ragged", "--quick", "--out", str(tmp_path)]) == 2  # no silent overwrite


def test_srfca_cross_loss_distances_are_the_padded_layouts(uneven_task):
    options = dict(threshold=1.0, distance="cross-loss", one_shot_rounds=2, refine_iterations=2)
    padded, _ = run_rounds(fc.make_algorithm("srfca", uneven_task, learning_rate=0.01, **options), uneven_task, 2)
    task = ragged_version(uneven_task)
    ragged, _ = run_rounds(fc.make_algorithm("srfca", task, learning_rate=0.01, **options), task, 2)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5),
        padded.params,
        ragged.params,
    )


def test_a_batch_is_checked_against_the_largest_client_not_an_example_axis(uneven_task):
    from fedjax_clust.core.batching import largest_client

    task = ragged_version(uneven_task)
    n_max = int(np.asarray(uneven_task.data["mask"]).sum(axis=1).max())
    assert largest_client(task.data) == n_max and largest_client(uneven_task.data) == 40
    # the flat x is [T, 10]: a batch above 10 and within n_max runs
    algo = fc.make_algorithm("global", task, learning_rate=0.05, batch_size=n_max - 1)
    assert (
        fc.simulate(algo, task, rounds=1, evaluation=Evaluation(eval_every=1), output=Output(progress=False)).summary[
            "status"
        ]
        == "completed"
    )
    with pytest.raises(ValueError, match="exceeds"):
        fc.make_algorithm("global", task, learning_rate=0.05, batch_size=n_max + 1)
