"""What a round costs: FLOPs and memory traffic counted from its program (:mod:`fedjax_clust.cost.counting`)."""

from fedjax_clust.cost.counting import Cost, count, count_jaxpr, has_loops

__all__ = ["Cost", "count", "count_jaxpr", "has_loops"]
