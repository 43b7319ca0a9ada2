"""Per-client rows held in host memory: a state whose clients' part lives in NumPy arrays (or memory-mapped
files) and whose server part stays on the device.

A :class:`~fedjax_clust.core.state.ClientState` splits into the clients' rows (``params``, ``opt_state``,
``rows``: leading axis N) and the server's part (``extra``, ``round``). A server-held
:class:`~fedjax_clust.core.model_table.ModelTable` splits the same way: its ``models`` are the server's and stay
on the device, its ``assignment`` (one integer per client) is a row.

:func:`to_host` moves the rows into host memory *packed*: one buffer [N, D] per dtype (``float32``, ``int32``,
...; a memory-mapped ``.npy`` file per dtype with ``directory``), client i's rows of every leaf side by side in
row i, and the state's leaves are views into it ([N, ...] NumPy arrays, as before). A cohort then moves as one
contiguous block per dtype: :class:`RowLayout` gathers rows ``index`` of each buffer (one ``take`` and one
host-to-device copy per dtype, not one per leaf), unpacks them into the block's leaves on the device (slices and
reshapes inside the compiled program), packs the round's new rows back and writes them into the buffers (one
device-to-host copy per dtype). The copies are exact, so a round on a block gives the same numbers as on rows
gathered on the device (:mod:`fedjax_clust.run.streaming`).
"""

from __future__ import annotations

import math
import os
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.core.model_table import ModelTable, is_table
from fedjax_clust.core.pytrees import tree_bytes
from fedjax_clust.core.state import ClientState

PyTree = Any

__all__ = [
    "to_host",
    "RowLayout",
    "gather_block",
    "take_to_device",
    "on_host",
    "builds_rows",
    "device_source_bytes",
    "server_part",
    "host_bytes",
    "ROW_FIELDS",
    "row_leaves",
    "with_row_leaves",
]

ROW_FIELDS = ("params", "opt_state", "rows")


def _field_rows(tree):
    """The row part of one field: a table's assignment, anything else whole."""
    return tree.assignment if is_table(tree) else tree


def row_leaves(state: ClientState) -> tuple[list, Any]:
    """(the clients' row leaves of ``state``, their treedef): ``params``, ``opt_state`` and ``rows``, a model
    table contributing its assignment only."""
    return jax.tree.flatten(tuple(_field_rows(getattr(state, f)) for f in ROW_FIELDS))


def with_row_leaves(state: ClientState, leaves: list, treedef) -> ClientState:
    """``state``'s server part (``extra``, ``round``, table models) with ``leaves`` as its clients' rows (the
    inverse of :func:`row_leaves`)."""
    fields = jax.tree.unflatten(treedef, leaves)

    def field(name, rows):
        held = getattr(state, name)
        return ModelTable(held.models, rows) if is_table(held) else rows

    return state._replace(**{name: field(name, rows) for name, rows in zip(ROW_FIELDS, fields)})


class _Slot(NamedTuple):
    dtype: str
    offset: int  # first column of the leaf in its dtype's buffer
    shape: tuple  # a row's shape


def _slots(leaves) -> tuple[tuple, dict]:
    """Each leaf's (dtype, first column, row shape) and each dtype's width D."""
    widths: dict = {}
    slots = []
    for x in leaves:
        dtype = np.dtype(x.dtype).name
        shape = tuple(np.shape(x)[1:])
        slots.append(_Slot(dtype, widths.get(dtype, 0), shape))
        widths[dtype] = widths.get(dtype, 0) + math.prod(shape)
    return tuple(slots), widths


def _new_file(directory: str, dtype: str) -> str:
    """A path for a new buffer file in ``directory`` that no existing file has (created exclusively: a buffer
    another state still maps is never truncated)."""
    for count in range(1_000_000):
        path = os.path.join(directory, f"rows.{dtype}.npy" if count == 0 else f"rows.{dtype}.{count}.npy")
        try:
            with open(path, "xb"):
                return path
        except FileExistsError:
            continue
    raise ValueError(f"no free buffer file name in {directory!r}")


def buffer_files(state: ClientState) -> list:
    """The memory-mapped files of a host state's buffers (none for buffers in RAM)."""
    layout = RowLayout.of(state)
    return [b.filename for b in layout.buffers.values() if isinstance(b, np.memmap) and b.filename]


def _root(x: np.ndarray) -> np.ndarray:
    while isinstance(x.base, np.ndarray):
        x = x.base
    return x


class RowLayout:
    """The packed host buffers of a state's rows and how to move a cohort of them (module docstring).

    ``RowLayout.of(state)`` finds the buffers a :func:`to_host` state's leaves are views of (or packs the leaves
    into new ones); :meth:`gather` returns a cohort's packed rows on the device, :meth:`unpack` (traceable) their
    leaves, :meth:`pack` (traceable) a block's new leaves, :meth:`write` them into the buffers, :meth:`state` the
    host state over the buffers with a given server part."""

    def __init__(self, buffers: dict, slots: tuple, treedef, num_clients: int):
        self.buffers, self.slots, self.treedef, self.num_clients = buffers, slots, treedef, num_clients

    @classmethod
    def of(cls, state: ClientState, directory: Optional[str] = None, consume: bool = False) -> "RowLayout":
        leaves, treedef = row_leaves(state)
        if not leaves:
            raise ValueError("the state has no per-client rows to hold in host memory")
        n = int(np.shape(leaves[0])[0])
        slots, widths = _slots(leaves)
        found = cls._found(leaves, slots, widths, n)
        if found is not None:
            return cls(found, slots, treedef, n)
        buffers = {}
        for dtype, width in widths.items():
            if directory is None:
                buffers[dtype] = np.empty((n, width), dtype)
            else:
                buffers[dtype] = np.lib.format.open_memmap(
                    _new_file(directory, dtype), mode="w+", dtype=dtype, shape=(n, width)
                )
        layout = cls(buffers, slots, treedef, n)
        last = {id(x): i for i, x in enumerate(leaves)}  # a leaf may appear twice (IFCA's labels)
        shared = {id(x) for x in jax.tree.leaves(server_part(state))}  # and be the server's too (CFL's models)
        for i, (x, view) in enumerate(zip(leaves, layout.views())):
            view[...] = np.asarray(jax.device_get(x)).reshape(view.shape)
            if consume and isinstance(x, jax.Array) and last[id(x)] == i and id(x) not in shared:
                x.delete()  # one leaf at a time: the copy never doubles the whole state
        return layout

    @staticmethod
    def _found(leaves, slots, widths, n) -> Optional[dict]:
        """The buffers ``leaves`` are views of, when they are a packed layout's (else None)."""
        buffers: dict = {}
        for x, slot in zip(leaves, slots):
            if not isinstance(x, np.ndarray):
                return None
            root = _root(x)
            width = widths[slot.dtype]
            if root.shape != (n, width) or root.dtype != x.dtype or not root.flags.c_contiguous:
                return None
            if buffers.setdefault(slot.dtype, root) is not root:
                return None
            start = x.__array_interface__["data"][0] - root.__array_interface__["data"][0]
            inner = np.empty((1,) + slot.shape, x.dtype).strides[1:]  # a C-contiguous row's strides
            if start != slot.offset * root.itemsize or x.strides != (root.strides[0],) + inner:
                return None
        return buffers

    def views(self) -> list:
        """Every row leaf as an [N, ...] view of its buffer."""
        return [
            self.buffers[s.dtype][:, s.offset : s.offset + math.prod(s.shape)].reshape((self.num_clients,) + s.shape)
            for s in self.slots
        ]

    def state(self, server: ClientState) -> ClientState:
        """The host state: views of the buffers as its rows, ``server``'s part as it is."""
        return with_row_leaves(server, self.views(), self.treedef)

    def gather(self, index: np.ndarray, device=None) -> dict:
        """Rows ``index`` of every buffer, [S, D] per dtype, on ``device`` (committed, as a round's outputs are:
        one compilation serves both)."""
        return take_to_device(self.buffers, index, device)

    def unpack(self, packed: dict) -> list:
        """The block's row leaves [S, ...] from its packed rows (traceable)."""
        return [
            jax.lax.slice_in_dim(packed[s.dtype], s.offset, s.offset + math.prod(s.shape), axis=1).reshape(
                (-1,) + s.shape
            )
            for s in self.slots
        ]

    def pack(self, leaves: list) -> dict:
        """A block's row leaves packed [S, D] per dtype (traceable), the inverse of :meth:`unpack`."""
        parts: dict = {}
        for x, s in zip(leaves, self.slots):
            parts.setdefault(s.dtype, []).append(jnp.reshape(x.astype(s.dtype), (x.shape[0], -1)))
        return {dtype: jnp.concatenate(p, axis=1) if len(p) > 1 else p[0] for dtype, p in parts.items()}

    def write(self, index: np.ndarray, packed: dict) -> None:
        """Write a block's packed rows into rows ``index`` of the buffers."""
        for dtype, rows in packed.items():
            self.buffers[dtype][index] = np.asarray(rows)


def to_host(state: ClientState, directory: Optional[str] = None, *, consume: bool = False) -> ClientState:
    """``state`` with its clients' rows in host memory (module docstring): packed NumPy buffers, or with
    ``directory`` one memory-mapped ``.npy`` file per dtype in it (the folder must exist); the state's row
    leaves are views of them. The server's part is unchanged. With ``consume`` each device leaf is deleted once
    copied (the caller must hold no other reference to ``state``): the peak is the state plus one leaf."""
    if directory is not None and not os.path.isdir(directory):
        raise ValueError(f"host-rows folder {directory!r} does not exist")
    return RowLayout.of(state, directory, consume=consume).state(state)


def host_bytes(state: ClientState) -> int:
    """Bytes of the clients' rows of ``state`` (a model table counts its assignment only; shapes suffice)."""
    return tree_bytes(row_leaves(state)[0])


def server_part(state: ClientState) -> ClientState:
    """``state`` without its clients' rows (None in their place; a model table keeps its models): what a cohort
    program takes besides the packed rows."""
    parts: dict[str, Any] = {}
    for name in ROW_FIELDS:
        held = getattr(state, name)
        parts[name] = ModelTable(held.models, None) if is_table(held) else None  # type: ignore[arg-type]
    return state._replace(**parts)


def builds_rows(x) -> bool:
    """Whether ``x`` is a host leaf that builds the rows asked for (``take(index, axis=0)``, e.g. a pooled
    population's images, :class:`fedjax_clust.data.pooled.PooledImages`) instead of holding them; one that also
    has ``rows_on_device(index, device)`` builds them on the device (:func:`take_to_device`)."""
    return not isinstance(x, (np.ndarray, jax.Array)) and callable(getattr(x, "take", None)) and hasattr(x, "shape")


def device_source_bytes(tree) -> int:
    """Bytes that the leaves of ``tree`` building their rows on a device keep there besides the rows (their
    ``device_source``, e.g. a pooled population's pool: :class:`fedjax_clust.data.pooled.PooledImages`), a
    source shared by several leaves (a population's training and test images) counted once."""
    sources = {}
    for x in jax.tree.leaves(tree):
        source = getattr(x, "device_source", None) if builds_rows(x) and hasattr(x, "rows_on_device") else None
        if source is not None:
            sources[id(source)] = int(source.nbytes)
    return sum(sources.values())


def on_host(x):
    """``x`` as a host leaf: a NumPy array, or a leaf that builds its rows, as it is."""
    return x if builds_rows(x) else np.asarray(x)


def take_to_device(tree: PyTree, index: np.ndarray, device=None) -> PyTree:
    """Rows ``index`` of every leaf of ``tree`` (leading axis N: a host array, a leaf that :func:`builds_rows`
    builds them, or a device array, gathered where it is), as device arrays on ``device`` (default JAX's first,
    committed as a round's outputs are)."""
    device = device or jax.devices()[0]

    def rows(x):
        if isinstance(x, jax.Array):  # already on a device: gathered there
            return jax.device_put(jnp.take(x, jnp.asarray(index), axis=0), device)
        if builds_rows(x) and callable(getattr(x, "rows_on_device", None)):  # built there (a pooled population)
            return x.rows_on_device(index, device)
        return jax.device_put(np.take(on_host(x), index, axis=0), device)

    return jax.tree.map(rows, tree)


def gather_block(state: ClientState, index: np.ndarray, device=None) -> ClientState:
    """Rows ``index`` of a state's clients' part (host rows, or device rows gathered on the device) as device
    arrays, leaf by leaf, with the server's part as it is (evaluation's chunks; a round moves packed rows through
    :class:`RowLayout`)."""
    leaves, treedef = row_leaves(state)
    return with_row_leaves(state, take_to_device(leaves, index, device), treedef)
