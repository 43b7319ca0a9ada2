"""Rounds whose clients' rows live in host memory: each cohort is gathered onto the device, run and written
back, the next cohort's rows and data copied while this one computes.

A personalised algorithm (Local, Ditto, Federated- / Momentum-Clustering, FedSoft, ...) owns a model row per
client; with partial participation a round touches only its S participants' rows, but the resident path keeps
all N on the device. When they do not fit (:func:`plan_rows`, a device-memory budget), the run keeps them in
host memory (:mod:`fedjax_clust.core.host_rows`: NumPy, or memory-mapped files) and :func:`streamed_step`
drives each round as

1. draw the participants of the round (``CohortProgram.draw``, on the device: the same draw as the resident
   round's);
2. copy their rows (parameters, optimiser state, per-client state) and their data from the host onto the
   device, the server's state (``extra``, ``round``, server-held models) joined as it is;
3. run the algorithm's round on the block (``CohortProgram.run``, jit-compiled once: S rows, whatever N);
4. copy the block's rows back into the host arrays.

Pipelining (``prefetch=True``): round t+1's participants are drawn before round t runs, and while the device
computes round t the host writes back round t-1's rows and copies round t+1's rows and data onto the device; a
client in both cohorts takes its row from round t's output on the device (a scatter queued after round t), so
the block round t+1 sees is what the resident round would gather. The device then holds a few cohorts' rows
(at most five blocks of S rows in flight) and two of data, whatever N; :func:`plan_rows` counts them. A
stretch of rounds writes into the state's own host buffers, so Ctrl-C waits for the stretch to end.

Exactness: the resident participation round fences its gathered block with ``lax.optimization_barrier``
(:func:`~fedjax_clust.algorithms.participation.with_participation`), so XLA compiles the block program alone in
both paths; the copies are exact, and the states and round metrics of the two paths are the same bit for bit
(the contract test runs every registered algorithm both ways). Evaluation of a host state runs over clients in
chunks (:func:`evaluate_in_chunks`); with a single chunk (the population's evaluation fits the budget) it is the
resident evaluation itself, else its means combine the chunks' means weighted by their client counts, equal
to float rounding.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.algorithms.numbered import Numbered
from fedjax_clust.core.algorithm import FederatedAlgorithm, at_matmul_precision
from fedjax_clust.core.host_rows import (
    RowLayout,
    device_source_bytes,
    gather_block,
    host_bytes,
    on_host,
    row_leaves,
    server_part,
    take_to_device,
    with_row_leaves,
)
from fedjax_clust.core.pytrees import leading_dim, tree_bytes
from fedjax_clust.core.ragged_batch import RaggedBatch
from fedjax_clust.core.state import ClientState
from fedjax_clust.io.interrupts import interrupts_deferred
from fedjax_clust.parallel.memory import device_total_memory

__all__ = [
    "RowsPlan",
    "plan_rows",
    "parse_bytes",
    "streamed_step",
    "evaluate_in_chunks",
    "evaluation_sample",
    "EvaluationChunk",
    "CLIENT_ROWS",
    "RESIDENT_SHARE",
]

CLIENT_ROWS = ("auto", "device", "host")
RESIDENT_SHARE = 0.5  # the population stays resident when its state and data take at most this share of the budget
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30}
_UNITS["tib"] = 2**40


def parse_bytes(text) -> int:
    """A size in bytes from an int or a string such as ``"1GiB"``, ``"512MB"``, ``"2e9"`` (ValueError
    otherwise)."""
    if isinstance(text, (int, np.integer)) and not isinstance(text, bool):
        value = int(text)
    else:
        raw = str(text).strip().lower().replace(" ", "")
        number = raw.rstrip("kmgtib")
        unit = raw[len(number) :]
        if unit not in _UNITS:
            raise ValueError(f"device memory {text!r}: unknown unit {unit!r} (use B, KB, MB, GB, KiB, MiB, GiB)")
        try:
            value = int(float(number) * _UNITS[unit])
        except (ValueError, OverflowError):
            raise ValueError(f"device memory {text!r} is not a size such as 1GiB or 512MB") from None
    if value <= 0:
        raise ValueError(f"device memory must be positive, got {text!r}")
    return value


@dataclasses.dataclass(frozen=True)
class RowsPlan:
    """Where a run keeps its clients' rows: ``where`` "device" (the whole state resident) or "host"
    (:func:`streamed_step`); the ``budget`` (bytes) it was planned for, the bytes the resident state and data
    take (``resident_bytes``), those a streamed round holds on the device (``cohort_bytes``: the blocks of rows
    and data in flight, the server's state, the round's metrics over N) and the clients an evaluation chunk
    holds (``eval_chunk``)."""

    where: str
    budget: int
    resident_bytes: int
    cohort_bytes: int
    eval_chunk: int

    def report(self) -> dict:
        """What a run's summary records (not its ``run.json``: both placements give the same numbers)."""
        return {
            "client_rows": self.where,
            "device_memory": self.budget,
            "resident_bytes": self.resident_bytes,
            "cohort_bytes": self.cohort_bytes,
            "eval_chunk": self.eval_chunk,
        }


def plan_rows(
    algorithm: FederatedAlgorithm,
    state_shapes: ClientState,
    arrays: dict,
    *,
    budget: Optional[int] = None,
    client_rows: str = "auto",
) -> RowsPlan:
    """Where the clients' rows go under a device-memory ``budget`` (bytes or a size string; None:
    :func:`~fedjax_clust.parallel.memory.device_total_memory`, the machine's memory on a CPU; a device that does
    not report its memory counts as unbounded).

    The estimate counts arrays, not the round's temporaries: the population stays on the device ("device") when
    its state (``state_shapes``, e.g. from ``jax.eval_shape``) and per-client arrays (``arrays``: data, test data,
    optima) take at most :data:`RESIDENT_SHARE` of the budget, the rest left to the round's temporaries; else
    its rows stream from the host ("host"), which needs the algorithm's cohort program (partial participation,
    gathered rows) and the streamed round's ``cohort_bytes`` within the same share of the budget. ``client_rows``
    "device" or "host" forces the choice (the budget still sizes evaluation chunks); "auto" decides, and
    without a given budget keeps an algorithm that cannot stream on the device as before (an explicit budget it
    exceeds is an error).
    """
    if client_rows not in CLIENT_ROWS:
        raise ValueError(f"client_rows must be one of {CLIENT_ROWS}, got {client_rows!r}")
    given = budget is not None
    budget = (device_total_memory() or sys.maxsize) if budget is None else parse_bytes(budget)
    n = leading_dim(arrays["data"], "data")
    rows = host_bytes(state_shapes)
    server = tree_bytes(state_shapes) - rows  # extra, round and the models of server-held tables
    data = tree_bytes(arrays)
    resident = rows + server + data
    cohort = cohort_program(algorithm, state_shapes)
    size = algorithm.execution.clients_per_round or n
    per_row, per_data = rows / max(n, 1), data / max(n, 1)
    sources = device_source_bytes(arrays)  # a pooled population's pool, copied once to the device it builds on
    # in flight at once (streamed_step): the block a round reads, the one it writes, the previous round's output
    # awaiting write-back, the next block and its carried copy; two cohorts of data; two server parts; the
    # round's metrics over the population (participants, cluster labels: 5 bytes a client); the data's sources
    cohort_bytes = int(size * (5 * per_row + 2 * per_data) + 2 * server + 5 * n + sources)
    eval_chunk = int(max(1, min(n, (budget * RESIDENT_SHARE - server) // max(per_row + per_data, 1))))
    host_chunk = int(max(1, min(n, (budget * RESIDENT_SHARE - server - sources) // max(per_row + per_data, 1))))
    fits = resident <= budget * RESIDENT_SHARE
    if client_rows == "auto" and cohort is None and not given:
        return RowsPlan("device", budget, resident, cohort_bytes, n)  # it cannot stream: as before
    if client_rows == "device" or (client_rows == "auto" and fits):
        return RowsPlan("device", budget, resident, cohort_bytes, n if fits else eval_chunk)
    if cohort is None:
        why = _why_not_streamed(algorithm, size, n)
        if client_rows == "host":
            raise ValueError(f"{algorithm.name}: client_rows='host' needs rows that can stream, and {why}")
        raise ValueError(
            f"{algorithm.name}: the state and data ({resident:,} bytes) exceed {RESIDENT_SHARE:.0%} of the "
            f"device-memory budget of {budget:,} bytes, and they cannot stream from host memory because {why}"
        )
    if _is_ragged(arrays):
        raise ValueError(f"{algorithm.name}: host-resident rows take padded per-client data, not ragged examples")
    if algorithm.execution.devices not in (None, 1):
        raise ValueError(f"{algorithm.name}: host-resident rows run on one device, not a mesh of several")
    if cohort_bytes > budget * RESIDENT_SHARE:
        pool = f", the data's shared pool ({sources:,} bytes)" if sources else ""
        raise ValueError(
            f"{algorithm.name}: the cohorts of {size:,} clients in flight, the server's state ({2 * server:,} "
            f"bytes for two copies){pool} and the round's per-client metrics ({cohort_bytes:,} bytes in all) "
            f"exceed {RESIDENT_SHARE:.0%} of the device-memory budget of {budget:,} bytes: give a larger "
            "--device-memory or fewer clients per round"
        )
    return RowsPlan("host", budget, resident, cohort_bytes, host_chunk)  # its chunks are built beside the sources


def _why_not_streamed(algorithm: FederatedAlgorithm, size: int, n: int) -> str:
    cohort = algorithm.execution.cohort
    if cohort is not None and cohort.owner is algorithm.apply:  # a program that does not serve the state
        return "its clients hold per-client rows (per-client starts), whose round needs every client's row"
    if cohort is not None:
        return "a wrapper replaced its participation round (apply) after participation was added"
    if size == n:
        return "it runs with every client each round (give partial participation, --participation)"
    if algorithm.execution.privacy is not None:  # a private round below N clients: privacy's Poisson slots
        return "its Poisson sample (privacy's dp_sampling) fills fixed slots whose inactive rows stay on the device"
    return "its round needs every client's row each round (masked participation)"


def cohort_program(algorithm: FederatedAlgorithm, state=None):
    """The algorithm's :class:`~fedjax_clust.algorithms.participation.CohortProgram` when its round is still the
    participation round that made it (a wrapper that replaced ``apply`` afterwards would be skipped by a
    streamed round: None then) and, given a ``state`` (or its shapes), the program serves it (Global's per-client
    starts do not stream)."""
    cohort = algorithm.execution.cohort
    if cohort is None or cohort.owner is not algorithm.apply:
        return None
    if state is not None and not cohort.serves(state):
        return None
    return cohort


def _is_ragged(arrays) -> bool:
    return any(
        isinstance(x, RaggedBatch) for x in jax.tree.leaves(arrays, is_leaf=lambda x: isinstance(x, RaggedBatch))
    )


@functools.partial(jax.jit, donate_argnums=0)
def _carry_rows(packed, previous, to, frm):
    """``packed`` (the next cohort's rows, [S, D] per dtype) with its rows ``to`` replaced by ``previous``'s
    rows ``frm`` (both int32 [S]; padding in ``to`` is S, out of range, and dropped): the clients of the next
    cohort who were in this one."""
    return {
        dtype: rows.at[to].set(jnp.take(previous[dtype], frm, axis=0, mode="clip"), mode="drop")
        for dtype, rows in packed.items()
    }


def _block_program(cohort_run: Callable, layout: RowLayout) -> Callable:
    """``(numbers, packed rows, server part, data block, key, index) -> (packed new rows, new server part,
    metrics)``: the cohort program (of the algorithm built with ``numbers``, see
    :mod:`fedjax_clust.algorithms.numbered`) on a block unpacked from its packed rows, fenced by
    ``optimization_barrier`` as the resident round fences its gathered block
    (:func:`~fedjax_clust.algorithms.participation.with_participation`)."""

    def program(numbers, packed, server, batch, key, index):
        block = with_row_leaves(server, layout.unpack(packed), layout.treedef)
        block, batch = jax.lax.optimization_barrier((block, batch))
        new, metrics = jax.lax.optimization_barrier(cohort_run(numbers, block, batch, key, index))
        leaves, _ = row_leaves(new)
        return layout.pack(leaves), server_part(new), metrics

    return jax.jit(program)


def _not_streamable(algorithm: FederatedAlgorithm, size: int, n: int) -> ValueError:
    return ValueError(
        f"{algorithm.name}: host-resident rows need a streamable round, and {_why_not_streamed(algorithm, size, n)}"
    )


def _cohort_runner(cohort, precision: str, numbered: Optional[Numbered]) -> Callable:
    """``run(numbers, block, batch, key, index)``: the cohort program's round at ``precision``, of the algorithm
    built with ``numbers`` when it is ``numbered`` (else ``cohort``'s own, its numbers compiled in)."""

    def run(numbers, *args):
        program = cohort if numbered is None else cohort_program(numbered.build(numbers))
        return at_matmul_precision(program.run, precision)(*args)

    return run


def streamed_step(
    algorithm: FederatedAlgorithm,
    data,
    round_key,
    *,
    prefetch: bool = True,
    timings: Optional[dict] = None,
    numbered: Optional[Numbered] = None,
) -> Callable:
    """``step(state, first, count) -> (state, metrics)`` for :func:`~fedjax_clust.run.loop.run_loop`: rounds
    ``first .. first + count - 1`` of ``algorithm`` (wrapped by partial participation) on a host state
    (:func:`~fedjax_clust.core.host_rows.to_host`) and host ``data``, round t with key ``fold_in(round_key, t)``,
    as the module docstring says. ``timings`` (a dict), when given, accumulates the seconds the host spent
    gathering and copying rows and data in (``gather``), waiting for the round that made a block's rows before
    copying them out (``wait``), and copying them out and writing them back (``scatter``). With ``numbered``
    (:func:`~fedjax_clust.algorithms.numbered.numbered` of ``algorithm``) the block program takes the algorithm's
    numbers as arguments instead of compiling them in."""
    cohort = cohort_program(algorithm)
    if cohort is None:
        n = leading_dim(data, "data")
        raise _not_streamable(algorithm, algorithm.execution.clients_per_round or n, n)
    data = jax.tree.map(on_host, data)  # on the host (a no-op for NumPy arrays and leaves that build rows)
    numbers = {} if numbered is None else numbered.numbers
    cohort_run = _cohort_runner(cohort, algorithm.matmul_precision, numbered)
    draw = jax.jit(cohort.draw)
    size = cohort.rule.size
    programs: dict = {}
    clock = timings if timings is not None else {}
    for part in ("gather", "wait", "scatter"):
        clock.setdefault(part, 0.0)

    def fetch(layout, index):
        tic = time.perf_counter()
        packed, batch = layout.gather(index), take_to_device(data, index)
        clock["gather"] += time.perf_counter() - tic
        return packed, batch

    def write_back(layout, index, packed):
        tic = time.perf_counter()
        jax.block_until_ready(packed)  # the round that made the rows: waited for, not counted as the copy
        toc = time.perf_counter()
        clock["wait"] += toc - tic
        layout.write(index, packed)
        clock["scatter"] += time.perf_counter() - toc

    def step(state, first, count):
        # the rows are written into the state's own buffers: a Ctrl-C waits for the stretch to finish, so the
        # loop never holds a server part of one round with rows of another
        with interrupts_deferred():
            return run_stretch(state, first, count)

    def run_stretch(state, first, count):
        if not cohort.serves(state):
            raise _not_streamable(algorithm, size, leading_dim(data, "data"))
        layout = RowLayout.of(state)  # the buffers of the state's views (packed once if they are not)
        signature = (layout.slots, layout.treedef)
        if signature not in programs:
            programs[signature] = _block_program(cohort_run, layout)
        program = programs[signature]
        start_round = int(jax.device_get(state.round))
        keys = [jax.random.fold_in(round_key, t) for t in range(first, first + count)]
        indices = [np.asarray(draw(k, jnp.asarray(start_round + i, jnp.int32))) for i, k in enumerate(keys)]
        for index in indices:
            if np.unique(index).size != size or index.min() < 0 or index.max() >= layout.num_clients:
                raise ValueError(
                    f"{algorithm.name}: a round drew participants that are not {size} distinct clients of "
                    f"{layout.num_clients} ({index.tolist()[:10]}...); host-resident rows need distinct indices"
                )
        server = server_part(state)
        packed, batch = fetch(layout, indices[0])
        metrics, pending = {}, None
        for i in range(count):
            index = indices[i]
            new, server, metrics = program(numbers, packed, server, batch, keys[i], jnp.asarray(index, jnp.int32))
            if i == 0 and int(jax.device_get(server.round)) != start_round + 1:  # before any row is written
                raise RuntimeError(
                    f"{algorithm.name}: host-resident rounds need a round that adds 1 to state.round; it went "
                    f"from {start_round} to {int(jax.device_get(server.round))}"
                )
            if not prefetch:
                write_back(layout, index, new)
                if i + 1 < count:
                    packed, batch = fetch(layout, indices[i + 1])
                continue
            for rows in new.values():
                rows.copy_to_host_async()
            if pending is not None:  # round i-1's rows: written back while round i computes
                write_back(layout, *pending)
                pending = None
            if i + 1 < count:
                following = indices[i + 1]
                packed, batch = fetch(layout, following)
                # clients in both cohorts take their rows from round i's output, still on the device (a scatter
                # queued after round i; padding is dropped, and it runs every round: one compilation, no branch)
                _, to, frm = np.intersect1d(following, index, assume_unique=True, return_indices=True)
                to = np.concatenate([to, np.full(size - to.size, size)]).astype(np.int32)
                frm = np.concatenate([frm, np.zeros(size - frm.size, np.int64)]).astype(np.int32)
                packed = _carry_rows(packed, new, to, frm)
            pending = (index, new)
        if pending is not None:
            write_back(layout, *pending)
        return layout.state(server), metrics

    return step


def evaluate_in_chunks(evaluate: Callable, task, state: ClientState, chunk: int, clients=None):
    """``(metrics, finite count)`` of a state (host rows, or on the device), ``evaluate(block, arrays, honest)``
    -- a jitted :func:`~fedjax_clust.run.simulate.evaluate_state` over a block of clients, their arrays and
    their honest mask -- run over the clients ``clients`` (int [K], default all N) ``chunk`` at a time (the last
    chunk padded with clients marked not honest, so that one program serves every chunk).

    Each metric of the task's evaluation is a mean over the counted clients (finite and honest) or, named
    ``<metric>_std``, the spread of one: the chunks' means combine weighted by their counts, the spreads by the
    law of total variance. With one chunk of the whole population it is ``evaluate`` on the population.
    """
    arrays = task.arrays()
    unseen = arrays.pop("unseen_data", None)
    n = task.num_clients
    honest = np.ones(n, bool) if task.honest is None else np.asarray(task.honest, bool)
    if clients is None and chunk >= n:
        block = gather_block(state, np.arange(n))
        whole = take_to_device(arrays, np.arange(n))
        if unseen is not None:
            whole["unseen_data"] = jax.device_put(unseen)
        return evaluate(block, whole, None if task.honest is None else jnp.asarray(honest))
    if unseen is not None:
        raise ValueError("evaluation in chunks or samples of clients does not cover unseen clients")
    clients = np.arange(n) if clients is None else np.asarray(clients)
    if clients.ndim != 1 or clients.size == 0 or not np.issubdtype(clients.dtype, np.integer):
        raise ValueError(f"clients must be a non-empty 1-D array of client indices, got {clients.dtype}{clients.shape}")
    if clients.min() < 0 or clients.max() >= n:
        raise ValueError(f"clients must be indices in [0, {n}), got {clients.min()}..{clients.max()}")
    chunk = min(chunk, len(clients))
    parts = []
    for first in range(0, len(clients), chunk):
        slots = np.arange(first, first + chunk)
        real = slots < len(clients)
        index = clients[np.minimum(slots, len(clients) - 1)]
        block = gather_block(state, index)
        mask = jnp.asarray(np.where(real, honest[index], False))
        metrics, count = evaluate(block, take_to_device(arrays, index), mask)
        parts.append((jax.device_get(metrics), int(count)))
    return combine_chunks(parts)


class EvaluationChunk:
    """The clients an evaluation chunk holds, sized once per run by what one client's evaluation really takes:
    ``evaluate`` compiled for a chunk of one client, its temporaries (XLA's memory analysis: a CNN's activations
    over every example of the client, which can be hundreds of times its data) plus its rows and arrays; the
    chunk is the most clients whose evaluation fits ``budget`` bytes less the state's server part (held once),
    at most ``limit`` (the plan's chunk, from rows and data alone). Without a budget, or where XLA reports no
    memory analysis, ``limit``."""

    def __init__(self, evaluate: Callable, limit: int, budget: Optional[float]):
        self.evaluate: Any = evaluate  # a jitted function (lowered to read its memory analysis)
        self.limit, self.budget = int(limit), budget
        self.size: Optional[int] = None

    def __call__(self, task, state: ClientState) -> int:
        if self.size is None:
            self.size = self._sized(task, state)
        return self.size

    def _sized(self, task, state: ClientState) -> int:
        if self.budget is None:
            return self.limit
        arrays = task.arrays()
        arrays.pop("unseen_data", None)
        one = np.zeros(1, np.int64)
        block, data = gather_block(state, one), take_to_device(arrays, one)
        try:
            lowered = self.evaluate.lower(block, data, jnp.ones(1, bool))
            analysis = lowered.compile().memory_analysis()
            temporaries = int(analysis.temp_size_in_bytes)
        except Exception:  # noqa: BLE001 -- a backend without memory analysis: the plan's chunk
            return self.limit
        # the server's part (a global model, IFCA's cluster models) is held once, whatever the chunk
        per_client = temporaries + host_bytes(block) + tree_bytes(data)
        room = self.budget - tree_bytes(server_part(block))
        return int(max(1, min(self.limit, room // max(per_client, 1))))


EVAL_SAMPLE_STREAM = 0x5A3E  # the seed sequence entry of a sampled evaluation's draw


def evaluation_sample(seed: int, round_: int, num_clients: int, size: int) -> np.ndarray:
    """The ``size`` clients a sampled evaluation at round ``round_`` covers: drawn uniformly without replacement
    (sorted) by NumPy's generator seeded with (``seed``, :data:`EVAL_SAMPLE_STREAM`, ``round_``), so a run and its
    resume evaluate the same clients, and every algorithm of a comparison with the same seed the same ones."""
    rng = np.random.default_rng((int(seed), EVAL_SAMPLE_STREAM, int(round_)))
    return np.sort(rng.choice(num_clients, size=size, replace=False))


def combine_chunks(parts):
    """(metrics, count) of the whole from chunks' (metrics, count): means weighted by counts, ``*_std`` by the
    law of total variance (see :func:`evaluate_in_chunks`)."""
    total = sum(c for _, c in parts)
    used = [(m, c) for m, c in parts if c > 0]
    keys = parts[0][0].keys()
    spreads = {k for k in keys if k.endswith("_std") and k[: -len("_std")] in keys}
    out = {}
    for key in (k for k in keys if k not in spreads):
        out[key] = sum(float(m[key]) * c for m, c in used) / total if total else float("nan")
    for key in spreads:
        base = key[: -len("_std")]
        var = sum(c * (float(m[key]) ** 2 + (float(m[base]) - out[base]) ** 2) for m, c in used)
        out[key] = float(np.sqrt(var / total)) if total else float("nan")
    return {k: np.float32(out[k]) for k in keys}, total
