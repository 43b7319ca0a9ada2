"""Byzantine robustness: attackers inside the round, robust aggregators (both registries, see
:mod:`fedjax_clust.robust.registry`), and who attacks."""

from fedjax_clust.robust.aggregators import (
    AGGREGATORS,
    aggregate_groups,
    aggregate_segments,
    make_aggregator,
)
from fedjax_clust.robust.attack_switch import AttackSwitch, switchable_attacks
from fedjax_clust.robust.attacks import (
    ATTACKS,
    DATA_ATTACKS,
    NEEDS_BALL,
    make_attack,
    replace_byzantine,
)
from fedjax_clust.robust.byzantine import byzantine_mask, mark_byzantine
from fedjax_clust.robust.registry import (
    Aggregator,
    AggregatorSpec,
    Attack,
    AttackSpec,
    aggregator_names,
    aggregator_spec,
    attack_names,
    attack_spec,
    register_aggregator,
    register_attack,
    unregister_aggregator,
    unregister_attack,
)

__all__ = [
    "AGGREGATORS",
    "ATTACKS",
    "DATA_ATTACKS",
    "NEEDS_BALL",
    "Aggregator",
    "AggregatorSpec",
    "Attack",
    "AttackSpec",
    "AttackSwitch",
    "aggregate_groups",
    "aggregate_segments",
    "aggregator_names",
    "aggregator_spec",
    "attack_names",
    "attack_spec",
    "byzantine_mask",
    "make_aggregator",
    "make_attack",
    "mark_byzantine",
    "register_aggregator",
    "register_attack",
    "replace_byzantine",
    "switchable_attacks",
    "unregister_aggregator",
    "unregister_attack",
]
