"""The ``fedjax-clust`` command line (a tool: the library never imports it)."""

__all__ = ["main"]


def main(argv=None) -> int:
    """Run the command line (:func:`fedjax_clust.cli.main.main`); imported when called, so that
    ``python -m fedjax_clust.cli.options`` runs without the parser loaded first."""
    from fedjax_clust.cli.main import main as run
    return run(argv)
