"""The algorithm registry: one :class:`AlgorithmSpec` per algorithm, read by ``make_algorithm``, the command
line, config files, sweeps, the profiler and the benchmarks.

A spec says everything the tools need to know about an algorithm, once:

* ``build(task, **options) -> FederatedAlgorithm``: the algorithm for a task (the task supplies the loss,
  the clients, the true clusters where the algorithm uses them); a ``build`` with a ``clients_per_round``
  parameter also gets the number of clients a round sees (N, or the participants per round), e.g. to size
  its memory use when it is built rather than when its round is traced;
* ``builder``: the function whose keyword-only parameters are the algorithm's options (default ``build``):
  ``make_algorithm`` refuses any other option with a ``ValueError`` naming it, and whether the algorithm
  steps with client momentum (``momentum``), takes a robust aggregator (``aggregator``) or attackers
  (``attack``) is read from that signature, never listed twice;
* ``needs_clusters``: it takes K (``num_clusters``, default the task's true K);
* ``owns_models``: its clients own their models, so it accepts per-client initial models (``ClientParams``);
* ``static_hparams`` (deprecated): names of options a sweep must never trace beyond those their type hints
  mark (:mod:`fedjax_clust.core.hyperparameter_kinds`: a builder marks a float that decides shapes
  ``Static[float]``; integers, strings and choices are static already); the algorithm's hyperparameter record
  (:mod:`fedjax_clust.algorithms.hyperparameter_record`) says which options are static;
* ``traffic(num_clients, num_params, num_clusters, subgroups) -> Traffic``: what one participating client
  receives and sends in a round, bytes and messages each way (the network cost model of
  :mod:`fedjax_clust.bench.profile` and :mod:`fedjax_clust.cost.network`; default one model down and one
  message of the model's size up); :meth:`AlgorithmSpec.comm_cost` is its total over the clients;
* ``example_options``: options that make a small run of it meaningful (a required threshold, a rule),
  used by the benchmarks, the profiler and the contract tests;
* ``flags``: the command-line name of a keyword whose name alone would be ambiguous among all algorithms'
  options (Ditto's ``lam`` is ``ditto-lambda``); every other keyword's flag is its name with dashes;
* ``resume_options(recorded_hparams) -> dict``: the options a resumed run takes from the hyperparameters
  its ``run.json`` recorded, where the builder resolved something from the device it ran on
  (Federated-Clustering's auto chunk), so the resumed rounds compute what the uninterrupted run would have
  (default: none);
* ``private_releases(options) -> int`` (None: the algorithm refuses central privacy): how many noised
  aggregates of the same sampled clients one round releases with these options (1 for Global, Ground-truth
  and IFCA; HypCluster's ``cluster_steps``), so that ``make_algorithm(..., privacy=...)`` accounts them
  (:mod:`fedjax_clust.privacy.central`); ``private_side_releases(options) ->``
  :class:`~fedjax_clust.privacy.central.SideReleases`: what else a private round releases (CFL's split test);
* ``local_privacy_messages(options, clients_per_round) -> int`` (None: the algorithm refuses local privacy):
  the messages one client sends per round, each clipped and noised by the client (Federated-Clustering: the
  clients of its subgroup), for the accountant (:mod:`fedjax_clust.privacy.local`); its builder takes a
  ``local_privacy`` keyword;
* ``renamed``: old keyword -> the option that replaced it, so ``make_algorithm`` (and with it the command
  line and config files) answers an old name with the new one instead of "takes no option".

The command line's options are the builders' keyword-only parameters whose type hints read from text, with
their docstrings' descriptions as help (:mod:`fedjax_clust.cli.options`).

Third-party algorithms register without editing the package: ``fedjax_clust.register_algorithm(spec)`` from
Python, or, for the command line, an entry point of the group ``fedjax_clust.algorithms`` in an installed
package whose object is an :class:`AlgorithmSpec` (or a list of them, or a function returning either)::

    [project.entry-points."fedjax_clust.algorithms"]
    my-method = "my_package.fl:SPEC"

Entry points are loaded the first time the registry is listed (:func:`algorithm_names`,
:func:`algorithm_spec` of an unknown name), never when ``fedjax_clust`` is imported.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional

from fedjax_clust.core.option_groups import flat_options, gather
from fedjax_clust.core.registry import Registry

__all__ = [
    "AlgorithmSpec",
    "register_algorithm",
    "unregister_algorithm",
    "algorithm_spec",
    "algorithm_names",
    "ENTRY_POINT_GROUP",
    "Traffic",
    "two_way_traffic",
    "no_traffic",
]

ENTRY_POINT_GROUP = "fedjax_clust.algorithms"
FLOAT_BYTES = 4
# parameters every builder may take that are not the algorithm's own options
_PLUMBING = ("attack", "byzantine", "attackers", "clients_per_round", "local_privacy")


@dataclasses.dataclass(frozen=True)
class Traffic:
    """What one participating client receives (``down``) and sends (``up``) in one round: bytes and messages
    (float32 parameters; a mean over the clients where they differ, e.g. unequal subgroups), and ``passes``, the
    minibatch gradient (or loss) evaluations it computes (at one local step: a deployment's client compute time
    is ``passes`` x examples x its seconds per example, :mod:`fedjax_clust.cost.network`)."""

    down_bytes: float = 0.0
    up_bytes: float = 0.0
    down_messages: float = 0.0
    up_messages: float = 0.0
    passes: float = 1.0

    def totals(self, clients: int) -> tuple:
        """(bytes, messages) of ``clients`` such clients together: what the server receives and sends."""
        return (
            int(round(clients * (self.down_bytes + self.up_bytes))),
            int(round(clients * (self.down_messages + self.up_messages))),
        )


def two_way_traffic(num_clients: int, num_params: int, num_clusters: int = 1, subgroups: int = 1) -> Traffic:
    """A round in which every client downloads one model and uploads one message of the model's size
    (FedAvg-like algorithms)."""
    del num_clients, num_clusters, subgroups
    size = FLOAT_BYTES * num_params
    return Traffic(size, size, 1, 1)


def no_traffic(num_clients: int, num_params: int, num_clusters: int = 1, subgroups: int = 1) -> Traffic:
    """A round that sends nothing (every client trains alone)."""
    del num_clients, num_params, num_clusters, subgroups
    return Traffic()


def _signature(function) -> inspect.Signature:
    """``inspect.signature`` of a builder, computed once: the command line asks every spec about every shared
    keyword when it starts (thousands of calls, a third of a second); an unhashable callable is not cached."""
    try:
        return _cached_signature(function)
    except TypeError:  # unhashable (a callable object without __hash__)
        return inspect.signature(function)


@functools.lru_cache(maxsize=None)
def _cached_signature(function) -> inspect.Signature:
    return inspect.signature(function)


def _flat_options(function, positional: bool) -> dict:
    """:func:`~fedjax_clust.core.option_groups.flat_options` of a builder, computed once (as :func:`_signature`)."""
    try:
        return _cached_flat_options(function, positional)
    except TypeError:  # unhashable (a callable object without __hash__)
        return flat_options(function, positional)


@functools.lru_cache(maxsize=None)
def _cached_flat_options(function, positional: bool) -> dict:
    return flat_options(function, positional)


@dataclasses.dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm for the registry (see the module docstring for each field)."""

    name: str
    build: Callable
    builder: Optional[Callable] = None
    needs_clusters: bool = False
    owns_models: bool = False
    static_hparams: tuple = ()
    traffic: Callable = two_way_traffic
    example_options: Mapping = dataclasses.field(default_factory=dict)
    hidden: tuple = ()  # parameters (or option group fields) of ``builder`` that ``build`` fixes (IFCA's option)
    summary: str = ""
    flags: Mapping = dataclasses.field(default_factory=dict)  # keyword -> its command-line name, where ambiguous
    resume_options: Callable[[Mapping], dict] = lambda recorded: {}  # noqa: E731 - see the module docstring
    renamed: Mapping = dataclasses.field(default_factory=dict)  # old keyword -> the option that replaced it
    private_releases: Optional[Callable[[Mapping], int]] = None  # None: refuses central privacy
    local_privacy_messages: Optional[Callable[[Mapping, int], int]] = None  # None: refuses local privacy
    private_side_releases: Optional[Callable[[Mapping], Any]] = None  # None: the aggregates are all

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name or self.name != self.name.strip():
            raise ValueError(
                f"an algorithm name must be a non-empty string without surrounding spaces, got {self.name!r}"
            )
        for field in ("build", "traffic", "resume_options"):
            if not callable(getattr(self, field)):
                raise ValueError(f"algorithm {self.name!r}: {field} must be a function, got {getattr(self, field)!r}")
        if self.builder is not None and not callable(self.builder):
            raise ValueError(f"algorithm {self.name!r}: builder must be a function, got {self.builder!r}")
        object.__setattr__(self, "static_hparams", tuple(self.static_hparams))
        object.__setattr__(self, "example_options", MappingProxyType(dict(self.example_options)))
        object.__setattr__(self, "flags", MappingProxyType(dict(self.flags)))
        object.__setattr__(self, "renamed", MappingProxyType(dict(self.renamed)))

    def __hash__(self):  # by name: the mapping fields are read-only mappings, which do not hash
        return hash(("algorithm", self.name))

    def comm_cost(self, num_clients: int, num_params: int, num_clusters: int = 1, subgroups: int = 1) -> tuple:
        """(bytes, messages) one round of ``num_clients`` participating clients sends, both ways: the total of
        :attr:`traffic` over the clients."""
        return self.traffic(num_clients, num_params, num_clusters, subgroups).totals(num_clients)

    def _parameters(self, positional: bool = False) -> dict:
        """The builder's options (``hidden`` aside; ``positional``: its positional-or-keyword parameters too), each
        option group's fields in its place (:mod:`fedjax_clust.core.option_groups`): name -> (default, source)."""
        flat = _flat_options(self.builder or self.build, positional)
        return {n: entry for n, entry in flat.items() if n not in self.hidden}

    @property
    def options(self) -> dict:
        """The algorithm's own options: keyword parameter -> default (``inspect.Parameter.empty`` when
        required), without the task-given arguments and the attack plumbing; an option group's fields stand in
        its place (:mod:`fedjax_clust.core.option_groups`)."""
        return {n: default for n, (default, _) in self._parameters().items() if n not in _PLUMBING}

    def option_source(self, option: str):
        """What declares and documents ``option``: the option group class holding it, else the builder."""
        return self._parameters().get(option, (None, self.builder or self.build))[1]

    def gather(self, options: Mapping) -> dict:
        """``options`` (flat names) with each option group's fields gathered into its record, as the builder
        takes them (:func:`fedjax_clust.core.option_groups.gather`)."""
        return gather(self.builder or self.build, options)

    def takes(self, option: str) -> bool:
        """Whether ``option`` is a keyword of the builder (or a field of one of its option groups)."""
        return option in self._parameters(positional=True) or option == "num_clusters" and self.needs_clusters

    @property
    def sizes_rounds(self) -> bool:
        """Its ``build`` takes ``clients_per_round`` (see the module docstring)."""
        return "clients_per_round" in _signature(self.build).parameters

    @property
    def sgd_momentum(self) -> bool:
        """Its clients step with SGD momentum (it takes ``momentum`` / ``momentum_form``)."""
        return self.takes("momentum")

    @property
    def aggregates(self) -> bool:
        """Its server averages messages and takes a robust aggregator."""
        return self.takes("aggregator")

    @property
    def attackable(self) -> bool:
        """Its Byzantine clients can replace what they send (its builder takes ``attackers``, or a plugin's
        ``attack`` / ``byzantine``)."""
        return self.takes("attack")


_ALGORITHMS: Registry[AlgorithmSpec] = Registry("algorithm", value_type=AlgorithmSpec, group=ENTRY_POINT_GROUP)


def register_algorithm(spec: AlgorithmSpec, *, replace: bool = False) -> AlgorithmSpec:
    """Add ``spec`` to the registry, so that ``make_algorithm(spec.name, task, ...)``, sweeps, the profiler
    and (for entry-point plugins) the command line know it. ValueError when the name is taken, unless
    ``replace``."""
    return _ALGORITHMS.register(spec, replace=replace)


def unregister_algorithm(name: str) -> AlgorithmSpec:
    """Remove algorithm ``name`` from the registry and return its spec (ValueError if it is not there)."""
    return _ALGORITHMS.unregister(name)


def algorithm_names() -> tuple:
    """Every registered algorithm's name: the built-in ones first, then plugins in registration order."""
    return _ALGORITHMS.names()


def algorithm_spec(name: str) -> AlgorithmSpec:
    """The spec of algorithm ``name`` (entry-point plugins loaded if needed); ValueError listing the known names
    and the closest ones otherwise."""
    return _ALGORITHMS.lookup(name)
