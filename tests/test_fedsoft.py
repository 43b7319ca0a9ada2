"""FedSoft (Ruan & Joe-Wong 2022): importance weights, the proximal local steps and the soft cluster average
against a float64 NumPy re-implementation; soft-mixture semantics; attacks; the CLI."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_clust.algorithms import make_algorithm
from fedjax_clust.algorithms.fedsoft import (
    fedsoft,
    importance_weights,
    soft_cluster_average,
)
from fedjax_clust.algorithms.loss_clustering import ClusterInit
from fedjax_clust.core.batching import client_loss, local_sgd_steps
from fedjax_clust.ops.metrics import misclustering_error
from fedjax_clust.robust import make_attack, mark_byzantine
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.simulate import simulate
from fedjax_clust.tasks import make_task

RNG = np.random.default_rng(0)


def squared_error(params, example):
    return 0.5 * jnp.square(jnp.dot(example["x"], params) - example["y"])


def padded_data(num_clients=6, n=8, d=3, seed=0):
    """Linear-regression data with uneven clients (a padding mask; client 0 holds 3 real examples)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((num_clients, n, d)).astype(np.float32)
    y = rng.standard_normal((num_clients, n)).astype(np.float32)
    mask = np.ones((num_clients, n), bool)
    mask[0, 3:] = False
    mask[1, 6:] = False
    return {"x": jnp.asarray(x), "y": jnp.asarray(y), "mask": jnp.asarray(mask)}


def numpy_importance(centers, data, smoother):
    x, y, mask = (np.asarray(data[k], np.float64) for k in ("x", "y", "mask"))
    u = np.zeros((x.shape[0], centers.shape[0]))
    for k in range(x.shape[0]):
        real = np.flatnonzero(mask[k])
        for b in real:
            losses = [0.5 * (x[k, b] @ c - y[k, b]) ** 2 for c in centers]
            u[k, int(np.argmin(losses))] += 1
        u[k] /= len(real)
    return np.where(u > 0, u, smoother)


def numpy_round(personal, centers, importance, data, lam, lr, steps):
    """One FedSoft round with full local batches (module docstring of fedjax_clust.algorithms.fedsoft)."""
    x, y, mask = (np.asarray(data[k], np.float64) for k in ("x", "y", "mask"))
    sizes = mask.sum(1)
    new = personal.copy()
    for k in range(x.shape[0]):
        w = personal[k].copy()
        for _ in range(steps):
            residual = (x[k] @ w - y[k]) * mask[k]
            grad = x[k].T @ residual / sizes[k]
            prox = sum(importance[k, s] * (w - centers[s]) for s in range(centers.shape[0]))
            w = w - lr * (grad + lam * prox)
        new[k] = w
    v = importance * sizes[:, None]
    v = v / v.sum(0)
    return new, v.T @ new


def test_importance_weights_match_a_loop_with_padding_and_the_smoother():
    data = padded_data()
    # its own generator: the module's RNG would make the draw depend on which tests ran before on this worker
    centers = np.random.default_rng(0).standard_normal((3, 3)).astype(np.float32)
    centers[2] = 1e3  # never the best model: every client's count for it is zero -> sigma
    u = np.asarray(importance_weights(squared_error, jnp.asarray(centers), data, 1e-4))
    expected = numpy_importance(centers.astype(np.float64), data, 1e-4)
    np.testing.assert_array_equal(u, expected.astype(np.float32))
    assert (u[:, 2] == np.float32(1e-4)).all()
    np.testing.assert_allclose(u[:, :2].sum(1), 1.0, rtol=1e-6)  # the counts of a client add up to n_k


def test_importance_weights_recover_a_clients_mixture_proportions():
    """Soft clustering: a client whose examples come from two noiseless linear models in proportions p and
    1 - p gets u = (p, 1 - p) at the true models (the loss is 0 at its own model, > 0 at the other)."""
    d, n = 4, 20
    truth = RNG.standard_normal((2, d))
    shares = np.array([0.0, 0.25, 0.5, 0.85, 1.0])
    x = RNG.standard_normal((len(shares), n, d))
    source = (np.arange(n)[None, :] >= np.round(shares[:, None] * n)).astype(int)  # first p*n from model 0
    y = np.einsum("knd,knd->kn", x, truth[source])
    data = {"x": jnp.asarray(x, jnp.float32), "y": jnp.asarray(y, jnp.float32)}
    u = np.asarray(importance_weights(squared_error, jnp.asarray(truth, jnp.float32), data, 1e-4))
    expected = np.stack([shares, 1 - shares], 1)
    np.testing.assert_allclose(u, np.where(expected > 0, expected, 1e-4), rtol=1e-6)


def test_soft_cluster_average_weights_by_importance_and_size_and_skips_nonfinite_rows():
    models = RNG.standard_normal((5, 3)).astype(np.float32)
    importance = RNG.uniform(0.01, 1.0, (5, 2)).astype(np.float32)
    sizes = np.array([3, 8, 8, 5, 1], np.float32)
    got = np.asarray(soft_cluster_average(jnp.asarray(models), jnp.asarray(importance), jnp.asarray(sizes)))
    v = importance.astype(np.float64) * sizes[:, None]
    np.testing.assert_allclose(got, (v / v.sum(0)).T @ models, rtol=1e-5, atol=1e-6)
    bad = models.copy()
    bad[1, 0] = np.nan
    got = np.asarray(soft_cluster_average(jnp.asarray(bad), jnp.asarray(importance), jnp.asarray(sizes)))
    keep = np.arange(5) != 1
    v = v[keep]
    np.testing.assert_allclose(got, (v / v.sum(0)).T @ models[keep], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("predict", ["personal", "cluster"])
def test_two_rounds_match_numpy_and_reuse_the_importance_between_estimations(predict):
    """Round 0 estimates u (tau = 2), round 1 reuses it; full local batches, so the rounds are deterministic."""
    data = padded_data()
    n_clients, d, k = 6, 3, 3
    w0 = RNG.standard_normal(d).astype(np.float32)
    centers0 = RNG.standard_normal((k, d)).astype(np.float32)
    lam, lr, steps = 0.5, 0.1, 3
    algo = fedsoft(
        squared_error,
        k,
        learning_rate=lr,
        lam=lam,
        local_steps=steps,
        estimation_interval=2,
        cluster_init=ClusterInit(jnp.asarray(centers0)),
        predict=predict,
    )
    state = algo.init(jnp.asarray(w0), n_clients)
    step = jax.jit(algo.round)
    personal = np.tile(w0.astype(np.float64), (n_clients, 1))
    centers = centers0.astype(np.float64)
    importance = numpy_importance(centers, data, 1e-4)
    for t in range(2):
        state, metrics = step(state, data, jax.random.PRNGKey(t))
        personal, centers = numpy_round(personal, centers, importance, data, lam, lr, steps)
        np.testing.assert_allclose(np.asarray(state.rows["importance"]), importance, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(state.extra["centers"]), centers, rtol=1e-4, atol=1e-5)
        labels = np.argmax(importance, 1)
        np.testing.assert_array_equal(np.asarray(metrics["cluster_labels"]), labels)
        own = state.params if predict == "personal" else state.rows["personal"]
        np.testing.assert_allclose(np.asarray(own), personal, rtol=1e-4, atol=1e-5)
        if predict == "cluster":
            np.testing.assert_allclose(np.asarray(state.params), centers[labels], rtol=1e-4, atol=1e-5)
    # the reused u is round 0's, although the centres moved: a fresh estimate differs from it here
    assert not np.allclose(numpy_importance(centers, data, 1e-4), importance)


def test_without_the_proximal_term_the_personal_models_are_local_sgd():
    task = make_task("synthetic", num_clusters=2, clients_per_cluster=3, seed=0)
    algo = make_algorithm("fedsoft", task, learning_rate=0.01, lam=0.0, local_steps=4)
    state = algo.init(task.init_params(None), task.num_clients)
    key = jax.random.PRNGKey(3)
    new, _ = jax.jit(algo.round)(state, task.data, key)
    expected = local_sgd_steps(
        jax.grad(client_loss(task.example_loss)),
        state.params,
        task.data,
        key,
        steps=4,
        learning_rate=0.01,
        batch_size=None,
    )
    np.testing.assert_array_equal(np.asarray(new.params), np.asarray(expected))


def test_fedsoft_finds_the_synthetic_clusters():
    task = make_task("synthetic", num_clusters=4, clients_per_cluster=10, seed=0)
    algo = make_algorithm("fedsoft", task, learning_rate=0.01, lam=0.1)
    result = simulate(algo, task, rounds=60, evaluation=Evaluation(eval_every=60), output=Output(progress=False))
    labels = np.argmax(np.asarray(result.state.rows["importance"]), 1)
    assert misclustering_error(labels, task.true_clusters) == 0.0
    assert result.history[-1]["misclustering"] == 0.0


def test_large_update_attackers_send_a_scaled_update():
    plain = make_task("synthetic", num_clusters=2, clients_per_cluster=4, seed=0)
    task = mark_byzantine(plain, fraction=0.25, seed=0)
    clean = make_algorithm("fedsoft", plain, learning_rate=0.01, lam=0.3)
    attacked = make_algorithm("fedsoft", task, learning_rate=0.01, lam=0.3, attack=make_attack("large-gradient"))
    state = clean.init(task.init_params(None), task.num_clients)
    state = state._replace(params=jnp.asarray(RNG.standard_normal((task.num_clients, 10)), jnp.float32))
    key = jax.random.PRNGKey(1)
    honest, _ = jax.jit(clean.round)(state, task.data, key)
    bad, _ = jax.jit(attacked.round)(state, task.data, key)
    np.testing.assert_array_equal(np.asarray(bad.params), np.asarray(honest.params))  # own models stay honest
    old, new = np.asarray(state.params, np.float64), np.asarray(honest.params, np.float64)
    sent = np.where(task.byzantine[:, None], old + 100.0 * (new - old), new)
    u = np.asarray(honest.rows["importance"], np.float64)
    v = u * np.asarray(task.data["x"].shape[1], np.float64)
    np.testing.assert_allclose(np.asarray(bad.extra["centers"]), (v / v.sum(0)).T @ sent, rtol=1e-4, atol=1e-4)


def test_bad_hyperparameters_are_named():
    for kwargs, name in (
        (dict(lam=-1.0), "lam"),
        (dict(smoother=0.0), "smoother"),
        (dict(estimation_interval=0), "estimation_interval"),
        (dict(local_steps=0), "local_steps"),
        (dict(predict="both"), "predict"),
    ):
        with pytest.raises(ValueError, match=name):
            fedsoft(squared_error, 2, learning_rate=0.1, **kwargs)


def test_cli_runs_fedsoft_and_records_its_options(tmp_path, capsys):
    import json

    from fedjax_clust.cli.commands import main

    small = ["--clusters", "2", "--clients-per-cluster", "5", "--rounds", "4", "--eval-every", "2", "--no-progress"]
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--algorithm",
                "fedsoft",
                "--fedsoft-lambda",
                "0.5",
                "--smoother",
                "0.01",
                "--estimation-interval",
                "2",
                "--predict",
                "cluster",
                "--local-steps",
                "2",
                "--out",
                str(out),
            ]
            + small
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert (
        summary["hparams"] | dict(lam=0.5, smoother=0.01, estimation_interval=2, predict="cluster", local_steps=2)
        == summary["hparams"]
    )
    assert 0.0 <= summary["misclustering"] <= 1.0
    capsys.readouterr()
    assert main(["run", "--algorithm", "ifca-1", "--smoother", "0.1", "--out", str(tmp_path / "bad")] + small) == 2
    assert "--smoother" in capsys.readouterr().err
