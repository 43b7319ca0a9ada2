"""Adaptive clipping: the clip bound follows a quantile of the clients' message norms, privately.

Andrew, Thakkar, McMahan and Ramaswamy 2021, "Differentially Private Learning with Adaptive Clipping"
(NeurIPS), Alg. 1 (quantile estimation) inside DP-FedAvg (their Alg. 2), geometric update. In round t, with
clip bound C_t, every client i whose message reaches the server also tells it whether the message fit:
b_i = 1[||m_i|| <= C_t]. The server releases the noised, centred count

    s_t = sum_i (b_i - 1/2) + N(0, sigma_b^2),

estimates the unclipped fraction as b_t = 1/2 + s_t / m (m = q N, the clients a round expects, a fixed
denominator as the mean's) and moves the bound geometrically towards the target quantile gamma:

    C_{t+1} = C_t exp(-eta (b_t - gamma)).

Too many messages fit (b_t > gamma): the bound shrinks; too few: it grows. A message whose squared norm is not a
finite float (module :mod:`~fedjax_clust.privacy.mechanism`: an empty Poisson slot, a diverged client) adds 0,
not -1/2: what one client adds to the count is -1/2, 0 or +1/2, so adding or removing it moves s_t by at most
1/2, and the count is a Gaussian mechanism of multiplier 2 sigma_b. Together with the update sums (noise z C_t,
sensitivity C_t; C_t depends on earlier releases only) a round is one Gaussian mechanism of multiplier

    (z^-2 + (2 sigma_b)^-2)^(-1/2)            (Andrew et al. 2021, Thm. 1)

(:func:`~fedjax_clust.privacy.accounting.combined_noise_multiplier`; with noisy counts, their term joins it).
So for the same privacy the update noise must rise from that effective multiplier to z: a target epsilon is
calibrated on the effective multiplier and z solved from it, and sigma_b must exceed half the effective
multiplier for any z to exist.

Choices where the paper has one model and this package has G: one clip bound for every group, from one count
over all of the round's clients (a per-cluster bound would estimate each cluster's fraction from about m / G
clients, with G times the noise at the same sigma_b). Centring the count (b_i - 1/2, as the paper's analysis
does) keeps the estimate unbiased at gamma = 1/2 when the round's client count differs from m. Defaults are
the paper's: gamma = 0.5, eta = 0.2, sigma_b = m / 20 (``default_count_noise``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from fedjax_clust.core.validation import check_real

__all__ = ["AdaptiveClip", "default_count_noise", "ADAPTIVE_STREAM"]

# folded into the round's privacy key for the count's noise: far above any leaf index, since fold_in(k, i) can
# equal split(k, n)[i] (the sums' noise keys)
ADAPTIVE_STREAM = 0x5ADC_11F0


def default_count_noise(expected_clients: float) -> float:
    """sigma_b = m / 20, Andrew et al.'s recommendation (the estimated fraction's noise has std 0.05)."""
    return expected_clients / 20.0


@dataclasses.dataclass(frozen=True)
class AdaptiveClip:
    """The geometric quantile update of the module docstring: target unclipped ``quantile`` gamma in (0, 1),
    ``learning_rate`` eta >= 0 (0: the bound never moves, the count is still released), ``count_noise`` sigma_b
    > 0 (the std of the count's noise, in clients) and ``expected_clients`` m > 0."""

    quantile: float
    learning_rate: float
    count_noise: float
    expected_clients: float

    def __post_init__(self):
        check_real("dp_clip_quantile", self.quantile, low=0.0, high=1.0, low_open=True, high_open=True)
        check_real("dp_clip_lr", self.learning_rate, low=0.0)
        check_real("dp_clip_count_noise", self.count_noise, low=0.0, low_open=True)
        check_real("expected_clients", self.expected_clients, low=0.0, low_open=True)

    @property
    def count_multiplier(self) -> float:
        """The count's noise multiplier: sigma_b over its sensitivity 1/2."""
        return 2.0 * self.count_noise

    def unclipped_fraction(self, norms, usable, clip, key):
        """b_t = 1/2 + (sum_i (b_i - 1/2) + N(0, sigma_b^2)) / m over the usable rows (``norms`` [N] their
        Euclidean norms, ``usable`` bool [N]); noise from ``key``."""
        centred = jnp.where(usable, jnp.where(norms <= clip, 0.5, -0.5), 0.0)
        noisy = jnp.sum(centred) + self.count_noise * jax.random.normal(key, (), jnp.float32)
        return 0.5 + noisy / self.expected_clients

    def next_clip(self, norms, usable, clip, key):
        """C_{t+1} = C_t exp(-eta (b_t - gamma)) (module docstring), kept in [1e-30, 1e30] (post-processing: a
        bound at 0 would stay there, one at inf would turn every clipped message to NaN)."""
        fraction = self.unclipped_fraction(norms, usable, clip, key)
        return jnp.clip(clip * jnp.exp(-self.learning_rate * (fraction - self.quantile)), 1e-30, 1e30)

    def describe(self) -> dict:
        """What a run records of the update."""
        return dict(
            clip_quantile=self.quantile,
            clip_lr=self.learning_rate,
            clip_count_noise=self.count_noise,
        )
