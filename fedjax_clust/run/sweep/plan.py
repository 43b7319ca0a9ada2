"""Which runs of a sweep share a compiled program: runs that differ only in traced values (numbers, seeds, which
clients attack, the numbers of an attack of one kind, the kind among switched attacks) share one, split into
chunks of at most ``runs_per_program`` runs (:func:`program_chunks`; "auto": as many as fit the device's memory
budget, :func:`_runs_per_program`)."""

from __future__ import annotations

from typing import Mapping, Optional, Sequence, Union

import jax
import numpy as np

from fedjax_clust.parallel.memory import default_memory_budget
from fedjax_clust.robust.attack_switch import switchable_attacks
from fedjax_clust.robust.attacks import make_attack
from fedjax_clust.robust.registry import Attack
from fedjax_clust.run.sweep.grid import BYZANTINE_KEYS, ConcreteRun
from fedjax_clust.tasks.base import Task


def attack_kinds(grid: Mapping, batching: str, attack_switch: Union[bool, str]) -> tuple:
    """The attack kinds of ``grid["attack"]`` whose runs share a switching program (() for none)."""
    if not isinstance(attack_switch, bool) and attack_switch != "auto":
        raise ValueError(f"attack_switch must be True, False or 'auto', got {attack_switch!r}")
    if attack_switch is False or "attack" not in grid:
        return ()
    return switchable_attacks(grid["attack"], "map" if attack_switch is True else batching)


def program_chunks(
    concrete: Sequence[ConcreteRun],
    full_grid: Mapping,
    traced_names: list,
    runs_per_program,
    batching: str,
    skip=None,
    kinds=(),
) -> list:
    """The runs of each compiled program (indices into ``concrete``). A program is built from its first run's
    task: runs whose static values differ, or whose tasks differ in what is not a vmapped array (which clients
    attack or are outliers at all, the true clusters, the arrays' shapes), are separate programs, each
    split into chunks of at most ``runs_per_program`` runs. Which clients attack or are outliers is a
    per-run argument (:meth:`~fedjax_clust.tasks.base.Task.masks`), and the task values that choose them only
    (:data:`BYZANTINE_KEYS`) are no static values: a sweep over the attackers' share and seeds is one program
    per static combination. So is the attack's kind among ``kinds`` (:func:`attack_kinds`): those runs share
    one switching program. Runs in ``skip`` (identical to another run) are left out."""
    groups: dict = {}
    for i, run in enumerate(concrete):
        if skip and i in skip:  # a run identical to another (identical_runs): computed once, as that one
            continue
        static_key = tuple(
            (n, _static_label(n, run.values[n], kinds))
            for n in full_grid
            if n not in traced_names and n not in BYZANTINE_KEYS
        ) + _task_masks(run.task)
        groups.setdefault(static_key, []).append(i)
    chunks: list = []
    for indices in groups.values():
        first = concrete[indices[0]]
        size = _runs_per_program(runs_per_program, first.algorithm, first.task, len(indices), batching)
        chunks.extend(indices[lo : lo + size] for lo in range(0, len(indices), size))
    return chunks


def _static_label(name: str, value, kinds: tuple) -> str:
    """What of a swept ``value`` decides its program: an attack among the switched ``kinds`` none (one switching
    program), an attack with numbers its kind (:meth:`~fedjax_clust.robust.registry.Attack.kind`: the numbers are
    arguments), anything else itself."""
    if name == "attack" and value in kinds:
        return "switch"
    numbered = numbered_attack(value) if name == "attack" else None
    if numbered is not None:
        return repr(numbered.kind())
    return repr(value)


def numbered_attack(value) -> Optional[Attack]:
    """``value`` as an attack when it has numbers (scale, z, epsilon, ...) a program takes as arguments: an attack
    from ``make_attack``, or a name written with its options (``"ipm(epsilon=5.0)"``, the command line's)."""
    if isinstance(value, str) and "(" in value:
        value = make_attack(value)
    return value if isinstance(value, Attack) and value.numbers() else None


def attack_numbers_of(value) -> dict:
    """The numbers of an attack of a numbered kind (:func:`numbered_attack`)."""
    attack = numbered_attack(value)
    return {} if attack is None else attack.numbers()


def _task_masks(task: Task) -> tuple:
    """What a program fixes of its task beyond its arguments, for a grouping key: whether it has Byzantine and
    outlier masks (the masks themselves are arguments, :meth:`~fedjax_clust.tasks.base.Task.masks`, so runs that
    differ only in which clients attack share a program) and the true clusters (as bytes: Ground-truth's groups
    and the cluster tracking are built from them)."""
    true_clusters = None if task.true_clusters is None else np.asarray(task.true_clusters).tobytes()
    return (task.byzantine is None, task.outliers is None, true_clusters, _array_shapes(task))


def _array_shapes(task: Task) -> tuple:
    """The structure, shapes and dtypes of a task's arrays (:meth:`~fedjax_clust.tasks.base.Task.arrays`): seeds
    whose tasks differ in them (a partition whose largest client depends on the seed, a ragged batch's buckets)
    cannot share a program, which takes its runs' arrays stacked."""
    leaves, structure = jax.tree_util.tree_flatten(task.arrays())
    return (str(structure), tuple((tuple(np.shape(x)), str(getattr(x, "dtype", type(x).__name__))) for x in leaves))


def _runs_per_program(setting, algo, task, num_runs, batching: str = "vmap"):
    """The runs one program may hold: the setting, or with "auto" the budget over one run's compiled bytes (a
    mapped program holds one run's temporaries at a time, and every run's state twice: in and out)."""
    if setting is None:
        return num_runs
    if setting != "auto":
        return setting
    budget = default_memory_budget()
    arrays = [x for x in jax.tree.leaves((task.data, task.test_data)) if hasattr(x, "nbytes")]
    state = jax.eval_shape(lambda: algo.init(task.init_params(jax.random.PRNGKey(0)), task.num_clients))
    rough = sum(x.nbytes for x in arrays) + sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
    if num_runs * 16 * rough <= budget and not algo.execution.budgeted:
        # far below the budget (16x the run's arrays and state) and no temporaries sized by a budget of the
        # algorithm's own (Federated-Clustering's cross-gradient chunks): no need to compile to know
        return num_runs
    try:  # compiled from shapes: nothing allocated, and a pooled population's images need not be built
        data = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), task.data)
        compiled = jax.jit(algo.round).lower(state, data, jax.random.PRNGKey(0)).compile()
        stats = compiled.memory_analysis()
        if stats is None:
            return num_runs
        temporaries = stats.temp_size_in_bytes
        per_run = temporaries + stats.argument_size_in_bytes + stats.output_size_in_bytes
    except Exception:  # no memory analysis on this backend: one program
        return num_runs
    if batching == "map":  # one run's temporaries at a time
        per_run -= temporaries
        budget -= temporaries
    return max(1, min(num_runs, int(budget // max(per_run, 1))))
