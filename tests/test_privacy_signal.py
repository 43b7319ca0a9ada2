"""The rule behind the "mostly noise" warning (privacy/signal.py): its noise-to-signal bound is what the central and
local mechanisms actually add, measured on zero messages; a run whose releases are mostly noise says so."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_clust.cli.commands import main
from fedjax_clust.privacy.local import LocalGaussian
from fedjax_clust.privacy.mechanism import PrivateMean
from fedjax_clust.privacy.signal import mostly_noise_message, noise_to_signal


def test_the_central_bound_is_the_mechanisms_noise_over_the_clip():
    """m = 50 zero messages of d = 4,000 coordinates, z = 2, C = 3: the released mean is pure noise, and its norm
    over C is z sqrt(d) / m = 2.53 (to the chi distribution's spread, 1 / sqrt(2 d) = 1.1%)."""
    d, m, z, clip = 4000, 50, 2.0, 3.0
    mean = PrivateMean(clip=clip, noise_multiplier=z, expected_clients=m)
    out, _ = mean.segments(jnp.zeros((m, d)), jnp.zeros(m, jnp.int32), 1, jax.random.PRNGKey(0))
    measured = float(jnp.linalg.norm(out[0])) / clip
    bound = noise_to_signal({"mode": "central", "noise_multiplier": z, "sampling": 0.5}, d, 2 * m)
    assert bound == pytest.approx(z * np.sqrt(d) / m)
    assert measured == pytest.approx(bound, rel=0.05)


def test_the_local_bound_is_the_noise_of_the_mean_of_all_messages():
    d, s, z, clip = 4000, 64, 3.0, 0.5
    private = LocalGaussian(clip=clip, noise_multiplier=z).privatize(jnp.zeros((s, d)), 0, jax.random.PRNGKey(1))
    measured = float(jnp.linalg.norm(jnp.mean(private, axis=0))) / clip
    bound = noise_to_signal({"mode": "local", "noise_multiplier": z, "messages_per_round": s}, d, 1000)
    assert bound == pytest.approx(z * np.sqrt(d) / np.sqrt(s))
    assert measured == pytest.approx(bound, rel=0.05)


def test_the_message_appears_only_above_one():
    record = {"mode": "central", "noise_multiplier": 1.0, "sampling": 1.0}
    assert mostly_noise_message(record, 100, 10) is None  # 1 x 10 / 10 = 1: not above
    assert "at least 1.1x the largest signal" in mostly_noise_message(record, 121, 10)
    assert noise_to_signal({"mode": "central"}, 100, 10) is None


def test_a_run_whose_releases_are_mostly_noise_says_so(tmp_path, capsys):
    """The issue's run (local DP, C = 10, epsilon 8) at 5 rounds: z = 49.5 over 300 messages of 10 parameters,
    9.0x; central DP on Global at the same epsilon (z = 0.73 over 60 expected clients, 0.04x) says nothing."""
    common = ["--dp-clip", "10", "--dp-epsilon", "8", "--rounds", "5", "--no-progress"]
    assert (
        main(
            ["run", "--algorithm", "federated-clustering", "--dp-mode", "local", *common, "--out", str(tmp_path / "fc")]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert (
        "warning: federated-clustering: local DP with noise multiplier 49.5: each release's noise is at least 9.03x"
        in err
    ), err
    assert main(["run", "--algorithm", "global", "--dp-sampling", "0.2", *common, "--out", str(tmp_path / "g")]) == 0
    assert "mostly noise" not in capsys.readouterr().err


def test_a_sweep_warns_for_each_noise_it_calibrates(tmp_path, capsys):
    assert (
        main(
            [
                "sweep",
                "--algorithm",
                "federated-clustering",
                "--dp-mode",
                "local",
                "--dp-clip",
                "10",
                "--dp-epsilon",
                "8,80",
                "--rounds",
                "2",
                "--no-progress",
                "--out",
                str(tmp_path / "s"),
            ]
        )
        == 0
    )
    lines = [line for line in capsys.readouterr().err.splitlines() if "mostly noise" in line]
    assert len(lines) == 2 and "noise multiplier 5.86: each release's noise is at least 1.07x" in lines[1], lines
