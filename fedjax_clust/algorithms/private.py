"""Central differential privacy for the algorithms that average what their clients send: the glue between
``make_algorithm``'s ``dp_*`` keywords and the mechanism, the sampling and the accountant.

A private algorithm (its spec's ``private_releases`` is set: Global, Ground-truth, IFCA options I and II,
HypCluster, Ditto's global model, CFL) is built with :class:`~fedjax_clust.privacy.mechanism.PrivateMean` as its
aggregator (clip every received message -- after any Byzantine replacement, so attackers are clipped too --, sum per
group, add Gaussian noise z C to every sum, divide by a fixed or noised denominator), runs on Poisson-sampled
clients when the sampling rate is below 1 (:func:`~fedjax_clust.algorithms.participation.poisson_rule`: the sample
the accountant assumes, in fixed slots) and carries a :class:`~fedjax_clust.privacy.accounting.Ledger` in its
``execution.privacy``, from which every evaluation row records epsilon and delta. With adaptive clipping
(``dp_clip_quantile``, :mod:`fedjax_clust.privacy.adaptive`) the clip bound is server state the algorithm keeps
(:func:`~fedjax_clust.robust.aggregators.aggregator_state`) and its rounds report as ``dp_clip``.

Refused, each with a one-line reason: an algorithm without ``private_releases`` (Federated-Clustering's clients
see each other's raw gradients and Threshold-Clustering is an iterated nonlinear map; Local releases nothing
shared; the others' servers do more than sum clipped messages), a robust aggregator
(:func:`~fedjax_clust.privacy.central.refuse_aggregator`), example weighting (it scales a client's
sensitivity), and fixed-size or availability participation (not the Poisson sampling accounted).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

from fedjax_clust.algorithms.participation import ParticipationRule, poisson_rule
from fedjax_clust.algorithms.registry import algorithm_names, algorithm_spec
from fedjax_clust.core.algorithm import FederatedAlgorithm
from fedjax_clust.core.validation import is_traced
from fedjax_clust.privacy.accounting import Ledger
from fedjax_clust.privacy.central import CentralPrivacy, SideReleases, refuse_aggregator
from fedjax_clust.privacy.local import LocalGaussian, LocalPrivacy, local_release
from fedjax_clust.privacy.mechanism import PrivateMean

__all__ = [
    "PrivatePlan",
    "plan_central_privacy",
    "plan_local_privacy",
    "with_ledger",
    "private_algorithms",
    "local_private_algorithms",
]


def private_algorithms() -> list:
    """The registered algorithms that take central privacy."""
    return [n for n in algorithm_names() if algorithm_spec(n).private_releases is not None]


def local_private_algorithms() -> list:
    """The registered algorithms that take local privacy."""
    return [n for n in algorithm_names() if algorithm_spec(n).local_privacy_messages is not None]


MAX_TRUNCATION = 1e-9  # the largest per-round probability of more sampled clients than slots privacy accepts


class PrivatePlan(NamedTuple):
    """What a private build uses: the ``aggregator`` (the private mean), the Poisson ``rule`` (None: every
    client every round), the ``ledger`` (None when the clip bound or the noise multiplier is traced: a sweep's
    vmapped build, whose runs are each also built with their own values and ledgers)."""

    aggregator: PrivateMean
    rule: Optional[ParticipationRule]
    ledger: Optional[Ledger]


def plan_central_privacy(
    privacy: CentralPrivacy,
    name: str,
    options: dict,
    num_clients: int,
    *,
    aggregator,
    weighting: str,
    participation,
    attack=None,
) -> PrivatePlan:
    """The private mean, sampling and ledger of algorithm ``name`` with its ``options`` (module docstring);
    ValueError for every combination privacy refuses."""
    spec = algorithm_spec(name)
    if spec.private_releases is None:
        local = " (it takes local privacy: dp_mode='local')" if spec.local_privacy_messages is not None else ""
        raise ValueError(
            f"algorithm {name!r} refuses central privacy{local}: its server does more than sum what clients send, "
            f"or its clients exchange raw messages; centrally private algorithms: {private_algorithms()}"
        )
    if aggregator is not None:
        refuse_aggregator(aggregator if isinstance(aggregator, str) else getattr(aggregator, "aggregator_name", "?"))
    if attack is not None and getattr(attack, "reads_others", False):
        raise ValueError(
            f"the {attack.attack_name} attack computes its message from the other clients' messages, so one honest "
            "client moves every attacker's clipped message and the sum's sensitivity is no longer C: central privacy "
            "refuses it (attacks on their own message, e.g. sign-flip, large-gradient, gaussian, are clipped)"
        )
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
    if releases < 1:
        raise ValueError(f"algorithm {name!r} releases nothing each round with these options (e.g. cluster_steps=0)")
    side = SideReleases() if spec.private_side_releases is None else spec.private_side_releases(options)
    noise = privacy.noise_for(releases, num_clients, side)
    rule = poisson_rule(num_clients, privacy.sampling, privacy.slots) if privacy.sampling < 1 else None
    if privacy.slots is not None and rule is not None and rule.truncation > MAX_TRUNCATION:  # the user's own slots
        raise ValueError(
            f"dp_slots={rule.size} drop sampled clients with probability {rule.truncation:.3g} per round (more than "
            f"{MAX_TRUNCATION:g}), which the accountant charges to delta: give more slots, or none (the default)"
        )
    if is_traced(noise) or is_traced(privacy.clip):  # a sweep's vmapped build: its runs keep the ledgers
        return PrivatePlan(privacy.mechanism(noise, num_clients), rule, None)
    release = privacy.release(noise, releases, num_clients, side)
    if rule is not None and rule.poisson is not None:  # the rate the draw uses (a multiple of 2^-32): accounted
        release = dataclasses.replace(release, sampling=rule.poisson)
    describe = _describe(
        "central",
        privacy,
        noise,
        release,
        sampling=release.sampling,
        denominator=privacy.denominator,
        releases_per_round=releases,
        **({"side_releases": side._asdict()} if side != SideReleases() else {}),
    )
    if privacy.denominator == "noisy-count":
        describe["count_noise_ratio"] = privacy.count_noise_ratio
    adaptive = privacy.adaptive(num_clients)
    if adaptive is not None:
        describe.update(adaptive.describe())
    truncation = 0.0 if rule is None else rule.truncation
    if rule is not None:
        describe.update(slots=rule.size, truncation=truncation)
    ledger = Ledger(release, privacy.delta, privacy.accountant, truncation, describe)
    return PrivatePlan(privacy.mechanism(noise, num_clients), rule, ledger)


def plan_local_privacy(privacy: LocalPrivacy, name: str, options: dict, clients_per_round: int) -> tuple:
    """(the :class:`~fedjax_clust.privacy.local.LocalGaussian` every client applies, its ledger; None when the
    clip bound or the noise is traced) of algorithm ``name`` (:mod:`fedjax_clust.privacy.local`)."""
    spec = algorithm_spec(name)
    if spec.local_privacy_messages is None:
        raise ValueError(
            f"algorithm {name!r} refuses local privacy; it applies to {local_private_algorithms()} "
            "(dp_mode='central' for the averaging algorithms)"
        )
    messages = int(spec.local_privacy_messages(options, clients_per_round))
    noise = privacy.noise_for(messages)
    mechanism = LocalGaussian(privacy.clip, noise)
    if is_traced(noise) or is_traced(privacy.clip):
        return mechanism, None
    release = local_release(noise, messages)
    describe = _describe("local", privacy, noise, release, messages_per_round=messages)
    return mechanism, Ledger(release, privacy.delta, privacy.accountant, 0.0, describe)


def _describe(mode: str, privacy, noise: float, release, **more) -> dict:
    """What a run records of its privacy (``hparams["privacy"]``), central or local."""
    out = dict(mode=mode, clip=privacy.clip, noise_multiplier=noise, delta=privacy.delta, accountant=privacy.accountant)
    out.update(more, round_noise_multiplier=release.noise_multiplier)
    if privacy.target_epsilon is not None:
        out.update(target_epsilon=privacy.target_epsilon, calibrated_rounds=privacy.rounds)
    return out


def with_ledger(algorithm: FederatedAlgorithm, ledger: Ledger) -> FederatedAlgorithm:
    """``algorithm`` recording its privacy: ``hparams["privacy"]`` and ``execution.privacy``."""
    hparams = {**algorithm.hparams, "privacy": dict(ledger.describe)}
    return algorithm._replace(hparams=hparams, execution=algorithm.execution.replace(privacy=ledger))
