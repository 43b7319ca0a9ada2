"""Many rounds in one compiled program: the rounds between two evaluations run as one ``lax.fori_loop``.

A round is a pure function ``round(state, data, key) -> (state, metrics)``; round t (1-based) uses the
key ``fold_in(round_key, t)`` (see :mod:`fedjax_clust.run.simulate`). :func:`fuse_rounds` compiles

    run(state, data, round_key, first, count) -> (state after rounds first .. first + count - 1,
                                                   metrics of the last of them)

with ``first`` and ``count`` traced, so one compilation serves every stretch of rounds (the round is traced
once, with ``jax.make_jaxpr``: its jaxpr is the loop body and gives the shapes of the metrics carried): the Python loop
wakes up only to evaluate, log, move the progress bar and checkpoint. The loop body is the round itself,
and its keys are the ones the round-by-round loop uses (``fold_in`` of a traced t equals that of the
Python int), so a fused run computes the same numbers (tested equal).

The state is donated (``donate=True``, what ``simulate`` and ``sweep`` use, through :func:`consuming_step`): the
compiled loop writes its output into the input's buffers, so a stretch holds the state once and copies none of
it. Without donation XLA copies the input into the loop's carry on every call, and the device holds the state
twice: for a personalised algorithm with a row per client of a real model that copy is the round's main cost
(``bench --suite streaming``'s resident rows).

Launch overhead: a round launched from Python costs ~0.2-0.7 ms on a CPU and ~1 ms on a GPU on top of
its work (dispatch, argument handling, the host sync that times it); inside the loop it costs one loop
iteration. :class:`RoundChunker` picks how many rounds each call runs so that a call takes about
``target_seconds`` (the progress bar keeps moving on long runs) and never crosses an evaluation or
checkpoint round.
"""

from __future__ import annotations

import types
from typing import Callable, Optional

import jax
import jax.extend
import jax.numpy as jnp
from jax import lax

from fedjax_clust.algorithms.numbered import numbered, numbers_traced, shared_program

__all__ = ["fuse_rounds", "rounds_program", "RoundChunker", "consuming_step", "donatable"]


_CACHE_ATTRIBUTE = "_fedjax_clust_fused_rounds"  # on a round function: {donate: its jitted fused loop}


def fuse_rounds(round_fn: Callable, *, jit: bool = True, donate: bool = False) -> Callable:
    """``run(state, data, round_key, first, count) -> (state, last round's metrics)``: rounds
    ``first .. first + count - 1`` of ``round_fn`` in one ``lax.fori_loop`` (``count >= 1``), round t with
    key ``fold_in(round_key, t)``. ``first`` and ``count`` are traced (one compilation for all stretches).
    ``jit=False`` returns the traceable function (to vmap it over runs, see :mod:`fedjax_clust.run.sweep`);
    ``donate`` compiles it with the state donated (it consumes the ``state`` passed in: run it through
    :func:`consuming_step`).

    For a plain function ``round_fn`` (every registered algorithm's round) the jitted function is made once per
    ``round_fn`` and ``donate`` and kept on the function itself (an attribute, ``_fedjax_clust_fused_rounds``),
    so a second run of the same algorithm (another ``simulate`` call, a resume) reuses its compiled loop: no new
    trace, no new compilation. The function and its loop refer to each other, and Python's garbage collector
    frees both once nothing else holds either (no process-wide table keeps an algorithm alive).
    """
    if not jit:
        return _fused(round_fn)
    if not isinstance(round_fn, types.FunctionType):  # a bound method or callable object: built afresh each time
        return jax.jit(_fused(round_fn), donate_argnums=(0,) if donate else ())
    per_fn = round_fn.__dict__.setdefault(_CACHE_ATTRIBUTE, {})
    if donate not in per_fn:
        per_fn[donate] = jax.jit(_fused(round_fn), donate_argnums=(0,) if donate else ())
    return per_fn[donate]


def rounds_program(algorithm) -> tuple:
    """``(program, before)``: the compiled loop of ``algorithm``'s rounds that ``simulate`` runs, called as
    ``program(*before, state, data, round_key, first, count)`` with the state donated (through
    :func:`consuming_step`). ``before`` holds the algorithm's numbers when it can be rebuilt with them as the
    program's arguments (:mod:`fedjax_clust.algorithms.numbered`: one program per task and configuration, shared
    by runs that differ only in a number), and is empty for an algorithm whose numbers are compiled in
    (:func:`fuse_rounds` of its round)."""
    numbered_ = numbered(algorithm)
    if numbered_ is None:
        return fuse_rounds(algorithm.round, donate=True), ()
    return shared_program(numbered_, "rounds", _numbered_loop), (numbered_.numbers,)


def _numbered_loop(build: Callable) -> Callable:
    """``run(numbers, state, data, round_key, first, count)``: the fused loop of the algorithm built with
    ``numbers`` (traced), jitted with the state donated."""

    def run(numbers, state, data, round_key, first, count):
        algorithm = build(numbers)
        with numbers_traced(algorithm.name, numbers):
            return _fused(algorithm.round)(state, data, round_key, first, count)

    return jax.jit(run, donate_argnums=1)


def _fused(fn) -> Callable:
    """The traceable fused loop of :func:`fuse_rounds` over the round function ``fn``."""

    def run(state, data, round_key, first, count):
        first = jnp.asarray(first, jnp.int32)
        # trace the round once: its jaxpr gives the metrics' shapes for the carry and is the loop body
        closed, shapes = jax.make_jaxpr(fn, return_shape=True)(state, data, round_key)
        round_jaxpr = jax.extend.core.jaxpr_as_fun(closed)
        out_tree = jax.tree.structure(shapes)

        def body(i, carry):
            state, _ = carry
            leaves = jax.tree.leaves((state, data, jax.random.fold_in(round_key, first + i)))
            return jax.tree.unflatten(out_tree, round_jaxpr(*leaves))

        metrics = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes[1])
        return lax.fori_loop(0, jnp.asarray(count, jnp.int32), body, (state, metrics))

    return run


def _buffers(x) -> tuple:
    """The device buffers of an array (one per addressable shard); none for a host value. An array whose shards
    cannot be read here (a PRNG key array spread over processes) stands for itself."""
    if not isinstance(x, jax.Array):
        return ()
    try:
        return tuple((s.device.id, s.data.unsafe_buffer_pointer()) for s in x.addressable_shards)
    except (ValueError, TypeError, RuntimeError):
        return (("array", id(x)),)


def donatable(state, *inputs):
    """``state`` with each device leaf that shares a buffer with an earlier leaf of ``state`` or with a leaf of
    ``inputs`` (the compiled call's other arguments) replaced by a copy, every other leaf as it is: a call that
    donates ``state`` then consumes no buffer that it also reads, nor one buffer twice (XLA refuses both)."""
    seen = {b for x in jax.tree.leaves(inputs) for b in _buffers(x)}

    def own(x):
        buffers = _buffers(x)
        if any(b in seen for b in buffers):
            x = jnp.copy(x)
            buffers = _buffers(x)
        seen.update(buffers)
        return x

    return jax.tree.map(own, state)


def consuming_step(program: Callable, before: tuple = (), after: tuple = (), keep=()) -> Callable:
    """``step(state, first, count) = program(*before, state, *after, first, count)`` for the loop
    (:func:`~fedjax_clust.run.loop.run_loop`), ``program`` jitted with the state donated
    (``donate_argnums=len(before)``, e.g. :func:`fuse_rounds` with ``donate=True``): each call consumes the
    state it is given, whose buffers become the returned state's.

    The first state passed is made :func:`donatable` against ``before``, ``after`` and ``keep`` (arrays the
    caller goes on using: the initial parameters, the task's arrays); later ones are the program's own outputs.
    Other arrays that share its buffers would be consumed too, so ``FederatedAlgorithm.start`` returns fresh
    arrays (a contract test runs every registered algorithm through this step twice), and a callback that keeps
    ``loop.state`` beyond its hook copies it. The loop takes the returned state with Ctrl-C held, so an
    interrupt finds it holding the stretch's (future) state, not the consumed one (a second Ctrl-C in that
    instant is the exception: see :func:`~fedjax_clust.run.loop.run_loop`)."""
    first_call = [True]

    def step(state, first, count):
        if first_call[0]:
            state = donatable(state, before, after, keep)
            first_call[0] = False
        return program(*before, state, *after, first, count)

    return step


class RoundChunker:
    """How many rounds the next fused call runs, from round ``t`` on.

    A call stops at the next round in ``stops(t)`` (evaluation, checkpoint, last round) and at
    ``max_rounds`` (None: no cap) rounds; within that, the first call runs one round (it includes the
    compilation), and every later call doubles the stretch until a call takes about ``target_seconds``,
    re-estimated from the measured seconds per round of the previous calls.
    """

    def __init__(self, target_seconds: float = 0.5, max_rounds: Optional[int] = None):
        self.target_seconds = target_seconds
        self.max_rounds = max_rounds
        self.size = 1
        self.calls = 0

    def next(self, t: int, stop: int) -> int:
        """Rounds to run from round t (1-based), ending at or before round ``stop``."""
        count = max(1, min(self.size, stop - t + 1))
        if self.max_rounds is not None:
            count = min(count, self.max_rounds)
        return count

    def stretches(self, first: int, last: int, eval_every: int, checkpoint_every: Optional[int] = None):
        """Yield (first round, number of rounds) of each call from round ``first`` to ``last``: a call never
        crosses a multiple of ``eval_every`` or ``checkpoint_every``, nor ``last``; its length is
        :meth:`next`'s, so :meth:`record` each call's time before asking for the next."""
        t = first
        while t <= last:
            stop = min(_next_multiple(t, eval_every), last)
            if checkpoint_every is not None:
                stop = min(stop, _next_multiple(t, checkpoint_every))
            count = self.next(t, stop)
            yield t, count
            t += count

    def record(self, count: int, seconds: float) -> None:
        """Adapt after a call of ``count`` rounds that took ``seconds``."""
        self.calls += 1
        if self.calls == 1:  # compilation: just grow
            self.size = 2
            return
        per_round = max(seconds / count, 1e-9)
        self.size = max(1, min(2 * max(self.size, count), int(self.target_seconds / per_round)))


def _next_multiple(t: int, every: int) -> int:
    """The first multiple of ``every`` at or after round t."""
    return -(-t // every) * every
