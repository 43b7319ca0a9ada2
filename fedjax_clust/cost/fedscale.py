"""A one-off converter of FedScale's device traces into this package's formats.

FedScale (Lai et al., ICML 2022) ships its client traces as Python pickles:

* the device capacities: ``{client_id: {"computation": ms per sample, "communication": kbit/s}}``;
* the behaviour trace: ``{client_id: {"active": [s, ...], "inactive": [s, ...], "finish_time": s, ...}}``, the
  starts and ends of each client's available periods, repeating every ``finish_time`` seconds.

:func:`convert` writes

* ``links.csv``, the network trace of :func:`fedjax_clust.cost.network.read_links`: one row per client (sorted
  by client id), ``up_bytes_per_s`` = ``down_bytes_per_s`` = communication x 1000 / 8 (one figure for both
  directions), ``latency_s`` as given (FedScale records none), and ``seconds_per_example`` = 3 x computation / 1000
  (a training step taken as three inference passes: our reading of the trace's per-sample figure);
* with a behaviour trace, ``availability.npy``: the bool [rounds, N] trace of ``--availability`` (client j
  available in round t when time t x ``round_seconds``, modulo its ``finish_time``, lies in one of its active
  periods); client j of the package's task is the trace's j-th client (ids sorted; more task clients than trace
  clients reuse them in order).

**Unpickling runs code.** A pickle can execute anything when it is loaded; give this converter only files you
trust (FedScale's own downloads). It says so every time it runs and never runs on a file it is not handed.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
from typing import Optional

import numpy as np

from fedjax_clust.cost.network import Links, write_links

__all__ = ["convert", "links_from_capacity", "availability_from_behaviour", "main", "WARNING"]

WARNING = (
    "warning: unpickling FedScale's trace files runs whatever code they contain; convert only files you "
    "trust (FedScale's own downloads)"
)


def _unpickle(path: str, what: str) -> dict:
    if not os.path.isfile(path):
        raise ValueError(f"no {what} file at {path!r}")
    with open(path, "rb") as f:
        try:
            data = pickle.load(f)  # noqa: S301 - the module docstring and WARNING: trusted files only
        except Exception as error:  # noqa: BLE001 - any unpickling failure is a bad file
            raise ValueError(f"{what} file {path!r} is not a readable pickle: {error}") from None
    if not isinstance(data, dict) or not data:
        raise ValueError(f"{what} file {path!r} must hold a non-empty dict keyed by client id")
    return data


def links_from_capacity(capacity: dict, latency: float = 0.0) -> Links:
    """The :class:`~fedjax_clust.cost.network.Links` of a device-capacity dict (module docstring), clients in
    id order."""
    rows = []
    for client in sorted(capacity):
        entry = capacity[client]
        try:
            rows.append((float(entry["communication"]), float(entry["computation"])))
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"client {client!r}: expected {{'computation': ms, 'communication': kbps}}, got {entry!r}"
            ) from None
    kbps, ms = np.array(rows).T
    bandwidth = kbps * 1000 / 8
    return Links(bandwidth, bandwidth, np.full(len(rows), float(latency)), np.zeros(len(rows)), 3 * ms / 1000)


def availability_from_behaviour(behaviour: dict, num_clients: int, rounds: int, round_seconds: float) -> np.ndarray:
    """The bool [rounds, num_clients] availability of a behaviour-trace dict (module docstring)."""
    if round_seconds <= 0 or rounds < 1 or num_clients < 1:
        raise ValueError("round_seconds must be positive, rounds and num_clients at least 1")
    ids = sorted(behaviour)
    times = np.arange(rounds) * float(round_seconds)
    out = np.zeros((rounds, num_clients), bool)
    for j in range(num_clients):
        trace = behaviour[ids[j % len(ids)]]
        try:
            active = np.asarray(trace["active"], float)
            inactive = np.asarray(trace["inactive"], float)
            period = float(trace["finish_time"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"client {ids[j % len(ids)]!r}: expected 'active', 'inactive' and 'finish_time'") from None
        if period <= 0 or active.shape != inactive.shape:
            raise ValueError(f"client {ids[j % len(ids)]!r}: a positive finish_time and one end per active start")
        t = times % period
        out[:, j] = np.any((active[None, :] <= t[:, None]) & (t[:, None] < inactive[None, :]), axis=1)
    return out


def convert(
    capacity_path: str,
    out_dir: str,
    *,
    behaviour_path: Optional[str] = None,
    num_clients: Optional[int] = None,
    rounds: int = 1000,
    round_seconds: float = 60.0,
    latency: float = 0.0,
    log=print,
) -> list:
    """Convert FedScale's pickles (module docstring) into ``out_dir``; returns the paths written."""
    log(WARNING)
    links = links_from_capacity(_unpickle(capacity_path, "device-capacity"), latency)
    os.makedirs(out_dir, exist_ok=True)
    written = [os.path.join(out_dir, "links.csv")]
    write_links(links, written[0])
    if behaviour_path is not None:
        behaviour = _unpickle(behaviour_path, "behaviour-trace")
        clients = len(behaviour) if num_clients is None else num_clients
        trace = availability_from_behaviour(behaviour, clients, rounds, round_seconds)
        written.append(os.path.join(out_dir, "availability.npy"))
        np.save(written[-1], trace)
        log(f"availability: {trace.shape[0]} rounds x {trace.shape[1]} clients, {trace.mean():.1%} available")
    log(
        f"links: {len(links)} clients, median {np.median(links.up) * 8 / 1e6:.3g} Mbit/s, "
        f"{np.median(links.seconds_per_example) * 1e3:.3g} ms per example"
    )
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedjax_clust.cost.fedscale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--capacity", required=True, help="FedScale's device-capacity pickle (trusted files only)")
    parser.add_argument("--behaviour", default=None, help="FedScale's client behaviour pickle (trusted files only)")
    parser.add_argument("--out", required=True, help="output folder (links.csv, availability.npy)")
    parser.add_argument("--clients", type=int, default=None, help="N of the availability trace (default: the trace's)")
    parser.add_argument("--rounds", type=int, default=1000, help="rounds of the availability trace (1000)")
    parser.add_argument("--round-seconds", type=float, default=60.0, help="seconds a round lasts (60)")
    parser.add_argument("--latency", type=float, default=0.0, help="one-way latency seconds of every client (0)")
    args = parser.parse_args(argv)
    try:
        convert(
            args.capacity,
            args.out,
            behaviour_path=args.behaviour,
            num_clients=args.clients,
            rounds=args.rounds,
            round_seconds=args.round_seconds,
            latency=args.latency,
            log=lambda m: print(m, file=sys.stderr),
        )
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
