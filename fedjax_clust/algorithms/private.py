"""Central differential privacy for the algorithms that average what their clients send: the glue between
``make_algorithm``'s ``dp_*`` keywords and the mechanism, the sampling and the accountant.

A private algorithm (its spec's ``private_releases`` is set: Global, Ground-truth, IFCA options I and II,
HypCluster) is built with :class:`~fedjax_clust.privacy.mechanism.PrivateMean` as its aggregator (clip every
received message -- after any Byzantine replacement, so attackers are clipped too --, sum per group, add
Gaussian noise z C to every sum, divide by a fixed or noised denominator), runs on Poisson-sampled clients when
the sampling rate is below 1 (:func:`~fedjax_clust.algorithms.participation.poisson_rule`: the sample the
accountant assumes, in fixed slots) and carries a :class:`~fedjax_clust.privacy.accounting.Ledger` in its
``execution.privacy``, from which every evaluation row records epsilon and delta.

Refused, each with a one-line reason: an algorithm without ``private_releases`` (Federated-Clustering's clients
see each other's raw gradients and Threshold-Clustering is an iterated nonlinear map; Local releases nothing
shared; the others' servers do more than sum clipped messages), a robust aggregator
(:func:`~fedjax_clust.privacy.central.refuse_aggregator`), example weighting (it scales a client's
sensitivity), and fixed-size or availability participation (not the Poisson sampling accounted).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from fedjax_clust.algorithms.participation import ParticipationRule, poisson_rule
from fedjax_clust.algorithms.registry import algorithm_names, algorithm_spec
from fedjax_clust.core.algorithm import FederatedAlgorithm
from fedjax_clust.core.validation import is_traced
from fedjax_clust.privacy.accounting import Ledger
from fedjax_clust.privacy.central import CentralPrivacy, refuse_aggregator
from fedjax_clust.privacy.mechanism import PrivateMean

__all__ = ["PrivatePlan", "plan_central_privacy", "with_ledger", "private_algorithms"]


def private_algorithms() -> list:
    """The registered algorithms that take central privacy."""
    return [n for n in algorithm_names() if algorithm_spec(n).private_releases is not None]


class PrivatePlan(NamedTuple):
    """What a private build uses: the ``aggregator`` (the private mean), the Poisson ``rule`` (None: every
    client every round), the ``ledger`` (None when the clip bound or the noise multiplier is traced: a sweep's
    vmapped build, whose runs are each also built with their own values and ledgers)."""

    aggregator: PrivateMean
    rule: Optional[ParticipationRule]
    ledger: Optional[Ledger]


def plan_central_privacy(
    privacy: CentralPrivacy, name: str, options: dict, num_clients: int, *, aggregator, weighting: str, participation
) -> PrivatePlan:
    """The private mean, sampling and ledger of algorithm ``name`` with its ``options`` (module docstring);
    ValueError for every combination privacy refuses."""
    spec = algorithm_spec(name)
    if spec.private_releases is None:
        raise ValueError(
            f"algorithm {name!r} refuses central privacy (its server does more than sum what clients send, or its "
            f"clients exchange raw messages); private algorithms: {private_algorithms()}"
        )
    if aggregator is not None:
        refuse_aggregator(aggregator if isinstance(aggregator, str) else getattr(aggregator, "aggregator_name", "?"))
    if weighting != "uniform":
        raise ValueError(
            'weighting="examples" does not apply with privacy: a client weight would scale its sensitivity beyond '
            "the clip bound"
        )
    if participation:
        raise ValueError(
            "privacy samples its own clients (dp_sampling, Poisson: what the accountant assumes); it takes no "
            "participation or availability"
        )
    releases = int(spec.private_releases(options))
    noise = privacy.noise_for(releases)
    rule = poisson_rule(num_clients, privacy.sampling, privacy.slots) if privacy.sampling < 1 else None
    if is_traced(noise) or is_traced(privacy.clip):  # a sweep's vmapped build: its runs keep the ledgers
        return PrivatePlan(privacy.mechanism(noise, num_clients), rule, None)
    release = privacy.release(noise, releases)
    describe = dict(
        clip=privacy.clip,
        noise_multiplier=noise,
        delta=privacy.delta,
        sampling=privacy.sampling,
        accountant=privacy.accountant,
        denominator=privacy.denominator,
        releases_per_round=releases,
        round_noise_multiplier=release.noise_multiplier,
    )
    if privacy.target_epsilon is not None:
        describe.update(target_epsilon=privacy.target_epsilon, calibrated_rounds=privacy.rounds)
    if privacy.denominator == "noisy-count":
        describe["count_noise_ratio"] = privacy.count_noise_ratio
    truncation = 0.0 if rule is None else rule.truncation
    if rule is not None:
        describe.update(slots=rule.size, truncation=truncation)
    ledger = Ledger(release, privacy.delta, privacy.accountant, truncation, describe)
    return PrivatePlan(privacy.mechanism(noise, num_clients), rule, ledger)


def with_ledger(algorithm: FederatedAlgorithm, ledger: Ledger) -> FederatedAlgorithm:
    """``algorithm`` recording its privacy: ``hparams["privacy"]`` and ``execution.privacy``."""
    hparams = {**algorithm.hparams, "privacy": dict(ledger.describe)}
    return algorithm._replace(hparams=hparams, execution=algorithm.execution.replace(privacy=ledger))
