"""Several attack kinds in one compiled program: the attack a run's attackers send, chosen by a traced index.

A sweep over attacks compiled one program per attack kind, because the kind decides the code. An
:class:`AttackSwitch` holds the kinds and an integer index (an argument of the program): its messages are
``lax.switch(index, kinds)``, so the runs of a sweep that differ only in their attack (and in which clients
attack, :meth:`~fedjax_clust.tasks.base.Task.masks`) share one program.

What it costs depends on how a program computes its runs (``run_batching``, :mod:`fedjax_clust.run.sweep`):
run one after another (``lax.map``, the CPU's default) a switch runs the chosen branch only, so the rounds
cost what they cost apart and one compilation replaces one per kind; batched (``jax.vmap``, an accelerator's
default) it becomes a ``select`` that computes every kind's messages in every round of every run, which pays
only where compilation dominates (few rounds). So a sweep switches over attack kinds where it maps its runs
(:func:`switchable_attacks`; ``sweep(attack_switch=True)`` forces it). ``fedjax-clust --compile-cache off bench
--model attack-switch`` measures both ways (``experiments/results/bench/attack_switch.jsonl``).

Only message attacks switch: a data attack (label flipping) changes what the clients train on and an attack
on Threshold-Clustering's ball (``needs_ball``) needs the victim's ball computed, so each keeps its program.
Switched runs compute what the runs of the single kinds compute up to float32 rounding (the switch's branch is
compiled apart from its neighbours, which can change how XLA fuses and rounds them; tested).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import jax

from fedjax_clust.robust.registry import Attack, attack_names, attack_spec

__all__ = ["AttackSwitch", "switchable_attacks"]


@dataclasses.dataclass(frozen=True, eq=False)
class AttackSwitch:
    """The attack ``kinds[index]`` (``index`` an int32 scalar, traced or not), called as any attack:
    ``switch(messages, byzantine, key, *, axis=0, center=None, radius=None)``. Every kind must be a message
    attack that needs no ball (:func:`switchable_attacks`)."""

    kinds: tuple
    index: Any

    def __post_init__(self):
        kinds = tuple(self.kinds)
        if len(kinds) < 2:
            raise ValueError(f"an attack switch needs two kinds or more, got {len(kinds)}")
        for kind in kinds:
            if not isinstance(kind, Attack) or kind.needs_ball or kind.spec.on_data:
                raise ValueError(f"only message attacks without a ball switch, not {kind!r}")
        object.__setattr__(self, "kinds", kinds)

    def __call__(self, messages, byzantine, key, *, axis=0, center=None, radius=None):
        branches = [
            lambda m, b, k, kind=kind: kind(m, b, k, axis=axis, center=center, radius=radius) for kind in self.kinds
        ]
        return jax.lax.switch(self.index, branches, messages, byzantine, key)

    @property
    def attack_name(self) -> str:
        return "switch(" + "|".join(kind.attack_name for kind in self.kinds) + ")"

    name = attack_name

    @property
    def needs_ball(self) -> bool:
        return False

    @property
    def on_data(self) -> bool:
        return False

    @property
    def reads_others(self) -> bool:
        return any(kind.spec.reads_others for kind in self.kinds)

    @property
    def options(self) -> dict:
        return {}


def switchable_attacks(values: Sequence, batching: str) -> tuple:
    """The attacks of a sweep's ``values`` that share one switching program: the registered names of message
    attacks without a ball, when the program maps its runs (``batching`` "map", see the module docstring) and
    two or more of them are swept; () otherwise (every attack its own program)."""
    if batching != "map":
        return ()
    registered = attack_names()
    kinds = []
    for value in values:
        if isinstance(value, str) and value in registered:
            spec = attack_spec(value)
            if not spec.needs_ball and not spec.on_data and value not in kinds:
                kinds.append(value)
    return tuple(kinds) if len(kinds) >= 2 else ()
