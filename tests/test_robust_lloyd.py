"""Stage II of Ghosh et al.: Lloyd, K-geomedians and Trimmed K-means (Alg. 2) against NumPy loops, and the
paper's qualitative result (adversarial points stall Lloyd, not the robust variants)."""

import numpy as np
import pytest
from references import lloyd_reference

from fedjax_clust.robust.lloyd import robust_lloyd, threshold_components


@pytest.mark.parametrize("rule", ["lloyd", "k-geomedians", "trimmed-k-means"])
def test_robust_lloyd_equals_a_loop(rule):
    rng = np.random.default_rng(3)
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
    truth = rng.integers(0, 3, size=40)
    points = centres[truth] + rng.standard_normal((40, 2))
    points[:4] = 60.0 + rng.standard_normal((4, 2))  # outliers
    labels0 = np.where(rng.random(40) < 0.6, truth, rng.integers(0, 3, size=40))
    labels0[labels0 == 2] = np.where(np.arange(40)[labels0 == 2] < 20, 2, 1)
    got_labels, got_centres = robust_lloyd(
        points.astype(np.float32), labels0, 3, rule=rule, iterations=4, radius=3.0, weiszfeld_steps=30
    )
    ref_labels, ref_centres = lloyd_reference(points, labels0, 3, rule, 4, 3.0)
    np.testing.assert_array_equal(np.asarray(got_labels), ref_labels)
    np.testing.assert_allclose(np.asarray(got_centres), ref_centres, rtol=1e-3, atol=1e-3)


def test_robust_variants_resist_the_outliers_that_stall_lloyd():
    """Ghosh et al. Fig. 2a in miniature: 5 clusters of Bernoulli(1/2) centres in d = 20 observed with noise,
    30% adversarial points at 3 x Bernoulli(1/2), 60% correct initial labels: Lloyd keeps a large
    misclustering rate of the good points (0.31 over these 4 draws), Trimmed K-means none and K-geomedians
    almost none (0.04)."""
    k, m, d, good, trials = 5, 100, 20, 70, 4
    rng = np.random.default_rng(11)
    rates = {"lloyd": [], "trimmed-k-means": [], "k-geomedians": []}
    for _ in range(trials):
        theta = rng.integers(0, 2, size=(k, d)).astype(float)
        truth = rng.integers(0, k, size=good)
        points = np.concatenate(
            [theta[truth] + 0.2 * rng.standard_normal((good, d)), 3.0 * rng.integers(0, 2, size=(m - good, d))]
        )
        labels0 = np.concatenate(
            [np.where(rng.random(good) < 0.6, truth, rng.integers(0, k, size=good)), rng.integers(0, k, size=m - good)]
        )
        for rule in rates:
            labels, _ = robust_lloyd(points, labels0, k, rule=rule, iterations=10, radius=0.2 * 3 * np.sqrt(d))
            rates[rule].append(float(np.mean(np.asarray(labels)[-1, :good] != truth)))
    mean = {rule: float(np.mean(r)) for rule, r in rates.items()}
    assert mean["trimmed-k-means"] <= 0.02 and mean["k-geomedians"] <= 0.1, mean
    assert mean["lloyd"] >= 0.2, mean


def test_threshold_components_and_checks():
    points = np.array([[0.0], [0.5], [5.0], [5.4], [20.0]])
    np.testing.assert_array_equal(np.asarray(threshold_components(points, 1.0)), [0, 0, 2, 2, 4])
    with pytest.raises(ValueError, match="radius"):
        robust_lloyd(points, np.zeros(5, int), 2, rule="trimmed-k-means")
    with pytest.raises(ValueError, match="rule"):
        robust_lloyd(points, np.zeros(5, int), 2, rule="k-medoids")
