"""Partial participation: each round only S of the N clients take part (FedJAX's client samplers, Flower's
``fraction_fit``, FL-bench's join ratio).

A :class:`ParticipationRule` draws the round's participants, S distinct client indices in increasing order,
from the round's key and number; S is fixed for the whole run, so every round has static shapes:

* ``fraction=f``: S = max(1, round(f N)) clients drawn uniformly without replacement (``count=S`` directly):
  by Floyd's algorithm when S^2 <= 16 N (O(S^2) work, whatever N: a cohort of 10 among 10^6 clients costs
  what it costs among 1,000), else as the S smallest of N uniform scores (O(N log N));
* ``availability``: a bool [R, N] trace (round t may use clients with ``availability[t]``); S clients are
  drawn uniformly among round t's available ones (S = ``count`` / ``fraction``, or by default the fewest
  clients any round has available, so that every round can fill its S slots). A run may not outlast the trace;
* ``sampler(key, round) -> int [S]``: the user's own rule, a pure function returning S distinct indices;
* ``poisson=q``: every client takes part independently with probability q (Poisson sampling, what privacy
  accountants assume: :mod:`fedjax_clust.privacy.accounting`), in ``slots`` = S fixed slots so that every round
  has static shapes: the sampled clients fill the first slots (a uniform subset of S of them when more were
  drawn, which happens with probability ``truncation`` = P(Binomial(N + 1, q) > S) per round, N + 1 for the
  neighbouring population with one client more; by default S is the
  smallest count with ``truncation`` <= 1e-16) and the other slots hold clients that were not sampled, marked
  inactive (:class:`~fedjax_clust.core.participants.Participants`' ``active``): they send nothing
  (:func:`~fedjax_clust.core.participants.silence_inactive`, NaN messages every aggregate leaves out) and the
  wrapper keeps their rows as they were. Only algorithms whose messages all go through their adversary's
  ``send`` honour it (the private ones: :mod:`fedjax_clust.privacy.central`); the round's work is S clients'.

:func:`with_participation` turns any algorithm that supports it into the same algorithm run on the
participants only. Each round it gathers the participants' rows -- their parameters, optimiser state, the
per-client state ``state.rows`` and their data -- into a block of S rows,
runs the algorithm's own round on that block as if the population were these S clients, and scatters the
rows back. Every algorithm's state splits the same way (:class:`~fedjax_clust.core.state.ClientState`): the
clients' rows (``params``, ``opt_state``, ``rows``, leading axis N) are gathered and scattered, the server's
(``extra``, ``round``) is the round's to update. So:

* a non-participant's parameters, optimiser state and per-client state are bit-identical before and after
  the round (it neither trains nor receives); where the clients' models are held by the server (a
  :class:`~fedjax_clust.core.model_table.ModelTable`: IFCA's and HypCluster's cluster models) a
  non-participant keeps its row of the table, which holds the server's current model of its cluster;
* the server's state (cluster models, global model) moves with what the S participants send, and every
  server average, robust aggregator and clustering covers participants only;
* the work falls with S: Federated-Clustering evaluates S x S cross-gradients, not N x N (about f^2 of the
  full round), IFCA S x K losses, and so on;
* with S = N (participation 1.0) the round is the algorithm's own, unchanged program: the same numbers bit
  for bit (a gather by the identity permutation would let XLA fuse differently and move the last bit).

The round receives its participants as an argument, ``apply(state, data, key, participants)`` with a
:class:`~fedjax_clust.core.participants.Participants` (``gathered=True``); per-client constants of the
algorithm (the Byzantine mask, fixed group labels) are restricted to them through
:func:`fedjax_clust.core.participants.client_rows`.

The participants are drawn from ``fold_in(key, PARTICIPATION_STREAM)``, so the algorithm's own round sees
the same key as without participation. The round's ``cluster_labels`` are returned over all N clients
(-1 for non-participants) with a ``participants`` mask, and the run's ``misclustering`` is then over the
round's participants.

Algorithms whose round needs every client's row (``algorithm.masked_participation``) get all N clients and
their participants instead (``gathered=False``, :func:`fedjax_clust.core.participants.participant_mask`):
SR-FCA and the 3-stage algorithm, whose clustering stages hear every client (only participants train, and a
cluster aggregates its participating members only), and Global and Ground-truth when their clients hold
per-client rows (per-client starts, ``ClientParams``): the participants' gradients make the group's step, and
every member of a group that had a participant takes it (a client downloads the current group model, as in
FedAvg); a group without participants stands still. With their default state, the group models held by the
server (a ModelTable), Global and Ground-truth are gathered like every other algorithm
(``masked_participation="rows"``): the table's rows of non-participants hold the new group model by
construction, so the two rounds compute the same thing (equal to float rounding: XLA compiles them apart; runs
of earlier versions are not reproduced bit for bit), and only the gathered one streams. SR-FCA's and the 3-stage
algorithm's work does not fall with f, and their ``cluster_labels`` (every client's cluster) are returned as
they are.
"""

from __future__ import annotations

import os
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.core.algorithm import MASKED_WITH_ROWS, FederatedAlgorithm
from fedjax_clust.core.model_table import ModelTable, is_table
from fedjax_clust.core.participants import Participants, keep_non_participants, participant_mask, with_participants
from fedjax_clust.core.pytrees import take_rows
from fedjax_clust.core.ragged_batch import floyd_sample
from fedjax_clust.core.state import ClientState
from fedjax_clust.core.validation import check_int, check_real

__all__ = [
    "ParticipationRule",
    "participation_rule",
    "with_participation",
    "CohortProgram",
    "PARTICIPATION_STREAM",
    "load_availability",
    "poisson_rule",
    "poisson_slots",
]

PARTICIPATION_STREAM = 0x9A271C  # fold_in constant of the participants' key (never a step's or client's index)
FLOYD_FACTOR = 16  # a uniform draw of S <= sqrt(16 N) participants uses Floyd's algorithm (O(S^2) work)


class ParticipationRule(NamedTuple):
    """``draw(key, round) -> int32 [size]``, the round's participants in increasing order, for a population of
    ``num_clients``; ``describe`` is what a run records (``hparams["participation"]``); ``rounds`` the length of
    an availability trace (None: any number of rounds). A Poisson rule's (``poisson`` the rate) ``draw`` returns
    (index, active) and ``truncation`` is its per-round probability of drawing more clients than slots."""

    num_clients: int
    size: int
    draw: Callable[[jax.Array, jax.Array], jax.Array]
    describe: dict
    rounds: Optional[int] = None
    poisson: Optional[float] = None  # the Poisson rate q: draw returns (index [S], active bool [S])
    truncation: float = 0.0  # P(more than S clients drawn) per round, of a Poisson rule


def load_availability(path: str) -> np.ndarray:
    """A bool [rounds, N] availability trace from a ``.npy`` file (ValueError naming the file otherwise)."""
    if os.path.isdir(path):
        raise ValueError(f"availability file {path!r} is a folder, not a .npy array")
    try:
        trace = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise ValueError(f"availability file {path!r} is not a readable .npy array: {error}") from None
    if not isinstance(trace, np.ndarray):  # an .npz archive of named arrays
        trace.close()
        raise ValueError(
            f"availability file {path!r} is an .npz archive; save the bool [rounds, N] trace with "
            "numpy.save as a .npy file"
        )
    if trace.ndim != 2 or not (trace.dtype == bool or np.issubdtype(trace.dtype, np.integer)):
        raise ValueError(
            f"availability file {path!r} must hold a bool [rounds, N] array, got {trace.dtype} of shape {trace.shape}"
        )
    return trace


def _check_trace(availability, num_clients):
    trace = np.asarray(availability)
    if trace.ndim != 2 or trace.shape[1] != num_clients:
        raise ValueError(f"availability must be a bool array [rounds, N={num_clients}], got shape {trace.shape}")
    if trace.dtype != bool:
        if not np.isin(trace, (0, 1)).all():
            raise ValueError("availability must hold booleans (or 0/1), got other values")
        trace = trace.astype(bool)
    if trace.shape[0] == 0:
        raise ValueError("availability has no rounds")
    return trace


def participation_rule(
    num_clients: int,
    *,
    fraction: Optional[float] = None,
    count: Optional[int] = None,
    availability=None,
    sampler: Optional[Callable] = None,
    poisson: Optional[float] = None,
    slots: Optional[int] = None,
) -> ParticipationRule:
    """The rule drawing each round's participants (module docstring): ``fraction`` or ``count`` (at most
    one), optionally among the ``availability`` trace's available clients; or ``sampler`` with ``count``; or
    ``poisson`` (a rate in (0, 1]) with optional ``slots``."""
    num_clients = check_int("num_clients", num_clients)
    if poisson is not None:
        if fraction is not None or count is not None or availability is not None or sampler is not None:
            raise ValueError("a Poisson rule (poisson=q) takes no fraction, count, availability or sampler")
        return poisson_rule(num_clients, poisson, slots)
    if slots is not None:
        raise ValueError("slots apply to a Poisson rule (poisson=q)")
    if fraction is not None and count is not None:
        raise ValueError("give participation as a fraction or as a count, not both")
    if fraction is not None:
        fraction = check_real("participation", fraction, low=0.0, high=1.0, low_open=True)
        count = max(1, int(round(fraction * num_clients)))
    if count is not None:
        count = check_int("participation count", count, 1, num_clients)
    if sampler is not None:
        if availability is not None:
            raise ValueError("a sampler draws the participants itself: give it or an availability trace, not both")
        if count is None or not callable(sampler):
            raise ValueError("sampler must be a function (key, round) -> int [S], given with count=S")
        size = count

        def draw(key, round_):
            index = jnp.asarray(sampler(key, round_))
            if index.shape != (size,) or not jnp.issubdtype(index.dtype, jnp.integer):
                raise ValueError(
                    f"the sampler must return {size} integer client indices, got {index.dtype} {index.shape}"
                )
            return jnp.sort(index.astype(jnp.int32))

        return ParticipationRule(
            num_clients, size, draw, {"rule": "sampler", "clients": size, "fraction": size / num_clients}
        )

    if availability is None:
        if count is None:
            raise ValueError("give a participation fraction, a count, an availability trace or a sampler")
        trace = None
    else:
        trace = _check_trace(availability, num_clients)
        fewest = int(trace.sum(axis=1).min())
        if count is None:
            count = fewest
        if count < 1 or fewest < count:
            round_ = int(np.argmin(trace.sum(axis=1)))
            raise ValueError(
                f"availability round {round_} has {fewest} available clients, fewer than the {count} "
                "participants per round (a count or fraction must fit every round)"
            )
    size = count
    trace_j = None if trace is None else jnp.asarray(trace)

    if trace_j is None and size * size <= FLOYD_FACTOR * num_clients:  # a small cohort: O(S^2), whatever N

        def draw(key, round_):
            chosen, _ = floyd_sample(key, jnp.full((1,), num_clients, jnp.int32), size)
            return jnp.sort(chosen[0])

        describe = {"rule": "uniform", "clients": size, "fraction": size / num_clients}
        return ParticipationRule(num_clients, size, draw, describe, None)

    def draw(key, round_):
        scores = jax.random.uniform(key, (num_clients,))
        if trace_j is not None:  # unavailable clients last (score 2)
            available = jnp.take(trace_j, jnp.minimum(round_, trace_j.shape[0] - 1), axis=0)
            scores = jnp.where(available, scores, 2.0)
        return jnp.sort(jnp.argsort(scores)[:size]).astype(jnp.int32)

    describe = {"rule": "uniform" if trace is None else "availability", "clients": size, "fraction": size / num_clients}
    if trace is not None:
        describe["availability_rounds"] = int(trace.shape[0])
    return ParticipationRule(num_clients, size, draw, describe, None if trace is None else int(trace.shape[0]))


POISSON_TRUNCATION = 1e-16  # the default slots of a Poisson rule: P(more clients drawn than slots) <= this


def poisson_slots(num_clients: int, rate: float, truncation: float = POISSON_TRUNCATION) -> int:
    """The fewest slots S with P(Binomial(num_clients + 1, rate) > S) <= ``truncation`` (at least 1, at most
    num_clients): N + 1, the neighbouring population with one client more, whose overflow bounds both."""
    from scipy.stats import binom

    slots = int(binom.isf(truncation, num_clients + 1, rate))
    while slots < num_clients and binom.sf(slots, num_clients + 1, rate) > truncation:
        slots += 1
    return max(1, min(slots, num_clients))


def poisson_rule(num_clients: int, rate: float, slots: Optional[int] = None) -> ParticipationRule:
    """Poisson participation at ``rate`` in ``slots`` slots (module docstring): ``draw(key, round)`` returns
    (index int32 [S] increasing, active bool [S])."""
    from scipy.stats import binom

    rate = check_real("poisson rate", rate, low=0.0, high=1.0, low_open=True)
    # a client is drawn when 32 random bits fall below round(q 2^32): the rate used is that over 2^32 (float32
    # uniforms would round q up to a multiple of 2^-23, more than 1% above q below q ~ 1e-5)
    threshold = min(max(round(rate * 2**32), 1), 2**32)
    rate = threshold / 2**32
    size = poisson_slots(num_clients, rate) if slots is None else check_int("slots", slots, 1, num_clients)
    # a neighbouring population has one client more: its overflow probability bounds both (the accountant's term)
    truncation = float(binom.sf(size, num_clients + 1, rate))

    def draw(key, round_):
        k_draw, k_order = jax.random.split(key)
        if threshold == 2**32:
            sampled = jnp.ones((num_clients,), bool)
        else:
            sampled = jax.random.bits(k_draw, (num_clients,), jnp.uint32) < jnp.uint32(threshold)
        # the sampled first (a uniform subset of them if too many), then the others in random order
        priority = jnp.where(sampled, 1.0, 0.0) + jax.random.uniform(k_order, (num_clients,))
        _, chosen = jax.lax.top_k(priority, size)
        index = jnp.sort(chosen).astype(jnp.int32)
        return index, jnp.take(sampled, index)

    describe = {
        "rule": "poisson",
        "rate": rate,  # the rate the draw uses: round(q 2^32) / 2^32
        "slots": size,
        "expected_clients": rate * num_clients,
        "truncation": truncation,
    }
    return ParticipationRule(num_clients, size, draw, describe, None, poisson=rate, truncation=truncation)


def _restore_inactive(new: ClientState, old: ClientState, active) -> ClientState:
    """The block's rows of ``new`` where a slot was active and of ``old`` elsewhere (a client that was not
    sampled neither trains nor receives); a server table keeps the round's models."""

    def rows(n, o):
        if is_table(n):
            return ModelTable(n.models, jnp.where(active, n.assignment, o.assignment))
        return keep_non_participants(n, o, active)

    return new._replace(
        params=rows(new.params, old.params),
        opt_state=rows(new.opt_state, old.opt_state),
        rows=keep_non_participants(new.rows, old.rows, active),
    )


def _gather(state: ClientState, index) -> ClientState:
    """The participants' rows (``params``, ``opt_state``, ``rows``); the server's state as it is."""
    return state._replace(
        params=take_rows(state.params, index),
        opt_state=take_rows(state.opt_state, index),
        rows=take_rows(state.rows, index),
    )


def _scatter(full, part, index):
    """``full`` with rows ``index`` replaced by ``part``; a server-held ModelTable takes the round's models
    and its participants' new assignment (a non-participant keeps its row of the table, which now holds the
    server's current model)."""
    if is_table(full):
        return ModelTable(part.models, full.assignment.at[index].set(part.assignment))
    return jax.tree.map(lambda f, p: f.at[index].set(p.astype(f.dtype)), full, part)


class CohortProgram(NamedTuple):
    """A participation round split where a driver may move rows between host and device
    (:mod:`fedjax_clust.run.streaming`): ``draw(key, round) -> int32 [S]`` the participants of the round with
    key ``key`` (the algorithm's round key) and counter ``round`` (``state.round`` before it), and
    ``run(block, data_block, key, index) -> (new block, metrics)`` the round on a block of S rows: the
    participants' ``params`` / ``opt_state`` / ``rows`` with the server's ``extra`` and ``round``, and their data.
    Its metrics are over the population (``participants`` [N], ``cluster_labels`` [N] with -1 for
    non-participants). :func:`with_participation`'s own round is ``draw``, a gather, ``run`` and a scatter, with
    the block fenced by ``lax.optimization_barrier`` on both sides, so that XLA compiles ``run`` the same whether
    its block was gathered on the device or arrived from the host: the two give the same numbers bit for bit.
    ``owner`` is the round (``apply``) that runs the program: a wrapper that replaces ``apply`` afterwards leaves
    the program stale, and a driver then keeps the rows on the device
    (:func:`fedjax_clust.run.streaming.cohort_program`). ``tables_only``: the program serves only states whose
    clients' models are a server-held table (:meth:`serves`; an algorithm with
    ``masked_participation="rows"``)."""

    rule: ParticipationRule
    draw: Callable
    run: Callable
    owner: Callable
    tables_only: bool = False

    def serves(self, state) -> bool:
        """Whether the program runs rounds of ``state`` (or its shapes): always, except for an algorithm masked
        while its clients hold rows (``tables_only``, Global / Ground-truth) whose clients do."""
        return not self.tables_only or is_table(state.params)


def _masked(algorithm: FederatedAlgorithm, state: ClientState) -> bool:
    """Whether the round takes all N rows and the participants (``masked_participation``: always, or
    ``"rows"`` while the clients hold per-client rows rather than a server table)."""
    if algorithm.masked_participation == MASKED_WITH_ROWS:
        return not is_table(state.params)
    return bool(algorithm.masked_participation)


def with_participation(
    algorithm: FederatedAlgorithm, rule: ParticipationRule, *, poisson_ok: bool = False
) -> FederatedAlgorithm:
    """``algorithm`` with only ``rule``'s participants taking part in each round (module docstring). A Poisson
    rule needs ``poisson_ok``: the algorithm sends every message through its adversary's ``send`` (which silences
    the inactive slots) into an aggregate that leaves silent messages out whatever the group -- the private mean
    (``make_algorithm(..., dp_sampling=q)`` builds such an algorithm); another algorithm would train on, or
    average NaN from, slots that drew no client."""
    if not isinstance(rule, ParticipationRule):
        raise ValueError(f"rule must come from participation_rule(...), got {rule!r}")
    if rule.poisson is not None and not poisson_ok:
        raise ValueError(
            "Poisson participation runs only inside a private algorithm (make_algorithm(..., "
            "privacy=central_privacy(clip=..., sampling=q))): other algorithms do not leave the slots that drew "
            "no client out"
        )
    if algorithm.execution.min_clients > rule.size:  # e.g. Federated-Clustering's subgroups
        raise ValueError(
            f"{algorithm.name} needs at least {algorithm.execution.min_clients} clients per round (e.g. its "
            f"subgroups), more than the {rule.size} participants per round"
        )
    inner_round = with_participants(algorithm.apply)
    n = rule.num_clients

    def init(params, num_clients, key=None):
        if num_clients != rule.num_clients:
            raise ValueError(f"the participation rule is for {rule.num_clients} clients, the task has {num_clients}")
        return algorithm.start(params, num_clients, key)

    def draw(key, round_):
        return rule.draw(jax.random.fold_in(key, PARTICIPATION_STREAM), round_)

    def run_block(block, data_block, key, index, active=None):
        participants = Participants(index, gathered=True, active=active)
        new, metrics = inner_round(block, data_block, key, participants)
        metrics = dict(metrics)
        metrics["participants"] = participant_mask(participants, n)
        if active is not None:
            new = _restore_inactive(new, block, active)
        if "cluster_labels" in metrics:
            labels = metrics["cluster_labels"] if active is None else jnp.where(active, metrics["cluster_labels"], -1)
            metrics["cluster_labels"] = jnp.full((n,), -1, jnp.int32).at[index].set(labels)
        return new, metrics

    def round_fn(state, data, key, participants=None):
        if participants is not None:
            raise ValueError(f"{algorithm.name} already takes partial participation; it cannot be wrapped twice")
        if rule.size == n and rule.poisson is None:  # everyone takes part: the algorithm's own program
            state, metrics = inner_round(state, data, key)
            return state, {**metrics, "participants": jnp.ones((n,), bool)}
        index, active = draw(key, state.round) if rule.poisson is not None else (draw(key, state.round), None)
        if _masked(algorithm, state):
            participants = Participants(index, gathered=False, active=active)
            new, metrics = inner_round(state, data, key, participants)
            return new, {**metrics, "participants": participant_mask(participants, n)}
        block, data_block = jax.lax.optimization_barrier((_gather(state, index), take_rows(data, index)))
        new, metrics = jax.lax.optimization_barrier(run_block(block, data_block, key, index, active))
        out = new._replace(
            params=_scatter(state.params, new.params, index),
            opt_state=_scatter(state.opt_state, new.opt_state, index),
            rows=_scatter(state.rows, new.rows, index),
        )
        return out, metrics

    hparams = {**algorithm.hparams, "participation": dict(rule.describe)}
    always_masked = algorithm.masked_participation is True
    tables_only = algorithm.masked_participation == MASKED_WITH_ROWS
    # a Poisson rule's slots are not a cohort a driver streams (its draw also marks the inactive slots)
    streams = not always_masked and rule.size < n and rule.poisson is None
    cohort = CohortProgram(rule, draw, run_block, round_fn, tables_only) if streams else None
    execution = algorithm.execution.replace(max_rounds=rule.rounds, clients_per_round=rule.size, cohort=cohort)
    return algorithm._replace(init=init, apply=round_fn, hparams=hparams, execution=execution)
