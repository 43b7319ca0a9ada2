"""Which clients take part in the round being traced (set by :mod:`fedjax_clust.algorithms.participation`)."""

from __future__ import annotations

import contextlib
import contextvars

import jax
import jax.numpy as jnp

__all__ = ["participating", "client_rows", "participating_mask", "participant_mask", "keep_non_participants"]

_PARTICIPANTS: contextvars.ContextVar = contextvars.ContextVar("participants", default=None)



@contextlib.contextmanager
def participating(index):
    """While a round is traced inside this context, the clients it sees are rows ``index`` ([S] ints) of the
    population: :func:`client_rows` gathers per-client constants accordingly (see
    :mod:`fedjax_clust.algorithms.participation`)."""
    token = _PARTICIPANTS.set(index)
    try:
        yield
    finally:
        _PARTICIPANTS.reset(token)


_PARTICIPANT_MASK: contextvars.ContextVar = contextvars.ContextVar("participant_mask", default=None)



@contextlib.contextmanager
def participating_mask(mask):
    """While a round is traced inside this context, only the clients where ``mask`` (bool [N]) is True take
    part (algorithms with ``masked_participation`` read it through :func:`participant_mask`)."""
    token = _PARTICIPANT_MASK.set(mask)
    try:
        yield
    finally:
        _PARTICIPANT_MASK.reset(token)


def participant_mask():
    """bool [N], this round's participants of an algorithm with ``masked_participation``; None when every
    client takes part."""
    return _PARTICIPANT_MASK.get()


def keep_non_participants(new, old):
    """Rows of ``new`` for this round's participants (:func:`participant_mask`) and of ``old`` for the other
    clients (leaves with a leading client axis); ``new`` itself when every client takes part."""
    mask = participant_mask()
    if mask is None:
        return new
    return jax.tree.map(lambda n, o: jnp.where(mask.reshape((-1,) + (1,) * (n.ndim - 1)), n, o), new, old)


def client_rows(values):
    """A constant over all N clients (a Byzantine mask, fixed group labels: leading axis N) restricted to the
    clients the round being traced sees: itself, or its rows at this round's participants."""
    index = _PARTICIPANTS.get()
    return values if index is None else jnp.take(jnp.asarray(values), index, axis=0)
