"""Central differential privacy: the accountant against independent computations and a published value, the
private mean against a float64 reference, Poisson participation, and the private algorithms end to end."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_clust.algorithms import make_algorithm
from fedjax_clust.algorithms.participation import poisson_rule, with_participation
from fedjax_clust.privacy import central_privacy, local_privacy
from fedjax_clust.privacy.accounting import (
    Ledger,
    Release,
    calibrate_noise,
    combined_noise_multiplier,
    epsilon,
    rdp_orders,
    rdp_to_epsilon,
    sampled_gaussian_rdp,
)
from fedjax_clust.privacy.mechanism import PrivateMean, clip_rows
from fedjax_clust.robust import make_attack, mark_byzantine
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.simulate import simulate
from fedjax_clust.tasks import make_task

dp_accounting = pytest.importorskip("dp_accounting")


# ---------------------------------------------------------------- accounting


def _naive_sampled_gaussian_rdp(z, q, alpha):
    """An independent float64 sum of the integer-order binomial expansion (no log space; small alpha only)."""
    total = 0.0
    for k in range(alpha + 1):
        total += math.comb(alpha, k) * (1 - q) ** (alpha - k) * q**k * math.exp((k * k - k) / (2 * z * z))
    return math.log(total) / (alpha - 1)


@pytest.mark.parametrize("z,q", [(0.8, 0.01), (1.1, 0.05), (4.0, 0.3), (2.0, 1.0)])
def test_rdp_matches_a_direct_sum_and_dp_accounting_at_the_same_orders(z, q):
    ours = sampled_gaussian_rdp(Release(z, q))
    for alpha in [2, 3, 5, 8, 12]:
        assert ours[alpha - 2] == pytest.approx(_naive_sampled_gaussian_rdp(z, q, alpha), rel=1e-10)
    orders = [int(a) for a in rdp_orders()]
    theirs = dp_accounting.rdp.RdpAccountant(orders=orders)
    event = dp_accounting.GaussianDpEvent(z)
    if q < 1:
        event = dp_accounting.PoissonSampledDpEvent(q, event)
    theirs.compose(event, 100)
    np.testing.assert_allclose(100 * ours, theirs._rdp, rtol=1e-9)
    assert epsilon(Release(z, q), 100, 1e-6) == pytest.approx(theirs.get_epsilon(1e-6), rel=1e-9)


def test_unsampled_gaussian_rdp_is_alpha_over_two_z_squared():
    np.testing.assert_allclose(sampled_gaussian_rdp(Release(1.5, 1.0)), rdp_orders() / (2 * 1.5**2), rtol=1e-14)


@pytest.mark.parametrize("z,q,rounds", [(1.0, 0.02, 500), (5.0, 0.01, 100), (100.0, 1.0, 1)])
def test_the_accountants_agree_and_pld_is_the_tightest(z, q, rounds):
    release = Release(z, q)
    ours = epsilon(release, rounds, 1e-5, "rdp")
    theirs = epsilon(release, rounds, 1e-5, "dp-rdp")  # other orders: a few percent either side
    pld = epsilon(release, rounds, 1e-5, "pld")
    assert abs(ours / theirs - 1) < 0.1
    assert pld < min(ours, theirs) and ours < 1.5 * pld


def test_epsilon_of_abadi_et_al_2016():
    """Abadi et al. 2016, "Deep Learning with Differential Privacy", Sec. 3.1: q = 0.01, sigma = 4,
    delta = 1e-5, T = 10,000 steps give epsilon ~ 1.26 by the moments accountant. Later RDP analyses are
    tighter, so ours must not exceed it (by more than 1%), and should not be far below it."""
    eps = epsilon(Release(4.0, 0.01), 10_000, 1e-5)
    assert 0.7 * 1.26 <= eps <= 1.26 * 1.01


def test_rdp_conversion_matches_dp_accounting():
    orders = rdp_orders()
    rdp = 50 * sampled_gaussian_rdp(Release(0.9, 0.1))
    theirs, _ = dp_accounting.rdp.rdp_privacy_accountant.compute_epsilon(orders, rdp, 1e-5)
    assert rdp_to_epsilon(orders, rdp, 1e-5) == pytest.approx(theirs, rel=1e-12)


def test_calibration_gives_the_smallest_noise_reaching_the_target():
    z = calibrate_noise(2.0, 1e-5, 200, 0.05)
    assert epsilon(Release(z, 0.05), 200, 1e-5) <= 2.0
    assert epsilon(Release(z * 0.995, 0.05), 200, 1e-5) > 2.0
    with pytest.raises(ValueError, match="no noise multiplier"):
        calibrate_noise(1e-4, 1e-10, 10_000, 1.0)


def test_combined_noise_multiplier():
    assert combined_noise_multiplier(1.0, 1.0) == pytest.approx(1 / math.sqrt(2))
    assert combined_noise_multiplier(2.0) == 2.0
    with pytest.raises(ValueError):
        combined_noise_multiplier(1.0, 0.0)


def test_ledger_adds_the_truncation_term_to_delta():
    ledger = Ledger(Release(1.0, 0.1), 1e-5, truncation=1e-12)
    spent = ledger.spent(100)
    assert spent["delta"] == pytest.approx(1e-5 + 100 * 1e-12 * (1 + math.exp(spent["epsilon"])))
    assert ledger.spent(0) == {"epsilon": 0.0, "delta": 1e-5}


# ---------------------------------------------------------------- the mechanism


def test_private_mean_is_the_clipped_sum_over_the_fixed_denominator_plus_noise_of_std_z_c():
    rng = np.random.default_rng(0)
    messages = {"a": rng.normal(size=(12, 3)) * rng.uniform(0.1, 4.0, size=(12, 1)), "b": rng.normal(size=(12, 2))}
    messages["a"][5] = np.nan  # dropped
    labels = np.array([0, 1, 2] * 4)
    clip = 1.5
    # float64 reference of the clipped sums
    flat = np.concatenate([messages["a"], messages["b"]], axis=1)
    norms = np.linalg.norm(flat, axis=1)
    scale = np.where(np.isfinite(norms), np.minimum(1, clip / norms), 0)
    clipped = np.where(np.isfinite(flat), flat, 0) * scale[:, None]
    sums = np.stack([clipped[labels == k].sum(0) for k in range(3)])
    mech = PrivateMean(clip, 1e-30, expected_clients=6.0)  # no noise to speak of: d_k = 6 / 3
    x = jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), messages)
    per_group, moved = mech.segments(x, jnp.asarray(labels), 3, jax.random.PRNGKey(0))
    got = np.concatenate([np.asarray(per_group["a"]), np.asarray(per_group["b"])], axis=1)
    np.testing.assert_allclose(got, sums / 2.0, rtol=2e-6, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(moved), 1.0)
    # the noise: zero messages, std z C / d per coordinate
    zeros = {"a": jnp.zeros((4, 2000))}
    noisy = PrivateMean(2.0, 0.5, expected_clients=4.0)
    out, _ = noisy.segments(zeros, jnp.zeros((4,), jnp.int32), 1, jax.random.PRNGKey(3))
    assert np.std(np.asarray(out["a"])) == pytest.approx(0.5 * 2.0 / 4.0, rel=0.05)


def test_noisy_count_denominator_and_its_effective_multiplier():
    mech = PrivateMean(1.0, 2.0, expected_clients=10.0, denominator="noisy-count", count_noise_ratio=3.0)
    assert mech.effective_noise_multiplier == pytest.approx((2.0**-2 + 6.0**-2) ** -0.5)
    tiny = PrivateMean(100.0, 1e-9, expected_clients=10.0, denominator="noisy-count")
    messages = jnp.arange(12.0).reshape(6, 2)
    labels = jnp.array([0, 0, 0, 1, 1, 1])
    out, _ = tiny.segments(messages, labels, 2, jax.random.PRNGKey(0))
    np.testing.assert_allclose(np.asarray(out), [[2.0, 3.0], [8.0, 9.0]], rtol=1e-6)  # the members' means


def test_clip_rows_bounds_every_row_norm():
    x = {"w": jnp.array([[3.0, 4.0], [0.3, 0.4], [jnp.nan, 1.0], [1e20, 0.0]])}
    out, usable = clip_rows(x, 1.0)
    np.testing.assert_allclose(np.asarray(out["w"]), [[0.6, 0.8], [0.3, 0.4], [0.0, 0.0], [0.0, 0.0]], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(usable), [True, True, False, False])  # 1e20 squared overflows


# ---------------------------------------------------------------- Poisson participation


def test_poisson_rule_draws_each_client_with_probability_q_in_fixed_slots():
    rule = poisson_rule(200, 0.1)
    assert rule.truncation <= 1e-16 and rule.size >= 20
    draw = jax.jit(jax.vmap(rule.draw, in_axes=(0, None)))
    index, active = draw(jax.random.split(jax.random.PRNGKey(0), 4000), 0)
    index, active = np.asarray(index), np.asarray(active)
    assert (np.diff(index, axis=1) > 0).all()  # distinct, increasing
    counts = active.sum(1)
    assert counts.mean() == pytest.approx(20.0, rel=0.02)
    assert counts.var() == pytest.approx(200 * 0.1 * 0.9, rel=0.1)  # binomial, not a fixed size
    per_client = np.zeros(200)
    np.add.at(per_client, index[active], 1)
    assert per_client.mean() / 4000 == pytest.approx(0.1, rel=0.02)
    truncated = poisson_rule(100, 0.5, slots=10)
    _, active = truncated.draw(jax.random.PRNGKey(1), 0)
    assert bool(np.asarray(active).all()) and truncated.truncation > 0.99


def test_inactive_slots_keep_their_rows_and_send_nothing():
    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=10)
    algo = make_algorithm(
        "ifca-1", task, learning_rate=0.01, privacy=central_privacy(clip=1.0, noise_multiplier=1.0, sampling=0.3)
    )
    state = algo.start(task.init_params(jax.random.PRNGKey(0)), task.num_clients, jax.random.PRNGKey(1))
    key = jax.random.PRNGKey(7)
    new, metrics = jax.jit(algo.round)(state, task.data, key)
    participants = np.asarray(metrics["participants"])
    labels = np.asarray(metrics["cluster_labels"])
    assert 0 < participants.sum() < task.num_clients
    assert (labels[~participants] == -1).all() and (labels[participants] >= 0).all()
    # a client outside the sample keeps its assignment row
    np.testing.assert_array_equal(
        np.asarray(new.rows["labels"])[~participants], np.asarray(state.rows["labels"])[~participants]
    )
    assert algo.hparams["participation"]["rule"] == "poisson"
    assert algo.hparams["privacy"]["clip"] == 1.0


# ---------------------------------------------------------------- private algorithms end to end


@pytest.mark.parametrize(
    "name,denominator",
    [("global", "expected"), ("ifca-1", "noisy-count"), ("hypcluster", "noisy-count"), ("ditto", "expected")],
)
def test_without_clipping_or_noise_the_private_round_is_the_plain_one(name, denominator):
    """A clip bound above every message and noise ~0: the private mean is the plain mean (the expected
    denominator is N for one group; the noisy count is the member count)."""
    task = make_task("synthetic", seed=1, num_clusters=2, clients_per_cluster=8)
    kw = dict(learning_rate=0.001)
    plain = make_algorithm(name, task, **kw)
    private = make_algorithm(
        name, task, **kw, privacy=central_privacy(clip=1e12, noise_multiplier=1e-20, denominator=denominator)
    )
    params = task.init_params(jax.random.PRNGKey(0))
    a = plain.start(params, task.num_clients, jax.random.PRNGKey(2))
    b = private.start(params, task.num_clients, jax.random.PRNGKey(2))
    for t in range(3):
        key = jax.random.PRNGKey(10 + t)
        a, _ = jax.jit(plain.round)(a, task.data, key)
        b, _ = jax.jit(private.round)(b, task.data, key)
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)):
        np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=1e-4, atol=1e-4)


def test_attackers_are_clipped_like_everyone():
    task = mark_byzantine(make_task("synthetic", seed=0, num_clusters=1, clients_per_cluster=20), fraction=0.2)
    attack = make_attack("large-gradient")
    clip = 0.5
    algo = make_algorithm(
        "global",
        task,
        learning_rate=1.0,
        momentum=0.0,
        attack=attack,
        privacy=central_privacy(clip=clip, noise_multiplier=1e-12),
    )
    state = algo.start(task.init_params(jax.random.PRNGKey(0)), task.num_clients)
    new, _ = jax.jit(algo.round)(state, task.data, jax.random.PRNGKey(1))
    moved = [np.asarray(n) - np.asarray(o) for n, o in zip(jax.tree.leaves(new.params), jax.tree.leaves(state.params))]
    step = math.sqrt(sum(float(np.sum(m[0] ** 2)) for m in moved))  # the group model's step, learning rate 1
    assert step <= clip * (1 + 1e-5)  # N clipped messages over the denominator N: at most C


def test_a_private_run_records_epsilon_at_every_evaluation(tmp_path):
    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=10)
    algo = make_algorithm(
        "global",
        task,
        learning_rate=0.001,
        privacy=central_privacy(clip=5.0, target_epsilon=3.0, rounds=20, sampling=0.25),
    )
    result = simulate(
        algo,
        task,
        rounds=20,
        evaluation=Evaluation(eval_every=5),
        output=Output(progress=False, out_dir=str(tmp_path / "run")),
    )
    eps = [row["epsilon"] for row in result.history]
    assert eps[0] == 0.0 and all(b > a for a, b in zip(eps, eps[1:]))
    assert eps[-1] <= 3.0 and eps[-1] == pytest.approx(3.0, rel=0.01)
    ledger = algo.execution.privacy
    assert eps[2] == ledger.spent(10)["epsilon"]
    assert result.history[-1]["delta"] == pytest.approx(1e-5, rel=1e-4)  # + the tiny truncation term


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(name="federated-clustering", dp_clip=1.0, dp_noise=1.0), "refuses central privacy"),
        (dict(name="global", dp_clip=1.0, dp_noise=1.0, aggregator="median"), "aggregator 'median' refuses"),
        (dict(name="global", dp_clip=1.0, dp_noise=1.0, weighting="examples"), "sensitivity"),
        (dict(name="global", dp_clip=1.0, dp_noise=1.0, participation=0.5), "samples its own clients"),
        (dict(name="global", dp_noise=1.0), "dp_noise needs dp_clip"),
        (dict(name="global", dp_sampling=0.2), "dp_sampling needs dp_clip"),
        (dict(name="hypcluster", dp_clip=1.0, dp_noise=1.0, cluster_steps=0), "releases nothing"),
        (dict(name="global", dp_clip=-1.0, dp_noise=1.0), "dp_clip must be"),
        (dict(name="global", dp_clip=1.0, dp_noise=1.0, dp_delta=1.0), "dp_delta must be"),
        (dict(name="global", dp_clip=1.0), "exactly one of dp_noise"),
        (dict(name="global", dp_clip=1.0, dp_epsilon=1.0), "needs the rounds"),
        (dict(name="global", dp_clip=1.0, dp_epsilon=1e-5, dp_rounds=1000, dp_delta=1e-12), "no noise multiplier"),
        (dict(name="global", dp_clip=1.0, dp_noise=1.0, dp_slots=5), "apply to Poisson"),
    ],
)
def test_bad_privacy_options_get_one_line_errors(kwargs, message):
    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=5)
    name = kwargs.pop("name")
    with pytest.raises(ValueError, match=message) as error:
        make_algorithm(name, task, learning_rate=0.01, **kwargs)
    assert "\n" not in str(error.value)


def test_a_poisson_rule_runs_only_inside_a_private_algorithm():
    """Another algorithm would train on, or average NaN from, the slots that drew no client."""
    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=5)
    with pytest.raises(ValueError, match="only inside a private algorithm"):
        with_participation(make_algorithm("global", task, learning_rate=0.01), poisson_rule(10, 0.5))


def test_the_poisson_rate_is_a_multiple_of_two_to_the_minus_32_and_the_ledger_uses_it():
    rule = poisson_rule(10**6, 1e-7)
    assert rule.poisson == round(1e-7 * 2**32) / 2**32  # float32 uniforms would give 2^-23 ~ 1.2e-7
    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=10)
    algo = make_algorithm(
        "global", task, learning_rate=0.01, privacy=central_privacy(clip=1.0, noise_multiplier=1.0, sampling=0.3)
    )
    assert algo.execution.privacy.release.sampling == round(0.3 * 2**32) / 2**32


def test_a_cluster_nobody_picks_still_moves_under_central_privacy():
    """Whether a cluster had members is not released: HypCluster's and IFCA's empty clusters move by noise."""
    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=6)
    far = jnp.stack([jnp.zeros(10), jnp.full(10, 1e3)])  # the synthetic task's model is a [d] vector
    for name in ("hypcluster", "ifca-1"):
        algo = make_algorithm(
            name,
            task,
            learning_rate=0.01,
            init_cluster_params=far,
            privacy=central_privacy(clip=1.0, noise_multiplier=1.0),
        )
        params = task.init_params(jax.random.PRNGKey(0))
        state = algo.start(params, task.num_clients, jax.random.PRNGKey(1))
        new, metrics = jax.jit(algo.round)(state, task.data, jax.random.PRNGKey(2))
        assert (np.asarray(metrics["cluster_labels"]) == 0).all()  # nobody picks the far model
        before, after = np.asarray(state.extra["centers"][1]), np.asarray(new.extra["centers"][1])
        assert not np.array_equal(before, after), name


def test_attacks_reading_the_others_messages_refuse_central_privacy():
    task = mark_byzantine(make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=10), fraction=0.2)
    for attack in ("alie", "ipm"):
        with pytest.raises(ValueError, match="computes its message from the other clients"):
            make_algorithm(
                "global",
                task,
                learning_rate=0.01,
                attack=attack,
                privacy=central_privacy(clip=1.0, noise_multiplier=1.0),
            )
    make_algorithm(
        "global", task, learning_rate=0.01, attack="gaussian", privacy=central_privacy(clip=1.0, noise_multiplier=1.0)
    )


def test_too_few_slots_are_refused():
    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=50)
    with pytest.raises(ValueError, match="drop sampled clients"):
        make_algorithm(
            "global",
            task,
            learning_rate=0.01,
            privacy=central_privacy(clip=1.0, noise_multiplier=1.0, sampling=0.5, slots=20),
        )


@pytest.mark.slow
def test_the_privacy_benchmark_rows():
    from fedjax_clust.bench.privacy import SWEEP_NOISE, run_privacy_benchmarks

    rows = list(run_privacy_benchmarks(16, dim=5, repeats=1, rounds=2, algorithms=("global",)))
    assert [r["benchmark"] for r in rows] == ["privacy-round", "privacy-poisson", "privacy-sweep"]
    assert rows[0]["time_ratio"] == rows[0]["private_seconds"] / rows[0]["plain_seconds"]
    assert rows[1]["slots"] >= rows[1]["fixed_cohort"] == 4
    assert rows[2]["runs"] == len(SWEEP_NOISE) and rows[2]["sweep_seconds_per_round"] > 0


def test_a_sweep_over_noise_multipliers_is_the_separate_runs():
    """dp_noise is traced: one vmapped program whose runs equal the runs apart, each with its own epsilon."""
    from fedjax_clust.run.sweep import sweep

    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=10)
    options = dict(learning_rate=0.001, dp_clip=5.0, dp_sampling=0.5)
    result = sweep(
        "global",
        task,
        grid={"dp_noise": [0.5, 2.0]},
        rounds=6,
        options=options,
        evaluation=Evaluation(eval_every=3),
        output=Output(progress=False),
    )
    for z, run in zip([0.5, 2.0], result.runs):
        alone = simulate(
            make_algorithm("global", task, dp_noise=z, **options),
            task,
            rounds=6,
            evaluation=Evaluation(eval_every=3),
            output=Output(progress=False),
        )
        assert run.history[-1]["epsilon"] == alone.history[-1]["epsilon"]
        np.testing.assert_allclose(run.history[-1]["mean_loss"], alone.history[-1]["mean_loss"], rtol=1e-5)
    assert result.runs[0].history[-1]["epsilon"] > result.runs[1].history[-1]["epsilon"]


# ---------------------------------------------------------------- local privacy (Federated-Clustering)


def test_local_gaussian_clips_each_message_and_its_noise_does_not_depend_on_the_layout():
    from fedjax_clust.privacy.local import LocalGaussian

    rng = np.random.default_rng(0)
    block = {"w": jnp.asarray(rng.normal(size=(6, 5)) * 3.0, jnp.float32), "b": jnp.asarray(rng.normal(size=(6,)))}
    clipped = LocalGaussian(1.0, 0.0).privatize(block, 0, jax.random.PRNGKey(0))
    norms = np.sqrt(np.sum(np.asarray(clipped["w"]) ** 2, 1) + np.asarray(clipped["b"]) ** 2)
    np.testing.assert_allclose(
        norms, np.minimum(1.0, np.sqrt(np.sum(np.asarray(block["w"]) ** 2, 1) + np.asarray(block["b"]) ** 2)), rtol=1e-5
    )
    noisy = LocalGaussian(1.0, 2.0)
    rows = noisy.privatize(block, 0, jax.random.PRNGKey(3))
    columns = noisy.privatize({"w": block["w"].T, "b": block["b"]}, -1, jax.random.PRNGKey(3))
    np.testing.assert_allclose(np.asarray(columns["w"]).T, np.asarray(rows["w"]), rtol=1e-6)
    big = LocalGaussian(0.5, 3.0).privatize({"w": jnp.zeros((200, 50))}, 0, jax.random.PRNGKey(1))
    assert np.std(np.asarray(big["w"])) == pytest.approx(1.5, rel=0.03)


def test_a_non_finite_message_leaves_the_client_as_noise_alone():
    from fedjax_clust.privacy.local import LocalGaussian

    block = {"w": jnp.array([[jnp.nan, 1.0], [1e20, 0.0], [0.3, 0.4]])}
    out = LocalGaussian(1.0, 0.0).privatize(block, 0, jax.random.PRNGKey(0))
    np.testing.assert_allclose(np.asarray(out["w"]), [[0.0, 0.0], [0.0, 0.0], [0.3, 0.4]], rtol=1e-6)


def test_local_privacy_without_clipping_or_noise_is_plain_federated_clustering():
    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=6)
    kw = dict(learning_rate=0.01, quantile=0.3)
    plain = make_algorithm("federated-clustering", task, **kw)
    private = make_algorithm(
        "federated-clustering", task, **kw, privacy=local_privacy(clip=1e12, noise_multiplier=1e-20)
    )
    params = task.init_params(jax.random.PRNGKey(0))
    a, b = plain.start(params, task.num_clients), private.start(params, task.num_clients)
    for t in range(3):
        a, _ = jax.jit(plain.round)(a, task.data, jax.random.PRNGKey(t))
        b, _ = jax.jit(private.round)(b, task.data, jax.random.PRNGKey(t))
    np.testing.assert_allclose(np.asarray(b.params), np.asarray(a.params), rtol=1e-5, atol=1e-4)


def test_local_privacy_accounts_the_subgroups_messages():
    from fedjax_clust.privacy.local import local_release

    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=10)
    algo = make_algorithm(
        "federated-clustering",
        task,
        learning_rate=0.01,
        subgroups=3,
        privacy=local_privacy(clip=1.0, noise_multiplier=8.0),
    )
    privacy = algo.hparams["privacy"]
    assert privacy["mode"] == "local" and privacy["messages_per_round"] == 7  # ceil(20 / 3)
    assert privacy["round_noise_multiplier"] == pytest.approx(8.0 / (2 * math.sqrt(7)))
    assert algo.execution.privacy.spent(50)["epsilon"] == epsilon(local_release(8.0, 7), 50, 1e-5)
    target = make_algorithm(
        "federated-clustering",
        task,
        learning_rate=0.01,
        privacy=local_privacy(clip=1.0, target_epsilon=30.0, rounds=40),
    )
    assert 29.0 < target.execution.privacy.spent(40)["epsilon"] <= 30.0


@pytest.mark.parametrize(
    "name,kwargs,message",
    [
        ("federated-clustering", dict(), "takes local privacy: dp_mode='local'"),
        ("global", dict(dp_mode="local"), "refuses local privacy"),
        ("federated-clustering", dict(dp_mode="local", local_steps=2), "unnoised gradients"),
        ("federated-clustering", dict(dp_mode="local", dp_sampling=0.5), "dp_sampling applies to central"),
        ("federated-clustering", dict(dp_mode="both"), "dp_mode must be"),
    ],
)
def test_local_privacy_refusals(name, kwargs, message):
    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=5)
    with pytest.raises(ValueError, match=message):
        make_algorithm(name, task, learning_rate=0.01, dp_clip=1.0, dp_noise=1.0, **kwargs)


def test_local_privacy_with_byzantine_clients_runs():
    task = mark_byzantine(make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=6), fraction=0.2)
    algo = make_algorithm(
        "federated-clustering",
        task,
        learning_rate=0.01,
        attack="sign-flip",
        privacy=local_privacy(clip=50.0, noise_multiplier=1.0),
    )
    result = simulate(algo, task, rounds=4, evaluation=Evaluation(eval_every=2), output=Output(progress=False))
    assert np.isfinite(result.history[-1]["mean_loss"]) and result.history[-1]["epsilon"] > 0
