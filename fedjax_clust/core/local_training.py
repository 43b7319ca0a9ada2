"""Local training: every client of a round runs its own optimiser over its own examples, all clients at once.

:func:`local_training` takes each client's starting model (rows [S, ...], one per client of the round) and runs

* ``epochs=E``: E passes over each client's own examples (McMahan et al. 2017, Algorithm 1, ClientUpdate: the
  client's data split into batches of B, one step per batch). Each epoch draws a fresh permutation of the
  client's n_i examples and cuts it into ceil(n_i / B) batches, the last one holding the n_i mod B left over
  (a masked batch: its mean runs over its real examples); a client takes E ceil(n_i / B) steps, so a smaller
  client takes fewer: the round runs E ceil(n_max / B) steps and a client's steps past its own count are
  masked out (its model and optimiser state do not move). ``batch_size=None`` is one full-batch step per epoch;
* ``steps=tau``: tau steps, each on a fresh minibatch of B examples drawn without replacement
  (:func:`~fedjax_clust.core.batching.sample_minibatch`: a client holding fewer than B uses all of its own).

Each step's direction is the client loss's gradient f_i on the batch (a mean over its real examples), plus

* ``prox`` mu: mu (x - x_ref), the gradient of FedProx's proximal term (mu / 2) ||x - x_ref||^2 (Li et al.
  2020, eq. (2)) towards ``reference`` (the round's server model);
* ``correction``: a fixed per-client vector added to every step's gradient (SCAFFOLD's c - c_i, Karimireddy et
  al. 2020, Algorithm 1 line 10),

and the client optimiser (an optax transformation: :func:`~fedjax_clust.core.optim.client_optimizer`'s SGD,
momentum or Adam) turns it into the step; its state starts fresh at every round (``optimizer.init`` of the
start), as in FedAvg, where nothing but the model crosses rounds. Returns the rows after training, the steps
each client took and the examples its steps read (E n_i, or tau min(B, n_i)).

Who trains here: FedAvg and its family (:mod:`fedjax_clust.algorithms.fedavg`); IFCA's, CFL's and the 3-stage
algorithm's local steps (:func:`~fedjax_clust.core.batching.local_sgd_steps`, with ``combine``), Ditto's personal
steps (``prox``) and FedSoft's (``penalty``), each with the numbers of the loop it replaced, bit for bit.
Federated-Clustering's local steps stay its own: its clients' optimiser state (momentum) lives across rounds, and a
sharded round draws every client's minibatch from one key and keeps its own rows, which this engine (fresh state,
its own rows' data) does not do.

Chunks (``client_chunk``; the FedAvg family passes its ``client_chunk`` option, default "auto"; every other
caller trains all clients at once): on a CPU the clients train a chunk at a time, every step of the round on one chunk
before the next (:func:`resolve_client_chunk`), so a chunk's models, gradients and optimiser state stay in cache
across its steps instead of streaming all N clients' copies through memory at every step. Measured on a 2-core
VM (this function alone, five epochs of 8 examples, medians of 5 calls): 1,000 clients of a
784-32-10 MLP (100 KB each) take 0.29 s all at once and 0.17-0.20 s in chunks of 100 (10 MB); 200 clients of a
784-200-10 MLP 0.56 s and 0.40 s in chunks of 25 (16 MB); hence :data:`CHUNK_BYTES`. A round of two steps
per client gains nothing to reuse and pays the chunks' loop (``fedjax-clust bench --model fedavg``: 0.93x
for one epoch of two batches), hence :data:`CHUNK_MIN_STEPS`. The batches are drawn for
all clients first, exactly as the all-at-once path draws them; the models agree with it to float32 rounding (a
vectorised sum over a chunk may be ordered differently: a few ulp). On an accelerator every client trains at
once. A sweep that vmaps R runs makes each chunk R x CHUNK_BYTES, and an optimiser's state (Adam's two moments)
adds to a chunk's bytes; neither enters the choice.

Choice (documented): an epoch's batches follow one permutation per epoch (PyTorch's shuffling DataLoader, and
Algorithm 1's "split P_k into batches"); FedJAX's client datasets shuffle the E repeated epochs as one stream, so
a batch there may straddle two epochs. Both read every example E times.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import optax

from fedjax_clust.core.batching import (
    example_mask,
    largest_client,
    map_clients,
    minibatch_positions,
    sample_minibatch,
)
from fedjax_clust.core.keys import attack_key
from fedjax_clust.core.option_groups import option_group, take_legacy
from fedjax_clust.core.participants import keep_non_participants
from fedjax_clust.core.ragged_batch import RaggedBatch
from fedjax_clust.core.validation import check_int

PyTree = Any

__all__ = [
    "StepDirection",
    "PLAIN_GRADIENT",
    "CHUNK_BYTES",
    "CHUNK_MIN_STEPS",
    "CHUNK_PLAN_BYTES",
    "LocalResult",
    "client_sizes",
    "epoch_batches",
    "local_training",
    "resolve_client_chunk",
]

# the model rows of a chunk on a CPU under "auto", and the fewest steps per round it chunks (module docstring, "Chunks")
CHUNK_BYTES = 12 * 2**20
CHUNK_MIN_STEPS = 3
CHUNK_PLAN_BYTES = 64 * 2**20  # "auto" trains every client at once rather than hold a larger plan


class LocalResult(NamedTuple):
    """What :func:`local_training` returns: the trained rows, and per client the steps it took and the examples
    its steps read (int32 [S])."""

    params: PyTree
    steps: jax.Array
    examples: jax.Array


def client_sizes(data: PyTree) -> jax.Array:
    """int32 [N]: each client's number of real examples (a ragged batch's sizes, a padded dataset's mask count,
    or its second axis)."""
    if isinstance(data, RaggedBatch):
        return data.sizes.astype(jnp.int32)
    mask = example_mask(data)
    leaves = jax.tree.leaves(data)
    if mask is None:
        return jnp.full((leaves[0].shape[0],), leaves[0].shape[1], jnp.int32)
    return jnp.sum(mask, axis=1).astype(jnp.int32)


def epoch_batches(data: PyTree, batch_size: Optional[int]) -> int:
    """The batches one epoch of the largest client takes: ceil(n_max / B) (1 for a full batch)."""
    n_max = largest_client(data)
    if batch_size is None or batch_size >= n_max:
        return 1
    return -(-n_max // batch_size)


def _gather(data: PyTree, local: jax.Array, valid: jax.Array) -> PyTree:
    """The examples at each client's own positions ``local`` (int [N, B]), masked by ``valid`` (bool [N, B])."""
    if isinstance(data, RaggedBatch):
        return data.take_examples(data.starts[:, None] + local, valid)

    def take(x):
        return jnp.take_along_axis(x, local.reshape(local.shape + (1,) * (x.ndim - 2)), axis=1)

    batch = jax.tree.map(take, data)
    if isinstance(batch, Mapping):
        batch = {**batch, "mask": valid}
    return batch


@option_group(eq=False)  # compared by identity: it may hold models and functions
class StepDirection:
    """What every local step of :func:`local_training` makes of the clients' gradients g (an option group,
    :mod:`fedjax_clust.core.option_groups`): g, then ``combine(g, key)``, plus ``prox`` (x - reference), plus
    ``correction``, plus ``penalty(x)``; the default is the plain gradient.

    Args:
      prox: FedProx's mu >= 0 (a plain 0: no proximal term), with ``reference``.
      reference: the model (one, or rows) the proximal term pulls towards.
      correction: rows added to every step's gradient (SCAFFOLD's c - c_i).
      combine: ``combine(grads, key) -> directions`` of all rows' gradients (a cluster's aggregate: IFCA's and
        CFL's local steps; ``steps`` only).
      penalty: ``penalty(rows) -> rows``, the gradient of a further regulariser (FedSoft's pull).
    """

    prox: Any = 0.0
    reference: Any = None
    correction: Any = None
    combine: Optional[Callable] = None
    penalty: Optional[Callable] = None


PLAIN_GRADIENT = StepDirection()  # local_training's default: every step along the clients' own gradients


def local_training(
    grad_fn: Callable,
    start: PyTree,
    data: PyTree,
    key: jax.Array,
    *,
    optimizer: optax.GradientTransformation,
    epochs: Optional[int] = None,
    steps: Optional[int] = None,
    batch_size: Optional[int] = None,
    direction: StepDirection = PLAIN_GRADIENT,
    shuffle: bool = True,
    client_chunk: Union[None, int, str] = None,
    **legacy,
) -> LocalResult:
    """Train every row of ``start`` on its client's ``data`` (module docstring): ``epochs`` E passes or ``steps``
    tau minibatch steps (exactly one), with ``grad_fn(params, batch)`` the gradient of the client loss,
    ``optimizer`` the client optimiser and ``direction`` (a :class:`StepDirection`) what each step makes of the
    gradients: ``prox`` mu > 0 with ``reference`` (one model, or rows) FedProx's proximal
    pull, ``correction`` (rows) a per-client gradient offset and ``combine(grads, key)`` the directions each step
    makes of all rows' gradients (e.g. a cluster's aggregate: IFCA's and CFL's local steps; ``steps`` only);
    ``penalty(rows) -> rows`` the gradient of a further regulariser added to every step's (FedSoft's pull towards
    its clients' importance-weighted cluster models). ``shuffle=False``: every epoch reads a client's examples in
    their stored order (FedJAX's ``skip_shuffle``, for side-by-side checks; ``epochs`` only).

    ``client_chunk``: clients trained at a time (:func:`resolve_client_chunk`; "auto": on a CPU, as many as
    :data:`CHUNK_BYTES` of model rows hold; None (default) or "all": all at once, which the algorithms that
    moved onto this engine keep, bit for bit). Every batch is drawn for all clients first, as the all-at-once
    path draws it, so the models agree with it to float32 rounding. The keywords ``prox``, ``reference``,
    ``correction``, ``combine`` and ``penalty`` (``legacy``) are deprecated (0.3.0): ``direction``'s fields."""
    (direction,) = take_legacy("local_training", legacy, direction=direction)
    prox, reference, correction = direction.prox, direction.reference, direction.correction
    combine, penalty = direction.combine, direction.penalty
    if (epochs is None) == (steps is None):
        raise ValueError("local training takes epochs or steps, exactly one")
    proximal = not (isinstance(prox, (int, float)) and prox == 0)  # a plain zero: no proximal term at all
    if proximal and reference is None:
        raise ValueError("a proximal term needs the reference model it pulls towards")
    sizes = client_sizes(data)

    def step_direction(x, batch, k, reference, correction):
        g = map_clients(grad_fn, x, batch)
        if combine is not None:
            g = combine(g, attack_key(k))
        if proximal:
            g = jax.tree.map(lambda d, p, r: d + prox * (p - r), g, x, reference)
        if correction is not None:
            g = jax.tree.map(jnp.add, g, correction)
        if penalty is not None:
            g = jax.tree.map(jnp.add, g, penalty(x))
        return g

    def step(carry, batch, active, k, reference=reference, correction=correction):
        x, opt = carry
        updates, new_opt = jax.vmap(optimizer.update)(step_direction(x, batch, k, reference, correction), opt, x)
        stepped = (optax.apply_updates(x, updates), new_opt)
        return stepped if active is None else keep_non_participants(stepped, carry, active)

    if steps is not None:
        steps = check_int("steps", steps, 0)
    chunk = (
        None
        if combine is not None or penalty is not None
        else resolve_client_chunk(client_chunk, start, data, batch_size, steps, epochs)
    )
    if chunk is not None:
        plan = _batch_plan(data, key, epochs, steps, batch_size, shuffle, sizes)
        params = _train_in_chunks(step, start, optimizer, data, plan, chunk, reference, correction)
        return _result(params, sizes, epochs, steps, batch_size, data)
    carry = (start, jax.vmap(optimizer.init)(start))
    if steps is not None:

        def minibatch_step(s, carry):
            k = jax.random.fold_in(key, s)
            return step(carry, sample_minibatch(data, batch_size, k), None, k)

        params, _ = jax.lax.fori_loop(0, steps, minibatch_step, carry)
        return _result(params, sizes, epochs, steps, batch_size, data)

    if combine is not None:
        raise ValueError("combine applies to local steps, not epochs (a step's clients would read unequal batches)")
    epochs = check_int("epochs", epochs, 1)
    batches, width = _epoch_shape(data, batch_size)

    def epoch(e, carry):
        k = jax.random.fold_in(key, e)
        order = _epoch_order(data, k, sizes, batches, width, shuffle)

        def batch_step(b, carry):
            local = jax.lax.dynamic_slice_in_dim(order, b * width, width, axis=1)
            valid = b * width + jnp.arange(width) < sizes[:, None]
            return step(carry, _gather(data, local, valid), jnp.any(valid, axis=1), k)

        return jax.lax.fori_loop(0, batches, batch_step, carry)

    params, _ = jax.lax.fori_loop(0, epochs, epoch, carry)
    return _result(params, sizes, epochs, steps, batch_size, data)


def _epoch_shape(data: PyTree, batch_size: Optional[int]) -> tuple:
    """(batches per epoch, their width) of the largest client; a ValueError where a partial batch has no mask."""
    batches = epoch_batches(data, batch_size)
    width = largest_client(data) if batches == 1 or batch_size is None else batch_size
    if not isinstance(data, (RaggedBatch, Mapping)) and largest_client(data) % width:
        raise ValueError(
            f"epochs over clients of {largest_client(data)} examples in batches of {width} leave a partial batch, "
            "which needs a dict dataset (its 'mask' entry); give a batch size that divides it"
        )
    return batches, width


def _epoch_order(data, k, sizes, batches: int, width: int, shuffle: bool) -> jax.Array:
    """int32 [N, batches x width]: each client's example positions in one epoch's reading order (its real
    examples first, in a random order drawn from ``k`` or stored order), the tail past n_max padded."""
    n_max = largest_client(data)
    positions = jnp.arange(n_max)
    if shuffle:
        scores = jax.random.uniform(k, (sizes.shape[0], n_max))
        order = jnp.argsort(jnp.where(positions < sizes[:, None], scores, 2.0), axis=1).astype(jnp.int32)
    else:  # stored order: a padded client's real examples come first, a ragged one's are its own
        order = jnp.broadcast_to(positions.astype(jnp.int32), (sizes.shape[0], n_max))
    return jnp.pad(order, ((0, 0), (0, batches * width - n_max)))  # the last batch's tail: masked


def _result(params, sizes, epochs, steps, batch_size, data) -> LocalResult:
    if steps is not None:
        read = sizes if batch_size is None else jnp.minimum(sizes, batch_size)
        return LocalResult(params, jnp.full_like(sizes, steps), steps * read)
    _, width = _epoch_shape(data, batch_size)
    per_epoch = jnp.where(sizes > 0, -(-sizes // width), 0)
    return LocalResult(params, epochs * per_epoch, epochs * sizes)


def resolve_client_chunk(
    chunk, start: PyTree, data: PyTree, batch_size: Optional[int], steps, epochs: Optional[int] = None
) -> Optional[int]:
    """The clients one chunk trains (None: all at once). ``chunk`` None, a positive int, or "auto": on a CPU
    backend, when the round takes at least :data:`CHUNK_MIN_STEPS` steps (``steps``, or ``epochs`` x the
    batches of an epoch) and the batch plan (5 bytes per step, client and batch slot) fits
    :data:`CHUNK_PLAN_BYTES`, the clients whose model rows fill :data:`CHUNK_BYTES` (at least one; a divisor of N
    down to half of that when there is one), elsewhere None (an accelerator wants every client at once). None as
    well when one chunk would hold every client, and for a full pass over ragged clients (``steps`` with
    ``batch_size=None``), which runs size bucket by size bucket."""
    leaves = jax.tree.leaves(start)
    clients = int(leaves[0].shape[0])
    if isinstance(data, RaggedBatch) and steps is not None and batch_size is None:
        return None
    if chunk is None or chunk == "all":
        return None
    if steps is not None:
        rounds_steps, width = steps, batch_size or largest_client(data)
    else:
        batches = epoch_batches(data, batch_size)
        rounds_steps = (epochs or 1) * batches
        width = largest_client(data) if batches == 1 or batch_size is None else batch_size
    if rounds_steps == 0:
        return None
    if chunk == "auto":
        plan_bytes = 5 * rounds_steps * clients * min(width, largest_client(data))  # int32 positions + bool masks
        if jax.default_backend() != "cpu" or rounds_steps < CHUNK_MIN_STEPS or plan_bytes > CHUNK_PLAN_BYTES:
            return None
        row_bytes = sum(x.size // clients * x.dtype.itemsize for x in leaves)
        chunk = max(1, CHUNK_BYTES // max(row_bytes, 1))
        # a divisor of N down to half the target: the chunks are then a reshape of the rows (no copy)
        chunk = next((d for d in range(min(chunk, clients), (chunk + 1) // 2 - 1, -1) if clients % d == 0), chunk)
    else:
        chunk = check_int("client_chunk", chunk, 1)
    return None if chunk >= clients else chunk


class _Plan(NamedTuple):
    """Every step's batch for every client, drawn as the all-at-once path draws it: ``local`` int32 [S, N, B]
    (a ragged batch's flat rows, else positions in the client's own examples), ``valid`` bool [S, N, B],
    ``active`` bool [S, N] (None: every client steps every time)."""

    local: jax.Array
    valid: jax.Array
    active: Optional[jax.Array]


def _batch_plan(data, key, epochs, steps, batch_size, shuffle, sizes) -> _Plan:
    ragged = isinstance(data, RaggedBatch)
    if steps is not None:

        def draw(s):  # sample_minibatch's draw, or its whole-data batch as positions
            n = largest_client(data)
            if ragged or (batch_size is not None and batch_size < n):
                local, valid = minibatch_positions(data, batch_size, jax.random.fold_in(key, s))
                local = local.astype(jnp.int32)
                return (data.starts[:, None] + local if ragged else local), valid
            mask = example_mask(data)
            local = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (sizes.shape[0], n))
            return local, (jnp.ones(local.shape, bool) if mask is None else mask)

        local, valid = jax.lax.map(draw, jnp.arange(steps))  # one step's draw at a time: its scratch, not S x it
        return _Plan(local, valid, None)
    epochs = check_int("epochs", epochs, 1)
    batches, width = _epoch_shape(data, batch_size)
    orders = jax.lax.map(
        lambda e: _epoch_order(data, jax.random.fold_in(key, e), sizes, batches, width, shuffle), jnp.arange(epochs)
    )  # [E, N, batches x width]
    clients = sizes.shape[0]
    local = orders.reshape(epochs, clients, batches, width).transpose(0, 2, 1, 3).reshape(-1, clients, width)
    slots = jnp.arange(batches * width).reshape(batches, 1, width)
    valid = jnp.tile(slots < sizes[None, :, None], (epochs, 1, 1))  # [E batches, N, width]
    if ragged:
        local = data.starts[None, :, None] + local
    return _Plan(local, valid, jnp.any(valid, axis=2))


def _train_in_chunks(step, start, optimizer, data, plan: _Plan, chunk: int, reference, correction):
    """``step`` over the plan, ``chunk`` clients at a time. When chunk divides N, ``lax.map`` over the rows
    reshaped [N / chunk, chunk, ...] (the models' rows: no copy); else a loop whose c-th chunk trains clients
    [min(c chunk, N - chunk), + chunk) and writes them into the output in place (the last chunk overlaps the one
    before: a few clients trained twice, from the same batches, instead of padded copies of every array)."""
    clients = int(jax.tree.leaves(start)[0].shape[0])
    count = -(-clients // chunk)
    ragged = isinstance(data, RaggedBatch)
    with_mask = plan.active is not None or example_mask(data) is not None  # epochs' batches always carry one
    per_row = lambda tree: tree is not None and _has_client_axis(tree, start)  # noqa: E731

    def take(tree, lo, axis=0):
        return jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, lo, chunk, axis=axis), tree)

    def train(c, out):
        lo = jnp.minimum(c * chunk, clients - chunk)
        own = take(start, lo)
        source = data if ragged else take(data, lo)
        ref = take(reference, lo) if per_row(reference) else reference
        corr = take(correction, lo) if per_row(correction) else correction
        local, valid = take(plan.local, lo, 1), take(plan.valid, lo, 1)
        active = None if plan.active is None else take(plan.active, lo, 1)

        def one_step(s, carry):
            batch = _gather_rows(source, local[s], valid[s], with_mask)
            return step(carry, batch, None if active is None else active[s], None, reference=ref, correction=corr)

        params, _ = jax.lax.fori_loop(0, local.shape[0], one_step, (own, jax.vmap(optimizer.init)(own)))
        return jax.tree.map(lambda o, p: jax.lax.dynamic_update_slice_in_dim(o, p, lo, axis=0), out, params)

    if clients % chunk:
        return jax.lax.fori_loop(0, count, train, start)

    def whole(tree, axis=0):  # [..., N, ...] -> [count, ..., chunk, ...]: a reshape, no copy
        return jax.tree.map(
            lambda x: jnp.moveaxis(x.reshape(x.shape[:axis] + (count, chunk) + x.shape[axis + 1 :]), axis, 0), tree
        )

    xs = {
        "start": whole(start),
        "plan": whole(plan, 1),
        **({} if ragged else {"data": whole(data)}),
        **({"reference": whole(reference)} if per_row(reference) else {}),
        **({"correction": whole(correction)} if per_row(correction) else {}),
    }

    def train_part(part):
        source = data if ragged else part["data"]
        ref, corr, own = part.get("reference", reference), part.get("correction", correction), part["start"]
        local, valid, active = part["plan"]

        def one_step(s, carry):
            batch = _gather_rows(source, local[s], valid[s], with_mask)
            return step(carry, batch, None if active is None else active[s], None, reference=ref, correction=corr)

        return jax.lax.fori_loop(0, local.shape[0], one_step, (own, jax.vmap(optimizer.init)(own)))[0]

    return jax.tree.map(lambda x: x.reshape((clients,) + x.shape[2:]), jax.lax.map(train_part, xs))


def _has_client_axis(tree, start) -> bool:
    """Whether ``tree`` holds one row per client of ``start`` (else it is one model for all)."""
    a, b = jax.tree.leaves(tree), jax.tree.leaves(start)
    return len(a) == len(b) and all(x.ndim == y.ndim for x, y in zip(a, b))


def _gather_rows(data, local, valid, with_mask=True):
    """A plan's batch: a ragged batch's flat ``local`` rows, else positions in each client's examples (without a
    ``"mask"`` entry where ``with_mask`` is False: minibatch steps over data that has none, as
    :func:`~fedjax_clust.core.batching.sample_minibatch` returns them)."""
    if isinstance(data, RaggedBatch):
        return data.take_examples(local, valid)
    batch = _gather(data, local, valid)
    if not with_mask and isinstance(batch, Mapping):
        batch = {k: v for k, v in batch.items() if k != "mask"}
    return batch
