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

Choice (documented): an epoch's batches follow one permutation per epoch (PyTorch's shuffling DataLoader, and
Algorithm 1's "split P_k into batches"); FedJAX's client datasets shuffle the E repeated epochs as one stream, so
a batch there may straddle two epochs. Both read every example E times.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from fedjax_clust.core.batching import example_mask, largest_client, map_clients, sample_minibatch
from fedjax_clust.core.keys import attack_key
from fedjax_clust.core.participants import keep_non_participants
from fedjax_clust.core.ragged_batch import RaggedBatch
from fedjax_clust.core.validation import check_int

PyTree = Any

__all__ = ["LocalResult", "client_sizes", "epoch_batches", "local_training"]


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
    prox=0.0,
    reference: Optional[PyTree] = None,
    correction: Optional[PyTree] = None,
    combine: Optional[Callable] = None,
    penalty: Optional[Callable] = None,
    shuffle: bool = True,
) -> LocalResult:
    """Train every row of ``start`` on its client's ``data`` (module docstring): ``epochs`` E passes or ``steps``
    tau minibatch steps (exactly one), with ``grad_fn(params, batch)`` the gradient of the client loss,
    ``optimizer`` the client optimiser, ``prox`` mu > 0 with ``reference`` (one model, or rows) FedProx's proximal
    pull, ``correction`` (rows) a per-client gradient offset and ``combine(grads, key)`` the directions each step
    makes of all rows' gradients (e.g. a cluster's aggregate: IFCA's and CFL's local steps; ``steps`` only);
    ``penalty(rows) -> rows`` the gradient of a further regulariser added to every step's (FedSoft's pull towards
    its clients' importance-weighted cluster models). ``shuffle=False``: every epoch reads a client's examples in
    their stored order (FedJAX's ``skip_shuffle``, for side-by-side checks; ``epochs`` only)."""
    if (epochs is None) == (steps is None):
        raise ValueError("local training takes epochs or steps, exactly one")
    proximal = not (isinstance(prox, (int, float)) and prox == 0)  # a plain zero: no proximal term at all
    if proximal and reference is None:
        raise ValueError("a proximal term needs the reference model it pulls towards")
    sizes = client_sizes(data)

    def direction(x, batch, k):
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

    def step(carry, batch, active, k):
        x, opt = carry
        updates, new_opt = jax.vmap(optimizer.update)(direction(x, batch, k), opt, x)
        stepped = (optax.apply_updates(x, updates), new_opt)
        return stepped if active is None else keep_non_participants(stepped, carry, active)

    carry = (start, jax.vmap(optimizer.init)(start))
    if steps is not None:
        steps = check_int("steps", steps, 0)

        def minibatch_step(s, carry):
            k = jax.random.fold_in(key, s)
            return step(carry, sample_minibatch(data, batch_size, k), None, k)

        params, _ = jax.lax.fori_loop(0, steps, minibatch_step, carry)
        read = sizes if batch_size is None else jnp.minimum(sizes, batch_size)
        return LocalResult(params, jnp.full_like(sizes, steps), steps * read)

    if combine is not None:
        raise ValueError("combine applies to local steps, not epochs (a step's clients would read unequal batches)")
    epochs = check_int("epochs", epochs, 1)
    batches = epoch_batches(data, batch_size)
    width = largest_client(data) if batches == 1 or batch_size is None else batch_size
    if not isinstance(data, (RaggedBatch, Mapping)) and largest_client(data) % width:
        raise ValueError(
            f"epochs over clients of {largest_client(data)} examples in batches of {width} leave a partial batch, "
            "which needs a dict dataset (its 'mask' entry); give a batch size that divides it"
        )
    n_max = largest_client(data)
    positions = jnp.arange(n_max)

    def epoch(e, carry):
        k = jax.random.fold_in(key, e)
        if shuffle:
            scores = jax.random.uniform(k, (sizes.shape[0], n_max))
            order = jnp.argsort(jnp.where(positions < sizes[:, None], scores, 2.0), axis=1).astype(jnp.int32)
        else:  # stored order: a padded client's real examples come first, a ragged one's are its own
            order = jnp.broadcast_to(positions.astype(jnp.int32), (sizes.shape[0], n_max))
        order = jnp.pad(order, ((0, 0), (0, batches * width - n_max)))  # the last batch's tail: masked

        def batch_step(b, carry):
            local = jax.lax.dynamic_slice_in_dim(order, b * width, width, axis=1)
            valid = b * width + jnp.arange(width) < sizes[:, None]
            return step(carry, _gather(data, local, valid), jnp.any(valid, axis=1), k)

        return jax.lax.fori_loop(0, batches, batch_step, carry)

    params, _ = jax.lax.fori_loop(0, epochs, epoch, carry)
    per_epoch = jnp.where(sizes > 0, -(-sizes // width), 0)
    return LocalResult(params, epochs * per_epoch, epochs * sizes)
