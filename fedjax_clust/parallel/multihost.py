"""Multi-controller runs: one Python process per host (or per GPU), the client axis spanning all of them.

JAX's multi-controller model runs the same program in every process; each process owns its local
devices, and a ``jax.Array`` may span the devices of all processes. A simulation spans hosts like this:

1. every process calls :func:`initialize` (``jax.distributed.initialize``; on a TPU pod slice or under
   SLURM/Open MPI it finds the coordinator itself; on CPU it switches on the gloo collectives);
2. every process builds (or loads) the task and keeps the clients of its own shard:
   :func:`distribute_task` turns the task's per-client arrays into global arrays sharded over the
   ``"clients"`` axis of a mesh over all devices, each process feeding only its rows through
   ``jax.make_array_from_process_local_data`` (:func:`global_client_array` does it for data a process
   loads itself: it needs only rows ``local_client_slice()``);
3. every process calls :func:`fedjax_clust.run.simulate` with the same arguments. The client state is placed on
   the same mesh (:func:`to_global`), every round is one program partitioned over all devices (Federated-
   Clustering's rows split with ``shard_map``, its cross-gradient inputs gathered by XLA), metrics are
   gathered to every process (:func:`fetch`), and only process 0 writes the result folder and draws the
   progress bar.

Launch, e.g. two GPUs of one host as two processes, or a pod slice::

    # process i of P (i = 0 .. P-1), the same command everywhere but --process-id
    python my_run.py --coordinator HOST0:12355 --num-processes P --process-id i
    # TPU pod slice / SLURM: jax.distributed.initialize() needs no arguments
    gcloud compute tpus tpu-vm ssh NAME --worker=all --command="python my_run.py"

(on one multi-GPU host a single process that sees every GPU is simpler: ``mesh="auto"`` spans them).
Checkpoints are not written by multi-process runs yet (``checkpoint_every`` is refused there).
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from fedjax_clust.core.host_rows import builds_rows
from fedjax_clust.core.ragged_batch import RaggedBatch
from fedjax_clust.parallel.sharding import CLIENT_AXIS

__all__ = [
    "initialize",
    "is_multiprocess",
    "is_writer",
    "global_mesh",
    "local_client_slice",
    "global_client_array",
    "distribute_task",
    "to_global",
    "fetch",
]

PyTree = Any


def initialize(
    coordinator_address: Optional[str] = None, num_processes: Optional[int] = None, process_id: Optional[int] = None
) -> None:
    """``jax.distributed.initialize`` with CPU collectives (gloo) switched on; call before any JAX work. Like
    ``jax.distributed.initialize`` itself, it sets up the whole process: the one library call that changes JAX's
    configuration, made only when the user calls it.

    Without arguments JAX finds the cluster itself on TPU pods, SLURM and Open MPI.
    """
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator_address, num_processes=num_processes, process_id=process_id
    )


def is_multiprocess() -> bool:
    return jax.process_count() > 1


def is_writer() -> bool:
    """Only process 0 writes files and draws progress bars."""
    return jax.process_index() == 0


def global_mesh() -> Mesh:
    """A 1-D ``"clients"`` mesh over the devices of every process, in process order."""
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    return Mesh(np.array(devices), (CLIENT_AXIS,))


def local_client_slice(num_clients: int, mesh: Optional[Mesh] = None) -> slice:
    """The rows of the client axis whose data this process feeds (its devices' consecutive shards)."""
    mesh = mesh or global_mesh()
    size = mesh.devices.size
    if num_clients % size:
        raise ValueError(
            f"the number of clients ({num_clients}) must be a multiple of the {size} devices of all "
            "processes to shard the client axis"
        )
    per_device = num_clients // size
    mine = [i for i, d in enumerate(mesh.devices.flat) if d.process_index == jax.process_index()]
    return slice(mine[0] * per_device, (mine[-1] + 1) * per_device)


def global_client_array(local_rows, num_clients: int, mesh: Optional[Mesh] = None):
    """A global array [num_clients, ...] sharded over ``"clients"`` from this process's rows
    (``local_rows`` = rows ``local_client_slice(num_clients)``)."""
    mesh = mesh or global_mesh()
    local_rows = np.asarray(local_rows)
    shape = (num_clients,) + local_rows.shape[1:]
    return jax.make_array_from_process_local_data(NamedSharding(mesh, P(CLIENT_AXIS)), local_rows, shape)


def distribute_task(task, mesh: Optional[Mesh] = None):
    """The task with its per-client arrays (``data``, ``test_data``, ``optima``) as global arrays, each process
    feeding only its own clients' rows. Single process: the task unchanged.

    A pooled population's leaves build only this process's rows (from their indices); every other leaf is
    sliced from the whole array the process already built (a generated task draws all clients from one random
    stream, so its rows cannot be drawn apart). For a population larger than one host's memory, load the
    process's rows ``local_client_slice(num_clients)`` yourself and place them with :func:`global_client_array`."""
    if not is_multiprocess():
        return task
    if isinstance(task.data, RaggedBatch) or isinstance(task.test_data, RaggedBatch):
        raise ValueError("a multi-process run needs padded client data: build the task with layout='padded'")
    if task.unseen_data is not None:
        raise ValueError("a multi-process run does not evaluate unseen clients yet: drop them (task.unseen_data)")
    mesh = mesh or global_mesh()
    n = task.num_clients
    rows = local_client_slice(n, mesh)

    def own_rows(x):  # a leaf that builds its rows (a pooled population) builds this process's only
        return np.take(x, np.arange(n)[rows], axis=0) if builds_rows(x) else np.asarray(x)[rows]

    return task.with_arrays(jax.tree.map(lambda x: global_client_array(own_rows(x), n, mesh), task.arrays()))


def to_global(tree: PyTree, num_clients: int, mesh: Optional[Mesh] = None) -> PyTree:
    """Place a state on the mesh of all processes: leaves with a leading client axis sharded over it, the
    rest (round counter, cluster models) replicated. Every process must hold the same values."""
    if not is_multiprocess():
        return tree
    mesh = mesh or global_mesh()
    clients, replicated = NamedSharding(mesh, P(CLIENT_AXIS)), NamedSharding(mesh, P())

    def place(x):
        sharded = np.ndim(x) >= 1 and np.shape(x)[0] == num_clients and num_clients % mesh.devices.size == 0
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return x  # already global
        return jax.device_put(np.asarray(x), clients if sharded else replicated)

    return jax.tree.map(place, tree)


def fetch(tree: PyTree) -> PyTree:
    """Host (NumPy) values of a pytree of arrays, gathered from every process when they span several."""
    if not is_multiprocess():
        return jax.device_get(tree)
    from jax.experimental import multihost_utils

    def one(x):
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return np.asarray(x)
        if x.is_fully_replicated:
            return np.asarray(x.addressable_data(0))
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    return jax.tree.map(one, tree)
