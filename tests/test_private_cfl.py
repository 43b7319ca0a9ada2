"""Private CFL: the noisy power method against a float64 eigenvector, the private spectral split recovering the
true clusters, and its accounting (the cluster sums, the split test's count and the power iterations)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_clust.algorithms import make_algorithm
from fedjax_clust.privacy import adaptive_clipping, central_privacy
from fedjax_clust.privacy.principal import private_top_direction
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.simulate import simulate
from fedjax_clust.tasks import make_task


def test_the_noisy_power_method_finds_the_top_eigenvector_of_the_clipped_rows():
    rng = np.random.default_rng(0)
    direction = rng.normal(size=12)
    rows = np.outer(rng.choice([-1.0, 1.0], size=40) * rng.uniform(1, 2, size=40), direction)
    rows += 0.1 * rng.normal(size=rows.shape)
    members = np.arange(40) < 30
    clip = 0.5  # every row is longer: each is scaled to norm 0.5 first
    v = private_top_direction(
        jnp.asarray(rows, jnp.float32), jnp.asarray(members), clip, 1e-6, 30, jax.random.PRNGKey(0)
    )
    clipped = rows * np.minimum(1.0, clip / np.linalg.norm(rows, axis=1))[:, None]
    kept = clipped[members].astype(np.float64)
    top = np.linalg.eigh(kept.T @ kept)[1][:, -1]
    assert abs(float(np.dot(np.asarray(v, np.float64), top))) > 1 - 1e-5
    assert float(jnp.linalg.norm(v)) == pytest.approx(1.0, rel=1e-5)


def test_the_noise_of_each_iteration_has_std_z_c_squared():
    """One iteration, one member c = 5 e_1 clipped to C = 2: v = normalise(<c, v_0> c + z C^2 xi), with v_0 and
    xi the key's draws (rebuilt here): the noise's scale relative to the signal is z C^2."""
    key, z, clip, dim = jax.random.PRNGKey(3), 0.7, 2.0, 6
    rows = jnp.zeros((3, dim), jnp.float32).at[0, 0].set(5.0)
    v = private_top_direction(rows, jnp.asarray([True, False, True]), clip, z, 1, key)
    k_start, k_noise = jax.random.split(key)
    start = np.asarray(jax.random.normal(k_start, (dim,), jnp.float32), np.float64)
    start /= np.linalg.norm(start)
    xi = np.asarray(jax.random.normal(jax.random.fold_in(k_noise, 0), (dim,), jnp.float32), np.float64)
    c = np.zeros(dim)
    c[0] = clip
    w = np.dot(c, start) * c + z * clip**2 * xi
    np.testing.assert_allclose(np.asarray(v, np.float64), w / np.linalg.norm(w), rtol=1e-5, atol=1e-6)


def test_private_cfl_splits_along_the_true_clusters():
    """Noise ~0 and a split test that always passes: the first split (round min_rounds) puts every client on
    its true cluster's side (the spectral split of the centred updates)."""
    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=30)
    algo = make_algorithm(
        "cfl",
        task,
        learning_rate=0.01,
        privacy=central_privacy(clip=1e6, noise_multiplier=1e-6, denominator="noisy-count"),
        min_rounds=2,
        eps1=1e9,
        eps2=1e-3,
        max_clusters=2,
    )
    result = simulate(algo, task, rounds=6, evaluation=Evaluation(eval_every=3), output=Output(progress=False))
    assert int(result.state.extra["clusters"]) == 2
    assert result.history[-1]["misclustering"] == 0.0
    assert result.history[-1]["mean_sq_dist_to_optimum"] < result.history[0]["mean_sq_dist_to_optimum"]


@pytest.mark.parametrize("noise,splits", [(1e-6, True), (1e6, False)])
def test_a_noised_mean_above_eps1_never_splits(noise, splits):
    """Exact counts (count noise ~0): with noise ~0 the split test passes (eps1 = 1e9 above every mean update);
    with noise z C sqrt(D) / n_c far above eps1 it never does."""
    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=10)
    algo = make_algorithm(
        "cfl",
        task,
        learning_rate=0.01,
        privacy=central_privacy(clip=1e6, noise_multiplier=noise, denominator="noisy-count", count_noise_ratio=1e-12),
        min_rounds=1,
        eps1=1e9,
        eps2=1e-3,
    )
    result = simulate(
        algo, task, rounds=3, evaluation=Evaluation(eval_every=3, on_nonfinite="warn"), output=Output(progress=False)
    )
    assert (int(result.state.extra["clusters"]) > 1) == splits


def test_private_cfl_accounts_the_sums_the_count_and_the_power_iterations():
    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=20)
    kw = dict(
        learning_rate=0.01,
        dp_clip=10.0,
        dp_sampling=0.5,
        split_power_steps=4,
        dp_count_noise_ratio=5.0,
        dp_denominator="noisy-count",
    )
    z = 2.0
    privacy = make_algorithm("cfl", task, dp_noise=z, **kw).hparams["privacy"]
    assert privacy["side_releases"] == {"gaussians": 4, "counts": 2}
    # the sums with their member counts, the power iterations, the split test's and the sides' counts
    want = (z**-2 * (1 + 4) + 3 * (5.0 * z) ** -2) ** -0.5
    assert privacy["round_noise_multiplier"] == pytest.approx(want, rel=1e-12)
    target = make_algorithm("cfl", task, dp_epsilon=6.0, dp_rounds=40, **kw)
    assert target.execution.privacy.spent(40)["epsilon"] == pytest.approx(6.0, rel=0.01)
    assert target.hparams["privacy"]["noise_multiplier"] == pytest.approx(
        target.hparams["privacy"]["round_noise_multiplier"] * math.sqrt(5 + 3 * 5.0**-2), rel=1e-9
    )


def test_private_cfl_with_adaptive_clipping_and_attackers_runs():
    from fedjax_clust.robust import mark_byzantine

    task = mark_byzantine(make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=10), fraction=0.2)
    algo = make_algorithm(
        "cfl",
        task,
        learning_rate=0.01,
        attack="sign-flip",
        privacy=central_privacy(
            clip=1.0, noise_multiplier=1.0, sampling=0.5, adaptive=adaptive_clipping(0.5), denominator="noisy-count"
        ),
        optimizer="adam",
    )
    result = simulate(algo, task, rounds=4, evaluation=Evaluation(eval_every=2), output=Output(progress=False))
    assert result.summary["status"] == "completed"
    assert result.history[-1]["dp_clip"] > 1.0  # the updates are far above 1: the bound grows


def test_split_power_steps_need_privacy_and_private_cfl_needs_noisy_counts():
    task = make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=10)
    with pytest.raises(ValueError, match="split_power_steps applies to private CFL"):
        make_algorithm("cfl", task, learning_rate=0.01, split_power_steps=5)
    with pytest.raises(ValueError, match="dp_denominator='noisy-count'"):
        make_algorithm("cfl", task, learning_rate=0.01, privacy=central_privacy(clip=1.0, noise_multiplier=1.0))


def test_an_adaptive_private_mean_without_its_state_is_refused():
    from fedjax_clust.privacy.adaptive import AdaptiveClip
    from fedjax_clust.privacy.mechanism import PrivateMean
    from fedjax_clust.robust.aggregators import aggregate_segments, aggregate_segments_with_state

    mean = PrivateMean(1.0, 1.0, 4.0, adaptive=AdaptiveClip(0.5, 0.2, 1.0, 4.0))
    messages, labels = jnp.ones((4, 3)), jnp.zeros((4,), jnp.int32)
    with pytest.raises(ValueError, match="keeps its clip bound as state"):
        aggregate_segments(mean, messages, labels, 1, key=jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="none was given"):
        aggregate_segments_with_state(mean, None, messages, labels, 1, key=jax.random.PRNGKey(0))
