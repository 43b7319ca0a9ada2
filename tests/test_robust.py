"""Byzantine robustness: robust aggregators against NumPy references, attacks, who attacks, and attackers inside
the rounds (honest models stay finite, Federated-Clustering resists what breaks FedAvg)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from references import geometric_median
from scipy.stats import norm

import fedjax_clust as fc
from fedjax_clust.algorithms import make_algorithm
from fedjax_clust.cli.commands import main
from fedjax_clust.core.batching import client_loss
from fedjax_clust.ops.crossgrad import cross_gradients
from fedjax_clust.robust import (
    AGGREGATORS,
    ATTACKS,
    DATA_ATTACKS,
    byzantine_mask,
    make_aggregator,
    make_attack,
    mark_byzantine,
    replace_byzantine,
)
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.simulate import simulate
from fedjax_clust.tasks import synthetic_regression

RNG = np.random.default_rng(0)
X = RNG.standard_normal((12, 5)).astype(np.float32) * 3.0 + 1.0
MEMBERS = np.array([True] * 9 + [False] * 3)


def _ref_krum(x, f, multi):
    n = len(x)
    d = ((x[:, None] - x[None]) ** 2).sum(-1)
    k = max(1, min(n - f - 2, n - 1))
    scores = np.array([np.sort(np.delete(d[i], i))[:k].sum() for i in range(n)])
    if not multi:
        return x[np.argmin(scores)]
    return x[np.argsort(scores, kind="stable")[: max(n - f, 1)]].mean(0)


def _ref_centered_clipping(x, tau, iterations):
    v = np.median(x, axis=0)
    for _ in range(iterations):
        y = x - v
        norms = np.linalg.norm(y, axis=1, keepdims=True)
        v = v + (y * np.minimum(1.0, tau / np.maximum(norms, 1e-30))).mean(0)
    return v


def _references(x):
    x = x.astype(np.float64)
    c = len(x)
    t = int(np.floor(0.2 * c + 1e-6))
    s = np.sort(x, axis=0)
    return {
        "mean": x.mean(0),
        "median": np.median(x, axis=0),
        ("trimmed-mean", 0.2): s[t : c - t].mean(0),
        "geometric-median": geometric_median(x),
        ("krum", 0.25): _ref_krum(x, int(0.25 * c), False),
        ("multi-krum", 0.25): _ref_krum(x, int(0.25 * c), True),
        ("centered-clipping", 2.0): _ref_centered_clipping(x, 2.0, 3),
    }


def _build(key):
    if isinstance(key, str):
        return make_aggregator(key)
    name, value = key
    option = {"trimmed-mean": "beta", "krum": "fraction", "multi-krum": "fraction", "centered-clipping": "tau"}[name]
    return make_aggregator(name, **{option: value})


@pytest.mark.parametrize("key", list(_references(X[:9])))
def test_aggregators_match_numpy_over_members(key):
    """Every rule over the members equals its float64 NumPy reference on those rows alone; the non-members
    (here huge or NaN) and a NaN member row change nothing."""
    x = X.copy()
    x[9:] = 1e6
    x[10, 2] = np.nan
    expected = _references(X[:9])[key]
    got = jax.jit(lambda m, mem: _build(key)(m, mem))(jnp.asarray(x), jnp.asarray(MEMBERS))
    np.testing.assert_allclose(np.asarray(got), expected, rtol=2e-5, atol=2e-5)
    for bad in (np.nan, np.inf, -np.inf):  # a non-finite message is dropped, whatever the rule
        with_bad = np.concatenate([X[:9], np.full((1, 5), bad, np.float32)])
        got_bad = _build(key)(jnp.asarray(with_bad))
        np.testing.assert_allclose(np.asarray(got_bad), expected, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", AGGREGATORS)
def test_aggregators_treat_leaves_as_one_message(name):
    """A message split over two leaves is aggregated as the concatenated vector."""
    flat = _build(name if name in ("mean", "median", "geometric-median") else (name, 0.2))
    tree = flat({"a": jnp.asarray(X[:, :2]), "b": jnp.asarray(X[:, 2:])})
    whole = flat(jnp.asarray(X))
    np.testing.assert_allclose(np.concatenate([tree["a"], tree["b"]]), whole, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", [a for a in AGGREGATORS if a != "mean"])
def test_robust_aggregators_resist_outliers(name):
    """20% of the messages at 1e4: the robust rules stay near the honest rows' mean (the trimmed mean when it
    trims more than the attackers' share), the mean does not."""
    honest = RNG.standard_normal((40, 6)).astype(np.float32) * 0.1 + 2.0
    x = np.concatenate([honest, np.full((10, 6), 1e4, np.float32)])
    agg = make_aggregator(name, beta=0.25) if name == "trimmed-mean" else make_aggregator(name)
    assert np.linalg.norm(np.asarray(agg(jnp.asarray(x))) - honest.mean(0)) < 1.0
    assert np.linalg.norm(np.asarray(make_aggregator("mean")(jnp.asarray(x))) - honest.mean(0)) > 100


def _outlier_rows(seed):
    """15 rows near 1, one of them scaled by 1e9: the mean is dragged ~7e7 away, the geometric median is not."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((15, 6)).astype(np.float32) + 1.0
    x[4] *= 1e9
    return x


def _weiszfeld_from_mean(x, steps, nu=1e-6):
    """The rule before the fix: ``steps`` smoothed Weiszfeld steps from the mean (float64)."""
    x = x.astype(np.float64)
    z = x.mean(0)
    for _ in range(steps):
        w = 1.0 / np.maximum(np.linalg.norm(x - z, axis=1), nu)
        z = (w[:, None] * x).sum(0) / w.sum()
    return z


@pytest.mark.parametrize("seed", range(3))
def test_geometric_median_converges_despite_a_far_outlier(seed):
    """One of 15 rows scaled by 1e9: the converged float64 geometric median (10,000 Weiszfeld steps) is met to
    a relative 1e-5 in float32, over all rows and over a member mask that keeps the outlier; 8 steps from
    the mean (the rule before) stayed percents away."""
    x = _outlier_rows(seed)
    want = geometric_median(x)
    agg = jax.jit(make_aggregator("geometric-median"))
    got = np.asarray(agg(jnp.asarray(x)))
    assert np.linalg.norm(got - want) <= 1e-5 * np.linalg.norm(want)
    assert np.linalg.norm(_weiszfeld_from_mean(x, 8) - want) >= 0.01 * np.linalg.norm(want)
    members = np.ones(15, bool)
    members[[0, 9]] = False
    got = np.asarray(jax.jit(make_aggregator("geometric-median"))(jnp.asarray(x), jnp.asarray(members)))
    want = geometric_median(x[members])
    assert np.linalg.norm(got - want) <= 1e-5 * np.linalg.norm(want)


def test_geometric_median_float64_start_cap_and_tolerance():
    """With jax_enable_x64: a tight tolerance meets the converged reference to 1e-10; the cap bounds the steps
    (iterations=1 is one Weiszfeld step from the mean)."""
    x = _outlier_rows(7).astype(np.float64)
    x[:, 0] += np.linspace(0, 1, 15)
    want = geometric_median(x)
    with jax.enable_x64(True):
        tight = np.asarray(make_aggregator("geometric-median", tolerance=1e-13)(jnp.asarray(x)))
        one = np.asarray(make_aggregator("geometric-median", iterations=1)(jnp.asarray(x)))
    assert tight.dtype == np.float64
    assert np.linalg.norm(tight - want) <= 1e-10 * np.linalg.norm(want)
    np.testing.assert_allclose(one, _weiszfeld_from_mean(x, 1), rtol=1e-13, atol=0)
    with pytest.raises(ValueError, match="tolerance"):
        make_aggregator("geometric-median", tolerance=0.0)


def test_centered_clipping_tau_follows_the_messages_dtype():
    """An explicit tau is used in the messages' dtype: under jax_enable_x64, float64 messages are clipped at
    tau = 1/3 in float64 (float32(1/3) is off by 1e-8 relative, 1e4 times the tolerance here)."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((11, 4)) * 10.0
    want = _ref_centered_clipping(x, 1.0 / 3.0, 3)
    with jax.enable_x64(True):
        got = np.asarray(make_aggregator("centered-clipping", tau=1.0 / 3.0)(jnp.asarray(x)))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_aggregator_all_members_unusable_is_nan_and_bad_options_raise():
    for name in AGGREGATORS:
        out = make_aggregator(name)(jnp.full((4, 3), jnp.nan))
        assert np.all(np.isnan(np.asarray(out))), name
    with pytest.raises(ValueError, match="unknown aggregator"):
        make_aggregator("average")
    with pytest.raises(ValueError, match="beta"):
        make_aggregator("trimmed-mean", beta=0.5)
    with pytest.raises(ValueError, match="takes no option"):
        make_aggregator("median", beta=0.1)
    with pytest.raises(ValueError, match="tau"):
        make_aggregator("centered-clipping", tau=0.0)


BYZ = np.array([False, True, False, False, True, False, False, False])
MSG = RNG.standard_normal((8, 3, 2)).astype(np.float32)


@pytest.mark.parametrize("name", [a for a in ATTACKS if a not in ("ball-edge",) + DATA_ATTACKS])
def test_attacks_replace_only_byzantine_rows_in_either_layout(name):
    attack = make_attack(name)
    key = jax.random.PRNGKey(3)
    out = np.asarray(attack({"w": jnp.asarray(MSG)}, jnp.asarray(BYZ), key)["w"])
    np.testing.assert_array_equal(out[~BYZ], MSG[~BYZ])
    assert not np.array_equal(out[BYZ], MSG[BYZ])
    if name != "gaussian":  # the noise is drawn in the layout it is given
        last = np.asarray(attack({"w": jnp.asarray(np.moveaxis(MSG, 0, -1))}, jnp.asarray(BYZ), key, axis=-1)["w"])
        np.testing.assert_array_equal(np.moveaxis(last, -1, 0), out)


def test_attack_formulas():
    x, byz = jnp.asarray(MSG), jnp.asarray(BYZ)
    honest = MSG[~BYZ].astype(np.float64)
    n, f = 8, 2
    z = norm.ppf((n - (np.floor(n / 2 + 1) - f)) / n)
    np.testing.assert_allclose(
        np.asarray(make_attack("alie")(x, byz, None))[1], honest.mean(0) - z * honest.std(0), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        np.asarray(make_attack("ipm", epsilon=0.5)(x, byz, None))[4], -0.5 * honest.mean(0), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(np.asarray(make_attack("large-gradient")(x, byz, None))[4], 100 * MSG[4], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(make_attack("bit-flip")(x, byz, None))[1], -MSG[1])
    center = jnp.asarray([3.0, 4.0])
    edge = np.asarray(
        make_attack("ball-edge", margin=0.1)(jnp.asarray(MSG[:, 0]), byz, None, center=center, radius=2.0)
    )
    np.testing.assert_allclose(edge[1], np.array([3.0, 4.0]) - 0.9 * 2.0 * np.array([0.6, 0.8]), rtol=1e-6)
    with pytest.raises(ValueError, match="centre and radius"):
        make_attack("ball-edge")(x, byz, None)
    with pytest.raises(ValueError, match="unknown attack"):
        make_attack("flip")
    with pytest.raises(ValueError, match="takes no option"):
        make_attack("nan", scale=2.0)


def test_byzantine_mask_counts():
    clusters = np.repeat(np.arange(4), 10)
    mask = byzantine_mask(40, per_cluster=3, true_clusters=clusters, seed=1)
    assert [int(mask[clusters == k].sum()) for k in range(4)] == [3, 3, 3, 3]
    mask = byzantine_mask(40, fraction=0.2, true_clusters=clusters)
    assert [int(mask[clusters == k].sum()) for k in range(4)] == [2, 2, 2, 2]
    assert byzantine_mask(50, fraction=0.1).sum() == 5
    with pytest.raises(ValueError, match="exactly one"):
        byzantine_mask(10, fraction=0.1, per_cluster=1)
    with pytest.raises(ValueError, match="no honest"):
        byzantine_mask(40, per_cluster=10, true_clusters=clusters)
    with pytest.raises(ValueError, match="known clusters"):
        byzantine_mask(40, per_cluster=1)


def test_the_attack_free_point_of_a_sweep_keeps_an_all_honest_mask():
    """mark_byzantine(fraction=0): the task as it was, or with all_honest_mask an all-False mask recorded in its
    config (a sweep's beta = 0 beside attacked points); a share that rounds to nobody is then an error."""
    clean = synthetic_regression(num_clusters=2, clients_per_cluster=4, seed=0)
    assert mark_byzantine(clean, fraction=0.0) is clean
    zero = mark_byzantine(clean, fraction=0.0, seed=3, all_honest_mask=True)
    assert zero.byzantine.dtype == bool and not zero.byzantine.any() and zero.byzantine.shape == (8,)
    assert zero.config["byzantine_fraction"] == 0.0 and zero.config["byzantine_seed"] == 3
    assert mark_byzantine(clean, fraction=0.25, all_honest_mask=True).byzantine.sum() == 2
    with pytest.raises(ValueError, match="marks no client"):
        mark_byzantine(clean, fraction=0.05, all_honest_mask=True)


@pytest.fixture(scope="module")
def task():
    return synthetic_regression(num_clusters=4, clients_per_cluster=8)


def test_fc_attackers_answer_every_row(task):
    """With a ball holding everyone and one clustering step, v_i is the mean of row i's messages: the
    attackers' answers are 100 times their honest cross-gradients g_j(x_i)."""
    bt = mark_byzantine(task, fraction=0.25, seed=2)
    algo = make_algorithm(
        "federated-clustering",
        bt,
        learning_rate=1.0,
        radius=1e30,
        clustering_steps=1,
        mesh=None,
        attack="large-gradient",
    )
    params = jnp.asarray(RNG.standard_normal((task.num_clients, 10)).astype(np.float32))
    state = algo.init(params[0], task.num_clients)._replace(params=params)
    new, _ = jax.jit(algo.round)(state, task.data, jax.random.PRNGKey(0))
    g = np.asarray(cross_gradients(client_loss(task.example_loss), params, task.data), np.float64)  # [N, N, D]
    scale = np.where(bt.byzantine, 100.0, 1.0)
    expected = np.asarray(params, np.float64) - (g * scale[None, :, None]).mean(1)
    np.testing.assert_allclose(np.asarray(new.client_params), expected, rtol=1e-4, atol=1e-3)


ROBUST_RUNS = [
    ("federated-clustering", dict(quantile=0.3)),
    ("federated-clustering", dict(radius=50.0)),
    ("federated-clustering", dict(quantile=0.3, subgroups=2)),
    ("local", {}),
    ("ground-truth", {}),
] + [("global", dict(aggregator=a)) for a in AGGREGATORS]
# every other algorithm once, with a robust rule where the server aggregates (IFCA also with the mean)
OTHER_RUNS = [
    ("ifca-1", {}),
    ("ifca-1", dict(aggregator="median")),
    ("ifca-2", dict(aggregator="trimmed-mean")),
    ("hypcluster", dict(aggregator="geometric-median")),
    ("cfl", dict(aggregator="krum", min_rounds=0, max_clusters=3)),
    ("ditto", dict(aggregator="multi-krum")),
    ("myopic-clustering", {}),
    ("momentum-clustering", dict(quantile=0.3)),
    ("three-stage", dict(erm_rounds=1, optimizer="fedavg")),
    ("fedsoft", dict(predict="cluster")),
    ("srfca", dict(threshold=1e3, one_shot_rounds=1, refine_iterations=1, distance="cross-loss")),
    ("srfca", dict(threshold=50.0, one_shot_rounds=1, refine_iterations=1)),
]


INFINITE_RUNS = [
    ROBUST_RUNS[0] + ("inf",),
    ROBUST_RUNS[1] + ("neg-inf",),
    ("global", dict(aggregator="median"), "inf"),
]  # every aggregator meets +-inf in the unit test


def _mixed_nonfinite(messages, byzantine, key, *, axis=0, center=None, radius=None):
    """Attackers sending NaN, +inf and -inf in turn (one run meets all three)."""
    turn = jnp.cumsum(byzantine) % 3
    for value, which in ((jnp.nan, 0), (jnp.inf, 1), (-jnp.inf, 2)):
        messages = replace_byzantine(
            messages, byzantine & (turn == which), jax.tree.map(lambda x: jnp.full((), value, x.dtype), messages), axis
        )
    return messages


_mixed_nonfinite.attack_name = "nan-inf-mix"


@pytest.mark.parametrize(
    "name,options,attack",
    [(n, o, "nan") for n, o in ROBUST_RUNS] + INFINITE_RUNS + [(n, o, _mixed_nonfinite) for n, o in OTHER_RUNS],
)
def test_nonfinite_attackers_never_reach_honest_models(task, name, options, attack):
    bt = mark_byzantine(task, fraction=0.25, seed=0)
    algo = make_algorithm(name, bt, learning_rate=0.01, momentum=0.9, attack=attack, **options)
    state = algo.init(bt.init_params(None), bt.num_clients)
    step = jax.jit(algo.round)
    for t in range(2):
        state, _ = step(state, bt.data, jax.random.PRNGKey(t))
    params = np.asarray(state.client_params)
    assert np.isfinite(params[bt.honest]).all()


def test_fc_resists_large_gradients_that_break_fedavg():
    """Theorem 1's robustness on the synthetic task: with 20% large-gradient attackers, FC's honest mean
    squared distance to the optimum stays within a small factor of its attack-free value; FedAvg (Global,
    the mean) diverges."""
    clean = synthetic_regression(num_clusters=4, clients_per_cluster=10)
    attacked = mark_byzantine(clean, fraction=0.2, seed=0)

    def final(name, t, **kw):
        algo = make_algorithm(name, t, learning_rate=0.01, momentum=0.9, **kw)
        run = simulate(
            algo,
            t,
            rounds=120,
            evaluation=Evaluation(eval_every=120, on_nonfinite="warn"),
            output=Output(progress=False),
        )
        return run.history[-1]

    fc_clean = final("federated-clustering", clean, quantile=0.2)["mean_sq_dist_to_optimum"]
    fc_attacked = final("federated-clustering", attacked, quantile=0.2, attack="large-gradient")
    assert fc_attacked["mean_sq_dist_to_optimum"] <= 3.0 * fc_clean + 1e-3
    assert "nonfinite_clients" not in fc_attacked
    avg_clean = final("global", clean)["mean_sq_dist_to_optimum"]
    avg_attacked = final("global", attacked, attack="large-gradient")
    assert avg_attacked.get("nonfinite_clients") == 1.0 or avg_attacked["mean_sq_dist_to_optimum"] > 10 * avg_clean


def test_metrics_count_honest_clients_only(task, tmp_path):
    bt = mark_byzantine(task, per_cluster=2, seed=0)
    algo = make_algorithm("local", bt, learning_rate=0.01, attack="sign-flip")
    run = simulate(
        algo, bt, rounds=2, evaluation=Evaluation(eval_every=2), output=Output(progress=False, out_dir=str(tmp_path))
    )
    expected = bt.evaluate(run.state.client_params, jnp.asarray(bt.honest))
    assert run.history[-1]["mean_sq_dist_to_optimum"] == pytest.approx(
        float(expected["mean_sq_dist_to_optimum"]), rel=1e-6
    )
    assert run.summary["byzantine_clients"] == 8 and run.summary["num_clients"] == 32


def test_algorithm_and_cli_refuse_bad_adversaries(task, tmp_path):
    bt = mark_byzantine(task, fraction=0.25)
    with pytest.raises(ValueError, match="mark them"):
        make_algorithm("global", task, learning_rate=0.1, attack="nan")
    with pytest.raises(ValueError, match="give the attack"):
        make_algorithm("global", bt, learning_rate=0.1)
    with pytest.raises(ValueError, match="classification task"):
        make_algorithm("ifca-1", bt, learning_rate=0.1, attack="label-flip")
    with pytest.raises(ValueError, match="Threshold-Clustering"):
        make_algorithm("global", bt, learning_rate=0.1, attack="ball-edge")
    with pytest.raises(ValueError, match="no aggregator"):
        make_algorithm("federated-clustering", task, learning_rate=0.1, quantile=0.2, aggregator="median")
    base = ["run", "--clients-per-cluster", "5", "--rounds", "2", "--out", str(tmp_path), "--no-progress"]
    assert main(base + ["--algorithm", "global", "--attack", "nan"]) == 2
    assert main(base + ["--algorithm", "global", "--byzantine-fraction", "0.2"]) == 2
    assert main(base + ["--algorithm", "federated-clustering", "--aggregator", "median"]) == 2
    assert main(base + ["--algorithm", "global", "--attack", "nan", "--byzantine-per-cluster", "5"]) == 2


def test_cli_runs_an_attacked_fc(tmp_path):
    import json

    argv = [
        "run",
        "--algorithm",
        "federated-clustering",
        "--clients-per-cluster",
        "6",
        "--rounds",
        "3",
        "--eval-every",
        "3",
        "--attack",
        "ball-edge",
        "--byzantine-fraction",
        "0.34",
        "--out",
        str(tmp_path),
        "--no-progress",
    ]
    assert main(argv) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["hparams"]["attack"] == "ball-edge" and summary["byzantine_clients"] == 8
    assert summary["status"] == "completed"


@pytest.mark.slow  # the slow tier (-m 'not slow' leaves it out): a process / benchmark / script run
def test_robust_benchmark_rows():
    """``bench --model robust``: a row per aggregator with its ratio to the mean, the median by a sort, the
    order-statistic engine's search and radix paths, then the FC round with and without attackers."""
    from fedjax_clust.bench.rounds import run_robust_benchmarks

    rows = list(run_robust_benchmarks(6, 5, repeats=1, clients=20, clustering_steps=1))
    assert [r["aggregator"] for r in rows[: len(AGGREGATORS)]] == list(AGGREGATORS)
    assert rows[0]["ratio_to_mean"] == 1.0 and all(r["seconds"] > 0 for r in rows[: len(AGGREGATORS)])
    assert rows[len(AGGREGATORS)]["aggregator"] == "median-by-sort" and rows[len(AGGREGATORS)]["selection_speedup"] > 0
    engine = rows[len(AGGREGATORS) + 1 : len(AGGREGATORS) + 3]
    assert [r["select"] for r in engine] == ["search", "radix"] and all(r["seconds"] > 0 for r in engine)
    clean, attacked = rows[len(AGGREGATORS) + 3 :]
    assert clean["attack"] is None and attacked["attack"] == "large-gradient" and attacked["ratio_to_clean"] > 0
    assert main(["bench", "--model", "robust", "--subgroups", "2"]) == 2
    assert main(["bench", "--dim", "10"]) == 2
    # too few clients for an attacker: refused before any aggregator row is timed
    with pytest.raises(ValueError, match="selects no attacker"):
        next(run_robust_benchmarks(6, 5, repeats=1, clients=8))


def test_ifca_round_uses_attacked_losses_and_robust_cluster_aggregates(task):
    """IFCA Option I, one round against NumPy: sign-flipping attackers send -loss (so they join their worst
    cluster) and -gradient, and each cluster model moves by the coordinate median of its members' messages."""
    bt = mark_byzantine(task, fraction=0.25, seed=1)
    k = 4
    centers = RNG.standard_normal((k, 10)).astype(np.float32)
    algo = make_algorithm(
        "ifca-1", bt, learning_rate=0.5, attack="sign-flip", aggregator="median", init_cluster_params=centers
    )
    state = algo.init(bt.init_params(None), bt.num_clients)
    new, metrics = jax.jit(algo.round)(state, bt.data, jax.random.PRNGKey(0))
    loss = client_loss(task.example_loss)
    at = jax.vmap(lambda c: jax.vmap(lambda d: (loss(c, d), jax.grad(loss)(c, d)))(bt.data))(jnp.asarray(centers))
    losses, grads = np.asarray(at[0], np.float64), np.asarray(at[1], np.float64)  # [K, N], [K, N, D]
    sign = np.where(bt.byzantine, -1.0, 1.0)
    labels = np.argmin(losses * sign, axis=0)
    np.testing.assert_array_equal(np.asarray(metrics["cluster_labels"]), labels)
    sent = grads[labels, np.arange(bt.num_clients)] * sign[:, None]
    expected = np.array(
        [
            centers[c] - 0.5 * np.median(sent[labels == c], axis=0) if np.any(labels == c) else centers[c]
            for c in range(k)
        ]
    )
    np.testing.assert_allclose(np.asarray(new.extra["centers"]), expected, rtol=1e-4, atol=1e-4)


def test_cfl_moves_each_cluster_by_its_robust_aggregate(task):
    """CFL with the trimmed mean, before any split: the one cluster model moves by the trimmed mean of the
    clients' one-step updates, the large-gradient attackers' updates 100 times theirs."""
    bt = mark_byzantine(task, fraction=0.25, seed=1)
    algo = make_algorithm(
        "cfl", bt, learning_rate=0.1, attack="large-gradient", aggregator=make_aggregator("trimmed-mean", beta=0.3)
    )
    w0 = jnp.asarray(RNG.standard_normal(10).astype(np.float32))
    new, _ = jax.jit(algo.round)(algo.init(w0, bt.num_clients), bt.data, jax.random.PRNGKey(0))
    g = np.asarray(jax.vmap(jax.grad(client_loss(task.example_loss)), (None, 0))(w0, bt.data), np.float64)
    updates = -0.1 * g * np.where(bt.byzantine, 100.0, 1.0)[:, None]
    t = int(np.floor(0.3 * bt.num_clients))
    trimmed = np.sort(updates, axis=0)[t : bt.num_clients - t].mean(0)
    np.testing.assert_allclose(np.asarray(new.client_params[0]), np.asarray(w0) + trimmed, rtol=1e-4, atol=1e-5)


def test_label_flipping_trains_attackers_on_flipped_labels():
    """``label-flip``: the round sees y -> C - 1 - y for the attackers only, which equals the plain round on
    flipped data; regression tasks and messages are refused."""
    from fedjax_clust.algorithms.label_flipping import flip_labels, label_classes
    from fedjax_clust.tasks import clustered_classification

    clean = clustered_classification(num_clusters=2, clients_per_cluster=4, samples_per_client=12)
    bt = mark_byzantine(clean, fraction=0.25, seed=0)
    c = label_classes(bt)
    assert c == clean.config["num_classes"]
    y = np.asarray(bt.data["y"])
    flipped = np.asarray(flip_labels(bt.data, bt.byzantine, c)["y"])
    np.testing.assert_array_equal(flipped[bt.honest], y[bt.honest])
    np.testing.assert_array_equal(flipped[bt.byzantine], c - 1 - y[bt.byzantine])
    attacked = make_algorithm("global", bt, learning_rate=0.1, attack="label-flip")
    plain = make_algorithm("global", clean, learning_rate=0.1)
    state = plain.init(bt.init_params(jax.random.PRNGKey(0)), bt.num_clients)
    key = jax.random.PRNGKey(4)
    a, _ = jax.jit(attacked.round)(state, bt.data, key)
    b, _ = jax.jit(plain.round)(state, {**bt.data, "y": jnp.asarray(flipped)}, key)
    jax.tree.map(
        lambda u, v: np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-6, atol=1e-7),
        a.client_params,
        b.client_params,
    )
    assert attacked.hparams["attack"] == "label-flip"
    with pytest.raises(ValueError, match="training data"):
        make_attack("label-flip")({"w": jnp.zeros((8, 2))}, jnp.asarray(BYZ), None)
    with pytest.raises(ValueError, match="num_classes"):
        make_attack("label-flip", num_classes=1)


def test_knn_per_trains_its_global_model_robustly():
    from fedjax_clust.tasks import clustered_classification

    bt = mark_byzantine(
        clustered_classification(num_clusters=2, clients_per_cluster=4, samples_per_client=12), fraction=0.25, seed=0
    )
    algo = make_algorithm("knn-per", bt, learning_rate=0.1, attack="nan", aggregator="median", k=3)
    state = algo.init(bt.init_params(jax.random.PRNGKey(0)), bt.num_clients)
    for t in range(2):
        state, _ = jax.jit(algo.round)(state, bt.data, jax.random.PRNGKey(t))
    assert all(np.isfinite(np.asarray(x)[bt.honest]).all() for x in jax.tree.leaves(state.client_params))
    assert algo.hparams["aggregator"] == "median" and algo.hparams["attack"] == "nan"


def test_selection_equals_a_sort_with_ties_signs_and_infinities():
    """The bisection on order keys returns exactly what a sort puts at rank k, in float32 and float64,
    with repeated values, -0.0 / +0.0, +-inf and non-member padding; the median and trimmed mean built on
    it equal NumPy's on tied integer-valued messages."""
    from fedjax_clust.ops.order_stats import (
        from_order_keys,
        kth_smallest_keys,
        order_keys,
    )

    values = np.array([3.0, -0.0, 0.0, -2.5, np.inf, -np.inf, 1e-38, -1e-38, 3.0, 7.25, -2.5], np.float32)
    rows = np.stack([RNG.permutation(values) for _ in range(6)])
    for k in range(1, values.size + 1):
        got = np.asarray(from_order_keys(kth_smallest_keys(order_keys(jnp.asarray(rows)), k), jnp.float32))
        np.testing.assert_array_equal(got, np.sort(rows, axis=1)[:, k - 1])
    with jax.enable_x64(True):
        wide = jnp.asarray(RNG.standard_normal((4, 9)))
        got = from_order_keys(kth_smallest_keys(order_keys(wide), 5), jnp.float64)
        np.testing.assert_array_equal(np.asarray(got), np.sort(np.asarray(wide), axis=1)[:, 4])
    tied = RNG.integers(-3, 4, size=(13, 40)).astype(np.float32)
    for members in (np.ones(13, bool), MEMBERS.tolist() + [True]):
        members = np.asarray(members)
        x = tied[members].astype(np.float64)
        np.testing.assert_allclose(
            np.asarray(make_aggregator("median")(jnp.asarray(tied), jnp.asarray(members))),
            np.median(x, axis=0),
            rtol=0,
            atol=1e-6,
        )
        t = int(np.floor(0.25 * len(x) + 1e-6))
        np.testing.assert_allclose(
            np.asarray(make_aggregator("trimmed-mean", beta=0.25)(jnp.asarray(tied), jnp.asarray(members))),
            np.sort(x, axis=0)[t : len(x) - t].mean(0),
            rtol=1e-6,
            atol=1e-6,
        )


@pytest.mark.parametrize(
    "rows, beta, path",
    [
        (6, 0.1, "extract"),
        (13, 0.2, "extract"),
        (19, 0.2, "extract"),
        (13, 0.45, "sort"),
        (45, 0.2, "select"),
        (45, 0.05, "extract"),
    ],
)
def test_trimmed_mean_paths_equal_numpys(rows, beta, path):
    """The trimmed mean's three paths (removing the extremes one by one, a sort per coordinate, two selections)
    keep the same values: NumPy's sorted middle of the members' finite messages, with ties, non-members and a
    non-finite message."""
    from fedjax_clust.robust.aggregators import EXTRACT_UP_TO, SORT_MESSAGES_UP_TO, _most_trimmed

    most = _most_trimmed(beta, rows)
    assert path == ("extract" if most <= EXTRACT_UP_TO else "sort" if rows <= SORT_MESSAGES_UP_TO else "select")
    x = RNG.integers(-3, 4, size=(rows, 30)).astype(np.float32) + RNG.standard_normal((rows, 30)).astype(np.float32) * (
        RNG.random((rows, 1)) < 0.5
    )
    x[2, 5] = np.nan  # a non-finite message is no member
    members = RNG.random(rows) < 0.8
    members[:4] = True
    usable = members & np.all(np.isfinite(x), axis=1)
    kept = np.sort(x[usable].astype(np.float64), axis=0)
    t = int(np.floor(beta * len(kept) + 1e-6))
    got = make_aggregator("trimmed-mean", beta=beta)(jnp.asarray(x), jnp.asarray(members))
    np.testing.assert_allclose(np.asarray(got), kept[t : len(kept) - t].mean(0), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rows", [4, 10, 40])  # the extract, sort and select paths at beta near 1/2
def test_trimmed_mean_keeps_two_values_of_an_even_count_at_beta_near_one_half(rows):
    """beta * c rounds up to c / 2 for a beta within float rounding of 1/2: every path trims (c - 1) // 2 from
    each end, so an even count keeps its two middle values (they disagreed before the cap); and a traced beta
    (a sweep's per-run value) gives the same as a concrete one."""
    x = RNG.standard_normal((rows, 7)).astype(np.float32)
    beta = 0.4999999
    middle = np.sort(x.astype(np.float64), axis=0)[rows // 2 - 1 : rows // 2 + 1].mean(0)
    got = make_aggregator("trimmed-mean", beta=beta)(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(got), middle, rtol=1e-6, atol=1e-6)
    from fedjax_clust.robust.aggregators import trimmed_mean

    for b in (beta, 0.25):
        traced = jax.jit(lambda v, bb: trimmed_mean(v, beta=bb))(jnp.asarray(x), jnp.float32(b))
        np.testing.assert_allclose(
            np.asarray(traced), np.asarray(trimmed_mean(jnp.asarray(x), beta=b)), rtol=1e-6, atol=1e-6
        )
    negative = jax.jit(lambda v, bb: trimmed_mean(v, beta=bb))(jnp.asarray(x), jnp.float32(-0.2))
    np.testing.assert_allclose(np.asarray(negative), x.astype(np.float64).mean(0), rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_byzantine_experiment_script_writes_the_sweep(tmp_path, capsys):
    """experiments/byzantine.py at tiny sizes: byzantine.json maps attack -> beta -> method -> final honest
    metric, beta = 0 is one attack-free run shared by every attack, ball-edge runs against FC only, the
    mean explodes under large gradients while the median does not, and a second run is refused."""
    import importlib.util
    import json
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(
        "byzantine_experiment", os.path.join(root, "experiments", "byzantine.py")
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    argv = [
        "--out",
        str(tmp_path),
        "--parts",
        "synthetic",
        "--betas",
        "0,0.25",
        "--synthetic-clients-per-cluster",
        "4",
        "--synthetic-rounds",
        "5",
        "--methods",
        "fc:q0.2,global,global:median",
        "--attacks",
        "large-gradient,ball-edge",
        "--no-progress",
    ]
    assert script.main(argv) == 0
    out = json.loads((tmp_path / "byzantine.json").read_text())
    sweep = out["sweep"]["synthetic"]
    assert sweep["metric"] == "mean_sq_dist_to_optimum"
    large, edge = sweep["results"]["large-gradient"], sweep["results"]["ball-edge"]
    assert set(large) == {"0", "0.25"} and set(large["0.25"]) == {"fc:q0.2", "global", "global:median"}
    assert set(edge["0.25"]) == {"fc:q0.2"} and edge["0"]["fc:q0.2"] == large["0"]["fc:q0.2"]
    assert large["0.25"]["global"] is None or large["0.25"]["global"] > 100 * large["0"]["global"]
    assert large["0.25"]["global:median"] < 2 * large["0"]["global:median"]
    assert sweep["programs"] == {"fc:q0.2": 2, "global": 1, "global:median": 1}  # one per attack, betas share it
    task = fc.robust.mark_byzantine(fc.make_task("synthetic", clients_per_cluster=4, seed=0), fraction=0.25, seed=0)
    alone = fc.make_algorithm(
        "global", task, learning_rate=0.01, momentum=0.9, attack="large-gradient", aggregator="median"
    )
    history = fc.simulate(
        alone, task, rounds=5, seed=0, evaluation=Evaluation(eval_every=5), output=Output(progress=False)
    ).history
    np.testing.assert_allclose(large["0.25"]["global:median"], history[-1]["mean_sq_dist_to_optimum"], rtol=1e-6)
    assert (tmp_path / "sweep.png").stat().st_size > 0
    assert script.main(argv) == 2 and "already holds" in capsys.readouterr().err
    with pytest.raises(ValueError, match="quantile"):
        script.parse_method("fc:0.2")


def test_a_rule_written_with_its_options_reads_back_as_recorded():
    """parse_rule reads what recorded_name writes (every built-in rule with a changed option), make_attack /
    make_aggregator take the written form, and bad text is one clear ValueError."""
    from fedjax_clust.robust.registry import parse_rule, recorded_name

    rules = [
        make_attack("ipm", epsilon=5.0),
        make_attack("alie", z=1.5),
        make_attack("large-gradient", scale=3),
        make_aggregator("trimmed-mean", beta=0.25),
        make_aggregator("krum", fraction=0.3),
        make_aggregator("geometric-median", iterations=7),
    ]
    for rule in rules:
        text = recorded_name(rule)
        assert "(" in text
        again = (make_attack if hasattr(rule, "attack_name") else make_aggregator)(text)
        assert recorded_name(again) == text and dict(again.options) == dict(rule.options)
        assert parse_rule(text) == (rule.name, dict(rule.options))
    assert parse_rule("median") == ("median", {})
    assert parse_rule("x(a='s', b=None, c=True)") == ("x", {"a": "s", "b": None, "c": True})
    for bad, message in [
        ("ipm(5)", "option=value"),
        ("ipm(epsilon=1.0)(epsilon=2.0)", "option=value"),
        ("ipm(epsilon=foo)", "got foo"),
        ("ipm(epsilon=1", "rule as"),
        ("ipm(eps=1.0)", "no option 'eps'"),
    ]:
        with pytest.raises(ValueError, match=message):
            make_attack(bad)
    with pytest.raises(ValueError, match="given both"):
        make_attack("ipm(epsilon=1.0)", epsilon=2.0)


def test_the_command_line_takes_a_rule_with_its_options(tmp_path):
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--algorithm",
                "global",
                "--attack",
                "ipm(epsilon=5.0)",
                "--byzantine-fraction",
                "0.2",
                "--aggregator",
                "trimmed-mean(beta=0.25)",
                "--clusters",
                "2",
                "--clients-per-cluster",
                "5",
                "--rounds",
                "3",
                "--eval-every",
                "3",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    import json

    hparams = json.loads((out / "summary.json").read_text())["hparams"]
    assert (hparams["attack"], hparams["aggregator"]) == ("ipm(epsilon=5.0)", "trimmed-mean(beta=0.25)")
    assert (
        main(
            [
                "run",
                "--algorithm",
                "global",
                "--attack",
                "nope(x=1)",
                "--byzantine-fraction",
                "0.2",
                "--out",
                str(tmp_path / "bad"),
            ]
        )
        == 2
    )
