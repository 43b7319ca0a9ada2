"""What one round of an algorithm costs: its program counted (:mod:`fedjax_clust.cost.counting`) at a given round
number, so that a staged algorithm (SR-FCA's one-shot clustering, then refinement; CFL's splits; three-stage
clustering) counts the stage that round runs, not the costliest."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fedjax_clust.core.algorithm import FederatedAlgorithm
from fedjax_clust.cost.counting import Cost, count_jaxpr, has_loops

__all__ = ["round_cost", "round_jaxpr"]


def round_jaxpr(algorithm: FederatedAlgorithm, state, data, round_number: int):
    """The closed jaxpr of ``algorithm.round`` on ``state`` and ``data`` (arrays or shapes) with ``state.round``
    fixed to ``round_number`` (a constant of the program, so its stage is known)."""
    round_fn = algorithm.round
    if round_fn is None:
        raise ValueError(f"{algorithm.name} has no compiled round to count")
    fixed = jnp.asarray(round_number, getattr(state.round, "dtype", None) or jnp.asarray(state.round).dtype)
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    return jax.make_jaxpr(lambda s, d, k: round_fn(s._replace(round=fixed), d, k))(state, data, key)


def round_cost(algorithm: FederatedAlgorithm, state, data, round_number: int) -> tuple[Cost, bool]:
    """(the :class:`~fedjax_clust.cost.counting.Cost` of round ``round_number + 1`` -- the round that starts from
    a state whose counter reads ``round_number`` --, whether its program has loops, where XLA's own cost
    analysis counts a loop body once)."""
    closed = round_jaxpr(algorithm, state, data, round_number)
    return count_jaxpr(closed), has_loops(closed)
