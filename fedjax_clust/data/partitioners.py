"""Partitioners: pooled examples -> N clients, as a list of index arrays (one per client).

Each is ``fn(labels, num_clients, rng, param) -> [indices of client 0, ..., of client N-1]``, a pure function
of the labels and the generator; every client gets at least ``MIN_EXAMPLES`` examples, and its indices are in
random order. A partition is named by a spec string ``NAME`` or ``NAME:PARAM`` (recorded in a task's config):

* ``iid`` — a random permutation cut into N near-equal parts.
* ``dirichlet:ALPHA`` — label skew (Yurochkin et al. 2019; Hsu et al. 2019's "Dirichlet(alpha) non-IID"):
  for each class c, proportions p_c ~ Dir(alpha 1_N) over the clients, and class c's shuffled examples are cut
  at the cumulative proportions. Small alpha (0.1) gives clients a few classes each, large alpha (100) is
  close to iid. Our choice where papers differ: the draw is repeated (at most ``DIRICHLET_TRIES`` times, the
  same generator) until every client has ``MIN_EXAMPLES`` examples, as the FedMA and NIID-Bench scripts do;
  a split that never gets there is refused, naming alpha and the client count. With given client sizes
  (``size_sigma`` > 0 of an image task: log-normal sizes) the skew is drawn per client instead, as Acar et al.
  (2021, FedDyn)'s "unbalanced" Dirichlet: client i's label mix q_i ~ Dir(alpha 1_C), and its n_i examples are
  drawn class by class in proportion to q_i from the classes that still have examples
  (:func:`dirichlet_with_sizes`).
* ``shards:S`` — McMahan et al. (2017) pathological non-IID: examples sorted by label (ties in random order),
  cut into N S equal shards, each client gets S random shards (S = 2: most clients see two classes).
* ``lognormal:SIGMA`` — quantity skew: sizes proportional to exp(SIGMA z), z ~ N(0, 1)
  (:func:`fedjax_clust.data.partition.split_sizes`; SIGMA = 1.5 puts the largest of 1,000 clients near 30x
  the median), labels iid.
* ``power-law:A`` — quantity skew: sizes proportional to 1 + Pareto(A) draws (density A / w^(A+1) on
  w >= 1 after the shift; A = 1.5: a heavy tail, as LEAF's and FedProx's synthetic data), labels iid.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from fedjax_clust.core.registry import Registry
from fedjax_clust.data.partition import MIN_EXAMPLES, split_sizes

__all__ = [
    "allocate_like",
    "LABEL_SKEW",
    "PARTITIONERS",
    "Partitioner",
    "Partition",
    "parse_partition",
    "partition_indices",
    "DIRICHLET_TRIES",
    "dirichlet_with_sizes",
]

DIRICHLET_TRIES = 100


def _cut(order: np.ndarray, sizes: np.ndarray, rng: np.random.Generator) -> list:
    parts = np.split(order, np.cumsum(sizes)[:-1])
    return [rng.permutation(p) for p in parts]


def iid(labels, num_clients, rng, _param=None):
    n = len(labels)
    return _cut(rng.permutation(n), split_sizes(n, num_clients, 0.0, rng), rng)


def lognormal(labels, num_clients, rng, sigma):
    n = len(labels)
    return _cut(rng.permutation(n), split_sizes(n, num_clients, float(sigma), rng), rng)


def power_law(labels, num_clients, rng, a):
    n = len(labels)
    if n < num_clients * MIN_EXAMPLES:
        raise ValueError(f"{n} examples cannot give {num_clients} clients {MIN_EXAMPLES} examples each")
    weights = 1.0 + rng.pareto(float(a), num_clients)
    spare = n - num_clients * MIN_EXAMPLES
    share = weights / weights.sum() * spare
    sizes = np.floor(share).astype(np.int64)
    sizes[np.argsort(-(share - sizes), kind="stable")[: spare - int(sizes.sum())]] += 1
    return _cut(rng.permutation(n), sizes + MIN_EXAMPLES, rng)


def shards(labels, num_clients, rng, per_client):
    per_client = int(per_client)
    n = len(labels)
    count = num_clients * per_client
    if n < count * max(1, MIN_EXAMPLES // per_client + (MIN_EXAMPLES % per_client > 0)):
        raise ValueError(
            f"{n} examples cannot make {count} shards of at least one example each for {num_clients} clients"
        )
    order = np.lexsort((rng.random(n), np.asarray(labels)))  # by label, ties in random order
    pieces = np.array_split(order, count)
    owner = rng.permutation(count).reshape(num_clients, per_client)
    return [rng.permutation(np.concatenate([pieces[s] for s in row])) for row in owner]


def dirichlet(labels, num_clients, rng, alpha):
    labels = np.asarray(labels)
    classes = np.unique(labels)
    by_class = [np.flatnonzero(labels == c) for c in classes]
    for _ in range(DIRICHLET_TRIES):
        parts = [[] for _ in range(num_clients)]
        for members in by_class:
            members = rng.permutation(members)
            p = rng.dirichlet(np.full(num_clients, float(alpha)))
            cuts = np.round(np.cumsum(p)[:-1] * len(members)).astype(np.int64)
            for i, piece in enumerate(np.split(members, cuts)):
                parts[i].append(piece)
        out = [np.concatenate(p) for p in parts]
        if min(len(o) for o in out) >= MIN_EXAMPLES:
            return [rng.permutation(o) for o in out]
    raise ValueError(
        f"dirichlet:{alpha} left a client with fewer than {MIN_EXAMPLES} examples in {DIRICHLET_TRIES} draws of "
        f"{num_clients} clients over {len(labels)} examples; use a larger alpha, fewer clients or more data"
    )


def dirichlet_with_sizes(labels, sizes, rng, alpha):
    """Client index arrays of exactly ``sizes`` examples each (summing to ``len(labels)``), client i's label mix
    q_i ~ Dir(alpha 1_C): in a random client order, client i draws its n_i examples' classes from a multinomial
    with probabilities q_i restricted to the classes that still have examples (renormalised; when q_i puts no
    mass on any of them, in proportion to what is left), takes at most what each class has left and draws the
    rest again the same way. Every example goes to one client; the indices of each client are in random
    order."""
    labels = np.asarray(labels)
    sizes = np.asarray(sizes, np.int64)
    if int(sizes.sum()) != len(labels) or np.any(sizes < 1):
        raise ValueError(f"client sizes must be >= 1 and sum to the {len(labels)} examples, got sum {int(sizes.sum())}")
    classes = np.unique(labels)
    pools = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
    left = np.array([len(p) for p in pools], np.int64)
    used = np.zeros(len(classes), np.int64)
    parts: list = [None] * len(sizes)
    for i in rng.permutation(len(sizes)):
        q = rng.dirichlet(np.full(len(classes), float(alpha)))
        take = np.zeros(len(classes), np.int64)
        need = int(sizes[i])
        while need:
            room = left - take
            weights = q * (room > 0)
            if not weights.sum() > 0:
                weights = room.astype(float)
            draw = np.minimum(rng.multinomial(need, weights / weights.sum()), room)
            take += draw
            need -= int(draw.sum())
        pieces = [pools[c][used[c] : used[c] + take[c]] for c in range(len(classes))]
        used += take
        left -= take
        parts[i] = rng.permutation(np.concatenate(pieces))
    return parts


class Partition(NamedTuple):
    """A parsed partition spec: the registered ``name`` and its parameter (None for ``iid``)."""

    name: str
    param: object

    def __str__(self):
        return self.name if self.param is None else f"{self.name}:{self.param:g}"


class Partitioner(NamedTuple):
    """A registered partition: its ``split`` function, what its parameter means and the parameter's check (the
    parameter is required except for iid). A 3-tuple as the registry's values were before it was a record."""

    split: Callable
    meaning: str
    check: Callable[[float], bool]


PARTITIONERS: Registry[Partitioner] = Registry("partition", value_type=Partitioner, name_of=None)
for _name, _partitioner in (
    ("iid", Partitioner(iid, "", lambda v: True)),
    ("dirichlet", Partitioner(dirichlet, "alpha > 0", lambda v: v > 0)),
    ("shards", Partitioner(shards, "shards per client, an integer >= 1", lambda v: v >= 1 and float(v).is_integer())),
    ("lognormal", Partitioner(lognormal, "sigma >= 0", lambda v: v >= 0)),
    ("power-law", Partitioner(power_law, "Pareto shape a > 0", lambda v: v > 0)),
):
    PARTITIONERS.register(_partitioner, name=_name)
del _name, _partitioner
# the partitions that give clients different label mixes (their clients' test examples should follow them)
LABEL_SKEW = frozenset({"dirichlet", "shards"})


def parse_partition(spec) -> Partition:
    """``"NAME"`` or ``"NAME:PARAM"`` (see the module docstring) checked against :data:`PARTITIONERS`."""
    if isinstance(spec, Partition):
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"partition must be a string like 'dirichlet:0.5', got {spec!r}")
    name, _, raw = spec.partition(":")
    if name not in PARTITIONERS:
        raise ValueError(f"unknown partition {name!r}; expected one of {sorted(PARTITIONERS)} (e.g. 'dirichlet:0.5')")
    meaning, ok = PARTITIONERS[name].meaning, PARTITIONERS[name].check
    if name == "iid":
        if raw:
            raise ValueError(f"partition 'iid' takes no parameter, got {spec!r}")
        return Partition("iid", None)
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(
            f"partition {name!r} needs a parameter ({meaning}): write '{name}:VALUE', got {spec!r}"
        ) from None
    if not np.isfinite(value) or not ok(value):
        raise ValueError(f"partition {name!r}: the parameter must be {meaning}, got {raw}")
    return Partition(name, int(value) if name == "shards" else value)


def partition_indices(spec, labels, num_clients: int, rng: np.random.Generator, sizes=None) -> list:
    """Client index arrays of the examples with ``labels`` under the partition ``spec``; ``sizes`` (one per
    client, summing to the examples) fixes the clients' sizes, which only ``iid`` and ``dirichlet`` (per-client
    label mixes, :func:`dirichlet_with_sizes`) can follow."""
    part = parse_partition(spec)
    if sizes is not None:
        if len(sizes) != int(num_clients):
            raise ValueError(f"sizes has {len(sizes)} entries for {num_clients} clients")
        if part.name == "dirichlet":
            return dirichlet_with_sizes(labels, sizes, rng, part.param)
        if part.name == "iid":
            return _cut(rng.permutation(len(labels)), np.asarray(sizes, np.int64), rng)
        raise ValueError(
            f"partition {str(part)!r} sets the clients' sizes itself; only 'iid' and 'dirichlet' take "
            "sizes (size_sigma)"
        )
    if int(num_clients) < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    if len(labels) < num_clients * MIN_EXAMPLES:
        raise ValueError(
            f"{len(labels)} examples cannot give {num_clients} clients {MIN_EXAMPLES} examples each; use fewer "
            "clients or more data"
        )
    fn = PARTITIONERS[part.name].split
    return fn(np.asarray(labels), int(num_clients), rng, part.param)


def allocate_like(labels, client_labels) -> list:
    """Index arrays dividing the examples with ``labels`` (e.g. a cluster's official test examples) among
    clients whose training labels are ``client_labels`` (one array per client), class by class in proportion
    to each client's training examples of that class (largest remainders); a client left with none gets one
    example of its most frequent training class from the client holding most of that class's (or, when no
    example of that class exists, any client with more than one example). Used to give label-skewed clients
    test examples that follow their own label mix."""
    labels = np.asarray(labels)
    n_clients = len(client_labels)
    if len(labels) < n_clients:
        raise ValueError(f"{len(labels)} examples cannot give {n_clients} clients one each")
    classes = int(max([labels.max(initial=0)] + [int(np.max(c, initial=0)) for c in client_labels])) + 1
    counts = np.stack([np.bincount(np.asarray(c), minlength=classes) for c in client_labels])  # [N, classes]
    pieces: list = [[] for _ in range(n_clients)]
    for c in range(classes):
        members = np.flatnonzero(labels == c)
        weights = counts[:, c].astype(float)
        if not members.size:
            continue
        if weights.sum() == 0:
            weights = np.ones(n_clients)
        quota = weights / weights.sum() * len(members)
        take = np.floor(quota).astype(np.int64)
        take[np.argsort(-(quota - take), kind="stable")[: len(members) - int(take.sum())]] += 1
        for i, piece in enumerate(np.split(members, np.cumsum(take)[:-1])):
            pieces[i].append(piece)
    shares: list = [np.concatenate(p) if p else np.zeros(0, np.int64) for p in pieces]
    for i in range(n_clients):
        if len(shares[i]):
            continue
        favourite = int(np.argmax(counts[i]))
        donors = [j for j in range(n_clients) if len(shares[j]) > 1]
        with_class = [j for j in donors if np.any(labels[shares[j]] == favourite)]
        donor = max(with_class or donors, key=lambda j: len(shares[j]))
        pick = np.flatnonzero(labels[shares[donor]] == favourite)
        position = int(pick[0]) if pick.size else 0
        shares[i] = shares[donor][position : position + 1]
        shares[donor] = np.delete(shares[donor], position)
    return shares
