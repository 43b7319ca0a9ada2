"""The settings of central differential privacy, checked once, and what they mean for the accountant.

:func:`central_privacy` gathers the choices a private run makes (``make_algorithm``'s ``dp_*`` keywords and the
command line's ``--dp-*`` flags are its front): the clip bound C, the noise -- a noise multiplier z, or a
target epsilon that :func:`~fedjax_clust.privacy.accounting.calibrate_noise` turns into the smallest z reaching
it in the given rounds --, delta, the Poisson sampling rate q (1: every client every round), the slots of a
truncated sample, the accountant and the mean's denominator (:mod:`fedjax_clust.privacy.mechanism`).

One round of an algorithm may release several noised aggregates of the same sampled clients (HypCluster's
``cluster_steps`` steps): m Gaussian releases of multiplier z on one sample are one sampled Gaussian mechanism of
multiplier z / sqrt(m) (their composition before sampling), which :meth:`CentralPrivacy.release` accounts; they
are not m independently sampled events. With noisy counts, and with adaptive clipping's count
(:mod:`fedjax_clust.privacy.adaptive`, ``clip_quantile``), the per-release multiplier is the combined one of the
sums and the counts (:attr:`~fedjax_clust.privacy.mechanism.PrivateMean.effective_noise_multiplier`); a target
epsilon fixes that combined multiplier, and the sums' z rises to reach it (:meth:`CentralPrivacy.noise_for`).
A round may also release side statistics (:class:`SideReleases`: CFL's split test) that join the same sum.

Robust aggregators refuse privacy (:func:`refuse_aggregator`): noise scaled to the clip bound covers a sum, and
a mean with a fixed (or separately noised) denominator, whose sensitivity to one client is C; a rule that
selects or iterates has another sensitivity, derived nowhere here.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, NamedTuple, Optional

from fedjax_clust.core.validation import check_choice, check_int, check_real
from fedjax_clust.privacy.accounting import ACCOUNTANTS, Release, calibrate_noise, check_delta
from fedjax_clust.privacy.adaptive import AdaptiveClip, default_count_noise
from fedjax_clust.privacy.mechanism import DENOMINATORS, PrivateMean

__all__ = [
    "PrivacyBudget",
    "SideReleases",
    "AdaptiveClipping",
    "CentralPrivacy",
    "adaptive_clipping",
    "central_privacy",
    "checked_budget",
    "refuse_aggregator",
    "ROBUST_SENSITIVITY",
]

# why each built-in robust aggregator refuses central privacy (one line each)
ROBUST_SENSITIVITY = {
    "median": "a coordinate-wise median moves by up to 2C in every coordinate when one client changes "
    "(2C sqrt(D) in norm, not C)",
    "trimmed-mean": "a trimmed mean's kept set changes with one client, so its sensitivity is set by the order "
    "statistics, not by C over a fixed denominator",
    "geometric-median": "the Weiszfeld iterate's sensitivity to one client has no bound derived here",
    "krum": "Krum returns one client's message, and which one depends on every message (sensitivity up to 2C)",
    "multi-krum": "multi-Krum's chosen set depends on every message, so one client changes several terms",
    "centered-clipping": "its iterations from the coordinate-wise median have no sensitivity bound derived here",
}


def refuse_aggregator(name: str) -> None:
    """ValueError naming why aggregator ``name`` cannot be made private here (every rule but the mean)."""
    if name in ("mean", PrivateMean.aggregator_name):
        return
    reason = ROBUST_SENSITIVITY.get(name, "its sensitivity to one client has no bound derived here")
    raise ValueError(
        f"central privacy noises a clipped sum (sensitivity C); aggregator {name!r} refuses it: {reason}. "
        "Use the mean (Byzantine clients are clipped like everyone)"
    )


class SideReleases(NamedTuple):
    """What a private round releases besides its aggregates (an algorithm spec's ``private_side_releases``):
    ``gaussians`` Gaussian mechanisms of multiplier z (the sums' noise over their own sensitivity) and
    ``counts`` counts of multiplier r z (``dp_count_noise_ratio`` r), each on the round's sample; CFL's split
    test and its private bipartition (:mod:`fedjax_clust.algorithms.cfl`)."""

    gaussians: int = 0
    counts: int = 0


@dataclasses.dataclass(frozen=True)
class PrivacyBudget:
    """What central and local settings share: the clip bound, the noise (a multiplier, or a target epsilon over
    ``rounds``), delta and the accountant; checked by :func:`checked_budget`."""

    clip: float
    noise_multiplier: Optional[float] = None
    target_epsilon: Optional[float] = None
    delta: float = 1e-5
    rounds: Optional[int] = None
    accountant: str = "rdp"

    def noise(self, sampling: float, from_round: Callable[[float], float]) -> float:
        """The mechanism's noise multiplier: the given one, or ``from_round`` of the per-round multiplier that
        spends ``target_epsilon`` at ``delta`` in ``rounds`` rounds at Poisson rate ``sampling``."""
        if self.noise_multiplier is not None:
            return self.noise_multiplier
        assert self.target_epsilon is not None and self.rounds is not None  # checked_budget checked both
        return from_round(
            calibrate_noise(self.target_epsilon, self.delta, self.rounds, sampling, accountant=self.accountant)
        )


@dataclasses.dataclass(frozen=True)
class CentralPrivacy(PrivacyBudget):
    """Checked central-privacy settings (build with :func:`central_privacy`; the module docstring)."""

    sampling: float = 1.0
    slots: Optional[int] = None
    denominator: str = "expected"
    count_noise_ratio: float = 10.0
    clip_quantile: Optional[float] = None
    clip_lr: float = 0.2
    clip_count_noise: Optional[float] = None

    def adaptive(self, num_clients: int) -> Optional[AdaptiveClip]:
        """The adaptive clip update for a population of ``num_clients`` (None: a fixed bound)."""
        if self.clip_quantile is None:
            return None
        expected = self.sampling * num_clients
        noise = default_count_noise(expected) if self.clip_count_noise is None else self.clip_count_noise
        return AdaptiveClip(self.clip_quantile, self.clip_lr, noise, expected)

    def mechanism(self, noise_multiplier: float, num_clients: int) -> PrivateMean:
        """The private mean with noise multiplier ``noise_multiplier`` for a population of ``num_clients``."""
        return PrivateMean(
            self.clip,
            noise_multiplier,
            self.sampling * num_clients,
            self.denominator,
            self.count_noise_ratio,
            self.adaptive(num_clients),
        )

    def _precisions(self, releases: int, num_clients: int, side: SideReleases) -> tuple:
        """(A, B) with the round's effective multiplier (A z^-2 + B)^(-1/2), z the sums' multiplier: each of the
        ``releases`` aggregates adds 1 (its sums), r^-2 (its noisy counts) to A and (2 sigma_b)^-2 (adaptive
        clipping's count) to B; the ``side`` releases add their Gaussians (1 each) and counts (r^-2 each) to A."""
        r2 = self.count_noise_ratio**-2
        a = 1.0 + r2 if self.denominator == "noisy-count" else 1.0
        adaptive = self.adaptive(num_clients)
        b = 0.0 if adaptive is None else adaptive.count_multiplier**-2
        return releases * a + side.gaussians + side.counts * r2, releases * b

    def release(
        self, noise_multiplier: float, releases: int, num_clients: int, side: Optional[SideReleases] = None
    ) -> Release:
        """What one round releases: ``releases`` noised aggregates of multiplier ``noise_multiplier`` (each with
        its counts) and the ``side`` releases, on one Poisson sample of rate ``sampling`` (module docstring)."""
        a, b = self._precisions(releases, num_clients, side or SideReleases())
        return Release((a * noise_multiplier**-2 + b) ** -0.5, self.sampling)

    def noise_for(self, releases: int, num_clients: int, side: Optional[SideReleases] = None) -> float:
        """The noise multiplier z of the sums: the given one, or the smallest whose round reaches
        ``target_epsilon`` at ``delta`` in ``rounds`` rounds (ValueError if none up to 1e4 per release does, or
        if adaptive clipping's count noise alone spends more than the target)."""
        a, b = self._precisions(releases, num_clients, side or SideReleases())
        adaptive = self.adaptive(num_clients)

        def sums(z_round: float) -> float:
            if b == 0:
                return z_round * math.sqrt(a)
            left = z_round**-2 - b
            if left <= 0:
                assert adaptive is not None  # b > 0 only with adaptive clipping
                raise ValueError(
                    f"dp_clip_count_noise={adaptive.count_noise:g} is too small for "
                    f"dp_epsilon={self.target_epsilon:g}: the clipped count alone spends more; raise it above "
                    f"{z_round * math.sqrt(releases) / 2:.4g} (half the calibrated multiplier of each release)"
                )
            return math.sqrt(a / left)

        return self.noise(self.sampling, sums)


def checked_budget(clip, noise_multiplier, target_epsilon, delta, rounds, accountant) -> tuple:
    """(clip, noise multiplier, target epsilon, delta, rounds) checked, central or local alike: a clip bound > 0,
    exactly one of the noise multiplier and a target epsilon (which needs the rounds), delta in (0, 1), a
    registered accountant; one-line ValueErrors with ``make_algorithm``'s ``dp_*`` names."""
    clip = check_real("dp_clip", clip, low=0.0, low_open=True)
    if (noise_multiplier is None) == (target_epsilon is None):
        raise ValueError("privacy needs exactly one of dp_noise (the noise multiplier) and dp_epsilon (a target)")
    if noise_multiplier is not None:
        noise_multiplier = check_real("dp_noise", noise_multiplier, low=0.0, low_open=True)
    if target_epsilon is not None:
        target_epsilon = check_real("dp_epsilon", target_epsilon, low=0.0, low_open=True)
        if rounds is None:
            raise ValueError("dp_epsilon (a target) needs the rounds it must last (dp_rounds)")
    if rounds is not None:
        rounds = check_int("dp_rounds", rounds)
    check_choice("dp_accountant", accountant, tuple(ACCOUNTANTS))
    return clip, noise_multiplier, target_epsilon, check_delta(delta), rounds


class AdaptiveClipping(NamedTuple):
    """Adaptive clipping's settings (Andrew et al. 2021; build with :func:`adaptive_clipping`): the target share
    ``quantile`` gamma of messages within the bound, its geometric step ``lr`` eta and the noise std
    ``count_noise`` sigma_b on the clipped count, in clients (None: the paper's q N / 20)."""

    quantile: float
    lr: float = 0.2
    count_noise: Optional[float] = None


def adaptive_clipping(quantile: float, *, lr: float = 0.2, count_noise: Optional[float] = None) -> AdaptiveClipping:
    """Checked adaptive-clipping settings for :func:`central_privacy` (``adaptive=``): the clip bound then follows
    the ``quantile`` gamma in (0, 1) of the messages' norms from ``clip`` (the paper: 0.5), by geometric steps of
    ``lr`` eta >= 0 (the paper's 0.2), its clipped count noised with std ``count_noise`` sigma_b > 0 in clients
    (None: the paper's q N / 20), also accounted. ValueErrors name the ``dp_clip_*`` keyword they stand for."""
    quantile = check_real("dp_clip_quantile", quantile, low=0.0, high=1.0, low_open=True, high_open=True)
    lr = check_real("dp_clip_lr", lr, low=0.0)
    if count_noise is not None:
        count_noise = check_real("dp_clip_count_noise", count_noise, low=0.0, low_open=True)
    return AdaptiveClipping(quantile, lr, count_noise)


def central_privacy(
    *,
    clip: float,
    noise_multiplier: Optional[float] = None,
    target_epsilon: Optional[float] = None,
    delta: float = 1e-5,
    sampling: float = 1.0,
    rounds: Optional[int] = None,
    slots: Optional[int] = None,
    accountant: str = "rdp",
    denominator: str = "expected",
    count_noise_ratio: float = 10.0,
    adaptive: Optional[AdaptiveClipping] = None,
) -> CentralPrivacy:
    """Checked central-privacy settings; one-line ValueErrors naming the bad value (the ``dp_*`` names of
    ``make_algorithm``). Exactly one of ``noise_multiplier`` and ``target_epsilon``; a target needs ``rounds``.
    ``adaptive`` (:func:`adaptive_clipping`, checked again here) turns on adaptive clipping (``clip`` is then the
    initial bound); the settings hold its three numbers as their ``clip_quantile``, ``clip_lr`` and
    ``clip_count_noise`` fields (the ``dp_clip_*`` keywords)."""
    clip, noise_multiplier, target_epsilon, delta, rounds = checked_budget(
        clip, noise_multiplier, target_epsilon, delta, rounds, accountant
    )
    sampling = check_real("dp_sampling", sampling, low=0.0, high=1.0, low_open=True)
    if slots is not None:
        slots = check_int("dp_slots", slots)
        if sampling == 1.0:
            raise ValueError("dp_slots apply to Poisson sampling (dp_sampling < 1)")
    check_choice("dp_denominator", denominator, DENOMINATORS)
    count_noise_ratio = check_real("dp_count_noise_ratio", count_noise_ratio, low=0.0, low_open=True)
    if adaptive is not None and not isinstance(adaptive, AdaptiveClipping):
        raise ValueError(f"adaptive must be settings from adaptive_clipping(...), got {adaptive!r}")
    settings = CentralPrivacy(
        clip=clip,
        noise_multiplier=noise_multiplier,
        target_epsilon=target_epsilon,
        delta=delta,
        rounds=rounds,
        accountant=accountant,
        sampling=sampling,
        slots=slots,
        denominator=denominator,
        count_noise_ratio=count_noise_ratio,
    )
    if adaptive is None:  # a fixed bound: CentralPrivacy's defaults for the three fields
        return settings
    adaptive = adaptive_clipping(adaptive.quantile, lr=adaptive.lr, count_noise=adaptive.count_noise)
    return dataclasses.replace(
        settings, clip_quantile=adaptive.quantile, clip_lr=adaptive.lr, clip_count_noise=adaptive.count_noise
    )
