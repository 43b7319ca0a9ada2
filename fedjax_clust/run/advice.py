"""What a run says when its own numbers show it cost more than it had to, or missed its purpose: a run that
exits 0 is not silent about either.

* :class:`EvaluationCost` -- a run that evaluates a population of more than :data:`SAMPLE_ABOVE_CLIENTS`
  clients whole says, after its first evaluation, what that evaluation took and what its evaluations will take
  together, and how to sample them (``eval_clients=K``, ``--eval-clients K``). The full evaluation stays the
  default: a sample changes the metrics' meaning, so it is one option away rather than chosen silently.
* :func:`ended_worse` -- a run whose headline metric ended worse than at round 0 (:data:`HEADLINE`: test accuracy
  lower, else the squared distance to the optimum or the loss higher): a diverged learning rate, a private
  release that is mostly noise, an attack that won.
* :func:`warn_if_mostly_noise` -- before a private run starts, when its calibrated noise leaves every release
  mostly noise (:mod:`fedjax_clust.privacy.signal`: the noise's norm above the largest signal's).

All warn through :mod:`warnings` (:class:`RunAdvice`): the command line prints one ``warning:`` line, Python
shows it once per place, and either can be filtered.
"""

from __future__ import annotations

import math
import warnings
from typing import Optional, Sequence

from fedjax_clust.run.loop import Callback, Loop
from fedjax_clust.run.statistics import higher_is_better

__all__ = [
    "RunAdvice",
    "SAMPLE_ABOVE_CLIENTS",
    "HEADLINE",
    "EvaluationCost",
    "scheduled_evaluations",
    "ended_worse",
    "warn_if_ended_worse",
    "warn_if_mostly_noise",
    "suggested_sample",
]

SAMPLE_ABOVE_CLIENTS = 10_000  # a whole-population evaluation above this many clients gets the cost note

# (metric, True when higher is better), the first one a run's rows hold being its headline
HEADLINE = (("test_accuracy", True), ("mean_sq_dist_to_optimum", False), ("mean_loss", False))


class RunAdvice(UserWarning):
    """A run's cost or result that its user should know about (module docstring)."""


def scheduled_evaluations(first: int, rounds: int, eval_every: int) -> int:
    """Evaluations a run from round ``first`` to ``rounds`` makes: round 0 (when it starts at round 1), every
    multiple of ``eval_every`` and the last round."""
    multiples = rounds // eval_every - (first - 1) // eval_every
    return int(first == 1) + multiples + int(rounds % eval_every != 0 and rounds >= first)


class EvaluationCost(Callback):
    """After the first evaluation of a whole population of ``num_clients`` > :data:`SAMPLE_ABOVE_CLIENTS`
    clients, one :class:`RunAdvice`: its seconds, the ``evaluations`` the run makes (their projected total) and
    ``eval_clients=K`` to sample. ``sampled``: the run samples already (nothing to say)."""

    def __init__(self, num_clients: int, evaluations: int, sampled: bool):
        self.num_clients, self.evaluations = num_clients, evaluations
        self.pending = not sampled and num_clients > SAMPLE_ABOVE_CLIENTS

    def after_evaluation(self, loop: Loop, t: int, rows: list, bad: list) -> None:
        if not self.pending:
            return
        self.pending = False
        seconds, k = loop.evaluation_times[-1], suggested_sample(self.num_clients)
        warnings.warn(
            f"evaluating all {self.num_clients:,} clients took {seconds:.1f} s (compilation included); this run "
            f"evaluates {self.evaluations} time(s), about {_duration(seconds * self.evaluations)} in all: "
            f"eval_clients={k} (--eval-clients {k}) evaluates {k:,} clients drawn anew at each evaluation instead",
            RunAdvice,
            stacklevel=2,
        )


def suggested_sample(num_clients: int) -> int:
    """The sample the cost note suggests: a tenth of the population, in whole thousands from 1,000 on (10,000 of
    100,000 clients; 1,000 of 12,000; 16 of 160)."""
    tenth = num_clients // 10
    return tenth // 1000 * 1000 if tenth >= 1000 else max(tenth, 1)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def ended_worse(
    history: Sequence[dict], metric: Optional[str] = None, higher_better: Optional[bool] = None
) -> Optional[str]:
    """``"<metric> ended at <last> after <first> at round 0"`` when the run's headline metric is worse at its last
    evaluated round than at round 0, else None (also when either value is not finite or the run has no round 0
    row). The headline metric: ``metric``, or without it the first of :data:`HEADLINE` the run logs; larger is
    better as ``higher_better`` says (None: as :data:`HEADLINE` says, or for ``metric`` as its name says,
    :func:`~fedjax_clust.run.statistics.higher_is_better`)."""
    if len(history) < 2 or history[0].get("round") != 0:
        return None
    first, last = history[0], history[-1]
    if metric is not None:
        headline = [(metric, higher_is_better(metric) if higher_better is None else bool(higher_better))]
    else:
        headline = [(name, larger if higher_better is None else bool(higher_better)) for name, larger in HEADLINE]
    for name, larger_better in headline:
        if name in first and name in last:
            a, b = first[name], last[name]
            if not _finite(a) or not _finite(b):
                return None
            worse = b < a if larger_better else b > a
            if not worse:
                return None
            return f"{name} ended at {b:.4g} at round {last['round']} after {a:.4g} at round 0"
    return None


def warn_if_ended_worse(
    name: str, history: Sequence[dict], metric: Optional[str] = None, higher_better: Optional[bool] = None
) -> None:
    """The :class:`RunAdvice` of one run (``name``: its algorithm) whose history :func:`ended_worse` (its
    headline ``metric``, see there)."""
    worse = ended_worse(history, metric, higher_better)
    if worse:
        warnings.warn(f"{name}: {worse}: the run ended worse than it started", RunAdvice, stacklevel=3)


def warn_if_mostly_noise(algorithm, task) -> None:
    """The :class:`RunAdvice` of a private ``algorithm`` on ``task`` whose releases are mostly noise
    (:func:`~fedjax_clust.privacy.signal.mostly_noise_message`; nothing for a run without privacy)."""
    import jax

    from fedjax_clust.privacy.signal import mostly_noise_message

    ledger = algorithm.execution.privacy
    if ledger is None:
        return
    privacy = ledger.describe
    shapes = jax.eval_shape(task.init_params, jax.random.PRNGKey(0))
    model_size = int(sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(shapes)))
    message = mostly_noise_message(privacy, model_size, task.num_clients)
    if message:
        warnings.warn(f"{algorithm.name}: {message}", RunAdvice, stacklevel=3)


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
