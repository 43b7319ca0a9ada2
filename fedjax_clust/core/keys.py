"""The random streams a round derives from its key besides its own steps and minibatches.

Each stream is ``fold_in(key, CONSTANT)`` with a constant that is never a round's, a step's or a client's
index, so that switching a feature on (attackers, partial participation) leaves every other draw of the
round unchanged.
"""

from __future__ import annotations

from typing import Optional

import jax

__all__ = [
    "ATTACK_STREAM",
    "PRIVACY_STREAM",
    "INIT_STREAM",
    "attack_key",
    "privacy_key",
    "init_key",
    "initialisation_key",
]

ATTACK_STREAM = 0x0A77AC  # fold_in constant of the attack's key: never a round's, a step's or a client's index
PRIVACY_STREAM = 0xD1F0A5  # fold_in constant of the privacy noise's key (never a round's, step's or client's index)
# fold_in constant of an algorithm's own random initialisation under a run's PRNGKey(seed); 0 is the model's
# initial parameters and 1 the rounds' keys (fedjax_clust.run.simulate)
INIT_STREAM = 2


def init_key(run_key):
    """The key an algorithm's ``init`` draws its own random start from (IFCA's and HypCluster's K cluster
    models, FedSoft's): ``fold_in(PRNGKey(seed), 2)`` of the run's ``PRNGKey(seed)``, so that two seeds start
    such an algorithm differently and one seed identically, in :func:`~fedjax_clust.run.simulate.simulate` and
    in a sweep alike. (A random draw made inside a round, as the 3-stage algorithm's Stage II labels, comes from
    that round's key, which the seed fixes too.)"""
    return jax.random.fold_in(run_key, INIT_STREAM)


def attack_key(key):
    """The key an attack draws from (Gaussian noise), derived from ``key`` without touching the keys the
    round already derives from it (``fold_in(key, e)`` for steps, ``split`` for minibatches), so that a run
    with attackers draws the same minibatches as the same run without them."""
    return jax.random.fold_in(key, ATTACK_STREAM)


def privacy_key(key):
    """The key the server's privacy noise draws from (:mod:`fedjax_clust.privacy.mechanism`), derived from
    ``key`` as :func:`attack_key` is, so a private run draws the same minibatches and attacks as the same run
    without privacy."""
    return jax.random.fold_in(key, PRIVACY_STREAM)


def initialisation_key(seed: Optional[int], key):
    """The key an algorithm's ``init`` draws its random start from: ``PRNGKey(seed)`` when the user fixed the
    builder's ``seed``, else the run's ``key`` (:func:`init_key`, ``init``'s third argument), else
    ``PRNGKey(0)`` (an ``init`` called without a key, as a benchmark does)."""
    if seed is not None:
        return jax.random.PRNGKey(seed)
    return jax.random.PRNGKey(0) if key is None else key
