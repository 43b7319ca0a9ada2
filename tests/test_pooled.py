"""A population as an index into a shared pool (data/pooled.py, the mnist-population task): the built images are
each client's cluster's view of its pool entries, standardised, zero on padding; the population costs its
indices; a pooled task streams its cohorts and equals the resident run bit for bit."""

import typing

import jax
import numpy as np
import pytest

import fedjax_clust as fc
from fedjax_clust.data import ImageSet
from fedjax_clust.data.pooled import POOLED_STRUCTURES, PooledImages, materialise, pooled_clients
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.experiment_records import Candidate
from fedjax_clust.run.placement import Placement
from fedjax_clust.tasks.images import population_task


def small_pool(n=300, size=6, classes=5, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.random((n, size, size, 1)).astype(np.float32)
    return ImageSet(images, rng.integers(0, classes, n).astype(np.int32), classes, "toy")


@pytest.mark.parametrize("structure", POOLED_STRUCTURES)
def test_built_images_are_the_clusters_view_of_the_pool(structure):
    pool = small_pool()
    k = 2 if structure == "inverted" else 3
    data = pooled_clients(
        pool,
        num_clients=12,
        structure=structure,
        num_clusters=k,
        mean_examples=5,
        size_sigma=1.0,
        max_examples=9,
        test_examples=3,
        seed=1,
    )
    x = data.train["x"]
    assert isinstance(x, PooledImages) and x.shape == (12, 9, 6, 6, 1) and x.dtype == np.float32
    mean, std = x.mean, x.std
    built = np.asarray(x)
    for i in range(12):
        c = data.clusters[i]
        assert c == i * k // 12  # contiguous blocks
        for j in range(9):
            if not data.train["mask"][i, j]:
                assert not built[i, j].any() and data.train["y"][i, j] == 0
                continue
            image, label = pool.images[x.codes[i, j]], pool.labels[x.codes[i, j]]
            if structure == "rotation":
                image = np.rot90(image, c, axes=(0, 1))
            if structure == "inverted" and c == 1:
                image = 1.0 - image
            if structure == "private-label":
                label = (label + c) % pool.num_classes
            np.testing.assert_allclose(built[i, j], (image - mean) / std, rtol=1e-6, atol=1e-6)
            assert data.train["y"][i, j] == label
    index = np.array([7, 0, 7, 11])
    np.testing.assert_array_equal(np.take(x, index, axis=0), built[index])
    np.testing.assert_array_equal(x[3], built[3])
    np.testing.assert_array_equal(x[2:5, 1], built[2:5, 1])
    np.testing.assert_array_equal(materialise({"x": x})["x"], built)
    on_device = x.rows_on_device(index, jax.devices()[0])  # the streamed path builds a cohort on the device
    assert isinstance(on_device, jax.Array)
    np.testing.assert_array_equal(np.asarray(on_device), built[index])
    with pytest.raises(IndexError):
        x.take([12])


def test_the_population_costs_its_indices_and_draws_as_documented():
    pool = small_pool(n=1000)
    data = pooled_clients(
        pool,
        num_clients=20000,
        num_clusters=4,
        mean_examples=12,
        size_sigma=0.8,
        max_examples=40,
        test_examples=4,
        test_pool_fraction=0.25,
        seed=3,
    )
    x, sizes = data.train["x"], data.client_sizes
    assert x.index_bytes < x.nbytes / 25  # 5 bytes an example against 144 (6 x 6 float32)
    assert sizes.min() >= 1 and sizes.max() <= 40
    unclipped = np.clip(sizes, None, 39) < 39
    assert abs(sizes[unclipped].mean() - 12) < 1.5  # log-normal with mean 12 before clipping (the tail clipped)
    for i in range(0, 20000, 997):  # a client's examples are distinct
        codes = x.codes[i, : sizes[i]]
        assert len(set(codes.tolist())) == sizes[i]
    train_codes = set(x.codes[data.train["mask"]].tolist())
    test_codes = set(data.test["x"].codes.ravel().tolist())
    assert not train_codes & test_codes  # no client tests on an image any client trains on
    assert len(test_codes) <= 250 and len(train_codes) <= 750
    assert np.bincount(data.clusters).tolist() == [5000] * 4


def test_pooled_population_errors():
    pool = small_pool(n=100)
    with pytest.raises(ValueError, match="structure"):
        pooled_clients(pool, num_clients=4, structure="label-groups")
    with pytest.raises(ValueError, match="exceed the training"):
        pooled_clients(pool, num_clients=4, max_examples=90)
    with pytest.raises(ValueError, match="at most 4"):
        pooled_clients(pool, num_clients=8, num_clusters=5)
    assert typing.get_args(typing.get_type_hints(population_task)["structure"]) == POOLED_STRUCTURES
    data = pooled_clients(pool, num_clients=4, max_examples=5, test_examples=2)
    x = data.train["x"]
    with pytest.raises(ValueError, match="integers"):
        x.take(np.array([0.0, 1.0]))
    assert x.take([]).shape == (0,) + x.shape[1:]
    assert data.test["x"].device_pools is x.device_pools  # one copy of the pool on a device for both
    with pytest.raises(ValueError, match="structure"):
        PooledImages(x.pool, x.codes, x.mask, x.clusters, "label-groups", 5, 4)
    with pytest.raises(ValueError, match="positive std"):
        PooledImages(x.pool, x.codes, x.mask, x.clusters, "rotation", 5, 4, (0.5, 0.0))
    with pytest.raises(ValueError, match="always copies"):
        np.asarray(x, copy=False)


@pytest.mark.parametrize("name", ["ifca-2", "global"])
def test_a_pooled_population_streams_its_cohorts_bit_for_bit(name):
    task = fc.make_task("mnist-population", num_clients=40, model="mlp", hidden=16, max_client_examples=16, seed=0)
    assert isinstance(task.data["x"], PooledImages)
    extra = {"num_clusters": 4} if name == "ifca-2" else {}
    algo = fc.make_algorithm(name, task, learning_rate=0.05, participation=8, batch_size=8, **extra)
    device = fc.simulate(
        algo,
        task,
        rounds=4,
        placement=Placement(client_rows="device"),
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False),
    )
    host = fc.simulate(
        algo,
        task,
        rounds=4,
        placement=Placement(client_rows="host", device_memory="36MB"),
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False),
    )
    assert device.history[-1]["test_accuracy"] > 0.1
    for a, b in zip(device.history, host.history):  # evaluated in chunks: means equal to float rounding
        assert a.keys() == b.keys()
        for key in a:
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), key
    for u, v in zip(jax.tree.leaves(device.state), jax.tree.leaves(host.state)):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
    assert host.summary["client_rows"]["eval_chunk"] < 40  # evaluated in chunks of built clients


def test_the_cli_runs_a_pooled_population(tmp_path):
    from fedjax_clust.cli import main

    out = tmp_path / "run"
    code = main(
        [
            "run",
            "--algorithm",
            "global",
            "--task",
            "mnist-population",
            "--clients",
            "30",
            "--model",
            "mlp",
            "--hidden",
            "8",
            "--max-client-examples",
            "8",
            "--participation",
            "5",
            "--rounds",
            "2",
            "--eval-every",
            "2",
            "--client-rows",
            "host",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    import json

    summary = json.loads((out / "summary.json").read_text())
    assert summary["client_rows"]["client_rows"] == "host"
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["task_config"]["max_client_examples"] == 8


def test_sampled_evaluation_covers_k_clients_drawn_per_round_and_is_recorded(tmp_path):
    from fedjax_clust.run.streaming import evaluation_sample

    task = fc.make_task("mnist-population", num_clients=60, model="mlp", hidden=8, max_client_examples=8, seed=0)
    algo = fc.make_algorithm("ifca-1", task, learning_rate=0.05, participation=6, batch_size=4, num_clusters=4)
    sampled = fc.simulate(
        algo,
        task,
        rounds=4,
        evaluation=Evaluation(eval_every=2, eval_clients=12),
        output=Output(progress=False, out_dir=str(tmp_path / "s")),
    )
    host = fc.simulate(
        algo,
        task,
        rounds=4,
        placement=Placement(client_rows="host"),
        evaluation=Evaluation(eval_every=2, eval_clients=12),
        output=Output(progress=False),
    )
    whole = fc.simulate(algo, task, rounds=4, evaluation=Evaluation(eval_every=2), output=Output(progress=False))
    # the reference: the whole population's per-client test accuracy, averaged over each round's sample
    from fedjax_clust.core.batching import map_clients
    from fedjax_clust.core.model_table import client_models

    resident = task.resident()
    per_client = np.asarray(
        map_clients(resident.client_accuracy, client_models(whole.state.params), resident.test_data)
    )
    sample = evaluation_sample(0, 4, 60, 12)
    assert len(set(sample.tolist())) == 12 and not np.array_equal(sample, evaluation_sample(0, 2, 60, 12))
    np.testing.assert_array_equal(sample, evaluation_sample(0, 4, 60, 12))
    assert sampled.history[-1]["test_accuracy"] == pytest.approx(per_client[sample].mean(), abs=1e-6)
    assert whole.history[-1]["test_accuracy"] == pytest.approx(per_client.mean(), abs=1e-6)
    for a, b in zip(sampled.history, host.history):
        assert b == pytest.approx(a, rel=1e-5, abs=1e-6)
    import json

    assert json.loads((tmp_path / "s" / "run.json").read_text())["config"]["eval_clients"] == 12
    with pytest.raises(ValueError, match="eval_clients"):
        fc.simulate(algo, task, rounds=1, evaluation=Evaluation(eval_clients=61), output=Output(progress=False))
    from fedjax_clust.run.streaming import evaluate_in_chunks

    with pytest.raises(ValueError, match="indices in"):
        evaluate_in_chunks(lambda *args: None, task, whole.state, 4, np.array([0, 60]))


def test_compare_samples_the_same_clients_for_every_algorithm_and_streams_host_rows(tmp_path):
    """compare passes eval_clients / device_memory / client_rows / host_rows_dir to every algorithm's run: each
    equals its own simulate with those options; a placement one algorithm refuses stops the comparison before the
    first run."""
    import json
    import warnings

    from fedjax_clust.cli import main
    from fedjax_clust.run.compare import run_comparison

    task = fc.make_task("mnist-population", num_clients=30, model="mlp", hidden=8, max_client_examples=8, seed=0)
    common = dict(learning_rate=0.05, batch_size=4, participation=5)
    names = ["ifca-1", "global"]
    candidates = [Candidate("ifca-1", options={"num_clusters": 4, "participation": 5})]
    candidates += [Candidate("global", options={"participation": 5})]
    rows = tmp_path / "rows"
    rows.mkdir()
    got = run_comparison(
        task,
        candidates,
        rounds=2,
        placement=Placement(client_rows="host", host_rows_dir=str(rows)),
        evaluation=Evaluation(eval_every=2, eval_clients=7),
        output=Output(progress=False),
        options={"learning_rate": 0.05, "batch_size": 4},
    )
    for name in names:
        algo = fc.make_algorithm(name, task, **common, **({"num_clusters": 4} if name == "ifca-1" else {}))
        want = fc.simulate(
            algo,
            task,
            rounds=2,
            placement=Placement(client_rows="device"),
            evaluation=Evaluation(eval_every=2, eval_clients=7),
            output=Output(progress=False),
        )
        assert got[name].summary["client_rows"]["client_rows"] == "host"
        assert got[name].summary["eval_clients"] == 7
        for a, b in zip(got[name].history, want.history):
            assert a == pytest.approx(b, rel=1e-5, abs=1e-6)
        assert any(p.name.endswith(".npy") for p in (rows / name).iterdir())  # its own sub-folder of host rows
    with pytest.raises(ValueError, match="client_rows='host' needs rows that can stream"):  # before any run
        run_comparison(
            task,
            [Candidate("global", options={"participation": 5}), "local"],
            rounds=1,
            placement=Placement(client_rows="host"),
            output=Output(progress=False, out_dir=str(tmp_path / "never")),
            options={"learning_rate": 0.05},
        )
    assert not (tmp_path / "never" / "global").exists()
    old = tmp_path / "old"
    old.mkdir()
    (old / "results.json").write_text("{}")
    with pytest.raises(ValueError, match="needs rows that can stream"):  # refused: the earlier results stay
        run_comparison(
            task,
            ["local"],
            rounds=1,
            placement=Placement(client_rows="host"),
            output=Output(progress=False, out_dir=str(old), overwrite=True),
            options={"learning_rate": 0.05},
        )
    assert (old / "results.json").read_text() == "{}"
    with pytest.raises(ValueError, match="eval_clients"):
        run_comparison(
            task,
            ["global"],
            rounds=1,
            evaluation=Evaluation(eval_clients=31),
            output=Output(progress=False),
            options={"learning_rate": 0.05},
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_comparison(
            task,
            ["global"],
            rounds=1,
            placement=Placement(host_rows_dir=str(rows)),
            output=Output(progress=False),
            options={"learning_rate": 0.05},
        )
    unused = [w for w in caught if "host_rows_dir" in str(w.message)]
    assert len(unused) == 1 and unused[0].filename == __file__  # once, pointing at this call
    with pytest.raises(ValueError, match="does not exist"):
        run_comparison(
            task,
            ["global"],
            rounds=1,
            placement=Placement(host_rows_dir=str(tmp_path / "typo")),
            output=Output(progress=False),
            options={"learning_rate": 0.05},
        )
    out = tmp_path / "cli"
    code = main(
        [
            "compare",
            "--algorithms",
            "global,ifca-1",
            "--num-clusters",
            "4",
            "--task",
            "mnist-population",
            "--clients",
            "30",
            "--model",
            "mlp",
            "--hidden",
            "8",
            "--max-client-examples",
            "8",
            "--participation",
            "5",
            "--rounds",
            "2",
            "--eval-every",
            "2",
            "--eval-clients",
            "7",
            "--client-rows",
            "host",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    summaries = json.loads((out / "results.json").read_text())
    assert {s["eval_clients"] for s in summaries.values()} == {7}
    assert {s["client_rows"]["client_rows"] for s in summaries.values()} == {"host"}


def test_a_streamed_plan_counts_the_pool_copy_once():
    """The pool a streamed run copies to the device is counted once in the cohort's bytes (the training and test
    images share it), and an evaluation chunk leaves room for it."""
    from fedjax_clust.core.host_rows import device_source_bytes
    from fedjax_clust.core.keys import init_key
    from fedjax_clust.run.streaming import RESIDENT_SHARE, plan_rows

    task = fc.make_task("mnist-population", num_clients=40, model="mlp", hidden=8, max_client_examples=8, seed=0)
    pool = task.data["x"].pool
    assert task.test_data["x"].pool is pool
    assert device_source_bytes(task.arrays()) == pool.nbytes  # once, not once per part
    assert device_source_bytes({"x": np.zeros((4, 3))}) == 0
    algo = fc.make_algorithm("global", task, learning_rate=0.05, participation=5, batch_size=4)
    key = jax.random.PRNGKey(0)
    shapes = jax.eval_shape(lambda k: algo.start(task.init_params(k), 40, init_key(k)), key)
    resident = task.resident()
    without = plan_rows(algo, shapes, resident.arrays(), budget="1GiB", client_rows="host")  # arrays: no pool
    with_pool = plan_rows(algo, shapes, task.arrays(), budget="1GiB", client_rows="host")
    assert with_pool.cohort_bytes - without.cohort_bytes == pool.nbytes
    budget = int(with_pool.cohort_bytes / RESIDENT_SHARE) + 1  # the least a streamed run is granted
    tight = plan_rows(algo, shapes, task.arrays(), budget=budget, client_rows="host")
    roomier = plan_rows(algo, shapes, resident.arrays(), budget=budget, client_rows="host")
    assert 1 <= tight.eval_chunk < roomier.eval_chunk <= 40  # the chunk leaves the pool's room
    with pytest.raises(ValueError, match="exceed 50% of the device-memory budget") as refused:
        plan_rows(algo, shapes, task.arrays(), budget=budget - 3, client_rows="host")
    assert f"the data's shared pool ({pool.nbytes:,} bytes)" in str(refused.value)  # named, what it costs
