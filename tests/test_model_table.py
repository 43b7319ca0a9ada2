"""Server-held models (ModelTable): Global's and Ground-truth's state does not grow with N, a cohort round's
compiled memory does not either, and the models are those of the per-client-rows layout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_clust.algorithms import make_algorithm
from fedjax_clust.core.batching import map_clients
from fedjax_clust.core.model_table import ModelTable, client_model, client_models
from fedjax_clust.core.pytrees import broadcast_to_clients, finite_rows, leading_dim, take_rows
from fedjax_clust.core.state import ClientParams
from fedjax_clust.tasks import synthetic_regression


@pytest.fixture(scope="module")
def task():
    return synthetic_regression(num_clusters=3, clients_per_cluster=5, samples_per_client=8, dim=6, seed=3)


def test_a_table_reads_as_the_rows_it_stands_for():
    models = {"w": jnp.arange(6.0).reshape(3, 2)}
    assignment = jnp.array([2, 0, 0, 1, 2], jnp.int32)
    table = ModelTable(models, assignment)
    rows = client_models(table)
    np.testing.assert_array_equal(rows["w"], np.asarray(models["w"])[[2, 0, 0, 1, 2]])
    assert leading_dim(table) == 5
    picked = take_rows(table, jnp.array([4, 1]))
    assert isinstance(picked, ModelTable) and np.asarray(picked.assignment).tolist() == [2, 0]
    np.testing.assert_array_equal(client_model(table, 3)["w"], [2.0, 3.0])
    bad = ModelTable({"w": models["w"].at[0, 1].set(jnp.nan)}, assignment)
    assert np.asarray(finite_rows(bad)).tolist() == [True, False, False, True, True]
    batch = jnp.arange(10.0).reshape(5, 2)
    fn = lambda p, b: jnp.dot(p["w"], b)  # noqa: E731
    np.testing.assert_array_equal(map_clients(fn, table, batch), jax.vmap(fn)(rows, batch))
    one = ModelTable({"w": models["w"][:1]}, jnp.zeros(5, jnp.int32))
    np.testing.assert_array_equal(map_clients(fn, one, batch), jax.vmap(fn)(client_models(one), batch))


@pytest.mark.parametrize(
    "name, options",
    [
        ("global", dict(momentum=0.9)),
        ("global", dict(participation=4, weighting="examples")),
        ("global", dict(optimizer="adam", momentum=0.9, batch_size=4)),
        ("ground-truth", dict(momentum=0.5, participation=0.5)),
        ("ground-truth", dict(aggregator="median")),
    ],
)
def test_server_models_train_what_per_client_rows_train(task, name, options):
    algorithm = make_algorithm(name, task, learning_rate=0.01, **options)
    params = task.init_params(None)
    server = algorithm.start(params, task.num_clients)
    rows = algorithm.start(ClientParams(broadcast_to_clients(params, task.num_clients)), task.num_clients)
    assert isinstance(server.params, ModelTable) and not isinstance(rows.params, ModelTable)
    step = jax.jit(algorithm.round)
    for t in range(6):
        key = jax.random.PRNGKey(t)
        server, _ = step(server, task.data, key)
        rows, _ = step(rows, task.data, key)
    np.testing.assert_allclose(np.asarray(server.client_params), np.asarray(rows.client_params), rtol=1e-6, atol=1e-6)


def test_the_state_and_a_cohort_rounds_memory_do_not_grow_with_the_population():
    def measure(num_clients):
        task = synthetic_regression(num_clusters=1, clients_per_cluster=num_clients, samples_per_client=4, dim=500)
        algorithm = make_algorithm("global", task, learning_rate=0.01, momentum=0.9, participation=10)
        state = algorithm.start(task.init_params(None), num_clients)
        model_bytes = sum(x.nbytes for x in jax.tree.leaves((state.params.models, state.opt_state.models)))
        compiled = jax.jit(algorithm.round).lower(state, task.data, jax.random.PRNGKey(0)).compile()
        memory = compiled.memory_analysis()
        return model_bytes, memory.temp_size_in_bytes, memory.output_size_in_bytes

    small, large = measure(50), measure(2000)
    assert small[0] == large[0] == 2 * 500 * 4  # one model and its momentum, whatever N
    # a round's temporaries: the 10 participants' work, plus the participant draw's O(N) scores
    assert large[1] - small[1] <= 16 * 2000 + 4096, (small, large)
    # its output: the new state, whose only per-client parts are the two int32 assignments, and the bool
    # participants mask of the metrics: 9 bytes a client (per-client rows: 4 kB a client)
    assert large[2] - small[2] <= 9 * (2000 - 50) + 1024, (small, large)


@pytest.mark.slow  # the slow tier (-m 'not slow' leaves it out): a process / benchmark / script run
def test_the_population_bench_pairs_the_two_layouts(tmp_path):
    import json

    from fedjax_clust.cli import main

    assert main(["bench", "--suite", "population", "--quick", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    rows = report["rows"]
    assert [(r["cohort"], r["layout"]) for r in rows] == [(4, "server"), (4, "rows"), (40, "server"), (40, "rows")]
    for server, per_client in zip(rows[::2], rows[1::2]):
        assert per_client["over_server"] == pytest.approx(per_client["seconds"] / server["seconds"])
        # one model + momentum against 40 of each (+ 40 int32 assignments twice)
        assert per_client["state_bytes"] - 40 * 8 > 30 * (server["state_bytes"] - 40 * 8)
    assert "| 40 | 4 | server |" in (tmp_path / "report.md").read_text()
