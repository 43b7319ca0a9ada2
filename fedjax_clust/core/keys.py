"""The random streams a round derives from its key besides its own steps and minibatches.

Each stream is ``fold_in(key, CONSTANT)`` with a constant that is never a round's, a step's or a client's
index, so that switching a feature on (attackers, partial participation) leaves every other draw of the
round unchanged.
"""

from __future__ import annotations

import jax

__all__ = ["ATTACK_STREAM", "attack_key"]

ATTACK_STREAM = 0x0A77AC  # fold_in constant of the attack's key: never a round's, a step's or a client's index


def attack_key(key):
    """The key an attack draws from (Gaussian noise), derived from ``key`` without touching the keys the
    round already derives from it (``fold_in(key, e)`` for steps, ``split`` for minibatches), so that a run
    with attackers draws the same minibatches as the same run without them."""
    return jax.random.fold_in(key, ATTACK_STREAM)
