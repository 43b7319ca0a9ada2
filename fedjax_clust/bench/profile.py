"""``fedjax-clust profile``: how each algorithm's round scales with the number of clients N, on any task and model.

For every algorithm and every N of a sweep, on the task built with N clients (its ``clients_per_cluster`` N / K,
or its ``num_clients`` N; every other task option as given), it measures after warm-up:

* ``seconds_per_round``: median of the timed rounds (jit, vmapped, all devices);
* ``peak_bytes``: the compiled round's memory (XLA's memory analysis: arguments + outputs + temporaries, less the
  outputs written into the donated state, as a run steps);
* ``flops``, ``bytes``, ``kernels``: the round's compute, memory traffic and kernels counted from its program,
  every loop body times its trip count (:mod:`fedjax_clust.cost.counting`; a staged algorithm counts the stage
  of the round measured, :mod:`fedjax_clust.cost.rounds`); ``open_loops`` the data-dependent loops counted once
  (an order-statistic search, label propagation), ``branches`` the data-dependent branches counted at their
  costliest (CFL's split test) and ``branch_share`` the share of the count they may overstate: a row where it
  exceeds :data:`BRANCH_SHARE` is left out of the fit and not judged;
* ``xla_flops``: XLA's own cost analysis, only for a round without loops (it counts a loop body once: a
  10-step ``fori_loop`` reports one step, ``lax.map`` over 8 chunks one chunk, so its figure fell as N grew);
* ``projected_seconds`` and ``ratio`` (measured / projected): the counted costs turned into time by a roofline
  with a launch floor, calibrated on this machine (:mod:`fedjax_clust.cost.roofline`: the matmul FLOP/s and the
  copy bandwidth measured in the same run, two efficiencies and the launch costs fitted over every row);
  ``above_floor`` where the roofline part exceeds the launch floor -- where the ratio says something;
* ``params`` D, ``clusters`` K and ``subgroups`` G: what the network cost model reads
  (:mod:`fedjax_clust.bench.network_projection` recomputes each client's traffic from them);
* ``comm_bytes`` / ``messages``: the explicit network cost model, both ways, the total over the clients of
  each algorithm's per-client :class:`~fedjax_clust.algorithms.registry.Traffic` (float32 parameters of size D):

  ============================  ==============================  =====================
  algorithm                     bytes per round                 messages per round
  ============================  ==============================  =====================
  federated-clustering (G=1)    4 D (N^2 + N^2)                 2 N^2
                                (each client: its group's N / G models down, N / G gradients up)
  myopic-, momentum-clustering  4 D (N + N)                     2 N
  ifca-1, ifca-2, hypcluster    4 D (N K + N)                   N K + N
  cfl, global, ground-truth,    4 D (N + N)                     2 N
  ditto
  local                         0                               0
  ============================  ==============================  =====================

With partial participation (``participation``) only the S participants send, so N becomes S in the table
(Federated-Clustering: 4 D (S^2 + S^2)); every row records its ``participants``.

Subgroups (``subgroup_tradeoff``): Federated-Clustering with the clients split into G random groups per
round does N^2 / G cross-gradient work; for each G of a sweep it trains on the synthetic task and records
seconds per round against the final error (mean squared distance to the clients' true optima), written to
``subgroups.csv`` and drawn in ``subgroups.png``.

The scaling exponent of time in N is fitted (least squares on log-log) over the rows above the floor, and
only where at least three are ("flat" otherwise: a round at its launch floor has no exponent); of the
communicated bytes over the rows that send any. It writes ``profile.csv``, ``profile.json`` (the rows, the
calibration, the exponents, provenance) and ``profile.png``: measured and projected time on separate panels, one
colour and marker per algorithm. On the synthetic task it also times the Federated-Clustering round as a
per-client Python loop over jitted per-pair gradients (the structure of the paper authors' code) where that
finishes in reasonable time, printing the speedup.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any, Callable, Iterable, Optional, Union, cast

import jax
import numpy as np

from fedjax_clust.algorithms import ALGORITHMS, algorithm_spec, make_algorithm
from fedjax_clust.algorithms.settings import grouped_settings
from fedjax_clust.bench.rounds import bench_options, pair_loop_round
from fedjax_clust.core.batching import sample_minibatch
from fedjax_clust.io.csvio import write_csv
from fedjax_clust.io.jsonio import dumps, write_json
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.tasks import synthetic_regression

__all__ = [
    "comm_cost",
    "profile",
    "fit_exponent",
    "time_exponent",
    "task_with_clients",
    "check_profile",
    "example_gradient_flops",
    "subgroup_tradeoff",
    "COLUMNS",
    "SUBGROUP_COLUMNS",
]

COLUMNS = [
    "algorithm",
    "clients",
    "participants",
    "seconds_per_round",
    "projected_seconds",
    "ratio",
    "above_floor",
    "peak_bytes",
    "flops",
    "bytes",
    "kernels",
    "open_loops",
    "branches",
    "branch_share",
    "xla_flops",
    "comm_bytes",
    "messages",
    "params",
    "clusters",
    "subgroups",
]
SUBGROUP_COLUMNS = [
    "subgroups",
    "clients",
    "group_size",
    "rounds",
    "seconds_per_round",
    "mean_sq_dist_to_optimum",
    "comm_bytes",
]


def comm_cost(
    algorithm: str,
    num_clients: int,
    num_params: int,
    num_clusters: int = 1,
    subgroups: int = 1,
    participants: Optional[int] = None,
):
    """(bytes, messages) one round of ``algorithm`` sends under the cost model of the module docstring (its
    spec's ``comm_cost``); with partial participation only the ``participants`` S take part, so N becomes S
    (FC: S^2 pairs)."""
    n = num_clients if participants is None else participants
    return algorithm_spec(algorithm).comm_cost(n, num_params, num_clusters, subgroups)


def fit_exponent(clients: Iterable[int], values: Iterable[float], minimum: int = 2) -> float:
    """Slope of log(value) against log(N) over the upper half of the sweep when that half holds ``minimum`` (at
    least 2) usable points, else over all of them (NaN with fewer)."""
    minimum = max(minimum, 2)
    pairs = [(c, v) for c, v in zip(clients, values) if v and v > 0]
    pairs = pairs[len(pairs) // 2 :] if len(pairs) - len(pairs) // 2 >= max(minimum, 3) else pairs
    if len(pairs) < minimum:
        return float("nan")
    x = np.log([c for c, _ in pairs])
    y = np.log([v for _, v in pairs])
    return float(np.polyfit(x, y, 1)[0])


def time_exponent(rows: list) -> Optional[float]:
    """The time exponent of one algorithm's rows: fitted over the rows above the launch floor when at least three
    are (:func:`fit_exponent` over all of them), else None ("flat": the round costs its launch whatever N)."""
    above = [r for r in rows if r["above_floor"]]
    if len(above) < 3:
        return None
    x = np.log([r["clients"] for r in above])
    y = np.log([r["seconds_per_round"] for r in above])
    return float(np.polyfit(x, y, 1)[0])


BRANCH_SHARE = 0.1  # a row whose unknown branches may overstate its count by more is neither fitted nor judged


def _measure(algo, task, repeats):
    """(median seconds of ``repeats`` rounds after two warm-up rounds, peak bytes, XLA's FLOPs or None, the state
    the counted round starts from)."""
    from fedjax_clust.run.fused import donatable

    state = donatable(algo.init(task.init_params(None), task.num_clients), task.data)
    step = jax.jit(algo.round, donate_argnums=0)  # as a run steps: the round consumes its state
    compiled = step.lower(state, task.data, jax.random.PRNGKey(0)).compile()
    memory = compiled.memory_analysis()
    peak = (
        None
        if memory is None
        else int(
            memory.argument_size_in_bytes
            + memory.output_size_in_bytes
            + memory.temp_size_in_bytes
            - memory.alias_size_in_bytes
        )
    )
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    flops = None if not cost or "flops" not in cost else float(cost["flops"])
    key = jax.random.PRNGKey(1)
    for t in range(2):
        state, _ = step(state, task.data, jax.random.fold_in(key, t))
    jax.block_until_ready(state)
    times = []
    for t in range(repeats):
        start = time.perf_counter()
        state, metrics = step(state, task.data, jax.random.fold_in(key, 100 + t))
        jax.block_until_ready((state, metrics))
        times.append(time.perf_counter() - start)
    return statistics.median(times), peak, flops, state


def _plan(algorithms, task, task_options, algorithm_options) -> tuple[list, Callable, Callable]:
    """(the algorithms profiled, ``N -> task``, ``name -> keywords``) with :func:`profile`'s defaults."""
    algorithms = [a for a in (algorithms or ALGORITHMS) if a != "knn-per"]  # kNN-Per needs a feature model
    if callable(task):
        if task_options is not None:
            raise ValueError("task_options apply to a task given by name; a function N -> task builds its own")
        build = task
    else:
        build = lambda n: task_with_clients(task, n, task_options)  # noqa: E731
    options_of = algorithm_options or (lambda name: dict(learning_rate=0.01, momentum=0.9, **bench_options(name)))
    return algorithms, build, options_of


def check_profile(clients, algorithms, make_task_at: Callable, algorithm_options: Callable) -> None:
    """Build every algorithm on the smallest and the largest N's task (ValueError naming the option that does
    not fit, e.g. ``subgroups`` or ``participation`` larger than N), before anything is measured or written."""
    for n in sorted({min(clients), max(clients)}):
        run_task = make_task_at(n)
        for name in algorithms:
            try:
                make_algorithm(name, run_task, **grouped_settings(algorithm_options(name)))
            except ValueError as error:
                raise ValueError(f"{name} at N = {run_task.num_clients:,}: {error}") from None


def task_with_clients(task: str, num_clients: int, options: Optional[dict] = None):
    """Task ``task`` (a registry name) with about ``num_clients`` clients: its builder's ``num_clients`` N, or its
    ``clients_per_cluster`` N // K for its K clusters (``num_clusters``, given or the builder's default; N must
    be at least K); ``options`` its other keywords. ValueError for a task whose population comes from its files
    (no client-count keyword), naming the task."""
    import inspect

    from fedjax_clust.tasks import TASKS, make_task

    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {sorted(TASKS)}")
    options = dict(options or {})
    builder = cast(Callable, TASKS[task])
    params = inspect.signature(builder).parameters
    if "num_clients" in params:
        options["num_clients"] = int(num_clients)
    elif "clients_per_cluster" in params:
        k = int(options.get("num_clusters", params["num_clusters"].default if "num_clusters" in params else 1))
        if num_clients < k:
            raise ValueError(f"the {task} task with {k} clusters needs at least {k} clients, got {num_clients}")
        options["clients_per_cluster"] = int(num_clients) // k
    else:
        raise ValueError(
            f"the {task} task takes its clients from its data files: profile sweeps N through a task's "
            "clients_per_cluster or num_clients (synthetic, classification, mixture-regression, the image tasks, "
            "mnist-population)"
        )
    return make_task(task, **options)


def example_gradient_flops(task) -> float:
    """FLOPs of the gradient of ``task``'s loss on one example at its initial model, counted from the program
    (:func:`fedjax_clust.cost.count`): what a client computes per example and pass (the network model's client
    compute)."""
    from fedjax_clust.core.batching import client_loss
    from fedjax_clust.cost import count

    params = task.init_params(jax.random.PRNGKey(0))
    one = jax.tree.map(lambda x: x[0, :1], task.data)  # one example of the first client (a batch of one)
    return float(count(jax.grad(client_loss(task.example_loss)), params, one).flops)


def _progress_line(k: int, total: int, row: dict) -> str:
    loops = f", {row['open_loops']} data-dependent loop(s) counted once" if row["open_loops"] else ""
    return (
        f"[{k}/{total}] {row['algorithm']}, N = {row['clients']:,}: {row['seconds_per_round'] * 1e3:.3f} ms a round, "
        f"{row['flops']:.3g} FLOP and {row['bytes']:.3g} bytes counted{loops}"
    )


def profile(
    clients=(64, 128, 256, 512, 1024, 2048, 4096),
    algorithms: Optional[Iterable[str]] = None,
    *,
    task: Union[str, Callable[[int], Any]] = "synthetic",
    task_options: Optional[dict] = None,
    algorithm_options: Optional[Callable[[str], dict]] = None,
    repeats: int = 3,
    loop_max_clients: int = 256,
    out_dir: Optional[str] = None,
    log=print,
    participation=None,
    check: bool = True,
    projections: bool = True,
):
    """Run the sweep (module docstring); returns (rows, exponents, extras) and writes profile.csv, profile.json
    and profile.png to ``out_dir``.

    ``task`` (a registered name) and ``task_options`` build each N's task (:func:`task_with_clients`), or
    ``task`` is a function N -> task that does (the command line marks attackers there);
    ``algorithm_options(name)`` gives each algorithm's keywords (default: its benchmark options, learning rate
    0.01, momentum 0.9); ``participation``: the clients per
    round (a fraction or a count) of every algorithm that takes it; ``check`` False when the caller already ran
    :func:`check_profile` on the same arguments; ``projections``: also project every algorithm onto the
    registered devices (:mod:`fedjax_clust.bench.device_projection`: devices.csv, devices.json, devices.png in
    ``out_dir``). One progress line per configuration."""
    from fedjax_clust.cost.roofline import floor_seconds, project, roofline_seconds
    from fedjax_clust.cost.rounds import round_cost

    algorithms, build, options_of = _plan(algorithms, task, task_options, algorithm_options)
    if participation is not None:
        given = options_of
        options_of = lambda name: {**given(name), "participation": participation}  # noqa: E731
    if check:
        check_profile(clients, algorithms, build, options_of)
    rows, total = [], len(clients) * len(algorithms)
    task_name = example_flops = None
    for n in clients:
        run_task = build(n)
        if task_name is None:
            task_name, example_flops = run_task.name, example_gradient_flops(run_task)
        d = int(sum(np.size(x) for x in jax.tree.leaves(run_task.init_params(jax.random.PRNGKey(0)))))
        for name in algorithms:
            options = options_of(name)
            algo = make_algorithm(name, run_task, **grouped_settings(options))
            seconds, peak, xla_flops, state = _measure(algo, run_task, repeats)
            cost, loops = round_cost(algo, state, run_task.data, 2 + repeats // 2)  # the middle timed round's
            s = algo.execution.clients_per_round or run_task.num_clients
            groups = algo.execution.groups  # FC in subgroups sends N^2 / G
            k = int(algo.execution.num_clusters or run_task.num_clusters or 1)  # an IFCA's own K if given
            comm, messages = comm_cost(name, run_task.num_clients, d, k, subgroups=groups, participants=s)
            row = dict(
                algorithm=name,
                clients=run_task.num_clients,
                participants=s,
                seconds_per_round=seconds,
                projected_seconds=None,
                ratio=None,
                above_floor=None,
                peak_bytes=peak,
                flops=cost.flops,
                bytes=cost.bytes,
                kernels=cost.kernels,
                open_loops=len(cost.open_loops),
                branches=cost.branches,
                branch_share=cost.branch_share(),
                xla_flops=None if loops else xla_flops,
                comm_bytes=comm,
                messages=messages,
                params=d,
                clusters=k,
                subgroups=groups,
            )
            row["_cost"] = cost
            rows.append(row)
            log(_progress_line(len(rows), total, row))
    calibration = _calibrate(rows, log)
    for row in rows:
        cost = row.pop("_cost")
        if calibration is not None:
            row["projected_seconds"] = project(cost, calibration)
            row["ratio"] = row["seconds_per_round"] / row["projected_seconds"]
            row["above_floor"] = roofline_seconds(cost, calibration) >= floor_seconds(cost, calibration)
    exponents = {}
    for name in algorithms:
        mine = [r for r in rows if r["algorithm"] == name]
        exponent = time_exponent(mine) if calibration is not None else None
        exponents[name] = {
            "time": exponent,
            "bytes": fit_exponent([r["clients"] for r in mine], [r["comm_bytes"] for r in mine], minimum=3),
        }
        time_text = f"N^{exponent:.2f}" if exponent is not None else _no_exponent(mine, calibration is not None)
        log(f"{name:22s} time ~ {time_text}   {_bytes_text(exponents[name]['bytes'])}")
    judged = [r for r in rows if r["above_floor"] and r["branch_share"] <= BRANCH_SHARE]
    within = [r for r in judged if 0.5 <= r["ratio"] <= 2.0]
    from fedjax_clust.parallel.memory import device_total_memory

    extras = {
        "task": task_name,
        "example_gradient_flops": example_flops,
        "device_memory_bytes": device_total_memory(),
        "calibration": None if calibration is None else calibration.report(),
        "judged_rows": len(judged),
        "rows_within_2x": len(within),
    }
    if calibration is not None:
        machine = calibration.machine
        log(
            f"calibration: {calibration.compute_efficiency:.3f} of {machine.flops / 1e9:.0f} GFLOP/s, "
            f"{calibration.memory_efficiency:.3f} of {machine.bandwidth / 1e9:.0f} GB/s, launch "
            f"{machine.launch * 1e6:.0f} us + {calibration.kernel * 1e9:.0f} ns a kernel; "
            f"{len(within)} of {len(judged)} rows above the floor within [0.5, 2] of the projection"
        )
    fc_rows = [r for r in rows if r["algorithm"] == "federated-clustering"]
    if fc_rows and extras["task"] == "synthetic":
        extras["loop_speedups"] = _loop_speedups(fc_rows, loop_max_clients, log)
    if out_dir is not None:
        files = _write(rows, exponents, extras, out_dir)
        if calibration is not None and projections and len(set(clients)) < 2:
            log("no device projections: they extrapolate over N and need at least two sizes")
        elif calibration is not None and projections:
            from fedjax_clust.bench.device_projection import device_projections, write_projections

            payload = {"rows": rows, **extras}
            files += write_projections(device_projections(payload, log=log), out_dir)
        extras["files"] = files  # what was written, for the caller to name (not in profile.json)
    return rows, exponents, extras


def _calibrate(rows: list, log):
    """The roofline fitted to the rows (:func:`fedjax_clust.cost.roofline.fit`; rows whose data-dependent
    branches, counted at their costliest, hold more than :data:`BRANCH_SHARE` of the count left out), None with
    fewer than three rows to fit."""
    from fedjax_clust.cost.roofline import fit, measure_machine

    fitted = [r for r in rows if r["branch_share"] <= BRANCH_SHARE]
    if len(fitted) < 3:
        log(f"no projection: {len(fitted)} row(s) to calibrate the cost model on, three needed")
        return None
    return fit([r["_cost"] for r in fitted], [r["seconds_per_round"] for r in fitted], measure_machine())


def _bytes_text(exponent) -> str:
    if exponent is None or not np.isfinite(exponent):
        return "sends nothing" if exponent is None else "bytes: fewer than three rows send any"
    return f"bytes ~ N^{exponent:.2f}"


def _loop_speedups(fc_rows, loop_max_clients: int, log) -> list:
    """The Federated-Clustering round as a per-client Python loop over jitted per-pair gradients against the
    vmapped round, at every N up to ``loop_max_clients`` (synthetic task)."""
    speedups = []
    for r in fc_rows:
        if r["clients"] > loop_max_clients:
            continue
        task = synthetic_regression(num_clusters=4, clients_per_cluster=r["clients"] // 4)
        params = jax.random.normal(jax.random.PRNGKey(1), (task.num_clients, task.data["x"].shape[-1]))
        batch = sample_minibatch(task.data, None, jax.random.PRNGKey(2))
        pair_loop_round(
            task, params[:2], jax.tree.map(lambda x: x[:2], batch), learning_rate=0.01, steps=10, quantile=0.2
        )
        start = time.perf_counter()
        pair_loop_round(task, params, batch, learning_rate=0.01, steps=10, quantile=0.2)
        loop = time.perf_counter() - start
        speedups.append(
            {
                "clients": r["clients"],
                "loop_seconds": loop,
                "vmapped_seconds": r["seconds_per_round"],
                "speedup": loop / r["seconds_per_round"],
            }
        )
        log(
            f"FC N={r['clients']}: per-client loop {loop:.2f} s vs vmapped {r['seconds_per_round'] * 1e3:.1f} ms "
            f"-> {loop / r['seconds_per_round']:.0f}x"
        )
    return speedups


def check_subgroup_sweep(num_clients, groups, names=("num_clients", "subgroups")):
    """ValueError unless N is a positive multiple of 4 and every G an integer in [1, N], naming the two arguments
    by ``names`` (the command line passes its flags); returns list(groups)."""
    groups = list(groups)
    if (
        isinstance(num_clients, bool)
        or not isinstance(num_clients, (int, np.integer))
        or num_clients < 4
        or num_clients % 4
    ):
        raise ValueError(f"{names[0]} must be a positive multiple of 4 (four clusters), got {num_clients!r}")
    if not groups or any(
        isinstance(g, bool) or not isinstance(g, (int, np.integer)) or not 1 <= g <= num_clients for g in groups
    ):
        raise ValueError(f"{names[1]} must be integers in [1, {num_clients}], got {groups!r}")
    return groups


def subgroup_tradeoff(
    num_clients: int = 512,
    groups: Iterable[int] = (1, 2, 4, 8, 16),
    *,
    rounds: int = 200,
    quantile: float = 0.2,
    learning_rate: float = 0.01,
    seed: int = 0,
    out_dir: Optional[str] = None,
    log=print,
):
    """Error against time of Federated-Clustering with G random subgroups, on the §4.1 synthetic task.

    For every G: ``rounds`` rounds (momentum 0.9, full local batch) on K = 4 clusters of ``num_clients / 4``
    clients; a row holds the mean seconds per round after the first, the final mean squared distance to the
    clients' optima and the cost-model bytes (N^2 / G cross-gradient exchange). Writes ``subgroups.csv`` and
    ``subgroups.png`` to ``out_dir`` when given. Returns the rows.
    """
    from fedjax_clust.run.simulate import simulate

    groups = check_subgroup_sweep(num_clients, groups)
    task = synthetic_regression(num_clusters=4, clients_per_cluster=num_clients // 4, seed=seed)
    d = int(task.data["x"].shape[-1])
    rows = []
    for g in groups:
        algo = make_algorithm(
            "federated-clustering", task, learning_rate=learning_rate, momentum=0.9, quantile=quantile, subgroups=int(g)
        )
        result = simulate(
            algo,
            task,
            rounds=rounds,
            seed=seed,
            evaluation=Evaluation(eval_every=rounds),
            output=Output(progress=False),
        )
        row = dict(
            subgroups=int(g),
            clients=num_clients,
            group_size=-(-num_clients // int(g)),
            rounds=rounds,
            seconds_per_round=result.summary["seconds_per_round"],
            mean_sq_dist_to_optimum=result.summary["mean_sq_dist_to_optimum"],
            comm_bytes=comm_cost("federated-clustering", num_clients, d, subgroups=int(g))[0],
        )
        rows.append(row)
        log(dumps(row))
    if out_dir is not None:
        _write_subgroups(rows, out_dir)
    return rows


def _write_subgroups(rows, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    write_csv(os.path.join(out_dir, "subgroups.csv"), rows, SUBGROUP_COLUMNS)
    from fedjax_clust.io.figures import figure_for_file

    fig, ax = figure_for_file(figsize=(5.5, 4))
    x = [r["seconds_per_round"] for r in rows]
    y = [r["mean_sq_dist_to_optimum"] for r in rows]
    ax.loglog(x, y, "o-")
    for r, xi, yi in zip(rows, x, y):
        ax.annotate(f"G={r['subgroups']}", (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("seconds per round")
    ax.set_ylabel(f"mean ||x_i - x*_i||^2 after {rows[0]['rounds']} rounds")
    ax.set_title(f"Federated-Clustering with G subgroups, N = {rows[0]['clients']}", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "subgroups.png"), dpi=110)


def algorithm_styles(names) -> dict:
    """One (colour, marker) per algorithm: 20 colours of the tab20 palette paired with markers, so that no two
    algorithms of a plot share both."""
    import matplotlib

    colours = matplotlib.colormaps["tab20"](np.arange(20))  # RGBA rows
    markers = "osD^vP*Xph<>"
    return {name: (colours[(2 * i) % 20 + (i // 10) % 2], markers[i % len(markers)]) for i, name in enumerate(names)}


def _no_exponent(rows: list, calibrated: bool) -> str:
    """Why an algorithm has no fitted time exponent: every row at the launch floor ("flat"), fewer than three rows
    above it (how many), or no calibration to place the floor."""
    if not calibrated:
        return "no exponent (no calibration)"
    above = sum(bool(r["above_floor"]) for r in rows)
    if above == 0:
        return "flat (at the launch floor)"
    return f"no exponent ({above} of {len(rows)} rows above the launch floor; three needed)"


def _label(name: str, exponent, rows: list) -> str:
    """The legend entry of ``name``'s curve, from the rows it draws: the fitted time exponent; "flat" only where the
    calibration placed every row at the launch floor; otherwise (too few rows above the floor, or no calibration)
    the slope of the drawn points (:func:`fit_exponent`), said to be end to end."""
    if exponent is not None and np.isfinite(exponent):
        return f"{name} (N^{exponent:.2f})"
    if rows and all(r.get("above_floor") is False for r in rows):
        return f"{name} (flat)"
    slope = fit_exponent([r["clients"] for r in rows], [r["seconds_per_round"] for r in rows])
    if not np.isfinite(slope):
        return f"{name} (one size)"
    above = [r.get("above_floor") for r in rows]
    why = "no floor fitted" if None in above else f"{sum(map(bool, above))} of {len(rows)} rows above the floor"
    return f"{name} (N^{slope:.2f} end to end, {why})"


def _write(rows, exponents, extras, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    write_csv(os.path.join(out_dir, "profile.csv"), rows, COLUMNS)
    from fedjax_clust.io.provenance import provenance

    write_json(
        os.path.join(out_dir, "profile.json"),
        {"rows": rows, "exponents": exponents, **extras, "provenance": provenance()},
        indent=1,
    )
    from matplotlib.ticker import NullFormatter

    from fedjax_clust.io.figures import figure_for_file

    styles = algorithm_styles(list(exponents))
    fig, axes = figure_for_file(1, 3, figsize=(15, 4.6))
    panels = (
        (axes[0], "seconds_per_round", "measured seconds per round", "time"),
        (axes[1], "projected_seconds", "projected seconds per round (calibrated here)", "time"),
        (axes[2], "comm_bytes", "bytes communicated per round (cost model)", "bytes"),
    )
    for ax, column, title, kind in panels:
        for name in exponents:
            mine = [r for r in rows if r["algorithm"] == name]
            if (kind == "bytes" and not any(r["comm_bytes"] for r in mine)) or any(r[column] is None for r in mine):
                continue  # sends nothing, or no projection (too few rows to calibrate)
            colour, marker = styles[name]
            values = [max(r[column], 1) if kind == "bytes" else r[column] for r in mine]
            ax.loglog([r["clients"] for r in mine], values, "-", color=colour, marker=marker, markersize=5, label=name)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("clients N")
        ax.xaxis.set_minor_formatter(NullFormatter())  # decade labels only: the minor ones overlap
        ax.grid(alpha=0.3, which="both")
    handles, _ = axes[0].get_legend_handles_labels()
    labels = [_label(name, exponents[name]["time"], [r for r in rows if r["algorithm"] == name]) for name in exponents]
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, title="time exponent")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "profile.png"), dpi=110, bbox_inches="tight")
    return [os.path.join(out_dir, name) for name in ("profile.csv", "profile.json", "profile.png")]
