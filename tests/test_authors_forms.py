"""The paper authors' variants, each an explicit option checked by hand: the averaged momentum buffer,
pseudo-gradient local steps, oracle / random initial models, feature means from k = 0."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_clust import ClientParams, make_algorithm, simulate, synthetic_regression
from fedjax_clust.core.optim import averaged_momentum
from fedjax_clust.run.driver_options import Output


@pytest.fixture(scope="module")
def task():
    return synthetic_regression(num_clusters=2, clients_per_cluster=3, seed=2)


def exact_grads(task, params):
    """Full-batch gradients of every client at its own model, float64: A^T (A x - y) / n."""
    x, y = np.asarray(task.data["x"], np.float64), np.asarray(task.data["y"], np.float64)
    residual = np.einsum("ind,id->in", x, params) - y
    return np.einsum("ind,in->id", x, residual) / x.shape[1]


def run(algo, task, rounds, params=None):
    state = algo.init(task.init_params(None) if params is None else params, task.num_clients)
    step = jax.jit(algo.round)
    for t in range(rounds):
        state, _ = step(state, task.data, jax.random.PRNGKey(t))
    return np.asarray(state.client_params, np.float64)


def test_averaged_momentum_recurrence():
    transform = averaged_momentum(0.8)
    state = transform.init(jnp.zeros(2))
    m = None
    for v in ([1.0, -2.0], [3.0, 0.5], [0.0, 4.0]):
        out, state = transform.update(jnp.asarray(v), state)
        m = np.asarray(v) if m is None else 0.2 * np.asarray(v) + 0.8 * m  # m_1 = v_1
        np.testing.assert_allclose(out, m, rtol=1e-6)


@pytest.mark.parametrize("form", ["heavy-ball", "average"])
def test_momentum_forms_against_a_float64_reference(task, form):
    """Global (every client steps with the mean gradient) with either buffer, against numpy in float64."""
    lr, beta, rounds = 1e-3, 0.9, 6
    got = run(make_algorithm("global", task, learning_rate=lr, momentum=beta, momentum_form=form), task, rounds)
    x, m = np.zeros((task.num_clients, 10)), None
    for _ in range(rounds):
        g = np.broadcast_to(exact_grads(task, x).mean(0), x.shape)
        if form == "heavy-ball":
            m = g if m is None else g + beta * m
        else:
            m = g if m is None else (1 - beta) * g + beta * m
        x = x - lr * m
    np.testing.assert_allclose(got, x, rtol=1e-4, atol=1e-4)
    # FC with the quantile-1 ball (the mean of all gradients) takes the same steps
    fc = make_algorithm(
        "federated-clustering",
        task,
        learning_rate=lr,
        momentum=beta,
        momentum_form=form,
        quantile=1.0,
        clustering_steps=2,
    )
    np.testing.assert_allclose(run(fc, task, rounds), x, rtol=1e-4, atol=1e-4)


def test_pseudo_gradient_local_steps(task):
    """Radius 0 keeps only the client's own message: with the authors' pseudo-gradient of E steps a round
    is exactly E local steps; with our "sgd" form E local steps plus one clustered step."""
    lr = 2e-3
    local = make_algorithm("local", task, learning_rate=lr, momentum=0.0)
    for form, local_rounds in [("pseudo-gradient", 3), ("sgd", 4)]:
        fc = make_algorithm(
            "federated-clustering",
            task,
            learning_rate=lr,
            radius=0.0,
            local_steps=3,
            local_steps_form=form,
            mesh=None,
            momentum=0.0,
        )
        np.testing.assert_allclose(run(fc, task, 2), run(local, task, 2 * local_rounds), rtol=1e-5, atol=1e-4)
    # quantile 1: every client steps with the mean over clients j of j's pseudo-gradient at its own model
    start = np.random.default_rng(0).normal(size=(task.num_clients, 10))
    fc = make_algorithm(
        "federated-clustering",
        task,
        learning_rate=lr,
        quantile=1.0,
        clustering_steps=1,
        local_steps=2,
        local_steps_form="pseudo-gradient",
        mesh=None,
        momentum=0.0,
    )
    got = run(fc, task, 1, ClientParams(jnp.asarray(start, jnp.float32)))
    x, y = np.asarray(task.data["x"], np.float64), np.asarray(task.data["y"], np.float64)
    want = np.empty_like(start)
    for i in range(task.num_clients):
        messages = []
        for j in range(task.num_clients):
            z = start[i].copy()
            for _ in range(2):
                z = z - lr * x[j].T @ (x[j] @ z - y[j]) / x.shape[1]
            messages.append((start[i] - z) / lr)
        want[i] = start[i] - lr * np.mean(messages, axis=0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_oracle_and_random_initial_models(task):
    key = jax.random.PRNGKey(0)
    optima = np.asarray(task.optima)
    for kind in ("oracle", "random"):
        starts = np.asarray(task.initial_models(kind, key))
        for k in range(2):  # every client of a cluster starts at its cluster's centre
            members = task.true_clusters == k
            assert np.all(starts[members] == starts[members][0])
        if kind == "oracle":
            noise = starts - optima
            assert 0.02 < noise.std() < 0.3 and np.abs(noise).max() < 1.0  # x*_k + N(0, 0.1^2)
        else:
            assert starts.min() >= -1.0 and starts.max() < 2.0
    result = simulate(
        make_algorithm("federated-clustering", task, learning_rate=0.01, quantile=0.5),
        task,
        rounds=2,
        init="oracle",
        output=Output(progress=False),
    )
    assert result.history[0]["mean_sq_dist_to_optimum"] < 1.0  # vs ~3e4 from x = 0
    assert result.summary["init"] == "oracle"
    with pytest.raises(ValueError, match="starts from shared models"):
        simulate(
            make_algorithm("ifca-1", task, learning_rate=0.01),
            task,
            rounds=1,
            init="oracle",
            output=Output(progress=False),
        )
    from fedjax_clust.tasks import make_task

    with pytest.raises(ValueError, match="offers per-client initial models"):
        counter = make_task("counterexample-ifca")
        simulate(
            make_algorithm("local", counter, learning_rate=0.1),
            counter,
            rounds=1,
            init="random",
            output=Output(progress=False),
        )


def test_first_feature_mean():
    paper = synthetic_regression(num_clusters=3, clients_per_cluster=20, samples_per_client=50, seed=0)
    authors = synthetic_regression(
        num_clusters=3, clients_per_cluster=20, samples_per_client=50, seed=0, first_feature_mean=0
    )
    for task, first in ((paper, 1), (authors, 0)):
        x = np.asarray(task.data["x"])
        means = [x[task.true_clusters == k].mean() for k in range(3)]
        np.testing.assert_allclose(means, np.arange(3) + first, atol=0.05)
