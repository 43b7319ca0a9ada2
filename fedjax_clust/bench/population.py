"""A cohort round against the whole population, server-held models against per-client rows
(``bench --suite population``).

FedAvg (``global``, one local step per round) on N clients of pooled 28 x 28 examples with the image MLP, S
participants per round (``participation=S``), in two state layouts:

* ``server``: the algorithm's own state -- one server model (a
  :class:`~fedjax_clust.core.model_table.ModelTable`), whatever N;
* ``rows``: the previous design's state, one copy of the model and its momentum per client ([N, ...] rows;
  reached through per-client starts that are all equal, ``ClientParams``), which a round must carry whole.

For each (N, S, layout): the state's bytes (every leaf of the state) and the median seconds of ``repeats``
jitted rounds after a warm-up round (compilation excluded), and, per (N, S), the rows layout's time over the
server layout's. A round of S participants computes S clients' gradients: with the server layout its time
should follow S, not N.
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import numpy as np

from fedjax_clust.core.pytrees import broadcast_to_clients, tree_bytes
from fedjax_clust.core.state import ClientParams
from fedjax_clust.cost.roofline import median_seconds
from fedjax_clust.data.federated import FederatedImages
from fedjax_clust.tasks.images import federated_image_task

__all__ = ["run_population_suite", "population_report_markdown", "state_bytes"]


def state_bytes(state) -> int:
    """Bytes of every array leaf of a state."""
    return tree_bytes(state)


def _population_task(num_clients: int, examples: int, hidden: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((num_clients, examples, 28, 28, 1)).astype(np.float32)
    y = rng.integers(0, 10, (num_clients, examples)).astype(np.int32)
    train = {"x": x, "y": y}
    test = {"x": x[:, :2], "y": y[:, :2]}
    data = FederatedImages(train, test, np.zeros(num_clients, int), 10)
    return federated_image_task(data, "mlp", name="population", hidden=hidden)


def run_population_suite(
    *,
    populations=(1000, 10000),
    cohorts=(10, 100),
    examples: int = 16,
    hidden: int = 32,
    batch_size: int = 8,
    repeats: int = 5,
    layouts=("server", "rows"),
    progress: Optional[Callable[[str], None]] = None,
) -> dict:
    """The rows of the module docstring; ``cohorts`` S per round (each at most N), plus S = N (everyone) for
    the smallest N; ``layouts`` the state layouts measured (the accelerator report: the server's only)."""
    from fedjax_clust.algorithms import make_algorithm

    say = progress or (lambda label: None)
    rows = []
    num_params = None
    for n in populations:
        task = _population_task(n, examples, hidden)
        params = task.init_params(jax.random.PRNGKey(0))
        num_params = int(sum(np.size(x) for x in jax.tree.leaves(params)))
        sizes = [s for s in cohorts if s < n] + ([n] if n == min(populations) else [])
        for s in sizes:
            algorithm = make_algorithm(
                "global", task, learning_rate=0.05, momentum=0.9, batch_size=batch_size, participation=s
            )
            assert algorithm.round is not None  # derived when the algorithm is built
            step = jax.jit(algorithm.round)
            for layout in layouts:
                say(f"global, N = {n:,}, S = {s:,}, {layout}")
                start = params if layout == "server" else ClientParams(broadcast_to_clients(params, n))
                state = algorithm.start(start, n, jax.random.PRNGKey(1))
                seconds = median_seconds(step, state, task.data, jax.random.PRNGKey(2), repeats=repeats)
                rows.append(
                    {"clients": n, "cohort": s, "layout": layout, "state_bytes": state_bytes(state), "seconds": seconds}
                )
            if tuple(layouts) == ("server", "rows"):
                server, client_rows = rows[-2], rows[-1]
                client_rows["over_server"] = client_rows["seconds"] / server["seconds"]
    return {
        "algorithm": "global",
        "model": "mlp",
        "hidden": hidden,
        "num_params": num_params,
        "examples_per_client": examples,
        "batch_size": batch_size,
        "repeats": repeats,
        "device": jax.devices()[0].device_kind,
        "rows": rows,
    }


def population_report_markdown(report: dict) -> str:
    lines = [
        "# A cohort round against the whole population",
        "",
        f"FedAvg ({report['algorithm']}, one local step, B = {report['batch_size']}) with the image MLP "
        f"({report['num_params']:,} parameters) on N clients of {report['examples_per_client']} examples, S "
        f"per round; median of {report['repeats']} jitted rounds after a warm-up on {report['device']}. "
        "`server`: the algorithm's state (one server model); `rows`: one model and momentum row per client "
        "(the previous design).",
        "",
        "| N | S | layout | state MB | seconds per round | rows / server |",
        "|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        ratio = f"{r['over_server']:.1f}" if "over_server" in r else ""
        lines.append(
            f"| {r['clients']:,} | {r['cohort']:,} | {r['layout']} | {r['state_bytes'] / 1e6:.2f} | "
            f"{r['seconds']:.5f} | {ratio} |"
        )
    return "\n".join(lines) + "\n"
