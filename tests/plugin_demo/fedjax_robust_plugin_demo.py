"""A third-party robust aggregator and attack: one module, no edit of fedjax_clust.

Installed, its package names the specs as entry points::

    [project.entry-points."fedjax_clust.aggregators"]
    midrange = "fedjax_robust_plugin_demo:AGGREGATOR"

    [project.entry-points."fedjax_clust.attacks"]
    zero-message = "fedjax_robust_plugin_demo:ATTACK"

and ``fedjax-clust run --aggregator midrange --attack zero-message ...`` runs them (tests/test_plugins.py).
"""

import jax
import jax.numpy as jnp

from fedjax_clust.core.pytrees import finite_rows
from fedjax_clust.robust import AggregatorSpec, AttackSpec, replace_byzantine

# every trace of the rule appends the number of messages it saw (the tests' proof that it ran)
CALLS = []


def midrange(messages, members=None, *, shrink: float = 1.0):
    """Coordinate-wise midrange (min + max) / 2 of the usable messages, times ``shrink``.

    Args:
      shrink: the factor of the midrange, > 0.
    """
    CALLS.append(jax.tree.leaves(messages)[0].shape[0])
    usable = finite_rows(messages)
    if members is not None:
        usable = usable & jnp.asarray(members, bool)

    def leaf(x):
        mask = usable.reshape((-1,) + (1,) * (x.ndim - 1))
        low = jnp.min(jnp.where(mask, x, jnp.inf), axis=0)
        high = jnp.max(jnp.where(mask, x, -jnp.inf), axis=0)
        return jnp.where(jnp.any(usable), shrink * (0.5 * low + 0.5 * high), jnp.nan)

    return jax.tree.map(leaf, messages)


def _check_shrink(shrink=None):
    if shrink is not None and not shrink > 0:
        raise ValueError(f"midrange shrink must be > 0, got {shrink!r}")


def zero_message(messages, byzantine, key, *, axis=0, center=None, radius=None):
    """Every attacker sends zeros (a silent client)."""
    return replace_byzantine(messages, byzantine, jax.tree.map(lambda x: jnp.zeros((), x.dtype), messages), axis)


AGGREGATOR = AggregatorSpec("midrange", midrange, check=_check_shrink)
ATTACK = AttackSpec("zero-message", zero_message)
