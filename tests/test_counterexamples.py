"""Werner et al. Fig. 1: the failing methods fail as the paper says; Federated-Clustering does not."""

import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_experiment

from fedjax_clust import make_algorithm, make_task
from fedjax_clust.core.batching import client_loss
from fedjax_clust.tasks import IFCA_INIT

ROOT = Path(__file__).parent.parent


def final_params(algo, task, rounds, seed=0):
    state = algo.init(task.init_params(None), task.num_clients)
    step = jax.jit(algo.round)
    for t in range(rounds):
        state, metrics = step(state, task.data, jax.random.fold_in(jax.random.PRNGKey(seed), t))
    return np.asarray(state.client_params), state, metrics


def test_myopic_example_gradients_match_paper():
    task = make_task("counterexample-myopic")  # eta = 0.1
    grads = jax.vmap(jax.grad(client_loss(task.example_loss)), (None, 0))(jnp.float32(1.5), task.data)
    np.testing.assert_allclose(grads, [5.0, 5.0, -5.0], rtol=1e-5)  # 1/(2 eta), 1/(2 eta), -1/(2 eta)


def test_myopic_clustering_sticks_at_the_saddle_and_collapses():
    task = make_task("counterexample-myopic")
    algo = make_algorithm("myopic-clustering", task, learning_rate=0.1, num_clusters=2, momentum=0.0)
    params, _, metrics = final_params(algo, task, 150)
    np.testing.assert_allclose(params, [0.0, 1.0, 2.0], atol=1e-5)
    assert len(set(np.asarray(metrics["cluster_labels"]).tolist())) == 1  # all gradients in one cluster


def test_federated_clustering_solves_fig1a():
    task = make_task("counterexample-myopic")
    algo = make_algorithm("federated-clustering", task, learning_rate=0.1, radius=5.0, mesh=None, momentum=0.0)
    params, _, _ = final_params(algo, task, 150)
    np.testing.assert_allclose(params, [0.0, 0.0, 2.0], atol=1e-5)


@pytest.mark.parametrize("name", ["ifca-1", "ifca-2", "hypcluster"])
def test_loss_based_methods_stay_on_cluster_2(name):
    task = make_task("counterexample-ifca")
    algo = make_algorithm(name, task, learning_rate=0.1, init_cluster_params=jnp.asarray(IFCA_INIT))
    params, state, _ = final_params(algo, task, 60)
    np.testing.assert_allclose(params, [0.0, 0.0], atol=1e-6)
    assert np.asarray(state.rows["labels"]).tolist() == [1, 1]  # both picked cluster 2 ...
    np.testing.assert_allclose(state.extra["centers"], IFCA_INIT, atol=1e-6)  # ... and nothing moved


def test_federated_clustering_solves_fig1b():
    task = make_task("counterexample-ifca")
    algo = make_algorithm("federated-clustering", task, learning_rate=0.1, radius=1.0, mesh=None, momentum=0.0)
    params, _, _ = final_params(algo, task, 150)
    np.testing.assert_allclose(params, [-0.5, 0.5], atol=1e-5)


def test_cfl_splits_the_stochastic_client_wrongly_half_the_time():
    task = make_task("counterexample-cfl")
    algo = make_algorithm("cfl", task, learning_rate=0.1, batch_size=1, eps1=0.02, eps2=0.025, max_clusters=2)
    step = jax.jit(algo.round)
    # FedAvg optimum: the mean expected gradient (x + (x - 1/2) + (x - 1/2)) / 3 vanishes at x = 1/3 (equal
    # curvatures: the mean of the optima), not at 1/4 as the paper's text says.
    x_fedavg = (0.0 + 0.5 + 0.5) / 3
    separated, split = 0, 0
    seeds = 40
    for seed in range(seeds):
        state = algo.init(task.init_params(None), task.num_clients)
        for t in range(80):
            state, _ = step(state, task.data, jax.random.fold_in(jax.random.PRNGKey(seed), t))
        labels = np.asarray(state.rows["labels"])
        split += labels.max() == 1
        separated += labels[1] != labels[2]
        if labels[0] == labels[2] != labels[1]:  # the wrong split: {1, 3} and {2}
            assert abs(float(state.client_params[1]) - 0.5) < 1e-3  # client 2 alone at its optimum
    assert x_fedavg == pytest.approx(1 / 3)
    assert split == seeds  # every run reached the splitting criteria
    assert 0.3 <= separated / seeds <= 0.8  # about 1/2: the sign of client 3's sampled gradient decides


@pytest.mark.slow  # benchmark rows / script smoke: run with -m slow
def test_fig1_script(tmp_path, capsys):
    status = run_experiment("fig1_counterexamples.py", ["--out", str(tmp_path), "--rounds", "100", "--cfl-seeds", "6"])
    assert status == 0, capsys.readouterr().err
    out = json.loads((tmp_path / "fig1.json").read_text())
    np.testing.assert_allclose(out["myopic"]["myopic-clustering"]["final"], [0, 1, 2], atol=1e-4)
    np.testing.assert_allclose(out["myopic"]["federated-clustering"]["final"], [0, 0, 2], atol=1e-4)
    for name in ["ifca-1", "ifca-2", "hypcluster"]:
        np.testing.assert_allclose(out["ifca"][name]["final"], [0, 0], atol=1e-6)
    np.testing.assert_allclose(out["ifca"]["federated-clustering"]["final"], [-0.5, 0.5], atol=1e-4)
    assert 0.0 <= out["cfl"]["cfl"]["fraction_2_3_separated"] <= 1.0 and out["cfl"]["cfl"]["seeds"] == 6
    assert (tmp_path / "fig1.png").stat().st_size > 10_000


@pytest.mark.slow  # benchmark rows / script smoke: run with -m slow
def test_fig3_script_smoke(tmp_path, capsys):
    status = run_experiment(
        "fig3_synthetic.py",
        [
            "--out",
            str(tmp_path),
            "--rounds",
            "40",
            "--seeds",
            "1",
            "--lrs",
            "0.1,1000",
            "--settings",
            "4,4",
            "--eval-every",
            "20",
        ],
    )
    assert status == 0, capsys.readouterr().err
    result = json.loads((tmp_path / "fig3.json").read_text())
    assert result["config"]["momentum_form"] == "average" and result["config"]["init"] == "oracle"
    out = result["settings"]["K=4, n_i=4"]
    assert set(out) == {"federated-clustering", "local", "ifca-1", "global", "ground-truth"}
    assert out["ground-truth"]["final"] < out["federated-clustering"]["final"] < out["global"]["final"]
    assert out["federated-clustering"]["rounds"] == [0, 20, 40]
    assert all(r["learning_rate"] != 1000 for r in out.values())  # lr 1000 diverges and is never picked
    assert (tmp_path / "fig3.png").stat().st_size > 10_000
    capsys.readouterr()
    assert run_experiment("fig3_synthetic.py", ["--out", str(tmp_path)]) == 2
    assert "--overwrite" in capsys.readouterr().err


@pytest.mark.slow  # benchmark rows / script smoke: run with -m slow
def test_clipping_iterations_script(tmp_path, capsys):
    status = run_experiment("clipping_iterations.py", ["--out", str(tmp_path), "--repeats", "2", "--iterations", "15"])
    assert status == 0, capsys.readouterr().err
    out = json.loads((tmp_path / "clipping.json").read_text())["sigmas"]
    assert set(out) == {"0.5", "1.0", "2.0", "4.0"}
    for r in out.values():
        curve = np.asarray(r["curve"])
        assert len(curve) == 16 and curve[-1] < curve[0]  # thresholding moves towards the true centre
        assert 1 <= r["elbow"] <= 15
    assert out["4.0"]["curve"][-1] > out["0.5"]["curve"][-1]  # noisier blobs, larger error


def test_elbow_rule():
    sys.path.insert(0, str(ROOT / "experiments"))
    from clipping_iterations import elbow, paper_ratio

    geometric = 1.0 + 0.9 ** np.arange(31)
    assert elbow(geometric) == 8  # 0.1 * 0.9^(l-1) / (1 - 0.9^30) < 0.05 first at l = 8
    assert min(paper_ratio(geometric)) >= 0.1 - 1e-9  # the printed ratio never falls below 1 - r
    assert elbow([3.0, 1.0, 1.0, 1.0]) == 2


@pytest.mark.slow
def test_fig2_assumptions_script(tmp_path, capsys):
    status = run_experiment(
        "fig2_assumptions.py",
        ["--out", str(tmp_path), "--clients-per-cluster", "5", "--rounds", "20", "--eval-every", "10"],
    )
    assert status == 0, capsys.readouterr().err
    out = json.loads((tmp_path / "fig2.json").read_text())
    assert [r["round"] for r in out["rounds"]] == [0, 10, 20]
    assert 0 <= out["A_squared_upper_bound"] < 100 and out["Delta_squared_lower_bound"] > 0
    assert out["A_squared_upper_bound"] == max(r["ratio_max"] for r in out["rounds"])
    assert (tmp_path / "fig2.png").stat().st_size > 10_000


def test_assumption_statistics_by_hand():
    sys.path.insert(0, str(ROOT / "experiments"))
    from fig2_assumptions import assumption_statistics

    from fedjax_clust import synthetic_regression

    task = synthetic_regression(num_clusters=2, clients_per_cluster=3, seed=1)
    params = jnp.asarray(np.random.default_rng(0).normal(size=(6, 10)), jnp.float32)
    ratio, sep = assumption_statistics(task, params)
    grad = jax.grad(client_loss(task.example_loss))
    data = lambda j: jax.tree.map(lambda x: x[j], task.data)
    for i in range(6):
        g = np.stack([np.asarray(grad(params[i], data(j)), np.float64) for j in range(6)])
        mates = [j for j in range(6) if task.true_clusters[j] == task.true_clusters[i]]
        mean = g[mates].mean(0)
        assert float(ratio[i]) == pytest.approx(np.sum((g[i] - mean) ** 2) / np.sum(mean**2), rel=1e-3)
        others = [j for j in range(6) if j not in mates]
        assert float(sep[i]) == pytest.approx(min(np.sum((g[i] - g[j]) ** 2) for j in others), rel=1e-3)
