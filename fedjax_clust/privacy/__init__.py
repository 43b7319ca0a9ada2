"""Differential privacy: the central mechanism (:mod:`~fedjax_clust.privacy.mechanism`), its settings
(:mod:`~fedjax_clust.privacy.central`) and the accountants (:mod:`~fedjax_clust.privacy.accounting`). The
algorithms take it through ``make_algorithm``'s ``dp_*`` options (:mod:`fedjax_clust.algorithms.private`)."""

from fedjax_clust.privacy.accounting import (
    ACCOUNTANTS,
    Ledger,
    Release,
    calibrate_noise,
    combined_noise_multiplier,
    register_accountant,
)
from fedjax_clust.privacy.accounting import epsilon as privacy_epsilon
from fedjax_clust.privacy.central import CentralPrivacy, central_privacy
from fedjax_clust.privacy.mechanism import PrivateMean, clip_rows

__all__ = [
    "ACCOUNTANTS",
    "CentralPrivacy",
    "Ledger",
    "PrivateMean",
    "Release",
    "calibrate_noise",
    "central_privacy",
    "clip_rows",
    "combined_noise_multiplier",
    "privacy_epsilon",
    "register_accountant",
]
