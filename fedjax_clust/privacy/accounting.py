"""Privacy accounting: the (epsilon, delta) a run has spent after t rounds of a sampled Gaussian mechanism.

What one round releases about one client is a :class:`Release`: the Gaussian mechanism with noise multiplier
z (noise standard deviation over L2 sensitivity), applied to a Poisson sample of the clients in which each
client takes part independently with probability q (q = 1: every client, no sampling). Rounds compose.

Accountants (``ACCOUNTANTS``, a registry: :func:`register_accountant` adds one):

* ``"rdp"`` (the default, no dependency): Renyi DP of the Poisson-subsampled Gaussian at the integer orders
  alpha = 2, 3, ... (Mironov, Talwar and Zhang 2019, "Renyi Differential Privacy of the Sampled Gaussian
  Mechanism", Sec. 3.3: for integer alpha the divergence is the finite binomial sum

      A_alpha = sum_{k=0}^{alpha} C(alpha, k) (1 - q)^(alpha - k) q^k exp((k^2 - k) / (2 z^2)),
      RDP(alpha) = log(A_alpha) / (alpha - 1),

  computed in log space), composed over rounds by adding RDP (Mironov 2017, Prop. 1) and turned into epsilon
  at delta by the conversion of Canonne, Kamath and Steinke 2020 (Prop. 12; also Asoodeh et al. 2020):
  eps = min_alpha RDP_T(alpha) + log(1 - 1/alpha) - log(delta alpha) / (alpha - 1). Without sampling (q = 1)
  RDP(alpha) = alpha / (2 z^2) exactly. This is our own implementation; the suite checks it against
  ``dp-accounting``'s RDP accountant at the same orders (equal to rounding) and against a published value;
* ``"dp-rdp"``: Google's ``dp-accounting`` RDP accountant (its default orders: fractional ones, and a different
  set of integer ones, so within a few percent of ``"rdp"`` on either side), with
  ``PoissonSampledDpEvent(q, GaussianDpEvent(z))`` self-composed over the rounds;
* ``"pld"``: ``dp-accounting``'s privacy-loss-distribution accountant on the same event (the tightest of the
  three; ``pip install "fedjax-clust[privacy]"`` for both ``dp-accounting`` ones).

All three assume add-or-remove-one adjacency of clients (user-level DP: one client's whole data) and Poisson
sampling, which is what :func:`fedjax_clust.algorithms.participation.participation_rule`'s ``poisson`` rule
draws. A rule that truncates the Poisson sample to a fixed number of slots differs from Poisson sampling only on
the event that more clients were drawn than there are slots, of probability at most p per round whatever the data
(p computed for the larger neighbour, N + 1 clients);
over T rounds the guarantee then holds with delta + T p (1 + e^eps) (the two mechanisms' outputs differ with
probability at most T p; :class:`Ledger` reports that delta).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable, Optional, Sequence

import numpy as np

from fedjax_clust.core.registry import Registry

__all__ = [
    "Release",
    "ACCOUNTANTS",
    "register_accountant",
    "accountant_names",
    "rdp_orders",
    "sampled_gaussian_rdp",
    "rdp_to_epsilon",
    "epsilon",
    "combined_noise_multiplier",
    "calibrate_noise",
    "Ledger",
    "check_delta",
]

# the integer orders of the "rdp" accountant: every alpha up to 64, then sparser (large orders serve tiny q and
# large z over many rounds, small ones large epsilon)
RDP_ORDERS = tuple(range(2, 65)) + (72, 80, 96, 128, 160, 192, 256, 384, 512, 768, 1024)
MAX_NOISE_MULTIPLIER = 1e4  # calibration's search range for z: [1e-3, 1e4]
MIN_NOISE_MULTIPLIER = 1e-3


def check_delta(delta) -> float:
    """delta must be a number in (0, 1) (ValueError naming it otherwise)."""
    from fedjax_clust.core.validation import check_real

    return check_real("dp_delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)


@dataclasses.dataclass(frozen=True)
class Release:
    """What one round releases about one client: the Gaussian mechanism with noise multiplier
    ``noise_multiplier`` (std / L2 sensitivity, > 0) on a Poisson sample of rate ``sampling`` in (0, 1]."""

    noise_multiplier: float
    sampling: float = 1.0

    def __post_init__(self):
        if not (isinstance(self.noise_multiplier, (int, float)) and self.noise_multiplier > 0):
            raise ValueError(f"the noise multiplier must be > 0, got {self.noise_multiplier!r}")
        if not (isinstance(self.sampling, (int, float)) and 0 < self.sampling <= 1):
            raise ValueError(f"the sampling rate must be in (0, 1], got {self.sampling!r}")


def rdp_orders() -> np.ndarray:
    """The integer Renyi orders of the ``"rdp"`` accountant."""
    return np.asarray(RDP_ORDERS, np.float64)


def _log_binomial(n: int, k: np.ndarray) -> np.ndarray:
    from scipy.special import gammaln

    return gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)


def sampled_gaussian_rdp(release: Release, orders: Optional[Sequence[int]] = None) -> np.ndarray:
    """RDP(alpha) of one round of ``release`` at the integer ``orders`` (default :func:`rdp_orders`), by the
    binomial sum of Mironov, Talwar and Zhang 2019 (module docstring), float64 in log space."""
    chosen = tuple(float(a) for a in (RDP_ORDERS if orders is None else np.asarray(orders).ravel()))
    return np.array(_sampled_gaussian_rdp(float(release.noise_multiplier), float(release.sampling), chosen))


@functools.lru_cache(maxsize=256)
def _sampled_gaussian_rdp(z: float, q: float, order_values: tuple) -> tuple:
    from scipy.special import logsumexp

    orders = np.asarray(order_values, np.float64)
    if np.any(orders < 2) or np.any(orders != np.round(orders)):
        raise ValueError("the rdp accountant's orders are integers >= 2")
    if q == 1.0:
        return tuple(orders / (2 * z * z))
    out = np.empty_like(orders)
    for i, alpha in enumerate(orders.astype(int)):
        k = np.arange(alpha + 1, dtype=np.float64)
        terms = _log_binomial(alpha, k) + (alpha - k) * math.log1p(-q) + k * math.log(q) + (k * k - k) / (2 * z * z)
        out[i] = logsumexp(terms) / (alpha - 1)
    return tuple(np.maximum(out, 0.0))


def rdp_to_epsilon(orders: np.ndarray, rdp: np.ndarray, delta: float) -> float:
    """The smallest epsilon over ``orders`` of (RDP ``rdp``, delta)-DP by Canonne, Kamath and Steinke 2020,
    Prop. 12: eps = rdp + log(1 - 1/alpha) - log(delta alpha) / (alpha - 1), at least 0; at an order where
    delta^2 > 1 - exp(-rdp), the KL bound gives epsilon 0 (as ``dp-accounting``)."""
    orders, rdp = np.asarray(orders, np.float64), np.asarray(rdp, np.float64)
    eps = rdp + np.log1p(-1.0 / orders) - np.log(delta * orders) / (orders - 1)
    eps = np.where(delta**2 + np.expm1(-rdp) > 0, 0.0, eps)
    return float(max(0.0, np.min(eps)))


def _rdp_epsilon(release: Release, rounds: int, delta: float) -> float:
    return rdp_to_epsilon(rdp_orders(), rounds * sampled_gaussian_rdp(release), delta)


def _dp_accounting():
    try:
        import dp_accounting
    except ImportError:  # an optional dependency
        raise ValueError(
            'this accountant needs dp-accounting: pip install "fedjax-clust[privacy]" (or use accountant "rdp")'
        ) from None
    return dp_accounting


def _event(release: Release, rounds: int):
    dp_accounting = _dp_accounting()
    event = dp_accounting.GaussianDpEvent(release.noise_multiplier)
    if release.sampling < 1:
        event = dp_accounting.PoissonSampledDpEvent(release.sampling, event)
    return dp_accounting.SelfComposedDpEvent(event, rounds)


def _dp_rdp_epsilon(release: Release, rounds: int, delta: float) -> float:
    accountant = _dp_accounting().rdp.RdpAccountant()
    return float(accountant.compose(_event(release, rounds)).get_epsilon(delta))


def _pld_epsilon(release: Release, rounds: int, delta: float) -> float:
    accountant = _dp_accounting().pld.PLDAccountant()
    return float(accountant.compose(_event(release, rounds)).get_epsilon(delta))


# name -> epsilon(release, rounds, delta); registration order is the listing order
ACCOUNTANTS: Registry[Callable[[Release, int, float], float]] = Registry("accountant", name_of=None)
for _name, _function in (("rdp", _rdp_epsilon), ("dp-rdp", _dp_rdp_epsilon), ("pld", _pld_epsilon)):
    ACCOUNTANTS.register(_function, name=_name)
del _name, _function


def register_accountant(name: str, function: Callable[[Release, int, float], float], *, replace: bool = False):
    """Add accountant ``name``: ``function(release, rounds, delta) -> epsilon`` (ValueError if the name is
    taken, unless ``replace``)."""
    if not callable(function):
        raise ValueError(f"accountant {name!r}: function must be callable")
    if name in ACCOUNTANTS and not replace:  # even by the same function
        raise ValueError(f"accountant {name!r} is already registered (pass replace=True to replace it)")
    return ACCOUNTANTS.register(function, name=name, replace=replace)


def accountant_names() -> tuple:
    """The registered accountants' names."""
    return tuple(ACCOUNTANTS)


def _accountant(name: str):
    return ACCOUNTANTS.lookup(name)


def epsilon(release: Release, rounds: int, delta: float, accountant: str = "rdp") -> float:
    """The epsilon at ``delta`` after ``rounds`` rounds of ``release`` (0 rounds: 0), by ``accountant``."""
    delta = check_delta(delta)
    if rounds == 0:
        return 0.0
    return _accountant(accountant)(release, int(rounds), delta)


def combined_noise_multiplier(*multipliers: float) -> float:
    """The one Gaussian mechanism several release together: Gaussian noise of multipliers z_1, ..., z_m on
    queries of sensitivity 1 each (each query's noise std z_i over its own sensitivity) is the Gaussian
    mechanism on the stacked query with noise multiplier (sum_i z_i^-2)^(-1/2) (rescale each part to a common
    noise; the stacked sensitivity is the root of the sum of squares). Andrew et al. 2021 (Adaptive clipping,
    Thm. 1) use it for the clipped-count noise; here it also covers a noisy per-cluster count."""
    if not multipliers or any(not z > 0 for z in multipliers):
        raise ValueError(f"noise multipliers must be > 0, got {multipliers!r}")
    return float(math.fsum(float(z) ** -2 for z in multipliers) ** -0.5)


def calibrate_noise(
    target_epsilon: float,
    delta: float,
    rounds: int,
    sampling: float = 1.0,
    *,
    accountant: str = "rdp",
    tolerance: float = 1e-3,
) -> float:
    """The smallest noise multiplier z (to ``tolerance`` relative) whose ``rounds`` rounds of a Poisson-sampled
    Gaussian mechanism at rate ``sampling`` spend at most ``target_epsilon`` at ``delta``: bracketed outward from
    z = 1 by factors of 2 within [1e-3, 1e4] (tiny z make the "pld" accountant's grids huge, so they are visited
    only when needed), then bisection on log z (epsilon falls as z grows). ValueError when even z = 1e4 spends
    more (no noise reaches the target in these rounds)."""
    from fedjax_clust.core.validation import check_int, check_real

    target = check_real("dp_epsilon", target_epsilon, low=0.0, low_open=True)
    delta = check_delta(delta)
    rounds = check_int("rounds", rounds)
    sampling = check_real("dp_sampling", sampling, low=0.0, high=1.0, low_open=True)

    def spent(z):
        return epsilon(Release(z, sampling), rounds, delta, accountant)

    lo = hi = 1.0
    if spent(hi) > target:  # too little noise at 1: double until enough
        while spent(hi) > target:
            if hi >= MAX_NOISE_MULTIPLIER:
                raise ValueError(
                    f"no noise multiplier up to {MAX_NOISE_MULTIPLIER:g} reaches epsilon {target:g} at delta {delta:g} "
                    f"in {rounds} rounds with sampling rate {sampling:g}: raise the target epsilon or delta, or run "
                    "fewer rounds"
                )
            lo, hi = hi, min(2 * hi, MAX_NOISE_MULTIPLIER)
    else:  # enough noise at 1: halve until too little
        while spent(lo) <= target:
            if lo <= MIN_NOISE_MULTIPLIER:
                return MIN_NOISE_MULTIPLIER
            lo, hi = max(lo / 2, MIN_NOISE_MULTIPLIER), lo
    while hi / lo > 1 + tolerance:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if spent(mid) <= target else (mid, hi)
    return hi


@dataclasses.dataclass(frozen=True)
class Ledger:
    """The privacy a run has spent: ``release`` per round, at ``delta``, by ``accountant``; a truncated Poisson
    rule's per-round overflow probability ``truncation`` (0: none) adds T truncation (1 + e^eps) to the
    delta the guarantee holds with (module docstring). :meth:`spent` gives both after t rounds; ``describe``
    is what a run records (its ``hparams["privacy"]``)."""

    release: Release
    delta: float
    accountant: str = "rdp"
    truncation: float = 0.0
    describe: dict = dataclasses.field(default_factory=dict, compare=False)

    def __post_init__(self):
        check_delta(self.delta)
        _accountant(self.accountant)

    def spent(self, rounds: int) -> dict:
        """``{"epsilon": eps, "delta": delta'}`` after ``rounds`` rounds: eps at the chosen delta, and delta'
        the delta it holds with (the chosen one plus the truncation term)."""
        eps = epsilon(self.release, rounds, self.delta, self.accountant)
        extra = rounds * self.truncation * (1 + math.exp(min(eps, 700.0)))
        return {"epsilon": eps, "delta": min(1.0, self.delta + extra)}  # above 1 the statement says nothing
