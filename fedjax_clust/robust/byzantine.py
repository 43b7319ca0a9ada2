"""Which clients are Byzantine: a fraction beta of all clients, or a count per true cluster."""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from fedjax_clust.core.validation import check_int

__all__ = ["mark_byzantine", "byzantine_mask", "attackers_in", "smallest_group_with_an_attacker"]


def attackers_in(size: int, fraction: float) -> int:
    """The attackers a fraction beta marks among ``size`` clients: round(beta size), Python's rounding (half to
    even: beta = 0.1 marks none of 5 clients, one of 6). The one rule :func:`byzantine_mask` uses."""
    return int(round(float(fraction) * int(size)))


def smallest_group_with_an_attacker(fraction: float) -> Optional[int]:
    """The fewest clients (a cluster, or all clients without known clusters) in which ``fraction`` marks at
    least one attacker and leaves one honest client, by :func:`attackers_in`; None for a fraction of 0."""
    if not 0.0 < float(fraction) < 1.0:
        return None
    # round(beta n) >= 1 needs beta n > 0.5: start just below n = 0.5 / beta (float rounding) and step up
    size = max(1, int(0.5 / float(fraction)) - 1)
    while not 1 <= attackers_in(size, fraction) < size:
        size += 1
    return size


def byzantine_mask(
    num_clients: int,
    *,
    fraction: Optional[float] = None,
    per_cluster: Optional[int] = None,
    true_clusters=None,
    seed: int = 0,
) -> np.ndarray:
    """bool [N]: the Byzantine clients, drawn with ``numpy.random.default_rng(seed)``.

    ``fraction`` beta: round(beta N_k) clients of every true cluster k when the clusters are known, so each
    cluster carries the same fraction beta_i = beta that Theorem 1 of Werner et al. bounds (a documented
    choice), else round(beta N) of all clients, uniformly. ``per_cluster`` m: m clients of every true
    cluster (the thesis's Fig. 2.6 setting: 50 attackers beside the 50 honest clients of each cluster).
    Exactly one of the two.
    """
    check_int("num_clients", num_clients)
    if (fraction is None) == (per_cluster is None):
        raise ValueError("give exactly one of fraction and per_cluster")
    rng = np.random.default_rng(seed)
    mask = np.zeros(num_clients, bool)
    if per_cluster is not None:
        check_int("per_cluster", per_cluster, 0)
        if true_clusters is None:
            raise ValueError("per_cluster needs a task with known clusters")
    elif not 0.0 <= float(fraction) < 1.0:
        raise ValueError(f"byzantine fraction must be in [0, 1), got {fraction!r}")
    if true_clusters is None:
        count = attackers_in(num_clients, fraction)
        mask[rng.choice(num_clients, size=count, replace=False)] = True
        return mask
    clusters = np.asarray(true_clusters)
    for k in np.unique(clusters):
        members = np.flatnonzero(clusters == k)
        count = per_cluster if per_cluster is not None else attackers_in(members.size, fraction)
        if count >= members.size:
            raise ValueError(
                f"cluster {int(k)} has {members.size} clients: {count} attackers would leave no honest one"
            )
        mask[rng.choice(members, size=count, replace=False)] = True
    return mask


def mark_byzantine(
    task,
    *,
    fraction: Optional[float] = None,
    per_cluster: Optional[int] = None,
    seed: int = 0,
    all_honest_mask: bool = False,
):
    """The same task with ``task.byzantine`` set (see :func:`byzantine_mask`); with fraction 0 (or 0 per
    cluster) no client attacks and the task is returned unchanged, or with ``all_honest_mask=True`` with an
    all-False mask: a sweep's attack-free point beside attacked ones (``byzantine_fraction`` 0, 0.1, ...), whose
    runs then share the attacked points' compiled program and take the attack they are given on nobody (every
    attack's run at 0 is one run, computed once: :func:`fedjax_clust.run.sweep.identical_runs`). A fraction
    above 0 that rounds to no attacker in some cluster still marks none there; one that marks nobody at all
    is an error with ``all_honest_mask`` (it would silently be the attack-free point)."""
    mask = byzantine_mask(
        task.num_clients, fraction=fraction, per_cluster=per_cluster, true_clusters=task.true_clusters, seed=seed
    )
    if not mask.any():
        if not all_honest_mask:
            return task
        if fraction or per_cluster:
            raise ValueError(
                f"byzantine fraction={fraction} / per_cluster={per_cluster} marks no client of {task.num_clients}: "
                "it would be the attack-free point again"
            )
    config = dict(task.config, byzantine_fraction=fraction, byzantine_per_cluster=per_cluster, byzantine_seed=seed)
    return dataclasses.replace(task, byzantine=mask, config=config)
