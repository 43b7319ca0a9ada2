"""What a driver needs to know about how an algorithm's round runs, as typed fields.

An algorithm's ``hparams`` is what a run records and compares on resume: the numbers that decide what it
computes. Code that drives any algorithm (the run loop, sweeps, participation, the records) must not read
one algorithm's keys out of that dict; it reads an :class:`Execution`, which every builder fills with what
it knows and every wrapper updates (``algorithm.execution``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

__all__ = ["Execution"]


@dataclasses.dataclass(frozen=True)
class Execution:
    """How a round runs, apart from what it computes.

    ``devices``: the size of the mesh the algorithm shards its clients over (None: it does not shard; a round
    whose N the mesh does not divide runs on one device); ``quantile_select``: the setting of how a quantile
    rule finds its k-th distance ("search", "radix" or "auto"; None: the algorithm has no such setting;
    reported also when a fixed radius leaves it unused); neither changes a number beyond float rounding, so
    a run's summary reports them and its ``run.json`` does not (:meth:`report`).
    ``budgeted``: the round holds temporaries sized by a memory budget (Federated-Clustering's cross-gradient
    chunks), so its memory is known only from the compiled program (sweeps compile one to split their runs).
    ``min_clients``: the fewest clients a round can take (Federated-Clustering's G subgroups need G), which a
    partial-participation rule must leave. ``max_rounds``: the rounds the algorithm can run (an availability
    trace's length; None: any number). ``clients_per_round``: the clients a round sees under partial
    participation (None: all of them). ``cohort``: the round split into a block program a driver can feed from
    host memory (:class:`~fedjax_clust.algorithms.participation.CohortProgram`; None: the round needs every
    client's row on the device -- full participation, or an algorithm with ``masked_participation=True``).
    ``privacy``: the run's privacy ledger (:class:`~fedjax_clust.privacy.accounting.Ledger`: epsilon and delta
    after t rounds) when the algorithm is private (None: no privacy), which the run records at every evaluation.
    ``batch_size``: the examples a client's step draws (None: all of its examples, or not known: an algorithm
    built without ``make_algorithm``), which a driver checks against the task it runs on. ``groups``: the groups
    a round's clients exchange messages within (Federated-Clustering's G subgroups; 1: one group).
    ``num_clusters``: the cluster models the server keeps (K of IFCA, HypCluster, ...; None: the algorithm
    takes no K). The last two are what a communication cost model reads (``fedjax-clust profile``).
    """

    devices: Optional[int] = None
    quantile_select: Optional[str] = None
    budgeted: bool = False
    min_clients: int = 1
    max_rounds: Optional[int] = None
    clients_per_round: Optional[int] = None
    cohort: Any = dataclasses.field(default=None, compare=False)
    privacy: Any = dataclasses.field(default=None, compare=False)
    batch_size: Optional[int] = None
    groups: int = 1
    num_clusters: Optional[int] = None

    def report(self) -> dict:
        """The settings a run's summary reports next to its hyperparameters (not recorded in ``run.json``)."""
        out: dict = {}
        if self.devices is not None:
            out["devices"] = self.devices
        if self.quantile_select is not None:
            out["quantile_select"] = self.quantile_select
        return out

    def replace(self, **changes) -> "Execution":
        return dataclasses.replace(self, **changes)
