"""cross_gradients: values against finite differences and an explicit double loop of jax.grad; chunking and
bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_clust import cross_gradients


def mlp_loss(params, batch):
    h = jnp.tanh(batch["x"] @ params["w1"] + params["b1"])
    out = h @ params["w2"]
    return jnp.mean((out - batch["y"]) ** 2) + 0.01 * jnp.sum(params["w1"] ** 2)


def make_problem(n_models, n_clients, seed=0):
    k = jax.random.split(jax.random.PRNGKey(seed), 5)
    params = {
        "w1": jax.random.normal(k[0], (n_models, 3, 4)),
        "b1": jax.random.normal(k[1], (n_models, 4)),
        "w2": jax.random.normal(k[2], (n_models, 4)),
    }
    data = {"x": jax.random.normal(k[3], (n_clients, 5, 3)), "y": jax.random.normal(k[4], (n_clients, 5))}
    return params, data


def double_loop(params, data):
    n_models = params["w1"].shape[0]
    n_clients = data["x"].shape[0]
    g = jax.jit(jax.grad(mlp_loss))
    rows = []
    for i in range(n_models):
        p_i = jax.tree.map(lambda x: x[i], params)
        rows.append([g(p_i, jax.tree.map(lambda x: x[j], data)) for j in range(n_clients)])
    return jax.tree.map(lambda *xs: jnp.stack(xs), *[jax.tree.map(lambda *ys: jnp.stack(ys), *row) for row in rows])


@pytest.mark.parametrize("chunk_size", [None, 1, 3, 7, 100])
def test_matches_double_loop(chunk_size):
    params, data = make_problem(n_models=7, n_clients=5)
    got = cross_gradients(mlp_loss, params, data, chunk_size=chunk_size)
    want = double_loop(params, data)
    for leaf_got, leaf_want in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert leaf_got.shape[:2] == (7, 5)
        np.testing.assert_allclose(leaf_got, leaf_want, rtol=1e-5, atol=1e-5)


def test_chunking_not_dividing_n_models():
    """An exactness test, so in float64: chunking may only change the float rounding of the sums."""
    with jax.enable_x64(True):
        params, data = jax.tree.map(
            lambda x: jnp.asarray(x, jnp.float64), make_problem(n_models=10, n_clients=4, seed=3)
        )
        full = cross_gradients(mlp_loss, params, data)
        chunked = cross_gradients(mlp_loss, params, data, chunk_size=4)  # 10 = 4 + 4 + 2
        for a, b in zip(jax.tree.leaves(full), jax.tree.leaves(chunked)):
            assert a.dtype == jnp.float64
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_chunk_size(bad):
    params, data = make_problem(3, 2)
    with pytest.raises(ValueError, match="chunk_size"):
        cross_gradients(mlp_loss, params, data, chunk_size=bad)


def test_mismatched_leading_axes():
    params, data = make_problem(3, 2)
    params["b1"] = params["b1"][:2]
    with pytest.raises(ValueError, match="params"):
        cross_gradients(mlp_loss, params, data)


def test_values_match_finite_differences():
    """Every entry g_ij = grad f_j(x_i) against central differences of f_j at x_i along random directions,
    in float64: (f_j(x_i + h v) - f_j(x_i - h v)) / 2h = <g_ij, v> + O(h^2)."""
    with jax.enable_x64(True):
        params, data = jax.tree.map(
            lambda x: jnp.asarray(x, jnp.float64), make_problem(n_models=4, n_clients=3, seed=5)
        )
        grads = cross_gradients(mlp_loss, params, data, chunk_size=3)
        rng = np.random.default_rng(0)
        h = 1e-5
        for i in range(4):
            p_i = jax.tree.map(lambda x: x[i], params)
            for j in range(3):
                d_j = jax.tree.map(lambda x: x[j], data)
                for _ in range(2):
                    v = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape)), p_i)
                    plus = mlp_loss(jax.tree.map(lambda p, u: p + h * u, p_i, v), d_j)
                    minus = mlp_loss(jax.tree.map(lambda p, u: p - h * u, p_i, v), d_j)
                    numeric = float(plus - minus) / (2 * h)
                    analytic = sum(
                        float(jnp.vdot(g[i, j], u)) for g, u in zip(jax.tree.leaves(grads), jax.tree.leaves(v))
                    )
                    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)
