"""Flax models: the zoo's shapes, patch convolution = nnx.Conv, adapters, and image tasks end to end."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import distinct, tiered
from flax import linen, nnx

from fedjax_clust.algorithms import ALGORITHMS, make_algorithm
from fedjax_clust.models import MODELS, from_linen, from_nnx, make_model
from fedjax_clust.models.zoo import PatchConv
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.simulate import simulate
from fedjax_clust.tasks import make_task


@pytest.mark.parametrize("padding, size", [("SAME", 3), ("VALID", 5)])
def test_patch_convolution_is_the_convolution(padding, size):
    ours = PatchConv(3, 4, size, nnx.Rngs(0), padding=padding)
    ref = nnx.Conv(3, 4, (size, size), padding=padding, rngs=nnx.Rngs(1))
    ref.kernel[...] = ours.kernel[...]
    ref.bias[...] = jnp.arange(4.0)
    ours.bias[...] = jnp.arange(4.0)
    x = jax.random.normal(jax.random.PRNGKey(2), (2, 9, 9, 3))
    with jax.default_matmul_precision("highest"):
        np.testing.assert_allclose(ours(x), ref(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "name, shape",
    [
        ("cnn", (8, 8, 1)),
        ("lenet5", (12, 12, 1)),
        ("resnet9", (8, 8, 3)),
        pytest.param("vgg8", (32, 32, 1), marks=pytest.mark.slow),
    ],
)
def test_the_two_convolution_forms_are_one_model(name, shape):
    """make_model(conv="lax") has the parameters of the default patch form and computes the same logits."""
    patches, lax = make_model(name, shape, 10), make_model(name, shape, 10, conv="lax")
    shapes = jax.eval_shape(patches.init, jax.random.PRNGKey(0))
    assert jax.tree.map(jnp.shape, shapes) == jax.tree.map(jnp.shape, jax.eval_shape(lax.init, jax.random.PRNGKey(0)))
    rng = np.random.default_rng(0)  # any parameters will do (the model's init would compile for seconds)
    params = jax.tree.map(lambda s: jnp.asarray(rng.normal(0, 0.1, s.shape), s.dtype), shapes)
    x = jax.random.normal(jax.random.PRNGKey(1), (2,) + shape)
    with jax.default_matmul_precision("highest"):
        ours, xla = jax.jit(patches.logits)(params, x), jax.jit(lax.logits)(params, x)
    np.testing.assert_allclose(ours, xla, rtol=1e-4, atol=1e-4 * float(jnp.max(jnp.abs(xla))))
    with pytest.raises(ValueError, match="conv must be one of"):
        make_model(name, shape, 10, conv="fft")


@pytest.mark.slow  # compiles two LeNet-5 gradients (~25 s on 2 cores); run with -m slow
def test_conv_forms_benchmark_row():
    from fedjax_clust.bench.image import conv_forms_row

    row = conv_forms_row("lenet5", conv_models=4, batch_size=2, repeats=1)
    assert row["benchmark"] == "images-conv-forms" and row["models"] == 4 and row["flops"] > 0
    assert row["seconds_patches"] > 0 and row["seconds_lax"] > 0
    assert row["speedup_patches_vs_lax"] == round(row["seconds_lax"] / row["seconds_patches"], 2)
    assert row["max_abs_gradient_difference"] < 1e-3  # the same gradients, two ways


@pytest.mark.parametrize(
    "name, shape, classes, params",
    [
        ("mlp", (28, 28, 1), 10, 159_010),
        ("cnn", (28, 28, 1), 10, 206_922),
        ("lenet5", (28, 28, 1), 10, 61_706),
        ("vgg8", (32, 32, 3), 100, 4_490_340),
        ("vgg16", (32, 32, 3), 10, 15_253_578),
        ("resnet9", (32, 32, 3), 10, 6_575_370),
        # LEAF's FEMNIST CNN: 5*5*32 + 32, 5*5*32*64 + 64, 7*7*64*2048 + 2048, 2048*62 + 62
        ("leaf-cnn", (28, 28, 1), 62, 832 + 51_264 + 6_424_576 + 127_038),
    ],
)
def test_zoo_shapes_and_sizes(name, shape, classes, params):
    model = make_model(name, shape, classes)
    assert model.num_params() == params
    shapes = jax.eval_shape(lambda: model.logits(model.init(jax.random.PRNGKey(0)), jnp.zeros((2,) + shape)))
    assert shapes.shape == (2, classes)
    assert set(MODELS) >= {name}


def test_models_refuse_inputs_too_small_and_batch_statistics():
    with pytest.raises(ValueError, match="at least 12"):
        make_model("lenet5", (8, 8, 1), 10)

    class WithBatchNorm(nnx.Module):
        def __init__(self, rngs):
            self.dense = nnx.Linear(4, 2, rngs=rngs)
            self.norm = nnx.BatchNorm(2, rngs=rngs)

        def __call__(self, x):
            return self.norm(self.dense(x))

    with pytest.raises(ValueError, match="batch statistics"):
        from_nnx(WithBatchNorm)


def test_linen_and_nnx_modules_plug_in():
    class Linen(linen.Module):
        @linen.compact
        def __call__(self, x):
            return linen.Dense(10)(x.reshape(x.shape[0], -1))

    model = from_linen(Linen(), jnp.zeros((1, 8, 8, 1)))
    task = make_task("mnist-rotation", dataset="digits", model=model, clients_per_cluster=2, seed=3)
    assert task.config["model"] == "Linen" and task.config["num_params"] == 650
    algo = make_algorithm("local", task, learning_rate=0.1, batch_size=8)
    history = simulate(
        algo, task, rounds=20, evaluation=Evaluation(eval_every=20), output=Output(progress=False)
    ).history
    assert history[-1]["test_loss"] < history[0]["test_loss"]


def test_uneven_image_task_metrics_ignore_padding():
    task = make_task(
        "mnist-private-label", dataset="digits", model="mlp", hidden=8, clients_per_cluster=3, size_sigma=1.5, seed=0
    )
    mask = np.asarray(task.test_data["mask"])
    assert len(set(mask.sum(1).tolist())) > 1  # really uneven
    params = jax.vmap(task.init_params)(jax.random.split(jax.random.PRNGKey(0), task.num_clients))
    metrics = jax.jit(task.evaluate)(params)
    accuracies, losses = [], []
    test_x, test_y = np.asarray(task.test_data["x"], np.float64), np.asarray(task.test_data["y"])
    for i in range(task.num_clients):  # per-client unpadded reference, the MLP written out in float64
        p = jax.tree.map(lambda v: np.asarray(v[i], np.float64), params)
        x, y = test_x[i][mask[i]].reshape(mask[i].sum(), -1), test_y[i][mask[i]]
        logits = np.maximum(x @ p["hidden"]["kernel"] + p["hidden"]["bias"], 0) @ p["out"]["kernel"] + p["out"]["bias"]
        log_probs = (
            logits
            - np.log(np.sum(np.exp(logits - logits.max(1, keepdims=True)), 1, keepdims=True))
            - logits.max(1, keepdims=True)
        )
        accuracies.append(np.mean(np.argmax(logits, -1) == y))
        losses.append(np.mean(-np.take_along_axis(log_probs, y[:, None], 1)))
    np.testing.assert_allclose(metrics["test_accuracy"], np.mean(accuracies), rtol=1e-6)
    np.testing.assert_allclose(metrics["test_loss"], np.mean(losses), rtol=1e-4)
    np.testing.assert_allclose(metrics["test_accuracy_std"], np.std(accuracies), rtol=1e-5, atol=1e-7)


@pytest.fixture(scope="module")
def digits_task():
    return make_task(
        "mnist-rotation", dataset="digits", model="mlp", hidden=8, clients_per_cluster=2, size_sigma=1.0, seed=0
    )


# one algorithm of each family in the default run (the image-task path is the same for the others); the rest slow
IMAGE_FAST = ("federated-clustering", "global", "ifca-1", "cfl", "srfca", "three-stage", "fedsoft", "knn-per")


@pytest.mark.parametrize("name", tiered(distinct(ALGORITHMS), fast=IMAGE_FAST))
def test_every_algorithm_runs_on_an_uneven_image_task(digits_task, name):
    options = {
        "federated-clustering": dict(quantile=0.2, subgroups=2),
        "momentum-clustering": dict(quantile=0.5),
        "srfca": dict(threshold=1.0, one_shot_rounds=1, refine_iterations=1),
        "three-stage": dict(erm_rounds=1, clustering_steps=2),
    }.get(name, {})
    algo = make_algorithm(name, digits_task, learning_rate=0.05, batch_size=16, **options)
    result = simulate(algo, digits_task, rounds=2, evaluation=Evaluation(eval_every=2), output=Output(progress=False))
    last = result.history[-1]
    assert np.isfinite(last["test_loss"]) and 0.0 <= last["test_accuracy"] <= 1.0
    assert "test_accuracy_std" in last
