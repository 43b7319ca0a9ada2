"""FLOPs and memory traffic of a traced program, counted from its jaxpr with every loop body times its trip count.

XLA's ``compiled.cost_analysis()`` counts the body of a loop once: a round whose Threshold-Clustering runs 10
steps in a ``fori_loop`` reports one step, and a cross-gradient evaluated in chunks by ``lax.map`` reports one
chunk (so its figure *falls* as N grows and the chunks shrink). :func:`count` walks the program's jaxpr instead
(``jax.make_jaxpr``, every ``vmap`` already applied, so shapes are the batched ones):

* ``scan`` (``lax.scan``, ``lax.map``, and ``fori_loop`` with static bounds) counts its body ``length`` times;
* ``while`` (a data-dependent loop: an order-statistic search, label propagation) counts its body and
  condition once; each such loop is listed in ``Cost.open_loops`` with its cost per iteration, so a reader
  knows what the total leaves out;
* ``cond`` / ``switch`` count the branch taken when its index follows from known values (literals, a
  closed jaxpr's small constants, what was folded from them: a staged round's ``round >= t``), else the
  branch with the most FLOPs (its bytes need not be the most), recording what that may overstate;
* calls (``jit``, ``remat``, ``custom_jvp_call``, ``custom_vjp_call``, ...) count their inner jaxpr, and
  ``shard_map`` its per-shard jaxpr times the number of shards.

Per operation, float32 or not:

==========================================  ========================================  ========================
operation                                    FLOPs                                      bytes (memory traffic)
==========================================  ========================================  ========================
``dot_general``                              2 x output elements x contracted size      inputs + output
``conv_general_dilated``                     2 x output elements x (C_in / groups) x    inputs + output
                                             kernel window
reductions (``reduce_*``, ``argmax``,        input elements                             input + output
``cum*``)
``sort``                                     n log2 n per sorted row                    2 x operands
``gather``, ``dynamic_slice``                0                                          2 x output + indices
``scatter*``, ``dynamic_update_slice``       updates' elements (``scatter-add``)        2 x updates + indices
``concatenate``, ``transpose``, ``pad``      0                                          2 x output
elementwise arithmetic and comparisons       output elements (a transcendental: 1)      0 (fused)
shape and type changes (broadcast, reshape,  0                                          0
convert, slice, iota, ...)
==========================================  ========================================  ========================

The bytes are what a fused program's kernels read and write: XLA fuses elementwise chains into the kernels that
produce or consume them, so they move no bytes of their own, while a matmul, a reduction or a gather reads its
operands from memory and writes its result (a Threshold-Clustering step re-reads the [N, N, D] gradient block:
``steps`` x its bytes). It is a model, not a measurement: a fusion that keeps an operand in cache moves less, and
an elementwise op reading a program input moves bytes counted nowhere.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import jax
import jax.extend
import numpy as np

__all__ = ["Cost", "count", "count_jaxpr", "has_loops"]

_ELEMENTWISE = frozenset(
    """add sub mul div rem pow integer_pow max min neg abs sign floor ceil round nextafter exp exp2 log log1p expm1
    tanh logistic sin cos tan asin acos atan atan2 sinh cosh asinh acosh atanh sqrt rsqrt cbrt square reciprocal
    erf erfc erf_inv lgamma digamma igamma igammac random_gamma_grad bessel_i0e bessel_i1e select_n clamp eq ne lt
    le gt ge and or xor not shift_left shift_right_logical shift_right_arithmetic population_count clz is_finite
    conj real imag complex copy copy_p reduce_precision""".split()
)
_REDUCTIONS = frozenset(
    """reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or reduce_xor argmax argmin cumsum cumprod
    cummax cummin cumlogsumexp""".split()
)
_READ_OUTPUT = frozenset(["gather", "dynamic_slice"])
_WRITE_UPDATES = frozenset(["scatter", "scatter-add", "scatter_add", "scatter-mul", "scatter-min", "scatter-max"])
_WRITE_UPDATES |= frozenset(["scatter_mul", "scatter_min", "scatter_max", "dynamic_update_slice"])
_MOVES = frozenset(["concatenate", "transpose", "pad", "rev", "select_and_scatter_add", "reduce_window_sum"])


@dataclasses.dataclass(frozen=True)
class Cost:
    """FLOPs and bytes of memory traffic of a program (module docstring); ``kernels``: the operations that read
    or write memory (every one but elementwise and shape changes), each execution counted, what a launch
    overhead is paid for; ``open_loops``: one ``(primitive, flops, bytes)`` per data-dependent loop counted
    once, its cost per iteration; ``branches``: the ``cond`` / ``switch`` operations whose costliest branch was
    counted, and ``branch_flops`` / ``branch_bytes`` how much the count may exceed the branch taken (the
    costliest branch's cost less the cheapest's, summed)."""

    flops: float = 0.0
    bytes: float = 0.0
    kernels: float = 0.0
    open_loops: tuple = ()
    branches: int = 0
    branch_flops: float = 0.0
    branch_bytes: float = 0.0

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(
            self.flops + other.flops,
            self.bytes + other.bytes,
            self.kernels + other.kernels,
            self.open_loops + other.open_loops,
            self.branches + other.branches,
            self.branch_flops + other.branch_flops,
            self.branch_bytes + other.branch_bytes,
        )

    def times(self, k: float) -> "Cost":
        """The cost of ``k`` executions (a data-dependent loop or a branch inside is still listed once)."""
        return dataclasses.replace(
            self,
            flops=self.flops * k,
            bytes=self.bytes * k,
            kernels=self.kernels * k,
            branch_flops=self.branch_flops * k,
            branch_bytes=self.branch_bytes * k,
        )

    def branch_share(self) -> float:
        """The largest share of the counted FLOPs or bytes that lies in branches counted at their costliest (0
        when every branch taken was known): how far the count may overstate the program."""
        flops = self.branch_flops / self.flops if self.flops else 0.0
        moved = self.branch_bytes / self.bytes if self.bytes else 0.0
        return max(flops, moved)

    def intensity(self) -> float:
        """FLOPs per byte (inf for a program that moves nothing)."""
        return self.flops / self.bytes if self.bytes else math.inf


def _size(aval) -> int:
    return int(np.prod(aval.shape, dtype=np.int64)) if hasattr(aval, "shape") else 0


def _nbytes(aval) -> int:
    dtype = getattr(aval, "dtype", None)
    if dtype is None or not hasattr(aval, "shape"):
        return 0
    try:
        return _size(aval) * np.dtype(dtype).itemsize
    except TypeError:  # an extended dtype (PRNG keys): its key data
        return _size(aval) * 8


def _avals(atoms) -> list:
    return [a.aval for a in atoms if hasattr(a, "aval")]


def _dot_flops(eqn) -> float:
    (contract, _), _ = eqn.params["dimension_numbers"]
    lhs = eqn.invars[0].aval
    contracted = int(np.prod([lhs.shape[d] for d in contract], dtype=np.int64))
    return 2.0 * _size(eqn.outvars[0].aval) * contracted


def _conv_flops(eqn) -> float:
    rhs = eqn.invars[1].aval
    spec = eqn.params["dimension_numbers"].rhs_spec  # (out feature, in feature, spatial...)
    window = int(np.prod([rhs.shape[d] for d in spec[2:]], dtype=np.int64))
    return 2.0 * _size(eqn.outvars[0].aval) * rhs.shape[spec[1]] * window


def _sort_flops(eqn) -> float:
    aval = eqn.invars[0].aval
    axis = eqn.params.get("dimension", len(aval.shape) - 1)
    n = max(aval.shape[axis], 1) if aval.shape else 1
    return float(_size(aval)) * max(math.log2(n), 1.0)


def _leaf_cost(eqn) -> Cost:
    name = eqn.primitive.name
    ins, outs = _avals(eqn.invars), _avals(eqn.outvars)
    moved = float(sum(map(_nbytes, ins)) + sum(map(_nbytes, outs)))
    cost = _memory_op_cost(name, eqn, ins, outs, moved)
    if cost is not None:
        return dataclasses.replace(cost, kernels=1.0)
    if name in _ELEMENTWISE:
        return Cost(float(sum(map(_size, outs))), 0.0)
    return Cost()


def _memory_op_cost(name, eqn, ins, outs, moved):
    """The cost of an operation that reads or writes memory (a kernel of its own), None for any other."""
    if name == "dot_general":
        return Cost(_dot_flops(eqn), moved)
    if name == "conv_general_dilated":
        return Cost(_conv_flops(eqn), moved)
    if name in _REDUCTIONS:
        return Cost(float(sum(map(_size, ins))), moved)
    if name == "sort":
        return Cost(_sort_flops(eqn), 2.0 * sum(map(_nbytes, ins)))
    if name in _READ_OUTPUT:
        indices = sum(_nbytes(a) for a in ins[1:])
        return Cost(0.0, 2.0 * sum(map(_nbytes, outs)) + indices)
    if name in _WRITE_UPDATES:
        if name == "dynamic_update_slice":  # (operand, update, *start indices)
            updates, indices, combines = ins[1], sum(_nbytes(a) for a in ins[2:]), False
        else:  # (operand, indices, updates)
            updates, indices, combines = ins[2], _nbytes(ins[1]), name != "scatter"
        return Cost(float(_size(updates)) if combines else 0.0, 2.0 * _nbytes(updates) + indices)
    if name in _MOVES:
        return Cost(0.0, 2.0 * sum(map(_nbytes, outs)))
    return None


def _closed(jaxpr):
    return jaxpr.jaxpr if hasattr(jaxpr, "jaxpr") and hasattr(jaxpr, "consts") else jaxpr


def _shards(eqn) -> int:
    """The shards a ``shard_map`` runs its per-shard program on: the sizes of its manual mesh axes multiplied
    (all of the mesh's axes when it does not say; jax 0.10 names them ``newly_manual_axes``, earlier versions
    ``manual_axes`` or ``axis_names``)."""
    mesh = eqn.params.get("mesh")
    manual = next(
        (eqn.params[k] for k in ("newly_manual_axes", "manual_axes", "axis_names") if eqn.params.get(k)), None
    )
    shape = dict(getattr(mesh, "shape", {}) or {})
    if manual and shape:
        return int(np.prod([shape[a] for a in manual if a in shape], dtype=np.int64))
    return int(getattr(mesh, "size", 1) or 1)


_SMALL = 64  # values with at most this many elements are folded when their inputs are known


def _known(atom, env):
    """The concrete value of a jaxpr atom when known (a literal, or a value folded earlier), else None."""
    if isinstance(atom, jax.extend.core.Literal):
        return atom.val
    return env.get(atom) if isinstance(atom, jax.extend.core.Var) else None


def _fold(eqn, env) -> None:
    """Evaluate a small operation whose inputs are all known (a stage's ``round >= t``, a ``jit``-wrapped
    ``t % k``), recording its outputs; anything that does not evaluate eagerly (or is not an array: PRNG keys)
    stays unknown."""
    if any(_size(v.aval) > _SMALL for v in eqn.outvars) or eqn.primitive.name in ("scan", "while", "cond"):
        return
    values = [_known(a, env) for a in eqn.invars]
    if any(v is None for v in values):
        return
    try:
        with jax.ensure_compile_time_eval():
            out = eqn.primitive.bind(*values, **eqn.params)
        outs = out if eqn.primitive.multiple_results else [out]
        known = {var: np.asarray(value) for var, value in zip(eqn.outvars, outs)}
    except Exception:  # noqa: BLE001 -- a primitive that does not evaluate eagerly: left unknown
        return
    env.update(known)


def _passed(sub, operands, env) -> dict:
    """The known values of ``operands`` bound to the input variables of ``sub`` (a call's or a branch's jaxpr),
    when they line up one to one (else nothing is passed)."""
    invars = _closed(sub).invars
    if len(invars) != len(operands):
        return {}
    passed = {v: _known(a, env) for v, a in zip(invars, operands)}
    return {v: x for v, x in passed.items() if x is not None}


def count_jaxpr(jaxpr, known=None) -> Cost:
    """The :class:`Cost` of a ``Jaxpr`` or ``ClosedJaxpr`` (module docstring). ``known`` maps some of its input
    variables to concrete values: small operations on known values are evaluated as the walk goes, so a ``cond``
    whose branch index is known (a staged algorithm's stage, from a concrete round number) counts the branch
    taken instead of the costliest."""
    inner_jaxpr = _closed(jaxpr)
    env = dict(known or {})
    for var, const in zip(inner_jaxpr.constvars, getattr(jaxpr, "consts", ())):  # a closed jaxpr's small constants
        if np.size(const) <= _SMALL:
            env[var] = np.asarray(const)
    total = Cost()
    for eqn in inner_jaxpr.eqns:
        name = eqn.primitive.name
        if name == "scan":
            total += count_jaxpr(eqn.params["jaxpr"]).times(eqn.params["length"])
        elif name == "while":
            once = count_jaxpr(eqn.params["body_jaxpr"]) + count_jaxpr(eqn.params["cond_jaxpr"])
            total += dataclasses.replace(once, open_loops=once.open_loops + (("while", once.flops, once.bytes),))
        elif name == "cond":
            index, branches = _known(eqn.invars[0], env), eqn.params["branches"]
            if index is not None:
                taken = branches[int(np.clip(index, 0, len(branches) - 1))]
                total += count_jaxpr(taken, _passed(taken, eqn.invars[1:], env))
            else:
                costs = sorted((count_jaxpr(b) for b in branches), key=lambda c: (c.flops, c.bytes))
                costliest, cheapest = costs[-1], costs[0]
                total += dataclasses.replace(
                    costliest,
                    branches=costliest.branches + 1,
                    branch_flops=costliest.branch_flops + costliest.flops - cheapest.flops,
                    branch_bytes=costliest.branch_bytes + max(costliest.bytes - cheapest.bytes, 0.0),
                )
        else:
            inner = list(jax.extend.core.jaxprs_in_params(eqn.params))
            if inner:
                cost = Cost()
                for sub in inner:
                    cost += count_jaxpr(sub, _passed(sub, eqn.invars, env))
                total += cost.times(_shards(eqn)) if name == "shard_map" else cost
                _fold(eqn, env)  # a small call on known values (jax wraps ``%`` in one): its outputs are known
            else:
                _fold(eqn, env)
                total += _leaf_cost(eqn)
    return total


def count(fn: Callable, *args: Any, **kwargs: Any) -> Cost:
    """The :class:`Cost` of ``fn(*args, **kwargs)`` (traced with ``jax.make_jaxpr``: shapes suffice, e.g.
    ``jax.ShapeDtypeStruct``)."""
    return count_jaxpr(jax.make_jaxpr(fn)(*args, **kwargs))


def has_loops(jaxpr) -> bool:
    """Whether a program has a loop (``scan`` or ``while``) anywhere: where XLA's own cost analysis, which counts
    a loop body once, undercounts."""
    for eqn in _closed(jaxpr).eqns:
        if eqn.primitive.name in ("scan", "while"):
            return True
        if any(has_loops(sub) for sub in jax.extend.core.jaxprs_in_params(eqn.params)):
            return True
    return False
