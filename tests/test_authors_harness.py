"""The side-by-side harness with the paper authors' code (experiments/authors_table1.py, issue 66): the pool it
writes in torchvision's IDX layout, the flags it gives their launcher, its summary; and weight_init="torch"
(PyTorch's default initial weights), the option the comparison added."""

import importlib.util
import math
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read_idx(path):
    """An independent IDX reader: big-endian magic and sizes, then uint8 data."""
    raw = open(path, "rb").read()
    magic = int.from_bytes(raw[:4], "big")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return magic, np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def test_the_pool_is_written_as_torchvisions_idx_files(tmp_path):
    from fedjax_clust.data import load_mnist_5k

    mnist_idx = _load("experiments/authors/mnist_idx.py", "mnist_idx_test")
    mnist_idx.write_pool(str(tmp_path), train=4000, seed=0)
    raw = tmp_path / "MNIST" / "raw"
    magic, train_images = _read_idx(raw / "train-images-idx3-ubyte")
    assert magic == 2051 and train_images.shape == (4000, 28, 28)
    magic, train_labels = _read_idx(raw / "train-labels-idx1-ubyte")
    assert magic == 2049 and train_labels.shape == (4000,)
    _, test_images = _read_idx(raw / "t10k-images-idx3-ubyte")
    _, test_labels = _read_idx(raw / "t10k-labels-idx1-ubyte")
    assert test_images.shape == (1000, 28, 28) and test_labels.shape == (1000,)
    pool = load_mnist_5k()
    order = np.random.default_rng(0).permutation(5000)
    images = np.concatenate([train_images, test_images])
    labels = np.concatenate([train_labels, test_labels])
    np.testing.assert_array_equal(labels, pool.labels[order])
    # the bytes are the stored pixel values: scaling back gives the pool's [0, 1] pixels exactly
    np.testing.assert_array_equal(images.astype(np.float32) / 255.0, pool.images[order, :, :, 0])
    with pytest.raises(ValueError, match="train"):
        mnist_idx.pool_splits(train=5000)


@pytest.fixture(scope="module")
def harness():
    return _load("experiments/authors_table1.py", "authors_table1_test")


def test_their_flags_are_run_sh_s_with_twenty_clients(harness):
    fc = harness.METHODS["fc"]
    argv = harness.their_argv(fc, "private-label", 3)
    flags = dict(zip(argv[::2], argv[1::2]))
    assert flags["--algorithm"] == "fc-grad-3-quantile0.2-1" and flags["--data"] == "relabel"
    assert (flags["--epochs"], flags["--batch-size"], flags["-n"], flags["--lr"]) == ("50", "1000", "20", "0.1")
    assert flags["--seed"] == "3" and "seed3" in flags["--identifier"]
    # a batch of 1,000 holds a client's 200 images: one step an epoch; run.sh's baselines 7 steps of 32
    assert (fc.steps_per_epoch, fc.rounds) == (1, 50)
    assert (harness.METHODS["local"].steps_per_epoch, harness.METHODS["local"].rounds) == (7, 210)
    assert dict(zip(*[iter(harness.their_argv(harness.METHODS["ifca"], "rotation", 0))] * 2))["--data"] == "rotation"


def test_the_summary_is_mean_min_max_over_seeds(harness):
    runs = [
        dict(task="t", method="m", arm=arm, seed=s, accuracy=a)
        for arm, values in (("ours", (70.0, 74.0, 72.0)), ("authors", (80.0, None)))
        for s, a in enumerate(values)
    ]
    cell = harness.summarise(runs)["t"]["m"]
    assert cell["ours"] == dict(seeds=[70.0, 74.0, 72.0], mean=72.0, min=70.0, max=74.0)
    assert cell["authors"]["mean"] == 80.0 and cell["authors"]["seeds"] == [80.0, None]  # a diverged seed stays listed


def test_the_harness_refuses_to_run_the_authors_arms_without_their_checkout(harness, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FEDJAX_CLUST_PRFL", raising=False)
    with pytest.raises(SystemExit):
        harness.main(["--out", str(tmp_path / "o"), "--code", str(tmp_path)])
    assert "liehe/PRFL checkout" in capsys.readouterr().err


def test_the_srfca_harness_scores_their_cluster_map_and_checks_its_sizes(tmp_path, capsys, monkeypatch):
    srfca_side = _load("experiments/authors_srfca.py", "authors_srfca_test")
    truth = [i % 2 for i in range(8)]
    assert srfca_side.misclustering([1 - t for t in truth], truth) == 0.0  # names do not matter
    assert srfca_side.misclustering([0] * 8, truth) == 0.5  # one cluster of both: half misplaced
    assert srfca_side.misclustering([t if i else -1 for i, t in enumerate(truth)], truth) == 1 / 8  # unassigned
    monkeypatch.delenv("FEDJAX_CLUST_SRFCA", raising=False)
    for argv, says in (
        (["--clients", "41"], "--clients"),
        (["--clients", "100"], "--clients"),
        (["--code", str(tmp_path)], "sr-fca checkout"),
    ):
        with pytest.raises(SystemExit):
            srfca_side.main(["--out", str(tmp_path / "o")] + argv)
        assert says in capsys.readouterr().err


def test_torch_weight_init_draws_pytorchs_default_distribution():
    from fedjax_clust.models.weight_init import apply_weight_init, torch_default_init

    params = {
        "conv": {"kernel": jnp.zeros((3, 3, 8, 16)), "bias": jnp.zeros(16)},
        "norm": {"scale": jnp.ones(16), "bias": jnp.zeros(16)},
        "dense": {"kernel": jnp.zeros((784, 200)), "bias": jnp.zeros(200)},
    }
    out = torch_default_init(params, jax.random.PRNGKey(0))
    for layer, fan_in in (("conv", 3 * 3 * 8), ("dense", 784)):
        bound = 1 / math.sqrt(fan_in)
        kernel, bias = np.asarray(out[layer]["kernel"], np.float64), np.asarray(out[layer]["bias"], np.float64)
        assert np.all(np.abs(kernel) <= bound) and np.all(np.abs(bias) <= bound)
        assert np.abs(kernel).max() > 0.95 * bound and np.abs(bias).max() > 0.5 * bound  # the whole interval used
    dense = np.asarray(out["dense"]["kernel"], np.float64)
    # U(-b, b): mean 0, standard deviation b / sqrt(3); 156,800 draws put both within 1%
    assert abs(dense.mean()) < 0.01 / math.sqrt(784)
    assert dense.std() * math.sqrt(3 * 784) == pytest.approx(1.0, rel=0.01)
    np.testing.assert_array_equal(out["norm"]["scale"], 1.0)  # normalisation layers keep PyTorch's ones / zeros
    np.testing.assert_array_equal(out["norm"]["bias"], 0.0)
    again = torch_default_init(params, jax.random.PRNGKey(0))
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(again)))
    assert not np.array_equal(out["dense"]["kernel"][:, 0], out["dense"]["kernel"][:, 1])
    with pytest.raises(ValueError, match="weight_init"):
        apply_weight_init(lambda key: params, "he")


def test_an_image_task_takes_weight_init():
    from fedjax_clust import make_task

    def task(**kw):
        return make_task("mnist-rotation", dataset="digits", model="mlp", hidden=4, clients_per_cluster=2, **kw)

    torch_task, default = task(weight_init="torch"), task()
    params = torch_task.init_params(jax.random.PRNGKey(0))
    fan_in = int(np.prod(params["hidden"]["kernel"].shape[:-1]))
    assert np.all(np.abs(np.asarray(params["hidden"]["bias"])) <= 1 / math.sqrt(fan_in))
    assert np.any(np.asarray(params["hidden"]["bias"]) != 0)  # Flax's biases start at zero, PyTorch's do not
    assert not np.any(np.asarray(default.init_params(jax.random.PRNGKey(0))["hidden"]["bias"]))
    assert torch_task.config["weight_init"] == "torch" and "weight_init" not in default.config
    with pytest.raises(ValueError, match="weight_init"):
        task(weight_init="he")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
