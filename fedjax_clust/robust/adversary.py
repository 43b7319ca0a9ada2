"""The Byzantine side of an algorithm: who attacks, and what the clients send once the attackers replaced
their messages."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.core.option_groups import option_group
from fedjax_clust.core.participants import client_rows, silence_inactive
from fedjax_clust.core.validation import is_traced
from fedjax_clust.robust.attacks import needs_ball
from fedjax_clust.robust.registry import recorded_name

__all__ = ["Attackers", "NO_ATTACKERS", "Adversary", "adversary", "check_adversary", "robust_hparams"]


@option_group(eq=False)  # compared by identity: it holds a mask
class Attackers:
    """The Byzantine clients of a run and the attack they run, both or neither: the ``attackers`` option of
    every builder whose clients can attack (``make_algorithm`` makes it from ``attack=`` and the task's marked
    clients; an option group, :mod:`fedjax_clust.core.option_groups`). Checked when the algorithm is built
    (:func:`check_adversary`).

    Args:
      attack: a Byzantine attack (:func:`fedjax_clust.robust.make_attack`); None: no attackers.
      byzantine: the bool [N] mask of the clients that run it (:func:`fedjax_clust.robust.mark_byzantine`).
    """

    attack: Any = None
    byzantine: Any = None


NO_ATTACKERS = Attackers()  # the builders' default: every client honest


def check_adversary(attack, byzantine):
    """(bool [N] device mask or None, whether the attack needs a Threshold-Clustering ball) for an algorithm
    built with ``attack`` (from :func:`fedjax_clust.robust.make_attack`) and ``byzantine`` (bool [N]);
    both or neither. The mask may be traced (an argument of the compiled program: every run that differs only
    in which clients attack shares it)."""
    if (attack is None) != (byzantine is None):
        raise ValueError(
            "attack and byzantine go together: give the attack and the bool mask of its clients "
            "(fedjax_clust.robust.mark_byzantine), or neither"
        )
    if attack is None:
        return None, False
    if not callable(attack) or not hasattr(attack, "attack_name"):
        raise ValueError(f"attack must be built by fedjax_clust.robust.make_attack, got {attack!r}")
    mask = byzantine if is_traced(byzantine) else np.asarray(byzantine)  # traced: a sweep's per-run argument
    if mask.dtype != bool or mask.ndim != 1:
        raise ValueError(f"byzantine must be a 1-D bool mask over the clients, got {mask.dtype} of shape {mask.shape}")
    return jnp.asarray(mask), needs_ball(attack)


class Adversary(NamedTuple):
    """The Byzantine side of an algorithm built with its ``Attackers``: ``mask`` (bool [N] on the
    device, None without attackers) and ``send(messages, key, axis=0, participants=None)``, what the clients
    a round sees send once the attackers among them replaced theirs (the messages themselves without
    attackers); ``participants`` is the round's (see :mod:`fedjax_clust.core.participants`): the slots of a
    truncated Poisson sample that drew no client send nothing (NaN,
    :func:`~fedjax_clust.core.participants.silence_inactive`)."""

    mask: Optional[jax.Array]
    send: Callable


def adversary(attack, byzantine, name: str) -> Adversary:
    """:class:`Adversary` of algorithm ``name`` (see :func:`check_adversary`); refuses attacks that aim at
    Threshold-Clustering's ball (only Federated-Clustering has one per client)."""
    mask, needs_ball = check_adversary(attack, byzantine)
    if needs_ball:
        raise ValueError(
            f"the {attack.attack_name} attack aims at Federated-Clustering's Threshold-Clustering ball; {name} has none"
        )
    if mask is None:
        return Adversary(
            None, lambda messages, key, axis=0, participants=None: silence_inactive(messages, participants, axis)
        )

    def send(messages, key, axis=0, participants=None):
        # the slots that drew no client are silent before the attack (an attack reading the others' messages
        # never sees a client outside the sample) and after it (an attacker there sends nothing either)
        heard = silence_inactive(messages, participants, axis)
        sent = attack(heard, client_rows(mask, participants), key, axis=axis)
        return silence_inactive(sent, participants, axis)

    return Adversary(mask, send)


def robust_hparams(aggregate, attack) -> dict:
    """The hyperparameters that record a run's aggregator and attack (empty for the plain mean, no attack)."""
    if aggregate.aggregator_name == "mean" and attack is None:
        return {}
    return dict(aggregator=recorded_name(aggregate), attack=None if attack is None else recorded_name(attack))
