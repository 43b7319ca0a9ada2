"""The thin driving loop: rounds, evaluation cadence, progress bar, timing, result files, checkpoints.

A run is reproducible from its seed and config alone: the model initialisation uses
``fold_in(PRNGKey(seed), 0)``, an algorithm's own random start in ``init`` (IFCA's cluster models, ...)
``fold_in(PRNGKey(seed), 2)`` (:func:`fedjax_clust.core.keys.init_key`) and round t uses
``fold_in(fold_in(PRNGKey(seed), 1), t)``.

What a user can trust (see docs/guides/trustworthy-results.md):

* a result folder holds one run (:mod:`fedjax_clust.io.run_folder`): ``run.json`` records the full
  configuration, a new run refuses a folder with results unless ``overwrite=True``, and a resume refuses a
  checkpoint of another run, naming the fields that differ;
* every file is strict JSON: a non-finite metric is written as ``null`` and ``summary.json`` lists in
  ``nonfinite_metrics`` the round each metric first went non-finite;
* a diverging run says so: at every evaluation the client models are checked, and with non-finite ones
  the run stops (``on_nonfinite="stop"``, default) with :class:`NonFiniteError` naming the algorithm,
  the round and the fraction of clients affected, after writing the results up to that round; with
  ``on_nonfinite="warn"`` it goes on, logs the fraction (``nonfinite_clients`` in each row) and computes
  every metric over the finite clients;
* Ctrl-C (KeyboardInterrupt) saves a checkpoint of the last completed round when the run has a folder,
  so ``resume=True`` continues it, and raises :class:`RunInterrupted`.

Where a run keeps its clients' rows (the plan, the host-resident start) lives in :mod:`fedjax_clust.run.placement`,
how its loop begins, fresh or from a checkpoint, in :mod:`fedjax_clust.run.resume`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.algorithms.numbered import numbered, shared_program
from fedjax_clust.core.algorithm import FederatedAlgorithm, at_matmul_precision
from fedjax_clust.core.batching import largest_client
from fedjax_clust.core.host_rows import buffer_files, device_source_bytes, on_host
from fedjax_clust.core.keys import init_key
from fedjax_clust.core.pytrees import finite_rows
from fedjax_clust.core.state import ClientParams, ClientState
from fedjax_clust.core.unseen import unseen_metrics
from fedjax_clust.core.validation import check_batch_fits, check_int, check_seed
from fedjax_clust.io.jsonio import dumps, write_json
from fedjax_clust.io.provenance import provenance
from fedjax_clust.io.run_folder import RUN_FILE
from fedjax_clust.parallel import multihost
from fedjax_clust.parallel.determinism import warn_if_nondeterministic_gpu
from fedjax_clust.run.advice import EvaluationCost, scheduled_evaluations, warn_if_ended_worse, warn_if_mostly_noise
from fedjax_clust.run.callbacks import (
    Checkpoints,
    MetricsFile,
    NonFiniteGuard,
    ProgressBar,
    Trackers,
    overflowed_metrics,  # noqa: F401 - a public name of this module too
)
from fedjax_clust.run.driver_options import Checkpointing, Evaluation, Output, driver_records
from fedjax_clust.run.fused import RoundChunker, consuming_step, rounds_program
from fedjax_clust.run.loop import INITS, ON_NONFINITE, Callback, Loop, LoopOptions, close_callbacks, run_loop
from fedjax_clust.run.placement import (
    ROW_FILE,  # noqa: F401 - a name of this module too
    Placement,
    check_host_rows_dir,
    host_start,  # noqa: F401 - imported from this module (bench/, tests)
    placement_from,
    plan_on_host,
    rows_plan,
)
from fedjax_clust.run.records import (
    counted_clients,
    evaluation_row,
    run_config,
    run_summary,
    run_timing,
    stop_status,
)
from fedjax_clust.run.resume import resume_hint, start_loop
from fedjax_clust.run.streaming import (
    RESIDENT_SHARE,
    EvaluationChunk,
    evaluate_in_chunks,
    evaluation_sample,
    streamed_step,
)
from fedjax_clust.run.timing import CompileClock
from fedjax_clust.tasks.base import Task

__all__ = [
    "RunResult",
    "simulate",
    "check_placement",
    "write_results",
    "run_config",
    "NonFiniteError",
    "RunInterrupted",
    "ON_NONFINITE",
    "INITS",
    "check_host_rows_dir",  # placement.py's, named here as before (run/compare.py and the API reference)
    "resume_hint",  # resume.py's, named here as before
]


@dataclasses.dataclass
class RunResult:
    """What a run produced: per-evaluation metrics, the final state and the summary written to disk (``state``
    is None for a run a resumed sweep read back from its folder: the final models are not stored)."""

    algorithm: str
    task: str
    history: list
    state: Optional[ClientState]
    summary: dict


class NonFiniteError(RuntimeError):
    """The client models went non-finite (``on_nonfinite="stop"``); ``result`` holds the run up to then."""

    def __init__(self, message: str, result: RunResult, round_index: int, fraction: float):
        super().__init__(message)
        self.result, self.round, self.fraction = result, round_index, fraction


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run; ``round`` is the last completed round, ``checkpoint`` where it was saved."""

    def __init__(self, message: str, round_index: int, checkpoint: Optional[str]):
        super().__init__(message)
        self.round, self.checkpoint = round_index, checkpoint


def initial_params(task: Task, init: str, key):
    """The model every client starts from ("shared", Algorithms 1, 2, 4), or per-client starts from the
    task ("oracle": x*_k plus noise, "random": a random start per cluster; the paper authors' scripts)."""
    if init == "shared":
        return task.init_params(key)
    if task.initial_models is None:
        raise ValueError(
            f"init={init!r} needs a task that offers per-client initial models; task {task.name!r} "
            "has none (use init='shared')"
        )
    return ClientParams(task.initial_models(init, key))


def evaluate_state(algorithm: FederatedAlgorithm, task: Task, state: ClientState, honest=None):
    """(metrics, number of clients with finite models) of ``state``; a pure, traceable function.

    The metrics are the algorithm's own ``evaluate`` or ``task.evaluate`` at the algorithm's matmul
    precision, over the clients whose models are finite, and with ``task.unseen_data`` the ``unseen_*``
    metrics of the algorithm's rule for clients never seen in training (:mod:`fedjax_clust.core.unseen`). Pass
    a task whose arrays are arguments (``task.with_arrays``), not constants of the compiled program.
    ``honest`` (bool [N], default ``task.honest``) are the clients counted: an argument for a chunk of clients
    (:func:`~fedjax_clust.run.streaming.evaluate_in_chunks`).
    """
    honest = task.honest if honest is None else honest
    finite = finite_rows(state.params)
    if honest is not None:  # metrics and the finite count are over the honest clients only
        finite = finite & jnp.asarray(honest)
    if algorithm.evaluate is not None:
        metrics = algorithm.evaluate(state, finite, task.data, task.test_data)
    else:
        metrics = at_matmul_precision(lambda st, mask: task.evaluate(st.params, mask), algorithm.matmul_precision)(
            state, finite
        )
    unseen_data = task.unseen_data
    if unseen_data is not None:  # clients never seen in training, by the algorithm's rule
        unseen = at_matmul_precision(
            lambda st: unseen_metrics(
                task.example_loss,
                task.client_accuracy,
                algorithm.unseen_rule,
                st,
                unseen_data["adapt"],
                unseen_data["test"],
                honest if algorithm.unseen_rule.per_client else None,
            ),
            algorithm.matmul_precision,
        )(state)
        metrics = {**metrics, **unseen}
    return metrics, jnp.sum(finite)


def simulate(
    algorithm: FederatedAlgorithm,
    task: Task,
    *,
    rounds: int,
    seed: int = 0,
    init: str = "shared",
    evaluation: Evaluation = Evaluation(),
    output: Output = Output(),
    checkpointing: Checkpointing = Checkpointing(),
    callbacks: Sequence[Callback] = (),
    placement: Optional[Placement] = None,
    config: Optional[dict] = None,
    **legacy,
) -> RunResult:
    """Run ``algorithm`` on ``task`` for ``rounds`` rounds.

    ``evaluation`` (:class:`~fedjax_clust.run.driver_options.Evaluation`): ``task.evaluate`` runs at round 0, every
    ``eval_every`` rounds and at the last round, its metrics merged with those the round itself returns; an
    algorithm's ``cluster_labels`` become ``misclustering`` (the fraction of clients misclustered under the best
    label matching) when the task's clusters are known. With ``eval_clients`` (K) each evaluation covers K clients
    drawn uniformly without replacement for that round (:func:`~fedjax_clust.run.streaming.evaluation_sample`:
    the same K for a run and its resume, and for every algorithm run with the same seed) instead of the whole
    population, what a population of 10^6 clients needs; its means and spreads are over the sample's counted
    clients, the non-finite check covers the sample only, and ``run.json`` records ``eval_clients``. The
    round's own metrics (misclustering) are unchanged. ``on_nonfinite``: "stop" (default) raises
    :class:`NonFiniteError` at the first evaluation with non-finite client models; "warn" goes on and computes
    the metrics over the finite clients. ``seconds_per_round`` in the summary is the mean wall time of the rounds
    after the first (which includes compilation), evaluation excluded.

    ``init``: "shared" (default, every client starts at ``task.init_params``), or "oracle" / "random" per-client
    starts offered by the task (see :func:`initial_params`).

    ``output`` (:class:`~fedjax_clust.run.driver_options.Output`): with ``out_dir``, ``run.json`` (the
    configuration, written first; ``config`` adds entries to it, as the command line records its options),
    ``metrics.jsonl`` (one JSON object per evaluated round, appended as the run goes) and ``summary.json``; a
    folder that already holds results is refused unless ``overwrite`` (which clears them) or ``resume``.
    ``progress`` draws the bar; ``tracking`` (:class:`fedjax_clust.io.tracking.Tracking`): TensorBoard event
    files and / or a Weights & Biases run get the configuration and every evaluated round's metrics (the run's
    files do not change).

    ``checkpointing`` (:class:`~fedjax_clust.run.driver_options.Checkpointing`, see
    :mod:`fedjax_clust.io.checkpoint`): every ``checkpoint_every`` rounds the whole state, the metrics so far and
    the configuration go to ``checkpoint_dir`` (default ``out_dir/checkpoints``). With the output's ``resume``,
    the run continues from the newest readable checkpoint there, whose configuration must equal this one
    (``rounds`` may be larger, not smaller than the rounds done), and its result equals that of an uninterrupted
    run (the round keys depend on the seed and the round only). Every resolved hyperparameter is part of that
    configuration, e.g. the cross-gradient chunk of Federated-Clustering's ``chunk_size="auto"``: a resume where
    it resolves to another chunk is refused with the recorded one to pass. On a GPU the numbers repeat only with
    XLA's deterministic ops: call :func:`fedjax_clust.deterministic_xla_flags` in ``XLA_FLAGS`` before the first
    JAX computation (a run without it warns once per process).

    ``placement`` (:class:`~fedjax_clust.run.placement.Placement`) says how the run sits on the machine; the
    numbers do not depend on it. The rounds between two evaluations (or checkpoints) run fused, as one compiled
    loop (:mod:`fedjax_clust.run.fused`), in stretches sized so that each takes about half a second (the progress
    bar moves between them); its ``max_fused_rounds`` caps a stretch (1: one round per call, as a plain Python
    loop would). Its ``device_memory`` is the device-memory budget (bytes, or a string such as ``"1GiB"``; None:
    the device's total, the machine's memory on a CPU) and ``client_rows`` "auto" (default) keeps the whole state
    on the device when it fits the budget (:func:`~fedjax_clust.run.streaming.plan_rows`) and otherwise keeps the
    per-client rows in host memory and streams each round's cohort (partial participation needed); "device" /
    "host" force it. ``host_rows_dir`` puts host rows in memory-mapped ``.npy`` files in that folder (for rows
    larger than RAM). Both placements give the same states bit for bit; a host run's summary records
    ``client_rows``, and it evaluates in chunks of clients that fit the budget.

    The algorithm's numbers (learning rate, momentum, radius, ...: its record's traced fields) are the compiled
    programs' arguments, not constants (:mod:`fedjax_clust.algorithms.numbered`): a run that differs from an
    earlier one only in them reuses its programs (in this process, or from the persistent compilation cache); the
    results equal those of the numbers compiled in to float32 rounding.

    ``callbacks``: your own :class:`fedjax_clust.run.loop.Callback` objects, called after the built-in ones
    (progress bar, metrics file, trackers, non-finite guard, checkpoints) at every evaluation
    (``after_evaluation(loop, t, rows, bad)``: ``rows[0]`` the row just written), after every stretch of
    rounds, on Ctrl-C, and closed at the end, whatever happens.

    Deprecated (0.3.0, ``legacy``): the flat keywords ``eval_every`` / ``eval_clients`` / ``on_nonfinite``,
    ``out_dir`` / ``overwrite`` / ``resume`` / ``progress`` / ``tracking``, ``checkpoint_every`` /
    ``checkpoint_dir`` and ``device_memory`` / ``client_rows`` / ``host_rows_dir`` / ``max_fused_rounds`` still
    make their record, with a DeprecationWarning.
    """
    started = time.perf_counter()
    placement, evaluation, output, checkpointing = driver_records(
        "simulate", legacy, placement, evaluation=evaluation, output=output, checkpointing=checkpointing
    )
    device_memory, client_rows, host_rows_dir = placement.device_memory, placement.client_rows, placement.host_rows_dir
    eval_clients, resume, max_fused_rounds = evaluation.eval_clients, output.resume, placement.max_fused_rounds
    checkpoint_every, checkpoint_dir = checkpointing.checkpoint_every, checkpointing.checkpoint_dir
    with CompileClock() as clock:  # every program the run compiles, rounds and evaluations
        options = LoopOptions.of(rounds, init, evaluation, output)
        options, checkpoint_every, checkpoint_dir = _checked(
            algorithm, task, options, seed, checkpoint_every, checkpoint_dir, resume
        )
        rounds, eval_every, out_dir = options.rounds, options.eval_every, options.out_dir
        init, on_nonfinite = options.init, options.on_nonfinite
        sample, recorded = evaluation_sampler(algorithm, task, seed, eval_clients, config)
        config_ = run_config(
            algorithm, task, seed=seed, eval_every=eval_every, init=init, on_nonfinite=on_nonfinite, extra=recorded
        )
        warn_if_nondeterministic_gpu()  # once per process, on a GPU without the deterministic-ops flag
        warn_if_mostly_noise(algorithm, task)
        key = jax.random.PRNGKey(seed)
        params = initial_params(task, init, jax.random.fold_in(key, 0))
        plan = rows_plan(algorithm, task, params, key, device_memory, client_rows, host_rows_dir)
        if not plan_on_host(plan):
            task = task.resident()  # a pooled population's images, built once (streamed, each cohort's are)
        loop = start_loop(
            algorithm, task, params, init_key(key), plan, host_rows_dir, config_, options, checkpoint_dir, resume
        )
        rows_record = {**placement.keywords(), "files": buffer_files(loop.state) if plan_on_host(plan) else []}
        run_file = _RunFile(out_dir, config_, rounds, checkpoint_every, options.tracking, rows_record)
        run_file.write("running")
        step, evaluate = _programs(algorithm, task, plan, params, jax.random.fold_in(key, 1))
        evaluate_rows = _row_evaluator(algorithm, task, evaluate, sample)
        evaluated = counted_clients(task) if eval_clients is None else eval_clients  # the non-finite count's total

        def summarize(status, **more):
            summary = run_summary(
                algorithm,
                task,
                loop.histories[0],
                rounds=rounds,
                seed=seed,
                status=status,
                init=init,
                on_nonfinite=on_nonfinite,
                timing=run_timing(loop, started=started, clock=clock),
                extra=recorded,
                **({"client_rows": plan.report()} if plan_on_host(plan) else {}),
                **more,
            )
            result = RunResult(algorithm.name, task.name, loop.histories[0], loop.state, summary)
            if out_dir is not None:
                write_results(result, out_dir)
                run_file.write(status)
            return result

        checkpoints = None if checkpoint_dir is None else Checkpoints(checkpoint_dir, checkpoint_every, config_)
        cost = EvaluationCost(task.num_clients, scheduled_evaluations(loop.start, rounds, eval_every), bool(sample))
        callbacks = _callbacks(algorithm.name, config_, options, loop, evaluated, checkpoints) + [cost, *callbacks]
        try:
            run_loop(
                loop,
                step,
                evaluate_rows,
                rounds=rounds,
                eval_every=eval_every,
                checkpoint_every=checkpoint_every,
                callbacks=callbacks,
                chunker=RoundChunker(max_rounds=max_fused_rounds),
            )
        except KeyboardInterrupt:
            saved = None if checkpoints is None else checkpoints.saved
            if loop.histories[0]:
                summarize("interrupted", completed_rounds=loop.done)
            where = f"; resume with resume=True (--resume), checkpoint in {saved}" if saved else ""
            raise RunInterrupted(f"interrupted after round {loop.done} of {rounds}{where}", loop.done, saved) from None
        if loop.stopped[0] is not None:  # out of the clients that evaluation counted (a sample's honest ones)
            counted = evaluated if sample is None else _counted_in(task, sample(loop.stopped[0][0]))
            _stop(algorithm, loop.stopped[0], counted, summarize, out_dir, loop.histories[0])
        warn_if_ended_worse(algorithm.name, loop.histories[0], evaluation.metric, evaluation.higher_better)
        return summarize("completed")


def check_placement(
    algorithm: FederatedAlgorithm,
    task: Task,
    *,
    seed: int = 0,
    init: str = "shared",
    placement: Optional[Placement] = None,
    eval_clients: Optional[int] = None,
    **legacy,
) -> str:
    """Where :func:`simulate` would keep ``algorithm``'s client rows on ``task`` ("device" or "host"), or the
    ValueError it would raise for ``placement`` / ``eval_clients``, found before anything runs (what a
    comparison checks for every algorithm before the first one starts): the same checks, from the shapes of the
    initial state. ``device_memory`` / ``client_rows`` (``legacy``) are deprecated as in :func:`simulate`."""
    placement = placement_from(placement, legacy, function="check_placement", keywords=("client_rows", "device_memory"))
    evaluation_sampler(algorithm, task, seed, eval_clients, None)
    key = jax.random.PRNGKey(check_seed(seed))
    params = jax.eval_shape(lambda k: initial_params(task, init, k), jax.random.fold_in(key, 0))  # nothing built
    plan = rows_plan(algorithm, task, params, key, placement.device_memory, placement.client_rows, None)
    return "host" if plan_on_host(plan) else "device"


def evaluation_sampler(algorithm, task, seed, eval_clients, config):
    """(``round -> clients`` of a sampled evaluation, None for the whole population; the run's ``config`` with
    ``eval_clients`` when it samples)."""
    if eval_clients is None:
        return None, config
    size = check_int("eval_clients", eval_clients, 1, task.num_clients)
    if task.unseen_data is not None or algorithm.evaluate is not None:
        raise ValueError(
            f"eval_clients: {algorithm.name} on {task.name} evaluates unseen clients or by the algorithm's own "
            "rule, which a sample of clients does not cover"
        )
    if multihost.is_multiprocess():
        raise ValueError("eval_clients is not supported in multi-process runs")
    return lambda t: evaluation_sample(seed, t, task.num_clients, size), {**(config or {}), "eval_clients": size}


def _row_evaluator(algorithm, task, evaluate, sample) -> Callable:
    """``evaluate_rows(t, state, round_metrics)`` of a run (:func:`~fedjax_clust.run.loop.run_loop`'s
    ``evaluate``): its one row of metrics at round t, over the whole population or ``sample(t)``'s clients."""
    num_clients = counted_clients(task)
    row_context = (task.true_clusters, task.honest, algorithm.execution.privacy)

    def evaluate_rows(t, state, round_metrics):
        clients = None if sample is None else sample(t)
        metrics, finite = multihost.fetch(evaluate(state, task.arrays(), clients))
        counted = num_clients if clients is None else _counted_in(task, clients)
        return [evaluation_row(t, metrics, multihost.fetch(round_metrics), int(finite), counted, *row_context)]

    return evaluate_rows


def _counted_in(task, clients) -> int:
    """The clients of a sample the metrics count (the honest ones)."""
    return len(clients) if task.honest is None else int(np.sum(np.asarray(task.honest, bool)[clients]))


def _programs(algorithm, task, plan, params, round_key):
    """(step, evaluate) of a run: ``step(state, first, count)`` the rounds between two evaluations as one compiled
    loop that consumes its state (:func:`~fedjax_clust.run.fused.consuming_step`), or streamed from host rows;
    ``evaluate(state, arrays, clients)`` its metrics and finite count, over the whole population (``clients`` None)
    or the clients ``clients``, in chunks of host rows. The algorithm's numbers (learning rate, momentum, radius,
    ...) are the programs' arguments when it can be rebuilt with them (:mod:`fedjax_clust.algorithms.numbered`):
    a run that differs only in them compiles to the same programs (the persistent compilation cache serves them
    across processes)."""
    numbered_ = numbered(algorithm)
    # the data are arguments, not constants captured by the closure: XLA would constant-fold the model
    # over the whole dataset at compile time; the honest mask too, since the chunks of a host run pass their own
    if numbered_ is None:
        evaluate_block = jax.jit(
            lambda st, arrays, honest: evaluate_state(algorithm, task.with_arrays(arrays), st, honest)
        )
    else:
        evaluate_block = WithArguments(
            shared_program(numbered_, "evaluate", _evaluate_program, task), numbered_.numbers
        )
    limit, budget = (task.num_clients, None) if plan is None else (plan.eval_chunk, plan.budget * RESIDENT_SHARE)
    if plan_on_host(plan) and budget is not None:  # host chunks are built beside the data's sources (a pooled pool)
        budget -= device_source_bytes(task.arrays())
    chunk = EvaluationChunk(evaluate_block, limit, budget)  # by one client's evaluation temporaries too
    if plan_on_host(plan):
        host_task = task.with_arrays(jax.tree.map(on_host, task.arrays()))  # one copy of the data, on the host
        step = streamed_step(algorithm, host_task.data, round_key, numbered=numbered_)
        return step, lambda st, arrays, clients: evaluate_in_chunks(
            evaluate_block, host_task, st, chunk(host_task, st), clients
        )
    honest = None if task.honest is None else multihost.to_global(jnp.asarray(task.honest), task.num_clients)
    rounds, before = rounds_program(algorithm)
    step = consuming_step(rounds, before=before, after=(task.data, round_key), keep=(params, task.arrays()))

    def evaluate(state, arrays, clients):
        if clients is None:
            return evaluate_block(state, arrays, honest)
        return evaluate_in_chunks(evaluate_block, task, state, chunk(task, state), clients)

    return step, evaluate


def _evaluate_program(build: Callable, task_ref) -> Callable:
    """``evaluate(numbers, state, arrays, honest)``: :func:`evaluate_state` of the algorithm built with
    ``numbers`` on the task ``task_ref()`` with ``arrays``, jitted."""
    return jax.jit(
        lambda numbers, st, arrays, honest: evaluate_state(build(numbers), task_ref().with_arrays(arrays), st, honest)
    )


class WithArguments:
    """A jitted function with its leading arguments given: ``f(*front, *args)``, and ``.lower`` likewise (what
    :class:`~fedjax_clust.run.streaming.EvaluationChunk` reads a program's memory from)."""

    def __init__(self, jitted: Callable, *front):
        self.jitted, self.front = jitted, front

    def __call__(self, *args):
        return self.jitted(*self.front, *args)

    def lower(self, *args):
        return self.jitted.lower(*self.front, *args)


def _callbacks(name: str, config: dict, options: LoopOptions, loop: Loop, num_clients: int, checkpoints) -> list:
    """A run's callbacks: its progress bar, its metrics file (with a folder), its trackers, the non-finite guard
    and its checkpoints (with a checkpoint folder); those opened are closed if a later one fails to open."""
    callbacks: list[Callback] = [ProgressBar(options.rounds, name, initial=loop.start - 1, enabled=options.progress)]
    try:
        if options.out_dir is not None:
            callbacks.append(MetricsFile(os.path.join(options.out_dir, "metrics.jsonl"), loop.histories[0]))
        callbacks.append(Trackers(options.tracking, [(name, config)]))
    except BaseException:
        close_callbacks(callbacks)
        raise
    return (
        callbacks
        + [NonFiniteGuard(options.on_nonfinite, [num_clients], [name])]
        + ([checkpoints] if checkpoints is not None else [])
    )


def _checked(algorithm, task, options: LoopOptions, seed, checkpoint_every, checkpoint_dir, resume):
    """(checked options, checkpoint_every, checkpoint_dir) of a run, ValueError naming what is wrong first."""
    check_int("rounds", options.rounds)
    check_int("eval_every", options.eval_every)
    check_seed(seed)
    if checkpoint_every is not None:
        checkpoint_every = check_int("checkpoint_every", checkpoint_every)
    batch = algorithm.execution.batch_size  # set by make_algorithm; a builder called directly records it in hparams
    check_batch_fits(batch if batch is not None else algorithm.hparams.get("batch_size"), largest_client(task.data))
    trace_rounds = algorithm.execution.max_rounds
    if trace_rounds is not None and options.rounds > trace_rounds:
        raise ValueError(f"rounds={options.rounds} outlasts the availability trace ({trace_rounds} rounds)")
    if multihost.is_multiprocess():
        if checkpoint_every is not None or resume:
            raise ValueError("checkpoint_every / resume are not supported in multi-process runs yet")
        if not multihost.is_writer():  # only process 0 writes results, draws the bar and tracks
            options = dataclasses.replace(options, out_dir=None, progress=False, tracking=None)
    options = options.checked()
    if options.out_dir is not None and checkpoint_dir is None:
        checkpoint_dir = os.path.join(options.out_dir, "checkpoints")
    if (checkpoint_every is not None or resume) and checkpoint_dir is None:
        raise ValueError("checkpoint_every / resume need checkpoint_dir (or out_dir)")
    if checkpoint_dir is not None and os.path.exists(checkpoint_dir) and not os.path.isdir(checkpoint_dir):
        raise ValueError(f"checkpoint_dir {checkpoint_dir!r} is an existing file, not a folder")
    return options, checkpoint_every, checkpoint_dir


class _RunFile:
    """``run.json`` of a run with a folder: its configuration, rounds, checkpoint cadence, tracking, where its
    rows live (``client_rows``: the options as given, and the row files of a run that keeps them in files), status
    and provenance (the command, version, commit and machine), rewritten as the status changes. Only ``config``
    is what a resume must match."""

    def __init__(self, out_dir, config, rounds, checkpoint_every, tracking, placement):
        self.out_dir, self.config, self.rounds, self.every, self.tracking = (
            out_dir,
            config,
            rounds,
            checkpoint_every,
            tracking,
        )
        self.placement = placement
        self.made_by = provenance() if out_dir is not None else None

    def write(self, status: str) -> None:
        if self.out_dir is not None:
            tracking = (
                None
                if self.tracking is None
                else {"tensorboard": self.tracking.tensorboard, "wandb": self.tracking.wandb}
            )
            write_json(
                os.path.join(self.out_dir, RUN_FILE),
                {
                    "config": self.config,
                    "rounds": self.rounds,
                    "checkpoint_every": self.every,
                    "tracking": tracking,
                    "client_rows": self.placement,
                    "status": status,
                    "provenance": self.made_by,
                },
            )


def _stop(algorithm, stopped, num_clients, summarize, out_dir, history):
    """Write the run stopped at ``stopped`` = (round, non-finite fraction) and raise :class:`NonFiniteError`."""
    t, fraction = stopped
    status, more = stop_status(stopped)
    result = summarize(status, **more)
    where = f"; results up to round {t} are in {out_dir}" if out_dir is not None else ""
    if not fraction:
        raise NonFiniteError(
            f"{algorithm.name}: {', '.join(overflowed_metrics(history))} became non-finite by round "
            f"{t} although the client models are finite (they grew so large that the losses "
            f"overflow){where}; lower the learning rate, or pass on_nonfinite='warn' "
            "(--on-nonfinite warn) to go on",
            result,
            t,
            0.0,
        )
    bad = round(fraction * num_clients)
    raise NonFiniteError(
        f"{algorithm.name}: {bad} of {num_clients} client models ({fraction:.1%}) became "
        f"non-finite by round {t}{where}; lower the learning rate, or pass on_nonfinite='warn' "
        "(--on-nonfinite warn) to continue over the finite clients",
        result,
        t,
        fraction,
    )


def write_results(result: RunResult, out_dir: str) -> None:
    """``out_dir/metrics.jsonl`` and ``out_dir/summary.json``, strict JSON (non-finite values as null)."""
    os.makedirs(out_dir, exist_ok=True)
    tmp = os.path.join(out_dir, "metrics.jsonl.tmp")
    with open(tmp, "w") as f:
        for row in result.history:
            f.write(dumps(row) + "\n")
    os.replace(tmp, os.path.join(out_dir, "metrics.jsonl"))
    write_json(os.path.join(out_dir, "summary.json"), result.summary)
