"""Byzantine robustness: attackers inside the round, robust aggregators, and who attacks."""

from fedjax_clust.robust.aggregators import (
           AGGREGATORS,
           aggregate_groups,
           aggregate_segments,
           make_aggregator,
)
from fedjax_clust.robust.attacks import (
           ATTACKS,
           DATA_ATTACKS,
           NEEDS_BALL,
           make_attack,
           replace_byzantine,
)
from fedjax_clust.robust.byzantine import byzantine_mask, mark_byzantine

__all__ = ["AGGREGATORS", "ATTACKS", "DATA_ATTACKS", "NEEDS_BALL", "aggregate_groups", "aggregate_segments",
           "byzantine_mask", "make_aggregator",
           "make_attack", "mark_byzantine", "replace_byzantine"]
