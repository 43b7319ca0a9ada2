"""Figures written to files without touching the process's plotting state.

Selecting a matplotlib backend (or any pyplot call) inside a library switches the backend of the whole
process: a notebook that called such a function lost every plot after it. A :class:`matplotlib.figure.Figure` made
directly has its own canvas, is saved with ``fig.savefig(path)`` (matplotlib picks the Agg renderer for PNG
itself) and is freed with the last reference: no pyplot, no backend, nothing to close.
"""

from __future__ import annotations

__all__ = ["figure_for_file"]


def figure_for_file(nrows: int = 1, ncols: int = 1, *, figsize=(6.4, 4.8), squeeze: bool = True):
    """(figure, axes) like ``pyplot.subplots(nrows, ncols, figsize=..., squeeze=...)``, for saving to a file."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, squeeze=squeeze)
