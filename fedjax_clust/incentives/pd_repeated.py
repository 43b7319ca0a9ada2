"""The repeated price-discrimination protocol (Werner's thesis, ch. 4, Algorithm 6) as one ``lax.scan``.

Each round t a fresh batch of n buyers plays one PD game (:mod:`fedjax_clust.incentives.pd_game`) against the
same seller:

* **CBER buyers** (Definition 5): every buyer of round t holds the same belief alpha_hat_t, the consistent
  estimator of eq. (4.7), alpha_hat_t = (1/t) sum_{tau < t} X_tau I_tau / E[I_tau | H_tau], where I_tau says
  both signals were sent in round tau, X_tau that the two signal groups were charged different prices, and
  E[I_tau | H_tau] = 1 - r^n - (1 - r)^n with r = mu (1 - q_tau) the probability a buyer signals s_bar under the
  buyers' strategy of round tau. theta_bar-buyers evade with probability q* when alpha_hat_t > alpha*, and
  signal truthfully otherwise; theta_low-buyers always signal truthfully. With a ``bias`` interval (Fig. 4.5)
  the buyers act on clip(alpha_hat_t + eps_t, 0, 1), eps_t ~ Unif(bias).
* **Sellers** (§4.4), prices on {theta_low, theta_bar}:
  ``exp3``: signal blind, Exp3-IX (Lattimore & Szepesvari, Bandit Algorithms, ch. 12) over the two prices,
  charged to every buyer, rewarded with the round's average utility per buyer;
  ``cexp3``: signal aware, two Exp3-IX learners, one per signal, each sampled once per round for its signal
  group's price and rewarded with that group's average utility (no update in a round without that signal);
  ``stackelberg``: the alpha*-PD commitment: with probability alpha* the (alpha = 1)-equilibrium prices
  (theta_low to s_low, theta_bar to s_bar), otherwise the signal-blind equilibrium price to everyone.

Choices the thesis leaves open (documented here, recorded in every result): Exp3-IX's learning rate
eta = sqrt(2 log K / (K T)) and implicit exploration gamma = eta / 2 (the book's choice, K = 2 prices, T the
rounds); a reward r in [-c_S, theta_bar] is the loss (theta_bar - r) / (theta_bar + c_S) in [0, 1];
alpha_hat_1 = 0; a round where a buyer strategy makes I impossible (r = 0 or 1) adds nothing to the estimator.

Randomness: each round splits the run's key once and draws 2n + 5 uniforms (the buyers' types, their evasions, the
bias, the three learners' prices, the commitment) from one call: threefry on XLA's CPU backend is a rolled loop
of tiny kernels per call, and six calls a round took 1.7x the time of this one (`bench --model pd-protocol`).

:func:`run_protocol` vmaps any number of (seller, seed, bias) runs into one compiled program and returns per
round: the seller's utility per buyer, the theta_bar-buyers' utility sum and count, alpha_hat_t (before the
bias), the seller's true probability of price discrimination alpha_t = P[P_bar != P_low] of its mixed
strategy, and its action (0 high price to all, 1 low price to all, 2 PD, 3 reverse PD).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.incentives.pd_game import PDGame, alpha_star, equilibrium, q_star

__all__ = [
    "SELLERS",
    "ACTIONS",
    "ProtocolResult",
    "run_protocol",
    "protocol_program",
    "protocol_arguments",
    "initial_state",
    "exp3_ix_parameters",
    "BIAS_INTERVALS",
]

SELLERS = ("exp3", "cexp3", "stackelberg")
ACTIONS = ("high", "low", "pd", "reverse-pd")
LOW, HIGH = 0, 1  # arms: the prices theta_low, theta_bar
# Fig. 4.5's bias intervals gamma_i: the 20 segments of width 0.1 of [-1, 1]
BIAS_INTERVALS = tuple((round(-1.0 + 0.1 * i, 1), round(-0.9 + 0.1 * i, 1)) for i in range(20))


class ProtocolResult(NamedTuple):
    """Per run (leading axis, in the order of the ``runs`` given) and round: see the module docstring."""

    seller_utility: np.ndarray
    buyer_bar_sum: np.ndarray
    buyer_bar_count: np.ndarray
    alpha_hat: np.ndarray
    alpha: np.ndarray
    action: np.ndarray


def exp3_ix_parameters(rounds: int, arms: int = 2) -> tuple:
    """(eta, gamma) of Exp3-IX for ``rounds`` rounds: eta = sqrt(2 log K / (K T)), gamma = eta / 2."""
    eta = math.sqrt(2.0 * math.log(arms) / (arms * rounds))
    return eta, eta / 2.0


def _probabilities(losses, eta):
    return jax.nn.softmax(-eta * (losses - jnp.min(losses)))


def round_step(game: PDGame, rounds: int):
    """``step(state, t, seller, bias_low, bias_high) -> (state, outputs)``: round t (1-based, float) of one run of
    Algorithm 6 (module docstring); ``seller`` an index into SELLERS (traced: runs vmap). ``rounds`` sets
    Exp3-IX's horizon. :func:`initial_state` is the state before round 1."""
    n = game.n
    a_star, q_eq = alpha_star(game), q_star(game)
    blind = equilibrium(game, 0.0).price_blind
    prices = jnp.asarray([game.theta_low, game.theta_bar], jnp.float32)
    eta, gamma = exp3_ix_parameters(rounds)
    scale = game.theta_bar + game.c_seller

    def loss_of(reward):
        return (game.theta_bar - reward) / scale

    def step(carry, t, seller, bias_low, bias_high):
        losses, estimate_sum, key = carry  # losses [3, 2]: blind, s_low, s_bar learners
        # one draw of 2n + 5 uniforms per round (one threefry call, not six: see the module docstring)
        key, k_round = jax.random.split(key)
        u = jax.random.uniform(k_round, (2 * n + 5,))
        u_types, u_evade, u_bias, u_arms, u_commit = u[:n], u[n : 2 * n], u[2 * n], u[2 * n + 1 : 2 * n + 4], u[-1]
        alpha_hat = estimate_sum / t
        belief = jnp.clip(alpha_hat + bias_low + (bias_high - bias_low) * u_bias, 0.0, 1.0)
        strategic = belief > a_star
        q = jnp.where(strategic, q_eq, 0.0)
        high_type = u_types < game.mu
        evades = high_type & (u_evade < q)
        signal_bar = high_type & ~evades
        # the seller's prices for the two signal groups, and its probability of charging them differently
        probs = jax.vmap(_probabilities, (0, None))(losses, eta)
        arms = jnp.where(u_arms < probs[:, LOW], LOW, HIGH)  # each learner samples its price
        commit = u_commit < a_star
        blind_arm = jnp.where(blind == game.theta_bar, HIGH, LOW)
        arm_low = jnp.select([seller == 0, seller == 1], [arms[0], arms[1]], jnp.where(commit, LOW, blind_arm))
        arm_bar = jnp.select([seller == 0, seller == 1], [arms[0], arms[2]], jnp.where(commit, HIGH, blind_arm))
        alpha_t = jnp.select(
            [seller == 0, seller == 1], [0.0, probs[1, LOW] * probs[2, HIGH] + probs[1, HIGH] * probs[2, LOW]], a_star
        )
        price = jnp.where(signal_bar, prices[arm_bar], prices[arm_low])
        value = jnp.where(high_type, game.theta_bar, game.theta_low)
        buys = value >= price
        buyer_u = (value - price) * buys - game.c_buyer * evades
        seller_u = price * buys - game.c_seller * evades
        # Exp3-IX updates: importance-weighted losses of the arm played
        low_group, bar_group = ~signal_bar, signal_bar
        reward_all = jnp.mean(seller_u)
        reward_low = jnp.sum(jnp.where(low_group, seller_u, 0.0)) / jnp.maximum(jnp.sum(low_group), 1)
        reward_bar = jnp.sum(jnp.where(bar_group, seller_u, 0.0)) / jnp.maximum(jnp.sum(bar_group), 1)
        played = jnp.stack([arms[0], arms[1], arms[2]])
        rewards = jnp.stack([reward_all, reward_low, reward_bar])
        heard = jnp.stack([seller == 0, (seller == 1) & jnp.any(low_group), (seller == 1) & jnp.any(bar_group)])
        chosen = probs[jnp.arange(3), played]
        increment = jnp.where(heard, loss_of(rewards) / (chosen + gamma), 0.0)
        losses = losses.at[jnp.arange(3), played].add(increment)
        # the buyers' estimator (4.7): informative rounds, normalised by their probability under this round's
        # buyer strategy
        informative = jnp.any(signal_bar) & jnp.any(~signal_bar)
        r = game.mu * (1.0 - q)
        p_informative = 1.0 - r**n - (1.0 - r) ** n
        observed = informative & (arm_low != arm_bar)
        estimate_sum = estimate_sum + jnp.where(p_informative > 0, observed / jnp.maximum(p_informative, 1e-30), 0.0)
        action = jnp.select(
            [
                (arm_low == HIGH) & (arm_bar == HIGH),
                (arm_low == LOW) & (arm_bar == LOW),
                (arm_low == LOW) & (arm_bar == HIGH),
            ],
            [0, 1, 2],
            3,
        )
        out = (
            jnp.mean(seller_u),
            jnp.sum(jnp.where(high_type, buyer_u, 0.0)),
            jnp.sum(high_type),
            alpha_hat,
            alpha_t,
            action,
        )
        return (losses, estimate_sum, key), out

    return step


def initial_state(key):
    """The state of one run before round 1: Exp3-IX's cumulative loss estimates [3 learners, 2 prices] (the
    blind, the s_low and the s_bar learner), the estimator's running sum, the run's PRNG key."""
    return jnp.zeros((3, 2), jnp.float32), jnp.zeros((), jnp.float32), key


@functools.lru_cache(maxsize=16)
def protocol_program(game: PDGame, rounds: int):
    """The compiled program of :func:`run_protocol`: ``(keys [R, 2], sellers [R], bias_low [R], bias_high [R])``
    -> per-run, per-round outputs, every run vmapped and the ``rounds`` rounds one ``lax.scan`` (cached per game
    and horizon, so a second call does not compile again)."""
    step = round_step(game, rounds)

    def one_run(key, seller, low, high):
        _, outputs = jax.lax.scan(
            lambda c, t: step(c, t, seller, low, high), initial_state(key), jnp.arange(1, rounds + 1, dtype=jnp.float32)
        )
        return outputs

    return jax.jit(jax.vmap(one_run))


def protocol_arguments(runs: Sequence[tuple]) -> tuple:
    """``runs`` = [(seller name, seed, (bias_low, bias_high)), ...] checked and stacked as the arrays
    :func:`protocol_program` takes."""
    from fedjax_clust.core.validation import check_seed

    if not runs:
        raise ValueError("runs must list at least one (seller, seed, bias)")
    sellers, keys, lows, highs = [], [], [], []
    for seller, seed, bias in runs:
        if seller not in SELLERS:
            raise ValueError(f"seller must be one of {', '.join(SELLERS)}, got {seller!r}")
        low, high = (float(b) for b in bias)
        if not (math.isfinite(low) and math.isfinite(high) and low <= high):
            raise ValueError(f"a bias interval must be finite with low <= high, got {bias!r}")
        sellers.append(SELLERS.index(seller))
        keys.append(jax.random.PRNGKey(check_seed(seed)))
        lows.append(low)
        highs.append(high)
    return (jnp.stack(keys), jnp.asarray(sellers), jnp.asarray(lows, jnp.float32), jnp.asarray(highs, jnp.float32))


def run_protocol(game: PDGame, runs: Sequence[tuple], *, rounds: int) -> ProtocolResult:
    """Run Algorithm 6 for every ``(seller, seed, (bias_low, bias_high))`` of ``runs`` as one vmapped, compiled
    program of ``rounds`` rounds (``seller`` a name of :data:`SELLERS`; bias (0, 0): consistent buyers)."""
    from fedjax_clust.core.validation import check_int

    rounds = check_int("rounds", rounds, 1)
    out = protocol_program(game, rounds)(*protocol_arguments(runs))
    return ProtocolResult(*(np.asarray(x) for x in out))
