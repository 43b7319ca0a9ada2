"""Per-client rows held in host memory: a state whose clients' part lives in NumPy arrays (or memory-mapped
files) and whose server part stays on the device.

A :class:`~fedjax_clust.core.state.ClientState` splits into the clients' rows (``params``, ``opt_state``,
``rows``: leading axis N) and the server's part (``extra``, ``round``). :func:`to_host` moves the rows into
host memory -- ``numpy.ndarray`` leaves, or ``numpy.memmap`` files in a folder when they would not fit in RAM
-- and leaves the server's part where it is. A server-held
:class:`~fedjax_clust.core.model_table.ModelTable` splits the same way: its ``models`` are the server's and stay
on the device, its ``assignment`` (one integer per client) goes to the host.

A round then needs only its cohort's rows on the device: :func:`gather_block` copies rows ``index`` from the
host into device arrays (the server's part joined as it is) and :func:`scatter_block` writes a block's rows back
into the host arrays. The copies are exact, so a round computed on a gathered block gives the same numbers
as on rows gathered on the device (:mod:`fedjax_clust.run.streaming`).
"""

from __future__ import annotations

import os
from typing import Any, Optional

import jax
import numpy as np

from fedjax_clust.core.model_table import ModelTable, is_table
from fedjax_clust.core.state import ClientState

PyTree = Any

__all__ = ["to_host", "to_device", "gather_block", "scatter_block", "host_bytes", "is_host_state", "ROW_FIELDS"]

ROW_FIELDS = ("params", "opt_state", "rows")


def _host_leaf(x, directory: Optional[str], name: str, consume: bool):
    array = np.asarray(jax.device_get(x))
    if directory is None:
        out = np.array(array, copy=True)  # writable, never a view of a device buffer
    else:
        out = np.lib.format.open_memmap(
            os.path.join(directory, f"{name}.npy"), mode="w+", dtype=array.dtype, shape=array.shape
        )
        out[...] = array
    del array
    if consume and isinstance(x, jax.Array):
        x.delete()  # one leaf at a time: the copy never doubles the whole state
    return out


def _rows_to_host(tree: PyTree, directory: Optional[str], prefix: str, consume: bool) -> PyTree:
    """Row leaves (leading axis N) of ``tree`` as host arrays; a model table's assignment only."""
    if is_table(tree):
        return ModelTable(tree.models, _host_leaf(tree.assignment, directory, f"{prefix}.assignment", consume))
    paths_leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    leaves = [
        _host_leaf(x, directory, prefix + "".join(_key_name(k) for k in path).replace("/", "_"), consume)
        for path, x in paths_leaves
    ]
    return jax.tree.unflatten(treedef, leaves)


def _key_name(key) -> str:
    for attribute in ("key", "name", "idx"):
        if hasattr(key, attribute):
            return f".{getattr(key, attribute)}"
    return f".{key}"


def to_host(state: ClientState, directory: Optional[str] = None, *, consume: bool = False) -> ClientState:
    """``state`` with its clients' rows in host memory (module docstring): NumPy arrays, or with ``directory``
    one ``.npy`` memory-mapped file per leaf in it (created; the folder must exist). The server's part is
    unchanged. ``consume`` deletes each device leaf once copied (the caller must hold no other reference to
    ``state``): the peak is the state plus one leaf, not twice the state."""
    if directory is not None and not os.path.isdir(directory):
        raise ValueError(f"host-rows folder {directory!r} does not exist")
    return state._replace(
        **{field: _rows_to_host(getattr(state, field), directory, field, consume) for field in ROW_FIELDS}
    )


def is_host_state(state: ClientState) -> bool:
    """Whether ``state``'s clients' rows are host arrays (:func:`to_host`)."""
    leaves = [
        x.assignment if is_table(x) else x
        for field in ROW_FIELDS
        for x in jax.tree.leaves(getattr(state, field), is_leaf=is_table)
    ]
    return bool(leaves) and all(isinstance(x, np.ndarray) for x in leaves)


def _map_rows(fn, tree: PyTree, table_fn) -> PyTree:
    if is_table(tree):
        return table_fn(tree)
    return jax.tree.map(fn, tree)


def gather_block(state: ClientState, index: np.ndarray, device=None) -> ClientState:
    """Rows ``index`` (int [S], increasing) of a host state's clients' part, as device arrays (``device``,
    default JAX's default device), with the server's part as it is: the block a cohort round takes."""
    index = np.asarray(index)
    device = device or jax.devices()[0]  # committed, as the round's outputs are: one compilation serves both

    def put(x):
        return jax.device_put(np.take(x, index, axis=0), device)

    def table(t):
        return ModelTable(t.models, put(t.assignment))

    return state._replace(**{f: _map_rows(put, getattr(state, f), table) for f in ROW_FIELDS})


def scatter_block(state: ClientState, index: np.ndarray, block: ClientState) -> ClientState:
    """A host state with rows ``index`` of its clients' part replaced by ``block``'s (written in place into the
    host arrays) and the server's part taken from ``block`` (a model table's models with it)."""
    index = np.asarray(index)

    def write(host, new):
        host[index] = np.asarray(new)
        return host

    def merge(host_tree, new_tree):
        if is_table(host_tree):
            return ModelTable(new_tree.models, write(host_tree.assignment, new_tree.assignment))
        return jax.tree.map(write, host_tree, new_tree)

    return block._replace(**{f: merge(getattr(state, f), getattr(block, f)) for f in ROW_FIELDS})


def to_device(state: ClientState, device=None) -> ClientState:
    """A host state's clients' rows back on the device (the whole population: only where it fits)."""

    def put(x):
        return jax.device_put(x, device) if isinstance(x, np.ndarray) else x

    return jax.tree.map(put, state)


def host_bytes(state: ClientState) -> int:
    """Bytes of the clients' rows of ``state`` (a model table counts its assignment only)."""
    total = 0
    for field in ROW_FIELDS:
        for x in jax.tree.leaves(getattr(state, field), is_leaf=is_table):
            leaf = x.assignment if is_table(x) else x
            total += int(np.dtype(leaf.dtype).itemsize * np.prod(np.shape(leaf)))
    return total
