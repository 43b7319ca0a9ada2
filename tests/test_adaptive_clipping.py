"""Adaptive clipping (Andrew et al. 2021): the geometric quantile update against a float64 reference, its
convergence to the target quantile, the count's sensitivity, the accounting of Thm. 1, and the private
algorithms carrying the bound as server state."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import tiered

from fedjax_clust.algorithms import make_algorithm
from fedjax_clust.core.state import ClientParams
from fedjax_clust.privacy import adaptive_clipping, central_privacy
from fedjax_clust.privacy.accounting import combined_noise_multiplier
from fedjax_clust.privacy.adaptive import AdaptiveClip
from fedjax_clust.privacy.mechanism import PrivateMean, row_norms
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.simulate import simulate
from fedjax_clust.tasks import make_task


def _norms(values):
    return jnp.asarray(values, jnp.float32), jnp.isfinite(jnp.asarray(values, jnp.float32))


def test_next_clip_is_the_geometric_update_of_the_centred_noisy_count():
    """C' = C exp(-eta (1/2 + (sum_i (b_i - 1/2) + sigma_b xi) / m - gamma)), the noise xi the key's normal."""
    rng = np.random.default_rng(0)
    norms = rng.lognormal(0.0, 1.0, size=37)
    clip, update = 1.3, AdaptiveClip(quantile=0.3, learning_rate=0.2, count_noise=2.5, expected_clients=40.0)
    key = jax.random.PRNGKey(4)
    got = float(update.next_clip(*_norms(norms), jnp.float32(clip), key))
    xi = float(jax.random.normal(key, (), jnp.float32))
    fraction = 0.5 + (np.sum(np.where(norms <= clip, 0.5, -0.5)) + 2.5 * xi) / 40.0
    want = clip * math.exp(-0.2 * (fraction - 0.3))
    assert got == pytest.approx(want, rel=1e-6)


def test_the_bound_converges_to_the_target_quantile_of_the_norms():
    rng = np.random.default_rng(1)
    norms = rng.lognormal(1.0, 0.7, size=400)
    for quantile in (0.2, 0.5, 0.9):
        update = AdaptiveClip(quantile=quantile, learning_rate=0.2, count_noise=400 / 20, expected_clients=400.0)
        step = jax.jit(update.next_clip)
        clip = jnp.float32(0.01)  # far below every norm: the bound must climb first
        for t in range(400):
            clip = step(*_norms(norms), clip, jax.random.PRNGKey(t))
        reached = float(np.mean(norms <= float(clip)))
        assert abs(reached - quantile) < 0.08, (quantile, reached)


def test_one_client_moves_the_count_by_at_most_one_half():
    """Adding or removing one client moves sum_i (b_i - 1/2) by 1/2 (a usable message) or 0 (a message whose
    squared norm is not finite, or an empty slot): the count's sensitivity is 1/2, so its multiplier 2 sigma_b."""
    update = AdaptiveClip(quantile=0.5, learning_rate=0.2, count_noise=1e-30, expected_clients=1.0)
    key = jax.random.PRNGKey(0)
    base = [0.5, 2.0, 3.0]
    without = float(update.unclipped_fraction(*_norms(base), 1.0, key))
    for extra in (0.1, 5.0, np.nan, np.inf):
        norms = jnp.asarray(base + [extra], jnp.float32)
        usable = jnp.isfinite(norms)
        with_one = float(update.unclipped_fraction(jnp.where(usable, norms, 0.0), usable, 1.0, key))
        assert abs(with_one - without) <= 0.5 + 1e-6
        assert (abs(with_one - without) == 0.0) == (not np.isfinite(extra))


def test_row_norms_of_a_message_whose_squares_overflow_make_it_unusable():
    norms, usable = row_norms({"w": jnp.asarray([[3.0, 4.0], [3e19, 0.0], [jnp.nan, 0.0]])})
    np.testing.assert_allclose(np.asarray(norms), [5.0, 0.0, 0.0])
    np.testing.assert_array_equal(np.asarray(usable), [True, False, False])


def test_the_effective_multiplier_is_andrew_et_al_theorem_1():
    update = AdaptiveClip(quantile=0.5, learning_rate=0.2, count_noise=5.0, expected_clients=100.0)
    z = 1.0
    mean = PrivateMean(0.1, z, 100.0, adaptive=update)
    assert mean.effective_noise_multiplier == pytest.approx((z**-2 + (2 * 5.0) ** -2) ** -0.5, rel=1e-12)
    # with noisy counts too: three Gaussian releases of one round
    both = PrivateMean(0.1, z, 100.0, "noisy-count", 10.0, update)
    assert both.effective_noise_multiplier == pytest.approx(combined_noise_multiplier(z, 10.0 * z, 10.0), rel=1e-12)


@pytest.mark.parametrize("name,releases", [("global", 1), ("hypcluster", 3)])
def test_the_ledger_accounts_the_count_and_a_target_raises_the_sums_noise(name, releases):
    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=20)
    kw = dict(learning_rate=0.001, dp_clip=0.1, dp_sampling=0.5, dp_clip_quantile=0.5)
    if name == "hypcluster":
        kw["cluster_steps"] = releases
    given = make_algorithm(name, task, dp_noise=1.0, **kw).hparams["privacy"]
    sigma_b = 0.5 * task.num_clients / 20  # the paper's m / 20
    assert given["clip_count_noise"] == sigma_b
    want = (1.0 + (2 * sigma_b) ** -2) ** -0.5 / math.sqrt(releases)
    assert given["round_noise_multiplier"] == pytest.approx(want, rel=1e-12)
    target = dict(dp_epsilon=4.0, dp_rounds=30)  # z ~ 3.4: the default sigma_b = 1 leaves no room
    adaptive = make_algorithm(name, task, **target, **kw, dp_clip_count_noise=10.0)
    fixed = make_algorithm(name, task, **target, **{k: v for k, v in kw.items() if k != "dp_clip_quantile"})
    assert adaptive.execution.privacy.spent(30)["epsilon"] == pytest.approx(4.0, rel=0.01)
    # the same round multiplier, so the sums' z rises to leave room for the count
    a, f = adaptive.hparams["privacy"], fixed.hparams["privacy"]
    assert a["round_noise_multiplier"] == pytest.approx(f["round_noise_multiplier"], rel=1e-9)
    assert a["noise_multiplier"] > f["noise_multiplier"]


@pytest.mark.parametrize("name", tiered(["global", "ground-truth", "ifca-1", "ifca-2", "hypcluster", "ditto", "cfl"]))
def test_with_a_zero_clip_rate_the_run_is_the_fixed_bound_run(name):
    """dp_clip_lr=0: the bound never moves, and the sums' noise is drawn as without adaptive clipping, so the
    models are the fixed bound's exactly; the state carries the bound and the round reports it."""
    task = make_task("synthetic", seed=1, num_clusters=2, clients_per_cluster=8)
    kw = dict(learning_rate=0.001, dp_clip=2.0, dp_noise=0.7, dp_sampling=0.6)
    if name == "hypcluster":
        kw["cluster_steps"] = 2
    if name == "cfl":
        kw.update(dp_denominator="noisy-count", min_rounds=1)
    fixed = make_algorithm(name, task, **kw)
    adaptive = make_algorithm(name, task, **kw, dp_clip_quantile=0.5, dp_clip_lr=0.0)
    params = task.init_params(jax.random.PRNGKey(0))
    a = fixed.start(params, task.num_clients, jax.random.PRNGKey(2))
    b = adaptive.start(params, task.num_clients, jax.random.PRNGKey(2))
    for t in range(3):
        key = jax.random.PRNGKey(10 + t)
        a, _ = jax.jit(fixed.round)(a, task.data, key)
        b, metrics = jax.jit(adaptive.round)(b, task.data, key)
        assert float(metrics["dp_clip"]) == 2.0
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)):
        np.testing.assert_array_equal(np.asarray(y), np.asarray(x))


def test_the_bound_follows_the_messages_and_the_run_logs_it(tmp_path):
    """Gradients far above the initial bound: every message is clipped, so the bound grows by about
    exp(eta / 2) per round (the estimated fraction near 0) until it reaches the median norm."""
    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=20)
    algo = make_algorithm(
        "global",
        task,
        learning_rate=1e-9,
        privacy=central_privacy(clip=1e-3, noise_multiplier=1.0, adaptive=adaptive_clipping(0.5, lr=0.2)),
    )
    result = simulate(
        algo,
        task,
        rounds=10,
        evaluation=Evaluation(eval_every=5),
        output=Output(progress=False, out_dir=str(tmp_path / "run")),
    )
    clips = [row["dp_clip"] for row in result.history if "dp_clip" in row]
    assert len(clips) == 2
    growth = clips[1] / clips[0]
    assert math.exp(0.2 * 0.5 * 5) * 0.8 < growth < math.exp(0.2 * 0.5 * 5) * 1.2
    assert float(result.state.extra["aggregator"]) == pytest.approx(clips[-1])


def test_per_client_starts_with_poisson_slots_carry_the_bound():
    """Global with per-client starts runs on rows (the participants' path of a Poisson sample)."""
    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=10)
    algo = make_algorithm(
        "global",
        task,
        learning_rate=0.001,
        privacy=central_privacy(clip=1e-3, noise_multiplier=1.0, sampling=0.5, adaptive=adaptive_clipping(0.5)),
    )
    params = task.init_params(jax.random.PRNGKey(0))
    stacked = jax.tree.map(lambda x: jnp.broadcast_to(x, (task.num_clients,) + x.shape), params)
    state = algo.start(ClientParams(stacked), task.num_clients, jax.random.PRNGKey(1))
    for t in range(3):
        state, metrics = jax.jit(algo.round)(state, task.data, jax.random.PRNGKey(t))
    assert float(metrics["dp_clip"]) > 1e-3


def test_a_sweep_over_noise_with_adaptive_clipping_is_the_separate_runs():
    from fedjax_clust.run.sweep import sweep

    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=10)
    options = dict(learning_rate=0.001, dp_clip=0.5, dp_sampling=0.5, dp_clip_quantile=0.5)
    result = sweep(
        "global",
        task,
        grid={"dp_noise": [0.8, 2.0]},
        rounds=4,
        options=options,
        evaluation=Evaluation(eval_every=4),
        output=Output(progress=False),
    )
    for z, run in zip([0.8, 2.0], result.runs):
        alone = simulate(
            make_algorithm("global", task, dp_noise=z, **options),
            task,
            rounds=4,
            evaluation=Evaluation(eval_every=4),
            output=Output(progress=False),
        )
        assert run.history[-1]["epsilon"] == alone.history[-1]["epsilon"]
        np.testing.assert_allclose(run.history[-1]["dp_clip"], alone.history[-1]["dp_clip"], rtol=1e-5)
        np.testing.assert_allclose(run.history[-1]["mean_loss"], alone.history[-1]["mean_loss"], rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(dp_clip_quantile=1.0), "dp_clip_quantile must be"),
        (dict(dp_clip_quantile=0.5, dp_clip_lr=-0.1), "dp_clip_lr must be"),
        (dict(dp_clip_lr=0.5), "need dp_clip_quantile"),
        (dict(dp_clip_count_noise=3.0), "need dp_clip_quantile"),
        (dict(dp_clip_quantile=0.5, dp_clip_count_noise=0.0), "dp_clip_count_noise must be"),
        (
            dict(dp_clip_quantile=0.5, dp_clip_count_noise=0.05, dp_noise=None, dp_epsilon=1.0, dp_rounds=10),
            "too small for dp_epsilon",
        ),
    ],
)
def test_bad_adaptive_clipping_options_get_one_line_errors(kwargs, message):
    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=10)
    kwargs = {"dp_noise": 1.0, **kwargs}
    with pytest.raises(ValueError, match=message) as info:
        make_algorithm("global", task, learning_rate=0.01, dp_clip=1.0, **kwargs)
    assert "\n" not in str(info.value)


def test_local_privacy_refuses_adaptive_clipping():
    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=10)
    with pytest.raises(ValueError, match="dp_clip_quantile applies to central privacy"):
        make_algorithm(
            "federated-clustering",
            task,
            learning_rate=0.01,
            dp_mode="local",
            dp_clip=1.0,
            dp_noise=1.0,
            dp_clip_quantile=0.5,
        )


def test_private_ditto_releases_only_its_global_model():
    """Ditto's global model takes the private mean: attackers' gradients are clipped, so the global step is at
    most the learning rate times C (one group, denominator N); the personal models stay the clients'."""
    from fedjax_clust.robust import make_attack, mark_byzantine

    task = mark_byzantine(make_task("synthetic", seed=0, num_clusters=1, clients_per_cluster=20), fraction=0.2)
    clip = 0.5
    algo = make_algorithm(
        "ditto",
        task,
        learning_rate=1.0,
        attack=make_attack("large-gradient"),
        privacy=central_privacy(clip=clip, noise_multiplier=1e-12),
    )
    assert algo.hparams["privacy"]["mode"] == "central"
    state = algo.start(task.init_params(jax.random.PRNGKey(0)), task.num_clients)
    new, _ = jax.jit(algo.round)(state, task.data, jax.random.PRNGKey(1))
    moved = [
        np.asarray(n) - np.asarray(o)
        for n, o in zip(jax.tree.leaves(new.extra["global"]), jax.tree.leaves(state.extra["global"]))
    ]
    assert math.sqrt(sum(float(np.sum(m**2)) for m in moved)) <= clip * (1 + 1e-5)
