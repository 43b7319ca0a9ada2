"""Image data: sources, cluster structures, uneven clients (padding + mask), .npz layouts, tfds (mock)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_clust.core.batching import client_loss, sample_minibatch
from fedjax_clust.data import (
    ImageSet,
    clustered_split,
    load_clients_npz,
    load_source,
    pad_clients,
    save_clients_npz,
    split_sizes,
)
from fedjax_clust.run.driver_options import Evaluation, Output


def tiny_images(n=120, size=6, classes=10, seed=0):
    rng = np.random.default_rng(seed)
    return ImageSet(
        rng.random((n, size, size, 1), dtype=np.float32), rng.integers(0, classes, n).astype(np.int32), classes, "tiny"
    )


def test_offline_sources_are_real_images():
    digits = load_source("digits")
    assert digits.images.shape == (1797, 8, 8, 1) and digits.num_classes == 10
    mnist = load_source("mnist-5k")
    assert mnist.images.shape == (5000, 28, 28, 1) and mnist.images.dtype == np.float32
    assert np.bincount(mnist.labels).tolist() == [500] * 10
    assert 0.0 == mnist.images.min() and mnist.images.max() == 1.0
    assert 0.05 < mnist.images.mean() < 0.25  # dark background, bright strokes: real digits, not noise
    # the file is parsed once per process, but every call's arrays are its own: a caller writing into one set of
    # images changes no later load
    mnist.images[0] = 0.5
    mnist.labels[0] = 9
    again = load_source("mnist-5k")
    assert again.images is not mnist.images and again.images[0].max() == 1.0 and again.labels[0] != 9


@pytest.mark.parametrize("source", ["nope", "tfds:", "npz:"])
def test_unknown_source_is_refused(source):
    with pytest.raises(ValueError, match="source"):
        load_source(source)


def test_structures_transform_each_cluster():
    images = tiny_images()
    plain = clustered_split(images, structure="private-label", num_clusters=1, clients_per_cluster=3, seed=1)
    rot = clustered_split(images, structure="rotation", num_clusters=1, clients_per_cluster=3, seed=1)
    np.testing.assert_array_equal(plain.train["x"], rot.train["x"])  # cluster 0 is untouched
    split = clustered_split(images, structure="rotation", num_clusters=4, clients_per_cluster=3, seed=1)
    assert split.clusters.tolist() == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3
    # the same pooled example appears rotated by k * 90 degrees in cluster k: recover it
    order = np.random.default_rng(1).permutation(120)
    first_of_cluster1 = images.images[order[30]]
    np.testing.assert_array_equal(split.train["x"][3, 0], np.rot90(first_of_cluster1, 1, axes=(0, 1)))
    labels = clustered_split(images, structure="private-label", num_clusters=3, clients_per_cluster=2, seed=1)
    np.testing.assert_array_equal(labels.train["y"][2, 0], (images.labels[order[40]] + 1) % 10)
    inverted = clustered_split(images, structure="inverted", num_clusters=2, clients_per_cluster=2, seed=1)
    np.testing.assert_allclose(inverted.train["x"][2, 0], 1.0 - images.images[order[60]])
    groups = clustered_split(images, structure="label-groups", num_clusters=5, clients_per_cluster=2, seed=1)
    assert groups.num_classes == 2
    for k in range(5):  # cluster k holds only the classes 2k, 2k+1, relabelled 0, 1
        real = groups.train["mask"][2 * k : 2 * k + 2]
        assert set(groups.train["y"][2 * k : 2 * k + 2][real].tolist()) <= {0, 1}


@pytest.mark.parametrize("structure, k", [("rotation", 5), ("inverted", 3), ("private-label", 11)])
def test_structure_refuses_clusters_it_cannot_tell_apart(structure, k):
    with pytest.raises(ValueError, match="at most"):
        clustered_split(tiny_images(n=400), structure=structure, num_clusters=k, clients_per_cluster=2)


def test_uneven_sizes_sum_and_spread():
    rng = np.random.default_rng(0)
    sizes = split_sizes(1000, 20, 1.0, rng)
    assert sizes.sum() == 1000 and sizes.min() >= 2 and sizes.max() > 3 * sizes.min()
    assert split_sizes(100, 4, 0.0, rng).tolist() == [25] * 4
    with pytest.raises(ValueError, match="cannot give"):
        split_sizes(5, 4, 0.0, rng)


def test_padding_masks_only_the_missing_examples():
    padded = pad_clients([{"x": np.ones((3, 2)), "y": np.arange(3)}, {"x": np.ones((1, 2)), "y": np.arange(1)}])
    assert padded["x"].shape == (2, 3, 2)
    assert padded["mask"].tolist() == [[True, True, True], [True, False, False]]


def test_padded_clients_have_the_unpadded_gradients():
    """The issue's test: a task with uneven clients gives the same gradients as the per-client unpadded
    computation (float64 reference)."""
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        clients = [{"x": rng.normal(size=(n, 3)), "y": rng.normal(size=n)} for n in (5, 2, 9)]
        padded = jax.tree.map(jnp.asarray, pad_clients(clients))
        padded["x"] = padded["x"].at[~padded["mask"]].set(1e3)  # garbage in the padding must not matter
        example_loss = lambda w, ex: (ex["x"] @ w - ex["y"]) ** 2 + jnp.sin(ex["x"][0] * w[1])
        loss = client_loss(example_loss)
        w = jnp.asarray(rng.normal(size=3))
        batched = jax.vmap(jax.grad(loss), (None, 0))(w, padded)
        for i, client in enumerate(clients):
            unpadded = jax.grad(loss)(w, jax.tree.map(jnp.asarray, client))
            np.testing.assert_allclose(batched[i], unpadded, rtol=1e-12)


def test_minibatches_draw_only_real_examples():
    clients = [{"v": np.arange(10) + 100 * i} for i in range(3)]
    clients[1] = {"v": np.array([100, 101, 102])}
    data = jax.tree.map(jnp.asarray, pad_clients(clients))
    seen = [set(), set(), set()]
    for s in range(50):
        batch = sample_minibatch(data, 4, jax.random.PRNGKey(s))
        for i in range(3):
            real = np.asarray(batch["v"][i])[np.asarray(batch["mask"][i])]
            assert len(real) == (3 if i == 1 else 4) and len(set(real)) == len(real)
            seen[i] |= set(real.tolist())
    assert seen[1] == {100, 101, 102} and seen[0] == set(range(10)) and seen[2] == set(range(200, 210))


def test_npz_layouts_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    train = [{"x": rng.random((n, 5, 5)).astype(np.float32), "y": rng.integers(0, 3, n)} for n in (4, 7)]
    test = [{"x": rng.random((2, 5, 5)).astype(np.float32), "y": rng.integers(0, 3, 2)} for _ in range(2)]
    save_clients_npz(tmp_path / "clients.npz", train, test, clusters=[0, 1])
    data = load_clients_npz(str(tmp_path / "clients.npz"))
    assert data.train["x"].shape == (2, 7, 5, 5, 1) and data.client_sizes.tolist() == [4, 7]
    np.testing.assert_array_equal(data.train["x"][0, :4, ..., 0], train[0]["x"])
    assert data.clusters.tolist() == [0, 1]
    # one array + a client index, uint8 pixels, held-out split from the test fraction
    images = rng.integers(0, 256, (12, 4, 4), dtype=np.uint8)
    np.savez(tmp_path / "indexed.npz", images=images, labels=np.arange(12) % 4, client=np.repeat([0, 1, 2], 4))
    indexed = load_clients_npz(str(tmp_path / "indexed.npz"), test_fraction=0.25)
    assert indexed.client_sizes.tolist() == [3, 3, 3] and indexed.num_classes == 4
    np.testing.assert_allclose(indexed.train["x"][1, 0, ..., 0], images[4] / 255.0)
    np.savez(tmp_path / "pooled.npz", images=images, labels=np.arange(12) % 4)
    assert load_source(f"npz:{tmp_path / 'pooled.npz'}").images.shape == (12, 4, 4, 1)
    with pytest.raises(ValueError, match="pooled"):
        load_clients_npz(str(tmp_path / "pooled.npz"))
    np.savez(tmp_path / "bad.npz", pixels=images)
    with pytest.raises(ValueError, match="unrecognised"):
        load_clients_npz(str(tmp_path / "bad.npz"))


def test_tfds_loader_reads_mock_data():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=12):
        mnist = load_source("tfds:mnist")
        assert mnist.images.shape == (24, 28, 28, 1) and mnist.name == "tfds:mnist"  # train + test
        assert 0.0 <= mnist.images.min() and mnist.images.max() <= 1.0
        cifar = load_source("tfds:cifar100", limit=5)
        assert cifar.images.shape == (10, 32, 32, 3) and cifar.num_classes == 100


def _write(path, **arrays):
    np.savez(path, **arrays)
    return str(path)


BAD_NPZ = {
    "empty file": (None, "not a readable .npz"),
    "no arrays": ({}, "unrecognised .npz layout"),
    "images without labels": ({"images": np.zeros((3, 4, 4)), "client": np.zeros(3, int)}, "unrecognised"),
    "a client's labels missing": (
        {"images_0": np.zeros((3, 4, 4)), "images_1": np.zeros((3, 4, 4)), "labels_1": np.zeros(3, int)},
        "images_0/labels_0 missing",
    ),
    "flat images": ({"images_0": np.zeros((3, 16)), "labels_0": np.zeros(3, int)}, "images_0: expected images"),
    "labels of another shape": (
        {"images_0": np.zeros((3, 4, 4)), "labels_0": np.zeros((3, 2), int)},
        "labels_0: expected labels \\[3\\]",
    ),
    "fractional labels": ({"images_0": np.zeros((3, 4, 4)), "labels_0": np.array([0, 1.5, 1])}, "whole numbers"),
    "a label of 1e9": (
        {"images_0": np.zeros((3, 4, 4)), "labels_0": np.array([0, 1, 10**9])},
        "class indices in \\[0, 65536\\)",
    ),
    "0-255 float pixels": ({"images_0": np.full((3, 4, 4), 255.0), "labels_0": np.zeros(3, int)}, "\\[0, 1\\]"),
    "test images without labels": (
        {"images_0": np.zeros((3, 4, 4)), "labels_0": np.zeros(3, int), "test_images_0": np.zeros((2, 4, 4))},
        "test_labels_0",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_NPZ))
def test_a_bad_npz_is_one_error_naming_the_file(tmp_path, case):
    arrays, message = BAD_NPZ[case]
    path = tmp_path / "clients.npz"
    if arrays is None:
        path.write_bytes(b"")
    else:
        _write(path, **arrays)
    with pytest.raises(ValueError, match=message) as error:
        load_clients_npz(str(path))
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_a_non_finite_pixel_reaches_only_its_own_clients_model(tmp_path):
    """One NaN pixel in one client's images, kept with allow_nonfinite=True (a file made to simulate a faulty
    client): the standardisation statistics skip it, so under Local only that client's model goes non-finite
    (it used to poison every client through the pooled mean)."""
    from fedjax_clust import make_algorithm, make_task
    from fedjax_clust.run.simulate import simulate

    rng = np.random.default_rng(0)
    train = [{"x": rng.uniform(size=(6, 8, 8)).astype(np.float32), "y": rng.integers(0, 3, 6)} for _ in range(4)]
    train[2]["x"][1, 3, 3] = np.nan
    path = str(tmp_path / "clients.npz")
    save_clients_npz(path, train)
    task = make_task("npz", path=path, model="mlp", hidden=8, allow_nonfinite=True)  # refused without it
    # the task is ragged (the your-data default since issue 63): client 2's training rows hold the NaN, if it was
    # not held out for testing, and no other client's do
    x, starts, sizes = (np.asarray(a) for a in (task.data.examples["x"], task.data.starts, task.data.sizes))
    rows = np.arange(starts[2], starts[2] + sizes[2])
    assert np.isfinite(np.delete(x, rows, axis=0)).all()
    algo = make_algorithm("local", task, learning_rate=0.05)
    result = simulate(algo, task, rounds=3, evaluation=Evaluation(on_nonfinite="warn"), output=Output(progress=False))
    finite = [
        all(np.isfinite(np.asarray(leaf)[i]).all() for leaf in jax.tree.leaves(result.state.params)) for i in range(4)
    ]
    assert finite == [True, True, False, True]


@pytest.mark.parametrize("layout", ["per-client", "indexed", "pooled"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_non_finite_pixel_in_a_file_is_refused_naming_the_file_and_client(tmp_path, capsys, layout, bad):
    """A NaN or inf pixel in a data file is a one-line error (exit 2) naming the file, the array and the
    client, before any training; it used to pass silently (NaN) or end the run as diverged (inf)."""
    from fedjax_clust.cli.commands import main

    rng = np.random.default_rng(0)
    x = rng.uniform(size=(12, 6, 6)).astype(np.float32)
    x[7, 2, 2] = bad  # example 7: client 3 of the indexed layout, client 1 (its second example) per client
    y = np.arange(12) % 3
    path = tmp_path / f"{layout}.npz"
    if layout == "per-client":
        save_clients_npz(str(path), [{"x": x[i : i + 6], "y": y[i : i + 6]} for i in (0, 6)])
        argv, named = ["--task", "npz", "--npz-path", str(path)], "images_1 (client 1)"
    elif layout == "indexed":
        np.savez(path, images=x, labels=y, client=np.arange(12) // 2)
        argv, named = ["--task", "npz", "--npz-path", str(path)], "example 7 (client 3)"
    else:
        np.savez(path, images=x, labels=y)
        argv, named = (
            [
                "--task",
                "mnist-private-label",
                "--dataset",
                f"npz:{path}",
                "--clusters",
                "2",
                "--clients-per-cluster",
                "2",
            ],
            "example 7 with",
        )
    status = main(
        [
            "run",
            "--algorithm",
            "local",
            "--model",
            "mlp",
            "--rounds",
            "1",
            "--no-progress",
            "--out",
            str(tmp_path / "out"),
        ]
        + argv
    )
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1, err
    assert str(path) in err and named in err and "non-finite" in err and str(bad) in err
    assert not (tmp_path / "out" / "metrics.jsonl").exists()
    if layout != "pooled":  # the escape hatch for files made to simulate faulty clients
        assert (
            main(
                [
                    "run",
                    "--algorithm",
                    "local",
                    "--model",
                    "mlp",
                    "--rounds",
                    "1",
                    "--no-progress",
                    "--allow-nonfinite",
                    "--on-nonfinite",
                    "warn",
                    "--out",
                    str(tmp_path / "kept"),
                ]
                + argv
            )
            == 0
        )


def test_a_non_finite_letor_value_names_its_line(tmp_path):
    from fedjax_clust.data.letor import load_svmlight

    path = tmp_path / "set.txt"
    path.write_text("1 qid:1 1:0.5 2:0.25\n0 qid:1 1:nan 2:0.1\n")
    with pytest.raises(ValueError, match=r"set\.txt:2: .*feature 1 is nan"):
        load_svmlight(str(path))


def _marked(ids, num_classes=4):
    """Images whose pixel [0, 0] is the example's id (and labels id mod num_classes)."""
    images = np.zeros((len(ids), 4, 4, 1), np.float32)
    images[:, 0, 0, 0] = ids
    return ImageSet(images, (np.asarray(ids) % num_classes).astype(np.int32), num_classes, "marked")


def test_official_splits_give_training_examples_from_train_and_test_examples_from_test():
    """With a test split, each client trains on its share of the training split and is tested on its share of
    the test split, both under its cluster's structure (private labels: y -> y + k mod C); every example is used
    once."""
    train, test = _marked(np.arange(40)), _marked(np.arange(100, 120))
    data = clustered_split(
        train, structure="private-label", num_clusters=2, clients_per_cluster=2, seed=3, test_images=test
    )
    for part, pool, each in ((data.train, np.arange(40), 10), (data.test, np.arange(100, 120), 5)):
        ids = part["x"][..., 0, 0, 0]
        assert (part["mask"].sum(axis=1) == each).all()
        assert sorted(ids[part["mask"]].astype(int)) == list(pool)
        for client, k in enumerate(data.clusters):
            real = ids[client][part["mask"][client]].astype(int)
            np.testing.assert_array_equal(part["y"][client][part["mask"][client]], (real % 4 + k) % 4)
    pooled = clustered_split(train, structure="private-label", num_clusters=2, clients_per_cluster=2, seed=3)
    assert pooled.test["x"][..., 0, 0, 0].max() < 40  # without a test split the test examples come from the pool


def test_official_splits_are_the_default_where_a_source_has_them():
    from fedjax_clust.tasks.images import resolve_splits

    assert resolve_splits("tfds:mnist", None) == "official" and resolve_splits("mnist-5k", None) == "pooled"
    assert resolve_splits("tfds:mnist", "pooled") == "pooled"
    with pytest.raises(ValueError, match="no official test split"):
        resolve_splits("mnist-5k", "official")
    with pytest.raises(ValueError, match="no train / test splits"):
        load_source("digits", split="test")
    from fedjax_clust import make_task

    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=16):
        task = make_task("mnist-rotation", dataset="tfds:mnist", model="mlp", hidden=4, clients_per_cluster=2)
        assert task.config["splits"] == "official"
        assert int(task.data["mask"].sum()) == 16 and int(task.test_data["mask"].sum()) == 16
        pooled = make_task(
            "mnist-rotation",
            dataset="tfds:mnist",
            model="mlp",
            hidden=4,
            clients_per_cluster=2,
            splits="pooled",
            test_fraction=0.25,
        )
        assert int(pooled.data["mask"].sum()) + int(pooled.test_data["mask"].sum()) == 32
        assert load_source("tfds:mnist", split="test").images.shape[0] == 16
