"""The one-shot price-discrimination game (Werner's thesis, ch. 4, Definition 4) and its equilibrium (Theorem 6).

n buyers of type theta_bar (probability mu) or theta_low signal s_bar or s_low; signalling the other type
("evasion") costs the buyer c_B and the seller c_S (eqs. 4.1, 4.2). The seller is signal aware with
probability alpha (one price per signal) and signal blind otherwise (one price for all). The unique perfect
Bayes Nash equilibrium (Theorem 6), with Delta = theta_bar - theta_low and alpha* = c_B / Delta:

* theta_low-buyers signal s_low; theta_bar-buyers signal s_low with probability
  q* = min(1, (1 - mu) theta_low / (mu Delta)) when alpha > alpha*, else s_bar;
* the signal-aware seller charges theta_low to s_low and theta_bar to s_bar;
* the signal-blind seller charges theta_low when theta_low >= mu theta_bar, else theta_bar (expected revenue
  theta_low against mu theta_bar: the theorem's statement; its proof's display has the inequality reversed);
* a buyer buys iff its price is at most its value.

:func:`equilibrium_utilities` computes both players' expected utilities at that equilibrium from these
strategies directly (per buyer; the seller's total is n times it). Choice where the thesis is ambiguous: the
proof of Corollary 2 lists the theta_bar-buyer's utility against a signal-aware seller with the indicator
1(alpha <= alpha*); the strategies give it for alpha > alpha* (a truthful buyer pays theta_bar there and gains
nothing), which is what this module computes and what makes Corollary 2's stated orderings hold (tested).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["PDGame", "pd_game", "Equilibrium", "equilibrium", "equilibrium_utilities", "alpha_star"]


class PDGame(NamedTuple):
    """Parameters of the (n, alpha, mu, theta_bar, theta_low, c_B, c_S)-PD game (alpha is given per call)."""

    mu: float
    theta_low: float
    theta_bar: float
    c_buyer: float
    c_seller: float
    n: int = 10

    @property
    def delta(self) -> float:
        return self.theta_bar - self.theta_low


def _real(name, value, low=None, high=None, open_low=False, open_high=False):
    import math

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if low is not None and (value < low or (open_low and value == low)):
        raise ValueError(f"{name} must be {'>' if open_low else '>='} {low}, got {value!r}")
    if high is not None and (value > high or (open_high and value == high)):
        raise ValueError(f"{name} must be {'<' if open_high else '<='} {high}, got {value!r}")
    return float(value)


def pd_game(
    *,
    mu: float = 0.5,
    theta_low: float = 5.0,
    theta_bar: float = 15.0,
    c_buyer: float = 5.0,
    c_seller: float = 5.0,
    n: int = 10,
) -> PDGame:
    """A checked game (defaults: the thesis's §4.4, mu = 0.5, theta_low = 5, theta_bar = 15, c_B = c_S = 5,
    n = 10). ValueError unless 0 < mu < 1, 0 <= theta_low < theta_bar, 0 <= c_B < theta_bar - theta_low
    (Assumption 1: otherwise no buyer is ever strategic), c_S >= 0 and n >= 1."""
    from fedjax_clust.core.validation import check_int

    mu = _real("mu", mu, 0.0, 1.0, open_low=True, open_high=True)
    theta_low = _real("theta_low", theta_low, 0.0)
    theta_bar = _real("theta_bar", theta_bar)
    if theta_bar <= theta_low:
        raise ValueError(f"theta_bar must exceed theta_low, got theta_bar={theta_bar} <= theta_low={theta_low}")
    c_buyer = _real("c_buyer", c_buyer, 0.0)
    if c_buyer >= theta_bar - theta_low:
        raise ValueError(
            f"c_buyer must be below theta_bar - theta_low = {theta_bar - theta_low} (Assumption 1), got {c_buyer}"
        )
    c_seller = _real("c_seller", c_seller, 0.0)
    return PDGame(mu, theta_low, theta_bar, c_buyer, c_seller, check_int("n", n, 1))


def alpha_star(game: PDGame) -> float:
    """alpha* = c_B / Delta: the seller's utility-maximising probability of price discrimination (Cor. 2)."""
    return game.c_buyer / game.delta


class Equilibrium(NamedTuple):
    """Theorem 6's strategies: ``evasion`` (the theta_bar-buyer's probability of signalling s_low),
    ``price_low`` / ``price_bar`` (the signal-aware seller's prices), ``price_blind``."""

    evasion: float
    price_low: float
    price_bar: float
    price_blind: float


def q_star(game: PDGame) -> float:
    """q* = min(1, (1 - mu) theta_low / (mu Delta)) of Theorem 6 (b)."""
    return min(1.0, (1.0 - game.mu) * game.theta_low / (game.mu * game.delta))


def equilibrium(game: PDGame, alpha: float) -> Equilibrium:
    """Theorem 6's PBNE of the game with signal-aware probability ``alpha``."""
    alpha = _real("alpha", alpha, 0.0, 1.0)
    evasion = q_star(game) if alpha > alpha_star(game) else 0.0
    blind = game.theta_low if game.theta_low >= game.mu * game.theta_bar else game.theta_bar
    return Equilibrium(evasion, game.theta_low, game.theta_bar, blind)


def equilibrium_utilities(game: PDGame, alpha: float) -> dict:
    """Expected utilities at the equilibrium of :func:`equilibrium`: ``seller`` (per buyer), ``seller_total``
    (n buyers), ``buyer_bar`` (a theta_bar-buyer) and ``buyer_low`` (a theta_low-buyer: always 0).

    With q the evasion probability and p the blind price: a theta_bar-buyer gets
    (1 - alpha)(theta_bar - p) + alpha q Delta - q c_B; the seller per buyer
    (1 - mu)[(1 - alpha) theta_low 1(p = theta_low) + alpha theta_low]
    + mu[(1 - alpha) p + alpha (q theta_low + (1 - q) theta_bar) - q c_S].
    """
    eq = equilibrium(game, alpha)
    q, p = eq.evasion, eq.price_blind
    buyer_bar = (1 - alpha) * (game.theta_bar - p) + alpha * q * game.delta - q * game.c_buyer
    low_buys_blind = game.theta_low if p <= game.theta_low else 0.0
    seller = (1 - game.mu) * ((1 - alpha) * low_buys_blind + alpha * game.theta_low) + game.mu * (
        (1 - alpha) * p + alpha * (q * game.theta_low + (1 - q) * game.theta_bar) - q * game.c_seller
    )
    return {
        "alpha": float(alpha),
        "seller": seller,
        "seller_total": game.n * seller,
        "buyer_bar": buyer_bar,
        "buyer_low": 0.0,
        "evasion": q,
        "price_blind": p,
    }
