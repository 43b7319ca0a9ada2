"""The option records the drivers of the round loop take: how a run is evaluated, what it writes and shows,
when it checkpoints, and how a sweep's runs become programs.

:func:`~fedjax_clust.run.simulate.simulate`, :func:`~fedjax_clust.run.compare.run_comparison`,
:func:`~fedjax_clust.run.sweep.sweep` and :func:`~fedjax_clust.run.study.study` take
``evaluation=Evaluation(...)`` and ``output=Output(...)`` (``simulate`` also ``checkpointing=Checkpointing(...)``,
a sweep and a study ``batching=Batching(...)``) instead of a dozen flat keywords: options that travel together,
each record checked in one place and passed whole from one driver to the next (a comparison gives every
algorithm's run the same ``Evaluation``). The records are option groups (:mod:`fedjax_clust.core.option_groups`):
their fields keep the former keywords' names, which are also the command line's flags (``--eval-every``,
``--metric``, ...) and the keys ``run.json`` records, so a driver called with the former flat keywords still
runs for one version (0.3.0), with a DeprecationWarning naming the record to use.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Union

from fedjax_clust.core.option_groups import option_group, take_legacy, warn_deprecated_keyword

__all__ = ["Evaluation", "Output", "Checkpointing", "Batching", "driver_records"]


@option_group
class Evaluation:
    """When a run is evaluated, over which clients, and what a non-finite client model does.

    Args:
      eval_every: evaluate every this many rounds (and at round 0 and the last round).
      eval_clients: K: each evaluation covers K clients drawn uniformly without replacement for that round (the
        same K for a run and its resume, and for every algorithm run with the same seed) instead of every client;
        its means and spreads are over the sample's counted clients. None: every client.
      on_nonfinite: "stop" ends the run at the first evaluation with non-finite client models
        (:class:`~fedjax_clust.run.simulate.NonFiniteError`); "warn" goes on and computes the metrics over the
        finite clients.
      metric: the headline metric, the one that says how good a run is: a run's warning when it ended worse than
        it started (:func:`~fedjax_clust.run.advice.ended_worse`), a comparison's figure, a sweep's table and
        figure, a study's comparison. None: test_accuracy, else mean_sq_dist_to_optimum, else mean_loss (a
        comparison's figure: mean_sq_dist_to_optimum where the task knows its optima, else test_accuracy, else
        mean_loss).
      higher_better: whether a larger headline metric is better (None: read from its name,
        :func:`~fedjax_clust.run.statistics.higher_is_better`).
    """

    eval_every: int = 10
    eval_clients: Optional[int] = None
    on_nonfinite: str = "stop"
    metric: Optional[str] = None
    higher_better: Optional[bool] = None


@option_group
class Output:
    """What a run writes and shows, and what it does with a folder that already holds results.

    Args:
      out_dir: the results folder (None: nothing is written).
      overwrite: clear a results folder that already holds results (else the run is refused).
      resume: continue what the folder holds: a run from its newest checkpoint (its configuration must equal
        this one); a sweep or a study keeps its finished programs. A comparison does not resume.
      progress: draw the progress bar (stderr).
      tracking: a :class:`fedjax_clust.io.tracking.Tracking`: TensorBoard event files and / or a Weights & Biases
        run get the configuration and every evaluated round's metrics (the run's files do not change).
    """

    out_dir: Optional[str] = None
    overwrite: bool = False
    resume: bool = False
    progress: bool = True
    tracking: Any = None


@option_group
class Checkpointing:
    """When a run saves its whole state and where (:mod:`fedjax_clust.io.checkpoint`).

    Args:
      checkpoint_every: save the whole state, the metrics so far and the configuration every this many rounds
        (None: no checkpoints).
      checkpoint_dir: the checkpoints' folder (None: ``out_dir/checkpoints``); a resume reads it too.
    """

    checkpoint_every: Optional[int] = None
    checkpoint_dir: Optional[str] = None


@option_group
class Batching:
    """How a sweep's (or a study's) runs become compiled programs (:mod:`fedjax_clust.run.sweep`); the numbers
    do not depend on it (the two ``run_batching`` modes agree to float32 rounding).

    Args:
      runs_per_program: the most runs one compiled program holds: an integer, None (all), or "auto".
      run_batching: how a program computes its runs: "vmap" batched together, "map" one after another inside
        the program, "auto" "map" on a CPU and "vmap" on an accelerator
        (:func:`~fedjax_clust.run.sweep.resolved_run_batching`).
      attack_switch: whether runs that differ in their attack (``grid["attack"]``: registered message attacks)
        share one program switching over the kinds (:mod:`fedjax_clust.robust.attack_switch`): "auto" where the
        program maps its runs (a CPU's default: the switch runs one kind), True also where it vmaps them (then
        every kind's messages are computed in every round), False never (a program per kind).
    """

    runs_per_program: Union[int, str, None] = "auto"
    run_batching: str = "auto"
    attack_switch: Union[bool, str] = "auto"


# simulate's former keywords that make its Placement (a comparison had the first three)
PLACEMENT_LEGACY = ("client_rows", "device_memory", "host_rows_dir", "max_fused_rounds")


def driver_records(
    function: str, legacy: Mapping, placement, placement_keywords: tuple = PLACEMENT_LEGACY, **records
) -> tuple:
    """(placement, *records) of the driver ``function`` called with ``legacy`` (its ``**legacy``: the
    deprecated flat keywords): the placement keywords in ``placement_keywords`` make the
    :class:`~fedjax_clust.run.placement.Placement` (:func:`~fedjax_clust.run.placement.placement_from`), the
    records' fields go into ``records`` (keyword -> record, :func:`~fedjax_clust.core.option_groups.take_legacy`),
    each with a DeprecationWarning pointed at the driver's caller; any other keyword is a TypeError."""
    from fedjax_clust.run.placement import placement_from

    rows = {k: v for k, v in legacy.items() if k in placement_keywords and k != "max_fused_rounds"}
    fields = {k: v for k, v in legacy.items() if k not in placement_keywords}
    placement = placement_from(placement, rows, function=function, keywords=placement_keywords, stacklevel=4)
    fused = legacy.get("max_fused_rounds") if "max_fused_rounds" in placement_keywords else None
    if fused is not None:  # its own keyword before 0.3.0: it may come beside a placement
        if placement.max_fused_rounds is not None:
            raise ValueError("give max_fused_rounds inside placement=Placement(...) or as a keyword, not both")
        instead = "give placement=Placement(max_fused_rounds=...) (fedjax_clust.run.placement)"
        warn_deprecated_keyword(function, "max_fused_rounds", instead, stacklevel=3)
        placement = dataclasses.replace(placement, max_fused_rounds=fused)
    return (placement, *take_legacy(function, fields, stacklevel=4, **records))
