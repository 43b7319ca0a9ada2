"""An algorithm's numbers as the arguments of its compiled programs, so that runs differing only in them share one.

``make_algorithm`` bakes every hyperparameter into the functions it returns: jit-compiling an algorithm's round
compiles its learning rate, momentum, radius, ... in as constants, and two runs that differ only in the learning
rate compile twice (in one process, and in the persistent compilation cache across processes: the programs are
not the same). A sweep avoids that by building the algorithm inside its program with the numbers it varies as
traced scalars (:mod:`fedjax_clust.run.sweep`); this module gives every driver the same for one algorithm.

``make_algorithm`` records how it built an algorithm (:class:`Origin`: the name, the task, the hyperparameter
record and the functions it returned). :func:`numbered` then gives

    numbers = {field: float32 scalar}   the record's traced fields (numbers, not shapes; see
                                        :mod:`fedjax_clust.algorithms.hyperparameter_record`) that hold a
                                        nonzero number
    build(numbers) -> FederatedAlgorithm   make_algorithm(name, task, record.replace(**numbers))

and a driver jit-compiles ``lambda numbers, state, ...: build(numbers).round(state, ...)``, calling it with
``numbers``: the compiled program takes them as arguments, and a run with another learning rate (same shapes,
same static fields) is the same program (:func:`fedjax_clust.simulate` does this). :func:`shared_program` keeps
one such jitted program per task and configuration (every field but the numbers), so a Python loop over learning
rates, each its own ``make_algorithm`` and ``simulate``, compiles once; across processes the persistent
compilation cache finds the same program.

Choices, each what a sweep does for the numbers it varies:

- the numbers are float32 (the precision every round computes in); a value the builder turns into another
  number in Python (``1 - beta``, a quantile's rank ``floor((N - 1) q) + 1``) is then computed in float32 inside
  the program, not in float64 outside it. Results agree with the constant build to float32 rounding (tested for
  every registered algorithm); the quantile's rank differs only where (N - 1) q lies within 1e-4 below an
  integer.
- a zero stays a constant: a zero may remove a computation and its state (momentum 0 keeps no momentum
  buffer), which a traced zero would add back.
- an algorithm ``make_algorithm`` did not build, or whose ``init`` / ``apply`` / ``evaluate_fn`` / precision /
  unseen rule a wrapper replaced after it did (a user's own wrapper: rebuilding would drop it), is not numbered:
  :func:`numbered` returns None and a driver compiles it with its numbers as constants, as before.

The rebuild runs ``make_algorithm`` again at trace time (its checks pass traced values, see
:mod:`fedjax_clust.core.validation`); what the run records (``hparams``, its privacy ledger, its
``execution``) is the algorithm's own, built with the concrete values. A builder (a plugin's) that uses a float
option as a Python value (an ``if``, a shape) fails to trace: :func:`numbers_traced` says which option to mark
``Static[float]`` (:mod:`fedjax_clust.core.hyperparameter_kinds`), what a sweep over it already needed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import numbers as _numbers
import weakref
from typing import Any, Callable, Mapping, NamedTuple, Optional

import jax
import numpy as np

from fedjax_clust.core.algorithm import FederatedAlgorithm

__all__ = ["Origin", "Numbered", "numbered", "with_origin", "program_numbers", "shared_program", "numbers_traced"]


@dataclasses.dataclass(frozen=True, eq=False)
class Origin:
    """How ``make_algorithm`` built an algorithm: its registered ``name``, the ``task`` and the hyperparameter
    ``record`` it was built for, and the ``functions`` it returned (``init``, ``apply``, ``evaluate_fn`` and the
    matmul precision and the unseen-client rule), which tell whether the algorithm a driver holds is still that
    one. ``programs`` keeps its compiled programs when they cannot be shared (:func:`shared_program`)."""

    name: str
    task: Any
    record: Any
    functions: tuple
    programs: dict = dataclasses.field(default_factory=dict, repr=False)


class Numbered(NamedTuple):
    """An algorithm with its numbers as arguments: ``numbers`` (``{field: float32 scalar}``, NumPy) and
    ``build(numbers)``, the algorithm built with them (traced inside a program, or concrete)."""

    numbers: dict
    build: Callable[[dict], FederatedAlgorithm]
    origin: Origin


def _functions(algorithm: FederatedAlgorithm) -> tuple:
    return (algorithm.init, algorithm.apply, algorithm.evaluate_fn, algorithm.matmul_precision, algorithm.unseen)


def with_origin(algorithm: FederatedAlgorithm, name: str, task) -> FederatedAlgorithm:
    """``algorithm`` (just built by ``make_algorithm(name, task, ...)``, its record set) with its :class:`Origin`."""
    origin = Origin(name, task, algorithm.hyperparameters, _functions(algorithm))
    return algorithm._replace(origin=origin)


def _is_number(value) -> bool:
    return isinstance(value, _numbers.Real) and not isinstance(value, (bool, np.bool_))


def program_numbers(record) -> dict:
    """``{field: float32}`` of ``record``'s traced fields holding a nonzero number (module docstring)."""
    return {
        name: np.float32(value)
        for name, value in record.traced_part().items()
        if _is_number(value) and value != 0 and np.isfinite(value)
    }


@contextlib.contextmanager
def numbers_traced(name: str, numbers: dict):
    """Re-raises JAX's error for a traced value used as a Python one (in ``name``'s builder or round, traced with
    ``numbers``: a number in an ``if``, or a check that computes with jax.numpy) as a TypeError that says what to do."""
    try:
        yield
    except jax.errors.ConcretizationTypeError as error:
        raise TypeError(
            f"algorithm {name!r}: built with its numbers {sorted(numbers)} as a compiled program's traced float32 "
            "arguments (fedjax_clust.algorithms.numbered), it turned a traced value into a Python one: mark such a "
            "parameter Static[float] in the builder's signature if it is used in an `if` or a shape "
            "(fedjax_clust.core.hyperparameter_kinds), and check array options with NumPy, not jax.numpy"
        ) from error


def numbered(algorithm: FederatedAlgorithm) -> Optional[Numbered]:
    """``algorithm`` with its numbers as arguments (:class:`Numbered`), or None when it cannot be rebuilt (built
    by hand, wrapped after ``make_algorithm``) or has no such numbers (module docstring)."""
    origin = getattr(algorithm, "origin", None)
    if not isinstance(origin, Origin) or origin.record is not algorithm.hyperparameters:
        return None
    now = _functions(algorithm)
    if any(now[i] is not origin.functions[i] for i in (0, 1, 2, 4)) or now[3] != origin.functions[3]:
        return None  # a wrapper replaced a function, the precision or the unseen rule after make_algorithm
    values = program_numbers(origin.record)
    if not values:
        return None

    def build(numbers: dict) -> FederatedAlgorithm:
        from fedjax_clust.algorithms import make_algorithm

        with numbers_traced(origin.name, numbers):
            return make_algorithm(origin.name, origin.task, origin.record.replace(**numbers))

    return Numbered(values, build, origin)


# task -> {configuration key: (weak references to the tasks it was made for, jitted program)}: an entry leaves with
# the task it is filed under, and holds its tasks weakly and only plain values otherwise (the table keeps no task alive)
_PROGRAMS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class _NotPlain(Exception):
    """A field's value that a key cannot hold by value (a function, a sampler, a rule object of unknown shape)."""


class _Same:
    """A registry's spec inside a key, compared by identity: a re-registered algorithm or rule is another program."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other) -> bool:
        return isinstance(other, _Same) and other.value is self.value


def _plain(value):
    """``value`` as a key that equals another's exactly when the two build the same program: numbers, strings,
    None and booleans by type and value, sequences and mappings item by item, arrays by dtype, shape and a digest
    of their bytes, an attack or aggregator by its name, its registry spec (identity) and its options; anything
    else raises :class:`_NotPlain`."""
    if value is None or isinstance(value, (bool, int, float, str, np.generic)):
        return (type(value).__name__, value)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_plain(v) for v in value))
    if isinstance(value, Mapping):
        return ("mapping", tuple(sorted((str(k), _plain(v)) for k, v in value.items())))
    if isinstance(value, (np.ndarray, jax.Array)):
        array = np.ascontiguousarray(np.asarray(value))
        return ("array", str(array.dtype), array.shape, hashlib.sha1(array.tobytes()).hexdigest())
    name = getattr(value, "attack_name", None) or getattr(value, "aggregator_name", None)
    spec, options = getattr(value, "spec", None), getattr(value, "options", None)
    if isinstance(name, str) and spec is not None and isinstance(options, Mapping):
        return ("rule", name, _Same(spec), _plain(dict(options)))
    raise _NotPlain(type(value).__name__)


def _rule_spec(field: str, value):
    """The registry spec an attack or aggregator given by name resolves to now (a plugin may be re-registered)."""
    from fedjax_clust.robust import make_aggregator, make_attack

    try:
        return _Same((make_attack if field == "attack" else make_aggregator)(value).spec)
    except ValueError:
        raise _NotPlain(value) from None


def _configuration_key(origin: Origin, numbers: dict) -> tuple:
    """Everything but the numbers' values that the programs of ``origin``'s algorithm compile in: its registry
    spec (identity), its precision, which fields are numbers, and every other field's value (:func:`_plain`; an
    attack or aggregator name with the spec it resolves to). Raises :class:`_NotPlain` for a value it cannot hold."""
    from fedjax_clust.algorithms.registry import algorithm_spec

    fields = []
    for name, value in sorted(origin.record.options().items()):
        if name in numbers:
            continue
        fields.append((name, _plain(value)))
        if name in ("attack", "aggregator") and isinstance(value, str):
            fields.append((name + " spec", _rule_spec(name, value)))
    return (origin.name, _Same(algorithm_spec(origin.name)), origin.functions[3], tuple(sorted(numbers)), tuple(fields))


def shared_program(numbered_: Numbered, kind: str, make: Callable, *tasks) -> Callable:
    """``make(build, *task_refs)``: the jitted program ``kind`` of ``numbered_``'s algorithm, made once per task it
    was built for, configuration (:func:`_configuration_key`) and ``tasks`` (the driver's own tasks the program
    reads, by identity), and shared by every algorithm with those: two ``make_algorithm`` calls that differ only in
    a number get the same jitted function, traced and compiled once. ``build(numbers)`` builds the algorithm and
    ``task_refs`` are weak references to ``tasks`` (call them inside the program); neither keeps a task alive. An
    algorithm with a field a key cannot hold by value (a function, a participation rule's sampler) keeps its
    programs to itself (on its :class:`Origin`: a second run of the same algorithm reuses them)."""
    origin = numbered_.origin
    every = (origin.task, *tasks)
    try:
        config = _configuration_key(origin, numbered_.numbers)
        table = _PROGRAMS.setdefault(every[-1], {})  # filed under the driver's task: it leaves with it
    except _NotPlain:
        config, table = None, origin.programs
    key = (kind, config, tuple(id(t) for t in every))
    held = table.get(key)
    if held is not None and all(ref() is t for ref, t in zip(held[0], every)):
        return held[1]
    refs = tuple(weakref.ref(t) for t in every)
    record, name = origin.record, origin.name

    def build(numbers: dict) -> FederatedAlgorithm:
        from fedjax_clust.algorithms import make_algorithm

        with numbers_traced(name, numbers):
            return make_algorithm(name, refs[0](), record.replace(**numbers))

    program = make(build, *refs[1:])
    table[key] = (refs, program)
    return program
