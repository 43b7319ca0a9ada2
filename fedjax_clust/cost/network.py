"""A round's wall time over real networks: per-client links, a server link, and a synchronous round or a deadline.

Client i of a round receives ``down_bytes`` and sends ``up_bytes`` (its algorithm's
:class:`~fedjax_clust.algorithms.registry.Traffic`) over its own links and computes ``passes`` minibatch
gradient evaluations of ``examples`` examples in between, at ``example_flops`` FLOPs an example (the model's
gradient, counted by ``profile``) on a device doing ``flops_i`` FLOP/s:

    t_i = 2 latency_i + down_bytes / downlink_i + passes x examples x c_i + up_bytes / uplink_i,
    c_i = seconds_per_example_i where a trace gives it, else example_flops / flops_i

(one round trip a round: every message of a direction goes out together; none for an algorithm that sends
nothing, Local). The server's link is taken as a separate bound, as if it were busy the whole round: optimistic
where clients' downloads, compute and uploads leave it idle in between. The server sends the participants'
downloads and receives their uploads over its own link (``server_bandwidth`` bytes/s each way, full duplex; None:
never the bottleneck), then runs the round's server-side program (``server_seconds``: measured, or projected
onto a device by :mod:`fedjax_clust.cost.devices`). A **synchronous** round waits for its slowest participant;
with a **deadline** the server stops waiting at ``deadline`` seconds and the participants still running are
dropped (their share is reported; what dropping them does to training is not modelled here -- run it with an
availability trace). So

    T = max(max_i t_i  [or min(max_i t_i, deadline)],  sum_i down_bytes / server_bandwidth,
            sum_i up_bytes / server_bandwidth) + server_seconds.

Links come from a distribution (:data:`NETWORKS`: per-client lognormal around stated medians) or a trace file
(:func:`read_links`: one row per client, CSV or JSON, see :data:`TRACE_COLUMNS`); a round's S participants are
drawn uniformly from the population (client i uses the trace's row i mod its length), and the round time is
summarised over many drawn rounds (mean, median, 90th percentile).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
from typing import Optional

import numpy as np

from fedjax_clust.algorithms.registry import Traffic
from fedjax_clust.core.registry import Registry

__all__ = [
    "Links",
    "NetworkSpec",
    "NETWORKS",
    "register_network",
    "network_links",
    "read_links",
    "write_links",
    "client_seconds",
    "round_times",
    "RoundTimes",
    "TRACE_COLUMNS",
    "describe",
]

TRACE_COLUMNS = ("up_bytes_per_s", "down_bytes_per_s", "latency_s", "flops_per_s", "seconds_per_example")


@dataclasses.dataclass(frozen=True)
class Links:
    """Per-client network and compute, arrays of one length: ``up`` / ``down`` bytes/s, one-way ``latency``
    seconds, ``flops`` FLOP/s the client's device sustains on a model's gradient, ``seconds_per_example`` its
    measured training seconds per example (takes precedence where > 0; both 0: compute not modelled)."""

    up: np.ndarray
    down: np.ndarray
    latency: np.ndarray
    flops: np.ndarray
    seconds_per_example: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))  # zeros: not measured

    def __post_init__(self):
        if np.size(self.seconds_per_example) == 0:
            object.__setattr__(self, "seconds_per_example", np.zeros_like(np.asarray(self.up, float)))
        arrays = {f.name: np.asarray(getattr(self, f.name), float) for f in dataclasses.fields(self)}
        sizes = {a.shape for a in arrays.values()}
        if len(sizes) != 1 or len(next(iter(sizes))) != 1 or next(iter(sizes))[0] == 0:
            raise ValueError(f"links must be non-empty 1-D arrays of one length, got shapes {sorted(sizes)}")
        for name, a in arrays.items():
            if not np.all(np.isfinite(a)):
                raise ValueError(f"links: {name} must be finite")
        if np.any(arrays["up"] <= 0) or np.any(arrays["down"] <= 0):
            raise ValueError("links: uplink and downlink bandwidths must be positive")
        if np.any(arrays["latency"] < 0) or np.any(arrays["flops"] < 0) or np.any(arrays["seconds_per_example"] < 0):
            raise ValueError("links: latency, FLOP/s and seconds per example must be >= 0")
        for name, a in arrays.items():
            object.__setattr__(self, name, a)

    def __len__(self) -> int:
        return int(self.up.shape[0])


@dataclasses.dataclass(frozen=True)
class NetworkSpec:
    """Per-client links drawn lognormal around medians (bytes/s, seconds) with log-standard-deviation ``sigma``
    (0: every client alike); ``description`` says what it stands for."""

    name: str
    up: float
    down: float
    latency: float
    sigma: float
    flops: float
    description: str

    def draw(self, num_clients: int, seed: int = 0) -> Links:
        rng = np.random.default_rng(seed)

        def spread(median):
            return median * np.exp(self.sigma * rng.standard_normal(num_clients))

        return Links(spread(self.up), spread(self.down), spread(self.latency), spread(self.flops))


NETWORKS: Registry[NetworkSpec] = Registry("network", value_type=NetworkSpec)


def register_network(spec: NetworkSpec) -> NetworkSpec:
    """Add ``spec`` to :data:`NETWORKS` (ValueError if its name is taken, even by ``spec``)."""
    if spec.name in NETWORKS:
        raise ValueError(f"a network named {spec.name!r} is already registered")
    return NETWORKS.register(spec)


for _spec in (  # stated assumptions, not measurements: medians of the kind of link named
    NetworkSpec(
        "datacenter",
        1.25e9,
        1.25e9,
        1e-4,
        0.0,
        1e13,
        "silos in one datacenter: 10 Gbit/s each way, 0.1 ms, 10 TFLOP/s (an accelerator) per client",
    ),
    NetworkSpec(
        "broadband",
        2.5e6,
        12.5e6,
        0.02,
        0.5,
        5e10,
        "home broadband: median 20 Mbit/s up, 100 Mbit/s down, 20 ms, 50 GFLOP/s (a laptop CPU) per client",
    ),
    NetworkSpec(
        "mobile",
        0.625e6,
        2.5e6,
        0.06,
        1.0,
        1e10,
        "phones on cellular links: median 5 Mbit/s up, 20 Mbit/s down, 60 ms, 10 GFLOP/s per client",
    ),
):
    register_network(_spec)


def read_links(path: str) -> Links:
    """A trace of per-client links: a CSV with a header naming :data:`TRACE_COLUMNS` (``flops_per_s`` and
    ``seconds_per_example`` optional, default 0; other columns ignored) or a JSON file
    ``{"clients": [{column: value, ...}, ...]}``. ValueError naming the file and what is wrong."""
    if not os.path.isfile(path):
        raise ValueError(f"no network trace at {path!r}")
    try:
        if path.endswith(".json"):
            with open(path) as f:
                rows = json.load(f)["clients"]
        else:
            with open(path, newline="") as f:
                rows = list(csv.DictReader(f))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(
            f"network trace {path!r} is not a readable trace (CSV or JSON with 'clients'): {error}"
        ) from None
    if not rows:
        raise ValueError(f"network trace {path!r} has no clients")
    missing = [c for c in TRACE_COLUMNS[:3] if c not in rows[0]]
    if missing:
        raise ValueError(f"network trace {path!r} lacks the column(s) {missing}; expected {list(TRACE_COLUMNS)}")
    if not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"network trace {path!r}: every client must be an object of columns")
    try:
        columns = {c: np.array([float(r.get(c) or 0.0) for r in rows]) for c in TRACE_COLUMNS}
        return Links(
            columns["up_bytes_per_s"],
            columns["down_bytes_per_s"],
            columns["latency_s"],
            columns["flops_per_s"],
            columns["seconds_per_example"],
        )
    except (TypeError, ValueError) as error:
        raise ValueError(f"network trace {path!r}: {error}") from None


def write_links(links: Links, path: str) -> None:
    """Write ``links`` as the CSV trace :func:`read_links` reads."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(("client",) + TRACE_COLUMNS)
        for i in range(len(links)):
            writer.writerow(
                (i, links.up[i], links.down[i], links.latency[i], links.flops[i], links.seconds_per_example[i])
            )


def network_links(network: str, num_clients: int, seed: int = 0) -> Links:
    """A registered network's links for ``num_clients`` clients, or the trace file at path ``network``."""
    if network in NETWORKS:
        return NETWORKS[network].draw(num_clients, seed)
    if os.path.exists(network):
        return read_links(network)
    raise ValueError(f"unknown network {network!r}: a registered one ({', '.join(NETWORKS)}) or a trace file")


def client_seconds(
    traffic: Traffic, links: Links, clients: np.ndarray, examples: int, example_flops: float
) -> np.ndarray:
    """t_i of the module docstring for the clients ``clients`` (indices, taken modulo the trace's length); a
    client whose FLOP/s is 0 computes in no time."""
    rows = np.asarray(clients) % len(links)
    flops, measured = links.flops[rows], links.seconds_per_example[rows]
    per_example = np.divide(example_flops, flops, out=np.zeros_like(flops), where=flops > 0)
    compute = traffic.passes * examples * np.where(measured > 0, measured, per_example)
    trips = 2.0 if traffic.down_messages + traffic.up_messages > 0 else 0.0  # Local sends nothing, waits for nothing
    transfers = traffic.down_bytes / links.down[rows] + traffic.up_bytes / links.up[rows]
    return trips * links.latency[rows] + transfers + compute


@dataclasses.dataclass(frozen=True)
class RoundTimes:
    """Round wall time over the drawn rounds: ``mean``, ``median``, ``p90`` seconds; ``network`` the mean time
    before the server's program (clients or the server's link), ``dropped`` the mean share of participants past
    the deadline, ``server_link`` the share of rounds the server's link bounded."""

    mean: float
    median: float
    p90: float
    network: float
    dropped: float
    server_link: float


def round_times(
    traffic: Traffic,
    links: Links,
    *,
    num_clients: int,
    participants: int,
    server_seconds: float,
    examples: int = 32,
    example_flops: float = 0.0,
    server_bandwidth: Optional[float] = None,
    deadline: Optional[float] = None,
    rounds: int = 50,
    seed: int = 0,
) -> RoundTimes:
    """The wall time of ``rounds`` rounds, each with ``participants`` of the ``num_clients`` drawn uniformly
    (all of them every round when equal), under the model of the module docstring."""
    if not 1 <= participants <= num_clients:
        raise ValueError(f"participants must be in [1, {num_clients}], got {participants}")
    if deadline is not None and not deadline > 0:
        raise ValueError(f"deadline must be positive seconds, got {deadline!r}")
    if server_bandwidth is not None and not server_bandwidth > 0:
        raise ValueError(f"server_bandwidth must be positive bytes/s, got {server_bandwidth!r}")
    rng = np.random.default_rng(seed)
    full = participants == num_clients
    walls: list = []
    networks, dropped, bound = [], [], []
    for _ in range(1 if full else rounds):
        chosen = np.arange(num_clients) if full else rng.choice(num_clients, participants, replace=False)
        t = client_seconds(traffic, links, chosen, examples, example_flops)
        slowest = float(t.max())
        waited = slowest if deadline is None else min(slowest, deadline)
        link = 0.0
        if server_bandwidth is not None:
            link = participants * max(traffic.down_bytes, traffic.up_bytes) / server_bandwidth
        network = max(waited, link)
        networks.append(network)
        walls.append(network + server_seconds)
        dropped.append(0.0 if deadline is None else float(np.mean(t > deadline)))
        bound.append(float(link > waited))
    totals = np.asarray(walls)
    return RoundTimes(
        float(totals.mean()),
        float(np.median(totals)),
        float(np.percentile(totals, 90)),
        float(np.mean(networks)),
        float(np.mean(dropped)),
        float(np.mean(bound)),
    )


def describe(network: str) -> str:
    """One line on ``network``: a registered one's description, else the trace file's path."""
    return NETWORKS[network].description if network in NETWORKS else f"trace {network}"
