"""Myopic-/Momentum-Clustering, IFCA, HypCluster, CFL and the clustering metrics, checked step by step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_clust import make_algorithm, simulate, synthetic_regression
from fedjax_clust.algorithms import (
    cfl,
    hypcluster,
    ifca,
    momentum_clustering,
    myopic_clustering,
)
from fedjax_clust.algorithms.cfl import CFLSplit, max_spanning_tree_split
from fedjax_clust.algorithms.loss_clustering import ClusterInit
from fedjax_clust.core.batching import client_loss
from fedjax_clust.core.weighting import by_examples
from fedjax_clust.ops.clustering import kmeans
from fedjax_clust.ops.metrics import ball_components, best_matching, misclustering_error
from fedjax_clust.run.driver_options import Evaluation, Output


@pytest.fixture(scope="module")
def task():
    return synthetic_regression(num_clusters=3, clients_per_cluster=5, seed=4)


def grads_at(task, params):
    return jax.vmap(jax.grad(client_loss(task.example_loss)))(params, task.data)


def test_kmeans_recovers_separated_blobs():
    rng = np.random.default_rng(0)
    pts = np.concatenate([rng.normal(size=(15, 3)) + c for c in ([0, 0, 0], [20, 0, 0], [0, 20, 0])])
    centers, labels = kmeans(jnp.asarray(pts, jnp.float32), 3, jax.random.PRNGKey(1), steps=5)
    assert misclustering_error(labels, np.repeat([0, 1, 2], 15)) == 0.0
    for k in range(3):
        np.testing.assert_allclose(centers[labels[15 * k]], pts[15 * k : 15 * k + 15].mean(0), atol=1e-4)


def test_misclustering_error_matches_best_relabelling():
    assert misclustering_error([2, 2, 0, 0], [0, 0, 1, 1]) == 0.0
    assert misclustering_error([0, 0, 0, 0], [0, 0, 1, 1]) == 0.5
    assert misclustering_error([0, 1, 2, 3], [0, 0, 1, 1]) == 0.5
    with pytest.raises(ValueError, match="shape"):
        misclustering_error([0, 1], [0, 1, 1])


def test_best_matching_is_a_maximum_weight_matching_as_scipy_finds():
    """Our Hungarian algorithm against scipy's linear_sum_assignment on 600 random matrices (integer confusion
    counts and real weights, tall, wide and square, ties included): the same total weight, a one-to-one matching
    of min(rows, cols) pairs. At 8 x 4,000 (true x inferred clusters) it takes milliseconds."""
    from scipy.optimize import linear_sum_assignment

    rng = np.random.default_rng(3)
    for trial in range(600):
        n, m = (int(x) for x in rng.integers(1, 10, 2))
        weights = rng.integers(0, 6, (n, m)) if trial % 2 else rng.standard_normal((n, m))
        rows, cols = best_matching(weights)
        want_rows, want_cols = linear_sum_assignment(-weights)
        assert len(rows) == len(set(rows.tolist())) == len(set(cols.tolist())) == min(n, m)
        assert weights[rows, cols].sum() == pytest.approx(weights[want_rows, want_cols].sum(), abs=1e-12)
    big = rng.integers(0, 40, (8, 4000))
    rows, cols = best_matching(big)
    want_rows, want_cols = linear_sum_assignment(-big)
    assert big[rows, cols].sum() == big[want_rows, want_cols].sum()


def test_ball_components_are_symmetric_connected_components():
    balls = np.zeros((6, 6), bool)
    balls[0, 2] = balls[3, 1] = balls[4, 5] = True  # one-directional links still connect
    np.testing.assert_array_equal(ball_components(jnp.asarray(balls)), [0, 1, 0, 1, 4, 4])


def test_ball_components_at_a_thousand_clients_match_scipy():
    """The label propagation this replaced crashed XLA:CPU (a segmentation fault) from N = 1,024 under jit, so
    Federated-Clustering with tracked clusters died on the synthetic task's 1,024 clients on one CPU device."""
    from scipy.sparse.csgraph import connected_components

    rng = np.random.default_rng(0)
    balls = rng.random((1024, 1024)) < 1.5 / 1024
    _, want = connected_components(balls, directed=True, connection="weak")
    got = np.asarray(jax.jit(ball_components)(jnp.asarray(balls)))
    smallest = {c: int(np.flatnonzero(want == c)[0]) for c in np.unique(want)}  # each component's smallest index
    np.testing.assert_array_equal(got, [smallest[c] for c in want])


def test_myopic_step_uses_the_kmeans_centre(task):
    algo = myopic_clustering(task.example_loss, 3, learning_rate=1e-3)
    state = algo.init(jnp.ones(10), task.num_clients)
    new, metrics = jax.jit(algo.round)(state, task.data, jax.random.PRNGKey(0))
    g = np.asarray(grads_at(task, state.client_params))
    labels = np.asarray(metrics["cluster_labels"])
    for k in set(labels.tolist()):
        members = labels == k
        np.testing.assert_allclose(
            np.asarray(state.client_params - new.client_params)[members] / 1e-3,
            np.broadcast_to(g[members].mean(0), (members.sum(), 10)),
            rtol=1e-3,
            atol=1e-2,
        )


def test_momentum_clustering_recurrence_eq6(task):
    """With one cluster and quantile 1 the centre is the mean momentum, so the run is checkable by hand."""
    alpha, lr = 0.3, 1e-3
    algo = momentum_clustering(task.example_loss, 1, learning_rate=lr, alpha=alpha, quantile=1.0, clustering_steps=2)
    state = algo.init(jnp.zeros(10), task.num_clients)
    step = jax.jit(algo.round)
    x = np.zeros((task.num_clients, 10))
    m = None
    for t in range(4):
        g = np.asarray(grads_at(task, jnp.asarray(x, jnp.float32)), np.float64)
        m = g if m is None else alpha * g + (1 - alpha) * m  # m_{i,0} = g_i(x_{i,0}) (documented choice)
        x = x - lr * m.mean(0)
        state, metrics = step(state, task.data, jax.random.PRNGKey(t))
        np.testing.assert_allclose(state.rows["momentum"], m, rtol=1e-4, atol=1e-2)
        np.testing.assert_allclose(state.client_params, x, rtol=1e-4, atol=1e-4)
    assert np.asarray(metrics["cluster_labels"]).tolist() == [0] * task.num_clients


def test_ifca_option_1_update(task):
    init = jnp.stack([jnp.zeros(10), jnp.full(10, 50.0)])
    algo = ifca(task.example_loss, 2, learning_rate=1e-3, option=1, cluster_init=ClusterInit(init))
    state = algo.init(jnp.zeros(10), task.num_clients)
    new, metrics = jax.jit(algo.round)(state, task.data, jax.random.PRNGKey(0))
    loss = client_loss(task.example_loss)
    losses = np.array(
        [
            [float(loss(init[k], jax.tree.map(lambda x: x[i], task.data))) for k in range(2)]
            for i in range(task.num_clients)
        ]
    )
    labels = losses.argmin(1)
    np.testing.assert_array_equal(metrics["cluster_labels"], labels)
    for k in range(2):
        members = labels == k
        if members.any():
            g = np.asarray(grads_at(task, jnp.broadcast_to(init[k], (task.num_clients, 10))))[members].mean(0)
            np.testing.assert_allclose(new.extra["centers"][k], init[k] - 1e-3 * g, rtol=1e-5, atol=1e-4)
        else:
            np.testing.assert_allclose(new.extra["centers"][k], init[k])
    np.testing.assert_allclose(new.client_params, np.asarray(new.extra["centers"])[labels])


def test_hypcluster_one_step_equals_ifca_option_1(task):
    init = jnp.stack([jnp.zeros(10), jnp.full(10, 50.0)])
    a = ifca(task.example_loss, 2, learning_rate=1e-3, option=1, cluster_init=ClusterInit(init))
    b = hypcluster(task.example_loss, 2, learning_rate=1e-3, cluster_steps=1, cluster_init=ClusterInit(init))
    sa, _ = jax.jit(a.round)(a.init(jnp.zeros(10), task.num_clients), task.data, jax.random.PRNGKey(0))
    sb, _ = jax.jit(b.round)(b.init(jnp.zeros(10), task.num_clients), task.data, jax.random.PRNGKey(0))
    np.testing.assert_allclose(sa.extra["centers"], sb.extra["centers"], rtol=1e-5, atol=1e-4)


def test_max_spanning_tree_split_minimises_cross_similarity():
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = 6
        s = rng.uniform(-1, 1, (n, n))
        s = (s + s.T) / 2
        part = np.asarray(max_spanning_tree_split(jnp.asarray(s, jnp.float32), jnp.ones(n, bool)))
        assert 0 < part.sum() < n
        best = min(
            max(s[i, j] for i in range(n) for j in range(n) if ((m >> i) & 1) != ((m >> j) & 1))
            for m in range(1, 2**n - 1)
        )
        got = max(s[i, j] for i in range(n) for j in range(n) if part[i] != part[j])
        assert got == pytest.approx(best, abs=1e-6)


def test_cfl_is_fedavg_before_any_split(task):
    algo = cfl(task.example_loss, learning_rate=1e-3, split=CFLSplit(min_rounds=10**6))
    glob = make_algorithm("global", task, learning_rate=1e-3, momentum=0.0)
    a = simulate(algo, task, rounds=5, output=Output(progress=False))
    b = simulate(glob, task, rounds=5, output=Output(progress=False))
    np.testing.assert_allclose(a.state.client_params, b.state.client_params, rtol=1e-5, atol=1e-4)
    assert a.history[-1]["misclustering"] == pytest.approx(2 / 3)


def test_cfl_holds_one_model_per_cluster_slot_and_new_clusters_take_free_slots_under_participation(task):
    """CFL's clients own no model: ``params`` is a table of ``max_clusters`` slot models (N without a bound)
    and the clients' labels, whatever N. A split takes the next free slot, which the server counts: with
    partial participation the largest label among a round's clients need not be the largest there is, so
    deriving the slot from them would hand an existing cluster's slot to a new one."""
    from fedjax_clust.core.model_table import table_rows

    bounded = make_algorithm("cfl", task, learning_rate=1e-3, max_clusters=3)
    for n in (task.num_clients, 10 * task.num_clients):
        assert table_rows(bounded.init(task.init_params(None), n).params) == 3
    assert table_rows(make_algorithm("cfl", task, learning_rate=1e-3).init(task.init_params(None), 15).params) == 15
    # splits as often as the criteria allow, 4 of 15 clients a round; a robust aggregate on the cohort too
    for options in ({}, {"aggregator": "median"}):
        algo = make_algorithm(
            "cfl", task, learning_rate=1e-3, participation=4, min_rounds=0, eps1=1e9, eps2=1e-9, **options
        )
        state = simulate(
            algo, task, rounds=12, evaluation=Evaluation(eval_every=12), output=Output(progress=False)
        ).state
        labels, clusters = np.asarray(state.rows["labels"]), int(state.extra["clusters"])
        assert clusters >= 4, options  # several splits happened
        assert sorted(set(labels.tolist())) == list(range(clusters)), options  # each in its own slot
        np.testing.assert_array_equal(labels, np.asarray(state.params.assignment))


def test_every_clustering_algorithm_logs_misclustering(task):
    for name, kw in [
        ("myopic-clustering", {}),
        ("momentum-clustering", dict(quantile=0.3)),
        ("ifca-1", {}),
        ("ifca-2", {}),
        ("hypcluster", {}),
        ("cfl", {}),
        ("federated-clustering", dict(quantile=0.3)),
    ]:  # FC: its default up to 4,096 clients
        algo = make_algorithm(name, task, learning_rate=1e-3, **kw)
        row = simulate(
            algo, task, rounds=3, evaluation=Evaluation(eval_every=3), output=Output(progress=False)
        ).history[-1]
        assert 0.0 <= row["misclustering"] <= 1.0, name


def test_fc_tracks_clusters_by_default_up_to_the_stated_size_and_when_the_truth_is_known(task):
    """``track_clusters=None``: on for a task that knows its true clusters and a round of at most
    TRACK_CLUSTERS_UP_TO clients; an explicit value wins; the builder alone (no task) leaves it off."""
    import dataclasses

    from fedjax_clust.algorithms.federated_clustering import TRACK_CLUSTERS_UP_TO, federated_clustering

    track = lambda t, **kw: make_algorithm("federated-clustering", t, learning_rate=0.01, **kw).hparams[  # noqa: E731
        "track_clusters"
    ]
    assert track(task) is True and track(task, track_clusters=False) is False
    assert track(dataclasses.replace(task, true_clusters=None)) is False
    large = synthetic_regression(
        num_clusters=1, clients_per_cluster=TRACK_CLUSTERS_UP_TO + 1, dim=2, samples_per_client=2, seed=0
    )
    assert track(large) is False and track(large, track_clusters=True) is True
    assert track(large, participation=TRACK_CLUSTERS_UP_TO) is True  # what a round sees decides
    assert track(task, subgroups=2) is False  # balls inside random groups: no clustering to score
    assert federated_clustering(task.example_loss, learning_rate=0.01).hparams["track_clusters"] is False
    untracked = make_algorithm("federated-clustering", task, learning_rate=1e-3, track_clusters=False)
    assert (
        "misclustering"
        not in simulate(
            untracked, task, rounds=3, evaluation=Evaluation(eval_every=3), output=Output(progress=False)
        ).history[-1]
    )


def test_fc_ball_components_find_the_clusters():
    task = synthetic_regression(num_clusters=3, clients_per_cluster=8, seed=0)
    algo = make_algorithm(
        "federated-clustering", task, learning_rate=0.01, momentum=0.9, quantile=0.25, track_clusters=True
    )
    assert (
        simulate(algo, task, rounds=40, evaluation=Evaluation(eval_every=40), output=Output(progress=False)).history[
            -1
        ]["misclustering"]
        == 0.0
    )


def test_ditto_limits(task):
    loc = make_algorithm("local", task, learning_rate=1e-3, momentum=0.0)
    d0 = make_algorithm("ditto", task, learning_rate=1e-3, lam=0.0)
    np.testing.assert_allclose(
        simulate(d0, task, rounds=6, output=Output(progress=False)).state.client_params,
        simulate(loc, task, rounds=6, output=Output(progress=False)).state.client_params,
        rtol=1e-5,
        atol=1e-4,
    )
    # one round by hand: v = v0 - lr (g_i(v0) + lam (v0 - w0)), w = w0 - lr mean_i g_i(w0)
    algo = make_algorithm("ditto", task, learning_rate=1e-3, lam=2.0)
    state = algo.init(jnp.ones(10), task.num_clients)
    state = state._replace(params=state.client_params + jnp.arange(task.num_clients, dtype=jnp.float32)[:, None])
    new, _ = jax.jit(algo.round)(state, task.data, jax.random.PRNGKey(0))
    g = np.asarray(grads_at(task, state.client_params))
    np.testing.assert_allclose(
        new.client_params, state.client_params - 1e-3 * (g + 2.0 * (state.client_params - 1.0)), rtol=1e-5, atol=1e-4
    )
    gw = np.asarray(grads_at(task, jnp.ones((task.num_clients, 10)))).mean(0)
    np.testing.assert_allclose(new.extra["global"], 1.0 - 1e-3 * gw, rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError, match="lam"):
        make_algorithm("ditto", task, learning_rate=1e-3, lam=-1.0)


def test_classification_task_and_knn_per():
    from fedjax_clust import make_task
    from fedjax_clust.algorithms.knn_per import knn_interpolated_probs

    task = make_task(
        "classification",
        num_clusters=2,
        clients_per_cluster=3,
        samples_per_client=12,
        test_samples_per_client=7,
        num_classes=3,
        seed=0,
    )
    algo = make_algorithm("knn-per", task, learning_rate=0.1, lam=0.5, k=3)
    state = algo.init(task.init_params(None), task.num_clients)
    w = jax.tree.map(lambda x: x[0], state.client_params)
    probs = np.asarray(
        knn_interpolated_probs(task.features, task.logits, w, task.data, task.test_data["x"], k=3, lam=0.5)
    )
    for i in range(task.num_clients):  # by hand: 3 nearest training points in feature space, uniform votes
        keys = np.asarray(task.features(w, task.data["x"][i]))
        for q in range(7):
            query = np.asarray(task.features(w, task.test_data["x"][i, q]))
            nearest = np.argsort(np.sum((keys - query) ** 2, axis=1))[:3]
            votes = np.bincount(np.asarray(task.data["y"][i])[nearest], minlength=3) / 3
            model = np.asarray(jax.nn.softmax(task.logits(w, task.test_data["x"][i, q])))
            np.testing.assert_allclose(probs[i, q], 0.5 * votes + 0.5 * model, atol=1e-5)
    # lambda = 0 is the global model's accuracy; kNN-Per needs a feature model
    row = simulate(
        make_algorithm("knn-per", task, learning_rate=0.1, lam=0.0, k=3), task, rounds=5, output=Output(progress=False)
    ).history[-1]
    assert row["test_accuracy"] == pytest.approx(row["global_test_accuracy"])
    with pytest.raises(ValueError, match="feature model"):
        make_algorithm("knn-per", synthetic_regression(clients_per_cluster=2), learning_rate=0.1)
    with pytest.raises(ValueError, match="k must"):
        make_algorithm("knn-per", task, learning_rate=0.1, k=100)


def test_private_labels_defeat_the_global_model():
    from fedjax_clust import make_task

    task = make_task("classification", num_clusters=3, clients_per_cluster=4, seed=1)
    acc = {}
    for name, kw in [
        ("global", {}),
        ("ground-truth", {}),
        ("federated-clustering", dict(quantile=0.2)),
        ("knn-per", dict(lam=0.9)),
    ]:
        algo = make_algorithm(name, task, learning_rate=0.1, momentum=0.9, batch_size=10, **kw)
        acc[name] = simulate(
            algo, task, rounds=100, evaluation=Evaluation(eval_every=100), output=Output(progress=False)
        ).history[-1]["test_accuracy"]
    assert acc["global"] < 0.7 < acc["federated-clustering"]
    assert acc["ground-truth"] > 0.9 and acc["knn-per"] > 0.9


@pytest.mark.parametrize("task_name", ["synthetic", "classification"])
@pytest.mark.parametrize("name", ["ifca-1", "ifca-2", "hypcluster", "fedsoft"])
def test_random_initial_cluster_models_follow_the_run_seed(name, task_name):
    """IFCA's, HypCluster's and FedSoft's K random starting models come from the run's key (``init_key`` of
    PRNGKey(seed)): two run seeds start from different models, one seed from identical ones; a builder ``seed``
    fixes them whatever the run's seed. On the classification task (a model with logits) they are K draws of the
    task's initialiser; on the synthetic task the shared start plus N(0, init_scale^2) noise."""
    from fedjax_clust import make_task
    from fedjax_clust.core.keys import init_key

    task = make_task(task_name, num_clusters=2, clients_per_cluster=3, seed=0)
    params = task.init_params(jax.random.PRNGKey(0))

    def centers(algo, seed):
        state = algo.start(params, task.num_clients, init_key(jax.random.PRNGKey(seed)))
        return np.concatenate([np.ravel(x) for x in jax.tree.leaves(state.extra["centers"])])

    drawn = make_algorithm(name, task, learning_rate=0.01)
    np.testing.assert_array_equal(centers(drawn, 0), centers(drawn, 0))
    assert not np.allclose(centers(drawn, 0), centers(drawn, 1))
    fixed = make_algorithm(name, task, learning_rate=0.01, seed=3)
    np.testing.assert_array_equal(centers(fixed, 0), centers(fixed, 1))
    assert fixed.hparams["seed"] == 3 and drawn.hparams["seed"] is None


def test_a_two_argument_init_still_starts():
    """A plugin's init(params, num_clients) takes no key: ``start`` calls it without one."""
    from fedjax_clust.core.algorithm import FederatedAlgorithm, takes_key

    def init(params, num_clients):
        return ("started", num_clients)

    algo = FederatedAlgorithm("plain", init, lambda state, data, key: (state, {}), {})
    assert not takes_key(init) and algo.start(None, 3, jax.random.PRNGKey(0)) == ("started", 3)
    assert takes_key(lambda params, num_clients, key=None: None)


def test_hypcluster_weighs_members_uniformly_or_by_examples():
    """The docstring's two-member example: model a x with x = 1, loss (a x - y)^2 / 2, a = 0, learning rate 1,
    one full-batch step; one member holds y = 0, the other three examples y = 1 (padded, masked). The uniform
    mean of the members' gradients (0 and -1) gives a = 0.5; SGD on the pooled examples gives 0.75, and so does
    the mean weighted by the members' example counts."""
    data = {
        "x": jnp.ones((2, 3)),
        "y": jnp.array([[0.0, 0, 0], [1, 1, 1]]),
        "mask": jnp.array([[True, False, False], [True, True, True]]),
    }

    def example_loss(a, example):
        return 0.5 * (a * example["x"] - example["y"]) ** 2

    algo = hypcluster(example_loss, 1, learning_rate=1.0, cluster_steps=1, cluster_init=ClusterInit(jnp.zeros((1,))))
    state, _ = jax.jit(algo.round)(algo.init(jnp.zeros(()), 2), data, jax.random.PRNGKey(0))
    assert float(state.extra["centers"][0]) == pytest.approx(0.5)
    pooled = float(jnp.sum(jnp.where(data["mask"], data["y"], 0.0)) / jnp.sum(data["mask"]))  # 1 step of lr 1
    assert pooled == pytest.approx(0.75)
    weighted = hypcluster(
        example_loss,
        1,
        learning_rate=1.0,
        cluster_steps=1,
        cluster_init=ClusterInit(jnp.zeros((1,))),
        weighting=by_examples(data),
    )  # weighting="examples": n_i = 1 and 3
    state, _ = jax.jit(weighted.round)(weighted.init(jnp.zeros(()), 2), data, jax.random.PRNGKey(0))
    assert float(state.extra["centers"][0]) == pytest.approx(pooled)
