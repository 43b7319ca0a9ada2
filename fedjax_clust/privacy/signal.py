"""How much of a private release is noise: the rule behind the warning a private run gives when its calibrated
noise leaves little to learn from.

Every release a private run makes is a mean of clipped vectors (each of norm at most the clip bound C) plus
Gaussian noise. Its signal is at most C in norm; its noise, over the d coordinates of a model, has norm about
sqrt(d) times its per-coordinate standard deviation:

* central DP (:mod:`~fedjax_clust.privacy.central`): the server adds N(0, z^2 C^2 I) to the sum of the m clients'
  clipped updates and divides by m (the expected cohort, sampling x N), so the noise std of the mean is z C / m and

      noise / signal >= z sqrt(d) / m;

* local DP (:mod:`~fedjax_clust.privacy.local`): every message carries its own N(0, z^2 C^2 I); a client's step
  averages at most the S messages it receives (``messages_per_round``), so

      noise / signal >= z sqrt(d) / sqrt(S).

Both are lower bounds (a clustered algorithm averages over a cluster, not the whole cohort; a Threshold-Clustering
ball holds a fraction of the S messages; the mean of clipped updates is usually shorter than C). A ratio above
:data:`MOSTLY_NOISE` therefore means every release is mostly noise whatever the data: the run warns, naming the
ratio and what lowers it (a larger epsilon, more clients per release, fewer rounds).
"""

from __future__ import annotations

import math
from typing import Optional

__all__ = ["MOSTLY_NOISE", "noise_to_signal", "mostly_noise_message"]

MOSTLY_NOISE = 1.0  # noise norm over the largest signal norm above which a release is "mostly noise"


def noise_to_signal(privacy: dict, model_size: int, num_clients: int) -> Optional[float]:
    """The lower bound on a release's noise norm over its signal norm (module docstring) of a run whose privacy
    record is ``privacy`` (``hparams["privacy"]``: its ``mode``, ``noise_multiplier`` and ``sampling`` or
    ``messages_per_round``), for models of ``model_size`` parameters and ``num_clients`` clients; None when the
    record does not say (no noise multiplier)."""
    z = privacy.get("noise_multiplier")
    if not z:
        return None
    root_d = math.sqrt(model_size)
    if privacy.get("mode") == "local":
        messages = privacy.get("messages_per_round") or num_clients
        return z * root_d / math.sqrt(messages)
    cohort = (privacy.get("sampling") or 1.0) * num_clients
    return z * root_d / max(cohort, 1.0)


def mostly_noise_message(privacy: dict, model_size: int, num_clients: int) -> Optional[str]:
    """The warning's text when :func:`noise_to_signal` exceeds :data:`MOSTLY_NOISE`, else None."""
    ratio = noise_to_signal(privacy, model_size, num_clients)
    if ratio is None or ratio <= MOSTLY_NOISE:
        return None
    local = privacy.get("mode") == "local"
    over = (
        f"the {privacy.get('messages_per_round') or num_clients} messages a client receives"
        if local
        else f"an expected cohort of {(privacy.get('sampling') or 1.0) * num_clients:.0f} clients"
    )
    return (
        f"{privacy.get('mode', 'central')} DP with noise multiplier {privacy['noise_multiplier']:.3g}: each release's "
        f"noise is at least {ratio:.3g}x the largest signal it can carry ({model_size:,} parameters, averaged over "
        f"{over} at best), so the release is mostly noise; a larger epsilon, more clients per release or fewer "
        "rounds lower it"
    )
