"""``make_algorithm(..., privacy=settings)``: a privacy settings object stands for the dp_* keywords it maps to
(fedjax_clust.privacy.settings): the same record, the same run."""

import dataclasses

import jax
import numpy as np
import pytest

from fedjax_clust.algorithms import make_algorithm
from fedjax_clust.algorithms.factory import shared_keywords
from fedjax_clust.privacy import CentralPrivacy, LocalPrivacy, adaptive_clipping, central_privacy, local_privacy
from fedjax_clust.privacy.settings import CENTRAL_ONLY, DP_DEFAULTS, privacy_keywords, privacy_settings
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.simulate import simulate
from fedjax_clust.tasks import make_task


def _task():
    return make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=5)


def test_the_keywords_defaults_are_the_settings_defaults_and_every_field_has_one():
    """DP_DEFAULTS (read from the settings classes) are make_algorithm's dp_* defaults (its shared options),
    and the map covers every dp_* keyword and every settings field."""
    dp = {p.name: p.default for p, _ in shared_keywords() if p.name.startswith("dp_")}
    assert dp == DP_DEFAULTS
    fields = {f.name for f in dataclasses.fields(CentralPrivacy)}
    keywords = privacy_keywords(central_privacy(clip=1.0, noise_multiplier=1.0))
    assert set(keywords) == set(DP_DEFAULTS) and len(fields) == len(DP_DEFAULTS) - 1  # + dp_mode
    assert set(CENTRAL_ONLY) == {
        "dp_sampling",
        "dp_slots",
        "dp_denominator",
        "dp_count_noise_ratio",
        "dp_clip_quantile",
        "dp_clip_lr",
        "dp_clip_count_noise",
    }


def test_central_settings_give_the_run_their_keywords_give():
    task = _task()
    settings = central_privacy(clip=2.0, noise_multiplier=0.7, sampling=0.5, delta=1e-6)
    by_object = make_algorithm("global", task, learning_rate=0.01, privacy=settings)
    by_keywords = make_algorithm(
        "global", task, learning_rate=0.01, dp_clip=2.0, dp_noise=0.7, dp_sampling=0.5, dp_delta=1e-6
    )
    assert by_object.hyperparameters == by_keywords.hyperparameters
    assert by_object.hyperparameters.dp_noise == 0.7 and by_object.hyperparameters.dp_mode == "central"
    assert by_object.hparams == by_keywords.hparams
    a = simulate(by_object, task, rounds=4, evaluation=Evaluation(eval_every=2), output=Output(progress=False))
    b = simulate(by_keywords, task, rounds=4, evaluation=Evaluation(eval_every=2), output=Output(progress=False))
    assert a.history == b.history
    assert all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a.state), jax.tree.leaves(b.state)))


def test_local_settings_are_dp_mode_local_and_a_target_epsilon_is_calibrated_alike():
    task = _task()
    settings = local_privacy(clip=1.0, target_epsilon=20.0, rounds=30)
    by_object = make_algorithm("federated-clustering", task, learning_rate=0.01, privacy=settings)
    by_keywords = make_algorithm(
        "federated-clustering", task, learning_rate=0.01, dp_mode="local", dp_clip=1.0, dp_epsilon=20.0, dp_rounds=30
    )
    assert by_object.hyperparameters == by_keywords.hyperparameters
    assert by_object.hyperparameters.dp_mode == "local"
    assert by_object.execution.privacy.spent(30) == by_keywords.execution.privacy.spent(30)


def test_settings_round_trip_through_their_keywords():
    for settings in (
        central_privacy(
            clip=1.0, target_epsilon=4.0, rounds=10, sampling=0.25, slots=9, adaptive=adaptive_clipping(0.5, lr=0.1)
        ),
        local_privacy(clip=3.0, noise_multiplier=2.0, accountant="rdp"),
    ):
        keywords = privacy_keywords(settings)
        assert privacy_settings(keywords) == settings
        assert isinstance(privacy_settings(keywords), (CentralPrivacy, LocalPrivacy))
    assert privacy_settings({}) is None


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(privacy=central_privacy(clip=1.0, noise_multiplier=1.0), dp_noise=2.0), "not both"),
        (dict(privacy=central_privacy(clip=1.0, noise_multiplier=1.0), dp_clip=1.0), "privacy=... or as dp_clip"),
        (dict(privacy={"clip": 1.0}), "central_privacy"),
    ],
)
def test_bad_privacy_settings_get_one_line_errors(kwargs, message):
    with pytest.raises(ValueError, match=message) as error:
        make_algorithm("global", _task(), learning_rate=0.01, **kwargs)
    assert "\n" not in str(error.value)


def test_privacy_settings_name_the_keyword_they_refuse():
    with pytest.raises(ValueError, match="dp_sampling applies to central"):
        privacy_settings({"dp_clip": 1.0, "dp_noise": 1.0, "dp_mode": "local", "dp_sampling": 0.5})
    with pytest.raises(ValueError, match="dp_noise needs dp_clip"):
        privacy_settings({"dp_noise": 1.0})
    with pytest.raises(ValueError, match="no privacy keyword"):
        privacy_settings({"dp_nois": 1.0})
