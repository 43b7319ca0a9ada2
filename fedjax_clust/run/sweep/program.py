"""The compiled program of a sweep: one algorithm's init, fused rounds and evaluations over a batch of runs
(:class:`SweepProgram`, built by :func:`sweep_program`), the runs batched by ``jax.vmap`` or computed one after
another inside the program (:func:`map_runs`; ``run_batching``: :func:`resolved_run_batching`), and how a
program's state holds its runs (:data:`RUN_AXES`, :func:`run_slice`)."""

from __future__ import annotations

from typing import Callable, Mapping, NamedTuple, Optional

import jax
import jax.numpy as jnp

from fedjax_clust.algorithms import make_algorithm
from fedjax_clust.algorithms.settings import grouped_settings
from fedjax_clust.core.host_rows import row_leaves, with_row_leaves
from fedjax_clust.core.state import ClientState
from fedjax_clust.core.validation import check_choice
from fedjax_clust.robust.attack_switch import AttackSwitch
from fedjax_clust.robust.attacks import make_attack
from fedjax_clust.robust.registry import Attack
from fedjax_clust.run.fused import fuse_rounds
from fedjax_clust.run.simulate import evaluate_state
from fedjax_clust.tasks.base import Task

# How a program's state is vmapped over its runs: every leaf has a leading run axis except the round counter,
# which all runs share (they start at round 0 and advance together). An unbatched round keeps every
# ``lax.cond`` keyed on it a ``cond`` under vmap: a batched predicate would turn it into a ``select`` that
# runs both branches every round (SR-FCA's ONE_SHOT and RECLUSTER/MERGE, Three-stage's Stage II, FedSoft's
# importance re-estimation).
RUN_AXES = ClientState(**{field: None if field == "round" else 0 for field in ClientState._fields})


def run_slice(state: ClientState, r: int) -> ClientState:
    """Run ``r``'s state out of a program's state (leaves [runs, ...], the round counter shared)."""
    return jax.tree.map(lambda x: x[r], state._replace(round=None))._replace(round=state.round)


class SweepProgram(NamedTuple):
    """The jitted, vmapped functions of one program, each over runs (hyperparameters ``hp`` {name: [runs]},
    task ``arrays``, per-run ``extra`` options, states with :data:`RUN_AXES`):

    * ``init(hp, arrays, extra, params, keys) -> state`` (initial ``params`` [runs, ...], each run's
      :func:`~fedjax_clust.core.keys.init_key`);
    * ``rounds(hp, arrays, extra, state, round_keys, first, count) -> (state, metrics)``: rounds ``first`` ..
      ``first + count - 1`` of every run, fused (:func:`fedjax_clust.run.fused.fuse_rounds`), consuming the
      ``state`` passed (donated: :func:`fedjax_clust.run.fused.consuming_step`);
    * ``evaluate(hp, arrays, extra, state) -> (metrics, finite)``;
    * ``evaluate_clients(hp, arrays, extra, state, clients, honest) -> (metrics, finite)``: the same over each
      run's sample of clients (int [runs, K]) with their honest mask (bool [runs, K]), a sampled evaluation
      (``eval_clients``) as :func:`~fedjax_clust.run.streaming.evaluate_in_chunks` computes one run's.
    """

    init: Callable
    rounds: Callable
    evaluate: Callable
    evaluate_clients: Optional[Callable] = None


RUN_BATCHING = ("auto", "vmap", "map")


def _leaf_axes(axes, tree) -> list:
    """The mapped axis (0, or None: shared) of every leaf of ``tree``, from ``axes``, a prefix of it as
    ``jax.vmap``'s ``in_axes`` / ``out_axes`` are."""
    shared = -1  # None itself is an empty subtree: a stand-in while the axes are spread over the leaves
    spread = jax.tree.map(
        lambda ax, sub: jax.tree.map(lambda _: shared if ax is None else ax, sub),
        axes,
        tree,
        is_leaf=lambda x: x is None,
    )
    leaves = [None if ax == shared else ax for ax in jax.tree.leaves(spread)]
    if any(ax not in (0, None) for ax in leaves):
        raise ValueError(f"map_runs maps axis 0 or shares (None), got axes {axes!r}")
    return leaves


def map_runs(fn: Callable, in_axes, out_axes) -> Callable:
    """``jax.vmap(fn, in_axes, out_axes)`` (axes 0 or None only) computed one run after another inside one
    program (``lax.map`` over the leading axis): every run's computation is the single run's, with the same
    kernels; an output whose axis is None must be the same for every run (the shared round counter) and is
    taken from the first."""

    def mapped(*args):
        flat, treedef = jax.tree.flatten(args)
        at = [i for i, ax in enumerate(_leaf_axes(in_axes, args)) if ax == 0]

        def one(slices):
            whole = list(flat)
            for i, x in zip(at, slices):
                whole[i] = x
            return fn(*jax.tree.unflatten(treedef, whole))

        outs = jax.lax.map(one, [flat[i] for i in at])
        leaves, out_def = jax.tree.flatten(outs)
        axes = _leaf_axes(out_axes, outs)
        return jax.tree.unflatten(out_def, [x if ax == 0 else x[0] for x, ax in zip(leaves, axes)])

    return mapped


def resolved_run_batching(batching: str) -> str:
    """``batching`` with "auto" resolved: "map" on a CPU backend, where XLA runs a batched matmul of small
    per-client blocks (the runs' axis of a vmapped per-client gradient) as one library call per client and a
    vmapped sweep of Global took about 2.3x the time of its runs one after another (``bench --model privacy``'s
    sweep row); "vmap" on an accelerator."""
    check_choice("run_batching", batching, RUN_BATCHING)
    if batching != "auto":
        return batching
    return "map" if jax.default_backend() == "cpu" else "vmap"


def sweep_program(
    algorithm: str,
    base_task: Task,
    options: Mapping,
    static_values: Mapping,
    arrays_axis: Optional[int] = None,
    batching: str = "vmap",
    attack_kinds: tuple = (),
    attack_template: Optional[Attack] = None,
) -> SweepProgram:
    """The vmapped program of ``algorithm`` on ``base_task``'s shapes: ``options`` and ``static_values`` are
    shared keywords of :func:`fedjax_clust.make_algorithm`, the traced ``hp`` and ``extra`` per run;
    ``arrays_axis`` 0 when every run has its own task arrays (a task per seed), None when they share them.
    ``batching`` "vmap" batches the runs' computations together (``jax.vmap``), "map" runs them one after
    another in the same program (:func:`map_runs`; "auto": :func:`resolved_run_batching`). With
    ``attack_kinds`` (registered attack names) ``hp["attack"]`` is each run's index into them: its attackers send
    that kind's messages (:class:`~fedjax_clust.robust.attack_switch.AttackSwitch`). With ``attack_template`` (an
    attack with numbers) ``hp["attack_numbers"]`` are each run's numbers of that attack's kind
    (:meth:`~fedjax_clust.robust.registry.Attack.with_numbers`)."""
    batch = jax.vmap if resolved_run_batching(batching) == "vmap" else map_runs
    kinds = tuple(make_attack(name) for name in attack_kinds)

    def build(hp, arrays, extra):
        task_r = base_task.with_arrays(arrays)
        if kinds:
            hp = {**hp, "attack": AttackSwitch(kinds, hp["attack"])}
        if attack_template is not None:
            hp = dict(hp)
            hp["attack"] = attack_template.with_numbers(hp.pop("attack_numbers"))
        algo = make_algorithm(algorithm, task_r, **grouped_settings({**options, **static_values, **hp, **extra}))
        return algo, task_r

    def init_one(hp, arrays, extra, params, key):
        algo, _ = build(hp, arrays, extra)
        return algo.start(params, base_task.num_clients, key)

    def rounds_one(hp, arrays, extra, state, round_key, first, count):
        algo, task_r = build(hp, arrays, extra)
        return fuse_rounds(algo.round, jit=False)(state, task_r.data, round_key, first, count)

    def evaluate_one(hp, arrays, extra, state):
        return evaluate_state(*build(hp, arrays, extra), state)

    def evaluate_clients_one(hp, arrays, extra, state, clients, honest):
        algo, _ = build(hp, arrays, extra)
        leaves, treedef = row_leaves(state)
        block = with_row_leaves(state, [jnp.take(x, clients, axis=0) for x in leaves], treedef)
        sample = jax.tree.map(lambda x: jnp.take(x, clients, axis=0), arrays)
        return evaluate_state(algo, base_task.with_arrays(sample), block, honest)

    axes = (0, arrays_axis, 0)
    return SweepProgram(
        jax.jit(batch(init_one, in_axes=axes + (0, 0), out_axes=RUN_AXES)),
        jax.jit(batch(rounds_one, in_axes=axes + (RUN_AXES, 0, None, None), out_axes=(RUN_AXES, 0)), donate_argnums=3),
        jax.jit(batch(evaluate_one, in_axes=axes + (RUN_AXES,), out_axes=0)),
        jax.jit(batch(evaluate_clients_one, in_axes=axes + (RUN_AXES, 0, 0), out_axes=0)),
    )
