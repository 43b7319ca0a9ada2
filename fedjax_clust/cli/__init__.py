"""The ``fedjax-clust`` command line (a tool: the library never imports it)."""

from fedjax_clust.cli.main import main

__all__ = ["main"]
