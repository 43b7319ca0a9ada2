"""Running one program of a sweep: its inputs stacked over its runs (:class:`ProgramInputs`), the compiled
program (:func:`~fedjax_clust.run.sweep.program.sweep_program`) driven by the one run loop
(:func:`~fedjax_clust.run.loop.run_loop`) with every run's evaluations, trackers and non-finite guard, and
each run's :class:`~fedjax_clust.run.simulate.RunResult` out of the program's state (:func:`run_program`)."""

from __future__ import annotations

import time
from typing import Any, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.core.keys import init_key
from fedjax_clust.core.state import ClientParams
from fedjax_clust.run.advice import EvaluationCost, scheduled_evaluations
from fedjax_clust.run.callbacks import NonFiniteGuard, ProgressBar, Trackers
from fedjax_clust.run.fused import consuming_step
from fedjax_clust.run.loop import Loop, LoopOptions, close_callbacks, run_loop
from fedjax_clust.run.records import counted_clients, evaluation_row, run_summary, run_timing, stop_status
from fedjax_clust.run.simulate import RunResult, initial_params
from fedjax_clust.run.streaming import evaluation_sample
from fedjax_clust.run.sweep.grid import ConcreteRun, run_name
from fedjax_clust.run.sweep.output import sampled_record, tracked_config
from fedjax_clust.run.sweep.plan import attack_numbers_of, numbered_attack
from fedjax_clust.run.sweep.program import run_slice, sweep_program
from fedjax_clust.run.timing import CompileClock


class ProgramInputs(NamedTuple):
    """A program's vmapped inputs (:func:`_program_inputs`): its ``traced`` hyperparameters ``{name: [runs]}``,
    the runs' own ``run_options`` (stacked; {} for none), the task ``arrays`` (stacked per run when each seed has
    its task) with their vmap axis ``arrays_axis`` (0, or None: shared), every run's ``round_keys``, and the
    runs' initial ``params`` (stacked) with their ``init_keys``."""

    traced: dict
    run_options: Any
    arrays: Any
    arrays_axis: Optional[int]
    round_keys: Any
    params: Any
    init_keys: Any


def _stack(trees):
    return jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *trees)


def run_program(
    algorithm,
    members: Sequence[ConcreteRun],
    traced_names,
    task_names,
    options,
    built,
    loop_options: LoopOptions,
    *,
    out,
    slots,
    batching,
    kinds=(),
):
    """Run ``members`` (:class:`~fedjax_clust.run.sweep.grid.ConcreteRun`) as one program, batched by
    ``batching`` (their tasks share every static value); fill ``out[slots]``; with ``loop_options.tracking`` log
    every run's evaluations to its own trackers; with their attack among ``kinds`` one program switches over those
    kinds.
    Returns the program's timing (:func:`~fedjax_clust.run.records.run_timing`)."""
    rounds, eval_every, init, on_nonfinite = (
        loop_options.rounds,
        loop_options.eval_every,
        loop_options.init,
        loop_options.on_nonfinite,
    )
    first_values, base_task = members[0].values, members[0].task
    num_runs = len(members)
    counted_each = [counted_clients(m.task) for m in members]  # each run's honest clients: its own attackers
    switched = kinds if first_values.get("attack") in kinds else ()
    template = None if switched else numbered_attack(first_values.get("attack"))
    fixed = [*traced_names, *task_names, *(["attack"] if switched or template is not None else [])]
    static_values = {n: v for n, v in first_values.items() if n not in fixed}
    inputs = _program_inputs(members, traced_names, built, init)
    traced, extra, arrays = inputs.traced, inputs.run_options, inputs.arrays
    if switched:  # each run's index into the kinds, an int32 argument
        traced["attack"] = jnp.asarray([switched.index(m.values["attack"]) for m in members], jnp.int32)
    if template is not None:  # each run's attack numbers (its scale, z, epsilon, ...), float32 arguments
        traced["attack_numbers"] = {
            k: jnp.asarray([attack_numbers_of(m.values["attack"])[k] for m in members], jnp.float32)
            for k in template.numbers()
        }
    program = sweep_program(
        algorithm, base_task, options, static_values, inputs.arrays_axis, batching, switched, template
    )
    init_all, rounds_all = program.init, program.rounds
    sample_size = loop_options.eval_clients

    def evaluate_rows(t, state, round_metrics):
        if sample_size is None:
            metrics, finite = jax.device_get(program.evaluate(traced, arrays, extra, state))
            counted = counted_each
        else:  # each run's own sample, drawn as simulate draws it (by the run's seed and the round)
            samples = [evaluation_sample(m.seed, t, base_task.num_clients, sample_size) for m in members]
            honest = [
                np.ones(sample_size, bool) if m.task.honest is None else np.asarray(m.task.honest, bool)[c]
                for m, c in zip(members, samples)
            ]
            metrics, finite = jax.device_get(
                program.evaluate_clients(
                    traced, arrays, extra, state, jnp.asarray(np.stack(samples)), jnp.asarray(np.stack(honest))
                )
            )
            counted = [int(h.sum()) for h in honest]
        round_metrics = jax.device_get(round_metrics)
        return [
            evaluation_row(
                t,
                {k: v[r] for k, v in metrics.items()},
                {k: v[r] for k, v in round_metrics.items()},
                int(finite[r]),
                counted[r],
                m.task.true_clusters,
                m.task.honest,
                m.algorithm.execution.privacy,
            )
            for r, m in enumerate(members)
        ]

    names = [f"{algorithm}/{run_name(m.values, m.seed)}" for m in members]
    configs = [tracked_config(member, loop_options) for member in members]
    trackers = Trackers(loop_options.tracking, list(zip(names, configs)))  # every run tracked as its own run
    callbacks = [
        ProgressBar(rounds, _program_description(algorithm, members), enabled=loop_options.progress),
        trackers,
        NonFiniteGuard(on_nonfinite, [sample_size or n for n in counted_each], names),
        EvaluationCost(base_task.num_clients, scheduled_evaluations(1, rounds, eval_every), sample_size is not None),
    ]
    start = time.perf_counter()  # after the trackers opened: a W&B start is not the program's time
    with CompileClock() as clock:
        try:
            loop = Loop(init_all(traced, arrays, extra, inputs.params, inputs.init_keys), num_runs=num_runs)
        except BaseException:
            close_callbacks(callbacks)
            raise
        step = consuming_step(
            rounds_all,
            before=(traced, arrays, extra),
            after=(inputs.round_keys,),
            keep=(inputs.params, inputs.init_keys),
        )
        run_loop(
            loop,
            step,
            evaluate_rows,
            rounds=rounds,
            eval_every=eval_every,
            callbacks=callbacks,
            evaluate_on_interrupt=False,
        )
    timing = run_timing(loop, started=start, clock=clock, runs=num_runs)
    _program_results(loop, members, loop_options, timing, out, slots, batching)
    return timing


def _program_description(algorithm: str, members: Sequence[ConcreteRun]) -> str:
    """The progress line's name of a program: its algorithm, runs and which (the first and last run's values and
    seeds), e.g. ``global x4 runs (learning_rate=0.01,seed=0 .. learning_rate=0.02,seed=1)``."""
    names = [run_name(m.values, m.seed) for m in members]
    which = names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"
    return f"{algorithm} x{len(names)} run{'s' if len(names) > 1 else ''} ({which})"


def _program_inputs(members: Sequence[ConcreteRun], traced_names, built: Optional[dict], init: str) -> ProgramInputs:
    """A program's vmapped inputs: its traced hyperparameters [runs], the runs' own options, the task arrays
    (stacked per run when each seed has its task, with their vmap axis), every run's round key and its
    start and init_key. ``built`` (None: one task shared by every run) maps a task's ``id`` to the task built
    whole (:meth:`~fedjax_clust.tasks.base.Task.resident`): the members' tasks are added, the others dropped."""
    traced = {n: jnp.asarray([m.values[n] for m in members], jnp.float32) for n in traced_names}
    extra = _stack([m.run_options for m in members]) if members[0].run_options else {}
    if built is not None:  # each run's task built whole here, kept while the programs that follow share it
        held = {id(m.task) for m in members}
        for gone in [k for k in built if k not in held]:
            del built[gone]  # an earlier program's tasks, released
        for m in members:
            if id(m.task) not in built:
                built[id(m.task)] = m.task.resident()
        arrays, arrays_axis = _stack([{**built[id(m.task)].arrays(), **m.task.masks()} for m in members]), 0
    else:
        arrays, arrays_axis = {**members[0].task.arrays(), **members[0].task.masks()}, None
    keys = [jax.random.PRNGKey(m.seed) for m in members]
    round_keys = jnp.stack([jax.random.fold_in(k, 1) for k in keys])
    init_keys = jnp.stack([init_key(k) for k in keys])
    each = [initial_params(m.task, init, jax.random.fold_in(k, 0)) for m, k in zip(members, keys)]
    if isinstance(each[0], ClientParams):
        starts = ClientParams(_stack([s.stacked for s in each]))
    else:
        starts = _stack(each)
    return ProgramInputs(traced, extra, arrays, arrays_axis, round_keys, starts, init_keys)


def _program_results(
    loop: Loop, members: Sequence[ConcreteRun], loop_options: LoopOptions, timing: dict, out, slots, batching: str
) -> None:
    """Every run's :class:`RunResult` (its rows, its slice of the state, its summary) into ``out[slots]``."""
    num_runs = len(members)
    for r, m in enumerate(members):
        status, more = stop_status(loop.stopped[r])
        timing = {**timing, "runs_in_program": num_runs, "run_batching": batching}
        summary = run_summary(
            m.algorithm,
            m.task,
            loop.histories[r],
            rounds=loop_options.rounds,
            seed=m.seed,
            status=status,
            init=loop_options.init,
            on_nonfinite=loop_options.on_nonfinite,
            timing=timing,
            extra={"sweep_values": m.values, **sampled_record(loop_options)},
            **more,
        )
        out[slots[r]] = RunResult(m.algorithm.name, m.task.name, loop.histories[r], run_slice(loop.state, r), summary)
