"""Which clients a round sees: its participants, handed to it explicitly.

An algorithm's round is ``apply(state, data, key, participants=None)``. ``participants`` is None when every
client takes part (the algorithm's own program), or a :class:`Participants`: the int32 [S] population indices
of this round's participants (increasing), drawn by :mod:`fedjax_clust.algorithms.participation`, and how
the round holds them:

* ``gathered=True`` (most algorithms): ``state`` and ``data`` hold the S participants' rows only, and
  per-client constants over the whole population (a Byzantine mask, fixed group labels) are restricted to
  them with :func:`client_rows`;
* ``gathered=False`` (SR-FCA, the 3-stage algorithm, whose clustering stages hear every client): ``state``
  and ``data`` hold all N clients, :func:`participant_mask` marks the participants and
  :func:`keep_non_participants` keeps everyone else's rows.

A truncated Poisson sample (:func:`fedjax_clust.algorithms.participation.participation_rule`'s ``poisson``) fills
S fixed slots and marks the slots that drew a client: ``active`` bool [S] (None: every slot). An inactive slot is
a client that was not sampled: it sends nothing (:func:`silence_inactive` makes its messages NaN, which every
aggregate leaves out) and the participation wrapper keeps its rows.

Being an argument (a pytree whose ``gathered`` is static), the participants are part of what ``jit`` traces
and ``vmap`` maps over: no state hidden from the compiler decides what a round computes.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Callable, Optional

import jax
import jax.numpy as jnp

__all__ = [
    "Participants",
    "client_rows",
    "participant_mask",
    "keep_non_participants",
    "with_participants",
    "silence_inactive",
]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Participants:
    """This round's participants: ``index`` int32 [S] (population indices, increasing), ``gathered``
    (static): whether the round's state and data hold only these S rows (True) or all N clients (False), and
    ``active`` (bool [S] or None): the slots holding a sampled client (a truncated Poisson sample's; None: all)."""

    index: jax.Array
    gathered: bool = dataclasses.field(metadata=dict(static=True))
    active: Optional[jax.Array] = None


def client_rows(values, participants: Optional[Participants]):
    """A constant over all N clients (leading axis N) restricted to the rows a round holds: ``values``
    itself when the round holds every client, else its rows at the gathered participants (None stays None:
    an absent constant, e.g. uniform client weights)."""
    if values is None or participants is None or not participants.gathered:
        return values
    return jnp.take(jnp.asarray(values), participants.index, axis=0)


def participant_mask(participants: Optional[Participants], num_clients: int) -> Optional[jax.Array]:
    """bool [N], True at this round's participants; None when every client takes part."""
    if participants is None:
        return None
    taking_part = True if participants.active is None else participants.active
    return jnp.zeros((num_clients,), bool).at[participants.index].set(taking_part)


def silence_inactive(messages, participants: Optional[Participants], axis: int = 0):
    """``messages`` (client axis ``axis``: the rows the round holds) with the inactive slots' messages NaN (a
    client that was not sampled sends nothing; every aggregate leaves a non-finite message out); the messages
    themselves without a Poisson sample. On a round holding all N clients (``gathered=False``) the clients
    outside the sample are silenced too."""
    if participants is None or participants.active is None:
        return messages
    sending = (
        participants.active
        if participants.gathered
        else participant_mask(participants, jax.tree.leaves(messages)[0].shape[axis])
    )
    assert sending is not None

    def leaf(x):
        shape = [1] * x.ndim
        shape[axis] = -1
        return jnp.where(sending.reshape(shape), x, jnp.nan)

    return jax.tree.map(leaf, messages)


def keep_non_participants(new, old, mask):
    """Rows of ``new`` for the participants (bool [N] ``mask``) and of ``old`` for the other clients (leaves
    with a leading client axis); ``new`` itself when every client takes part (``mask`` None)."""
    if mask is None:
        return new
    return jax.tree.map(lambda n, o: jnp.where(mask.reshape((-1,) + (1,) * (n.ndim - 1)), n, o), new, old)


def with_participants(apply: Callable) -> Callable:
    """``apply`` as ``(state, data, key, participants) -> (state, metrics)``: itself when it takes a
    ``participants`` argument, else a function that drops it (an algorithm without per-client constants,
    e.g. a user's own without attackers, needs no participants to run on a gathered block)."""
    try:
        parameters = inspect.signature(apply).parameters
    except (TypeError, ValueError):
        return apply
    if "participants" in parameters or any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
        return apply

    def dropping(state, data, key, participants=None):
        return apply(state, data, key)

    return dropping
