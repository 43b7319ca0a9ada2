"""A profile's rounds over a deployment's network: each algorithm's round wall time at each N, and its time to a
target error (rounds a real run needed x the projected round time).

For every algorithm and N of a profile (``profile.json``: its rows carry the model size D, the clusters K, the
subgroups G and the participants S), each participating client's traffic comes from the algorithm's registered
:class:`~fedjax_clust.algorithms.registry.Traffic` and its links from a network (:mod:`fedjax_clust.cost.network`:
a registered distribution or a trace file); the server's part is the profile's measured seconds per round, or,
with ``server_device``, the round projected onto that device (:mod:`fedjax_clust.bench.device_projection`, both
ends of its range, and then also at the projection's larger N). Federated-Clustering moves N / G times
FedAvg's bytes per client but may need far fewer rounds on clustered data: given run folders
(``fedjax-clust run`` / ``compare`` output), the first evaluated round at which ``metric`` reaches ``target``
times the projected round time is each algorithm's time to target. The rounds are the run's, at the run's N;
using them at every N of the profile is an assumption stated in the output.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Iterable, Optional

from fedjax_clust.algorithms import algorithm_spec
from fedjax_clust.cost.network import describe, network_links, round_times

__all__ = ["network_projection", "TimeToTarget", "rounds_to_target", "write_network", "NETWORK_FILES", "COLUMNS"]

NETWORK_FILES = ("network.csv", "network.json", "network.png")
COLUMNS = [
    "algorithm",
    "clients",
    "participants",
    "client_down_bytes",
    "client_up_bytes",
    "server_seconds_low",
    "server_seconds_high",
    "round_seconds_low",
    "round_seconds_high",
    "round_seconds_p90",
    "network_seconds",
    "dropped_share",
    "server_link_share",
    "rounds_to_target",
    "time_to_target_low",
    "time_to_target_high",
    "measured_here",
]


def _runs_in(path: str) -> list:
    """The run folders at ``path``: itself when it holds a run, else its subfolders that do (a compare)."""
    if os.path.isfile(os.path.join(path, "run.json")):
        return [path]
    if not os.path.isdir(path):
        raise ValueError(f"no run folder at {path!r}")
    found = sorted(os.path.join(path, d) for d in os.listdir(path) if os.path.isfile(os.path.join(path, d, "run.json")))
    if not found:
        raise ValueError(f"{path!r} holds no run (a folder with run.json and metrics.jsonl, or a compare's folder)")
    return found


def rounds_to_target(path: str, metric: str, target: float, higher_is_better: Optional[bool] = None) -> dict:
    """{algorithm: (the first evaluated round at which ``metric`` reached ``target``, or None; the run's N)} for
    the runs at ``path`` (:func:`_runs_in`). ``higher_is_better`` defaults to the metric's name's reading
    (:func:`fedjax_clust.run.statistics.higher_is_better`). ValueError when a run never logged ``metric``."""
    from fedjax_clust.io.jsonio import read_json, read_json_lines
    from fedjax_clust.run.statistics import higher_is_better as reads_higher

    higher = reads_higher(metric) if higher_is_better is None else higher_is_better
    out = {}
    for run in _runs_in(path):
        config = read_json(os.path.join(run, "run.json"))["config"]
        rows = [r for r in read_json_lines(os.path.join(run, "metrics.jsonl")) if r.get(metric) is not None]
        if not rows:
            raise ValueError(f"the run in {run} logged no {metric!r}")
        reached = [r["round"] for r in rows if (r[metric] >= target if higher else r[metric] <= target)]
        out[config["algorithm"]] = (min(reached) if reached else None, config.get("num_clients"))
    return out


def _participants(rows, n: int) -> int:
    """S at N: all N where the profile ran every client, the same count where it did at every N, else its
    fraction."""
    if all(r["participants"] == r["clients"] for r in rows):
        return n
    if len({r["participants"] for r in rows}) == 1:
        return min(rows[0]["participants"], n)
    fraction = rows[-1]["participants"] / rows[-1]["clients"]
    return max(1, min(n, int(round(fraction * n))))


def _server_seconds(payload, rows, server_device):
    """{N: (low, high, measured here)} of the server's part: measured, or projected onto ``server_device``."""
    if server_device is None:
        return {r["clients"]: (r["seconds_per_round"], r["seconds_per_round"], True) for r in rows}
    from fedjax_clust.bench.device_projection import device_projections

    name = rows[0]["algorithm"]
    projected = device_projections(payload, [server_device], algorithms=[name], log=lambda *_: None)["rows"]
    return {
        r["clients"]: (r["seconds_low"], r["seconds_high"], False) for r in projected if r["fits_memory"] is not False
    }


@dataclasses.dataclass(frozen=True)
class TimeToTarget:
    """The runs whose rounds to a target a projection turns into each algorithm's time to target (module
    docstring): the first evaluated round at which ``metric`` reaches ``target`` in ``runs``.

    Attributes:
      runs: a run folder (``fedjax-clust run``) or a folder of runs (``fedjax-clust compare``).
      target: the value of ``metric`` to reach (the runs and the target go together).
      metric: a metric of the runs' ``metrics.jsonl`` (default the synthetic task's mean squared distance to the
        optimum); lower is better unless its name says otherwise (:func:`rounds_to_target`).
    """

    runs: str
    target: float
    metric: str = "mean_sq_dist_to_optimum"

    def __post_init__(self):  # the command line builds one from --runs / --target, either of which may be missing
        if self.runs is None or self.target is None:
            raise ValueError("give the runs and the target together (time to target), or neither")


def network_projection(
    payload: dict,
    network: str,
    *,
    server_bandwidth: Optional[float] = None,
    deadline: Optional[float] = None,
    examples: int = 32,
    server_device: Optional[str] = None,
    algorithms: Optional[Iterable[str]] = None,
    to_target: Optional[TimeToTarget] = None,
    rounds: int = 50,
    seed: int = 0,
    log=print,
) -> dict:
    """Rows of :data:`COLUMNS` for every algorithm of the profile ``payload`` at each N, and what they assumed
    (module docstring); with ``to_target`` (a :class:`TimeToTarget`), each algorithm's time to target too."""
    from fedjax_clust.bench.device_projection import rows_by_algorithm

    by_algorithm, names = rows_by_algorithm(payload, algorithms)
    if any("params" not in r for r in payload["rows"]) or "example_gradient_flops" not in payload:
        raise ValueError(
            "this profile predates the network model (no params / clusters / subgroups per row, no "
            "example_gradient_flops): run fedjax-clust profile again"
        )
    if to_target is not None and not isinstance(to_target, TimeToTarget):
        raise ValueError(f"to_target must be a TimeToTarget (runs, target, metric), got {to_target!r}")
    runs = None if to_target is None else to_target.runs
    target = None if to_target is None else to_target.target
    metric = None if to_target is None else to_target.metric
    reached = {} if to_target is None else rounds_to_target(to_target.runs, to_target.metric, to_target.target)
    servers = {
        name: _server_seconds(payload, sorted(by_algorithm[name], key=lambda r: r["clients"]), server_device)
        for name in names
    }
    empty = [name for name, s in servers.items() if not s]
    if empty:
        raise ValueError(f"{', '.join(empty)}: no N of the profile fits {server_device}'s memory (projected)")
    largest = max(n for s in servers.values() for n in s)
    links = network_links(network, largest, seed)
    out = []
    for name in names:
        mine = sorted(by_algorithm[name], key=lambda r: r["clients"])
        spec, last = algorithm_spec(name), mine[-1]
        run_rounds = reached.get(name, (None, None))[0]
        for n, (low, high, here) in sorted(servers[name].items()):
            s = _participants(mine, n)
            traffic = spec.traffic(s, last["params"], last["clusters"], last["subgroups"])
            common = dict(
                num_clients=n,
                participants=s,
                examples=examples,
                server_bandwidth=server_bandwidth,
                deadline=deadline,
                rounds=rounds,
                seed=seed,
                example_flops=payload["example_gradient_flops"],
            )
            times = round_times(traffic, links, server_seconds=0.0, **common)  # the server's part adds after it
            out.append(
                {
                    "algorithm": name,
                    "clients": n,
                    "participants": s,
                    "client_down_bytes": traffic.down_bytes,
                    "client_up_bytes": traffic.up_bytes,
                    "server_seconds_low": low,
                    "server_seconds_high": high,
                    "round_seconds_low": times.mean + low,
                    "round_seconds_high": times.mean + high,
                    "round_seconds_p90": times.p90 + high,
                    "network_seconds": times.network,
                    "dropped_share": times.dropped,
                    "server_link_share": times.server_link,
                    "rounds_to_target": run_rounds,
                    "time_to_target_low": None if run_rounds is None else run_rounds * (times.mean + low),
                    "time_to_target_high": None if run_rounds is None else run_rounds * (times.mean + high),
                    "measured_here": here,
                }
            )
        log(_line(out[-1], name, reached))
    missing = [a for a in names if runs is not None and a not in reached]
    assumptions = {
        "network": network,
        "network_description": describe(network),
        "server_bandwidth": server_bandwidth,
        "deadline": deadline,
        "examples_per_pass": examples,
        "example_gradient_flops": payload["example_gradient_flops"],
        "server": server_device or "measured here",
        "rounds_sampled": rounds,
        "seed": seed,
        "runs": runs,
        "metric": metric if runs else None,
        "target": target,
        "runs_clients": {a: v[1] for a, v in reached.items()},
        "algorithms_without_a_run": missing,
    }
    return {"rows": out, "assumptions": assumptions}


def _line(row, name, reached) -> str:
    text = (
        f"{name} at N = {row['clients']:,} over the network: {row['round_seconds_low']:.3g} - "
        f"{row['round_seconds_high']:.3g} s a round ({row['network_seconds']:.3g} s of it the network"
    )
    if row["dropped_share"]:
        text += f", {100 * row['dropped_share']:.0f}% dropped at the deadline"
    text += ")"
    if name in reached:
        r = reached[name][0]
        text += (
            "; target never reached in its run"
            if r is None
            else f"; target at round {r}: {row['time_to_target_low']:.3g} - {row['time_to_target_high']:.3g} s"
        )
    return text


def write_network(result: dict, out_dir: str) -> None:
    """``network.csv``, ``network.json`` (rows and assumptions, with provenance) and ``network.png`` (round wall
    time against N; time to target against N when runs were given) in ``out_dir``."""
    from fedjax_clust.io.csvio import write_csv
    from fedjax_clust.io.jsonio import write_json
    from fedjax_clust.io.provenance import provenance

    os.makedirs(out_dir, exist_ok=True)
    write_csv(os.path.join(out_dir, "network.csv"), result["rows"], COLUMNS)
    write_json(os.path.join(out_dir, "network.json"), {**result, "provenance": provenance()}, indent=1)
    _plot(result, os.path.join(out_dir, "network.png"))


def _plot(result, path):
    from matplotlib.ticker import NullFormatter

    from fedjax_clust.bench.profile import algorithm_styles
    from fedjax_clust.io.figures import figure_for_file

    rows = result["rows"]
    names = list(dict.fromkeys(r["algorithm"] for r in rows))
    targets = any(r["rounds_to_target"] is not None for r in rows)
    styles = algorithm_styles(names)
    fig, axes = figure_for_file(1, 2 if targets else 1, figsize=(13 if targets else 6.5, 4.6), squeeze=False)
    panels = [("round_seconds", "round wall time over the network (projection), seconds")]
    if targets:
        panels.append(("time_to_target", "time to target: run's rounds x round wall time (projection), seconds"))
    for ax, (column, title) in zip(axes[0], panels):
        for name in names:
            mine = [r for r in rows if r["algorithm"] == name and r[f"{column}_high"] is not None]
            if not mine:
                continue
            colour, marker = styles[name]
            n = [r["clients"] for r in mine]
            ax.fill_between(
                n,
                [r[f"{column}_low"] for r in mine],
                [r[f"{column}_high"] for r in mine],
                color=colour,
                alpha=0.2,
                linewidth=0,
            )
            ax.loglog(
                n, [r[f"{column}_high"] for r in mine], "-", color=colour, marker=marker, markersize=4, label=name
            )
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("clients N")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(alpha=0.3, which="both")
    a = result["assumptions"]
    fig.suptitle(f"network: {a['network_description']}; server: {a['server']}", fontsize=9)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
