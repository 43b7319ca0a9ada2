"""How Federated-Clustering's rows are executed: chunked, grouped and spread over devices.

A round of Federated-Clustering is N independent rows (:func:`fedjax_clust.algorithms.clustered_row.cluster_row`:
model i, the minibatches of its group, Threshold-Clustering). This module decides how the rows run and
nothing about what they compute, as FedJAX's ``for_each_client`` backends are chosen apart from its
algorithms. A row is any function

    row(params_i, own, batch, valid, unbatched, byz, key, client) -> (direction, fraction, ball or None)

and a :class:`RowPlan` (subgroups, chunk, memory budget, mesh) lays the rows out:

* **row-wise** (:func:`rowwise_directions`): a ``lax.map`` over chunks of models, each chunk a ``vmap``, so
  the N x S x D block of cross-gradients never exists at once; with subgroups every row gathers its own
  group's minibatches (N x S gathered minibatches), so the rows can be split over devices freely;
* **group-major** (:func:`group_major_directions`): with subgroups on one device the models and minibatches
  are gathered once into [G, S, ...] blocks and each group runs the kernel on its S clients (N gathered
  minibatches), groups vmapped together when whole groups fit the chunk;
* **sharded** (:func:`run_round`): with a mesh whose size divides N the client state is split over the
  devices (``jax.shard_map``); every device draws all N minibatches from the same key. With subgroups, when
  the device count divides G and a device can hold the gathered models
  (:func:`fedjax_clust.parallel.memory.group_major_fits`), each device gathers all N models, runs G / devices
  groups group-major, and the directions are gathered back (every device takes its own clients' rows);
  otherwise every device runs its own clients' rows row-wise.

One memory budget covers every buffer the plan sizes: with subgroups the gathered copies of a group-major
round (:func:`fedjax_clust.parallel.memory.group_major_bytes`) take their share first and the chunk of
cross-gradients gets the rest (:meth:`RowPlan.resolve`), whichever layout the devices take, so the chunk
depends on the config and the device kind only; on a mesh, a round whose copies and one row do not fit a
device runs row-wise. On one device the layout is group-major whatever the budget (never a function of the
machine), the chunk at least one row.

Every layout computes the same rows up to float rounding (tested); the chunk is part of what a run computes
(it is resolved when the algorithm is built and recorded, :func:`fedjax_clust.parallel.memory.resolve_chunk_size`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Literal, Optional, Union

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from fedjax_clust.core.pytrees import leading_dim, row_size, take_rows
from fedjax_clust.core.state import ClientState
from fedjax_clust.core.validation import check_int, check_memory_budget
from fedjax_clust.parallel.memory import (
    auto_chunk_size,
    default_memory_budget,
    group_major_bytes,
    group_major_fits,
    resolve_chunk_size,
)
from fedjax_clust.parallel.sharding import CLIENT_AXIS

__all__ = [
    "RowPlan",
    "map_rows",
    "check_chunk_size",
    "ChunkSize",
    "random_subgroups",
    "subgroup_slots",
    "rowwise_directions",
    "group_major_directions",
    "row_directions",
    "run_round",
    "place_clients",
]

# models per cross-gradient chunk: a count, "auto" (fit the memory budget), "all" or None (every row at once)
ChunkSize = Union[int, Literal["auto", "all"], None]
Row = Callable[..., tuple]
PyTree = Any


@dataclasses.dataclass(frozen=True)
class RowPlan:
    """How a round's rows run: ``subgroups`` G random groups per round (part of the math: it decides who
    sees whom, here because it shapes every layout), ``chunk_size`` rows per chunk (an integer, None for all
    at once, or "auto": the budget's rule applied to the traced shapes), ``memory_budget`` the bytes the
    chunk and the gathered group copies may use (None: :func:`fedjax_clust.parallel.memory.default_memory_budget`),
    ``mesh`` the device mesh with a "clients" axis (None: one device)."""

    subgroups: int = 1
    chunk_size: Union[int, Literal["auto"], None] = "auto"
    memory_budget: Optional[int] = None
    mesh: Optional[Mesh] = None

    @property
    def devices(self) -> int:
        return 1 if self.mesh is None else int(self.mesh.size)

    def shards(self, num_clients: int) -> bool:
        """Whether a round of ``num_clients`` runs split over the mesh (its size divides N)."""
        return self.mesh is not None and num_clients % self.mesh.size == 0

    def budget(self) -> int:
        """The bytes every buffer the plan sizes shares: ``memory_budget``, or the device's default."""
        return default_memory_budget() if self.memory_budget is None else self.memory_budget

    def group_major(self, num_clients: int, row_params: int, sharded: bool) -> bool:
        """Whether a round of ``num_clients`` runs its subgroups group-major: always with G > 1 on one device
        (so the layout never depends on the machine); on a mesh when the device count divides G and a
        device can hold the gathered copies plus one row within the budget
        (:func:`fedjax_clust.parallel.memory.group_major_fits`), otherwise row-wise."""
        if self.subgroups == 1:
            return False
        if not sharded:
            return True
        group_size = -(-num_clients // self.subgroups)
        return self.subgroups % self.devices == 0 and group_major_fits(
            num_clients, row_params, self.budget(), group_size
        )

    def resolve(self, num_clients: int, model_size: int) -> "RowPlan":
        """The plan with an "auto" chunk resolved for rounds of ``num_clients`` and models of ``model_size``
        parameters: with subgroups, the largest chunk within what the budget leaves after the gathered copies
        of a group-major round (:func:`fedjax_clust.parallel.memory.resolve_chunk_size`), whichever layout
        the devices then take, so the chunk depends on the config and the device kind only."""
        chunk = resolve_chunk_size(
            self.chunk_size,
            num_clients=num_clients,
            model_size=model_size,
            subgroups=self.subgroups,
            memory_budget=self.budget(),
            group_major=self.subgroups > 1,
        )
        return dataclasses.replace(self, chunk_size=chunk)

    def chunk_for(self, num_rows: int, group_size: int, params, num_clients: int) -> Optional[int]:
        """Rows per chunk when ``num_rows`` rows of ``group_size`` clients (of a round of ``num_clients``) are
        evaluated: the resolved chunk, or (an unresolved "auto") the rule of :meth:`resolve` applied to the
        traced shapes."""
        if self.chunk_size != "auto":
            return self.chunk_size
        row_params = row_size(params, leading_dim(params))
        gathered = group_major_bytes(num_clients, row_params) if self.subgroups > 1 else 0
        return auto_chunk_size(num_rows, group_size, row_params, self.budget() - gathered)

    def __post_init__(self):
        check_int("subgroups", self.subgroups, 1)
        if self.chunk_size != "auto":
            check_chunk_size(self.chunk_size)
        object.__setattr__(self, "memory_budget", check_memory_budget(self.memory_budget))


def check_chunk_size(chunk_size):
    """None (all rows at once) or a positive integer."""
    if chunk_size is not None:
        check_int("chunk_size", chunk_size)


def map_rows(fn: Callable, xs: PyTree, chunk_size: Optional[int] = None) -> PyTree:
    """``fn`` applied to every row of ``xs`` (leading axis), ``chunk_size`` rows at a time.

    ``None`` (or a chunk at least as large as the number of rows) is a plain ``vmap``; otherwise a
    ``lax.map`` whose body is a ``vmap`` over ``chunk_size`` rows, so only one chunk's intermediates live
    at once.
    """
    check_chunk_size(chunk_size)
    n = leading_dim(xs)
    if chunk_size is None or chunk_size >= n:
        return jax.vmap(fn)(xs)
    if chunk_size == 1:  # a plain loop: no size-1 batch axis in the body
        return lax.map(fn, xs)
    return lax.map(fn, xs, batch_size=int(chunk_size))


def random_subgroups(key, num_clients: int, num_groups: int):
    """Uniformly random partition into ``num_groups`` groups of sizes ceil/floor(N / G).

    Returns ``index`` [G, S] (S = ceil(N / G); padding slots hold ``num_clients``) and ``valid`` [G, S].
    """
    size = -(-num_clients // num_groups)
    perm = jax.random.permutation(key, num_clients)
    padded = jnp.concatenate([perm, jnp.full((num_groups * size - num_clients,), num_clients, perm.dtype)])
    index = padded.reshape(size, num_groups).T  # round-robin: group sizes differ by at most one
    return index, index < num_clients


def subgroup_slots(key, num_clients: int, num_groups: int):
    """This round's groups (:func:`random_subgroups`: index [G, S], valid [G, S]), S, and each client's flat
    slot g S + position; the same key gives the same groups on every device."""
    index, valid = random_subgroups(key, num_clients, num_groups)
    size = index.shape[1]
    slot = (
        jnp.zeros((num_clients,), jnp.int32)
        .at[index.reshape(-1)]
        .set(jnp.arange(num_groups * size, dtype=jnp.int32), mode="drop")
    )
    return index, valid, size, slot


def _members_byzantine(members, valid, byz):
    """The Byzantine mask over a group's S slots (padding slots are not attackers) from ``byz`` (bool over
    the round's clients); None without attack."""
    return None if byz is None else jnp.take(byz, members, mode="clip") & valid


def rowwise_directions(plan: RowPlan, row: Row, params, batch, key, offset, byz):
    """Directions v_i of the rows ``params`` (clients offset, offset + 1, ...); ``batch`` holds all N.

    With subgroups every row gathers its own group's minibatches (S clients) inside the chunk, so the rows
    can be split over devices like the G = 1 rows and no [G, S, ...] copy of all data exists.
    """
    num_rows, num_clients = leading_dim(params), leading_dim(batch)
    rows = (params, offset + jnp.arange(num_rows))
    if plan.subgroups == 1:
        chunk = plan.chunk_for(num_rows, num_clients, params, num_clients)
        return map_rows(lambda r: row(r[0], r[1], batch, None, chunk == 1, byz, key, r[1]), rows, chunk)
    index, valid, size, slot = subgroup_slots(key, num_clients, plan.subgroups)
    chunk = plan.chunk_for(num_rows, size, params, num_clients)

    def group_row(r):
        params_i, i = r
        group, position = slot[i] // size, slot[i] % size
        members = index[group]
        group_byz = _members_byzantine(members, valid[group], byz)
        batch_i = take_rows(batch, members)
        direction, frac, ball = row(params_i, position, batch_i, valid[group], chunk == 1, group_byz, key, i)
        if ball is not None:  # ball over the S group slots -> over all N clients
            ball = jnp.zeros((num_clients,), bool).at[members].set(ball, mode="drop")
        return direction, frac, ball

    return map_rows(group_row, rows, chunk)


def group_major_directions(plan: RowPlan, row: Row, params, batch, key, byz, shard=None):
    """Directions v_i, group-major: the clients' models and minibatches are gathered into [G, S, ...]
    blocks and each group runs the kernel on its S clients (groups vmapped together when whole groups fit
    the chunk), then the directions go back to client order.

    ``shard`` None: one device holds every client (``params`` [N, ...]) and runs all G groups.
    ``shard`` (device, devices) inside ``shard_map``: ``params`` are the device's own N / devices clients;
    every device gathers all N models (``all_gather``), runs its G / devices groups, and the groups'
    directions are gathered again so that each device takes its own clients' rows. The groups, the row keys
    and the chunk are those of the one-device round, so both compute the same rows up to float rounding.

    A reduce-scatter of the directions (each device scattering its groups' rows into an [N, ...] buffer of
    zeros, ``psum_scatter`` leaving each device its N / devices rows, exactly) was measured against this
    gather and rejected: it needs the same [N, ...] buffer per device and adds the reduction; on 8 forced
    CPU devices (``bench --model mlp``, N 512, G 16) a round's cross-gradients took 1.53 / 1.62 s against
    1.20 / 1.34 s and the process's peak memory was 100 MB higher (a one-off measurement of a design this
    module no longer has; commit 348168a holds it, to rerun the comparison).
    """
    num_clients = leading_dim(batch)
    index, valid, size, slot = subgroup_slots(key, num_clients, plan.subgroups)  # padding slots clip to N - 1
    chunk = plan.chunk_for(plan.subgroups * size, size, params, num_clients)  # rows per chunk, all G x S slots
    groups_at_once = None if chunk is None else max(1, chunk // size)
    inner = None if chunk is None or chunk >= size else chunk
    mine, valid_mine, own_slot, own_rows = index, valid, slot, num_clients
    if shard is not None:
        device, devices = shard
        own_rows = leading_dim(params)
        own_slot = lax.dynamic_slice_in_dim(slot, device * own_rows, own_rows)
        params = jax.tree.map(lambda x: lax.all_gather(x, CLIENT_AXIS, tiled=True), params)
        per_device = plan.subgroups // devices
        mine = lax.dynamic_slice_in_dim(index, device * per_device, per_device)
        valid_mine = lax.dynamic_slice_in_dim(valid, device * per_device, per_device)

    def one_group(group):
        group_params, group_batch, group_valid, members = group
        group_byz = _members_byzantine(members, group_valid, byz)
        rows = (group_params, jnp.arange(size), members)
        return map_rows(
            lambda r: row(r[0], r[1], group_batch, group_valid, inner == 1, group_byz, key, r[2]), rows, inner
        )

    groups = (take_rows(params, mine), take_rows(batch, mine), valid_mine, mine)
    directions, fractions, balls = map_rows(one_group, groups, groups_at_once)
    if shard is not None:  # every group's rows on every device, then each takes its own clients'
        directions, fractions, balls = jax.tree.map(
            lambda x: lax.all_gather(x, CLIENT_AXIS, tiled=True), (directions, fractions, balls)
        )
    back = lambda x: jnp.take(x.reshape((-1,) + x.shape[2:]), own_slot, axis=0)  # noqa: E731 - slots -> clients
    directions, fractions = jax.tree.map(back, directions), back(fractions)
    if balls is not None:  # ball over the S group slots -> over all N clients
        members = jnp.take(index, own_slot // size, axis=0)  # [rows, S]
        rows = jnp.arange(own_rows)[:, None]
        balls = jnp.zeros((own_rows, num_clients), bool).at[rows, members].set(back(balls), mode="drop")
    return directions, fractions, balls


def row_directions(plan: RowPlan, row: Row, params, batch, key, offset, byz, shard=None):
    """(directions, ball fractions, balls) of the rows ``params`` (clients offset, ...; ``batch`` holds all
    N) in the plan's layout: group-major when one device holds every client (G > 1) or ``shard`` (device,
    devices) says the groups are split over the devices, row-wise otherwise."""
    if shard is not None:
        return group_major_directions(plan, row, params, batch, key, byz, shard=shard)
    if plan.subgroups > 1 and leading_dim(params) == leading_dim(batch):
        return group_major_directions(plan, row, params, batch, key, byz)
    return rowwise_directions(plan, row, params, batch, key, offset, byz)


def place_clients(plan: RowPlan, state: ClientState) -> ClientState:
    """``state`` with its client rows split over the plan's mesh (scalars replicated) when the round shards."""
    mesh = plan.mesh
    if mesh is None or not plan.shards(leading_dim(state.params)):
        return state
    clients, replicated = NamedSharding(mesh, P(CLIENT_AXIS)), NamedSharding(mesh, P())
    return jax.device_put(state, jax.tree.map(lambda x: clients if x.ndim else replicated, state))


def run_round(plan: RowPlan, rows_round: Callable, state: ClientState, data, key, byz, track_clusters: bool):
    """One round on the plan's devices: ``rows_round(state, data, key, offset, byz, shard)`` ->
    (state, mean ball fraction, balls) runs once on every client, or per device inside ``shard_map`` on
    the device's clients [offset, offset + N / devices) (``shard`` (device, devices) when the subgroups run
    group-major across the devices, else None). Returns (state, ball fraction, balls)."""
    num_clients = leading_dim(state.params)
    if not plan.shards(num_clients):
        return rows_round(state, data, key, 0, byz, None)
    row_params = row_size(state.params, num_clients)
    devices = plan.devices if plan.group_major(num_clients, row_params, sharded=True) else None

    def local(st, d, k, b):
        device = lax.axis_index(CLIENT_AXIS)
        offset = device * leading_dim(st.params)
        st, frac, balls = rows_round(st, d, k, offset, b, None if devices is None else (device, devices))
        return st, lax.pmean(frac, CLIENT_AXIS), balls

    spec = ClientState._make((P(CLIENT_AXIS), P(CLIENT_AXIS), P(), P(), P(CLIENT_AXIS)))  # the fields' specs
    out_specs = (spec, P(), P(CLIENT_AXIS) if track_clusters else None)
    return jax.shard_map(local, mesh=plan.mesh, in_specs=(spec, P(), P(), P()), out_specs=out_specs, check_vma=False)(
        state, data, key, byz
    )
