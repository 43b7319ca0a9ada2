"""Differential privacy: the central mechanism (:mod:`~fedjax_clust.privacy.mechanism`), adaptive clipping
(:mod:`~fedjax_clust.privacy.adaptive`), the noisy power method (:mod:`~fedjax_clust.privacy.principal`), local DP
(:mod:`~fedjax_clust.privacy.local`), the settings (:mod:`~fedjax_clust.privacy.central`) and the accountants
(:mod:`~fedjax_clust.privacy.accounting`). The
algorithms take it through ``make_algorithm``'s ``privacy=`` settings or its ``dp_*`` options
(:mod:`~fedjax_clust.privacy.settings`, :mod:`fedjax_clust.algorithms.private`)."""

from fedjax_clust.privacy.accounting import (
    ACCOUNTANTS,
    Ledger,
    Release,
    calibrate_noise,
    combined_noise_multiplier,
    register_accountant,
)
from fedjax_clust.privacy.accounting import epsilon as privacy_epsilon
from fedjax_clust.privacy.adaptive import AdaptiveClip
from fedjax_clust.privacy.central import (
    AdaptiveClipping,
    CentralPrivacy,
    SideReleases,
    adaptive_clipping,
    central_privacy,
)
from fedjax_clust.privacy.local import LocalPrivacy, local_privacy
from fedjax_clust.privacy.mechanism import PrivateMean, clip_rows, row_norms
from fedjax_clust.privacy.principal import private_top_direction

__all__ = [
    "ACCOUNTANTS",
    "AdaptiveClip",
    "SideReleases",
    "private_top_direction",
    "row_norms",
    "AdaptiveClipping",
    "CentralPrivacy",
    "LocalPrivacy",
    "Ledger",
    "PrivateMean",
    "Release",
    "calibrate_noise",
    "adaptive_clipping",
    "central_privacy",
    "local_privacy",
    "clip_rows",
    "combined_noise_multiplier",
    "privacy_epsilon",
    "register_accountant",
]
